//! The core's state and its accounting engine (design §3.3–§3.5): the site
//! records and the objects they belong to, the core list of ops, and the
//! update that recomputes each touched site's count and flags from the
//! ops that match it (never accumulating), chooses its target and patches
//! the sites whose target changed, publishing the hot path's records in
//! the order §3.4 gives. Everything here runs under the core lock.

use super::dispatch::{
    self, DispatchRecord, SiteIndex, LIST, LIST_RECORD, RECORD, SITE_INDEX, STUB_RECORD,
};
use super::error::CoreError;
use super::filter::{self, Filter, FilterPair, FunctionName, PatternError, SiteId, SiteSet};
use super::filterset::{FilterSet, FilterSpec};
use super::ops::{
    lock, Ops, OpsInner, OpsList, OpsSlot, StubCells, ThreadFilter, DIRECT, ENABLED, IPMODIFY,
    MAX_ALT_ENTRIES, SUBOP,
};
use super::quiesce;
use super::site_flags;
use crate::arena::Arena;
use crate::patch::{self, Edit, PatchError};
use crate::site::{encode_call, encode_jmp, NOP5};
use crate::tramp;
use std::path::PathBuf;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

// --- Site records (design §3.3) --------------------------------------------------

/// A site as the core accounts for it.
#[derive(Clone, Debug)]
pub struct SiteState {
    /// Its index in the core's site table.
    pub id: SiteId,
    /// The site's address (the function's entry, after any `endbr64`).
    pub addr: usize,
    /// The function's name (simple demangled form).
    pub function: String,
    /// Its symbol as the object names it (mangled).
    pub symbol: String,
    /// The object holding it.
    pub module: PathBuf,
    /// For a library call: the object defining the function called.
    pub library: Option<PathBuf>,
    /// Enabled core-list ops whose filter contains the site.
    pub count: u16,
    /// [`site_flags`] bits.
    pub flags: u16,
    /// What the site calls (0: nothing, NOP5).
    pub target: usize,
    /// Base of the arena serving the site.
    pub arena: usize,
}

pub(super) struct SiteRec {
    pub addr: usize,
    pub function: String,
    pub symbol: String,
    pub library: Option<PathBuf>,
    pub module: u16,
    pub count: u16,
    pub flags: u16,
    pub cur_target: usize,
}

pub(super) struct ModuleRec {
    pub path: PathBuf,
    pub bias: usize,
    pub arena: &'static Arena,
    pub shared_args: usize,
    pub shared_regs: usize,
    /// Removed (dlclose): its sites are NOP5 and DISABLED for good.
    pub unloaded: bool,
}

pub(super) struct Core {
    pub sites: Vec<SiteRec>,
    pub modules: Vec<ModuleRec>,
    /// The core list: enabled ops (managers stand for their subops), newest first.
    pub list: Vec<Arc<Ops>>,
    /// Direct pads: (arena base, target, pad).
    pub pads: Vec<(usize, usize, usize)>,
    /// The single-ops record currently or last published (freed after a
    /// grace period once replaced).
    pub single: Option<Box<DispatchRecord>>,
    /// Things unpublished under the lock, to free after the grace period.
    pub retired: Vec<Retired>,
    /// Every pattern set made (`FilterSet::with_patterns`), whether an ops
    /// uses it or not (fgraph's graph filters): resolved again when objects
    /// are loaded, like the ops' own.
    pub pattern_sets: Vec<std::sync::Weak<FilterSet>>,
    /// The sets of ops whose callers serve sites that several match
    /// (ftrace::sets).
    pub sets: Vec<SetRec>,
}

/// A set of ops and its callers (ftrace::sets).
pub(super) struct SetRec {
    /// Its ops' addresses, sorted: what names it.
    pub key: Vec<usize>,
    /// The list its callers run (null once retired).
    pub slot: &'static AtomicPtr<OpsList>,
    /// Its callers: (arena base, code).
    pub code: Vec<(usize, usize)>,
}

