//! What the end-to-end tests share: the `shadowgraph` binary under test,
//! scratch directories, programs built from tests/fixtures with patchable
//! entries, recordings and their views, and checks of a recording's
//! records.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

pub use shadowgraph_testkit::tool::require;

pub mod attach;
mod views;
#[allow(unused_imports)]
pub use views::*;

use shadowgraph_testkit::scratch;

pub fn shadowgraph() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shadowgraph"))
}

pub fn workdir(name: &str) -> PathBuf {
    let dir = scratch::scratch_root("shadowgraph-cli-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn lib_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shadowgraph/tests/fixtures")
        .join(name)
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn cc(srcs: &[&Path], flags: &[&str], out: &Path) {
    shadowgraph_testkit::cc::compile(srcs, flags, out).unwrap();
}

/// Builds `tests/fixtures/<source>` into `<dir>/<name>` with patchable
/// entries and no sibling-call optimisation (so every call returns
/// through its caller, as the tests' call counts assume).
pub fn build_fixture(dir: &Path, name: &str, source: &str) -> PathBuf {
    build_fixture_with(dir, name, source, &[])
}

/// [`build_fixture`] with more compiler flags (`-D` settings).
pub fn build_fixture_with(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let mut all = vec![
        "-O2",
        "-fno-optimize-sibling-calls",
        "-fpatchable-function-entry=5",
    ];
    all.extend_from_slice(flags);
    cc(&[&fixture(source)], &all, &exe);
    exe
}

/// Builds `tests/fixtures/<source>` (Rust) into `<dir>/<name>` with
/// patchable entries, as crate `prog`.
pub fn build_rust_fixture(dir: &Path, name: &str, source: &str) -> PathBuf {
    let exe = dir.join(name);
    let o = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["-O", "-Zpatchable-function-entry=5", "--crate-name", "prog"])
        .arg(fixture(source))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    exe
}

/// Builds the shared library `out` from `src` with patchable entries.
pub fn build_lib(src: &Path, out: &Path) {
    cc(
        &[src],
        &["-O2", "-fPIC", "-shared", "-fpatchable-function-entry=5"],
        out,
    );
}

/// `shadowgraph record OPTS -d DATA -- EXE`, which must succeed.
pub fn record_ok(opts: &[&str], data: &Path, exe: &Path) {
    let o = record_run(&[], opts, data, exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
}

/// `shadowgraph record OPTS -d DATA -- EXE ARGS`, with `env` added to the
/// environment: its output, whatever its status.
pub fn record_run(
    env: &[(&str, &str)],
    opts: &[&str],
    data: &Path,
    exe: &Path,
    args: &[&Path],
) -> Output {
    record_run_in(Path::new("."), env, opts, data, exe, args)
}

/// [`record_run`] in directory `cwd`.
pub fn record_run_in(
    cwd: &Path,
    env: &[(&str, &str)],
    opts: &[&str],
    data: &Path,
    exe: &Path,
    args: &[&Path],
) -> Output {
    let mut c = record_command(env, opts, data, exe);
    c.current_dir(cwd).args(args).output().unwrap()
}

/// `shadowgraph record OPTS -d DATA -- EXE` with `env`. Library calls
/// are left out (each test shows what its feature records), unless `opts`
/// holds `--libcall`; so are schedule events (when a thread sleeps or is
/// pre-empted: the machine's doing, as the uftrace recordings compared
/// with are made).
pub fn record_command(env: &[(&str, &str)], opts: &[&str], data: &Path, exe: &Path) -> Command {
    let mut c = shadowgraph();
    c.args(["record", "--no-libcall", "--no-sched"]);
    c.envs(env.iter().copied());
    c.args(opts).arg("-d").arg(data).arg("--").arg(exe);
    c
}

/// `shadowgraph VIEW -d DATA`'s output.
pub fn view_text(view: &str, data: &Path) -> String {
    text(&shadowgraph().args([view, "-d"]).arg(data).output().unwrap()).0
}

/// `uftrace VIEW -d DATA`'s output, which must succeed; None without
/// uftrace installed.
pub fn uftrace_view(view: &str, data: &Path) -> Option<String> {
    uftrace_view_with(view, data, &[])
}

/// `uftrace VIEW -d DATA ARGS`'s output, or None where uftrace is missing.
pub fn uftrace_view_with(view: &str, data: &Path, args: &[&str]) -> Option<String> {
    if !require("uftrace", &format!("uftrace {view}")) {
        return None;
    }
    let o = Command::new("uftrace")
        .args([view, "-d"])
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    Some(text(&o).0)
}

/// Whether uftrace is not installed (said on stderr with `what` is not
/// checked); CI must install it.
pub fn uftrace_missing(what: &str) -> bool {
    !require("uftrace", what)
}

/// `shadowgraph report -d DATA`'s output.
pub fn report_text(data: &Path) -> String {
    view_text("report", data)
}

/// `shadowgraph record OPTS -- EXE` fails with a message holding `want`.
pub fn record_refuses(opts: &[&str], exe: &Path, want: &str) {
    let o = shadowgraph()
        .arg("record")
        .args(opts)
        .arg("--")
        .arg(exe)
        .output()
        .unwrap();
    let err = text(&o).1;
    assert!(!o.status.success() && err.contains(want), "{opts:?}: {err}");
}

/// `shadowgraph replay -d DATA`'s output.
pub fn replay_text(data: &Path) -> String {
    view_text("replay", data)
}

/// The way a recording enters and leaves traced calls: the fused
/// single-user paths (the default), fgraph's callbacks (`--general-path`),
/// or hijacked return addresses instead of site stubs (`--hijack-returns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Fused,
    General,
    Hijacked,
}

