//! The ftrace core (SPEC §3): ops with filters, per-site accounting that is
//! recomputed (never accumulated), target selection, the shared caller with
//! its list function, per-ops trampolines, direct calls with gap-free
//! retargeting, subops, the recursion guard and grace periods.
//!
//! One core lock serialises registration, filter changes and patching;
//! everything a traced call reads is published with single atomic stores
//! and freed only after a grace period.

pub mod dispatch;
pub mod filter;
pub(crate) mod local;
pub mod quiesce;

pub use dispatch::{
    call_subops, current_tid, recursion_drops, recursion_drops_all, reset_tid_cache, try_lock,
    unlock, Group, Regs,
};
pub use filter::{Filter, FilterPair, FunctionName, Pattern, PatternError, SiteId, SiteSet};

use crate::arena::{Arena, ArenaError};
use crate::patch::{self, Edit, PatchError};
use crate::process::{self, Module};
use crate::site::{encode_call, encode_jmp, NOP5};
use crate::tramp;
use dispatch::{
    DispatchRecord, OpsList, OpsSlot, SiteIndex, LIST, LIST_RECORD, RECORD, SITE_INDEX, STUB_RECORD,
};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

// --- Ops flags (SPEC §3.1) ---------------------------------------------------

/// The caller may free the ops once `unregister` returns (every ops gets
/// the grace period; the flag is informational).
pub const DYNAMIC: u32 = 1 << 0;
/// Needs the regs variant: may read and write every register.
pub const SAVE_REGS: u32 = 1 << 1;
/// The core wraps the callback in the recursion guard.
pub const RECURSION: u32 = 1 << 2;
/// Counted in accounting, never called (temporary ops of direct modify).
pub const STUB: u32 = 1 << 3;
/// May change the resume address (`regs.rip`); one per site.
pub const IPMODIFY: u32 = 1 << 4;
/// A direct-call ops (made by [`Ops::new_direct`]).
pub const DIRECT: u32 = 1 << 6;
/// No per-ops trampolines: sites where it is alone use the shared caller.
pub const NO_TRAMP: u32 = 1 << 7;

// Internal state bits.
const ENABLED: u32 = 1 << 0;
const SUBOP: u32 = 1 << 1;

/// An ops callback: `ip` is the site, `parent_ip` the traced function's
/// return address. Runs inside traced calls: it must not allocate, lock, or
/// call anything not async-signal-safe.
pub type OpsFunc = fn(ip: usize, parent_ip: usize, ops: &Ops, regs: &mut Regs);

/// A client of the core: a callback and the filter it is tested against.
pub struct Ops {
    pub(crate) func: OpsFunc,
    pub(crate) flags: u32,
    /// The client's own data.
    pub private: usize,
    filter: Arc<FilterSet>,
    state: AtomicU32,
    direct: AtomicUsize,
    /// For managers: the subops, newest first (copy-on-write).
    pub(crate) subops_list: AtomicPtr<OpsList>,
    /// Thread filter (SPEC §3.9); null = every thread.
    pub(crate) threads: AtomicPtr<ThreadFilter>,
    inner: Mutex<OpsInner>,
    /// What its trampolines call: the generic entry, or a specialised one
    /// that calls `func` directly (the fgraph manager).
    pub(crate) tramp_entry: tramp::FtraceEntry,
    /// Code outside the arenas the ops' trampolines hand over to (a stub
    /// per arena passes the data slot in r11), instead of a copy of the
    /// caller template; 0: none.
    pub(crate) tramp_stub: usize,
    /// Where the ops' site stubs (tramp.rs) call in and return to, outside
    /// the arenas; 0: the ops uses no site stubs.
    pub(crate) site_entry: usize,
    pub(crate) site_return: usize,
}

#[derive(Default)]
struct OpsInner {
    /// (arena base, trampoline address, its data slot)
    tramps: Vec<(usize, usize, &'static OpsSlot)>,
    /// Per arena: (base, the cells holding `site_entry` and `site_return`
    /// for the stubs there).
    stub_tramps: Vec<(usize, usize, usize)>,
    /// Each site's stub, once made (never freed: stubs are reused when the
    /// ops comes back).
    site_stubs: std::collections::HashMap<SiteId, usize>,
    /// Bytes of each trampoline (all of one variant).
    tramp_len: usize,
    subops: Vec<Arc<Ops>>,
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
    pub fn new(func: OpsFunc, flags: u32, filter: Arc<FilterSet>) -> Arc<Ops> {
        Arc::new(Ops {
            func,
            flags: flags & !DIRECT,
            private: 0,
            filter,
            state: AtomicU32::new(0),
            direct: AtomicUsize::new(0),
            subops_list: AtomicPtr::new(std::ptr::null_mut()),
            threads: AtomicPtr::new(std::ptr::null_mut()),
            inner: Mutex::new(OpsInner::default()),
            tramp_entry: dispatch::ops_entry,
            tramp_stub: 0,
            site_entry: 0,
            site_return: 0,
        })
    }

    /// Like [`Ops::new`], with client data in `private`.
    pub fn with_private(
        func: OpsFunc,
        flags: u32,
        filter: Arc<FilterSet>,
        private: usize,
    ) -> Arc<Ops> {
        let mut o = Ops::new(func, flags, filter);
        Arc::get_mut(&mut o).expect("fresh").private = private;
        o
    }

    /// A direct-call ops for the sites of `filter` (a non-empty set);
    /// register it with [`register_direct`].
    pub fn new_direct(filter: Arc<FilterSet>) -> Arc<Ops> {
        let mut o = Ops::new(dispatch::direct_helper, SAVE_REGS, filter);
        Arc::get_mut(&mut o).expect("fresh").flags |= DIRECT;
        o
    }

    /// A manager: its filter is computed from its subops (exactly their
    /// union, SPEC §3.6) and `func` dispatches to them (e.g. [`call_subops`]).
    pub fn new_manager(func: OpsFunc, flags: u32) -> Arc<Ops> {
        Ops::new(func, flags, FilterSet::computed())
    }

    /// A manager whose trampolines call `entry` (which must do what
    /// `dispatch::ops_entry` does for this ops: bracket, errno, slot check)
    /// instead of the generic entry, or hand over to `stub` if not 0; with
    /// `site` = (ENTRY, RETURN) not 0, sites where it is alone jump to
    /// their own stubs instead (tramp.rs, "Site stubs").
    pub(crate) fn new_manager_with_entry(
        func: OpsFunc,
        entry: tramp::FtraceEntry,
        stub: usize,
        site: (usize, usize),
    ) -> Arc<Ops> {
        let mut o = Ops::new(func, 0, FilterSet::computed());
        let m = Arc::get_mut(&mut o).expect("fresh");
        m.tramp_entry = entry;
        m.tramp_stub = stub;
        (m.site_entry, m.site_return) = site;
        o
    }

    /// The filter pair as of now (hot path).
    #[inline]
    pub fn filter_pair(&self) -> &FilterPair {
        self.filter.pair()
    }

    pub fn filter(&self) -> &Arc<FilterSet> {
        &self.filter
    }

    pub fn flags(&self) -> u32 {
        self.flags
    }

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

    fn wants_tramp(&self) -> bool {
        self.flags & (NO_TRAMP | STUB | DIRECT) == 0
    }

    fn needs_regs(&self) -> bool {
        self.flags & (SAVE_REGS | DIRECT | IPMODIFY) != 0
    }
}

/// Which threads an ops sees: ignored iff (trace list non-empty and the
/// thread not in it) or the thread is in the no-trace list. Entry only: a
/// call already accepted is not affected by a later change.
#[derive(Clone, Debug, Default)]
pub struct ThreadFilter {
    trace: Vec<i32>,
    notrace: Vec<i32>,
}

impl ThreadFilter {
    pub fn new(trace: &[i32], notrace: &[i32]) -> ThreadFilter {
        let mut t = ThreadFilter {
            trace: trace.to_vec(),
            notrace: notrace.to_vec(),
        };
        t.trace.sort_unstable();
        t.notrace.sort_unstable();
        t
    }

