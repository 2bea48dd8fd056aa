//! The plain site entry for sites whose arguments are their first N
//! registers in order (`-A f@arg1,arg2` …: the most common specs), one
//! entry per N and width, which each such site's stub calls directly: the
//! plain entry (plain.rs) with the registers stored after the entry record
//! in the same restartable sequence. No descriptor is looked up and no
//! register saved beyond the plain entry's own: the arguments are stored
//! from where the plain entry keeps them. Every other site with arguments
//! calls the descriptor's entry (plain_args.rs); the data's layout is its.
//!
//! ```text
//! The arguments as the plain entry keeps them (plain_saves!):
//!   [rsp]      rdi      rsi (untouched)   xmm9  rdx    xmm8   rcx
//!                                         xmm11 r8     xmm12  r9
//! The ring (r11), from the record's offset o (rcx):
//!   r11 + header + o           the record {time, word | MORE}
//!   r11 + header + o + 16      the data's length in bytes (8 × W)
//!   r11 + header + o + 24 …    W words: the N registers whole (W = N),
//!                              or their low 4 bytes (W = ⌈N/2⌉, the 4
//!                              bytes after an odd number zeroed)
//!   D = ⌈(8 + 8W) / 16⌉ data slots after the record's; the commit adds
//!   1 + D slots to `reserve` and the call's level to its depth.
//! ```

use super::frame_asm::{
    entry_stack, fused_layout, plain_pop_saved, plain_saves, sole_user_check, thread_base,
    thread_op,
};
use super::plain::plain_site_entry;
use super::ring_asm::{plain_record, rseq_abort, rseq_descriptor};
use super::{MAX_RECORD_DEPTH, RSEQ_CS, TP_RINGS};
use crate::fgraph::stack::ThreadState;
use crate::fgraph::{self};
use crate::record::ring::{RingHeader, HEADER_BYTES};
use std::mem::offset_of;

// The `$room` of an entry whose data takes `$d` slots: the last one below
// the room's end (and so the record's too), and not past the ring's end
// (its index, masked, at least `$d`: one that wrapped is below).
macro_rules! data_room {
    ($d:literal) => {
        concat!(
            "lea rdx, [rax + (",
            $d,
            " << {slot_shift})]\n",
            "cmp rdx, [r11 + {r_room_end}]\n",
            "jae 82f\n",
            "shr rdx, {slot_shift} - 4\n",
            "and rdx, [r11 + {r_offset_mask}]\n",
            "cmp rdx, 16 * ",
            $d,
            "\n",
            "jb 82f\n",
        )
    };
}

// One entry: `$entry`, sequence `$seq`, `$d` data slots, `$stores` the
// data (rax and rdx free; ARGS_AT: the record's offset from r11 + 16).
// Its general way is the plain entry's: fgraph's, whose callbacks record
// the arguments.
macro_rules! regs_entry {
    ($entry:literal, $seq:literal, $d:literal, $stores:expr) => {
        crate::fgraph::graph_asm!(
            fused_layout!(),
            ".set ARGS_AT, {header} + 16",
            ".pushsection .text.shadowgraph_fused,\"ax\",@progbits",
            plain_site_entry!(
                $entry,
                $seq,
                // The ring holds records with data from now on (x86 stores
                // are seen in order: the flag before any record it
                // announces; the drain reads it after `head`).
                concat!(
                    "cmp dword ptr [r11 + {r_with_data}], 0\n",
                    "jne 64f\n",
                    "mov dword ptr [r11 + {r_with_data}], 1\n",
                    "64:\n",
                ),
                data_room!($d),
                concat!("((1 + ", $d, ") << {slot_shift}) + 1"),
                "or rdi, {more}\n",
                $stores
            ),
            ".popsection";
            tp_thread = sym fgraph::TP_THREAD,
            tp_rings = sym TP_RINGS,
            rseq_cs = sym RSEQ_CS,
            rseq_restarts = sym super::args_table::ARGS_RESTARTS,
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
            r_with_data = const offset_of!(RingHeader, with_data),
            header = const HEADER_BYTES,
            room_limit = sym crate::fgraph::stack::FAST_PUSH_LIMIT,
            frame_words = const crate::fgraph::stack::FRAME_WORDS,
            id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
            site_users = sym crate::fgraph::SITE_USERS,
            site_users_cap = const crate::fgraph::SITE_USERS_CAPACITY,
            entry_bits = const shadowgraph_data::format::MAGIC << 3,
            more = const crate::record::ring::MORE,
            max_record_depth = const MAX_RECORD_DEPTH,
        );
    };
}

