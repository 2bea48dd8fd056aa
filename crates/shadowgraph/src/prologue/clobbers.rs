//! Which of the registers the tracer's paths change a function is known
//! to change itself, as gcc's interprocedural register allocation
//! (`-fipa-ra`) sees it: a caller that calls a function directly may keep
//! a value across the call in any call-clobbered register the function
//! (with everything it calls) leaves alone. Where the function changes
//! all of them anyway, its callers keep nothing there, and a traced call
//! that changes them too is harmless.
//!
//! What is computed is a lower bound of gcc's set: the registers written
//! by the function's own instructions, by the functions of the object it
//! calls or jumps to directly, and all of them when it calls through a
//! pointer, a GOT entry or a PLT (gcc knows nothing of such a callee and
//! takes it to change every one). A direct call to code with no symbol
//! adds nothing: that callee's set is not known here.

use super::analyse::Text;
use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, OpAccess, OpKind,
    Register,
};

/// A set of registers: rcx rsi rdi r8 r9 r10 r11 (bits 0–6), xmm2–xmm15
/// (bits 7–20).
pub(super) type Regs = u32;

/// What the tracer's entry and return paths may change, of what the ABI
/// lets a call change: every call-clobbered register but the results'
/// (rax, rdx, xmm0, xmm1), which they keep.
pub(super) const TRACER_CHANGES: Regs = (1 << 21) - 1;

/// The bit of `reg` (any part of it), if it is one of [`TRACER_CHANGES`].
fn bit(reg: Register) -> Regs {
    match reg.full_register() {
        Register::RCX => 1,
        Register::RSI => 1 << 1,
        Register::RDI => 1 << 2,
        Register::R8 => 1 << 3,
        Register::R9 => 1 << 4,
        Register::R10 => 1 << 5,
        Register::R11 => 1 << 6,
        r if r.is_zmm() && (2..16).contains(&r.number()) => 1 << (7 + r.number() - 2),
        _ => 0,
    }
}

/// For each function of `text` (index for index with `text.functions`),
/// the lower bound of the registers of [`TRACER_CHANGES`] it changes.
/// `plt`: the object's PLT sections (start, end).
pub(super) fn changed(text: &Text<'_, '_>, plt: &[(u64, u64)]) -> Vec<Regs> {
    let funcs = text.functions;
    let index_at = |a: u64| {
        funcs
            .binary_search_by_key(&a, |f| f.0)
            .ok()
            .filter(|&i| funcs[i].1 > 0)
    };
    let mut sets: Vec<Regs> = vec![0; funcs.len()];
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); funcs.len()];
    let mut info = InstructionInfoFactory::new();
    let mut ins = Instruction::default();
    for (i, &(start, size, _)) in funcs.iter().enumerate() {
        let Some(bytes) = text.contents.read(start, size).filter(|_| size > 0) else {
            continue;
        };
        let mut dec = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
        while dec.can_decode() && sets[i] != TRACER_CHANGES {
            dec.decode_out(&mut ins);
            if ins.is_invalid() {
                continue;
            }
            for r in info.info(&ins).used_registers() {
                if matches!(
                    r.access(),
                    OpAccess::Write
                        | OpAccess::CondWrite
                        | OpAccess::ReadWrite
                        | OpAccess::ReadCondWrite
                ) {
                    sets[i] |= bit(r.register());
                }
            }
            let direct = ins.op_kind(0) == OpKind::NearBranch64;
            match ins.flow_control() {
                FlowControl::Call | FlowControl::UnconditionalBranch if direct => {
                    let t = ins.near_branch_target();
                    if t >= start && t < start + size {
                        continue;
                    }
                    if plt.iter().any(|&(a, b)| t >= a && t < b) {
                        sets[i] = TRACER_CHANGES;
                    } else if let Some(j) = index_at(t) {
                        edges[i].push(j);
                    }
                }
                FlowControl::IndirectCall => sets[i] = TRACER_CHANGES,
                // A jump through memory at a fixed place: a tail call
                // through the GOT (a jump table is read with an index).
                FlowControl::IndirectBranch if ins.is_ip_rel_memory_operand() => {
                    sets[i] = TRACER_CHANGES
                }
                _ => {}
            }
        }
    }
    // What callees change, their callees' included, until nothing grows.
    let mut grew = true;
    while grew {
        grew = false;
        for i in 0..funcs.len() {
            let mut s = sets[i];
            for &j in &edges[i] {
                s |= sets[j];
            }
            if s != sets[i] {
                sets[i] = s;
                grew = true;
            }
        }
    }
    sets
}