    #[inline]
    pub fn allows(&self, tid: i32) -> bool {
        (self.trace.is_empty() || self.trace.binary_search(&tid).is_ok())
            && self.notrace.binary_search(&tid).is_err()
    }
}

/// Sets (or with `None` removes) the thread filter of `ops`; takes effect
/// for calls entering after this returns.
pub fn set_thread_filter(ops: &Ops, filter: Option<ThreadFilter>) {
    let new = filter.map_or(std::ptr::null_mut(), |f| Box::into_raw(Box::new(f)));
    let mut c = lock_core();
    let old = ops.threads.swap(new, Ordering::AcqRel);
    if !old.is_null() {
        c.retired.push(Retired::Threads(old));
    }
    finish(c);
}

/// A filter shared by any number of ops: a change reaches all of them.
pub struct FilterSet {
    current: AtomicPtr<FilterPair>,
    spec: Mutex<FilterSpec>,
}

#[derive(Clone)]
enum FilterSpec {
    Patterns {
        filter: Option<Vec<Pattern>>,
        notrace: Vec<Pattern>,
        /// Selects nothing for now, its patterns kept ([`set_paused`]).
        paused: bool,
    },
    /// A manager's: computed from its subops.
    Computed,
}

impl FilterSet {
    /// Every function, nothing excluded.
    pub fn all() -> Arc<FilterSet> {
        Arc::new(FilterSet {
            current: AtomicPtr::new(Box::into_raw(Box::default())),
            spec: Mutex::new(FilterSpec::Patterns {
                filter: None,
                notrace: Vec::new(),
                paused: false,
            }),
        })
    }

    /// Only the functions the patterns select (resolved when first used by a
    /// registered ops and at every change of the loaded objects).
    pub fn with_patterns(
        filter: &[&str],
        notrace: &[&str],
    ) -> Result<Arc<FilterSet>, PatternError> {
        let fs = FilterSet::all();
        *lock(&fs.spec) = FilterSpec::Patterns {
            filter: Some(parse_all(filter)?),
            notrace: parse_all(notrace)?,
            paused: false,
        };
        let mut c = lock_core();
        let pair = c.resolve(&lock(&fs.spec))?;
        c.pattern_sets.retain(|w| w.strong_count() > 0);
        c.pattern_sets.push(Arc::downgrade(&fs));
        drop(c);
        // Not yet visible to any thread: the initial pair is replaced in place.
        let old = fs
            .current
            .swap(Box::into_raw(Box::new(pair)), Ordering::AcqRel);
        // SAFETY: `old` came from Box::into_raw in `all()` and was never
        // shared (fs has not escaped this function).
        drop(unsafe { Box::from_raw(old) });
        Ok(fs)
    }

    fn computed() -> Arc<FilterSet> {
        let fs = FilterSet::all();
        *lock(&fs.spec) = FilterSpec::Computed;
        fs.current.store(
            Box::into_raw(Box::new(FilterPair {
                filter: Filter::Set(SiteSet::default()),
                notrace: SiteSet::default(),
            })),
            Ordering::Release,
        );
        fs
    }

    #[inline]
    pub fn pair(&self) -> &FilterPair {
        // SAFETY: pairs are freed only after a grace period following their
        // replacement; callers on the hot path are inside the bracket and
        // control-plane callers hold an Arc of this set.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }
}

fn parse_all(p: &[&str]) -> Result<Vec<Pattern>, PatternError> {
    p.iter().map(|t| Pattern::parse(t)).collect()
}

/// A change to a filter or notrace list.
#[derive(Clone, Copy, Debug)]
pub enum FilterEdit<'a> {
    /// Replace the list.
    Set(&'a [&'a str]),
    /// Add patterns at the end.
    Append(&'a [&'a str]),
    /// Remove one pattern (by its text); removing the last filter pattern
    /// leaves an empty set: nothing is traced.
    Remove(&'a str),
    /// Filter: every function again. Notrace: nothing excluded.
    Reset,
}

