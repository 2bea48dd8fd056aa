//! View options as uftrace's: `report -f/-s/--avg-*`, `replay`'s layout
//! options, the plain and Graphviz dumps, each compared with uftrace 0.13
//! on the same recording.

mod common;

use common::*;
use std::process::Command;

/// `report`'s columns and order as uftrace's: `-f` fields (shown in
/// uftrace's order, `+` adding to the default ones, `all`, `none`),
/// several `-s` keys, `--avg-total` and `--avg-self` (average, least and
/// most time of a call, sorted by the average unless `-s` says).
#[test]
fn report_columns_and_keys_as_uftrace() {
    let dir = workdir("report_columns");
    let exe = build_fixture_with(
        &dir,
        "r",
        "naps.c",
        &["-DMIDS=3", "-DNAP_US=200", "-DFIB_N=5"],
    );
    let data = dir.join("r.data");
    record_ok(&[], &data, &exe);
    let report = |cmd: &mut Command, args: &[&str]| {
        let o = cmd
            .args(["report", "-d"])
            .arg(&data)
            .args(args)
            .output()
            .unwrap();
        (o.status.success(), text(&o).0, text(&o).1)
    };
    let (ok, out, _) = report(&mut shadowgraph(), &["--avg-total", "-s", "call,func"]);
    assert!(ok, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0], "   Total avg   Total min   Total max  Function",
        "{out}"
    );
    // fib: 15 calls, most first; then by name.
    assert!(lines[2].ends_with("  fib"), "{out}");
    let (ok, out, _) = report(&mut shadowgraph(), &["-f", "none", "-s", "func"]);
    assert!(ok && out.starts_with("  fib\n  leaf\n  main\n"), "{out}");
    let (ok, _, err) = report(&mut shadowgraph(), &["-s", "avg"]);
    assert!(
        !ok && err.contains("needs --avg-total or --avg-self"),
        "{err}"
    );
    let (ok, _, err) = report(&mut shadowgraph(), &["-f", "nosuch"]);
    assert!(!ok && err.contains("unknown field `nosuch`"), "{err}");
    if require("uftrace", "the same reports by uftrace") {
        for args in [
            &["--avg-total"][..],
            &["--avg-self", "-s", "call,func"],
            &["--avg-total", "-s", "max"],
            &["-f", "total,call,self-avg,total-max"],
            &["-f", "+self-max", "-s", "self,call"],
            &["-f", "all", "-s", "total_min"],
            &["-f", "call,size", "-s", "size"],
            &["-f", "none"],
        ] {
            let (ours, theirs) = (
                report(&mut shadowgraph(), args),
                report(&mut Command::new("uftrace"), args),
            );
            assert!(ours.0 && theirs.0, "{args:?}: {}{}", ours.2, theirs.2);
            assert_eq!(ours.1, theirs.1, "report {args:?}");
        }
    }
}

/// `replay --no-merge`, `--no-comment`, `--column-view` (`--column-offset`)
/// and `--task-newline` lay the lines out as uftrace's do, on a program
/// whose two threads' lines interleave.
#[test]
fn replay_layouts_as_uftrace() {
    let dir = workdir("replay_layouts");
    let exe = build_fixture_with(&dir, "j", "join_waits.c", &["-pthread"]);
    let data = dir.join("j.data");
    record_ok(&[], &data, &exe);
    let replay = |cmd: &mut Command, args: &[&str]| {
        let o = cmd
            .args(["replay", "-d"])
            .arg(&data)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
        text(&o).0
    };
    let out = replay(
        &mut shadowgraph(),
        &["--no-merge", "--no-comment", "-f", "none"],
    );
    // (The threads' lines interleave as they ran.)
    assert!(
        out.lines().any(|l| l == "worker() {") && !out.contains("();") && !out.contains("/*"),
        "{out}"
    );
    let out = replay(
        &mut shadowgraph(),
        &["--column-view", "--column-offset", "2", "-f", "none"],
    );
    assert!(out.lines().any(|l| l.starts_with("    worker()")), "{out}");
    let out = replay(&mut shadowgraph(), &["--task-newline"]);
    assert!(out.contains("\n                     | \n"), "{out}");
    if require("uftrace", "the same layouts by uftrace") {
        for args in [
            &["--no-merge"][..],
            &["--no-comment"],
            &["--column-view"],
            &["--column-view", "--column-offset", "3", "-f", "+time"],
            &["--task-newline"],
            &["--task-newline", "-f", "none", "--no-merge"],
        ] {
            assert_eq!(
                replay(&mut shadowgraph(), args),
                replay(&mut Command::new("uftrace"), args),
                "replay {args:?}"
            );
        }
    }
}

