//! `report`: total time, self time and calls per function (uftrace's
//! layout), from the recorded entry/exit records of every thread.
//!
//! Total time counts a recursive function once per outermost call (nested
//! calls of the same function are inside it already); self time is the
//! function's own duration minus its direct children's.

use super::dir::DataDir;
use super::format::Kind;
use super::replay::{format_duration, thread_records, ReplayFilter};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;

/// A hasher for the per-record lookups by address (and thread): one
/// multiply per word instead of SipHash's rounds; the keys come from our
/// own recording, not from an adversary.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_i32(&mut self, v: i32) {
        self.write_u64(v as u32 as u64);
    }
}

type AddrMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;

/// One function's row of `report`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuncStats {
    /// Time inside its outermost calls, ns.
    pub total: u64,
    /// Time inside its calls but not in their callees, ns.
    pub self_time: u64,
    /// Calls made.
    pub calls: u64,
    /// Every call's time added up, recursive ones too, ns (uftrace's
    /// average divides it by the calls).
    pub total_all: u64,
    /// The shortest and longest call, ns.
    pub total_min: u64,
    /// See `total_min`.
    pub total_max: u64,
    /// The least and most self time of a call, ns.
    pub self_min: u64,
    /// See `self_min`.
    pub self_max: u64,
}

impl FuncStats {
    /// A call's time and self time counted in; `outermost`: no call of the
    /// same function is under way around it.
    fn add(&mut self, dur: u64, self_ns: u64, outermost: bool) {
        let first = self.calls == 0;
        self.calls += 1;
        if outermost {
            self.total += dur;
        }
        self.total_all += dur;
        self.self_time += self_ns;
        self.total_min = if first { dur } else { self.total_min.min(dur) };
        self.total_max = self.total_max.max(dur);
        self.self_min = if first {
            self_ns
        } else {
            self.self_min.min(self_ns)
        };
        self.self_max = self.self_max.max(self_ns);
    }

    /// `other`'s calls counted in too.
    fn merge(&mut self, other: &FuncStats) {
        if other.calls == 0 {
            return;
        }
        let first = self.calls == 0;
        self.total += other.total;
        self.self_time += other.self_time;
        self.total_all += other.total_all;
        self.total_min = if first {
            other.total_min
        } else {
            self.total_min.min(other.total_min)
        };
        self.total_max = self.total_max.max(other.total_max);
        self.self_min = if first {
            other.self_min
        } else {
            self.self_min.min(other.self_min)
        };
        self.self_max = self.self_max.max(other.self_max);
        self.calls += other.calls;
    }

    /// The average time of a call, ns.
    pub fn total_avg(&self) -> u64 {
        self.total_all.checked_div(self.calls).unwrap_or(0)
    }

    /// The average self time of a call, ns.
    pub fn self_avg(&self) -> u64 {
        self.self_time.checked_div(self.calls).unwrap_or(0)
    }
}

/// Sort order of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// By total time, largest first.
    Total,
    /// By self time, largest first.
    SelfTime,
    /// By calls, most first.
    Calls,
    /// By name.
    Name,
    /// By a column of [`Field`] other than those above, largest first.
    Column(Field),
}

/// A column of `report`, in uftrace's order (its `-f` fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// `total`: time in outermost calls.
    Total,
    /// `total-avg`.
    TotalAvg,
    /// `total-min`.
    TotalMin,
    /// `total-max`.
    TotalMax,
    /// `self`: time in the function's own code.
    SelfTime,
    /// `self-avg`.
    SelfAvg,
    /// `self-min`.
    SelfMin,
    /// `self-max`.
    SelfMax,
    /// `call`: calls.
    Call,
    /// `size`: the function's bytes (to the next symbol or the end of its
    /// object's code, as uftrace counts them).
    Size,
}

