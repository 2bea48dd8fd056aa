//! Triggers (`-T FUNC@ACTION,…`, actions after `-F`/`-N` patterns, and
//! `--signal SIG@ACTION`) and uftrace's regex patterns, in the views and when recording, each
//! compared with what uftrace 0.13 shows of the same recording.

mod common;

use common::*;

/// The views apply each trigger as uftrace's do: depth limits, backtraces,
/// tracing switched off and on (with `--disable`), hidden functions,
/// filter and notrace actions, time thresholds and `trace`, callers.
#[test]
fn views_apply_triggers_as_uftrace() {
    let data = recording("tv", "naps.c", &["-DMIDS=3", "-DNAP_US=200", "-DFIB_N=4"]);
    let replay = |args: &[&str]| {
        view(
            &mut shadowgraph(),
            &data,
            &[&["replay", "-f", "none"], args].concat(),
        )
    };
    // leaf's callers, outermost first, before each of its calls.
    let bt = replay(&["-T", "leaf@backtrace", "-F", "mid"]);
    assert!(
        bt.contains("mid() {\n  nap();\n/* [ 0] main */\n/* [ 1] mid */\n  leaf();\n"),
        "{bt}"
    );
    // From each call of mid (at its depth) to its first leaf.
    let on_off = replay(&["--disable", "-T", "mid@trace_on", "-T", "leaf@trace_off"]);
    assert_eq!(on_off, "  mid() {\n    nap();\n".repeat(3), "{on_off}");
    as_uftrace(
        &data,
        &[
            &["replay", "-T", "mid@depth=1"],
            &["replay", "-T", "leaf@backtrace"],
            &["replay", "-T", "fib@depth=2,backtrace"],
            &["replay", "-F", "mid@depth=1"],
            &["replay", "-F", "main", "-F", "mid@depth=1"],
            &["replay", "--disable", "-T", "mid@trace_on"],
            &[
                "replay",
                "--disable",
                "-T",
                "mid@trace_on",
                "-T",
                "leaf@trace_off",
            ],
            &["replay", "-T", "fib@trace_off"],
            &["replay", "-T", "leaf@trace_off", "-T", "fib@trace_on"],
            &["replay", "-T", "mid@trace_off", "-T", "leaf@trace_on"],
            &["replay", "-T", "leaf@hide"],
            &["replay", "-T", "mid@notrace"],
            &["replay", "-T", "main@filter,depth=2", "-T", "fib@notrace"],
            &["replay", "-t", "100us", "-T", "leaf@trace"],
            &["replay", "-t", "100us", "-T", "mid@time=0"],
            &["replay", "-T", "main@time=100us"],
            &["replay", "-T", "leaf@caller"],
            &["replay", "-T", "nap@color=red"],
            &["replay", "-D", "2", "-T", "mid@depth=3"],
            &["graph", "-T", "mid@depth=1"],
            &["report", "-T", "fib@depth=2"],
            // uftrace's patterns: regexes where they have regex characters.
            &["replay", "-N", "^mi.$"],
            &["replay", "-F", "fib$", "-D", "2"],
            &["replay", "-N", "nap|leaf"],
            &["replay", "--match", "glob", "-F", "m*"],
            &["replay", "--match", "regex", "-F", "m*"],
            &["replay", "--match=regex", "-N", "n?p"],
        ],
        0,
    );
    for (args, says) in [
        (&["replay", "-T", "mid"][..], "no action after `@`"),
        (&["replay", "-T", "mid@depth=x"], "bad depth"),
        (&["replay", "-T", "mid@trace_up"], "unknown trace action"),
        (
            &["replay", "-T", "nosuch@depth=1"],
            "-T nosuch: matches no recorded function",
        ),
    ] {
        let o = run_view(&mut shadowgraph(), &data, args);
        assert!(
            !o.status.success() && text(&o).1.contains(says),
            "{args:?}: {}",
            text(&o).1
        );
    }
}

