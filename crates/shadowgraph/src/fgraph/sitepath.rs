//! The fast path through a site stub, in assembly: the entry and the
//! return a site stub calls, for a thread at rest. With one user its
//! callbacks are called from here; with several, a loop here offers the
//! call to each (sitepath_multi.rs) with the frame, bracket, recursion bit
//! and errno handled once for all of them. Anything else goes fgraph's
//! general way, in Rust.

use super::entry::{manager_tramp_entry, offer_all};
use super::ret::{graph_return, restore_ret_regs, return_all, save_ret_regs};
use super::sitepath_multi::{offer_each, return_each};
use super::stack::{self, ThreadState};
use super::state::{
    EPOCH, LEAD, MANY, MULTI_ENTRY, MULTI_FRAME_WORD, MULTI_RETURN, NO_FRAME_WORD, TP_LOCAL,
    TP_THREAD,
};
use super::user::{GraphEntry, GraphReturn, GraphUser, RetRegs};
use crate::ftrace::local::CoreLocal;
use crate::ftrace::{Group, Regs};
use std::mem::offset_of;
use std::sync::atomic::Ordering;

// --- Site stubs: the single user's fast path in assembly -----------------------------
//
// Both sides below first try what `manager_tramp_entry`/`enter_fast` and
// `graph_return`/`return_fast` do for a thread at rest with one user, with
// the user's callback called through a small Rust function, or with
// several (MANY), what `enter` and `finish_frame` do, by the loops of
// sitepath_multi.rs; anything else (the bracket or a
// recursion bit held, no errno cached yet, no stack, not ready, no user,
// frames a longjmp left, a full stack, a frame kept for another epoch)
// goes the general way untouched, inside Rust.
// The thread-local state is reached at its offset from the thread pointer
// (initial-exec TLS: the same in every thread), see `init_tp_offsets`.

// Leaves the bracket entered at rest (depth 1 → 0, exit generation + 1, in
// one instruction); clobbers rcx.
macro_rules! leave_at_rest {
    () => {
        concat!(
            crate::fixed_load!("rcx", "tp_local"),
            "mov rcx, qword ptr fs:[rcx + {l_word}]\n",
            "add qword ptr [rcx], 0xffff\n",
        )
    };
}

// The recursion bit given back (graph_busy 0 again: the fast paths take
// it at rest), errno as saved at `$errno`, the bracket left. Clobbers
// rax, rcx, rdx.
macro_rules! fast_done {
    ($errno:literal) => {
        concat!(
            crate::fixed_load!("rcx", "tp_local"),
            "and dword ptr fs:[rcx + {l_rec}], {unbit}\n",
            crate::fixed_load!("rdx", "tp_thread"),
            "mov byte ptr fs:[rdx + {t_busy}], 0\n",
            "mov rax, qword ptr fs:[rcx + {l_errno}]\n",
            "mov edx, dword ptr [rsp + ",
            $errno,
            "]\n",
            "mov dword ptr [rax], edx\n",
            "mov rcx, qword ptr fs:[rcx + {l_word}]\n",
            "add qword ptr [rcx], 0xffff\n",
        )
    };
}

// The frame {R, rdx, slot, RESERVED} at word r8 of stack rdi (R's slot is
// rbp+16). Clobbers rax.
macro_rules! frame_at_r8 {
    () => {
        concat!(
            "mov rax, [rbp + RBP_PARENT_SLOT]\n",
            "mov [rdi + r8*8 + FRAME_RET], rax\n",
            "mov [rdi + r8*8 + FRAME_FUNC], rdx\n",
            "lea rax, [rbp + RBP_PARENT_SLOT]\n",
            "mov [rdi + r8*8 + FRAME_RETP], rax\n",
            "mov qword ptr [rdi + r8*8 + FRAME_BITMAP], {frame_words}\n",
        )
    };
}