impl Field {
    /// Every field, in the order they are shown.
    pub const ALL: [Field; 10] = [
        Field::Total,
        Field::TotalAvg,
        Field::TotalMin,
        Field::TotalMax,
        Field::SelfTime,
        Field::SelfAvg,
        Field::SelfMin,
        Field::SelfMax,
        Field::Call,
        Field::Size,
    ];

    /// Its name in `-f` and `-s` (`-s` takes `_` for `-` too).
    pub fn name(self) -> &'static str {
        [
            "total",
            "total-avg",
            "total-min",
            "total-max",
            "self",
            "self-avg",
            "self-min",
            "self-max",
            "call",
            "size",
        ][self as usize]
    }

    fn header(self) -> &'static str {
        [
            "Total time",
            "Total avg",
            "Total min",
            "Total max",
            "Self time",
            "Self avg",
            "Self min",
            "Self max",
            "Calls",
            "Size",
        ][self as usize]
    }

    /// Its value for a function of stats `s` and `size` bytes.
    fn value(self, s: &FuncStats, size: u64) -> u64 {
        match self {
            Field::Size => size,
            Field::Total => s.total,
            Field::TotalAvg => s.total_avg(),
            Field::TotalMin => s.total_min,
            Field::TotalMax => s.total_max,
            Field::SelfTime => s.self_time,
            Field::SelfAvg => s.self_avg(),
            Field::SelfMin => s.self_min,
            Field::SelfMax => s.self_max,
            Field::Call => s.calls,
        }
    }
}

/// The averages `report` shows in place of its default columns (uftrace's
/// `--avg-total`, `--avg-self`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Averages {
    /// Total time, self time, calls.
    #[default]
    None,
    /// Average, least and most time of a call.
    Total,
    /// The same of self time.
    SelfTime,
}

/// The columns and the order of `report`'s rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Shown left of the function, in [`Field::ALL`]'s order.
    pub fields: Vec<Field>,
    /// Compared in turn.
    pub keys: Vec<SortKey>,
    /// Where each function is declared, after its name (`--srcline`, as
    /// the recording says).
    pub srcline: bool,
}

impl Layout {
    /// From uftrace's options: `-f FIELDS` (`+F,…` adds to the default
    /// columns, `all`, `none`), `-s KEYS` (comma-separated; `avg`, `min`,
    /// `max` mean those of `averages`), `--avg-total`/`--avg-self`.
    pub fn parse(
        fields: Option<&str>,
        keys: Option<&str>,
        averages: Averages,
    ) -> Result<Layout, String> {
        let default_fields = match averages {
            Averages::None => vec![Field::Total, Field::SelfTime, Field::Call],
            Averages::Total => vec![Field::TotalAvg, Field::TotalMin, Field::TotalMax],
            Averages::SelfTime => vec![Field::SelfAvg, Field::SelfMin, Field::SelfMax],
        };
        let fields = match fields {
            None => default_fields,
            Some("none") => Vec::new(),
            Some(spec) => {
                let (mut chosen, rest) = match spec.strip_prefix('+') {
                    Some(rest) => (default_fields, rest),
                    None => (Vec::new(), spec),
                };
                for f in rest.split(',') {
                    if f == "all" {
                        chosen = Field::ALL.to_vec();
                        break;
                    }
                    let Some(&field) = Field::ALL.iter().find(|x| x.name() == f) else {
                        let all: Vec<&str> = Field::ALL.iter().map(|x| x.name()).collect();
                        return Err(format!(
                            "unknown field `{f}` (possible fields: {})",
                            all.join(" ")
                        ));
                    };
                    chosen.push(field);
                }
                chosen.sort();
                chosen.dedup();
                chosen
            }
        };
        let keys = match keys {
            None => vec![match averages {
                Averages::None => SortKey::Total,
                Averages::Total => SortKey::Column(Field::TotalAvg),
                Averages::SelfTime => SortKey::Column(Field::SelfAvg),
            }],
            Some(spec) => spec
                .split(',')
                .map(|k| sort_key(k, averages))
                .collect::<Result<_, _>>()?,
        };
        Ok(Layout {
            fields,
            keys,
            srcline: false,
        })
    }
}

