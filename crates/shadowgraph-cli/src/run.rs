//! Running a program under the agent, and the demo.

use shadowgraph::config::{self, Config, TracerKind};
use shadowgraph::record::collect;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

const DEMO_C: &str = include_str!("../samples/demo.c");
const AGENT: &str = "libshadowgraph_agent.so";

/// `LD_PRELOAD` for the traced program: the agent first, then whatever the
/// user preloads already (kept, not replaced).
fn preload(agent: &Path) -> std::ffi::OsString {
    let mut v = agent.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// The agent's shared object: `$SHADOWGRAPH_AGENT`, or the newest of those
/// next to this binary (cargo puts it beside the binary, or in `deps/`
/// when it builds it as the CLI's dependency: the other may be a stale
/// copy from an earlier build).
pub fn agent_path() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SHADOWGRAPH_AGENT") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("SHADOWGRAPH_AGENT={} does not exist", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate myself: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    [
        dir.join(AGENT),
        dir.join("deps").join(AGENT),
        dir.join("../lib").join(AGENT),
    ]
    .into_iter()
    .filter_map(|c| Some((std::fs::metadata(&c).ok()?.modified().ok()?, c)))
    .max()
    .map(|(_, c)| c)
    .ok_or_else(|| {
        format!(
            "cannot find {AGENT} next to {} (build the workspace: cargo build --release, or set SHADOWGRAPH_AGENT)",
            exe.display()
        )
    })
}

/// One line of the agent's count report.
pub struct Counted {
    pub module: String,
    pub function: String,
    pub calls: u64,
    /// Returns seen (graph mode only).
    pub returns: Option<u64>,
}

/// Runs `program` with every call counted (through fgraph when `graph`).
/// Returns its exit status, the counts and the report's summary line.
pub fn run_counted(
    program: &[String],
    graph: bool,
    hijack_returns: bool,
) -> Result<(std::process::ExitStatus, Vec<Counted>, String), String> {
    let (prog, args) = program.split_first().ok_or("no program given")?;
    let path = find_program(prog)?;
    let found = shadowgraph::elf::scan_file(&path).map_err(|e| e.to_string())?;
    found
        .require_traceable_program()
        .map_err(|e| e.to_string())?;
    let agent = agent_path()?;
    let out = tempfile("counts")?;
    let config = Config {
        mode: config::Mode::Count(config::Count {
            report: Some(out.clone()),
            graph,
        }),
        objects: config::Objects::All,
        stack_bytes: None,
        returns: returns(hijack_returns),
        text_write: text_write()?,
        lineage: Default::default(),
    };
    let status = Command::new(prog)
        .args(args)
        .env("LD_PRELOAD", preload(&agent))
        .env(config::ENV, config.to_env_value())
        .status()
        .map_err(|e| format!("cannot run {prog}: {e}"))?;
    let text = std::fs::read_to_string(&out).map_err(|_| {
        format!("{prog} produced no trace (exited with {status} before the agent reported; see messages above)")
    })?;
    let _ = std::fs::remove_file(&out);
    let mut counts = Vec::new();
    let mut summary = String::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(s) = line.strip_prefix("# sites=") {
            summary = format!("sites={s}");
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| format!("{}: line {}: {what}", out.display(), n + 1);
        let num = |v: &str| v.parse::<u64>().map_err(|_| bad("bad count"));
        let f: Vec<&str> = line.split('\t').collect();
        let (module, function, calls, returns) = match f[..] {
            [m, func, _addr, c] => (m, func, num(c)?, None),
            [m, func, _addr, c, r] => (m, func, num(c)?, Some(num(r)?)),
            _ => return Err(bad("malformed agent report")),
        };
        counts.push(Counted {
            module: module.to_string(),
            function: function.to_string(),
            calls,
            returns,
        });
    }
    Ok((status, counts, summary))
}

