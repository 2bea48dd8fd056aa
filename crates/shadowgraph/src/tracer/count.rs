//! Counting tracers: how often each traced function is called.
//!
//! * [`SiteCounter`] — a caller trampoline of its own at every site, no
//!   ftrace core, no return: the cheapest way to count entries
//!   (`shadowgraph count`).
//! * [`GraphCounter`] — an fgraph user counting entries and returns per
//!   site (`shadowgraph count --graph`): what every call costs through the
//!   function graph when the tracer does nothing else.

use crate::arena::{Arena, ArenaError};
use crate::fgraph::{GraphEntry, GraphReturn, GraphUser, RetRegs};
use crate::ftrace::{self, Regs};
use crate::tramp;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Per-site call counters behind a caller trampoline: the counting tracer
/// used by the demo, the tests and `bench patch`.
pub struct SiteCounter {
    sites: Box<[usize]>,
    counts: Box<[AtomicU64]>,
    unknown: AtomicU64,
}

impl SiteCounter {
    /// Counters for the given sites (any order). Leaked: trampolines may
    /// reference it for the life of the process.
    pub fn new(sites: impl IntoIterator<Item = usize>) -> &'static SiteCounter {
        let mut v: Vec<usize> = sites.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        let counts = v.iter().map(|_| AtomicU64::new(0)).collect();
        Box::leak(Box::new(SiteCounter {
            sites: v.into_boxed_slice(),
            counts,
            unknown: AtomicU64::new(0),
        }))
    }

    /// A caller trampoline in `arena` that counts into `self`.
    pub fn trampoline(&'static self, arena: &Arena) -> Result<usize, ArenaError> {
        tramp::caller(arena, count_hit, self as *const SiteCounter as *const ())
    }

    /// Calls counted for the site at `addr`.
    pub fn count(&self, addr: usize) -> u64 {
        self.sites
            .binary_search(&addr)
            .map_or(0, |i| self.counts[i].load(Ordering::Relaxed))
    }

    /// Counts one call of the site at `addr` (from any callback).
    #[inline]
    pub fn add(&self, addr: usize) {
        match self.sites.binary_search(&addr) {
            Ok(i) => self.counts[i].fetch_add(1, Ordering::Relaxed),
            Err(_) => self.unknown.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Calls from addresses that are not among the sites (never expected).
    pub fn unknown(&self) -> u64 {
        self.unknown.load(Ordering::Relaxed)
    }

    /// Sets every count to 0.
    pub fn reset(&self) {
        for c in self.counts.iter() {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// (site, count) pairs in address order.
    pub fn snapshot(&self) -> Vec<(usize, u64)> {
        self.sites
            .iter()
            .zip(self.counts.iter())
            .map(|(&s, c)| (s, c.load(Ordering::Relaxed)))
            .collect()
    }
}

extern "C" fn count_hit(ip: usize, _parent: usize, _slot: *mut usize, data: *const ()) {
    // SAFETY: `data` is the leaked SiteCounter the trampoline was built for.
    unsafe { &*(data as *const SiteCounter) }.add(ip);
}

/// Entries and returns per site id, through fgraph.
pub struct GraphCounter {
    counts: &'static GraphCounts,
    user: Arc<GraphUser>,
}

/// The counters of a [`GraphCounter`], which its callbacks reach through
/// their user's private word.
struct GraphCounts {
    entries: Box<[AtomicU64]>,
    returns: Box<[AtomicU64]>,
    /// Calls of sites without a counter (ids beyond the table).
    uncounted: AtomicU64,
}

impl GraphCounter {
    /// Counters for site ids below `sites` (those known now, and some room
    /// for objects loaded later), and the graph user that counts into
    /// them, not yet registered. The counters are leaked: the callbacks may
    /// run until the process ends.
    pub fn new(sites: usize) -> GraphCounter {
        let n = sites + 1024;
        let zeros = || (0..n).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        let counts: &'static GraphCounts = Box::leak(Box::new(GraphCounts {
            entries: zeros(),
            returns: zeros(),
            uncounted: AtomicU64::new(0),
        }));
        let private = counts as *const GraphCounts as usize;
        GraphCounter {
            counts,
            user: GraphUser::new(on_entry, on_return, ftrace::FilterSet::all(), private),
        }
    }

    /// The counting graph user (register it with [`register_graph`](crate::fgraph::register_graph)).
    pub fn user(&self) -> &Arc<GraphUser> {
        &self.user
    }

    /// (entries, returns) counted for site `id`.
    pub fn count(&self, id: ftrace::SiteId) -> (u64, u64) {
        let i = id as usize;
        let c = self.counts;
        match (c.entries.get(i), c.returns.get(i)) {
            (Some(e), Some(r)) => (e.load(Ordering::Relaxed), r.load(Ordering::Relaxed)),
            _ => (0, 0),
        }
    }

    /// Calls of sites beyond the counters.
    pub fn uncounted(&self) -> u64 {
        self.counts.uncounted.load(Ordering::Relaxed)
    }
}

impl GraphCounts {
    #[inline]
    fn bump(&self, which: &[AtomicU64], func: usize) {
        // Relaxed: counts, read only once the threads are done.
        match ftrace::site_id_of(func).and_then(|id| which.get(id as usize)) {
            Some(c) => c.fetch_add(1, Ordering::Relaxed),
            None => self.uncounted.fetch_add(1, Ordering::Relaxed),
        };
    }
}

fn counts_of(u: &GraphUser) -> &'static GraphCounts {
    // SAFETY: the private word of a GraphCounter's user is its leaked
    // counters (GraphCounter::new).
    unsafe { &*(u.private as *const GraphCounts) }
}

extern "C" fn on_entry(e: &GraphEntry, u: &GraphUser, _: &mut Regs) -> bool {
    let c = counts_of(u);
    c.bump(&c.entries, e.func);
    true
}

extern "C" fn on_return(r: &GraphReturn, u: &GraphUser, _: &RetRegs) {
    let c = counts_of(u);
    c.bump(&c.returns, r.func);
}
