//! An ops' own trampoline (args variant) and its chained caller with the
//! entry fused in: for a thread at rest — outside every bracket, no
//! recursion bit held, errno's location cached — and an ops without a
//! thread filter, the trampoline itself does what `dispatch::ops_entry_args`
//! does (bracket, errno, recursion bit) and calls the ops' callback: one
//! call from the trampoline, as the kernel's per-ops trampolines make.
//! Anything else calls the Rust entry, `ops_entry_args`, with the frame.
//! A set's caller (below, `set_caller`) is the same for a list of ops.
//!
//! ```text
//! Entered by the site's call: the caller frame of tramp.rs (a Regs at
//! rsp, rbp the site call's frame), the argument registers saved in it.
//!
//! Words and registers on the fast path:
//!   rdi    the site (Regs.ip)                    the callback's ip
//!   rsi    R, the traced call's return address   its parent_ip
//!   rax    &R (Regs.parent_slot): the bracket's anchor
//!   r9     the ops' data slot (OpsSlot)          patched imm64 (DATA)
//!   rcx    the core-local block's offset from    patched imm64 (TP, twice)
//!          the thread pointer (TP_LOCAL)
//!   rdx    the thread's bracket word (fs:[rcx + l_word])
//!   r8     the ops (slot.ops)
//!   [rsp + REGS_SPARE]   errno as the call found it (the Regs' spare
//!                        word, which the args variant leaves unused)
//!   callback: rdi = ip, rsi = parent_ip, rdx = ops, rcx = the Regs (rsp)
//!
//! Slow way: rdi = the Regs, rsi = DATA, call ENTRY (patched imm64:
//! dispatch::ops_entry_args). The Regs' rip and direct are left unwritten:
//! no args-variant path reads them.
//! Chained caller only: TARGET, a quad after the code, the direct call's
//! target, jumped to once the frame is gone.
//! ```

use super::local::{CoreLocal, TP_LOCAL};
use super::ops::{Ops, OpsFlags, OpsList, OpsSlot};
use super::recursion::Group;
use crate::arena::{Arena, ArenaError};
use crate::tramp;
use std::mem::offset_of;
use std::sync::atomic::Ordering;

// The frame's words the args variant keeps (rbp, the site, R, &R; rip
// and direct are the regs variant's): the site left in rdi and R in rsi
// for the callback, &R in rax for the bracket.
macro_rules! frame_words {
    () => {
        concat!(
            "mov r11, [rbp]\n",
            "mov [rsp + REGS_RBP], r11\n",
            "mov rdi, [rbp + RBP_SITE_RET]\n",
            "sub rdi, SITE_CALL_LEN\n",
            "mov [rsp + REGS_IP], rdi\n",
            "mov rsi, [rbp + RBP_PARENT_SLOT]\n",
            "mov [rsp + REGS_PARENT_IP], rsi\n",
            "lea rax, [rbp + RBP_PARENT_SLOT]\n",
            "mov [rsp + REGS_PARENT_SLOT], rax\n",
        )
    };
}

// The thread at rest (a bracket word at depth 0, no recursion bit) with
// errno's location known, `$tp` holding TP_LOCAL; else to 9f. The bracket
// word's address left in rdx.
macro_rules! at_rest_or_slow {
    ($tp:literal) => {
        concat!(
            "mov rdx, qword ptr fs:[",
            $tp,
            " + {l_word}]\n",
            "test rdx, rdx\n",
            "jz 9f\n",
            "test word ptr [rdx], 0xffff\n",
            "jnz 9f\n",
            "cmp dword ptr fs:[",
            $tp,
            " + {l_rec}], 0\n",
            "jne 9f\n",
            "cmp qword ptr fs:[",
            $tp,
            " + {l_errno}], 0\n",
            "je 9f\n",
        )
    };
}

// errno as the call found it into the Regs' spare word ($tp: TP_LOCAL).
// Clobbers rax.
macro_rules! errno_save {
    ($tp:literal) => {
        concat!(
            "mov rax, qword ptr fs:[",
            $tp,
            " + {l_errno}]\n",
            "mov eax, dword ptr [rax]\n",
            "mov dword ptr [rsp + REGS_SPARE], eax\n",
        )
    };
}

