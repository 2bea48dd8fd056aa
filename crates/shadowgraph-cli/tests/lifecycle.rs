//! A recording as programs end: crashes, kills, a full disk, forks, exec, children that outlive the program, interrupted recordings.

mod common;

use common::*;
use shadowgraph_testkit::tool::available;
use std::path::Path;
use std::process::Command;

#[test]
fn a_crashing_program_leaves_a_readable_recording() {
    let dir = workdir("crash");
    let exe = dir.join("crash");
    cc(
        &[&fixture("crash.c")],
        &["-O2", "-fpatchable-function-entry=5"],
        &exe,
    );
    let data = dir.join("crash.data");
    let o = record_run(&[], &[], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(
        !o.status.success(),
        "the program crashed: the exit status says so"
    );
    assert_eq!(out.trim(), "15");
    assert!(
        err.contains("what it recorded is kept") && err.contains("(0 lost)"),
        "{err}"
    );
    let rep = replay_text(&data);
    let s = shape(&rep);
    assert_eq!(
        s[..3],
        [" |main() {", " |  work() {", "D|    leaf();"],
        "{rep}"
    );
    assert_eq!(
        s.iter().filter(|l| l.ends_with("leaf();")).count(),
        5,
        "{rep}"
    );
    assert!(
        s.last().unwrap().ends_with("crash() {"),
        "open frames at the crash: {rep}"
    );
    let (_, open) = rep
        .split_once("\nuftrace stopped tracing with remaining functions\n")
        .unwrap_or_else(|| panic!("the calls left open are listed: {rep}"));
    let open: Vec<&str> = open.lines().skip(2).collect();
    assert_eq!(open, ["[1] crash", "[0] main", ""], "{rep}");
    if require("uftrace", "the same view by uftrace") {
        let theirs = text(
            &Command::new("uftrace")
                .args(["replay", "-d"])
                .arg(&data)
                .output()
                .unwrap(),
        )
        .0;
        assert!(theirs.contains("work() {"), "{theirs}");
    }
}

#[test]
fn forked_and_executed_children_leave_the_parents_results_alone() {
    let dir = workdir("forks");
    let exe = dir.join("forks");
    cc(
        &[&fixture("forks.c")],
        &["-O2", "-fpatchable-function-entry=5"],
        &exe,
    );
    for graph in [false, true] {
        let mut cmd = shadowgraph();
        cmd.arg("count");
        if graph {
            cmd.arg("--graph");
        }
        let o = cmd.arg(&exe).output().unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert!(out.starts_with("child=0 system=0"), "{out}");
        assert!(!err.contains("shadowgraph:"), "a child complained: {err}");
        let (parent, child) = if graph {
            let c = graph_counts(&out);
            (c["parent_work"], c["child_work"])
        } else {
            let c = counts(&out);
            (
                (c["parent_work"], c["parent_work"]),
                (c["child_work"], c["child_work"]),
            )
        };
        assert_eq!(parent, (2, 2), "{out}");
        assert_eq!(
            child,
            (0, 0),
            "the child's calls are not the parent's: {out}"
        );
    }
    let data = dir.join("forks.data");
    let o = record_run(&[], &[], &data, &exe, &[]);
    let (_, err) = text(&o);
    assert!(o.status.success() && !err.contains("shadowgraph:"), "{err}");
    assert!(
        err.contains("# not traced: process") && err.contains("no patchable function entries"),
        "the shell system() started is named, with why: {err}"
    );
    // The parent's thread shows the parent's calls only; the forked child
    // is recorded in its own (the shell started by system() is an exec:
    // not traced).
    let parent: i32 = shadowgraph_data::dir::DataDir::open(&data)
        .unwrap()
        .info
        .get("pid")
        .unwrap()
        .parse()
        .unwrap();
    let out = replay_text(&data);
    let (mine, theirs): (Vec<&str>, Vec<&str>) = out
        .lines()
        .skip(1)
        .partition(|l| l.contains(&format!("[{parent:>6}]")));
    let head = out.lines().next().unwrap_or_default();
    let mine = shape(
        &[head]
            .into_iter()
            .chain(mine)
            .collect::<Vec<_>>()
            .join("\n"),
    );
    assert_eq!(
        mine,
        [
            " |main() {",
            "D|  parent_work();",
            "D|  parent_work();",
            "D|} /* main */"
        ]
    );
    assert_eq!(
        theirs.len(),
        100,
        "the child's 100 calls (it leaves main by exit()): {out}"
    );
    assert!(
        theirs
            .iter()
            .filter(|l| l.ends_with("child_work();"))
            .count()
            == 100
    );
}

/// A disk that fills up while recording (simulated with a file size limit:
/// writes past it fail with EFBIG, as they fail with ENOSPC on a full
/// disk): the program runs on unharmed, the loss is counted and its reason
/// told by `record` and by every view, and what was written stays readable.
/// Under a 512 KiB limit the traced threads cannot make their shared rings
/// (4 MiB files) and write their own; under 16 MiB the writer process hits
/// the limit.
#[test]
fn a_full_disk_loses_records_counted_and_explained_and_keeps_the_rest() {
    // fib(25): 242,786 calls (7.8 MB of records); fib(27): 635,622 (20 MB).
    full_disk(512 << 10, 25, 242_786);
    full_disk(16 << 20, 27, 635_622);
}

fn full_disk(limit: u64, n: u32, calls: u64) {
    let dir = workdir(&format!("fulldisk{limit}"));
    let exe = build_fixture(&dir, "fib", "fib_arg.c");
    let data = dir.join("fib.data");
    // The agent written out first (the file limit below would stop it).
    let warm = record_run(&[], &[], &dir.join("warm.data"), &exe, &["1".as_ref()]);
    assert!(warm.status.success(), "{}", text(&warm).1);
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f {} && exec \"$0\" record --no-libcall --no-sched -d \"$1\" -- \"$2\" {n}",
            limit / 512 // sh counts 512-byte blocks
        ))
        .arg(env!("CARGO_BIN_EXE_shadowgraph"))
        .arg(&data)
        .arg(&exe)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    // The program succeeded, the recording did not: the summary first,
    // then why the status is a failure.
    assert_eq!(o.status.code(), Some(1), "{err}");
    let summary = err.find("# recorded ").expect("a summary");
    let last = err.trim_end().lines().last().unwrap();
    assert!(
        last.starts_with("shadowgraph: the recording is incomplete: writing it failed (")
            && last.contains("File too large")
            && err.rfind(last).unwrap() > summary,
        "{err}"
    );
    let fibs = [75025, 121393, 196418];
    assert_eq!(
        out.trim(),
        fibs[n as usize - 25].to_string(),
        "the traced program is unharmed"
    );
    let lost: u64 = err
        .split_once("records (")
        .and_then(|(_, r)| r.split_once(" lost)"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no lost count: {err}"));
    // (The thread's <tid>.dat.)
    let dat = std::fs::read_dir(&data)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| {
            let p = e.path();
            p.extension().is_some_and(|x| x == "dat")
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|s| s.parse::<i32>().is_ok())
        })
        .unwrap();
    let kept = dat.metadata().unwrap().len() / 16;
    assert!(
        kept > 0 && kept <= limit / 16,
        "at most the limit was written: {kept} records"
    );
    // main and the calls of fib, entry and exit each.
    assert_eq!(kept + lost, 2 * calls, "every record kept or counted");
    let why = "records were lost while recording (writing the trace failed: File too large";
    assert!(err.contains(why), "record says why: {err}");
    for view in ["replay", "report"] {
        let o = shadowgraph()
            .args([view, "-d"])
            .arg(&data)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{view}: {err}");
        assert!(out.contains("fib"), "{view}: {out}");
        assert!(
            err.contains(why) && err.contains(&lost.to_string()),
            "{view} warns: {err}"
        );
    }
}

