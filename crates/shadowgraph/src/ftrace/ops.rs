//! An ops (design §3.1): a client of the core, a callback and the filter
//! set it is tested against, with its flags, its trampolines and, for a
//! manager, its subops; the register frame its callback gets, and the
//! thread filter it may carry.

use super::filter::{FilterPair, SiteId};
use super::filterset::FilterSet;
use crate::tramp;
use std::fmt;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// A lock of the core's, taken even if a panicking holder poisoned it (the
/// state it guards is consistent between any two of its statements that
/// can panic).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub use crate::tramp::Regs;

/// An ops' flags (design §3.1): a set of the constants below, combined
/// with `|`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct OpsFlags(u32);

impl OpsFlags {
    /// No flag.
    pub const NONE: OpsFlags = OpsFlags(0);
    /// The caller may free the ops once `unregister` returns (every ops
    /// gets the grace period; the flag is informational).
    pub const DYNAMIC: OpsFlags = OpsFlags(1 << 0);
    /// Needs the regs variant: may read and write every register.
    pub const SAVE_REGS: OpsFlags = OpsFlags(1 << 1);
    /// The core wraps the callback in the recursion guard.
    pub const RECURSION: OpsFlags = OpsFlags(1 << 2);
    /// Counted in accounting, never called (temporary ops of direct
    /// modify).
    pub const STUB: OpsFlags = OpsFlags(1 << 3);
    /// May change the resume address (`regs.rip`); one per site.
    pub const IPMODIFY: OpsFlags = OpsFlags(1 << 4);
    /// A direct-call ops (made by `Ops::new_direct`).
    pub const DIRECT: OpsFlags = OpsFlags(1 << 6);
    /// No per-ops trampolines: sites where it is alone use the shared
    /// caller.
    pub const NO_TRAMP: OpsFlags = OpsFlags(1 << 7);

