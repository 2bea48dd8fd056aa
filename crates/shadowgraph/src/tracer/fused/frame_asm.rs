//! The assembly of a fused entry and return: the registers saved, the
//! bracket, the frame pushed and popped, the limits, the records.
//!
//! Every block of the fused paths is a `fgraph::graph_asm!` (the caller
//! frame, the shadow frame and the callbacks' structs, by name:
//! `fgraph::layout`) that opens with `fused_layout!()`, which names the
//! words of the fused paths' own stacks and frames:
//!
//! ```text
//! The entry's stack after entry_saves! (four pushes):
//!   rsp + FE_PARENT_SLOT (40)  R: the traced function's return address
//!   rsp + FE_CALL_RET    (32)  the return address of the call that came
//!                              here: site + 5 (from a manager's stub) or
//!                              stub + 13 (a site stub's `call [ENTRY]`)
//!   rsp + 24 … 8               rax, rdi, r10
//!   rsp + FE_SITE        (0)   r11: the site (from a site stub)
//! After plain_saves! (two pushes: rax, rdi):
//!   rsp + PE_PARENT_SLOT (24)  R
//!   rsp + PE_CALL_RET    (16)  stub + 13
//! The return's stack after return_head! (two pushes: rax, rdx):
//!   rsp + FR_SLOT        (8)   the returning call's slot (R was there)
//! The plain return's (nothing pushed: rsp = the slot + 8):
//!   rsp + PR_SLOT        (−8)  the returning call's slot
//!
//! A timed frame (TIMED_WORDS words from f):
//!   f + TIMED_DATA_WORD        the DATA word of its one reserved word
//!   f + TIMED_TIME             the entry's time word (0: not timed yet)
//!   f + FRAME_BITMAP … f       the frame (fgraph::layout)
//! A profile frame (PROFILE_WORDS words from f):
//!   f + PROF_DATA_WORD         the DATA word of its three reserved words
//!   f + PROF_ID                the site id
//!   f + PROF_CHILDREN          the time in profiled callees
//!   f + PROF_START             the entry's time
//!   f + FRAME_BITMAP … f       the frame
//! A ring record: its time at REC_TIME, its word at REC_WORD.
//! ```

// The `.set` symbols of the diagram above.
macro_rules! fused_layout {
    () => {
        concat!(
            ".set FE_SITE, 0\n",
            ".set FE_CALL_RET, 4 * 8\n",
            ".set FE_PARENT_SLOT, FE_CALL_RET + 8\n",
            ".set PE_CALL_RET, 2 * 8\n",
            ".set PE_PARENT_SLOT, PE_CALL_RET + 8\n",
            ".set FR_SLOT, 8\n",
            ".set PR_SLOT, -8\n",
            ".set TIMED_TIME, FRAME_DATA\n",
            ".set TIMED_DATA_WORD, TIMED_TIME + 8\n",
            ".set TIMED_WORDS, TIMED_DATA_WORD / 8 + 1\n",
            ".set PROF_START, FRAME_DATA\n",
            ".set PROF_CHILDREN, PROF_START + 8\n",
            ".set PROF_ID, PROF_CHILDREN + 8\n",
            ".set PROF_DATA_WORD, PROF_ID + 8\n",
            ".set PROFILE_WORDS, PROF_DATA_WORD / 8 + 1\n",
            ".set REC_TIME, 0\n",
            ".set REC_WORD, 8\n",
        )
    };
}
pub(super) use fused_layout;

// The bracket, left: depth 1 → 0 and the exit generation + 1, in one
// instruction (a signal handler leaves the word as it found it, save for
// generations it completed). Clobbers rcx.
macro_rules! bracket_leave {
    () => {
        concat!(
            crate::fixed_load!("rcx", "tp_local"),
            "mov rcx, qword ptr fs:[rcx + {l_word}]\n",
            "add qword ptr [rcx], 0xffff\n",
        )
    };
}
pub(super) use bracket_leave;

