//! `replay`: the call graph with durations in uftrace's text layout,
//! byte for byte (SPEC §5):
//!
//! ```text
//! # DURATION     TID     FUNCTION
//!             [  6970] | main() {
//!    0.691 us [  6970] |   atoi();
//!    9.914 us [  6970] | } /* main */
//! ```

use super::dir::{DataDir, DataError};
use super::format::{Kind, Record};
use crate::pattern::{FunctionName, Pattern};
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

/// A column `replay` can show left of the function (uftrace's `replay
/// -f`); always shown in this order, whatever the order asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// The call's duration, on its exit or leaf line.
    Duration,
    /// The thread id.
    Tid,
    /// The function's address in the recorded process.
    Addr,
    /// The record's time: seconds.nanoseconds of the recording's clock.
    Time,
    /// Time since the thread's previous line.
    Delta,
    /// Time since the recording's first record.
    Elapsed,
    /// The program's name.
    Task,
    /// The name of the object holding the function.
    Module,
}

impl Field {
    pub const ALL: [Field; 8] = [
        Field::Duration,
        Field::Tid,
        Field::Addr,
        Field::Time,
        Field::Delta,
        Field::Elapsed,
        Field::Task,
        Field::Module,
    ];
    /// What shows with no `-f`.
    pub const DEFAULT: [Field; 2] = [Field::Duration, Field::Tid];

    pub fn name(self) -> &'static str {
        [
            "duration", "tid", "addr", "time", "delta", "elapsed", "task", "module",
        ][self as usize]
    }

    /// The column's title, as wide as its values (uftrace's titles).
    fn title(self) -> &'static str {
        [
            " DURATION ",
            "   TID  ",
            "   ADDRESS  ",
            "     TIMESTAMP    ",
            " TIMEDELTA",
            "  ELAPSED ",
            "      TASK NAME",
            "     MODULE NAME",
        ][self as usize]
    }

    /// uftrace's `-f` list: names separated by commas, `none`, or `+NAME,…`
    /// for the default columns and these.
    pub fn parse_list(spec: &str) -> Result<Vec<Field>, String> {
        let (mut fields, list) = match spec.strip_prefix('+') {
            Some(rest) => (Field::DEFAULT.to_vec(), rest),
            None => (Vec::new(), spec),
        };
        for name in list.split(',').map(str::trim) {
            if name == "none" && spec == "none" {
                continue;
            }
            match Field::ALL.iter().find(|f| f.name() == name) {
                Some(&f) => fields.push(f),
                None => {
                    let all: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
                    return Err(format!(
                        "unknown field `{name}` (fields: {}, or none; +FIELD adds to the default)",
                        all.join(" ")
                    ));
                }
            }
        }
        fields.sort();
        fields.dedup();
        Ok(fields)
    }
}

/// The columns of every line: which fields, and what each thread's lines
/// share (ready-made, no formatting per line where it can be helped).
struct Columns<'a> {
    data: &'a DataDir,
    fields: Vec<Field>,
    /// Per thread: ` [   tid]`.
    tids: Vec<Vec<u8>>,
    /// The program's name, right-aligned in 15.
    task: Vec<u8>,
    /// Per thread: the time of its previous line.
    last: Vec<Option<u64>>,
    /// The recording's first record's time.
    first: u64,
}

impl Columns<'_> {
    fn header(&self) -> Option<String> {
        if self.fields.is_empty() {
            return None;
        }
        let titles: Vec<&str> = self.fields.iter().map(|f| f.title()).collect();
        Some(format!("#{}   FUNCTION", titles.join(" ")))
    }

    /// The columns of thread `k`'s line for a record at `time` of the
    /// function at `addr`, then ` | `.
    fn write(
        &mut self,
        out: &mut impl Write,
        k: usize,
        time: u64,
        addr: Option<u64>,
        dur: Option<u64>,
    ) -> io::Result<()> {
        let last = self.last[k].replace(time);
        for f in &self.fields {
            match f {
                Field::Duration => {
                    out.write_all(b" ")?;
                    write_duration(out, dur)?;
                }
                Field::Tid => out.write_all(&self.tids[k])?,
                Field::Addr => match addr {
                    Some(a) => write!(out, " {a:>12x}")?,
                    None => out.write_all(&SPACES[..13])?,
                },
                Field::Time => write!(
                    out,
                    " {:>8}.{:09}",
                    time / 1_000_000_000,
                    time % 1_000_000_000
                )?,
                Field::Delta => {
                    out.write_all(b" ")?;
                    write_duration(out, last.map(|l| time.saturating_sub(l)))?;
                }
                Field::Elapsed => {
                    out.write_all(b" ")?;
                    write_duration(out, Some(time.saturating_sub(self.first)))?;
                }
                Field::Task => out.write_all(&self.task)?,
                Field::Module => {
                    let path = addr.map_or("", |a| self.data.module_of(a));
                    let base = path.rsplit('/').next().unwrap_or(path);
                    let base = base.get(..16).unwrap_or(base);
                    write!(out, " {base:>16}")?;
                }
            }
        }
        if self.fields.is_empty() {
            Ok(())
        } else {
            out.write_all(b" | ")
        }
    }
}

