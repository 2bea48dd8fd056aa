//! Function patterns, as `-F`, `-N` and the views' filters take them:
//! a glob (`*`, `?`, `[...]`), a regex (one with any of `^ $ . + | ( ) {
//! } \`, as uftrace's patterns are: `^ns::`, `.*bar3`) or a `/regex/`,
//! each followed by
//! `@module` (a glob over the start of the object's file name, as uftrace
//! matches it: `@libc` is `libc.so.6`; `@PLT`: the library calls), and a
//! leading `!` to take away what it matches from what earlier patterns
//! selected.

use std::fmt;

/// What a pattern is matched against.
pub struct FunctionName<'a> {
    /// The function's name (simple demangled form).
    pub function: &'a str,
    /// Its symbol as the object names it.
    pub symbol: &'a str,
    /// The path of the object holding it (for a library call: the
    /// caller's, with `@plt` after it).
    pub module: &'a str,
    /// For a library call: the path of the object that defines the
    /// function called, when known.
    pub library: Option<&'a str>,
}

/// The module path suffix of library calls (the thunks of an object's
/// PLT slots), which `@PLT` selects.
pub const PLT_SUFFIX: &str = "@plt";

impl FunctionName<'_> {
    /// Whether `@module` names the object it is in: a glob matched against
    /// the start of the file name of its object (or, for a library call,
    /// of the library defining it); `PLT` (any case) names every library
    /// call.
    fn in_module(&self, module: &str) -> bool {
        if module.eq_ignore_ascii_case("plt") {
            return self.module.ends_with(PLT_SUFFIX);
        }
        std::iter::once(self.module)
            .chain(self.library)
            .any(|path| module_matches(module, path))
    }
}

/// Whether the glob `module` matches the start of `path`'s file name.
fn module_matches(module: &str, path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    let mut prefix = String::with_capacity(module.len() + 1);
    prefix.push_str(module);
    prefix.push('*');
    glob_match(prefix.as_bytes(), file.as_bytes())
}

/// A bad pattern, or one that matches nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// A pattern that cannot be parsed: which, and why.
    BadPattern {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        why: String,
    },
    /// A pattern that matches no function.
    NoMatch(String),
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatternError::BadPattern { pattern, why } => write!(f, "bad pattern `{pattern}`: {why}"),
            PatternError::NoMatch(p) => write!(
                f,
                "pattern `{p}` matches no function (one in a library loaded later by dlopen is named with it: `{p}@LIB`)"
            ),
        }
    }
}