/// `record` applies triggers as uftrace's `record` does (compared on a
/// `-pg` build, which both trace): depth limits, tracing switched off and
/// on (with `--disable`), filter and notrace actions, `-D` restarting at
/// each `-F` function, `finish`, callers (`-C`, `caller`), size
/// thresholds (`-Z`, `size=`), time thresholds and `trace` under `-t`;
/// `live` shows backtraces and hides as its replay is told.
#[test]
fn record_applies_triggers_as_uftrace() {
    let dir = workdir("tr");
    let exe = dir.join("naps");
    cc(
        &[&fixture("naps.c")],
        &["-O0", "-pg", "-DMIDS=3", "-DNAP_US=200", "-DFIB_N=4"],
        &exe,
    );
    let ours = dir.join("s.data");
    let theirs = dir.join("u.data");
    // The replay of a recording with durations and thread ids left out,
    // and uftrace's task-exit event (which it writes when tracing ends).
    let lines = |tool: &mut std::process::Command, data: &std::path::Path| -> Vec<String> {
        shape(&view(tool, data, &["replay"]))
            .into_iter()
            .filter(|l| !l.contains("linux:task-exit"))
            .collect()
    };
    let record = |opts: &[&str]| -> Vec<String> {
        let o = record_run(&[], &[&["--libcall"], opts].concat(), &ours, &exe, &[]);
        assert!(o.status.success(), "{opts:?}: {}", text(&o).1);
        lines(&mut shadowgraph(), &ours)
    };
    let with_uftrace = require("uftrace", "the same recordings by uftrace");
    for opts in [
        &["-T", "mid@depth=1"][..],
        &["-F", "main", "-F", "mid@depth=1"],
        &["-T", "mid@trace_off", "-T", "leaf@trace_on"],
        &["--disable", "-T", "mid@trace_on", "-T", "leaf@trace_off"],
        &["-D", "2", "-T", "mid@trace_off", "-T", "nap@trace_on"],
        &["-T", "leaf@finish"],
        &["-T", "main@filter,depth=2", "-T", "fib@notrace"],
        &["-F", "mid", "-D", "1"],
        &["-F", "main", "-T", "fib@finish"],
        &["-N", "^n.p$"],
        // Callers (`-C`): a function's calls and the calls they are in.
        &["-C", "leaf"],
        &["-C", "nanosleep", "-C", "fib@depth=1"],
        &["-T", "leaf@caller", "-T", "nap@trace"],
        // Sizes: the functions' symbols', a library call's a PLT entry's.
        &["-C", "mid@size=40"],
        &["-T", "mid@size=40"],
        &["-Z", "40", "-T", "mid@size=0"],
        &["-Z", "20"],
        &["-Z", "40", "-F", "mid"],
        &["-Z", "20", "-N", "fib"],
        &["-Z", "60", "-D", "2"],
        // uftrace's --match, and a -F of nothing (no filter, as there).
        &["--match", "glob", "-F", "m*"],
        &["--match", "regex", "-F", "m*"],
        &["--match=regex", "-N", "n?p"],
        &["-F", "nosuch"],
    ] {
        let got = record(opts);
        if !with_uftrace {
            continue;
        }
        uftrace_record(&theirs, opts, &exe);
        assert_eq!(
            got,
            lines(&mut std::process::Command::new("uftrace"), &theirs),
            "{opts:?}"
        );
    }
    // Under -t, a `trace` or `time=0` call is kept, short as it is (as
    // uftrace's `live` shows it).
    for opts in [
        &["-t", "100us", "-T", "leaf@trace"][..],
        &["-t", "100us", "-T", "mid@time=0"],
    ] {
        let got = record(opts);
        assert_eq!(
            got.iter().filter(|l| l.ends_with("leaf();")).count(),
            6,
            "{opts:?}: {got:#?}"
        );
        assert!(!got.iter().any(|l| l.contains("fib")), "{opts:?}: {got:#?}");
    }
    // `finish`: nothing after fib's first call; its callers left open.
    let got = view(&mut shadowgraph(), &ours, &["replay"]);
    let o = record_run(&[], &["-F", "main", "-T", "fib@finish"], &ours, &exe, &[]);
    assert!(o.status.success());
    let fin = view(&mut shadowgraph(), &ours, &["replay"]);
    assert!(
        fin.contains("fib() {\n\nuftrace stopped tracing with remaining functions"),
        "{fin}"
    );
    drop(got);
    // `live`: what the recording does not apply, its replay does.
    let o = shadowgraph()
        .args([
            "live",
            "--no-sched",
            "-T",
            "leaf@backtrace",
            "-T",
            "nap@hide",
            "-F",
            "mid",
        ])
        .arg(&exe)
        .output()
        .unwrap();
    let out = text(&o).0;
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(
        out.contains("  backtrace [") && out.contains("| /* [ 0] mid */") && !out.contains("nap()"),
        "{out}"
    );
    // `read=`: its events after the entry and before the exit, as
    // uftrace's (their values are each process's own); uftrace's replay
    // of ours shows them as ours does.
    let values_out = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .map(|l| match l.find(" (") {
                Some(i) if l.contains("/* read:") || l.contains("/* diff:") => l[..i].into(),
                _ => l,
            })
            .collect()
    };
    for opts in [
        &["-T", "mid@read=proc/statm,read=page-fault"][..],
        &[
            "-F",
            "main",
            "-T",
            "leaf@read=page-fault",
            "-T",
            "nap@notrace",
        ],
        // Under a time filter: with the entry of a call long enough,
        // written late (mid lasts, leaf does not).
        &[
            "-t",
            "150us",
            "-T",
            "(mid|leaf)@read=proc/statm,read=page-fault",
        ],
    ] {
        let got = record(opts);
        assert_eq!(
            got.iter().filter(|l| l.contains("/* diff:")).count(),
            got.iter().filter(|l| l.contains("/* read:")).count(),
        );
        assert!(
            got.iter().any(|l| l.contains("read:page-fault (major=")),
            "{got:#?}"
        );
        if !with_uftrace {
            continue;
        }
        assert_eq!(
            got,
            lines(&mut std::process::Command::new("uftrace"), &ours),
            "{opts:?}"
        );
        uftrace_record(&theirs, opts, &exe);
        assert_eq!(
            values_out(got),
            values_out(lines(&mut std::process::Command::new("uftrace"), &theirs)),
            "{opts:?}"
        );
    }
    // What a recording cannot apply is refused before the program runs.
    for (opts, says) in [
        (&["-T", "mid@read=pmu-cycle"][..], "not read when recording"),
        (&["-T", "mid@depth=-1"], "bad depth"),
    ] {
        let o = record_run(&[], opts, &ours, &exe, &[]);
        assert!(
            !o.status.success() && text(&o).1.contains(says),
            "{opts:?}: {}",
            text(&o).1
        );
    }
}

