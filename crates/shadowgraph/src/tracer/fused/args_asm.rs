//! The entry record of a call whose integer arguments the fused path
//! records itself, and the exit record of one whose integer return value
//! it records: the filtered site entry's and return's records with their
//! data after them, as `Ring::claim_with_data`/`write_with_data` lay it
//! out.
//!
//! A site's descriptor (`FusedFilter::args`, [`super::fast_args`]): byte 0
//! the data's length in words, then one byte per argument in the specs'
//! order (bit 7: present; bits 0–2: the register, 0–5 for rdi rsi rdx rcx
//! r8 r9, or with bit 6 xmm0–7; bit 3: 8 bytes, else 4, of which bit 4
//! keeps 1 and bit 5 keeps 2). Each argument takes its bytes padded to 4,
//! the whole padded to 8, zeros in the padding, as the callbacks write
//! them.
//!
//! ```text
//! The stack while the record is made (after 4 pushes and A_AREA):
//!   rsp + A_ENTRY_RDI                  rdi at the entry (entry_saves!'s,
//!                                      A_AREA + 32 + FE_SITE + 16)
//!   rsp + A_V                          the pushed r10: the user's thread
//!                                      variable v, whose low 16 bits are
//!                                      the ring's depth after the record
//!   rsp + A_AREA … + 31                rdi rsi r8 r10 as pushed
//!   rsp + A_WORDS                      the data's length in words
//!   rsp + A_STEP                       the slots claimed (record + data)
//!                                      in `reserve`'s units
//!   rsp + A_XMM … + 63                 xmm0–7's low words (untouched
//!                                      by the entry, still the call's)
//!   rsp + A_DATA … + 47                the data, built before the claim
//!   rsp + A_REGS … + 47                rdi rsi rdx rcx r8 r9 at the entry
//!                                      (rdi from the stack, the rest
//!                                      from xmm10 xmm9 xmm8 xmm11 xmm12)
//! The ring from the record's offset o (rdi = r11 + o in the sequence):
//!   r11 + header + o                   the record {time, word | MORE}
//!   r11 + header + o + 16              the data's length in bytes
//!   r11 + header + o + 24 …            the data words
//! ```

// The stack words of the diagram above.
macro_rules! args_layout {
    () => {
        concat!(
            ".set A_REGS, 0\n",
            ".set A_DATA, 48\n",
            ".set A_STEP, 96\n",
            ".set A_WORDS, 104\n",
            ".set A_XMM, 112\n",
            ".set A_AREA, 176\n",
            ".set A_V, A_AREA + 24\n",
            ".set A_ENTRY_RDI, A_AREA + 32 + FE_SITE + 16\n",
        )
    };
}
pub(super) use args_layout;