/// Why a core operation was refused. The state is as before the call.
#[derive(Debug)]
pub enum CoreError {
    AlreadyRegistered,
    NotRegistered,
    /// A site already has a DIRECT or IPMODIFY ops that conflicts.
    Busy {
        function: String,
    },
    Invalid(String),
    Filter(PatternError),
    Patch(PatchError),
    Arena(ArenaError),
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::AlreadyRegistered => write!(f, "ops already registered"),
            CoreError::NotRegistered => write!(f, "ops not registered"),
            CoreError::Busy { function } => {
                write!(f, "{function} already has a direct or IP-modifying ops")
            }
            CoreError::Invalid(s) => write!(f, "{s}"),
            CoreError::Filter(e) => write!(f, "{e}"),
            CoreError::Patch(e) => write!(f, "{e}"),
            CoreError::Arena(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CoreError {}

impl From<PatternError> for CoreError {
    fn from(e: PatternError) -> Self {
        CoreError::Filter(e)
    }
}

// --- Site records (SPEC §3.3) --------------------------------------------------

/// Site flags. Plain flags are wanted; `_EN` flags say what the code holds.
pub mod site_flags {
    pub const ENABLED: u16 = 1 << 0;
    pub const REGS: u16 = 1 << 1;
    pub const REGS_EN: u16 = 1 << 2;
    pub const TRAMP: u16 = 1 << 3;
    pub const TRAMP_EN: u16 = 1 << 4;
    pub const DIRECT: u16 = 1 << 5;
    pub const DIRECT_EN: u16 = 1 << 6;
    pub const IPMODIFY: u16 = 1 << 7;
    pub const DISABLED: u16 = 1 << 8;
    /// Sticky: was ever enabled.
    pub const TOUCHED: u16 = 1 << 9;
    /// Sticky: was ever attached by a DIRECT or IPMODIFY ops.
    pub const MODIFIED: u16 = 1 << 10;
    /// The site jumps to its own stub (with TRAMP: its ops is alone).
    pub const STUB: u16 = 1 << 11;
    pub const STICKY: u16 = DISABLED | TOUCHED | MODIFIED;
}

/// A site as the core accounts for it.
#[derive(Clone, Debug)]
pub struct SiteState {
    pub id: SiteId,
    pub addr: usize,
    /// The function's name (simple demangled form).
    pub function: String,
    /// Its symbol as the object names it (mangled).
    pub symbol: String,
    pub module: PathBuf,
    /// Enabled core-list ops whose filter contains the site.
    pub count: u16,
    pub flags: u16,
    /// What the site calls (0: nothing, NOP5).
    pub target: usize,
    /// Base of the arena serving the site.
    pub arena: usize,
}

struct SiteRec {
    addr: usize,
    function: String,
    symbol: String,
    module: u16,
    count: u16,
    flags: u16,
    cur_target: usize,
}

struct ModuleRec {
    path: PathBuf,
    bias: usize,
    arena: &'static Arena,
    shared_args: usize,
    shared_regs: usize,
    /// Removed (dlclose): its sites are NOP5 and DISABLED for good.
    unloaded: bool,
}

struct Core {
    sites: Vec<SiteRec>,
    modules: Vec<ModuleRec>,
    /// The core list: enabled ops (managers stand for their subops), newest first.
    list: Vec<Arc<Ops>>,
    /// Direct pads: (arena base, target, pad).
    pads: Vec<(usize, usize, usize)>,
    /// The single-ops record currently or last published (freed after a
    /// grace period once replaced).
    single: Option<Box<DispatchRecord>>,
    /// Things unpublished under the lock, to free after the grace period.
    retired: Vec<Retired>,
    /// Every pattern set made (`FilterSet::with_patterns`), whether an ops
    /// uses it or not (fgraph's graph filters): resolved again when objects
    /// are loaded, like the ops' own.
    pattern_sets: Vec<std::sync::Weak<FilterSet>>,
}

enum Retired {
    Pair(*mut FilterPair),
    List(*mut OpsList),
    Record(Box<DispatchRecord>),
    Threads(*mut ThreadFilter),
    /// Trampoline bytes a thread may still be executing (part B).
    Code(usize, usize),
}

// SAFETY: the raw pointers are owned by the retirement list and only freed
// after a grace period.
unsafe impl Send for Retired {}
unsafe impl Send for Core {}

static CORE: Mutex<Core> = Mutex::new(Core {
    sites: Vec::new(),
    modules: Vec::new(),
    list: Vec::new(),
    pads: Vec::new(),
    single: None,
    retired: Vec::new(),
    pattern_sets: Vec::new(),
});

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_core() -> MutexGuard<'static, Core> {
    lock(&CORE)
}

/// What the core counted, every thread, since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreCounters {
    /// Code grace periods given up (threads that could not be stopped, or
    /// a stale stack word): their trampolines are never reused.
    pub code_grace_given_up: u64,
    /// Calls that found no free quiescence slot and ran without a bracket.
    pub unbracketed: u64,
    /// Brackets a thread left without leaving them (a signal handler that
    /// interrupted our code and left by siglongjmp).
    pub abandoned_brackets: u64,
    /// Calls dropped because a guarded callback recursed too deep.
    pub recursion_drops: u64,
}

/// The core's counts now (each read on its own, Relaxed: statistics).
pub fn counters() -> CoreCounters {
    CoreCounters {
        code_grace_given_up: CODE_GRACE_GIVEN_UP.load(Ordering::Relaxed),
        unbracketed: quiesce::UNBRACKETED.load(Ordering::Relaxed),
        abandoned_brackets: quiesce::ABANDONED.load(Ordering::Relaxed),
        recursion_drops: recursion_drops_all(),
    }
}

/// Frees what `c.retired` holds once no thread can still use it.
/// Code grace periods that could not be completed (threads that could not
/// be stopped, or a stale stack word): the trampolines are never reused, so
/// this only weakens "no thread is still inside" to "no thread can start".
static CODE_GRACE_GIVEN_UP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn finish(mut c: MutexGuard<'static, Core>) {
    let retired = std::mem::take(&mut c.retired);
    drop(c);
    if retired.is_empty() {
        return;
    }
    quiesce::synchronize();
    let code: Vec<(usize, usize)> = retired
        .iter()
        .filter_map(|r| match r {
            Retired::Code(lo, hi) => Some((*lo, *hi)),
            _ => None,
        })
        .collect();
    if !code.is_empty() && !crate::stop::wait_code_quiescent(&code) {
        CODE_GRACE_GIVEN_UP.fetch_add(1, Ordering::Relaxed);
    }
    for r in retired {
        // SAFETY: each pointer was unpublished before the grace period and
        // is owned solely by the retirement list.
        unsafe {
            match r {
                Retired::Pair(p) => drop(Box::from_raw(p)),
                Retired::List(p) => drop(Box::from_raw(p)),
                Retired::Record(b) => drop(b),
                Retired::Threads(p) => drop(Box::from_raw(p)),
                // Trampolines are never freed nor reused: nothing to do.
                Retired::Code(..) => {}
            }
        }
    }
}

// --- Modules -------------------------------------------------------------------

/// Brings the sites of `modules` under the core: converts them to NOP5,
/// places an arena (with shared callers) near each, re-resolves every filter
/// in use and updates the accounting (ops tracing "all" get the new sites).
pub fn add_modules(mut modules: Vec<Module>) -> Result<(), CoreError> {
    quiesce::init();
    patch::init();
    process::normalize(&mut modules).map_err(|e| CoreError::Invalid(e.to_string()))?;
    let mut c = lock_core();
    for m in modules {
        let Some((lo, hi)) = m.site_range() else {
            continue;
        };
        let arena = Arena::near(lo, hi).map_err(CoreError::Arena)?;
        let shared_args = tramp::ftrace_caller(arena, false, dispatch::shared_entry, 0)
            .map_err(CoreError::Arena)?;
        let shared_regs = tramp::ftrace_caller(arena, true, dispatch::shared_entry, 0)
            .map_err(CoreError::Arena)?;
        let module = c.modules.len() as u16;
        c.modules.push(ModuleRec {
            path: m.path.clone(),
            bias: m.bias,
            arena,
            shared_args,
            shared_regs,
            unloaded: false,
        });
        for s in m.sites {
            c.sites.push(SiteRec {
                addr: s.addr,
                function: s.function,
                symbol: s.symbol,
                module,
                count: 0,
                flags: if s.disabled.is_some() {
                    site_flags::DISABLED
                } else {
                    0
                },
                cur_target: 0,
            });
        }
    }
    // The hot path's address → id index (old indexes are leaked: tiny, and a
    // thread may hold one indefinitely).
    c.publish_site_index();
    // Patterns are kept: resolve them again over the grown table, the ops'
    // and every other pattern set still in use (once each).
    let mut sets: Vec<Arc<FilterSet>> = c.all_ops().map(|o| o.filter.clone()).collect();
    c.pattern_sets.retain(|w| w.strong_count() > 0);
    sets.extend(c.pattern_sets.iter().filter_map(|w| w.upgrade()));
    sets.sort_by_key(|s| Arc::as_ptr(s) as usize);
    sets.dedup_by_key(|s| Arc::as_ptr(s) as usize);
    for fs in sets {
        let spec = lock(&fs.spec).clone();
        if let FilterSpec::Patterns { .. } = spec {
            let pair = c.resolve(&spec)?;
            c.publish_pair(&fs, pair);
        }
    }
    let managers: Vec<Arc<Ops>> = c
        .list
        .iter()
        .filter(|o| !lock(&o.inner).subops.is_empty())
        .cloned()
        .collect();
    for m in managers {
        c.rebuild_manager(&m);
    }
    // Trampolines in the new arenas for ops that have sites there.
    let ops: Vec<Arc<Ops>> = c.list.clone();
    for o in &ops {
        c.ensure_tramps(o)?;
    }
    let all: Vec<SiteId> = (0..c.sites.len() as SiteId).collect();
    c.update(&all)?;
    finish(c);
    Ok(())
}

