//! The entry an ops' own trampoline (args variant) and its chained caller
//! call, in assembly: for a thread at rest — outside every bracket, no
//! recursion bit held, errno's location cached — and an ops without a
//! thread filter, it does what `dispatch::ops_entry_args` does (bracket,
//! errno, recursion bit, callback) without the Rust entry's checks for
//! the states it has just ruled out. Anything else jumps to
//! `ops_entry_args` untouched, with its arguments as they came.
//!
//! ```text
//! Register contract (FtraceEntry, from the trampoline's `call r11`):
//!   rdi    the trampoline frame's Regs     rsi  the ops' data slot (OpsSlot)
//!   rsp ≡ 8 (mod 16); returns rax = rdx = 0 (EntryAction: return to the site)
//!
//! Words and registers on the fast path:
//!   rcx    the core-local block's offset from the thread pointer (TP_LOCAL)
//!   rdx    the thread's bracket word (fs:[rcx + l_word])
//!   r8     the ops (slot.ops)
//!   [rdi + REGS_SPARE]   errno as the call found it (the Regs' spare
//!                        word, which the args variant leaves unused)
//!
//!   rsp + 0    rdi (the Regs), kept across the callback
//!   rsp + 8    return address into the trampoline
//! ```

use super::local::{CoreLocal, TP_LOCAL};
use super::ops::{Ops, OpsFlags, OpsSlot, Regs};
use super::recursion::Group;
use crate::tramp::{EntryAction, FtraceEntry};
use std::mem::offset_of;

/// `(ops.func)` for the assembly: a Rust function pointer has no stable
/// calling convention to call it by from there.
extern "C" fn call_ops_func(ops: &Ops, regs: &mut Regs) {
    (ops.func)(regs.ip, regs.parent_ip, ops, regs)
}

crate::tramp::regs_asm!(
    ".pushsection .text.shadowgraph_ops_entry,\"ax\",@progbits",
    ".globl shadowgraph_ops_entry_args",
    ".hidden shadowgraph_ops_entry_args",
    "shadowgraph_ops_entry_args:",
    "endbr64",
    // At rest (a bracket word at depth 0, no recursion bit) with errno's
    // location known, else the Rust entry.
    "mov rcx, [rip + {tp_local}]",
    "mov rdx, qword ptr fs:[rcx + {l_word}]",
    "test rdx, rdx",
    "jz 9f",
    "test word ptr [rdx], 0xffff",
    "jnz 9f",
    "cmp dword ptr fs:[rcx + {l_rec}], 0",
    "jne 9f",
    "cmp qword ptr fs:[rcx + {l_errno}], 0",
    "je 9f",
    // The bracket, anchored at the traced call's return slot (as
    // Bracket::enter_at for a thread at rest), before the slot is read: a
    // grace period that finds the thread at rest may end, and the ops it
    // waited for go, at any time before. Program order suffices on this
    // side: the waiter's membarrier orders the word's store before these
    // loads (quiesce.rs), and x86 keeps the ops' words after the slot's.
    "mov rax, [rdi + REGS_PARENT_SLOT]",
    crate::bracket_enter_at_rest!("rcx", "rdx"),
    "mov r8, [rsi + {slot_ops}]",
    "test r8, r8",
    "jz 8f",
    // A thread filter: the Rust entry (the bracket left first).
    "cmp qword ptr [r8 + {o_threads}], 0",
    "jne 7f",
    // The core's recursion bit (normal context) if the ops asked for it:
    // the thread held none.
    "test dword ptr [r8 + {o_flags}], {recursion}",
    "jz 2f",
    "mov dword ptr fs:[rcx + {l_rec}], {core_bit}",
    "2:",
    // errno kept in the Regs' spare word; rdi pushed (which aligns the
    // stack for the call) to find it again.
    "mov rax, qword ptr fs:[rcx + {l_errno}]",
    "mov eax, dword ptr [rax]",
    "mov dword ptr [rdi + REGS_SPARE], eax",
    "push rdi",
    "mov rsi, rdi",
    "mov rdi, r8",
    "call {call_ops_func}",
    "pop rdi",
    // The bit given back, errno written back only if the callback changed
    // it (a store every call would chain each call's errno load to the
    // store of the one before), the bracket left (depth 1 → 0 and the exit
    // generation + 1, in one add).
    "mov rcx, [rip + {tp_local}]",
    "and dword ptr fs:[rcx + {l_rec}], {core_unbit}",
    "mov rax, qword ptr fs:[rcx + {l_errno}]",
    "mov edx, dword ptr [rdi + REGS_SPARE]",
    "cmp dword ptr [rax], edx",
    "je 3f",
    "mov dword ptr [rax], edx",
    "3:",
    "mov rcx, qword ptr fs:[rcx + {l_word}]",
    "add qword ptr [rcx], 0xffff",
    "xor eax, eax",
    "xor edx, edx",
    "ret",
    // The slot empty (the ops leaving): nothing to call.
    "8:",
    "add qword ptr [rdx], 0xffff",
    "xor eax, eax",
    "xor edx, edx",
    "ret",
    "7:",
    "add qword ptr [rdx], 0xffff",
    "9:",
    "jmp {slow}",
    ".popsection";
    tp_local = sym TP_LOCAL,
    l_word = const offset_of!(CoreLocal, word),
    l_rec = const offset_of!(CoreLocal, rec),
    l_errno = const offset_of!(CoreLocal, errno),
    l_anchor = const offset_of!(CoreLocal, outer_anchor),
    slot_ops = const offset_of!(OpsSlot, ops),
    o_threads = const offset_of!(Ops, threads),
    o_flags = const offset_of!(Ops, flags),
    recursion = const OpsFlags::RECURSION.bits(),
    core_bit = const 1u32 << (Group::Core as u32),
    core_unbit = const !(1i32 << (Group::Core as u32)),
    call_ops_func = sym call_ops_func,
    slow = sym super::dispatch::ops_entry_args,
);

extern "C" {
    fn shadowgraph_ops_entry_args(regs: *mut u8, data: usize) -> EntryAction;
}

/// The entry of an ops' own args-variant trampoline and of its chained
/// caller; the offset it reads is set first (the trampoline made with it
/// becomes reachable only once patched in, after this).
pub(crate) fn ops_entry_args() -> FtraceEntry {
    super::local::init_tp_local();
    // SAFETY: the assembly above has FtraceEntry's signature and contract
    // (the trampoline's frame and data slot in, an EntryAction out, the
    // callee-saved registers kept); it reads and writes only what the Rust
    // entry it stands for does (the thread's core-local block, errno, the
    // frame's spare word), which the trampoline's frame keeps valid.
    unsafe {
        std::mem::transmute::<unsafe extern "C" fn(*mut u8, usize) -> EntryAction, FtraceEntry>(
            shadowgraph_ops_entry_args,
        )
    }
}