pub(super) enum Retired {
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
// SAFETY: Core's raw pointers are the published records and the retired
// list's, owned as above; Core itself is only used under its mutex.
unsafe impl Send for Core {}

static CORE: Mutex<Core> = Mutex::new(Core {
    sites: Vec::new(),
    modules: Vec::new(),
    list: Vec::new(),
    pads: Vec::new(),
    single: None,
    retired: Vec::new(),
    pattern_sets: Vec::new(),
    sets: Vec::new(),
});

pub(super) fn lock_core() -> MutexGuard<'static, Core> {
    lock(&CORE)
}

/// Code grace periods that could not be completed (threads that could not
/// be stopped, or a stale stack word): the trampolines are never reused, so
/// this only weakens "no thread is still inside" to "no thread can start".
pub(super) static CODE_GRACE_GIVEN_UP: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Frees what `c.retired` holds once no thread can still use it.
pub(super) fn finish(mut c: MutexGuard<'static, Core>) {
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

pub(super) fn publish_subops(manager: &Ops, subops: &[Arc<Ops>], retired: &mut Vec<Retired>) {
    let list = Box::new(OpsList::new(subops.iter().map(Arc::as_ptr).collect()));
    // AcqRel: Release publishes the new list's contents to the manager's
    // callback (which loads it Acquire); Acquire takes the old one whole,
    // to retire after a grace period.
    let old = manager
        .subops_list
        .swap(Box::into_raw(list), Ordering::AcqRel);
    if !old.is_null() {
        retired.push(Retired::List(old));
    }
}

/// The manager filter of design §3.6 (exact): A = subops tracing all, S =
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
    pub(super) fn all_ops(&self) -> impl Iterator<Item = Arc<Ops>> + '_ {
        self.list
            .iter()
            .flat_map(|o| std::iter::once(o.clone()).chain(lock(&o.inner).subops.clone()))
    }

    pub(super) fn names(&self) -> Vec<FunctionName<'_>> {
        self.sites
            .iter()
            .map(|s| FunctionName {
                function: &s.function,
                symbol: &s.symbol,
                module: self.modules[s.module as usize].path.to_str().unwrap_or(""),
                library: s.library.as_deref().and_then(|l| l.to_str()),
            })
            .collect()
    }

    pub(super) fn resolve(&self, spec: &FilterSpec) -> Result<FilterPair, PatternError> {
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

    pub(super) fn publish_pair(&mut self, fs: &FilterSet, pair: FilterPair) {
        // AcqRel: as for the subops list: the new pair published whole to
        // the traced calls that load it, the old one taken to retire.
        let old = fs
            .current
            .swap(Box::into_raw(Box::new(pair)), Ordering::AcqRel);
        self.retired.push(Retired::Pair(old));
    }

    /// Recomputes a manager's pair from its subops; returns old ∪ new sets.
    pub(super) fn rebuild_manager(&mut self, m: &Arc<Ops>) -> SiteSet {
        let n = self.sites.len();
        let subs: Vec<Arc<Ops>> = lock(&m.inner).subops.clone();
        let pairs: Vec<&FilterPair> = subs.iter().map(|s| s.filter_pair()).collect();
        let new = manager_pair(&pairs);
        let touched = m.filter_pair().resolve(n).union(&new.resolve(n));
        if let Some(told) = m.on_subops_change {
            // (Before the sites are patched or set back: see the hook.)
            told(n);
        }
        self.publish_pair(&m.filter, new);
        touched
    }

    /// Publishes the hot path's address → id index of the loaded sites
    /// (old indexes are leaked: small, and a thread may hold one
    /// indefinitely).
    pub(super) fn publish_site_index(&self) {
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
        // Release: the index's vectors, written above, are seen whole by a
        // lookup that loads the pointer (Acquire).
        SITE_INDEX.store(Box::into_raw(idx), Ordering::Release);
    }

    pub(super) fn state(&self, id: SiteId) -> SiteState {
        let s = &self.sites[id as usize];
        let m = &self.modules[s.module as usize];
        SiteState {
            id,
            addr: s.addr,
            function: s.function.clone(),
            symbol: s.symbol.clone(),
            module: m.path.clone(),
            library: s.library.clone(),
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

    pub(super) fn ensure_tramps(&mut self, ops: &Arc<Ops>) -> Result<(), CoreError> {
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
            let Ok((cells, data)) = stub_tramps_in(ops, &mut inner, arena) else {
                continue;
            };
            // Each site's ENTRY: the alternative one where the ops gives
            // one for it.
            let entry_of = |id: SiteId| match ops.site_entry_alt {
                Some((alts, which)) => match which(id) {
                    k @ 1.. if k <= alts.len().min(MAX_ALT_ENTRIES) => cells.alt[k - 1],
                    _ => cells.entry,
                },
                None => cells.entry,
            };
            let sites: Vec<(usize, u32, usize)> =
                block.iter().map(|m| (m.1, m.2, entry_of(m.2))).collect();
            let Ok(at) = tramp::site_stubs(arena, &sites, cells.ret, data) else {
                continue;
            };
            for (i, m) in block.iter().enumerate() {
                inner.site_stubs.insert(m.2, at + i * tramp::SITE_STUB_LEN);
            }
        }
    }

    pub(super) fn ensure_pads(&mut self, ops: &Ops, target: usize) -> Result<(), CoreError> {
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

    pub(super) fn pad(&self, arena_base: usize, target: usize) -> Option<usize> {
        self.pads
            .iter()
            .find(|p| p.0 == arena_base && p.1 == target)
            .map(|p| p.2)
    }

    fn check_conflicts(&self, ops: &Ops) -> Result<(), CoreError> {
        if !ops.flags.intersects(DIRECT | IPMODIFY) {
            return Ok(());
        }
        for &id in self.sites_of(ops).ids() {
            for o in &self.list {
                if o.flags.intersects(DIRECT | IPMODIFY) && o.filter_pair().contains(id) {
                    return Err(CoreError::Busy {
                        function: self.sites[id as usize].function.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    pub(super) fn register_locked(&mut self, ops: &Arc<Ops>) -> Result<(), CoreError> {
        if ops.is_enabled() {
            return Err(CoreError::AlreadyRegistered);
        }
        self.check_conflicts(ops)?;
        self.ensure_tramps(ops)?;
        if ops.flags.contains(DIRECT) {
            self.ensure_pads(ops, ops.direct_target())?;
        }
        self.list.insert(0, ops.clone());
        self.publish_list();
        // AcqRel (both): the state word is read on traced calls (Acquire);
        // ENABLED is set after the list that holds the ops is published.
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

    pub(super) fn unregister_locked(&mut self, ops: &Arc<Ops>) -> Result<(), CoreError> {
        // Acquire/AcqRel: the state word's flags, as at registration.
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
        // Its chained callers share the slots: they only jump on now.
        for c in &inner.chained {
            self.retired
                .push(Retired::Code(c.2, c.2 + Core::chained_len(ops)));
        }
        drop(inner);
        self.shrink_sets(ops);
    }

    fn publish_list(&mut self) {
        let list = Box::new(OpsList::new(self.list.iter().map(Arc::as_ptr).collect()));
        // AcqRel: the new list published whole to the list function
        // (Acquire), the old one taken to retire after a grace period.
        let old = LIST.swap(Box::into_raw(list), Ordering::AcqRel);
        if !old.is_null() {
            self.retired.push(Retired::List(old));
        }
    }

    /// Recomputes `touched` sites from scratch, patches what changed in one
    /// batch, and publishes the global record in the safe order (design §3.4).
    /// On a patch failure nothing was written and the accounting is as
    /// before; the mismatching site is marked DISABLED.
    pub(super) fn update(&mut self, touched: &[SiteId]) -> Result<(), CoreError> {
        let r = self.update_sites(touched);
        // (Whether the sites changed or not: sets made for a change that
        // failed are called by none.)
        self.retire_unused_sets();
        r
    }

    /// For each of the `touched` sites, the ops on the list whose filters
    /// contain it, in the list's order; none for a disabled site or one of
    /// an unloaded object.
    fn matching(&self, touched: &[SiteId]) -> Vec<Vec<Arc<Ops>>> {
        (touched.iter())
            .map(|&id| {
                let s = &self.sites[id as usize];
                if s.flags & site_flags::DISABLED != 0 || self.modules[s.module as usize].unloaded {
                    return Vec::new();
                }
                (self.list.iter())
                    .filter(|o| o.filter_pair().contains(id))
                    .cloned()
                    .collect()
            })
            .collect()
    }

    fn update_sites(&mut self, touched: &[SiteId]) -> Result<(), CoreError> {
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
        let matching = self.matching(touched);
        self.ensure_chains(touched, &matching);
        self.ensure_sets(touched, &matching);
        let mut wants = Vec::with_capacity(touched.len());
        for (&id, ops) in touched.iter().zip(&matching) {
            let s = &self.sites[id as usize];
            if s.flags & DISABLED != 0 {
                continue;
            }
            let module = &self.modules[s.module as usize];
            let m: Vec<&Arc<Ops>> = ops.iter().collect();
            let mut flags = s.flags & STICKY;
            let count = m.len() as u16;
            if m.iter().any(|o| o.needs_regs()) {
                flags |= REGS;
            }
            if m.iter().any(|o| o.flags.contains(DIRECT)) {
                flags |= site_flags::DIRECT | MODIFIED;
            }
            if m.iter().any(|o| o.flags.contains(IPMODIFY)) {
                flags |= site_flags::IPMODIFY | MODIFIED;
            }
            let tramp = if m.len() == 1 && !m[0].flags.contains(DIRECT) {
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
            } else if m.len() == 1 && m[0].flags.contains(DIRECT) {
                flags |= DIRECT_EN;
                self.pad(module.arena.base, m[0].direct_target())
                    .expect("pad made at registration")
            } else if let Some(t) = tramp.or_else(|| self.chained(&m, module.arena.base)) {
                flags |= TRAMP | TRAMP_EN;
                t
            } else if flags & REGS != 0 {
                flags |= REGS_EN;
                module.shared_regs
            } else {
                self.set_caller(&m, module.arena.base)
                    .unwrap_or(module.shared_args)
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
            // Release (this and the two below): the shared caller loads the
            // record (Acquire) and calls what it names; the list it may
            // walk was published before.
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
pub(super) fn encode(site: usize, target: usize, flags: u16) -> [u8; 5] {
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
    let fused = ops.tramp_entry.is_none() && !ops.needs_regs();
    let code = if ops.tramp_stub != 0 {
        tramp::stub(arena, ops.tramp_stub, data)
    } else if fused {
        super::entry_asm::ops_caller(arena, data, None)
    } else {
        let entry = ops.tramp_entry.unwrap_or(dispatch::ops_entry);
        tramp::ftrace_caller(arena, ops.needs_regs(), entry, data)
    }
    .map_err(CoreError::Arena)?;
    inner.tramps.push((arena.base, code, slot));
    inner.tramp_len = if ops.tramp_stub != 0 {
        tramp::STUB_LEN
    } else if fused {
        super::entry_asm::ops_caller_len(false)
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
) -> Result<(StubCells, usize), CoreError> {
    let slot = tramp_slot_in(ops, inner, arena)? as *const OpsSlot as usize;
    if let Some(t) = inner.stub_tramps.iter().find(|t| t.base == arena.base) {
        return Ok((*t, slot));
    }
    let cell = |v: usize| arena.alloc_code(&(v as u64).to_le_bytes());
    let mut alt = [0; MAX_ALT_ENTRIES];
    let alts = ops.site_entry_alt.map_or(&[][..], |a| a.0);
    for (c, &e) in alt.iter_mut().zip(alts) {
        *c = cell(e).map_err(CoreError::Arena)?;
    }
    let cells = StubCells {
        base: arena.base,
        entry: cell(ops.site_entry).map_err(CoreError::Arena)?,
        ret: cell(ops.site_return).map_err(CoreError::Arena)?,
        alt,
    };
    inner.stub_tramps.push(cells);
    Ok((cells, slot))
}
