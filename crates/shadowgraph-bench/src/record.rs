//! `bench record`: fib side by side with uftrace, every variant once per
//! round: ns per call of `shadowgraph record` (the fused path, and each
//! part of it turned off), bytes per call, start-up, replay and report
//! times, the ratio to uftrace, and the floor of any recorder here.

use crate::clock::{after_tsc_ns, timestamp_line};
use crate::common::{fib_calls, median, time_cmd};
use crate::models::recorder_floor_ns;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The `shadowgraph` binary of this build: next to this one.
pub(crate) fn shadowgraph_binary() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot locate myself: {e}"))?;
    let sg = me.with_file_name("shadowgraph");
    if sg.is_file() {
        Ok(sg)
    } else {
        Err(format!(
            "no `shadowgraph` next to {} (build the workspace: cargo build --release)",
            me.display()
        ))
    }
}

const FIB_C: &str = "#include <stdio.h>\n#include <stdlib.h>\n\
__attribute__((noinline)) int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
int main(int argc, char **argv) { printf(\"%d\\n\", fib(argc > 1 ? atoi(argv[1]) : 30)); return 0; }\n";

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Nanoseconds from the first record to the last of the largest `.dat`
/// file in `dir` (the busiest thread's), if it holds two records or more.
/// Reads those two records only (the file is tens of MB).
fn recorded_span_ns(dir: &Path) -> Option<f64> {
    use std::os::unix::fs::FileExt;
    const RECORD: u64 = shadowgraph_data::format::RECORD_SIZE as u64;
    let (path, len) = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "dat"))
        .filter_map(|e| Some((e.path(), e.metadata().ok()?.len())))
        .max_by_key(|&(_, len)| len)?;
    let n = len / RECORD;
    if n < 2 {
        return None;
    }
    let f = std::fs::File::open(path).ok()?;
    let time_at = |at: u64| {
        let mut b = [0u8; 8];
        f.read_exact_at(&mut b, at)
            .ok()
            .map(|_| u64::from_le_bytes(b))
    };
    let (first, last) = (time_at(0)?, time_at((n - 1) * RECORD)?);
    last.checked_sub(first).map(|d| d as f64)
}

/// How often the recording in `dir` made its thread wait for the writer
/// (its ring full), said when it did: then the run measured the writer's
/// pace (the machine's memory bandwidth) as much as the path.
fn writer_waits(dir: &Path) -> String {
    let d = shadowgraph_data::dir::DataDir::open(dir).ok();
    match d
        .as_ref()
        .and_then(|d| d.info.get("writer_waits")?.split_once(" / "))
    {
        Some((n, ns)) if n != "0" => format!(
            "; it waited for the writer {n} times ({:.1} ms: the ring was full)",
            ns.parse::<f64>().unwrap_or(0.0) / 1e6
        ),
        _ => String::new(),
    }
}

