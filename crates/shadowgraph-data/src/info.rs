//! `info`: what a recording says about the machine, the run and itself, in
//! uftrace's layout (from uftrace's `info` file, ours or uftrace's), then
//! what only our recordings hold (records, losses, clock, sessions).

use super::dir::DataDir;
use super::replay::ReplayError;
use std::io::Write;

/// Writes `info`'s text for `data`.
pub fn info(data: &DataDir, out: &mut impl Write) -> Result<(), ReplayError> {
    let get = |k: &str| data.info.get(k).map(str::trim);
    let line = |out: &mut dyn Write, k: &str, v: &str| writeln!(out, "# {k:<20}: {v}");
    if get("uftrace_version").is_some() {
        writeln!(out, "# system information\n# ==================")?;
        line(out, "program version", get("uftrace_version").unwrap_or(""))?;
        line(out, "recorded on", get("record_date").unwrap_or("unknown"))?;
        line(out, "cmdline", get("cmdline").unwrap_or(""))?;
        line(out, "cpu info", get("cpuinfo:desc").unwrap_or("unknown"))?;
        let cpus = get("cpuinfo:nr_cpus")
            .unwrap_or("")
            .replace("(online/possible)", "(online / possible)");
        line(out, "number of cpus", &cpus)?;
        line(out, "memory info", get("meminfo").unwrap_or(""))?;
        line(
            out,
            "system load",
            &format!("{} (1 / 5 / 15 min)", get("loadinfo").unwrap_or("")),
        )?;
        line(out, "kernel version", get("osinfo:kernel").unwrap_or(""))?;
        line(out, "hostname", get("osinfo:hostname").unwrap_or(""))?;
        line(out, "distro", get("osinfo:distro").unwrap_or(""))?;
        writeln!(out, "#\n# process information\n# ===================")?;
        let exe = get("exe").unwrap_or("");
        let comm = std::path::Path::new(exe)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        line(out, "number of tasks", &data.tids.len().to_string())?;
        let tasks: Vec<String> = data.tids.iter().map(|t| format!("{t}({comm})")).collect();
        line(out, "task list", &tasks.join(", "))?;
        line(out, "exe image", exe)?;
        line(out, "build id", get("build_id").unwrap_or(""))?;
        line(out, "pattern", get("pattern_type").unwrap_or("regex"))?;
        let raw: i32 = get("exit_status").and_then(|v| v.parse().ok()).unwrap_or(0);
        // Our recordings note the wait status when it is known (not for a
        // process attached to, nor for a program that another process of
        // the run started by exec).
        let status = if get("raw0").is_some() && get("exit_raw").is_none() {
            match get("attached") {
                Some(_) => "unknown (a running process, attached to by `record -p`)",
                None => "unknown (a process the recorded program started)",
            }
            .to_string()
        } else if (raw & 0x7f) != 0 && (raw & 0x7f) != 0x7f {
            // A wait status (wait(2)): the low 7 bits are the signal that
            // ended the process, 0 for an exit, whose code is bits 8..15.
            format!("terminated by signal: {}", raw & 0x7f)
        } else {
            format!("exited with code: {}", (raw >> 8) & 0xff)
        };
        line(out, "exit status", &status)?;
        line(out, "elapsed time", get("elapsed_time").unwrap_or(""))?;
        let secs = |k: &str| {
            get(k)
                .and_then(|v| v.parse::<f64>().ok())
                .map_or("0.000".to_string(), |v| format!("{v:.3}"))
        };
        line(
            out,
            "cpu time",
            &format!(
                "{} / {} sec (sys / user)",
                secs("usageinfo:systime"),
                secs("usageinfo:usrtime")
            ),
        )?;
        line(out, "context switch", get("usageinfo:ctxsw").unwrap_or(""))?;
        line(
            out,
            "max rss",
            &format!("{} KB", get("usageinfo:maxrss").unwrap_or("0")),
        )?;
        line(out, "page fault", get("usageinfo:pagefault").unwrap_or(""))?;
        line(out, "disk iops", get("usageinfo:iops").unwrap_or(""))?;
    }
    if data.dir.join("shadowgraph.info").exists() {
        if get("uftrace_version").is_some() {
            writeln!(out, "#")?;
        }
        writeln!(out, "# shadowgraph\n# ===========")?;
        if super::profile::is_profile(data) {
            line(out, "tracer", "profile (per-function totals: see `report`)")?;
        } else {
            line(
                out,
                "records",
                &format!(
                    "{} ({} lost)",
                    get("records").unwrap_or("?"),
                    get("lost").unwrap_or("?")
                ),
            )?;
            if data.compact() {
                line(
                    out,
                    "record layout",
                    "compact (--compact; `export --uftrace` writes uftrace's)",
                )?;
            }
        }
        line(
            out,
            "clock",
            &format!(
                "{} (times in ns of CLOCK_MONOTONIC)",
                get("clock").unwrap_or("?")
            ),
        )?;
        if let Some(n) = get("max_stack") {
            line(out, "max stack depth", n)?;
        }
        line(out, "stack overruns", get("overrun").unwrap_or("0"))?;
        if let Some(n) = get("recursion_drops") {
            line(
                out,
                "recursion drops",
                &format!("{n} (calls not traced: their thread was inside our callbacks)"),
            )?;
        }
        if let Some(c) = get("control") {
            line(out, "control commands", c)?;
        }
        if let Some(p) = get("prologues") {
            for object in p.split("; ") {
                line(out, "patched prologues", object)?;
            }
        }
        let (steps, worst) = data.info.clock_steps_back();
        if steps > 0 {
            line(
                out,
                "clock steps back",
                &format!(
                    "{steps} times moved forward (largest step {worst} ns: CPUs' TSCs differ)"
                ),
            )?;
        }
        if let Some((n, ns)) = get("writer_waits").and_then(|w| w.split_once(" / ")) {
            let ms = ns.parse::<u64>().unwrap_or(0) as f64 / 1e6;
            line(
                out,
                "waits for writer",
                &format!("{n} ({ms:.3} ms; threads whose ring was full)"),
            )?;
        }
        if let Some((n, records)) = get("own_drains")
            .and_then(|w| w.split_once(" / "))
            .filter(|(n, _)| *n != "0")
        {
            line(
                out,
                "own drains",
                &format!(
                    "{n} ({records} records written by threads themselves, the writer behind)"
                ),
            )?;
        }
        if let Some(p) = get("record_path") {
            let what = match (p, get("ring_claims")) {
                ("fused", Some("rseq")) => format!(
                    "fused (one tracer: entry, filters and return in asm; ring slots by rseq, {} restarted{})",
                    get("rseq_restarts").unwrap_or("?"),
                    get("rseq_restarts_args")
                        .map(|n| format!(", {n} of them with arguments"))
                        .unwrap_or_default()
                ),
                ("fused", _) => "fused (one tracer: entry, filters and return in asm)".into(),
                ("fused-multi", Some("rseq")) => format!(
                    "fused (several tracers: one frame, one clock read and a record in each ring, in asm; ring slots by rseq, {} restarted)",
                    get("rseq_restarts").unwrap_or("?")
                ),
                ("fused-multi", _) => {
                    "fused (several tracers: one frame, one clock read and a record in each ring, in asm)"
                        .into()
                }
                _ => "general (fgraph callbacks)".into(),
            };
            line(out, "record path", &what)?;
        }
        if let Some(e) = get("write_error") {
            line(out, "write error", e)?;
        }
        if get("finished").is_none() {
            line(
                out,
                "ended",
                "before the recording's exit step (crash, kill or _exit)",
            )?;
        }
        if let Some(n) = data.sessions_notice() {
            let list = n.rsplit_once(": ").map_or(n.as_str(), |x| x.1);
            line(out, "exec sessions", list)?;
        }
    }
    // A note left in the directory (`note.txt`), as uftrace's shows it.
    if let Ok(note) = std::fs::read_to_string(data.dir.join("note.txt")) {
        writeln!(out, "#\n# extra note information\n# ======================")?;
        // (As it is: the line ending the info ends it.)
        write!(out, "{note}")?;
    }
    writeln!(out)?; // as uftrace's ends
    Ok(())
}

