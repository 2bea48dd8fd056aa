//! A profile beside recorders on the multi path (multi.rs): its frames
//! carry the profile's three words `{start, children, site id}` and their
//! DATA word after the BITMAP word, as `GraphUser::reserve(24)` makes them
//! and the single profile path does (profile.rs), so that fgraph's general
//! way and the profile's callbacks read them as their own; its row of the
//! thread's table is counted at the return, as that path counts it. The
//! recorders' records go on as without it: the profile has no ring, and
//! its bit is left out of the users the records are written for. The
//! macros are parts of multi.rs's entry and return and name its operands.
//!
//! ```text
//! A profile frame of the multi path (PROFILE_WORDS words from f):
//!   f + PROF_DATA_WORD   the profile's DATA word (BySlot's profile_data)
//!   f + PROF_ID          the site id
//!   f + PROF_CHILDREN    the time in profiled callees
//!   f + PROF_START       the entry's time: the event's, which the records
//!                        of the same entry take
//!   f + FRAME_BITMAP     the users' word (the profile's bit among them)
//!   f + FRAME_RETP … f   R, func | depth, R's slot
//! Return:
//!   xmm9   0: not a profile frame; 1 from 93 (a profile frame) to 71;
//!          then its row, to the update (76)
//!   xmm10  the caller's children word (0: no caller), from 71
//! ```

use crate::fgraph::GraphUser;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// The recording instance of the profile the multi path keeps counters
/// for (`u64::MAX`: none): one at a time; another profile keeps the path
/// from standing in for its users.
pub(super) static MULTI_PROFILE_INST: AtomicU64 = AtomicU64::new(u64::MAX);
/// Offset from the thread pointer of that profile's table cell, and the
/// rows of each table.
pub(super) static MULTI_PROFILE_CELL: AtomicI64 = AtomicI64::new(0);
pub(super) static MULTI_PROFILE_ROWS: AtomicU64 = AtomicU64::new(0);
/// Whether a profile ever stood in on the multi path: until one has, the
/// path looks for none.
pub(super) static MULTI_ANY_PROFILE: AtomicBool = AtomicBool::new(false);

/// Lets the multi path stand in for `user`, a profile's graph user (not
/// registered yet) whose callbacks are `tracer::profile`'s, of recording
/// instance `user.private`: `table` is this thread's cell holding the
/// thread's table (thread-local, initial-exec), each with `rows` rows, as
/// for [`attach_profile`](super::attach_profile). False (nothing changed)
/// while another profile stands in, or for records not timed by the TSC.
pub fn let_multi_stand_in_profile(user: &GraphUser, table: usize, rows: usize) -> bool {
    if !crate::clock::uses_tsc() {
        return false;
    }
    let inst = user.private as u64;
    // Relaxed (all): read by the path only after MULTI_FRAME_WORD, which
    // fgraph publishes (Release) when the user registers, later.
    if MULTI_PROFILE_INST
        .compare_exchange(u64::MAX, inst, Ordering::Relaxed, Ordering::Relaxed)
        .is_err_and(|i| i != inst)
    {
        return false;
    }
    MULTI_PROFILE_CELL.store(crate::tls::tp_offset(table), Ordering::Relaxed);
    MULTI_PROFILE_ROWS.store(rows as u64, Ordering::Relaxed);
    MULTI_ANY_PROFILE.store(true, Ordering::Relaxed);
    user.let_multi_path_stand_in();
    true
}