// The entry's frame at word r8 of stack rdi: {R, rdx, slot, RESERVED},
// R's slot at rsp + FE_PARENT_SLOT (or the offset given). Clobbers rax.
macro_rules! frame_words {
    () => {
        frame_words!("FE_PARENT_SLOT")
    };
    ($slot:literal) => {
        frame_words!(
            $slot,
            "qword ptr [rdi + r8*8 + FRAME_BITMAP], {frame_words}"
        )
    };
    // `$bitmap`: the store of the frame's BITMAP word.
    ($slot:literal, $bitmap:literal) => {
        concat!(
            "mov rax, [rsp + ",
            $slot,
            "]\n",
            "mov [rdi + r8*8 + FRAME_RET], rax\n",
            "mov [rdi + r8*8 + FRAME_FUNC], rdx\n",
            "lea rax, [rsp + ",
            $slot,
            "]\n",
            "mov [rdi + r8*8 + FRAME_RETP], rax\n",
            "mov ",
            $bitmap,
            "\n",
        )
    };
}
pub(super) use frame_words;

// The nine registers the entry saves, restored: five from xmm8–12, four
// from the stack (see entry_head).
macro_rules! pop_saved {
    () => {
        concat!(
            "movq r9, xmm12\nmovq r8, xmm11\nmovq rsi, xmm10\nmovq rdx, xmm9\nmovq rcx, xmm8\n",
            "pop r11\npop r10\npop rdi\npop rax\n",
        )
    };
}
pub(super) use pop_saved;

// The entry's limits, from label 4 (registers as there): a call the user
// declines (`-D`) goes to 83, where nothing is left to do; a user with
// graph filters (its limit the sign bit) goes where `$filtered` jumps.
// Ends at label 6.
macro_rules! depth_limits {
    ($filtered:literal) => {
        concat!(
            "mov rax, [rsi + {u_max_depth}]\n",
            "test rax, rax\n",
            "jz 6f\n",
            $filtered,
            "cmp r9, rax\n",
            "jae 83f\n",
            "6:\n",
        )
    };
}
pub(super) use depth_limits;

// Label 83, where the entry's limits send a call they decline: leave as if
// untraced, with `$declined` saying so.
macro_rules! declined_exit {
    ($declined:literal) => {
        concat!("83:\n", bracket_leave!(), $declined, pop_saved!(), "ret\n")
    };
}
pub(super) use declined_exit;

// The entry's first part, shared by its variants: the nine registers
// saved (rax rdi r10 r11 pushed, the site last: [rsp]; rcx rdx rsi r8 r9
// in xmm8–12, which are free at a function's entry: caller-saved and no
// argument's, and gcc turns inter-procedural register allocation off for
// functions with patchable entries, so no caller keeps a value there
// across a call; out of memory, they cost no store and load each; rdi
// stays on the stack: an argument moved through xmm makes the traced
// function's first use of it wait on the move back),
// the bracket entered, the sole graph user a fused recorder (rsi),
// `$ring` (the plain recorder's ring in r11, else nothing), the thread's
// shadow stack (rdi, rcx the thread state's offset) and where the new frame
// goes (r8 = curr) at what depth (r9), the parent frame's last word
// recognised by `$top` and its length less one by `$parent` (see below).
// Ends at label 4; the general way: label 80 with nothing held, 81 with
// the bracket entered (the variant's code defines them). `$check` runs
// with the user in rsi (rax and rdx free): a site stub's entry checks
// that the site is still the user's (site_selects!).
macro_rules! entry_head {
    ($top:expr, $parent:literal, $ring:expr, $check:expr) => {
        concat!(
            entry_saves!(),
            // At rest: a bracket word, depth 0, no recursion bit.
            crate::fixed_load!("rcx", "tp_local"),
            "mov rdx, qword ptr fs:[rcx + {l_word}]\n",
            "test rdx, rdx\n",
            "jz 80f\n",
            "test word ptr [rdx], 0xffff\n",
            "jnz 80f\n",
            "cmp dword ptr fs:[rcx + {l_rec}], 0\n",
            "jne 80f\n",
            // Enter the bracket, anchored at the return slot.
            "lea rax, [rsp + FE_PARENT_SLOT]\n",
            crate::bracket_enter_at_rest!("rcx", "rdx"),
            entry_stack!(
                // The sole graph user is a fused recorder (so the manager
                // is registered: fgraph::FUSED) with a ring on this thread.
                // One load: every chain of loads before the clock read
                // lengthens the call (see ring_record).
                concat!(
                    "mov rsi, [rip + {fused}]\n",
                    "test rsi, rsi\n",
                    "jz 81f\n",
                    $check
                ),
                $top,
                $parent,
                $ring,
                "81f",
                reg,
                "FE_PARENT_SLOT",
                ""
            ),
        )
    };
}
pub(super) use entry_head;

