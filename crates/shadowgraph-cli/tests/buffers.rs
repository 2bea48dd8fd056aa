//! The rings and the writer: timestamps exact across write-outs, small rings that make threads wait rather than lose, rings of exited threads unmapped.

mod common;

use common::*;

/// Times are converted to nanoseconds as buffers are written out, between
/// calibration points: across many write-outs they stay in order, inside
/// the run's real time window, and a 30 ms sleep measures 30 ms.
#[test]
fn timestamps_stay_exact_across_buffer_write_outs() {
    let dir = workdir("timestamps");
    let exe = build_fixture(&dir, "ts", "tick_naps.c");
    let data = dir.join("t.data");
    let before = shadowgraph::clock::monotonic_ns();
    let o = record_run(&[], &["--no-libs"], &data, &exe, &[]);
    let after = shadowgraph::clock::monotonic_ns();
    assert!(o.status.success(), "{}", text(&o).1);
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    assert_eq!(d.tids.len(), 1);
    let recs = d.records(d.tids[0]).unwrap();
    // Written out in pieces (a ring holds 131,072 records: three at least).
    assert_eq!(recs.len(), 2 * (2 * 100_000 + 2) + 2);
    let mut naps = Vec::new();
    let mut open = 0;
    in_time_order(&d, d.tids[0]).unwrap();
    for r in &recs {
        assert!(
            (before..=after).contains(&r.time),
            "{} outside the run [{before}, {after}]",
            r.time
        );
        if d.name(r.addr) == "nap" {
            match r.kind {
                shadowgraph_data::format::Kind::Entry => open = r.time,
                _ => naps.push(r.time - open),
            }
        }
    }
    assert_eq!(naps.len(), 2);
    // The program's own clock around each call (however late the loaded
    // machine woke it): the recorded nap lies within it.
    let measured: Vec<u64> = text(&o)
        .1
        .lines()
        .filter_map(|l| l.strip_prefix("nap ")?.parse().ok())
        .collect();
    assert_eq!(measured.len(), 2, "{}", text(&o).1);
    for (n, m) in naps.into_iter().zip(measured) {
        // nanosleep sleeps at least 30 ms; the conversion may err by the
        // calibration points' pairing (well under a microsecond).
        assert!(
            n >= 29_999_000 && n <= m + 1_000,
            "nap recorded as {n} ns, measured {m} ns around the call"
        );
    }
}

/// With the smallest buffer (`-b 64K`: 4096 records) four threads that
/// record ~115,000 records each fill their rings dozens of times: they
/// wait for the writer, and nothing is lost; every thread's calls are all
/// there, balanced, in time order; with one writer and with two.
#[test]
fn small_buffers_make_threads_wait_for_the_writer_not_lose() {
    let dir = workdir("smallbuf");
    let src = fixture("fib22_four_threads.c");
    let exe = dir.join("t");
    cc(
        &[&src],
        &[
            "-O2",
            "-pthread",
            "-fno-optimize-sibling-calls",
            "-fpatchable-function-entry=5",
        ],
        &exe,
    );
    // One writer, and two (`--num-thread`: each the rings of half the
    // threads, where the machine has two processors).
    for writers in ["1", "2"] {
        small_buffers_with(&dir, &exe, writers);
    }
}

fn small_buffers_with(dir: &std::path::Path, exe: &std::path::Path, writers: &str) {
    let data = dir.join(format!("t{writers}.data"));
    let opts = ["--no-libs", "-b", "64K", "--num-thread", writers];
    let o = record_run(&[], &opts, &data, exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "70844");
    // fib(22): 57,313 calls per thread, plus run(); main's 1 entry/exit.
    let per_thread = 2 * (57_313 + 1);
    assert!(
        err.contains(&format!(
            "recorded {} records (0 lost) from 5 threads",
            4 * per_thread + 2
        )),
        "{err}"
    );
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    for &tid in &d.tids {
        let recs = d.records(tid).unwrap();
        let entries = recs
            .iter()
            .filter(|r| r.kind == shadowgraph_data::format::Kind::Entry)
            .count();
        assert_eq!(entries * 2, recs.len(), "thread {tid} balanced");
        in_time_order(&d, tid).unwrap();
    }
}

