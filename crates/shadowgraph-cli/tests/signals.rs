//! Signal handlers that record while the calls they interrupted are being recorded, on every recording path, with and without rseq, and when they leave by siglongjmp.

mod common;

use common::*;

/// A time filter with handlers landing anywhere, also while the thread
/// writes the waiting entries of its callers or decides a call was too
/// short: every entry written has its exit (each function's entries and
/// exits balance).
#[test]
fn signal_handlers_inside_a_time_filtered_record_leave_every_entry_its_exit() {
    let dir = workdir("sigtime");
    let exe = build_fixture(&dir, "sigring", "signal_rings.c");
    // With CLOCK_MONOTONIC, which never steps back, also in exact time
    // order: a handler that lands while an entry waiting for its call's
    // duration is being written, or while the entry callback stores its
    // time (the clock read, slow, delays the signal to just after it),
    // writes that entry before its own records, so none steps back.
    for clock in ["tsc", "mono"] {
        let data = dir.join(format!("t-{clock}.data"));
        let o = record_run(&[], &["-t", "200ns", "--clock", clock], &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert!(err.contains("(0 lost)"), "{err}");
        let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
        for &tid in &d.tids {
            let n = every_call_closes(&d, tid).unwrap_or_else(|e| panic!("{clock}: {e}"));
            assert!(n > 1000, "{clock}: thread {tid}: {n} records");
            in_time_order(&d, tid).unwrap_or_else(|e| panic!("{clock}: {e}"));
            depths_follow_the_records(&d, tid).unwrap_or_else(|e| panic!("{clock}: {e}"));
            if clock == "mono" {
                assert_eq!(d.info.clock_steps_back(), (0, 0), "{clock}");
            }
        }
    }
}

/// Handlers that land before a thread has any record — among them in the
/// entry of a call not yet timed, between the handler's calls and the
/// callers whose entries they write first — make the thread's ring, and
/// its records begin at depth 0 all the same. (A ring made at the
/// handler's depth less its callers' started one level too deep, in about
/// one thread of 3000 a run with the monotonic clock, whose slower entry
/// gives a handler more room to land in; the other ways of recording are
/// run for the rest of what is checked.)
#[test]
fn signal_handlers_before_a_threads_first_record_start_it_at_depth_0() {
    let dir = workdir("sigfirst");
    let exe = build_fixture_with(&dir, "sigfirst", "signals_first_records.c", &["-pthread"]);
    let mono = &["-t", "200ns", "--clock", "mono"][..];
    for (i, opts) in [mono, mono, mono, mono, &["-t", "200ns"], &[]]
        .iter()
        .enumerate()
    {
        let data = dir.join(format!("f{i}.data"));
        let mut all = vec!["--no-libcall"];
        all.extend_from_slice(opts);
        let o = record_run(&[], &all, &data, &exe, &[std::path::Path::new("3000")]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{opts:?}: {out}\n{err}");
        assert!(out.starts_with("3000 threads, "), "{opts:?}: {out}");
        assert!(err.contains("(0 lost)"), "{opts:?}: {err}");
        let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
        assert_eq!(d.tids.len(), 3002, "{opts:?}");
        for &tid in &d.tids {
            let checked = every_call_closes(&d, tid)
                .and_then(|_| in_time_order(&d, tid))
                .and_then(|_| depths_follow_the_records(&d, tid));
            checked.unwrap_or_else(|e| panic!("{opts:?}: {e}"));
        }
    }
}

/// Signal handlers and dlopen'd libraries under `record`: a handler that
/// calls traced functions, run synchronously by `raise` inside a traced
/// call and asynchronously by a timer while a traced loop runs, and a
/// library opened, called and closed three times (each time patched
/// anew) — the replay holds every call exactly where the program made it,
/// with the library's names, and uftrace reads the same.
#[test]
fn recorded_signal_handlers_and_dlopened_libraries_replay_exactly() {
    let dir = workdir("sigdlrec");
    let lib = dir.join("libplug.so");
    let lib_src = fixture("plugin_signals.c");
    cc(
        &[&lib_src],
        &[
            "-O2",
            "-shared",
            "-fPIC",
            "-fno-optimize-sibling-calls",
            "-fpatchable-function-entry=5",
        ],
        &lib,
    );
    let exe = build_fixture(&dir, "sigdl", "signals_dlopen.c");
    let data = dir.join("s.data");
    let o = record_run(&[], &[], &data, &exe, &[&lib]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.starts_with("r=2 l=24 alarms="), "{out}");
    assert!(err.contains("(0 lost)"), "{err}");
    // The structure, with the timer's handler calls found wherever they
    // interrupted: between spins (at main's level) or inside one.
    let check = |replay: &str, who: &str| {
        let body: Vec<String> = replay
            .lines()
            .skip(1)
            .map(|l| l.split_once("] | ").map_or(l, |x| x.1).to_string())
            .collect();
        let want_head = [
            "main() {",
            "  raiser() {",
            "    on_usr1() {",
            "      in_handler();",
            "    } /* on_usr1 */",
            "  } /* raiser */",
        ];
        assert_eq!(&body[..want_head.len()], &want_head[..], "{who}:\n{replay}");
        let mut tail = vec![];
        for _ in 0..3 {
            tail.extend([
                "  through_lib() {",
                "    plug_outer() {",
                "      plug_inner();",
                "    } /* plug_outer */",
                "  } /* through_lib */",
            ]);
        }
        tail.push("} /* main */");
        assert_eq!(
            &body[body.len() - tail.len()..],
            &tail[..],
            "{who}:\n{replay}"
        );
        // Between them: spins, each a leaf or holding handler calls, and
        // handler calls at main's level, by sequence. (Their indentation is
        // not checked: a handler that lands between a frame's push or pop
        // and its record's claim records at the depth of the frame's other
        // side, as the ring's depth says.)
        let mid: Vec<&str> = body[want_head.len()..body.len() - tail.len()]
            .iter()
            .map(|l| l.trim())
            .collect();
        let (mut alarms, mut i) = (0, 0);
        let mut handler = |i: &mut usize| {
            assert_eq!(mid.get(*i + 1), Some(&"in_handler();"), "{who}: {mid:?}");
            assert_eq!(mid.get(*i + 2), Some(&"} /* on_alarm */"), "{who}: {mid:?}");
            alarms += 1;
            *i += 3;
        };
        while i < mid.len() {
            match mid[i] {
                "spin();" => i += 1,
                "on_alarm() {" => handler(&mut i),
                "spin() {" => {
                    i += 1;
                    while mid.get(i) == Some(&"on_alarm() {") {
                        handler(&mut i);
                    }
                    assert_eq!(mid.get(i), Some(&"} /* spin */"), "{who}: {mid:?}");
                    i += 1;
                }
                other => panic!("{who}: unexpected {other:?} in {mid:?}"),
            }
        }
        let printed: i32 = out.trim().rsplit('=').next().unwrap().parse().unwrap();
        assert_eq!(alarms, printed, "{who}: every handler call is recorded");
    };
    check(&replay_text(&data), "shadowgraph");
    if let Some(theirs) = uftrace_view("replay", &data) {
        check(&theirs, "uftrace");
    }
}

/// A signal handler that records calls while the thread it interrupted is
/// writing a record of its own (or waiting for room in its ring): a 50 µs
/// timer over a tight traced recursion lands there thousands of times.
/// Every handler call is recorded, in its place, and no other record is
/// lost or overwritten (the ring's slots are claimed one instruction at a
/// time and published by the outermost writer). Before that was so, a
/// third of the handler calls vanished and some exits with them. The
/// handler also calls the function it interrupts (fib): a profile of the
/// same program counts every call of both, though the handler updates the
/// very row the thread was updating.
#[test]
fn signal_handlers_recording_inside_a_record_lose_and_corrupt_nothing() {
    handlers_record_inside_records(RecordPath::Fused, &[]);
}

/// The same where the fused path cannot use rseq (glibc told not to
/// register it): ring slots claimed by `cmpxchg`.
#[test]
fn signal_handlers_recording_inside_a_record_without_rseq() {
    handlers_record_inside_records(RecordPath::FusedWithoutRseq, &[]);
}

#[test]
fn signal_handlers_recording_inside_a_record_on_the_general_path() {
    handlers_record_inside_records(RecordPath::General, &[]);
}

/// The same with a graph filter (the fused path's filter code, whose
/// thread variable the handlers' calls share on the general way).
#[test]
fn signal_handlers_recording_inside_a_filtered_record() {
    handlers_record_inside_records(RecordPath::Fused, &["-F", "main"]);
}

/// The same with triggers (main a filter function that switches tracing
/// on, and a depth limit): the fused filtered path records the other
/// calls while tracing is on, keeping the triggers' thread variable,
/// which the handlers' calls share on the general way.
#[test]
fn signal_handlers_recording_inside_a_record_with_triggers() {
    let specs = ["--disable", "-T", "main@trace_on", "-F", "main", "-D", "40"];
    handlers_record_inside_records(RecordPath::Fused, &specs);
}

/// The same with arguments and return values, which the fused entry and
/// return record in their restartable sequences: every handler's calls
/// show the values passed and returned (the signal, fib's 2, 1, 0), and
/// every other call of fib one in 0–12.
#[test]
fn signal_handlers_recording_inside_a_record_with_arguments() {
    let specs = [
        "-A",
        "fib@arg1/i32",
        "-A",
        "in_handler@arg1/i32",
        "-R",
        "fib@retval/i32",
        "-R",
        "in_handler@retval/i32",
    ];
    handlers_record_inside_records(RecordPath::Fused, &specs);
}

/// Eight threads run traced recursions while a process timer's handler,
/// delivered to whichever thread the kernel picks, calls traced functions
/// 2000 times: on two cores the threads are preempted and signalled inside
/// their records all the time (with rseq, the kernel aborts those
/// records, which start again or, on the plain entry, go the general way:
/// some must have been). Every thread's records stay whole: each
/// call closes, in time order, at the depth its place says; nothing is
/// lost; every handler call is there. The same without rseq, and with
/// fib's argument recorded by the fused entry (each one fib was given):
/// with its return value (the filtered entry and return), and alone (the
/// plain entry of the sites with arguments, whose own sequences must have
/// been aborted too).
#[test]
fn threads_and_signal_handlers_recording_at_once_keep_every_record_whole() {
    let args = ["-A", "fib@arg1/i32", "-R", "fib@retval/i32"];
    let plain_args = ["-A", "fib@arg1/i32"];
    for (path, opts) in [
        (RecordPath::Fused, &[][..]),
        (RecordPath::FusedWithoutRseq, &[]),
        (RecordPath::Fused, &args),
        (RecordPath::Fused, &plain_args),
    ] {
        let rseq = path == RecordPath::Fused;
        let dir = workdir(match (rseq, opts.len()) {
            (true, 0) => "mtsig",
            (false, _) => "mtsig-cmpxchg",
            (true, 4) => "mtsig-args",
            (true, _) => "mtsig-plain-args",
        });
        let exe = build_fixture(&dir, "mt", "threads_signals.c");
        let data = dir.join("m.data");
        let env = rseq_env(rseq);
        let o = record_run(env, opts, &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert!(err.contains("(0 lost) from 9 threads"), "{err}");
        let alarms: u64 = out.trim().parse().unwrap();
        let info = view_text("info", &data);
        if rseq && rseq_registered() {
            assert!(rseq_restarts(&info).is_some_and(|n| n > 0), "{info}");
            if opts.len() == 2 {
                let n = info
                    .split("restarted, ")
                    .nth(1)
                    .and_then(|r| r.split(' ').next()?.parse::<u64>().ok());
                assert!(n.is_some_and(|n| n > 0), "{info}");
            }
        } else {
            assert!(!info.contains("by rseq"), "{info}");
        }
        let rows = report_rows(&report_text(&data));
        assert_eq!(rows["on_alarm"].2, alarms, "{alarms} alarms: {rows:?}");
        assert_eq!(rows["in_handler"].2, alarms, "{alarms} alarms: {rows:?}");
        assert_eq!(rows["worker"].2, 8, "{rows:?}");
        let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
        assert_eq!(d.tids.len(), 9);
        for &tid in &d.tids {
            in_time_order(&d, tid).unwrap();
            every_call_closes(&d, tid).unwrap();
            depths_follow_the_records(&d, tid).unwrap();
        }
        if !opts.is_empty() {
            // Each fib(n) on one line returned F(n).
            let replay = replay_text(&data);
            let fib = |n: u32| (0..n).fold((0u32, 1u32), |(a, b), _| (b, a + b)).0;
            let mut given = 0;
            for (_, l) in replay.lines().filter_map(|l| l.split_once("fib(")) {
                let (n, rest) = l.split_once(')').unwrap();
                let n: u32 = n.parse().unwrap();
                assert!(n <= 12, "{l}");
                if let Some(v) = rest.strip_prefix(" = ") {
                    assert_eq!(
                        v.trim_end_matches(';').parse::<u32>().unwrap(),
                        fib(n),
                        "{l}"
                    );
                }
                given += 1;
            }
            assert!(given > 1000, "{given}");
        }
    }
}

/// The same program under a time filter (`-t 2us`): the fused path keeps
/// the entry times in the frames and drops short calls while handlers
/// land anywhere in it on every thread. Every record kept is whole, in
/// time order, at its depth, and lasted at least the threshold.
#[test]
fn threads_and_signal_handlers_inside_a_time_filtered_record() {
    time_filtered_under_signals(Values::None);
}

/// The same recording fib's argument and return value, kept in the frames
/// of calls whose entries wait (the callbacks' way, which a `trace_on`
/// trigger on main keeps): every value shown is one fib was given or
/// returned. With a `read=` trigger on fib, whose values wait in the
/// frame before the arguments and whose events follow an entry written
/// late: each kept call's `read:` before its `diff:`.
#[test]
fn threads_and_signal_handlers_inside_a_time_filtered_record_with_arguments() {
    time_filtered_under_signals(Values::OnTheCallbacks);
}

/// The same recording fib's argument and return value alone: the threads
/// take the fused path, recording every call with its values, and the
/// rings' consumer leaves out the short calls with theirs.
#[test]
fn threads_and_signal_handlers_inside_a_fused_time_filtered_record_with_arguments() {
    time_filtered_under_signals(Values::Args);
}

/// The same with the `read=` trigger on fib, and no other: the calls of
/// fib through the callbacks, which record every one with its events, the
/// others on the fused path, and the rings' consumer leaves out the short
/// calls with their values and events.
#[test]
fn threads_and_signal_handlers_inside_a_consumer_time_filtered_record_with_reads() {
    time_filtered_under_signals(Values::ArgsAndReads);
}

/// What a time-filtered recording records beside the calls.
#[derive(Clone, Copy, PartialEq)]
enum Values {
    None,
    /// fib's argument and return value.
    Args,
    /// …and a `read=` trigger on fib.
    ArgsAndReads,
    /// …and a `trace_on` trigger on main, which keeps the time filter in
    /// the callbacks.
    OnTheCallbacks,
}

fn time_filtered_under_signals(values: Values) {
    let dir = workdir(match values {
        Values::None => "mtsig-timed",
        Values::Args => "mtsig-timed-args-fused",
        Values::ArgsAndReads => "mtsig-timed-args-reads",
        Values::OnTheCallbacks => "mtsig-timed-args",
    });
    let exe = build_fixture(&dir, "mt", "threads_signals.c");
    let data = dir.join("m.data");
    let mut opts = vec!["-t", "2us"];
    let args = values != Values::None;
    if args {
        opts.extend(["-A", "fib@arg1/i32", "-R", "fib@retval/i32"]);
    }
    if values != Values::None && values != Values::Args {
        opts.extend(["-T", "fib@read=page-fault"]);
    }
    if values == Values::OnTheCallbacks {
        opts.extend(["-T", "main@trace_on"]);
    }
    let o = record_run(&[], &opts, &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("(0 lost) from 9 threads"), "{err}");
    let info = view_text("info", &data);
    if values != Values::OnTheCallbacks
        && shadowgraph_testkit::tool::available(
            shadowgraph::clock::init(),
            "an invariant TSC",
            "the fused path",
        )
    {
        assert!(info.contains("record path         : fused"), "{info}");
    }
    if values == Values::OnTheCallbacks {
        assert!(info.contains("record path         : general"), "{info}");
    }
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    let mut kept = 0;
    for &tid in &d.tids {
        in_time_order(&d, tid).unwrap();
        kept += every_call_closes(&d, tid).unwrap();
        depths_follow_the_records(&d, tid).unwrap();
        calls_last_at_least(&d, tid, 2000).unwrap();
    }
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows["worker"].2, 8, "{rows:?}");
    assert!(kept > 1000, "{kept} records");
    if args {
        // fib(n) for n <= 12 returns at most fib(12) = 144.
        let replay = replay_text(&data);
        let (mut given, mut returned) = (0, 0);
        let fib = |n: u32| (0..n).fold((0u32, 1u32), |(a, b), _| (b, a + b)).0;
        for l in replay.lines().filter(|l| l.contains("fib(")) {
            let n: u32 = l
                .split("fib(")
                .nth(1)
                .unwrap()
                .split(')')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(n <= 12, "{l}");
            // A call shown on one line: its value is fib's of its argument.
            if let Some(v) = l.split(") = ").nth(1) {
                assert_eq!(
                    v.trim_end_matches(';').parse::<u32>().unwrap(),
                    fib(n),
                    "{l}"
                );
            }
            given += 1;
        }
        for l in replay
            .lines()
            .filter(|l| l.contains("/* fib */") || l.contains("fib("))
        {
            if let Some(v) = l.split(" = ").nth(1) {
                let v: u32 = v.split(';').next().unwrap().parse().unwrap();
                assert!(v <= 144, "{l}");
                returned += 1;
            }
        }
        assert!(given > 100 && returned > 100, "{given} {returned}");
        if values == Values::Args {
            return;
        }
        let events = |what: &str| replay.matches(what).count();
        let (read, diff) = (
            events("/* read:page-fault (major="),
            events("/* diff:page-fault"),
        );
        assert!(read > 100 && diff == read, "{read} {diff}");
    }
}

/// Whether every call recorded on `tid` lasted at least `ns` (less 1 ns
/// for the conversion of TSC times to nanoseconds).
fn calls_last_at_least(
    d: &shadowgraph_data::dir::DataDir,
    tid: i32,
    ns: u64,
) -> Result<(), String> {
    use shadowgraph_data::format::Kind;
    let mut open = Vec::new();
    for (i, r) in records_of(d, tid)?.iter().enumerate() {
        match r.kind {
            Kind::Entry => open.push(r.time),
            Kind::Exit => {
                let t0 = open.pop().ok_or(format!("record {i}: exit of no call"))?;
                if r.time - t0 + 1 < ns {
                    return Err(format!(
                        "thread {tid}, record {i}: a call of {} ns",
                        r.time - t0
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum RecordPath {
    /// Fused, with rseq where glibc registered it.
    Fused,
    FusedWithoutRseq,
    General,
}

fn handlers_record_inside_records(path: RecordPath, filter: &[&str]) {
    let fused = path != RecordPath::General;
    let args = filter.contains(&"-A");
    let dir = workdir(match (path, filter.is_empty()) {
        (RecordPath::Fused, true) => "sigring",
        (RecordPath::FusedWithoutRseq, _) => "sigring-cmpxchg",
        (RecordPath::General, _) => "sigring-general",
        (RecordPath::Fused, false) if args => "sigring-args",
        (RecordPath::Fused, false) if filter.contains(&"-T") => "sigring-triggers",
        (RecordPath::Fused, false) => "sigring-filtered",
    });
    let exe = build_fixture(&dir, "sigring", "signal_rings.c");
    let data = dir.join("r.data");
    // Small rings: the thread often waits for the writer, and handlers
    // land in the waits as well.
    let env = rseq_env(path != RecordPath::FusedWithoutRseq);
    let mut opts = Way::of(fused).with(&["-b", "64K"]);
    opts.extend_from_slice(filter);
    let o = record_run(env, &opts, &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("(0 lost)"), "{err}");
    if fused {
        let info = view_text("info", &data);
        assert!(info.contains("record path         : fused"), "{info}");
        let rseq = path == RecordPath::Fused && rseq_registered();
        assert_eq!(info.contains("ring slots by rseq"), rseq, "{info}");
        if rseq {
            // Signals landed inside the sequences, which the kernel
            // aborted and the path started again.
            assert!(rseq_restarts(&info).is_some_and(|n| n > 0), "{info}");
        }
    }
    let mut it = out.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    let (alarms, fib_calls) = (it.next().unwrap(), it.next().unwrap());
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows["on_alarm"].2, alarms, "{rows:?}");
    assert_eq!(rows["in_handler"].2, alarms, "{rows:?}");
    assert_eq!(rows["fib"].2, fib_calls + 3 * alarms, "{rows:?}");
    // Nesting intact: fib's self time within main's total.
    assert!(rows["fib"].1 <= rows["main"].0, "{rows:?}");
    // Every handler call holds exactly its calls, wherever it landed.
    let replay = replay_text(&data);
    let body: Vec<&str> = replay
        .lines()
        .skip(1)
        .map(|l| l.split_once("] | ").map_or(l, |x| x.1).trim())
        .collect();
    let mut handlers = 0;
    let want = if args {
        let sigalrm = format!("in_handler({}) = {};", libc::SIGALRM, libc::SIGALRM + 1);
        [
            "",
            "fib(2) {",
            "fib(1) = 1;",
            "fib(0) = 0;",
            "} = 1; /* fib */",
            "} /* on_alarm */",
        ]
        .map(String::from)
        .map(|l| if l.is_empty() { sigalrm.clone() } else { l })
    } else {
        [
            "in_handler();",
            "fib() {",
            "fib();",
            "fib();",
            "} /* fib */",
            "} /* on_alarm */",
        ]
        .map(String::from)
    };
    for (i, l) in body.iter().enumerate() {
        if *l == "on_alarm() {" {
            assert_eq!(body[i + 1..i + 7], want, "line {i}");
            handlers += 1;
        }
        if let Some(n) = l.strip_prefix("fib(").filter(|_| args) {
            let n: u32 = n.split(')').next().unwrap().parse().unwrap();
            assert!(n <= 12, "line {i}: {l}");
        }
    }
    assert_eq!(handlers, alarms);
    // The thread's records are in time order, though handlers recorded
    // while the thread was claiming a slot (their records follow or
    // precede its record in the ring as their times do).
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    for &tid in &d.tids {
        in_time_order(&d, tid).unwrap();
        // And their depths follow the ring's order: a handler that landed
        // between a call's frame being pushed or popped and its record
        // being written nests in it or follows it as the records do.
        depths_follow_the_records(&d, tid).unwrap();
    }

    let prof = dir.join("p.data");
    let o = record_run(&[], &["--tracer", "profile"], &prof, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let mut it = out.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    let (alarms, fib_calls) = (it.next().unwrap(), it.next().unwrap());
    let o = shadowgraph()
        .args(["report", "-d"])
        .arg(prof.join("profile"))
        .output()
        .unwrap();
    let rows = report_rows(&text(&o).0);
    assert_eq!(rows["on_alarm"].2, alarms, "{rows:?}");
    assert_eq!(rows["in_handler"].2, alarms, "{rows:?}");
    assert_eq!(rows["fib"].2, fib_calls + 3 * alarms, "{rows:?}");
}

/// Several tracers recording the same call share its entry's and its
/// return's timestamps (one clock read per event, not one per tracer):
/// with CLOCK_MONOTONIC (whose values the recording keeps as they are) two
/// unfiltered tracers write the same files. Signal handlers that record
/// between the tracers' callbacks make the later ones read the clock
/// again: each tracer's records stay in time order.
#[test]
fn tracers_share_each_events_time_and_stay_in_time_order_under_signals() {
    let dir = workdir("sharedtime");
    let exe = build_fixture(&dir, "fibs", "fib20.c");
    let data = dir.join("two.data");
    let opts = [
        "--clock", "mono", "-b", "64M", "--tracer", "a", "--tracer", "b",
    ];
    let o = record_run(&[], &opts, &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success() && out.trim() == "6765", "{out}\n{err}");
    let d = shadowgraph_data::dir::DataDir::open(&data.join("a")).unwrap();
    assert_eq!(d.info.get("clock"), Some("monotonic"));
    let tid = d.tids[0];
    let a = std::fs::read(data.join(format!("a/{tid}.dat"))).unwrap();
    let b = std::fs::read(data.join(format!("b/{tid}.dat"))).unwrap();
    assert_eq!(a.len(), 16 * 2 * (21891 + 1), "fib(20) and main");
    assert!(a == b, "the two tracers' records differ");

    let exe = build_fixture(&dir, "sigring", "signal_rings.c");
    for clock in ["mono", "tsc"] {
        let data = dir.join(format!("sig-{clock}.data"));
        let opts = [
            "--clock", clock, "-b", "64K", "--tracer", "a", "--tracer", "b",
        ];
        let o = record_run(&[], &opts, &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        assert_eq!(err.matches("(0 lost)").count(), 2, "{err}");
        let mut it = out.split_whitespace().map(|v| v.parse::<u64>().unwrap());
        let (alarms, fib_calls) = (it.next().unwrap(), it.next().unwrap());
        for t in ["a", "b"] {
            let rows = report_rows(&report_text(&data.join(t)));
            assert_eq!(rows["on_alarm"].2, alarms, "{clock} {t}: {rows:?}");
            assert_eq!(
                rows["fib"].2,
                fib_calls + 3 * alarms,
                "{clock} {t}: {rows:?}"
            );
            let d = shadowgraph_data::dir::DataDir::open(&data.join(t)).unwrap();
            for &tid in &d.tids {
                in_time_order_within(&d, tid, SEVERAL_TRACERS_STEP_NS)
                    .unwrap_or_else(|e| panic!("{clock} {t}: {e}"));
                if clock == "mono" {
                    assert_eq!(d.info.clock_steps_back().0, 0, "{clock} {t}");
                }
            }
        }
    }
}

/// A signal handler that leaves by siglongjmp out of whatever it
/// interrupted — often a record half written in the fused path, or in the
/// rings' general way — 300 times: the program runs to its end, the
/// recording goes on after every jump (the thread's abandoned writes are
/// given back when its abandoned bracket is found, and counted as lost:
/// no stall, no record half written), and every handler call is either
/// recorded or among the records counted lost. Where the fused path claims
/// ring slots by rseq, a jump out of a handler almost always finds nothing
/// claimed (the kernel aborted the record before the handler ran), and
/// next to nothing is lost.
#[test]
fn siglongjmp_out_of_recording_handlers_loses_only_what_it_counts() {
    siglongjmp_out_of_handlers(RecordPath::Fused, &[]);
}

#[test]
fn siglongjmp_out_of_recording_handlers_without_rseq() {
    siglongjmp_out_of_handlers(RecordPath::FusedWithoutRseq, &[]);
}

/// The same with fib's argument recorded (the plain entry of the sites
/// with arguments, whose sequences the handlers interrupt as often).
#[test]
fn siglongjmp_out_of_recording_handlers_with_arguments() {
    siglongjmp_out_of_handlers(RecordPath::Fused, &["-A", "fib@arg1/i32"]);
}

fn siglongjmp_out_of_handlers(path: RecordPath, opts: &[&str]) {
    let dir = workdir(match (path, opts.is_empty()) {
        (RecordPath::Fused, true) => "sigjmprec",
        (RecordPath::Fused, false) => "sigjmprec-args",
        _ => "sigjmprec-cmpxchg",
    });
    let exe = build_fixture(&dir, "sj", "siglongjmp_alarms.c");
    let data = dir.join("j.data");
    let env = rseq_env(path != RecordPath::FusedWithoutRseq);
    let o = record_run(env, opts, &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    // A ring stalled by a claim a jump left unpublished would make its
    // thread give up waiting for the writer.
    let info = shadowgraph_data::dir::DataDir::open(&data).unwrap().info;
    assert_eq!(info.get("writer_gave_up"), None, "{err}");
    let mut it = out.split_whitespace();
    assert_eq!(it.next(), Some("7"));
    let alarms: u64 = it.next().unwrap().parse().unwrap();
    assert!(alarms >= 2400, "{out}");
    let lost: u64 = err
        .split_once("records (")
        .and_then(|(_, r)| r.split_once(" lost)"))
        .map(|(n, _)| n.parse().unwrap())
        .unwrap_or_else(|| panic!("{err}"));
    let report = report_text(&data);
    let rows = report_rows(&report);
    // Calls the recursion guard dropped are counted too (a handler that
    // lands while its thread holds a guard bit left by a handler that
    // jumped out of our callbacks, before the thread's next traced call
    // finds the abandoned bracket and frees the bits).
    let dd = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    let drops: u64 = dd
        .info
        .get("recursion_drops")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        alarms - rows["on_alarm"].2 <= lost + drops,
        "{alarms} alarms, {lost} lost, {drops} dropped: {report}"
    );
    if drops > 0 {
        assert!(
            err.contains("calls were not traced (the recursion guard"),
            "{err}"
        );
    }
    if path == RecordPath::Fused && rseq_registered() {
        // The fused path claims and publishes a record by one store: a
        // jump from a handler loses nothing of it. Only a record of the
        // general way, taken at rest now and then (a thread's first
        // record, a full ring), can be left claimed and unpublished by a
        // jump (without rseq, from anywhere between claim and publish).
        // With arguments a call writes more bytes: rings fill, and the
        // general way takes a record at rest, more often.
        let bound = if opts.is_empty() { 4 } else { 8 };
        assert!(lost <= bound, "{err}");
        // Nothing lost or dropped, nothing out of place: wherever a handler
        // landed (inside a call's entry or return, between its record and
        // its frame being handed over, or after its exit record and before
        // its frame's pop), its calls' records nest where the thread's
        // records say it was, and each call the jumps skipped gets one
        // exit (unwound) if its entry is in the ring, none if not. (A call
        // the recursion guard dropped, counted, can be an unwound exit,
        // and the ring's depth then misleads the next one: about one run
        // in thirty here.)
        if lost == 0 && drops == 0 {
            for &tid in &dd.tids {
                calls_nest_exactly(&dd, tid, &[]).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
    // (The abandoned writes are found at `done`: a LOST record may follow.)
    assert_eq!(
        replay_last_lines(&data, 2),
        ["} /* main */", "  done();"],
        "the recording went on"
    );
}

/// Stress for rings unmapped at thread exit: threads come and go on
/// several threads at once while a timer's signal handler (traced calls
/// of its own) lands anywhere, exiting threads included. Nothing crashes,
/// nothing is lost, every short thread's calls are all there.
#[test]
fn threads_coming_and_going_under_signals_keep_every_call() {
    let dir = workdir("churnsig");
    let exe = build_fixture(&dir, "churnsig", "thread_churn_signals.c");
    let data = dir.join("c.data");
    let o = record_run(&[], &[], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(out.trim(), "bad=0 alarms=1", "{err}");
    assert!(err.contains("(0 lost)"), "{err}");
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows["shortlived"].2, 4 * 150, "{rows:?}");
    assert_eq!(rows["leaf"].2, 4 * 150 * 1000, "{rows:?}");
    assert!(rows["in_handler"].2 > 0, "{rows:?}");
}