/// `info --task`: each task of the recording (as its `task.txt` lists
/// them, by thread id) with when it began, whether it is a process (`F`)
/// and a session's first (`S`), its name and the size of its records, in
/// uftrace's layout.
pub fn task_info(data: &DataDir, out: &mut impl Write) -> Result<(), ReplayError> {
    use crate::meta::TaskLine;
    let lines = crate::meta::task_lines(&data.dir);
    let sessions: Vec<i32> = lines
        .iter()
        .filter_map(|l| match l {
            TaskLine::Session { pid, .. } => Some(*pid),
            _ => None,
        })
        .collect();
    // (A forked child's first thread may have only its FORK line.)
    let mut tasks: Vec<(i32, i32, String)> = lines
        .into_iter()
        .filter_map(|l| match l {
            TaskLine::Task { time, tid, pid } => Some((tid, pid, time)),
            TaskLine::Fork { time, pid, .. } => Some((pid, pid, time)),
            TaskLine::Session { .. } => None,
        })
        .collect();
    tasks.sort_by_key(|t| t.0);
    tasks.dedup_by_key(|t| t.0);
    let name = data.task_name();
    writeln!(
        out,
        "#{:>23}  {:>5}  {:>8}  {:<16}  DATA SIZE",
        "TIMESTAMP     ", "FLAGS", "  TID  ", "TASK"
    )?;
    for (tid, pid, stamp) in tasks {
        let flags = format!(
            "{}{}   ",
            if tid == pid { 'F' } else { ' ' },
            if sessions.contains(&tid) { 'S' } else { ' ' }
        );
        let (secs, nsecs) = stamp.split_once('.').unwrap_or((&stamp, "0"));
        write!(
            out,
            " {secs:>13}.{nsecs:0<9}  {flags}  [{tid:6}]  {name:<16} "
        )?;
        match std::fs::metadata(data.dat_path(tid)).map(|m| m.len()) {
            Ok(size) if size > 0 => {
                let kb = size / 1024;
                writeln!(out, " {:5}.{:03} MB", kb / 1024, (kb % 1024).min(999))?
            }
            _ => writeln!(out)?,
        }
    }
    Ok(())
}
