//! Several recorders at once, fused: while two or more graph users are
//! registered and every one is a recorder of records timed by the TSC
//! that let this path stand in for it — a plain one, with its depth limit
//! or none (a ring gets no record of a call as deep as its limit:
//! [`let_multi_stand_in`]), or one with graph filters (`-F`, `-N`, `-D`,
//! or triggers that decide alone: [`let_multi_stand_in_filtered`],
//! multi_filters.rs), or
//! the one profile among them, whose counts the path keeps
//! ([`let_multi_stand_in_profile`], multi_profile.rs) —
//! fgraph's site entry and return hand a call over here
//! (`fgraph::register_multi_path`). One frame for all of them, one clock
//! read per entry and per exit that all their records share, and one
//! record in each recorder's ring that takes the call — no Rust code, no
//! callback per user. Anything unusual goes back to fgraph's site entry
//! and return, untouched. The path records no data: the calls of a site
//! where a recorder has some to record (or a trigger of its own) go the
//! general way, for every user (multi_users.rs, MULTI_CLASSES).
//!
//! The users and the frames' BITMAP word are fgraph's MULTI_FRAME_WORD
//! (their bits, the newest epoch), less the bits of users with graph
//! filters that declined the call: a frame with such a word is one the
//! general return would finish for each user it names, so either side
//! may take the other's frames. The path holds the bracket (grace periods
//! wait for it), so a user it found in fgraph's ARRAY, and the user's
//! rings, stay while it runs; a signal handler that lands in it runs
//! fgraph's general way inside the bracket and records where each ring
//! says the thread is (`Depth::Follow`), as it does inside the single
//! recorder's path.
//!
//! Time order per ring: the event is opened in the thread's event word
//! (`ThreadState::event_time`, as `clock::now_shared` shares one time
//! among callbacks) before its time is read, and each record takes that
//! time only while the word is as the path left it. A handler's event
//! opens and clears the word, so a record after one reads the clock
//! again: the handler's records in a ring, before ours, stay older than
//! ours.
//!
//! ```text
//! Entry (after entry_saves!, frame_asm's diagram; the bracket entered):
//!   rsi    MULTI_FRAME_WORD, then the users left to record (bits 0..15)
//!   xmm15  MULTI_FRAME_WORD, then a filtered user's slot
//!   rdi    the shadow stack    r8  the new frame (curr)   r9  its depth,
//!                                                             then the
//!                                                             entry word
//!   rcx    the record's word of the user being recorded (r9, or r9 at
//!          its own depth)      xmm14  a filtered user's thread variable
//!   r10    the event's time (2 before the first read: no word's value)
//!   r11    the ring of the user being recorded
//! Return (after return_head!: rax, rdx pushed; the bracket entered):
//!   rsi    MULTI_FRAME_WORD, then the frame's users left to record
//!   rdi    the shadow stack    r10 the returning frame    r8 the bracket
//!   rcx    the exit record's word (of the user being      word
//!          recorded)           xmm8 the exit's word, where users have
//!                              graph filters
//!   r9     the event's time (2 before the first read)
//!   r11    the ring of the user being recorded
//!   xmm14, xmm15  as at the entry
//! ```

use super::frame_asm::{
    bracket_leave, entry_saves, entry_stack, frame_words, fused_layout, pop_frame, pop_saved,
    return_head, thread_base, thread_op,
};
use super::multi_filters::{
    entry_late, entry_verdict, exit_late, exit_verdict, no_late, no_verdict,
};
use super::multi_profile::{
    entry_profile_check, entry_profile_frame, multi_profile_words, profile_found, profile_or_ring,
    return_profile_counts, return_profile_frame, return_profile_row, without_profile,
    MULTI_ANY_PROFILE, MULTI_PROFILE_CELL, MULTI_PROFILE_INST, MULTI_PROFILE_ROWS,
};
use super::multi_rings::{next_user, rings_with_room, skip_limited, user_ring};
use super::ring_asm::{commit_store, ring_publish, ring_write, rseq_abort, rseq_descriptor};
use super::watch::watch_cpus;
use super::{
    FusedFilter, MAX_RECORD_DEPTH, RSEQ_CS, RSEQ_RESTARTS, SPARE_RECORDS, TP_BY_SLOT, TP_RINGS_ALL,
};
use crate::clock;
use crate::fgraph;
use crate::fgraph::stack::ThreadState;
use crate::ftrace::local::CoreLocal;
use crate::record::ring::{RingHeader, HEADER_BYTES};
use crate::record::writer::BySlot;
use crate::tracer::profile::{ProfileCounters, ProfileTable};
use std::mem::offset_of;

