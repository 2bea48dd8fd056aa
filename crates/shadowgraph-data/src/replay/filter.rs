//! What a view reads of each thread: its records at uftrace's display
//! depths, as `-F`, `-N`, `-T`, `-D`, `-t`, `-C`, `-Z` and `--tid` select
//! them.

use super::error::ReplayError;
use super::fstack::{Fstack, Records, Triggers};
use crate::dir::{DataDir, DataError};
use crate::format::{Kind, Record};
use crate::pattern::{FunctionName, Pattern};
use crate::trigger::{Actions, FilterMode, Trigger};
use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
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
    /// Triggers (`-T`, and `-F`/`-N` patterns with actions), in
    /// command-line order, after `functions` and `notrace`.
    pub triggers: Vec<Trigger>,
    /// Tracing starts switched off (`--disable`): a `trace_on` trigger
    /// switches it on. The first call shown is shown at its stack depth.
    pub disabled: bool,
    /// Library calls left out, their callees shown in their place
    /// (`--no-libcall`: as a `*@PLT,hide` trigger before every other, so
    /// that a later spec naming a library call decides for it; a
    /// recording without library calls has nothing to leave out).
    pub no_libcall: bool,
    /// The first call shown is shown at its stack depth, not at 0: the
    /// recording started with tracing off (`live --disable`), as uftrace
    /// shows it.
    pub from_stack_depth: bool,
    /// Only the records inside this range (`-r`); the calls open at its
    /// start are shown at their depth.
    pub time_range: Option<crate::time::TimeRange>,
    /// `-L LOC`: where functions are declared (a regex over the file of
    /// their `--srcline`), and whether those are hidden (`LOC@hide`) or
    /// the only ones shown; the others' callees shown in their place.
    pub locations: Vec<Location>,
}

/// A `-L LOC[@hide]` filter: a regex over the file a function is declared
/// in, and whether the functions there are hidden (else they are the only
/// ones shown).
#[derive(Clone, Debug)]
pub struct Location {
    re: regex::Regex,
    hide: bool,
}

impl Location {
    /// `LOC` or `LOC@hide`.
    pub fn parse(text: &str) -> Result<Location, String> {
        let (re, hide) = match text.strip_suffix("@hide") {
            Some(r) => (r, true),
            None => (text, false),
        };
        let last = |e: regex::Error| {
            e.to_string()
                .lines()
                .last()
                .unwrap_or("bad regex")
                .to_string()
        };
        regex::Regex::new(re)
            .map(|re| Location { re, hide })
            .map_err(|e| format!("-L `{re}`: {}", last(e)))
    }
}

impl ReplayFilter {
    /// Without the triggers that name no recorded function of `data`
    /// (which the views refuse).
    pub fn without_unmatched(mut self, data: &DataDir) -> ReplayFilter {
        self.triggers
            .retain(|t| each_match(data, &t.pattern, "-T", |_| {}).is_ok());
        self
    }

    /// Where its time range ends (`None`: it does not): calls still open
    /// there end there, as uftrace's views end them.
    pub fn stop_time(&self, data: &DataDir) -> Result<Option<u64>, ReplayError> {
        match self.time_range {
            Some(r) if r.stop.is_some() => {
                Ok(Some(*r.resolve(super::columns::first_time(data)?).end()))
            }
            _ => Ok(None),
        }
    }

    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
            && self.notrace.is_empty()
            && self.max_depth == 0
            && self.min_ns == 0
            && self.tids.is_empty()
            && self.callers.is_empty()
            && self.min_size == 0
            && self.triggers.is_empty()
            && !self.no_libcall
            && !self.disabled
            && self.time_range.is_none()
            && self.locations.is_empty()
    }
}

/// Which recorded functions a pattern list selects (in order: patterns add,
/// `!` patterns remove), by index in [`DataDir::symbols`]; a list of which
/// no pattern matches a recorded function is an error.
fn select(data: &DataDir, patterns: &[Pattern], flag: &str) -> Result<Vec<bool>, ReplayError> {
    let mut sel = vec![false; data.symbols.len()];
    for p in patterns {
        each_match(data, p, flag, |i| sel[i] = !p.text().starts_with('!'))?;
    }
    Ok(sel)
}

