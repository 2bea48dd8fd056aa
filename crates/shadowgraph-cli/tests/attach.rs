//! `record -p PID`: a recording of a process that shadowgraph did not
//! start, which runs on unharmed after it.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

/// A target process, killed if a test ends without waiting for it.
struct Target(Child);

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
fn start_target(exe: &std::path::Path, args: &[&str]) -> (Target, BufReader<ChildStdout>) {
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

/// `shadowgraph record -p PID OPTS -d DATA`.
fn record_p(pid: &str, opts: &[&str], data: &std::path::Path) -> std::process::Output {
    shadowgraph()
        .args(["record", "-p", pid])
        .args(opts)
        .arg("-d")
        .arg(data)
        .output()
        .unwrap()
}

/// Tells the target to end (a byte on stdin); what it printed then, once
/// it exited with status 0.
fn end_target(child: &mut Target, out: &mut BufReader<ChildStdout>) -> String {
    child.stdin.as_mut().unwrap().write_all(b"x").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {rest}");
    rest
}

/// Whether `entry` is an untraced site: the 5-byte nop, or the five
/// 1-byte nops the compiler wrote.
fn is_nop(entry: &[u8]) -> bool {
    entry == [0x0f, 0x1f, 0x44, 0, 0] || entry == [0x90; 5]
}

/// The 5 bytes at `function`'s entry in process `pid`.
fn entry_bytes(pid: u32, exe: &std::path::Path, function: &str) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let nm = Command::new("nm").arg(exe).output().unwrap();
    let addr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find(|l| l.ends_with(&format!(" T {function}")))
        .map(|l| u64::from_str_radix(l.split(' ').next().unwrap(), 16).unwrap())
        .unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let exe = std::fs::canonicalize(exe).unwrap();
    let base = maps
        .lines()
        .find(|l| l.ends_with(exe.to_str().unwrap()))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut b = vec![0u8; 5];
    mem.read_exact_at(&mut b, base + addr).unwrap();
    b
}

/// Threads that exist already are traced from the attach on, the
/// recording nests, the sites are nops again afterwards, and the program
/// runs on: no EINTR reached it, and it ends as untraced.
#[test]
fn record_p_traces_a_running_program_and_leaves_it_unharmed() {
    let dir = workdir("attach");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id();
    let data = dir.join("a.data");
    let o = record_p(&pid.to_string(), &["--duration", "300ms"], &data);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("# attached to process {pid}")),
        "{err}"
    );
    // (main is blocked in read() throughout: only the worker records.)
    assert!(err.contains("(0 lost) from 1 threads"), "{err}");
    let rows = report_rows(&report_text(&data));
    let (mids, leaves) = (rows["mid"].2, rows["leaf"].2);
    assert!(mids > 10, "{rows:?}");
    // Each mid calls leaf 3 (worker) or 2 (main) times; a call under way
    // at the attach or the detach is not recorded.
    assert!(leaves >= 2 * mids - 4 && leaves <= 3 * mids + 6, "{rows:?}");
    assert!(rows.contains_key("nanosleep"), "{rows:?}");
    let body = replay_body(&replay_text(&data));
    assert!(body.iter().any(|l| l.trim() == "leaf();"), "{body:?}");
    // Untraced again: the entry is a nop (five 1-byte nops where the
    // attach deferred the site: a thread was inside them).
    assert!(is_nop(&entry_bytes(pid, &exe, "mid")));
    // A second session in the same process is refused, clearly (one per
    // process for now); the agent is found, not loaded twice.
    let o = record_p(
        &pid.to_string(),
        &["--duration", "100ms"],
        &dir.join("b.data"),
    );
    assert!(!o.status.success());
    assert_eq!(
        text(&o).1.trim(),
        format!("shadowgraph: process {pid}: a process runs one tracing session")
    );
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let agents: std::collections::HashSet<&str> = maps
        .lines()
        .filter(|l| l.contains("memfd:shadowgraph-agent"))
        .filter_map(|l| l.split_whitespace().nth(4))
        .collect();
    assert_eq!(agents.len(), 1, "{maps}");
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}

