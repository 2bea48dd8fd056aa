//! What a view reads of each thread: its records at uftrace's display
//! depths, as `-F`, `-N`, `-D`, `-t` and `--tid` select them.

use super::error::ReplayError;
use crate::dir::{DataDir, DataError};
use crate::format::{Kind, Record};
use crate::pattern::{FunctionName, Pattern};
use std::collections::VecDeque;
use std::sync::Arc;

/// What `replay` shows (uftrace's `-F`, `-N`, `-D`, `-t`, `--tid`); all
/// optional.
#[derive(Clone, Debug, Default)]
pub struct ReplayFilter {
    /// Only calls inside these functions' calls, shown from depth 0 (`-F`).
    pub functions: Vec<Pattern>,
    /// Nothing inside these functions' calls, nor them (`-N`).
    pub notrace: Vec<Pattern>,
    /// Only calls nested less than this deep (0: [`DEFAULT_MAX_DEPTH`], as
    /// uftrace's views).
    pub max_depth: u16,
    /// Only calls lasting at least this long (ns), and their callers.
    pub min_ns: u64,
    /// Only these threads (empty: all).
    pub tids: Vec<i32>,
    /// Only the calls of these functions and their callers (`-C`).
    pub callers: Vec<Pattern>,
    /// Without the calls of functions smaller than this many bytes
    /// (`-Z`; 0: all), their callees shown in their place.
    pub min_size: u64,
}

impl ReplayFilter {
    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
            && self.notrace.is_empty()
            && self.max_depth == 0
            && self.min_ns == 0
            && self.tids.is_empty()
            && self.callers.is_empty()
            && self.min_size == 0
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
                library: None,
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

/// The depth uftrace shows a thread's calls at: counted from 0 at the
/// thread's first record, or from that record's own depth when it is an
/// exit (a forked child's first record ends the call that forked it: its
/// calls go on below the frames it inherited, as uftrace shows them); one
/// level per entry and back one per exit; after a LOST record, taken again
/// from the next record's own depth. Records
/// at `max` or deeper are left out (`u16::MAX`: none), when no later layer
/// changes the depths.
struct DisplayDepth<I> {
    inner: I,
    depth: u16,
    /// Whether `depth` counts on (false after a LOST record).
    set: bool,
    /// No record read yet.
    first: bool,
    max: u16,
}

impl<I: Iterator<Item = Result<Record, DataError>>> Iterator for DisplayDepth<I> {
    type Item = Result<Record, DataError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let mut r = match self.inner.next()? {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            if std::mem::replace(&mut self.first, false) && r.kind == Kind::Exit {
                self.set = false;
            }
            match r.kind {
                Kind::Entry => {
                    if !std::mem::replace(&mut self.set, true) {
                        self.depth = r.depth;
                    }
                    r.depth = self.depth;
                    self.depth = self.depth.saturating_add(1);
                }
                Kind::Exit => {
                    if !std::mem::replace(&mut self.set, true) {
                        self.depth = r.depth.saturating_add(1);
                    }
                    self.depth = self.depth.saturating_sub(1);
                    r.depth = self.depth;
                }
                Kind::Lost => {
                    r.depth = self.depth;
                    self.set = false;
                }
                Kind::Event => r.depth = self.depth,
            }
            if r.depth < self.max {
                return Some(Ok(r));
            }
        }
    }
}

/// The nesting a view shows without `-D`: uftrace's default limit (its
/// `OPT_DEPTH_DEFAULT`), calls deeper are not shown.
pub const DEFAULT_MAX_DEPTH: u16 = 1024;

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
    /// The depths of the selected calls open, innermost last: with `-F`,
    /// the depth limit counts from the innermost (uftrace restarts it at
    /// each selected call), while depths shown count from the outermost.
    selected: Vec<u16>,
    /// The depth limit (`u16::MAX`: none), applied here with `-F`.
    max: u16,
    /// The depths of the shown calls open, innermost last.
    shown: Vec<u16>,
}