// The entry's checks and new frame, for one user (rsi) or several (rsi
// 0): the thread ready, the top frame below ours (or a tail call from
// it), room, the recursion bit and errno taken, the frame pushed (r8 its
// start, r9 the thread state's offset, rcx the core's), the GraphEntry
// filled. Otherwise to 71 (the general way, the bracket entered).
macro_rules! entry_frame {
    () => {
        concat!(
            crate::fixed_load!("r9", "tp_thread"),
            "cmp qword ptr fs:[r9 + {t_blockers}], {hookable}\n",
            "jne 71f\n",
            "mov rdi, qword ptr fs:[r9 + {t_stack}]\n",
            // r8 = curr, r10 = depth: one deeper than the top frame's, 0 without
            // one; a top frame whose slot is not above ours: the general way.
            "mov r8, qword ptr fs:[r9 + {t_curr}]\n",
            "xor r10d, r10d\n",
            "mov rax, [rdi + r8*8 - 8]\n",
            "and eax, 0x3ff\n",
            "jz 4f\n",
            "cmp rax, r8\n",
            "jae 4f\n",
            "mov rdx, r8\n",
            "sub rdx, rax\n", // f + 1
            "lea rax, [rbp + RBP_PARENT_SLOT]\n",
            "cmp [rdi + rdx*8 + FRAME_RETP - FRAME_FUNC], rax\n",
            "jb 71f\n",
            "ja 6f\n",
            // The same slot: a tail call from the top frame's function nests in
            // it (as `enter` decides); a fresh call in a dead frame's slot goes
            // the general way, which drops that frame.
            "mov r10, [rbp + RBP_PARENT_SLOT]\n",
            "mov rax, [rdi + rdx*8 + FRAME_FUNC - FRAME_FUNC]\n",
            "shl rax, 16\n",
            "shr rax, 16\n",
            "call shadowgraph_tail_call_from\n",
            "jne 71f\n",
            "6:\n",
            "mov r10, [rdi + rdx*8 + FRAME_FUNC - FRAME_FUNC]\n",
            "shr r10, 48\n",
            "inc r10\n",
            "4:\n",
            // Room for the frame, else the general way counts an overrun.
            "cmp r8, [rip + {room_limit}]\n",
            "jae 71f\n",
            // The recursion bit and errno, as `lock_graph` (at rest: graph_busy
            // 1) and ErrnoGuard.
            "mov dword ptr fs:[rcx + {l_rec}], {bit}\n",
            "mov byte ptr fs:[r9 + {t_busy}], 1\n",
            "mov rax, qword ptr fs:[rcx + {l_errno}]\n",
            "mov eax, dword ptr [rax]\n",
            "mov dword ptr [rsp + SE_ERRNO], eax\n",
            // The frame, written whole before curr publishes it and again after
            // (as ThreadState::push): a signal handler may land between two of the
            // first writes and push and pop its own frame over them, leaving some
            // words its own and others ours, so no one word tells whether it did.
            "mov rdx, r10\n",
            "shl rdx, 48\n",
            "or rdx, [rsp + REGS_IP]\n",
            frame_at_r8!(),
            "lea rax, [r8 + {frame_words} + 1]\n",
            "mov qword ptr fs:[r9 + {t_curr}], rax\n",
            frame_at_r8!(),
            "mov [rsp + SE_FRAME], r8\n",
            "mov [rsp + SE_USER], rsi\n",
            "mov rax, [rsp + REGS_IP]\n",
            "mov [rsp + SE_ENTRY + ENT_FUNC], rax\n",
            "mov rax, [rbp + RBP_PARENT_SLOT]\n",
            "mov [rsp + SE_ENTRY + ENT_PARENT_IP], rax\n",
            "mov dword ptr [rsp + SE_ENTRY + ENT_DEPTH], r10d\n",
            "mov rax, [rbp + RBP_SITE_RET]\n",
            "mov eax, dword ptr [rax + {id_off}]\n",
            "mov dword ptr [rsp + SE_ENTRY + ENT_SITE], eax\n",
        )
    };
}

