//! uftrace's schedule events: `perf-cpu<N>.dat` holds the kernel's perf
//! records (header `{u32 type, u16 misc, u16 size}`, then the body and a
//! `sample_id {u32 pid, u32 tid, u64 time}`, time on CLOCK_MONOTONIC, as
//! the `.dat` files). A thread switched out (type 14, misc 0x2000; 0x4000
//! more when pre-empted) and back in becomes a span, which the views show
//! as uftrace does: `/* linux:schedule */` (or `(pre-empted)`) inside the
//! call the thread was in, a child of it in reports. A thread's new name
//! (type 3, `record -E linux:task-name`) becomes an event there,
//! `/* linux:task-name (comm="NAME") */`.

use super::error::DataError;
use super::format::{Kind, Record};
use std::collections::HashMap;
use std::path::Path;

/// The address the views give a schedule span (above every 48-bit code
/// address a record can hold).
pub const SCHED_ADDR: u64 = (1 << 48) - 2;

/// The address the views give a task-name event ([`Kind::Event`], its
/// text in `args`; beside the replay's own, `replay::fstack`'s).
pub const TASK_NAME_ADDR: u64 = (1 << 48) - 6;

const PERF_RECORD_COMM: u32 = 3;
const PERF_RECORD_SWITCH: u32 = 14;
const MISC_SWITCH_OUT: u16 = 0x2000;
const MISC_SWITCH_OUT_PREEMPT: u16 = 0x4000;

/// A thread off the CPU: switched out at `out`, back at `back`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedSpan {
    /// When it left the CPU, ns.
    pub out: u64,
    /// When it came back, ns.
    pub back: u64,
    /// Whether it was pre-empted (not waiting of its own accord).
    pub preempted: bool,
}

/// What `perf-cpu*.dat` files say of each thread: when it was off its
/// processor, and its names.
#[derive(Debug, Default)]
pub struct PerfEvents {
    /// Each thread's spans off its processor, in time order.
    pub spans: HashMap<i32, Vec<SchedSpan>>,
    /// Each thread's new names (`comm`) and when it took them, in time
    /// order.
    pub names: HashMap<i32, Vec<(u64, String)>>,
}

/// Every `perf-cpu*.dat` of `dir`: each thread's spans and names. A
/// malformed record is an error naming the file and offset.
pub fn read(dir: &Path) -> Result<PerfEvents, DataError> {
    // (tid) → switches (time, out, preempted) from every CPU's file.
    let mut switches: HashMap<i32, Vec<(u64, bool, bool)>> = HashMap::new();
    let mut names: HashMap<i32, Vec<(u64, String)>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(PerfEvents::default());
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("perf-cpu") && name.ends_with(".dat")) {
            continue;
        }
        let path = e.path();
        let bad = |off: usize, why: &str| DataError {
            path: path.clone(),
            message: format!("offset {off}: {why}"),
        };
        let bytes = std::fs::read(&path).map_err(|e| DataError {
            path: path.clone(),
            message: format!("cannot read: {e}"),
        })?;
        let mut off = 0;
        while off < bytes.len() {
            let h = bytes
                .get(off..off + 8)
                .ok_or_else(|| bad(off, "truncated perf record header"))?;
            let kind = u32::from_le_bytes(h[..4].try_into().unwrap());
            let misc = u16::from_le_bytes(h[4..6].try_into().unwrap());
            let size = u16::from_le_bytes(h[6..8].try_into().unwrap()) as usize;
            if size < 8 + 16 {
                return Err(bad(off, "perf record too small for its sample id"));
            }
            let rec = bytes
                .get(off..off + size)
                .ok_or_else(|| bad(off, "truncated perf record"))?;
            // Every record ends with its sample id.
            let id = &rec[size - 16..];
            let tid = u32::from_le_bytes(id[4..8].try_into().unwrap()) as i32;
            let time = u64::from_le_bytes(id[8..16].try_into().unwrap());
            if kind == PERF_RECORD_COMM {
                // {u32 pid, u32 tid, the name NUL-terminated and padded}
                let name = rec.get(16..size - 16).unwrap_or_default();
                let name = name.split(|&b| b == 0).next().unwrap_or_default();
                let tid = rec
                    .get(12..16)
                    .map_or(tid, |b| u32::from_le_bytes(b.try_into().unwrap()) as i32);
                names
                    .entry(tid)
                    .or_default()
                    .push((time, String::from_utf8_lossy(name).into_owned()));
            } else if kind == PERF_RECORD_SWITCH {
                switches.entry(tid).or_default().push((
                    time,
                    misc & MISC_SWITCH_OUT != 0,
                    misc & MISC_SWITCH_OUT_PREEMPT != 0,
                ));
            }
            off += size;
        }
    }
    let mut spans = HashMap::new();
    for (tid, mut sw) in switches {
        sw.sort_by_key(|s| s.0);
        let mut v = Vec::new();
        let mut pending: Option<(u64, bool)> = None;
        for (time, out, preempted) in sw {
            if out {
                pending = Some((time, preempted));
            } else if let Some((t0, p)) = pending.take() {
                v.push(SchedSpan {
                    out: t0,
                    back: time,
                    preempted: p,
                });
            }
        }
        spans.insert(tid, v);
    }
    for v in names.values_mut() {
        v.sort_by_key(|n| n.0);
    }
    Ok(PerfEvents { spans, names })
}

