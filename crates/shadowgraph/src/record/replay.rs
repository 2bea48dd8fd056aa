//! `replay`: the call graph with durations in uftrace's text layout,
//! byte for byte (SPEC §5):
//!
//! ```text
//! # DURATION     TID      FUNCTION
//!             [   6970] | main() {
//!    0.691 us [   6970] |   atoi();
//!    9.914 us [   6970] | } /* main */
//! ```

use super::data::{DataDir, DataError};
use super::format::{Kind, Record};
use crate::ftrace::{Pattern, SiteName};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Write};
use std::sync::Arc;

/// uftrace's duration: 10 characters, or 10 spaces for none.
pub fn format_duration(ns: Option<u64>) -> String {
    let mut v = Vec::with_capacity(10);
    write_duration(&mut v, ns).expect("writing to a Vec");
    String::from_utf8(v).expect("ASCII")
}

/// Writes [`format_duration`]'s text without allocating.
pub fn write_duration(out: &mut impl Write, ns: Option<u64>) -> io::Result<()> {
    let Some(ns) = ns.filter(|&n| n > 0) else {
        return out.write_all(b"          ");
    };
    const UNITS: [&str; 5] = ["us", "ms", " s", " m", " h"];
    const LIMIT: [u64; 6] = [1000, 1000, 1000, 60, 24, u64::MAX];
    let mut v = ns;
    let mut frac = 0;
    let mut idx = 0;
    while idx < UNITS.len() {
        frac = v % LIMIT[idx];
        v /= LIMIT[idx];
        if v < LIMIT[idx + 1] {
            break;
        }
        idx += 1;
    }
    let idx = idx.min(UNITS.len() - 1);
    if v > 999 {
        v = 999;
        frac = 999;
    }
    // "%3d.%03d <unit>" without the formatting machinery (hot in replay).
    let mut b = *b"  0.000 us";
    let mut w = v;
    for i in (0..3).rev() {
        b[i] = b'0' + (w % 10) as u8;
        w /= 10;
        if w == 0 {
            break;
        }
    }
    let mut f = frac;
    for i in (4..7).rev() {
        b[i] = b'0' + (f % 10) as u8;
        f /= 10;
    }
    b[8..].copy_from_slice(UNITS[idx].as_bytes());
    out.write_all(&b)
}

const SPACES: [u8; 256] = [b' '; 256];

/// One replay line; the text is `pre`, `name`, `post`. `tid` is the
/// thread's ready-made ` [   tid] | ` column (no formatting per line).
fn line(
    out: &mut impl Write,
    dur: Option<u64>,
    tid: &[u8],
    depth: u16,
    pre: &str,
    name: &str,
    post: &str,
) -> io::Result<()> {
    out.write_all(b" ")?;
    write_duration(out, dur)?;
    out.write_all(tid)?;
    let mut n = 2 * depth as usize;
    while n > 0 {
        let k = n.min(SPACES.len());
        out.write_all(&SPACES[..k])?;
        n -= k;
    }
    out.write_all(pre.as_bytes())?;
    out.write_all(name.as_bytes())?;
    out.write_all(post.as_bytes())?;
    out.write_all(b"\n")
}

/// What `replay` shows (uftrace's `-F`, `-N`, `-D`, `-t`, `--tid`); all
/// optional.
#[derive(Clone, Debug, Default)]
pub struct ReplayFilter {
    /// Only calls inside these functions' calls, shown from depth 0 (`-F`).
    pub functions: Vec<Pattern>,
    /// Nothing inside these functions' calls, nor them (`-N`).
    pub notrace: Vec<Pattern>,
    /// Only calls nested less than this deep (0: no limit).
    pub max_depth: u16,
    /// Only calls lasting at least this long (ns), and their callers.
    pub min_ns: u64,
    /// Only these threads (empty: all).
    pub tids: Vec<i32>,
}

impl ReplayFilter {
    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
            && self.notrace.is_empty()
            && self.max_depth == 0
            && self.min_ns == 0
            && self.tids.is_empty()
    }
}