/// Discovers and adds every loaded object (except those `skip` names).
pub fn add_loaded(skip: impl Fn(&std::path::Path) -> bool) -> Result<(), CoreError> {
    let mods = process::discover(|p| !skip(p)).map_err(|e| CoreError::Invalid(e.to_string()))?;
    add_modules(mods)
}

/// Sites known to the core (their ids are `0..site_count()`).
pub fn site_count() -> usize {
    lock_core().sites.len()
}

/// The state of every site the core knows.
pub fn sites() -> Vec<SiteState> {
    let c = lock_core();
    (0..c.sites.len()).map(|i| c.state(i as SiteId)).collect()
}

/// Whether the object loaded at `bias` from `path` is under the core.
pub fn has_module(path: &std::path::Path, bias: usize) -> bool {
    lock_core()
        .modules
        .iter()
        .any(|m| !m.unloaded && m.bias == bias && m.path == path)
}

/// Takes the object loaded at `bias` out of the core before it is unloaded
/// (dlclose): its sites go back to NOP5 and stay DISABLED; their records
/// (names, counts by id) remain for reports. Ops keep their filters.
pub fn remove_module(bias: usize) -> Result<(), CoreError> {
    let mut c = lock_core();
    let Some(mi) = c.modules.iter().position(|m| !m.unloaded && m.bias == bias) else {
        return Ok(());
    };
    let ids: Vec<SiteId> = (0..c.sites.len() as SiteId)
        .filter(|&i| c.sites[i as usize].module as usize == mi)
        .collect();
    c.modules[mi].unloaded = true;
    // Unloaded modules match no ops: the update patches their sites to NOP5.
    let r = c.update(&ids);
    for &i in &ids {
        c.sites[i as usize].flags |= site_flags::DISABLED;
    }
    c.publish_site_index();
    finish(c);
    r
}

/// The id of the site at `ip` (hot path: a binary search).
#[inline]
pub fn site_id_of(ip: usize) -> Option<SiteId> {
    dispatch::site_id(ip)
}

/// The state of the site of `function` (first match).
pub fn site_by_name(function: &str) -> Option<SiteState> {
    let c = lock_core();
    let i = c.sites.iter().position(|s| s.function == function)?;
    Some(c.state(i as SiteId))
}

/// The shared callers (args, regs variant) serving the arena at `arena_base`.
pub fn shared_callers(arena_base: usize) -> Option<(usize, usize)> {
    let c = lock_core();
    c.modules
        .iter()
        .find(|m| m.arena.base == arena_base)
        .map(|m| (m.shared_args, m.shared_regs))
}

/// The direct pad for `target` in the arena at `arena_base`, if made.
pub fn direct_pad(arena_base: usize, target: usize) -> Option<usize> {
    lock_core().pad(arena_base, target)
}

// --- Registration ----------------------------------------------------------------

/// Registers `ops`: from now on its callback runs for every call crossing a
/// site its filter selects.
pub fn register(ops: &Arc<Ops>) -> Result<(), CoreError> {
    if ops.flags & DIRECT != 0 {
        return Err(CoreError::Invalid(
            "direct ops are registered with register_direct".into(),
        ));
    }
    let mut c = lock_core();
    c.register_locked(ops)?;
    finish(c);
    Ok(())
}

/// Unregisters `ops`. Returns once no thread runs, or can still start, its
/// callback; its trampolines are unreachable.
pub fn unregister(ops: &Arc<Ops>) -> Result<(), CoreError> {
    let mut c = lock_core();
    c.unregister_locked(ops)?;
    finish(c);
    Ok(())
}

/// Changes the filter list of `fs` (and so of every ops sharing it).
pub fn set_filter(fs: &Arc<FilterSet>, edit: FilterEdit<'_>) -> Result<(), CoreError> {
    edit_filter(fs, edit, false)
}

/// Changes the notrace list of `fs`.
pub fn set_notrace(fs: &Arc<FilterSet>, edit: FilterEdit<'_>) -> Result<(), CoreError> {
    edit_filter(fs, edit, true)
}

fn edit_filter(fs: &Arc<FilterSet>, edit: FilterEdit<'_>, notrace: bool) -> Result<(), CoreError> {
    let c = lock_core();
    let old_spec = lock(&fs.spec).clone();
    let FilterSpec::Patterns {
        filter,
        notrace: nt,
        paused,
    } = &old_spec
    else {
        return Err(CoreError::Invalid(
            "a manager's filter is computed from its subops".into(),
        ));
    };
    let mut list = if notrace {
        Some(nt.clone())
    } else {
        filter.clone()
    };
    match edit {
        FilterEdit::Set(p) => list = Some(parse_all(p)?),
        FilterEdit::Append(p) => list.get_or_insert_with(Vec::new).extend(parse_all(p)?),
        FilterEdit::Remove(t) => {
            let l = list.get_or_insert_with(Vec::new);
            let before = l.len();
            l.retain(|p| p.text() != t);
            if l.len() == before {
                return Err(CoreError::Invalid(format!(
                    "pattern `{t}` is not in the list"
                )));
            }
        }
        FilterEdit::Reset => list = if notrace { Some(Vec::new()) } else { None },
    }
    let new_spec = if notrace {
        FilterSpec::Patterns {
            filter: filter.clone(),
            notrace: list.unwrap_or_default(),
            paused: *paused,
        }
    } else {
        FilterSpec::Patterns {
            filter: list,
            notrace: nt.clone(),
            paused: *paused,
        }
    };
    apply_spec(c, fs, old_spec, new_spec)
}

