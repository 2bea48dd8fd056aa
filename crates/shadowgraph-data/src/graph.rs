//! `graph FUNCTION`: every call path that reached the function (backtraces,
//! with hits and time), and the call tree below it aggregated over all its
//! calls (total time and calls per node), in uftrace's layout. `graph`
//! alone: the whole program's tree, under a root named after it (uftrace's
//! full graph).

use super::dir::{DataDir, DataError};
use super::format::Kind;
use super::replay::{thread_records, write_duration, ReplayError, ReplayFilter};
use std::collections::BTreeMap;
use std::io::Write;

#[derive(Default)]
pub(crate) struct Node {
    calls: u64,
    total: u64,
    /// Time in its children's calls (its self time is the rest).
    child: u64,
    /// The function's address (its last call's).
    addr: u64,
    /// When the node's first call began: nodes are ordered by it, as
    /// uftrace makes them (at a call's entry, in time order).
    first: u64,
    /// In order of first call.
    children: Vec<(String, Node)>,
}

impl Node {
    fn child(&mut self, name: &str, first: u64) -> &mut Node {
        let i = match self.children.iter().position(|c| c.0 == name) {
            // Threads are read one after another: another thread's call
            // may have begun earlier.
            Some(i) => {
                let n = &mut self.children[i].1;
                n.first = n.first.min(first);
                i
            }
            None => {
                let n = Node {
                    first,
                    ..Node::default()
                };
                self.children.push((name.to_string(), n));
                self.children.len() - 1
            }
        };
        &mut self.children[i].1
    }

    /// Adds `other`'s calls, times and children (by name) to this node's.
    fn merge(&mut self, other: Node) {
        self.calls += other.calls;
        self.total += other.total;
        self.child += other.child;
        self.first = self.first.min(other.first);
        if other.addr != 0 {
            self.addr = other.addr;
        }
        for (name, n) in other.children {
            let first = n.first;
            self.child(&name, first).merge(n);
        }
    }

    /// Children in order of their first calls' entries (they were made at
    /// the calls' returns).
    fn order(&mut self) {
        self.children.sort_by_key(|c| c.1.first);
        for c in &mut self.children {
            c.1.order();
        }
    }
}

/// Aggregates the subtrees of the outermost calls of `function`.
type Backtraces = BTreeMap<Vec<(String, u64)>, (u64, u64)>;

/// One thread's open calls while its records are read, and what they add
/// to the graph of one function.
struct Walk<'a> {
    /// `None`: the whole program (every outermost call under the root).
    function: Option<&'a str>,
    /// (name, entry time, address)
    stack: Vec<(String, u64, u64)>,
    /// How many of the calls at the bottom of `stack` a forked child
    /// inherited: their ends add time, not calls.
    inherited: usize,
    /// Index in `stack` of the outermost call of `function`, if any.
    inside: Option<usize>,
}

impl Walk<'_> {
    fn entry(&mut self, name: String, time: u64, addr: u64) {
        if self.inside.is_none() && self.function.is_none_or(|f| name == f) {
            self.inside = Some(self.stack.len());
        }
        self.stack.push((name, time, addr));
    }

    /// The innermost call returns at `time`.
    fn exit(&mut self, time: u64, root: &mut Node, backtraces: &mut Backtraces) {
        let Some((_, start, _)) = self.stack.last() else {
            return;
        };
        let depth = self.stack.len() - 1;
        let dur = time.saturating_sub(*start);
        if let Some(base) = self.inside {
            // The whole program: the outermost call is a child of the root.
            let from = if self.function.is_some() {
                base + 1
            } else {
                base
            };
            if self.function.is_none() && depth == base {
                root.total += dur;
            }
            let path = &self.stack[from..];
            // The caller's node (the root for an outermost call) has this
            // time in its children.
            if let Some((_, up)) = path.split_last() {
                let mut parent = &mut *root;
                for (name, start, _) in up {
                    parent = parent.child(name, *start);
                }
                parent.child += dur;
            }
            let mut node = root;
            for (name, start, _) in path {
                node = node.child(name, *start);
            }
            if depth >= self.inherited {
                node.calls += 1;
            }
            node.total += dur;
            node.addr = self.stack[depth].2;
            if self.function.is_none() {
                if depth == base {
                    self.inside = None;
                }
            } else if depth == base {
                let bt: Vec<(String, u64)> = self.stack[..=base]
                    .iter()
                    .map(|f| (f.0.clone(), f.2))
                    .collect();
                let e = backtraces.entry(bt).or_default();
                e.0 += 1;
                e.1 += dur;
                self.inside = None;
            }
        }
        self.stack.pop();
        self.inherited = self.inherited.min(self.stack.len());
    }
}