/// Triggers hold per thread: four threads through the same functions,
/// each thread's calls counted and nested as its own, none lost.
#[test]
fn triggers_hold_per_thread() {
    let dir = workdir("tt");
    let exe = build_fixture(&dir, "tt", "work_threads.c");
    let data = dir.join("t.data");
    record_ok(
        &["-T", "run@filter,depth=2", "-T", "main@depth=1"],
        &data,
        &exe,
    );
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    let mut works: Vec<usize> = Vec::new();
    for &tid in &d.tids {
        in_time_order(&d, tid).unwrap();
        calls_nest_exactly(&d, tid, &[]).unwrap();
        depths_follow_the_records(&d, tid).unwrap();
        let recs = records_of(&d, tid).unwrap();
        let n = recs
            .iter()
            .filter(|r| r.kind == shadowgraph_data::format::Kind::Entry)
            .filter(|r| d.name(r.addr) == "work")
            .count();
        if n > 0 {
            works.push(n);
        }
    }
    works.sort();
    assert_eq!(works, [20000, 20001, 20002, 20003]);
    let out = report_text(&data);
    assert!(!out.contains("main") && out.contains("run"), "{out}");
}

/// Triggers leave the calls of functions without a trigger of their own
/// to the fused path, which keeps the triggers' thread variable (filter
/// calls open, levels left, own depth) and records only while tracing is
/// on: four threads, each switching tracing on at its `run` (a filter
/// function with a depth limit: a callback's call) and then calling
/// `work` (the fused path's), record every call of `work`, nested under
/// `run`, as the callbacks alone do; `main`, outside every filter call,
/// is not recorded. A caller filter (`-C`), which keeps every call
/// waiting in its frame, keeps the recording on the callbacks.
#[test]
fn triggers_leave_the_calls_of_other_functions_to_the_fused_path() {
    let dir = workdir("tlite");
    let exe = build_fixture(&dir, "tlite", "work_threads.c");
    let opts = [
        "--disable",
        "-F",
        "run",
        "-T",
        "run@trace_on,depth=2",
        "-D",
        "3",
    ];
    for way in [Way::Fused, Way::General] {
        let data = dir.join(format!("{}.data", way.name()));
        record_ok(&way.with(&opts), &data, &exe);
        let info = view(&mut shadowgraph(), &data, &["info"]);
        assert_eq!(
            info.contains("record path         : fused"),
            way == Way::Fused,
            "{info}"
        );
        let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
        let mut works: Vec<usize> = Vec::new();
        for &tid in &d.tids {
            let recs = records_of(&d, tid).unwrap();
            let at = |name: &str, depth: u16| {
                recs.iter()
                    .filter(|r| r.kind == shadowgraph_data::format::Kind::Entry)
                    .filter(|r| d.name(r.addr) == name && r.depth == depth)
                    .count()
            };
            assert_eq!(at("main", 0), 0, "{}", way.name());
            if at("work", 1) > 0 {
                in_time_order(&d, tid).unwrap();
                calls_nest_exactly(&d, tid, &[]).unwrap();
                depths_follow_the_records(&d, tid).unwrap();
                assert_eq!(at("run", 0), 1, "{}", way.name());
                works.push(at("work", 1));
            }
        }
        works.sort();
        assert_eq!(works, [20000, 20001, 20002, 20003], "{}", way.name());
    }
    let data = dir.join("caller.data");
    record_ok(&["-C", "work"], &data, &exe);
    let info = view(&mut shadowgraph(), &data, &["info"]);
    assert!(!info.contains("record path         : fused"), "{info}");
}