// The return's top frame f (r10) is the returning call's (its slot),
// else to 61; r9 the thread state's offset, rdi its stack.
macro_rules! top_frame_r10 {
    () => {
        concat!(
            crate::fixed_load!("r9", "tp_thread"),
            "mov rdi, qword ptr fs:[r9 + {t_stack}]\n",
            "test rdi, rdi\n",
            "jz 61f\n",
            "mov r10, qword ptr fs:[r9 + {t_curr}]\n",
            "mov rax, [rdi + r10*8 - 8]\n",
            "and eax, 0x3ff\n",
            "jz 61f\n",
            "cmp rax, r10\n",
            "jae 61f\n",
            "sub r10, rax\n",
            "dec r10\n",
            "mov rax, [rsp + RET_RSP + 8]\n",
            "sub rax, 8\n",
            "cmp [rdi + r10*8 + FRAME_RETP], rax\n",
            "jne 61f\n",
        )
    };
}

// The recursion bit and errno taken, `$take` (the frame's users taken
// before the sole user's callback, as return_all takes each user's), the
// GraphReturn filled from the frame at r10.
macro_rules! return_event {
    ($take:literal) => {
        concat!(
            "mov dword ptr fs:[rcx + {l_rec}], {bit}\n",
            "mov byte ptr fs:[r9 + {t_busy}], 1\n",
            "mov rax, qword ptr fs:[rcx + {l_errno}]\n",
            "mov eax, dword ptr [rax]\n",
            "mov dword ptr [rsp + SR_ERRNO], eax\n",
            $take,
            "mov [rsp + SR_FRAME], r10\n",
            // The GraphReturn: func and depth from the frame, rax, the overruns.
            "mov rax, [rdi + r10*8 + FRAME_FUNC]\n",
            "mov rdx, rax\n",
            "shr rdx, 48\n",
            "mov dword ptr [rsp + SR_RET + GRET_DEPTH], edx\n",
            "shl rax, 16\n",
            "shr rax, 16\n",
            "mov [rsp + SR_RET + GRET_FUNC], rax\n",
            "mov rax, [rsp + RET_RAX]\n",
            "mov [rsp + SR_RET + GRET_RETVAL], rax\n",
            "mov rax, qword ptr fs:[r9 + {t_overrun}]\n",
            "mov [rsp + SR_RET + GRET_OVERRUN], rax\n",
            "mov byte ptr [rsp + SR_RET + GRET_UNWOUND], 0\n",
        )
    };
}

