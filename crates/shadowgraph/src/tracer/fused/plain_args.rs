//! The plain recorder's site entry for the sites whose arguments it
//! records (`-A` with nothing else to filter): the plain site entry
//! (plain.rs) with the arguments' data written after the entry record in
//! the same restartable sequence, as `Ring::claim_with_data` lays it out.
//! Only these sites' stubs call it (`fgraph::SolePath::site_entry_alt`):
//! every other site's calls cost what the plain entry costs.
//!
//! A site's descriptor, by site id in `args_table::PLAIN_ARGS` (made
//! from [`super::fast_args`]'s by `args_table::set_plain_args`): byte 0
//! the data's length in words (bits 0–3), whether the arguments are the
//! first registers' whole words in order (`arg1`, `arg2`, … of 8 bytes
//! each: bit 6, the data is then the registers as kept, after a length
//! word) or their low 4 bytes in order (bit 5; bit 4: an odd number of
//! them), and whether an argument is a float (bit 7: xmm0–7 are kept
//! too); then a byte per argument, in
//! order: bit 7 present, bit 6 eight bytes (else four), bits 4–5 the mask
//! kept of its register (`args_table::ARG_MASKS`: 4, 1, 2 or 8 bytes),
//! bits 0–3 where the register is kept (0–5: rdi rsi rdx rcx r8 r9,
//! 8–15: xmm0–7).
//!
//! ```text
//! The stack (PA_AREA bytes below the stub's call):
//!   rsp + PA_PARENT_SLOT              R: the traced function's return
//!   rsp + PA_CALL_RET                 stub + 13
//!   rsp + PA_R10, PA_RAX              r10, rax as they came
//!   rsp + PA_DATA … + 63              the data as the ring takes it: its
//!                                     length in bytes, the arguments
//!                                     (each padded to 4), zeros to the
//!                                     end of its last 16 bytes
//!   rsp + PA_XMM … + 63               xmm0–7's low words (index 8–15;
//!                                     where the descriptor has a float)
//!   rsp + PA_REGS - 8 … + 55          bit 6's data: its length in bytes,
//!                                     then the registers below (its last
//!                                     16 bytes may end in the word after
//!                                     r9's or a register no argument
//!                                     names: past the data's length,
//!                                     which is all the writer takes)
//!   rsp + PA_REGS … + 47              rdi rsi rdx rcx r8 r9 as they came
//!                                     (index 0–5)
//! xmm15: the data's address (PA_DATA, or PA_REGS - 8 for bit 6's).
//! In the sequence: r10 the descriptor, then the data's address; rsi
//! `reserve`, rdx the slots the record and its data take (in `reserve`'s
//! units), r8 curr, r11 the ring; from the record's offset o (rcx):
//!   r11 + header + o                  the record {time, word | MORE}
//!   r11 + header + o + 16 …           the data's 16-byte pieces, one per
//!                                     data slot
//! ```

use super::args_table::{
    ARGS_RESTARTS, ARG_MASKS, HAS_FLOAT, IN_ORDER, IN_ORDER4, ODD, PLAIN_ARGS, PLAIN_ARGS_LEN,
};
use super::frame_asm::{entry_stack, fused_layout, sole_user_check, thread_base, thread_op};
use super::ring_asm::{rseq_abort, rseq_descriptor};
use super::{MAX_RECORD_DEPTH, RSEQ_CS, TP_RINGS};
use crate::fgraph::stack::ThreadState;
use crate::fgraph::{self};
use crate::record::ring::{RingHeader, HEADER_BYTES};
use std::mem::offset_of;

/// The entry's own layout (the diagram above).
macro_rules! plain_args_layout {
    () => {
        concat!(
            ".set PA_REGS, 8\n",
            ".set PA_XMM, PA_REGS + 64\n",
            ".set PA_DATA, PA_XMM + 64\n",
            ".set PA_RAX, PA_DATA + 64\n",
            ".set PA_R10, PA_RAX + 8\n",
            ".set PA_AREA, PA_R10 + 8\n",
            ".set PA_CALL_RET, PA_AREA\n",
            ".set PA_PARENT_SLOT, PA_AREA + 8\n",
        )
    };
}

