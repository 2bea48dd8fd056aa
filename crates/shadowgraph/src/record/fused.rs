//! The recording tracer fused into fgraph's single-user path.
//!
//! When the only graph user is a recorder whose callbacks do nothing but
//! append an entry and an exit record to its thread's ring, declining calls
//! deeper than a limit if it has one (the agent's plain `record`, `-D`
//! included), the manager's trampolines hand over to
//! `shadowgraph_fused_entry` and `return_to_handler` tries
//! `shadowgraph_fused_return` first: each does in a few dozen instructions
//! what fgraph's Rust path and the callbacks do — the bracket, the frame
//! push or pop with the return hijack, the record in the ring (the same
//! claim / write / publish protocol as `Ring`, so a signal handler may
//! record in between) — without saving the argument registers for Rust code
//! or calling it. Anything unusual for either (a thread not at rest, no
//! stack or ring yet, another user, frames a longjmp left, a full stack or
//! ring) goes the general way, untouched: `shadowgraph_fused_general`
//! (the manager's usual caller) and `shadowgraph_return_general`.
//!
//! The thread-local state is reached at its offset from the thread pointer
//! (initial-exec TLS: the same offset in every thread), computed once by
//! [`attach`].

use super::ring::{RingHeader, HEADER_BYTES};
use super::writer;
use crate::fgraph::stack::{ThreadState, MAX_OFFSET};
use crate::fgraph::{self, GraphUser};
use crate::ftrace::local::CoreLocal;
use std::mem::offset_of;
use std::sync::atomic::{AtomicI64, Ordering};

/// Offsets from the thread pointer of the core's, fgraph's and the
/// writer's thread-local state.
static TP_LOCAL: AtomicI64 = AtomicI64::new(0);
static TP_THREAD: AtomicI64 = AtomicI64::new(0);
static TP_RINGS: AtomicI64 = AtomicI64::new(0);

extern "C" {
    fn shadowgraph_fused_entry();
}

/// Makes `user` — a graph user whose entry callback declines calls at
/// depth `max_depth` or deeper (0: none) and otherwise only emits an entry
/// record, and whose return callback only emits an exit record (depth and
/// function as fgraph gives them), to recording instance `inst` — eligible
/// for the fused path, and turns the path on. Call before the first graph
/// user registers (the manager's trampolines are made then). Returns false
/// (nothing changed) when the records are not timed by the TSC or `inst`
/// is out of range.
pub fn attach(user: &GraphUser, inst: usize, max_depth: u32) -> bool {
    if !super::clock::uses_tsc() || inst >= writer::MAX_INSTANCES {
        return false;
    }
    let tp: usize;
    // SAFETY: reads the thread pointer (fs:0 holds it, x86-64 TLS ABI).
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    let off = |a: usize| a.wrapping_sub(tp) as i64;
    TP_LOCAL.store(
        off(crate::ftrace::local::local() as *const CoreLocal as usize),
        Ordering::Relaxed,
    );
    TP_THREAD.store(
        off(fgraph::stack::thread() as *const ThreadState as usize),
        Ordering::Relaxed,
    );
    TP_RINGS.store(off(writer::rings_of_this_thread()), Ordering::Relaxed);
    user.fused_max_depth
        .store(max_depth as u64, Ordering::Release);
    user.fused_inst.store(inst as i64, Ordering::Release);
    fgraph::MANAGER_STUB.store(
        shadowgraph_fused_entry as *const () as usize,
        Ordering::Release,
    );
    fgraph::FUSED_RETURN_ON.store(1, Ordering::Release);
    true
}

// A ring's producer side, as `Ring::begin/claim_at/end` (ring.rs): `nest`
// up, then, while there is room (else jump to `$full` with the ring begun),
// read the TSC and claim `reserve` by one cmpxchg, again both if a signal
// handler claimed meanwhile (so the thread's records stay in time order);
// … `nest` down and, if 0, publish `head = reserve` without ever moving it
// backwards. Ring in r11; the claimed slot in rax, its time in `$time`;
// clobbers rdx and the flags.
macro_rules! ring_begin_claim {
    ($full:literal, $time:literal) => {
        concat!(
            "inc qword ptr [r11 + {r_nest}]\n",
            "2:\n",
            "mov rax, [r11 + {r_reserve}]\n",
            "mov rdx, rax\n",
            "sub rdx, [r11 + {r_tail_cache}]\n",
            "cmp rdx, [r11 + {r_cap}]\n",
            "jae ",
            $full,
            "\n",
            "mov ",
            $time,
            ", rax\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "xchg rax, ",
            $time,
            "\n",
            "lea rdx, [rax + 1]\n",
            "cmpxchg qword ptr [r11 + {r_reserve}], rdx\n",
            "jne 2b\n",
        )
    };
}