/// Pauses (`true`) or resumes what `fs` selects, for every ops and graph
/// user sharing it: paused, it selects no function (their sites go back
/// to nops unless another ops wants them: no cost), its patterns kept for
/// when it resumes (and resolved again as objects load meanwhile). Calls
/// under way are unaffected: their returns still reach the graph users
/// that took them. Live: other threads run through the sites meanwhile.
pub fn set_paused(fs: &Arc<FilterSet>, paused: bool) -> Result<(), CoreError> {
    let c = lock_core();
    let old_spec = lock(&fs.spec).clone();
    let FilterSpec::Patterns {
        filter, notrace, ..
    } = &old_spec
    else {
        return Err(CoreError::Invalid(
            "a manager's filter is computed from its subops".into(),
        ));
    };
    let new_spec = FilterSpec::Patterns {
        filter: filter.clone(),
        notrace: notrace.clone(),
        paused,
    };
    apply_spec(c, fs, old_spec, new_spec)
}

/// Makes `new_spec` the spec of `fs` and patches the sites it and the
/// managers sharing it change; on failure `old_spec` stays.
fn apply_spec(
    mut c: MutexGuard<'static, Core>,
    fs: &Arc<FilterSet>,
    old_spec: FilterSpec,
    new_spec: FilterSpec,
) -> Result<(), CoreError> {
    let pair = c.resolve(&new_spec)?;
    *lock(&fs.spec) = new_spec;
    let n = c.sites.len();
    let mut touched = fs.pair().resolve(n);
    c.publish_pair(fs, pair.clone());
    touched = touched.union(&pair.resolve(n));
    // Managers whose subops share this filter.
    let managers: Vec<Arc<Ops>> = c
        .list
        .iter()
        .filter(|m| {
            lock(&m.inner)
                .subops
                .iter()
                .any(|s| Arc::ptr_eq(&s.filter, fs))
        })
        .cloned()
        .collect();
    for m in managers {
        touched = touched.union(&c.rebuild_manager(&m));
    }
    if let Err(e) = c.update(touched.ids()) {
        // Put the old filter back; the accounting is unchanged.
        *lock(&fs.spec) = old_spec;
        if let Ok(p) = c.resolve(&lock(&fs.spec)) {
            c.publish_pair(fs, p);
        }
        finish(c);
        return Err(e);
    }
    finish(c);
    Ok(())
}

/// Registers a DIRECT ops: every site its (non-empty set) filter selects
/// continues at `target`, entered with `[rsp] = site+5`, `[rsp+8] = R` and
/// the arguments as at entry. `Busy` if a site already has a direct ops or
/// an IP-modifying one.
pub fn register_direct(ops: &Arc<Ops>, target: usize) -> Result<(), CoreError> {
    if ops.flags & DIRECT == 0 {
        return Err(CoreError::Invalid(
            "not a direct ops (use Ops::new_direct)".into(),
        ));
    }
    if !matches!(ops.filter_pair().filter, Filter::Set(ref s) if !s.is_empty()) {
        return Err(CoreError::Invalid(
            "a direct ops needs a non-empty function set".into(),
        ));
    }
    if target == 0 {
        return Err(CoreError::Invalid("null direct target".into()));
    }
    let mut c = lock_core();
    if ops.is_enabled() {
        return Err(CoreError::AlreadyRegistered);
    }
    ops.direct.store(target, Ordering::Release);
    let r = c.register_locked(ops);
    if r.is_err() {
        ops.direct.store(0, Ordering::Release);
    }
    finish(c);
    r
}

/// Retargets a registered DIRECT ops with no gap: a temporary STUB ops on
/// the same functions routes every call through the list function (where
/// the helper yields the old or the new target) while the target changes,
/// then leaves, and the sites call the new target's pad. The old target must
/// stay callable until this returns (and a thread that already jumped to it
/// finishes).
pub fn modify_direct(ops: &Arc<Ops>, target: usize) -> Result<(), CoreError> {
    if ops.flags & DIRECT == 0 || !ops.is_enabled() {
        return Err(CoreError::NotRegistered);
    }
    if target == 0 {
        return Err(CoreError::Invalid("null direct target".into()));
    }
    let stub = Ops::new(|_, _, _, _| {}, STUB, ops.filter.clone());
    register(&stub)?;
    // Every site now counts ≥ 2 and goes through the list function, where
    // the helper reads the target: old or new, never neither.
    let r = {
        let mut c = lock_core();
        let r = c.ensure_pads(ops, target);
        if r.is_ok() {
            ops.direct.store(target, Ordering::Release);
        }
        r
    };
    // Not under the core lock: unregister takes it (doing so under the lock
    // once deadlocked). Count 1 again → the sites call the new pad.
    let u = unregister(&stub);
    r?;
    u
}

/// Adds `sub` to `manager`; the manager is registered with the first subop
/// and traces exactly the union of its subops' sets.
pub fn register_subop(manager: &Arc<Ops>, sub: &Arc<Ops>) -> Result<(), CoreError> {
    let mut c = lock_core();
    if sub.state.load(Ordering::Acquire) & (ENABLED | SUBOP) != 0 {
        return Err(CoreError::AlreadyRegistered);
    }
    {
        let mut mi = lock(&manager.inner);
        mi.subops.insert(0, sub.clone());
        publish_subops(manager, &mi.subops, &mut c.retired);
    }
    sub.state.fetch_or(ENABLED | SUBOP, Ordering::AcqRel);
    let r = if manager.is_enabled() {
        let touched = c.rebuild_manager(manager);
        c.update(touched.ids())
    } else {
        c.rebuild_manager(manager);
        c.register_locked(manager)
    };
    if r.is_err() {
        let mut mi = lock(&manager.inner);
        mi.subops.retain(|s| !Arc::ptr_eq(s, sub));
        publish_subops(manager, &mi.subops, &mut c.retired);
        drop(mi);
        sub.state.fetch_and(!(ENABLED | SUBOP), Ordering::AcqRel);
        c.rebuild_manager(manager);
    }
    finish(c);
    r
}

/// Removes `sub` from `manager`; the manager leaves the core with its last
/// subop.
pub fn unregister_subop(manager: &Arc<Ops>, sub: &Arc<Ops>) -> Result<(), CoreError> {
    let mut c = lock_core();
    let remaining = {
        let mut mi = lock(&manager.inner);
        let before = mi.subops.len();
        mi.subops.retain(|s| !Arc::ptr_eq(s, sub));
        if mi.subops.len() == before {
            return Err(CoreError::NotRegistered);
        }
        publish_subops(manager, &mi.subops, &mut c.retired);
        mi.subops.len()
    };
    sub.state.fetch_and(!(ENABLED | SUBOP), Ordering::AcqRel);
    let r = if remaining == 0 {
        // Leave with the old set (it names the sites to clear), then empty it.
        let r = c.unregister_locked(manager);
        c.rebuild_manager(manager);
        r
    } else {
        let touched = c.rebuild_manager(manager);
        c.update(touched.ids())
    };
    finish(c);
    r
}

