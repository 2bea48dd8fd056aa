//! A filter set: the filter and notrace patterns any number of ops (and
//! graph users) share, and the pair of site sets they resolve to, which
//! the hot path reads (replaced whole, freed after a grace period).

use super::filter::{Filter, FilterPair, Pattern, PatternError, SiteSet};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

/// A filter shared by any number of ops: a change reaches all of them.
pub struct FilterSet {
    pub(super) current: AtomicPtr<FilterPair>,
    pub(super) spec: Mutex<FilterSpec>,
}

#[derive(Clone)]
pub(super) enum FilterSpec {
    Patterns {
        filter: Option<Vec<Pattern>>,
        notrace: Vec<Pattern>,
        /// Selects nothing for now, its patterns kept (`set_paused`).
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

    pub(super) fn computed() -> Arc<FilterSet> {
        let fs = FilterSet::all();
        // Not yet shared: no other holder of the lock.
        *fs.spec.lock().unwrap_or_else(|e| e.into_inner()) = FilterSpec::Computed;
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
    pub(crate) fn pair(&self) -> &FilterPair {
        // SAFETY: pairs are freed only after a grace period following their
        // replacement; callers on the hot path are inside the bracket and
        // control-plane callers hold an Arc of this set.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }
}

pub(super) fn parse_all(p: &[&str]) -> Result<Vec<Pattern>, PatternError> {
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
