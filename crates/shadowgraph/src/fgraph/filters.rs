//! Graph filters of one user (design §4.9): maximum depth, graph functions
//! (record only inside their subtrees), graph notrace (record nothing inside
//! theirs) and a thread filter, kept in the user's thread variable:
//! bits 0..15 the user's own depth, bit 16 IN_GRAPH, bit 17 NOTRACE, bits
//! 32..47 the own depth at which IN_GRAPH was set. Counted in the user's own
//! nesting, so an instance's output never depends on other users.

use super::triggers::Triggers;
pub use super::triggers::Verdict;
use super::{GraphEntry, GraphReturn, GraphUser};
use crate::ftrace::{current_tid, dispatch::site_id, FilterSet, ThreadFilter};
use std::sync::Arc;

const DEPTH_MASK: u64 = 0xffff;
/// Bit numbers and the shift, for record::fused's assembly, which keeps the
/// variable the same way.
pub(crate) const IN_GRAPH_BIT: u32 = 16;
pub(crate) const NOTRACE_BIT: u32 = 17;
pub(crate) const GRAPH_DEPTH_SHIFT: u32 = 32;
const IN_GRAPH: u64 = 1 << IN_GRAPH_BIT;
const NOTRACE: u64 = 1 << NOTRACE_BIT;

/// A user's graph filters; all optional.
#[derive(Default)]
pub struct GraphFilter {
    /// Record at most this many nested levels of the user's own frames (0: no limit).
    pub max_depth: u32,
    /// Record only inside calls of these functions.
    pub functions: Option<Arc<FilterSet>>,
    /// Record nothing inside calls of these functions.
    pub notrace: Option<Arc<FilterSet>>,
    /// Record only threads this admits.
    pub threads: Option<ThreadFilter>,
    /// Triggers (with the filter and notrace functions among them): when
    /// set, they decide in place of `functions`, `notrace` and
    /// `max_depth`, as uftrace's filters do (see [`Triggers`]).
    pub triggers: Option<Arc<Triggers>>,
}

fn contains(fs: &Option<Arc<FilterSet>>, id: Option<crate::ftrace::SiteId>) -> Option<bool> {
    let fs = fs.as_ref()?;
    Some(id.is_some_and(|id| fs.pair().contains(id)))
}

impl GraphFilter {
    /// Call at the start of the user's entry callback.
    pub fn entry(&self, ent: &GraphEntry, user: &GraphUser) -> Verdict {
        self.entry_with(ent, user, 8)
    }

    /// As [`GraphFilter::entry`]; `reserve`: the bytes a recorded call
    /// gets (8 or more; triggers keep their own words; 0: none, and
    /// `Record(null)`, and [`GraphFilter::ret`] gives null back).
    #[inline]
    pub fn entry_with(&self, ent: &GraphEntry, user: &GraphUser, reserve: usize) -> Verdict {
        if let Some(t) = &self.triggers {
            return t.entry(ent, user, reserve > 0, self.threads.as_ref());
        }
        let Some(var) = user.task_var() else {
            return Verdict::Reject;
        };
        let v = var.get();
        if v & NOTRACE != 0 {
            return Verdict::Reject;
        }
        let id = if self.notrace.is_some() || self.functions.is_some() {
            site_id(ent.func)
        } else {
            None
        };
        if contains(&self.notrace, id) == Some(true) {
            var.set(v | NOTRACE);
            // Named at once: the return that clears NOTRACE is then this
            // call's, however its callback is left.
            user.name_in_frame();
            return Verdict::Silent;
        }
        let own = v & DEPTH_MASK;
        let mut next = v;
        if let Some(inside) = contains(&self.functions, id) {
            if v & IN_GRAPH == 0 {
                if !inside {
                    return Verdict::Reject;
                }
                next = (next & !(DEPTH_MASK << GRAPH_DEPTH_SHIFT as u64))
                    | IN_GRAPH
                    | own << GRAPH_DEPTH_SHIFT as u64;
            }
        }
        if self.max_depth > 0 && own >= self.max_depth as u64 {
            return Verdict::Reject;
        }
        if self
            .threads
            .as_ref()
            .is_some_and(|t| !t.allows(current_tid()))
        {
            return Verdict::Reject;
        }
        let p = if reserve > 0 {
            let Some(p) = user.reserve(reserve) else {
                return Verdict::Reject;
            };
            p as *mut u64
        } else {
            std::ptr::null_mut()
        };
        var.set((next & !DEPTH_MASK) | (own + 1));
        // Named at once: a handler that leaves the rest of the callback by
        // siglongjmp reports the frame to `ret`, which puts the variable
        // back (named only when the callback returns, the variable would
        // stay a level deeper for good).
        user.name_in_frame();
        Verdict::Record(p)
    }

    /// The time filter's threshold (ticks) for the call returning now,
    /// where triggers say (0: kept whatever it lasted; `u64::MAX`: kept
    /// only if a call inside it was); `None` without triggers.
    #[inline]
    pub fn threshold(&self, user: &GraphUser) -> Option<u64> {
        self.triggers.as_ref().map(|t| t.threshold(user))
    }

    /// The bytes the tracer keeps in the frame of the call whose callback
    /// runs, where a trigger gives its function some
    /// ([`super::triggers::SiteTrigger::room`]): their address and length.
    #[inline]
    pub fn room(&self, user: &GraphUser) -> Option<(*mut u64, usize)> {
        self.triggers.as_ref()?.room(user)
    }

    /// The user's own nesting on this thread: after a `Record` entry, the
    /// recorded call's depth + 1; after `ret` returned `Some`, the depth of
    /// the call that returned. Independent of other users' frames.
    #[inline]
    pub fn own_depth(user: &GraphUser) -> u32 {
        user.task_var().map_or(0, |v| (v.get() & DEPTH_MASK) as u32)
    }

    /// Call at the start of the user's return callback: `Some` (the 8 bytes
    /// reserved at entry, null if none were) when the return is to be
    /// recorded.
    #[inline]
    pub fn ret(&self, _ret: &GraphReturn, user: &GraphUser) -> Option<*mut u64> {
        if let Some(t) = &self.triggers {
            return t.ret(user);
        }
        let var = user.task_var()?;
        let mut v = var.get();
        // While NOTRACE is set every entry was refused, so this return is
        // the notrace function's own; any other accepted call was recorded.
        if v & NOTRACE != 0 {
            var.set(v & !NOTRACE);
            return None;
        }
        let p = user.retrieve().map_or(std::ptr::null_mut(), |(p, _)| p);
        let own = v & DEPTH_MASK;
        if v & IN_GRAPH != 0 && own > 0 && (v >> GRAPH_DEPTH_SHIFT as u64) & DEPTH_MASK == own - 1 {
            v &= !IN_GRAPH;
        }
        var.set((v & !DEPTH_MASK) | own.saturating_sub(1));
        Some(p as *mut u64)
    }
}
