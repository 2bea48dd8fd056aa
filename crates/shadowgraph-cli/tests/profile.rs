//! The profile tracer: per-function calls, total and self time, equal to what a recording of the same run says.

mod common;

use common::*;
use std::path::Path;

/// A report's rows: (total, self, calls) by function.
type Rows = std::collections::HashMap<String, (u64, u64, u64)>;

/// A profile tracer beside a graph tracer on the same run: the profile's
/// calls equal the recording's exactly, its totals match the recording's
/// (recursive functions too: the outermost calls'), self time excludes
/// profiled callees only, and the other views refuse a profile with a
/// clear message.
#[test]
fn the_profile_tracer_matches_the_recording_of_the_same_run() {
    let dir = workdir("profile");
    let exe = build_fixture_with(
        &dir,
        "prof",
        "naps.c",
        &["-DMIDS=10", "-DNAP_US=2000", "-DFIB_N=15"],
    );
    let data = dir.join("p.data");
    let o = shadowgraph()
        .args(["record", "--no-libcall", "--no-sched", "--no-libs", "-d"])
        .arg(&data)
        .args([
            "--tracer",
            "profile",
            "--tracer",
            "all",
            "--tracer",
            "part:type=profile:filter=mid,leaf",
            "--",
        ])
        .arg(&exe)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "320 610");
    assert!(
        err.contains("tracer profile: profiled 2014 calls of 5 functions"),
        "{err}"
    );
    let report = |d: &str, extra: &[&str]| {
        let o = shadowgraph()
            .args(["report", "-d"])
            .arg(data.join(d))
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0
    };
    let prof_text = report("profile", &[]);
    assert!(
        prof_text.starts_with(
            "  Total time   Self time       Calls     Average      Stddev  Function\n"
        ),
        "{prof_text}"
    );
    let prof = report_rows(&prof_text);
    let all = report_rows(&report("all", &[]));
    assert_eq!(prof.len(), 5, "{prof_text}");
    for (f, p) in &prof {
        assert_eq!(p.2, all[f].2, "{f}: calls");
    }
    // Non-recursive functions: the same durations, measured by two users
    // of one run (each includes the other's overhead, and a loaded machine
    // may pre-empt the thread between their clock reads: a wide slack, far
    // below what a wrong unit or rate would give).
    for f in ["nap", "mid", "main"] {
        let (a, b) = (prof[f].0, all[f].0);
        assert!(a.abs_diff(b) < b / 5 + 5_000_000, "{f}: {a} vs {b}");
    }
    // Ten naps of 2 ms take 20 ms at least; a leaf's self time is its
    // total, and mid's excludes nap's (to the 1 µs the report shows of
    // each of the three).
    assert!(prof["nap"].0 >= 20_000_000 && prof["nap"].1 == prof["nap"].0);
    assert!(
        prof["mid"].1 <= prof["mid"].0 - prof["nap"].0 + 3_000,
        "mid's self excludes nap: {prof_text}"
    );
    // fib, recursive: the total is the outermost calls' (as the
    // recording's report counts it, not every nested call's again), the
    // average every call's.
    let (a, b) = (prof["fib"].0, all["fib"].0);
    assert!(a.abs_diff(b) < b / 5 + 5_000_000, "fib: {a} vs {b}");
    assert!(a < prof["main"].0, "{prof_text}");
    let fib_line = prof_text.lines().find(|l| l.ends_with(" fib")).unwrap();
    let average = parse_report_duration(&fib_line[36..48]);
    assert!(average * prof["fib"].2 > 2 * a, "{prof_text}");
    // The filtered profile: only mid and leaf; nap's time is mid's own.
    let part = report_rows(&report("part", &[]));
    assert_eq!(
        part.keys()
            .map(String::as_str)
            .collect::<std::collections::BTreeSet<_>>(),
        ["leaf", "mid"].into()
    );
    assert_eq!((part["mid"].2, part["leaf"].2), (10, 20));
    assert!(part["mid"].1 >= 20_000_000, "nap is not profiled: {part:?}");
    // Sorting and threads.
    let by_calls = report("profile", &["-s", "call"]);
    assert!(
        by_calls.lines().nth(2).unwrap().ends_with(" fib"),
        "{by_calls}"
    );
    let threads = report("profile", &["--threads"]);
    assert!(threads.starts_with("    TID    Total time"), "{threads}");
    assert_eq!(threads.lines().count(), 2 + 5);
    // What does not apply to a profile says so.
    for args in [vec!["replay"], vec!["report", "-F", "mid"]] {
        let o = shadowgraph()
            .args(&args)
            .arg("-d")
            .arg(data.join("profile"))
            .output()
            .unwrap();
        assert!(!o.status.success());
        let e = text(&o).1;
        assert!(
            e.contains("holds a profile") && e.lines().count() == 1,
            "{e}"
        );
    }
    record_refuses(
        &["--tracer", "profile:depth=2"],
        &exe,
        "a profile takes filter=",
    );
}

