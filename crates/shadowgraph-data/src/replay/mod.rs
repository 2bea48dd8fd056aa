//! `replay`: the call graph with durations in uftrace's text layout,
//! byte for byte (design §8):
//!
//! ```text
//! # DURATION     TID     FUNCTION
//!             [  6970] | main() {
//!    0.691 us [  6970] |   atoi();
//!    9.914 us [  6970] | } /* main */
//! ```

mod columns;
mod error;
mod external;
mod filter;
mod flat;
mod fstack;

pub use columns::{first_time, format_duration, write_duration, Field};
pub use error::ReplayError;
pub use filter::{thread_records, Location, ReplayFilter, DEFAULT_MAX_DEPTH};
pub use flat::replay_flat;
pub use fstack::{Records, BACKTRACE_ADDR, ENDED_ADDR, STARTED_ADDR};

use crate::dir::{DataDir, DataError};
use crate::format::Kind;
use columns::{line, Columns};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;

pub(crate) use filter::{session_filter, session_threads};
use fstack::peek_time;

/// Writes the replay of every thread, merged by time.
pub fn replay(data: &DataDir, out: &mut impl Write) -> Result<(), ReplayError> {
    replay_filtered(data, &ReplayFilter::default(), out)
}

/// [`replay`] of what `filter` selects.
pub fn replay_filtered(
    data: &DataDir,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    replay_fields(data, filter, &Field::DEFAULT, out)
}

/// How `replay` lays its lines out beyond its columns (uftrace's options
/// of the same names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Look {
    /// `--no-merge`: a call without callees gets an entry and an exit
    /// line too, not one `f();` line.
    pub no_merge: bool,
    /// `--no-comment`: exit lines without the `/* name */` comment.
    pub no_comment: bool,
    /// `--column-view` (with `--column-offset`): each thread's lines
    /// indented by this many levels more than the previous thread's, in
    /// the order threads first show; 0: no columns.
    pub column_offset: u16,
    /// `--task-newline`: a blank line where the thread changes.
    pub task_newline: bool,
    /// `--srcline`: where each function is declared, after its entry (as
    /// the recording says: `record --srcline`); not with `no_comment`.
    pub srcline: bool,
    /// `--libname`: a library call's name followed by `@` and the library
    /// it goes to.
    pub libname: bool,
}

/// [`replay_filtered`] with `fields` left of each function.
pub fn replay_fields(
    data: &DataDir,
    filter: &ReplayFilter,
    fields: &[Field],
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    replay_with(data, filter, fields, Look::default(), out)
}

/// [`replay_fields`] laid out as `look` says.
pub fn replay_with(
    data: &DataDir,
    filter: &ReplayFilter,
    fields: &[Field],
    look: Look,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    replay_sessions(&[data], filter, fields, look, out)
}

