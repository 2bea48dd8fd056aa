//! `record -p PID`: a recording of a process that shadowgraph did not
//! start, which runs on unharmed after it.

mod common;

use common::attach::*;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

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
    // (A number alone is seconds.)
    let o = record_p(&pid.to_string(), &["--duration", "0.3"], &data);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("# attached to process {pid}"))
            && err.contains("recording until 0.300 s have passed"),
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
    // Schedule events, from perf events on the process's threads: the
    // worker's sleeps.
    let sched = !err.contains("schedule events are not recorded");
    if shadowgraph_testkit::tool::available(sched, "perf events (perf_event_open)", &err) {
        assert!(
            body.iter().any(|l| l.trim() == "/* linux:schedule */"),
            "{body:?}"
        );
    }
    // Untraced again: the entry is a nop (five 1-byte nops where the
    // attach deferred the site: a thread was inside them).
    assert!(is_nop(&entry_bytes(pid, &exe, "mid")));
    // A second session, after the first: the agent is found, not loaded
    // twice, and records with its own filter and record layout.
    let b = dir.join("b.data");
    let opts = ["--duration", "200ms", "-F", "leaf", "--compact"];
    let o = record_p(&pid.to_string(), &opts, &b);
    assert!(o.status.success(), "{}", text(&o).1);
    let rows = report_rows(&report_text(&b));
    assert!(rows["leaf"].2 > 10, "{rows:?}");
    assert!(!rows.contains_key("mid"), "{rows:?}");
    assert!(view_text("info", &b).contains("record layout       : compact"));
    let replay = shadowgraph().args(["replay", "-d"]).arg(&b).output();
    let (replay, warnings) = text(&replay.unwrap());
    assert!(
        replay.contains("leaf();") && warnings.is_empty(),
        "{warnings}"
    );
    assert!(is_nop(&entry_bytes(pid, &exe, "leaf")));
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
/// the agent sees its end and every site is a nop again, changed while a
/// helper `shadowgraph` left behind holds the threads (they block
/// SIGTRAP: an `int3` met would end the program); then another recording
/// can attach, and be killed in turn.
#[test]
fn a_killed_client_ends_its_recording() {
    let dir = workdir("attach_killed");
    let exe = build_fixture_with(&dir, "target", "attach_sigblocked.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id();
    let wait_for = |traced: bool| wait_entry(pid, &exe, "mid", traced);
    for round in 0..3 {
        let data = dir.join(format!("k{round}.data"));
        let mut client = Target(record_p_spawn(&pid.to_string(), &[], &data));
        wait_attached(&mut client);
        wait_for(true);
        client.0.kill().unwrap();
        let _ = client.0.wait();
        wait_for(false);
        assert!(
            child.try_wait().unwrap().is_none(),
            "round {round}: the program ended"
        );
    }
    assert_eq!(end_target(&mut child, &mut out), "bad=0\ndone\n");
}

/// Stress: attached again and again (a fresh process each time, one
/// recording per process) while two threads run through the traced
/// functions' entries without pause, so that sleds are converted, and
/// some deferred, under threads held anywhere in them: never a torn
/// instruction (an exception not caught, a crash), and the program ends
/// as untraced every time. The threads' calls come from frames entered
/// before the attach (no frame of theirs on the shadow stack): the plain
/// fused entry takes them at depth 0, and the detach unregisters its user
/// under them; every recording nests exactly.
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
        nests_exactly(&data);
        assert_eq!(end_target(&mut child, &mut out), "bad=0\n", "round {round}");
    }
}