// The data's stores: its length (`$len` bytes), then the first
// register's (`$first`: rdi, kept on the stack), then each further
// `$op [ARGS_AT + $off], $reg` (rsi as it is, the others from the xmm
// registers the plain entry keeps them in; `0` for the padding after an
// odd number of halves).
macro_rules! stores {
    ($len:literal, $first:expr; $($op:literal $reg:literal $off:literal),*) => {
        concat!(
            "mov qword ptr [r11 + rcx + ARGS_AT], ",
            $len,
            "\n",
            $first,
            $($op, " [r11 + rcx + ARGS_AT + ", $off, "], ", $reg, "\n",)*
        )
    };
}

// rdi whole, and its low half.
macro_rules! rdi_whole {
    () => {
        "mov rax, [rsp]\nmov [r11 + rcx + ARGS_AT + 8], rax\n"
    };
}
macro_rules! rdi_half {
    () => {
        "mov eax, [rsp]\nmov [r11 + rcx + ARGS_AT + 8], eax\n"
    };
}

// Whole words: N registers, ⌈(8 + 8N) / 16⌉ slots.
regs_entry!(
    "shadowgraph_fused_regs8_1",
    "shadowgraph_fused_regs8_1_seq",
    1,
    stores!("8", rdi_whole!();)
);
regs_entry!(
    "shadowgraph_fused_regs8_2",
    "shadowgraph_fused_regs8_2_seq",
    2,
    stores!("16", rdi_whole!(); "mov" "rsi" "16")
);
regs_entry!(
    "shadowgraph_fused_regs8_3",
    "shadowgraph_fused_regs8_3_seq",
    2,
    stores!("24", rdi_whole!(); "mov" "rsi" "16", "movq" "xmm9" "24")
);
regs_entry!(
    "shadowgraph_fused_regs8_4",
    "shadowgraph_fused_regs8_4_seq",
    3,
    stores!("32", rdi_whole!(); "mov" "rsi" "16", "movq" "xmm9" "24", "movq" "xmm8" "32")
);
regs_entry!(
    "shadowgraph_fused_regs8_5",
    "shadowgraph_fused_regs8_5_seq",
    3,
    stores!("40", rdi_whole!(); "mov" "rsi" "16", "movq" "xmm9" "24", "movq" "xmm8" "32",
        "movq" "xmm11" "40")
);
regs_entry!(
    "shadowgraph_fused_regs8_6",
    "shadowgraph_fused_regs8_6_seq",
    4,
    stores!("48", rdi_whole!(); "mov" "rsi" "16", "movq" "xmm9" "24", "movq" "xmm8" "32",
        "movq" "xmm11" "40", "movq" "xmm12" "48")
);
// Low halves: N registers in ⌈N/2⌉ words, ⌈(8 + 8⌈N/2⌉) / 16⌉ slots.
regs_entry!(
    "shadowgraph_fused_regs4_1",
    "shadowgraph_fused_regs4_1_seq",
    1,
    stores!("8", rdi_half!(); "mov dword ptr" "0" "12")
);
regs_entry!(
    "shadowgraph_fused_regs4_2",
    "shadowgraph_fused_regs4_2_seq",
    1,
    stores!("8", rdi_half!(); "mov" "esi" "12")
);
regs_entry!(
    "shadowgraph_fused_regs4_3",
    "shadowgraph_fused_regs4_3_seq",
    2,
    stores!("16", rdi_half!(); "mov" "esi" "12", "movd" "xmm9" "16", "mov dword ptr" "0" "20")
);
regs_entry!(
    "shadowgraph_fused_regs4_4",
    "shadowgraph_fused_regs4_4_seq",
    2,
    stores!("16", rdi_half!(); "mov" "esi" "12", "movd" "xmm9" "16", "movd" "xmm8" "20")
);
regs_entry!(
    "shadowgraph_fused_regs4_5",
    "shadowgraph_fused_regs4_5_seq",
    2,
    stores!("24", rdi_half!(); "mov" "esi" "12", "movd" "xmm9" "16", "movd" "xmm8" "20",
        "movd" "xmm11" "24", "mov dword ptr" "0" "28")
);
regs_entry!(
    "shadowgraph_fused_regs4_6",
    "shadowgraph_fused_regs4_6_seq",
    2,
    stores!("24", rdi_half!(); "mov" "esi" "12", "movd" "xmm9" "16", "movd" "xmm8" "20",
        "movd" "xmm11" "24", "movd" "xmm12" "28")
);