/// A process that exits while recorded ends the recording at once, with
/// what it recorded.
#[test]
fn record_p_ends_when_the_process_exits() {
    let dir = workdir("attach_exit");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (mut child, _out) = start_target(&exe, &["300"]);
    let data = dir.join("e.data");
    let started = std::time::Instant::now();
    let o = record_p(&child.id().to_string(), &[], &data);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("exited"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert!(child.wait().unwrap().success());
    let rows = report_rows(&report_text(&data));
    assert!(rows["mid"].2 > 0, "{rows:?}");
}

/// Clear one-line errors: no such process, a static program; the target
/// runs on.
#[test]
fn record_p_refuses_clearly() {
    let dir = workdir("attach_refused");
    let o = shadowgraph()
        .args(["record", "-p", "999999999", "-d"])
        .arg(dir.join("n.data"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert_eq!(
        text(&o).1.trim(),
        "shadowgraph: process 999999999: no such process 999999999"
    );
    // A program built without patchable entries: said, and it runs on.
    let mut sleeper = Target(Command::new("sleep").arg("30").spawn().unwrap());
    let o = record_p(&sleeper.id().to_string(), &[], &dir.join("p.data"));
    assert!(!o.status.success());
    let err = text(&o).1;
    assert!(
        err.contains("no patchable function entries to trace"),
        "{err}"
    );
    assert!(sleeper.try_wait().unwrap().is_none(), "sleep runs on");
    let stat = dir.join("static");
    cc(
        &[&fixture("attach_target.c")],
        &["-O2", "-static", "-pthread", "-fpatchable-function-entry=5"],
        &stat,
    );
    let (mut child, mut out) = start_target(&stat, &[]);
    let o = record_p(&child.id().to_string(), &[], &dir.join("s.data"));
    assert!(!o.status.success());
    let err = text(&o).1;
    assert!(err.contains("not linked with libc dynamically"), "{err}");
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}

/// A program's own SIGTRAP handler, installed before the attach, gets
/// every trap it raises while recorded and after (a trap raised while
/// shadowgraph waits for the thread to stop is delivered, not merged with
/// the next); `live -p` shows the calls made meanwhile.
#[test]
fn a_programs_own_sigtrap_handler_is_chained_to() {
    let dir = workdir("attach_traps");
    let exe = build_fixture(&dir, "traps", "attach_traps.c");
    let (mut child, mut out) = start_target(&exe, &[]);
    let o = shadowgraph()
        .args(["live", "-p", &child.id().to_string(), "--duration", "200ms"])
        .output()
        .unwrap();
    let (shown, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(shown.contains("work();"), "{shown}");
    assert!(shown.contains("raise();"), "{shown}");
    assert_eq!(end_target(&mut child, &mut out), "all traps handled\n");
}

/// C++ exceptions in flight while the agent comes in, while recorded, and
/// while it leaves are all caught where they should be: the agent takes
/// over the unwinder's entry points it would interpose when preloaded.
#[test]
fn exceptions_in_flight_survive_attach_and_detach() {
    let dir = workdir("attach_throw");
    let exe = build_fixture_with(&dir, "throw", "attach_throw.cpp", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let data = dir.join("t.data");
    let o = record_p(&child.id().to_string(), &["--duration", "300ms"], &data);
    assert!(o.status.success(), "{}", text(&o).1);
    let rows = report_rows(&report_text(&data));
    let (catches, throws) = (rows["catcher"].2, rows["thrower"].2);
    assert!(catches > 100 && throws > 2 * catches, "{rows:?}");
    assert_eq!(end_target(&mut child, &mut out), "bad=0\n");
}

/// A process already under ptrace (a debugger) is refused, naming its
/// tracer; it runs on.
#[test]
fn record_p_refuses_a_process_already_traced() {
    let dir = workdir("attach_traced");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (child, _out) = start_target(&exe, &[]);
    let pid = child.id() as i32;
    // SAFETY: seizing our own child, as a debugger would; it is killed
    // when the test ends (Target's drop).
    assert_eq!(unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) }, 0);
    let o = record_p(&pid.to_string(), &[], &dir.join("t.data"));
    assert!(!o.status.success());
    assert_eq!(
        text(&o).1.trim(),
        format!(
            "shadowgraph: process {pid} is already being traced by process {} (a debugger or strace?)",
            // SAFETY: gettid has no preconditions. (TracerPid names the
            // tracing thread.)
            unsafe { libc::syscall(libc::SYS_gettid) }
        )
    );
}

/// A `shadowgraph` killed in the middle of a recording ends its session:
/// the agent sees its end and every site is a nop again.
#[test]
fn a_killed_client_ends_its_recording() {
    let dir = workdir("attach_killed");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id();
    let data = dir.join("k.data");
    let mut client = Target(
        shadowgraph()
            .args(["record", "-p", &pid.to_string(), "-d"])
            .arg(&data)
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let wait_for = |traced: bool| {
        let start = std::time::Instant::now();
        while is_nop(&entry_bytes(pid, &exe, "mid")) == traced {
            assert!(start.elapsed().as_secs() < 20, "traced: {traced}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    wait_for(true);
    client.0.kill().unwrap();
    let _ = client.0.wait();
    wait_for(false);
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}

/// Stress: attached again and again (a fresh process each time, one
/// recording per process) while two threads run through the traced
/// functions' entries without pause, so that sleds are converted, and
/// some deferred, under threads held anywhere in them: never a torn
/// instruction (an exception not caught, a crash), and the program ends
/// as untraced every time.
#[test]
fn attaching_under_running_threads_never_tears_an_entry() {
    let dir = workdir("attach_stress");
    let exe = build_fixture_with(&dir, "throw", "attach_throw.cpp", &["-pthread"]);
    for round in 0..8 {
        let (mut child, mut out) = start_target(&exe, &[]);
        let data = dir.join(format!("s{round}.data"));
        let o = record_p(&child.id().to_string(), &["--duration", "50ms"], &data);
        assert!(o.status.success(), "round {round}: {}", text(&o).1);
        assert!(
            report_rows(&report_text(&data))["catcher"].2 > 0,
            "round {round}"
        );
        assert_eq!(end_target(&mut child, &mut out), "bad=0\n", "round {round}");
    }
}
