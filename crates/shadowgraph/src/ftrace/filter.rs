//! Function filters (SPEC §3.2): patterns over function names resolved to
//! sets of sites, and the `filter`/`notrace` pair an ops is tested against.
//!
//! Unlike the kernel's empty-hash encoding, "every function" is explicit:
//! removing the last filter pattern leaves an empty set (nothing traced),
//! and only `reset` brings back `All`. `notrace` always wins.

use std::fmt;

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

    #[inline]
    pub fn contains(&self, id: SiteId) -> bool {
        self.bits
            .get(id as usize / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    pub fn ids(&self) -> &[SiteId] {
        &self.ids
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn union(&self, other: &SiteSet) -> SiteSet {
        SiteSet::from_ids(self.ids.iter().chain(&other.ids).copied().collect())
    }

    pub fn intersection(&self, other: &SiteSet) -> SiteSet {
        SiteSet::from_ids(
            self.ids
                .iter()
                .copied()
                .filter(|&i| other.contains(i))
                .collect(),
        )
    }

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
    Set(SiteSet),
}

/// `contains(p, s) = (p.filter == All || s ∈ p.filter) && s ∉ p.notrace`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterPair {
    pub filter: Filter,
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

/// What a pattern is matched against.
pub struct SiteName<'a> {
    /// The function's name (simple demangled form).
    pub function: &'a str,
    /// Its symbol as the object names it.
    pub symbol: &'a str,
    pub module: &'a str,
}

/// A bad pattern, or one that matches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterError {
    BadPattern { pattern: String, why: String },
    NoMatch(String),
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterError::BadPattern { pattern, why } => write!(f, "bad pattern `{pattern}`: {why}"),
            FilterError::NoMatch(p) => write!(
                f,
                "pattern `{p}` matches no function (one in a library loaded later by dlopen is named with it: `{p}@LIB`)"
            ),
        }
    }
}

impl std::error::Error for FilterError {}

#[derive(Clone, Debug)]
enum Matcher {
    Glob(String),
    Regex(regex::Regex),
}

/// One filter pattern: `glob`, `/regex/`, either with `@module` (matched
/// against the object's file name, as a glob), and a leading `!` to remove
/// what it matches from what earlier patterns selected.
#[derive(Clone, Debug)]
pub struct Pattern {
    text: String,
    negate: bool,
    matcher: Matcher,
    module: Option<String>,
}

impl Pattern {
    pub fn parse(text: &str) -> Result<Pattern, FilterError> {
        let bad = |why: &str| FilterError::BadPattern {
            pattern: text.to_string(),
            why: why.to_string(),
        };
        let (negate, rest) = match text.strip_prefix('!') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (body, module) = if let Some(inner) = rest.strip_prefix('/') {
            // `/re/` or `/re/@module`
            let end = inner
                .rfind('/')
                .ok_or_else(|| bad("regex lacks its closing `/`"))?;
            let after = &inner[end + 1..];
            let module = match after {
                "" => None,
                m => Some(
                    m.strip_prefix('@')
                        .ok_or_else(|| bad("unexpected text after the regex"))?,
                ),
            };
            (&rest[..end + 2], module)
        } else {
            match rest.rsplit_once('@') {
                Some((b, m)) => (b, Some(m)),
                None => (rest, None),
            }
        };
        if body.is_empty() {
            return Err(bad("empty pattern"));
        }
        if module == Some("") {
            return Err(bad("empty module after `@`"));
        }
        let matcher = if let Some(re) = body.strip_prefix('/').and_then(|b| b.strip_suffix('/')) {
            // regex's messages span lines (a caret diagram): keep the last.
            Matcher::Regex(regex::Regex::new(re).map_err(|e| {
                let m = e.to_string();
                bad(m
                    .lines()
                    .last()
                    .unwrap_or("invalid regex")
                    .trim_start_matches("error: "))
            })?)
        } else {
            check_glob(body).map_err(|w| bad(&w))?;
            Matcher::Glob(body.to_string())
        };
        Ok(Pattern {
            text: text.to_string(),
            negate,
            matcher,
            module: module.map(str::to_string),
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, site: &SiteName<'_>) -> bool {
        if let Some(m) = &self.module {
            let file = site.module.rsplit('/').next().unwrap_or(site.module);
            if !glob_match(m.as_bytes(), file.as_bytes()) {
                return false;
            }
        }
        // The name views show, or the symbol itself (one overload of a C++
        // function, whose simple names are alike).
        let names = [site.function, site.symbol];
        let names = &names[..if site.symbol == site.function { 1 } else { 2 }];
        names.iter().any(|n| match &self.matcher {
            Matcher::Glob(g) => glob_match(g.as_bytes(), n.as_bytes()),
            Matcher::Regex(r) => r.is_match(n),
        })
    }

    /// Whether this pattern names a module none of `modules` is.
    fn module_absent<'a>(&self, mut modules: impl Iterator<Item = &'a str>) -> bool {
        match &self.module {
            None => false,
            Some(m) => !modules.any(|path| {
                let file = path.rsplit('/').next().unwrap_or(path);
                glob_match(m.as_bytes(), file.as_bytes())
            }),
        }
    }
}

/// Resolves a pattern list in order: positive patterns add, `!` patterns
/// remove. A pattern that matches nothing is an error unless it names a
/// module that is not loaded (it is kept and resolved when it appears).
pub fn resolve(patterns: &[Pattern], sites: &[SiteName<'_>]) -> Result<SiteSet, FilterError> {
    let mut selected = vec![false; sites.len()];
    for p in patterns {
        let mut any = false;
        for (i, s) in sites.iter().enumerate() {
            if p.matches(s) {
                selected[i] = !p.negate;
                any = true;
            }
        }
        if !any && !p.module_absent(sites.iter().map(|s| s.module)) {
            return Err(FilterError::NoMatch(p.text.clone()));
        }
    }
    Ok(SiteSet::from_ids(
        selected
            .iter()
            .enumerate()
            .filter(|(_, &s)| s)
            .map(|(i, _)| i as SiteId)
            .collect(),
    ))
}

fn check_glob(g: &str) -> Result<(), String> {
    let b = g.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' {
            let close = b[i + 1..].iter().skip(1).position(|&c| c == b']');
            if close.is_none() {
                return Err("unclosed `[`".into());
            }
            i += close.unwrap() + 2;
        }
        i += 1;
    }
    Ok(())
}

