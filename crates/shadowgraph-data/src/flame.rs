//! `dump --flame-graph`: folded stacks (`main;run;mid 1234`), one line per
//! distinct call path, weighted by self time in nanoseconds; the input of
//! flame-graph renderers (inferno, FlameGraph.pl).

use super::dir::DataDir;
use super::format::Kind;
use super::replay::{thread_records, ReplayError, ReplayFilter};
use std::collections::BTreeMap;
use std::io::Write;

/// Writes what `filter` selects as folded stacks weighted by self time.
pub fn dump_flame_graph(
    data: &DataDir,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    // Checked (and opened) before any output.
    let threads = thread_records(data, filter)?;
    let mut folded: BTreeMap<String, u64> = BTreeMap::new();
    for (_, records) in threads {
        // (name, entry time, children time)
        let mut stack: Vec<(String, u64, u64)> = Vec::new();
        for r in records {
            let r = r?;
            match r.kind {
                Kind::Entry => stack.push((data.name(r.addr).into_owned(), r.time, 0)),
                Kind::Exit => {
                    let Some((_, start, children)) = stack.last().cloned() else {
                        continue; // an exit without its entry (recording started inside)
                    };
                    let dur = r.time.saturating_sub(start);
                    let path = stack
                        .iter()
                        .map(|f| f.0.as_str())
                        .collect::<Vec<_>>()
                        .join(";");
                    *folded.entry(path).or_default() += dur.saturating_sub(children);
                    stack.pop();
                    if let Some(parent) = stack.last_mut() {
                        parent.2 += dur;
                    }
                }
                _ => {}
            }
        }
    }
    for (path, ns) in folded {
        writeln!(out, "{path} {ns}")?;
    }
    Ok(())
}