// The TSC in `$time` (and rax). Clobbers rdx.
macro_rules! clock_into {
    ($time:literal) => {
        concat!(
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "mov ",
            $time,
            ", rax\n",
        )
    };
}

// The new frame's function word {func | depth << 48} in rdx, from the
// stub's site (FE_SITE) and the depth r9. Clobbers rax.
macro_rules! frame_func_word {
    () => {
        concat!(
            "mov rdx, [rsp + FE_SITE]\n",
            "mov rax, r9\n",
            "shl rax, 48\n",
            "or rdx, rax\n",
        )
    };
}

// The entry record's word {Entry | MAGIC | depth << 6 | func << 16} in r9,
// from the frame's function word rdx (the shift drops the depth) and the
// depth r9.
macro_rules! entry_word {
    () => {
        concat!(
            "shl rdx, 16\n",
            "shl r9, 6\n",
            "or r9, rdx\n",
            "or r9, {entry_bits}\n",
        )
    };
}

// The clock read before the first restartable sequence (record_each!):
// the entry's, unless its event has a time already (`$time` not 2: a
// profile's entry read it).
macro_rules! entry_clock {
    ($time:literal) => {
        concat!("cmp ", $time, ", 2\n", "jne 31f\n", clock_into!($time))
    };
}

// A record {`$time`, rcx} in the ring of each user of rsi (a frame's
// BITMAP word, consumed: bits 12..27) that `$verdict` (entry_verdict! or
// exit_verdict!, with `$base`, the event's word, which rcx holds) lets
// record, then `$late` (entry_late! or exit_late!), as found now (a user
// that left since stays until the bracket is left, its rings until it
// has ended; one no longer in ARRAY gets none). A ring short of the room
// kept spare for signal handlers sets the thread's rings' word 0, so
// that the next event goes the general way (rings_with_room!), which
// waits for room, and takes this record by exchanged_record! in the room
// there is (without rseq as with); one full after all (signal handlers
// filled it) counts the record lost, as the general way counts what it
// cannot store. `$depth` sets dx after a slot's step (ring_asm's
// ring_claim). The thread's event word is open.
//
// With rseq: the clock read once, before the first sequence is armed,
// then in each ring one restartable sequence, armed before the ring is
// looked up (the user's verdict before it: it jumps out of line), that
// ends with the store of its `head` and `reserve` that claims and
// publishes the record (ring_asm's ring_record); the user's bit leaves
// rsi after it. An abort starts the ring's sequence again.
// (The order is for speed: a clock read or a ring lookup right after
// the arming store makes the path about half again slower.) The time is
// the event's while the event word is still open: a signal handler's
// event, which may have recorded in the rings since the time was read,
// leaves it 0, and each sequence after one reads the clock in it (the
// handler's records, before ours in a ring, are then older than ours).
//
// Without: each ring's record by exchanged_record! (labels `$one`_*),
// the time shared through the thread's event word.
//
// Labels `$name`_*, `$one`_*, 30–39; clobbers rax, rdx, rsi, r11, xmm13–15.
macro_rules! record_each {
    ($name:literal, $one:literal, $over:literal, $time:literal, $base:literal, $depth:literal, $verdict:ident, $late:ident, $clock:expr) => {
        concat!(
            "shr rsi, 12\n",
            "and esi, 0xffff\n",
            crate::fixed_load!("rdx", "rseq_cs"),
            "test rdx, rdx\n",
            "jz ",
            $name,
            "_each\n",
            $clock,
            "31:\n",
            "test esi, esi\n",
            "jz 39f\n",
            $verdict!(
                $name,
                $base,
                concat!(
                    "bsf rax, rsi\n",
                    "lea rdx, [rip + {array}]\n",
                    "cmp qword ptr [rdx + rax*8], 0\n",
                    "je ",
                    $name,
                    "_skip\n"
                )
            ),
            $name,
            "_restart:\n",
            crate::fixed_load!("rdx", "rseq_cs"),
            "lea rax, [rip + ",
            $name,
            "_cs]\n",
            "mov qword ptr fs:[rdx], rax\n",
            $name,
            "_start:\n",
            "bsf rax, rsi\n",
            "lea rdx, [rip + {array}]\n",
            "cmp qword ptr [rdx + rax*8], 0\n",
            "je ",
            $name,
            "_skip\n",
            skip_limited!("rcx", concat!($name, "_skip")),
            crate::fixed_load!("rdx", "tp_by_slot"),
            "mov r11, qword ptr fs:[rdx + rax*8 + {b_rings}]\n",
            crate::fixed_load!("rdx", "tp_thread"),
            "cmp qword ptr fs:[rdx + {t_event}], {event_open}\n",
            "je 33f\n",
            // (Or the event's time, put there for a record out of the
            // sequence, `_over`.)
            "cmp qword ptr fs:[rdx + {t_event}], ",
            $time,
            "\n",
            "je 33f\n",
            clock_into!($time),
            "33:\n",
            "mov rax, [r11 + {r_reserve}]\n",
            "lea rdx, [rax + {margin}]\n",
            "cmp rdx, [r11 + {r_room_end}]\n",
            "jae ",
            $name,
            "_over\n",
            ring_write!($time, "rcx"),
            commit_store!($depth),
            $name,
            "_post:\n",
            $name,
            "_kept:\n",
            $late!($name, $base),
            $name,
            "_skip:\n",
            "lea rdx, [rsi - 1]\n",
            "and rsi, rdx\n",
            "jmp 31b\n",
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            rseq_abort!($name),
            // Short of room to spare: the word 0, so that the next event
            // looks at the rings' room again (and goes the general way,
            // which waits for room); this record by exchanged_record!,
            // out of the sequence, in the room there is.
            $name,
            "_over:\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "mov qword ptr fs:[rdx + {b_word}], 0\n",
            // The event's time into its word, if no handler's event came
            // since (the word still open), by one exchange: the record
            // below takes it, as the other rings' records did, rather than
            // a time of its own.
            crate::fixed_load!("rdx", "tp_thread"),
            "mov eax, {event_open}\n",
            "cmpxchg qword ptr fs:[rdx + {t_event}], ",
            $time,
            "\n",
            exchanged_record!($over, "37f", $time, "rcx", $depth),
            "jmp ",
            $name,
            "_kept\n",
            // Full: counted lost.
            $name,
            "_full:\n",
            "37:\n",
            "lock inc qword ptr [r11 + {r_lost}]\n",
            "jmp ",
            $name,
            "_kept\n",
            ".popsection\n",
            rseq_descriptor!($name),
            $name,
            "_each:\n",
            "30:\n",
            $one,
            "_skip:\n",
            "test esi, esi\n",
            "jz 39f\n",
            next_user!("rsi"),
            "lea rdx, [rip + {array}]\n",
            "cmp qword ptr [rdx + rax*8], 0\n",
            "je 30b\n",
            skip_limited!("rcx", "30b"),
            $verdict!($one, $base, ""),
            crate::fixed_load!("rdx", "tp_by_slot"),
            "mov r11, qword ptr fs:[rdx + rax*8 + {b_rings}]\n",
            "mov rax, [r11 + {r_reserve}]\n",
            "add rax, {margin}\n",
            "cmp rax, [r11 + {r_room_end}]\n",
            "jb 36f\n",
            "mov qword ptr fs:[rdx + {b_word}], 0\n",
            "36:\n",
            exchanged_record!($one, "35f", $time, "rcx", $depth),
            $one,
            "_kept:\n",
            $late!($one, $base),
            "jmp 30b\n",
            "35:\n",
            "lock inc qword ptr [r11 + {r_lost}]\n",
            "jmp ",
            $one,
            "_kept\n",
            "39:\n",
        )
    };
}

