//! The fused paths of a recorder alone, general form: the entry the
//! manager's trampolines hand over to and the return `return_to_handler`
//! tries first, and the entry and return of site stubs (for a depth limit
//! and for graph filters).

use super::args_asm::{args_entry_record, args_layout, retval_exit_record};
use super::frame_asm::{
    bracket_leave, declined_exit, depth_limits, entry_head, entry_saves, entry_stack, exit_record,
    frame_words, fused_entry, fused_layout, fused_return, pop_frame, pop_saved, return_head,
    thread_base, thread_op,
};
use super::ring_asm::{
    commit_store, reserve_and_time, ring_claim, ring_publish, ring_record, ring_write, rseq_abort,
    rseq_arm, rseq_commit, rseq_descriptor,
};
use super::watch::watch_same_cpu;
use super::{
    FusedFilter, MAX_RECORD_DEPTH, RSEQ_CS, RSEQ_RESTARTS, TP_RINGS, W_FILTER, W_MAX_DEPTH,
};
use crate::fgraph::stack::ThreadState;
use crate::fgraph::{self, GraphUser};
use crate::ftrace::local::CoreLocal;
use crate::record::ring::{RingHeader, HEADER_BYTES};
use std::mem::offset_of;

// The entry, then the return (its register contract below, with it).
//
// Entry. Register contract: reached by the manager's stub from a site's
// call: [rsp] = site+5, [rsp+8] = R (the traced function's return
// address), r11 = the stub's data (the manager's ops slot in that arena);
// every argument register (rdi rsi rdx rcx r8 r9, rax, r10, xmm0–7) is
// live. The fast path saves the nine general registers it uses (four on
// the stack, five in xmm8–12: see entry_head), touches no other xmm
// register, and returns to site+5 with all of them restored; after the
// pushes [rsp + FE_CALL_RET] = site+5 and [rsp + FE_PARENT_SLOT] = R, the
// return slot (frame_asm's diagram). Anything else pops them and jumps to
// `shadowgraph_fused_general`, the manager's usual caller (args variant)
// with the ops slot taken from r11.
crate::fgraph::graph_asm!(
    fused_layout!(),
    args_layout!(),
    ".pushsection .text.shadowgraph_fused,\"ax\",@progbits",
    ".globl shadowgraph_fused_entry",
    ".hidden shadowgraph_fused_entry",
    "shadowgraph_fused_entry:",
    "endbr64",
    fused_entry!(
        "shadowgraph_fused_entry_record",
        "mov rdx, [rsp + FE_CALL_RET]\nsub rdx, SITE_CALL_LEN\n",
        "lea rax, [rip + shadowgraph_return_to_handler]\nmov [rsp + FE_PARENT_SLOT], rax\n",
        "",
        declined_exit!(""),
        depth_limits!("js 81f\n"),
        ""
    ),
    "jmp shadowgraph_fused_general",
    // The manager's caller (tramp.rs, args variant), with the ops slot
    // from r11 kept in the frame's spare word across save_args.
    ".globl shadowgraph_fused_general",
    ".hidden shadowgraph_fused_general",
    "shadowgraph_fused_general:",
    crate::tramp::prologue!(),
    "mov [rsp + REGS_SPARE], r11",
    crate::tramp::save_args!(),
    "mov rdi, rsp",
    "mov rsi, [rsp + REGS_SPARE]",
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
    fused_return!(
        "shadowgraph_fused_return_record",
        "jmp r11\n",
        "cmp qword ptr [rsi + {u_filter}], 0\njne 91f\n"
    ),
    "jmp shadowgraph_return_general",
    // Site stubs (tramp.rs). Entry: register contract as above, reached by
    // a stub's `call [ENTRY]`, so [rsp] = stub+13, r11 = the site (saved
    // last: [rsp] after the pushes), its id and the ops slot are the
    // stub's literals (the general way takes the slot from the stub). The
    // return is not taken over here: the stub calls the body itself when
    // the entry returns with ZF=1 (a frame was pushed), and runs it
    // untouched with ZF=0. Every argument register is restored either way.
    ".globl shadowgraph_fused_site_entry",
    ".hidden shadowgraph_fused_site_entry",
    "shadowgraph_fused_site_entry:",
    "endbr64",
    fused_entry!(
        "shadowgraph_fused_site_entry_record",
        "mov rdx, [rsp + FE_SITE]\n",
        "",
        "cmp rsp, rsp\n",
        declined_exit!("test rsp, rsp\n"),
        depth_limits!("js 40f\n"),
        crate::site_selects!("rsp + FE_CALL_RET", "dword ptr [rsi + {u_frame_word}]", "81f")
    ),
    "jmp shadowgraph_graph_site_entry",
    // A recorder with graph filters (`-F`, `-N`, `-D`: fgraph::filters,
    // whose thread variable it keeps the same way): from label 4 with the
    // filter in rax, the registers as there (rcx the thread state's
    // offset, rsi the user, rdi the stack, r8 curr, r9 fgraph's depth, r11
    // the ring). The site's class (bit 0: a -F function, bit 1: -N, bit 2:
    // the general way) from the filter's table by the stub's site id;
    // sites it does not know (loaded later) go the general way.
    "40:",
    "mov rax, [rsi + {u_filter}]",
    "mov rdx, [rsp + FE_CALL_RET]",
    "mov edx, dword ptr [rdx + {id_off}]",
    "cmp rdx, [rax + {f_len}]",
    "jae 81b",
    "mov r10, [rax + {f_classes}]",
    "movzx r10d, byte ptr [r10 + rdx]",
    "test r10d, {general}",
    "jnz 81b",
    // The site's argument descriptor (0: none; xmm15 is free at a
    // function's entry, as xmm13).
    "pxor xmm15, xmm15",
    "test r10d, {fast_args}",
    "jnz 44f",
    "49:",
    // A recorder with triggers (FusedFilter::switch): their variable
    // decides (at 72).
    "cmp qword ptr [rax + {f_switch}], 0",
    "jne 72f",
    // The user's thread variable v (rdx), by the user's slot.
    "movsxd rdx, dword ptr [rsi + {u_slot}]",
    "mov rdx, [rdi + rdx*8 + {tv}]",
    "bt rdx, {notrace_bit}",
    "jc 83b", // inside a -N call: declined
    "test r10d, 2",
    "jnz 45f", // a -N function: kept, silent
    "cmp qword ptr [rax + {f_functions}], 0",
    "je 42f",
    "bt rdx, {in_graph_bit}",
    "jc 42f",
    "test r10d, 1",
    "jz 83b", // outside every -F call: declined
    // A -F function starts the recorded subtree at the own depth.
    "movzx r10d, dx",
    "shl r10, {graph_depth_shift}",
    "movabs rcx, {not_graph_depth}",
    "and rdx, rcx",
    "or rdx, r10",
    "bts rdx, {in_graph_bit}",
    "42:",
    "mov r10, [rax + {f_max_depth}]",
    "test r10, r10",
    "jz 43f",
    "movzx ecx, dx",
    "cmp rcx, r10",
    "jae 83b", // -D: too deep
    "43:",
    // Deeper than records can say: the general way records it at 1023.
    "cmp dx, {max_record_depth}",
    "jae 81b",
    // Recorded at the own depth; v's own depth + 1 once the record is in.
    "inc rdx",
    "mov r10, rdx",
    "call 46f",
    // (From 72 too, the frame pushed and the variable in r10.)
    "74:",
    // The entry record (the ring still in r11).
    "mov rcx, [rsp]",
    "shl rcx, 16",
    "movzx edx, r10w",
    "dec edx",
    "shl rdx, 6",
    "or rcx, rdx",
    "or rcx, {entry_bits}",
    "movq rax, xmm15",
    "test rax, rax",
    "jnz 60f",
    ring_record!(
        "shadowgraph_fused_filtered_entry",
        "82b",
        "r9",
        "rcx",
        "mov dx, r10w\n",
        ""
    ),
    "jmp 47f",
    // With the site's arguments after it (args_asm.rs).
    args_entry_record!("shadowgraph_fused_args_entry"),
    // (Out of the way: the descriptor, by the site id in rdx.)
    ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits",
    "44:",
    "mov rcx, [rax + {f_args}]",
    "movq xmm15, qword ptr [rcx + rdx*8]",
    "jmp 49b",
    // `watch:cpu` (watch.rs): the call is the path's only while the
    // thread runs on the processor its last event named (its rseq
    // cpu_id, plus one, against the thread's word; without rseq, or
    // while the kernel has not set the id, never): else the general way,
    // whose callbacks write the event.
    "78:",
    watch_same_cpu!("81b"),
    "jmp 79f",
    // Triggers (fgraph::triggers, whose thread variable this keeps for
    // the sites without a trigger of their own: the others are general),
    // by the filter in rax, as Triggers::entry decides: declined once the
    // switch says FINISHED, inside a notrace function's call, outside
    // every filter function's call where some function is one
    // (FusedFilter::has_functions), or with no levels left; else the own
    // depth one more and the levels left one less (the field holds them
    // exclusive-or the limit, FusedFilter::limit), the frame pushed and
    // the record written as for graph filters (at 74) while the switch
    // says ON; else the frame kept, nothing recorded (Triggers::entry's
    // Silent), the own depth counting it (at 47). Each read of the switch
    // is a plain load: Relaxed, as Triggers::enabled reads it (a switch
    // another thread makes is seen at a later call).
    "72:",
    // (A recorder of `watch:cpu` events, which has triggers: at 78.)
    "cmp qword ptr [rax + {f_watch}], 0",
    "jne 78b",
    "79:",
    "mov rdx, [rax + {f_switch}]",
    "test byte ptr [rdx], {switch_finished}",
    "jnz 83b",
    "movsxd rdx, dword ptr [rsi + {u_slot}]",
    "mov rdx, [rdi + rdx*8 + {tv}]",
    "mov rcx, rdx",
    "shr rcx, 48",
    "jnz 83b",
    "cmp qword ptr [rax + {f_functions}], 0",
    "je 32f",
    "mov rcx, rdx",
    "shr rcx, 32",
    "test cx, cx",
    "jz 83b",
    "32:",
    // Deeper than records can say: the general way records it at 1023.
    "cmp dx, {max_record_depth}",
    "jae 81b",
    "mov ecx, edx",
    "shr ecx, 16",
    "xor ecx, dword ptr [rax + {f_limit}]",
    "movzx ecx, cx",
    "test ecx, ecx",
    "jz 83b",
    "dec ecx",
    "xor ecx, dword ptr [rax + {f_limit}]",
    "movzx ecx, cx",
    "shl ecx, 16",
    "mov r10, rdx",
    "shr r10, 32",
    "shl r10, 32",
    "or r10, rcx",
    "movzx ecx, dx",
    "inc ecx",
    "or r10, rcx",
    "call 46f",
    "mov rax, [rsi + {u_filter}]",
    "mov rax, [rax + {f_switch}]",
    "cmp byte ptr [rax], {switch_on}",
    "je 74b",
    "jmp 47f",
    ".popsection",
    // A -N function: NOTRACE in v, its frame kept, nothing recorded.
    "45:",
    "bts rdx, {notrace_bit}",
    "mov r10, rdx",
    "call 46f",
    // The variable, then the BITMAP word; hooked.
    "47:",
    "mov rax, [rsi + {u_frame_word}]",
    "movsxd rcx, dword ptr [rsi + {u_slot}]",
    "mov [rdi + rcx*8 + {tv}], r10",
    "mov [rdi + r8*8 + FRAME_BITMAP], rax",
    bracket_leave!(),
    "cmp rsp, rsp",
    pop_saved!(),
    "ret",
    // The frame at fgraph's depth r9, as on the plain path (written,
    // published, written again), rcx left the thread state's offset; a
    // full stack: the general way (this return address dropped first).
    "46:",
    crate::fixed_load!("rcx", "tp_thread"),
    "cmp r8, [rip + {room_limit}]",
    "jb 48f",
    "add rsp, 8",
    "jmp 81b",
    "48:",
    "mov rdx, [rsp + 8 + FE_SITE]",
    "mov rax, r9",
    "shl rax, 48",
    "or rdx, rax",
    frame_words!("8 + FE_PARENT_SLOT"),
    "lea rax, [r8 + {frame_words} + 1]",
    "mov qword ptr fs:[rcx + {t_curr}], rax",
    frame_words!("8 + FE_PARENT_SLOT"),
    "ret",
    // Return through a stub: jumped to by the stub's `jmp [RETURN]` at its
    // return point, with rsp, the result and the dead registers as
    // for the return above. Resumes by `ret`: the return-stack predictor
    // holds the real address, since the stub's call has been returned from.
    ".globl shadowgraph_fused_site_return",
    ".hidden shadowgraph_fused_site_return",
    "shadowgraph_fused_site_return:",
    "endbr64",
    fused_return!(
        "shadowgraph_fused_site_return_record",
        "push r11\nret\n",
        "cmp qword ptr [rsi + {u_filter}], 0\njne 50f\n"
    ),
    "jmp shadowgraph_site_return_general",
    // A recorder with graph filters, from before the claim (registers as
    // there: rsi the user, rdi the stack, r10 the frame f, r11 the ring;
    // rax and rdx saved at [rsp]): its thread variable as
    // `GraphFilter::ret` leaves it (r8), written once the record is in.
    "50:",
    // (Triggers: at 26.)
    "mov rax, [rsi + {u_filter}]",
    "cmp qword ptr [rax + {f_switch}], 0",
    "jne 26f",
    "movsxd rcx, dword ptr [rsi + {u_slot}]",
    "mov r8, [rdi + rcx*8 + {tv}]",
    "btr r8, {notrace_bit}",
    "jnc 51f",
    // The -N function's own return: NOTRACE cleared, nothing recorded.
    "mov [rdi + rcx*8 + {tv}], r8",
    "and dword ptr [rdi + r10*8 + FRAME_BITMAP], {users_clear}",
    "jmp 53f",
    // Own depth − 1; IN_GRAPH ends with the call that set it.
    "51:",
    "movzx edx, r8w",
    "test edx, edx",
    "jz 52f",
    "dec edx",
    "bt r8, {in_graph_bit}",
    "jnc 52f",
    "mov rax, r8",
    "shr rax, {graph_depth_shift}",
    "movzx eax, ax",
    "cmp eax, edx",
    "jne 52f",
    "btr r8, {in_graph_bit}",
    "52:",
    "and r8, -65536",
    "or r8, rdx",
    // (From 76 too, the variable in r8.)
    "77:",
    // A return value to record: the user's table of them (args_asm.rs).
    "mov rcx, [rsi + {u_rets}]",
    "test rcx, rcx",
    "jnz 54f",
    "55:",
    ring_record!(
        "shadowgraph_fused_filtered_return",
        "92b",
        "r9",
        "rcx",
        "mov dx, r8w\n",
        concat!(
            "mov rcx, [rdi + r10*8 + FRAME_FUNC]\n",
            "shl rcx, 16\n",
            "movzx edx, r8w\n",
            "cmp edx, {max_record_depth}\n",
            "jae 92b\n",
            "shl rdx, 6\n",
            "or rcx, rdx\n",
            "or rcx, {exit_bits}\n",
        )
    ),
    "and dword ptr [rdi + r10*8 + FRAME_BITMAP], {users_clear}",
    "movsxd rcx, dword ptr [rsi + {u_slot}]",
    "mov [rdi + rcx*8 + {tv}], r8",
    // Pop the frame; resume at its real return address.
    "53:",
    "mov r11, [rdi + r10*8 + FRAME_RET]",
    crate::fixed_load!("rcx", "tp_thread"),
    "mov qword ptr fs:[rcx + {t_curr}], r10",
    bracket_leave!(),
    "pop rdx",
    "pop rax",
    "push r11",
    "ret",
    // (Out of the way: the exit with its return value, args_asm.rs.)
    ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits",
    retval_exit_record!("shadowgraph_fused_retval_exit"),
    "27:",
    watch_same_cpu!("91b"),
    "jmp 28f",
    // Triggers, by the filter in rax: the variable as Triggers::ret leaves
    // it for a frame without words (the own depth one less, never below
    // 0, the levels left one more), the exit recorded only while the
    // switch says ON (else the variable put back and the frame popped as
    // after a record).
    "26:",
    // (`watch:cpu`: at 27, as at the entry.)
    "cmp qword ptr [rax + {f_watch}], 0",
    "jne 27b",
    "28:",
    "movsxd rcx, dword ptr [rsi + {u_slot}]",
    "mov r8, [rdi + rcx*8 + {tv}]",
    "movzx edx, r8w",
    "sub edx, 1",
    "adc edx, 0",
    "mov ecx, r8d",
    "shr ecx, 16",
    "xor ecx, dword ptr [rax + {f_limit}]",
    "movzx ecx, cx",
    "inc ecx",
    "xor ecx, dword ptr [rax + {f_limit}]",
    "movzx ecx, cx",
    "shl ecx, 16",
    "shr r8, 32",
    "shl r8, 32",
    "or r8, rcx",
    "or r8, rdx",
    "76:",
    "mov rax, [rax + {f_switch}]",
    "cmp byte ptr [rax], {switch_on}",
    "je 77b",
    "and dword ptr [rdi + r10*8 + FRAME_BITMAP], {users_clear}",
    "movsxd rcx, dword ptr [rsi + {u_slot}]",
    "mov [rdi + rcx*8 + {tv}], r8",
    "jmp 53b",
    ".popsection",
    ".popsection";
    tp_local = sym fgraph::TP_LOCAL,
    tp_thread = sym fgraph::TP_THREAD,
    tp_rings = sym TP_RINGS,
    rseq_cs = sym RSEQ_CS,
    rseq_restarts = sym RSEQ_RESTARTS,
    fused = sym fgraph::SOLE_PROVIDED,
    manager_entry = sym fgraph::manager_tramp_entry,
    l_word = const offset_of!(CoreLocal, word),
    l_rec = const offset_of!(CoreLocal, rec),
    l_anchor = const offset_of!(CoreLocal, outer_anchor),
    t_stack = const offset_of!(ThreadState, stack),
    t_curr = const offset_of!(ThreadState, curr),
    t_blockers = const crate::fgraph::stack::BLOCKERS,
    hookable = const crate::fgraph::stack::HOOKABLE,
    u_frame_word = const offset_of!(GraphUser, frame_word),
    u_slot = const offset_of!(GraphUser, slot),
    u_max_depth = const GraphUser::PATH_WORDS + 8 * W_MAX_DEPTH,
    r_offset_mask = const offset_of!(RingHeader, offset_mask),
    slot_shift = const crate::record::ring::SLOT_SHIFT,
    r_head = const offset_of!(RingHeader, head),
    r_room_end = const offset_of!(RingHeader, room_end),
    r_reserve = const offset_of!(RingHeader, reserve),
    header = const HEADER_BYTES,
    room_limit = sym crate::fgraph::stack::FAST_PUSH_LIMIT,
    frame_words = const crate::fgraph::stack::FRAME_WORDS,
    site_users = sym crate::fgraph::SITE_USERS,
    site_users_cap = const crate::fgraph::SITE_USERS_CAPACITY,
    entry_bits = const shadowgraph_data::format::MAGIC << 3,
    max_record_depth = const MAX_RECORD_DEPTH,
    // The users' bits (12..27) lie in the word's low half.
    users_clear = const !(0xffffu32 << 12),
    exit_bits = const shadowgraph_data::format::MAGIC << 3 | 1,
    id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
    u_filter = const GraphUser::PATH_WORDS + 8 * W_FILTER,
    f_classes = const offset_of!(FusedFilter, classes),
    f_len = const offset_of!(FusedFilter, len),
    f_functions = const offset_of!(FusedFilter, has_functions),
    f_max_depth = const offset_of!(FusedFilter, max_depth),
    general = const super::GENERAL,
    fast_args = const super::FAST_ARGS,
    f_args = const offset_of!(FusedFilter, args),
    f_switch = const offset_of!(FusedFilter, switch),
    f_limit = const offset_of!(FusedFilter, limit),
    f_watch = const offset_of!(FusedFilter, watch),
    tp_watched = sym super::watch::TP_WATCHED,
    switch_on = const crate::fgraph::triggers::Triggers::ON,
    switch_finished = const crate::fgraph::triggers::Triggers::FINISHED,
    u_rets = const GraphUser::PATH_WORDS + 8 * super::W_RETS,
    more = const crate::record::ring::MORE,
    r_with_data = const offset_of!(RingHeader, with_data),
    tv = const crate::fgraph::stack::TASK_VAR_BASE * 8,
    notrace_bit = const crate::fgraph::filters::NOTRACE_BIT,
    in_graph_bit = const crate::fgraph::filters::IN_GRAPH_BIT,
    graph_depth_shift = const crate::fgraph::filters::GRAPH_DEPTH_SHIFT,
    not_graph_depth = const !(0xffffu64 << crate::fgraph::filters::GRAPH_DEPTH_SHIFT),
);