/// One thread's records, as a filter selects them.
pub type Records = Box<dyn Iterator<Item = Result<Record, DataError>>>;

/// Which recorded functions a pattern list selects (in order: patterns add,
/// `!` patterns remove), by index in [`DataDir::symbols`]; a list of which
/// no pattern matches a recorded function is an error.
fn select(data: &DataDir, patterns: &[Pattern], flag: &str) -> Result<Vec<bool>, ReplayError> {
    let mut sel = vec![false; data.symbols.len()];
    for p in patterns {
        let mut hit = false;
        for (i, (addr, symbol)) in data.symbols.iter().enumerate() {
            let site = SiteName {
                function: &data.names[i],
                symbol,
                module: data.module_of(*addr),
            };
            if p.matches(&site) {
                sel[i] = !p.text().starts_with('!');
                hit = true;
            }
        }
        if !hit {
            return Err(ReplayError::Filter(format!(
                "{flag} {}: matches no recorded function in {}",
                p.text(),
                data.dir.display()
            )));
        }
    }
    Ok(sel)
}

/// A thread's records inside the selected functions' calls (depths counted
/// from the outermost selected call) and outside the hidden ones'.
struct FunctionFiltered {
    inner: Records,
    symbols: Arc<[u64]>,
    /// Per symbol: selected by `-F` (None: no `-F`), hidden by `-N`.
    functions: Option<Arc<[bool]>>,
    notrace: Arc<[bool]>,
    /// Depth of the outermost selected call open, and of the hidden one.
    inside: Option<u16>,
    hidden: Option<u16>,
}

impl FunctionFiltered {
    fn lookup(&self, set: &[bool], addr: u64) -> bool {
        if addr == super::sched::SCHED_ADDR {
            return false; // not a function: shown where its call is
        }
        match self.symbols.partition_point(|&a| a <= addr) {
            0 => false,
            i => set[i - 1],
        }
    }
}

impl Iterator for FunctionFiltered {
    type Item = Result<Record, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let mut r = match self.inner.next()? {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            let d = r.depth;
            match r.kind {
                Kind::Entry => {
                    if self.hidden.is_some() {
                        continue;
                    }
                    if self.lookup(&self.notrace, r.addr) {
                        self.hidden = Some(d);
                        continue;
                    }
                }
                Kind::Exit => {
                    if let Some(h) = self.hidden {
                        if d <= h {
                            self.hidden = None;
                        }
                        continue;
                    }
                }
                _ => return Some(Ok(r)),
            }
            let Some(f) = &self.functions else {
                return Some(Ok(r));
            };
            let start = match (self.inside, r.kind) {
                (None, Kind::Entry) if self.lookup(f, r.addr) => {
                    self.inside = Some(d);
                    d
                }
                (None, _) => continue,
                (Some(s), Kind::Exit) if d <= s => {
                    self.inside = None;
                    if d < s {
                        continue; // an exit below the selected call: unbalanced
                    }
                    s
                }
                (Some(s), _) => s,
            };
            r.depth = d.saturating_sub(start);
            return Some(Ok(r));
        }
    }
}

/// A thread's records without the calls shorter than `min`: entries wait
/// (at most one per open call) until their exit shows the duration; a kept
/// call's waiting callers are released before it, so times stay in order.
struct TimeFiltered {
    inner: Records,
    min: u64,
    /// Open calls' entries, and whether each was released.
    open: Vec<(Record, bool)>,
    ready: VecDeque<Record>,
}

impl Iterator for TimeFiltered {
    type Item = Result<Record, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Some(Ok(r));
            }
            let r = match self.inner.next()? {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            match r.kind {
                Kind::Entry => self.open.push((r, false)),
                Kind::Exit => match self.open.pop() {
                    Some((e, released)) => {
                        let keep = released || r.time.saturating_sub(e.time) >= self.min;
                        if keep && !released {
                            for (a, done) in self.open.iter_mut().filter(|(_, d)| !*d) {
                                self.ready.push_back(*a);
                                *done = true;
                            }
                            self.ready.push_back(e);
                        }
                        if keep {
                            self.ready.push_back(r);
                        }
                    }
                    // An exit whose entry predates the recording: shown.
                    None => self.ready.push_back(r),
                },
                _ => self.ready.push_back(r),
            }
        }
    }
}

