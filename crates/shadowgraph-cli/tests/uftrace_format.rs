//! Recordings are uftrace data both ways: uftrace reads ours and prints what we print; we read uftrace's and print what it prints.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `replay -f` shows uftrace's columns as uftrace 0.13 shows them for the
/// same recording, but for the thread id's column, one wider (as in the
/// default layout, which follows later uftrace).
#[test]
fn replay_output_fields_match_uftrace() {
    let (_, data) = record_calls_program("fields");
    let ours = |f: &str| {
        let o = shadowgraph()
            .args(["replay", "-f", f, "-d"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(o.status.success(), "-f {f}: {}", text(&o).1);
        text(&o).0
    };
    let all = ours("tid,addr,time,delta,elapsed,task,module");
    let line = all.lines().find(|l| l.ends_with("| main() {")).unwrap();
    assert!(
        line.starts_with(" [") && line.contains(" prog | main"),
        "{all}"
    );
    // Column order is fixed; `+` adds to the default; bad names are named.
    assert_eq!(ours("time,tid"), ours("tid,time"));
    assert_eq!(ours("+time"), ours("duration,tid,time"));
    assert!(ours("none").starts_with("main() {\n"), "{}", ours("none"));
    let o = shadowgraph()
        .args(["replay", "-f", "tid,bogus", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("unknown field `bogus`"),
        "{}",
        text(&o).1
    );
    if uftrace_missing("-f not checked against it") {
        return;
    }
    for f in [
        "duration",
        "tid",
        "addr",
        "time",
        "delta",
        "elapsed",
        "task",
        "module",
        "none",
        "+time,delta",
        "tid,addr,time,delta,elapsed,task,module",
    ] {
        let theirs = Command::new("uftrace")
            .args(["replay", "-f", f, "-d"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(theirs.status.success(), "{}", text(&theirs).1);
        assert_eq!(
            ours(f).trim_end(),
            text(&theirs).0.trim_end(),
            "replay -f {f}"
        );
    }
}

#[test]
fn exported_recording_reads_in_uftrace() {
    if uftrace_missing("export not checked against it") {
        return;
    }
    let (_, data) = record_calls_program("export");
    let out = data.with_file_name("uftrace.data");
    let o = shadowgraph()
        .args(["export", "-d"])
        .arg(&data)
        .arg("--uftrace")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let ours = shadowgraph()
        .args(["replay", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let theirs = Command::new("uftrace")
        .args(["replay", "-d"])
        .arg(&out)
        .output()
        .unwrap();
    let (ours, theirs) = (text(&ours).0, text(&theirs).0);
    assert!(
        theirs.contains("main() {"),
        "uftrace did not resolve our symbols:\n{theirs}"
    );
    assert_eq!(
        graph_part(&ours),
        graph_part(&theirs),
        "uftrace shows another call graph"
    );
    let rep = Command::new("uftrace")
        .args(["report", "-d"])
        .arg(&out)
        .output()
        .unwrap();
    let rep = text(&rep).0;
    assert!(
        rep.lines()
            .any(|l| l.ends_with(" leaf") && l.contains("           4  ")),
        "{rep}"
    );
}

#[test]
fn recordings_are_uftrace_data_both_ways() {
    if uftrace_missing("compatibility not checked") {
        return;
    }
    // uftrace reads what we record…
    let (exe, data) = record_calls_program("compat");
    let ours = replay_text(&data);
    let theirs = text(
        &Command::new("uftrace")
            .args(["replay", "-d"])
            .arg(&data)
            .output()
            .unwrap(),
    )
    .0;
    assert!(theirs.contains("main() {"), "{theirs}");
    assert_eq!(graph_part(&ours), graph_part(&theirs));
    // `graph` prints what uftrace's graph prints, byte for byte.
    for f in ["main", "mid", "recurse"] {
        let ours = text(
            &shadowgraph()
                .args(["graph", "-d"])
                .arg(&data)
                .arg(f)
                .output()
                .unwrap(),
        )
        .0;
        let theirs = text(
            &Command::new("uftrace")
                .args(["graph", "-d"])
                .arg(&data)
                .arg(f)
                .output()
                .unwrap(),
        )
        .0;
        assert_eq!(ours, theirs, "graph {f}");
    }
    // …and we read what uftrace records, its schedule events included
    // (perf-cpu*.dat: a call sleeping or pre-empted shows
    // `/* linux:schedule */` inside it, a child in reports): replay, report
    // and graph give uftrace's output exactly (but for the TID column's
    // width, 7 for us). A program that sleeps makes sure there are some.
    let sleeper = build_fixture(data.parent().unwrap(), "sleeper", "sleeper.c");
    // Each recording is new scheduling: up to three are tried, and every
    // mismatch is printed (once in a full parallel test run one differed,
    // not seen again in 80 recordings under load since).
    let with_sched = data.with_file_name("by-uftrace-sched.data");
    let mut matched = false;
    for attempt in 0..3 {
        let _ = std::fs::remove_dir_all(&with_sched);
        let o = Command::new("uftrace")
            .args(["record", "-P", ".", "-d"])
            .arg(&with_sched)
            .arg(&sleeper)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        let mut same = true;
        for args in [&["replay"][..], &["report"], &["graph", "main"]] {
            let run = |cmd: &mut Command| {
                let o = cmd
                    .arg(args[0])
                    .arg("-d")
                    .arg(&with_sched)
                    .args(&args[1..])
                    .output()
                    .unwrap();
                assert!(o.status.success(), "{args:?}: {}", text(&o).1);
                text(&o).0
            };
            let ours = run(&mut shadowgraph());
            let theirs = run(&mut Command::new("uftrace"));
            if ours != theirs {
                eprintln!(
                    "attempt {attempt}: {args:?} of uftrace's recording with schedule events differs\n--- ours\n{ours}\n--- uftrace\n{theirs}"
                );
                same = false;
            } else if args[0] == "replay" {
                // At least one per nap (a busy machine pre-empts the
                // program elsewhere too: more, as uftrace shows them).
                assert!(
                    ours.matches("/* linux:schedule */").count() >= 5,
                    "one per nap: {ours}"
                );
            }
        }
        if same {
            matched = true;
            break;
        }
    }
    assert!(
        matched,
        "replay, report and graph differ from uftrace's (see above)"
    );
    let ud = data.with_file_name("by-uftrace.data");
    let o = Command::new("uftrace")
        .args(["record", "--no-sched", "-P", ".", "-d"])
        .arg(&ud)
        .arg(&exe)
        .arg("2")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let theirs = text(
        &Command::new("uftrace")
            .args(["replay", "-d"])
            .arg(&ud)
            .output()
            .unwrap(),
    )
    .0;
    let ours = shadowgraph()
        .args(["replay", "-d"])
        .arg(&ud)
        .output()
        .unwrap();
    assert!(ours.status.success(), "{}", text(&ours).1);
    let ours = text(&ours).0;
    assert_eq!(
        graph_part(&ours),
        graph_part(&theirs),
        "our replay of uftrace's data differs:\n--- ours\n{ours}\n--- uftrace\n{theirs}"
    );
    let rep = text(
        &shadowgraph()
            .args(["report", "-d"])
            .arg(&ud)
            .output()
            .unwrap(),
    )
    .0;
    assert!(
        rep.lines()
            .any(|l| l.ends_with(" mid") && l.contains("           2  ")),
        "{rep}"
    );
}

/// `shadowgraph replay` prints what `uftrace replay` prints, byte for
/// byte, on the same recording, for every kind of program the tests build:
/// one thread or several (calls open while other threads record, threads
/// coming and going, a main thread that exits first), forked children,
/// recursion, tail calls, coroutines, C++ (overloads, exceptions), a
/// crash. (Left out: programs started by exec, recorded into directories
/// of their own that uftrace does not read; calls nested deeper than 1023,
/// recorded at depth 1023, the format's deepest, where uftrace does not
/// merge the deepest call it shows with its exit.)
#[test]
fn replay_is_uftraces_on_every_fixture() {
    if uftrace_missing("replay against uftrace's") {
        return;
    }
    let dir = workdir("replay-vs-uftrace");
    let mut programs: Vec<(PathBuf, Vec<&str>)> = [
        "threads_naps.c",
        "join_waits.c",
        "work_threads.c",
        "thread_churn.c",
        "main_exits_first.c",
        "unaligned.c",
        "tail_calls.c",
        "filter_families.c",
        "depth_chain.c",
        "coroutines.c",
        "fib20.c",
    ]
    .iter()
    .map(|f| {
        let name = f.trim_end_matches(".c");
        let exe = build_fixture_with(&dir, name, f, &["-pthread"]);
        (exe, vec![])
    })
    .collect();
    let crash = build_fixture(&dir, "crash", "crash_on_request.c");
    programs.push((crash, vec!["crash"]));
    let calls = dir.join("calls");
    cc(
        &[&lib_fixture("calls.c")],
        &["-O2", "-DWITH_MAIN", "-fpatchable-function-entry=5"],
        &calls,
    );
    programs.push((calls, vec!["2"]));
    for src in ["overloads.cc", "unwind.cpp"] {
        let name = src.split('.').next().unwrap();
        programs.push((build_fixture_with(&dir, name, src, &["-pthread"]), vec![]));
    }
    for (exe, args) in &programs {
        let data = exe.with_extension("data");
        let args: Vec<&Path> = args.iter().map(Path::new).collect();
        let o = record_run(&[], &[], &data, exe, &args);
        assert!(
            std::fs::read_dir(&data).is_ok_and(|mut d| d
                .any(|e| e.is_ok_and(|e| { e.path().extension().is_some_and(|x| x == "dat") }))),
            "{}: no records: {}",
            exe.display(),
            text(&o).1
        );
        let ours = replay_text(&data);
        let theirs = uftrace_view("replay", &data).unwrap();
        if ours != theirs {
            let at = ours
                .lines()
                .zip(theirs.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(ours.lines().count().min(theirs.lines().count()));
            panic!(
                "{}: replay differs from uftrace's at line {}:\n ours: {:?}\n uftrace: {:?}",
                exe.display(),
                at + 1,
                ours.lines().nth(at),
                theirs.lines().nth(at)
            );
        }
    }
}

/// A uftrace recording with arguments and return values (`-A`, `-R`):
/// every format uftrace writes is read past and shown as uftrace's
/// replay shows it.
#[test]
fn uftraces_arguments_are_shown_as_uftrace_shows_them() {
    if uftrace_missing("reading its arguments") {
        return;
    }
    let dir = workdir("uftrace-args");
    let exe = dir.join("args");
    cc(&[&fixture("args_values.c")], &["-O0", "-pg"], &exe);
    let data = dir.join("args.data");
    let mut u = Command::new("uftrace");
    u.args(["record", "--no-sched", "-d"]).arg(&data);
    for (opt, spec) in ARGS_VALUES_SPECS {
        u.args([opt, spec]);
    }
    let o = u.arg(&exe).output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let ours = replay_text(&data);
    let theirs = uftrace_view("replay", &data).unwrap();
    assert_eq!(ours, theirs);
    for shown in [
        "add(1, 2) = 3;",
        "neg(-5) = 0x4c4b40;",
        "str(\"hello\", 0x3)",
        "str(\"NULL\", 0)",
        "next('a') = 'b';",
        "half(3.000000) = 1.500000;",
        "call(&add)",
        "name(0) = \"NULL\";",
    ] {
        assert!(ours.contains(shown), "{shown} in\n{ours}");
    }
    // The Chrome dump carries them as uftrace's does (`args`), and the
    // Perfetto trace as debug annotations.
    let events = |chrome: &str| -> Vec<String> {
        chrome
            .lines()
            .filter(|l| l.contains("\"args\"") && !l.contains("\"ph\":\"M\""))
            .map(|l| {
                l[l.find("\"name\"").unwrap()..]
                    .trim_end_matches(',')
                    .to_string()
            })
            .collect()
    };
    let o = shadowgraph()
        .args(["dump", "--chrome", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let u = Command::new("uftrace")
        .args(["dump", "--chrome", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let (ours, theirs) = (events(&text(&o).0), events(&text(&u).0));
    assert!(
        ours.iter()
            .any(|e| e.contains(r#""args":{"arguments":"(1, 2)"}"#)),
        "{ours:?}"
    );
    // (uftrace escapes a tab in a string as \\t; the JSON string is the same text.)
    let same: Vec<&String> = theirs.iter().filter(|e| !e.contains("\\t")).collect();
    for e in same {
        assert!(ours.contains(e), "{e} not in {ours:?}");
    }
    let o = shadowgraph()
        .args(["dump", "--perfetto", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success());
    let has = |s: &[u8]| o.stdout.windows(s.len()).any(|w| w == s);
    assert!(has(b"arguments") && has(b"(1, 2)") && has(b"retval"));
}

/// A uftrace recording with `read=` triggers (`proc/statm`, `page-fault`:
/// built-in events with data after their records) reads whole, and
/// `replay` shows the events where uftrace shows them; `report` and
/// `graph` read past them.
#[test]
fn uftrace_read_events_are_shown_as_uftrace_shows_them() {
    if uftrace_missing("a recording with read= triggers made by uftrace") {
        return;
    }
    let dir = workdir("read-events");
    let exe = dir.join("abc");
    cc(&[&fixture("abc.c")], &["-pg"], &exe);
    let data = dir.join("theirs.data");
    let triggers = [
        "-F",
        "main",
        "-T",
        "b@read=proc/statm",
        "-T",
        "c@read=page-fault",
    ];
    uftrace_record(&data, &triggers, &exe);
    let ours = replay_text(&data);
    assert_eq!(ours, uftrace_view("replay", &data).unwrap());
    for shown in [
        "|       /* read:proc/statm (vmsize=",
        "|         /* read:page-fault (major=",
        "|         /* diff:page-fault (major=+",
        "|       /* diff:proc/statm (vmsize=+",
    ] {
        assert!(ours.contains(shown), "{shown} in\n{ours}");
    }
    for view in ["report", "graph"] {
        let o = shadowgraph()
            .args([view, "-d"])
            .arg(&data)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(
            o.status.success() && !err.contains("warning") && out.contains("getpid"),
            "{view}: {err}\n{out}"
        );
    }
}

/// The options that leave out what a recording holds — `--no-args`,
/// `--no-event`, `--no-sched`, `--no-sched-preempt`, `-H FUNC` (hide,
/// callees in its place) — and `--flat` (every record a line) each replay
/// uftrace's recording (arguments, `read=` events, schedule events of
/// naps) as uftrace replays it with the same option.
#[test]
fn leaving_out_options_replay_as_uftrace_replays() {
    if uftrace_missing("a recording made by uftrace with events and arguments") {
        return;
    }
    let dir = workdir("leave-out");
    let exe = dir.join("naps");
    cc(
        &[&fixture("naps.c")],
        &["-pg", "-DMIDS=3", "-DNAP_US=2000", "-DFIB_N=3"],
        &exe,
    );
    let data = dir.join("theirs.data");
    let opts = [
        "-A",
        "mid@arg1",
        "-R",
        "leaf@retval",
        "-T",
        "mid@read=page-fault",
    ];
    let o = Command::new("uftrace")
        .args(["record", "--no-libcall", "-d"])
        .arg(&data)
        .args(opts)
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "uftrace record: {}", text(&o).1);
    let replay = |c: &mut Command, extra: &[&str]| -> Vec<String> {
        let o = c
            .arg("replay")
            .args(extra)
            .arg("-d")
            .arg(&data)
            .output()
            .unwrap();
        assert!(o.status.success(), "{extra:?}: {}", text(&o).1);
        graph_part(&text(&o).0)
    };
    let all = replay(&mut shadowgraph(), &[]);
    assert!(
        all.iter().any(|l| l.contains("mid(0) {"))
            && all.iter().any(|l| l.contains("/* read:page-fault"))
            && all.iter().any(|l| l.contains("linux:schedule")),
        "{all:#?}"
    );
    for extra in [
        &["--no-args"][..],
        &["--no-event"],
        &["--no-sched"],
        &["--no-sched-preempt"],
        &["-H", "mid"],
        &["--no-args", "--no-event", "-H", "nap", "--no-pager"],
        &["--flat"],
        &["--flat", "--no-sched-preempt"],
    ] {
        assert_eq!(
            replay(&mut shadowgraph(), extra),
            replay(&mut Command::new("uftrace"), extra),
            "{extra:?}"
        );
    }
}

/// Schedule events (uftrace's `linux:schedule`) are recorded by default,
/// from perf events the program inherits: a call that sleeps shows one
/// inside it, uftrace's replay of the recording is ours, and uftrace's own
/// recording has the sleeps where ours has them; a program started by
/// exec has its own with its calls; `--no-sched` records none.
#[test]
fn schedule_events_are_recorded_as_uftrace_records_them() {
    let dir = workdir("sched");
    let exe = dir.join("naps");
    let flags = ["-O0", "-pg", "-DMIDS=3", "-DNAP_US=200", "-DFIB_N=4"];
    cc(&[&fixture("naps.c")], &flags, &exe);
    let data = dir.join("s.data");
    let o = shadowgraph()
        .args(["record", "-d"])
        .arg(&data)
        .arg(&exe)
        .output()
        .unwrap();
    let err = text(&o).1;
    assert!(o.status.success(), "{err}");
    let recorded = !err.contains("schedule events are not recorded");
    if !shadowgraph_testkit::tool::available(recorded, "perf events (perf_event_open)", &err) {
        return;
    }
    let replay = |tool: &mut std::process::Command, d: &std::path::Path, o: &[&str]| {
        view(tool, d, &[&["replay", "-f", "none"], o].concat())
    };
    let ours = replay(&mut shadowgraph(), &data, &[]);
    // The sleeps: a nanosleep with a switch in it (a pre-emption of the
    // loaded machine may come before or after it).
    let sleeps = |text: &str| -> usize {
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        (0..lines.len())
            .filter(|&i| lines[i] == "nanosleep() {")
            .filter(|&i| {
                lines[i + 1..]
                    .iter()
                    .take_while(|l| l.starts_with("/* linux:schedule"))
                    .any(|l| *l == "/* linux:schedule */")
            })
            .count()
    };
    assert_eq!(sleeps(&ours), 3, "{ours}");
    if require("uftrace", "uftrace's replay of schedule events") {
        let uf = || std::process::Command::new("uftrace");
        assert_eq!(replay(&mut uf(), &data, &[]), ours);
        let theirs = dir.join("u.data");
        let o = uf()
            .args(["record", "-d"])
            .arg(&theirs)
            .arg(&exe)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        // The sleeps where uftrace's are; the rest of the shape alike
        // (where the machine pre-empted either run, or a write waited, is
        // its own doing).
        let their = replay(&mut uf(), &theirs, &[]);
        assert_eq!(sleeps(&their), 3, "{their}");
        // (A call a hidden event was in keeps its braces, as in uftrace:
        // `f() {` and `} /* f */` together are `f();` here.)
        let calls = |d: &std::path::Path, tool: &mut std::process::Command| {
            let text = view(tool, d, &["replay", "-f", "none", "--no-sched"]);
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| !l.contains("linux:task-exit"))
                .collect();
            let mut out = Vec::new();
            let mut i = 0;
            while i < lines.len() {
                let (l, next) = (lines[i], lines.get(i + 1).map_or("", |n| n.trim()));
                match l.strip_suffix("() {") {
                    Some(f) if next == format!("}} /* {} */", f.trim()) => {
                        out.push(format!("{f}();"));
                        i += 2;
                    }
                    _ => {
                        out.push(l.to_string());
                        i += 1;
                    }
                }
            }
            out
        };
        assert_eq!(calls(&theirs, &mut uf()), calls(&data, &mut shadowgraph()));
    }
    let o = shadowgraph()
        .args(["record", "--no-sched", "-d"])
        .arg(&data)
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(!replay(&mut shadowgraph(), &data, &[]).contains("linux:schedule"));
    assert!(!data.join("perf-cpu0.dat").exists());
    // A program started by exec (by a shell, untraced) records into a
    // directory of its own, its schedule events with its calls.
    let data = dir.join("x.data");
    let o = shadowgraph()
        .args(["record", "-d"])
        .arg(&data)
        .args(["sh", "-c"])
        .arg(format!("exec {}", exe.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let session = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .unwrap();
    let theirs = replay(&mut shadowgraph(), &session, &[]);
    assert_eq!(sleeps(&theirs), 3, "{theirs}");
}
