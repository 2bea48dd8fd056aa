//! `--watch cpu` beside the fused filtered path: a recorder that writes a
//! `watch:cpu` event whenever a call's entry or exit finds its thread on
//! another processor than its last event named. The thread's processor is
//! the `cpu_id` of its `struct rseq` (what `sched_getcpu` reads), one load
//! from the thread pointer; the fused entry and return compare it with
//! the processor the thread's last event named ([`cpu_moved`] keeps it)
//! and take the call only where they are the same, before they write
//! anything: a call on another processor goes to the callbacks, which
//! write the event. Without rseq, every call does.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

crate::fast_thread_local!(
    /// The processor the thread's last `watch:cpu` event named, plus one
    /// (0: none yet).
    static WATCHED: AtomicU32;
);

/// Offset from the thread pointer of the thread's [`WATCHED`] word (0:
/// not yet known), for the fused paths (general.rs, labels 78 and 27).
pub(super) static TP_WATCHED: AtomicI64 = AtomicI64::new(0);

/// Makes [`TP_WATCHED`] known, before the path that reads it is
/// registered.
pub(super) fn init() {
    // Relaxed: read by the path only after it is registered, which
    // publishes it (Release).
    TP_WATCHED.store(
        crate::tls::tp_offset(&*WATCHED as *const AtomicU32 as usize),
        Ordering::Relaxed,
    );
}

/// The thread now runs on processor `cpu`: whether its last `watch:cpu`
/// event named another (or none), and a new one is due. Async-signal-safe
/// (one thread-local word, swapped: a signal handler's event in between
/// sees the word either way, and at most one event names each change).
pub fn cpu_moved(cpu: u32) -> bool {
    // Relaxed: the word is this thread's alone.
    WATCHED.swap(cpu.wrapping_add(1), Ordering::Relaxed) != cpu.wrapping_add(1)
}
