//! `dump --chrome`: the recording as Chrome trace-event JSON (one "B"/"E"
//! event per record, timestamps in microseconds), streamed thread by
//! thread: memory stays bounded by one thread's records. Metadata events
//! name the process and each thread (`[TID] program`, as uftrace names
//! them), and the trace's `metadata` says what recorded it, when, and the
//! command line.

use super::dir::DataDir;
use super::format::Kind;
use super::replay::{session_threads, ReplayError, ReplayFilter};
use std::io::Write;

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A metadata event (`process_name`, `thread_name`) naming process `pid`
/// (or its thread `tid`) `name`.
fn metadata(
    out: &mut impl Write,
    pid: &str,
    tid: Option<i32>,
    what: &str,
    name: &str,
) -> std::io::Result<()> {
    let tid = tid.map_or(String::new(), |t| format!(",\"tid\":{t}"));
    write!(
        out,
        "{{\"ts\":0,\"ph\":\"M\",\"pid\":{pid}{tid},\"name\":\"{what}\",\"args\":{{\"name\":{}}}}}",
        json_str(name)
    )
}

/// Writes what `filter` selects as Chrome trace-event JSON: a `B` and an
/// `E` event per call, one track per thread; recorded arguments and
/// return values as the events' `args` (`arguments`, `retval`), as
/// uftrace writes them. `datas`: a recording, then the programs started
/// by exec during it, in the order they started; their records merged by
/// time, a thread that went on in another program on its first track.
pub fn dump_chrome(
    datas: &[&DataDir],
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let Some(&data) = datas.first() else {
        return Ok(());
    };
    // Checked (and opened) before any output.
    let threads = session_threads(datas, filter)?;
    let pid_of_session = |d: &DataDir| d.info.get("pid").unwrap_or("0").to_string();
    // Each thread's process: that of the first program it ran.
    let mut pids: Vec<(i32, String)> = Vec::new();
    for (tid, _, i) in &threads {
        if !pids.iter().any(|p| p.0 == *tid) {
            pids.push((*tid, pid_of_session(datas[*i])));
        }
    }
    let pid_of = |tid: i32| -> &str {
        pids.iter()
            .find(|p| p.0 == tid)
            .map_or("0", |p| p.1.as_str())
    };
    writeln!(out, "{{\"traceEvents\":[")?;
    // A thread's name as uftrace's metadata gives it: the last it took
    // (`-E linux:task-name`), else that of the last program it ran.
    let last_name = |tid: i32| -> String {
        let ran = |d: &&&DataDir| d.tids.contains(&tid) || std::ptr::eq(**d, data);
        let Some(d) = datas.iter().rev().find(ran) else {
            return String::new();
        };
        let exe = d.info.get("exe").unwrap_or("");
        let comm = exe.rsplit('/').next().unwrap_or(exe);
        let last = d.task_names.get(&tid).and_then(|n| n.last());
        last.map_or(comm, |n| n.1.as_str()).to_string()
    };
    let name = |id: &str| format!("[{id}] {}", last_name(id.parse().unwrap_or(0)));
    // The processes: the recording's, then those of its threads.
    let mut procs: Vec<&str> = vec![data.info.get("pid").unwrap_or("0")];
    for (_, p) in &pids {
        if !procs.contains(&p.as_str()) {
            procs.push(p);
        }
    }
    for (i, p) in procs.iter().enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        metadata(out, p, None, "process_name", &name(p))?;
    }
    let mut seen: Vec<i32> = Vec::new();
    for (tid, _, _) in &threads {
        if seen.contains(tid) {
            continue;
        }
        seen.push(*tid);
        out.write_all(b",\n")?;
        metadata(
            out,
            pid_of(*tid),
            Some(*tid),
            "thread_name",
            &name(&tid.to_string()),
        )?;
    }
    // The threads' records merged by time, as uftrace writes them.
    let (tids, owner): (Vec<i32>, Vec<usize>) = threads.iter().map(|t| (t.0, t.2)).unzip();
    let mut streams: Vec<std::iter::Peekable<_>> =
        threads.into_iter().map(|t| t.1.peekable()).collect();
    let mut heap = std::collections::BinaryHeap::new();
    let time_of = |s: &mut std::iter::Peekable<crate::replay::Records>| match s.peek() {
        Some(Ok(r)) => Some(r.time),
        Some(Err(_)) => Some(0),
        None => None,
    };
    for (k, s) in streams.iter_mut().enumerate() {
        if let Some(t) = time_of(s) {
            heap.push(std::cmp::Reverse((t, k)));
        }
    }
    while let Some(std::cmp::Reverse((_, k))) = heap.pop() {
        let (tid, data) = (tids[k], datas[owner[k]]);
        let pid = pid_of(tid);
        {
            let r = streams[k].next().expect("peeked");
            if let Some(t) = time_of(&mut streams[k]) {
                heap.push(std::cmp::Reverse((t, k)));
            }
            let r = r?;
            let ph = match r.kind {
                Kind::Entry => "B",
                Kind::Exit => "E",
                Kind::Event if r.addr == crate::sched::TASK_NAME_ADDR => {
                    // A new name: metadata events where it happened, as
                    // uftrace writes them (the process's name is its first
                    // thread's; another thread's is given with its id).
                    let Some(n) = r.args.as_deref().and_then(crate::sched::task_name) else {
                        continue;
                    };
                    out.write_all(b",\n")?;
                    if tid.to_string() == pid {
                        metadata(out, pid, None, "process_name", n)?;
                        out.write_all(b",\n")?;
                        metadata(out, pid, Some(tid), "thread_name", n)?;
                    } else {
                        metadata(out, pid, Some(tid), "thread_name", &format!("[{tid}] {n}"))?;
                    }
                    continue;
                }
                _ => continue,
            };
            writeln!(out, ",")?;
            // Arguments and return values as uftrace puts them.
            let args = match (&r.args, r.kind) {
                (Some(a), Kind::Entry) => format!(
                    ",\"args\":{{\"arguments\":{}}}",
                    json_str(&format!("({a})"))
                ),
                (Some(v), _) => format!(",\"args\":{{\"retval\":{}}}", json_str(v)),
                (None, _) => String::new(),
            };
            write!(
                out,
                "{{\"ts\":{}.{:03},\"ph\":\"{ph}\",\"pid\":{pid},\"tid\":{tid},\"name\":{}{args}}}",
                r.time / 1000,
                r.time % 1000,
                json_str(&data.name(r.addr))
            )?;
        }
    }
    writeln!(out, "\n], \"displayTimeUnit\": \"ns\", \"metadata\": {{")?;
    writeln!(
        out,
        "\"version\":{},",
        json_str(&format!("shadowgraph {}", env!("CARGO_PKG_VERSION")))
    )?;
    let date = data.info.get("record_date").unwrap_or("");
    writeln!(out, "\"recorded_time\":{},", json_str(date))?;
    let cmdline = data.info.get("cmdline").unwrap_or("");
    writeln!(out, "\"command_line\":{}", json_str(cmdline))?;
    writeln!(out, "}} }}")?;
    Ok(())
}