/// Triggers on the path several tracers share (`--tracer
/// NAME:trigger=SPEC`): the path decides the calls of the functions
/// without a trigger of their own by the triggers' thread variable and
/// switch, as a lone tracer's fused path does, and sends the others to
/// the callbacks. Each tracer with triggers records what `-T SPEC` (and
/// `-F`, `-N`, `-D` beside it) records alone, and a plain tracer beside
/// it every call.
#[test]
fn triggers_on_the_shared_path_record_as_alone() {
    let dir = workdir("tshared");
    let exe = build_fixture_with(
        &dir,
        "tshared",
        "naps.c",
        &["-DMIDS=3", "-DNAP_US=10", "-DFIB_N=5"],
    );
    // (A `finish` names the task it stopped.)
    let replay = |d: &std::path::Path| {
        view(&mut shadowgraph(), d, &["replay", "-f", "none"])
            .lines()
            .filter(|l| !l.starts_with("task: "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let all = dir.join("all.data");
    record_ok(&[], &all, &exe);
    for (k, (alone, spec)) in [
        (&["-T", "mid@depth=2"][..], "trigger=mid@depth=2"),
        (
            &["-F", "main", "-T", "fib@depth=2"],
            "filter=main:trigger=fib@depth=2",
        ),
        (
            &["-T", "main@filter,depth=2", "-T", "fib@notrace"],
            "trigger=main@filter,depth=2:trigger=fib@notrace",
        ),
        (
            &["-T", "main@trace_off", "-T", "leaf@trace_on"],
            "trigger=main@trace_off:trigger=leaf@trace_on",
        ),
        (&["-T", "mid@finish"], "trigger=mid@finish"),
        (
            &["-N", "leaf", "-T", "mid@depth=1"],
            "notrace=leaf:trigger=mid@depth=1",
        ),
        (
            &["-D", "3", "-T", "mid@trace_off"],
            "depth=3:trigger=mid@trace_off",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let solo = dir.join(format!("solo{k}.data"));
        record_ok(alone, &solo, &exe);
        let shared = dir.join(format!("shared{k}.data"));
        let b = format!("b:{spec}");
        record_ok(&["--tracer", "a", "--tracer", &b], &shared, &exe);
        let info = view(&mut shadowgraph(), &shared.join("b"), &["info"]);
        assert!(
            info.contains("record path         : fused (several tracers"),
            "{spec}: {info}"
        );
        assert_eq!(replay(&shared.join("b")), replay(&solo), "{spec}");
        assert_eq!(replay(&shared.join("a")), replay(&all), "{spec}: a");
    }
}

/// Tracing switched off and on by signals, 60 times, while four threads
/// run through the fused path with triggers (a filter function and a depth
/// limit): each switch lands inside some calls, so some entries lose
/// their exits and some exits their entries, but the triggers' thread
/// variable stays exact, the path keeping it for every call whether it
/// records it or not: every record of `a`, `b` and `c` is at 0, 1 and 2.
#[test]
fn switching_tracing_by_signals_keeps_the_depths_exact() {
    let dir = workdir("tswitch");
    let exe = build_fixture(&dir, "tswitch", "switch_threads.c");
    let data = dir.join("s.data");
    let opts = [
        "-F",
        "a",
        "-D",
        "3",
        "--signal",
        "SIGUSR1@trace_off",
        "--signal",
        "SIGUSR2@trace_on",
    ];
    record_ok(&opts, &data, &exe);
    let info = view(&mut shadowgraph(), &data, &["info"]);
    assert!(info.contains("record path         : fused"), "{info}");
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    let (mut records, mut threads) = (0, 0);
    for &tid in &d.tids {
        let recs = records_of(&d, tid).unwrap();
        for r in &recs {
            use shadowgraph_data::format::Kind;
            if matches!(r.kind, Kind::Entry | Kind::Exit) {
                let want = match &*d.name(r.addr) {
                    "a" => 0,
                    "b" => 1,
                    "c" => 2,
                    other => panic!("thread {tid}: {other} recorded"),
                };
                assert_eq!(r.depth, want, "thread {tid}: {r:?}");
                records += 1;
            }
        }
        threads += !recs.is_empty() as usize;
    }
    assert!(
        records > 1000 && threads >= 2,
        "{records} records, {threads} threads"
    );
}

/// `record -Z SIZE` leaves out the calls of functions smaller than SIZE
/// bytes (their symbols' sizes), their callees recorded in their place,
/// at its depth (as uftrace's, compared above): the small functions'
/// calls through the callbacks, the others' on the fused path.
#[test]
fn record_size_filter_keeps_callees() {
    let dir = workdir("tz");
    let part = dir.join("part.data");
    // A small function's callees are recorded in its place, at its depth:
    // the depths records carry count recorded calls only.
    let exe = build_fixture_with(&dir, "sc", "small_caller.c", &["-fno-toplevel-reorder"]);
    record_ok(&["-Z", "40"], &part, &exe);
    let info = view(&mut shadowgraph(), &part, &["info"]);
    assert!(info.contains("record path         : fused"), "{info}");
    let out = view(&mut shadowgraph(), &part, &["replay", "-f", "none"]);
    assert_eq!(
        out,
        "main() {\n  big();\n  big();\n  big();\n} /* main */\n"
    );
    let d = shadowgraph_data::dir::DataDir::open(&part).unwrap();
    for &tid in &d.tids {
        depths_follow_the_records(&d, tid).unwrap();
    }
}

/// `--signal SIG@ACTION`: the agent's handler for the signal, which the
/// program's own calls (as uftrace's s-signal.c does), ends the recording
/// (`finish`) or switches it off (`trace_off`); as uftrace 0.13's test
/// t214_signal_trigger shows for `finish` (uftrace's own output differs
/// by one line there, which the test allows: the handler's exit).
#[test]
fn signals_switch_tracing_as_uftrace() {
    let dir = workdir("sigswitch");
    let exe = build_fixture(&dir, "sigswitch", "signal_switch.c");
    let body = |action: &str| {
        let data = dir.join(format!("{action}.data"));
        record_ok(&["--signal", &format!("SIGUSR1@{action}")], &data, &exe);
        replay_body(&view(&mut shadowgraph(), &data, &["replay"]))
    };
    let finish = body("finish");
    assert_eq!(
        finish[..6],
        [
            "main() {",
            "  foo();",
            "  on_usr1() {",
            "    bar();",
            "",
            "uftrace stopped tracing with remaining functions",
        ],
        "{finish:#?}"
    );
    // Off from the signal on: main's second foo and its exit not recorded.
    let off = body("trace_off");
    assert_eq!(
        off[..4],
        ["main() {", "  foo();", "  on_usr1() {", "    bar();"],
        "{off:#?}"
    );
    assert!(!off.iter().any(|l| l.contains("} /* main */")), "{off:#?}");
    // A spec that is not a signal's is refused before the program runs.
    let o = shadowgraph()
        .args(["record", "--signal", "USR1@depth=2", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o)
            .1
            .contains("a signal takes trace_on, trace_off or finish"),
        "{}",
        text(&o).1
    );
}

/// `live --disable -T F@trace_on`: the first call shown is shown at its
/// depth (the calls it is inside of were made with tracing off), as
/// uftrace's `live` shows it (its tests t038, t039); the same text as
/// uftrace 0.13's `live -P .` of the same program.
#[test]
fn live_started_off_shows_calls_at_their_depth_as_uftrace() {
    let dir = workdir("liveoff");
    let exe = build_fixture_with(
        &dir,
        "liveoff",
        "naps.c",
        &["-DMIDS=3", "-DNAP_US=200", "-DFIB_N=4"],
    );
    let args = [
        "--no-libcall",
        "--disable",
        "-T",
        "mid@trace_on",
        "-T",
        "leaf@trace_off",
        "-f",
        "none",
    ];
    let live = |tool: &mut std::process::Command, extra: &[&str]| {
        let o = tool
            .arg("live")
            .args(extra)
            .args(args)
            .arg(&exe)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0
    };
    let ours = live(&mut shadowgraph(), &["--no-sched"]);
    assert!(
        ours.contains("\n  mid() {\n    nap();\n    mid() {\n"),
        "{ours}"
    );
    if uftrace_missing("the same by uftrace") {
        return;
    }
    let theirs = live(
        &mut std::process::Command::new("uftrace"),
        &["-P", ".", "--no-event"],
    );
    let body = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.starts_with("task: "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(body(&ours), body(&theirs));
}

/// `-W cpu`: where a call enters or returns on another processor than
/// the thread's last `watch:cpu` event named, an event says which, as
/// uftrace's (processors' numbers left out: they are the machine's); the
/// `-F` filters still apply beside it, and beside `--signal`.
#[test]
fn watch_cpu_as_uftrace() {
    let dir = workdir("watch_cpu");
    let exe = build_fixture_with(&dir, "mc", "move_cpu.c", &["-pg"]);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let lines = |tool: &mut std::process::Command, data: &std::path::Path| -> Vec<String> {
        let text = view(tool, data, &["replay"]);
        let cpu = |l: &str| match l.split_once("cpu=") {
            Some((a, b)) => format!(
                "{a}cpu=N{}",
                b.trim_start_matches(|c: char| c.is_ascii_digit())
            ),
            None => l.to_string(),
        };
        shape(&text).iter().map(|l| cpu(l)).collect()
    };
    let ours = dir.join("s.data");
    let opts = ["-F", "main", "-W", "cpu", "--no-sched"];
    let events = |got: &[String]| {
        got.iter()
            .filter(|l| l.contains("/* watch:cpu (cpu=N) */"))
            .count()
    };
    // At main's entry; then, with two processors or more, at the return
    // of each sched_setaffinity. (The kernel may also move the program on
    // its own, on a busy machine: such a run is made again.)
    let want = if cpus > 1 { 3 } else { 1 };
    let mut got = Vec::new();
    for _ in 0..5 {
        let o = record_run(&[], &[&["--libcall"], &opts[..]].concat(), &ours, &exe, &[]);
        assert!(o.status.success(), "{}", text(&o).1);
        got = lines(&mut shadowgraph(), &ours);
        if events(&got) <= want {
            break;
        }
    }
    assert_eq!(events(&got), want, "{got:#?}");
    assert!(got[0].ends_with("main() {"), "{got:#?}");
    // The calls on the processor of the thread's last event on the fused
    // path (with rseq), the others through the callbacks, which write
    // the events.
    let info = view(&mut shadowgraph(), &ours, &["info"]);
    assert!(info.contains("record path         : fused"), "{info}");
    let o = shadowgraph()
        .args(["live", "-F", "main", "--signal", "SIGUSR1@trace_off"])
        .arg(&exe)
        .output()
        .unwrap();
    let out = text(&o).0;
    assert!(o.status.success() && !out.contains("__monstartup"), "{out}");
    if !require("uftrace", "uftrace's recording of the same program") {
        return;
    }
    let theirs = dir.join("u.data");
    let mut their_lines = Vec::new();
    for _ in 0..5 {
        uftrace_record(&theirs, &opts, &exe);
        their_lines = lines(&mut std::process::Command::new("uftrace"), &theirs);
        if events(&their_lines) <= want {
            break;
        }
    }
    assert_eq!(got, their_lines);
}

/// `--watch cpu` on the fused path, under threads that move between
/// processors: four threads each move themselves to the other processor
/// every ten rounds of fib(15). The calls on the processor of the
/// thread's last event take the fused path, the others the callbacks,
/// which write the event: each thread's records stay whole, every fib
/// call is recorded, and with two processors or more each move is an
/// event. Two tracers at once (on the path they share, which compares
/// each one's last processor) each get every event.
#[test]
fn watch_cpu_on_the_fused_path_as_threads_move() {
    let dir = workdir("watch_moves");
    let exe = build_fixture_with(&dir, "wm", "watch_moves.c", &["-pthread"]);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let one = dir.join("w.data");
    let two = dir.join("w2.data");
    for (opts, data, dirs) in [
        (&["-F", "run"][..], &one, vec![one.clone()]),
        (
            &["--tracer", "a:filter=run", "--tracer", "b:filter=run"][..],
            &two,
            vec![two.join("a"), two.join("b")],
        ),
    ] {
        let all = [&["-W", "cpu", "--no-libcall"][..], opts].concat();
        let o = record_run(&[], &all, data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        let calls: u64 = out.trim().parse().unwrap();
        let info = view(&mut shadowgraph(), &dirs[0], &["info"]);
        let path = match dirs.len() {
            1 => "record path         : fused (one tracer",
            _ => "record path         : fused (several tracers",
        };
        assert!(info.contains(path), "{info}");
        for data in &dirs {
            assert_eq!(report_rows(&report_text(data))["fib"].2, calls);
            let d = shadowgraph_data::dir::DataDir::open(data).unwrap();
            let mut threads = 0;
            for &tid in &d.tids {
                in_time_order(&d, tid).unwrap();
                every_call_closes(&d, tid).unwrap();
                depths_follow_the_records(&d, tid).unwrap();
                let recs = records_of(&d, tid).unwrap();
                let events = recs
                    .iter()
                    .filter(|r| r.kind == shadowgraph_data::format::Kind::Event)
                    .count();
                if recs.is_empty() {
                    continue;
                }
                threads += 1;
                // The first at run's entry, then one at each move to the
                // other processor: 19 at least (the first may be to
                // where it runs).
                assert!(
                    events >= if cpus > 1 { 20 } else { 1 },
                    "{}, thread {tid}: {events} events",
                    data.display()
                );
            }
            assert_eq!(threads, 4, "{}", data.display());
        }
    }
}