// Entry. Register contract: reached by a stub's `call [ENTRY]` (tramp.rs):
// [rsp] = stub+13, [rsp+8] = R, every argument register live, r11 the
// site (unused here: r11 gets the manager's ops slot in that arena, from
// the stub, and the site is read from the stub too). Returns with ZF=1 if
// the call was hooked (the stub then calls the body, whose return comes
// back by the stub), ZF=0 if not, every argument register restored. The
// general way hooks by hijacking the slot, which is how ZF is set then.
//
// The frame is the manager's caller's (tramp.rs, args variant: a Regs,
// with the stub's site as regs.ip), and after it:
//
//   rsp + SE_RBX…SE_R15  the program's rbx, r12–r15 while offer_each!
//                        keeps its loop's state in them
//   rsp + SE_ENTRY       the GraphEntry passed to the callback
//   rsp + SE_OFFER       the interrupted callback's in_entry and
//                        reserved_once (as `offer` keeps them)
//   rsp + SE_USER        the user
//   rsp + SE_FRAME       the new shadow frame's start
//   rsp + SE_ERRNO       errno as the call found it
//   rsp + SE_OPS         the manager's ops slot (Regs' spare word)
//   rsp + REGS_…         the Regs
//
// Return. The frame below the returning call's rsp, 16-byte aligned:
//
//   rsp + SR_RBX…SR_R13  the program's rbx, r12, r13 while return_each!
//                        keeps its loop's state in them
//   rsp + SR_RET         the GraphReturn passed to the callback
//   rsp + SR_WORD        the frame's BITMAP word as the entry left it
//   rsp + SR_FRAME       the popped shadow frame's start
//   rsp + SR_ERRNO       errno as the return found it
//   rsp + RET_…          the RetRegs (fgraph::layout)
super::layout::graph_asm!(
    ".pushsection .text.shadowgraph_fgraph,\"ax\",@progbits",
    ".p2align 6",
    ".globl shadowgraph_graph_site_entry",
    ".hidden shadowgraph_graph_site_entry",
    "shadowgraph_graph_site_entry:",
    // The frame: a Regs, its spare word and what follows it.
    ".set SE_OPS, REGS_SPARE",
    ".set SE_ERRNO, REGS_SIZE",
    ".set SE_FRAME, SE_ERRNO + 8",
    ".set SE_USER, SE_FRAME + 8",
    ".set SE_OFFER, SE_USER + 8",
    ".set SE_ENTRY, SE_OFFER + 8",
    // (The program's registers offer_each! uses.)
    ".set SE_RBX, (SE_ENTRY + ENT_SIZE + 7) & ~7",
    ".set SE_R12, SE_RBX + 8",
    ".set SE_R13, SE_R12 + 8",
    ".set SE_R14, SE_R13 + 8",
    ".set SE_R15, SE_R14 + 8",
    ".set SE_SIZE, (SE_R15 + 8 + 15) & ~15",
    "endbr64",
    // Users the registered multi path stands in for: its entry, which
    // comes back to the body for what it does not handle.
    "cmp qword ptr [rip + {multi_word}], {no_frame_word}",
    "jne 95f",
    ".globl shadowgraph_graph_site_entry_body",
    ".hidden shadowgraph_graph_site_entry_body",
    "shadowgraph_graph_site_entry_body:",
    "mov r11, [rsp]",
    "mov r11, [r11 + {data_off}]",
    "push rbp",
    "mov rbp, rsp",
    // (From here to the bracket: site_entry_before_bracket.)
    ".globl shadowgraph_graph_site_entry_framed",
    ".hidden shadowgraph_graph_site_entry_framed",
    "shadowgraph_graph_site_entry_framed:",
    "sub rsp, SE_SIZE",
    "and rsp, -16",
    "mov [rsp + SE_OPS], r11",
    crate::tramp::save_args!("mov r11, [rbp + RBP_SITE_RET]\nmov r11, [r11 + {site_off}]\n"),
    // Users (else the general way at once), the thread at rest (a
    // bracket word at depth 0, no recursion bit) with errno's location
    // known: enter the bracket, anchored at the return slot.
    "cmp qword ptr [rip + {lead}], 0",
    "je 70f",
    crate::fixed_load!("rcx", "tp_local"),
    "mov rdx, qword ptr fs:[rcx + {l_word}]",
    "test rdx, rdx",
    "jz 70f",
    "test word ptr [rdx], 0xffff",
    "jnz 70f",
    "cmp dword ptr fs:[rcx + {l_rec}], 0",
    "jne 70f",
    "cmp qword ptr fs:[rcx + {l_errno}], 0",
    "je 70f",
    // (Where the code before the bracket ends: site_entry_before_bracket.)
    ".globl shadowgraph_graph_site_entry_bracket",
    ".hidden shadowgraph_graph_site_entry_bracket",
    "shadowgraph_graph_site_entry_bracket:",
    "lea rax, [rbp + RBP_PARENT_SLOT]",
    crate::bracket_enter_at_rest!("rcx", "rdx"),
    // The manager still registered; the lead user (rsi) the only one the
    // site's filter mask names (see site_users.rs), else (at 30) the
    // other users' way.
    "mov rax, [rsp + SE_OPS]",
    "cmp qword ptr [rax], 0",
    "je 71f",
    "mov rsi, [rip + {lead}]",
    "test rsi, rsi",
    "jz 30f",
    crate::site_mask!("rbp + RBP_SITE_RET", "30f"),
    "shl eax, 12",
    "xor eax, dword ptr [rsi + {u_frame_word}]",
    "test eax, {users_bits}",
    "jnz 30f",
    // (From 30 too: the one user the site's filter selects.)
    "33:",
    entry_frame!(),
    // The offer (as `offer`): in_entry = the user's slot, reserved_once
    // cleared (one word: stack::OFFER_WORD), put back after the callback.
    "mov rax, qword ptr fs:[r9 + {t_offer}]",
    "mov [rsp + SE_OFFER], rax",
    "mov rax, [rsi + {u_offer}]",
    "mov qword ptr fs:[r9 + {t_offer}], rax",
    "lea rdi, [rsp + SE_ENTRY]",
    "mov rdx, rsp",
    "call {call_entry}",
    crate::fixed_load!("rcx", "tp_thread"),
    "mov rdx, [rsp + SE_OFFER]",
    "mov qword ptr fs:[rcx + {t_offer}], rdx",
    "mov r8, [rsp + SE_FRAME]",
    "test al, al",
    "jz 5f",
    // Kept for the user: its BITMAP word.
    "mov rdi, qword ptr fs:[rcx + {t_stack}]",
    "mov rsi, [rsp + SE_USER]",
    "mov rax, [rsi + {u_frame_word}]",
    // (Kept, with its BITMAP word in rax: from 30 too.)
    "7:",
    "mov [rdi + r8*8 + FRAME_BITMAP], rax",
    fast_done!("SE_ERRNO"),
    "cmp rsp, rsp",
    crate::tramp::restore_args!(),
    "leave",
    "ret",
    // Several users (MANY). A site whose filter mask (site_users.rs)
    // names one other user, still in its slot: that user's path above, as
    // if it were the only one. Else offered to each (offer_each!), whose
    // BITMAP word comes back in rax (0: none kept the call).
    "30:",
    "cmp byte ptr [rip + {many}], 0",
    "je 71f",
    crate::site_mask!("rbp + RBP_SITE_RET", "34f"),
    "lea edx, [eax - 1]",
    "test eax, edx",
    "jnz 34f",
    "bsf eax, eax",
    "jz 34f",
    "lea rdx, [rip + {array}]",
    "mov rsi, [rdx + rax*8]",
    "test rsi, rsi",
    "jnz 33b",
    "34:",
    entry_frame!(),
    "jmp 47f",
    "48:",
    crate::fixed_load!("rcx", "tp_thread"),
    "mov r8, [rsp + SE_FRAME]",
    "test rax, rax",
    "jz 5f",
    "mov rdi, qword ptr fs:[rcx + {t_stack}]",
    "jmp 7b",
    // Declined: the frame goes.
    "5:",
    "mov qword ptr fs:[rcx + {t_curr}], r8",
    fast_done!("SE_ERRNO"),
    "test rsp, rsp",
    crate::tramp::restore_args!(),
    "leave",
    "ret",
    // The general way, from 71 with the bracket entered (left first).
    "71:",
    leave_at_rest!(),
    "70:",
    // The stub's site id for `site_id`, for the length of the call (id
    // first: a handler sees the old ip or both).
    crate::fixed_load!("rcx", "tp_local"),
    "mov rax, [rbp + RBP_SITE_RET]",
    "mov eax, dword ptr [rax + {id_off}]",
    "mov dword ptr fs:[rcx + {l_hint_id}], eax",
    "mov rax, [rsp + REGS_IP]",
    "mov qword ptr fs:[rcx + {l_hint_ip}], rax",
    "mov rdi, rsp",
    "mov rsi, [rsp + SE_OPS]",
    "call {manager_entry}",
    crate::fixed_load!("rcx", "tp_local"),
    "mov qword ptr fs:[rcx + {l_hint_ip}], 0",
    "lea r11, [rip + shadowgraph_return_to_handler]",
    "cmp [rbp + RBP_PARENT_SLOT], r11",
    crate::tramp::restore_args!(),
    "leave",
    "ret",
    // Return through a stub. Register contract: jumped to by the stub's
    // `jmp [RETURN]` at its return point: rsp = the returning call's
    // slot + 8, aligned or not (gcc calls functions it knows need no
    // alignment without it); rax/rdx/xmm0/xmm1 hold the result; the other
    // caller-saved registers are dead. The frame: as the diagram above.
    // Resumes at the real return address by `ret`
    // (the return-stack predictor holds it, the stub's call having
    // returned) with the result and rsp restored.
    ".p2align 6",
    ".globl shadowgraph_site_return_general",
    ".hidden shadowgraph_site_return_general",
    "shadowgraph_site_return_general:",
    // The frame: a RetRegs and what follows it.
    ".set SR_ERRNO, RET_SIZE",
    ".set SR_FRAME, SR_ERRNO + 8",
    ".set SR_WORD, SR_FRAME + 8",
    ".set SR_RET, SR_WORD + 8",
    // (The program's registers return_each! uses.)
    ".set SR_RBX, (SR_RET + GRET_SIZE + 7) & ~7",
    ".set SR_R12, SR_RBX + 8",
    ".set SR_R13, SR_R12 + 8",
    ".set SR_SIZE, (SR_R13 + 8 + 15) & ~15",
    "endbr64",
    // As at the entry: the multi path's return first.
    "cmp qword ptr [rip + {multi_word}], {no_frame_word}",
    "jne 96f",
    ".globl shadowgraph_site_return_body",
    ".hidden shadowgraph_site_return_body",
    "shadowgraph_site_return_body:",
    save_ret_regs!("SR_SIZE"),
    crate::fixed_load!("rcx", "tp_local"),
    "mov rdx, qword ptr fs:[rcx + {l_word}]",
    "test rdx, rdx",
    "jz 60f",
    "test word ptr [rdx], 0xffff",
    "jnz 60f",
    "cmp dword ptr fs:[rcx + {l_rec}], 0",
    "jne 60f",
    "cmp qword ptr fs:[rcx + {l_errno}], 0",
    "je 60f",
    "cmp qword ptr [rip + {lead}], 0",
    "je 60f",
    "mov rax, [rsp + RET_RSP + 8]",
    "sub rax, 8",
    crate::bracket_enter_at_rest!("rcx", "rdx"),
    // The top frame f (r10) is the returning call's (its slot) and was
    // kept for the lead user alone (its BITMAP word); else (at 31) for
    // another user alone, or with several users, for those its BITMAP
    // word names.
    "mov rsi, [rip + {lead}]",
    "test rsi, rsi",
    "jz 30f",
    top_frame_r10!(),
    "mov rax, [rdi + r10*8 + FRAME_BITMAP]",
    "cmp rax, [rsi + {u_frame_word}]",
    "jne 31f",
    // (From 30 too: a frame kept for one user by its path.)
    "33:",
    return_event!("and dword ptr [rdi + r10*8 + FRAME_BITMAP], {users_clear}\n"),
    "lea rdi, [rsp + SR_RET]",
    "mov rdx, rsp",
    "call {call_ret}",
    "10:",
    // Pop the frame; resume at its real return address.
    "mov r10, [rsp + SR_FRAME]",
    crate::fixed_load!("rcx", "tp_thread"),
    "mov rdi, qword ptr fs:[rcx + {t_stack}]",
    "mov r11, [rdi + r10*8 + FRAME_RET]",
    "mov qword ptr fs:[rcx + {t_curr}], r10",
    fast_done!("SR_ERRNO"),
    "jmp 62f",
    // Several users (MANY): their return callbacks (return_each!).
    "30:",
    top_frame_r10!(),
    "mov rax, [rdi + r10*8 + FRAME_BITMAP]",
    "31:",
    "cmp byte ptr [rip + {many}], 0",
    "je 61f",
    // A frame whose word is the one user's that it names (its path kept
    // it, or the loop kept it for that user alone in its epoch): that
    // user's return above.
    "mov edx, eax",
    "shr edx, 12",
    "and edx, 0xffff",
    "lea r11d, [edx - 1]",
    "test edx, r11d",
    "jnz 34f",
    "bsf edx, edx",
    "jz 34f",
    "lea r11, [rip + {array}]",
    "mov rsi, [r11 + rdx*8]",
    "test rsi, rsi",
    "jz 34f",
    "cmp rax, [rsi + {u_frame_word}]",
    "je 33b",
    "34:",
    "mov [rsp + SR_WORD], rax",
    // (Each user's bit taken before its callback: return_all.)
    return_event!(""),
    "mov rax, [rsp + SR_WORD]",
    "jmp 57f",
    "58:",
    "jmp 10b",
    "61:",
    leave_at_rest!(),
    "60:",
    "mov rdi, rsp",
    "call {ret}",
    "mov r11, rax",
    "62:",
    restore_ret_regs!(),
    "push r11",
    "ret",
    // (Out of the way: the multi path's entry and return; the entry
    // records the call for the users the site's filter mask names.)
    "95:",
    "jmp qword ptr [rip + {multi_entry}]",
    "96:",
    "jmp qword ptr [rip + {multi_return}]",
    // (Out of the way too: several users' loops, back at 48 and 58.)
    offer_each!(),
    return_each!(),
    // Whether a new call whose return slot is the top frame's is a tail
    // call from that frame's function (`enter`: not `fresh`), for the fast
    // paths here and in a registered SolePath. Register contract: reached by
    // `call`; r10 = the return address in the slot, rax = the top frame's
    // function. ZF=1 if r10 is `return_to_handler` (the frame hijacked the
    // slot) or the return point of a site stub of that function (inside a
    // registered block, with that function as its site literal), else
    // ZF=0. Every register preserved; no stack beyond its own pushes.
    ".globl shadowgraph_tail_call_from",
    ".hidden shadowgraph_tail_call_from",
    "shadowgraph_tail_call_from:",
    "push rcx",
    "push rdx",
    "push r11",
    "lea rdx, [rip + shadowgraph_return_to_handler]",
    "cmp r10, rdx",
    "je 3f",
    "mov rcx, [rip + {stub_block_count}]",
    "lea r11, [rip + {stub_blocks}]",
    "1:",
    "sub rcx, 1",
    "jb 2f",
    // r10 within [base, base + len − site − 8]: its site literal is in the
    // block.
    "mov rdx, r10",
    "sub rdx, [r11 + {blk_base}]",
    "jb 4f",
    "add rdx, {site_from_return} + 8",
    "cmp rdx, [r11 + {blk_len}]",
    "ja 4f",
    "cmp rax, [r10 + {site_from_return}]",
    "je 3f",
    "4:",
    "add r11, {stub_block_bytes}",
    "jmp 1b",
    "2:",
    "pop r11",
    "pop rdx",
    "pop rcx",
    "test rsp, rsp",
    "ret",
    "3:",
    "pop r11",
    "pop rdx",
    "pop rcx",
    "cmp rsp, rsp",
    "ret",
    ".popsection";
    stub_block_count = sym crate::tramp::STUB_BLOCK_COUNT,
    stub_blocks = sym crate::tramp::STUB_BLOCKS,
    stub_block_bytes = const std::mem::size_of::<crate::tramp::StubBlock>(),
    blk_base = const offset_of!(crate::tramp::StubBlock, base),
    blk_len = const offset_of!(crate::tramp::StubBlock, len),
    site_from_return = const crate::tramp::SITE_STUB_SITE_FROM_RETURN,
    manager_entry = sym manager_tramp_entry,
    call_entry_all = sym call_entry_all,
    call_entry = sym call_entry,
    call_ret = sym call_return,
    occupied = sym super::state::OCCUPIED,
    epoch = sym EPOCH,
    slot_epoch = sym super::state::SLOT_EPOCH,
    t_event = const offset_of!(ThreadState, event_time),
    event_open = const stack::EVENT_OPEN,
    type_bitmap = const stack::TYPE_BITMAP,
    bitmap_base = const stack::FRAME_WORDS as u64 | stack::TYPE_BITMAP << 10,
    call_ret_all = sym call_return_all,
    many = sym MANY,
    ret = sym graph_return,
    lead = sym LEAD,
    users_bits = const 0xffffu32 << 12,
    multi_word = sym MULTI_FRAME_WORD,
    no_frame_word = const NO_FRAME_WORD as i64,
    multi_entry = sym MULTI_ENTRY,
    array = sym super::state::ARRAY,
    site_users = sym super::site_users::SITE_USERS,
    site_users_cap = const super::site_users::CAPACITY,
    multi_return = sym MULTI_RETURN,
    tp_local = sym TP_LOCAL,
    tp_thread = sym TP_THREAD,
    l_word = const offset_of!(CoreLocal, word),
    l_rec = const offset_of!(CoreLocal, rec),
    l_anchor = const offset_of!(CoreLocal, outer_anchor),
    l_errno = const offset_of!(CoreLocal, errno),
    t_stack = const offset_of!(ThreadState, stack),
    t_curr = const offset_of!(ThreadState, curr),
    t_blockers = const stack::BLOCKERS,
    hookable = const stack::HOOKABLE,
    t_busy = const std::mem::offset_of!(ThreadState, graph_busy),
    t_offer = const stack::OFFER_WORD,
    t_overrun = const offset_of!(ThreadState, overrun),
    u_frame_word = const offset_of!(GraphUser, frame_word),
    u_offer = const offset_of!(GraphUser, offer_word),
    u_entry = const offset_of!(GraphUser, entry),
    u_ret = const offset_of!(GraphUser, ret),
    room_limit = sym stack::FAST_PUSH_LIMIT,
    frame_words = const stack::FRAME_WORDS,
    bit = const 1u32 << (Group::Graph as u32),
    unbit = const !(1i32 << (Group::Graph as u32)),
    // The users' bits (12..27) lie in the word's low half.
    users_clear = const !(0xffffu32 << 12),
    site_off = const crate::tramp::SITE_STUB_SITE_FROM_RET,
    data_off = const crate::tramp::SITE_STUB_DATA_FROM_RET,
    id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
    l_hint_ip = const offset_of!(CoreLocal, site_hint_ip),
    l_hint_id = const offset_of!(CoreLocal, site_hint_id),
);