/// [`replay_with`] of a recording (`datas[0]`) and of the programs started
/// by exec during it (the others, each a recording of its own), in one
/// stream by time, as uftrace shows a program that execs: a thread that
/// went on in another program is not listed among those that left calls
/// open. Columns come from the first.
pub fn replay_sessions(
    datas: &[&DataDir],
    filter: &ReplayFilter,
    fields: &[Field],
    look: Look,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let Some(&data) = datas.first() else {
        return Ok(());
    };
    // (Each stream's recording: `owner`.)
    let (threads, owner): (Vec<(i32, Records)>, Vec<usize>) = session_threads(datas, filter)?
        .into_iter()
        .map(|(t, r, i)| ((t, r), i))
        .unzip();
    let tids: Vec<i32> = threads.iter().map(|t| t.0).collect();
    // A thread that goes on in a later program (exec keeps the thread).
    let went_on: Vec<bool> = (0..tids.len())
        .map(|k| (0..tids.len()).any(|j| tids[j] == tids[k] && owner[j] > owner[k]))
        .collect();
    // One stream per thread, merged by time.
    let mut streams: Vec<std::iter::Peekable<Records>> =
        threads.into_iter().map(|(_, r)| r.peekable()).collect();
    let mut cols = Columns::new(data, fields, &tids)?;
    if let Some(h) = cols.header() {
        let src = if look.srcline { " [SOURCE]" } else { "" };
        writeln!(out, "{h}{src}")?;
    }
    // `/* file:line */` after an entry, where `--srcline` asks and the
    // recording knows.
    let srcline = |k: usize, addr: u64| -> String {
        match datas[owner[k]].srcline(addr) {
            Some(l) if look.srcline && !look.no_comment => format!(" /* {l} */"),
            _ => String::new(),
        }
    };
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
    // Per thread: when its records begin (again, after a LOST record): the
    // start of the calls open then, as uftrace times them.
    let mut since: Vec<Option<u64>> = vec![None; streams.len()];
    let mut lost = vec![false; streams.len()];
    // Per thread: the calls open at each display depth, for the list of
    // calls that never returned.
    let mut open: Vec<Vec<Option<u64>>> = vec![Vec::new(); streams.len()];
    // Per thread: its column (--column-view), in the order threads show.
    let mut column: Vec<Option<u16>> = vec![None; streams.len()];
    let mut columns = 0;
    let mut last_shown = None;
    // External data (`extern.dat`), shown among the calls at its times, as
    // the last thread shown's (the first's before any), at depth 0.
    let range = match &filter.time_range {
        Some(r) => r.resolve(first_time(data)?),
        None => 0..=u64::MAX,
    };
    let mut external = external::messages(data, &range).into_iter().peekable();
    let only_inside = !filter.functions.is_empty()
        || filter
            .triggers
            .iter()
            .any(|t| t.actions.filter == Some(crate::trigger::FilterMode::In));
    loop {
        let next_time = heap.peek().map(|Reverse((t, _))| *t);
        if let Some((t, msg)) = external.next_if(|m| next_time.is_none_or(|n| m.0 < n)) {
            let k = last_shown.unwrap_or(0).min(streams.len().saturating_sub(1));
            // (Under `-F`, only inside a call shown, as uftrace's events.)
            if streams.is_empty() || (only_inside && open[k].is_empty()) {
                continue;
            }
            cols.write_marked(out, k, t, None, Err(None))?;
            writeln!(out, "/* external-data: {msg} */")?;
            continue;
        }
        let Some(Reverse((_, k))) = heap.pop() else {
            break;
        };
        let r = streams[k].next().expect("peeked")?;
        let next = match streams[k].peek() {
            Some(Ok(n)) => Some(n.clone()),
            Some(Err(e)) => return Err(e.clone().into()),
            None => None,
        };
        if let Some(n) = &next {
            heap.push(Reverse((n.time, k)));
        }
        if r.kind == Kind::Lost {
            (since[k], lost[k]) = (None, true);
        } else if since[k].is_none() {
            since[k] = Some(r.time.saturating_sub(lost[k] as u64));
        }
        if std::mem::replace(&mut skip[k], false) {
            continue;
        }
        if r.kind == Kind::Event {
            let d = r.depth as usize;
            match r.addr {
                BACKTRACE_ADDR => {}
                STARTED_ADDR => {
                    let et = &mut entry_time[k];
                    if et.len() <= d {
                        et.resize(d + 1, None);
                    }
                    et[d] = Some(r.time);
                    continue;
                }
                ENDED_ADDR => {
                    open[k].truncate(d);
                    continue;
                }
                // A built-in event (`read=`) or a user's (an SDT marker's):
                // shown below.
                a if r.args.is_some()
                    && ((crate::events::FIRST..=crate::events::LAST).contains(&a)
                        || crate::events::is_user(a)) => {}
                // A new name: the thread's task column from here on,
                // shown unless events are not (`--no-event`), as uftrace.
                crate::sched::TASK_NAME_ADDR => {
                    cols.rename(k, r.args.as_deref());
                    if datas[owner[k]].events_hidden() {
                        continue;
                    }
                }
                _ => continue,
            }
        }
        if r.addr == crate::sched::SCHED_ADDR && datas[owner[k]].sched_hidden(r.more) {
            continue;
        }
        if look.task_newline && last_shown.is_some_and(|l| l != k) {
            cols.blank(out)?;
            writeln!(out)?;
        }
        last_shown = Some(k);
        let shift = if look.column_offset > 0 {
            let c = *column[k].get_or_insert_with(|| {
                columns += 1;
                columns - 1
            });
            c.saturating_mul(look.column_offset)
        } else {
            0
        };
        let at = |depth: u16| depth.saturating_add(shift);
        let d = r.depth as usize;
        match r.kind {
            Kind::Entry => {
                let name = shown_name(datas[owner[k]], r.addr, look.libname);
                // A leaf: its exit is the next record shown, of any thread
                // (the heap's next is this stream's), as uftrace merges.
                let next_shown = heap.peek().map(|Reverse(x)| x.1) == Some(k);
                match next {
                    Some(n)
                        if n.kind == Kind::Exit
                            && n.depth == r.depth
                            && n.addr == r.addr
                            && next_shown
                            && external.peek().is_none_or(|m| m.0 >= n.time)
                            && !look.no_merge =>
                    {
                        let dur = Some(n.time.saturating_sub(r.time));
                        if r.addr == crate::sched::SCHED_ADDR {
                            // uftrace's event line.
                            let tail = if r.more { " (pre-empted) */" } else { " */" };
                            line(
                                out,
                                &mut cols,
                                (k, &r, dur),
                                at(r.depth),
                                ("/* ", &name, tail),
                            )?;
                        } else {
                            let tail = match (&r.args, &n.args) {
                                (None, None) if name.ends_with(')') => ";".to_string(),
                                (a, ret) => format!(
                                    "({}){};",
                                    a.as_deref().unwrap_or(""),
                                    ret.as_deref()
                                        .map(|v| format!(" = {v}"))
                                        .unwrap_or_default()
                                ),
                            } + &srcline(k, r.addr);
                            line(
                                out,
                                &mut cols,
                                (k, &r, dur),
                                at(r.depth),
                                ("", &name, &tail),
                            )?;
                        }
                        skip[k] = true;
                    }
                    _ => {
                        let o = &mut open[k];
                        o.resize(d, None);
                        o.push(Some(r.addr));
                        let et = &mut entry_time[k];
                        if et.len() <= d {
                            et.resize(d + 1, None);
                        }
                        et[d] = Some(r.time);
                        // A name with its parameters (C++) gets no `()`,
                        // as in uftrace's replay.
                        let tail = match &r.args {
                            None if name.ends_with(')') => " {".to_string(),
                            a => format!("({}) {{", a.as_deref().unwrap_or("")),
                        } + &srcline(k, r.addr);
                        line(
                            out,
                            &mut cols,
                            (k, &r, None),
                            at(r.depth),
                            ("", &name, &tail),
                        )?;
                    }
                }
            }
            Kind::Exit => {
                open[k].truncate(d);
                // (A call open when the records begin lasted at least
                // since then; none for the record that begins them.)
                let start = entry_time[k]
                    .get_mut(d)
                    .and_then(Option::take)
                    .or(since[k].filter(|&s| s < r.time));
                let name = shown_name(datas[owner[k]], r.addr, look.libname);
                let dur = start.map(|s| r.time.saturating_sub(s));
                let head = match &r.args {
                    Some(v) => format!("}} = {v};"),
                    None => "}".to_string(),
                };
                if look.no_comment {
                    line(out, &mut cols, (k, &r, dur), at(r.depth), (&head, "", ""))?;
                } else {
                    let head = format!("{head} /* ");
                    line(
                        out,
                        &mut cols,
                        (k, &r, dur),
                        at(r.depth),
                        (&head, &name, " */"),
                    )?;
                }
            }
            Kind::Lost => {
                let n = r.addr.to_string();
                let text = ("/* LOST ", n.as_str(), " records!! */");
                line(out, &mut cols, (k, &r, None), at(r.depth + 1), text)?;
            }
            Kind::Event if r.addr != BACKTRACE_ADDR => {
                // A built-in event (`read:proc/statm (…)`), where the
                // thread is.
                let text = ("/* ", r.args.as_deref().unwrap_or(""), " */");
                line(out, &mut cols, (k, &r, None), at(r.depth), text)?;
            }
            Kind::Event => {
                // A backtrace line (a `backtrace` trigger): a frame the
                // next entry is inside of.
                cols.write_marked(out, k, r.time, None, Ok("backtrace"))?;
                let name = r.args.as_deref().unwrap_or("");
                writeln!(out, "/* [{:2}] {name} */", r.depth)?;
            }
        }
    }
    for (k, o) in open.iter_mut().enumerate() {
        if went_on[k] {
            o.clear();
        }
    }
    let names = |k: usize, addr: u64| datas[owner[k]].name(addr).into_owned();
    remaining(&names, &tids, &open, out)
}

