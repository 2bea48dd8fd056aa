//! The plain recorder's site entry and return (no filter, no depth limit,
//! rseq): each writes its record in one restartable sequence, with no
//! bracket held.

use super::frame_asm::{
    entry_stack, fused_layout, plain_pop_saved, plain_saves, sole_user_check, thread_base,
    thread_op,
};
use super::ring_asm::{plain_record, room_check, rseq_abort, rseq_descriptor};
use super::{MAX_RECORD_DEPTH, RSEQ_CS, RSEQ_RESTARTS, TP_RINGS};
use crate::fgraph::stack::ThreadState;
use crate::fgraph::{self};
use crate::record::ring::{RingHeader, HEADER_BYTES};
use std::mem::offset_of;

// The plain site entry, from its label `$entry` on, with its sequence
// `$seq`: for the plain entry itself, and for the entries that write a
// call's arguments after its record (plain_regs.rs). `$before` runs with
// the ring in r11, before the sequence; `$room` in the sequence, after the
// ring's depth is found, checks room for the record and any data after
// it (rax: `reserve`; rdx free); `$step` is what the
// commit adds to `reserve`; `$word` runs with the record's word made in
// rdi, `$data` with the record's offset in rcx (plain_record's `$data`).
macro_rules! plain_site_entry {
    ($entry:literal, $seq:literal, $before:expr, $room:expr, $step:expr, $word:expr, $data:expr) => {
        concat!(
            ".p2align 6\n",
            concat!(".globl ", $entry, "\n"),
            concat!(".hidden ", $entry, "\n"),
            concat!($entry, ":\n"),
            "endbr64\n",
            plain_saves!(),
            entry_stack!(
                "",
                // The top frame's last word the fused user's frame word
                // (fgraph::FUSED_FRAME_WORD), rather than the user: all the path
                // needs of it. NO_FRAME_WORD (no fused user) is no stack word:
                // the top frame is then never recognised, and the way out of line
                // sends the call the general way.
                "cmp rax, [rip + {fused_word}]\n",
                "{frame_words}",
                "",
                "80f",
                fixed,
                "PE_PARENT_SLOT",
                concat!(
                    "cmp qword ptr [rip + {fused_word}], {no_frame_word}\n",
                    "je 80f\n"
                )
            ),
            "cmp r8, [rip + {room_limit}]\n",
            "jae 80f\n",
            // rcx: the frame's function and depth, from the site (r11) before the
            // ring takes its register.
            "mov rcx, r9\n",
            "shl rcx, 48\n",
            "or rcx, r11\n",
            crate::fixed_tls!("mov r11, ", "qword", "tp_rings", "0", ""),
            "test r11, r11\n",
            "jz 80f\n",
            $before,
            plain_record!(
                $seq,
                "82f",
                // The user checked again in the sequence; its frame word the new
                // frame's last word.
                concat!(
                    sole_user_check!("82f", "rsp + PE_CALL_RET"),
                    "mov [rdi + r8*8 + FRAME_BITMAP], rdx\n"
                ),
                "rcx",
                "rdi",
                // The ring at the call's depth r9; or one level above it, where a
                // signal handler's call finds it between a frame's push and its
                // entry record, or between an exit record and the frame's pop: the
                // call is then recorded there (before the interrupted call, or
                // after it), and its frame says so (rcx made again), so that its
                // own calls and its exit follow it.
                // (In line: code out of the sequence's range is not restarted, and
                // the kernel may disarm the sequence while the thread runs there.)
                concat!(
                    "cmp ax, r9w\n",
                    "je 62f\n",
                    "lea edx, [eax + 1]\n",
                    "cmp dx, r9w\n",
                    "jne 82f\n",
                    "movzx r9d, ax\n",
                    "shl rcx, 16\n",
                    "shr rcx, 16\n",
                    "mov rdx, r9\n",
                    "shl rdx, 48\n",
                    "or rcx, rdx\n",
                    "62:\n",
                    $room,
                ),
                // One slot on, the ring's depth (= r9) one deeper.
                $step,
                "",
                concat!(
                    // The frame {R, rcx, slot, the user's BITMAP word}, pushed, in
                    // the sequence: a handler that lands anywhere in it, or
                    // preemption, sends the call the general way with the frame
                    // taken back (curr = r8, as the handler left it: the frame
                    // ours or none yet), so one write is whole.
                    "mov rdx, [rsp + PE_PARENT_SLOT]\n",
                    "mov [rdi + r8*8 + FRAME_RET], rdx\n",
                    "mov [rdi + r8*8 + FRAME_FUNC], rcx\n",
                    "lea rdx, [rsp + PE_PARENT_SLOT]\n",
                    "mov [rdi + r8*8 + FRAME_RETP], rdx\n",
                    "lea rdx, [r8 + {frame_words} + 1]\n",
                    crate::fixed_tls!("mov ", "qword", "tp_thread", "{t_curr}", ", rdx"),
                    // rdi (the stack no longer needed): the record's word,
                    // {time, Entry | MAGIC | depth << 6 | func << 16}: rcx rotated
                    // is func << 16 | depth (< 1023), to which 63 × depth and the
                    // bits add without carrying.
                    "mov rdi, rcx\n",
                    "rol rdi, 16\n",
                    "imul rdx, r9, 63\n",
                    "lea rdi, [rdi + rdx + {entry_bits}]\n",
                    $word,
                ),
                $data,
                // An abort: the general way (below), not the sequence again: its
                // registers are reused as it goes (rcx, the frame's word, for the
                // slot's offset), and the general way makes the call's frame and
                // record from the state as the interruption left it.
                "82f"
            ),
            "cmp rsp, rsp\n",
            plain_pop_saved!(),
            "ret\n",
            // The general way: from 82 in the sequence, the frame perhaps pushed
            // (taken back: any handler's frames above it are gone), from 80 as
            // at entry (fgraph's site entry reads the site from the stub).
            "82:\n",
            crate::fixed_tls!("mov ", "qword", "tp_thread", "{t_curr}", ", r8"),
            "80:\n",
            plain_pop_saved!(),
            "jmp shadowgraph_graph_site_entry\n",
        )
    };
}
pub(super) use plain_site_entry;