impl std::error::Error for PatternError {}

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
    /// Parses `text`: `[!]glob` or `[!]/regex/`, optionally `@module`.
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        let bad = |why: &str| PatternError::BadPattern {
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
        } else if let Some(re) = match match_type() {
            MatchType::Auto => body.contains(REGEX_ONLY),
            MatchType::Regex => body.contains(REGEX_ALL),
            MatchType::Glob => false,
        }
        .then(|| regex::Regex::new(body).ok())
        .flatten()
        {
            // As uftrace's patterns (regexes unless they have none of
            // these); one that does not compile is a glob, as uftrace
            // takes it as a plain name.
            Matcher::Regex(re)
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

    /// The pattern's function part as a regular expression (uftrace's
    /// `pattern_type: regex`, which its recordings' specs are written in):
    /// a regex as it is, a glob converted (anchored), a plain name as it is.
    pub fn regex_source(&self) -> String {
        match &self.matcher {
            Matcher::Regex(re) => re.as_str().to_string(),
            Matcher::Glob(g) if !g.contains(|c: char| "*?[".contains(c)) => g.clone(),
            Matcher::Glob(g) => {
                let mut re = String::from("^");
                for c in g.chars() {
                    match c {
                        '*' => re.push_str(".*"),
                        '?' => re.push('.'),
                        '[' | ']' => re.push(c),
                        c if ".^$+(){}|\\".contains(c) => {
                            re.push('\\');
                            re.push(c);
                        }
                        c => re.push(c),
                    }
                }
                re.push('$');
                re
            }
        }
    }

    /// Whether it names one function by its name (no wildcard, no regex,
    /// no `!`): uftrace's exact match.
    pub fn is_exact(&self) -> bool {
        !self.negate
            && matches!(&self.matcher, Matcher::Glob(g) if !g.contains(|c: char| "*?[".contains(c)))
    }

    /// The pattern as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The module it names (`@module`), if any.
    pub fn module(&self) -> Option<&str> {
        self.module.as_deref()
    }

    /// Whether it names a module (`@module`) that the object at `path` is.
    pub fn names_module_of(&self, path: &str) -> bool {
        self.module
            .as_deref()
            .is_some_and(|m| module_matches(m, path))
    }

    /// Whether it is a `!` pattern.
    pub fn negated(&self) -> bool {
        self.negate
    }

    /// Whether it matches `site`: its name or symbol, and its module if the
    /// pattern names one (a `!` pattern matches what it would remove).
    pub fn matches(&self, site: &FunctionName<'_>) -> bool {
        if let Some(m) = &self.module {
            if !site.in_module(m) {
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

    /// Whether this pattern names a module none of `names` is in.
    fn module_absent(&self, names: &[FunctionName<'_>]) -> bool {
        match &self.module {
            None => false,
            Some(m) => !names.iter().any(|n| n.in_module(m)),
        }
    }
}

/// The patterns of `patterns` that match none of `names` and do not name
/// a module that is absent from them (one loaded later may hold it): what
/// [`select`] refuses.
pub fn unmatched<'p>(patterns: &'p [Pattern], names: &[FunctionName<'_>]) -> Vec<&'p Pattern> {
    patterns
        .iter()
        .filter(|p| !names.iter().any(|s| p.matches(s)) && !p.module_absent(names))
        .collect()
}

/// Selects among `names`, applying the patterns in order: positive
/// patterns add, `!` patterns remove. Returns the indices selected, in
/// ascending order. A pattern that matches nothing is an error unless it
/// names a module none of `names` is in (it may be loaded later).
pub fn select(
    patterns: &[Pattern],
    names: &[FunctionName<'_>],
) -> Result<Vec<usize>, PatternError> {
    let mut selected = vec![false; names.len()];
    for p in patterns {
        let mut any = false;
        for (i, s) in names.iter().enumerate() {
            if p.matches(s) {
                selected[i] = !p.negate;
                any = true;
            }
        }
        if !any && !p.module_absent(names) {
            return Err(PatternError::NoMatch(p.text.clone()));
        }
    }
    Ok(selected
        .iter()
        .enumerate()
        .filter(|(_, &s)| s)
        .map(|(i, _)| i)
        .collect())
}

/// Characters that make a pattern a regex (uftrace's, less the glob's
/// own `*`, `?` and `[`).
const REGEX_ONLY: &[char] = &['^', '$', '.', '+', '|', '(', ')', '{', '}', '\\'];
/// uftrace's regex characters, the glob's among them (`--match=regex`).
const REGEX_ALL: &[char] = &[
    '^', '$', '.', '+', '|', '(', ')', '{', '}', '\\', '*', '?', '[', ']',
];

/// How a pattern's text is taken (uftrace's `--match`); `/regex/` is a
/// regex in every way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatchType {
    /// A regex where it has regex characters other than a glob's (any of
    /// `^ $ . + | ( ) { } \`), else a glob: `foo*` and `^foo` as meant.
    #[default]
    Auto,
    /// uftrace's default: a regex where it has any regex character, `*`,
    /// `?` and `[` among them (matching anywhere in the name, as uftrace's
    /// regexes do), else the name itself.
    Regex,
    /// Always a glob.
    Glob,
}

impl std::str::FromStr for MatchType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "regex" => Ok(MatchType::Regex),
            "glob" => Ok(MatchType::Glob),
            "auto" => Ok(MatchType::Auto),
            _ => Err(format!("`{s}`: regex or glob")),
        }
    }
}

/// The process's [`MatchType`] (0 Auto, 1 Regex, 2 Glob).
static MATCH: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Takes pattern texts parsed from now on as `m` says (`--match`).
pub fn set_match_type(m: MatchType) {
    // Relaxed: set once, before the patterns are parsed, by the thread
    // that parses them (or one that started it).
    MATCH.store(m as u8, std::sync::atomic::Ordering::Relaxed);
}

/// The [`MatchType`] patterns are parsed with.
pub fn match_type() -> MatchType {
    // Relaxed: see set_match_type.
    match MATCH.load(std::sync::atomic::Ordering::Relaxed) {
        1 => MatchType::Regex,
        2 => MatchType::Glob,
        _ => MatchType::Auto,
    }
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

    fn names(v: &[(&'static str, &'static str)]) -> Vec<FunctionName<'static>> {
        v.iter()
            .map(|&(f, m)| FunctionName {
                function: f,
                symbol: f,
                module: m,
                library: None,
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
        assert_eq!(select(&p(&["sched_*"]), &s).unwrap(), &[0, 1]);
        assert_eq!(select(&p(&["sched_*", "!*_b"]), &s).unwrap(), &[0]);
        assert_eq!(select(&p(&["/^(lock|sched)_a$/"]), &s).unwrap(), &[0, 2]);
        assert_eq!(select(&p(&["sched_*@libfoo.so"]), &s).unwrap(), &[0]);
        assert_eq!(select(&p(&["/_a$/@prog"]), &s).unwrap(), &[2]);
        // Matching nothing: an error, unless the module is not loaded yet.
        assert_eq!(
            select(&p(&["nothing*"]), &s),
            Err(PatternError::NoMatch("nothing*".into()))
        );
        assert!(select(&p(&["x@libnotyet.so"]), &s).unwrap().is_empty());
        assert!(Pattern::parse("/unclosed").is_err());
        assert!(Pattern::parse("/a(/").is_err());
        assert!(Pattern::parse("[abc").is_err());
        assert!(Pattern::parse("f@").is_err());
    }

    #[test]
    fn modules_by_the_start_of_their_name_and_library_calls() {
        let mut s = names(&[
            ("work", "/x/prog"),
            ("malloc", "/x/prog@plt"),
            ("deflate", "/x/prog@plt"),
            ("f", "/usr/lib/libcrypto.so.3"),
        ]);
        s[1].library = Some("/usr/lib/libc.so.6");
        s[2].library = Some("/usr/lib/libz.so.1");
        let sel = |t: &str| select(&[Pattern::parse(t).unwrap()], &s).unwrap();
        // As uftrace's: `@libc` is any module whose name starts so.
        assert_eq!(sel("*@libc"), &[1, 3]);
        assert_eq!(sel("*@libc.so*"), &[1]);
        assert_eq!(sel("*@PLT"), &[1, 2]);
        assert_eq!(sel("*@plt"), &[1, 2]);
        assert_eq!(sel("*@libz"), &[2]);
        // A library call is in the caller's object too.
        assert_eq!(sel("*@prog"), &[0, 1, 2]);
        assert_eq!(sel("!malloc@libc"), Vec::<usize>::new());
    }
}