impl Way {
    pub const ALL: [Way; 3] = [Way::Fused, Way::General, Way::Hijacked];

    /// Fused or general.
    pub fn of(fused: bool) -> Way {
        if fused {
            Way::Fused
        } else {
            Way::General
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Way::Fused => "fused",
            Way::General => "general",
            Way::Hijacked => "hijacked",
        }
    }

    /// `opts` with the option that selects this way in front.
    pub fn with<'a>(self, opts: &[&'a str]) -> Vec<&'a str> {
        let way = match self {
            Way::Fused => None,
            Way::General => Some("--general-path"),
            Way::Hijacked => Some("--hijack-returns"),
        };
        way.into_iter().chain(opts.iter().copied()).collect()
    }
}

/// One thread's lines of a replay (without columns), with its leaf calls
/// on one line each (`f() {` right before `} /* f */` becomes `f();`): a
/// replay merges a leaf only where no other thread's record comes between
/// its entry and exit, which depends on timing.
pub fn merge_leaves(lines: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in lines {
        let closes = l
            .trim_start()
            .strip_prefix("} /* ")
            .and_then(|r| r.strip_suffix(" */"));
        if let (Some(name), Some(prev)) = (closes, out.last_mut()) {
            if prev.trim_start() == format!("{name}() {{") {
                *prev = prev.replace("() {", "();");
                continue;
            }
        }
        out.push(l);
    }
    out
}

/// A replay's lines after its header, without the duration and thread
/// columns.
pub fn replay_body(replay: &str) -> Vec<String> {
    replay
        .lines()
        .skip(1)
        .map(|l| l.split_once("] | ").map_or(l, |x| x.1).to_string())
        .collect()
}

/// Whether the records of `tid` are in time order: strictly increasing
/// (the recorder moves a time that steps back to 1 ns after the one before
/// it), and no step it moved larger than the skew between CPUs' TSCs (a
/// thread moved to another vCPU of this VM may read a clock a few ns behind:
/// 5–6 seen under load). A record out of place in the ring is off by a
/// whole call or more.
pub fn in_time_order(d: &shadowgraph_data::dir::DataDir, tid: i32) -> Result<(), String> {
    const TSC_SKEW_NS: u64 = 50;
    in_time_order_within(d, tid, TSC_SKEW_NS)
}

/// The largest step back [`in_time_order_within`] lets a recording of
/// several tracers at once converted from TSC times have, for now: on
/// this 2-vCPU VM, under load, their writers move records forward by up
/// to 1.3 µs (in 72 runs: 5 of two plain tracers, 11 through the
/// callbacks), one tracer's never by more than 45 ns, and with
/// CLOCK_MONOTONIC times (no conversion) none are moved — the order the
/// threads record in is right, the TSC conversion is not yet (issue 30's
/// note). `--clock mono` tests keep several tracers' order exact.
pub const SEVERAL_TRACERS_STEP_NS: u64 = 2000;

/// [`in_time_order`] with steps moved forward of up to `max_step` ns.
pub fn in_time_order_within(
    d: &shadowgraph_data::dir::DataDir,
    tid: i32,
    max_step: u64,
) -> Result<(), String> {
    let recs = records_of(d, tid)?;
    let back = recs.windows(2).filter(|w| w[1].time <= w[0].time).count();
    let (steps, worst) = d.info.clock_steps_back();
    if back > 0 || worst > max_step {
        return Err(format!(
            "thread {tid}: {back} records not after the one before; {steps} stepped back, by up to {worst} ns"
        ));
    }
    Ok(())
}

