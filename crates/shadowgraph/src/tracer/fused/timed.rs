//! The site entry and return of a recorder with a time filter alone: the
//! entry keeps the call's start in its frame, the return drops a call too
//! short to record and leaves the rest to the callbacks.

use super::frame_asm::{
    bracket_leave, entry_head, entry_saves, entry_stack, exit_record, frame_words, fused_layout,
    pop_frame, pop_saved, return_head, site_entry_end, site_return_general, thread_base, thread_op,
};
use super::ring_asm::{
    commit_store, reserve_and_time, ring_claim, ring_publish, ring_record, ring_write, rseq_abort,
    rseq_arm, rseq_commit, rseq_descriptor,
};
use super::variant_asm::{data_word, timed_data_word, timed_frame_words, timed_judge};
use super::{
    ENTRY_DROPPED, ENTRY_TIMING, ENTRY_WRITTEN, MAX_RECORD_DEPTH, RSEQ_CS, RSEQ_RESTARTS, TP_RINGS,
    W_MIN_TICKS,
};
use crate::fgraph::stack::ThreadState;
use crate::fgraph::{self, GraphUser};
use crate::ftrace::local::CoreLocal;
use crate::record::ring::{RingHeader, HEADER_BYTES};
use std::mem::offset_of;

crate::fgraph::graph_asm!(
    fused_layout!(),
    ".pushsection .text.shadowgraph_fused,\"ax\",@progbits",
    // The site stubs' entry and return for a recorder with a time filter
    // alone (`-t`): see [`attach_timed`]. Entry: as the site entry above
    // up to label 4, then the frame with the user's word in it (the
    // parent's, most often a timed frame: its DATA word last, TIMED_WORDS
    // words),
    // then the clock read into the word; nothing in the ring.
    ".globl shadowgraph_fused_timed_entry",
    ".hidden shadowgraph_fused_timed_entry",
    "shadowgraph_fused_timed_entry:",
    "endbr64",
    entry_head!(
        concat!(timed_data_word!("r10"), "cmp rax, r10\n"),
        "(TIMED_WORDS - 1)",
        "",
        crate::site_selects!("rsp + FE_CALL_RET", "dword ptr [rsi + {u_frame_word}]", "81f")
    ),
    // Room for the frame and the data, else the general way counts an
    // overrun (fast_push_limit leaves room for the frame and its BITMAP
    // word beyond curr).
    "lea rax, [r8 + TIMED_WORDS - FRAME_WORDS - 1]",
    "cmp rax, [rip + {room_limit}]",
    "jae 81f",
    "mov rdx, [rsp + FE_SITE]",
    "mov rax, r9",
    "shl rax, 48",
    "or rdx, rax",
    timed_data_word!("r10"),
    "mov r11, [rsi + {u_frame_word}]",
    // Written whole before curr publishes it and again after, as frames
    // are, the word 0 (a handler landing meanwhile passes over the call:
    // it is not being timed). Then ENTRY_TIMING, by one store, so that a
    // signal handler landing from then on, before the exchange below,
    // writes this call's entry itself (at an older time than its own
    // records: see ENTRY_TIMING); a second write of the frame after it
    // would undo the handler's mark.
    timed_frame_words!(),
    "lea rax, [r8 + TIMED_WORDS]",
    "mov qword ptr fs:[rcx + {t_curr}], rax",
    timed_frame_words!(),
    "mov r11, {entry_timing}",
    "mov [rdi + r8*8 + TIMED_TIME], r11",
    // The entry time, by one exchange from ENTRY_TIMING (which fails if
    // a handler wrote the entry meanwhile: its time stands), flags clear.
    "rdtsc",
    "shl rdx, 32",
    "or rdx, rax",
    "shl rdx, 3",
    "shr rdx, 3",
    "mov rax, r11",
    "cmpxchg [rdi + r8*8 + TIMED_TIME], rdx",
    site_entry_end!(),
    // Return: as the site return above, for a top frame this entry made.
    // A call whose entry is written (a descendant of it, or a signal
    // handler, proved it long) writes its exit; one that lasted less
    // than the threshold is popped, writing nothing (below: in one
    // restartable sequence, or marked dropped first without rseq);
    // anything else goes the general way: a call that lasted long enough
    // (rare, by the filter's purpose) has its callers' entries, its own
    // and its exit written there, in time order.
    ".globl shadowgraph_fused_timed_return",
    ".hidden shadowgraph_fused_timed_return",
    "shadowgraph_fused_timed_return:",
    "endbr64",
    return_head!(""),
    // f (r10) = curr − TIMED_WORDS: its BITMAP word the user's, its DATA
    // word last, its slot the returning call's.
    "cmp r9, TIMED_WORDS",
    "jb 91f",
    "mov rax, [rsi + {u_frame_word}]",
    "cmp [rdi + r9*8 - TIMED_WORDS * 8 + FRAME_BITMAP], rax",
    "jne 91f",
    timed_data_word!("rax"),
    "cmp [rdi + r9*8 - 8], rax",
    "jne 91f",
    "lea r10, [r9 - TIMED_WORDS]",
    "lea rax, [rsp + FR_SLOT]",
    "cmp [rdi + r10*8 + FRAME_RETP], rax",
    "jne 91f",
    // With rseq: the word read, the call judged and its frame popped in
    // one restartable sequence, the pop its commit. A signal handler that
    // lands in it finds the frame still pushed and its entry waiting (its
    // records, if long, write the entry first, and the restart then finds
    // it written and writes the exit); one that jumps out leaves the frame
    // as a call not yet judged. A call popped is never marked dropped.
    "shadowgraph_fused_timed_drop_restart:",
    crate::fixed_load!("rdx", "rseq_cs"),
    "test rdx, rdx",
    "jz 62f",
    "lea rax, [rip + shadowgraph_fused_timed_drop_cs]",
    "mov qword ptr fs:[rdx], rax",
    "shadowgraph_fused_timed_drop_start:",
    timed_judge!(),
    crate::fixed_load!("rcx", "tp_thread"),
    "mov rdx, [rdi + r10*8 + FRAME_RET]",
    "mov qword ptr fs:[rcx + {t_curr}], r10",
    "shadowgraph_fused_timed_drop_post:",
    "mov r11, rdx",
    "add qword ptr [r8], 0xffff",
    "pop rdx",
    "pop rax",
    "push r11",
    "ret",
    ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits",
    rseq_abort!("shadowgraph_fused_timed_drop"),
    ".popsection",
    rseq_descriptor!("shadowgraph_fused_timed_drop"),
    // Without rseq: the same judgement, then the call dropped by one
    // exchange (a handler that wrote its entry since the load makes it
    // fail: the general way writes the exit), its users taken, popped.
    "62:",
    timed_judge!(),
    "mov rax, r11",
    "mov rdx, r11",
    "bts rdx, {dropped_bit}",
    "cmpxchg [rdi + r10*8 + TIMED_TIME], rdx",
    "jne 91f",
    "and dword ptr [rdi + r10*8 + FRAME_BITMAP], {users_clear}",
    pop_frame!("push r11\nret\n"),
    // Written: the exit record, in the ring of this thread (else the
    // general way).
    "60:",
    crate::fixed_load!("rcx", "tp_rings"),
    "mov r11, qword ptr fs:[rcx]",
    "test r11, r11",
    "jz 91f",
    exit_record!("shadowgraph_fused_timed_return_record"),
    pop_frame!("push r11\nret\n"),
    "92:",
    site_return_general!(),
    ".popsection";
    tp_local = sym fgraph::TP_LOCAL,
    tp_thread = sym fgraph::TP_THREAD,
    tp_rings = sym TP_RINGS,
    rseq_cs = sym RSEQ_CS,
    rseq_restarts = sym RSEQ_RESTARTS,
    fused = sym fgraph::SOLE_PROVIDED,
    l_word = const offset_of!(CoreLocal, word),
    l_rec = const offset_of!(CoreLocal, rec),
    l_anchor = const offset_of!(CoreLocal, outer_anchor),
    t_stack = const offset_of!(ThreadState, stack),
    t_curr = const offset_of!(ThreadState, curr),
    t_blockers = const crate::fgraph::stack::BLOCKERS,
    hookable = const crate::fgraph::stack::HOOKABLE,
    u_frame_word = const offset_of!(GraphUser, frame_word),
    u_slot = const offset_of!(GraphUser, slot),
    r_offset_mask = const offset_of!(RingHeader, offset_mask),
    slot_shift = const crate::record::ring::SLOT_SHIFT,
    r_head = const offset_of!(RingHeader, head),
    r_room_end = const offset_of!(RingHeader, room_end),
    r_reserve = const offset_of!(RingHeader, reserve),
    header = const HEADER_BYTES,
    room_limit = sym crate::fgraph::stack::FAST_PUSH_LIMIT,
    id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
    site_users = sym crate::fgraph::SITE_USERS,
    site_users_cap = const crate::fgraph::SITE_USERS_CAPACITY,
    max_record_depth = const MAX_RECORD_DEPTH,
    // The users' bits (12..27) lie in the word's low half.
    users_clear = const !(0xffffu32 << 12),
    exit_bits = const shadowgraph_data::format::MAGIC << 3 | 1,
    u_min_ticks = const GraphUser::PATH_WORDS + 8 * W_MIN_TICKS,
    data_one = const crate::fgraph::stack::data(5, 0, 1),
    entry_timing = const ENTRY_TIMING,
    written_bit = const ENTRY_WRITTEN.trailing_zeros(),
    dropped_bit = const ENTRY_DROPPED.trailing_zeros(),
);