impl FunctionFiltered {
    fn lookup(&self, set: &[bool], addr: u64) -> bool {
        if addr == crate::sched::SCHED_ADDR {
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
            let chosen = r.kind == Kind::Entry && self.lookup(f, r.addr);
            if chosen {
                self.selected.push(d);
            }
            // From the innermost selected call open (this one, or at an
            // exit the one it ends).
            let base = self.selected.last().copied().unwrap_or(d);
            if r.kind == Kind::Exit && self.selected.last() == Some(&d) {
                self.selected.pop();
            }
            if d.saturating_sub(base) >= self.max {
                continue;
            }
            match (self.inside, r.kind) {
                (None, Kind::Entry) if chosen => self.inside = Some(d),
                (None, _) => continue,
                (Some(s), Kind::Exit) if d <= s => {
                    self.inside = None;
                    if d < s {
                        continue; // an exit below the selected call: unbalanced
                    }
                }
                _ => {}
            }
            // Shown at the number of shown calls open around it (a level
            // the limit hid between two selected calls takes no place).
            match r.kind {
                Kind::Entry => {
                    r.depth = self.shown.len() as u16;
                    self.shown.push(d);
                }
                _ => {
                    while self.shown.last().is_some_and(|&o| o > d) {
                        self.shown.pop();
                    }
                    if self.shown.last() == Some(&d) {
                        self.shown.pop();
                    }
                    r.depth = self.shown.len() as u16;
                }
            }
            return Some(Ok(r));
        }
    }
}

/// The next record of a filter that holds entries back: one it released
/// already, else what `take` makes of `inner`'s next record (it puts what
/// it releases in `ready`, in order).
fn held_next(
    ready: &mut VecDeque<Record>,
    inner: &mut Records,
    mut take: impl FnMut(Record, &mut VecDeque<Record>),
) -> Option<Result<Record, DataError>> {
    loop {
        if let Some(r) = ready.pop_front() {
            return Some(Ok(r));
        }
        match inner.next()? {
            Ok(r) => take(r, ready),
            Err(e) => return Some(Err(e)),
        }
    }
}

/// The waiting entries of `open` (not released yet) go to `ready`, in
/// order, and count as released.
fn release_waiting(open: &mut [(Record, bool)], ready: &mut VecDeque<Record>) {
    for (a, done) in open.iter_mut().filter(|(_, d)| !*d) {
        ready.push_back(a.clone());
        *done = true;
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
        let (min, open) = (self.min, &mut self.open);
        held_next(&mut self.ready, &mut self.inner, |r, ready| {
            match r.kind {
                Kind::Entry => open.push((r, false)),
                Kind::Exit => match open.pop() {
                    Some((e, released)) => {
                        let keep = released || r.time.saturating_sub(e.time) >= min;
                        if keep && !released {
                            release_waiting(open, ready);
                            ready.push_back(e);
                        }
                        if keep {
                            ready.push_back(r);
                        }
                    }
                    // An exit whose entry predates the recording: shown.
                    None => ready.push_back(r),
                },
                _ => ready.push_back(r),
            }
        })
    }
}

/// A thread's records of the calls of the selected functions and of their
/// callers only (uftrace's `-C`): entries wait (one per open call) until
/// a selected call begins inside them, which releases them; a call
/// nothing selected began in leaves no record. A selected call's own
/// callees are left out unless selected themselves.
struct CallerFiltered {
    inner: Records,
    symbols: Arc<[u64]>,
    callers: Arc<[bool]>,
    /// Open calls' entries, and whether each was released.
    open: Vec<(Record, bool)>,
    ready: VecDeque<Record>,
}

