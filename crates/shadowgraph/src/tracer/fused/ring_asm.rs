//! The assembly that writes a record into a ring, as `Ring`'s producer
//! side does (record/ring.rs): claim, write, publish, by `cmpxchg` or in
//! a restartable sequence.

// `reserve` of ring r11 in rax if there is room (else jump to `$full`),
// then the TSC in `$time`. The slot comes back to rax by a plain move, so
// that nothing after waits for the TSC but the record's time store.
// Clobbers rdx and the flags.
macro_rules! reserve_and_time {
    ($full:literal, $time:literal) => {
        concat!(
            "mov rax, [r11 + {r_reserve}]\n",
            "cmp rax, [r11 + {r_room_end}]\n",
            "jae ",
            $full,
            "\n",
            "mov ",
            $time,
            ", rax\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rdx, rax\n",
            "mov rax, ",
            $time,
            "\n",
            "mov ",
            $time,
            ", rdx\n",
        )
    };
}
pub(super) use reserve_and_time;

// A ring's producer side, as `Ring::claim_at/write/publish` (ring.rs):
// while there is room (else jump to `$full`), read the TSC and claim
// `reserve` by one cmpxchg, again both if a signal handler claimed meanwhile
// (so the thread's records stay in time order). `reserve` packs the slot
// (from bit 16) and the ring's depth (bits 0..15): the thread is at rest,
// so the depth is ours (`Depth::Given`), which `$depth` puts in dx — one
// more than an entry's, an exit's — after the slot's step. Ring in r11;
// `reserve` as claimed in rax, its time in `$time`; clobbers rdx and the
// flags.
macro_rules! ring_claim {
    ($full:literal, $time:literal, $depth:literal) => {
        concat!(
            "2:\n",
            reserve_and_time!($full, $time),
            "lea rdx, [rax + (1 << {slot_shift})]\n",
            $depth,
            "cmpxchg qword ptr [r11 + {r_reserve}], rdx\n",
            "jne 2b\n",
        )
    };
}
pub(super) use ring_claim;

// The record at the slot claimed (rax) of ring r11: `{$time, $word}`.
// Clobbers rdx.
macro_rules! ring_write {
    ($time:literal, $word:literal) => {
        concat!(
            "mov rdx, rax\n",
            "shr rdx, {slot_shift} - 4\n",
            "and rdx, [r11 + {r_offset_mask}]\n",
            "mov [r11 + rdx + {header} + REC_TIME], ",
            $time,
            "\n",
            "mov [r11 + rdx + {header} + REC_WORD], ",
            $word,
            "\n",
        )
    };
}
pub(super) use ring_write;

// Publishes the claim rax of ring r11, written, as `Ring::publish`: `head`
// moves to `reserve` if it is at rax (else an earlier slot's writer, which
// we interrupted, publishes ours), again from there if a handler claimed
// meanwhile. Ends at `$done`, the label right after it. Clobbers rax, rdx
// and the flags.
macro_rules! ring_publish {
    ($done:expr) => {
        concat!(
            "3:\n",
            "mov rdx, [r11 + {r_reserve}]\n",
            "cmpxchg qword ptr [r11 + {r_head}], rdx\n",
            "jne ",
            $done,
            "\n",
            "cmp rdx, [r11 + {r_reserve}]\n",
            "mov rax, rdx\n",
            "jne 3b\n",
        )
    };
}
pub(super) use ring_publish;