/// Whether each function's entries and exits on thread `tid` are as many;
/// the thread's record count.
pub fn every_call_closes(d: &shadowgraph_data::dir::DataDir, tid: i32) -> Result<usize, String> {
    use shadowgraph_data::format::Kind;
    let recs = records_of(d, tid)?;
    let mut open: HashMap<u64, i64> = HashMap::new();
    for r in &recs {
        match r.kind {
            Kind::Entry => *open.entry(r.addr).or_default() += 1,
            Kind::Exit => *open.entry(r.addr).or_default() -= 1,
            _ => {}
        }
    }
    open.retain(|_, n| *n != 0);
    if open.is_empty() {
        Ok(recs.len())
    } else {
        Err(format!(
            "thread {tid}: entries - exits by function {open:x?}"
        ))
    }
}

/// The records of thread `tid`, or why not.
pub fn records_of(
    d: &shadowgraph_data::dir::DataDir,
    tid: i32,
) -> Result<Vec<shadowgraph_data::format::Record>, String> {
    d.records(tid).map_err(|e| e.to_string())
}

/// Whether every exit of `tid` closes the innermost call still open, at
/// its function and depth, every entry is at the depth of the calls open
/// before it, and no call is left open but those of `open_at_end` (the
/// functions still running when the recording ended, outermost first).
pub fn calls_nest_exactly(
    d: &shadowgraph_data::dir::DataDir,
    tid: i32,
    open_at_end: &[u64],
) -> Result<(), String> {
    use shadowgraph_data::format::Kind;
    let mut open: Vec<(u64, u16)> = Vec::new();
    for (i, r) in records_of(d, tid)?.iter().enumerate() {
        match r.kind {
            Kind::Entry if r.depth as usize == open.len() => open.push((r.addr, r.depth)),
            Kind::Exit if open.last() == Some(&(r.addr, r.depth)) => {
                open.pop();
            }
            Kind::Entry | Kind::Exit => {
                return Err(format!(
                    "thread {tid}, record {i}: {:?} of {:#x} at depth {}, the innermost of {} open calls {:x?}",
                    r.kind,
                    r.addr,
                    r.depth,
                    open.len(),
                    open.last()
                ))
            }
            _ => {}
        }
    }
    let left: Vec<u64> = open.iter().map(|&(a, _)| a).collect();
    if left != open_at_end {
        return Err(format!("thread {tid}: left open {left:x?}"));
    }
    Ok(())
}

/// Whether every entry of `tid` is at the depth of the calls open before
/// it, and every exit one less (uftrace's replay nests by these depths).
pub fn depths_follow_the_records(
    d: &shadowgraph_data::dir::DataDir,
    tid: i32,
) -> Result<(), String> {
    use shadowgraph_data::format::Kind;
    let mut open = 0i64;
    for (i, r) in records_of(d, tid)?.iter().enumerate() {
        let want = match r.kind {
            Kind::Entry => open,
            Kind::Exit => open - 1,
            _ => continue,
        };
        if r.depth as i64 != want {
            return Err(format!(
                "thread {tid}, record {i}: {:?} at depth {}, {open} calls open",
                r.kind, r.depth
            ));
        }
        open = want + (r.kind == Kind::Entry) as i64;
    }
    Ok(())
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `shadowgraph count` output → function → calls.
pub fn counts(stdout: &str) -> HashMap<String, u64> {
    stdout
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let calls = it.next()?.parse().ok()?;
            Some((it.next()?.to_string(), calls))
        })
        .collect()
}

/// `count --graph` output → function → (calls, returns).
pub fn graph_counts(stdout: &str) -> HashMap<String, (u64, u64)> {
    stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("CALLS"))
        .skip(1)
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let calls = it.next()?.parse().ok()?;
            let rets = it.next()?.parse().ok()?;
            Some((it.next()?.to_string(), (calls, rets)))
        })
        .collect()
}

/// Replay lines with the duration column reduced to "D" (present) or " ",
/// up to the list of calls left open.
pub fn shape(replay: &str) -> Vec<String> {
    replay
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let (dur, rest) = l.split_at(11);
            let mark = if dur.trim().is_empty() { " " } else { "D" };
            let rest = rest.split_once("] | ").map(|x| x.1).unwrap_or(rest);
            format!("{mark}|{rest}")
        })
        .collect()
}