// errno written back only if a callback changed it (a store every call
// would chain each call's errno load to the store of the one before);
// the bracket word's address left in rdx. Label 23; clobbers rax.
macro_rules! errno_back {
    ($tp:literal) => {
        concat!(
            "mov rax, qword ptr fs:[",
            $tp,
            " + {l_errno}]\n",
            "mov edx, dword ptr [rsp + REGS_SPARE]\n",
            "cmp dword ptr [rax], edx\n",
            "je 23f\n",
            "mov dword ptr [rax], edx\n",
            "23:\n",
            "mov rdx, qword ptr fs:[",
            $tp,
            " + {l_word}]\n",
        )
    };
}

/// One fused template named `shadowgraph_$name_*`: `$tail` leaves the
/// frame (the argument registers restored) and goes on; `$data` follows
/// the code (the chained caller's target).
macro_rules! fused_ops_caller {
    ($name:literal, $tail:expr, $data:expr) => {
        crate::tramp::regs_asm!(
            ".pushsection .text.shadowgraph_templates,\"ax\",@progbits",
            concat!(".globl shadowgraph_", $name, "_start"),
            concat!(".hidden shadowgraph_", $name, "_start"),
            concat!(".globl shadowgraph_", $name, "_data"),
            concat!(".hidden shadowgraph_", $name, "_data"),
            concat!(".globl shadowgraph_", $name, "_tp"),
            concat!(".hidden shadowgraph_", $name, "_tp"),
            concat!(".globl shadowgraph_", $name, "_tp_again"),
            concat!(".hidden shadowgraph_", $name, "_tp_again"),
            concat!(".globl shadowgraph_", $name, "_fn"),
            concat!(".hidden shadowgraph_", $name, "_fn"),
            concat!(".globl shadowgraph_", $name, "_end"),
            concat!(".hidden shadowgraph_", $name, "_end"),
            concat!("shadowgraph_", $name, "_start:"),
            crate::tramp::prologue!(),
            crate::tramp::save_arg_registers!(),
            frame_words!(),
            concat!("shadowgraph_", $name, "_data:"),
            "movabs r9, 0x1122334455667788",
            concat!("shadowgraph_", $name, "_tp:"),
            "movabs rcx, 0x1122334455667788",
            at_rest_or_slow!("rcx"),
            // The bracket, anchored at the traced call's return slot (as
            // Bracket::enter_at for a thread at rest), before the slot is
            // read: a grace period that finds the thread at rest may end,
            // and the ops it waited for go, at any time before. Program
            // order suffices on this side: the waiter's membarrier orders
            // the word's store before these loads (quiesce.rs), and x86
            // keeps the ops' words after the slot's.
            crate::bracket_enter_at_rest!("rcx", "rdx"),
            "mov r8, [r9 + {slot_ops}]",
            "test r8, r8",
            "jz 8f",
            // A thread filter: the slow way (the bracket left first).
            "cmp qword ptr [r8 + {o_threads}], 0",
            "jne 7f",
            // The core's recursion bit (normal context) if the ops asked
            // for it: the thread held none.
            "test dword ptr [r8 + {o_flags}], {recursion}",
            "jz 2f",
            "mov dword ptr fs:[rcx + {l_rec}], {core_bit}",
            "2:",
            errno_save!("rcx"),
            "mov rdx, r8",
            "mov rcx, rsp",
            "call qword ptr [r8 + {o_func}]",
            // The bit given back (the word was 0 before it, and the
            // callback gives back what it took: a store, no load), errno
            // back, the bracket left (depth 1 → 0 and the exit generation
            // + 1, in one add).
            concat!("shadowgraph_", $name, "_tp_again:"),
            "movabs rcx, 0x1122334455667788",
            "mov dword ptr fs:[rcx + {l_rec}], 0",
            errno_back!("rcx"),
            // The slot empty (the ops leaving): nothing to call.
            "8:",
            "add qword ptr [rdx], 0xffff",
            "4:",
            crate::tramp::restore_args!(),
            $tail,
            "7:",
            "add qword ptr [rdx], 0xffff",
            "9:",
            "mov rdi, rsp",
            "mov rsi, r9",
            concat!("shadowgraph_", $name, "_fn:"),
            "movabs r11, 0x1122334455667788",
            "call r11",
            "jmp 4b",
            $data,
            concat!("shadowgraph_", $name, "_end:"),
            ".popsection";
            l_word = const offset_of!(CoreLocal, word),
            l_rec = const offset_of!(CoreLocal, rec),
            l_errno = const offset_of!(CoreLocal, errno),
            l_anchor = const offset_of!(CoreLocal, outer_anchor),
            slot_ops = const offset_of!(OpsSlot, ops),
            o_threads = const offset_of!(Ops, threads),
            o_flags = const offset_of!(Ops, flags),
            o_func = const offset_of!(Ops, func),
            recursion = const OpsFlags::RECURSION.bits(),
            core_bit = const 1u32 << (Group::Core as u32),
        );
    };
}