/// The plain `dump` (each thread's records as in its file, after the
/// header of the uftrace-format `info` file) and `dump --graphviz` (the
/// whole call tree as edges) as uftrace's, on a two-thread recording.
#[test]
fn plain_and_graphviz_dumps_as_uftrace() {
    let dir = workdir("dumps");
    let exe = build_fixture_with(&dir, "j", "join_waits.c", &["-pthread"]);
    let data = dir.join("j.data");
    record_ok(&[], &data, &exe);
    let dump = |cmd: &mut Command, args: &[&str]| {
        let o = cmd
            .args(["dump", "-d"])
            .arg(&data)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
        text(&o).0
    };
    let plain = dump(&mut shadowgraph(), &[]);
    assert!(
        plain.starts_with("uftrace file header: magic         = 4674726163652100\n")
            && plain.contains("\nreading ")
            && plain.contains(": [entry] main(")
            && plain.contains(": [exit ] worker("),
        "{plain}"
    );
    let gv = dump(&mut shadowgraph(), &["--graphviz"]);
    assert!(
        gv.contains("\ndigraph \"j\" { \n")
            && gv.contains("    \"j\" -> \"main\" [xlabel = \"1\"]\n")
            && gv.contains("    \"main\" -> \"joiner\" [xlabel = \"1\"]\n")
            && gv.ends_with("}\n"),
        "{gv}"
    );
    let o = shadowgraph()
        .args(["dump", "-d"])
        .arg(&data)
        .args(["-F", "main"])
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).1.contains("the plain dump shows every record"));
    if require("uftrace", "the same dumps by uftrace") {
        assert_eq!(plain, dump(&mut Command::new("uftrace"), &[]));
        // (The first line names the tool.)
        let tail = |s: String| s.lines().skip(1).collect::<Vec<_>>().join("\n");
        let theirs = dump(&mut Command::new("uftrace"), &["--graphviz"]);
        assert_eq!(tail(gv), tail(theirs));
    }
}

/// `info` shows the command line that made the recording, quoted as
/// uftrace keeps its own (`"` escaped), and uftrace shows the same.
#[test]
fn info_quotes_the_recording_command_line() {
    let dir = workdir("info_cmdline");
    let exe = build_fixture_with(
        &dir,
        "q",
        "naps.c",
        &["-DMIDS=1", "-DNAP_US=1", "-DFIB_N=2"],
    );
    let data = dir.join("q.data");
    let o = record_run(&[], &[], &data, &exe, &["a b".as_ref(), "c\"d".as_ref()]);
    assert!(o.status.success(), "{}", text(&o).1);
    let info = |cmd: &mut Command| {
        let o = cmd.args(["info", "-d"]).arg(&data).output().unwrap();
        let out = text(&o).0;
        out.lines()
            .find(|l| l.starts_with("# cmdline"))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string()
    };
    let ours = info(&mut shadowgraph());
    assert!(
        ours.contains(" record ") && ours.ends_with(" a b c\\\"d"),
        "{ours}"
    );
    if require("uftrace", "uftrace's info of the recording") {
        assert_eq!(ours, info(&mut Command::new("uftrace")));
    }
}

/// `-C/--caller-filter`: only the calls of the functions named and of
/// their callers, in every view, as uftrace's.
#[test]
fn caller_filter_keeps_the_callers_of_a_function() {
    let dir = workdir("caller_filter");
    let exe = build_fixture_with(
        &dir,
        "c",
        "naps.c",
        &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"],
    );
    let data = dir.join("c.data");
    record_ok(&[], &data, &exe);
    let view = |cmd: &mut Command, args: &[&str]| {
        let o = cmd
            .arg(args[0])
            .arg("-d")
            .arg(&data)
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
        text(&o).0
    };
    let out = view(&mut shadowgraph(), &["replay", "-C", "leaf", "-f", "none"]);
    assert_eq!(
        out,
        "main() {\n  mid() {\n    leaf();\n    leaf();\n  } /* mid */\n  mid() {\n    leaf();\n    leaf();\n  } /* mid */\n} /* main */\n"
    );
    if require("uftrace", "the same views by uftrace") {
        for args in [
            &["replay", "-C", "leaf"][..],
            &["replay", "-C", "mid"],
            &["replay", "-C", "mid", "-C", "leaf"],
            &["replay", "-C", "leaf", "-D", "2"],
            &["replay", "-C", "fib", "-N", "leaf"],
            &["report", "-C", "leaf"],
            &["graph", "-C", "fib"],
        ] {
            assert_eq!(
                view(&mut shadowgraph(), args),
                view(&mut Command::new("uftrace"), args),
                "{args:?}"
            );
        }
    }
}

/// `-Z/--size-filter`: without the calls of functions smaller than SIZE
/// bytes (to the next symbol), their callees in their place, as uftrace's.
#[test]
fn size_filter_leaves_small_functions_out() {
    let dir = workdir("size_filter");
    let exe = build_fixture_with(
        &dir,
        "z",
        "naps.c",
        &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"],
    );
    let data = dir.join("z.data");
    record_ok(&[], &data, &exe);
    let view = |cmd: &mut Command, args: &[&str]| {
        let o = cmd
            .arg(args[0])
            .arg("-d")
            .arg(&data)
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
        text(&o).0
    };
    // leaf (`lea; ret` and padding) is the smallest function.
    let all = view(&mut shadowgraph(), &["replay"]);
    let some = view(&mut shadowgraph(), &["replay", "-Z", "20"]);
    assert!(
        all.contains("leaf();") && !some.contains("leaf") && some.contains("mid() {"),
        "{some}"
    );
    if require("uftrace", "the same views by uftrace") {
        for args in [
            &["replay", "-Z", "20"][..],
            &["replay", "-Z", "50"],
            &["report", "-Z", "50"],
            &["graph", "-Z", "50"],
            &["replay", "-Z", "40", "-D", "2"],
        ] {
            assert_eq!(
                view(&mut shadowgraph(), args),
                view(&mut Command::new("uftrace"), args),
                "{args:?}"
            );
        }
    }
}
