//! Several tracers recording at once (`--tracer a --tracer b`: plain
//! recorders that share one fused path, also with tracers with function
//! filters or triggers on it) while signal handlers record anywhere, also inside the
//! path between one tracer's record and the other's, and while handlers
//! leave by siglongjmp.

mod common;

use common::*;

/// Eight threads run traced recursions while a process timer's handler,
/// traced, lands on any of them 2000 times, under two plain tracers, two
/// with function filters (`-N in_handler`, `-F on_alarm`) and one with a
/// trigger (`-T on_alarm@depth=2`), whose states the handlers' calls find
/// in any stage. Each tracer's records stay
/// whole on every thread: each call closes, in time order, at the depth
/// its place says; nothing is lost; every handler call is in each
/// tracer that takes it, and so is every call of fib. With rseq and
/// without (ring slots by `cmpxchg`).
#[test]
fn two_tracers_and_signal_handlers_keep_every_record_whole() {
    let tsc = shadowgraph_testkit::tool::available(
        shadowgraph::clock::init(),
        "an invariant TSC",
        "the fused path",
    );
    for rseq in [true, false] {
        let dir = workdir(if rseq { "mtsig2" } else { "mtsig2-cmpxchg" });
        let exe = build_fixture(&dir, "mt", "threads_signals.c");
        let data = dir.join("m.data");
        let env = rseq_env(rseq);
        let tracers = [
            "--tracer",
            "a",
            "--tracer",
            "b",
            "--tracer",
            "c:notrace=in_handler",
            "--tracer",
            "d:filter=on_alarm",
            "--tracer",
            "e:trigger=on_alarm@depth=2",
        ];
        let o = record_run(env, &tracers, &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert_eq!(err.matches("(0 lost) from 9 threads").count(), 5, "{err}");
        let alarms: u64 = out.trim().parse().unwrap();
        let mut fibs = Vec::new();
        let mut trimmed = Vec::new();
        for t in ["a", "b", "c", "d", "e"] {
            let d = data.join(t);
            let info = view_text("info", &d);
            if tsc {
                assert!(
                    info.contains("record path         : fused (several tracers"),
                    "{info}"
                );
                assert_eq!(
                    info.contains("ring slots by rseq"),
                    rseq && rseq_registered(),
                    "{info}"
                );
            }
            let rows = report_rows(&report_text(&d));
            assert_eq!(rows["on_alarm"].2, alarms, "{t}: {alarms} alarms: {rows:?}");
            let calls = |f: &str| rows.get(f).map_or(0, |r| r.2);
            let (handler, workers) = match t {
                "c" => (0, 8),
                "d" => (alarms, 0),
                _ => (alarms, 8),
            };
            assert_eq!(calls("in_handler"), handler, "{t}: {rows:?}");
            assert_eq!(calls("worker"), workers, "{t}: {rows:?}");
            match t {
                // fib(3) in each handler: five calls.
                "d" => assert_eq!(rows["fib"].2, 5 * alarms, "{t}: {rows:?}"),
                // Two levels in each handler: its fib(3)'s first call.
                "e" => trimmed.push(rows["fib"].2 + 4 * alarms),
                _ => fibs.push(rows["fib"].2),
            }
            let dd = shadowgraph_data::dir::DataDir::open(&d).unwrap();
            // (A thread no handler landed on has no records of d.)
            assert!(dd.tids.len() <= 9, "{t}");
            for &tid in &dd.tids {
                in_time_order_within(&dd, tid, SEVERAL_TRACERS_STEP_NS)
                    .unwrap_or_else(|e| panic!("{t}: {e}"));
                every_call_closes(&dd, tid).unwrap_or_else(|e| panic!("{t}: {e}"));
                depths_follow_the_records(&dd, tid).unwrap_or_else(|e| panic!("{t}: {e}"));
            }
        }
        assert!(
            fibs.iter().chain(&trimmed).all(|&f| f == fibs[0]),
            "every call in each: {fibs:?}, {trimmed:?}"
        );
    }
}

/// A timer's handler that records and leaves by siglongjmp, 2400 times or
/// more, under two plain tracers and one with a function filter: each
/// tracer's recording goes on to the end (no ring left stalled by a claim
/// a jump left unpublished), and every handler call is recorded or among
/// the records counted lost, in each plain one.
#[test]
fn two_tracers_and_siglongjmp_out_of_handlers() {
    let dir = workdir("sigjmprec2");
    let exe = build_fixture(&dir, "sj", "siglongjmp_alarms.c");
    let data = dir.join("j.data");
    let tracers = ["--tracer", "a", "--tracer", "b", "--tracer", "c:filter=fib"];
    let o = record_run(&[], &tracers, &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let mut it = out.split_whitespace();
    assert_eq!(it.next(), Some("7"));
    let alarms: u64 = it.next().unwrap().parse().unwrap();
    assert!(alarms >= 2400, "{out}");
    for t in ["a", "b"] {
        let d = data.join(t);
        let dd = shadowgraph_data::dir::DataDir::open(&d).unwrap();
        assert_eq!(dd.info.get("writer_gave_up"), None, "{err}");
        let lost: u64 = err
            .split(&format!("# tracer {t}: recorded "))
            .nth(1)
            .and_then(|r| r.split_once("records ("))
            .and_then(|(_, r)| r.split_once(" lost)"))
            .map(|(n, _)| n.parse().unwrap())
            .unwrap_or_else(|| panic!("{err}"));
        let drops: u64 = dd
            .info
            .get("recursion_drops")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let report = report_text(&d);
        let rows = report_rows(&report);
        assert!(
            alarms - rows["on_alarm"].2 <= lost + drops,
            "{t}: {alarms} alarms, {lost} lost, {drops} dropped: {report}"
        );
        assert_eq!(
            replay_last_lines(&d, 2),
            ["} /* main */", "  done();"],
            "{t}: the recording went on"
        );
    }
    // The tracer with a function filter (on the shared path too, its
    // thread variable kept there): its recording goes on to the end.
    let d = data.join("c");
    let dd = shadowgraph_data::dir::DataDir::open(&d).unwrap();
    assert_eq!(dd.info.get("writer_gave_up"), None, "{err}");
    let rows = report_rows(&report_text(&d));
    assert!(rows["fib"].2 > 0, "c: {rows:?}");
}

/// Threads that come and go (40 rounds of 3, their stacks and
/// thread-local blocks reused by glibc) and forked children that call on
/// after the fork, with threads of their own, under two tracers: each
/// tracer records every call of every task, once, whole, in the task's
/// own records, and nothing is lost. The shared path keeps each thread's rings by the tracers' slots:
/// a thread's exit and a child's fork forget them. A third tracer with
/// `filter=task` (which only the threads run) has the threads' records
/// and no file, no task and no warning for the processes' main threads,
/// whose rings the shared path made all the same.
#[test]
fn two_tracers_through_threads_and_forks() {
    let dir = workdir("tracers-tasks");
    let exe = build_fixture_with(&dir, "tt", "tracers_tasks.c", &["-pthread"]);
    let data = dir.join("t.data");
    let tracers = [
        "--tracer",
        "a",
        "--tracer",
        "b",
        "--tracer",
        "c:filter=task",
    ];
    let o = record_run(&[], &tracers, &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let calls: u64 = out.trim().parse().unwrap();
    assert_eq!(calls, 4 * (31 * 200 + 7 * 200));
    assert_eq!(err.matches(" lost)").count(), 3, "{err}");
    assert_eq!(err.matches("(0 lost)").count(), 3, "{err}");
    let c = data.join("c");
    let dd = shadowgraph_data::dir::DataDir::open(&c).unwrap();
    // The 120 threads and each child's 6, not the 5 main threads.
    assert_eq!(dd.tids.len(), 120 + 4 * 6, "c: {:?}", dd.tids);
    let o = shadowgraph()
        .args(["report", "-d"])
        .arg(&c)
        .output()
        .unwrap();
    let (report, warnings) = text(&o);
    assert!(o.status.success() && warnings.is_empty(), "{warnings}");
    assert_eq!(report_rows(&report)["task"].2, 144, "{report}");
    for t in ["a", "b"] {
        let d = data.join(t);
        let rows = report_rows(&report_text(&d));
        assert_eq!(rows["leaf"].2, calls, "{t}: {rows:?}");
        assert_eq!(rows["step"].2, calls / 200, "{t}: {rows:?}");
        let dd = shadowgraph_data::dir::DataDir::open(&d).unwrap();
        // main, its 120 threads, and each child with its 6.
        assert_eq!(dd.tids.len(), 1 + 120 + 4 * 7, "{t}");
        let mut leaves = Vec::new();
        for &tid in &dd.tids {
            in_time_order_within(&dd, tid, SEVERAL_TRACERS_STEP_NS)
                .unwrap_or_else(|e| panic!("{t}: {e}"));
            every_call_closes(&dd, tid).unwrap_or_else(|e| panic!("{t}: {e}"));
            // Each task's most called function is leaf.
            let mut by_addr = std::collections::HashMap::<u64, u64>::new();
            for r in records_of(&dd, tid).unwrap() {
                if r.kind == shadowgraph_data::format::Kind::Entry {
                    *by_addr.entry(r.addr).or_default() += 1;
                }
            }
            leaves.push(by_addr.into_values().max().unwrap_or(0));
        }
        leaves.sort_unstable();
        let mut want = vec![200; dd.tids.len() - 1];
        want.push(800);
        assert_eq!(leaves, want, "{t}: the calls of leaf by task");
    }
}