fused_ops_caller!("ops_tramp", "leave\nret\n", "");
// The chained caller (chain.rs): the direct target after the frame, with
// [rsp] = site+5, as the target's pad would have entered it.
fused_ops_caller!(
    "ops_chain",
    "leave\njmp qword ptr [rip + shadowgraph_ops_chain_target]\n",
    ".globl shadowgraph_ops_chain_target\n.hidden shadowgraph_ops_chain_target\n\
     shadowgraph_ops_chain_target:\n.quad 0\n"
);

extern "C" {
    static shadowgraph_ops_tramp_start: u8;
    static shadowgraph_ops_tramp_data: u8;
    static shadowgraph_ops_tramp_tp: u8;
    static shadowgraph_ops_tramp_tp_again: u8;
    static shadowgraph_ops_tramp_fn: u8;
    static shadowgraph_ops_tramp_end: u8;
    static shadowgraph_ops_chain_start: u8;
    static shadowgraph_ops_chain_data: u8;
    static shadowgraph_ops_chain_tp: u8;
    static shadowgraph_ops_chain_tp_again: u8;
    static shadowgraph_ops_chain_fn: u8;
    static shadowgraph_ops_chain_target: u8;
    static shadowgraph_ops_chain_end: u8;
}

/// The addresses of a template's start, its patched words (DATA, TP, TP
/// again, ENTRY; the chained caller's TARGET or 0) and its end.
fn template(chained: bool) -> [usize; 7] {
    macro_rules! at {
        ($($sym:ident),*) => { [$(std::ptr::addr_of!($sym) as usize),*] };
    }
    if chained {
        at!(
            shadowgraph_ops_chain_start,
            shadowgraph_ops_chain_data,
            shadowgraph_ops_chain_tp,
            shadowgraph_ops_chain_tp_again,
            shadowgraph_ops_chain_fn,
            shadowgraph_ops_chain_target,
            shadowgraph_ops_chain_end
        )
    } else {
        let [s, d, t, a, f, e] = at!(
            shadowgraph_ops_tramp_start,
            shadowgraph_ops_tramp_data,
            shadowgraph_ops_tramp_tp,
            shadowgraph_ops_tramp_tp_again,
            shadowgraph_ops_tramp_fn,
            shadowgraph_ops_tramp_end
        );
        [s, d, t, a, f, 0, e]
    }
}

/// Bytes of a fused trampoline (`chained`: of a fused chained caller).
pub(crate) fn ops_caller_len(chained: bool) -> usize {
    let t = template(chained);
    t[6] - t[0]
}

/// Generates into `arena` an ops' own trampoline with its entry fused in
/// (`chain_target` given: its chained caller, going on to that direct
/// target), for the ops whose data slot is `data`: an ops of the args
/// variant with the core's own entry.
pub(crate) fn ops_caller(
    arena: &Arena,
    data: usize,
    chain_target: Option<usize>,
) -> Result<usize, ArenaError> {
    super::local::init_tp_local();
    // Relaxed: set once, above, before this code can run (init_tp_local).
    let tp = TP_LOCAL.load(Ordering::Relaxed) as u64;
    let [start, d, t, a, f, target, end] = template(chain_target.is_some());
    let entry = super::dispatch::ops_entry_args as tramp::FtraceEntry as usize as u64;
    // `movabs r64, imm64` = REX.W + B8+r + imm64: the operand at +2.
    let mut patches = vec![
        (d + 2, data as u64),
        (t + 2, tp),
        (a + 2, tp),
        (f + 2, entry),
    ];
    if let Some(to) = chain_target {
        patches.push((target, to as u64));
    }
    tramp::from_template(arena, start, end, &patches)
}

