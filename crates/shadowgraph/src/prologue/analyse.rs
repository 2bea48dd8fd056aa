//! A function's window, and every place the object's code can jump to
//! other than by a call: what must not land inside a window.

use super::window::{Kept, Refusal, Window, PATCH_LEN};
use crate::elf::{Contents, FunctionSymbols};
use crate::site::ENDBR64;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register};

/// An object's code as the analysis reads it (link-time addresses).
pub(super) struct Text<'a, 'd> {
    pub contents: &'a Contents<'d>,
    pub symbols: &'a FunctionSymbols,
    /// Every function: (start, size, symbol), sizes filled in.
    pub functions: &'a [(u64, u64, String)],
    /// Executable sections: (start, end).
    pub exec: &'a [(u64, u64)],
}

impl Text<'_, '_> {
    fn executable(&self, lo: u64, hi: u64) -> bool {
        self.exec.iter().any(|&(a, b)| lo >= a && hi <= b)
    }
}

/// Whether `symbol` names a part of a function that gcc moved away from
/// it (`f.cold`, `f.cold.3`): jumped to from its function, never called,
/// so no entry of a call.
pub(super) fn is_part(symbol: &str) -> bool {
    symbol.ends_with(".cold") || symbol.contains(".cold.")
}

/// How code gets to a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum By {
    /// A direct jump or conditional branch.
    Branch,
    /// A direct call.
    Call,
    /// An entry of a jump table read by an indirect jump.
    Table,
}

/// A place code is sent to: (target, the instruction sending it there, how).
pub(super) type Target = (u64, u64, By);

/// Entries read of one jump table at most.
const TABLE_MAX: usize = 4096;

/// Every target of a direct branch or call in the object's sized
/// functions, and of the jump tables their indirect jumps read, sorted by
/// target.
pub(super) fn branch_targets(text: &Text<'_, '_>) -> Vec<Target> {
    let mut out = Vec::new();
    for &(start, size, _) in text.functions {
        let Some(bytes) = text.contents.read(start, size).filter(|_| size > 0) else {
            continue;
        };
        let mut indirect = None;
        // Addresses outside the code that the function computes: where a
        // jump table may be (relative entries, PIC), or reads words at
        // with a scaled index (absolute entries).
        let mut relative = Vec::new();
        let mut absolute = Vec::new();
        let mut dec = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
        let mut ins = Instruction::default();
        while dec.can_decode() {
            dec.decode_out(&mut ins);
            if ins.is_invalid() {
                continue;
            }
            match ins.flow_control() {
                FlowControl::ConditionalBranch
                | FlowControl::UnconditionalBranch
                | FlowControl::XbeginXabortXend
                    if ins.op_kind(0) == OpKind::NearBranch64 =>
                {
                    out.push((ins.near_branch_target(), ins.ip(), By::Branch));
                }
                FlowControl::Call if ins.op_kind(0) == OpKind::NearBranch64 => {
                    out.push((ins.near_branch_target(), ins.ip(), By::Call));
                }
                FlowControl::IndirectBranch if !ins.is_ip_rel_memory_operand() => {
                    indirect = Some(ins.ip());
                }
                _ => {}
            }
            if ins.mnemonic() == Mnemonic::Lea && ins.is_ip_rel_memory_operand() {
                let a = ins.ip_rel_memory_address();
                if !text.executable(a, a + 1) {
                    relative.push(a);
                }
            } else if (0..ins.op_count()).any(|i| ins.op_kind(i) == OpKind::Memory)
                && ins.memory_base() == Register::None
                && ins.memory_index() != Register::None
                && ins.memory_index_scale() == 8
            {
                absolute.push(ins.memory_displacement64());
            }
        }
        let Some(jump) = indirect else { continue };
        let inside = |t: u64| t >= start && t < start + size;
        for base in relative {
            for i in 0..TABLE_MAX as u64 {
                let Some(w) = text.contents.read(base + 4 * i, 4).filter(|w| w.len() == 4) else {
                    break;
                };
                let e = i32::from_le_bytes(w.try_into().unwrap()) as i64;
                let t = base.wrapping_add_signed(e);
                if !inside(t) {
                    break;
                }
                out.push((t, jump, By::Table));
            }
        }
        for base in absolute {
            for i in 0..TABLE_MAX as u64 {
                let Some(w) = text.contents.read(base + 8 * i, 8).filter(|w| w.len() == 8) else {
                    break;
                };
                let t = u64::from_le_bytes(w.try_into().unwrap());
                if !inside(t) {
                    break;
                }
                out.push((t, jump, By::Table));
            }
        }
    }
    out.sort_unstable();
    out
}