// The record at slot rax of ring r11: `{$time, rdx}`. Clobbers rax.
macro_rules! ring_write {
    ($time:literal) => {
        concat!(
            "push rdx\n",
            "mov rdx, [r11 + {r_cap}]\n",
            "dec rdx\n",
            "and rax, rdx\n",
            "shl rax, 4\n",
            "pop rdx\n",
            "mov [r11 + rax + {header}], ",
            $time,
            "\n",
            "mov [r11 + rax + {header} + 8], rdx\n",
        )
    };
}

// `nest` down; the outermost publishes. Then falls through (or jumps to
// `$busy` when an outer writer is still at it).
macro_rules! ring_end {
    ($busy:literal) => {
        concat!(
            "dec qword ptr [r11 + {r_nest}]\n",
            "jnz ",
            $busy,
            "\n",
            "3:\n",
            "mov rax, [r11 + {r_head}]\n",
            "mov rdx, [r11 + {r_reserve}]\n",
            "cmp rax, rdx\n",
            "je ",
            $busy,
            "\n",
            "cmpxchg qword ptr [r11 + {r_head}], rdx\n",
            "jne 3b\n",
        )
    };
}

// The bracket, left: depth 1 → 0 and the exit generation + 1, in one
// instruction (a signal handler leaves the word as it found it, save for
// generations it completed). Clobbers rcx.
macro_rules! bracket_leave {
    () => {
        concat!(
            "mov rcx, [rip + {tp_local}]\n",
            "mov rcx, qword ptr fs:[rcx + {l_word}]\n",
            "add qword ptr [rcx], 0xffff\n",
        )
    };
}

// The entry's frame at word r8 of stack rdi: {R, rdx, slot, RESERVED}.
// Clobbers rax.
macro_rules! frame_words {
    () => {
        concat!(
            "mov rax, [rsp + 80]\n",
            "mov [rdi + r8*8], rax\n",
            "mov [rdi + r8*8 + 8], rdx\n",
            "lea rax, [rsp + 80]\n",
            "mov [rdi + r8*8 + 16], rax\n",
            "mov qword ptr [rdi + r8*8 + 24], {frame_words}\n",
        )
    };
}

// The nine registers the entry saves, restored.
macro_rules! pop_saved {
    () => {
        "pop r11\npop r10\npop r9\npop r8\npop rdi\npop rsi\npop rdx\npop rcx\npop rax\n"
    };
}