/// Two sessions attached at once with disjoint filters: each sees only
/// what it asked for, both nest exactly, and when both have left every
/// site is a nop again.
#[test]
fn two_sessions_at_once_each_see_what_they_asked_for() {
    let dir = workdir("attach_two");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id().to_string();
    let (a, b) = (dir.join("a.data"), dir.join("b.data"));
    let first = record_p_spawn(
        &pid,
        &["--duration", "1500ms", "-F", "mid", "-N", "leaf"],
        &a,
    );
    // The second comes while the first records, and leaves before it.
    wait_entry(child.id(), &exe, "mid", true);
    let o = record_p(&pid, &["--duration", "300ms", "-F", "leaf"], &b);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let (ra, rb) = (report_rows(&report_text(&a)), report_rows(&report_text(&b)));
    assert!(ra["mid"].2 > 10 && !ra.contains_key("leaf"), "{ra:?}");
    assert!(rb["leaf"].2 > 10 && !rb.contains_key("mid"), "{rb:?}");
    nests_exactly(&a);
    nests_exactly(&b);
    for f in ["mid", "leaf"] {
        assert!(is_nop(&entry_bytes(child.id(), &exe, f)), "{f}");
    }
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}

/// Two sessions that both trace library calls: the second takes the
/// first's thunks as they are, and each call of `nanosleep` is recorded
/// once in each (not twice, through a second layer of thunks).
#[test]
fn two_sessions_record_each_library_call_once() {
    let dir = workdir("attach_two_libcalls");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id().to_string();
    let (a, b) = (dir.join("a.data"), dir.join("b.data"));
    let first = record_p_spawn(&pid, &["--duration", "1500ms"], &a);
    wait_entry(child.id(), &exe, "mid", true);
    let o = record_p(&pid, &["--duration", "300ms"], &b);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    for d in [&a, &b] {
        // A worker's round: mid, then nanosleep (a recording may begin or
        // end between the two, in each of the two workers).
        let rows = report_rows(&report_text(d));
        let (mids, sleeps) = (rows["mid"].2, rows["nanosleep"].2);
        assert!(
            mids > 10 && sleeps.abs_diff(mids) <= 4,
            "{}: {rows:?}",
            d.display()
        );
    }
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}

/// A later session's `-P` chooses among the functions the first one
/// chose: beside a first session without `-P` (every function), `-P
/// leaf` records leaf alone, on the path the two share; beside one with
/// `-P mid`, `-P leaf` names a
/// function that is no site and is refused, clearly, and the first
/// records on.
#[test]
fn a_later_sessions_p_chooses_among_the_firsts() {
    let dir = workdir("attach_two_p");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    for (first_p, later_ok) in [(&[][..], true), (&["-P", "mid"][..], false)] {
        let (mut child, mut out) = start_target(&exe, &[]);
        let pid = child.id().to_string();
        let (a, b) = (dir.join("a.data"), dir.join("b.data"));
        let _ = std::fs::remove_dir_all(&a);
        let _ = std::fs::remove_dir_all(&b);
        let args = [&["--duration", "1s"][..], first_p].concat();
        let first = record_p_spawn(&pid, &args, &a);
        wait_entry(child.id(), &exe, "mid", true);
        let args = ["--duration", "200ms", "--no-libcall", "-P", "leaf"];
        let o = record_p(&pid, &args, &b);
        let err = text(&o).1;
        if later_ok {
            assert!(o.status.success(), "{err}");
            let rb = report_rows(&report_text(&b));
            assert!(rb["leaf"].2 > 10 && !rb.contains_key("mid"), "{rb:?}");
            assert!(!rb.contains_key("nanosleep"), "{rb:?}");
            // Beside the first on the shared path, the sites' masks
            // choosing whose calls each records.
            let info = view_text("info", &b);
            assert!(
                info.contains("record path         : fused (several tracers"),
                "{info}"
            );
        } else {
            assert!(!o.status.success());
            assert!(
                err.contains(
                    "-P leaf: not among the functions the first recording of this process chose (-P mid): a later recording chooses among those"
                ),
                "{err}"
            );
        }
        let o = first.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        let ra = report_rows(&report_text(&a));
        assert!(ra["mid"].2 > 10, "{ra:?}");
        assert_eq!(
            ra.contains_key("leaf"),
            later_ok,
            "first {first_p:?}: {ra:?}"
        );
        assert_eq!(end_target(&mut child, &mut out), "done\n");
    }
}