// The nine registers the entry saves (see entry_head).
macro_rules! entry_saves {
    () => {
        concat!(
            "push rax\n",
            "push rdi\n",
            "push r10\n",
            "push r11\n",
            "movq xmm8, rcx\n",
            "movq xmm9, rdx\n",
            "movq xmm10, rsi\n",
            "movq xmm11, r8\n",
            "movq xmm12, r9\n",
        )
    };
}
pub(super) use entry_saves;

// The six registers the plain site entry saves: rax rdi pushed, rcx rdx
// r8 r9 in xmm8, 9, 11, 12, as entry_saves (r10 and rsi are left alone,
// r11 is the stub's site, free at a function's entry); and the same
// restored.
macro_rules! plain_saves {
    () => {
        "push rax\npush rdi\nmovq xmm8, rcx\nmovq xmm9, rdx\nmovq xmm11, r8\nmovq xmm12, r9\n"
    };
}
pub(super) use plain_saves;

macro_rules! plain_pop_saved {
    () => {
        "movq r9, xmm12\nmovq r8, xmm11\nmovq rdx, xmm9\nmovq rcx, xmm8\npop rdi\npop rax\n"
    };
}
pub(super) use plain_pop_saved;

// In a plain entry's sequence, before its commit: the fused user still
// the sole path's (the one read of the user that a grace period covers:
// an unregistration's fence restarts the sequence, which then reads
// NO_FRAME_WORD). rdx: its frame word, for the new frame's last word.
// Above a frame, that frame's last word is the same word (a frame of this
// user's, not one pushed before it came or another path's); at curr = 0
// there is none (word −1 is 0), and the word must not be NO_FRAME_WORD
// (one user ever takes the fused path in a process: a word other than
// NO_FRAME_WORD is this one's). And the site, whose stub's return is at
// `[$call_ret]`, still the user's (site_selects!). Anything else:
// `$general`. Clobbers rax.
macro_rules! sole_user_check {
    ($general:literal, $call_ret:literal) => {
        concat!(
            crate::site_selects!($call_ret, "dword ptr [rip + {fused_word}]", $general),
            "mov rdx, [rip + {fused_word}]\n",
            "cmp rdx, [rdi + r8*8 - 8]\n",
            "je 63f\n",
            "test r8, r8\n",
            concat!("jnz ", $general, "\n"),
            "cmp rdx, {no_frame_word}\n",
            concat!("je ", $general, "\n"),
            "63:\n",
        )
    };
}
pub(super) use sole_user_check;

// How entry_stack reaches the thread's state: `reg`, at the offset
// fixed_load! puts in rcx (left there for the caller); `fixed`, at
// offsets written into each instruction (fixed_tls!: the plain site path).
macro_rules! thread_base {
    (reg) => {
        crate::fixed_load!("rcx", "tp_thread")
    };
    (fixed) => {
        ""
    };
}
pub(super) use thread_base;

macro_rules! thread_op {
    (reg, $before:literal, $size:literal, $field:literal, $after:literal) => {
        concat!($before, $size, " ptr fs:[rcx + ", $field, "]", $after, "\n")
    };
    (fixed, $before:literal, $size:literal, $field:literal, $after:literal) => {
        crate::fixed_tls!($before, $size, "tp_thread", $field, $after)
    };
}
pub(super) use thread_op;

