//! What `record` traces: -F, -N, -D, -t, --lib, several tracers at once, and the same filters at replay time, as uftrace applies them.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn record_options_filter_notrace_depth_and_libs() {
    let dir = workdir("options");
    let exe = dir.join("prog");
    cc(
        &[&lib_fixture("calls.c")],
        &["-O2", "-DWITH_MAIN", "-fpatchable-function-entry=5"],
        &exe,
    );
    let live = |opts: &[&str], exe: &Path| -> Vec<String> {
        let o = shadowgraph()
            .args(["live", "--no-libcall", "--no-sched"])
            .args(opts)
            .arg("--")
            .arg(exe)
            .arg("2")
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{opts:?}: {err}");
        let rep = out
            .split_once("# DURATION")
            .map(|x| format!("# DURATION{}", x.1))
            .unwrap();
        shape(&rep)
    };
    let mid_tree = |d: usize| {
        let i = "  ".repeat(d);
        vec![
            format!(" |{i}mid() {{"),
            format!("D|{i}  leaf();"),
            format!("D|{i}  leaf();"),
            format!("D|{i}}} /* mid */"),
        ]
    };
    assert_eq!(
        live(&["-F", "mid"], &exe),
        [mid_tree(0), mid_tree(0)].concat()
    );
    assert_eq!(
        live(&["-D", "2"], &exe),
        [
            " |main() {",
            "D|  run();",
            "D|  run_args();",
            "D|  recurse();",
            "D|} /* main */"
        ]
    );
    assert_eq!(
        live(&["-N", "run*", "-N", "recurse"], &exe),
        ["D|main();"],
        "notrace hides the functions and everything they call"
    );
    let o = shadowgraph()
        .args(["live", "--no-libcall", "--no-sched", "-F", "/bad(/", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.lines().count() == 1 && err.contains("unclosed group"),
        "{err}"
    );

    // Libraries: all by default, none with --no-libs, chosen ones with --lib.
    let lib = dir.join("libcalls.so");
    build_lib(&lib_fixture("calls.c"), &lib);
    let user = dir.join("uses_lib");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    cc(
        &[&fixture("uses_lib.c"), &lib],
        &["-O2", "-fpatchable-function-entry=5", &rpath],
        &user,
    );
    let has_mid = |opts: &[&str]| live(opts, &user).iter().any(|l| l.contains("mid() {"));
    assert!(has_mid(&[]));
    assert!(!has_mid(&["--no-libs"]));
    assert!(has_mid(&["--lib", "libcalls"]));

    // `@LIB` in the views' patterns: the object each recorded function
    // lives in, from the recording's maps.
    let data = dir.join("lib.data");
    record_ok(&[], &data, &user);
    let view = |args: &[&str]| -> Vec<String> {
        let o = shadowgraph()
            .args(["replay", "-d"])
            .arg(&data)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
        shape(&text(&o).0)
    };
    assert_eq!(
        view(&["-N", "*@libcalls.so"]),
        ["D|main();"],
        "the library's functions hidden"
    );
    // (-D counts from each selected call: a selected callee would
    // restart it; run and run_args call no other run*.)
    let only_lib = view(&["-F", "run*@libcalls*", "-D", "1"]);
    assert!(only_lib == ["D|run_args();", "D|run();"], "{only_lib:?}");
    let o = shadowgraph()
        .args(["replay", "-d"])
        .arg(&data)
        .args(["-F", "main@libcalls.so"])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && text(&o).1.contains("matches no recorded function"),
        "main is not the library's"
    );
    // (uftrace's own replay does not apply `@LIB` to recorded data.)
}

