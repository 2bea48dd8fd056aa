//! The views of a recording: replay, report, graph, info, dump (Chrome, Perfetto, flame graph), diff; names as C++ and Rust show them.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn record_and_replay_show_the_exact_call_graph() {
    let (_, data) = record_calls_program("record");
    let o = shadowgraph()
        .args(["replay", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let (rep, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        rep.starts_with("# DURATION     TID     FUNCTION\n"),
        "{rep}"
    );
    // Every line: space, 10-char duration, space, [TID in 6], " | ".
    for l in rep.lines().skip(1) {
        assert_eq!(&l[..1], " ", "{l:?}");
        assert_eq!(&l[11..13], " [", "{l:?}");
        assert_eq!(&l[19..23], "] | ", "{l:?}");
    }
    assert!(!rep.contains("\n\n"), "no blank lines");
    let mut want = vec![" |main() {".to_string(), " |  run() {".into()];
    for _ in 0..2 {
        want.extend([
            " |    mid() {".to_string(),
            "D|      leaf();".into(),
            "D|      leaf();".into(),
            "D|    } /* mid */".into(),
        ]);
    }
    want.push("D|  } /* run */".into());
    want.push("D|  run_args();".into());
    for d in 0..50 {
        want.push(format!(" |{}recurse() {{", "  ".repeat(d + 1)));
    }
    want.push(format!("D|{}recurse();", "  ".repeat(51)));
    for d in (0..50).rev() {
        want.push(format!("D|{}}} /* recurse */", "  ".repeat(d + 1)));
    }
    want.push("D|} /* main */".into());
    assert_eq!(shape(&rep), want, "{rep}");

    // Damaged data: what comes before the damage is shown, with a one-line
    // warning naming the file and offset (more in damaged.rs).
    let tid_file = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "dat"))
        .unwrap();
    let bytes = std::fs::read(&tid_file).unwrap();
    std::fs::write(&tid_file, &bytes[..bytes.len() - 5]).unwrap();
    let o = shadowgraph()
        .args(["replay", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(o.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(".dat") && err.contains("truncated") && err.contains("offset"),
        "{err}"
    );
    let mut bad = bytes.clone();
    bad[16 + 8] ^= 0x38; // second record's magic
    std::fs::write(&tid_file, &bad).unwrap();
    let o = shadowgraph()
        .args(["replay", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(
        o.status.success() && err.contains("offset 16") && err.contains("magic"),
        "{err}"
    );
    let o = shadowgraph()
        .args(["replay", "-d", "/no/such/dir"])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.contains("/no/such/dir") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn report_dump_and_live_views() {
    let (exe, data) = record_calls_program("views");
    let o = shadowgraph()
        .args(["report", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let (rep, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(rep.starts_with("  Total time   Self time       Calls  Function\n  ==========  ==========  ==========  ====================\n"), "{rep}");
    let calls: HashMap<&str, u64> = rep
        .lines()
        .skip(2)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[f.len() - 1], f[f.len() - 2].parse().unwrap())
        })
        .collect();
    for (f, n) in [
        ("main", 1),
        ("run", 1),
        ("mid", 2),
        ("leaf", 4),
        ("recurse", 51),
        ("run_args", 1),
    ] {
        assert_eq!(calls.get(f), Some(&n), "{f}\n{rep}");
    }
    assert!(
        rep.lines().nth(2).unwrap().ends_with(" main"),
        "sorted by total time: main first\n{rep}"
    );
    let o = shadowgraph()
        .args(["report", "-s", "bogus", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!o.status.success());

    let o = shadowgraph()
        .args(["dump", "--chrome", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    let (json, err) = text(&o);
    assert!(o.status.success(), "{err}");
    // Read by a JSON parser: the trace-event format's object with its
    // events, each begun and ended on its thread, nested, with names.
    let trace: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    // Metadata first: the process's name, then each thread's.
    let meta: Vec<&serde_json::Value> = events.iter().take_while(|e| e["ph"] == "M").collect();
    assert_eq!(meta[0]["name"], "process_name", "{json}");
    assert!(
        meta[0]["args"]["name"]
            .as_str()
            .unwrap()
            .ends_with("] prog"),
        "{json}"
    );
    let tids: std::collections::HashSet<u64> = events
        .iter()
        .filter(|e| e["ph"] != "M")
        .filter_map(|e| e["tid"].as_u64())
        .collect();
    assert_eq!(
        meta.len(),
        1 + tids.len(),
        "the process and each thread: {json}"
    );
    assert!(meta[1..]
        .iter()
        .all(|m| m["name"] == "thread_name" && m["tid"].is_u64()));
    let cmdline = trace["metadata"]["command_line"].as_str().unwrap();
    assert!(cmdline.contains("prog 2"), "{json}");
    let mut open: HashMap<u64, Vec<String>> = HashMap::new();
    let mut begins = 0;
    let mut last_ts = 0.0;
    for e in &events[meta.len()..] {
        let tid = e["tid"].as_u64().expect("tid");
        let ts = e["ts"].as_f64().expect("ts in µs");
        assert!(ts >= last_ts, "events in time order: {e}");
        last_ts = ts;
        assert!(e["pid"].as_u64().is_some(), "{e}");
        let name = e["name"].as_str().expect("name").to_string();
        match e["ph"].as_str() {
            Some("B") => {
                begins += 1;
                open.entry(tid).or_default().push(name);
            }
            Some("E") => {
                let begun = open.get_mut(&tid).and_then(Vec::pop);
                assert_eq!(begun.as_deref(), Some(name.as_str()), "{e}");
            }
            other => panic!("phase {other:?}: {e}"),
        }
    }
    assert_eq!(begins, 1 + 1 + 2 + 4 + 51 + 1, "one slice per call");
    assert!(open.values().all(Vec::is_empty), "every slice ended");

    let o = shadowgraph()
        .args(["live", "--no-libcall", "--no-sched"])
        .arg("--")
        .arg(&exe)
        .arg("2")
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert!(o.status.success());
    assert!(
        out.contains("# DURATION     TID     FUNCTION\n") && out.contains("|   run() {"),
        "{out}"
    );
    // With several tracers: each one's view under its name (a profile's is
    // its report).
    let o = shadowgraph()
        .args([
            "live",
            "--no-libcall",
            "--no-sched",
            "--tracer",
            "all",
            "--tracer",
            "profile",
            "--",
        ])
        .arg(&exe)
        .arg("2")
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert!(o.status.success());
    let all = out
        .find("## tracer all\n# DURATION")
        .expect("the graph tracer's replay");
    let prof = out
        .find("## tracer profile\n  Total time   Self time       Calls     Average")
        .expect("the profile's report");
    assert!(
        all < prof && out[all..prof].contains("|   run() {"),
        "{out}"
    );
}

#[test]
fn rust_program_is_recorded_with_demangled_names() {
    let dir = workdir("rust");
    let exe = build_rust_fixture(&dir, "rustprog", "rustprog.rs");
    let data = dir.join("rs.data");
    let o = record_run(&[], &[], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success() && out.trim() == "335", "{out}\n{err}");
    let rep = replay_text(&data);
    for want in [
        "prog::main() {",
        "prog::worker() {",
        "prog::branch() {",
        "prog::leaf();",
    ] {
        assert!(rep.contains(want), "{want} missing:\n{rep}");
    }
    let report = report_text(&data);
    let leaf = report.lines().find(|l| l.ends_with(" prog::leaf")).unwrap();
    assert!(
        leaf.contains("          21  "),
        "10 + 11 leaf calls on two threads: {leaf}"
    );
    // Simple names: no generic arguments; a trait impl keeps its trait.
    let rows = report_rows(&report);
    assert_eq!(rows["prog::total"].2, 1, "{report}");
    let area = report
        .lines()
        .find(|l| l.ends_with(" <prog::Square as prog::Shape>::area"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(area.contains("           3  "), "{area}");
    let full = text(
        &shadowgraph()
            .args(["report", "--demangle", "full", "-d"])
            .arg(&data)
            .output()
            .unwrap(),
    )
    .0;
    assert!(
        full.contains(" prog::total::<prog::Square<u8>>\n")
            && full.contains(" <prog::Square<u8> as prog::Shape>::area\n"),
        "{full}"
    );
    // Filters take the simple names, in record and in the views.
    let filtered = dir.join("rs-filtered.data");
    let o = record_run(&[], &["-F", "prog::total"], &filtered, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    let body = replay_body(&replay_text(&filtered));
    assert_eq!(
        body,
        [
            "prog::total() {",
            "  <prog::Square as prog::Shape>::area();",
            "  <prog::Square as prog::Shape>::area();",
            "  <prog::Square as prog::Shape>::area();",
            "} /* prog::total */",
        ],
        "{body:?}"
    );
    // A closed pipe ends the output quietly.
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} sites {} | head -1",
            env!("CARGO_BIN_EXE_shadowgraph"),
            exe.display()
        ))
        .output()
        .unwrap();
    assert!(text(&o).1.is_empty(), "{}", text(&o).1);
}

/// `dump --perfetto` gives a Perfetto trace: read by `protoc --decode`
/// against Perfetto's schema (the messages a dump uses, with Perfetto's
/// field numbers: tests/fixtures/perfetto_trace.proto), it has one process
/// track, one thread track, a begun and an ended slice per call, and every
/// slice's name interned before it is used.
#[test]
fn perfetto_dump_decodes_with_perfettos_schema() {
    let (_, data) = record_calls_program("perfetto");
    let o = shadowgraph()
        .args(["dump", "--perfetto", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    if !require("protoc", "the Perfetto trace read by a decoder of its own") {
        return;
    }
    let trace = data.with_extension("pftrace");
    std::fs::write(&trace, &o.stdout).unwrap();
    let decoded = Command::new("protoc")
        .arg("--proto_path")
        .arg(fixture(""))
        .args(["--decode=perfetto.protos.Trace", "perfetto_trace.proto"])
        .stdin(std::fs::File::open(&trace).unwrap())
        .output()
        .unwrap();
    let (text_form, err) = text(&decoded);
    assert!(decoded.status.success(), "protoc: {err}");
    // Every field is one the schema names (protoc shows unknown ones by
    // their numbers).
    assert!(
        !text_form
            .lines()
            .any(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())),
        "fields outside Perfetto's schema:\n{text_form}"
    );
    let count = |s: &str| text_form.matches(s).count();
    assert_eq!(count("packet {"), count("trusted_packet_sequence_id: 1"));
    assert_eq!(
        (count("process {"), count("thread {")),
        (1, 1),
        "{text_form}"
    );
    let begins = count("type: TYPE_SLICE_BEGIN");
    assert_eq!(begins, 1 + 1 + 2 + 4 + 51 + 1, "one slice per call");
    assert_eq!(begins, count("type: TYPE_SLICE_END"));
    // Names: interned once each, every slice's among them.
    let mut names = HashMap::new();
    let mut lines = text_form.lines().map(str::trim);
    while let Some(l) = lines.next() {
        if l == "event_names {" {
            let iid: u64 = lines
                .next()
                .unwrap()
                .strip_prefix("iid: ")
                .unwrap()
                .parse()
                .unwrap();
            let name = lines
                .next()
                .unwrap()
                .strip_prefix("name: ")
                .unwrap()
                .trim_matches('"');
            assert!(
                names.insert(iid, name.to_string()).is_none(),
                "{iid} interned twice"
            );
        }
    }
    for l in text_form.lines().map(str::trim) {
        if let Some(iid) = l.strip_prefix("name_iid: ") {
            assert!(
                names.contains_key(&iid.parse::<u64>().unwrap()),
                "{l} never interned"
            );
        }
    }
    let mut n: Vec<&String> = names.values().collect();
    n.sort();
    assert_eq!(n, ["leaf", "main", "mid", "recurse", "run", "run_args"]);
}

/// `graph` takes the views' filters, as uftrace's does: the same output as
/// `uftrace graph` with each of them, on the same recording.
#[test]
fn graph_view_filters_as_uftrace_does() {
    let dir = workdir("graphfilters");
    let exe = build_fixture_with(
        &dir,
        "g",
        "naps.c",
        &["-DMIDS=4", "-DNAP_US=20000", "-DFIB_N=6"],
    );
    let data = dir.join("g.data");
    record_ok(&["--no-libs"], &data, &exe);
    let tree = |args: &[&str]| -> Vec<String> {
        let o = shadowgraph()
            .args(["graph", "-d"])
            .arg(&data)
            .args(args)
            .arg("main")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o)
            .0
            .lines()
            .skip_while(|l| !l.starts_with("# TOTAL TIME"))
            .skip(1)
            .filter_map(|l| l.split_once(" : ").map(|x| x.1.trim_end().to_string()))
            .collect()
    };
    assert_eq!(
        tree(&["-N", "nap", "-D", "2"]),
        ["(1) main", " +-(4) mid", " |", " +-(1) fib"]
    );
    // nap sleeps 20 ms or more: it and its callers are always kept; fib
    // and leaf take microseconds, kept only where the machine held the
    // program inside one for 10 ms. Without them the tree is exact.
    let kept: Vec<String> = tree(&["-t", "10ms"])
        .iter()
        .map(|l| l.trim_start_matches([' ', '|', '+', '-']).to_string())
        .filter(|l| !l.is_empty() && !l.ends_with(" fib") && !l.ends_with(" leaf"))
        .collect();
    assert_eq!(
        kept,
        ["(1) main", "(4) mid", "(4) nap"],
        "only calls of 10 ms or more"
    );
    assert_eq!(
        tree(&["-N", "fib", "-N", "leaf"]),
        ["(1) main", "(4) mid", "(4) nap"]
    );
    let o = shadowgraph()
        .args(["graph", "-d"])
        .arg(&data)
        .args(["-F", "mid", "main"])
        .output()
        .unwrap();
    assert!(
        !o.status.success()
            && text(&o)
                .1
                .contains("no call of `main` in what the filters select")
    );
    if require("uftrace", "the same view by uftrace") {
        for args in [
            &["-N", "nap", "-D", "2"][..],
            &["-t", "10ms"],
            &["-N", "fib", "-N", "leaf"],
            &["-D", "3"],
        ] {
            let run = |cmd: &mut Command| {
                let o = cmd
                    .args(["graph", "-d"])
                    .arg(&data)
                    .args(args)
                    .arg("main")
                    .output()
                    .unwrap();
                text(&o).0
            };
            assert_eq!(
                run(&mut shadowgraph()),
                run(&mut Command::new("uftrace")),
                "graph {args:?}"
            );
        }
    }
    // No function: the whole program's tree, under its name.
    let whole = |cmd: &mut Command, args: &[&str]| {
        let o = cmd
            .args(["graph", "-d"])
            .arg(&data)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0
    };
    let ours = whole(&mut shadowgraph(), &[]);
    let lines: Vec<&str> = ours.lines().collect();
    assert!(
        lines[0].starts_with("# Function Call Graph for 'g'")
            && lines[3].ends_with(" : (1) g")
            && lines[4].ends_with(" : (1) main"),
        "{ours}"
    );
    if require("uftrace", "the whole program's graph by uftrace") {
        for args in [&[][..], &["-N", "fib"], &["-F", "mid"]] {
            assert_eq!(
                whole(&mut shadowgraph(), args),
                whole(&mut Command::new("uftrace"), args),
                "graph {args:?}"
            );
        }
    }
}

/// `info` shows the machine and the run as `record` found them (uftrace's
/// layout, the same lines as `uftrace info` on the recording), then what
/// only our recordings say.
#[test]
fn info_tells_the_machine_the_run_and_the_recording() {
    let dir = workdir("info");
    let exe = build_fixture(&dir, "ex", "crash_on_request.c");
    let run = |arg: Option<&str>| -> (PathBuf, String) {
        let data = dir.join(format!("{}.data", arg.unwrap_or("plain")));
        let o = shadowgraph()
            .args(["record", "--no-libcall", "--no-sched", "--no-libs", "-d"])
            .arg(&data)
            .arg("--")
            .arg(&exe)
            .args(arg)
            .output()
            .unwrap();
        let _ = o;
        let o = shadowgraph()
            .args(["info", "-d"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        (data, text(&o).0)
    };
    let (data, info) = run(None);
    let field = |info: &str, k: &str| -> String {
        info.lines()
            .find(|l| l.starts_with(&format!("# {k:<20}:")))
            .unwrap_or_else(|| panic!("no {k}: {info}"))
            .split_once(": ")
            .unwrap()
            .1
            .to_string()
    };
    assert_eq!(field(&info, "exit status"), "exited with code: 3");
    assert_eq!(field(&info, "exe image"), exe.display().to_string());
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    assert!(
        field(&info, "number of cpus").starts_with(&format!("{cpus} / ")),
        "{info}"
    );
    assert_ne!(field(&info, "cpu info"), "unknown", "{info}");
    assert!(
        field(&info, "kernel version").starts_with("Linux "),
        "{info}"
    );
    assert_eq!(field(&info, "build id").len(), 40, "{info}");
    assert_eq!(field(&info, "records"), "4 (0 lost)");
    assert!(!info.contains("# ended"), "{info}");
    if require("uftrace", "the same view by uftrace") {
        let o = Command::new("uftrace")
            .args(["info", "-d"])
            .arg(&data)
            .output()
            .unwrap();
        let theirs = text(&o).0;
        let n = theirs.lines().count() - 1;
        assert_eq!(
            info.lines().take(n).collect::<Vec<_>>(),
            theirs.lines().take(n).collect::<Vec<_>>(),
            "the same as uftrace's"
        );
    }
    let (_, info) = run(Some("crash"));
    assert_eq!(field(&info, "exit status"), "terminated by signal: 11");
    assert!(
        field(&info, "ended").contains("before the recording's exit step"),
        "{info}"
    );
}

/// C++ names as uftrace users know them: views show the qualified name
/// alone (`--demangle=full` adds types and parameters, `no` shows the
/// symbols), functions that show alike are one report row, `-F` matches the
/// simple name (or a symbol, to pick one overload), and uftrace demangles
/// our recording itself.
#[test]
fn cpp_functions_go_by_their_simple_names() {
    let dir = workdir("cppnames");
    let src = fixture("overloads.cc");
    let exe = dir.join("names");
    let o = Command::new("g++")
        .args(["-O2", "-fpatchable-function-entry=5"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let calls = |report: &str| -> HashMap<String, u64> {
        report
            .lines()
            .skip(2)
            .map(|l| {
                let mut f = l[24..].split_whitespace();
                let n = f.next().unwrap().parse().unwrap();
                (f.collect::<Vec<_>>().join(" "), n)
            })
            .collect()
    };
    let want = |v: &[(&str, u64)]| -> HashMap<String, u64> {
        v.iter().map(|&(k, n)| (k.to_string(), n)).collect()
    };
    let data = dir.join("all.data");
    record_ok(&[], &data, &exe);
    let simple = want(&[("main", 1), ("geo::area", 6), ("geo::twice", 6)]);
    assert_eq!(calls(&report_text(&data)), simple);
    let full = shadowgraph()
        .args(["report", "--demangle", "full", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(
        calls(&text(&full).0),
        want(&[
            ("main", 1),
            ("geo::area(geo::P const&)", 3),
            ("geo::area(double)", 3),
            ("int geo::twice<int>(int)", 3),
            ("double geo::twice<double>(double)", 3),
        ])
    );
    let raw = shadowgraph()
        .args(["replay", "--demangle", "no", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        text(&raw).0.contains("  _ZN3geo4areaEd();"),
        "{}",
        text(&raw).0
    );
    if let Some(theirs) = uftrace_view("report", &data) {
        assert_eq!(calls(&theirs), simple, "uftrace report:\n{theirs}");
    }
    // -F by the simple name takes both overloads; by a symbol, one.
    let data = dir.join("area.data");
    record_ok(&["-F", "geo::area"], &data, &exe);
    assert_eq!(replay_body(&replay_text(&data)), vec!["geo::area();"; 6]);
    let data = dir.join("double.data");
    record_ok(&["-F", "_ZN3geo4areaEd"], &data, &exe);
    let full = shadowgraph()
        .args(["replay", "--demangle", "full", "-d"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(replay_body(&text(&full).0), vec!["geo::area(double);"; 3]);
}

/// `report --diff`: how a second recording differs, function by function
/// (matched by name), in uftrace's layout, largest change first.
#[test]
fn report_diff_compares_two_recordings_by_function() {
    let dir = workdir("diff");
    let exe = build_fixture(&dir, "fibn", "fib_only_big.c");
    let (small, big) = (dir.join("small.data"), dir.join("big.data"));
    for (d, n) in [(&small, "10"), (&big, "18")] {
        let o = record_run(&[], &[], d, &exe, &[Path::new(n)]);
        assert!(o.status.success(), "{}", text(&o).1);
    }
    let diff = |sort: &str| {
        let o = shadowgraph()
            .args(["report", "-s", sort, "-d"])
            .arg(&small)
            .arg("--diff")
            .arg(&big)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0
    };
    let out = diff("call");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], "# shadowgraph diff");
    assert!(
        lines[2].starts_with("#  [0] base: ") && lines[2].ends_with(" 10)"),
        "{out}"
    );
    assert!(
        lines[3].starts_with("#  [1] diff: ") && lines[3].ends_with(" 18)"),
        "{out}"
    );
    assert_eq!(
        lines[5],
        "    Total time     Self time         Calls   Function"
    );
    // fib(18) makes 8361 calls, fib(10) 177; only_big is new; main as many.
    let calls: Vec<(&str, &str)> = lines[7..]
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[f.len() - 2], f[f.len() - 1])
        })
        .collect();
    assert_eq!(
        calls,
        [("+8184", "fib"), ("+1", "only_big"), ("+0", "main")],
        "{out}"
    );
    // fib's total changed as the two recordings' totals say (not by its
    // calls alone: a preemption of the small run, under a busy machine,
    // can outlast the whole big run).
    let total = |d: &Path| report_rows(&report_text(d))["fib"].0;
    let grew = total(&big) > total(&small);
    let fib = lines.iter().find(|l| l.ends_with(" fib")).unwrap();
    assert_eq!(fib.trim_start().starts_with('+'), grew, "{out}");
    let o = shadowgraph()
        .args(["report", "--threads", "--diff"])
        .arg(&big)
        .arg("-d")
        .arg(&small)
        .output()
        .unwrap();
    assert!(!o.status.success());
}