// The rest of entry_head from the bracket on: the user (`$user`, which
// jumps to `$general` if there is none), `$ring`, the stack, curr and the
// new call's depth, to label 4; anything unusual jumps to `$general`.
// `$slot`: the offset from rsp of the call's return slot; `$unknown`:
// run first where `$top` does not recognise the top frame. r10 is kept.
macro_rules! entry_stack {
    ($user:expr, $top:expr, $parent:literal, $ring:expr, $general:literal, $tls:ident, $slot:literal, $unknown:expr) => {
        concat!(
            $user,
            $ring,
            // The thread's shadow stack: attached, hooked, not exiting or paused.
            thread_base!($tls),
            // (Its word HOOKABLE: the stack is there, see ThreadState.)
            thread_op!($tls, "cmp ", "qword", "{t_blockers}", ", {hookable}"),
            concat!("jne ", $general, "\n"),
            thread_op!($tls, "mov rdi, ", "qword", "{t_stack}", ""),
            // r8 = curr; r9 = depth: one deeper than the top frame f = curr−1−o
            // (o = word[curr−1]'s offset), 0 without one. A top frame whose return
            // slot is not above ours was left by a longjmp: the general way.
            // Most often f is one of this user's own frames, whose last word
            // `$top` recognises (comparing rax, setting ZF): then f + 1 =
            // curr − `$parent` without waiting for the word's offset (every
            // load this entry waits for before its clock read lengthens the
            // call: see ring_record).
            thread_op!($tls, "mov r8, ", "qword", "{t_curr}", ""),
            // (At curr = 0, the stack's word −1: always 0, no frame's.)
            "mov rax, [rdi + r8*8 - 8]\n",
            $top,
            "jne 3f\n",
            "lea rdx, [r8 - ",
            $parent,
            "]\n", // f + 1
            "2:\n",
            "lea rax, [rsp + ",
            $slot,
            "]\n",
            "cmp [rdi + rdx*8 + FRAME_RETP - FRAME_FUNC], rax\n", // its return slot
            "jbe 5f\n",
            "7:\n",
            "mov r9, [rdi + rdx*8 + FRAME_FUNC - FRAME_FUNC]\n", // func | depth << 48
            "shr r9, 48\n",
            "inc r9\n",
            "4:\n",
            // Deeper than records can say (10 bits): the general way
            // records those at 1023.
            "cmp r9, {max_record_depth}\n",
            concat!("jae ", $general, "\n"),
            // Out of the way: a top frame not recognised by its last word
            // (f + 1 from the word's offset; none: depth 0), and a slot
            // not above f's.
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            "3:\n",
            $unknown,
            "xor r9d, r9d\n",
            "and eax, 0x3ff\n",
            "jz 4b\n",
            "cmp rax, r8\n",
            "jae 4b\n",
            "mov rdx, r8\n",
            "sub rdx, rax\n", // f + 1
            "jmp 2b\n",
            "5:\n",
            concat!("jb ", $general, "\n"),
            // The same slot: a tail call from f's function nests in f
            // (fgraph's `enter` decides alike); anything else goes the
            // general way.
            "movq xmm14, r10\n",
            "mov r10, [rsp + ",
            $slot,
            "]\n",
            "mov rax, [rdi + rdx*8 + FRAME_FUNC - FRAME_FUNC]\n",
            "shl rax, 16\n",
            "shr rax, 16\n",
            "call shadowgraph_tail_call_from\n",
            "movq r10, xmm14\n",
            concat!("jne ", $general, "\n"),
            "jmp 7b\n",
            ".popsection\n",
        )
    };
}
pub(super) use entry_stack;