// The entry, then the return (its register contract below, with it).
//
// Entry. Register contract: reached by the manager's stub from a site's
// call: [rsp] = site+5, [rsp+8] = R (the traced function's return
// address), r11 = the stub's data (the manager's ops slot in that arena);
// every argument register (rdi rsi rdx rcx r8 r9, rax, r10, xmm0–7) is
// live. The fast path saves the nine general registers it uses on the
// stack, touches no xmm register, and returns to site+5 with all of them
// restored; after the pushes [rsp+72] = site+5 and [rsp+80] = R, so the
// return slot is rsp+80. Anything else pops them and jumps to
// `shadowgraph_fused_general`, the manager's usual caller (args variant)
// with the ops slot taken from r11.
std::arch::global_asm!(
    ".pushsection .text.shadowgraph_fused,\"ax\",@progbits",
    ".globl shadowgraph_fused_entry",
    ".hidden shadowgraph_fused_entry",
    "shadowgraph_fused_entry:",
    "endbr64",
    "push rax",
    "push rcx",
    "push rdx",
    "push rsi",
    "push rdi",
    "push r8",
    "push r9",
    "push r10",
    "push r11",
    // At rest: a bracket word, depth 0, no recursion bit.
    "mov rcx, [rip + {tp_local}]",
    "mov rdx, qword ptr fs:[rcx + {l_word}]",
    "test rdx, rdx",
    "jz 80f",
    "test word ptr [rdx], 0xffff",
    "jnz 80f",
    "cmp dword ptr fs:[rcx + {l_rec}], 0",
    "jne 80f",
    // Enter the bracket, anchored at the return slot.
    "lea rax, [rsp + 80]",
    "mov qword ptr fs:[rcx + {l_anchor}], rax",
    "inc qword ptr [rdx]",
    // The manager is still registered (its slot names it) and its sole
    // user is a fused recorder with a ring on this thread.
    "mov rax, [rsp]",
    "cmp qword ptr [rax], 0",
    "je 81f",
    "mov rsi, [rip + {fast}]",
    "test rsi, rsi",
    "jz 81f",
    "mov rax, [rsi + {u_inst}]",
    "test rax, rax",
    "js 81f",
    "mov rcx, [rip + {tp_rings}]",
    "mov r11, qword ptr fs:[rcx + rax*8]",
    "test r11, r11",
    "jz 81f",
    // The thread's shadow stack: attached, hooked, not exiting or paused.
    "mov rcx, [rip + {tp_thread}]",
    "mov rdi, qword ptr fs:[rcx + {t_stack}]",
    "test rdi, rdi",
    "jz 81f",
    "cmp byte ptr fs:[rcx + {t_exiting}], 0",
    "jne 81f",
    "cmp dword ptr fs:[rcx + {t_pause}], 0",
    "jne 81f",
    "cmp byte ptr fs:[rcx + {t_unhooked}], 0",
    "jne 81f",
    // r8 = curr; r9 = depth: one deeper than the top frame f = curr−1−o
    // (o = word[curr−1]'s offset), 0 without one. A top frame whose return
    // slot is not above ours was left by a longjmp: the general way.
    "mov r8, qword ptr fs:[rcx + {t_curr}]",
    "xor r9d, r9d",
    "test r8, r8",
    "jz 4f",
    "mov rax, [rdi + r8*8 - 8]",
    "and eax, 0x3ff",
    "jz 4f",
    "cmp rax, r8",
    "jae 4f",
    "mov rdx, r8",
    "sub rdx, rax", // f + 1
    "lea rax, [rsp + 80]",
    "cmp [rdi + rdx*8 + 8], rax", // word[f+2]: its return slot
    "jbe 81f",
    "mov r9, [rdi + rdx*8]", // word[f+1]: func | depth << 48
    "shr r9, 48",
    "inc r9",
    "4:",
    // A call the user declines (`-D`): nothing to do.
    "mov rax, [rsi + {u_max_depth}]",
    "test rax, rax",
    "jz 6f",
    "cmp r9, rax",
    "jae 83f",
    "6:",
    // Room for the frame, else the general way counts an overrun.
    "lea rax, [r8 + 4]",
    "cmp rax, {max_offset}",
    "jae 81f",
    // The frame {R, func | depth << 48, slot, RESERVED}, written whole
    // before curr publishes it and again after (a handler that ran in
    // between may have used the words); pushed before the record is
    // claimed, as on the general way (a handler's calls in between nest in
    // it and come first).
    "mov rdx, [rsp + 72]",
    "sub rdx, 5",
    "mov rax, r9",
    "shl rax, 48",
    "or rdx, rax",
    frame_words!(),
    "lea rax, [r8 + 4]",
    "mov qword ptr fs:[rcx + {t_curr}], rax",
    frame_words!(),
    // The entry record {time, Entry | MAGIC | depth << 6 | func << 16} in
    // a slot of the ring, else the frame goes and the general way waits
    // for one.
    ring_begin_claim!("82f", "r10"),
    "mov rdx, [rsp + 72]",
    "sub rdx, 5",
    "shl rdx, 16",
    "push r9",
    "shl r9, 6",
    "or rdx, r9",
    "pop r9",
    "or rdx, {entry_bits}",
    ring_write!("r10"),
    ring_end!("5f"),
    "5:",
    // Kept for the user: its BITMAP word, then the hijack.
    "mov rax, [rsi + {u_frame_word}]",
    "mov [rdi + r8*8 + 24], rax",
    "lea rax, [rip + shadowgraph_return_to_handler]",
    "mov [rsp + 80], rax",
    bracket_leave!(),
    pop_saved!(),
    "ret",
    // Declined: leave as if untraced.
    "83:",
    bracket_leave!(),
    pop_saved!(),
    "ret",
    // The general way: from 82 with the frame pushed (take it back: any
    // handler's frames above it are gone) and the ring begun (end it),
    // from 81 with the bracket entered (leave it), from 80 as at entry.
    "82:",
    "mov qword ptr fs:[rcx + {t_curr}], r8",
    ring_end!("81f"),
    "81:",
    bracket_leave!(),
    "80:",
    pop_saved!(),
    "jmp shadowgraph_fused_general",
    // The manager's caller (tramp.rs, args variant), with the ops slot
    // from r11 kept in the frame's spare word across save_args.
    ".globl shadowgraph_fused_general",
    ".hidden shadowgraph_fused_general",
    "shadowgraph_fused_general:",
    crate::tramp::prologue!(),
    "mov [rsp + 0x128], r11",
    crate::tramp::save_args!(),
    "mov rdi, rsp",
    "mov rsi, [rsp + 0x128]",
    "call {manager_entry}",
    crate::tramp::restore_args!(),
    "leave",
    "ret",
    // Return. Register contract: jumped to by `return_to_handler` when the
    // fused path is on: rsp = the returning call's slot + 8; rax/rdx (and
    // xmm0/xmm1, never touched here) hold the function's result; rcx, rsi,
    // rdi and r8–r11 are dead at a return. After pushing rax and rdx the slot
    // is rsp+8. Resumes at the frame's real return address through r11 with
    // rax/rdx restored; anything unusual pops them and jumps to
    // `shadowgraph_return_general` as if never here.
    ".globl shadowgraph_fused_return",
    ".hidden shadowgraph_fused_return",
    "shadowgraph_fused_return:",
    "push rax",
    "push rdx",
    "mov rcx, [rip + {tp_local}]",
    "mov r8, qword ptr fs:[rcx + {l_word}]",
    "test r8, r8",
    "jz 90f",
    "test word ptr [r8], 0xffff",
    "jnz 90f",
    "cmp dword ptr fs:[rcx + {l_rec}], 0",
    "jne 90f",
    "lea rax, [rsp + 8]",
    "mov qword ptr fs:[rcx + {l_anchor}], rax",
    "inc qword ptr [r8]",
    "mov rsi, [rip + {fast}]",
    "test rsi, rsi",
    "jz 91f",
    "mov rax, [rsi + {u_inst}]",
    "test rax, rax",
    "js 91f",
    "mov rcx, [rip + {tp_rings}]",
    "mov r11, qword ptr fs:[rcx + rax*8]",
    "test r11, r11",
    "jz 91f",
    // The top frame f (r10) is the returning call's (its slot) and was
    // kept for this user alone (its BITMAP word).
    "mov rcx, [rip + {tp_thread}]",
    "mov rdi, qword ptr fs:[rcx + {t_stack}]",
    "test rdi, rdi",
    "jz 91f",
    "mov r9, qword ptr fs:[rcx + {t_curr}]",
    "test r9, r9",
    "jz 91f",
    "mov rax, [rdi + r9*8 - 8]",
    "and eax, 0x3ff",
    "jz 91f",
    "cmp rax, r9",
    "jae 91f",
    "mov r10, r9",
    "sub r10, rax",
    "dec r10",
    "lea rax, [rsp + 8]",
    "cmp [rdi + r10*8 + 16], rax",
    "jne 91f",
    "mov rax, [rdi + r10*8 + 24]",
    "cmp rax, [rsi + {u_frame_word}]",
    "jne 91f",
    // The exit record {time, Exit | MAGIC | depth << 6 | func << 16} in a
    // slot of the ring, else the general way waits for one. The frame's
    // users are taken before it is written (as finish_frame: a handler
    // that never returns leaves no second exit).
    ring_begin_claim!("92f", "r9"),
    "movabs rdx, {users_clear}",
    "and rdx, [rdi + r10*8 + 24]",
    "mov [rdi + r10*8 + 24], rdx",
    "push rax",
    "mov rax, [rdi + r10*8 + 8]",
    "mov rdx, rax",
    "shr rdx, 48",
    "shl rdx, 6",
    "shl rax, 16",
    "or rdx, rax",
    "or rdx, {exit_bits}",
    "pop rax",
    ring_write!("r9"),
    ring_end!("5f"),
    "5:",
    // Pop the frame; resume at its real return address.
    "mov r11, [rdi + r10*8]",
    "mov rcx, [rip + {tp_thread}]",
    "mov qword ptr fs:[rcx + {t_curr}], r10",
    bracket_leave!(),
    "pop rdx",
    "pop rax",
    "jmp r11",
    "92:",
    ring_end!("91f"),
    "91:",
    bracket_leave!(),
    "90:",
    "pop rdx",
    "pop rax",
    "jmp shadowgraph_return_general",
    ".popsection",
    tp_local = sym TP_LOCAL,
    tp_thread = sym TP_THREAD,
    tp_rings = sym TP_RINGS,
    fast = sym fgraph::FAST,
    manager_entry = sym fgraph::manager_tramp_entry,
    l_word = const offset_of!(CoreLocal, word),
    l_rec = const offset_of!(CoreLocal, rec),
    l_anchor = const offset_of!(CoreLocal, outer_anchor),
    t_stack = const offset_of!(ThreadState, stack),
    t_curr = const offset_of!(ThreadState, curr),
    t_exiting = const offset_of!(ThreadState, exiting),
    t_pause = const offset_of!(ThreadState, pause),
    t_unhooked = const offset_of!(ThreadState, unhooked),
    u_inst = const offset_of!(GraphUser, fused_inst),
    u_frame_word = const offset_of!(GraphUser, frame_word),
    u_max_depth = const offset_of!(GraphUser, fused_max_depth),
    r_cap = const offset_of!(RingHeader, capacity),
    r_head = const offset_of!(RingHeader, head),
    r_tail_cache = const offset_of!(RingHeader, tail_cache),
    r_reserve = const offset_of!(RingHeader, reserve),
    r_nest = const offset_of!(RingHeader, nest),
    header = const HEADER_BYTES,
    max_offset = const MAX_OFFSET,
    frame_words = const crate::fgraph::stack::FRAME_WORDS,
    entry_bits = const super::format::MAGIC << 3,
    users_clear = const !(0xffffu64 << 12),
    exit_bits = const super::format::MAGIC << 3 | 1,
);