impl Iterator for CallerFiltered {
    type Item = Result<Record, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (symbols, callers, open) = (&self.symbols, &self.callers, &mut self.open);
        held_next(&mut self.ready, &mut self.inner, |r, ready| {
            match r.kind {
                Kind::Entry => {
                    let i = symbols.partition_point(|&a| a <= r.addr);
                    let selected = i > 0 && callers[i - 1];
                    if selected {
                        release_waiting(open, ready);
                        ready.push_back(r.clone());
                    }
                    open.push((r, selected));
                }
                Kind::Exit => match open.pop() {
                    Some((_, true)) => ready.push_back(r),
                    Some(_) => {}
                    // An exit whose entry predates the recording.
                    None => {}
                },
                // Inside a selected call or one of its callers: kept.
                _ if open.last().is_some_and(|o| o.1) => ready.push_back(r),
                _ => {}
            }
        })
    }
}

/// Per-symbol selections of a filter, made once for all threads.
struct Selection {
    symbols: Arc<[u64]>,
    functions: Option<Arc<[bool]>>,
    notrace: Arc<[bool]>,
    callers: Option<Arc<[bool]>>,
    /// Per symbol: smaller than `-Z` asks (None: no `-Z`).
    small: Option<Arc<[bool]>>,
}

/// One thread's records as `filter` selects them.
fn filtered(
    data: &DataDir,
    tid: i32,
    filter: &ReplayFilter,
    sel: &Selection,
) -> Result<Records, DataError> {
    let max = match filter.max_depth {
        0 => DEFAULT_MAX_DEPTH,
        d => d,
    };
    let spans = data.sched.get(&tid).filter(|s| !s.is_empty());
    let by_function = sel.functions.is_some() || !filter.notrace.is_empty();
    // The depth limit applies to the depths shown: the stream's own unless
    // schedule events or a function filter change them.
    // (The callers of a selected call deeper than the limit are shown.)
    let late_limit = spans.is_some() || by_function || sel.callers.is_some();
    let mut stream: Records = Box::new(data.stream(tid)?);
    if let Some(small) = sel.small.clone() {
        // Left out before depths are counted: callees take their place.
        let symbols = sel.symbols.clone();
        stream = Box::new(stream.filter(move |r| match r {
            Ok(r) if matches!(r.kind, Kind::Entry | Kind::Exit) => {
                let i = symbols.partition_point(|&a| a <= r.addr);
                !(i > 0 && symbols[i - 1] == r.addr && small[i - 1])
            }
            _ => true,
        }));
    }
    let mut it: Records = Box::new(DisplayDepth {
        inner: stream,
        depth: 0,
        set: true,
        first: true,
        max: if late_limit { u16::MAX } else { max },
    });
    if let Some(spans) = spans {
        it = Box::new(crate::sched::SchedMerged {
            inner: it.peekable(),
            spans: spans.iter().copied().collect(),
            depth: 0,
            exit: None,
            started: false,
        });
    }
    if by_function {
        it = Box::new(FunctionFiltered {
            inner: it,
            symbols: sel.symbols.clone(),
            functions: sel.functions.clone(),
            notrace: sel.notrace.clone(),
            inside: None,
            hidden: None,
            selected: Vec::new(),
            max: if sel.functions.is_some() {
                max
            } else {
                u16::MAX
            },
            shown: Vec::new(),
        });
    }
    if let Some(callers) = &sel.callers {
        it = Box::new(CallerFiltered {
            inner: it,
            symbols: sel.symbols.clone(),
            callers: callers.clone(),
            open: Vec::new(),
            ready: VecDeque::new(),
        });
    }
    // (With -F the limit was applied, from each selected call.)
    if late_limit && sel.functions.is_none() {
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
        callers: if filter.callers.is_empty() {
            None
        } else {
            Some(select(data, &filter.callers, "-C")?.into())
        },
        small: (filter.min_size > 0).then(|| {
            data.symbols
                .iter()
                .map(|s| data.function_size(s.0) < filter.min_size)
                .collect()
        }),
    };
    let mut threads = Vec::new();
    for &t in &data.tids {
        if filter.tids.is_empty() || filter.tids.contains(&t) {
            threads.push((t, filtered(data, t, filter, &sel)?));
        }
    }
    Ok(threads)
}
