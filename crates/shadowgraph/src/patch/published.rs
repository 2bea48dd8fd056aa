//! What a batch publishes for the SIGTRAP handler, which runs in any
//! thread at any instruction: the active batch, every site ever written,
//! and the handler's counts.

use super::edit::Edit;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

pub(super) static TRAPS_EMULATED: AtomicU64 = AtomicU64::new(0);
pub(super) static TRAPS_LATE: AtomicU64 = AtomicU64::new(0);
pub(super) static TRAPS_CHAINED: AtomicU64 = AtomicU64::new(0);

/// The batch the SIGTRAP handler consults: the caller's edits, sorted by
/// address, which outlive the batch (`apply` retires it before returning).
pub(super) struct ActiveBatch {
    pub edits: *const Edit,
    pub len: usize,
}

pub(super) static ACTIVE: AtomicPtr<ActiveBatch> = AtomicPtr::new(std::ptr::null_mut());
/// SIGTRAP handlers that may hold a pointer loaded from `ACTIVE`.
pub(super) static READERS: AtomicUsize = AtomicUsize::new(0);

// Addresses of every site ever written (see `known_contains`).
struct Chunk {
    sorted: Box<[usize]>,
    next: *const Chunk,
}

static KNOWN: AtomicPtr<Chunk> = AtomicPtr::new(std::ptr::null_mut());

/// Whether a site was ever written at `addr`, so that a trap delivered
/// after its batch ended is still recognised as ours. Append-only: chunks
/// are never freed, so the signal handler reads them without locks.
/// Async-signal-safe.
pub(super) fn known_contains(addr: usize) -> bool {
    let mut p = KNOWN.load(Ordering::Acquire) as *const Chunk;
    while !p.is_null() {
        // SAFETY: chunks are leaked, immutable after publication.
        let c = unsafe { &*p };
        if c.sorted.binary_search(&addr).is_ok() {
            return true;
        }
        p = c.next;
    }
    false
}

/// Called under the text lock (single writer), with `sorted` in
/// ascending order: one merge walk per chunk instead of a search per
/// address.
pub(super) fn add_known(sorted: &[usize]) {
    let mut known = vec![false; sorted.len()];
    let mut p = KNOWN.load(Ordering::Acquire) as *const Chunk;
    while !p.is_null() {
        // SAFETY: chunks are leaked, immutable after publication.
        let c = unsafe { &*p };
        let mut j = 0;
        for (i, &a) in sorted.iter().enumerate() {
            while j < c.sorted.len() && c.sorted[j] < a {
                j += 1;
            }
            if j < c.sorted.len() && c.sorted[j] == a {
                known[i] = true;
            }
        }
        p = c.next;
    }
    let new: Vec<usize> = sorted
        .iter()
        .zip(&known)
        .filter(|(_, &k)| !k)
        .map(|(&a, _)| a)
        .collect();
    if new.is_empty() {
        return;
    }
    // Acquire/Release: the chunks form a list published by its head; a
    // reader that loads the head (Acquire) sees every chunk behind it
    // whole (writers are serialised by the text lock).
    let chunk = Box::new(Chunk {
        sorted: new.into_boxed_slice(),
        next: KNOWN.load(Ordering::Acquire),
    });
    KNOWN.store(Box::into_raw(chunk), Ordering::Release);
}