// A record {`$time`, `$word`} in ring r11 at rest (`reserve` equals
// `head`: no writer of this thread is between a claim and its publish),
// without rseq, `$depth` setting dx after the slot's step (ring_asm's
// ring_claim): `reserve` read first (a handler that records in this ring
// after it makes the claim fail), then the time: the event's if the word
// still holds it, else read between the word opened and the word taken
// by one exchange (a handler's event in between leaves it 0: the time is
// read again); the slot claimed by `cmpxchg`, then ring_write and
// ring_publish. Without room: to `$full`. Labels `$name`_*; clobbers
// rax, rdx, xmm13 and the flags.
macro_rules! exchanged_record {
    ($name:literal, $full:literal, $time:literal, $word:literal, $depth:literal) => {
        concat!(
            $name,
            "_again:\n",
            "mov rax, [r11 + {r_reserve}]\n",
            "cmp rax, [r11 + {r_room_end}]\n",
            "jae ",
            $full,
            "\n",
            "movq xmm13, rax\n",
            crate::fixed_load!("rdx", "tp_thread"),
            "cmp ",
            $time,
            ", qword ptr fs:[rdx + {t_event}]\n",
            "je ",
            $name,
            "_timed\n",
            "mov qword ptr fs:[rdx + {t_event}], {event_open}\n",
            clock_into!($time),
            crate::fixed_load!("rdx", "tp_thread"),
            "mov eax, {event_open}\n",
            "cmpxchg qword ptr fs:[rdx + {t_event}], ",
            $time,
            "\n",
            "jne ",
            $name,
            "_again\n",
            $name,
            "_timed:\n",
            "movq rax, xmm13\n",
            "lea rdx, [rax + (1 << {slot_shift})]\n",
            $depth,
            "cmpxchg qword ptr [r11 + {r_reserve}], rdx\n",
            "jne ",
            $name,
            "_again\n",
            ring_write!($time, $word),
            ring_publish!(concat!($name, "_done")),
            $name,
            "_done:\n",
        )
    };
}