/// Builds calls.c with a main, records `prog 2` into `<dir>/trace.data`;
/// returns (program, data directory).
pub fn record_calls_program(name: &str) -> (PathBuf, PathBuf) {
    let dir = workdir(name);
    let exe = dir.join("prog");
    cc(
        &[&lib_fixture("calls.c")],
        &["-O2", "-DWITH_MAIN", "-fpatchable-function-entry=5"],
        &exe,
    );
    let data = dir.join("trace.data");
    let o = record_run(&[], &[], &data, &exe, &["2".as_ref()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("(0 lost)"), "{err}");
    (exe, data)
}

/// Parses a duration as `report` prints it ("  1.234 ms") into ns.
pub fn parse_report_duration(s: &str) -> u64 {
    let s = s.trim();
    if s.is_empty() {
        return 0;
    }
    let (v, unit) = s.split_at(s.len() - 2);
    let v: f64 = v.trim().parse().unwrap();
    let scale = match unit {
        "us" => 1e3,
        "ms" => 1e6,
        " s" => 1e9,
        other => panic!("unit {other}"),
    };
    (v * scale) as u64
}

/// Rows of a report: function → (total, self, calls).
pub fn report_rows(out: &str) -> HashMap<String, (u64, u64, u64)> {
    out.lines()
        .skip(2)
        .map(|l| {
            let total = parse_report_duration(&l[..12]);
            let self_t = parse_report_duration(&l[12..24]);
            let rest: Vec<&str> = l[24..].split_whitespace().collect();
            let calls: u64 = rest[0].parse().unwrap();
            let name = rest.last().unwrap().to_string();
            (name, (total, self_t, calls))
        })
        .collect()
}

/// The part of a replay's lines after `| ` (the call graph), for comparing
/// replays whose durations or TID column widths differ.
pub fn graph_part(replay: &str) -> Vec<String> {
    replay
        .lines()
        .skip(1)
        .map(|l| l.split_once("| ").map_or(l, |x| x.1).to_string())
        .collect()
}

/// The specs of `args_values.c`'s functions, as `-A` and `-R` take them.
pub const ARGS_VALUES_SPECS: [(&str, &str); 20] = [
    ("-A", "add@arg1,arg2/i32"),
    ("-A", "neg@arg1"),
    ("-A", "str@arg1/s,arg2/x"),
    ("-A", "next@arg1/c"),
    ("-A", "half@fparg1"),
    ("-A", "third@fparg1/32"),
    ("-A", "call@arg1/p"),
    ("-A", "big@arg1/u"),
    ("-A", "name@arg1/i32"),
    ("-A", "peek@arg1/s"),
    ("-A", "many@arg1,arg7,arg8"),
    ("-R", "many@retval"),
    ("-R", "add@retval"),
    ("-R", "neg@retval"),
    ("-R", "str@retval/i64"),
    ("-R", "next@retval/c"),
    ("-R", "half@retval/f64"),
    ("-R", "third@retval/f32"),
    ("-R", "big@retval/x"),
    ("-R", "name@retval/s"),
];

/// A target process, killed if a test ends without waiting for it.
pub struct Target(pub Child);

impl std::ops::Deref for Target {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Target {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The target, started and running ("ready" read).
pub fn start_target(exe: &std::path::Path, args: &[&str]) -> (Target, BufReader<ChildStdout>) {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (Target(child), out)
}

/// Tells the target to end (a byte on stdin); what it printed then, once
/// it exited with status 0.
pub fn end_target(child: &mut Target, out: &mut BufReader<ChildStdout>) -> String {
    child.stdin.as_mut().unwrap().write_all(b"x").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {rest}");
    rest
}

/// The environment of a recorded program that registers rseq (`rseq`, as
/// glibc does by default) or not (glibc told not to: the fused paths then
/// claim ring slots by `cmpxchg`).
pub fn rseq_env(rseq: bool) -> &'static [(&'static str, &'static str)] {
    match rseq {
        true => &[],
        false => &[("GLIBC_TUNABLES", "glibc.pthread.rseq=0")],
    }
}

/// Whether glibc registered rseq for this process's threads (then for the
/// recorded program's too: same glibc, same kernel).
pub fn rseq_registered() -> bool {
    // SAFETY: dlsym of glibc's `const unsigned int __rseq_size`, if any.
    unsafe {
        let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()) as *const u32;
        !size.is_null() && *size >= 16
    }
}

/// The restarted records `info` reports for the fused path with rseq.
pub fn rseq_restarts(info: &str) -> Option<u64> {
    info.split("ring slots by rseq, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
}

/// The replay of `data`'s last `n` lines (their calls, without columns),
/// last first, LOST records left out (one stands where the writer noted
/// the loss: the last may follow everything).
pub fn replay_last_lines(data: &Path, n: usize) -> Vec<String> {
    replay_text(data)
        .lines()
        .rev()
        .map(|l| l.split_once("] | ").map_or(l, |x| x.1))
        .filter(|l| !l.contains("/* LOST "))
        .take(n)
        .map(str::to_string)
        .collect()
}

/// Each of `lines` is in `replay` (said with the whole when not).
pub fn shows_each(replay: &str, lines: &[&str]) {
    for shown in lines {
        assert!(replay.contains(shown), "{shown} in\n{replay}");
    }
}
