//! Recording into memory by the library's own recorders (a
//! [`Session`] in this process, as the agent starts one): the rings, big
//! enough for a whole timed loop, are written out between loops, untimed.
//! The recording path is chosen once per process, so `bench fgraph` runs
//! each mode in a child process of its own (`memory-record MODE`).

use crate::common::{median, BenchLib, Loop, DISPATCH_C};
use shadowgraph::config::{self, Config, Tracer};
use shadowgraph::session::Session;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The recording modes: one recorder on the fused path, one through
/// fgraph's callbacks, two (fused, or through the callbacks), two fused
/// of which one has a depth limit (`-D 5`) or graph filters (`-F
/// target`: both record every call; `-F other0`: the second declines
/// every call) or a trigger (`-T other0@trace_on`: `target`'s calls
/// decided by the triggers' state), one on the fused path recording
/// `target`'s argument (`-A target@arg1`), and one recorder with a
/// profile beside it (`--tracer a --tracer b:type=profile`).
pub const MODES: [&str; 10] = [
    "record",
    "record-general",
    "record2",
    "record2-general",
    "record2-depth",
    "record2-filter",
    "record2-decline",
    "record2-trigger",
    "record-arg",
    "record-profile",
];

/// A recording of the benchmark library in this process, by `mode`'s
/// recorders, into a directory in /dev/shm (removed on drop).
pub struct Recording {
    pub lib: BenchLib,
    dir: PathBuf,
    _session: Session,
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Recording {
    /// Builds and loads the benchmark library and starts recording it:
    /// rings large enough for `calls` calls between flushes.
    pub fn start(mode: &str, calls: i64, hijack_returns: bool) -> Result<Recording, String> {
        let tracers = match mode {
            "record" | "record-general" | "record-arg" => vec![Tracer::default()],
            "record2" | "record2-general" | "record2-depth" | "record2-filter"
            | "record2-decline" | "record2-trigger" | "record-profile" => ["a", "b"]
                .map(|n| Tracer {
                    name: Some(n.into()),
                    ..Default::default()
                })
                .to_vec(),
            other => {
                return Err(format!(
                    "unknown mode `{other}` (record, record-general, record2, record2-general, \
                     record2-depth, record2-filter, record2-decline, record2-trigger, \
                     record-arg or record-profile)"
                ))
            }
        };
        let mut tracers = tracers;
        match mode {
            "record2-depth" => tracers[1].depth = 5,
            "record2-filter" => tracers[1].filter = vec!["target".into()],
            // Graph filters that decline every call: a function never called.
            "record2-decline" => tracers[1].filter = vec!["other0".into()],
            // A trigger of a function never called: every call of target
            // decided by the triggers' thread variable and switch.
            "record2-trigger" => tracers[1].triggers = vec!["other0@trace_on".into()],
            "record-profile" => tracers[1].kind = config::TracerKind::Profile,
            _ => {}
        }
        let lib = BenchLib::build("dispatch", DISPATCH_C)?;
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_owned()
        } else {
            std::env::temp_dir()
        }
        .join(format!("shadowgraph-bench-memory-{}", std::process::id()));
        let mut record = config::Record::into_dir(&dir, tracers);
        // Two records a call, and the argument's 16 bytes after the entry.
        let slots = if mode == "record-arg" { 3 } else { 2 };
        record.ring_bytes = Some((calls as u64 * slots * 16 + (1 << 20)).next_power_of_two());
        record.fused = !mode.ends_with("-general");
        if mode == "record-arg" {
            record.argspec = vec!["target@arg1".into()];
        }
        let mut config = Config::record(record);
        // The benchmark library alone (this binary has no sites).
        config.objects = config::Objects::Program(vec!["libdispatch".into()]);
        if hijack_returns {
            config.returns = config::Returns::Hijack;
        }
        let session = Session::start(config)?;
        Ok(Recording {
            lib,
            dir,
            _session: session,
        })
    }
}

/// The calls of a timed loop recorded into memory, at most: their records
/// (3.2 MB a recorder, 4.8 MB with an argument each call) stay in the
/// caches, so that the rows measure the paths rather than the memory's
/// write bandwidth (ten times as many, 32–48 MB a loop, outgrow a 32 MB
/// last-level cache).
const LOOP_CALLS: i64 = 100_000;

/// `memory-record MODE` run by this binary: its ns per call.
pub fn in_child(mode: &str, calls: i64, reps: usize, hijack_returns: bool) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate myself: {e}"))?;
    let o = std::process::Command::new(exe)
        .arg("memory-record")
        .args(hijack_returns.then_some("--hijack-returns"))
        .arg(mode)
        .arg(format!("--calls={}", calls.min(LOOP_CALLS)))
        .arg(format!("--reps={reps}"))
        .output()
        .map_err(|e| format!("bench memory-record: {e}"))?;
    let out = String::from_utf8_lossy(&o.stdout);
    out.trim().parse().map_err(|_| {
        format!(
            "bench memory-record {mode} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )
    })
}

/// ns per call of the bench loop recorded into memory by `mode`.
pub fn ns_per_call(
    mode: &str,
    calls: i64,
    reps: usize,
    hijack_returns: bool,
) -> Result<f64, String> {
    let r = Recording::start(mode, calls, hijack_returns)?;
    Ok(ns_per_recorded_call(
        r.lib.func("loop_target")?,
        calls,
        reps,
    ))
}

/// [`crate::common::ns_per_call`] of a recording loop: the thread's ring,
/// big enough for one loop, is written out between loops (untimed).
fn ns_per_recorded_call(f: Loop, calls: i64, reps: usize) -> f64 {
    let flush = shadowgraph::record::writer::flush_all;
    f(calls); // warm up: the ring's pages touched once
    flush();
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f(std::hint::black_box(calls)));
                let ns = t.elapsed().as_nanos() as f64 / calls as f64;
                flush();
                ns
            })
            .collect(),
    )
}
