//! `report --task`: per task (thread), the time its traced calls cover,
//! that time less what it spent off its processor, and how many calls it
//! made, in uftrace's layout.

#![forbid(unsafe_code)]

use super::dir::DataDir;
use super::replay::{format_duration, ReplayFilter};
use super::report::{collect, ReportError};
use super::sched::SCHED_ADDR;
use std::io::Write;

/// A column of `report --task`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskField {
    /// `total`: the time its calls cover (the sum of their self times).
    Total,
    /// `self`: that less the time it was switched out (schedule events).
    SelfTime,
    /// `func`: the calls it made.
    Func,
    /// `tid`: its thread id.
    Tid,
}

impl TaskField {
    /// uftrace's default columns.
    pub const DEFAULT: [TaskField; 4] = [Self::Total, Self::SelfTime, Self::Tid, Self::Func];

    /// `-f`'s list: `total`, `self`, `func`, `tid` in the order given,
    /// `+LIST` added to the default, `none`.
    pub fn parse_list(spec: &str) -> Result<Vec<TaskField>, String> {
        let named = |f: &str| match f {
            "total" => Some(Self::Total),
            "self" => Some(Self::SelfTime),
            "func" => Some(Self::Func),
            "tid" => Some(Self::Tid),
            _ => None,
        };
        let what = "a task field (total, self, func, tid, none)";
        crate::field_list::parse(spec, &Self::DEFAULT, named, what)
    }

    fn header(self) -> (&'static str, &'static str) {
        match self {
            Self::Total => ("Total time", "=========="),
            Self::SelfTime => (" Self time", "=========="),
            Self::Func => (" Num funcs", "=========="),
            Self::Tid => ("   TID", "======"),
        }
    }
}

/// One task's row: (total, self, calls).
type Row = (u64, u64, u64);

/// Writes the task report of the calls `filter` selects, largest total
/// first.
pub fn report_tasks(
    data: &DataDir,
    fields: &[TaskField],
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReportError> {
    let mut rows: std::collections::BTreeMap<i32, Row> = Default::default();
    for ((tid, f), s) in collect(data, true, filter)? {
        let r = rows.entry(tid).or_default();
        r.0 += s.self_time;
        // (Time off the processor is not the task's own; uftrace counts
        // its returns to the processor as calls.)
        if f == SCHED_ADDR {
            r.1 += s.total;
        }
        r.2 += s.calls;
    }
    let mut rows: Vec<(i32, Row)> = rows
        .into_iter()
        .map(|(t, (total, idle, calls))| (t, (total, total.saturating_sub(idle), calls)))
        .collect();
    rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    let name = data.task_name();
    if !fields.is_empty() {
        let (mut head, mut rule) = (String::new(), String::new());
        for f in fields {
            let (h, r) = f.header();
            head.push_str(&format!("  {h}"));
            rule.push_str(&format!("  {r}"));
        }
        writeln!(out, "{head}  Task name")?;
        writeln!(out, "{rule}  ====================")?;
    }
    for (tid, (total, own, calls)) in rows {
        let mut line = String::new();
        for f in fields {
            match f {
                TaskField::Total => line.push_str(&format!("  {}", format_duration(Some(total)))),
                TaskField::SelfTime => line.push_str(&format!("  {}", format_duration(Some(own)))),
                TaskField::Func => line.push_str(&format!("  {calls:>10}")),
                TaskField::Tid => line.push_str(&format!("  {tid:>6}")),
            }
        }
        writeln!(out, "{line}  {name:<16}")?;
    }
    Ok(())
}