// Every register as it came (flags aside: `lea` keeps ZF).
macro_rules! plain_args_restore {
    () => {
        concat!(
            "mov rdi, [rsp + PA_REGS]\n",
            "mov rsi, [rsp + PA_REGS + 8]\n",
            "mov rdx, [rsp + PA_REGS + 16]\n",
            "mov rcx, [rsp + PA_REGS + 24]\n",
            "mov r8, [rsp + PA_REGS + 32]\n",
            "mov r9, [rsp + PA_REGS + 40]\n",
            "mov rax, [rsp + PA_RAX]\n",
            "mov r10, [rsp + PA_R10]\n",
            "lea rsp, [rsp + PA_AREA]\n",
        )
    };
}

crate::fgraph::graph_asm!(
    fused_layout!(),
    plain_args_layout!(),
    ".pushsection .text.shadowgraph_fused,\"ax\",@progbits",
    // Register contracts as for the plain site entry; the checks, the
    // frame and the witness are its, and so is every way out: a site
    // without a descriptor goes to the plain entry, anything unusual the
    // general way (whose callbacks record the arguments).
    ".p2align 6",
    ".globl shadowgraph_fused_site_entry_plain_args",
    ".hidden shadowgraph_fused_site_entry_plain_args",
    "shadowgraph_fused_site_entry_plain_args:",
    "endbr64",
    "sub rsp, PA_AREA",
    "mov [rsp + PA_REGS], rdi",
    "mov [rsp + PA_REGS + 8], rsi",
    "mov [rsp + PA_REGS + 16], rdx",
    "mov [rsp + PA_REGS + 24], rcx",
    "mov [rsp + PA_REGS + 32], r8",
    "mov [rsp + PA_REGS + 40], r9",
    "mov [rsp + PA_RAX], rax",
    "mov [rsp + PA_R10], r10",
    // The descriptor, by the stub's site id.
    "mov rax, [rsp + PA_CALL_RET]",
    "mov eax, dword ptr [rax + {id_off}]",
    "cmp rax, [rip + {plain_args_len}]",
    "jae 79f",
    "mov r10, [rip + {plain_args}]",
    "mov r10, [r10 + rax*8]",
    "test r10, r10",
    "jz 79f",
    // The first registers' whole words in order: the data is the
    // registers as kept, after its length.
    "test r10b, {in_order}",
    "jz 74f",
    "movzx eax, r10b",
    "and eax, 15",
    "shl eax, 3",
    "mov [rsp + PA_REGS - 8], rax",
    "lea rax, [rsp + PA_REGS - 8]",
    "movq xmm15, rax",
    "jmp 75f",
    // The same with 4 bytes each: the registers' low halves stored in
    // order (all six: what lies past the data's length is not taken),
    // the 4 bytes after an odd number of them zeroed.
    "74:",
    "test r10b, {in_order4}",
    "jz 73f",
    "mov [rsp + PA_DATA + 8], edi",
    "mov [rsp + PA_DATA + 12], esi",
    "mov [rsp + PA_DATA + 16], edx",
    "mov [rsp + PA_DATA + 20], ecx",
    "mov [rsp + PA_DATA + 24], r8d",
    "mov [rsp + PA_DATA + 28], r9d",
    "movzx eax, r10b",
    "and eax, 15",
    "shl eax, 3",
    "mov [rsp + PA_DATA], rax",
    "test r10b, {odd}",
    "jz 72f",
    "mov dword ptr [rsp + rax + PA_DATA + 4], 0",
    "72:",
    "lea rax, [rsp + PA_DATA]",
    "movq xmm15, rax",
    "jmp 75f",
    "73:",
    "test r10b, {has_float}",
    "jz 78f",
    "movq [rsp + PA_XMM], xmm0",
    "movq [rsp + PA_XMM + 8], xmm1",
    "movq [rsp + PA_XMM + 16], xmm2",
    "movq [rsp + PA_XMM + 24], xmm3",
    "movq [rsp + PA_XMM + 32], xmm4",
    "movq [rsp + PA_XMM + 40], xmm5",
    "movq [rsp + PA_XMM + 48], xmm6",
    "movq [rsp + PA_XMM + 56], xmm7",
    "78:",
    // The data: zeros, its length, then each argument: its register's
    // word masked to its size and stored whole, the next argument's store
    // over the bytes past its size (at most seven arguments of at most 8
    // bytes, each at a multiple of 4: the last store ends within the 64
    // bytes).
    "pxor xmm14, xmm14",
    "movdqu [rsp + PA_DATA], xmm14",
    "movdqu [rsp + PA_DATA + 16], xmm14",
    "movdqu [rsp + PA_DATA + 32], xmm14",
    "movdqu [rsp + PA_DATA + 48], xmm14",
    "movzx eax, r10b",
    "and eax, 15",
    "shl eax, 3",
    "mov [rsp + PA_DATA], rax",
    "lea rdi, [rsp + PA_DATA]",
    "movq xmm15, rdi",
    "add rdi, 8",
    "lea rsi, [rip + {arg_masks}]",
    "mov rax, r10",
    "76:",
    "shr rax, 8",
    "test al, al",
    "jns 75f",
    "movzx ecx, al",
    "and ecx, 15",
    "mov rdx, [rsp + PA_REGS + rcx*8]",
    "mov ecx, eax",
    "shr ecx, 4",
    "and ecx, 3",
    "and rdx, [rsi + rcx*8]",
    "mov [rdi], rdx",
    "mov ecx, eax",
    "and ecx, 0x40",
    "shr ecx, 4",
    "lea rdi, [rdi + rcx + 4]",
    "jmp 76b",
    "75:",
    entry_stack!(
        "",
        "cmp rax, [rip + {fused_word}]\n",
        "{frame_words}",
        "",
        "80f",
        fixed,
        "PA_PARENT_SLOT",
        concat!("cmp qword ptr [rip + {fused_word}], {no_frame_word}\n", "je 80f\n")
    ),
    "cmp r8, [rip + {room_limit}]",
    "jae 80f",
    "mov rcx, r9",
    "shl rcx, 48",
    "or rcx, r11",
    crate::fixed_tls!("mov r11, ", "qword", "tp_rings", "0", ""),
    "test r11, r11",
    "jz 80f",
    // The ring holds records with data from now on (x86 stores are seen
    // in order: the flag before any record it announces; the drain reads
    // it after `head`).
    "cmp dword ptr [r11 + {r_with_data}], 0",
    "jne 77f",
    "mov dword ptr [r11 + {r_with_data}], 1",
    "77:",
    // The sequence, as plain_record's (ring_asm.rs) with the slots and
    // the data: armed, the user rechecked, the ring at rest and at the
    // call's depth (or one above: see the plain entry), the clock read;
    // then (in the clock read's shadow: nothing waits for it but the
    // record's time) the frame pushed, room for all the slots checked,
    // not past the ring's end, the record and its data written, and
    // `head` and `reserve` moved past them by one store.
    "shadowgraph_fused_plain_args_restart:",
    "lea rax, [rip + shadowgraph_fused_plain_args_cs]",
    crate::fixed_tls!("mov ", "qword", "rseq_cs", "0", ", rax"),
    "shadowgraph_fused_plain_args_start:",
    sole_user_check!("82f", "rsp + PA_CALL_RET"),
    // rsi: `reserve`.
    "mov rsi, [r11 + {r_reserve}]",
    "cmp rsi, [r11 + {r_head}]",
    "jne 82f",
    "cmp si, r9w",
    "je 62f",
    "lea edx, [esi + 1]",
    "cmp dx, r9w",
    "jne 82f",
    "movzx r9d, si",
    "shl rcx, 16",
    "shr rcx, 16",
    "mov rdx, r9",
    "shl rdx, 48",
    "or rcx, rdx",
    "62:",
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    // The frame {R, rcx, slot, the user's BITMAP word}, pushed.
    "mov rdx, [rip + {fused_word}]",
    "mov [rdi + r8*8 + FRAME_BITMAP], rdx",
    "mov rdx, [rsp + PA_PARENT_SLOT]",
    "mov [rdi + r8*8 + FRAME_RET], rdx",
    "mov [rdi + r8*8 + FRAME_FUNC], rcx",
    "lea rdx, [rsp + PA_PARENT_SLOT]",
    "mov [rdi + r8*8 + FRAME_RETP], rdx",
    "lea rdx, [r8 + {frame_words} + 1]",
    crate::fixed_tls!("mov ", "qword", "tp_thread", "{t_curr}", ", rdx"),
    // rdi: the record's word (as the plain entry makes it), with MORE.
    "mov rdi, rcx",
    "rol rdi, 16",
    "imul rdx, r9, 63",
    "lea rdi, [rdi + rdx + {entry_bits}]",
    "or rdi, {more}",
    // rcx: the record's offset; rdx: the slots, 1 + (8 + 8W).div_ceil(16),
    // in `reserve`'s units; room for them, not past the ring's end.
    "mov rcx, rsi",
    "shr rcx, {slot_shift} - 4",
    "and rcx, [r11 + {r_offset_mask}]",
    "movzx edx, r10b",
    "movq r10, xmm15",
    "and edx, 15",
    "lea rdx, [rdx*8 + 23]",
    "shr rdx, 4",
    "inc rdx",
    "shl rdx, {slot_shift}",
    "lea r9, [rsi + rdx - (1 << {slot_shift})]",
    "cmp r9, [r11 + {r_room_end}]",
    "jae 82f",
    "mov r9, rdx",
    "shr r9, {slot_shift} - 4",
    "add r9, rcx",
    "sub r9, 16",
    "cmp r9, [r11 + {r_offset_mask}]",
    "ja 82f",
    // The commit's value: the slots on, the ring's depth one deeper.
    "lea r9, [rsi + rdx + 1]",
    "movq xmm13, r9",
    "punpcklqdq xmm13, xmm13",
    "mov [r11 + rcx + {header} + REC_TIME], rax",
    "mov [r11 + rcx + {header} + REC_WORD], rdi",
    // The data slots, from the data (r10; rcx: the first; r9: their
    // bytes; rdi: done).
    "lea rcx, [r11 + rcx + {header} + 16]",
    "mov r9, rdx",
    "shr r9, {slot_shift} - 4",
    "sub r9, 16",
    "xor edi, edi",
    "61:",
    "movdqu xmm14, [r10 + rdi]",
    "movdqu [rcx + rdi], xmm14",
    "add rdi, 16",
    "cmp rdi, r9",
    "jb 61b",
    "movdqu xmmword ptr [r11 + {r_head}], xmm13",
    "shadowgraph_fused_plain_args_post:",
    "cmp rsp, rsp",
    plain_args_restore!(),
    "ret",
    // The general way: from 82 (in the sequence, or its abort) with the
    // frame perhaps pushed (taken back), from 80 as at entry; 79: a site
    // without a descriptor, the plain entry's.
    "82:",
    crate::fixed_tls!("mov ", "qword", "tp_thread", "{t_curr}", ", r8"),
    "80:",
    plain_args_restore!(),
    "jmp shadowgraph_graph_site_entry",
    "79:",
    plain_args_restore!(),
    "jmp shadowgraph_fused_site_entry_plain",
    ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits",
    rseq_abort!("shadowgraph_fused_plain_args", "82b"),
    ".popsection",
    rseq_descriptor!("shadowgraph_fused_plain_args"),
    ".popsection";
    tp_thread = sym fgraph::TP_THREAD,
    tp_rings = sym TP_RINGS,
    rseq_cs = sym RSEQ_CS,
    rseq_restarts = sym ARGS_RESTARTS,
    fused_word = sym fgraph::SOLE_FRAME_WORD,
    plain_args = sym PLAIN_ARGS,
    plain_args_len = sym PLAIN_ARGS_LEN,
    no_frame_word = const fgraph::NO_FRAME_WORD as i64,
    id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
    has_float = const HAS_FLOAT,
    in_order = const IN_ORDER,
    in_order4 = const IN_ORDER4,
    odd = const ODD,
    arg_masks = sym ARG_MASKS,
    t_stack = const offset_of!(ThreadState, stack),
    t_curr = const offset_of!(ThreadState, curr),
    t_blockers = const crate::fgraph::stack::BLOCKERS,
    hookable = const crate::fgraph::stack::HOOKABLE,
    r_offset_mask = const offset_of!(RingHeader, offset_mask),
    slot_shift = const crate::record::ring::SLOT_SHIFT,
    r_head = const offset_of!(RingHeader, head),
    r_room_end = const offset_of!(RingHeader, room_end),
    r_reserve = const offset_of!(RingHeader, reserve),
    r_with_data = const offset_of!(RingHeader, with_data),
    header = const HEADER_BYTES,
    room_limit = sym crate::fgraph::stack::FAST_PUSH_LIMIT,
    frame_words = const crate::fgraph::stack::FRAME_WORDS,
    site_users = sym crate::fgraph::SITE_USERS,
    site_users_cap = const crate::fgraph::SITE_USERS_CAPACITY,
    entry_bits = const shadowgraph_data::format::MAGIC << 3,
    more = const crate::record::ring::MORE,
    max_record_depth = const MAX_RECORD_DEPTH,
);