// A record {$time, $word} in ring r11, written at rest (no writer of this
// thread is between its claim and its publish: `reserve` equals `head`),
// `$depth` setting dx after the slot's step as in ring_claim, `$late`
// making `$word` after the TSC read. With the kernel's rseq (registered
// by glibc; RSEQ_CS holds the offset of its `rseq_cs` field from the
// thread pointer, 0 without): one restartable
// sequence of the room check, the TSC read, the record's stores and one
// 16-byte store of `head` and `reserve` (beside each other in the ring's
// header) that claims and publishes the record at once, which the kernel
// aborts if the thread is preempted or signalled before that store,
// sending it back to the start (`$name`_abort) before any handler runs: a
// handler finds the ring at rest, and its records precede ours in the
// ring and in time. (With `head` stored after `reserve`, a handler that
// landed between the two and left by siglongjmp lost our record and its
// own, counted.) No `cmpxchg` and nothing waits on a load after the TSC
// read. Why that matters: on many x86-64 machines `rdtsc` waits for every
// instruction before it to finish and
// none after it starts before it has, so a recorded call costs its two
// reads plus, between each read and the next, the longest chain of
// dependent loads and operations (about 1 ns a load); the cmpxchg claim
// and publish made one of 25 cycles after each read. Without rseq: ring_claim,
// ring_write, ring_publish (cold). Labels `$name`_*; ends at `$name`_done,
// or at `$full` without room (rseq_cs may stay set: the kernel ignores it
// outside the sequence). Clobbers rax, rdx, `$time`, xmm13 and the flags.
macro_rules! ring_record {
    ($name:literal, $full:literal, $time:literal, $word:literal, $depth:literal, $late:expr) => {
        concat!(
            rseq_arm!($name, concat!($name, "_legacy")),
            $name,
            "_start:\n",
            reserve_and_time!($full, $time),
            $late,
            ring_write!($time, $word),
            rseq_commit!($name, $depth),
            $late,
            ring_claim!($full, $time, $depth),
            ring_write!($time, $word),
            ring_publish!(concat!($name, "_done")),
            "jmp ",
            $name,
            "_done\n",
            ".popsection\n",
            rseq_descriptor!($name),
        )
    };
}
pub(super) use ring_record;

// The end of a record's restartable sequence at rest: `reserve` (rax) one
// slot on, `$depth` setting dx after the step, claimed and published by
// one store of `head` and `reserve` both the new value (xmm13 is free at
// a function's entry and return); labels `$name`_post and `$name`_done,
// then, out of line, the abort handler and `$name`_legacy, where the
// caller's way without rseq goes on. Clobbers rdx, xmm13.
// The store that claims and publishes the record at `reserve` (rax) of
// ring r11, at rest: `head` and `reserve` both one slot on, `$depth`
// setting dx after the step (xmm13 is free at a function's entry and
// return). Clobbers rdx, xmm13.
macro_rules! commit_store {
    ($depth:literal) => {
        concat!(
            "lea rdx, [rax + (1 << {slot_shift})]\n",
            $depth,
            "movq xmm13, rdx\n",
            "punpcklqdq xmm13, xmm13\n",
            "movdqu xmmword ptr [r11 + {r_head}], xmm13\n",
        )
    };
}
pub(super) use commit_store;

macro_rules! rseq_commit {
    ($name:literal, $depth:literal) => {
        concat!(
            commit_store!($depth),
            $name,
            "_post:\n",
            $name,
            "_done:\n",
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            rseq_abort!($name),
            $name,
            "_legacy:\n",
        )
    };
}
pub(super) use rseq_commit;

// A record {time, $word} in ring r11 for the plain site entry and return,
// which hold no bracket: one restartable sequence (as ring_record's) that
// goes to `$general` — untouched, the ring as it was — unless `$user` and
// `$pre` find the fused user still published (its frame word: a grace
// period that unpublished it restarts the sequence:
// quiesce::fence_rseq_too) and the rest `$pre` checks passes, the
// ring is at rest (`head` = `reserve`: no record of this thread is between
// its claim and its publish), `$witness` finds the ring's depth
// (`reserve`'s bits 0..15, in ax) where this call's record belongs (an
// entry's depth, an exit's depth + 1; else it jumps to `$general`), and
// that there is room for the record (and any data after it:
// `room_check!` for one slot). A signal handler that lands between a frame's push and
// its entry record, or between an exit record and the frame's pop, finds
// the frame and the ring a level apart: the entry records its calls where
// the ring says the thread is, and anything else out of step goes the
// general way, whose callbacks then record at the ring's depth
// (`Depth::Follow`). One that lands in the sequence sends the thread to
// `$resume` first: the sequence's start, as with ring_record, or where
// the registers it may have reused are not needed. Nothing in the
// sequence may jump out of it and come back: outside its range the kernel
// neither restarts it nor keeps it armed. `$make_word` makes `$word`;
// everything but the time is made before the clock read (the slot's
// offset in `$slot`; `reserve` and `head` after the record: `reserve` +
// `$step`, one slot on and the ring's depth one deeper or shallower, as
// the witness found it). `$data` runs with the slot's offset made,
// before the clock read (a record's data, in the slots after it, which
// `$witness` found room for). Labels `$name`_*; clobbers rax, rdx,
// `$slot`, xmm13 and the flags.
// plain_record's check of room for one slot at `reserve` (rax): below
// the room's end, else to `$general`.
macro_rules! room_check {
    ($general:literal) => {
        concat!("cmp rax, [r11 + {r_room_end}]\n", "jae ", $general, "\n")
    };
}
pub(super) use room_check;