/// The whole program's call tree in what `filter` selects (the root
/// unnamed: the program), of a recording and of the programs started by
/// exec during it (`datas`, the recording first): one tree, where each
/// program's outermost calls are the root's children.
pub(crate) fn whole(datas: &[&DataDir], filter: &ReplayFilter) -> Result<Node, ReplayError> {
    let mut root = Node::default();
    for (i, d) in datas.iter().enumerate() {
        if let Some(f) = crate::replay::session_filter(i, d, filter) {
            root.merge(collect(d, None, &f)?.0);
        }
    }
    root.order();
    Ok(root)
}

impl Node {
    /// Calls `edge((parent, its id), (child, its id), calls, depth)` for
    /// every edge below this node (named `name`, at `depth`), depth
    /// first, children in order of first call; ids number the nodes in
    /// the order their first calls began (this one 0), as uftrace's.
    pub(crate) fn visit_numbered<E>(
        &self,
        name: &str,
        edge: &mut impl FnMut((&str, usize), (&str, usize), u64, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        fn all<'n>(n: &'n Node, out: &mut Vec<&'n Node>) {
            for c in &n.children {
                out.push(&c.1);
                all(&c.1, out);
            }
        }
        let mut nodes = Vec::new();
        all(self, &mut nodes);
        let mut by_first: Vec<usize> = (0..nodes.len()).collect();
        by_first.sort_by_key(|&i| nodes[i].first);
        let mut id = vec![0; nodes.len()];
        for (k, &i) in by_first.iter().enumerate() {
            id[i] = k + 1;
        }
        // Preorder: `nodes` is in the order this walks them.
        fn walk<E>(
            n: &Node,
            (name, my): (&str, usize),
            depth: usize,
            next: &mut usize,
            id: &[usize],
            edge: &mut impl FnMut((&str, usize), (&str, usize), u64, usize) -> Result<(), E>,
        ) -> Result<(), E> {
            for (cname, c) in &n.children {
                let cid = id[*next];
                *next += 1;
                edge((name, my), (cname, cid), c.calls, depth)?;
                walk(c, (cname, cid), depth + 1, next, id, edge)?;
            }
            Ok(())
        }
        walk(self, (name, 0), 0, &mut 0, &id, edge)
    }

    /// Calls `edge(parent, child, calls)` for every edge below this node
    /// (named `name`), depth first, in order of first call.
    pub(crate) fn visit<E>(
        &self,
        name: &str,
        edge: &mut impl FnMut(&str, &str, u64) -> Result<(), E>,
    ) -> Result<(), E> {
        for (child, n) in &self.children {
            edge(name, child, n.calls)?;
            n.visit(child, edge)?;
        }
        Ok(())
    }
}

fn collect(
    data: &DataDir,
    function: Option<&str>,
    filter: &ReplayFilter,
) -> Result<(Node, Backtraces), ReplayError> {
    let mut root = Node::default();
    let mut backtraces = Backtraces::new();
    let stop = filter.stop_time(data)?;
    // The calls open in a thread when it called fork (fork's own
    // included), by time: a child's records begin inside them.
    let mut forks: Vec<(u64, Vec<(String, u64)>)> = Vec::new();
    for (_, records) in thread_records(data, filter)? {
        let mut walk = Walk {
            function,
            stack: Vec::new(),
            inherited: 0,
            inside: None,
        };
        let mut records = records.peekable();
        // A forked child's first record ends the fork it inherited: in
        // the whole program's graph its calls go on inside the frames it
        // inherited, as uftrace's shows them (the child's thread read
        // after its parent's); a function's graph counts its own calls.
        if let Some(Ok(first)) = records.peek().filter(|_| function.is_none()) {
            let at = (first.time, first.depth as usize + 1);
            let path = forks
                .iter()
                .rev()
                .find(|f| f.0 <= at.0 && f.1.len() == at.1);
            if let (Kind::Exit, Some((_, path))) = (first.kind, path) {
                for (name, addr) in path.clone() {
                    walk.entry(name, at.0, addr);
                }
                walk.inherited = walk.stack.len();
            }
        }
        let mut last = 0;
        for r in records {
            let r = r?;
            last = r.time;
            match r.kind {
                Kind::Entry => {
                    let name = data.name(r.addr).into_owned();
                    if matches!(name.as_str(), "fork" | "vfork" | "daemon") {
                        let mut path: Vec<(String, u64)> =
                            walk.stack.iter().map(|f| (f.0.clone(), f.2)).collect();
                        path.push((name.clone(), r.addr));
                        forks.push((r.time, path));
                    }
                    walk.entry(name, r.time, r.addr)
                }
                Kind::Exit => walk.exit(r.time, &mut root, &mut backtraces),
                _ => {}
            }
        }
        // Calls that never returned (a killed program, a recording cut
        // short) end at the thread's last record (or where a time range
        // does), as in uftrace.
        let last = stop.unwrap_or(last);
        while !walk.stack.is_empty() {
            walk.exit(last, &mut root, &mut backtraces);
        }
    }
    root.order();
    Ok((root, backtraces))
}