/// The one user's entry callback, from the site entry's fast path (which
/// did what `offer` does around it): the lead user's, or another's that
/// the site's mask names alone. The loops over several users call each
/// user's callback directly; this path keeps this call in between, which
/// costs it no time measurable against a direct call.
pub(super) extern "C" fn call_entry(ent: &GraphEntry, u: &GraphUser, regs: &mut Regs) -> bool {
    (u.entry)(ent, u, regs)
}

/// The one user's return callback, from the site return's fast path.
pub(super) extern "C" fn call_return(ev: &GraphReturn, u: &GraphUser, r: &RetRegs) {
    (u.ret)(ev, u, r)
}

/// Several users' entry, from the site entry's fast path (the frame
/// pushed, the thread at rest inside the bracket with the recursion bit)
/// for a site beyond the filter masks (offer_each! loops over the others):
/// the call offered to each user whose filter takes its site, as `enter`
/// offers it; the frame's BITMAP word naming those that kept it, 0 if
/// none did.
pub(super) extern "C" fn call_entry_all(ent: &GraphEntry, regs: &mut Regs) -> u64 {
    // Acquire: the registry's words, published before the epoch
    // (registry.rs).
    let g = EPOCH.load(Ordering::Acquire);
    let site = match ent.site {
        u32::MAX => crate::ftrace::site_id_of(ent.func),
        s => Some(s),
    };
    // The frame's BITMAP word: its last (the entry pushed it).
    let t = stack::thread();
    let b = t.curr.get() - 1;
    match site.map(|s| offer_all(t, ent, regs, (s, b), g)) {
        None | Some(0) => 0,
        Some(bits) => stack::bitmap(stack::FRAME_WORDS, bits, g),
    }
}