crate::fgraph::graph_asm!(
    fused_layout!(),
    ".pushsection .text.shadowgraph_fused,\"ax\",@progbits",
    // The site stubs' entry and return for the common case, chosen at
    // attach: the process has rseq (and grace periods restart its
    // sequences: quiesce::fence_rseq_too) and the recorder neither filters
    // nor limits depth. They hold no bracket: where a signal handler
    // lands in them is told by the ring's depth instead (see
    // plain_record), and their one read of the user that a grace period
    // must cover is in the sequence. Register contracts as for the site
    // entry and return above.
    //
    // Entry: fgraph's code not at work on the thread (graph_busy, in the
    // blockers word: it holds its recursion bit while it pushes a frame
    // or writes a record; the bits of other ops' callbacks, which touch
    // neither the stack nor the ring, do not keep a call they make, or a
    // signal handler's, from being recorded here), the stack's checks as
    // the site entry's, then one restartable sequence that pushes the frame (the
    // user's BITMAP word in it) and writes the entry record at the frame's
    // depth (r9). Six registers saved, not nine: r11 (the site, from the
    // stub) is free at a function's entry, and r10 and rsi are left alone
    // (the frame's word is made in rcx, the record's in rdi once the frame
    // is pushed, the slot's offset in rcx then; the user's frame word is
    // read where it is needed rather than kept in a register that would
    // have to be saved). The entries with arguments (plain_regs.rs) store
    // rsi as it is and the others from where this entry keeps them: what
    // it saves, and where, is theirs too. The call's return slot: rsp +
    // PE_PARENT_SLOT.
    // This entry and the return below each start a cache line, so that
    // where the linker places them does not change what a call costs.
    plain_site_entry!(
        "shadowgraph_fused_site_entry_plain",
        "shadowgraph_fused_plain_entry",
        "",
        room_check!("82f"),
        "(1 << {slot_shift}) + 1",
        "",
        ""
    ),
    // Return: in one restartable sequence, the top frame f (r10) the
    // returning call's (its slot) and kept for this user alone (its last
    // word the user's BITMAP word), its exit record written at its depth
    // if the ring is one deeper; then the frame popped.
    ".p2align 6",
    ".globl shadowgraph_fused_site_return_plain",
    ".hidden shadowgraph_fused_site_return_plain",
    "shadowgraph_fused_site_return_plain:",
    "endbr64",
    // The result's registers kept in xmm8–9 (free at a function's return:
    // caller-saved and no result's), out of memory: a pop's load made the
    // caller's first use of the result wait longer.
    "movq xmm8, rax",
    "movq xmm9, rdx",
    plain_record!(
        "shadowgraph_fused_plain_return",
        "90f",
        "",
        "r9",
        "rcx",
        concat!("lea edx, [r8 + 1]\ncmp ax, dx\njne 90f\n", room_check!("90f")),
        // One slot on, the ring's depth (= r8 + 1) one shallower.
        "(1 << {slot_shift}) - 1",
        // All of it in the sequence (reads only: a restart reads it all
        // again). Neither the recursion bit nor a null stack is looked
        // for, unlike at the entry (neither can be there): the
        // stub returns here only for a call it hooked, whose frame is on
        // the stack, and that stack is dropped only at the thread's exit,
        // once every frame on it is finished (fgraph's thread_exit); the
        // bit is held only in the agent's own code, whose callbacks the
        // program's code runs in only as a call the bit declines (no
        // frame), or as a signal handler, whose hooked calls were entered
        // in it and so return in it, bit clear. (A handler that leaves
        // the agent's code by longjmp may leave the bit set until the
        // abandoned bracket is found: a return here meanwhile is recorded
        // as at rest, where the ring's and the frame's checks below
        // hold.) The ring may be gone while frames are not: a forked
        // child drops its parent's.
        concat!(
            crate::fixed_tls!("mov r11, ", "qword", "tp_rings", "0", ""),
            "test r11, r11\n",
            "jz 90f\n",
            crate::fixed_tls!("mov rdi, ", "qword", "tp_thread", "{t_stack}", ""),
            crate::fixed_tls!("mov r9, ", "qword", "tp_thread", "{t_curr}", ""),
            // (At curr = 0, the stack's word −1: always 0, no frame's.)
            // The top frame's last word the fused user's: its one read
            // that a grace period covers (NO_FRAME_WORD, no stack word,
            // once it is gone).
            "mov rax, [rdi + r9*8 - 8]\n",
            "cmp rax, [rip + {fused_word}]\n",
            "jne 90f\n",
            "lea r10, [r9 - {frame_words} - 1]\n",
            "lea rax, [rsp + PR_SLOT]\n",
            "cmp [rdi + r9*8 - ({frame_words} + 1) * 8 + FRAME_RETP], rax\n",
            "jne 90f\n",
            // rcx: the frame's function and depth, rotated: func << 16 |
            // depth; r8: the depth (the ring's is one more if nothing is
            // out of place).
            "mov rcx, [rdi + r10*8 + FRAME_FUNC]\n",
            "rol rcx, 16\n",
            "movzx r8d, cx\n",
            // Deeper than records can say: the general way records it
            // at 1023.
            "cmp r8d, {max_record_depth}\n",
            "jae 90f\n",
        ),
        // The record's word, {time, Exit | MAGIC | depth << 6 | func <<
        // 16}: 63 × depth and the bits add to rcx without carrying.
        concat!("imul rdx, r8, 63\n", "lea rcx, [rcx + rdx + {exit_bits}]\n",),
        "",
        // An abort: the sequence again (it only read before its commit).
        "shadowgraph_fused_plain_return_restart"
    ),
    "mov r11, [rdi + r10*8 + FRAME_RET]",
    crate::fixed_tls!("mov ", "qword", "tp_thread", "{t_curr}", ", r10"),
    "movq rdx, xmm9",
    "movq rax, xmm8",
    "push r11",
    "ret",
    "90:",
    "movq rdx, xmm9",
    "movq rax, xmm8",
    "jmp shadowgraph_site_return_general",
    ".popsection";
    tp_thread = sym fgraph::TP_THREAD,
    tp_rings = sym TP_RINGS,
    rseq_cs = sym RSEQ_CS,
    rseq_restarts = sym RSEQ_RESTARTS,
    fused_word = sym fgraph::SOLE_FRAME_WORD,
    no_frame_word = const fgraph::NO_FRAME_WORD as i64,
    t_stack = const offset_of!(ThreadState, stack),
    t_curr = const offset_of!(ThreadState, curr),
    t_blockers = const crate::fgraph::stack::BLOCKERS,
    hookable = const crate::fgraph::stack::HOOKABLE,
    r_offset_mask = const offset_of!(RingHeader, offset_mask),
    slot_shift = const crate::record::ring::SLOT_SHIFT,
    r_head = const offset_of!(RingHeader, head),
    r_room_end = const offset_of!(RingHeader, room_end),
    r_reserve = const offset_of!(RingHeader, reserve),
    header = const HEADER_BYTES,
    room_limit = sym crate::fgraph::stack::FAST_PUSH_LIMIT,
    frame_words = const crate::fgraph::stack::FRAME_WORDS,
    id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
    site_users = sym crate::fgraph::SITE_USERS,
    site_users_cap = const crate::fgraph::SITE_USERS_CAPACITY,
    entry_bits = const shadowgraph_data::format::MAGIC << 3,
    max_record_depth = const MAX_RECORD_DEPTH,
    // The users' bits (12..27) lie in the word's low half.
    exit_bits = const shadowgraph_data::format::MAGIC << 3 | 1,
);
