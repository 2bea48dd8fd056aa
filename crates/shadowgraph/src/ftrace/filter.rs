//! Function filters (design §3.2): patterns over function names resolved to
//! sets of sites, and the `filter`/`notrace` pair an ops is tested against.
//!
//! Unlike the kernel's empty-hash encoding, "every function" is explicit:
//! removing the last filter pattern leaves an empty set (nothing traced),
//! and only `reset` brings back `All`. `notrace` always wins.

pub use shadowgraph_data::pattern::{self, FunctionName, Pattern, PatternError};

/// Index of a site in the core's site table.
pub type SiteId = u32;

/// A set of sites: sorted ids for iteration, a dense bitmap for the O(1)
/// test on the hot path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteSet {
    ids: Vec<SiteId>,
    bits: Vec<u64>,
}

impl SiteSet {
    /// The set of `ids` (in any order, duplicates allowed).
    pub fn from_ids(mut ids: Vec<SiteId>) -> SiteSet {
        ids.sort_unstable();
        ids.dedup();
        let words = ids.last().map_or(0, |&m| m as usize / 64 + 1);
        let mut bits = vec![0u64; words];
        for &i in &ids {
            bits[i as usize / 64] |= 1 << (i % 64);
        }
        SiteSet { ids, bits }
    }

    /// Whether `id` is in the set.
    #[inline]
    pub fn contains(&self, id: SiteId) -> bool {
        self.bits
            .get(id as usize / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    /// The ids, sorted.
    pub fn ids(&self) -> &[SiteId] {
        &self.ids
    }

    /// How many sites.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether it holds no site.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Sites in either.
    pub fn union(&self, other: &SiteSet) -> SiteSet {
        SiteSet::from_ids(self.ids.iter().chain(&other.ids).copied().collect())
    }

    /// Sites in both.
    pub fn intersection(&self, other: &SiteSet) -> SiteSet {
        SiteSet::from_ids(
            self.ids
                .iter()
                .copied()
                .filter(|&i| other.contains(i))
                .collect(),
        )
    }

    /// Sites in `self` and not in `other`.
    pub fn difference(&self, other: &SiteSet) -> SiteSet {
        SiteSet::from_ids(
            self.ids
                .iter()
                .copied()
                .filter(|&i| !other.contains(i))
                .collect(),
        )
    }
}

/// Which sites an ops wants before `notrace` is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Filter {
    /// Every site (also those of objects loaded later).
    All,
    /// These sites.
    Set(SiteSet),
}

/// `contains(p, s) = (p.filter == All || s ∈ p.filter) && s ∉ p.notrace`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterPair {
    /// The sites wanted.
    pub filter: Filter,
    /// The sites never wanted.
    pub notrace: SiteSet,
}

impl Default for FilterPair {
    fn default() -> Self {
        FilterPair {
            filter: Filter::All,
            notrace: SiteSet::default(),
        }
    }
}

impl FilterPair {
    /// Whether the pair selects site `id`.
    #[inline]
    pub fn contains(&self, id: SiteId) -> bool {
        (match &self.filter {
            Filter::All => true,
            Filter::Set(s) => s.contains(id),
        }) && !self.notrace.contains(id)
    }

    /// The sites this pair selects among `n` sites.
    pub fn resolve(&self, n: usize) -> SiteSet {
        match &self.filter {
            Filter::All => {
                SiteSet::from_ids((0..n as SiteId).filter(|&i| self.contains(i)).collect())
            }
            Filter::Set(s) => s.difference(&self.notrace),
        }
    }
}

/// The sites `patterns` select among `sites` (ids are indices), applied
/// in order (see [`pattern::select`]).
pub fn resolve(patterns: &[Pattern], sites: &[FunctionName<'_>]) -> Result<SiteSet, PatternError> {
    Ok(SiteSet::from_ids(
        pattern::select(patterns, sites)?
            .into_iter()
            .map(|i| i as SiteId)
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_semantics_notrace_wins_and_empty_is_nothing() {
        let all = FilterPair::default();
        assert!(all.contains(5));
        let p = FilterPair {
            filter: Filter::Set(SiteSet::from_ids(vec![1, 2, 3])),
            notrace: SiteSet::from_ids(vec![2]),
        };
        assert!(p.contains(1) && !p.contains(2) && !p.contains(4));
        assert_eq!(p.resolve(10).ids(), &[1, 3]);
        let empty = FilterPair {
            filter: Filter::Set(SiteSet::default()),
            notrace: SiteSet::default(),
        };
        assert!(!empty.contains(0));
        let a = SiteSet::from_ids(vec![1, 2, 70]);
        let b = SiteSet::from_ids(vec![2, 3]);
        assert_eq!(a.union(&b).ids(), &[1, 2, 3, 70]);
        assert_eq!(a.intersection(&b).ids(), &[2]);
        assert_eq!(a.difference(&b).ids(), &[1, 70]);
    }
}
