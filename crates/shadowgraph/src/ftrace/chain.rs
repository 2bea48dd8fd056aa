//! Chained callers (design §3.7): a site matched by one ops with a
//! trampoline and one DIRECT ops calls the first's chained caller
//! (`tramp::ftrace_chain`), which runs its callback as its trampoline
//! would and then jumps to the direct target. Without it such a site takes
//! the regs caller and the list function, which cost about three times
//! the two alone.
//!
//! A chained caller shares its ops' data slot in its arena: clearing the
//! slot (the ops leaving) leaves it jumping to the target only, until the
//! site is patched away. It is kept with the ops, as its trampolines are,
//! for the ops' return.

use super::core::Core;
use super::dispatch;
use super::filter::SiteId;
use super::ops::{lock, Ops, DIRECT};
use super::site_flags::DISABLED;
use crate::tramp;
use std::sync::Arc;

/// The ops a chained caller serves among those matching a site, and the
/// direct target it goes on to: exactly two ops, one DIRECT, the other
/// with a trampoline of the args variant (no site stubs, no registers to
/// write back).
fn chainable<'a>(m: &[&'a Arc<Ops>]) -> Option<(&'a Arc<Ops>, usize)> {
    let [a, b] = m else {
        return None;
    };
    let (o, d) = match (a.flags.contains(DIRECT), b.flags.contains(DIRECT)) {
        (false, true) => (*a, *b),
        (true, false) => (*b, *a),
        _ => return None,
    };
    let plain = o.wants_tramp() && !o.needs_regs() && o.tramp_stub == 0 && o.site_entry == 0;
    plain.then(|| (o, d.direct_target()))
}

/// The chained caller in the arena at `arena_base` for a site the ops
/// `m` match, if they call for one and it was made.
pub(super) fn chained(m: &[&Arc<Ops>], arena_base: usize) -> Option<usize> {
    let (o, target) = chainable(m)?;
    let inner = lock(&o.inner);
    let c = inner
        .chained
        .iter()
        .find(|c| c.0 == arena_base && c.1 == target)?;
    Some(c.2)
}

impl Core {
    /// Makes the chained callers the `touched` sites call for (best
    /// effort: a site without one takes the regs caller and the list
    /// function, as before).
    pub(super) fn ensure_chains(&mut self, touched: &[SiteId]) {
        if !self.list.iter().any(|o| o.flags.contains(DIRECT)) {
            return;
        }
        let mut want: Vec<(Arc<Ops>, usize, usize)> = Vec::new();
        for &id in touched {
            let s = &self.sites[id as usize];
            let module = &self.modules[s.module as usize];
            if s.flags & DISABLED != 0 || module.unloaded {
                continue;
            }
            let m: Vec<&Arc<Ops>> = (self.list.iter())
                .filter(|o| o.filter_pair().contains(id))
                .collect();
            if let Some((o, target)) = chainable(&m) {
                let key = (Arc::as_ptr(o), s.module as usize, target);
                if !want.iter().any(|w| (Arc::as_ptr(&w.0), w.1, w.2) == key) {
                    want.push((o.clone(), s.module as usize, target));
                }
            }
        }
        for (o, mi, target) in want {
            let arena = self.modules[mi].arena;
            let mut inner = lock(&o.inner);
            if (inner.chained.iter()).any(|c| c.0 == arena.base && c.1 == target) {
                continue;
            }
            // Its trampoline's slot there (made when it registered).
            let Some(slot) = inner.tramps.iter().find(|t| t.0 == arena.base).map(|t| t.2) else {
                continue;
            };
            let entry = o.tramp_entry.unwrap_or(dispatch::ops_entry_args);
            let data = slot as *const _ as usize;
            if let Ok(code) = tramp::ftrace_chain(arena, entry, data, target) {
                inner.chained.push((arena.base, target, code));
            }
        }
    }
}