/// Per-symbol selections of a filter, made once for all threads.
struct Selection {
    symbols: Arc<[u64]>,
    functions: Option<Arc<[bool]>>,
    notrace: Arc<[bool]>,
}

/// One thread's records as `filter` selects them.
fn filtered(
    data: &DataDir,
    tid: i32,
    filter: &ReplayFilter,
    sel: &Selection,
) -> Result<Records, DataError> {
    let mut it: Records = Box::new(data.stream(tid)?);
    if let Some(spans) = data.sched.get(&tid).filter(|s| !s.is_empty()) {
        it = Box::new(super::sched::SchedMerged {
            inner: it.peekable(),
            spans: spans.iter().copied().collect(),
            depth: 0,
            exit: None,
            started: false,
        });
    }
    if sel.functions.is_some() || !filter.notrace.is_empty() {
        it = Box::new(FunctionFiltered {
            inner: it,
            symbols: sel.symbols.clone(),
            functions: sel.functions.clone(),
            notrace: sel.notrace.clone(),
            inside: None,
            hidden: None,
        });
    }
    if filter.max_depth > 0 {
        let max = filter.max_depth;
        it = Box::new(it.filter(move |r| r.as_ref().map_or(true, |r| r.depth < max)));
    }
    if filter.min_ns > 0 {
        it = Box::new(TimeFiltered {
            inner: it,
            min: filter.min_ns,
            open: Vec::new(),
            ready: VecDeque::new(),
        });
    }
    Ok(it)
}

fn peek_time(st: &mut std::iter::Peekable<Records>) -> Result<Option<u64>, DataError> {
    match st.peek() {
        Some(Ok(r)) => Ok(Some(r.time)),
        Some(Err(e)) => Err(e.clone()),
        None => Ok(None),
    }
}

/// Writes the replay of every thread, merged by time.
pub fn replay(data: &DataDir, out: &mut impl Write) -> Result<(), ReplayError> {
    replay_filtered(data, &ReplayFilter::default(), out)
}

/// Each selected thread's records as `filter` selects them (what every
/// view reads): only each thread's next record (and, with a time filter,
/// its open calls' entries) is in memory.
pub fn thread_records(
    data: &DataDir,
    filter: &ReplayFilter,
) -> Result<Vec<(i32, Records)>, ReplayError> {
    if let Some(t) = filter.tids.iter().find(|t| !data.tids.contains(t)) {
        return Err(ReplayError::Filter(format!(
            "--tid {t}: no such thread in {} (threads: {:?})",
            data.dir.display(),
            data.tids
        )));
    }
    let sel = Selection {
        symbols: data.symbols.iter().map(|s| s.0).collect(),
        functions: if filter.functions.is_empty() {
            None
        } else {
            Some(select(data, &filter.functions, "-F")?.into())
        },
        notrace: select(data, &filter.notrace, "-N")?.into(),
    };
    let mut threads = Vec::new();
    for &t in &data.tids {
        if filter.tids.is_empty() || filter.tids.contains(&t) {
            threads.push((t, filtered(data, t, filter, &sel)?));
        }
    }
    Ok(threads)
}

