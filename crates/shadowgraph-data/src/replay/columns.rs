//! The columns left of the function: uftrace's durations and `-f` fields.

use crate::dir::{DataDir, DataError};
use crate::format::{Kind, Record};
use std::io::{self, Write};

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
    /// Every field, in the order they show.
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

    /// The field's name as `-f` takes it.
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
pub(super) struct Columns<'a> {
    data: &'a DataDir,
    fields: Vec<Field>,
    /// Per thread: ` [   tid]`.
    tids: Vec<Vec<u8>>,
    /// The program's name, right-aligned in 15.
    task: Vec<u8>,
    /// Per thread: its name since a task-name event, likewise.
    renamed: Vec<Option<Vec<u8>>>,
    /// Per thread: the time of its previous line.
    last: Vec<Option<u64>>,
    /// The recording's first record's time.
    first: u64,
}

impl<'a> Columns<'a> {
    /// The columns `fields` of threads `tids`' lines.
    pub(super) fn new(
        data: &'a DataDir,
        fields: &[Field],
        tids: &[i32],
    ) -> Result<Self, DataError> {
        let task = data.task_name();
        Ok(Columns {
            data,
            fields: fields.to_vec(),
            tids: tids
                .iter()
                .map(|t| format!(" [{t:>6}]").into_bytes())
                .collect(),
            task: format!(" {task:>15}").into_bytes(),
            renamed: vec![None; tids.len()],
            last: vec![None; tids.len()],
            first: if fields.contains(&Field::Elapsed) {
                first_time(data)?
            } else {
                0
            },
        })
    }

    /// Thread `k` takes the name a task-name event's text gives
    /// (`linux:task-name (comm="NAME")`).
    pub(super) fn rename(&mut self, k: usize, event: Option<&str>) {
        if let Some(n) = event.and_then(crate::sched::task_name) {
            self.renamed[k] = Some(format!(" {n:>15}").into_bytes());
        }
    }

    pub(super) fn header(&self) -> Option<String> {
        if self.fields.is_empty() {
            return None;
        }
        let titles: Vec<&str> = self.fields.iter().map(|f| f.title()).collect();
        Some(format!("#{}   FUNCTION", titles.join(" ")))
    }

    /// The columns of thread `k`'s line for a record at `time` of the
    /// function at `addr`, then ` | `.
    pub(super) fn write(
        &mut self,
        out: &mut impl Write,
        k: usize,
        time: u64,
        addr: Option<u64>,
        dur: Option<u64>,
    ) -> io::Result<()> {
        self.write_marked(out, k, time, addr, Err(dur))
    }

    /// As [`Columns::write`], the duration column holding `dur`'s text
    /// (right-aligned in its 10) where it is `Ok`.
    pub(super) fn write_marked(
        &mut self,
        out: &mut impl Write,
        k: usize,
        time: u64,
        addr: Option<u64>,
        dur: Result<&str, Option<u64>>,
    ) -> io::Result<()> {
        let last = self.last[k].replace(time);
        for f in &self.fields {
            match f {
                Field::Duration => {
                    out.write_all(b" ")?;
                    match dur {
                        Ok(text) => write!(out, "{text:>10}")?,
                        Err(d) => write_duration(out, d)?,
                    }
                }
                Field::Tid => out.write_all(&self.tids[k])?,
                Field::Addr => match addr {
                    Some(a) => write!(out, " {:>12x}", crate::loads::untagged(a))?,
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
                Field::Task => out.write_all(self.renamed[k].as_deref().unwrap_or(&self.task))?,
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

impl Columns<'_> {
    /// Blank columns as wide as a line's, then ` | ` (nothing without
    /// columns): uftrace's line between two threads' lines.
    pub(super) fn blank(&self, out: &mut impl Write) -> io::Result<()> {
        if self.fields.is_empty() {
            return Ok(());
        }
        let width: usize = self
            .fields
            .iter()
            .map(|f| match f {
                Field::Duration | Field::Delta | Field::Elapsed => 11,
                Field::Tid => 9,
                Field::Addr => 13,
                Field::Time => 19,
                Field::Task => 16,
                Field::Module => 17,
            })
            .sum();
        out.write_all(&SPACES[..width])?;
        out.write_all(b" | ")
    }
}

/// The time of the recording's first record (0 for none): where elapsed
/// times count from.
pub fn first_time(data: &DataDir) -> Result<u64, DataError> {
    let mut first = None::<u64>;
    for &t in &data.tids {
        if let Some(r) = data.stream(t)?.next() {
            let r = r?;
            first = Some(first.map_or(r.time, |f| f.min(r.time)));
        }
    }
    Ok(first.unwrap_or(0))
}

/// One replay line of thread `k` for record `r`: the columns, then the
/// text `pre`, `name`, `post` at `depth`.
pub(super) fn line(
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
        // Each column's title is as wide as its values, but TID's: uftrace
        // shows ` [%6d]` under `   TID  `.
        let widths = [10, 8, 12, 18, 10, 10, 15, 16];
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