/// One `-s` key.
fn sort_key(k: &str, averages: Averages) -> Result<SortKey, String> {
    let k = k.replace('_', "-");
    let of = |total: Field, self_time: Field| match averages {
        Averages::SelfTime => Ok(SortKey::Column(self_time)),
        Averages::Total => Ok(SortKey::Column(total)),
        Averages::None => Err(format!(
            "sort key `{k}` needs --avg-total or --avg-self (or use total-{k}, self-{k})"
        )),
    };
    match k.as_str() {
        "total" => Ok(SortKey::Total),
        "self" => Ok(SortKey::SelfTime),
        "call" | "calls" => Ok(SortKey::Calls),
        "func" => Ok(SortKey::Name),
        "avg" => of(Field::TotalAvg, Field::SelfAvg),
        "min" => of(Field::TotalMin, Field::SelfMin),
        "max" => of(Field::TotalMax, Field::SelfMax),
        other => match Field::ALL.iter().find(|f| f.name() == other) {
            Some(&f) => Ok(SortKey::Column(f)),
            None => Err(format!(
                "unknown sort key `{other}` (total, self, call, func, \
                 total-avg, total-min, total-max, self-avg, self-min, self-max; \
                 avg, min, max with --avg-total or --avg-self)"
            )),
        },
    }
}

/// Per function statistics, keyed by the address of the first function
/// seen under its name: functions that show alike (C++ overloads and
/// clones, in the simple demangled form) are one row, as in uftrace's
/// report. `per_thread` keys them by thread too.
pub fn collect(
    data: &DataDir,
    per_thread: bool,
    filter: &ReplayFilter,
) -> Result<HashMap<(i32, u64), FuncStats>, ReportError> {
    let mut stats: AddrMap<(i32, u64), FuncStats> = AddrMap::default();
    let mut first_of: AddrMap<u64, u64> = AddrMap::default();
    let mut by_name = HashMap::new();
    let mut function = |addr: u64| -> u64 {
        *first_of
            .entry(addr)
            .or_insert_with(|| *by_name.entry(data.name(addr).into_owned()).or_insert(addr))
    };
    let stop = filter.stop_time(data)?;
    let setjmps = crate::fixups::JumpFns::of(data).setjmp;
    for (tid, records) in thread_records(data, filter)? {
        let key_tid = if per_thread { tid } else { 0 };
        let mut frames = Frames::default();
        let mut last = 0;
        for r in records {
            let r = r?;
            last = r.time;
            frames.first.get_or_insert(r.time);
            match r.kind {
                Kind::Entry => frames.push(function(r.addr), r.time),
                // Unwinds to the matching entry (records lost in between
                // leave unmatched frames: they are closed here too).
                Kind::Exit => {
                    let f = function(r.addr);
                    if setjmps.binary_search(&r.addr).is_ok() {
                        frames.jump_back(r.depth as usize, f);
                    }
                    frames.close(&mut stats, key_tid, r.time, Some(f));
                }
                Kind::Lost | Kind::Event => {}
            }
        }
        // Calls that never returned (the program was killed, or the
        // recording was cut short) count up to the thread's last record,
        // as in uftrace (or up to where a time range ends).
        frames.close(&mut stats, key_tid, stop.unwrap_or(last), None);
    }
    Ok(stats.into_iter().collect())
}

/// One thread's open calls while its records are read.
#[derive(Default)]
struct Frames {
    /// (function, entry time, time in its children)
    stack: Vec<(u64, u64, u64)>,
    /// The thread's first record's time: where the calls it was inside
    /// of when its records begin are taken to start (a forked child's
    /// first records end the calls it inherited, as uftrace counts them).
    first: Option<u64>,
    /// The time of the calls closed outside any open one since the first
    /// record (the children of such an inherited call).
    outside: u64,
    /// Per function, its calls on the stack (a recursive function's total
    /// counts its outermost call only).
    active: AddrMap<u64, u32>,
}