/// A task-name event's text, as uftrace shows it: `linux:task-name
/// (comm="NAME")`.
fn task_name_event(name: &str) -> String {
    format!("linux:task-name (comm=\"{name}\")")
}

/// The name a task-name event's text ([`TASK_NAME_ADDR`]'s) gives.
pub fn task_name(event: &str) -> Option<&str> {
    event
        .strip_prefix("linux:task-name (comm=\"")?
        .strip_suffix("\")")
}

/// A thread's records with its schedule spans merged in as entry/exit
/// pairs of [`SCHED_ADDR`] (`more` set when pre-empted) at the depth of
/// the call they happened in.
pub struct SchedMerged<I: Iterator> {
    /// The thread's records.
    pub inner: std::iter::Peekable<I>,
    /// Its schedule spans not yet merged, in time order.
    pub spans: std::collections::VecDeque<SchedSpan>,
    /// Its new names not yet merged, in time order.
    pub names: std::collections::VecDeque<(u64, String)>,
    /// Depth of a record made now.
    pub depth: u16,
    /// The exit of a span whose entry went out last.
    pub exit: Option<Record>,
    /// A record of the thread went out already.
    pub started: bool,
    /// Events outside every call are shown too (`--event-full`; else
    /// left out, as uftrace's views leave them).
    pub full: bool,
}

