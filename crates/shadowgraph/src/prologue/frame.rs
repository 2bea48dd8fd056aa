//! Whether a function reads its caller's stack: its arguments passed on
//! the stack, or the words above its return address by any other way.
//!
//! A function whose stub keeps registers for it (`super::window::Kept`)
//! runs one call deeper than its caller put it: the stub saves the
//! registers below the return address and calls it. That is right only
//! for a function that finds nothing above its return address: every
//! path from its entry is followed with the stack's depth below the entry
//! (pushes, pops, `sub`/`add`/`lea` of rsp, a frame pointer set by `mov
//! rbp, rsp` and left by `leave`); an access or an address at rsp or
//! that frame pointer that lands 8 bytes or more above the entry's rsp,
//! or that is indexed from the return address up (one indexed from below
//! it reads an array of the frame: C indexes an array within it; a copy
//! of rsp, `mov rdx, rsp`, is the address of the frame's lowest word: a
//! pointer to locals), a change of rsp that cannot be followed (`and rsp,
//! -32`), a jump that cannot be followed, or a tail jump to a function
//! that reads its caller's stack, says it does.

use super::analyse::{is_part, By, Target, Text};
use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic,
    OpAccess, OpKind, Register,
};
use std::collections::HashMap;

/// Instructions followed in one function before giving up (it is then
/// taken to read its caller's stack).
const STEPS: usize = 50_000;

/// Tail jumps followed, one function to the next.
const DEPTH: u32 = 4;

/// Where the stack is, relative to the entry's rsp: `rsp` bytes below
/// it; the frame pointer, when rbp holds one, `rbp` bytes below it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Depth {
    rsp: i64,
    rbp: Option<i64>,
}

/// Whether the function `f` (index into `text.functions`) reads its
/// caller's stack. `targets` from `analyse::branch_targets` (its jump
/// tables).
pub(super) fn reads_caller_stack(text: &Text<'_, '_>, targets: &[Target], f: usize) -> bool {
    reads(text, targets, f, 0)
}

fn reads(text: &Text<'_, '_>, targets: &[Target], f: usize, depth: u32) -> bool {
    let (start, size, _) = text.functions[f];
    let inside = |a: u64| {
        (a >= start && a < start + size)
            || function_at(text, a).is_some_and(|p| is_part(&text.functions[p].2))
    };
    let mut info = InstructionInfoFactory::new();
    let mut seen: HashMap<u64, Depth> = HashMap::new();
    let mut work = vec![(start, Depth { rsp: 0, rbp: None })];
    let mut steps = 0;
    while let Some((mut ip, mut d)) = work.pop() {
        loop {
            match seen.get(&ip) {
                Some(s) if *s == d => break,
                // The same place at another depth: not followed.
                Some(_) => return true,
                None => {
                    seen.insert(ip, d);
                }
            }
            steps += 1;
            if steps > STEPS || !inside(ip) {
                return true;
            }
            let Some(bytes) = text.contents.read(ip, 15) else {
                return true;
            };
            let ins = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
            if ins.is_invalid() || above(&ins, d) {
                return true;
            }
            let Some(next_d) = step(&mut info, &ins, d) else {
                return true;
            };
            let direct = ins.op_kind(0) == OpKind::NearBranch64;
            let target = if direct { ins.near_branch_target() } else { 0 };
            let next = ins.next_ip();
            match ins.flow_control() {
                FlowControl::Next => (ip, d) = (next, next_d),
                FlowControl::Call | FlowControl::IndirectCall
                    if ins.mnemonic() == Mnemonic::Call =>
                {
                    if !inside(next) {
                        // A call that does not return.
                        break;
                    }
                    (ip, d) = (next, next_d);
                }
                FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch if direct => {
                    let cond = ins.flow_control() == FlowControl::ConditionalBranch;
                    if inside(target) {
                        work.push((target, next_d));
                    } else {
                        // A tail jump: the callee finds the caller's stack
                        // where this function found it.
                        let callee = function_at(text, target)
                            .filter(|&g| text.functions[g].0 == target && g != f);
                        match callee {
                            Some(g)
                                if next_d.rsp == 0
                                    && depth < DEPTH
                                    && !reads(text, targets, g, depth + 1) => {}
                            _ => return true,
                        }
                    }
                    if !cond {
                        break;
                    }
                    (ip, d) = (next, next_d);
                }
                FlowControl::IndirectBranch => {
                    let from = ins.ip();
                    let mut any = false;
                    for t in targets.iter().filter(|t| t.1 == from && t.2 == By::Table) {
                        work.push((t.0, next_d));
                        any = true;
                    }
                    if !any {
                        return true;
                    }
                    break;
                }
                FlowControl::Return => break,
                FlowControl::Interrupt | FlowControl::Exception
                    if ins.mnemonic() != Mnemonic::Syscall =>
                {
                    break
                }
                _ => return true,
            }
        }
    }
    false
}