/// One replay line of thread `k` for record `r`: the columns, then the
/// text `pre`, `name`, `post` at `depth`.
fn line(
    out: &mut impl Write,
    cols: &mut Columns,
    (k, r, dur): (usize, &Record, Option<u64>),
    depth: u16,
    (pre, name, post): (&str, &str, &str),
) -> io::Result<()> {
    let addr = (r.kind != Kind::Lost).then_some(r.addr);
    cols.write(out, k, r.time, addr, dur)?;
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
            let site = FunctionName {
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

/// The time of the recording's first record (0 for none).
fn first_time(data: &DataDir) -> Result<u64, DataError> {
    let mut first = None::<u64>;
    for &t in &data.tids {
        if let Some(r) = data.stream(t)?.next() {
            let r = r?;
            first = Some(first.map_or(r.time, |f| f.min(r.time)));
        }
    }
    Ok(first.unwrap_or(0))
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
    replay_fields(data, filter, &Field::DEFAULT, out)
}

/// [`replay_filtered`] with `fields` left of each function.
pub fn replay_fields(
    data: &DataDir,
    filter: &ReplayFilter,
    fields: &[Field],
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let threads = thread_records(data, filter)?;
    let tids: Vec<i32> = threads.iter().map(|t| t.0).collect();
    // One stream per thread, merged by time.
    let mut streams: Vec<std::iter::Peekable<Records>> =
        threads.into_iter().map(|(_, r)| r.peekable()).collect();
    let exe = data.info.get("exename").unwrap_or("");
    let task = exe.rsplit('/').next().unwrap_or(exe);
    let task = task.get(..15).unwrap_or(task);
    let mut cols = Columns {
        data,
        fields: fields.to_vec(),
        tids: tids
            .iter()
            .map(|t| format!(" [{t:>6}]").into_bytes())
            .collect(),
        task: format!(" {task:>15}").into_bytes(),
        last: vec![None; tids.len()],
        first: if fields.contains(&Field::Elapsed) {
            first_time(data)?
        } else {
            0
        },
    };
    if let Some(h) = cols.header() {
        writeln!(out, "{h}")?;
    }
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
                // A leaf: its exit is the next record shown, of any thread
                // (the heap's next is this stream's), as uftrace merges.
                let next_shown = heap.peek().map(|Reverse(x)| x.1) == Some(k);
                match next {
                    Some(n)
                        if n.kind == Kind::Exit
                            && n.depth == r.depth
                            && n.addr == r.addr
                            && next_shown =>
                    {
                        let dur = Some(n.time.saturating_sub(r.time));
                        if r.addr == super::sched::SCHED_ADDR {
                            // uftrace's event line.
                            let tail = if r.more { " (pre-empted) */" } else { " */" };
                            line(out, &mut cols, (k, &r, dur), r.depth, ("/* ", &name, tail))?;
                        } else {
                            let tail = if name.ends_with(')') { ";" } else { "();" };
                            line(out, &mut cols, (k, &r, dur), r.depth, ("", &name, tail))?;
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
                        line(out, &mut cols, (k, &r, None), r.depth, ("", &name, tail))?;
                    }
                }
            }
            Kind::Exit => {
                let start = entry_time[k].get_mut(d).and_then(Option::take);
                let name = data.name(r.addr);
                let dur = start.map(|s| r.time.saturating_sub(s));
                line(
                    out,
                    &mut cols,
                    (k, &r, dur),
                    r.depth,
                    ("} /* ", &name, " */"),
                )?;
            }
            Kind::Lost => {
                let n = r.addr.to_string();
                let text = ("/* LOST ", n.as_str(), " records!! */");
                line(out, &mut cols, (k, &r, None), r.depth + 1, text)?;
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
    fn output_fields_parse_like_uftrace() {
        use Field::*;
        assert_eq!(Field::parse_list("time,tid").unwrap(), [Tid, Time]);
        assert_eq!(
            Field::parse_list("+elapsed").unwrap(),
            [Duration, Tid, Elapsed]
        );
        assert_eq!(Field::parse_list("+tid").unwrap(), Field::DEFAULT);
        assert!(Field::parse_list("none").unwrap().is_empty());
        let e = Field::parse_list("tid,durations").unwrap_err();
        assert!(e.contains("unknown field `durations`"), "{e}");
        assert!(Field::parse_list("tid,none").is_err());
        assert!(Field::parse_list("").is_err());
        // Each column's title is as wide as its values.
        let widths = [10, 9, 12, 18, 10, 10, 15, 16];
        for (f, w) in Field::ALL.iter().zip(widths) {
            assert_eq!(f.title().len(), w, "{f:?}");
        }
    }

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
