//! `graph --task`: the recording's tasks as the tree of who made whom
//! (processes by fork, threads by their process), each with its lifetime
//! (its first record to its last) and that less the time it spent off its
//! processor (schedule events), in uftrace's layout.

#![forbid(unsafe_code)]

use super::dir::DataDir;
use super::replay::{format_duration, thread_records, ReplayError, ReplayFilter};
use super::sched::SCHED_ADDR;
use crate::format::Kind;
use crate::meta::TaskLine;
use std::collections::HashMap;
use std::io::Write;

/// A task of `task.txt`, in the order tasks were made.
struct Task {
    tid: i32,
    /// Its process.
    pid: i32,
    name: String,
    children: Vec<usize>,
    /// Its lifetime and the time it was off its processor, ns.
    run: u64,
    idle: u64,
}

/// The tasks `task.txt` lists, in the order they were made, each under
/// the task that made it (a forked process under its parent process's,
/// a thread under its process's), as uftrace builds them: a task is made
/// by its first `TASK` or `FORK` line; its name is its session's
/// program (the session of its process, or of its parent's for a fork).
fn tasks(data: &DataDir) -> Vec<Task> {
    let mut sessions: HashMap<i32, String> = HashMap::new();
    let mut tasks: Vec<Task> = Vec::new();
    let mut by_tid: HashMap<i32, usize> = HashMap::new();
    for l in crate::meta::task_lines(&data.dir) {
        // (tid, pid, the task it comes from, whose session names it)
        let (tid, pid, from) = match l {
            TaskLine::Session { pid, exe } => {
                let name = exe.rsplit('/').next().unwrap_or(&exe);
                sessions.insert(pid, name.get(..15).unwrap_or(name).to_string());
                continue;
            }
            TaskLine::Task { tid, pid, .. } => (tid, pid, pid),
            TaskLine::Fork { pid, ppid, .. } => (pid, pid, ppid),
        };
        if by_tid.contains_key(&tid) {
            continue;
        }
        let name = sessions
            .get(&from)
            .cloned()
            .unwrap_or_else(|| data.task_name().to_string());
        let k = tasks.len();
        if let Some(&p) = by_tid.get(&from) {
            tasks[p].children.push(k);
        }
        by_tid.insert(tid, k);
        tasks.push(Task {
            tid,
            pid,
            name,
            children: Vec::new(),
            run: 0,
            idle: 0,
        });
    }
    tasks
}

/// Writes the task graph of the records `filter` selects.
pub fn task_graph(
    data: &DataDir,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let mut tasks = tasks(data);
    let index: HashMap<i32, usize> = tasks.iter().enumerate().map(|(k, t)| (t.tid, k)).collect();
    for (tid, records) in thread_records(data, filter)? {
        let (mut first, mut last, mut out_at, mut idle) = (None, 0, None, 0);
        for r in records {
            let r = r?;
            first.get_or_insert(r.time);
            last = r.time;
            // Off the processor: from a schedule event's entry (out) to
            // its exit (back in).
            if r.addr == SCHED_ADDR {
                match r.kind {
                    Kind::Entry => out_at = Some(r.time),
                    Kind::Exit => idle += out_at.take().map_or(0, |t| r.time - t),
                    _ => {}
                }
            }
        }
        if let Some(&k) = index.get(&tid) {
            idle += out_at.map_or(0, |t| last - t);
            tasks[k].run = first.map_or(0, |f| last - f);
            tasks[k].idle = idle;
        }
    }
    writeln!(out, "========== TASK GRAPH ==========")?;
    writeln!(out, "# TOTAL TIME   SELF TIME     TID     TASK NAME")?;
    if !tasks.is_empty() {
        let mut mask = vec![false; tasks.len() + 2];
        node(&tasks, 0, None, &mut mask, 0, out)?;
    }
    writeln!(out)?;
    Ok(())
}

/// Task `k`'s line and, below it, its children's (uftrace's
/// `print_task_node`): a thread one step in (`+-`), a process two
/// (`+----`) after a line of its own; whether a blank line is due before
/// the next sibling.
fn node(
    tasks: &[Task],
    k: usize,
    parent: Option<usize>,
    mask: &mut [bool],
    indent: usize,
    out: &mut impl Write,
) -> Result<bool, ReplayError> {
    let t = &tasks[k];
    write!(
        out,
        "  {:>10}  {:>10}  [{:6}] : ",
        format_duration(Some(t.run)),
        format_duration(Some(t.run.saturating_sub(t.idle))),
        t.tid
    )?;
    write_indent(out, mask, indent, true)?;
    writeln!(out, "{}", t.name)?;
    if t.children.is_empty() {
        return Ok(false);
    }
    // The parent's line ends at its last child.
    if let Some(p) = parent.filter(|&p| tasks[p].children.last() == Some(&k)) {
        let up = indent - 1 - usize::from(t.pid != tasks[p].pid);
        mask[up] = false;
    }
    let mut blank = false;
    for (n, &c) in t.children.iter().enumerate() {
        let mut at = indent;
        mask[at] = true;
        at += 1;
        let process = tasks[c].pid != t.pid;
        if process {
            blank = true;
            at += 1;
        }
        if blank {
            write!(out, "  {:>10}  {:>10}  {:8} : ", "", "", "")?;
            write_indent(out, mask, at, false)?;
            writeln!(out)?;
            blank = false;
        }
        blank |= node(tasks, c, Some(k), mask, at, out)?;
        if n + 1 < t.children.len() && process {
            blank = true;
        }
    }
    mask[indent] = false;
    Ok(blank)
}

/// uftrace's `pr_indent`: ` | ` where a line goes on, `   ` where none
/// does; on a task's own line (`line`), ` +-` at the last line going on
/// and `---` after it.
fn write_indent(
    out: &mut impl Write,
    mask: &[bool],
    indent: usize,
    line: bool,
) -> Result<(), ReplayError> {
    let last = (0..indent).rev().find(|&i| line && mask[i]);
    for (i, &on) in mask.iter().enumerate().take(indent) {
        let s = match last {
            Some(l) if i == l => " +-",
            Some(l) if i > l => "---",
            None if line => "---",
            _ if on => " | ",
            _ => "   ",
        };
        out.write_all(s.as_bytes())?;
    }
    Ok(())
}