/// A column of `graph -f` (uftrace's graph fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphField {
    /// `total`: the node's calls' time.
    Total,
    /// `self`: that less the time in their callees.
    SelfTime,
    /// `addr`: the function's address.
    Addr,
}

impl GraphField {
    /// uftrace's default columns.
    pub const DEFAULT: [GraphField; 1] = [GraphField::Total];

    /// `-f`'s list: names (`total`, `self`, `addr`, or uftrace's long
    /// ones), `+LIST` added to the default, or `none`.
    pub fn parse_list(spec: &str) -> Result<Vec<GraphField>, String> {
        let named = |f: &str| match f {
            "total" | "total-time" => Some(GraphField::Total),
            "self" | "self-time" => Some(GraphField::SelfTime),
            "addr" | "address" => Some(GraphField::Addr),
            _ => None,
        };
        let what = "a graph field (total, self, addr, none)";
        crate::field_list::parse(spec, &Self::DEFAULT, named, what)
    }

    fn header(self) -> &'static str {
        match self {
            GraphField::Total => "TOTAL TIME",
            GraphField::SelfTime => " SELF TIME",
            GraphField::Addr => "   ADDRESS  ",
        }
    }
}

/// The header line of the graph's columns (none without columns).
fn columns_header(fields: &[GraphField], srcline: bool) -> Option<String> {
    if fields.is_empty() {
        return None;
    }
    let heads: Vec<&str> = fields.iter().map(|f| f.header()).collect();
    let src = if srcline { " [SOURCE]" } else { "" };
    Some(format!("# {}   FUNCTION{src}", heads.join("  ")))
}

/// A node's columns, then ` : ` (nothing without columns); blank columns
/// for `None` (the lines between siblings).
fn write_columns(
    out: &mut impl Write,
    fields: &[GraphField],
    n: Option<&Node>,
) -> Result<(), ReplayError> {
    if fields.is_empty() {
        return Ok(());
    }
    out.write_all(b"  ")?;
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.write_all(b"  ")?;
        }
        match (n, f) {
            (None, GraphField::Addr) => write!(out, "{:12}", "")?,
            (None, _) => write!(out, "{:10}", "")?,
            (Some(n), GraphField::Total) => write_duration(out, Some(n.total))?,
            // (The whole program's root has no self time of its own.)
            (Some(n), GraphField::SelfTime) if n.addr == 0 => write!(out, "{:10}", "")?,
            (Some(n), GraphField::SelfTime) => {
                write_duration(out, Some(n.total.saturating_sub(n.child)))?
            }
            (Some(n), GraphField::Addr) if n.addr == 0 => write!(out, "{:12}", "")?,
            (Some(n), GraphField::Addr) => write!(out, "{:12x}", crate::loads::untagged(n.addr))?,
        }
    }
    out.write_all(b" : ")?;
    Ok(())
}

/// One line per node in uftrace's layout: `lead` comes before the node's
/// own `(calls) name`, `cont` before its descendants'. A single child
/// continues the chain; several get `+-` and `|` separators.
/// `lines`: where each function below the root is declared
/// (`--srcline`), shown after its name.
fn write_node(
    out: &mut impl Write,
    (name, lines, fields): (&str, &Lines, &[GraphField]),
    n: &Node,
    lead: &str,
    cont: &str,
) -> Result<(), ReplayError> {
    write_columns(out, fields, Some(n))?;
    writeln!(out, "{lead}({}) {name}", n.calls)?;
    let named = |c: &str| match lines.get(c) {
        Some(l) => format!("{c} [{l}]"),
        None => c.to_string(),
    };
    match n.children.len() {
        0 => {}
        1 => {
            let c = named(&n.children[0].0);
            write_node(out, (&c, lines, fields), &n.children[0].1, cont, cont)?
        }
        k => {
            for (i, (cname, c)) in n.children.iter().enumerate() {
                let last = i + 1 == k;
                let child_cont = format!("{cont}{}", if last { "   " } else { " | " });
                let cn = named(cname);
                write_node(
                    out,
                    (&cn, lines, fields),
                    c,
                    &format!("{cont} +-"),
                    &child_cont,
                )?;
                if !last {
                    write_columns(out, fields, None)?;
                    writeln!(out, "{cont} | ")?;
                }
            }
        }
    }
    Ok(())
}

