//! The users' rings on the multi path (multi.rs): each one found through
//! its slot, with room to spare, and kept in the thread's `BySlot` under
//! the multi word they were found for, and whether a user with a depth
//! limit gets an event's record. The macros are parts of multi.rs's entry
//! and return and name its operands.

// The ring of the user whose slot is rax, in r11, or to `$gone` if the
// user is no longer in ARRAY or has no ring on this thread. Its instance
// from SLOT_PRIVATE, not through the user: the ring is two dependent
// loads from the slot, and ARRAY's load is on no path to it. Clobbers
// rax, rdx.
macro_rules! user_ring {
    ($gone:literal) => {
        concat!(
            "lea rdx, [rip + {array}]\n",
            "cmp qword ptr [rdx + rax*8], 0\n",
            "je ",
            $gone,
            "\n",
            "lea rdx, [rip + {slot_private}]\n",
            "mov rax, [rdx + rax*8]\n",
            "mov rdx, [rip + {tp_rings_all}]\n",
            "mov r11, qword ptr fs:[rdx + rax*8]\n",
            "test r11, r11\n",
            "jz ",
            $gone,
            "\n",
        )
    };
}

// Whether the user in slot rax records this event: not if its recording
// has a depth limit (MULTI_MAX_DEPTH, by its instance) that the event's
// depth (bits 6..15 of `$word`) reaches — its records are left out, as
// its callbacks leave them (the plain recorder's depth limit) — then to
// `$skip`. Nothing to look at while no user of the path ever had a limit.
// rax kept; clobbers rdx, r11; label 29.
macro_rules! skip_limited {
    ($word:literal, $skip:expr) => {
        concat!(
            "cmp byte ptr [rip + {any_limit}], 0\n",
            "je 29f\n",
            "lea rdx, [rip + {slot_private}]\n",
            "mov rdx, [rdx + rax*8]\n",
            "lea r11, [rip + {max_depth}]\n",
            "mov r11d, dword ptr [r11 + rdx*4]\n",
            "test r11d, r11d\n",
            "jz 29f\n",
            "mov rdx, ",
            $word,
            "\n",
            "shr rdx, 6\n",
            "and edx, 0x3ff\n",
            "cmp edx, r11d\n",
            "jae ",
            $skip,
            "\n",
            "29:\n",
        )
    };
}

// The next user of `$set` (bits 0..15, nonzero): its slot in rax, its bit
// taken from `$set`. Clobbers rdx.
macro_rules! next_user {
    ($set:literal) => {
        concat!(
            "bsf rax, ",
            $set,
            "\n",
            "lea rdx, [",
            $set,
            " - 1]\n",
            "and ",
            $set,
            ", rdx\n",
        )
    };
}

// Whether every user of `$set` (MULTI_FRAME_WORD's bits, consumed; rsi
// the word) is still there with its ring on this thread and room to
// spare in it, for the records of signal handlers that may land before
// ours; else to `$general` (the general way waits for room, and makes a
// ring the thread lacks). While the thread's rings by slot
// (`writer::BySlot`) were found under this word, they are the users'
// rings, and each record checks its ring's room to spare (record_each!:
// one short of it sets the word 0, and the next event looks here again).
// Else the rings are found through SLOT_PRIVATE, their room checked, and
// kept under the word, with the users that have graph filters (their
// bits in BySlot's `late`: the entry names them in a frame only once it
// has decided for them), the users whose calls of some sites go to the
// callbacks (BySlot's `general`, by MULTI_CLASSES: the entry looks those
// sites up first), those that write `watch:cpu` events (BySlot's `watch`,
// by their filter's word: the entry and return compare processors first)
// and the profile, which has no ring (its bit and
// DATA word: multi_profile.rs). Labels 20–28; clobbers rax, rdx, r11,
// xmm13.
macro_rules! rings_with_room {
    ($set:literal, $general:literal) => {
        concat!(
            "shr ",
            $set,
            ", 12\n",
            "and ",
            $set,
            ", 0xffff\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "cmp rsi, qword ptr fs:[rdx + {b_word}]\n",
            "jne 24f\n",
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            // Found and kept, the word last: a handler that lands before
            // finds the word not yet this one and finds them too.
            "24:\n",
            "mov qword ptr fs:[rdx + {b_late}], 0\n",
            "mov qword ptr fs:[rdx + {b_general}], 0\n",
            "mov qword ptr fs:[rdx + {b_watch}], 0\n",
            "mov qword ptr fs:[rdx + {b_profile}], 0\n",
            "mov qword ptr fs:[rdx + {b_profile_data}], 0\n",
            "25:\n",
            "test ",
            $set,
            ", ",
            $set,
            "\n",
            "jz 27f\n",
            next_user!($set),
            "movq xmm13, rax\n",
            profile_or_ring!(),
            user_ring!($general),
            "mov rax, [r11 + {r_reserve}]\n",
            "add rax, {margin}\n",
            "cmp rax, [r11 + {r_room_end}]\n",
            "jae ",
            $general,
            "\n",
            "movq rax, xmm13\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "mov qword ptr fs:[rdx + rax*8 + {b_rings}], r11\n",
            "lea rdx, [rip + {slot_private}]\n",
            "mov rdx, [rdx + rax*8]\n",
            "add eax, 12\n",
            "lea r11, [rip + {multi_classes}]\n",
            "cmp qword ptr [r11 + rdx*8], 0\n",
            "je 26f\n",
            "mov r11, rdx\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "bts qword ptr fs:[rdx + {b_general}], rax\n",
            "mov rdx, r11\n",
            "26:\n",
            "lea r11, [rip + {multi_filter}]\n",
            "mov r11, [r11 + rdx*8]\n",
            "test r11, r11\n",
            "jz 25b\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "bts qword ptr fs:[rdx + {b_late}], rax\n",
            "cmp qword ptr [r11 + {f_watch}], 0\n",
            "je 25b\n",
            "bts qword ptr fs:[rdx + {b_watch}], rax\n",
            "jmp 25b\n",
            profile_found!($general),
            "27:\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "mov qword ptr fs:[rdx + {b_word}], rsi\n",
            "jmp 21f\n",
            ".popsection\n",
            "21:\n",
        )
    };
}
pub(super) use next_user;
pub(super) use rings_with_room;
pub(super) use skip_limited;
pub(super) use user_ring;