/// Two tracers with the smallest buffers: a thread whose ring in one of
/// them is full waits for room, and its record there still takes the
/// event's time, the one the other tracer's record took. Each thread's
/// records are the same in both, time for time (each ring's conversion of
/// the same clock reading within a microsecond), with waits among them.
#[test]
fn two_tracers_share_each_events_time_also_after_a_wait_for_room() {
    let dir = workdir("smallbuf_two");
    let exe = dir.join("t");
    let flags = [
        "-O2",
        "-pthread",
        "-fno-optimize-sibling-calls",
        "-fpatchable-function-entry=5",
    ];
    cc(&[&fixture("fib22_four_threads.c")], &flags, &exe);
    let data = dir.join("t.data");
    let opts = ["--no-libs", "-b", "64K", "--tracer", "a", "--tracer", "b"];
    let o = record_run(&[], &opts, &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "70844");
    let info = view_text("info", &data.join("a"));
    let waits = (info.lines())
        .find_map(|l| l.strip_prefix("# waits for writer    : "))
        .and_then(|w| w.split_whitespace().next()?.parse::<u64>().ok());
    assert!(waits.is_some_and(|w| w > 0), "no wait for room: {info}");
    let (a, b) = (
        shadowgraph_data::dir::DataDir::open(&data.join("a")).unwrap(),
        shadowgraph_data::dir::DataDir::open(&data.join("b")).unwrap(),
    );
    assert_eq!(a.tids, b.tids);
    for &tid in &a.tids {
        let (ra, rb) = (a.records(tid).unwrap(), b.records(tid).unwrap());
        assert_eq!(ra.len(), rb.len(), "thread {tid}");
        for (k, (x, y)) in ra.iter().zip(&rb).enumerate() {
            assert_eq!(
                (x.kind, x.addr),
                (y.kind, y.addr),
                "thread {tid}, record {k}"
            );
            assert!(
                x.time.abs_diff(y.time) < 1000,
                "thread {tid}, record {k}: {} against {}",
                x.time,
                y.time
            );
        }
    }
}

/// A thread's ring is unmapped when it exits (the writer's own mapping
/// keeps the file until drained): a program whose threads come and go
/// keeps one ring per live thread, not one per thread it ever had (2 MiB
/// of shared memory each, for as long as it runs), and loses nothing;
/// with one writer and with two.
#[test]
fn rings_of_exited_threads_are_unmapped() {
    let dir = workdir("churn");
    let exe = build_fixture(&dir, "churn", "thread_churn.c");
    // One writer, and two (each removing the rings of its own threads).
    for writers in ["1", "2"] {
        let data = dir.join(format!("churn{writers}.data"));
        let o = record_run(&[], &["--num-thread", writers], &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        // main's own ring is the one left.
        assert_eq!(out.trim(), "29990000 rings=1", "{err}");
        assert!(err.contains("(0 lost)"), "{err}");
        let rows = report_rows(&report_text(&data));
        assert_eq!(rows["leaf"].2, 20 * 1000);
        assert_eq!(rows["worker"].2, 20);
    }
}

/// A writer that falls behind (here stopped, as a machine too busy to run
/// it leaves it) does not stall the program: a thread whose ring stays
/// full drains it itself, into the file the writer appends it to, one
/// drain at a time. Every call is there once, balanced and in time order,
/// the counts add up, and `info` says how many records the threads wrote
/// themselves; with one tracer and with two (each its own directory), and
/// in the compact layout.
#[test]
fn threads_drain_their_own_rings_while_the_writer_is_behind() {
    use std::io::{BufRead, Read};
    let dir = workdir("own_drains");
    let exe = build_fixture_with(&dir, "t", "threads_for_a_while.c", &["-pthread"]);
    let two = &["--tracer", "a", "--tracer", "b"][..];
    // (And in the compact layout, which the threads' drains write too.)
    for (tracers, layout) in [(&[][..], None), (two, None), (&[][..], Some("--compact"))] {
        let data = dir.join(format!("t{}{}.data", tracers.len(), layout.unwrap_or("")));
        let mut opts = vec!["--no-libs", "-b", "64K"];
        opts.extend_from_slice(tracers);
        opts.extend(layout);
        let mut c = record_command(&[], &opts, &data, &exe);
        c.args(["400", "4"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        // `record`, its writer with it, stopped for most of the run; the
        // program, its child, runs on.
        let pid = child.id() as i32;
        std::thread::sleep(std::time::Duration::from_millis(30));
        // SAFETY: signals to our own child process.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(std::time::Duration::from_millis(250));
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        let rounds: u64 = rest
            .trim()
            .strip_prefix("rounds ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{rest}"));
        let calls = 3 * 1000 * rounds;
        let dirs: Vec<_> = match tracers.len() {
            0 => vec![data.clone()],
            _ => vec![data.join("a"), data.join("b")],
        };
        for d in &dirs {
            let info = view_text("info", d);
            let own = (info.lines())
                .find_map(|l| l.strip_prefix("# own drains          : "))
                .and_then(|w| w.split_whitespace().next()?.parse::<u64>().ok());
            assert!(own.is_some_and(|n| n > 0), "no drain of its own: {info}");
            assert!(info.contains("(0 lost)"), "{info}");
            let rows = report_rows(&report_text(d));
            assert_eq!(rows["mid"].2 + rows["leaf"].2, calls, "{}", d.display());
            assert_eq!(rows["leaf"].2, 2 * rows["mid"].2);
            let dd = shadowgraph_data::dir::DataDir::open(d).unwrap();
            let mut records = 0;
            for &tid in &dd.tids {
                records += dd.records(tid).unwrap().len() as u64;
                every_call_closes(&dd, tid).unwrap();
                in_time_order(&dd, tid).unwrap();
            }
            // (main's, run's: the calls the program makes besides.)
            assert!(
                err.contains(&format!("recorded {records} records (0 lost)")),
                "{records}: {err}"
            );
            assert!(records >= 2 * calls);
        }
    }
}