/// Instance `inst`, a profile whose users are unregistered, is given
/// back: the path keeps counters for it no longer (before the instance
/// is taken again, by a recorder, say).
pub fn forget_multi_profile(inst: usize) {
    // Relaxed: its users are gone, and a later user of the instance
    // registers (publishing MULTI_FRAME_WORD, Release) after this.
    let _ = MULTI_PROFILE_INST.compare_exchange(
        inst as u64,
        u64::MAX,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
}

// In rings_with_room!'s search of the users (slot rax, kept in xmm13): a
// user of the profile instance goes to 28, where its bit and DATA word
// are kept in BySlot (it needs no ring). Clobbers rdx.
macro_rules! profile_or_ring {
    () => {
        concat!(
            "cmp byte ptr [rip + {any_profile}], 0\n",
            "je 20f\n",
            "lea rdx, [rip + {slot_private}]\n",
            "mov rdx, [rdx + rax*8]\n",
            "cmp rdx, [rip + {profile_inst}]\n",
            "je 28f\n",
            "20:\n",
        )
    };
}
pub(super) use profile_or_ring;

// rings_with_room!'s label 28: the profile's slot rax, still in ARRAY
// (else `$general`): its bit and its DATA word kept; back to 25.
// Clobbers rdx, r11.
macro_rules! profile_found {
    ($general:literal) => {
        concat!(
            "28:\n",
            "lea rdx, [rip + {array}]\n",
            "cmp qword ptr [rdx + rax*8], 0\n",
            "je ",
            $general,
            "\n",
            crate::fixed_load!("r11", "tp_by_slot"),
            "lea rdx, [rax + 12]\n",
            "bts qword ptr fs:[r11 + {b_profile}], rdx\n",
            "mov rdx, rax\n",
            "shl rdx, 17\n",
            "or rdx, {data_three}\n",
            "mov qword ptr fs:[r11 + {b_profile_data}], rdx\n",
            "jmp 25b\n",
        )
    };
}
pub(super) use profile_found;

// The entry, at 86 with the users' word in rsi (and xmm15), their rings
// found (BySlot current): a word naming the profile makes a profile frame
// (60, out of line); else on at 61.
macro_rules! entry_profile_check {
    () => {
        concat!(
            "cmp byte ptr [rip + {any_profile}], 0\n",
            "jne 60f\n",
            "61:\n",
        )
    };
}
pub(super) use entry_profile_check;

// The entry's profile frame (label 60, in the cold section): if the word
// names the profile, with room for its words, this thread's table and the
// site's row (else the general way, 81), the row's call counted under way,
// the frame written whole before curr publishes it and again after, the
// event opened and its time read, which the frame keeps as its start and
// the records take; then the records of the others (62, r9 their word,
// r10 the time). Not the profile: back to 61.
macro_rules! entry_profile_frame {
    () => {
        concat!(
            "60:\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "test rsi, qword ptr fs:[rdx + {b_profile}]\n",
            "jz 61b\n",
            // (The room limit leaves room for the frame and its BITMAP word.)
            "lea rax, [r8 + PROFILE_WORDS - {frame_words} - 1]\n",
            "cmp rax, [rip + {room_limit}]\n",
            "jae 81f\n",
            "mov rax, [rip + {profile_cell}]\n",
            "mov r11, qword ptr fs:[rax]\n",
            "test r11, r11\n",
            "jz 81f\n",
            "mov r10, [rsp + FE_CALL_RET]\n",
            "mov r10d, dword ptr [r10 + {id_off}]\n",
            "cmp r10, [rip + {profile_rows}]\n",
            "jae 81f\n",
            "mov r11, [r11 + {pt_rows}]\n",
            "mov rax, r10\n",
            "shl rax, {row_shift}\n",
            // Under way from here, before the start time is read (as the
            // profile's own path counts it).
            "add qword ptr [r11 + rax + {pc_active}], 1\n",
            crate::fixed_load!("rax", "tp_by_slot"),
            "mov r11, qword ptr fs:[rax + {b_profile_data}]\n",
            frame_func_word!(),
            multi_profile_words!(),
            "lea rax, [r8 + PROFILE_WORDS]\n",
            "mov qword ptr fs:[rcx + {t_curr}], rax\n",
            multi_profile_words!(),
            entry_word!(),
            "mov qword ptr fs:[rcx + {t_event}], {event_open}\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "mov r10, rax\n",
            "mov [rdi + r8*8 + PROF_START], r10\n",
            "movq rsi, xmm15\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "mov rax, qword ptr fs:[rdx + {b_profile}]\n",
            "not rax\n",
            "and rsi, rax\n",
            "jmp 62b\n",
        )
    };
}
pub(super) use entry_profile_frame;

// A profile frame at word r8 of stack rdi: the frame (rdx the function and
// depth, the users' word rsi), the profile's words {start 0, children 0,
// id r10} and its DATA word r11. Clobbers rax.
macro_rules! multi_profile_words {
    () => {
        concat!(
            frame_words!("FE_PARENT_SLOT", "[rdi + r8*8 + FRAME_BITMAP], rsi"),
            "mov qword ptr [rdi + r8*8 + PROF_START], 0\n",
            "mov qword ptr [rdi + r8*8 + PROF_CHILDREN], 0\n",
            "mov [rdi + r8*8 + PROF_ID], r10\n",
            "mov [rdi + r8*8 + PROF_DATA_WORD], r11\n",
        )
    };
}
pub(super) use multi_profile_words;

// The return's top word (rax) not the users' word: a profile frame if it
// is the profile's DATA word as BySlot last found it (checked again once
// BySlot is current, at 71) and the frame's BITMAP word names the users,
// or some of them (graph filters declined the others): r10 the frame,
// xmm9 1, to 70. Else on at 73. Labels 73, 74.
macro_rules! return_profile_frame {
    () => {
        concat!(
            "cmp byte ptr [rip + {any_profile}], 0\n",
            "je 73f\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "cmp rax, qword ptr fs:[rdx + {b_profile_data}]\n",
            "jne 73f\n",
            "cmp r9, PROFILE_WORDS\n",
            "jb 91f\n",
            "lea r10, [r9 - PROFILE_WORDS]\n",
            "mov rax, [rdi + r10*8 + FRAME_BITMAP]\n",
            "cmp rax, rsi\n",
            "je 74f\n",
            "xor rax, rsi\n",
            "mov rdx, rsi\n",
            "and rdx, {users_bits}\n",
            "not rdx\n",
            "test rax, rdx\n",
            "jnz 91f\n",
            "74:\n",
            "mov eax, 1\n",
            "movq xmm9, rax\n",
            "jmp 70b\n",
            "73:\n",
        )
    };
}
pub(super) use return_profile_frame;

// At 71 (BySlot current), for a profile frame (xmm9 nonzero; else back to
// 72): its top word the profile's DATA word, the caller's frame (if any)
// the profile's too, this thread's table and the frame's row (else the
// general way, 91): the row in xmm9, the caller's children word in xmm10
// (0: none); back to 72. Clobbers rax, rcx, r11.
macro_rules! return_profile_row {
    () => {
        concat!(
            "71:\n",
            "movq rax, xmm9\n",
            "test rax, rax\n",
            "jz 72b\n",
            crate::fixed_load!("rcx", "tp_by_slot"),
            "mov rax, [rdi + r9*8 - 8]\n",
            "cmp rax, qword ptr fs:[rcx + {b_profile_data}]\n",
            "jne 91f\n",
            "xor r11d, r11d\n",
            "test r10, r10\n",
            "jz 75f\n",
            "cmp [rdi + r10*8 - 8], rax\n",
            "jne 91f\n",
            "lea r11, [rdi + r10*8 - PROFILE_WORDS * 8 + PROF_CHILDREN]\n",
            "75:\n",
            "movq xmm10, r11\n",
            "mov rax, [rip + {profile_cell}]\n",
            "mov rcx, qword ptr fs:[rax]\n",
            "test rcx, rcx\n",
            "jz 91f\n",
            "mov rax, [rdi + r10*8 + PROF_ID]\n",
            "cmp rax, [rip + {profile_rows}]\n",
            "jae 91f\n",
            "shl rax, {row_shift}\n",
            "add rax, [rcx + {pt_rows}]\n",
            "movq xmm9, rax\n",
            "jmp 72b\n",
        )
    };
}
pub(super) use return_profile_row;

// The users the records are written for, of the frame's word rsi: the
// profile's bit taken out (it has no ring), where a profile ever stood
// in. Clobbers rax, rdx; labels 77, 78.
macro_rules! without_profile {
    () => {
        concat!(
            "cmp byte ptr [rip + {any_profile}], 0\n",
            "je 78f\n",
            crate::fixed_load!("rdx", "tp_by_slot"),
            "mov rax, qword ptr fs:[rdx + {b_profile}]\n",
            "not rax\n",
            "and rsi, rax\n",
            "78:\n",
        )
    };
}
pub(super) use without_profile;

// The return's profile counts (label 76, in the cold section), once the
// frame's users are taken, for a profile frame (xmm9 its row; 0: back to
// 77): d = now − start (0 if the clock went back; now the event's time
// r9, or read here if no record read it), added to the caller's children
// and to the row, one instruction a field; back to 77. Clobbers rax, rcx,
// rdx, rsi, r11.
macro_rules! return_profile_counts {
    () => {
        concat!(
            "76:\n",
            "movq rsi, xmm9\n",
            "test rsi, rsi\n",
            "jz 77b\n",
            "cmp r9, 2\n",
            "jne 1f\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "mov r9, rax\n",
            "1:\n",
            "mov rax, r9\n",
            "sub rax, [rdi + r10*8 + PROF_START]\n",
            "jnc 2f\n",
            "xor eax, eax\n",
            "2:\n",
            "movq r11, xmm10\n",
            "test r11, r11\n",
            "jz 3f\n",
            "add [r11], rax\n",
            "3:\n",
            "add qword ptr [rsi + {pc_hits}], 1\n",
            "add [rsi + {pc_total}], rax\n",
            "mov rcx, rax\n",
            "sub rcx, [rdi + r10*8 + PROF_CHILDREN]\n",
            "jnc 4f\n",
            "xor ecx, ecx\n",
            "4:\n",
            "add [rsi + {pc_self}], rcx\n",
            "mov rcx, rax\n",
            "mul rax\n",
            "add [rsi + {pc_sumsq}], rax\n",
            "adc [rsi + {pc_sumsq} + 8], rdx\n",
            "sub qword ptr [rsi + {pc_active}], 1\n",
            "jnz 77b\n",
            "add [rsi + {pc_outer}], rcx\n",
            "jmp 77b\n",
        )
    };
}
pub(super) use return_profile_counts;