/// Calls `hit` with the index of each recorded function `p` matches; one
/// that matches none is an error.
fn each_match(
    data: &DataDir,
    p: &Pattern,
    flag: &str,
    mut hit: impl FnMut(usize),
) -> Result<(), ReplayError> {
    let mut any = false;
    for (i, (addr, symbol)) in data.symbols.iter().enumerate() {
        let site = FunctionName {
            function: &data.names[i],
            symbol,
            module: data.module_of(*addr),
            library: None,
        };
        if p.matches(&site) {
            hit(i);
            any = true;
        }
    }
    if !any {
        return Err(ReplayError::Filter(format!(
            "{flag} {}: matches no recorded function in {}",
            p.text(),
            data.dir.display()
        )));
    }
    Ok(())
}

/// `-L`: functions hidden by where they are declared (a function without
/// a known place is in none).
fn hide_by_location(
    data: &DataDir,
    locations: &[Location],
    actions: &mut [Actions],
) -> Result<(), ReplayError> {
    let mut known = false;
    for (i, (addr, _)) in data.symbols.iter().enumerate() {
        let file = data
            .srcline(*addr)
            .map(|l| l.rsplit_once(':').map_or(l, |f| f.0));
        known |= file.is_some();
        let at = |l: &Location| file.is_some_and(|f| l.re.is_match(f));
        let mut shown = locations.iter().filter(|l| !l.hide).peekable();
        let hidden =
            locations.iter().any(|l| l.hide && at(l)) || (shown.peek().is_some() && !shown.any(at));
        if hidden {
            actions[i].hide = true;
        }
    }
    if !known {
        return Err(ReplayError::Filter(format!(
            "-L: {} says where no function is declared (record with --srcline)",
            data.dir.display()
        )));
    }
    Ok(())
}

/// Each recorded function's trigger: `-F` (`functions`) and `-N`
/// (`notrace`) as filters, then every trigger spec in order.
fn triggers(data: &DataDir, filter: &ReplayFilter) -> Result<Triggers, ReplayError> {
    let n = data.symbols.len();
    let mut actions = vec![Actions::default(); n];
    let mode = |m| Actions {
        filter: Some(m),
        ..Default::default()
    };
    if !filter.functions.is_empty() {
        for (i, yes) in select(data, &filter.functions, "-F")?
            .into_iter()
            .enumerate()
        {
            if yes {
                actions[i].merge(&mode(FilterMode::In));
            }
        }
    }
    for (i, yes) in select(data, &filter.notrace, "-N")?.into_iter().enumerate() {
        if yes {
            actions[i].merge(&mode(FilterMode::Out));
        }
    }
    if filter.no_libcall {
        let hide = Actions {
            hide: true,
            ..Default::default()
        };
        let plt = Pattern::parse("*@PLT").expect("a valid pattern");
        // (None recorded: nothing to leave out, no error.)
        let _ = each_match(data, &plt, "--no-libcall", |i| actions[i].merge(&hide));
    }
    for t in &filter.triggers {
        each_match(data, &t.pattern, t.kind.flag(), |i| {
            actions[i].merge(&t.actions)
        })?;
    }
    if !filter.locations.is_empty() {
        hide_by_location(data, &filter.locations, &mut actions)?;
    }
    // As uftrace's: set by any spec that takes functions in, whatever
    // later specs say of them.
    let mode_in = !filter.functions.is_empty()
        || filter
            .triggers
            .iter()
            .any(|t| t.actions.filter == Some(FilterMode::In));
    let names = if actions.iter().any(|a| a.backtrace) {
        data.symbols
            .iter()
            .map(|s| Arc::from(data.name(s.0).as_ref()))
            .collect()
    } else {
        Arc::from([])
    };
    Ok(Triggers {
        symbols: data.symbols.iter().map(|s| s.0).collect(),
        actions: actions.into(),
        mode_in,
        names,
    })
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
    /// The record being read is the thread's first, an exit.
    first_exit: bool,
    max: u16,
    /// The depth the limit counts from: 0, or where the exits of calls
    /// the thread was inside of when its records begin (a forked child's
    /// inherited frames) leave it — uftrace's depth limit is a budget its
    /// entries spend and their exits give back, full at a thread's start
    /// and after each such exit.
    base: u16,
    jumps: Arc<crate::fixups::JumpFns>,
    /// The depth just inside the last `setjmp` entered, where a `longjmp`
    /// entry takes the depth back to (its next record is the `setjmp`'s
    /// exit), as uftrace's views count.
    setjmp_depth: Option<u16>,
    /// A `longjmp` just entered: the depth before its entry, its record's
    /// own depth and its address. The jump is made unless the record
    /// after it is the `longjmp`'s own exit (the tracer found the frames
    /// it left gone before the jump: a signal handler's call landed while
    /// it ran) or a call inside it (a signal handler's, before the jump):
    /// the `longjmp` is then a call as any other.
    jumping: Option<(u16, u16, u64)>,
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
            if let Some((before, at, addr)) = self.jumping {
                let inside = match r.kind {
                    Kind::Exit => r.addr == addr && r.depth == at,
                    Kind::Entry => r.depth > at,
                    Kind::Event | Kind::Lost => false,
                };
                if inside {
                    self.depth = before.saturating_add(1);
                }
                if r.kind != Kind::Event {
                    self.jumping = None;
                }
            }
            self.first_exit = false;
            if std::mem::replace(&mut self.first, false) && r.kind == Kind::Exit {
                self.set = false;
                self.first_exit = true;
            }
            match r.kind {
                Kind::Entry => {
                    if !std::mem::replace(&mut self.set, true) {
                        self.depth = r.depth;
                    }
                    let at = r.depth;
                    r.depth = self.depth;
                    self.depth = match self.setjmp_depth {
                        Some(d) if self.jumps.longjmp.binary_search(&r.addr).is_ok() => {
                            self.jumping = Some((r.depth, at, r.addr));
                            d
                        }
                        _ => self.depth.saturating_add(1),
                    };
                    if self.jumps.setjmp.binary_search(&r.addr).is_ok() {
                        self.setjmp_depth = Some(self.depth);
                    }
                }
                Kind::Exit => {
                    let inherited = !self.set && self.first_exit;
                    if !std::mem::replace(&mut self.set, true) {
                        self.depth = r.depth.saturating_add(1);
                    } else if r.depth.saturating_add(1) < self.depth
                        && self.jumps.setjmp.binary_search(&r.addr).is_ok()
                    {
                        // A `setjmp`'s exit shallower than the calls open:
                        // a jump back to it, whose `longjmp` these records
                        // do not show last (its frames found gone before
                        // it jumped). The calls above stay open. (A size
                        // filter only makes depths shallower than the
                        // records'.)
                        self.depth = r.depth.saturating_add(1);
                    }
                    self.depth = self.depth.saturating_sub(1);
                    r.depth = self.depth;
                    if inherited || self.depth < self.base {
                        self.base = self.depth;
                    }
                }
                Kind::Lost => {
                    r.depth = self.depth;
                    self.set = false;
                }
                Kind::Event => r.depth = self.depth,
            }
            if r.depth.saturating_sub(self.base) < self.max {
                return Some(Ok(r));
            }
        }
    }
}

