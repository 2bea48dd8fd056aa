//! `bench attach`: a running process with many patchable functions and
//! two threads calling through them, recorded by `shadowgraph record -p`
//! and left: the time from the command to the first record, from the end
//! of the session to every site back to its nop, and the cost of a call
//! before, during and after. A fresh process each round (one session per
//! process).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The target: `n` functions called in turn through a table by two
/// threads, each counting its rounds.
fn target_source(n: usize) -> String {
    let mut s = String::from(
        "#include <pthread.h>\n#include <stdio.h>\n#include <unistd.h>\n\
         static volatile long sink;\nvolatile unsigned long rounds[2];\n",
    );
    for k in 0..n {
        s += &format!("__attribute__((noinline)) void f{k}(void) {{ sink++; }}\n");
    }
    s += &format!("void (*const fns[{n}])(void) = {{");
    for k in 0..n {
        s += &format!("f{k},");
    }
    s += &format!(
        "}};\nstatic void *worker(void *a) {{ long i = (long)a; for (;;) {{ \
         for (int k = 0; k < {n}; k++) fns[k](); rounds[i]++; }} return 0; }}\n\
         int main(void) {{ pthread_t t[2]; for (long i = 0; i < 2; i++) \
         pthread_create(&t[i], 0, worker, (void *)i); printf(\"ready\\n\"); fflush(stdout); \
         for (;;) pause(); }}\n"
    );
    s
}

