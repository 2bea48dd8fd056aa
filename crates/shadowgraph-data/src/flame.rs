//! `dump --flame-graph`: folded stacks (`main;run;mid 1234`), one line per
//! distinct call path, weighted by self time in nanoseconds; the input of
//! flame-graph renderers (inferno, FlameGraph.pl).

use super::dir::DataDir;
use super::format::Kind;
use super::replay::{session_threads, ReplayError, ReplayFilter};
use std::collections::BTreeMap;
use std::io::Write;

/// Writes what `filter` selects as folded stacks weighted by self time.
/// `datas`: a recording, then the programs started by exec during it: the
/// stacks of all of them.
pub fn dump_flame_graph(
    datas: &[&DataDir],
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    dump_flame_graph_sampled(datas, filter, None, out)
}

/// [`dump_flame_graph`], or with `sample_ns` (uftrace's `--sample-time`)
/// weighted by samples: a path's self time over the sample time, a
/// callee's time taken from its caller only in whole samples (uftrace's
/// accounting: a caller keeps the remainders of its callees). Paths of no
/// sample are left out.
pub fn dump_flame_graph_sampled(
    datas: &[&DataDir],
    filter: &ReplayFilter,
    sample_ns: Option<u64>,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    // Checked (and opened) before any output.
    let threads = session_threads(datas, filter)?;
    let accounted = |t: u64| match sample_ns {
        Some(s) if s > 0 => t / s * s,
        _ => t,
    };
    // Per path: (time, time of callees taken from it).
    let mut folded: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (_, records, owner) in threads {
        let data = datas[owner];
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
                    let e = folded.entry(path).or_default();
                    e.0 += dur;
                    e.1 += children;
                    stack.pop();
                    if let Some(parent) = stack.last_mut() {
                        parent.2 += accounted(dur);
                    }
                }
                _ => {}
            }
        }
    }
    for (path, (time, children)) in folded {
        let own = time.saturating_sub(children);
        match sample_ns {
            Some(s) if s > 0 && own / s > 0 => writeln!(out, "{path} {}", own / s)?,
            Some(_) => {}
            None => writeln!(out, "{path} {own}")?,
        }
    }
    Ok(())
}