/// Where functions are declared, by name.
type Lines = std::collections::HashMap<String, String>;

/// The graph of `function` in what `filter` selects (uftrace's `graph`
/// with `-F/-N/-D/-t/--tid`); of the whole program without one.
pub fn graph(
    data: &DataDir,
    function: Option<&str>,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    graph_with(data, function, filter, (false, &GraphField::DEFAULT), out)
}

/// [`graph_with`] of a recording and of the programs started by exec
/// during it (`datas`, the recording first, then in the order they
/// started): each one's graph, the last started first, as uftrace prints
/// its sessions; a function's graph where it was called, an error only if
/// nowhere.
pub fn graph_sessions(
    datas: &[&DataDir],
    function: Option<&str>,
    filter: &ReplayFilter,
    look: (bool, &[GraphField]),
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let (mut shown, mut last_error) = (false, None);
    for d in datas.iter().rev() {
        let mut text = Vec::new();
        match graph_with(d, function, filter, look, &mut text) {
            Ok(()) => {
                out.write_all(&text)?;
                shown = true;
            }
            // (The recording's own, named last, is the one said.)
            Err(e) if datas.len() > 1 => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    match last_error {
        Some(e) if !shown => Err(e),
        _ => Ok(()),
    }
}

/// [`graph`], with where each function is declared after its name if
/// `srcline` (`--srcline`, as the recording says; not the root's, as
/// uftrace's), and `fields` left of the tree (`-f`).
pub fn graph_with(
    data: &DataDir,
    function: Option<&str>,
    filter: &ReplayFilter,
    (srcline, fields): (bool, &[GraphField]),
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let lines: Lines = if srcline {
        data.symbols
            .iter()
            .zip(&data.names)
            .filter_map(|((a, _), n)| Some((n.clone(), data.srcline(*a)?.to_string())))
            .collect()
    } else {
        Lines::new()
    };
    let head = columns_header(fields, srcline);
    let (mut root, backtraces) = collect(data, function, filter)?;
    let Some(function) = function else {
        // uftrace names the root after the program, one call.
        let exe = data.info.get("exe").unwrap_or("");
        let name = std::path::Path::new(exe)
            .file_name()
            .map_or_else(|| exe.to_string(), |n| n.to_string_lossy().into_owned());
        if root.children.is_empty() {
            return Ok(());
        }
        root.calls = 1;
        match data.info.get("sid") {
            Some(sid) => writeln!(out, "# Function Call Graph for '{name}' (session: {sid})")?,
            None => writeln!(out, "# Function Call Graph for '{name}'")?,
        }
        writeln!(out, "========== FUNCTION CALL GRAPH ==========")?;
        if let Some(h) = &head {
            writeln!(out, "{h}")?;
        }
        write_node(out, (&name, &lines, fields), &root, "", "")?;
        writeln!(out)?;
        return Ok(());
    };
    if root.calls == 0 {
        let what = if filter.is_empty() {
            "in this recording"
        } else {
            "in what the filters select"
        };
        return Err(ReplayError::Data(DataError {
            path: data.dir.clone(),
            message: format!("no call of `{function}` {what}"),
        }));
    }
    match data.info.get("sid") {
        Some(sid) => writeln!(
            out,
            "# Function Call Graph for '{function}' (session: {sid})"
        )?,
        None => writeln!(out, "# Function Call Graph for '{function}'")?,
    }
    writeln!(out, "=============== BACKTRACE ===============")?;
    let mut bts: Vec<_> = backtraces.into_iter().collect();
    bts.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    for (i, (path, (hits, time))) in bts.iter().enumerate() {
        write!(out, " backtrace #{i}: hit {hits}, time ")?;
        write_duration(out, Some(*time))?;
        writeln!(out)?;
        for (k, (name, addr)) in path.iter().enumerate() {
            writeln!(
                out,
                "   [{k}] {name} ({:#x})",
                crate::loads::untagged(*addr)
            )?;
        }
        writeln!(out)?;
    }
    writeln!(out, "========== FUNCTION CALL GRAPH ==========")?;
    if let Some(h) = &head {
        writeln!(out, "{h}")?;
    }
    write_node(out, (function, &lines, fields), &root, "", "")?;
    writeln!(out)?; // uftrace ends the graph with an empty line
    Ok(())
}