/// Shell-style glob: `*`, `?`, `[abc]`, `[a-z]`, `[!abc]`.
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let (mut star_p, mut star_i) = (usize::MAX, 0usize);
    while i < s.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    star_p = p;
                    star_i = i;
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, next)) = class_match(pat, p, s[i]) {
                        if ok {
                            p = next;
                            i += 1;
                            continue;
                        }
                    }
                }
                c if c == s[i] => {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        }
        if star_p == usize::MAX {
            return false;
        }
        star_i += 1;
        i = star_i;
        p = star_p + 1;
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pat[p] == '['`; returns
/// (matched, index after the class).
fn class_match(pat: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    let mut j = p + 1;
    let negate = matches!(pat.get(j), Some(b'!') | Some(b'^'));
    if negate {
        j += 1;
    }
    let start = j;
    let mut hit = false;
    while j < pat.len() && (pat[j] != b']' || j == start) {
        if j + 2 < pat.len() && pat[j + 1] == b'-' && pat[j + 2] != b']' {
            hit |= pat[j] <= c && c <= pat[j + 2];
            j += 3;
        } else {
            hit |= pat[j] == c;
            j += 1;
        }
    }
    (j < pat.len()).then_some((hit != negate, j + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[(&'static str, &'static str)]) -> Vec<SiteName<'static>> {
        v.iter()
            .map(|&(f, m)| SiteName {
                function: f,
                symbol: f,
                module: m,
            })
            .collect()
    }

    #[test]
    fn globs() {
        for (p, s, want) in [
            ("*sched*", "try_sched_x", true),
            ("*sched*", "sche", false),
            ("f?o", "foo", true),
            ("f?o", "fo", false),
            ("[a-c]x", "bx", true),
            ("[!a-c]x", "bx", false),
            ("[!a-c]x", "dx", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("*", "", true),
        ] {
            assert_eq!(glob_match(p.as_bytes(), s.as_bytes()), want, "{p} vs {s}");
        }
    }

    #[test]
    fn resolve_in_order_with_negation_regex_and_module() {
        let s = names(&[
            ("sched_a", "/x/libfoo.so"),
            ("sched_b", "/x/prog"),
            ("lock_a", "/x/prog"),
            ("clock_gettime", "/x/prog"),
        ]);
        let p = |v: &[&str]| {
            v.iter()
                .map(|t| Pattern::parse(t).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(resolve(&p(&["sched_*"]), &s).unwrap().ids(), &[0, 1]);
        assert_eq!(resolve(&p(&["sched_*", "!*_b"]), &s).unwrap().ids(), &[0]);
        assert_eq!(
            resolve(&p(&["/^(lock|sched)_a$/"]), &s).unwrap().ids(),
            &[0, 2]
        );
        assert_eq!(resolve(&p(&["sched_*@libfoo.so"]), &s).unwrap().ids(), &[0]);
        assert_eq!(resolve(&p(&["/_a$/@prog"]), &s).unwrap().ids(), &[2]);
        // Matching nothing: an error, unless the module is not loaded yet.
        assert_eq!(
            resolve(&p(&["nothing*"]), &s),
            Err(FilterError::NoMatch("nothing*".into()))
        );
        assert!(resolve(&p(&["x@libnotyet.so"]), &s).unwrap().is_empty());
        assert!(Pattern::parse("/unclosed").is_err());
        assert!(Pattern::parse("/a(/").is_err());
        assert!(Pattern::parse("[abc").is_err());
        assert!(Pattern::parse("f@").is_err());
    }

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