/// A running target, killed when dropped.
struct Target {
    child: Child,
    /// Run-time addresses of `rounds` and of every function's entry.
    rounds: u64,
    entries: Vec<u64>,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Target {
    fn start(exe: &Path, symbols: &[(String, u64)]) -> Result<Target, String> {
        let mut child = Command::new(exe)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id()))
            .map_err(|e| e.to_string())?;
        let real = std::fs::canonicalize(exe).map_err(|e| e.to_string())?;
        let base = maps
            .lines()
            .find(|l| l.ends_with(real.to_str().unwrap_or("")))
            .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
            .ok_or("the target is not mapped")?;
        let at = |name: &str| symbols.iter().find(|s| s.0 == name).map(|s| base + s.1);
        let rounds = at("rounds").ok_or("no `rounds`")?;
        let entries = symbols
            .iter()
            .filter(|s| s.0.starts_with('f') && s.0[1..].parse::<u32>().is_ok())
            .map(|s| base + s.1)
            .collect();
        Ok(Target {
            child,
            rounds,
            entries,
        })
    }

    fn mem(&self) -> Result<std::fs::File, String> {
        std::fs::File::open(format!("/proc/{}/mem", self.child.id())).map_err(|e| e.to_string())
    }

    /// Rounds of both threads so far.
    fn rounds(&self) -> Result<u64, String> {
        let mut b = [0u8; 16];
        self.mem()?
            .read_exact_at(&mut b, self.rounds)
            .map_err(|e| e.to_string())?;
        Ok(u64::from_le_bytes(b[..8].try_into().unwrap())
            + u64::from_le_bytes(b[8..].try_into().unwrap()))
    }

    /// The cost of a call (ns), measured over `window`: each thread makes
    /// `functions` calls a round.
    fn ns_per_call(&self, window: Duration) -> Result<f64, String> {
        let (r0, t0) = (self.rounds()?, Instant::now());
        std::thread::sleep(window);
        let (r1, t1) = (self.rounds()?, Instant::now());
        let calls_per_thread = (r1 - r0) as f64 / 2.0 * self.entries.len() as f64;
        Ok((t1 - t0).as_nanos() as f64 / calls_per_thread.max(1.0))
    }

    /// Whether every function's entry is a nop again: the 5-byte nop, or
    /// the compiler's five 1-byte nops where the attach deferred it.
    fn all_nops(&self) -> Result<bool, String> {
        let mem = self.mem()?;
        let mut b = [0u8; 5];
        for &e in &self.entries {
            mem.read_exact_at(&mut b, e).map_err(|e| e.to_string())?;
            if b != [0x0f, 0x1f, 0x44, 0, 0] && b != [0x90; 5] {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Whether the recording in `dir` holds a record yet.
fn has_record(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.path().extension().is_some_and(|x| x == "dat")
                && e.metadata().is_ok_and(|m| m.len() > 0)
        })
}

/// `shadowgraph record -p PID -d DATA` with `more` options, once it has
/// written its first record (else killed, and an error after 30 s).
fn record_p(me: &Path, pid: u32, data: &Path, more: &[&str]) -> Result<Child, String> {
    let start = Instant::now();
    let mut rec = Command::new(me)
        .args(["record", "-p", &pid.to_string()])
        .args(more)
        .arg("-d")
        .arg(data)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    while !has_record(data) {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = rec.kill();
            return Err(format!("no record 30 s after attaching {}", data.display()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(rec)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn bench(functions: usize, reps: usize) -> Result<ExitCode, String> {
    let dir = std::env::temp_dir().join(format!("shadowgraph-bench-attach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (src, exe) = (dir.join("many.c"), dir.join("many"));
    std::fs::write(&src, target_source(functions)).map_err(|e| e.to_string())?;
    eprintln!("# building a program with {functions} patchable functions …");
    shadowgraph_testkit::cc::compile(
        &[&src],
        &["-O1", "-pthread", "-fpatchable-function-entry=5"],
        &exe,
    )?;
    let nm = Command::new("nm")
        .arg(&exe)
        .output()
        .map_err(|e| format!("nm: {e}"))?;
    let symbols: Vec<(String, u64)> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let _kind = f.next()?;
            Some((f.next()?.to_string(), addr))
        })
        .collect();
    let me = crate::record::shadowgraph_binary()?;
    let window = Duration::from_millis(300);
    let (mut attach, mut detach) = (Vec::new(), Vec::new());
    let (mut before, mut during, mut after) = (Vec::new(), Vec::new(), Vec::new());
    let (mut during2, mut during_p) = (Vec::new(), Vec::new());
    for round in 0..reps {
        let t = Target::start(&exe, &symbols)?;
        before.push(t.ns_per_call(window)?);
        let data: PathBuf = dir.join(format!("r{round}.data"));
        let start = Instant::now();
        let mut rec = record_p(&me, t.child.id(), &data, &[])?;
        attach.push(start.elapsed().as_secs_f64() * 1e3);
        during.push(t.ns_per_call(window)?);
        // A second recording beside the first (its own record -p, user
        // and writer): the two share the fused path.
        // Then one that chooses a ninth of the functions (`-P f1.*`): the
        // others' calls are recorded for the first alone, on the same
        // path.
        let data2: PathBuf = dir.join(format!("r{round}-2.data"));
        for (more, during) in [
            (&[][..], &mut during2),
            (&["-P", "f1.*"][..], &mut during_p),
        ] {
            let mut rec2 = record_p(&me, t.child.id(), &data2, more).inspect_err(|_| {
                let _ = rec.kill();
            })?;
            during.push(t.ns_per_call(window)?);
            // SAFETY: SIGINT to our own child, which ends its recording.
            unsafe { libc::kill(rec2.id() as i32, libc::SIGINT) };
            let _ = rec2.wait();
            let _ = std::fs::remove_dir_all(&data2);
        }
        // SAFETY: as above.
        unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
        let end = Instant::now();
        while !t.all_nops()? {
            if end.elapsed() > Duration::from_secs(30) {
                return Err("sites not back to nops 30 s after the end".into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        detach.push(end.elapsed().as_secs_f64() * 1e3);
        let _ = rec.wait();
        after.push(t.ns_per_call(window)?);
        let _ = std::fs::remove_dir_all(&data);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (b, d, a) = (median(before), median(during), median(after));
    println!(
        "# shadowgraph bench attach: {functions} functions, 2 threads calling them in turn, medians of {reps}"
    );
    println!(
        "attach: command to first record        {:8.1} ms",
        median(attach)
    );
    println!(
        "detach: end of session to every nop    {:8.1} ms",
        median(detach)
    );
    println!("per call before                        {b:8.2} ns");
    println!("per call during (recording)            {d:8.2} ns");
    let d2 = median(during2);
    println!(
        "per call during two recordings         {d2:8.2} ns  (two / one: {:.2}; each its own record -p and writer)",
        d2 / d
    );
    let dp = median(during_p);
    println!(
        "per call during two, the second -P f1.* {dp:8.2} ns  (two / one: {:.2}; it records 1,111 of the functions)",
        dp / d
    );
    println!(
        "per call after                         {a:8.2} ns  (after / before: {:.3})",
        a / b
    );
    Ok(ExitCode::SUCCESS)
}