/// Several tracers at once (the multi-user function graph): each records
/// into its own directory exactly what it records alone (design §6).
#[test]
fn several_tracers_record_at_once_as_if_alone() {
    let dir = workdir("tracers");
    let exe = dir.join("prog");
    cc(
        &[&lib_fixture("calls.c")],
        &["-O2", "-DWITH_MAIN", "-fpatchable-function-entry=5"],
        &exe,
    );
    let replay_shape = |d: &Path| {
        shape(
            &text(
                &shadowgraph()
                    .args(["replay", "-d"])
                    .arg(d)
                    .output()
                    .unwrap(),
            )
            .0,
        )
    };
    let record = |d: &Path, opts: &[&str]| {
        let o = shadowgraph()
            .args(["record", "--no-libcall", "--no-sched", "-d"])
            .arg(d)
            .args(opts)
            .arg("--")
            .arg(&exe)
            .arg("2")
            .output()
            .unwrap();
        assert!(o.status.success(), "{opts:?}: {}", text(&o).1);
        text(&o).1
    };
    let together = dir.join("together");
    let err = record(
        &together,
        &[
            "--tracer",
            "mids:filter=mid",
            "--tracer",
            "top:depth=2",
            "--tracer",
            "rec:filter=recurse:notrace=run*",
            "--tracer",
            "all",
        ],
    );
    assert_eq!(err.matches("(0 lost)").count(), 4, "{err}");
    for (name, alone) in [
        ("mids", vec!["-F", "mid"]),
        ("top", vec!["-D", "2"]),
        ("rec", vec!["-F", "recurse", "-N", "run*"]),
        ("all", vec![]),
    ] {
        let solo = dir.join(format!("solo-{name}"));
        record(&solo, &alone);
        assert_eq!(
            replay_shape(&together.join(name)),
            replay_shape(&solo),
            "tracer {name}"
        );
    }
    // The same with `--signal` (never sent), which gives each tracer
    // triggers: its filter and notrace patterns are triggers then.
    let signalled = dir.join("signalled");
    let err = record(
        &signalled,
        &[
            "--signal",
            "SIGUSR1@trace_off",
            "--tracer",
            "mids:filter=mid",
            "--tracer",
            "rec:filter=recurse:notrace=run*",
        ],
    );
    assert_eq!(err.matches("(0 lost)").count(), 2, "{err}");
    for name in ["mids", "rec"] {
        assert_eq!(
            replay_shape(&signalled.join(name)),
            replay_shape(&dir.join(format!("solo-{name}"))),
            "tracer {name}, with --signal"
        );
    }
    // Plain tracers only, one with a depth limit: the multi path's
    // records, each tracer's as alone.
    let plain = dir.join("plain");
    let err = record(&plain, &["--tracer", "top:depth=2", "--tracer", "all"]);
    assert_eq!(err.matches("(0 lost)").count(), 2, "{err}");
    for (name, solo) in [("top", "solo-top"), ("all", "solo-all")] {
        assert_eq!(
            replay_shape(&plain.join(name)),
            replay_shape(&dir.join(solo)),
            "tracer {name}, with only plain tracers"
        );
    }
    // The top directory is no recording: the views name the tracers'.
    let o = shadowgraph()
        .args(["replay", "-d"])
        .arg(&together)
        .output()
        .unwrap();
    let err = text(&o).1;
    assert!(
        !o.status.success() && err.contains("holds 4 recordings, of tracers or of programs started by exec (all, mids, rec, top): choose one"),
        "{err}"
    );
    record_refuses(&["-F", "mid", "--tracer", "x"], &exe, "inside each tracer");
    record_refuses(&["--tracer", "x:color=red"], &exe, "unknown key");
    record_refuses(
        &["--tracer", "p:type=profile:trigger=mid@depth=1"],
        &exe,
        "a profile takes filter= and notrace= only",
    );
}