// A set's caller (sets.rs) with its entry fused in: the same common case
// as the ops' own trampoline, for every ops of the list in the set's slot,
// in order, inside one bracket with errno kept once; an ops' recursion bit
// taken around its own callback, an ops with a thread filter called
// through dispatch::call_ops (which tests the filter). A thread not at
// rest goes the slow way (dispatch::set_entry).
//
// ```text
// Frame: rbx, r12, r13 pushed under the saved rbp (rbp - 8 … rbp - 24),
// then the Regs at rsp, as the other callers'.
//   r9     the set's slot (AtomicPtr<OpsList>)    patched imm64 (DATA)
//   r13    TP_LOCAL                               patched imm64 (TP)
//   rcx, rdx, rax   as in the ops' trampoline up to the bracket
//   rbx    the list (OpsList: FIRST, LEN), then its next ops' entry
//   r12    the end of its entries
//   callback: rdi = ip, rsi = parent_ip (from the Regs), rdx = ops,
//             rcx = the Regs
//   ONE    call_one(ops, regs), for an ops with a thread filter
//                                                 patched imm64
// ```
crate::tramp::regs_asm!(
    ".pushsection .text.shadowgraph_templates,\"ax\",@progbits",
    ".globl shadowgraph_ops_set_start",
    ".hidden shadowgraph_ops_set_start",
    ".globl shadowgraph_ops_set_data",
    ".hidden shadowgraph_ops_set_data",
    ".globl shadowgraph_ops_set_tp",
    ".hidden shadowgraph_ops_set_tp",
    ".globl shadowgraph_ops_set_fn",
    ".hidden shadowgraph_ops_set_fn",
    ".globl shadowgraph_ops_set_one",
    ".hidden shadowgraph_ops_set_one",
    ".globl shadowgraph_ops_set_end",
    ".hidden shadowgraph_ops_set_end",
    ".p2align 4",
    "shadowgraph_ops_set_start:",
    "endbr64",
    "push rbp",
    "mov rbp, rsp",
    "push rbx",
    "push r12",
    "push r13",
    "sub rsp, REGS_SIZE",
    "and rsp, -16",
    crate::tramp::save_arg_registers!(),
    frame_words!(),
    "shadowgraph_ops_set_data:",
    "movabs r9, 0x1122334455667788",
    "shadowgraph_ops_set_tp:",
    "movabs r13, 0x1122334455667788",
    at_rest_or_slow!("r13"),
    // The bracket before the slot is read, as in the ops' trampoline.
    crate::bracket_enter_at_rest!("r13", "rdx"),
    // The list, loaded once (a plain load on x86 is Acquire, which the
    // list's Release publication pairs with): the callers below run its
    // ops and no other, even if the slot changes meanwhile.
    "mov rbx, [r9]",
    "test rbx, rbx",
    "jz 8f",
    errno_save!("r13"),
    "mov r12, [rbx + {list_len}]",
    "mov rbx, [rbx + {list_first}]",
    "lea r12, [rbx + r12*8]",
    ".p2align 4",
    "2:",
    "cmp rbx, r12",
    "jae 3f",
    "mov rdx, [rbx]",
    "add rbx, 8",
    // An ops with a thread filter: dispatch::call_ops, which tests it.
    "cmp qword ptr [rdx + {o_threads}], 0",
    "jne 24f",
    "mov rdi, [rsp + REGS_IP]",
    "mov rsi, [rsp + REGS_PARENT_IP]",
    "mov rcx, rsp",
    "test dword ptr [rdx + {o_flags}], {recursion}",
    "jnz 4f",
    "call qword ptr [rdx + {o_func}]",
    "jmp 2b",
    // The core's recursion bit around this ops' callback, as it asked:
    // free, as the thread held none and each callback gives back what it
    // took (so 0 after it).
    "4:",
    "mov dword ptr fs:[r13 + {l_rec}], {core_bit}",
    "call qword ptr [rdx + {o_func}]",
    "mov dword ptr fs:[r13 + {l_rec}], 0",
    "jmp 2b",
    // errno written back only if a callback changed it; the bracket left.
    "3:",
    errno_back!("r13"),
    // The slot empty (the set retired): nothing to call.
    "8:",
    "add qword ptr [rdx], 0xffff",
    "22:",
    crate::tramp::restore_args!(),
    "lea rsp, [rbp - 24]",
    "pop r13",
    "pop r12",
    "pop rbx",
    "pop rbp",
    "ret",
    "24:",
    "mov rdi, rdx",
    "mov rsi, rsp",
    "shadowgraph_ops_set_one:",
    "movabs rax, 0x1122334455667788",
    "call rax",
    "jmp 2b",
    "9:",
    "mov rdi, rsp",
    "mov rsi, r9",
    "shadowgraph_ops_set_fn:",
    "movabs r11, 0x1122334455667788",
    "call r11",
    "jmp 22b",
    "shadowgraph_ops_set_end:",
    ".popsection";
    l_word = const offset_of!(CoreLocal, word),
    l_rec = const offset_of!(CoreLocal, rec),
    l_errno = const offset_of!(CoreLocal, errno),
    l_anchor = const offset_of!(CoreLocal, outer_anchor),
    list_first = const offset_of!(OpsList, first),
    list_len = const offset_of!(OpsList, len),
    o_threads = const offset_of!(Ops, threads),
    o_flags = const offset_of!(Ops, flags),
    o_func = const offset_of!(Ops, func),
    recursion = const OpsFlags::RECURSION.bits(),
    core_bit = const 1u32 << (Group::Core as u32),
);