/// A profile alone takes its fused path (where sites have stubs), and
/// beside a recorder the path they share: with a timer's handler calling
/// traced functions anywhere in it (inside the fused entry and return
/// too), every call is counted once — fib's are main's and the handler's
/// exactly, and the recorder's count beside it — and each row's self time
/// is at most its total; the same program's naps measure the same on the
/// fused path as through the callbacks.
#[test]
fn a_profile_alone_or_beside_a_recorder_counts_every_call_with_handlers_landing_anywhere() {
    let dir = workdir("profsig");
    let exe = build_fixture(&dir, "sigring", "signal_rings.c");
    let report_of = |d: &Path| {
        let o = shadowgraph()
            .args(["report", "-d"])
            .arg(d)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        report_rows(&text(&o).0)
    };
    let report = |d: &Path| report_of(&d.join("profile"));
    // Alone (the profile's own fused path), and beside a recorder (the
    // path they share: one frame, the profile's counts and the
    // recorder's records).
    for beside in [false, true] {
        let data = dir.join(format!("p{}.data", beside as u8));
        let tracers: &[&str] = match beside {
            false => &["--tracer", "profile"],
            true => &["--tracer", "profile", "--tracer", "rec"],
        };
        profile_under_signals(&exe, &data, tracers, &report);
        if beside {
            // Every call the profile counted, the recorder recorded.
            let (prof, rec) = (report(&data), report_of(&data.join("rec")));
            for (f, p) in &prof {
                assert_eq!(p.2, rec[f].2, "{f}: {prof:?} {rec:?}");
            }
        }
        if shadowgraph_testkit::tool::available(
            shadowgraph::clock::init(),
            "an invariant TSC",
            "the fused path",
        ) {
            let info = view_text("info", &data.join("profile"));
            let path = match beside {
                false => "record path         : fused (one tracer",
                true => "record path         : fused (several tracers",
            };
            assert!(info.contains(path), "{info}");
        }
    }
    naps_on_either_path(&dir, &report);
}