// The entry's fast path, for a site that called the manager's stub
// (`$check` "": its filter chose the call; the trampoline names no site)
// (`$site` puts the site in rdx from [rsp+32], the address after the call,
// `$hook` takes over the return, `$hooked` says so, `$declined` is the
// exit for calls `$limits` declines: `declined_exit!`)
// or for a site stub (tramp.rs), which does the taking over itself. The
// general way: label 80 with nothing held.
macro_rules! fused_entry {
    ($name:literal, $site:literal, $hook:literal, $hooked:literal, $declined:expr, $limits:expr, $check:expr) => {
        concat!(
            entry_head!(
                "cmp rax, [rsi + {u_frame_word}]\n",
                "{frame_words}",
                concat!(
                    crate::fixed_load!("rcx", "tp_rings"),
                    "mov r11, qword ptr fs:[rcx]\n",
                    "test r11, r11\n",
                    "jz 81f\n",
                ),
                $check
            ),
            $limits,
            // Room for the frame, else the general way counts an overrun.
            "cmp r8, [rip + {room_limit}]\n",
            "jae 81f\n",
            // The frame {R, func | depth << 48, slot, RESERVED}, written whole
            // before curr publishes it and again after (a handler that ran in
            // between, even between two of the first writes, may have used the
            // words: the signal fuzz test of tests/fgraph.rs catches a single
            // write checked by one word); pushed before the record is
            // claimed, as on the general way (a handler's calls in between nest in
            // it and come first).
            $site,
            "mov rax, r9\n",
            "shl rax, 48\n",
            "or rdx, rax\n",
            frame_words!(),
            "lea rax, [r8 + {frame_words} + 1]\n",
            "mov qword ptr fs:[rcx + {t_curr}], rax\n",
            frame_words!(),
            // The entry record {time, Entry | MAGIC | depth << 6 | func << 16} in
            // a slot of the ring, else the frame goes and the general way waits
            // for one. Its word from the frame's (rdx: func | depth << 48, the
            // shift dropping the depth), in r9 across the claim.
            "shl rdx, 16\n",
            "shl r9, 6\n",
            "or r9, rdx\n",
            "or r9, {entry_bits}\n",
            ring_record!(
                $name,
                "82f",
                "r10",
                "r9",
                "mov dx, r9w\nshr dx, 6\ninc dx\n",
                ""
            ),
            // Kept for the user: its BITMAP word, then the hijack.
            "mov rax, [rsi + {u_frame_word}]\n",
            "mov [rdi + r8*8 + FRAME_BITMAP], rax\n",
            $hook,
            bracket_leave!(),
            $hooked,
            pop_saved!(),
            "ret\n",
            $declined,
            // The general way: from 82 with the frame pushed (take it back: any
            // handler's frames above it are gone), from 81 with the bracket
            // entered (leave it), from 80 as at entry.
            "82:\n",
            crate::fixed_load!("rcx", "tp_thread"),
            "mov qword ptr fs:[rcx + {t_curr}], r8\n",
            "81:\n",
            bracket_leave!(),
            "80:\n",
            pop_saved!(),
        )
    };
}
pub(super) use fused_entry;

// The return's first part, shared by its variants: rax and rdx saved, the
// bracket entered (its word in r8), the sole graph user a fused recorder
// (rsi), `$ring` (the ring in r11, else nothing), the thread's shadow stack
// (rdi) and its `curr` (r9). The general way: label 90 with nothing held,
// 91 with the bracket entered (the variant's code defines them).
macro_rules! return_head {
    ($ring:expr) => {
        concat!(
            "push rax\n",
            "push rdx\n",
            crate::fixed_load!("rcx", "tp_local"),
            "mov r8, qword ptr fs:[rcx + {l_word}]\n",
            "test r8, r8\n",
            "jz 90f\n",
            "test word ptr [r8], 0xffff\n",
            "jnz 90f\n",
            "cmp dword ptr fs:[rcx + {l_rec}], 0\n",
            "jne 90f\n",
            "lea rax, [rsp + FR_SLOT]\n",
            crate::bracket_enter_at_rest!("rcx", "r8"),
            "mov rsi, [rip + {fused}]\n",
            "test rsi, rsi\n",
            "jz 91f\n",
            $ring,
            crate::fixed_load!("rcx", "tp_thread"),
            "mov rdi, qword ptr fs:[rcx + {t_stack}]\n",
            "test rdi, rdi\n",
            "jz 91f\n",
            "mov r9, qword ptr fs:[rcx + {t_curr}]\n",
        )
    };
}
pub(super) use return_head;