/// The name `replay` shows for the function at `addr`: with `libname`, a
/// library call's followed by `@` and its library (uftrace's
/// `--libname`).
fn shown_name(data: &DataDir, addr: u64, libname: bool) -> std::borrow::Cow<'_, str> {
    let name = data.name(addr);
    match data.libname(addr).filter(|_| libname) {
        Some(lib) => format!("{name}@{lib}").into(),
        None => name,
    }
}

/// The records of `threads` merged into one stream by time (as uftrace's
/// views read them), each with its thread; a thread's own order is kept.
pub fn in_time_order(
    threads: Vec<(i32, Records)>,
) -> impl Iterator<Item = Result<(i32, crate::format::Record), DataError>> {
    let mut streams: Vec<(i32, std::iter::Peekable<Records>)> = threads
        .into_iter()
        .map(|(t, r)| (t, r.peekable()))
        .collect();
    let mut heap = BinaryHeap::new();
    let mut failed = None;
    for (k, (_, st)) in streams.iter_mut().enumerate() {
        match peek_time(st) {
            Ok(Some(t)) => heap.push(Reverse((t, k))),
            Ok(None) => {}
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    std::iter::from_fn(move || {
        if let Some(e) = failed.take() {
            return Some(Err(e));
        }
        let Reverse((_, k)) = heap.pop()?;
        let (tid, st) = &mut streams[k];
        let r = match st.next()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        match peek_time(st) {
            Ok(Some(t)) => heap.push(Reverse((t, k))),
            Ok(None) => {}
            Err(e) => failed = Some(e),
        }
        Some(Ok((*tid, r)))
    })
}

/// uftrace's closing list of the calls each thread left open (a crash, an
/// exit from inside a call, a thread never joined), innermost first.
fn remaining(
    name: &dyn Fn(usize, u64) -> String,
    tids: &[i32],
    open: &[Vec<Option<u64>>],
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let sched = crate::sched::SCHED_ADDR;
    // A thread whose only open "call" is a sched-out is not listed.
    let listed = |o: &Vec<Option<u64>>| {
        let calls: Vec<u64> = o.iter().flatten().copied().collect();
        !(calls.is_empty() || calls == [sched])
    };
    if !open.iter().any(listed) {
        return Ok(());
    }
    write!(out, "\nuftrace stopped tracing with remaining functions")?;
    write!(out, "\n================================================\n")?;
    for (k, (tid, o)) in tids.iter().zip(open).enumerate() {
        if !listed(o) {
            continue;
        }
        writeln!(out, "task: {tid}")?;
        // Numbered among the thread's own calls (not the frames a forked
        // child inherited), innermost first, as uftrace numbers them.
        let calls: Vec<u64> = o.iter().flatten().copied().collect();
        for (i, addr) in calls.iter().enumerate().rev() {
            writeln!(out, "[{i}] {}", name(k, *addr))?;
        }
        writeln!(out)?;
    }
    Ok(())
}