impl<I: Iterator<Item = Result<Record, DataError>>> Iterator for SchedMerged<I> {
    type Item = Result<Record, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(x) = self.exit.take() {
            return Some(Ok(x));
        }
        let next_time = match self.inner.peek() {
            Some(Ok(r)) => Some(r.time),
            Some(Err(_)) => None,
            None => None,
        };
        // Only spans between the thread's first and last records are shown
        // (as uftrace does): before the first, or once the records ran out,
        // the thread was not in any traced call; nor, unless asked for,
        // those between two of its top-level calls (uftrace's views leave
        // events outside every call out unless `--event-full`).
        let outside = !self.started || (!self.full && self.depth == 0);
        while let (Some(s), Some(t)) = (self.spans.front(), next_time) {
            if !outside || s.out >= t {
                break;
            }
            self.spans.pop_front();
        }
        while let (Some(n), Some(t)) = (self.names.front(), next_time) {
            if !outside || n.0 >= t {
                break;
            }
            self.names.pop_front();
        }
        // A new name before the next record and span: its event.
        let name_due = self.names.front().is_some_and(|n| {
            next_time.is_some_and(|t| n.0 < t) && self.spans.front().is_none_or(|s| n.0 <= s.out)
        });
        if name_due {
            let (time, name) = self.names.pop_front().unwrap();
            return Some(Ok(Record {
                time,
                kind: Kind::Event,
                more: false,
                depth: self.depth,
                addr: TASK_NAME_ADDR,
                args: Some(task_name_event(&name).into()),
            }));
        }
        let due = self
            .spans
            .front()
            .is_some_and(|s| next_time.is_some_and(|t| s.out < t));
        if due {
            let s = self.spans.pop_front().unwrap();
            let rec = |kind, time| Record {
                time,
                kind,
                more: s.preempted,
                depth: self.depth,
                addr: SCHED_ADDR,
                args: None,
            };
            self.exit = Some(rec(Kind::Exit, s.back));
            return Some(Ok(rec(Kind::Entry, s.out)));
        }
        let r = self.inner.next()?;
        self.started = true;
        if let Ok(r) = &r {
            match r.kind {
                Kind::Entry => self.depth = r.depth.saturating_add(1),
                Kind::Exit => self.depth = r.depth,
                _ => {}
            }
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switch(out: bool, preempt: bool, tid: u32, time: u64) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&PERF_RECORD_SWITCH.to_le_bytes());
        let misc = if out { MISC_SWITCH_OUT } else { 0 }
            | if preempt { MISC_SWITCH_OUT_PREEMPT } else { 0 };
        v.extend_from_slice(&misc.to_le_bytes());
        v.extend_from_slice(&24u16.to_le_bytes());
        v.extend_from_slice(&tid.to_le_bytes());
        v.extend_from_slice(&tid.to_le_bytes());
        v.extend_from_slice(&time.to_le_bytes());
        v
    }

    /// Merges spans (out, back) into the records (time, kind, depth) of
    /// one thread: what comes out, as (time, kind, depth, schedule?).
    fn merged(
        records: &[(u64, Kind, u16)],
        spans: &[(u64, u64)],
        full: bool,
    ) -> Vec<(u64, Kind, u16, bool)> {
        let recs: Vec<Result<Record, DataError>> = records
            .iter()
            .map(|&(time, kind, depth)| {
                Ok(Record {
                    time,
                    kind,
                    more: false,
                    depth,
                    addr: 0x1000,
                    args: None,
                })
            })
            .collect();
        SchedMerged {
            inner: recs.into_iter().peekable(),
            spans: spans
                .iter()
                .map(|&(out, back)| SchedSpan {
                    out,
                    back,
                    preempted: true,
                })
                .collect(),
            names: Default::default(),
            depth: 0,
            exit: None,
            started: false,
            full,
        }
        .map(|r| r.unwrap())
        .map(|r| (r.time, r.kind, r.depth, r.addr == SCHED_ADDR))
        .collect()
    }

    /// A span inside a call is shown in it; one before the first record,
    /// or between two top-level calls, is not (uftrace's views leave
    /// events outside every call out), unless `--event-full` (`full`).
    #[test]
    fn spans_outside_every_call_are_left_out_unless_asked_for() {
        use Kind::{Entry, Exit};
        let records = [(10, Entry, 0), (20, Exit, 0), (40, Entry, 0), (60, Exit, 0)];
        // Before everything, between the calls, inside the second.
        let spans = [(1, 5), (25, 30), (45, 50)];
        let inside = [(45, Entry, 1, true), (50, Exit, 1, true)];
        let shown = merged(&records, &spans, false);
        let sched: Vec<_> = shown.iter().copied().filter(|r| r.3).collect();
        assert_eq!(sched, inside);
        assert_eq!(shown.len(), 6);
        let full = merged(&records, &spans, true);
        let sched: Vec<_> = full.iter().copied().filter(|r| r.3).collect();
        assert_eq!(
            sched,
            [
                (25, Entry, 0, true),
                (30, Exit, 0, true),
                inside[0],
                inside[1]
            ]
        );
    }

    #[test]
    fn spans_pair_across_cpus_and_bad_records_are_named() {
        let dir = std::env::temp_dir().join(format!("sg-sched-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Out on CPU 0, back on CPU 1; then pre-empted on CPU 1.
        let mut c0 = switch(true, false, 7, 100);
        c0.extend(switch(true, true, 7, 300));
        let mut c1 = switch(false, false, 7, 150);
        c1.extend(switch(false, false, 7, 340));
        std::fs::write(dir.join("perf-cpu0.dat"), &c0).unwrap();
        std::fs::write(dir.join("perf-cpu1.dat"), &c1).unwrap();
        let spans = read(&dir).unwrap().spans;
        assert_eq!(
            spans[&7],
            [
                SchedSpan {
                    out: 100,
                    back: 150,
                    preempted: false
                },
                SchedSpan {
                    out: 300,
                    back: 340,
                    preempted: true
                }
            ]
        );
        std::fs::write(dir.join("perf-cpu1.dat"), &c1[..30]).unwrap();
        let e = read(&dir).unwrap_err();
        assert!(
            e.to_string().contains("perf-cpu1.dat") && e.to_string().contains("offset 24"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