/// The index of the function holding `a`.
fn function_at(text: &Text<'_, '_>, a: u64) -> Option<usize> {
    let funcs = text.functions;
    let i = funcs.partition_point(|f| f.0 <= a).checked_sub(1)?;
    (a < funcs[i].0 + funcs[i].1).then_some(i)
}

/// Whether `ins` reaches 8 bytes or more above the entry's rsp through
/// rsp or the frame pointer (a memory operand, or an address taken).
fn above(ins: &Instruction, d: Depth) -> bool {
    if !(0..ins.op_count()).any(|i| ins.op_kind(i) == OpKind::Memory) {
        return false;
    }
    if ins.memory_index() == Register::RSP {
        return true;
    }
    let disp = ins.memory_displacement64() as i64;
    // An index from below the entry's rsp reads an array of the frame's
    // (C indexes an array within it); from the return address up, the
    // caller's words.
    let reach = |from: i64| from >= 8 || (from >= 0 && ins.memory_index() != Register::None);
    match ins.memory_base() {
        Register::RSP => reach(disp - d.rsp),
        Register::RBP => match d.rbp {
            Some(k) => reach(disp - k),
            None => false,
        },
        _ => false,
    }
}

/// The depth after `ins`, or `None` where it cannot be followed.
fn step(info: &mut InstructionInfoFactory, ins: &Instruction, d: Depth) -> Option<Depth> {
    let mut n = d;
    let imm = || -> Option<i64> {
        match ins.op_kind(1) {
            OpKind::Immediate8to64
            | OpKind::Immediate32to64
            | OpKind::Immediate8
            | OpKind::Immediate32 => Some(ins.immediate(1) as i64),
            _ => None,
        }
    };
    let reg0 =
        (ins.op_count() > 0 && ins.op_kind(0) == OpKind::Register).then(|| ins.op_register(0));
    let reg1 =
        (ins.op_count() > 1 && ins.op_kind(1) == OpKind::Register).then(|| ins.op_register(1));
    match ins.mnemonic() {
        Mnemonic::Push => {
            n.rsp += if ins.code() == Code::Pushw_imm8 { 2 } else { 8 };
            return Some(n);
        }
        Mnemonic::Pop => {
            n.rsp -= 8;
            if reg0 == Some(Register::RBP) {
                n.rbp = None;
            }
            return Some(n);
        }
        Mnemonic::Call | Mnemonic::Ret => return Some(n),
        Mnemonic::Leave => {
            let k = d.rbp?;
            return Some(Depth {
                rsp: k - 8,
                rbp: None,
            });
        }
        Mnemonic::Sub if reg0 == Some(Register::RSP) => {
            n.rsp += imm()?;
            return Some(n);
        }
        Mnemonic::Add if reg0 == Some(Register::RSP) => {
            n.rsp -= imm()?;
            return Some(n);
        }
        Mnemonic::Lea if reg0 == Some(Register::RSP) && ins.memory_index() == Register::None => {
            let disp = ins.memory_displacement64() as i64;
            n.rsp = match ins.memory_base() {
                Register::RSP => d.rsp - disp,
                Register::RBP => d.rbp? - disp,
                _ => return None,
            };
            return Some(n);
        }
        Mnemonic::Mov if reg0 == Some(Register::RBP) && reg1 == Some(Register::RSP) => {
            n.rbp = Some(d.rsp);
            return Some(n);
        }
        Mnemonic::Mov if reg0 == Some(Register::RSP) && reg1 == Some(Register::RBP) => {
            n.rsp = d.rbp?;
            return Some(n);
        }
        _ => {}
    }
    for r in info.info(ins).used_registers() {
        let full = r.register().full_register();
        let writes = !matches!(
            r.access(),
            OpAccess::Read | OpAccess::CondRead | OpAccess::NoMemAccess
        );
        match full {
            // Any other change of rsp cannot be followed.
            Register::RSP if writes => return None,
            Register::RBP if writes => n.rbp = None,
            _ => {}
        }
    }
    Some(n)
}