/// `record -t`: calls shorter than the threshold leave no records; a long
/// call is recorded with all its callers (written late, in time order, at
/// their depths), alone or as one of several tracers with filters.
/// Then `replay`, `report` and `dump` with `-F/-N/-D/-t/--tid` on the
/// complete recording, compared with uftrace's of the same directory.
#[test]
fn time_filter_at_record_and_replay_filters_as_uftrace_applies_them() {
    let dir = workdir("timefilter");
    let exe = build_fixture(&dir, "tf", "time_filter.c");
    let record = |args: &[&str], data: &Path| {
        let o = shadowgraph()
            .args(["record", "--no-libcall", "--no-sched"])
            .args(args)
            .arg("-d")
            .arg(data)
            .arg("--")
            .arg(&exe)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        assert_eq!(out.trim(), "15000");
    };
    let replay = |data: &Path| {
        let o = shadowgraph()
            .args(["replay", "-d"])
            .arg(data)
            .output()
            .unwrap();
        assert!(o.status.success());
        shape(&text(&o).0)
    };
    let long = [
        " |main() {",
        " |  middle() {",
        " |    slow() {",
        "D|      nap();",
        "D|    } /* slow */",
        "D|  } /* middle */",
        " |  slow() {",
        "D|    nap();",
        "D|  } /* slow */",
        "D|} /* main */",
    ];
    // nap sleeps 20 ms or more, so it and its callers are always kept;
    // fast takes nanoseconds, and is kept only if the machine held the
    // program inside it for 10 ms: leaving fast out, the shape is exact.
    let without_fast = |lines: Vec<String>| -> Vec<String> {
        lines.into_iter().filter(|l| !l.contains("fast")).collect()
    };
    let data = dir.join("t.data");
    record(&["--no-libs", "-t", "10ms"], &data);
    assert_eq!(without_fast(replay(&data)), long);
    if let Some(theirs) = uftrace_view("replay", &data) {
        assert_eq!(shape(&theirs), replay(&data), "uftrace reads it the same");
    }
    // With a depth limit too: both apply.
    let shallow = dir.join("d.data");
    record(&["--no-libs", "-t", "10ms", "-D", "2"], &shallow);
    assert_eq!(
        without_fast(replay(&shallow)),
        [
            " |main() {",
            "D|  middle();",
            "D|  slow();",
            "D|} /* main */",
        ]
    );
    // With a function filter: the long calls inside middle (the graph
    // filter on the fused path, the time filter by the rings' consumer).
    let inner = dir.join("f.data");
    record(&["--no-libs", "-t", "10ms", "-F", "middle"], &inner);
    assert!(view_text("info", &inner).contains("record path         : fused"));
    assert_eq!(
        without_fast(replay(&inner)),
        [
            " |middle() {",
            " |  slow() {",
            "D|    nap();",
            "D|  } /* slow */",
            "D|} /* middle */",
        ]
    );

    // With `-F` and `-D` too, which become triggers (the depth counted
    // from middle): the triggers on the fused path, the time filter by
    // the consumer again.
    let triggered = dir.join("fd.data");
    record(
        &["--no-libs", "-t", "10ms", "-F", "middle", "-D", "2"],
        &triggered,
    );
    assert!(view_text("info", &triggered).contains("record path         : fused"));
    assert_eq!(
        without_fast(replay(&triggered)),
        [" |middle() {", "D|  slow();", "D|} /* middle */"]
    );

    // Three tracers: everything; the long calls; the long calls inside
    // middle. The filtered ones keep exactly the calls the complete one
    // measured at 10 ms or more (the same calls, timed by each tracer).
    let multi = dir.join("m.data");
    record(
        &[
            "--no-libs",
            "--tracer",
            "all",
            "--tracer",
            "long:time=10000us",
            "--tracer",
            "inner:filter=middle:time=0.01s",
        ],
        &multi,
    );
    // The same filters at replay time, on the complete recording, as
    // uftrace's replay applies them.
    let replay_with = |args: &[&str]| {
        let o = shadowgraph()
            .arg("replay")
            .args(args)
            .arg("-d")
            .arg(multi.join("all"))
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        shape(&out)
    };
    assert_eq!(replay(&multi.join("long")), replay_with(&["-t", "10ms"]));
    assert_eq!(without_fast(replay(&multi.join("long"))), long);
    assert_eq!(
        replay(&multi.join("inner")),
        replay_with(&["-F", "middle", "-t", "10ms"])
    );
    assert_eq!(
        without_fast(replay(&multi.join("inner"))),
        [
            " |middle() {",
            " |  slow() {",
            "D|    nap();",
            "D|  } /* slow */",
            "D|} /* middle */",
        ]
    );
    let all = replay(&multi.join("all"));
    assert_eq!(all.iter().filter(|l| l.ends_with("fast();")).count(), 105);

    let shallow = replay_with(&["-D", "2"]);
    assert_eq!(shallow.len(), 1 + 100 + 2 + 1, "{shallow:?}");
    assert_eq!(shallow[101..103], ["D|  middle();", "D|  slow();"]);
    let tid = std::fs::read_dir(multi.join("all"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".dat")
                .map(String::from)
        })
        .unwrap();
    assert_eq!(replay_with(&["--tid", &tid]), all);
    if require("uftrace", "the same view by uftrace") {
        let sets: [&[&str]; 6] = [
            &["-t", "10ms"],
            &["-D", "2"],
            &["-F", "slow"],
            &["-N", "slow"],
            &["-F", "middle", "-N", "fast"],
            &["-F", "slow", "-D", "1"],
        ];
        for args in sets {
            let o = Command::new("uftrace")
                .arg("replay")
                .args(args)
                .arg("-d")
                .arg(multi.join("all"))
                .output()
                .unwrap();
            assert_eq!(shape(&text(&o).0), replay_with(args), "uftrace {args:?}");
        }
    }
    let o = shadowgraph()
        .args(["replay", "--tid", "1", "-d"])
        .arg(multi.join("all"))
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).1.contains("--tid 1: no such thread"));
    assert_eq!(
        replay_with(&["-F", "slow", "-N", "nap"]),
        [
            " |slow() {",
            "D|  fast();",
            "D|  fast();",
            "D|} /* slow */",
            " |slow() {",
            "D|  fast();",
            "D|  fast();",
            "D|} /* slow */",
        ]
    );
    // report takes the same filters: calls per function.
    let report_calls = |cmd: &mut Command| {
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        let mut rows: Vec<(String, String)> = text(&o)
            .0
            .lines()
            .skip(2)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((
                    f.last()?.to_string(),
                    f.get(f.len().checked_sub(2)?)?.to_string(),
                ))
            })
            .collect();
        rows.sort();
        rows
    };
    let ours = report_calls(
        shadowgraph()
            .args(["report", "-F", "slow", "-d"])
            .arg(multi.join("all")),
    );
    let want = [("fast", "4"), ("nap", "2"), ("slow", "2")];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(ours, want);
    if require("uftrace", "the same view by uftrace") {
        for f in [
            &["-F", "slow"][..],
            &["-N", "slow"],
            &["-D", "2"],
            &["-t", "10ms"],
        ] {
            let ours = report_calls(
                shadowgraph()
                    .arg("report")
                    .args(f)
                    .arg("-d")
                    .arg(multi.join("all")),
            );
            let theirs = report_calls(
                Command::new("uftrace")
                    .arg("report")
                    .args(f)
                    .arg("-d")
                    .arg(multi.join("all")),
            );
            assert_eq!(ours, theirs, "report {f:?}");
        }
    }
    // And the dumps: folded stacks of what -F selects, rooted at it.
    let o = shadowgraph()
        .args(["dump", "--flame-graph", "-F", "slow", "-d"])
        .arg(multi.join("all"))
        .output()
        .unwrap();
    let stacks: Vec<&str> = std::str::from_utf8(&o.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.rsplit_once(' ').map(|x| x.0))
        .collect();
    assert_eq!(stacks, ["slow", "slow;fast", "slow;nap"]);
    let o = shadowgraph()
        .args(["replay", "-F", "nosuch*", "-d"])
        .arg(multi.join("all"))
        .output()
        .unwrap();
    let err = text(&o).1;
    assert!(
        !o.status.success() && err.contains("-F nosuch*: matches no recorded function"),
        "{err}"
    );

    for (args, want) in [
        (&["-t", "5xs"][..], "unknown time unit `xs`"),
        (&["-t", "ms"][..], "is not a duration"),
        (&["--tracer", "a:time=1h"][..], "--tracer a:time=1h"),
        (
            &["-t", "1ms", "--tracer", "a"][..],
            "give filters inside each tracer",
        ),
        (
            &["--tracer", "a", "--tracer", "a:depth=2"][..],
            "tracer `a` is named twice: each tracer records into a directory of its own",
        ),
    ] {
        let o = shadowgraph()
            .args(["record", "--no-libcall", "--no-sched"])
            .args(args)
            .arg("-d")
            .arg(dir.join("bad"))
            .arg("--")
            .arg(&exe)
            .output()
            .unwrap();
        let (_, err) = text(&o);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A record pattern that matches no function is a warning, and tracing
/// goes on without it, as uftrace's: `-F` of nothing that exists filters
/// nothing out, beside another `-F` it is left out, `-N` of nothing
/// excludes nothing.
#[test]
fn a_record_pattern_that_matches_nothing_is_a_warning() {
    let dir = workdir("unmatched");
    let exe = build_fixture(&dir, "fib", "fib_arg.c");
    let warned = "warning: pattern `nosuch*` matches no function; tracing goes on without it";
    let run = |opts: &[&str], tag: &str| {
        let data = dir.join(format!("{tag}.data"));
        let o = record_run(&[], opts, &data, &exe, &["5".as_ref()]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{opts:?}: {err}");
        assert_eq!(out.trim(), "5", "{opts:?}");
        assert_eq!(err.matches(warned).count(), 1, "{opts:?}: {err}");
        data
    };
    let rows_of = |data: &std::path::Path| {
        let o = shadowgraph()
            .args(["report", "-d"])
            .arg(data)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{}: {err}", data.display());
        report_rows(&out)
    };
    let rows = rows_of(&run(&["-F", "nosuch*"], "only"));
    assert_eq!((rows["main"].2, rows["fib"].2), (1, 15), "{rows:?}");
    let rows = rows_of(&run(&["-F", "fib", "-F", "nosuch*"], "beside"));
    assert!(
        rows.contains_key("fib") && !rows.contains_key("main"),
        "{rows:?}"
    );
    let rows = rows_of(&run(&["-N", "nosuch*"], "notrace"));
    assert_eq!((rows["main"].2, rows["fib"].2), (1, 15), "{rows:?}");
    let profile = run(&["--tracer", "profile:filter=nosuch*"], "profile").join("profile");
    assert_eq!(rows_of(&profile)["fib"].2, 15);
}

/// A recording of several programs (a shell script, traced by its library
/// calls with --force, and the program it starts by exec) says a pattern
/// that matches no function once, when it matched in none of them: `main`
/// (the started program's) and `fork` (the shell's) are not said.
#[test]
fn a_pattern_is_said_unmatched_only_when_no_program_of_the_recording_has_it() {
    let dir = workdir("unmatched_programs");
    let exe = build_fixture(&dir, "fib", "fib_arg.c");
    let script = dir.join("run.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{} 5\n", exe.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let data = dir.join("s.data");
    let opts = [
        "--libcall",
        "--force",
        "-F",
        "main",
        "-F",
        "fork",
        "-F",
        "nosuch",
    ];
    let o = record_run(&[], &opts, &data, &script, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "5");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("matches no function"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains("pattern `nosuch`"), "{err}");
}
