//! The frames and data words of the timed and profile variants.

// The timed variants' frame at word r8 of stack rdi: the frame (rdx the
// function and depth, as frame_words!, the user's BITMAP word in r11: the
// user's from the start, so that a frame a signal handler jumps out of
// reports its return, whatever its word says by then), then the user's
// data word (the entry time's word, 0: not timed yet) and the DATA word
// (r10) that fgraph's `GraphUser::reserve(8)` would make (its `retrieve`
// finds the word, so the general way reads it as its own). Clobbers rax.
macro_rules! timed_frame_words {
    () => {
        concat!(
            frame_words!("FE_PARENT_SLOT", "[rdi + r8*8 + FRAME_BITMAP], r11"),
            "mov qword ptr [rdi + r8*8 + TIMED_TIME], 0\n",
            "mov [rdi + r8*8 + TIMED_DATA_WORD], r10\n",
        )
    };
}
pub(super) use timed_frame_words;

// The timed return's judgement of frame f (r10): its word in r11; to label
// 60 if its entry is written; the general way (91) if it is dropped,
// being timed or never timed (not ours to judge), or lasted at least the
// threshold; on (rax, rdx clobbered) if it was too short.
macro_rules! timed_judge {
    () => {
        concat!(
            "mov r11, [rdi + r10*8 + TIMED_TIME]\n",
            "bt r11, {written_bit}\n",
            "jc 60f\n",
            "mov rax, r11\n",
            "shr rax, {written_bit} - 2\n",
            "jnz 91f\n",
            "test r11, r11\n",
            "jz 91f\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "sub rax, r11\n",
            "cmp rax, [rsi + {u_min_ticks}]\n",
            "jae 91f\n",
        )
    };
}
pub(super) use timed_judge;

// A profile's frame at word r8 of stack rdi: the frame (rdx the function
// and depth, as frame_words!, its BITMAP word reserved), then the
// profile's data {start 0, children 0, id r9} and its DATA word (r10),
// as `GraphUser::reserve(24)` would make them. Clobbers rax.
macro_rules! profile_frame_words {
    () => {
        concat!(
            frame_words!(),
            "mov qword ptr [rdi + r8*8 + PROF_START], 0\n",
            "mov qword ptr [rdi + r8*8 + PROF_CHILDREN], 0\n",
            "mov [rdi + r8*8 + PROF_ID], r9\n",
            "mov [rdi + r8*8 + PROF_DATA_WORD], r10\n",
        )
    };
}
pub(super) use profile_frame_words;

// The DATA word of user rsi's frames with `$data` (`{data_one}`: a
// timed frame's, `{data_three}`: a profile's) in `$reg`.
macro_rules! data_word {
    ($reg:literal, $data:literal) => {
        concat!(
            "movsxd ",
            $reg,
            ", dword ptr [rsi + {u_slot}]\n",
            "shl ",
            $reg,
            ", 17\n",
            "or ",
            $reg,
            ", ",
            $data,
            "\n",
        )
    };
}
pub(super) use data_word;

// The DATA word of a timed frame of user rsi, in `$reg`.
macro_rules! timed_data_word {
    ($reg:literal) => {
        data_word!($reg, "{data_one}")
    };
}
pub(super) use timed_data_word;