/// An ops of a set with a thread filter, from the set's fused caller
/// (inside its bracket, errno kept): its callback if the filter lets this
/// thread through.
extern "C" fn call_one(ops: &Ops, regs: &mut super::ops::Regs) {
    super::dispatch::call_ops(ops, regs)
}

extern "C" {
    static shadowgraph_ops_set_start: u8;
    static shadowgraph_ops_set_data: u8;
    static shadowgraph_ops_set_tp: u8;
    static shadowgraph_ops_set_fn: u8;
    static shadowgraph_ops_set_one: u8;
    static shadowgraph_ops_set_end: u8;
}

/// Bytes of a fused set caller.
pub(crate) fn set_caller_len() -> usize {
    std::ptr::addr_of!(shadowgraph_ops_set_end) as usize
        - std::ptr::addr_of!(shadowgraph_ops_set_start) as usize
}

/// Generates into `arena` a set's caller with its entry fused in, for
/// the set whose slot (`AtomicPtr<OpsList>`) is at `data`.
pub(crate) fn set_caller(arena: &Arena, data: usize) -> Result<usize, ArenaError> {
    super::local::init_tp_local();
    // Relaxed: as in ops_caller.
    let tp = TP_LOCAL.load(Ordering::Relaxed) as u64;
    let at = |p: *const u8| p as usize;
    let start = at(std::ptr::addr_of!(shadowgraph_ops_set_start));
    let entry = super::dispatch::set_entry as tramp::FtraceEntry as usize as u64;
    // `movabs r64, imm64`: the operand at +2.
    let patches = [
        (
            at(std::ptr::addr_of!(shadowgraph_ops_set_data)) + 2,
            data as u64,
        ),
        (at(std::ptr::addr_of!(shadowgraph_ops_set_tp)) + 2, tp),
        (at(std::ptr::addr_of!(shadowgraph_ops_set_fn)) + 2, entry),
        (
            at(std::ptr::addr_of!(shadowgraph_ops_set_one)) + 2,
            call_one as *const () as usize as u64,
        ),
    ];
    tramp::from_template(arena, start, start + set_caller_len(), &patches)
}