fn publish_subops(manager: &Ops, subops: &[Arc<Ops>], retired: &mut Vec<Retired>) {
    let list = Box::new(OpsList {
        ops: subops.iter().map(Arc::as_ptr).collect(),
    });
    let old = manager
        .subops_list
        .swap(Box::into_raw(list), Ordering::AcqRel);
    if !old.is_null() {
        retired.push(Retired::List(old));
    }
}

/// The manager filter of SPEC §3.6 (exact): A = subops tracing all, S =
/// subops with sets. No A: `Set(∪S (F−N))`. Else `All` with notrace
/// `(∩A N) − ∪S (F−N)`.
pub fn manager_pair(subs: &[&FilterPair]) -> FilterPair {
    let mut union_s = SiteSet::default();
    let mut inter_a: Option<SiteSet> = None;
    for p in subs {
        match &p.filter {
            Filter::Set(f) => union_s = union_s.union(&f.difference(&p.notrace)),
            Filter::All => {
                inter_a = Some(match inter_a {
                    None => p.notrace.clone(),
                    Some(acc) => acc.intersection(&p.notrace),
                })
            }
        }
    }
    match inter_a {
        None => FilterPair {
            filter: Filter::Set(union_s),
            notrace: SiteSet::default(),
        },
        Some(nt) => FilterPair {
            filter: Filter::All,
            notrace: nt.difference(&union_s),
        },
    }
}

