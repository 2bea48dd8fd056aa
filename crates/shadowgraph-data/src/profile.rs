//! A profile tracer's data (`DIR/profile`, written by the agent at exit):
//! per thread and function, calls, total and self time and the sum of
//! squared durations; and its report (threads merged or not, sortable):
//! calls, total, self, average and standard deviation per function.

use super::dir::{DataDir, DataError};
use super::replay::{format_duration, ReplayError};
use super::report::SortKey;
use std::collections::HashMap;
use std::io::Write;

/// One function's totals (of one thread, or merged).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProfileRow {
    /// Calls made.
    pub calls: u64,
    /// Sum of every call's duration (recursive calls included), ns: the
    /// average's and the spread's.
    pub total: u64,
    /// `total` less the time in profiled callees, ns.
    pub self_time: u64,
    /// Sum of squared durations, ns².
    pub sum_sq: f64,
    /// Sum of the outermost calls' durations (a call inside another of
    /// the same function on its thread adds nothing), ns: the time spent
    /// in the function, as `report` totals recorded calls.
    pub outer: u64,
}

impl ProfileRow {
    fn add(&mut self, o: &ProfileRow) {
        self.calls += o.calls;
        self.total += o.total;
        self.self_time += o.self_time;
        self.sum_sq += o.sum_sq;
        self.outer += o.outer;
    }

    /// Mean duration of a call, ns (0 without calls).
    pub fn average(&self) -> u64 {
        self.total.checked_div(self.calls).unwrap_or(0)
    }

    /// The report's Stddev cell: blank for one call; a spread below half a
    /// nanosecond (calls that all take the same ticks) is still one, 0.
    fn stddev_cell(&self) -> String {
        match (self.calls, self.stddev()) {
            (0 | 1, _) => format_duration(None),
            (_, 0) => "  0.000 us".to_string(),
            (_, sd) => format_duration(Some(sd)),
        }
    }

    /// Sample standard deviation of the durations (0 for one call).
    pub fn stddev(&self) -> u64 {
        if self.calls < 2 {
            return 0;
        }
        let n = self.calls as f64;
        let s = self.total as f64;
        let var = (self.sum_sq - s * s / n) / (n - 1.0);
        var.max(0.0).sqrt().round() as u64
    }
}

/// Whether `data` is a profile tracer's directory.
pub fn is_profile(data: &DataDir) -> bool {
    data.info.get("tracer") == Some("profile")
}

/// The rows of `DIR/profile`, keyed by (tid, function address); checked:
/// a malformed line is an error naming the file and line.
pub fn read(data: &DataDir) -> Result<HashMap<(i32, u64), ProfileRow>, DataError> {
    let path = data.dir.join("profile");
    let bad = |m: String| DataError {
        path: path.clone(),
        message: m,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        bad(format!(
            "cannot read: {e} (a profile is written when the program exits)"
        ))
    })?;
    let mut rows = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let parsed = (|| {
            // v1 profiles have no outermost total: every call's, then.
            let (fields, outer) = match f.len() {
                6 => (&f[..], None),
                7 => (&f[..6], Some(f[6])),
                _ => return None,
            };
            let [tid, addr, calls, total, self_time, sum_sq] = fields[..] else {
                return None;
            };
            let addr = u64::from_str_radix(addr.strip_prefix("0x")?, 16).ok()?;
            let total: u64 = total.parse().ok()?;
            Some((
                (tid.parse().ok()?, addr),
                ProfileRow {
                    calls: calls.parse().ok()?,
                    total,
                    self_time: self_time.parse().ok()?,
                    sum_sq: sum_sq.parse().ok()?,
                    outer: outer.map_or(Some(total), |o| o.parse().ok())?,
                },
            ))
        })();
        let Some((k, row)) = parsed else {
            return Err(bad(format!(
                "line {}: malformed (expected tid, address, calls, total, self, sum of squares, outermost total)",
                n + 1
            )));
        };
        rows.entry(k).or_insert_with(ProfileRow::default).add(&row);
    }
    Ok(rows)
}

/// Writes the profile report: rows merged over threads (or per thread),
/// only the threads in `tids` if any, sorted by `sort`.
pub fn report(
    data: &DataDir,
    sort: SortKey,
    per_thread: bool,
    tids: &[i32],
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let mut merged: HashMap<(i32, u64), ProfileRow> = HashMap::new();
    for ((tid, addr), row) in read(data).map_err(ReplayError::Data)? {
        if !tids.is_empty() && !tids.contains(&tid) {
            continue;
        }
        let key = (if per_thread { tid } else { 0 }, addr);
        merged.entry(key).or_default().add(&row);
    }
    let mut rows: Vec<((i32, u64), ProfileRow, String)> = merged
        .into_iter()
        .map(|(k, r)| (k, r, data.name(k.1).into_owned()))
        .collect();
    super::report::sort_rows(&mut rows, sort, |r| (r.outer, r.self_time, r.calls));
    let tid_head = if per_thread { "    TID  " } else { "" };
    let tid_rule = if per_thread { "  =======" } else { "" };
    writeln!(
        out,
        "{tid_head}  Total time   Self time       Calls     Average      Stddev  Function"
    )?;
    writeln!(
        out,
        "{tid_rule}  ==========  ==========  ==========  ==========  ==========  ===================="
    )?;
    for ((tid, _), r, name) in rows {
        if per_thread {
            write!(out, "  {tid:>7}")?;
        }
        writeln!(
            out,
            "  {}  {}  {:>10}  {}  {}  {name}",
            format_duration(Some(r.outer)),
            format_duration(Some(r.self_time)),
            r.calls,
            format_duration(Some(r.average())),
            r.stddev_cell(),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stddev_of_known_durations() {
        // Durations 2, 4, 4, 4, 5, 5, 7, 9: sample stddev = sqrt(32/7).
        let d = [2u64, 4, 4, 4, 5, 5, 7, 9];
        let r = ProfileRow {
            calls: d.len() as u64,
            total: d.iter().sum(),
            self_time: 0,
            sum_sq: d.iter().map(|&x| (x * x) as f64).sum(),
            outer: 0,
        };
        assert_eq!(r.average(), 5);
        assert_eq!(r.stddev(), (32f64 / 7.0).sqrt().round() as u64);
        let one = ProfileRow {
            calls: 1,
            total: 10,
            self_time: 10,
            sum_sq: 100.0,
            outer: 10,
        };
        assert_eq!(one.stddev(), 0);
        assert_eq!(one.stddev_cell().trim(), "");
        let same = ProfileRow {
            calls: 3,
            total: 30,
            self_time: 30,
            sum_sq: 300.0,
            outer: 30,
        };
        assert_eq!(same.stddev_cell(), "  0.000 us");
        assert_eq!(r.stddev_cell(), format_duration(Some(r.stddev())));
    }
}
