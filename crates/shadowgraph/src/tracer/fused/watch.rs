//! `--watch cpu` on the fused filtered path and the multi path: a
//! recorder that writes a `watch:cpu` event whenever a call's entry or
//! exit finds its thread on another processor than its last event named.
//! The thread's processor is the `cpu_id` of its `struct rseq` (what
//! `sched_getcpu` reads), one load from the thread pointer; the fused
//! entries and returns compare it with the processor the thread's last
//! event in the recorder's records named ([`cpu_moved`] keeps it, a word
//! per recording instance) and take the call only where they are the
//! same, before they write anything: a call on another processor goes to
//! the callbacks, which write the event. Without rseq, every call does.

use crate::record::writer::MAX_INSTANCES;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

crate::fast_thread_local!(
    /// By recording instance, the processor the thread's last `watch:cpu`
    /// event in its records named, plus one (0: none yet).
    static WATCHED: [AtomicU32; MAX_INSTANCES];
);

/// Offset from the thread pointer of the thread's [`WATCHED`] word of the
/// instance the fused path records for (0: not yet known), for its entry
/// and return (general.rs, labels 78 and 27).
pub(super) static TP_WATCHED: AtomicI64 = AtomicI64::new(0);

/// Offset from the thread pointer of the thread's [`WATCHED`] words (0:
/// not yet known), for the multi path (multi.rs, labels 44 and 54), which
/// indexes them by instance.
pub(super) static TP_WATCHED_ALL: AtomicI64 = AtomicI64::new(0);

/// Makes [`TP_WATCHED_ALL`] known, before the multi path reads it (a
/// user of it registers).
pub(super) fn init_all() {
    // Relaxed: read by the path only after MULTI_FRAME_WORD, which fgraph
    // publishes (Release) when the user registers, later.
    TP_WATCHED_ALL.store(
        crate::tls::tp_offset(WATCHED.as_ptr() as usize),
        Ordering::Relaxed,
    );
}

/// Makes [`TP_WATCHED`] known for instance `inst` (in range), before the
/// path that reads it is registered.
pub(super) fn init(inst: usize) {
    // Relaxed: read by the path only after it is registered, which
    // publishes it (Release).
    TP_WATCHED.store(
        crate::tls::tp_offset(&WATCHED[inst] as *const AtomicU32 as usize),
        Ordering::Relaxed,
    );
}

/// The thread now runs on processor `cpu`: whether its last `watch:cpu`
/// event in instance `inst`'s records named another (or none), and a new
/// one is due there. Async-signal-safe (one thread-local word, swapped: a
/// signal handler's event in between sees the word either way, and at
/// most one event names each change). False for an instance out of range.
pub fn cpu_moved(inst: usize, cpu: u32) -> bool {
    let now = cpu.wrapping_add(1);
    // Relaxed: the word is this thread's alone.
    WATCHED
        .get(inst)
        .is_some_and(|w| w.swap(now, Ordering::Relaxed) != now)
}

// The thread's processor + 1 in `$reg` (32 bits): its rseq `cpu_id` + 1,
// else to `$general` (without rseq, or with the id not yet set, the
// kernel's -1). Clobbers the flags.
macro_rules! thread_cpu {
    ($reg:literal, $reg32:literal, $general:literal) => {
        concat!(
            crate::fixed_load!($reg, "rseq_cs"),
            "test ",
            $reg,
            ", ",
            $reg,
            "\n",
            "jz ",
            $general,
            "\n",
            "mov ",
            $reg32,
            ", dword ptr fs:[",
            $reg,
            " - 4]\n",
            "inc ",
            $reg32,
            "\n",
            "jz ",
            $general,
            "\n",
        )
    };
}
pub(super) use thread_cpu;

// Whether the thread runs on the processor the last `watch:cpu` event in
// the single fused path's instance's records named (its word, at
// TP_WATCHED), else to `$general`. Clobbers rcx, rdx.
macro_rules! watch_same_cpu {
    ($general:literal) => {
        concat!(
            crate::tracer::fused::watch::thread_cpu!("rcx", "ecx", $general),
            crate::fixed_load!("rdx", "tp_watched"),
            "cmp ecx, dword ptr fs:[rdx]\n",
            "jne ",
            $general,
            "\n",
        )
    };
}
pub(super) use watch_same_cpu;

// Whether the thread runs, for each user of `$set` (slots, bits 0..15,
// consumed), on the processor the last `watch:cpu` event in its
// instance's records named (thread_cpu! against the instance's word),
// else to `$general`. Label 46; clobbers rax, r11, `$tmp`.
macro_rules! watch_cpus {
    ($set:literal, $tmp:literal, $general:literal) => {
        concat!(
            crate::tracer::fused::watch::thread_cpu!("rax", "eax", $general),
            "46:\n",
            "bsf ",
            $tmp,
            ", ",
            $set,
            "\n",
            "lea r11, [rip + {slot_private}]\n",
            "mov r11, [r11 + ",
            $tmp,
            "*8]\n",
            crate::fixed_load!($tmp, "tp_watched_all"),
            "lea ",
            $tmp,
            ", [",
            $tmp,
            " + r11*4]\n",
            "cmp eax, dword ptr fs:[",
            $tmp,
            "]\n",
            "jne ",
            $general,
            "\n",
            "lea ",
            $tmp,
            ", [",
            $set,
            " - 1]\n",
            "and ",
            $set,
            ", ",
            $tmp,
            "\n",
            "jnz 46b\n",
        )
    };
}
pub(super) use watch_cpus;
