//! `graph FUNCTION`: every call path that reached the function (backtraces,
//! with hits and time), and the call tree below it aggregated over all its
//! calls (total time and calls per node), in uftrace's layout.

use super::dir::{DataDir, DataError};
use super::format::Kind;
use super::replay::{thread_records, write_duration, ReplayError, ReplayFilter};
use std::collections::BTreeMap;
use std::io::Write;

#[derive(Default)]
struct Node {
    calls: u64,
    total: u64,
    /// In order of first call.
    children: Vec<(String, Node)>,
}

impl Node {
    fn child(&mut self, name: &str) -> &mut Node {
        let i = match self.children.iter().position(|c| c.0 == name) {
            Some(i) => i,
            None => {
                self.children.push((name.to_string(), Node::default()));
                self.children.len() - 1
            }
        };
        &mut self.children[i].1
    }
}

/// Aggregates the subtrees of the outermost calls of `function`.
type Backtraces = BTreeMap<Vec<(String, u64)>, (u64, u64)>;

fn collect(
    data: &DataDir,
    function: &str,
    filter: &ReplayFilter,
) -> Result<(Node, Backtraces), ReplayError> {
    let mut root = Node::default();
    let mut backtraces = Backtraces::new();
    for (_, records) in thread_records(data, filter)? {
        // (name, entry time); `inside` = index in `stack` of the outermost
        // call of `function`, if any.
        let mut stack: Vec<(String, u64, u64)> = Vec::new();
        let mut inside: Option<usize> = None;
        for r in records {
            let r = r?;
            match r.kind {
                Kind::Entry => {
                    let name = data.name(r.addr).into_owned();
                    if inside.is_none() && name == function {
                        inside = Some(stack.len());
                    }
                    stack.push((name, r.time, r.addr));
                }
                Kind::Exit => {
                    let Some((_, start, _)) = stack.last().cloned() else {
                        continue;
                    };
                    let depth = stack.len() - 1;
                    let dur = r.time.saturating_sub(start);
                    if let Some(base) = inside {
                        let mut node = &mut root;
                        for (name, _, _) in &stack[base + 1..] {
                            node = node.child(name);
                        }
                        node.calls += 1;
                        node.total += dur;
                        if depth == base {
                            let bt: Vec<(String, u64)> =
                                stack[..=base].iter().map(|f| (f.0.clone(), f.2)).collect();
                            let e = backtraces.entry(bt).or_default();
                            e.0 += 1;
                            e.1 += dur;
                            inside = None;
                        }
                    }
                    stack.pop();
                }
                _ => {}
            }
        }
    }
    Ok((root, backtraces))
}

/// One line per node in uftrace's layout: `lead` comes before the node's
/// own `(calls) name`, `cont` before its descendants'. A single child
/// continues the chain; several get `+-` and `|` separators.
fn write_node(
    out: &mut impl Write,
    name: &str,
    n: &Node,
    lead: &str,
    cont: &str,
) -> Result<(), ReplayError> {
    out.write_all(b"  ")?;
    write_duration(out, Some(n.total))?;
    writeln!(out, " : {lead}({}) {name}", n.calls)?;
    match n.children.len() {
        0 => {}
        1 => write_node(out, &n.children[0].0, &n.children[0].1, cont, cont)?,
        k => {
            for (i, (cname, c)) in n.children.iter().enumerate() {
                let last = i + 1 == k;
                let child_cont = format!("{cont}{}", if last { "   " } else { " | " });
                write_node(out, cname, c, &format!("{cont} +-"), &child_cont)?;
                if !last {
                    writeln!(out, "{:12} : {cont} | ", "")?;
                }
            }
        }
    }
    Ok(())
}

/// The graph of `function` in what `filter` selects (uftrace's `graph`
/// with `-F/-N/-D/-t/--tid`).
pub fn graph(
    data: &DataDir,
    function: &str,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let (root, backtraces) = collect(data, function, filter)?;
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
            writeln!(out, "   [{k}] {name} ({addr:#x})")?;
        }
        writeln!(out)?;
    }
    writeln!(out, "========== FUNCTION CALL GRAPH ==========")?;
    writeln!(out, "# TOTAL TIME   FUNCTION")?;
    write_node(out, function, &root, "", "")?;
    writeln!(out)?; // uftrace ends the graph with an empty line
    Ok(())
}