crate::fgraph::graph_asm!(
    fused_layout!(),
    ".pushsection .text.shadowgraph_fused,\"ax\",@progbits",
    // Entry. Register contract: fgraph's site entry's (a stub's `call
    // [ENTRY]`: [rsp] = stub + 13, [rsp + 8] = R, r11 the site, every
    // argument register live), jumped to from its first instruction.
    // Returns with ZF=1 if the call was hooked, ZF=0 if not, every
    // argument register restored; anything else goes to
    // `shadowgraph_graph_site_entry_body` as if never here.
    ".p2align 6",
    ".globl shadowgraph_fused_multi_entry",
    ".hidden shadowgraph_fused_multi_entry",
    "shadowgraph_fused_multi_entry:",
    "endbr64",
    entry_saves!(),
    // At rest: a bracket word, depth 0, no recursion bit; then the
    // bracket, anchored at the return slot.
    crate::fixed_load!("rcx", "tp_local"),
    "mov rdx, qword ptr fs:[rcx + {l_word}]",
    "test rdx, rdx",
    "jz 80f",
    "test word ptr [rdx], 0xffff",
    "jnz 80f",
    "cmp dword ptr fs:[rcx + {l_rec}], 0",
    "jne 80f",
    "lea rax, [rsp + FE_PARENT_SLOT]",
    crate::bracket_enter_at_rest!("rcx", "rdx"),
    entry_stack!(
        concat!(
            "mov rsi, [rip + {multi_word}]\n",
            "cmp rsi, {no_frame_word}\n",
            "je 81f\n"
        ),
        "cmp rax, rsi\n",
        "{frame_words}",
        "",
        "81f",
        reg,
        "FE_PARENT_SLOT",
        ""
    ),
    // Room for the frame, else the general way counts an overrun.
    "cmp r8, [rip + {room_limit}]",
    "jae 81f",
    "movq xmm15, rsi",
    // Every user's ring on this thread, with room to spare when found.
    "mov r10, rsi",
    rings_with_room!("r10", "81f"),
    // The users the site's filter selects (fgraph's site masks), the
    // others' bits out of the word; none (a site being set back to a
    // nop), or a site without a mask: the general way.
    crate::site_mask!("rsp + FE_CALL_RET", "81f"),
    "shl eax, 12",
    "or rax, {not_users}",
    "and rsi, rax",
    "test esi, {users_bits}",
    "jz 81f",
    "movq xmm15, rsi",
    "cmp byte ptr [rip + {any_filter}], 0",
    "jne 85f",
    "86:",
    entry_profile_check!(),
    // The frame {R, func | depth << 48, slot, the users' BITMAP word},
    // written whole before curr publishes it and again after
    // (fused_entry's way). Theirs before any record: a handler that
    // lands among the records and leaves by siglongjmp leaves a frame
    // that is reported to each as unwound, and each recorder writes its
    // exit if its ring holds the entry (emit_exit, by the ring's depth).
    frame_func_word!(),
    frame_words!("FE_PARENT_SLOT", "[rdi + r8*8 + FRAME_BITMAP], rsi"),
    "lea rax, [r8 + {frame_words} + 1]",
    "mov qword ptr fs:[rcx + {t_curr}], rax",
    frame_words!("FE_PARENT_SLOT", "[rdi + r8*8 + FRAME_BITMAP], rsi"),
    // The entry record's word, from the frame's.
    entry_word!(),
    // The event opened, no time yet.
    "mov qword ptr fs:[rcx + {t_event}], {event_open}",
    "mov r10d, 2",
    // A record in each user's ring.
    "movq rsi, xmm15",
    "62:",
    "mov rcx, r9",
    "cmp byte ptr [rip + {any_filter}], 0",
    "jne 87f",
    record_each!(
        "shadowgraph_fused_multi_entry_records",
        "shadowgraph_fused_multi_entry_record",
        "shadowgraph_fused_multi_entry_over",
        "r10",
        "r9",
        "mov dx, cx\nshr dx, 6\ninc dx\n",
        no_verdict,
        no_late,
        entry_clock!("r10")
    ),
    // The event closed; hooked.
    "88:",
    crate::fixed_load!("rcx", "tp_thread"),
    "mov qword ptr fs:[rcx + {t_event}], 0",
    bracket_leave!(),
    "cmp rsp, rsp",
    pop_saved!(),
    "ret",
    // A user with graph filters among them, ever (MULTI_ANY_FILTER): a
    // site every user's graph filters have a class for and none leaves
    // to the callbacks (at 84), and the frame's users those without
    // filters (the others' bits come with their decisions: entry_late!).
    ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits",
    "85:",
    "mov rax, [rsp + FE_CALL_RET]",
    "mov eax, dword ptr [rax + {id_off}]",
    "cmp rax, [rip + {filter_sites}]",
    "jae 81f",
    crate::fixed_load!("rdx", "tp_by_slot"),
    "mov rdx, qword ptr fs:[rdx + {b_general}]",
    "and rdx, rsi",
    "shr rdx, 12",
    "and edx, 0xffff",
    "jnz 84f",
    "89:",
    crate::fixed_load!("rdx", "tp_by_slot"),
    "mov rdx, qword ptr fs:[rdx + {b_watch}]",
    "and rdx, rsi",
    "shr rdx, 12",
    "and edx, 0xffff",
    "jnz 44f",
    "45:",
    crate::fixed_load!("rdx", "tp_by_slot"),
    "mov rax, qword ptr fs:[rdx + {b_late}]",
    "not rax",
    "and rsi, rax",
    "jmp 86b",
    // Users that write `watch:cpu` events (BySlot's `watch`) in rdx:
    // the general way unless the thread is on the processor each one's
    // last event named (watch.rs), as the single filtered path does.
    "44:",
    watch_cpus!("rdx", "r10", "81f"),
    "jmp 45b",
    // Users whose calls of some sites go to the callbacks (BySlot's
    // `general`) in rdx, bits 0..15: the general way if the site is one
    // of those (the GENERAL class in the user's MULTI_CLASSES: a
    // trigger's own function, arguments or a return value to record), as
    // the single filtered path sends it (general.rs, label 40). (An
    // instance whose recorder left may have no table: none to look at;
    // or a newer recorder's: either way is exact, the general way only
    // slower.)
    "84:",
    "bsf r10, rdx",
    "lea r11, [rip + {slot_private}]",
    "mov r11, [r11 + r10*8]",
    "lea r10, [rip + {multi_classes}]",
    "mov r10, [r10 + r11*8]",
    "test r10, r10",
    "jz 83f",
    "test byte ptr [r10 + rax], {general}",
    "jnz 81f",
    "83:",
    "lea r10, [rdx - 1]",
    "and rdx, r10",
    "jnz 84b",
    "jmp 89b",
    // A profile frame (multi_profile.rs).
    entry_profile_frame!(),
    ".popsection",
    // Their records, each user's verdict first (not in the cold section:
    // their own cold parts go there); hooked if a user kept the frame
    // (graph filters may all have declined it: popped).
    "87:",
    "pxor xmm14, xmm14",
    record_each!(
        "shadowgraph_fused_multi_entry_records_v",
        "shadowgraph_fused_multi_entry_record_v",
        "shadowgraph_fused_multi_entry_over_v",
        "r10",
        "r9",
        "mov dx, cx\nshr dx, 6\ninc dx\n",
        entry_verdict,
        entry_late,
        entry_clock!("r10")
    ),
    crate::fixed_load!("rcx", "tp_thread"),
    "test dword ptr [rdi + r8*8 + FRAME_BITMAP], {users_bits}",
    "jnz 88b",
    "mov qword ptr fs:[rcx + {t_event}], 0",
    "mov qword ptr fs:[rcx + {t_curr}], r8",
    bracket_leave!(),
    "test rsp, rsp",
    pop_saved!(),
    "ret",
    // The general way: from 81 with the bracket entered, from 80 as at
    // entry.
    "81:",
    bracket_leave!(),
    "80:",
    pop_saved!(),
    "jmp shadowgraph_graph_site_entry_body",
    // Return. Register contract: fgraph's site return's (a stub's `jmp
    // [RETURN]` at its return point: rsp = the returning call's slot + 8,
    // rax/rdx/xmm0/xmm1 the result, the other caller-saved registers
    // dead), jumped to from its first instruction. Resumes at the real
    // return address by `ret` with the result and rsp restored; anything
    // else goes to `shadowgraph_site_return_body` as if never here.
    ".p2align 6",
    ".globl shadowgraph_fused_multi_return",
    ".hidden shadowgraph_fused_multi_return",
    "shadowgraph_fused_multi_return:",
    "endbr64",
    return_head!(""),
    // The top frame f (r10) is the returning call's (its slot) and kept
    // for these users (its last word MULTI_FRAME_WORD).
    "cmp r9, {frame_words} + 1",
    "jb 91f",
    "mov rax, [rdi + r9*8 - 8]",
    "cmp rax, rsi",
    "jne 93f",
    "94:",
    "lea r10, [r9 - {frame_words} - 1]",
    "pxor xmm9, xmm9",
    // (From 93 too: a profile frame, xmm9 1.)
    "70:",
    "lea rax, [rsp + FR_SLOT]",
    "cmp [rdi + r10*8 + FRAME_RETP], rax",
    "jne 91f",
    // Every user still there with its ring, as the entry's.
    "mov rcx, rsi",
    rings_with_room!("rcx", "91f"),
    "cmp byte ptr [rip + {any_filter}], 0",
    "jne 54f",
    "53:",
    "cmp byte ptr [rip + {any_profile}], 0",
    "jne 71f",
    "72:",
    // The exit record's word {Exit | MAGIC | depth << 6 | func << 16}
    // from the frame's; deeper than records can say: the general way
    // records it at 1023.
    "mov rcx, [rdi + r10*8 + FRAME_FUNC]",
    "mov rdx, rcx",
    "shr rdx, 48",
    "cmp edx, {max_record_depth}",
    "jae 91f",
    "shl rdx, 6",
    "shl rcx, 16",
    "or rcx, rdx",
    "or rcx, {exit_bits}",
    crate::fixed_load!("rdx", "tp_thread"),
    "mov qword ptr fs:[rdx + {t_event}], {event_open}",
    "mov r9d, 2",
    // The frame's users (those its site selected: some of the word's).
    "mov rsi, [rdi + r10*8 + FRAME_BITMAP]",
    without_profile!(),
    "cmp byte ptr [rip + {any_filter}], 0",
    "jne 97f",
    record_each!(
        "shadowgraph_fused_multi_exit_records",
        "shadowgraph_fused_multi_exit_record",
        "shadowgraph_fused_multi_exit_over",
        "r9",
        "rcx",
        "mov dx, cx\nshr dx, 6\n",
        no_verdict,
        no_late,
        clock_into!("r9")
    ),
    "98:",
    // The frame's users taken once every exit is in (a handler that lands
    // before and leaves by siglongjmp finds the frame still theirs: each
    // user's callback, seeing its exit in its ring by the ring's depth,
    // writes no second one), the event closed; the frame popped.
    crate::fixed_load!("rdx", "tp_thread"),
    "mov qword ptr fs:[rdx + {t_event}], 0",
    "and dword ptr [rdi + r10*8 + FRAME_BITMAP], {users_clear}",
    "cmp byte ptr [rip + {any_profile}], 0",
    "jne 76f",
    "77:",
    pop_frame!("push r11\nret\n"),
    // With a user with graph filters, ever: a record in
    // the ring of each user the frame names, each user's verdict first
    // (as the entry's, not in the cold section).
    "97:",
    "movq xmm8, rcx",
    "mov rsi, [rdi + r10*8 + FRAME_BITMAP]",
    without_profile!(),
    "pxor xmm14, xmm14",
    record_each!(
        "shadowgraph_fused_multi_exit_records_v",
        "shadowgraph_fused_multi_exit_record_v",
        "shadowgraph_fused_multi_exit_over_v",
        "r9",
        "xmm8",
        "mov dx, cx\nshr dx, 6\n",
        exit_verdict,
        exit_late,
        clock_into!("r9")
    ),
    "jmp 98b",
    // A frame that names some of the users (graph filters declined it
    // for the others): its word otherwise the same.
    ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits",
    // The frame's users that write `watch:cpu` events, as at the entry.
    "54:",
    crate::fixed_load!("rdx", "tp_by_slot"),
    "mov rdx, qword ptr fs:[rdx + {b_watch}]",
    "and rdx, [rdi + r10*8 + FRAME_BITMAP]",
    "shr rdx, 12",
    "and edx, 0xffff",
    "jz 53b",
    watch_cpus!("rdx", "rcx", "91f"),
    "jmp 53b",
    "93:",
    return_profile_frame!(),
    "xor rax, rsi",
    "mov rdx, rsi",
    "and rdx, {users_bits}",
    "not rdx",
    "test rax, rdx",
    "jz 94b",
    "jmp 91f",
    // A profile frame's row and its caller's children; its counts.
    return_profile_row!(),
    return_profile_counts!(),
    ".popsection",
    "91:",
    bracket_leave!(),
    "90:",
    "pop rdx",
    "pop rax",
    "jmp shadowgraph_site_return_body",
    ".popsection";
    tp_local = sym fgraph::TP_LOCAL,
    tp_thread = sym fgraph::TP_THREAD,
    tp_rings_all = sym TP_RINGS_ALL,
    tp_by_slot = sym TP_BY_SLOT,
    b_word = const offset_of!(BySlot, word),
    b_rings = const offset_of!(BySlot, rings),
    margin = const SPARE_RECORDS << crate::record::ring::SLOT_SHIFT,
    rseq_cs = sym RSEQ_CS,
    rseq_restarts = sym RSEQ_RESTARTS,
    fused = sym fgraph::MULTI_FRAME_WORD,
    multi_word = sym fgraph::MULTI_FRAME_WORD,
    no_frame_word = const fgraph::NO_FRAME_WORD as i64,
    array = sym fgraph::ARRAY,
    slot_private = sym fgraph::SLOT_PRIVATE,
    any_filter = sym super::multi_users::MULTI_ANY_FILTER,
    any_limit = sym super::multi_users::MULTI_ANY_LIMIT,
    max_depth = sym super::multi_users::MULTI_MAX_DEPTH,
    multi_filter = sym super::multi_users::MULTI_FILTER,
    multi_classes = sym super::multi_users::MULTI_CLASSES,
    b_general = const offset_of!(BySlot, general),
    b_watch = const offset_of!(BySlot, watch),
    f_watch = const offset_of!(FusedFilter, watch),
    tp_watched_all = sym super::watch::TP_WATCHED_ALL,
    general = const super::GENERAL,
    f_switch = const offset_of!(FusedFilter, switch),
    f_limit = const offset_of!(FusedFilter, limit),
    switch_on = const crate::fgraph::triggers::Triggers::ON,
    switch_finished = const crate::fgraph::triggers::Triggers::FINISHED,
    filter_sites = sym super::multi_users::MULTI_FILTER_SITES,
    b_late = const offset_of!(BySlot, late),
    b_profile = const offset_of!(BySlot, profile),
    b_profile_data = const offset_of!(BySlot, profile_data),
    any_profile = sym MULTI_ANY_PROFILE,
    profile_inst = sym MULTI_PROFILE_INST,
    profile_cell = sym MULTI_PROFILE_CELL,
    profile_rows = sym MULTI_PROFILE_ROWS,
    data_three = const crate::fgraph::stack::data(7, 0, 3),
    row_shift = const std::mem::size_of::<ProfileCounters>().trailing_zeros(),
    pt_rows = const offset_of!(ProfileTable, rows),
    pc_hits = const offset_of!(ProfileCounters, hits),
    pc_total = const offset_of!(ProfileCounters, total),
    pc_self = const offset_of!(ProfileCounters, self_time),
    pc_active = const offset_of!(ProfileCounters, active),
    pc_sumsq = const offset_of!(ProfileCounters, sumsq),
    pc_outer = const offset_of!(ProfileCounters, outer),
    site_users = sym fgraph::SITE_USERS,
    site_users_cap = const fgraph::SITE_USERS_CAPACITY,
    // Every bit but the users' (a sign-extended 32-bit operand).
    not_users = const !(0xffffi64 << 12),
    id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
    tv = const crate::fgraph::stack::TASK_VAR_BASE * 8,
    f_classes = const offset_of!(FusedFilter, classes),
    f_functions = const offset_of!(FusedFilter, has_functions),
    f_max_depth = const offset_of!(FusedFilter, max_depth),
    notrace_bit = const crate::fgraph::filters::NOTRACE_BIT,
    in_graph_bit = const crate::fgraph::filters::IN_GRAPH_BIT,
    graph_depth_shift = const crate::fgraph::filters::GRAPH_DEPTH_SHIFT,
    // The record word's depth (bits 6..15) cleared.
    not_depth = const !(0x3ffi64 << 6),
    users_bits = const 0xffffu32 << 12,
    l_word = const offset_of!(CoreLocal, word),
    l_rec = const offset_of!(CoreLocal, rec),
    l_anchor = const offset_of!(CoreLocal, outer_anchor),
    t_stack = const offset_of!(ThreadState, stack),
    t_curr = const offset_of!(ThreadState, curr),
    t_event = const offset_of!(ThreadState, event_time),
    t_blockers = const crate::fgraph::stack::BLOCKERS,
    hookable = const crate::fgraph::stack::HOOKABLE,
    r_offset_mask = const offset_of!(RingHeader, offset_mask),
    slot_shift = const crate::record::ring::SLOT_SHIFT,
    r_head = const offset_of!(RingHeader, head),
    r_room_end = const offset_of!(RingHeader, room_end),
    r_reserve = const offset_of!(RingHeader, reserve),
    r_lost = const offset_of!(RingHeader, lost),
    header = const HEADER_BYTES,
    room_limit = sym crate::fgraph::stack::FAST_PUSH_LIMIT,
    frame_words = const crate::fgraph::stack::FRAME_WORDS,
    entry_bits = const shadowgraph_data::format::MAGIC << 3,
    max_record_depth = const MAX_RECORD_DEPTH,
    event_open = const clock::EVENT_OPEN,
    // The users' bits (12..27) lie in the word's low half.
    users_clear = const !(0xffffu32 << 12),
    exit_bits = const shadowgraph_data::format::MAGIC << 3 | 1,
);