/// Several users' return, from the site return's fast path (`w` the word
/// of frame `f`, the top one) where the word is not a BITMAP word
/// (return_each! loops over a BITMAP word's users itself): each user's
/// return callback, in slot order, its bit taken first, as
/// `finish_frame` runs them.
pub(super) extern "C" fn call_return_all(ev: &GraphReturn, r: &RetRegs, w: u64, f: usize) {
    let t = stack::thread();
    if stack::type_of(w) == stack::TYPE_BITMAP {
        let users = (stack::bitmap_users(w), stack::bitmap_epoch(w));
        return_all(t, ev, r, users, f);
    } else {
        t.set_word(f + stack::FRAME_WORDS, w & !(0xffff << 12));
    }
}

extern "C" {
    pub(super) fn shadowgraph_graph_site_entry();
    pub(super) fn shadowgraph_site_return_general();
    fn shadowgraph_graph_site_entry_framed();
    fn shadowgraph_graph_site_entry_bracket();
}

/// Code of fgraph's site entry that runs before its bracket is entered,
/// `[start, end)`, with rbp framing the call (the stub's return address,
/// stub + 13, at rbp + 8): a thread there took a site's jump but no grace
/// period waits for it (for tests that hold a thread there).
#[doc(hidden)]
pub fn site_entry_before_bracket() -> (usize, usize) {
    (
        shadowgraph_graph_site_entry_framed as *const () as usize,
        shadowgraph_graph_site_entry_bracket as *const () as usize,
    )
}
