//! `--watch cpu` beside the fused filtered path: a recorder that writes a
//! `watch:cpu` event whenever a call's entry or exit finds its thread on
//! another processor than its last event named. The thread's processor is
//! the `cpu_id` of its `struct rseq` (what `sched_getcpu` reads), one load
//! from the thread pointer; the fused entry and return compare it with
//! the processor the thread's last event named ([`cpu_moved`] keeps it)
//! and take the call only where they are the same, before they write
//! anything: a call on another processor goes to the callbacks, which
//! write the event. Without rseq, every call does.

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