impl Core {
    fn all_ops(&self) -> impl Iterator<Item = Arc<Ops>> + '_ {
        self.list
            .iter()
            .flat_map(|o| std::iter::once(o.clone()).chain(lock(&o.inner).subops.clone()))
    }

    fn names(&self) -> Vec<FunctionName<'_>> {
        self.sites
            .iter()
            .map(|s| FunctionName {
                function: &s.function,
                symbol: &s.symbol,
                module: self.modules[s.module as usize].path.to_str().unwrap_or(""),
            })
            .collect()
    }

    fn resolve(&self, spec: &FilterSpec) -> Result<FilterPair, PatternError> {
        let FilterSpec::Patterns {
            filter,
            notrace,
            paused,
        } = spec
        else {
            return Ok(FilterPair::default());
        };
        if *paused {
            return Ok(FilterPair {
                filter: Filter::Set(SiteSet::default()),
                notrace: SiteSet::default(),
            });
        }
        let names = self.names();
        Ok(FilterPair {
            filter: match filter {
                None => Filter::All,
                Some(p) => Filter::Set(filter::resolve(p, &names)?),
            },
            notrace: filter::resolve(notrace, &names)?,
        })
    }

    fn publish_pair(&mut self, fs: &FilterSet, pair: FilterPair) {
        let old = fs
            .current
            .swap(Box::into_raw(Box::new(pair)), Ordering::AcqRel);
        self.retired.push(Retired::Pair(old));
    }

    /// Recomputes a manager's pair from its subops; returns old ∪ new sets.
    fn rebuild_manager(&mut self, m: &Arc<Ops>) -> SiteSet {
        let n = self.sites.len();
        let subs: Vec<Arc<Ops>> = lock(&m.inner).subops.clone();
        let pairs: Vec<&FilterPair> = subs.iter().map(|s| s.filter_pair()).collect();
        let new = manager_pair(&pairs);
        let touched = m.filter_pair().resolve(n).union(&new.resolve(n));
        self.publish_pair(&m.filter, new);
        touched
    }

    /// Publishes the hot path's address → id index of the loaded sites
    /// (old indexes are leaked: small, and a thread may hold one
    /// indefinitely).
    fn publish_site_index(&self) {
        let mut order: Vec<(usize, u32)> = self
            .sites
            .iter()
            .enumerate()
            .filter(|(_, s)| !self.modules[s.module as usize].unloaded)
            .map(|(i, s)| (s.addr, i as u32))
            .collect();
        order.sort_unstable();
        let idx = Box::new(SiteIndex {
            addrs: order.iter().map(|o| o.0).collect(),
            ids: order.iter().map(|o| o.1).collect(),
        });
        SITE_INDEX.store(Box::into_raw(idx), Ordering::Release);
    }

    fn state(&self, id: SiteId) -> SiteState {
        let s = &self.sites[id as usize];
        let m = &self.modules[s.module as usize];
        SiteState {
            id,
            addr: s.addr,
            function: s.function.clone(),
            symbol: s.symbol.clone(),
            module: m.path.clone(),
            count: s.count,
            flags: s.flags,
            target: s.cur_target,
            arena: m.arena.base,
        }
    }

    /// Sites of an ops' current filter (managers: their computed set).
    fn sites_of(&self, ops: &Ops) -> SiteSet {
        ops.filter_pair().resolve(self.sites.len())
    }

    fn ensure_tramps(&mut self, ops: &Arc<Ops>) -> Result<(), CoreError> {
        if !ops.wants_tramp() {
            return Ok(());
        }
        let mut arenas: Vec<usize> = self
            .sites_of(ops)
            .ids()
            .iter()
            .map(|&i| self.sites[i as usize].module as usize)
            .collect();
        arenas.sort_unstable();
        arenas.dedup();
        let mut inner = lock(&ops.inner);
        for mi in arenas {
            tramp_slot_in(ops, &mut inner, self.modules[mi].arena)?;
        }
        // Re-arm slots a previous unregistration cleared.
        for t in &inner.tramps {
            t.2.ops
                .store(Arc::as_ptr(ops) as *mut Ops, Ordering::Release);
        }
        Ok(())
    }

    /// Makes the stubs `ops` lacks for the sites of `ids` it selects. Best
    /// effort: a site without a stub (no arena room) calls the ops'
    /// trampoline instead, which serves it just as well, only slower.
    fn ensure_site_stubs(&mut self, ops: &Arc<Ops>, ids: &[SiteId]) {
        use site_flags::DISABLED;
        if ops.site_entry == 0 {
            return;
        }
        let mut inner = lock(&ops.inner);
        let pair = ops.filter_pair();
        let mut missing: Vec<(u16, usize, SiteId)> = ids
            .iter()
            .filter(|&&id| {
                let s = &self.sites[id as usize];
                s.flags & DISABLED == 0
                    && !self.modules[s.module as usize].unloaded
                    && pair.contains(id)
                    && !inner.site_stubs.contains_key(&id)
            })
            .map(|&id| {
                let s = &self.sites[id as usize];
                (s.module, s.addr, id)
            })
            .collect();
        missing.sort_unstable();
        // Blocks of sites of one module, in address order.
        const BLOCK: usize = 1024;
        let mut rest = &missing[..];
        while !rest.is_empty() {
            let module = rest[0].0;
            let n = rest
                .iter()
                .take(BLOCK)
                .take_while(|m| m.0 == module)
                .count();
            let (block, tail) = rest.split_at(n);
            rest = tail;
            let (lo, hi) = (block[0].1, block[n - 1].1 + 5);
            let bytes = n * tramp::SITE_STUB_LEN + 3 * 64;
            let home = self.modules[module as usize].arena;
            let arena = if home.reaches(lo, hi) && home.room() >= bytes {
                home
            } else {
                match Arena::near_with_room(lo, hi, bytes) {
                    Ok(a) => a,
                    Err(_) => continue,
                }
            };
            let Ok((entry, ret, data)) = stub_tramps_in(ops, &mut inner, arena) else {
                continue;
            };
            let sites: Vec<(usize, u32)> = block.iter().map(|m| (m.1, m.2)).collect();
            let Ok(at) = tramp::site_stubs(arena, &sites, entry, ret, data) else {
                continue;
            };
            for (i, m) in block.iter().enumerate() {
                inner.site_stubs.insert(m.2, at + i * tramp::SITE_STUB_LEN);
            }
        }
    }

    fn ensure_pads(&mut self, ops: &Ops, target: usize) -> Result<(), CoreError> {
        let mods: Vec<usize> = {
            let mut v: Vec<usize> = self
                .sites_of(ops)
                .ids()
                .iter()
                .map(|&i| self.sites[i as usize].module as usize)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        for mi in mods {
            let arena = self.modules[mi].arena;
            if self.pad(arena.base, target).is_none() {
                let pad = tramp::direct_pad(arena, target).map_err(CoreError::Arena)?;
                self.pads.push((arena.base, target, pad));
            }
        }
        Ok(())
    }

    fn pad(&self, arena_base: usize, target: usize) -> Option<usize> {
        self.pads
            .iter()
            .find(|p| p.0 == arena_base && p.1 == target)
            .map(|p| p.2)
    }

    fn check_conflicts(&self, ops: &Ops) -> Result<(), CoreError> {
        if ops.flags & (DIRECT | IPMODIFY) == 0 {
            return Ok(());
        }
        for &id in self.sites_of(ops).ids() {
            for o in &self.list {
                if o.flags & (DIRECT | IPMODIFY) != 0 && o.filter_pair().contains(id) {
                    return Err(CoreError::Busy {
                        function: self.sites[id as usize].function.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    fn register_locked(&mut self, ops: &Arc<Ops>) -> Result<(), CoreError> {
        if ops.is_enabled() {
            return Err(CoreError::AlreadyRegistered);
        }
        self.check_conflicts(ops)?;
        self.ensure_tramps(ops)?;
        if ops.flags & DIRECT != 0 {
            self.ensure_pads(ops, ops.direct_target())?;
        }
        self.list.insert(0, ops.clone());
        self.publish_list();
        ops.state.fetch_or(ENABLED, Ordering::AcqRel);
        let touched = self.sites_of(ops);
        if let Err(e) = self.update(touched.ids()) {
            ops.state.fetch_and(!ENABLED, Ordering::AcqRel);
            self.list.retain(|o| !Arc::ptr_eq(o, ops));
            self.publish_list();
            self.clear_slots(ops);
            return Err(e);
        }
        Ok(())
    }

    fn unregister_locked(&mut self, ops: &Arc<Ops>) -> Result<(), CoreError> {
        if !ops.is_enabled() || ops.state.load(Ordering::Acquire) & SUBOP != 0 {
            return Err(CoreError::NotRegistered);
        }
        ops.state.fetch_and(!ENABLED, Ordering::AcqRel);
        self.list.retain(|o| !Arc::ptr_eq(o, ops));
        self.publish_list();
        self.clear_slots(ops);
        let touched = self.sites_of(ops);
        self.update(touched.ids())
    }

    /// Empties the ops' trampoline slots (a thread entering one returns at
    /// once) and queues the trampolines for the code grace period.
    fn clear_slots(&mut self, ops: &Ops) {
        let inner = lock(&ops.inner);
        for t in &inner.tramps {
            t.2.ops.store(std::ptr::null_mut(), Ordering::Release);
            self.retired.push(Retired::Code(t.1, t.1 + inner.tramp_len));
        }
    }

    fn publish_list(&mut self) {
        let list = Box::new(OpsList {
            ops: self.list.iter().map(Arc::as_ptr).collect(),
        });
        let old = LIST.swap(Box::into_raw(list), Ordering::AcqRel);
        if !old.is_null() {
            self.retired.push(Retired::List(old));
        }
    }

    /// Recomputes `touched` sites from scratch, patches what changed in one
    /// batch, and publishes the global record in the safe order (SPEC §3.4).
    /// On a patch failure nothing was written and the accounting is as
    /// before; the mismatching site is marked DISABLED.
    fn update(&mut self, touched: &[SiteId]) -> Result<(), CoreError> {
        use site_flags::{
            DIRECT_EN, DISABLED, MODIFIED, REGS, REGS_EN, STICKY, TOUCHED, TRAMP, TRAMP_EN,
        };
        struct Want {
            id: usize,
            count: u16,
            flags: u16,
            target: usize,
        }
        let stubbed: Vec<Arc<Ops>> = self
            .list
            .iter()
            .filter(|o| o.site_entry != 0)
            .cloned()
            .collect();
        for o in &stubbed {
            self.ensure_site_stubs(o, touched);
        }
        let mut wants = Vec::with_capacity(touched.len());
        for &id in touched {
            let s = &self.sites[id as usize];
            if s.flags & DISABLED != 0 {
                continue;
            }
            let module = &self.modules[s.module as usize];
            let m: Vec<&Arc<Ops>> = if module.unloaded {
                Vec::new()
            } else {
                self.list
                    .iter()
                    .filter(|o| o.filter_pair().contains(id))
                    .collect()
            };
            let mut flags = s.flags & STICKY;
            let count = m.len() as u16;
            if m.iter().any(|o| o.needs_regs()) {
                flags |= REGS;
            }
            if m.iter().any(|o| o.flags & DIRECT != 0) {
                flags |= site_flags::DIRECT | MODIFIED;
            }
            if m.iter().any(|o| o.flags & IPMODIFY != 0) {
                flags |= site_flags::IPMODIFY | MODIFIED;
            }
            let tramp = if m.len() == 1 && m[0].flags & DIRECT == 0 {
                let stub = lock(&m[0].inner).site_stubs.get(&id).copied();
                if stub.is_some() {
                    flags |= site_flags::STUB;
                }
                stub.or_else(|| m[0].trampoline_in(module.arena.base))
            } else {
                None
            };
            let target = if m.is_empty() {
                0
            } else if m.len() == 1 && m[0].flags & DIRECT != 0 {
                flags |= DIRECT_EN;
                self.pad(module.arena.base, m[0].direct_target())
                    .expect("pad made at registration")
            } else if let Some(t) = tramp {
                flags |= TRAMP | TRAMP_EN;
                t
            } else if flags & REGS != 0 {
                flags |= REGS_EN;
                module.shared_regs
            } else {
                module.shared_args
            };
            if count > 0 {
                flags |= site_flags::ENABLED | TOUCHED;
            }
            wants.push(Want {
                id: id as usize,
                count,
                flags,
                target,
            });
        }
        // The global record for the shared caller.
        let new_rec: *const DispatchRecord = match self.list.len() {
            0 => &STUB_RECORD,
            1 => std::ptr::null(), // a fresh single-ops record, below
            _ => &LIST_RECORD,
        };
        let cur = RECORD.load(Ordering::Acquire) as *const DispatchRecord;
        let single_same = self.list.len() == 1
            && self.single.as_ref().is_some_and(|r| {
                std::ptr::eq(&**r, cur) && std::ptr::eq(r.ops, Arc::as_ptr(&self.list[0]))
            });
        let changes = if self.list.len() == 1 {
            !single_same
        } else {
            !std::ptr::eq(new_rec, cur)
        };
        if changes {
            RECORD.store(&LIST_RECORD as *const _ as *mut _, Ordering::Release);
        }
        let mut edits: Vec<Edit> = Vec::new();
        for w in &wants {
            let s = &self.sites[w.id];
            let old = encode(s.addr, s.cur_target, s.flags);
            let new = encode(s.addr, w.target, w.flags);
            if old != new {
                edits.push(Edit::new(s.addr, &old, &new));
            }
        }
        if let Err(e) = patch::apply(&mut edits) {
            RECORD.store(cur as *mut _, Ordering::Release);
            if let PatchError::Mismatch { addr, .. } = &e {
                if let Some(s) = self.sites.iter_mut().find(|s| s.addr == *addr) {
                    s.flags |= DISABLED;
                }
            }
            return Err(CoreError::Patch(e));
        }
        for w in wants {
            let s = &mut self.sites[w.id];
            s.count = w.count;
            s.flags = w.flags;
            s.cur_target = w.target;
        }
        if changes {
            let rec: *const DispatchRecord = if self.list.len() == 1 {
                let ops = &self.list[0];
                let r = Box::new(DispatchRecord {
                    func: dispatch::single_fn,
                    ops: Arc::as_ptr(ops),
                });
                let p: *const DispatchRecord = &*r;
                if let Some(old) = self.single.replace(r) {
                    self.retired.push(Retired::Record(old));
                }
                p
            } else {
                new_rec
            };
            RECORD.store(rec as *mut _, Ordering::Release);
        }
        Ok(())
    }
}

/// The bytes of a site calling `target` (jumping to it: a site stub).
fn encode(site: usize, target: usize, flags: u16) -> [u8; 5] {
    if target == 0 {
        NOP5
    } else if flags & site_flags::STUB != 0 {
        encode_jmp(site, target).expect("arena within reach of its sites")
    } else {
        encode_call(site, target).expect("arena within reach of its sites")
    }
}

/// The ops' trampoline in `arena` (made if missing); returns its data slot.
fn tramp_slot_in(
    ops: &Arc<Ops>,
    inner: &mut OpsInner,
    arena: &Arena,
) -> Result<&'static OpsSlot, CoreError> {
    if let Some(t) = inner.tramps.iter().find(|t| t.0 == arena.base) {
        return Ok(t.2);
    }
    let slot: &'static OpsSlot = Box::leak(Box::new(OpsSlot {
        ops: AtomicPtr::new(Arc::as_ptr(ops) as *mut Ops),
    }));
    let data = slot as *const OpsSlot as usize;
    let code = if ops.tramp_stub != 0 {
        tramp::stub(arena, ops.tramp_stub, data)
    } else {
        tramp::ftrace_caller(arena, ops.needs_regs(), ops.tramp_entry, data)
    }
    .map_err(CoreError::Arena)?;
    inner.tramps.push((arena.base, code, slot));
    inner.tramp_len = if ops.tramp_stub != 0 {
        tramp::STUB_LEN
    } else {
        tramp::ftrace_caller_len(ops.needs_regs())
    };
    Ok(slot)
}

/// The cells in `arena` holding the site stubs' ENTRY and RETURN (made if
/// missing), and the data slot of the ops' trampoline there (cleared and
/// re-armed with it), which the stubs hold for ENTRY.
fn stub_tramps_in(
    ops: &Arc<Ops>,
    inner: &mut OpsInner,
    arena: &Arena,
) -> Result<(usize, usize, usize), CoreError> {
    let slot = tramp_slot_in(ops, inner, arena)? as *const OpsSlot as usize;
    if let Some(t) = inner.stub_tramps.iter().find(|t| t.0 == arena.base) {
        return Ok((t.1, t.2, slot));
    }
    let cell = |v: usize| arena.alloc_code(&(v as u64).to_le_bytes());
    let entry = cell(ops.site_entry).map_err(CoreError::Arena)?;
    let ret = cell(ops.site_return).map_err(CoreError::Arena)?;
    inner.stub_tramps.push((arena.base, entry, ret));
    Ok((entry, ret, slot))
}

/// Checks the model invariant of SPEC §3.5 against the code in memory:
/// counts, TRAMP/DIRECT/REGS flags, targets and bytes, trampoline use.
/// Returns the first violation.
pub fn check_invariants() -> Result<(), String> {
    use site_flags::{DISABLED, REGS, STICKY, TRAMP};
    let c = lock_core();
    for (i, s) in c.sites.iter().enumerate() {
        let id = i as SiteId;
        let name = &s.function;
        // SAFETY: reading loaded text at a known site.
        let bytes = unsafe { std::slice::from_raw_parts(s.addr as *const u8, 5) };
        if s.flags & DISABLED != 0 {
            continue;
        }
        let m: Vec<&Arc<Ops>> = c
            .list
            .iter()
            .filter(|o| o.filter_pair().contains(id))
            .collect();
        if s.count as usize != m.len() {
            return Err(format!(
                "{name}: count {} != {} matching ops",
                s.count,
                m.len()
            ));
        }
        let module = &c.modules[s.module as usize];
        let want_tramp = m.len() == 1
            && m[0].flags & DIRECT == 0
            && m[0].trampoline_in(module.arena.base).is_some();
        if (s.flags & TRAMP != 0) != want_tramp {
            return Err(format!("{name}: TRAMP flag wrong"));
        }
        if (s.flags & site_flags::DIRECT != 0) != m.iter().any(|o| o.flags & DIRECT != 0) {
            return Err(format!("{name}: DIRECT flag wrong"));
        }
        if (s.flags & REGS != 0) != m.iter().any(|o| o.needs_regs()) {
            return Err(format!("{name}: REGS flag wrong"));
        }
        if (s.flags & site_flags::ENABLED != 0) == m.is_empty() {
            return Err(format!("{name}: ENABLED flag wrong"));
        }
        if (s.flags & site_flags::STUB != 0) && !want_tramp {
            return Err(format!("{name}: STUB flag without a lone ops"));
        }
        if bytes != encode(s.addr, s.cur_target, s.flags) {
            return Err(format!(
                "{name}: memory {:02x?} does not encode target {:#x}",
                bytes, s.cur_target
            ));
        }
        if m.is_empty() && (s.cur_target != 0 || s.flags & !STICKY != 0) {
            return Err(format!(
                "{name}: unused site not clean (flags {:#x})",
                s.flags
            ));
        }
    }
    Ok(())
}