macro_rules! plain_record {
    ($name:literal, $general:literal, $user:expr, $slot:literal, $word:literal, $witness:expr, $step:expr, $pre:expr, $make_word:expr, $data:expr, $resume:expr) => {
        concat!(
            $name,
            "_restart:\n",
            "lea rax, [rip + ",
            $name,
            "_cs]\n",
            crate::fixed_tls!("mov ", "qword", "rseq_cs", "0", ", rax"),
            $name,
            "_start:\n",
            $user,
            $pre,
            "mov rax, [r11 + {r_reserve}]\n",
            "cmp rax, [r11 + {r_head}]\n",
            "jne ",
            $general,
            "\n",
            $witness,
            $make_word,
            // Everything but the time made before the clock read: the
            // commit's value in xmm13 (xmm13 is free at a function's entry
            // and return), the slot's offset in `$slot`.
            "lea rdx, [rax + ",
            $step,
            "]\n",
            "movq xmm13, rdx\n",
            "punpcklqdq xmm13, xmm13\n",
            "mov ",
            $slot,
            ", rax\n",
            "shr ",
            $slot,
            ", {slot_shift} - 4\n",
            "and ",
            $slot,
            ", [r11 + {r_offset_mask}]\n",
            $data,
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "mov [r11 + ",
            $slot,
            " + {header} + REC_TIME], rax\n",
            "mov [r11 + ",
            $slot,
            " + {header} + REC_WORD], ",
            $word,
            "\n",
            // Claimed and published by one store: `head` and `reserve` both
            // the new value.
            "movdqu xmmword ptr [r11 + {r_head}], xmm13\n",
            $name,
            "_post:\n",
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            rseq_abort!($name, $resume),
            ".popsection\n",
            rseq_descriptor!($name),
        )
    };
}
pub(super) use plain_record;

// The abort handler of restartable sequence `$name` (labels `$name`_*):
// counted, then back to `$name`_restart, which arms the sequence again,
// or on to `$resume`.
macro_rules! rseq_abort {
    ($name:literal) => {
        rseq_abort!($name, concat!($name, "_restart"))
    };
    ($name:literal, $resume:expr) => {
        concat!(
            // glibc's signature (RSEQ_SIG), which the kernel checks before
            // an abort handler.
            ".long 0x53053053\n",
            $name,
            "_abort:\n",
            "lock inc qword ptr [rip + {rseq_restarts}]\n",
            "jmp ",
            $resume,
            "\n",
        )
    };
}
pub(super) use rseq_abort;

// The `struct rseq_cs` of sequence `$name` (version, flags, start, length,
// abort), at `$name`_cs: from `$name`_start to `$name`_post.
macro_rules! rseq_descriptor {
    ($name:literal) => {
        concat!(
            ".pushsection .data.rel.ro.shadowgraph_rseq,\"aw\",@progbits\n",
            ".balign 32\n",
            $name,
            "_cs:\n",
            ".long 0, 0\n",
            ".quad ",
            $name,
            "_start\n",
            ".quad ",
            $name,
            "_post - ",
            $name,
            "_start\n",
            ".quad ",
            $name,
            "_abort\n",
            ".popsection\n",
        )
    };
}
pub(super) use rseq_descriptor;

// Restartable sequence `$name` armed (its `rseq_cs` descriptor in the
// thread's `struct rseq`, at RSEQ_CS from the thread pointer): from label
// `$name`_restart, where its abort handler sends it back; without rseq
// (RSEQ_CS 0), to `$without`. Clobbers rax and rdx.
macro_rules! rseq_arm {
    ($name:literal, $without:expr) => {
        concat!(
            $name,
            "_restart:\n",
            crate::fixed_load!("rdx", "rseq_cs"),
            "test rdx, rdx\n",
            "jz ",
            $without,
            "\n",
            "lea rax, [rip + ",
            $name,
            "_cs]\n",
            "mov qword ptr fs:[rdx], rax\n",
        )
    };
}
pub(super) use rseq_arm;