    /// Whether every flag of `other` is set.
    #[inline]
    pub const fn contains(self, other: OpsFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any flag of `other` is set.
    #[inline]
    pub const fn intersects(self, other: OpsFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// The flags as bits (the word the assembly entry tests).
    #[inline]
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// These flags without those of `other`.
    #[inline]
    pub const fn without(self, other: OpsFlags) -> OpsFlags {
        OpsFlags(self.0 & !other.0)
    }
}

impl std::ops::BitOr for OpsFlags {
    type Output = OpsFlags;
    fn bitor(self, other: OpsFlags) -> OpsFlags {
        OpsFlags(self.0 | other.0)
    }
}

impl std::ops::BitOrAssign for OpsFlags {
    fn bitor_assign(&mut self, other: OpsFlags) {
        self.0 |= other.0;
    }
}

// The flags by their names in ftrace, as the kernel's `FTRACE_OPS_FL_*`.
/// See [`OpsFlags::DYNAMIC`].
pub const DYNAMIC: OpsFlags = OpsFlags::DYNAMIC;
/// See [`OpsFlags::SAVE_REGS`].
pub const SAVE_REGS: OpsFlags = OpsFlags::SAVE_REGS;
/// See [`OpsFlags::RECURSION`].
pub const RECURSION: OpsFlags = OpsFlags::RECURSION;
/// See [`OpsFlags::STUB`].
pub const STUB: OpsFlags = OpsFlags::STUB;
/// See [`OpsFlags::IPMODIFY`].
pub const IPMODIFY: OpsFlags = OpsFlags::IPMODIFY;
/// See [`OpsFlags::DIRECT`].
pub const DIRECT: OpsFlags = OpsFlags::DIRECT;
/// See [`OpsFlags::NO_TRAMP`].
pub const NO_TRAMP: OpsFlags = OpsFlags::NO_TRAMP;

// Internal state bits.
pub(super) const ENABLED: u32 = 1 << 0;
pub(super) const SUBOP: u32 = 1 << 1;

/// An ops callback: `ip` is the site, `parent_ip` the traced function's
/// return address. Runs inside traced calls: it must not allocate, lock, or
/// call anything not async-signal-safe.
///
/// It has the C calling convention (as the kernel's `ftrace_func_t`): an
/// ops' own trampoline calls it from assembly, and a panic must not unwind
/// into the traced function's frames (out of an `extern "C"` function it
/// aborts the process instead).
pub type OpsFunc = extern "C" fn(ip: usize, parent_ip: usize, ops: &Ops, regs: &mut Regs);

/// A client of the core: a callback and the filter it is tested against.
pub struct Ops {
    pub(crate) func: OpsFunc,
    pub(crate) flags: OpsFlags,
    /// The client's own data.
    pub private: usize,
    pub(super) filter: Arc<FilterSet>,
    pub(super) state: AtomicU32,
    pub(super) direct: AtomicUsize,
    /// For managers: the subops, newest first (copy-on-write).
    pub(crate) subops_list: AtomicPtr<OpsList>,
    /// Thread filter (design §3.9); null = every thread.
    pub(crate) threads: AtomicPtr<ThreadFilter>,
    pub(super) inner: Mutex<OpsInner>,
    /// What its trampolines call instead of the generic entry
    /// (`dispatch::ops_entry`): a specialised one that calls `func`
    /// directly (the fgraph manager).
    pub(crate) tramp_entry: Option<tramp::FtraceEntry>,
    /// Code outside the arenas the ops' trampolines hand over to (a stub
    /// per arena passes the data slot in r11), instead of a copy of the
    /// caller template; 0: none.
    pub(crate) tramp_stub: usize,
    /// Where the ops' site stubs (tramp.rs) call in and return to, outside
    /// the arenas; 0: the ops uses no site stubs.
    pub(crate) site_entry: usize,
    pub(crate) site_return: usize,
    /// Where the stubs of the sites `.1` selects call in instead of
    /// `site_entry` (returning to `site_return` all the same); None: every
    /// stub calls `site_entry`.
    pub(crate) site_entry_alt: Option<AltEntry>,
    /// For a manager: told, each time its subops change or their sets
    /// do, with the core's lock held and before any site is patched or
    /// set back for the change, how many sites there are (the subops'
    /// pairs are the new ones); and when asked (`tell_manager`).
    pub(crate) on_subops_change: Option<fn(usize)>,
}

/// Site entries some sites' stubs call instead of the ops' own: their
/// addresses (at most [`MAX_ALT_ENTRIES`]), and each site's choice among
/// them (k: the k-th, from 1; 0: the ops' own).
pub(crate) type AltEntry = (&'static [usize], fn(SiteId) -> usize);

/// The most alternative site entries an ops gives ([`AltEntry`]).
pub(crate) const MAX_ALT_ENTRIES: usize = 16;

/// The cells of one arena that an ops' site stubs there call through:
/// each holds an address outside the arenas (rel32 reach is the arena's).
#[derive(Clone, Copy)]
pub(super) struct StubCells {
    /// The arena's base.
    pub base: usize,
    /// `site_entry`'s cell.
    pub entry: usize,
    /// `site_return`'s cell.
    pub ret: usize,
    /// The cells of `site_entry_alt`'s entries, in order (0: none).
    pub alt: [usize; MAX_ALT_ENTRIES],
}

#[derive(Default)]
pub(super) struct OpsInner {
    /// (arena base, trampoline address, its data slot)
    pub tramps: Vec<(usize, usize, &'static OpsSlot)>,
    /// Its chained callers (ftrace::chain): (arena base, direct target,
    /// code), sharing the slot of its trampoline in that arena.
    pub chained: Vec<(usize, usize, usize)>,
    /// Per arena: the base and the cells the stubs there call through.
    pub stub_tramps: Vec<StubCells>,
    /// Each site's stub, once made (never freed: stubs are reused when the
    /// ops comes back).
    pub site_stubs: std::collections::HashMap<SiteId, usize>,
    /// Bytes of each trampoline (all of one variant).
    pub tramp_len: usize,
    pub subops: Vec<Arc<Ops>>,
}

impl fmt::Debug for Ops {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ops")
            .field("flags", &self.flags)
            .field("enabled", &self.is_enabled())
            .finish()
    }
}

impl Ops {
    /// An ops calling `func` for the sites `filter` selects.
    pub fn new(func: OpsFunc, flags: OpsFlags, filter: Arc<FilterSet>) -> Arc<Ops> {
        Arc::new(Ops {
            func,
            flags: flags.without(DIRECT),
            private: 0,
            filter,
            state: AtomicU32::new(0),
            direct: AtomicUsize::new(0),
            subops_list: AtomicPtr::new(std::ptr::null_mut()),
            threads: AtomicPtr::new(std::ptr::null_mut()),
            inner: Mutex::new(OpsInner::default()),
            tramp_entry: None,
            tramp_stub: 0,
            site_entry: 0,
            site_return: 0,
            site_entry_alt: None,
            on_subops_change: None,
        })
    }

    /// Like [`Ops::new`], with client data in `private`.
    pub fn with_private(
        func: OpsFunc,
        flags: OpsFlags,
        filter: Arc<FilterSet>,
        private: usize,
    ) -> Arc<Ops> {
        let mut o = Ops::new(func, flags, filter);
        Arc::get_mut(&mut o).expect("fresh").private = private;
        o
    }

    /// A manager: its filter is computed from its subops (exactly their
    /// union, design §3.6) and `func` dispatches to them (e.g. `call_subops`).
    pub fn new_manager(func: OpsFunc, flags: OpsFlags) -> Arc<Ops> {
        Ops::new(func, flags, FilterSet::computed())
    }

    /// A manager whose trampolines call `entry` (which must do what
    /// `dispatch::ops_entry` does for this ops: bracket, errno, slot check)
    /// instead of the generic entry, or hand over to `stub` if not 0; with
    /// `site` = (ENTRY, RETURN) not 0, sites where it is alone jump to
    /// their own stubs instead (tramp.rs, "Site stubs"), whose ENTRY is
    /// `alt.0` for the sites `alt.1` selects; `told` told of each change
    /// of its subops or their sets ([`Ops::on_subops_change`]).
    pub(crate) fn new_manager_with_entry(
        func: OpsFunc,
        entry: tramp::FtraceEntry,
        stub: usize,
        site: (usize, usize),
        alt: Option<AltEntry>,
        told: fn(usize),
    ) -> Arc<Ops> {
        let mut o = Ops::new(func, OpsFlags::NONE, FilterSet::computed());
        let m = Arc::get_mut(&mut o).expect("fresh");
        m.tramp_entry = Some(entry);
        m.tramp_stub = stub;
        (m.site_entry, m.site_return) = site;
        m.site_entry_alt = alt.filter(|_| site.0 != 0);
        m.on_subops_change = Some(told);
        o
    }

    /// The filter pair as of now (hot path).
    #[inline]
    pub fn filter_pair(&self) -> &FilterPair {
        self.filter.pair()
    }

    /// The functions it traces.
    pub fn filter(&self) -> &Arc<FilterSet> {
        &self.filter
    }

    /// What it asked of the core.
    pub fn flags(&self) -> OpsFlags {
        self.flags
    }

    /// Whether it is registered and its sites call it.
    pub fn is_enabled(&self) -> bool {
        self.state.load(Ordering::Acquire) & ENABLED != 0
    }

    /// The current direct-call target (0 for other ops).
    #[inline]
    pub fn direct_target(&self) -> usize {
        self.direct.load(Ordering::Acquire)
    }

    /// This ops' trampoline in the arena at `arena_base`, if it has one.
    pub fn trampoline_in(&self, arena_base: usize) -> Option<usize> {
        lock(&self.inner)
            .tramps
            .iter()
            .find(|t| t.0 == arena_base)
            .map(|t| t.1)
    }

    pub(super) fn wants_tramp(&self) -> bool {
        !self.flags.intersects(NO_TRAMP | STUB | DIRECT)
    }

    pub(super) fn needs_regs(&self) -> bool {
        self.flags.intersects(SAVE_REGS | DIRECT | IPMODIFY)
    }

    /// Whether its trampoline is a copy of the args variant, entered by
    /// the site's call and returning to it: no registers written back, no
    /// site stubs, no code of its own (what a chained or a set's caller
    /// can stand in for).
    pub(super) fn plain_tramp(&self) -> bool {
        self.wants_tramp() && !self.needs_regs() && self.tramp_stub == 0 && self.site_entry == 0
    }
}

/// Data slot of a per-ops trampoline: the ops it calls, or null while the
/// ops is leaving.
pub struct OpsSlot {
    /// The ops (null while it leaves).
    pub ops: AtomicPtr<Ops>,
}

/// The ops on the core list, newest first (copy-on-write; replaced lists are
/// freed after a grace period).
#[repr(C)]
pub(crate) struct OpsList {
    /// `ops`' elements and their number, for the assembly of the set
    /// callers (entry_asm), which cannot read a `Vec`: the vector is never
    /// changed once the list is made, so its buffer stays where it is.
    pub(super) first: *const *const Ops,
    pub(super) len: usize,
    pub ops: Vec<*const Ops>,
}

impl OpsList {
    pub(crate) fn new(ops: Vec<*const Ops>) -> OpsList {
        OpsList {
            first: ops.as_ptr(),
            len: ops.len(),
            ops,
        }
    }
}

// SAFETY: immutable once published; the ops it points to outlive it.
unsafe impl Sync for OpsList {}
// SAFETY: as for Sync: nothing in it is tied to the thread that made it.
unsafe impl Send for OpsList {}

/// Which threads an ops sees: ignored iff (trace list non-empty and the
/// thread not in it) or the thread is in the no-trace list. Entry only: a
/// call already accepted is not affected by a later change.
#[derive(Clone, Debug, Default)]
pub struct ThreadFilter {
    trace: Vec<i32>,
    notrace: Vec<i32>,
}

impl ThreadFilter {
    /// Sees only the threads of `trace` (all when empty), never those of
    /// `notrace`.
    pub fn new(trace: &[i32], notrace: &[i32]) -> ThreadFilter {
        let mut t = ThreadFilter {
            trace: trace.to_vec(),
            notrace: notrace.to_vec(),
        };
        t.trace.sort_unstable();
        t.notrace.sort_unstable();
        t
    }

    /// Whether thread `tid` is seen.
    #[inline]
    pub fn allows(&self, tid: i32) -> bool {
        (self.trace.is_empty() || self.trace.binary_search(&tid).is_ok())
            && self.notrace.binary_search(&tid).is_err()
    }
}