/// What `record` (and `live`) trace.
#[derive(clap::Args, Debug, Default)]
pub struct RecordOptions {
    /// Record only inside these functions (glob, /regex/, @LIB); repeatable.
    #[arg(short = 'F', long = "filter")]
    filter: Vec<String>,
    /// Record nothing inside these functions; repeatable.
    #[arg(short = 'N', long = "notrace")]
    notrace: Vec<String>,
    /// Record at most this many nested levels.
    #[arg(short = 'D', long = "depth", default_value_t = 0)]
    depth: u32,
    /// Record only calls lasting at least TIME (e.g. 10us, 1.5ms; ns, us,
    /// ms, s; a bare number is ns); a kept call's callers are kept too.
    #[arg(short = 't', long = "time-filter", value_name = "TIME", value_parser = parse_duration_ns)]
    time_filter: Option<u64>,
    /// Trace only the program, not its libraries.
    #[arg(long)]
    no_libs: bool,
    /// Record only the program's own process, not the children it forks.
    #[arg(long)]
    no_children: bool,
    /// Each thread's buffer (e.g. 512K, 4M; default 2M): a thread whose
    /// buffer is full waits for the writer, so a larger one smooths bursts.
    #[arg(short = 'b', long = "buffer", value_name = "SIZE", value_parser = parse_buffer_size)]
    buffer: Option<u64>,
    /// Trace calls nested up to DEPTH frames deep in each thread (default
    /// 2047; at most 32767): sets the shadow stack's size. Deeper calls
    /// run untraced, and are counted.
    #[arg(long = "max-stack", value_name = "DEPTH", value_parser = parse_max_stack)]
    max_stack: Option<u64>,
    /// The clock timestamps are read from: `tsc` (the default: the
    /// processor's time-stamp counter, converted to CLOCK_MONOTONIC
    /// nanoseconds, if it runs at a constant rate; else mono) or `mono`
    /// (CLOCK_MONOTONIC for each timestamp: slower, no conversion).
    #[arg(long, value_name = "CLOCK", value_parser = ["tsc", "mono"])]
    clock: Option<String>,
    /// Switch tracing off and on while the program runs: commands
    /// `disable` and `enable`, one per line, written to the FIFO CTL (made
    /// with mkfifo); after each takes effect, `ack` is written to the FIFO
    /// ACK if given. Disabled, the program's functions run unpatched.
    #[arg(long, value_name = "CTL[,ACK]")]
    control: Option<String>,
    /// Start with tracing disabled (enable it through --control).
    #[arg(long)]
    disable: bool,
    /// Trace this library too (file name prefix); repeatable; implies
    /// --no-libs for the others.
    #[arg(long = "lib")]
    libs: Vec<String>,
    /// Several tracers at once, each into DIR/NAME with its own filters:
    /// `NAME[:type=graph|profile][:filter=P,P][:notrace=P,P][:depth=N][:time=T]`;
    /// repeatable. A graph tracer records every call; a profile (the type
    /// of a tracer named `profile`) keeps per-function calls, total and
    /// self time for `report` (its filter selects the functions profiled).
    #[arg(long = "tracer")]
    tracers: Vec<String>,
    /// Record through fgraph's callbacks, never the fused paths (to
    /// compare them).
    #[arg(long, hide = true)]
    general_path: bool,
    /// Hijack return addresses instead of returning through site stubs
    /// (to compare them).
    #[arg(long, hide = true)]
    hijack_returns: bool,
}

/// `--max-stack DEPTH`: the shadow stack size, in bytes, that holds DEPTH
/// plain frames (4 words each) above the push margin.
fn parse_max_stack(v: &str) -> Result<u64, String> {
    use shadowgraph::fgraph::stack::{MAX_STACK_BYTES, MIN_STACK_BYTES};
    let most = MAX_STACK_BYTES as u64 / 32 - 1;
    match v.trim().parse::<u64>() {
        Ok(d) if (1..=most).contains(&d) => Ok(((d + 1) * 32)
            .next_power_of_two()
            .max(MIN_STACK_BYTES as u64)),
        Ok(_) => Err(format!("`{v}`: the depth must be between 1 and {most}")),
        Err(_) => Err(format!("`{v}` is not a depth (a number of frames)")),
    }
}

/// A duration with a unit (ns, us, ms, s; none: ns) in nanoseconds.
pub fn parse_duration_ns(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let scale = match unit {
        "" | "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("`{v}`: unknown time unit `{unit}` (ns, us, ms, s)")),
    };
    match num.parse::<f64>() {
        Ok(n) if n.is_finite() && n * scale < u64::MAX as f64 => Ok((n * scale).round() as u64),
        _ => Err(format!("`{v}` is not a duration (e.g. 10us, 1.5ms)")),
    }
}