/// Sessions come and go 50 times while two threads throw exceptions
/// through the traced functions without pause, now and then two at once:
/// no crash, no exception lost, every recording nests exactly, and the
/// program ends as untraced.
#[test]
fn sessions_come_and_go_while_threads_run() {
    let dir = workdir("attach_churn");
    let exe = build_fixture_with(&dir, "throw", "attach_throw.cpp", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id().to_string();
    let mut round = 0;
    while round < 50 {
        let filter = ["-F", if round % 2 == 0 { "catcher" } else { "thrower" }];
        let data = dir.join(format!("c{round}.data"));
        if round % 10 == 9 {
            // Two at once: one spawned, one run beside it.
            let other = dir.join(format!("c{}.data", round + 1));
            let bg = record_p_spawn(&pid, &["--duration", "150ms", filter[0], filter[1]], &data);
            let o = record_p(&pid, &["--duration", "50ms"], &other);
            assert!(o.status.success(), "round {round}: {}", text(&o).1);
            let o = bg.wait_with_output().unwrap();
            assert!(o.status.success(), "round {round}: {}", text(&o).1);
            nests_exactly(&other);
            round += 1;
        } else {
            let o = record_p(&pid, &["--duration", "20ms"], &data);
            assert!(o.status.success(), "round {round}: {}", text(&o).1);
        }
        nests_exactly(&data);
        round += 1;
    }
    for f in ["_Z7catcheri", "_Z7throweri"] {
        assert!(is_nop(&entry_bytes(child.id(), &exe, f)), "{f}");
    }
    assert_eq!(end_target(&mut child, &mut out), "bad=0\n");
}

/// Sixteen sessions at once are as many tracers as a process has: the
/// seventeenth is refused, clearly, and the sixteen record on.
#[test]
fn the_seventeenth_session_is_refused() {
    let dir = workdir("attach_17");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id().to_string();
    let clients: Vec<_> = (0..16)
        .map(|i| {
            let mut c = Target(record_p_spawn(&pid, &[], &dir.join(format!("s{i}.data"))));
            // Each attached (said on stderr) before the next comes.
            let mut line = String::new();
            let mut err = BufReader::new(c.0.stderr.as_mut().unwrap());
            err.read_line(&mut line).unwrap();
            assert!(line.starts_with("# attached"), "session {i}: {line}");
            c
        })
        .collect();
    let o = record_p(&pid, &[], &dir.join("s16.data"));
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("16 at most can record at once"),
        "{}",
        text(&o).1
    );
    for mut c in clients {
        // SAFETY: SIGINT to our own child, as Ctrl-C would.
        unsafe { libc::kill(c.0.id() as i32, libc::SIGINT) };
        assert!(c.0.wait().unwrap().success());
    }
    for i in 0..16 {
        nests_exactly(&dir.join(format!("s{i}.data")));
    }
    assert!(is_nop(&entry_bytes(child.id(), &exe, "mid")));
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}