// From the filtered site entry's record (rcx its word, r11 the ring, r10
// v, the frame pushed; rdi, rsi, r8 live), with the site's descriptor in
// xmm15: the data built from the saved registers, then one restartable
// sequence (as ring_record's: the room check, the TSC read, the stores,
// and `head` and `reserve` moved together past the record and its data)
// that the kernel restarts if the thread is preempted or signalled in it.
// Without room, or where the record and its data would run past the
// ring's end (the data's words are written in one piece), or without
// rseq: the general way with the frame pushed (82). Ends at 47 with
// every register as it came but rax, rcx, rdx, r9 and xmm13. Labels
// `$name`_* and 60–70.
macro_rules! args_entry_record {
    ($name:literal) => {
        concat!(
            "60:\n",
            "push r10\npush r8\npush rsi\npush rdi\n",
            "sub rsp, A_AREA\n",
            "mov rax, [rsp + A_ENTRY_RDI]\n",
            "mov [rsp + A_REGS], rax\n",
            "movq [rsp + A_REGS + 8], xmm10\n",
            "movq [rsp + A_REGS + 16], xmm9\n",
            "movq [rsp + A_REGS + 24], xmm8\n",
            "movq [rsp + A_REGS + 32], xmm11\n",
            "movq [rsp + A_REGS + 40], xmm12\n",
            "movq [rsp + A_XMM], xmm0\n",
            "movq [rsp + A_XMM + 8], xmm1\n",
            "movq [rsp + A_XMM + 16], xmm2\n",
            "movq [rsp + A_XMM + 24], xmm3\n",
            "movq [rsp + A_XMM + 32], xmm4\n",
            "movq [rsp + A_XMM + 40], xmm5\n",
            "movq [rsp + A_XMM + 48], xmm6\n",
            "movq [rsp + A_XMM + 56], xmm7\n",
            "pxor xmm13, xmm13\n",
            "movdqu [rsp + A_DATA], xmm13\n",
            "movdqu [rsp + A_DATA + 16], xmm13\n",
            "movdqu [rsp + A_DATA + 32], xmm13\n",
            // The words W, and the slots: 1 + (8 + 8W).div_ceil(16).
            "movq rax, xmm15\n",
            "movzx edx, al\n",
            "mov [rsp + A_WORDS], rdx\n",
            "lea rsi, [rdx*8 + 23]\n",
            "shr rsi, 4\n",
            "inc rsi\n",
            "shl rsi, {slot_shift}\n",
            "mov [rsp + A_STEP], rsi\n",
            // Each argument at offset edx of the data.
            "xor edx, edx\n",
            "61:\n",
            "shr rax, 8\n",
            "test al, 0x80\n",
            "jz 63f\n",
            "movzx esi, al\n",
            "and esi, 7\n",
            "test al, 0x40\n",
            "jnz 69f\n",
            "mov rsi, [rsp + A_REGS + rsi*8]\n",
            "70:\n",
            "test al, 8\n",
            "jnz 62f\n",
            "test al, 0x10\n",
            "jz 64f\n",
            "movzx esi, sil\n",
            "64:\n",
            "test al, 0x20\n",
            "jz 65f\n",
            "movzx esi, si\n",
            "65:\n",
            "mov dword ptr [rsp + A_DATA + rdx], esi\n",
            "add edx, 4\n",
            "jmp 61b\n",
            "62:\n",
            "mov qword ptr [rsp + A_DATA + rdx], rsi\n",
            "add edx, 8\n",
            "jmp 61b\n",
            "69:\n",
            "mov rsi, [rsp + A_XMM + rsi*8]\n",
            "jmp 70b\n",
            "63:\n",
            "or rcx, {more}\n",
            // The ring holds records with data from now on (Release: x86
            // stores are seen in order; the drain reads it after `head`).
            "cmp dword ptr [r11 + {r_with_data}], 0\n",
            "jne 66f\n",
            "mov dword ptr [r11 + {r_with_data}], 1\n",
            "66:\n",
            rseq_arm!($name, "67f"),
            $name,
            "_start:\n",
            "mov r10, [r11 + {r_reserve}]\n",
            "mov r8, [rsp + A_STEP]\n",
            "lea rsi, [r10 + r8 - (1 << {slot_shift})]\n",
            "cmp rsi, [r11 + {r_room_end}]\n",
            "jae 67f\n",
            // The record's offset, and where its data ends: not past the
            // ring's end.
            "mov rdi, r10\n",
            "shr rdi, {slot_shift} - 4\n",
            "and rdi, [r11 + {r_offset_mask}]\n",
            "shr r8, {slot_shift} - 4\n",
            "add r8, rdi\n",
            "mov rsi, [r11 + {r_offset_mask}]\n",
            "add rsi, 16\n",
            "cmp r8, rsi\n",
            "ja 67f\n",
            // (rdi: the record's address less the header's size.)
            "add rdi, r11\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "mov [rdi + {header} + REC_TIME], rax\n",
            "mov [rdi + {header} + REC_WORD], rcx\n",
            "mov rax, [rsp + A_WORDS]\n",
            "shl rax, 3\n",
            "mov [rdi + {header} + 16], rax\n",
            "xor esi, esi\n",
            "68:\n",
            "mov rax, [rsp + A_DATA + rsi*8]\n",
            "mov [rdi + {header} + 24 + rsi*8], rax\n",
            "inc rsi\n",
            "cmp rsi, [rsp + A_WORDS]\n",
            "jb 68b\n",
            // Claimed and published by one store: `head` and `reserve` past
            // the data, the ring's depth v's.
            "mov rdx, r10\n",
            "add rdx, [rsp + A_STEP]\n",
            "mov dx, word ptr [rsp + A_V]\n",
            "movq xmm13, rdx\n",
            "punpcklqdq xmm13, xmm13\n",
            "movdqu xmmword ptr [r11 + {r_head}], xmm13\n",
            $name,
            "_post:\n",
            "add rsp, A_AREA\n",
            "pop rdi\npop rsi\npop r8\npop r10\n",
            "jmp 47f\n",
            "67:\n",
            "add rsp, A_AREA\n",
            "pop rdi\npop rsi\npop r8\npop r10\n",
            "jmp 82b\n",
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            rseq_abort!($name),
            ".popsection\n",
            rseq_descriptor!($name),
        )
    };
}
pub(super) use args_entry_record;