/// A buffer size: bytes, or with K, M or G (powers of 1024); 64K to 1G.
fn parse_buffer_size(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let (num, scale) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{v}` is not a size (e.g. 512K, 4M)"))?;
    match n.checked_mul(scale) {
        Some(b) if (64 << 10..=1 << 30).contains(&b) => Ok(b),
        _ => Err(format!("`{v}`: the buffer size must be between 64K and 1G")),
    }
}

/// A `--tracer` specification as the configuration's tracer.
fn parse_tracer(spec: &str) -> Result<config::Tracer, String> {
    let mut parts = spec.split(':');
    let name = parts.next().unwrap_or_default().to_string();
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(format!(
            "--tracer {spec}: needs a name (a plain directory name) first"
        ));
    }
    let mut t = config::Tracer {
        kind: if name == "profile" {
            TracerKind::Profile
        } else {
            TracerKind::Graph
        },
        name: Some(name),
        ..Default::default()
    };
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("--tracer {spec}: `{p}` is not key=value"))?;
        let list = || {
            v.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        match k {
            "filter" => t.filter.extend(list()),
            "notrace" => t.notrace.extend(list()),
            "depth" => {
                t.depth = v
                    .parse()
                    .map_err(|_| format!("--tracer {spec}: bad depth `{v}`"))?
            }
            "time" => {
                t.time_ns = parse_duration_ns(v).map_err(|e| format!("--tracer {spec}: {e}"))?
            }
            "type" => {
                t.kind = match v {
                    "graph" => TracerKind::Graph,
                    "profile" => TracerKind::Profile,
                    _ => {
                        return Err(format!(
                            "--tracer {spec}: unknown type `{v}` (graph, profile)"
                        ))
                    }
                }
            }
            other => {
                return Err(format!(
                    "--tracer {spec}: unknown key `{other}` (type, filter, notrace, depth, time)"
                ))
            }
        }
    }
    if t.kind == TracerKind::Profile && (t.depth > 0 || t.time_ns > 0) {
        return Err(format!(
            "--tracer {spec}: a profile takes filter= and notrace= only (it keeps no call records)"
        ));
    }
    Ok(t)
}

impl RecordOptions {
    /// The tracers these options ask for (one unnamed without `--tracer`).
    fn tracers(&self) -> Result<Vec<config::Tracer>, String> {
        let tracers: Vec<config::Tracer> = self
            .tracers
            .iter()
            .map(|t| parse_tracer(t))
            .collect::<Result<_, _>>()?;
        if tracers.is_empty() {
            return Ok(vec![config::Tracer {
                filter: self.filter.clone(),
                notrace: self.notrace.clone(),
                depth: self.depth,
                time_ns: self.time_filter.unwrap_or(0),
                ..Default::default()
            }]);
        }
        if !self.filter.is_empty()
            || !self.notrace.is_empty()
            || self.depth > 0
            || self.time_filter.is_some()
        {
            return Err(
                "with --tracer, give filters inside each tracer (filter=, notrace=, depth=, time=)"
                    .into(),
            );
        }
        Ok(tracers)
    }

    /// `--control CTL[,ACK]` checked: FIFOs, made absolute (the agent opens
    /// them whatever its directory).
    fn control(&self) -> Result<Option<config::Control>, String> {
        if self.disable && self.control.is_none() {
            return Err("--disable needs --control, to enable tracing later".into());
        }
        let Some(c) = &self.control else {
            return Ok(None);
        };
        let fifos: Vec<&str> = c.split(',').collect();
        if fifos.len() > 2 {
            return Err(format!("--control {c}: CTL or CTL,ACK"));
        }
        let mut abs = Vec::new();
        for p in fifos {
            use std::os::unix::fs::FileTypeExt;
            match std::fs::metadata(p) {
                Ok(m) if m.file_type().is_fifo() => {}
                Ok(_) => return Err(format!("--control {p}: not a FIFO (make one with mkfifo)")),
                Err(e) => return Err(format!("--control {p}: {e} (make it with mkfifo)")),
            }
            abs.push(std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p)));
        }
        let mut abs = abs.into_iter();
        Ok(Some(config::Control {
            commands: abs.next().expect("one FIFO at least"),
            acks: abs.next(),
            start_disabled: self.disable,
        }))
    }

    /// The session's configuration: recording into `dir` (absolute), the
    /// threads' rings in `rings`. Patterns are checked here (a one-line
    /// error before the program starts).
    fn config(&self, dir: &Path, rings: &Path) -> Result<Config, String> {
        let objects = if !self.libs.is_empty() {
            config::Objects::Program(self.libs.clone())
        } else if self.no_libs {
            config::Objects::Program(Vec::new())
        } else {
            config::Objects::All
        };
        let config = Config {
            mode: config::Mode::Record(config::Record {
                dir: dir.to_owned(),
                tracers: self.tracers()?,
                rings: Some(config::Rings {
                    dir: rings.to_owned(),
                    layout: shadowgraph::record::ring::LAYOUT,
                }),
                ring_bytes: self.buffer,
                clock: match self.clock.as_deref() {
                    Some("mono") => config::Clock::Monotonic,
                    _ => config::Clock::Tsc,
                },
                control: self.control()?,
                children: !self.no_children,
                fused: !self.general_path,
            }),
            objects,
            stack_bytes: self.max_stack.map(|b| b as usize),
            returns: returns(self.hijack_returns),
            text_write: text_write()?,
            lineage: Default::default(),
        };
        config.check().map_err(|e| e.to_string())?;
        Ok(config)
    }

    fn tracer_names(&self) -> Vec<String> {
        self.tracers
            .iter()
            .filter_map(|t| parse_tracer(t).ok())
            .filter_map(|t| t.name)
            .collect()
    }
}

/// How returns come back: through site stubs unless `--hijack-returns`.
fn returns(hijack: bool) -> config::Returns {
    if hijack {
        config::Returns::Hijack
    } else {
        config::Returns::SiteStubs
    }
}

/// How code is written: `SHADOWGRAPH_TEXT_WRITE=procmem|mprotect`, else the
/// patcher's choice.
fn text_write() -> Result<Option<config::TextWrite>, String> {
    match std::env::var("SHADOWGRAPH_TEXT_WRITE").as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("procmem") => Ok(Some(config::TextWrite::ProcMem)),
        Ok("mprotect") => Ok(Some(config::TextWrite::Mprotect)),
        Ok(other) => Err(format!(
            "SHADOWGRAPH_TEXT_WRITE=`{other}`: procmem or mprotect"
        )),
    }
}

/// Runs `program` recording into `data` (an existing directory is renamed
/// to `<data>.old`).
pub fn record(data: &Path, opts: &RecordOptions, program: &[String]) -> Result<ExitCode, String> {
    // The options checked before anything is moved or made.
    opts.config(Path::new("/"), Path::new("/"))?;
    let (prog, args) = program.split_first().ok_or("no program given")?;
    let path = find_program(prog)?;
    let found = shadowgraph::elf::scan_file(&path).map_err(|e| e.to_string())?;
    found
        .require_traceable_program()
        .map_err(|e| e.to_string())?;
    let agent = agent_path()?;
    if data.exists() {
        let old = PathBuf::from(format!("{}.old", data.display()));
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(data, &old)
            .map_err(|e| format!("cannot move {} aside: {e}", data.display()))?;
    }
    std::fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let abs = std::fs::canonicalize(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let names = opts.tracer_names();
    // Each instance's place in a recording directory (and in a session's).
    let rel: Vec<(String, PathBuf)> = if names.is_empty() {
        vec![(String::new(), PathBuf::new())]
    } else {
        names
            .iter()
            .map(|n| (format!("tracer {n}: "), PathBuf::from(n)))
            .collect()
    };
    // The writer: drains the traced threads' rings (shared memory) into
    // the directories while the program runs.
    // (In /dev/shm, else in the temporary directory.)
    let rel_dirs: Vec<PathBuf> = rel.iter().map(|r| r.1.clone()).collect();
    let mut failed = Vec::new();
    let mut made = None;
    for shm in collect::shm_dirs("rings") {
        match collect::Collector::new(&shm, &abs, rel_dirs.clone()) {
            Ok(c) => {
                made = Some((shm, c));
                break;
            }
            Err(e) => failed.push(format!("{}: {e}", shm.display())),
        }
    }
    let (shm, mut collector) =
        made.ok_or_else(|| format!("no place for the threads' buffers ({})", failed.join("; ")))?;
    let config = opts.config(&abs, &shm)?;
    collector.set_ring_len(shadowgraph::record::writer::shared_ring_len(opts.buffer));
    let collector = collector.spawn();
    let _signals = ForwardSignals::install();
    // Unless told not to, the recording lasts as long as the program's
    // descendants too (those it forked, and the programs they became).
    let lifeline = if opts.no_children {
        None
    } else {
        Some(Lifeline::new().map_err(|e| format!("cannot make a pipe: {e}"))?)
    };
    let mut program_pid = 0;
    let status = Command::new(prog)
        .args(args)
        .env("LD_PRELOAD", preload(&agent))
        .env(config::ENV, config.to_env_value())
        .spawn()
        .and_then(|child| {
            let started = std::time::Instant::now();
            let pid = child.id() as i32;
            program_pid = pid;
            CHILD.store(pid, Ordering::Release);
            let lifeline = lifeline.map(Lifeline::handed_over);
            let st = wait_with_usage(pid, started);
            CHILD.store(0, Ordering::Release);
            if let Some(l) = lifeline {
                l.wait_for_descendants(prog);
            }
            st
        });
    let finished = collector.finish();
    let totals = finished.totals;
    let (status, usage) = status.map_err(|e| format!("cannot run {prog}: {e}"))?;
    // One line per program and reason: a program that runs `system()` in
    // a loop starts the same shell many times.
    let mut untraced: std::collections::BTreeMap<(&str, &str), Vec<i32>> = Default::default();
    for (pid, exe, why) in &finished.execs {
        untraced.entry((exe, why)).or_default().push(*pid);
    }
    for ((exe, why), pids) in untraced {
        match pids[..] {
            [pid] => eprintln!("# not traced: process {pid} started {exe} (exec): {why}"),
            _ => eprintln!(
                "# not traced: {} processes started {exe} (exec; {}{}): {why}",
                pids.len(),
                pids.iter()
                    .take(3)
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if pids.len() > 3 { ", …" } else { "" }
            ),
        }
    }
    if !finished.running.is_empty() {
        eprintln!(
            "shadowgraph: warning: processes {:?} started by {prog} were still running when it exited: their later calls are not recorded",
            finished.running
        );
    }
    // The recording's directories, then those of every program started by
    // exec (a session of its own each).
    // (label, directory, whether it is an exec session's whose exit is not
    // the program's)
    let mut dirs: Vec<(String, PathBuf, bool)> = rel
        .iter()
        .map(|(label, r)| (label.clone(), collect::instance_dir(&abs, r), false))
        .collect();
    for (base, pid) in &finished.sessions {
        let what = format!(
            "process {pid} ({}, started by exec): ",
            base.file_name().unwrap_or_default().to_string_lossy()
        );
        // A program the recorded one became by exec ends as it ends: its
        // exit status is ours to tell. Another process's is not.
        let foreign = *pid != program_pid;
        dirs.extend(rel.iter().map(|(label, r)| {
            (
                format!("{what}{label}"),
                collect::instance_dir(base, r),
                foreign,
            )
        }));
    }
    for (label, d, foreign) in dirs {
        let info_path = d.join("shadowgraph.info");
        if info_path.exists() {
            let t = totals.get(&d).copied().unwrap_or_default();
            // The program's exit and usage are the recording's, not those
            // of a session in another process (not ours to wait for).
            let run = (!foreign).then_some((status, &usage));
            let finished = complete_metadata(&d, t, &path, run).unwrap_or(false);
            if !finished {
                // Cut short (crash, _exit): the agent wrote metadata at
                // start; the rings held the rest.
                if foreign {
                    eprintln!("# {label}it ended without the recording's exit step; what it recorded is kept");
                } else {
                    eprintln!("# {label}{prog} ended without the recording's exit step ({status}); what it recorded is kept");
                }
            }
            let converted = shadowgraph_data::dir::DataDir::open(&d).and_then(|dd| {
                if shadowgraph_data::profile::is_profile(&dd) {
                    Ok(()) // no records to convert
                } else {
                    shadowgraph_data::uftrace::export(&dd, &d)
                }
            });
            if let Err(e) = converted {
                eprintln!("shadowgraph: {e}");
            }
        }
        match shadowgraph_data::dir::DataDir::open(&d) {
            Ok(dd) if shadowgraph_data::profile::is_profile(&dd) => {
                match shadowgraph_data::profile::read(&dd) {
                    Ok(rows) => eprintln!(
                        "# {label}profiled {} calls of {} functions into {}",
                        rows.values().map(|r| r.calls).sum::<u64>(),
                        rows.keys()
                            .map(|k| k.1)
                            .collect::<std::collections::HashSet<_>>()
                            .len(),
                        d.display()
                    ),
                    Err(e) => eprintln!("shadowgraph: {label}{e}"),
                }
            }
            Ok(dd) => {
                // Counted from the files: right also when the exit step
                // (which updates the counts in `info`) never ran.
                let records: u64 = dd
                    .tids
                    .iter()
                    .filter_map(|&t| std::fs::metadata(dd.dat_path(t)).ok())
                    .map(|m| m.len() / 16)
                    .sum();
                eprintln!(
                    "# {label}recorded {records} records ({} lost) from {} threads into {}",
                    dd.info.get("lost").unwrap_or("?"),
                    dd.tids.len(),
                    d.display()
                );
                if let Some(w) = dd.loss_warning() {
                    eprintln!("shadowgraph: {label}{w}");
                }
                if let Some(n) = dd.writer_wait_note(usage.elapsed_ns) {
                    eprintln!("shadowgraph: {label}{n}");
                }
            }
            Err(_) => eprintln!(
                "shadowgraph: {prog} exited ({status}) without a complete recording in {} (see above)",
                d.display()
            ),
        }
    }
    Ok(exit_code(status))
}

/// Waits for the traced program: how it ended, and what it used.
fn wait_with_usage(
    pid: i32,
    started: std::time::Instant,
) -> std::io::Result<(std::process::ExitStatus, crate::sysinfo::Usage)> {
    use std::os::unix::process::ExitStatusExt;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waiting for our own child with valid out-parameters.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut rusage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok((
        std::process::ExitStatus::from_raw(status),
        crate::sysinfo::Usage {
            rusage,
            elapsed_ns: started.elapsed().as_nanos() as u64,
        },
    ))
}

/// The traced program while it runs (0: none).
static CHILD: AtomicI32 = AtomicI32::new(0);

/// A signal came to `record` after the program ended, while it waited for
/// the program's descendants: stop waiting.
static STOP_WAITING: AtomicBool = AtomicBool::new(false);

/// A pipe whose write end the program and every process it starts inherit
/// (it is not close-on-exec; a high number, out of the way of the fds a
/// program opens): its read end reaches end-of-file once the last of them
/// has ended (or closed it), as uftrace waits for a program's children.
struct Lifeline {
    read: std::os::fd::OwnedFd,
    write: Option<std::os::fd::OwnedFd>,
}

impl Lifeline {
    fn new() -> std::io::Result<Lifeline> {
        use std::os::fd::FromRawFd;
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills two fds on success, which we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: just made, owned by nobody else.
        let (read, w) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        // F_DUPFD's copy is not close-on-exec: the program inherits it.
        // SAFETY: duplicating an fd we own.
        let inherited =
            unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&w), libc::F_DUPFD, 200) };
        if inherited < 0 {
            return Err(std::io::Error::last_os_error());
        }
        drop(w);
        Ok(Lifeline {
            read,
            // SAFETY: the duplicate is ours.
            write: Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(inherited) }),
        })
    }

    /// The program has its copy: ours goes, or we would wait for ourselves.
    fn handed_over(mut self) -> Lifeline {
        self.write = None;
        self
    }

    /// Waits until every process holding the write end has ended, or a
    /// signal tells `record` to stop; says what it waits for if it takes
    /// a while.
    fn wait_for_descendants(&self, prog: &str) {
        use std::os::fd::AsRawFd;
        let mut told = false;
        while !STOP_WAITING.load(Ordering::Acquire) {
            let mut p = libc::pollfd {
                fd: self.read.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, 200) };
            if r > 0 {
                // Nobody writes: readable means end-of-file (all gone).
                break;
            }
            if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
            if r == 0 && !told {
                eprintln!(
                    "# {prog} ended; recording the processes it started until they end \
                     (Ctrl-C stops here; --no-children does not wait)"
                );
                told = true;
            }
        }
    }
}

/// While a program is recorded, `record` must outlive it: the writer drains
/// the program's last records after it ended. Interrupts from the terminal
/// (which reach the program too) are ignored here; those sent to `record`
/// alone (kill) are passed on to the program. The previous dispositions
/// come back on drop. (A handler, not SIG_IGN: exec resets handlers, so
/// the program starts with the default dispositions.)
struct ForwardSignals {
    old: Vec<(i32, libc::sigaction)>,
}

const FORWARDED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

extern "C" fn forward_signal(sig: i32, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // si_code ≤ 0: sent by a process (kill, sigqueue, tkill); > 0: by the
    // kernel, as the terminal's interrupt, which the program got as well.
    let child = CHILD.load(Ordering::Acquire);
    if code <= 0 && child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, sig) };
    }
    if child == 0 {
        STOP_WAITING.store(true, Ordering::Release);
    }
}

impl ForwardSignals {
    fn install() -> ForwardSignals {
        let mut old = Vec::new();
        for sig in FORWARDED {
            // SAFETY: installing a plain SA_SIGINFO handler; the previous
            // disposition is kept to restore.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = forward_signal as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        ForwardSignals { old }
    }
}

impl Drop for ForwardSignals {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restoring the disposition saved at install.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
    }
}

/// Adds what the writer counted to the agent's `shadowgraph.info`;
/// returns whether the agent finished the recording (its exit step ran).
fn complete_metadata(
    dir: &Path,
    t: collect::Totals,
    exe: &Path,
    run: Option<(std::process::ExitStatus, &crate::sysinfo::Usage)>,
) -> Result<bool, String> {
    use shadowgraph_data::dir::{DataDir, Info};
    let d = DataDir::open(dir).map_err(|e| e.to_string())?;
    let n = |k: &str| {
        d.info
            .get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let finished = d.info.get("finished").is_some();
    let mut info = Info::default();
    for (k, v) in &d.info.fields {
        info.set(k, v);
    }
    info.set("records", n("records") + t.written);
    info.set("lost", n("lost") + t.lost);
    let (steps, worst) = d.info.clock_steps_back();
    info.set(
        "clock_steps_back",
        format!(
            "{} / {}",
            steps + t.clock_steps_back,
            worst.max(t.clock_step_max)
        ),
    );
    if t.errno != 0 && d.info.get("write_error").is_none() {
        info.set("write_error", std::io::Error::from_raw_os_error(t.errno));
    }
    // A session's program is not `exe`: the agent named its own.
    let exe = d
        .info
        .get("exe")
        .map(PathBuf::from)
        .unwrap_or(exe.to_owned());
    crate::sysinfo::describe_machine(&mut info);
    if let Some((status, usage)) = run {
        crate::sysinfo::describe_run(&mut info, &exe, status, usage);
    } else if let Some(id) = shadowgraph::elf::build_id(&exe) {
        info.set("build_id", id);
    }
    info.write(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(finished)
}

/// Records into a temporary directory, replays, and removes it.
pub fn live(opts: &RecordOptions, program: &[String]) -> Result<ExitCode, String> {
    let dir = std::env::temp_dir().join(format!("shadowgraph-live-{}", std::process::id()));
    let code = record(&dir, opts, program)?;
    // One recording, or one per tracer (a profile is shown as its report).
    let names = opts.tracer_names();
    let shown = if names.is_empty() {
        show_live(&dir, None)
    } else {
        names
            .iter()
            .try_for_each(|n| show_live(&dir.join(n), Some(n)))
    };
    let _ = std::fs::remove_dir_all(&dir);
    shown?;
    Ok(code)
}

/// `live`'s view of one recording directory: replay, or a profile's
/// report; headed by the tracer's name when there are several. Without a
/// recording `record` has said why already.
fn show_live(dir: &Path, tracer: Option<&str>) -> Result<(), String> {
    use shadowgraph_data::{dir::DataDir, profile, replay, report::SortKey};
    use std::io::Write;
    let Ok(d) = DataDir::open(dir) else {
        return Ok(());
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if let Some(t) = tracer {
        writeln!(out, "## tracer {t}").map_err(|e| e.to_string())?;
    }
    let shown = if profile::is_profile(&d) {
        profile::report(&d, SortKey::Total, false, &[], &mut out)
    } else {
        replay::replay(&d, &mut out).and_then(|()| {
            // Programs started by exec, each after a line naming it (the
            // directory goes away with the rest).
            for s in d.exec_sessions() {
                let Ok(sd) = DataDir::open(&s) else {
                    continue;
                };
                writeln!(
                    out,
                    "\n# started by exec: {}",
                    sd.info.get("exe").unwrap_or("?")
                )
                .map_err(replay::ReplayError::Io)?;
                replay::replay(&sd, &mut out)?;
            }
            Ok(())
        })
    };
    shown
        .and_then(|()| out.flush().map_err(replay::ReplayError::Io))
        .map_err(|e| e.to_string())
}

/// `prog` itself if it contains a slash, else its first match in `$PATH`.
fn find_program(prog: &str) -> Result<PathBuf, String> {
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{prog}: no such program"))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{prog}: not found in PATH"))
}

fn tempfile(what: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir();
    Ok(dir.join(format!("shadowgraph-{what}-{}", std::process::id())))
}

pub fn count(
    program: &[String],
    top: usize,
    graph: bool,
    hijack_returns: bool,
) -> Result<ExitCode, String> {
    let (status, mut counts, summary) = run_counted(program, graph, hijack_returns)?;
    counts.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.function.cmp(&b.function)));
    print_counts(&counts, top);
    eprintln!("# {summary}");
    Ok(exit_code(status))
}

fn print_counts(counts: &[Counted], top: usize) {
    let graph = counts.iter().any(|c| c.returns.is_some());
    if graph {
        println!("{:>12} {:>12}  FUNCTION", "CALLS", "RETURNS");
    } else {
        println!("{:>12}  FUNCTION", "CALLS");
    }
    let n = if top == 0 {
        counts.len()
    } else {
        top.min(counts.len())
    };
    for c in &counts[..n] {
        let module = Path::new(&c.module)
            .file_name()
            .map(|f| f.to_string_lossy())
            .unwrap_or_default();
        match c.returns {
            Some(r) => println!("{:>12} {:>12}  {}  [{}]", c.calls, r, c.function, module),
            None => println!("{:>12}  {}  [{}]", c.calls, c.function, module),
        }
    }
    let open = counts
        .iter()
        .filter(|c| c.returns.is_some_and(|r| r != c.calls))
        .count();
    if open > 0 {
        println!("# {open} functions were still running when the report was written");
    }
}

/// The program's exit status as ours; killed by a signal: 128 + the
/// signal's number, as a shell reports it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}

pub fn demo(keep: Option<PathBuf>) -> Result<ExitCode, String> {
    let dir = match keep {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("shadowgraph-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let src = dir.join("demo.c");
    let exe = dir.join("demo");
    std::fs::write(&src, DEMO_C).map_err(|e| format!("{}: {e}", src.display()))?;
    let flags = ["-O2", "-pthread", "-fpatchable-function-entry=5"];
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    eprintln!(
        "# building the sample: {cc} {} {}",
        flags.join(" "),
        src.display()
    );
    let built = Command::new(&cc)
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .map_err(|e| format!("cannot run the C compiler `{cc}`: {e} (install gcc)"))?;
    if !built.success() {
        return Err(format!("`{cc}` could not build the sample ({built})"));
    }
    eprintln!("# recording it (every function entry patched before main):");
    let data = dir.join("shadowgraph.data");
    let code = record(
        &data,
        &RecordOptions::default(),
        &[exe.to_string_lossy().into_owned()],
    )?;
    let d = shadowgraph_data::dir::DataDir::open(&data).map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    shadowgraph_data::replay::replay(&d, &mut text).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&text);
    const SHOWN: usize = 40;
    println!(
        "\n## replay: the call graph with durations (first {SHOWN} of {} lines)",
        text.lines().count()
    );
    for l in text.lines().take(SHOWN + 1) {
        println!("{l}");
    }
    println!("\n## report: time and calls per function");
    let mut out = std::io::stdout().lock();
    shadowgraph_data::report::report(
        &d,
        shadowgraph_data::report::SortKey::Calls,
        false,
        &Default::default(),
        &mut out,
    )
    .map_err(|e| e.to_string())?;
    println!(
        "\n# the whole trace: shadowgraph replay -d {0}   (uftrace replay -d {0} reads it too)",
        data.display()
    );
    Ok(code)
}