// The exit record of the returning call's frame f (r10) of stack rdi in
// ring r11 (rsi the user), labels `$name`_*, without room: label 92.
// The record's word from the frame's (func | depth << 48), in rcx, made
// once the clock is read (nothing before the read waits for it).
macro_rules! exit_record {
    ($name:literal) => {
        concat!(
            ring_record!(
                $name,
                "92f",
                "r9",
                "rcx",
                "mov dx, cx\nshr dx, 6\n",
                concat!(
                    "mov rcx, [rdi + r10*8 + FRAME_FUNC]\n",
                    "mov rdx, rcx\n",
                    "shr rdx, 48\n",
                    "cmp edx, {max_record_depth}\n",
                    "jae 92f\n",
                    "shl rdx, 6\n",
                    "shl rcx, 16\n",
                    "or rcx, rdx\n",
                    "or rcx, {exit_bits}\n",
                )
            ),
            "and dword ptr [rdi + r10*8 + FRAME_BITMAP], {users_clear}\n",
        )
    };
}
pub(super) use exit_record;

// Pops frame f (r10) of stack rdi and resumes at its real return address
// with `$resume` (in r11, rax and rdx restored). The bracket left through
// its word, still in r8.
macro_rules! pop_frame {
    ($resume:literal) => {
        concat!(
            "mov r11, [rdi + r10*8 + FRAME_RET]\n",
            crate::fixed_load!("rcx", "tp_thread"),
            "mov qword ptr fs:[rcx + {t_curr}], r10\n",
            "add qword ptr [r8], 0xffff\n",
            "pop rdx\n",
            "pop rax\n",
            $resume,
        )
    };
}
pub(super) use pop_frame;

// The return's fast path; resumes with `$resume` (r11 = the real return
// address, every register of the result restored). The general way: label
// 90 with nothing held.
macro_rules! fused_return {
    ($name:literal, $resume:literal, $filtered:literal) => {
        concat!(
            return_head!(concat!(
                crate::fixed_load!("rcx", "tp_rings"),
                "mov r11, qword ptr fs:[rcx]\n",
                "test r11, r11\n",
                "jz 91f\n",
            )),
            // The top frame f (r10) is the returning call's (its slot) and was
            // kept for this user alone: its last word is the user's BITMAP
            // word, whose offset says f = curr − 4 (compared whole, so that
            // the frame's slot is read beside it, not after it).
            "cmp r9, {frame_words} + 1\n",
            "jb 91f\n",
            "mov rax, [rdi + r9*8 - 8]\n",
            "cmp rax, [rsi + {u_frame_word}]\n",
            "jne 91f\n",
            "lea r10, [r9 - {frame_words} - 1]\n",
            "lea rax, [rsp + FR_SLOT]\n",
            "cmp [rdi + r9*8 - ({frame_words} + 1) * 8 + FRAME_RETP], rax\n",
            "jne 91f\n",
            // The exit record {time, Exit | MAGIC | depth << 6 | func << 16} in a
            // slot of the ring, else the general way waits for one. The frame's
            // users are taken once it is in: a signal handler that lands before
            // and leaves by siglongjmp finds the frame still its user's (the
            // kernel aborted the record: its exit is reported as unwound), one
            // that lands after the record and before the frame is handed back
            // finds it too, and the user's callback, seeing its exit in the ring
            // (by the ring's depth), writes no second one.
            $filtered,
            exit_record!($name),
            pop_frame!($resume),
            "92:\n",
            "91:\n",
            bracket_leave!(),
            "90:\n",
            "pop rdx\n",
            "pop rax\n",
        )
    };
}
pub(super) use fused_return;

// A site entry variant's end: the call hooked (ZF=1) with the bracket left
// and the nine registers restored; then the general way, from 81 with the
// bracket entered, from 80 as at entry.
macro_rules! site_entry_end {
    () => {
        concat!(
            bracket_leave!(),
            "cmp rsp, rsp\n",
            pop_saved!(),
            "ret\n",
            "81:\n",
            bracket_leave!(),
            "80:\n",
            pop_saved!(),
            "jmp shadowgraph_graph_site_entry\n",
        )
    };
}
pub(super) use site_entry_end;

// A site return variant's general way: from 91 with the bracket entered,
// from 90 as at entry.
macro_rules! site_return_general {
    () => {
        concat!(
            "91:\n",
            bracket_leave!(),
            "90:\n",
            "pop rdx\n",
            "pop rax\n",
            "jmp shadowgraph_site_return_general\n",
        )
    };
}
pub(super) use site_return_general;