pub fn bench(n: u32, reps: usize, lua_only: bool) -> Result<ExitCode, String> {
    let dir = std::env::temp_dir().join(format!("shadowgraph-bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let src = dir.join("fib.c");
    let exe = dir.join("fib");
    std::fs::write(&src, FIB_C).map_err(|e| e.to_string())?;
    shadowgraph_testkit::cc::compile(
        &[&src],
        &[
            "-O2",
            "-g", // (for -a; the code is the same)
            "-fno-optimize-sibling-calls",
            "-fpatchable-function-entry=5",
        ],
        &exe,
    )?;
    // The same program built without tracing flags, for `-P .`.
    let exe_p = dir.join("fib-plain");
    shadowgraph_testkit::cc::compile(&[&src], &["-O2", "-fno-optimize-sibling-calls"], &exe_p)?;
    let calls = fib_calls(n) + 1; // and main
    let me = shadowgraph_binary()?;
    let uftrace = std::process::Command::new("uftrace")
        .arg("--version")
        .output()
        .is_ok();
    // The recordings (86 MB each for fib(30)) go to memory when /dev/shm
    // is there: the disk's write-back of one run then does not slow the
    // next (the same for both tools).
    let shm = Path::new("/dev/shm");
    let data_dir = if shm.is_dir() {
        shm.join(format!("shadowgraph-bench-record-{}", std::process::id()))
    } else {
        dir.clone()
    };
    std::fs::create_dir_all(&data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    if lua_only {
        let rows = crate::record_lua::rows(&dir, &data_dir, &me, reps, uftrace);
        println!("{}", timestamp_line(reps));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&data_dir);
        return rows.map(|()| ExitCode::SUCCESS);
    }
    let (sg_data, uf_data) = (data_dir.join("sg.data"), data_dir.join("uf.data"));
    let arg = n.to_string();
    let run_plain = |k: &str| {
        let mut c = std::process::Command::new(&exe);
        c.arg(k);
        c
    };
    // `env`: an environment variable (and value) for the run. `opts`: more
    // options of `record`.
    let run_sg_with = |k: &str, off: Option<(&str, &str)>, opts: &[&str]| {
        let _ = std::fs::remove_dir_all(&sg_data);
        let _ = std::fs::remove_dir_all(data_dir.join("sg.data.old"));
        let mut c = std::process::Command::new(&me);
        c.arg("record")
            .args(opts)
            .arg("-d")
            .arg(&sg_data)
            .arg("--")
            .arg(&exe)
            .arg(k);
        if let Some((v, x)) = off {
            c.env(v, x);
        }
        c
    };
    let run_sg = |k: &str| run_sg_with(k, None, &[]);
    // `record -P .` of the build without flags.
    let run_sg_p = |k: &str| {
        let _ = std::fs::remove_dir_all(&sg_data);
        let mut c = std::process::Command::new(&me);
        c.args(["record", "-P", "."])
            .arg("-d")
            .arg(&sg_data)
            .arg("--")
            .arg(&exe_p)
            .arg(k);
        c
    };
    let run_uf_with = |k: &str, opts: &[&str]| {
        let _ = std::fs::remove_dir_all(&uf_data);
        let mut c = std::process::Command::new("uftrace");
        c.args(["record", "-P", "."])
            .args(opts)
            .arg("-d")
            .arg(&uf_data)
            .arg(&exe)
            .arg(k);
        c
    };
    let run_uf = |k: &str| run_uf_with(k, &[]);
    let run_uf_p = |k: &str| {
        let _ = std::fs::remove_dir_all(&uf_data);
        let mut c = std::process::Command::new("uftrace");
        c.args(["record", "-P", "."])
            .arg("-d")
            .arg(&uf_data)
            .arg(&exe_p)
            .arg(k);
        c
    };
    eprintln!(
        "# fib({n}): {calls} traced calls; medians of {reps} runs (each tool's first of a round after an untimed one of its own); recordings in {} …",
        data_dir.display()
    );
    // Every variant once per round, rounds repeated: the machine's slow
    // spells then fall on all of them alike (medians per variant, and the
    // ratio to uftrace as the median of each round's ratio).
    let mut runs: Vec<Box<dyn FnMut() -> std::process::Command + '_>> = vec![
        Box::new(|| run_plain(&arg)),
        Box::new(|| run_sg(&arg)),
        Box::new(|| run_sg("1")),
        Box::new(|| run_sg_with(&arg, None, &["--general-path"])),
        Box::new(|| run_sg_with(&arg, None, &["--hijack-returns"])),
        // Every call is inside main: the same records, through the filters.
        Box::new(|| run_sg_with(&arg, None, &["-F", "main"])),
        // Two recordings of every call at once (fgraph's general path).
        Box::new(|| run_sg_with(&arg, None, &["--tracer", "a", "--tracer", "b"])),
        // glibc told not to register rseq: ring slots claimed by cmpxchg.
        Box::new(|| run_sg_with(&arg, Some(("GLIBC_TUNABLES", "glibc.pthread.rseq=0")), &[])),
        // A time filter: the calls shorter than 1 µs (most) not recorded.
        Box::new(|| run_sg_with(&arg, None, &["-t", "1us"])),
        // A profile: counters per function, no records.
        Box::new(|| run_sg_with(&arg, None, &["--tracer", "profile"])),
        // Every call's argument recorded (-A): its records carry data.
        Box::new(|| run_sg_with(&arg, None, &["-A", "fib@arg1"])),
        // Built without flags, patched at the prologue (fib is called
        // directly: its stub keeps registers for it).
        Box::new(|| run_sg_p(&arg)),
        Box::new(|| run_sg_p("1")),
        // A trigger on main (fib's calls carry none): main's call through
        // the callbacks, fib's on the fused filtered path, which keeps the
        // triggers' state.
        Box::new(|| run_sg_with(&arg, None, &["-T", "main@trace_on"])),
        // Every function's arguments from DWARF (fib's one integer).
        Box::new(|| run_sg_with(&arg, None, &["-a"])),
        // Two tracers, the second with a depth limit (the multi path
        // skips its ring below it).
        Box::new(|| run_sg_with(&arg, None, &["--tracer", "a", "--tracer", "b:depth=5"])),
        // Two tracers, the second with a function filter (the multi path
        // applies it; fib is under fib: every call recorded by both).
        Box::new(|| run_sg_with(&arg, None, &["--tracer", "a", "--tracer", "b:filter=fib"])),
        // Two tracers, the second with a time filter (the multi path
        // records every call in its ring; its consumer leaves out the
        // short ones).
        Box::new(|| run_sg_with(&arg, None, &["--tracer", "a", "--tracer", "b:time=1us"])),
        // A recorder and a profile (the multi path keeps the profile's
        // counts beside the recorder's records).
        Box::new(|| run_sg_with(&arg, None, &["--tracer", "a", "--tracer", "b:type=profile"])),
        // The compact layout: the writer encodes, and writes a fifth of
        // the bytes.
        Box::new(|| run_sg_with(&arg, None, &["--compact"])),
        // Two tracers, the second with a trigger on main (the multi path
        // decides fib's calls by the triggers' state).
        Box::new(|| {
            run_sg_with(
                &arg,
                None,
                &["--tracer", "a", "--tracer", "b:trigger=main@trace_on"],
            )
        }),
        // A time filter and an argument: every call recorded with its
        // argument, the writer leaving out the short calls with theirs.
        Box::new(|| run_sg_with(&arg, None, &["-t", "1us", "-A", "fib@arg1"])),
    ];
    let uf_at = runs.len();
    if uftrace {
        runs.push(Box::new(|| run_uf(&arg)));
        runs.push(Box::new(|| run_uf("1")));
        runs.push(Box::new(|| run_uf_with(&arg, &["-t", "1us"])));
        runs.push(Box::new(|| run_uf_with(&arg, &["-A", "fib@arg1"])));
        runs.push(Box::new(|| run_uf_p(&arg)));
        runs.push(Box::new(|| run_uf_p("1")));
        runs.push(Box::new(|| run_uf_with(&arg, &["-T", "main@trace_on"])));
        runs.push(Box::new(|| run_uf_with(&arg, &["-a"])));
        runs.push(Box::new(|| {
            run_uf_with(&arg, &["-t", "1us", "-A", "fib@arg1"])
        }));
    }
    // fib(1) untraced: what starting and ending the program costs. A
    // recorder's start-up overhead is its fib(1) run less this (not less
    // fib(30) untraced, which would count fib(30)'s own work as overhead).
    let plain1_at = runs.len();
    runs.push(Box::new(|| run_plain("1")));
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); runs.len()];
    for _ in 0..reps {
        for (i, (r, t)) in runs.iter_mut().zip(times.iter_mut()).enumerate() {
            // Each tool's first recording of a round comes after one of
            // its own, not timed: on this class of machine the first heavy
            // run after the other tool's was 10-40 ms slower (either
            // tool; whatever the other left behind, not what it measures).
            if i == 1 {
                time_cmd(1, || run_sg(&arg))?;
            } else if uftrace && i == uf_at {
                time_cmd(1, || run_uf(&arg))?;
            }
            t.push(time_cmd(1, r)?);
        }
    }
    drop(runs);
    let med = |i: usize| median(times[i].clone());
    let (plain, sg_start, sg_general, sg_hijack, sg_filtered, sg_two, sg_cmpxchg, sg_timed) = (
        med(0),
        med(2),
        med(3),
        med(4),
        med(5),
        med(6),
        med(7),
        med(8),
    );
    let (sg_profile, sg_args, sg_p, sg_p_start) = (med(9), med(10), med(11), med(12));
    let (sg_trigger, sg_auto, sg_two_depth, sg_two_filter) = (med(13), med(14), med(15), med(16));
    let (sg_two_timed, sg_two_profile, sg_compact) = (med(17), med(18), med(19));
    let (sg_two_trigger, sg_timed_args) = (med(20), med(21));
    let compact_bytes =
        time_cmd(1, || run_sg_with(&arg, None, &["--compact"])).map(|_| dir_bytes(&sg_data))?;
    let sg = (
        med(1),
        time_cmd(1, || run_sg(&arg)).map(|_| dir_bytes(&sg_data))?,
    );
    let view = |bin: &Path, what: &str, d: &Path| {
        let mut c = std::process::Command::new(bin);
        c.args([what, "-d"]).arg(d);
        c
    };
    let sg_replay = time_cmd(reps.min(3), || view(&me, "replay", &sg_data))?;
    let sg_report = time_cmd(reps.min(3), || view(&me, "report", &sg_data))?;
    println!("# shadowgraph bench record: fib({n}), {calls} calls, medians of {reps}");
    println!(
        "{:<34} {:>9} {:>12} {:>10} {:>10} {:>9} {:>9}",
        "", "total s", "ns/call", "B/call", "start s", "replay s", "report s"
    );
    let plain1 = med(plain1_at);
    println!(
        "{:<34} {:>9.3} {:>12} {:>10} {plain1:>10.3}",
        "untraced", plain, "", ""
    );
    let per_call =
        |t: f64, start: f64| (t - plain - (start - plain1).max(0.0)) * 1e9 / calls as f64;
    let row = |name: &str, t: f64, bytes: u64, start: f64, rep: f64, repo: f64| {
        println!(
            "{name:<34} {t:>9.3} {:>12.1} {:>10.1} {start:>10.3} {rep:>9.2} {repo:>9.2}",
            per_call(t, start),
            bytes as f64 / calls as f64
        )
    };
    row(
        "shadowgraph record",
        sg.0,
        sg.1,
        sg_start,
        sg_replay,
        sg_report,
    );
    println!(
        "{:<34} {sg_compact:>9.3} {:>12.1} {:>10.1}",
        "  (--compact: the compact layout)",
        per_call(sg_compact, sg_start),
        compact_bytes as f64 / calls as f64
    );
    println!(
        "{:<34} {sg_hijack:>9.3} {:>12.1}",
        "  (site stubs off: hijacked)",
        per_call(sg_hijack, sg_start)
    );
    println!(
        "{:<34} {sg_filtered:>9.3} {:>12.1}",
        "  (-F main: filters, same records)",
        per_call(sg_filtered, sg_start)
    );
    println!(
        "{:<34} {sg_cmpxchg:>9.3} {:>12.1}",
        "  (rseq off: slots by cmpxchg)",
        per_call(sg_cmpxchg, sg_start)
    );
    println!(
        "{:<34} {sg_general:>9.3} {:>12.1}",
        "  (fused path off)",
        per_call(sg_general, sg_start)
    );
    println!(
        "{:<34} {sg_two:>9.3} {:>12.1}",
        "  (two tracers at once, both)",
        per_call(sg_two, sg_start)
    );
    println!(
        "{:<34} {sg_two_depth:>9.3} {:>12.1}",
        "  (two, one with -D 5: depth=5)",
        per_call(sg_two_depth, sg_start)
    );
    println!(
        "{:<34} {sg_two_filter:>9.3} {:>12.1}",
        "  (two, one with -F fib)",
        per_call(sg_two_filter, sg_start)
    );
    println!(
        "{:<34} {sg_two_timed:>9.3} {:>12.1}",
        "  (two, one with -t 1us: time=1us)",
        per_call(sg_two_timed, sg_start)
    );
    println!(
        "{:<34} {sg_two_profile:>9.3} {:>12.1}",
        "  (two, one a profile)",
        per_call(sg_two_profile, sg_start)
    );
    println!(
        "{:<34} {sg_two_trigger:>9.3} {:>12.1}",
        "  (two, one with -T main@trace_on)",
        per_call(sg_two_trigger, sg_start)
    );
    println!(
        "{:<34} {sg_timed:>9.3} {:>12.1}",
        "  (-t 1us: time filter)",
        per_call(sg_timed, sg_start)
    );
    println!(
        "{:<34} {sg_timed_args:>9.3} {:>12.1}",
        "  (-t 1us -A fib@arg1)",
        per_call(sg_timed_args, sg_start)
    );
    println!(
        "{:<34} {sg_profile:>9.3} {:>12.1}",
        "  (--tracer profile: no records)",
        per_call(sg_profile, sg_start)
    );
    println!(
        "{:<34} {sg_args:>9.3} {:>12.1}",
        "  (-A fib@arg1: an argument)",
        per_call(sg_args, sg_start)
    );
    println!(
        "{:<34} {sg_trigger:>9.3} {:>12.1}",
        "  (-T main@trace_on: a trigger)",
        per_call(sg_trigger, sg_start)
    );
    println!(
        "{:<34} {sg_auto:>9.3} {:>12.1}",
        "  (-a: arguments from DWARF)",
        per_call(sg_auto, sg_start)
    );
    println!(
        "{:<34} {sg_p:>9.3} {:>12.1} {:>10} {sg_p_start:>10.3}",
        "  (-P .: built without flags)",
        per_call(sg_p, sg_p_start),
        ""
    );
    if uftrace {
        let (uf, uf_start, uf_timed, uf_args) =
            (med(uf_at), med(uf_at + 1), med(uf_at + 2), med(uf_at + 3));
        let _ = time_cmd(1, || run_uf(&arg))?;
        let bytes = dir_bytes(&uf_data);
        let uf_bin = PathBuf::from("uftrace");
        let uf_replay = time_cmd(reps.min(3), || view(&uf_bin, "replay", &uf_data))?;
        let uf_report = time_cmd(reps.min(3), || view(&uf_bin, "report", &uf_data))?;
        row(
            "uftrace record -P .",
            uf,
            bytes,
            uf_start,
            uf_replay,
            uf_report,
        );
        println!(
            "{:<34} {uf_timed:>9.3} {:>12.1}",
            "  (-t 1us: time filter)",
            per_call(uf_timed, uf_start)
        );
        println!(
            "{:<34} {uf_args:>9.3} {:>12.1}",
            "  (-A fib@arg1: an argument)",
            per_call(uf_args, uf_start)
        );
        let (uf_p, uf_p_start) = (med(uf_at + 4), med(uf_at + 5));
        println!(
            "{:<34} {uf_p:>9.3} {:>12.1} {:>10} {uf_p_start:>10.3}",
            "  (-P .: built without flags)",
            per_call(uf_p, uf_p_start),
            ""
        );
        let (uf_trigger, uf_auto) = (med(uf_at + 6), med(uf_at + 7));
        println!(
            "{:<34} {uf_trigger:>9.3} {:>12.1}",
            "  (-T main@trace_on: a trigger)",
            per_call(uf_trigger, uf_start)
        );
        println!(
            "{:<34} {uf_auto:>9.3} {:>12.1}",
            "  (-a: arguments from DWARF)",
            per_call(uf_auto, uf_start)
        );
        let uf_timed_args = med(uf_at + 8);
        println!(
            "{:<34} {uf_timed_args:>9.3} {:>12.1}",
            "  (-t 1us -A fib@arg1)",
            per_call(uf_timed_args, uf_start)
        );
        let ratios: Vec<f64> = times[1]
            .iter()
            .zip(&times[uf_at])
            .map(|(&s, &u)| per_call(s, sg_start) / per_call(u, uf_start))
            .collect();
        println!(
            "# overhead per call, shadowgraph / uftrace: {:.3} (median of the rounds' ratios; {:.2}–{:.2})",
            median(ratios.clone()),
            ratios.iter().cloned().fold(f64::INFINITY, f64::min),
            ratios.iter().cloned().fold(0.0, f64::max)
        );
        let timed: Vec<f64> = times[8]
            .iter()
            .zip(&times[uf_at + 2])
            .map(|(&s, &u)| per_call(s, sg_start) / per_call(u, uf_start))
            .collect();
        println!(
            "# the same with a time filter (-t 1us): {:.2}",
            median(timed)
        );
        let floor = recorder_floor_ns(reps);
        let uf_call = per_call(uf, uf_start);
        let rest = 0.25 * uf_call - floor;
        // Where nothing overlaps a clock read, the rest is a budget of
        // instructions between the reads.
        let per_instr = if shadowgraph::clock::init() {
            after_tsc_ns(reps)
        } else {
            0.0
        };
        let budget = if per_instr > 0.01 && rest > 0.0 {
            format!(
                " (about {:.0} instructions after the reads)",
                rest / per_instr
            )
        } else {
            String::new()
        };
        println!(
            "# the floor of any recorder here (asm model: a stub's call, two TSC reads, two \
             16-byte records in memory, nothing else): {floor:.1} ns/call = {:.2}× uftrace's \
             overhead; 0.25× leaves {rest:.1} ns for the rest{budget}",
            floor / uf_call,
        );
    } else {
        println!("# uftrace is not installed (apt-get install uftrace) — no comparison");
    }
    println!(
        "# ns/call = (total − untraced − start-up overhead) / calls; start-up overhead = start s \
         (fib(1) under the tool) − fib(1) untraced"
    );
    if let Some(span) = recorded_span_ns(&sg_data) {
        println!(
            "# inside the program (its first record to its last, one run): {:.1} ns per call, \
             the call's own work included, start-up, exit and the writer's final drain not{}",
            span / calls as f64,
            writer_waits(&sg_data)
        );
    }
    crate::record_loops::library_calls(&dir, &data_dir, &me, calls, reps, uftrace)?;
    crate::record_loops::arguments(&dir, &data_dir, &me, 2_000_000, reps, uftrace)?;
    crate::record_threads::rows(&dir, &data_dir, &me, n, reps, uftrace)?;
    // Seconds a round: a smaller count of rounds.
    crate::record_lua::rows(&dir, &data_dir, &me, reps.min(5), uftrace)?;
    println!("{}", timestamp_line(reps));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&data_dir);
    Ok(ExitCode::SUCCESS)
}
