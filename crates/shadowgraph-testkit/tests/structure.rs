//! The workspace's shape, checked: no source file over 800 lines, no
//! import cycle between the modules of a crate, and the runtime's layers
//! named only downwards (design §1).

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file, in lines.
const MAX_LINES: usize = 800;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn no_source_file_is_longer_than_800_lines() {
    let root = workspace();
    let mut long = Vec::new();
    for top in ["crates", "examples"] {
        for f in rust_files(&root.join(top)) {
            let lines = std::fs::read_to_string(&f).unwrap().lines().count();
            if lines > MAX_LINES {
                long.push(format!("{} ({lines} lines)", f.display()));
            }
        }
    }
    assert!(long.is_empty(), "split by concern: {long:#?}");
}

/// A crate's modules (`a::b`, the root ""), each with the modules its code
/// names (by `use`, a path, or an exported macro), itself and its own
/// test code left out.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files: BTreeMap<String, PathBuf> = rust_files(src)
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            (parts.join("::"), p)
        })
        .collect();
    let comment = Regex::new(r"//[^\n]*").unwrap();
    // A `use` statement opens its line (the word in a string is not one).
    let use_stmt = Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);").unwrap();
    let child = Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;").unwrap();
    let path = Regex::new(r"(?:^|[^\w:])((?:crate|super|self|\w+)(?:::\w+)+)(!?)").unwrap();
    let exported =
        Regex::new(r"#\[macro_export\][^\n]*\n(?:\s*#\[[^\n]*\n)*\s*macro_rules!\s*(\w+)").unwrap();
    let source = |p: &Path| {
        let s = std::fs::read_to_string(p).unwrap();
        let s = comment.replace_all(&s, "").into_owned();
        match s.find("#[cfg(test)]") {
            Some(i) => s[..i].to_string(),
            None => s,
        }
    };
    let mut macros = BTreeMap::new();
    for (m, p) in &files {
        let s = std::fs::read_to_string(p).unwrap();
        for c in exported.captures_iter(&s) {
            macros.insert(c[1].to_string(), m.clone());
        }
    }
    // The longest prefix of `path` that is a module.
    let resolve = |path: &str| -> String {
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        (0..=segs.len())
            .rev()
            .map(|i| segs[..i].join("::"))
            .find(|c| files.contains_key(c))
            .unwrap_or_default()
    };
    let mut graph = BTreeMap::new();
    for (m, p) in &files {
        let src = source(p);
        let children: BTreeSet<String> = child
            .captures_iter(&src)
            .map(|c| c[1].to_string())
            .collect();
        let parent = m.rsplit_once("::").map_or("", |x| x.0).to_string();
        let join = |a: &str, b: &str| {
            if a.is_empty() {
                b.to_string()
            } else if b.is_empty() {
                a.to_string()
            } else {
                format!("{a}::{b}")
            }
        };
        let absolute = |t: &str| -> Option<String> {
            let (first, rest) = t.split_once("::").unwrap_or((t, ""));
            match first {
                "crate" => Some(rest.to_string()),
                "super" => Some(join(&parent, rest)),
                "self" => Some(join(m, rest)),
                c if children.contains(c) => Some(join(m, t)),
                _ => None,
            }
        };
        let mut paths = Vec::new();
        for c in use_stmt.captures_iter(&src) {
            paths.extend(expand(&c[1]));
        }
        let body = use_stmt.replace_all(&src, "");
        let mut names = BTreeSet::new();
        for c in path.captures_iter(&body) {
            let t = &c[1];
            let last = t.rsplit("::").next().unwrap();
            if &c[2] == "!" {
                if let Some(home) = macros.get(last) {
                    names.insert(home.clone());
                    continue;
                }
            }
            paths.push(t.to_string());
        }
        for t in paths {
            if let Some(a) = absolute(&t) {
                names.insert(resolve(&a));
            }
        }
        names.remove(m);
        graph.insert(m.clone(), names);
    }
    graph
}

/// The paths of a `use` tree: `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, …
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let t = tree.split(" as ").next().unwrap().trim();
        return vec![t.trim_end_matches("::*").to_string()];
    };
    let (prefix, inner) = (&tree[..open], &tree[open + 1..tree.rfind('}').unwrap()]);
    let (mut items, mut cur, mut depth) = (Vec::new(), String::new(), 0);
    for ch in inner.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    items.push(cur);
    items
        .iter()
        .map(|i| i.trim())
        .filter(|i| !i.is_empty())
        .flat_map(|i| expand(i).into_iter().map(|e| format!("{prefix}{e}")))
        .map(|e| e.trim_end_matches("::self").to_string())
        .collect()
}

/// The strongly connected components of more than one module.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let l = self.low[w.as_str()].min(self.low[v]);
                    self.low.insert(v, l);
                } else if self.on.contains(w.as_str()) {
                    let l = self.index[w.as_str()].min(self.low[v]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn no_crate_has_an_import_cycle() {
    let root = workspace();
    let mut found = Vec::new();
    for krate in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let src = krate.path().join("src");
        if src.is_dir() {
            for c in cycles(&module_graph(&src)) {
                found.push(format!("{}: {c:?}", krate.path().display()));
            }
        }
    }
    assert!(found.is_empty(), "import cycles: {found:#?}");
}

/// The runtime's layers, in data-flow order (design §1): a module may name
/// its own layer's and the layers before it, never one after.
#[test]
fn the_runtime_names_its_layers_only_downwards() {
    let layers: &[&[&str]] = &[
        &[
            "sys", "log", "alloc", "local", "clock", "config", "elf", "site", "prologue",
        ],
        &[
            "patch", "stop", "arena", "tramp", "process", "tls", "libcall",
        ],
        &["ftrace"],
        &["fgraph"],
        &["record"],
        &["tracer"],
        &["session"],
    ];
    let layer_of = |m: &str| {
        let top = m.split("::").next().unwrap();
        layers.iter().position(|l| l.contains(&top))
    };
    let graph = module_graph(&workspace().join("crates/shadowgraph/src"));
    let mut upward = Vec::new();
    for (m, names) in &graph {
        let Some(from) = layer_of(m) else { continue };
        for n in names {
            if let Some(to) = layer_of(n) {
                if to > from {
                    upward.push(format!("{m} names {n}"));
                }
            }
        }
    }
    assert!(upward.is_empty(), "{upward:#?}");
}
