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
    let data = recording("r", "naps.c", &["-DMIDS=3", "-DNAP_US=200", "-DFIB_N=5"]);
    let out = view(
        &mut shadowgraph(),
        &data,
        &["report", "--avg-total", "-s", "call,func"],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0], "   Total avg   Total min   Total max  Function",
        "{out}"
    );
    // fib: 15 calls, most first; then by name.
    assert!(lines[2].ends_with("  fib"), "{out}");
    let out = view(
        &mut shadowgraph(),
        &data,
        &["report", "-f", "none", "-s", "func"],
    );
    assert!(out.starts_with("  fib\n  leaf\n  main\n"), "{out}");
    for (args, says) in [
        (&["report", "-s", "avg"], "needs --avg-total or --avg-self"),
        (&["report", "-f", "nosuch"], "unknown field `nosuch`"),
    ] {
        let o = run_view(&mut shadowgraph(), &data, args);
        assert!(
            !o.status.success() && text(&o).1.contains(says),
            "{}",
            text(&o).1
        );
    }
    as_uftrace(
        &data,
        &[
            &["report", "--avg-total"],
            &["report", "--avg-self", "-s", "call,func"],
            &["report", "--avg-total", "-s", "max"],
            &["report", "-f", "total,call,self-avg,total-max"],
            &["report", "-f", "+self-max", "-s", "self,call"],
            &["report", "-f", "all", "-s", "total_min"],
            &["report", "-f", "call,size", "-s", "size"],
            &["report", "-f", "none"],
        ],
        0,
    );
}

/// `replay --no-merge`, `--no-comment`, `--column-view` (`--column-offset`)
/// and `--task-newline` lay the lines out as uftrace's do, on a program
/// whose two threads' lines interleave.
#[test]
fn replay_layouts_as_uftrace() {
    let data = recording("j", "join_waits.c", &["-pthread"]);
    let replay = |args: &[&str]| view(&mut shadowgraph(), &data, &[&["replay"], args].concat());
    let out = replay(&["--no-merge", "--no-comment", "-f", "none"]);
    // (The threads' lines interleave as they ran.)
    assert!(
        out.lines().any(|l| l == "worker() {") && !out.contains("();") && !out.contains("/*"),
        "{out}"
    );
    let out = replay(&["--column-view", "--column-offset", "2", "-f", "none"]);
    assert!(out.lines().any(|l| l.starts_with("    worker()")), "{out}");
    let out = replay(&["--task-newline"]);
    assert!(out.contains("\n                     | \n"), "{out}");
    as_uftrace(
        &data,
        &[
            &["replay", "--no-merge"],
            &["replay", "--no-comment"],
            &["replay", "--column-view"],
            &[
                "replay",
                "--column-view",
                "--column-offset",
                "3",
                "-f",
                "+time",
            ],
            &["replay", "--task-newline"],
            &["replay", "--task-newline", "-f", "none", "--no-merge"],
        ],
        0,
    );
}

/// The plain `dump` (each thread's records as in its file, after the
/// header of the uftrace-format `info` file) and `dump --graphviz` (the
/// whole call tree as edges) as uftrace's, on a two-thread recording.
#[test]
fn plain_and_graphviz_dumps_as_uftrace() {
    let data = recording("d", "join_waits.c", &["-pthread"]);
    let plain = view(&mut shadowgraph(), &data, &["dump"]);
    assert!(
        plain.starts_with("uftrace file header: magic         = 4674726163652100\n")
            && plain.contains("\nreading ")
            && plain.contains(": [entry] main(")
            && plain.contains(": [exit ] worker("),
        "{plain}"
    );
    let gv = view(&mut shadowgraph(), &data, &["dump", "--graphviz"]);
    assert!(
        gv.contains("\ndigraph \"d\" { \n")
            && gv.contains("    \"d\" -> \"main\" [xlabel = \"1\"]\n")
            && gv.contains("    \"main\" -> \"joiner\" [xlabel = \"1\"]\n")
            && gv.ends_with("}\n"),
        "{gv}"
    );
    // Filters keep records, each with the depth it was recorded at.
    let filtered = view(
        &mut shadowgraph(),
        &data,
        &["dump", "-F", "main", "-N", "leaf"],
    );
    assert!(
        filtered.contains(": [entry] joiner(") && !filtered.contains("leaf"),
        "{filtered}"
    );
    as_uftrace(
        &data,
        &[
            &["dump"],
            &["dump", "-F", "main", "-N", "leaf"],
            &["dump", "-D", "2"],
        ],
        0,
    );
    // (The first line names the tool.)
    as_uftrace(&data, &[&["dump", "--graphviz"]], 1);
}