/// The window of the function at `start` of `size` bytes, or why it has
/// none; `targets` from [`branch_targets`]; `risk`: the registers the
/// tracer's paths change that the function leaves alone (super::clobbers),
/// which a direct caller may keep values in; `reads_stack`: whether it
/// reads its caller's stack (super::frame).
pub(super) fn window(
    text: &Text<'_, '_>,
    targets: &[Target],
    start: u64,
    size: u64,
    risk: Kept,
    reads_stack: impl FnOnce() -> bool,
) -> Result<Window, Refusal> {
    if size == 0 {
        return Err(Refusal::NoSize);
    }
    let endbr = text.contents.read(start, 4) == Some(&ENDBR64[..]);
    let at = start + if endbr { 4 } else { 0 };
    if !text.executable(start, at + 1) {
        return Err(Refusal::NotExecutable);
    }
    let bytes = text.contents.read(at, 32).ok_or(Refusal::NotExecutable)?;
    let mut dec = Decoder::with_ip(64, bytes, at, DecoderOptions::NONE);
    let mut len = 0;
    let mut ends = false;
    while len < PATCH_LEN {
        let ins = dec.decode();
        if ins.is_invalid() {
            return Err(Refusal::Undecodable(at + len as u64));
        }
        let next = len + ins.len();
        match ins.flow_control() {
            FlowControl::Call | FlowControl::IndirectCall => {
                if next < PATCH_LEN {
                    return Err(Refusal::CallInWindow);
                }
                (len, ends) = (next, true);
            }
            FlowControl::XbeginXabortXend | FlowControl::Interrupt => {
                return Err(Refusal::Unrelocatable(format!(
                    "{:?} in the window",
                    ins.mnemonic()
                )));
            }
            FlowControl::Return
            | FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::Exception => (len, ends) = (next, true),
            FlowControl::Next | FlowControl::ConditionalBranch => len = next,
        }
        if ends {
            break;
        }
    }
    let covered = at + len.max(PATCH_LEN) as u64;
    if text.symbols.starting_within(start + 1, covered).is_some() {
        return Err(if len < PATCH_LEN {
            Refusal::TooShort
        } else {
            Refusal::RunsIntoNext
        });
    }
    if at + len as u64 > start + size {
        return Err(Refusal::RunsIntoNext);
    }
    if len < PATCH_LEN && !filler(text, at + len as u64, covered) {
        return Err(Refusal::TooShort);
    }
    // Nothing may land on bytes 1–4 of the patch, nor jump back to the
    // entry (the first reason found is the one given, in that order).
    // Called directly, its stub keeps the registers at risk, and calls
    // it: it must not read its caller's stack.
    let from = targets.partition_point(|t| t.0 < start);
    let reaching = || {
        targets[from..]
            .iter()
            .take_while(|t| t.0 < at + PATCH_LEN as u64)
    };
    let own = |i: u64| i >= start && i < start + size;
    if let Some(&(_, i, by)) = reaching().find(|t| t.0 > at) {
        return Err(match by {
            By::Table => Refusal::TableIntoWindow(i),
            _ => Refusal::BranchIntoWindow(i),
        });
    }
    if let Some(&(_, i, _)) = reaching().find(|t| own(t.1) && t.2 != By::Call) {
        return Err(Refusal::LoopToEntry(i));
    }
    let mut kept = Kept::default();
    if let Some(&(_, i, _)) = reaching().find(|t| t.2 == By::Call || !own(t.1)) {
        if !risk.is_empty() {
            if reads_stack() {
                return Err(Refusal::CalledDirectly(i));
            }
            kept = risk;
        }
    }
    Ok(Window {
        entry: start,
        at,
        len,
        ends,
        kept,
    })
}

/// Whether `lo..hi` holds only filler (`int3`, nops) in executable code.
fn filler(text: &Text<'_, '_>, lo: u64, hi: u64) -> bool {
    if !text.executable(lo, hi) {
        return false;
    }
    let Some(bytes) = text.contents.read(lo, 16) else {
        return false;
    };
    let mut dec = Decoder::with_ip(64, bytes, lo, DecoderOptions::NONE);
    while dec.ip() < hi {
        let ins = dec.decode();
        if ins.is_invalid() || !matches!(ins.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) {
            return false;
        }
    }
    true
}
