//! Set callers: a site that several ops with trampolines of the args
//! variant match calls a caller of that set of ops, which calls each of
//! them in the core list's order — no site lookup, no filter test per ops,
//! as the ops' own trampoline does for one. Without it such a site takes
//! the shared caller and the list function, which looks the site up and
//! tests every ops of the core list against it.
//!
//! Each set's callers (one per arena) run the list in the set's slot,
//! loaded inside the bracket:
//!
//! - an ops leaving is taken out of the lists that hold it before the
//!   sites change (`Core::shrink_sets`), so no callback of it runs once it has left
//!   and the others miss no call;
//! - a set no site calls any more is emptied (its slot null: a thread that
//!   had entered one of its callers returns at once) and retired with its
//!   list, after the grace period.
//!
//! As with the ops' own trampolines, a site whose ops change filters is
//! served by its old set until the update patches it.

use super::core::{Core, Retired, SetRec};
use super::filter::SiteId;
use super::ops::{Ops, OpsList};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

/// Whether the ops `m` matching a site are served by a set caller: two or
/// more, each one that would have a trampoline of the args variant of its
/// own (no registers, no site stubs, no entry of its own).
fn settable(m: &[&Arc<Ops>]) -> bool {
    m.len() >= 2 && m.iter().all(|o| o.plain_tramp() && o.tramp_entry.is_none())
}

fn key(m: &[&Arc<Ops>]) -> Vec<usize> {
    let mut k: Vec<usize> = m.iter().map(|o| Arc::as_ptr(o) as usize).collect();
    k.sort_unstable();
    k
}

impl Core {
    /// The caller in the arena at `arena_base` of the set the ops `m`
    /// form, if they form one and it was made.
    pub(super) fn set_caller(&self, m: &[&Arc<Ops>], arena_base: usize) -> Option<usize> {
        if !settable(m) {
            return None;
        }
        let k = key(m);
        let set = self.sets.iter().find(|s| s.key == k)?;
        set.code.iter().find(|c| c.0 == arena_base).map(|c| c.1)
    }

    /// Makes the set callers the touched sites call for (best effort: a
    /// site without one takes the shared caller, as before); `matching`:
    /// each touched site and its ops (`Core::matching`).
    pub(super) fn ensure_sets(&mut self, touched: &[SiteId], matching: &[Vec<Arc<Ops>>]) {
        if self.list.len() < 2 {
            return;
        }
        let mut want: Vec<(Vec<usize>, Vec<*const Ops>, usize)> = Vec::new();
        for (&id, ops) in touched.iter().zip(matching) {
            let m: Vec<&Arc<Ops>> = ops.iter().collect();
            if !settable(&m) {
                continue;
            }
            let k = key(&m);
            let mi = self.sites[id as usize].module as usize;
            if !want.iter().any(|w| w.0 == k && w.2 == mi) {
                want.push((k, m.iter().map(|o| Arc::as_ptr(o)).collect(), mi));
            }
        }
        for (k, ops, mi) in want {
            let arena = self.modules[mi].arena;
            let i = match self.sets.iter().position(|s| s.key == k) {
                Some(i) => i,
                None => {
                    let list = Box::into_raw(Box::new(OpsList::new(ops)));
                    let slot: &'static AtomicPtr<OpsList> =
                        Box::leak(Box::new(AtomicPtr::new(list)));
                    self.sets.push(SetRec {
                        key: k,
                        slot,
                        code: Vec::new(),
                    });
                    self.sets.len() - 1
                }
            };
            let set = &mut self.sets[i];
            if set.code.iter().any(|c| c.0 == arena.base) {
                continue;
            }
            let data = set.slot as *const AtomicPtr<OpsList> as usize;
            if let Ok(code) = super::entry_asm::set_caller(arena, data) {
                set.code.push((arena.base, code));
            }
        }
    }

    /// Before the sites change for `ops` leaving: the lists that hold it
    /// are published again without it.
    pub(super) fn shrink_sets(&mut self, ops: &Ops) {
        let me = ops as *const Ops;
        for set in &self.sets {
            // Acquire: the list as published (Release, below or at its
            // making under the core lock).
            let cur = set.slot.load(Ordering::Acquire);
            // SAFETY: a published list stays valid until it is retired,
            // under the core lock, which we hold.
            if cur.is_null() || !unsafe { &(*cur).ops }.contains(&me) {
                continue;
            }
            // SAFETY: as above.
            let rest: Vec<*const Ops> = unsafe { &(*cur).ops }
                .iter()
                .copied()
                .filter(|&o| o != me)
                .collect();
            let new = Box::into_raw(Box::new(OpsList::new(rest)));
            // AcqRel: the new list published whole to the set's callers
            // (Acquire in their fused loop and in set_entry), the old one
            // taken to retire.
            let old = set.slot.swap(new, Ordering::AcqRel);
            self.retired.push(Retired::List(old));
        }
    }

    /// After the sites were patched: the sets no site calls are emptied
    /// and retired (their callers after the code grace period).
    pub(super) fn retire_unused_sets(&mut self) {
        if self.sets.is_empty() {
            return;
        }
        let called: std::collections::HashSet<usize> =
            self.sites.iter().map(|s| s.cur_target).collect();
        let len = super::entry_asm::set_caller_len();
        let mut i = 0;
        while i < self.sets.len() {
            if self.sets[i].code.iter().any(|c| called.contains(&c.1)) {
                i += 1;
                continue;
            }
            let set = self.sets.swap_remove(i);
            // AcqRel: as in shrink_sets.
            let old = set.slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !old.is_null() {
                self.retired.push(Retired::List(old));
            }
            for (_, code) in set.code {
                self.retired.push(Retired::Code(code, code + len));
            }
        }
    }
}