/// SIGKILL gives the program no chance to write anything: its records are
/// in the shared rings, which the writer drains after the program is gone.
#[test]
fn a_killed_program_loses_nothing_it_recorded() {
    let dir = workdir("killed");
    let exe = build_fixture(&dir, "killed", "killed_midway.c");
    let data = dir.join("k.data");
    let o = record_run(&[], &["--no-libs"], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(!o.status.success());
    assert_eq!(out.trim(), "705082704");
    // main, work, 100,000 leaf calls, work's exit, die's entry.
    assert!(
        err.contains("recorded 200004 records (0 lost)")
            && err.contains("what it recorded is kept"),
        "{err}"
    );
    let rep = replay_text(&data);
    let s = shape(&rep);
    assert_eq!(s.len(), 100_000 + 4, "{}", &rep[..rep.len().min(2000)]);
    assert_eq!(s[..3], [" |main() {", " |  work() {", "D|    leaf();"]);
    assert_eq!(s[s.len() - 2..], ["D|  } /* work */", " |  die() {"]);
    assert!(
        rep.ends_with("[1] die\n[0] main\n\n"),
        "{}",
        &rep[rep.len() - 200..]
    );
    // The calls that never returned count up to the thread's last record
    // (die's entry) in report and graph, as in uftrace's.
    let report = report_text(&data);
    let rows = report_rows(&report);
    assert_eq!(rows["main"].2, 1, "{report}");
    assert_eq!(rows["die"], (0, 0, 1), "{report}");
    assert!(rows["main"].0 > rows["work"].0, "{report}");
    let graph = text(
        &shadowgraph()
            .args(["graph", "-d"])
            .arg(&data)
            .arg("main")
            .output()
            .unwrap(),
    )
    .0;
    assert!(
        graph.contains(" : (1) main\n") && graph.contains(" +-(1) die\n"),
        "{graph}"
    );
    if let Some(theirs) = uftrace_view("report", &data) {
        assert_eq!(report, theirs);
    }
    if let Some(theirs) = uftrace_view_with("graph", &data, &["main"]) {
        assert_eq!(graph, theirs);
    }
}

/// A forked child records on into its own `.dat` (its threads' rings are
/// its own), `task.txt` tells uftrace where it came from, and a program
/// started by exec is recorded as a session of its own, in a directory of
/// its own inside the recording.
#[test]
fn forked_children_and_exec_sessions_are_recorded() {
    let dir = workdir("fork");
    let exe = build_fixture(&dir, "fk", "fork_child.c");
    let data = dir.join("f.data");
    let o = record_run(&[], &["--no-libs"], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "exec'd 9");
    assert!(err.contains("from 2 threads"), "{err}");
    // The exec'd program: <pid>-fk inside the recording, main → child_work
    // → leaf ×3, readable by both tools.
    let session = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no session directory: {err}"));
    let spid: i32 = session
        .file_name()
        .unwrap()
        .to_string_lossy()
        .strip_suffix("-fk")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        err.contains(&format!(
            "# process {spid} ({spid}-fk, started by exec): recorded 10 records (0 lost) from 1 threads"
        )),
        "{err}"
    );
    let want_session = [
        " |main() {",
        " |  child_work() {",
        "D|    leaf();",
        "D|    leaf();",
        "D|    leaf();",
        "D|  } /* child_work */",
        "D|} /* main */",
    ];
    let o = shadowgraph()
        .args(["replay", "-d"])
        .arg(&session)
        .output()
        .unwrap();
    assert_eq!(shape(&text(&o).0), want_session);
    if require("uftrace", "the same view by uftrace") {
        let o = Command::new("uftrace")
            .args(["replay", "-d"])
            .arg(&session)
            .output()
            .unwrap();
        assert_eq!(
            shape(&text(&o).0),
            want_session,
            "uftrace reads the session"
        );
    }
    // replay of the whole recording shows the session in place, as
    // uftrace shows a program that execs: the thread that exec'd goes on
    // in the new program (its calls left open are not listed); the other
    // views point at it.
    let o = shadowgraph()
        .args(["replay", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let (rep, rep_err) = text(&o);
    assert!(!rep.contains("# started by exec"), "{rep}");
    let head = rep.lines().next().unwrap_or("").to_string();
    let of_spid: Vec<&str> = rep
        .lines()
        .filter(|l| l.contains(&format!("[{spid:>6}] |")))
        .collect();
    // (--no-libs: fork and execl are not recorded.)
    assert_eq!(
        shape(&[&[head.as_str()][..], &of_spid].concat().join("\n")),
        want_session,
        "{rep}"
    );
    assert!(
        !rep.contains(&format!("task: {spid}\n")),
        "the exec'd thread went on: {rep}"
    );
    assert!(!rep_err.contains("recordings of their own"), "{rep_err}");
    // report: one table of every process, the exec'd program's too, as
    // uftrace counts every session: leaf 1 + 3 + 3 times, main twice.
    let report = report_text(&data);
    assert!(!report.contains("# started by exec"), "{report}");
    let rows = report_rows(&report);
    assert_eq!((rows["leaf"].2, rows["main"].2), (7, 2), "{report}");
    // The dumps too, as uftrace's: the thread's records go on in the
    // exec'd program's, under the same thread.
    let dump = view_text("dump", &data);
    assert_eq!(
        dump.matches(&format!("reading {spid}.dat")).count(),
        1,
        "{dump}"
    );
    let of_spid: Vec<&str> = dump
        .lines()
        .filter(|l| l.contains(&format!(" {spid}: [")))
        .collect();
    assert!(
        of_spid.iter().any(|l| l.contains("[entry] main(")),
        "{dump}"
    );
    let o = shadowgraph()
        .args(["dump", "--chrome", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let (chrome, chrome_err) = text(&o);
    assert!(o.status.success(), "{chrome_err}");
    assert!(
        !chrome_err.contains("recordings of their own"),
        "{chrome_err}"
    );
    let json: serde_json::Value = serde_json::from_str(&chrome).unwrap();
    let calls: Vec<String> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["tid"] == spid && e["ph"] == "B")
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        calls,
        ["main", "child_work", "leaf", "leaf", "leaf"],
        "{chrome}"
    );
    // One call graph of every program: main in each of the two.
    let o = shadowgraph()
        .args(["dump", "--graphviz", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let dot = text(&o).0;
    assert!(dot.contains("\"fk\" -> \"main\" [xlabel = \"2\"]"), "{dot}");
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    let parent: i32 = d.info.get("pid").unwrap().parse().unwrap();
    let child = *d.tids.iter().find(|&&t| t != parent).unwrap();
    let task = std::fs::read_to_string(data.join("task.txt")).unwrap();
    assert!(
        task.contains("FORK timestamp=") && task.contains(&format!("pid={child} ppid={parent}")),
        "{task}"
    );
    let o = shadowgraph()
        .args(["replay", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let rep = text(&o).0;
    let of = |tid: i32| -> Vec<String> {
        merge_leaves(
            rep.lines()
                .filter(|l| l.contains(&format!("[{tid:>6}]")))
                .map(|l| l.split_once("] | ").unwrap().1.trim().to_string())
                .collect(),
        )
    };
    assert_eq!(
        of(parent),
        [
            "main() {",
            "spawn();",
            "parent_work() {",
            "leaf();",
            "} /* parent_work */",
            "} /* main */"
        ],
        "{rep}"
    );
    assert_eq!(
        of(child),
        [
            "child_work() {",
            "leaf();",
            "leaf();",
            "leaf();",
            "} /* child_work */"
        ],
        "{rep}"
    );
    if require("uftrace", "the same view by uftrace") {
        let o = Command::new("uftrace")
            .args(["replay", "-d"])
            .arg(&data)
            .output()
            .unwrap();
        let theirs = text(&o).0;
        assert!(o.status.success(), "{}", text(&o).1);
        let child_lines = theirs
            .lines()
            .filter(|l| l.contains(&format!("[{child:>6}]")))
            .count();
        assert_eq!(child_lines, 5, "uftrace shows the child: {theirs}");
    }
    // The exec'd program ran in a forked child: its exit is not ours to know.
    let info = view_text("info", &session);
    assert!(info.contains("exit status         : unknown"), "{info}");
    // --no-children: the parent's process only, nothing reported missing.
    let o = record_run(&[], &["--no-libs", "--no-children"], &data, &exe, &[]);
    let err = text(&o).1;
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("from 1 threads") && !err.contains("not traced"),
        "{err}"
    );
    assert!(
        !std::fs::read_dir(&data)
            .unwrap()
            .flatten()
            .any(|e| e.path().is_dir()),
        "no session recorded"
    );
}

/// Interrupting `record` (SIGINT or SIGTERM sent to it) stops the program,
/// not the recording: the writer drains what the program recorded, the
/// views read it, the shared-memory rings are gone, and the exit status
/// says which signal ended the program.
#[test]
fn an_interrupted_recording_keeps_what_was_recorded() {
    let dir = workdir("interrupt");
    let exe = build_fixture(&dir, "forever", "forever.c");
    for (sig, name) in [(libc::SIGINT, "INT"), (libc::SIGTERM, "TERM")] {
        let data = dir.join(format!("{name}.data"));
        let mut child = shadowgraph()
            .args(["record", "--no-libcall", "--no-sched", "--no-libs", "-d"])
            .arg(&data)
            .arg("--")
            .arg(&exe)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let cli = child.id() as i32;
        // Once the program has made 200 calls.
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "running\n");
        // SAFETY: signalling the process we started.
        unsafe { libc::kill(cli, sig) };
        let o = child.wait_with_output().unwrap();
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(128 + sig), "{name}: {err}");
        let records: u64 = err
            .split_once("# recorded ")
            .and_then(|(_, r)| r.split_once(" records (0 lost)"))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or_else(|| panic!("{name}: {err}"));
        assert!(records >= 400, "{name}: {err}");
        let o = shadowgraph()
            .args(["report", "-d"])
            .arg(&data)
            .output()
            .unwrap();
        let rep = text(&o).0;
        assert!(o.status.success() && rep.contains(" work"), "{rep}");
        let shm = std::path::Path::new("/dev/shm").join(format!("shadowgraph-rings-{cli}"));
        assert!(!shm.exists(), "{} left behind", shm.display());
    }
}

/// A program that becomes another by exec in the recorded process itself:
/// the session's exit status is the program's (the process `record` waits
/// for), and `record` exits with it.
#[test]
fn a_program_replaced_by_exec_ends_with_its_exit_status() {
    let dir = workdir("execself");
    let exe = build_fixture(&dir, "ex", "exec_self.c");
    let data = dir.join("e.data");
    let o = record_run(&[], &["--no-libs"], &data, &exe, &[]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let session = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no session directory: {err}"));
    let info = |d: &Path| view_text("info", d);
    assert!(
        info(&session).contains("exit status         : exited with code: 3"),
        "{}",
        info(&session)
    );
    assert!(
        info(&data).contains("exit status         : exited with code: 3"),
        "{}",
        info(&data)
    );
}

/// `record` lasts until the processes the program started have ended too
/// (as uftrace's does): a child that outlives its parent, and calls its
/// functions only after the parent exited, is recorded whole.
/// `--no-children` neither records nor waits for it.
#[test]
fn a_child_that_outlives_the_program_is_recorded_whole() {
    let dir = workdir("outlive");
    let exe = build_fixture(&dir, "outlive", "outliving_child.c");
    let data = dir.join("all.data");
    let o = record_run(&[], &[], &data, &exe, &[]);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("still running"), "{err}");
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows["child_work"].2, 1, "{rows:?}\n{err}");
    assert_eq!(rows["leaf"].2, 100, "{rows:?}\n{err}");
    let data = dir.join("alone.data");
    let o = record_run(&[], &["--no-children"], &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(!report_rows(&report_text(&data)).contains_key("child_work"));
}

/// main may end by `pthread_exit` while other threads run on; the process's
/// /proc/self then describes a dead thread (no maps, no exe), so the
/// recording's metadata, written at the last thread's exit, comes from
/// /proc/thread-self: every function is named, the program too.
#[test]
fn a_program_whose_main_thread_exits_first_is_named() {
    let dir = workdir("mainexit");
    let exe = build_fixture(&dir, "mainexit", "main_exits_first.c");
    let data = dir.join("m.data");
    record_ok(&[], &data, &exe);
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows.get("leaf").map(|r| r.2), Some(1000), "{rows:?}");
    assert_eq!(rows.get("worker").map(|r| r.2), Some(1), "{rows:?}");
    let info = view_text("info", &data);
    assert!(info.contains("mainexit"), "{info}");
}

/// Untraced programs a recorded one starts (here the shell of each
/// `system()`) are named once per program and reason, with their count.
#[test]
fn untraced_programs_started_again_and_again_are_named_once() {
    let dir = workdir("system3");
    let exe = build_fixture(&dir, "sys3", "system_true.c");
    let data = dir.join("s.data");
    let o = record_run(&[], &[], &data, &exe, &[]);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("not traced")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("# not traced: 3 processes started ")
            && lines[0].contains("no patchable function entries"),
        "{err}"
    );
}

/// Rings in a directory without room for them (a container's small
/// /dev/shm, here `SHADOWGRAPH_RINGS_DIR` on a 3 MiB tmpfs, a 4 MiB ring):
/// the thread writes its own records instead of taking a SIGBUS when its
/// ring outgrows the space, and the writer makes no spare there. The tmpfs
/// is mounted in a mount namespace of the recording's own (as root, or in
/// a user namespace of its own where the kernel allows one).
#[test]
fn rings_without_room_in_their_directory_leave_the_thread_its_own_records() {
    let dir = workdir("noroom");
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let exe = build_fixture(&dir, "fib", "fib25.c");
    let data = dir.join("fib.data");
    let rings = mnt.to_str().unwrap();
    let record = record_command(
        &[("SHADOWGRAPH_RINGS_DIR", rings)],
        &["-b", "4M"],
        &data,
        &exe,
    );
    // `$0` the mount point, `$@` the recording; what it leaves there is
    // listed after it.
    let script = r#"mount -t tmpfs -o size=3m tmpfs "$0" || exit 99
"$@"; rc=$?; echo "left: $(ls -A "$0")"; exit $rc"#;
    let namespaces: [&[&str]; 2] = [&["--mount"], &["--user", "--map-root-user", "--mount"]];
    let usable = namespaces.into_iter().find(|ns| {
        Command::new("unshare")
            .args(*ns)
            .arg("true")
            .status()
            .is_ok_and(|s| s.success())
    });
    if !available(
        usable.is_some(),
        "a mount namespace (root, or user namespaces)",
        "a ring without room",
    ) {
        return;
    }
    let mut c = Command::new("unshare");
    c.args(usable.unwrap()).args(["sh", "-c", script]).arg(&mnt);
    c.arg(record.get_program()).args(record.get_args());
    for (k, v) in record.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    let o = c.output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let (out, left) = out.split_once("left: ").unwrap();
    assert_eq!(out.trim(), "75025");
    // fib(25): 242,785 calls, and main.
    assert!(
        err.contains("recorded 485572 records (0 lost) from 1 threads"),
        "{err}"
    );
    assert_eq!(left.trim(), "", "the writer's spare ring was left there");
}

/// `record --keep-pid` (uftrace's): the program runs in the process
/// `record` was started as, and the recording is complete once the
/// program, and a daemon it became, have ended; the daemon's calls replay
/// as uftrace's recording of the same binary does.
#[test]
fn keep_pid_runs_the_program_in_records_own_process() {
    let dir = workdir("keeppid");
    let exe = dir.join("kp");
    cc(&[&fixture("keep_pid.c")], &["-O0", "-pg"], &exe);
    let data = dir.join("k.data");
    // The shell's process id is record's, then the program's.
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("echo shell $$; exec \"$0\" record --keep-pid -d \"$1\" \"$2\"")
        .arg(env!("CARGO_BIN_EXE_shadowgraph"))
        .arg(&data)
        .arg(&exe)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let pid = out.lines().next().unwrap().strip_prefix("shell ").unwrap();
    assert!(out.contains(&format!("\npid {pid}\n")), "{out}");
    // (Its output comes when the recording is complete: the writer holds
    // the pipe until then.)
    assert!(err.contains("# recorded "), "{err}");
    let replay = view(&mut shadowgraph(), &data, &["replay", "-f", "tid"]);
    assert!(
        replay.contains(&format!("[{pid:>6}] |       c() {{")),
        "{replay}"
    );
    // A daemon: its calls after daemon() are recorded, as uftrace's.
    let lines = |tool: &mut std::process::Command, d: &std::path::Path| -> Vec<String> {
        shape(&view(tool, d, &["replay"]))
            .into_iter()
            .filter(|l| !l.contains("linux:task-exit"))
            .collect()
    };
    let o = shadowgraph()
        .args(["record", "--no-sched", "--keep-pid", "-d"])
        .arg(&data)
        .arg(&exe)
        .arg("daemon")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let ours = lines(&mut shadowgraph(), &data);
    assert!(ours.iter().any(|l| l.ends_with("getpid();")), "{ours:#?}");
    if require("uftrace", "uftrace's recording of the same daemon") {
        let theirs = dir.join("u.data");
        let o = std::process::Command::new("uftrace")
            .args(["record", "--no-sched", "--keep-pid", "-d"])
            .arg(&theirs)
            .arg(&exe)
            .arg("daemon")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        assert_eq!(
            ours,
            lines(&mut std::process::Command::new("uftrace"), &theirs)
        );
    }
    // Not for a running process.
    let o = shadowgraph()
        .args(["record", "--keep-pid", "-p", "1"])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).1.contains("--keep-pid"),
        "{}",
        text(&o).1
    );
}