/// The nesting a view shows without `-D`: uftrace's default limit (its
/// `OPT_DEPTH_DEFAULT`), calls deeper are not shown.
pub const DEFAULT_MAX_DEPTH: u16 = 1024;

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
fn release_waiting<T>(open: &mut [(Record, bool, T)], ready: &mut VecDeque<Record>) {
    for (a, done, _) in open.iter_mut().filter(|(_, d, _)| !*d) {
        ready.push_back(a.clone());
        *done = true;
    }
}

/// A thread's records without the calls shorter than `min`: entries wait
/// (at most one per open call) until their exit shows the duration; a kept
/// call's waiting callers are released before it, so times stay in order.
/// A `time=` trigger sets the threshold inside its function's calls, a
/// `trace` trigger keeps its function's calls whatever they last.
struct TimeFiltered {
    inner: Records,
    min: u64,
    triggers: Option<Arc<Triggers>>,
    /// Open calls' entries, whether each was released, and the threshold
    /// inside it.
    open: Vec<(Record, bool, u64)>,
    ready: VecDeque<Record>,
}

impl Iterator for TimeFiltered {
    type Item = Result<Record, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (min, open, tr) = (self.min, &mut self.open, &self.triggers);
        let of = |addr: u64| tr.as_ref().and_then(|t| t.of(addr));
        held_next(&mut self.ready, &mut self.inner, |r, ready| {
            match r.kind {
                Kind::Entry => {
                    let outer = open.last().map_or(min, |o| o.2);
                    let here = of(r.addr).and_then(|a| a.time_ns).unwrap_or(outer);
                    open.push((r, false, here));
                }
                Kind::Exit => match open.pop() {
                    Some((e, released, threshold)) => {
                        let always = of(r.addr).is_some_and(|a| a.always);
                        let keep = released || always || r.time.saturating_sub(e.time) >= threshold;
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

/// A symbol's size, and the size its `size=` trigger sets.
type SymbolSize = (u64, Option<u64>);

/// A thread's records without the calls of functions smaller than the
/// size in force (uftrace's `-Z`, and `size=` triggers, which set it for
/// their function's own call and the calls inside it): a function of
/// unknown size is kept.
struct SizeFiltered {
    inner: Records,
    symbols: Arc<[u64]>,
    sizes: Arc<[SymbolSize]>,
    /// The size in force in each open call (the outermost: `-Z`'s).
    open: Vec<u64>,
    /// `-Z`'s (0: none), for exits whose entries predate the recording.
    min: u64,
}

impl Iterator for SizeFiltered {
    type Item = Result<Record, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let r = match self.inner.next()? {
                Ok(r) if matches!(r.kind, Kind::Entry | Kind::Exit) => r,
                other => return Some(other),
            };
            let i = self.symbols.partition_point(|&a| a <= r.addr);
            let known = (i > 0 && self.symbols[i - 1] == r.addr).then(|| self.sizes[i - 1]);
            let limit = if r.kind == Kind::Entry {
                let outer = self.open.last().copied().unwrap_or(self.min);
                let here = known.and_then(|k| k.1).unwrap_or(outer);
                self.open.push(here);
                here
            } else if self.open.len() > 1 {
                self.open.pop().unwrap_or(self.min)
            } else {
                self.min
            };
            if known.is_none_or(|(size, _)| size >= limit) {
                return Some(Ok(r));
            }
        }
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
    open: Vec<(Record, bool, ())>,
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
                    open.push((r, selected, ()));
                }
                Kind::Exit => match open.pop() {
                    Some((_, true, _)) => ready.push_back(r),
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
    /// Filters and triggers (None: neither, nor `--disable`).
    triggers: Option<Arc<Triggers>>,
    /// Whether a trigger sets a time threshold or keeps calls from it.
    timed: bool,
    callers: Option<Arc<[bool]>>,
    /// Per symbol: its size, and the `size=` its triggers set (None:
    /// neither `-Z` nor a `size=` trigger).
    sizes: Option<Arc<[SymbolSize]>>,
    /// Tracing on, shared by every thread's filters.
    enabled: Rc<Cell<bool>>,
    /// The timestamps shown (`-r`).
    range: Option<std::ops::RangeInclusive<u64>>,
    jumps: Arc<crate::fixups::JumpFns>,
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
    // The depth limit applies to the depths shown: the stream's own unless
    // schedule events or a function filter change them.
    // (The callers of a selected call deeper than the limit are shown.)
    let late_limit = spans.is_some() || sel.triggers.is_some() || sel.callers.is_some();
    let mut stream: Records = Box::new(data.stream(tid)?);
    if let Some(range) = sel.range.clone() {
        // (Errors pass: they are shown.)
        stream =
            Box::new(stream.filter(move |r| r.as_ref().map_or(true, |r| range.contains(&r.time))));
    }
    // From a range's start, the records begin at their own depth; so do
    // those of tracing switched on by a trigger after starting off (as
    // uftrace's views set no display depth then).
    let from_start = filter.time_range.is_some_and(|r| r.start.is_some())
        || filter.disabled
        || filter.from_stack_depth;
    if let Some(sizes) = sel.sizes.clone() {
        // Left out before depths are counted: callees take their place.
        stream = Box::new(SizeFiltered {
            inner: stream,
            symbols: sel.symbols.clone(),
            sizes,
            open: vec![filter.min_size],
            min: filter.min_size,
        });
    }
    let mut it: Records = Box::new(DisplayDepth {
        inner: stream,
        depth: 0,
        set: !from_start,
        first: true,
        first_exit: false,
        max: if late_limit { u16::MAX } else { max },
        base: 0,
        jumps: sel.jumps.clone(),
        setjmp_depth: None,
        jumping: None,
    });
    // (With `--no-event` too: the task column follows them.)
    let names = data.task_names.get(&tid).filter(|n| !n.is_empty());
    if spans.is_some() || names.is_some() {
        it = Box::new(crate::sched::SchedMerged {
            inner: it.peekable(),
            spans: spans.into_iter().flatten().copied().collect(),
            names: names.into_iter().flatten().cloned().collect(),
            depth: 0,
            exit: None,
            started: false,
            full: data.events_outside_shown(),
        });
    }
    // As uftrace's views: the time and caller filters first, on every
    // call (a trigger switching tracing in a call they leave out does not
    // fire), then filters and triggers.
    if filter.min_ns > 0 || sel.timed {
        it = Box::new(TimeFiltered {
            inner: it,
            min: filter.min_ns,
            triggers: sel.triggers.clone().filter(|_| sel.timed),
            open: Vec::new(),
            ready: VecDeque::new(),
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
    if let Some(t) = &sel.triggers {
        // Applies the depth limit too, restarted at each filter call.
        let mut f = Fstack::new(it, t.clone(), max, sel.enabled.clone());
        if from_start {
            f.show_from_stack_depth();
        }
        it = Box::new(f);
    }
    if late_limit && sel.triggers.is_none() {
        it = Box::new(it.filter(move |r| r.as_ref().map_or(true, |r| r.depth < max)));
    }
    Ok(it)
}

/// [`thread_records`] of each recording of `datas` (a program and those
/// it became by exec, in order): (thread, its records, the recording's
/// index); a later recording's threads only those `--tid` names that it
/// ran.
pub(crate) fn session_threads(
    datas: &[&DataDir],
    filter: &ReplayFilter,
) -> Result<Vec<(i32, Records, usize)>, ReplayError> {
    let mut out = Vec::new();
    for (i, d) in datas.iter().enumerate() {
        if let Some(f) = session_filter(i, d, filter) {
            out.extend(thread_records(d, &f)?.into_iter().map(|(t, r)| (t, r, i)));
        }
    }
    Ok(out)
}

/// `filter` for the `i`th of a recording's sessions (the recording first,
/// then the programs started by exec): its threads only, none if it ran
/// none of those asked for. Only the recording's own must have them all.
pub(crate) fn session_filter(
    i: usize,
    data: &DataDir,
    filter: &ReplayFilter,
) -> Option<ReplayFilter> {
    let mut f = filter.clone();
    if i > 0 && !f.tids.is_empty() {
        f.tids.retain(|t| data.tids.contains(t));
        if f.tids.is_empty() {
            return None;
        }
    }
    Some(f)
}

/// Each selected thread's records as `filter` selects them (what every
/// view reads): only each thread's next record (and, with a time filter,
/// its open calls' entries) is in memory. The threads' iterators share
/// whether tracing is on (`trace_on`/`trace_off` triggers switch it for
/// all): read them in time order, as the views do.
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
    let any_trigger = !(filter.functions.is_empty()
        && filter.notrace.is_empty()
        && filter.triggers.is_empty()
        && filter.locations.is_empty()
        && !filter.no_libcall
        && !filter.disabled);
    let triggers = if any_trigger {
        Some(Arc::new(triggers(data, filter)?))
    } else {
        None
    };
    let mut callers = if filter.callers.is_empty() {
        None
    } else {
        Some(select(data, &filter.callers, "-C")?)
    };
    if let Some(t) = &triggers {
        if t.actions.iter().any(|a| a.caller) {
            let c = callers.get_or_insert_with(|| vec![false; data.symbols.len()]);
            for (c, a) in c.iter_mut().zip(t.actions.iter()) {
                *c |= a.caller;
            }
        }
    }
    let sizes = {
        let size_of = |i: usize| {
            let t = triggers.as_ref().and_then(|t| t.actions.get(i));
            t.and_then(|a| a.size)
        };
        let sized = (0..data.symbols.len()).any(|i| size_of(i).is_some());
        (filter.min_size > 0 || sized).then(|| {
            (data.symbols.iter().enumerate())
                .map(|(i, s)| (data.function_size(s.0), size_of(i)))
                .collect()
        })
    };
    let sel = Selection {
        symbols: data.symbols.iter().map(|s| s.0).collect(),
        timed: triggers
            .as_ref()
            .is_some_and(|t| t.actions.iter().any(|a| a.time_ns.is_some() || a.always)),
        triggers,
        callers: callers.map(Into::into),
        sizes,
        enabled: Rc::new(Cell::new(!filter.disabled)),
        range: match &filter.time_range {
            Some(r) => Some(r.resolve(super::columns::first_time(data)?)),
            None => None,
        },
        jumps: Arc::new(crate::fixups::JumpFns::of(data)),
    };
    let mut threads = Vec::new();
    for &t in &data.tids {
        if filter.tids.is_empty() || filter.tids.contains(&t) {
            threads.push((t, filtered(data, t, filter, &sel)?));
        }
    }
    Ok(threads)
}

#[cfg(test)]
#[path = "display_depth_tests.rs"]
mod display_depth_tests;
