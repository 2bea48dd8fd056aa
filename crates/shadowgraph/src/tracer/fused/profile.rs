//! The site entry and return of a profile alone: the counters of the
//! function's row kept in the call's frame and in the thread's table.

use super::frame_asm::{
    bracket_leave, entry_head, entry_saves, entry_stack, frame_words, fused_layout, pop_frame,
    pop_saved, return_head, site_entry_end, site_return_general, thread_base, thread_op,
};
use super::variant_asm::{data_word, profile_frame_words};
use super::{MAX_RECORD_DEPTH, PROFILE_ROWS, TP_PROFILE};
use crate::fgraph::stack::ThreadState;
use crate::fgraph::{self, GraphUser};
use crate::ftrace::local::CoreLocal;
use crate::tracer::profile::{ProfileCounters, ProfileTable};
use std::mem::offset_of;

// A row is found by shifting its index ({row_shift}).
const _: () = assert!(std::mem::size_of::<ProfileCounters>().is_power_of_two());

crate::fgraph::graph_asm!(
    fused_layout!(),
    ".pushsection .text.shadowgraph_fused,\"ax\",@progbits",
    // The site stubs' entry and return for a profile alone (see
    // [`attach_profile`]). Entry: as the site entry above up to label 4
    // (the parent, most often a profile's frame: its DATA word last, 8
    // words), then, if this thread has a table with a row for the site
    // (else the general way makes it or counts the call), the row's call
    // counted under way, the frame with the profile's data {start,
    // children, id} and its DATA word, written whole before curr publishes
    // it and again after, the start time, and the user's BITMAP word.
    ".globl shadowgraph_fused_profile_entry",
    ".hidden shadowgraph_fused_profile_entry",
    "shadowgraph_fused_profile_entry:",
    "endbr64",
    entry_head!(
        concat!(data_word!("r10", "{data_three}"), "cmp rax, r10\n"),
        "(PROFILE_WORDS - 1)",
        "",
        crate::site_selects!("rsp + FE_CALL_RET", "dword ptr [rsi + {u_frame_word}]", "81f")
    ),
    // (fast_push_limit leaves room for the frame and its BITMAP word.)
    "lea rax, [r8 + PROFILE_WORDS - FRAME_WORDS - 1]",
    "cmp rax, [rip + {room_limit}]",
    "jae 81f",
    crate::fixed_load!("rax", "tp_profile"),
    "mov r11, qword ptr fs:[rax]",
    "test r11, r11",
    "jz 81f",
    "mov rdx, [rsp + FE_SITE]",
    "mov rax, r9",
    "shl rax, 48",
    "or rdx, rax",
    "mov r9, [rsp + FE_CALL_RET]",
    "mov r9d, dword ptr [r9 + {id_off}]",
    "cmp r9, [rip + {profile_rows}]",
    "jae 81f",
    "mov r11, [r11 + {pt_rows}]",
    "mov rax, r9",
    "shl rax, {row_shift}",
    // Under way from here, before the start time is read: a signal
    // handler landing in between has its calls of the same function
    // counted as nested (not in `outer`), though outside this call's time.
    "add qword ptr [r11 + rax + {pc_active}], 1",
    data_word!("r10", "{data_three}"),
    profile_frame_words!(),
    "lea rax, [r8 + PROFILE_WORDS]",
    "mov qword ptr fs:[rcx + {t_curr}], rax",
    profile_frame_words!(),
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "mov [rdi + r8*8 + PROF_START], rax",
    "mov rax, [rsi + {u_frame_word}]",
    "mov [rdi + r8*8 + FRAME_BITMAP], rax",
    site_entry_end!(),
    // Return: as the site return above, for a top frame this entry made
    // whose caller's frame (if any) is the profile's too and whose row is
    // in this thread's table (else the general way): d = now − start (0 if
    // the clock went back), the frame's users taken (as finish_frame), d
    // added to the caller's children and to the row, one instruction a
    // field, the frame popped.
    ".globl shadowgraph_fused_profile_return",
    ".hidden shadowgraph_fused_profile_return",
    "shadowgraph_fused_profile_return:",
    "endbr64",
    return_head!(""),
    "cmp r9, PROFILE_WORDS",
    "jb 91f",
    "mov rax, [rsi + {u_frame_word}]",
    "cmp [rdi + r9*8 - PROFILE_WORDS * 8 + FRAME_BITMAP], rax",
    "jne 91f",
    data_word!("rcx", "{data_three}"),
    "cmp [rdi + r9*8 - 8], rcx",
    "jne 91f",
    "lea r10, [r9 - PROFILE_WORDS]",
    "lea rax, [rsp + FR_SLOT]",
    "cmp [rdi + r10*8 + FRAME_RETP], rax",
    "jne 91f",
    // The caller's children (r11), 0: no caller.
    "xor r11d, r11d",
    "test r10, r10",
    "jz 2f",
    // The caller's DATA word: its frame the profile's.
    "cmp [rdi + r10*8 - 8], rcx",
    "jne 91f",
    "lea r11, [rdi + r10*8 - PROFILE_WORDS * 8 + PROF_CHILDREN]",
    "2:",
    // The row (rsi).
    crate::fixed_load!("rax", "tp_profile"),
    "mov rcx, qword ptr fs:[rax]",
    "test rcx, rcx",
    "jz 91f",
    "mov rsi, [rdi + r10*8 + PROF_ID]",
    "cmp rsi, [rip + {profile_rows}]",
    "jae 91f",
    "shl rsi, {row_shift}",
    "add rsi, [rcx + {pt_rows}]",
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "sub rax, [rdi + r10*8 + PROF_START]",
    "jnc 3f",
    "xor eax, eax",
    "3:",
    "and dword ptr [rdi + r10*8 + FRAME_BITMAP], {users_clear}",
    "test r11, r11",
    "jz 4f",
    "add [r11], rax",
    "4:",
    "add qword ptr [rsi + {pc_hits}], 1",
    "add [rsi + {pc_total}], rax",
    "mov rcx, rax",
    "sub rcx, [rdi + r10*8 + PROF_CHILDREN]",
    "jnc 5f",
    "xor ecx, ecx",
    "5:",
    "add [rsi + {pc_self}], rcx",
    "mov rcx, rax",
    "mul rax",
    "add [rsi + {pc_sumsq}], rax",
    "adc [rsi + {pc_sumsq} + 8], rdx",
    "sub qword ptr [rsi + {pc_active}], 1",
    "jnz 6f",
    "add [rsi + {pc_outer}], rcx",
    "6:",
    pop_frame!("push r11\nret\n"),
    site_return_general!(),
    ".popsection";
    row_shift = const std::mem::size_of::<ProfileCounters>().trailing_zeros(),
    tp_local = sym fgraph::TP_LOCAL,
    tp_thread = sym fgraph::TP_THREAD,
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
    room_limit = sym crate::fgraph::stack::FAST_PUSH_LIMIT,
    frame_words = const crate::fgraph::stack::FRAME_WORDS,
    site_users = sym crate::fgraph::SITE_USERS,
    site_users_cap = const crate::fgraph::SITE_USERS_CAPACITY,
    max_record_depth = const MAX_RECORD_DEPTH,
    // The users' bits (12..27) lie in the word's low half.
    users_clear = const !(0xffffu32 << 12),
    id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
    data_three = const crate::fgraph::stack::data(7, 0, 3),
    tp_profile = sym TP_PROFILE,
    profile_rows = sym PROFILE_ROWS,
    pt_rows = const offset_of!(ProfileTable, rows),
    pc_hits = const offset_of!(ProfileCounters, hits),
    pc_total = const offset_of!(ProfileCounters, total),
    pc_self = const offset_of!(ProfileCounters, self_time),
    pc_active = const offset_of!(ProfileCounters, active),
    pc_sumsq = const offset_of!(ProfileCounters, sumsq),
    pc_outer = const offset_of!(ProfileCounters, outer),
);