// The filtered site return's exit record with the call's return value
// after it, where the user's table of return values (rcx: `RetTable`'s
// layout, {mask, then {site, mask, from xmm0} per slot}) holds the call's
// site: from label 54 (registers as at the return's record: r8 the
// thread variable as the return leaves it, r10 the frame, r11 the ring,
// rsi the user, rdi the stack, the result's rax and rdx saved at
// [rsp + 8] and [rsp]). A site not in the table: back to 55, the plain
// exit record. Else one restartable sequence claims the record and its
// data slot ({8, the value}), writes them and moves `head` and `reserve`
// past both (xmm14: `reserve`, xmm15: the record's address; xmm2–15 are
// free at a return); without room, too deep, at the ring's last slot (the
// data would wrap) or without rseq: the general way (92). Ends at 53 with
// the frame's user bits cleared and the variable stored, as the plain
// record leaves them. Labels `$name`_* and 54–59.
macro_rules! retval_exit_record {
    ($name:literal) => {
        concat!(
            "54:\n",
            "mov rax, [rdi + r10*8 + FRAME_FUNC]\n",
            "shl rax, 16\n",
            "shr rax, 16\n",
            "mov rdx, rax\n",
            "shr rdx, 4\n",
            "56:\n",
            "and rdx, [rcx]\n",
            "lea r9, [rdx + rdx*2]\n",
            "shl r9, 3\n",
            "cmp [rcx + 8 + r9], rax\n",
            "je 57f\n",
            "cmp qword ptr [rcx + 8 + r9], 0\n",
            "je 55b\n",
            "inc rdx\n",
            "jmp 56b\n",
            "57:\n",
            // The value (rax as saved, or xmm0, untouched since the
            // return), and the record's word {func, depth, exit, more}.
            "mov rdx, [rcx + 16 + r9]\n",
            "cmp qword ptr [rcx + 24 + r9], 0\n",
            "mov r9, [rsp + 8]\n",
            "je 59f\n",
            "movq r9, xmm0\n",
            "59:\n",
            "and r9, rdx\n",
            "shl rax, 16\n",
            "movzx edx, r8w\n",
            "cmp edx, {max_record_depth}\n",
            "jae 92b\n",
            "shl rdx, 6\n",
            "or rax, rdx\n",
            "or rax, {exit_bits}\n",
            "or rax, {more}\n",
            "mov rcx, rax\n",
            "cmp dword ptr [r11 + {r_with_data}], 0\n",
            "jne 58f\n",
            "mov dword ptr [r11 + {r_with_data}], 1\n",
            "58:\n",
            rseq_arm!($name, "92b"),
            $name,
            "_start:\n",
            "mov rax, [r11 + {r_reserve}]\n",
            "lea rdx, [rax + (1 << {slot_shift})]\n",
            "cmp rdx, [r11 + {r_room_end}]\n",
            "jae 92b\n",
            "movq xmm14, rax\n",
            "mov rdx, rax\n",
            "shr rdx, {slot_shift} - 4\n",
            "and rdx, [r11 + {r_offset_mask}]\n",
            "cmp rdx, [r11 + {r_offset_mask}]\n",
            "jae 92b\n",
            "add rdx, r11\n",
            "movq xmm15, rdx\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "movq rdx, xmm15\n",
            "mov [rdx + {header} + REC_TIME], rax\n",
            "mov [rdx + {header} + REC_WORD], rcx\n",
            "mov qword ptr [rdx + {header} + 16], 8\n",
            "mov [rdx + {header} + 24], r9\n",
            // Claimed and published by one store, the ring's depth v's.
            "movq rdx, xmm14\n",
            "add rdx, 2 << {slot_shift}\n",
            "mov dx, r8w\n",
            "movq xmm13, rdx\n",
            "punpcklqdq xmm13, xmm13\n",
            "movdqu xmmword ptr [r11 + {r_head}], xmm13\n",
            $name,
            "_post:\n",
            "and dword ptr [rdi + r10*8 + FRAME_BITMAP], {users_clear}\n",
            "movsxd rcx, dword ptr [rsi + {u_slot}]\n",
            "mov [rdi + rcx*8 + {tv}], r8\n",
            "jmp 53b\n",
            rseq_abort!($name),
            rseq_descriptor!($name),
        )
    };
}
pub(super) use retval_exit_record;
