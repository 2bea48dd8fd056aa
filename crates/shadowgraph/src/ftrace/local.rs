//! The core's per-thread state read on every traced call, in one
//! initial-exec TLS block (crate::tls): one thread-pointer address for the
//! bracket word, the recursion bits and the saved errno location instead of
//! one per variable. Valid all-zero, as every thread starts.

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

pub(crate) struct CoreLocal {
    /// This thread's bracket word (null: none yet; quiesce).
    pub word: Cell<*const AtomicU64>,
    /// The anchor of this thread's outermost open bracket (quiesce).
    pub outer_anchor: Cell<usize>,
    /// This thread's errno location, cached (null: not yet).
    pub errno: Cell<*mut i32>,
    /// Recursion bits below `SIG_SHIFT`, signal-handler depth above
    /// (dispatch).
    pub rec: Cell<u32>,
    /// This thread's id, cached (0: not yet).
    pub tid: Cell<i32>,
    /// This thread's bracket slot + 1 (0: none yet; quiesce).
    pub slot: Cell<usize>,
    /// Calls dropped by the recursion guard.
    pub rec_drops: Cell<u64>,
    /// The site id of the call being entered through a site stub, which
    /// carries it (0 in `site_hint_ip`: none): spares `site_id` its search.
    pub site_hint_ip: Cell<usize>,
    pub site_hint_id: Cell<u32>,
}

crate::fast_thread_local!(
    static LOCAL: CoreLocal;
);

/// This thread's core state.
#[inline(always)]
pub(crate) fn local() -> &'static CoreLocal {
    // SAFETY: LOCAL is this thread's zero-initialised state (null pointers,
    // zero counters: all valid), only touched by this thread and its signal
    // handlers, and never dropped: valid as long as the thread runs.
    unsafe { &*(&*LOCAL as *const CoreLocal) }
}

/// The offset of [`CoreLocal`] from the thread pointer: the same in every
/// thread (initial-exec TLS), read by the assembly entries (this layer's
/// and fgraph's). Set by [`init_tp_local`] before any code reading it can
/// run.
pub(crate) static TP_LOCAL: AtomicI64 = AtomicI64::new(0);

/// Computes [`TP_LOCAL`]; idempotent (the value never changes).
pub(crate) fn init_tp_local() {
    // Relaxed: published to the code that reads it by the patching that
    // makes that code reachable (its membarrier / the sites' writes).
    TP_LOCAL.store(
        crate::tls::tp_offset(local() as *const CoreLocal as usize),
        Ordering::Relaxed,
    );
}