impl Frames {
    fn push(&mut self, f: u64, time: u64) {
        self.stack.push((f, time, 0));
        *self.active.entry(f).or_default() += 1;
    }

    /// A `setjmp`'s exit at `depth` below the innermost open call (a
    /// `longjmp` came back): the calls above that depth stay open, not
    /// counted, and the one at it ends as `f`'s, as uftrace counts it.
    fn jump_back(&mut self, depth: usize, f: u64) {
        if depth + 1 >= self.stack.len() {
            return;
        }
        for (g, _, _) in self.stack.drain(depth + 1..) {
            let a = self.active.entry(g).or_default();
            *a = a.saturating_sub(1);
        }
        let at = &mut self.stack[depth];
        let a = self.active.entry(at.0).or_default();
        *a = a.saturating_sub(1);
        at.0 = f;
        *self.active.entry(f).or_default() += 1;
    }

    /// Closes the frames at time `end`, down to the first of `until` (all
    /// of them if None), into `stats`.
    fn close(
        &mut self,
        stats: &mut AddrMap<(i32, u64), FuncStats>,
        tid: i32,
        end: u64,
        until: Option<u64>,
    ) {
        if let (true, Some(f)) = (self.stack.is_empty(), until) {
            // The end of a call begun before the thread's first record.
            let dur = end.saturating_sub(self.first.unwrap_or(end));
            let s = stats.entry((tid, f)).or_default();
            s.add(dur, dur.saturating_sub(self.outside), true);
            self.outside = dur;
            return;
        }
        while let Some((f, start, children)) = self.stack.pop() {
            let dur = end.saturating_sub(start);
            let a = self.active.entry(f).or_default();
            *a = a.saturating_sub(1);
            let s = stats.entry((tid, f)).or_default();
            s.add(dur, dur.saturating_sub(children), *a == 0);
            match self.stack.last_mut() {
                Some(parent) => parent.2 += dur,
                None => self.outside += dur,
            }
            if Some(f) == until {
                break;
            }
        }
    }
}

/// Sorts report rows ((tid, address), stats, name) by `sort` (largest
/// first; names ascending), then by name and thread. `key` gives a row's
/// (total, self, calls).
pub(crate) fn sort_rows<T>(
    rows: &mut [((i32, u64), T, String)],
    sort: SortKey,
    key: impl Fn(&T) -> (u64, u64, u64),
) {
    rows.sort_by(|a, b| {
        let (ka, kb) = (key(&a.1), key(&b.1));
        let o = match sort {
            SortKey::Total | SortKey::Column(_) => kb.0.cmp(&ka.0),
            SortKey::SelfTime => kb.1.cmp(&ka.1),
            SortKey::Calls => kb.2.cmp(&ka.2),
            SortKey::Name => a.2.cmp(&b.2),
        };
        o.then_with(|| a.2.cmp(&b.2)).then(a.0 .0.cmp(&b.0 .0))
    });
}

