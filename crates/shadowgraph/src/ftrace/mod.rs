//! The ftrace core (design §3): ops with filters, per-site accounting that is
//! recomputed (never accumulated), target selection, the shared caller with
//! its list function, per-ops trampolines, direct calls with gap-free
//! retargeting, subops, the recursion guard and grace periods.
//!
//! One core lock serialises registration, filter changes and patching;
//! everything a traced call reads is published with single atomic stores
//! and freed only after a grace period.
//!
//! The parts, lowest first: `local` (the thread's core state),
//! [`recursion`], [`quiesce`] (brackets and grace periods), [`ops`],
//! [`filter`] and [`filterset`], [`dispatch`] (what runs inside a traced
//! call) and `entry_asm` (an ops' own trampoline with its common case
//! fused in, in assembly), `core` (the accounting engine); this module is the API.

mod chain;
mod core;
pub mod dispatch;
mod entry_asm;
mod error;
pub mod filter;
pub mod filterset;
mod invariants;
pub(crate) mod local;
pub mod ops;
pub mod quiesce;
pub mod recursion;
mod sets;
pub mod site_flags;

pub use self::core::{manager_pair, SiteState};
pub use self::invariants::check_invariants;
pub use dispatch::call_subops;
pub use error::CoreError;
pub use filter::{Filter, FilterPair, FunctionName, Pattern, PatternError, SiteId, SiteSet};
pub use filterset::{FilterEdit, FilterSet};
pub use ops::{
    Ops, OpsFlags, OpsFunc, OpsSlot, Regs, ThreadFilter, DIRECT, DYNAMIC, IPMODIFY, NO_TRAMP,
    RECURSION, SAVE_REGS, STUB,
};
pub use recursion::{
    current_tid, recursion_drops, recursion_drops_all, reset_tid_cache, try_lock, unlock, Group,
};

use self::core::{
    finish, lock_core, publish_subops, Core, ModuleRec, Retired, SiteRec, CODE_GRACE_GIVEN_UP,
};
use crate::arena::Arena;
use crate::process::{self, Module};
use crate::{patch, tramp};
use filterset::{parse_all, FilterSpec};
use ops::{lock, ENABLED, SUBOP};
pub(crate) use ops::{AltEntry, MAX_ALT_ENTRIES};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

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

impl FilterSet {
    /// Only the functions the patterns select (resolved when first used by a
    /// registered ops and at every change of the loaded objects).
    pub fn with_patterns(
        filter: &[&str],
        notrace: &[&str],
    ) -> Result<Arc<FilterSet>, PatternError> {
        Self::resolved(Some(parse_all(filter)?), parse_all(notrace)?)
    }

    /// Every function but those the patterns select (resolved again, as
    /// [`FilterSet::with_patterns`], when objects come and go).
    pub fn all_except(notrace: &[&str]) -> Result<Arc<FilterSet>, PatternError> {
        Self::resolved(None, parse_all(notrace)?)
    }

    fn resolved(
        filter: Option<Vec<Pattern>>,
        notrace: Vec<Pattern>,
    ) -> Result<Arc<FilterSet>, PatternError> {
        let fs = FilterSet::all();
        *lock(&fs.spec) = FilterSpec::Patterns {
            filter,
            notrace,
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
}

impl Ops {
    /// A direct-call ops for the sites of `filter` (a non-empty set);
    /// register it with [`register_direct`].
    pub fn new_direct(filter: Arc<FilterSet>) -> Arc<Ops> {
        let mut o = Ops::new(dispatch::direct_helper, SAVE_REGS, filter);
        Arc::get_mut(&mut o).expect("fresh").flags |= DIRECT;
        o
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
                library: s.library,
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

/// Calls `manager`'s [`Ops::on_subops_change`] hook now, with the core's
/// lock held, as a change of its subops would.
pub(crate) fn tell_manager(manager: &Arc<Ops>) {
    let c = lock_core();
    if let Some(told) = manager.on_subops_change {
        told(c.sites.len());
    }
    finish(c);
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

/// The objects under the core (path, bias; once each), their library
/// calls' thunks left out.
pub fn objects() -> Vec<(std::path::PathBuf, usize)> {
    let c = lock_core();
    let mut out: Vec<(std::path::PathBuf, usize)> = Vec::new();
    for m in c.modules.iter().filter(|m| !m.unloaded) {
        let thunks = m
            .path
            .to_str()
            .is_some_and(|p| p.ends_with(shadowgraph_data::pattern::PLT_SUFFIX));
        if !thunks && !out.iter().any(|o| o.1 == m.bias) {
            out.push((m.path.clone(), m.bias));
        }
    }
    out
}

/// Whether the object loaded at `bias` from `path` is under the core.
pub fn has_module(path: &std::path::Path, bias: usize) -> bool {
    lock_core()
        .modules
        .iter()
        .any(|m| !m.unloaded && m.bias == bias && m.path == path)
}

/// Whether a module named `path` is under the core, at any bias (a
/// library calls' module has an arena address of its own for one).
pub fn has_module_path(path: &std::path::Path) -> bool {
    lock_core()
        .modules
        .iter()
        .any(|m| !m.unloaded && m.path == path)
}

/// Takes the object loaded at `bias` out of the core before it is unloaded
/// (dlclose): its sites go back to NOP5 and stay DISABLED; their records
/// (names, counts by id) remain for reports. Ops keep their filters.
pub fn remove_module(bias: usize) -> Result<(), CoreError> {
    let mut c = lock_core();
    // The object's modules: its patchable entries', and its patched
    // prologues' (process::prologue), which share its bias.
    let mods: Vec<usize> = (0..c.modules.len())
        .filter(|&i| !c.modules[i].unloaded && c.modules[i].bias == bias)
        .collect();
    if mods.is_empty() {
        return Ok(());
    }
    let ids: Vec<SiteId> = (0..c.sites.len() as SiteId)
        .filter(|&i| mods.contains(&(c.sites[i as usize].module as usize)))
        .collect();
    for &mi in &mods {
        c.modules[mi].unloaded = true;
    }
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

/// The state of the site of `function` (the first of a loaded object).
pub fn site_by_name(function: &str) -> Option<SiteState> {
    let c = lock_core();
    let i = c
        .sites
        .iter()
        .position(|s| s.function == function && !c.modules[s.module as usize].unloaded)?;
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
    if ops.flags.contains(DIRECT) {
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
    if !ops.flags.contains(DIRECT) {
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
    // Release (both): the direct helper loads the target (Acquire) on
    // traced calls; it is in place before any site can call the ops.
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
    if !ops.flags.contains(DIRECT) || !ops.is_enabled() {
        return Err(CoreError::NotRegistered);
    }
    if target == 0 {
        return Err(CoreError::Invalid("null direct target".into()));
    }
    extern "C" fn nothing(_: usize, _: usize, _: &Ops, _: &mut Regs) {}
    let stub = Ops::new(nothing, STUB, ops.filter.clone());
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
    // AcqRel: the state word is read on traced calls (Acquire); the
    // flags follow the subops list that holds it.
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
        // AcqRel: as at registration.
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
    // AcqRel: as at registration.
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