/// The signal_rings program under `tracers`: its profile counts every call
/// once — fib's are main's and the handlers' exactly — and each row's self
/// time is at most its total.
fn profile_under_signals(
    exe: &Path,
    data: &Path,
    tracers: &[&str],
    report: &dyn Fn(&Path) -> Rows,
) {
    let o = record_run(&[], tracers, data, exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let mut it = out.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    let (alarms, main_calls) = (it.next().unwrap(), it.next().unwrap());
    let rows = report(data);
    // fib(2) in each handler: three calls.
    assert_eq!(rows["fib"].2, main_calls + 3 * alarms, "{rows:?}");
    assert_eq!(rows["on_alarm"].2, alarms, "{rows:?}");
    assert_eq!(rows["in_handler"].2, alarms, "{rows:?}");
    // Self time is at most the total; for fib, recursive, the total is the
    // outermost calls' (a call is outermost when no call of fib is under
    // way on its thread), and a handler that lands in the fused entry of
    // an outermost fib after it counted the call under way and before it
    // read the start time has its fib calls' time counted as not
    // outermost though outside the call: by at most the time of fib in
    // handlers (on_alarm's, less its own and in_handler's).
    let in_handlers = rows["on_alarm"].0 - rows["on_alarm"].1 - rows["in_handler"].0;
    for (f, &(total, self_t, _)) in &rows {
        let slack = if f == "fib" { in_handlers } else { 0 };
        assert!(self_t <= total + slack, "{f}: {rows:?}");
    }
}

/// The naps program's profile, alone on the fused path and through the
/// callbacks.
fn naps_on_either_path(dir: &Path, report: &dyn Fn(&Path) -> Rows) {
    // Naps of 2 ms: on either path, nap's total is 10 of them at least and
    // mid's at most what the program measured around its calls of mid (1%
    // for the rates of two clocks, and the report's rounding); mid's self
    // time excludes nap's.
    let naps = build_fixture_with(
        dir,
        "naps",
        "naps.c",
        &["-DMIDS=10", "-DNAP_US=2000", "-DFIB_N=15"],
    );
    for way in [Way::Fused, Way::General] {
        let name = way.name();
        let d = dir.join(format!("{name}.data"));
        let opts = way.with(&["--no-libs", "--tracer", "profile"]);
        let o = record_run(&[], &opts, &d, &naps, &[]);
        let err = text(&o).1;
        assert!(o.status.success(), "{err}");
        let measured: u64 = err
            .split_once("mid took ")
            .and_then(|(_, r)| r.split_once(" ns"))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or_else(|| panic!("{err}"));
        let rows = report(&d);
        assert_eq!(rows["mid"].2, 10, "{name}: {rows:?}");
        assert_eq!(rows["leaf"].2, 20, "{name}: {rows:?}");
        assert_eq!(rows["fib"].2, 1973, "{name}: {rows:?}");
        let (mid, nap) = (rows["mid"], rows["nap"]);
        assert!(nap.0 >= 20_000_000, "{name}: {rows:?}");
        assert!(
            mid.0 >= nap.0 && mid.0 <= measured + measured / 100 + 1_000,
            "{name}: the program measured {measured} ns: {rows:?}"
        );
        // To the 1 µs the report shows of each.
        assert!(mid.1 <= mid.0 - nap.0 + 3_000, "{name}: {rows:?}");
    }
}

/// A profile of four threads calling at once, alone and beside a recorder:
/// every thread's table is its own (made lock-free on its first return),
/// the merged calls are exact, and `--threads` shows each thread's share.
#[test]
fn the_profile_of_threads_running_at_once_is_exact() {
    let dir = workdir("profthreads");
    let src = fixture("work_threads.c");
    let exe = dir.join("t");
    cc(
        &[&src],
        &["-O2", "-pthread", "-fpatchable-function-entry=5"],
        &exe,
    );
    for beside in [false, true] {
        let data = dir.join(format!("p{}.data", beside as u8));
        let tracers: &[&str] = match beside {
            false => &["--no-libs", "--tracer", "profile"],
            true => &["--no-libs", "--tracer", "profile", "--tracer", "rec"],
        };
        record_ok(tracers, &data, &exe);
        profile_of_threads(&data);
    }
}

/// The profile in `data`: 20000 to 20003 calls of `work` in each of four
/// threads.
fn profile_of_threads(data: &Path) {
    let report = |extra: &[&str]| {
        let o = shadowgraph()
            .args(["report", "-d"])
            .arg(data.join("profile"))
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0
    };
    let merged = report_rows(&report(&[]));
    // 20000 + 20001 + 20002 + 20003 calls of work.
    assert_eq!(merged["work"].2, 80_006, "{merged:?}");
    let per_thread = report(&["--threads"]);
    let mut counts: Vec<u64> = per_thread
        .lines()
        .filter(|l| l.ends_with(" work"))
        // tid, total and self (number and unit each), calls: the average
        // and spread may be blank.
        .map(|l| l.split_whitespace().nth(5).unwrap().parse().unwrap())
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, [20_000, 20_001, 20_002, 20_003], "{per_thread}");
}