/// The session's control socket answers a client of the process's user
/// ("status") and refuses another user's, by the peer's credentials
/// (SO_PEERCRED: the socket opened to everyone for the test). The
/// session records on.
#[test]
fn another_users_client_is_refused() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !shadowgraph_testkit::tool::available(
        root,
        "root (to run a client as nobody)",
        "SO_PEERCRED",
    ) {
        return;
    }
    let dir = workdir("attach_peer");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let client = build_fixture(&dir, "ctl", "ctl_client.c");
    let (mut child, mut out) = start_target(&exe, &[]);
    let mut session = Target(record_p_spawn(
        &child.id().to_string(),
        &[],
        &dir.join("p.data"),
    ));
    let mut line = String::new();
    BufReader::new(session.0.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("# attached"), "{line}");
    let rings = ["/dev/shm".into(), std::env::temp_dir()]
        .iter()
        .map(|b: &std::path::PathBuf| b.join(format!("shadowgraph-rings-{}", session.0.id())))
        .find(|d| d.join("control.sock").exists())
        .expect("the control socket");
    let sock = rings.join("control.sock");
    let ask = |as_nobody: bool| {
        let mut c = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&client);
            c
        } else {
            Command::new(&client)
        };
        let o = c.arg(&sock).arg("status").output().unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{}: {err}", o.status);
        out
    };
    assert_eq!(
        ask(false),
        format!(
            "status: recording; 1 recordings under way in process {}\n",
            child.id()
        )
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&rings, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(ask(true), "error: not allowed: another user's client\n");
    // SAFETY: SIGINT to our own child, as Ctrl-C would.
    unsafe { libc::kill(session.0.id() as i32, libc::SIGINT) };
    assert!(session.0.wait().unwrap().success());
    nests_exactly(&dir.join("p.data"));
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}

/// A Rust program, panicking through traced frames now and then (caught),
/// attached to twice, once with two recordings at once: its functions are
/// recorded, every recording nests exactly, no panic escapes its catch,
/// and it runs on untraced.
#[test]
fn a_rust_program_is_attached_to() {
    let dir = workdir("attach_rust");
    let exe = build_rust_fixture(&dir, "rusty", "attach_rust.rs");
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id().to_string();
    let a = dir.join("a.data");
    let o = record_p(&pid, &["--duration", "300ms"], &a);
    assert!(o.status.success(), "{}", text(&o).1);
    let rows = report_rows(&report_text(&a));
    let calls = |f: &str| {
        rows.iter()
            .filter(|(k, _)| k.contains(f))
            .map(|(_, v)| v.2)
            .sum::<u64>()
    };
    assert!(calls("branch") > 10 && calls("leaf") > 30, "{rows:?}");
    assert!(calls("risky") > 10, "{rows:?}");
    nests_exactly(&a);
    let (b, c) = (dir.join("b.data"), dir.join("c.data"));
    let bg = record_p_spawn(&pid, &["--duration", "400ms", "-F", "*risky*"], &b);
    let o = record_p(&pid, &["--duration", "100ms", "-F", "*branch*"], &c);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = bg.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    nests_exactly(&b);
    nests_exactly(&c);
    assert_eq!(end_target(&mut child, &mut out), "escaped=0\ndone\n");
}

/// Children the program forks while attached are recorded too (each its
/// own task), and theirs are left as they ended (`_exit`); the parent's
/// calls nest exactly.
#[test]
fn forked_children_are_followed_while_attached() {
    let dir = workdir("attach_forks");
    let exe = build_fixture(&dir, "forks", "attach_forks.c");
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id() as i32;
    let data = dir.join("f.data");
    let o = record_p(&pid.to_string(), &["--duration", "300ms"], &data);
    assert!(o.status.success(), "{}", text(&o).1);
    let rows = report_rows(&report_text(&data));
    assert!(rows["in_child"].2 > 5, "{rows:?}");
    assert_eq!(rows["leaf"].2, 5 * rows["in_child"].2, "{rows:?}");
    let tasks = std::fs::read_to_string(data.join("task.txt")).unwrap();
    assert!(
        tasks.matches("FORK ").count() as u64 >= rows["in_child"].2,
        "{tasks}"
    );
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    calls_nest_exactly(&d, pid, &[]).unwrap();
    assert_eq!(end_target(&mut child, &mut out), "done 0\n");
}