/// `info` shows the command line that made the recording, quoted as
/// uftrace keeps its own (`"` escaped), and a note left in the directory
/// (`note.txt`); uftrace shows the same.
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
    let info = |tool: &mut Command| {
        let out = view(tool, &data, &["info"]);
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
    // A note left in the directory ends the info, as uftrace's shows it.
    std::fs::write(data.join("note.txt"), "Left for later.").unwrap();
    let tail = |tool: &mut Command| {
        let out = view(tool, &data, &["info"]);
        let at = out
            .find("#\n# extra note information")
            .unwrap_or_else(|| panic!("{out}"));
        out[at..].to_string()
    };
    let ours = tail(&mut shadowgraph());
    assert_eq!(
        ours,
        "#\n# extra note information\n# ======================\nLeft for later.\n"
    );
    if require("uftrace", "uftrace's info of the recording") {
        assert_eq!(ours, tail(&mut Command::new("uftrace")));
    }
}

/// `-C/--caller-filter`: only the calls of the functions named and of
/// their callers, in every view, as uftrace's.
#[test]
fn caller_filter_keeps_the_callers_of_a_function() {
    let data = recording("c", "naps.c", &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"]);
    let out = view(
        &mut shadowgraph(),
        &data,
        &["replay", "-C", "leaf", "-f", "none"],
    );
    assert_eq!(
        out,
        "main() {\n  mid() {\n    leaf();\n    leaf();\n  } /* mid */\n  mid() {\n    leaf();\n    leaf();\n  } /* mid */\n} /* main */\n"
    );
    as_uftrace(
        &data,
        &[
            &["replay", "-C", "leaf"],
            &["replay", "-C", "mid"],
            &["replay", "-C", "mid", "-C", "leaf"],
            &["replay", "-C", "leaf", "-D", "2"],
            &["replay", "-C", "fib", "-N", "leaf"],
            &["report", "-C", "leaf"],
            &["graph", "-C", "fib"],
        ],
        0,
    );
}

/// `-Z/--size-filter`: without the calls of functions smaller than SIZE
/// bytes (to the next symbol), their callees in their place, as uftrace's.
#[test]
fn size_filter_leaves_small_functions_out() {
    let data = recording("z", "naps.c", &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"]);
    // leaf (`lea; ret` and padding) is the smallest function.
    let all = view(&mut shadowgraph(), &data, &["replay"]);
    let some = view(&mut shadowgraph(), &data, &["replay", "-Z", "20"]);
    assert!(
        all.contains("leaf();") && !some.contains("leaf") && some.contains("mid() {"),
        "{some}"
    );
    as_uftrace(
        &data,
        &[
            &["replay", "-Z", "20"],
            &["replay", "-Z", "50"],
            &["report", "-Z", "50"],
            &["graph", "-Z", "50"],
            &["replay", "-Z", "40", "-D", "2"],
            // A `size=` trigger: for its function's call and those inside.
            &["replay", "-Z", "20", "-T", "mid@size=1000"],
            &["replay", "-T", "mid@size=30"],
            &["replay", "-Z", "1000", "-T", "mid@size=0"],
        ],
        0,
    );
}

/// `-F` and `-N` in the order given: for each function the last pattern
/// that names it decides, as uftrace's; in views and in `record`.
#[test]
fn filters_apply_in_the_order_given() {
    let data = recording("o", "naps.c", &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"]);
    let replay = |args: &[&str]| {
        view(
            &mut shadowgraph(),
            &data,
            &[&["replay", "-f", "none"], args].concat(),
        )
    };
    // A later -F takes mid back; a later -N takes it away.
    assert!(replay(&["-N", "mid", "-F", "mid"]).starts_with("mid() {\n  nap();\n"));
    assert_eq!(replay(&["-F", "mid", "-N", "mid"]), "");
    as_uftrace(
        &data,
        &[
            &["replay", "-N", "mid", "-F", "mid"],
            &["replay", "-F", "mid", "-N", "mid"],
            &["replay", "-F", "main", "-N", "mid", "-F", "nap"],
            &["replay", "-N", "fib", "-F", "fib"],
        ],
        0,
    );
    // The same when recording.
    let dir = workdir("o_record");
    let exe = build_fixture_with(
        &dir,
        "o",
        "naps.c",
        &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"],
    );
    for (opts, mid) in [
        (&["-N", "mid", "-F", "mid"][..], true),
        (&["-F", "mid", "-N", "mid"], false),
    ] {
        let data = dir.join("r.data");
        let o = record_run(&[], opts, &data, &exe, &[]);
        assert!(o.status.success(), "{}", text(&o).1);
        let out = view(&mut shadowgraph(), &data, &["replay", "-f", "none"]);
        assert_eq!(
            out.starts_with("mid() {\n  nap();\n"),
            mid,
            "{opts:?}: {out}"
        );
    }
}

/// With `-F`, `-D` counts from the innermost selected call: a selected
/// call nested in another restarts it (uftrace's), and a level the limit
/// hides between two selected calls takes no place in the indentation.
#[test]
fn depth_restarts_at_each_selected_call() {
    let data = recording("dr", "naps.c", &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"]);
    let replay = |args: &[&str]| {
        view(
            &mut shadowgraph(),
            &data,
            &[&["replay", "-f", "none"], args].concat(),
        )
    };
    // fib(3): every level shown, each fib restarting the limit.
    assert_eq!(
        replay(&["-F", "fib", "-D", "2"]),
        "fib() {\n  fib() {\n    fib();\n    fib();\n  } /* fib */\n  fib();\n} /* fib */\n"
    );
    assert_eq!(
        replay(&["-F", "main", "-F", "nap", "-D", "1"]),
        "main() {\n  nap();\n  nap();\n} /* main */\n"
    );
    as_uftrace(
        &data,
        &[
            &["replay", "-F", "fib", "-D", "2"],
            &["replay", "-F", "main", "-F", "nap", "-D", "1"],
            &["replay", "-F", "main", "-D", "2"],
            &["graph", "-F", "main", "-F", "leaf", "-D", "1"],
        ],
        0,
    );
}

/// A program that execs itself: replay shows the new program's calls in
/// place, in the same thread, as uftrace's replay of its own recording of
/// the same program shows them (`main { leaf; execl { main { leaf } }`).
#[test]
fn exec_shows_in_place() {
    let dir = workdir("exec_in_place");
    let exe = build_fixture(&dir, "es", "exec_self.c");
    let data = dir.join("es.data");
    let o = record_run(&[], &["--libcall"], &data, &exe, &[]);
    // (The new program returns leaf(2): 3.)
    assert_eq!(o.status.code(), Some(3), "{}", text(&o).1);
    let ours = shape(&view(&mut shadowgraph(), &data, &["replay"]));
    assert_eq!(
        ours,
        [
            " |main() {",
            "D|  leaf();",
            " |  execl() {",
            " |main() {",
            "D|  leaf();",
            "D|} /* main */",
        ]
    );
    if require("uftrace", "uftrace's recording of the same program") {
        let theirs = dir.join("u.data");
        let o = Command::new("uftrace")
            .args(["record", "-P", ".", "--no-sched", "-d"])
            .arg(&theirs)
            .arg(&exe)
            .output()
            .unwrap();
        // (uftrace says the program's non-zero status by its own.)
        assert!(theirs.join("task.txt").exists(), "{}", text(&o).1);
        assert_eq!(
            ours,
            shape(&view(&mut Command::new("uftrace"), &theirs, &["replay"]))
        );
        // `graph`: a graph per program, the one started by exec first,
        // as uftrace's (times, addresses and session ids left out; not
        // `graph main`, where uftrace's first graph counts a call of
        // main that the program's exec left open).
        let graphs = |tool: &mut Command, data: &std::path::Path, args: &[&str]| {
            let text = view(tool, data, &[&["graph"], args].concat());
            (text.lines())
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .map(|l| match l.split_once(" : ") {
                    Some((_, node)) => node.to_string(),
                    None => l.split([',', '(']).next().unwrap_or(l).to_string(),
                })
                .collect::<Vec<_>>()
        };
        for args in [&[][..], &["leaf"]] {
            assert_eq!(
                graphs(&mut shadowgraph(), &data, args),
                graphs(&mut Command::new("uftrace"), &theirs, args),
                "{args:?}"
            );
        }
    }
}

/// `-r/--time-range START~STOP`: only the records inside it, by
/// timestamp (`-f time`'s) or by time since the first record (`-f
/// elapsed`'s), the calls open at its start shown at their depth; replay's
/// default columns start with the time, as uftrace's.
#[test]
fn time_range_as_uftrace() {
    let data = recording("tr", "naps.c", &["-DMIDS=2", "-DNAP_US=200", "-DFIB_N=3"]);
    let times = view(&mut shadowgraph(), &data, &["replay", "-f", "time,elapsed"]);
    // The second call of mid: when it begins, and its first leaf.
    let lines: Vec<&str> = times.lines().collect();
    let second = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("mid() {"))
        .nth(1)
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("{times}"));
    let at = |l: &str, k: usize| l.split_whitespace().nth(k).unwrap().to_string();
    let m = lines[second];
    let (start, elapsed) = (at(m, 0), format!("{}{}", at(m, 1), at(m, 2)));
    let stop = at(lines[second + 2], 0);
    let out = view(
        &mut shadowgraph(),
        &data,
        &["replay", "-r", &format!("{start}~")],
    );
    assert!(
        out.starts_with("#     TIMESTAMP      DURATION     TID     FUNCTION\n")
            && out.lines().nth(1).unwrap().ends_with("|   mid() {"),
        "{out}"
    );
    let r1 = format!("{start}~");
    let r2 = format!("{elapsed}~");
    let r3 = format!("~{stop}");
    let r4 = format!("{start}~{stop}");
    as_uftrace(
        &data,
        &[
            &["replay", "-f", "time", "-r", &r1],
            &["replay", "-r", &r1],
            &["replay", "-f", "elapsed", "-r", &r2],
            &["replay", "-r", &r2],
            &["replay", "-r", &r3],
            &["replay", "-r", &r4, "-F", "mid"],
            &["dump", "-r", &r4],
        ],
        0,
    );
    let o = run_view(&mut shadowgraph(), &data, &["replay", "-r", "12"]);
    assert!(
        !o.status.success() && text(&o).1.contains("START~STOP"),
        "{}",
        text(&o).1
    );
}

/// `record --srcline` keeps where each function is declared (uftrace's
/// `.dbg` files, from the program's DWARF); `--srcline` shows it in
/// replay, report and graph as uftrace's do.
#[test]
fn srcline_as_uftrace() {
    let dir = workdir("sl");
    let flags = ["-g", "-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"];
    let exe = build_fixture_with(&dir, "sl", "naps.c", &flags);
    let data = dir.join("sl.data");
    record_ok(&["--srcline"], &data, &exe);
    let out = view(&mut shadowgraph(), &data, &["replay", "--srcline"]);
    assert!(
        out.starts_with("# DURATION     TID     FUNCTION [SOURCE]\n")
            && out.contains("| main() { /* ")
            && out.contains("fixtures/naps.c:10 */\n"),
        "{out}"
    );
    as_uftrace(
        &data,
        &[
            &["replay", "--srcline"],
            &["replay", "--srcline", "--no-comment"],
            &["replay", "--srcline", "-f", "none"],
            &["report", "--srcline"],
            &["graph", "--srcline"],
            &["graph", "--srcline", "mid"],
        ],
        0,
    );
    // Without debug information: said, and the recording is whole.
    let plain = build_fixture_with(&dir, "nog", "naps.c", &flags[1..]);
    let o = record_run(&[], &["--srcline"], &dir.join("nog.data"), &plain, &[]);
    assert!(
        o.status.success()
            && text(&o)
                .1
                .contains("has no debug information (build it with -g)"),
        "{}",
        text(&o).1
    );
}

/// `dump --mermaid`: the whole program's call graph as a Mermaid
/// flowchart, its edges (ids in the order functions were first called)
/// as uftrace's, with and without filters.
#[test]
fn dump_mermaid_as_uftrace() {
    let data = recording("mm", "naps.c", &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=4"]);
    let edges = |s: String| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with("  ") && l.contains("] -->|"))
            .map(str::to_string)
            .collect()
    };
    let out = view(&mut shadowgraph(), &data, &["dump", "--mermaid"]);
    assert!(
        out.starts_with("<html>\n<body>\n")
            && out.contains("flowchart TB\n  0_0[\"mm\"] -->|1| 1_1[\"main\"];\n  1_1[\"main\"] -->|2| 2_2[\"mid\"];\n"),
        "{out}"
    );
    if !require("uftrace", "the same dump by uftrace") {
        return;
    }
    for args in [
        &["dump", "--mermaid"][..],
        &["dump", "--mermaid", "-F", "mid"],
        &["dump", "--mermaid", "-D", "3"],
    ] {
        assert_eq!(
            edges(view(&mut shadowgraph(), &data, args)),
            edges(view(
                &mut std::process::Command::new("uftrace"),
                &data,
                args
            )),
            "{args:?}"
        );
    }
}

/// `extern.dat` (uftrace's external data: `SEC.NSEC MESSAGE` lines another
/// tool wrote into the recording's directory) is shown by `replay` among
/// the calls at its times, as uftrace shows it.
#[test]
fn external_data_as_uftrace() {
    let data = recording("ext", "naps.c", &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"]);
    let times = view(&mut shadowgraph(), &data, &["replay", "-f", "time"]);
    let at = |i: usize| -> (u64, u64) {
        let t = times
            .lines()
            .nth(i)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap();
        let (s, n) = t.split_once('.').unwrap();
        (s.parse().unwrap(), n.parse().unwrap())
    };
    // After main's entry, and inside mid's first call (between two lines).
    let ((s1, n1), (s2, n2)) = (at(1), at(3));
    std::fs::write(
        data.join("extern.dat"),
        format!(
            "# TIMESTAMP MESSAGE\n{s1}.{:09} user message\n\n{s2}.{:09} another one\n",
            n1 + 1,
            n2 + 1
        ),
    )
    .unwrap();
    let out = view(&mut shadowgraph(), &data, &["replay"]);
    assert!(
        out.contains("| main() {\n            [")
            && out.contains("| /* external-data: user message */\n"),
        "{out}"
    );
    as_uftrace(
        &data,
        &[
            &["replay"],
            &["replay", "-f", "time,delta,tid"],
            &["replay", "-F", "mid"],
        ],
        0,
    );
}

/// `report --diff` with `--diff-policy` (abs/no-abs, percent, full) and
/// `--sort-column`, as uftrace's (compared where uftrace 0.13 writes the
/// times' changes with the sign it means: as percentages).
#[test]
fn report_diff_policies_as_uftrace() {
    let a = recording("dpa", "naps.c", &["-DMIDS=3", "-DNAP_US=100", "-DFIB_N=4"]);
    let b = recording("dpb", "naps.c", &["-DMIDS=2", "-DNAP_US=300", "-DFIB_N=6"]);
    let b = b.to_str().unwrap();
    let out = view(
        &mut shadowgraph(),
        &a,
        &["report", "--diff", b, "--diff-policy", "full"],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[5],
        "                     Total time (diff)                      Self time (diff)                       Calls (diff)   Function",
        "{out}"
    );
    // fib: 9 calls, then 25.
    let fib = lines.iter().find(|l| l.ends_with("   fib")).unwrap();
    assert!(
        fib.contains("          9         25        +16   fib"),
        "{out}"
    );
    let o = run_view(
        &mut shadowgraph(),
        &a,
        &["report", "--diff", b, "--diff-policy", "sideways"],
    );
    assert!(
        !o.status.success() && text(&o).1.contains("unknown `sideways`"),
        "{}",
        text(&o).1
    );
    as_uftrace(
        &a,
        &[
            &["report", "--diff", b, "--diff-policy", "percent"],
            &["report", "--diff", b, "--diff-policy", "full,percent"],
            &["report", "--diff", b, "--diff-policy", "no-abs,percent"],
            &[
                "report",
                "--diff",
                b,
                "--diff-policy",
                "percent",
                "-s",
                "call",
            ],
            &[
                "report",
                "--diff",
                b,
                "--diff-policy",
                "percent",
                "--sort-column",
                "0",
            ],
            // (-f's columns in uftrace's order, whatever the order given.)
            &[
                "report",
                "--diff",
                b,
                "--diff-policy",
                "full,percent",
                "-f",
                "call,total",
            ],
            &[
                "report",
                "--diff",
                b,
                "--diff-policy",
                "percent",
                "-f",
                "self",
            ],
            &[
                "report",
                "--diff",
                b,
                "--diff-policy",
                "percent",
                "-s",
                "call,func",
            ],
        ],
        5,
    );
}

/// `replay --libname`: a library call's name followed by the library it
/// goes to, in our recordings (the library the call was bound to) and in
/// uftrace's (as uftrace's replay finds it).
#[test]
fn libname_as_uftrace() {
    let dir = workdir("ln");
    let exe = dir.join("naps");
    cc(
        &[&fixture("naps.c")],
        &["-O0", "-pg", "-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"],
        &exe,
    );
    let ours = dir.join("ours.data");
    let o = record_run(&[], &["--libcall"], &ours, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    let out = view(
        &mut shadowgraph(),
        &ours,
        &["replay", "--libname", "-f", "none"],
    );
    assert!(
        out.contains("    nanosleep@libc.so.6();\n") && out.contains("  printf@libc.so.6();\n"),
        "{out}"
    );
    if !require("uftrace", "the same view by uftrace") {
        return;
    }
    let theirs = dir.join("theirs.data");
    uftrace_record(&theirs, &[], &exe);
    as_uftrace(&theirs, &[&["replay", "--libname"]], 0);
}

/// `graph` of a program that forks: the child's calls go on inside the
/// frames it inherited (its `main`), as uftrace's graph counts them, in
/// uftrace's recording and in ours.
#[test]
fn forked_children_in_graph_as_uftrace() {
    let dir = workdir("fg");
    // The child's calls begin before or after the parent's wait (which
    // comes first in the graph), as it happens, or surely before.
    for (name, flags) in [
        ("fg", &["-O0", "-pg"][..]),
        ("fgl", &["-O0", "-pg", "-DLATE_WAIT"]),
    ] {
        let exe = dir.join(name);
        cc(&[&fixture("fork_graph.c")], flags, &exe);
        let ours = dir.join(format!("{name}.ours.data"));
        let o = record_run(&[], &["--libcall"], &ours, &exe, &[]);
        assert!(o.status.success(), "{}", text(&o).1);
        let out = view(&mut shadowgraph(), &ours, &["graph"]);
        assert!(out.contains(" :     +-(2) a\n"), "{out}");
        if !require("uftrace", "the same graph by uftrace") {
            return;
        }
        let theirs = dir.join(format!("{name}.theirs.data"));
        uftrace_record(&theirs, &[], &exe);
        // (Not `graph a`: uftrace names the child's inherited frame `<0>`.)
        as_uftrace(&theirs, &[&["graph"], &["graph", "main"]], 0);
    }
}