/// Writes the report by functions with the columns and order `layout`
/// gives (uftrace's `report -f`, `-s`, `--avg-total`, `--avg-self`).
pub fn report_with(
    data: &DataDir,
    layout: &Layout,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReportError> {
    report_sessions(&[data], layout, filter, out)
}

/// [`report_with`] of a recording and of the programs started by exec
/// during it, in one table (functions matched by name across them, as
/// uftrace's report counts every session).
pub fn report_sessions(
    datas: &[&DataDir],
    layout: &Layout,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReportError> {
    let mut by_name: HashMap<String, (FuncStats, u64)> = HashMap::new();
    // Where each name is declared (`--srcline`).
    let mut lines: HashMap<String, String> = HashMap::new();
    for (i, data) in datas.iter().enumerate() {
        let mut f = filter.clone();
        if i > 0 && !f.tids.is_empty() {
            f.tids.retain(|t| data.tids.contains(t));
            if f.tids.is_empty() {
                continue;
            }
        }
        for (k, s) in collect(data, false, &f)? {
            if let Some(l) = data.srcline(k.1).filter(|_| layout.srcline) {
                lines
                    .entry(data.name(k.1).into_owned())
                    .or_insert_with(|| l.to_string());
            }
            let e = by_name
                .entry(data.name(k.1).into_owned())
                .or_insert_with(|| (FuncStats::default(), data.function_size(k.1)));
            e.0.merge(&s);
        }
    }
    let mut rows: Vec<(FuncStats, String, u64)> =
        by_name.into_iter().map(|(n, (s, z))| (s, n, z)).collect();
    rows.sort_by(|(a, na, za), (b, nb, zb)| {
        let by = |k: &SortKey| match *k {
            SortKey::Total => b.total.cmp(&a.total),
            SortKey::SelfTime => b.self_time.cmp(&a.self_time),
            SortKey::Calls => b.calls.cmp(&a.calls),
            SortKey::Name => na.cmp(nb),
            SortKey::Column(f) => f.value(b, *zb).cmp(&f.value(a, *za)),
        };
        layout
            .keys
            .iter()
            .map(by)
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| na.cmp(nb))
    });
    let mut head = String::new();
    let mut rule = String::new();
    for f in &layout.fields {
        head.push_str(&format!("  {:>10}", f.header()));
        rule.push_str("  ==========");
    }
    // No columns: the names alone, no header (as uftrace's `-f none`).
    if !layout.fields.is_empty() {
        let src = if layout.srcline { " [Source]" } else { "" };
        writeln!(out, "{head}  Function{src}")?;
        writeln!(out, "{rule}  ====================")?;
    }
    for (s, name, size) in rows {
        let mut line = String::new();
        for f in &layout.fields {
            line.push_str("  ");
            match f {
                Field::Call | Field::Size => line.push_str(&format!("{:>10}", f.value(&s, size))),
                _ => line.push_str(&format_duration(Some(f.value(&s, size)))),
            }
        }
        match lines.get(&name) {
            Some(l) => writeln!(out, "{line}  {name} [{l}]")?,
            None => writeln!(out, "{line}  {name}")?,
        }
    }
    Ok(())
}

/// Writes the report.
pub fn report(
    data: &DataDir,
    sort: SortKey,
    per_thread: bool,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReportError> {
    if !per_thread {
        let layout = Layout {
            fields: vec![Field::Total, Field::SelfTime, Field::Call],
            keys: vec![sort],
            srcline: false,
        };
        return report_with(data, &layout, filter, out);
    }
    let stats = collect(data, per_thread, filter)?;
    let mut rows: Vec<((i32, u64), FuncStats, String)> = stats
        .into_iter()
        .map(|(k, s)| (k, s, data.name(k.1).into_owned()))
        .collect();
    sort_rows(&mut rows, sort, |s| (s.total, s.self_time, s.calls));
    if per_thread {
        writeln!(
            out,
            "    TID    Total time   Self time       Calls  Function"
        )?;
        writeln!(
            out,
            "  =======  ==========  ==========  ==========  ===================="
        )?;
    } else {
        writeln!(out, "  Total time   Self time       Calls  Function")?;
        writeln!(
            out,
            "  ==========  ==========  ==========  ===================="
        )?;
    }
    for ((tid, _), s, name) in rows {
        let (t, st) = (
            format_duration(Some(s.total)),
            format_duration(Some(s.self_time)),
        );
        if per_thread {
            writeln!(out, "  {tid:>7}  {t}  {st}  {:>10}  {name}", s.calls)?;
        } else {
            writeln!(out, "  {t}  {st}  {:>10}  {name}", s.calls)?;
        }
    }
    Ok(())
}

/// Why a report could not be written.
pub type ReportError = super::replay::ReplayError;