/// Recordings come and go while the program's threads come and go (their
/// exits end their rings while recordings end theirs): every recording
/// nests exactly, no result is wrong, and once none is left no ring is
/// still mapped in the program.
#[test]
fn recordings_end_while_threads_come_and_go() {
    let dir = workdir("attach_thread_churn");
    let exe = build_fixture_with(&dir, "churn", "attach_churn.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id().to_string();
    for round in 0..20 {
        let data = dir.join(format!("t{round}.data"));
        let filter: &[&str] = if round % 2 == 0 { &[] } else { &["-F", "mid"] };
        let o = record_p(&pid, &[&["--duration", "30ms"], filter].concat(), &data);
        assert!(o.status.success(), "round {round}: {}", text(&o).1);
        nests_exactly(&data);
    }
    assert_eq!(end_target(&mut child, &mut out), "bad=0 rings=0\n");
}

/// A process started under `shadowgraph record` (its agent preloaded) is
/// attached to as well: the agent there is reused, both recordings are
/// whole, and the program ends as it would have.
#[test]
fn a_process_started_under_record_is_attached_to() {
    let dir = workdir("attach_preloaded");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (a, b) = (dir.join("a.data"), dir.join("b.data"));
    let mut rec = shadowgraph();
    rec.args(["record", "-d"]).arg(&a).arg(&exe);
    let mut rec = Target(
        rec.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(rec.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let children = format!("/proc/{0}/task/{0}/children", rec.id());
    let pid = std::fs::read_to_string(children)
        .unwrap()
        .trim()
        .to_string();
    let o = record_p(&pid, &["--duration", "300ms", "-F", "mid"], &b);
    assert!(o.status.success(), "{}", text(&o).1);
    let rb = report_rows(&report_text(&b));
    assert!(rb["mid"].2 > 10 && rb["leaf"].2 > 10, "{rb:?}");
    assert!(!rb.contains_key("worker"), "{rb:?}");
    assert_eq!(end_target(&mut rec, &mut out), "done\n");
    let ra = report_rows(&report_text(&a));
    assert!(ra["mid"].2 > rb["mid"].2, "{ra:?} {rb:?}");
    nests_exactly(&a);
    nests_exactly(&b);
}

/// Another user's process: refused with the cause named, the process
/// unharmed. (Where `kernel.yama.ptrace_scope` restricts tracing, the
/// message names that setting instead.)
#[test]
fn another_users_process_is_refused() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !shadowgraph_testkit::tool::available(
        root,
        "root (to run shadowgraph as nobody)",
        "attaching to another user's process",
    ) {
        return;
    }
    let dir = workdir("attach_other_user");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let open = dir.join("open");
    std::fs::create_dir_all(&open).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_shadowgraph"))
        .args(["record", "-p", &child.id().to_string(), "-d"])
        .arg(open.join("n.data"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = text(&o).1;
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    let want = if matches!(scope.trim(), "1" | "2" | "3") {
        "kernel.yama.ptrace_scope"
    } else {
        "permission denied (a process of another user: run as root)"
    };
    assert!(err.contains(&format!("process {}", child.id())), "{err}");
    assert!(err.contains(want), "{err}");
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}

/// Threads that block every signal, SIGTRAP included, run through the
/// traced entries without pause while recordings come and go, two at
/// once: sites change only while the threads are held (never an int3 such
/// a thread could meet), and the program ends as untraced.
#[test]
fn threads_with_every_signal_blocked_survive_sessions() {
    let dir = workdir("attach_sigblocked");
    let exe = build_fixture_with(&dir, "target", "attach_sigblocked.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id().to_string();
    for round in 0..12 {
        let a = dir.join(format!("a{round}.data"));
        let b = dir.join(format!("b{round}.data"));
        let first = record_p_spawn(&pid, &["--duration", "150ms", "-F", "mid"], &a);
        std::thread::sleep(std::time::Duration::from_millis(20 * (round % 4)));
        let o = record_p(&pid, &["--duration", "40ms", "-F", "leaf"], &b);
        assert!(o.status.success(), "round {round}: {}", text(&o).1);
        let o = first.wait_with_output().unwrap();
        assert!(o.status.success(), "round {round}: {}", text(&o).1);
        assert!(
            child.try_wait().unwrap().is_none(),
            "round {round}: the program ended"
        );
        nests_exactly(&a);
        nests_exactly(&b);
        // Threads stopped on a sled's nops at the attach were stepped off
        // them: every function is traced, the busiest too.
        let (ra, rb) = (report_rows(&report_text(&a)), report_rows(&report_text(&b)));
        assert!(
            ra["mid"].2 > 10 && ra["leaf"].2 > 10,
            "round {round}: {ra:?}"
        );
        assert!(
            rb["leaf"].2 > 10 && !rb.contains_key("mid"),
            "round {round}: {rb:?}"
        );
    }
    for f in ["mid", "leaf"] {
        assert!(is_nop(&entry_bytes(child.id(), &exe, f)), "{f}");
    }
    assert_eq!(end_target(&mut child, &mut out), "bad=0\ndone\n");
}

/// `record -p` with `-A`/`-R`: arguments and return values of a running
/// program, the calls still open at the end closed past their data.
#[test]
fn record_p_records_arguments_and_return_values() {
    let dir = workdir("attach_args");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let data = dir.join("a.data");
    let opts = [
        "--duration",
        "200ms",
        "-A",
        "leaf@arg1",
        "-R",
        "leaf@retval",
    ];
    let o = record_p(&child.id().to_string(), &opts, &data);
    assert!(o.status.success(), "{}", text(&o).1);
    let body = replay_body(&replay_text(&data));
    // leaf(x) returns 3x + 1, called with 0, 1, 2.
    for call in ["leaf(0) = 1;", "leaf(1) = 4;", "leaf(2) = 7;"] {
        assert!(body.iter().any(|l| l.trim() == call), "{call}: {body:?}");
    }
    nests_exactly(&data);
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}

/// `--no-children`: the children the program forks while attached are
/// not recorded; the program is.
#[test]
fn no_children_leaves_forked_children_out_while_attached() {
    let dir = workdir("attach_no_children");
    let exe = build_fixture(&dir, "forks", "attach_forks.c");
    let (mut child, mut out) = start_target(&exe, &[]);
    let data = dir.join("f.data");
    let opts = ["--duration", "300ms", "--no-children", "--no-sched"];
    let o = record_p(&child.id().to_string(), &opts, &data);
    assert!(o.status.success(), "{}", text(&o).1);
    let rows = report_rows(&report_text(&data));
    assert!(
        rows["spawn"].2 > 5 && !rows.contains_key("in_child"),
        "{rows:?}"
    );
    let tasks = std::fs::read_to_string(data.join("task.txt")).unwrap();
    assert!(!tasks.contains("FORK "), "{tasks}");
    nests_exactly(&data);
    assert_eq!(end_target(&mut child, &mut out), "done 0\n");
}

/// A program that exits while `record -p` is getting in (loading the
/// agent, holding the threads, starting the session) is left to end as it
/// would have; `record` ends at once, with what it recorded or a one-line
/// message naming the process.
#[test]
fn a_program_exiting_during_the_attach_is_left_alone() {
    let dir = workdir("attach_exiting");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    for ms in [2, 5, 10, 20, 40, 80] {
        let mut child = Command::new(&exe)
            .arg(ms.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let pid = child.id();
        let data = dir.join(format!("x{ms}.data"));
        let what = format!("{ms} ms");
        let o = record_p_bounded(&pid.to_string(), &["--no-sched"], &data, &what);
        let err = text(&o).1;
        let said =
            err.lines().count() == 1 && err.starts_with(&format!("shadowgraph: process {pid}"));
        assert!(
            (o.status.success() && err.contains(&format!("# process {pid} exited"))) || said,
            "{ms} ms: {err}"
        );
        assert!(child.wait().unwrap().success(), "{ms} ms");
    }
}