/// [`replay`] of what `filter` selects.
pub fn replay_filtered(
    data: &DataDir,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let threads = thread_records(data, filter)?;
    let tids: Vec<i32> = threads.iter().map(|t| t.0).collect();
    // One stream per thread, merged by time.
    let mut streams: Vec<std::iter::Peekable<Records>> =
        threads.into_iter().map(|(_, r)| r.peekable()).collect();
    writeln!(out, "# DURATION     TID      FUNCTION")?;
    let tid_cols: Vec<Vec<u8>> = tids
        .iter()
        .map(|t| format!(" [{t:>7}] | ").into_bytes())
        .collect();
    let mut heap = BinaryHeap::new();
    for (k, st) in streams.iter_mut().enumerate() {
        if let Some(t) = peek_time(st)? {
            heap.push(Reverse((t, k)));
        }
    }
    // Per thread: entry times by depth (for exit durations), and whether
    // its next record was already printed as part of a leaf.
    let mut entry_time: Vec<Vec<Option<u64>>> = vec![Vec::new(); streams.len()];
    let mut skip = vec![false; streams.len()];
    while let Some(Reverse((_, k))) = heap.pop() {
        let r = streams[k].next().expect("peeked")?;
        let tid = &tid_cols[k];
        let next = match streams[k].peek() {
            Some(Ok(n)) => Some(*n),
            Some(Err(e)) => return Err(e.clone().into()),
            None => None,
        };
        if let Some(n) = next {
            heap.push(Reverse((n.time, k)));
        }
        if std::mem::replace(&mut skip[k], false) {
            continue;
        }
        let d = r.depth as usize;
        match r.kind {
            Kind::Entry => {
                let name = data.name(r.addr);
                match next {
                    Some(n) if n.kind == Kind::Exit && n.depth == r.depth && n.addr == r.addr => {
                        let dur = Some(n.time.saturating_sub(r.time));
                        if r.addr == super::sched::SCHED_ADDR {
                            // uftrace's event line.
                            let tail = if r.more { " (pre-empted) */" } else { " */" };
                            line(out, dur, tid, r.depth, "/* ", &name, tail)?;
                        } else {
                            let tail = if name.ends_with(')') { ";" } else { "();" };
                            line(out, dur, tid, r.depth, "", &name, tail)?;
                        }
                        skip[k] = true;
                    }
                    _ => {
                        let et = &mut entry_time[k];
                        if et.len() <= d {
                            et.resize(d + 1, None);
                        }
                        et[d] = Some(r.time);
                        // A name with its parameters (C++) gets no `()`,
                        // as in uftrace's replay.
                        let tail = if name.ends_with(')') { " {" } else { "() {" };
                        line(out, None, tid, r.depth, "", &name, tail)?;
                    }
                }
            }
            Kind::Exit => {
                let start = entry_time[k].get_mut(d).and_then(Option::take);
                let name = data.name(r.addr);
                line(
                    out,
                    start.map(|s| r.time.saturating_sub(s)),
                    tid,
                    r.depth,
                    "} /* ",
                    &name,
                    " */",
                )?;
            }
            Kind::Lost => {
                let n = r.addr.to_string();
                line(out, None, tid, r.depth + 1, "/* LOST ", &n, " records!! */")?;
            }
            Kind::Event => {}
        }
    }
    Ok(())
}

#[derive(Debug)]
pub enum ReplayError {
    Data(DataError),
    Io(io::Error),
    /// A filter the recording cannot satisfy (e.g. a pattern matching none
    /// of its functions).
    Filter(String),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Data(e) => write!(f, "{e}"),
            ReplayError::Io(e) => write!(f, "{e}"),
            ReplayError::Filter(e) => write!(f, "{e}"),
        }
    }
}

impl From<DataError> for ReplayError {
    fn from(e: DataError) -> Self {
        ReplayError::Data(e)
    }
}

impl From<io::Error> for ReplayError {
    fn from(e: io::Error) -> Self {
        ReplayError::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden values: each unit, the remainder-based fractions, clamping.
    #[test]
    fn durations_like_uftrace() {
        for (ns, want) in [
            (0, "          "),
            (691, "  0.691 us"),
            (1_672, "  1.672 us"),
            (9_914, "  9.914 us"),
            (999_999, "999.999 us"),
            (1_000_000, "  1.000 ms"),
            (12_345_678, " 12.345 ms"),
            (1_500_000_000, "  1.500  s"),
            (59_999_000_000, " 59.999  s"),
            (150_000_000_000, "  2.030  m"),
            // uftrace divides minutes by 24 for hours: 2 h prints as 5.000 h.
            (7_200_000_000_000, "  5.000  h"),
        ] {
            let got = format_duration(Some(ns));
            assert_eq!(got, want, "{ns} ns");
            assert_eq!(got.len(), 10);
        }
    }
}
