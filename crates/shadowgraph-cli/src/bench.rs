//! `shadowgraph bench …`: benchmarks on code built with gcc at run time.
//! Medians of repeated runs, with the untraced baseline measured in the
//! same run, because the machine is noisy.

use shadowgraph::arena::Arena;
use shadowgraph::patch::{self, Edit, WriteMode};
use shadowgraph::process;
use shadowgraph::tramp::{self, SiteCounter};
use shadowgraph::{fgraph, ftrace};
use std::ffi::CString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Subcommand)]
pub enum Which {
    /// Cost of a traced call through the ftrace core: no ops, 1 ops, 1
    /// relevant + 10 irrelevant, 2 and 10 relevant (list function), direct.
    Dispatch {
        /// Calls per timed loop.
        #[arg(long, default_value_t = 20_000_000)]
        calls: i64,
        /// Timed repetitions (the median is reported).
        #[arg(long, default_value_t = 7)]
        reps: usize,
    },
    /// Recording cost side by side with uftrace (if installed): the
    /// recursive fib program untraced, under `shadowgraph record` and under
    /// `uftrace record -P .`; ns per call, bytes per call, start-up, and the
    /// time of replay and report on the result.
    Record {
        /// fib(N): 2·fib(N+1)−1 calls.
        #[arg(long, default_value_t = 30)]
        n: u32,
        /// Rounds, every variant once per round (medians are reported).
        #[arg(long, default_value_t = 9)]
        reps: usize,
    },
    /// One configuration, one untimed loop of `loop_target` calls: for
    /// instruction counting under `valgrind --tool=callgrind
    /// --toggle-collect=loop_target` (deterministic, unlike time).
    Ir {
        /// none | ops | list2 | direct | graph-decline | graph | graph2 |
        /// graph16 | record | record-general | record2; `MODE-tail`: MODE on
        /// `loop_tail` (a traced function tail-calling `target`; count
        /// with --toggle-collect=loop_tail)
        mode: String,
        #[arg(default_value_t = 100_000)]
        calls: i64,
    },
    /// Cost of function-graph tracing (entry + return) with 1 user (fast
    /// path), 2 and 16 users, and 1 user reserving 8 bytes per call.
    Fgraph {
        /// Calls per timed loop.
        #[arg(long, default_value_t = 20_000_000)]
        calls: i64,
        /// Timed repetitions (the median is reported).
        #[arg(long, default_value_t = 7)]
        reps: usize,
    },
    /// (For `bench fgraph`, in a process of its own: the recording path is
    /// chosen once per process.) ns per call recorded into memory, `record`
    /// (fused), `record-general` (callbacks) or `record2` (two recorders).
    #[command(hide = true)]
    MemoryRecord {
        mode: String,
        #[arg(long, default_value_t = 1_000_000)]
        calls: i64,
        #[arg(long, default_value_t = 7)]
        reps: usize,
    },
    /// Cost of a call untraced / through a nop site / patched, and of
    /// flipping 10,000 sites in one batch.
    Patch {
        /// Calls per timed loop.
        #[arg(long, default_value_t = 50_000_000)]
        calls: i64,
        /// Timed repetitions (the median is reported).
        #[arg(long, default_value_t = 7)]
        reps: usize,
        /// Sites flipped per batch.
        #[arg(long, default_value_t = 10_000)]
        sites: usize,
    },
}

pub fn run(which: Which) -> Result<ExitCode, String> {
    match which {
        Which::Patch { calls, reps, sites } => bench_patch(calls, reps.max(1), sites),
        Which::Dispatch { calls, reps } => bench_dispatch(calls, reps.max(1)),
        Which::Fgraph { calls, reps } => bench_fgraph(calls, reps.max(1)),
        Which::Ir { mode, calls } => bench_ir(&mode, calls),
        Which::Record { n, reps } => bench_record(n, reps.max(1)),
        Which::MemoryRecord { mode, calls, reps } => {
            let ns = memory_record_ns(&mode, calls.max(1), reps.max(1))?;
            println!("{ns:.3}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn bench_source(sites: usize) -> String {
    let mut c = String::from(
        "#define KEEP __attribute__((noinline, noipa))\n\
         #define UNPATCHABLE __attribute__((patchable_function_entry(0, 0)))\n\
         UNPATCHABLE KEEP long plain(long x) { return x + 1; }\n\
         KEEP long site(long x) { return x + 1; }\n\
         UNPATCHABLE long loop_plain(long n) { long s = 0; for (long i = 0; i < n; i++) s += plain(i); return s; }\n\
         UNPATCHABLE long loop_site(long n) { long s = 0; for (long i = 0; i < n; i++) s += site(i); return s; }\n",
    );
    for i in 0..sites {
        writeln!(c, "KEEP void f_{i}(void) {{}}").unwrap();
    }
    c.push_str("UNPATCHABLE long call_all(long x) {\n");
    for i in 0..sites {
        writeln!(c, "  f_{i}();").unwrap();
    }
    c.push_str("  return x;\n}\n");
    c
}

type Loop = extern "C" fn(i64) -> i64;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn ns_per_call(f: Loop, calls: i64, reps: usize) -> f64 {
    f(calls / 10); // warm up
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f(std::hint::black_box(calls)));
                t.elapsed().as_nanos() as f64 / calls as f64
            })
            .collect(),
    )
}

/// [`ns_per_call`] of one thread while a second runs the same loop (the
/// per-thread cost when threads trace at once: shared cache lines show).
fn ns_per_call_two_threads(f: Loop, calls: i64, reps: usize) -> f64 {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::black_box(f(std::hint::black_box(calls / 100)));
            }
        });
        let ns = ns_per_call(f, calls, reps);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        ns
    })
}

fn bench_patch(calls: i64, reps: usize, nsites: usize) -> Result<ExitCode, String> {
    eprintln!("# building {nsites} functions with -fpatchable-function-entry=5 …");
    let lib = BenchLib::build("patch", &bench_source(nsites))?;
    let (loop_plain, loop_site, call_all) = (
        lib.func("loop_plain")?,
        lib.func("loop_site")?,
        lib.func("call_all")?,
    );
    let mut modules = process::discover(|p| lib.is(p)).map_err(|e| e.to_string())?;
    let m = modules
        .first_mut()
        .ok_or("benchmark library not found in the process")?;
    let t = Instant::now();
    let norm = process::normalize(std::slice::from_mut(m)).map_err(|e| e.to_string())?;
    let norm_ms = t.elapsed().as_secs_f64() * 1e3;
    let site = m.by_name("site").ok_or("no site for `site`")?.addr;
    let (lo, hi) = m.site_range().unwrap();
    let arena = Arena::near(lo, hi).map_err(|e| e.to_string())?;
    let empty = tramp::empty(arena).map_err(|e| e.to_string())?;
    let counter = SiteCounter::new([site]);
    let counting = counter.trampoline(arena).map_err(|e| e.to_string())?;

    println!("# shadowgraph bench patch: {calls} calls per loop, median of {reps}");
    println!(
        "# normalised {} sleds in {norm_ms:.2} ms (process single-threaded: plain writes)",
        norm.converted
    );
    let base = ns_per_call(loop_plain, calls, reps);
    let nop = ns_per_call(loop_site, calls, reps);
    patch::apply(&mut [Edit::enable(site, empty).unwrap()]).map_err(|e| e.to_string())?;
    let patched = ns_per_call(loop_site, calls, reps);
    patch::apply(&mut [Edit::retarget(site, empty, counting).unwrap()])
        .map_err(|e| e.to_string())?;
    let counted = ns_per_call(loop_site, calls, reps);
    patch::apply(&mut [Edit::disable(site, counting).unwrap()]).map_err(|e| e.to_string())?;
    println!("{:<44} {:>9} {:>10}", "call", "ns/call", "vs untraced");
    for (name, v) in [
        ("untraced (no patchable entry)", base),
        ("nop site (NOP5)", nop),
        ("patched: call to an empty trampoline", patched),
        ("patched: caller trampoline + Rust counter", counted),
    ] {
        println!("{name:<44} {v:>9.2} {:>+10.2}", v - base);
    }

    // Batches of all the f_i sites.
    let fsites: Vec<usize> = m
        .usable()
        .filter(|s| s.function.starts_with("f_"))
        .map(|s| s.addr)
        .collect();
    let on: Vec<Edit> = fsites
        .iter()
        .map(|&a| Edit::enable(a, empty).unwrap())
        .collect();
    let off: Vec<Edit> = fsites
        .iter()
        .map(|&a| Edit::disable(a, empty).unwrap())
        .collect();
    let flip = |reps: usize| -> Result<(f64, f64), String> {
        let (mut ton, mut toff) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            patch::apply(&mut on.clone()).map_err(|e| e.to_string())?;
            ton.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            patch::apply(&mut off.clone()).map_err(|e| e.to_string())?;
            toff.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok((median(ton), median(toff)))
    };
    println!();
    println!(
        "{:<52} {:>9} {:>9}",
        format!("batch of {} sites", fsites.len()),
        "on ms",
        "off ms"
    );
    let reps_flip = reps.max(11);
    let quiet = flip(reps_flip)?;
    println!(
        "{:<52} {:>9.3} {:>9.3}",
        "quiet (mprotect window)", quiet.0, quiet.1
    );
    let stop = Arc::new(AtomicBool::new(false));
    let runner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                call_all(1);
                rounds += 1;
            }
            rounds
        })
    };
    let traps0 = patch::stats().traps_emulated;
    let busy = flip(reps_flip)?;
    stop.store(true, Ordering::Relaxed);
    let rounds = runner.join().map_err(|_| "runner thread panicked")?;
    println!(
        "{:<52} {:>9.3} {:>9.3}",
        "a thread running through them (mprotect window)", busy.0, busy.1
    );
    patch::set_write_mode(WriteMode::ProcMem);
    let procmem = flip(3)?;
    patch::set_write_mode(WriteMode::Mprotect);
    println!(
        "{:<52} {:>9.3} {:>9.3}",
        "quiet (/proc/self/mem pwrite)", procmem.0, procmem.1
    );
    let st = patch::stats();
    println!(
        "# runner made {rounds} passes over all sites; {} int3 traps emulated under load, {} late; \
         cores serialised by {}",
        st.traps_emulated - traps0,
        st.traps_late,
        patch::serialise_method()
    );
    Ok(ExitCode::SUCCESS)
}

fn dlopen(path: &Path) -> Result<*mut libc::c_void, String> {
    let c = CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: valid path string.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
    if h.is_null() {
        Err(format!("dlopen {} failed", path.display()))
    } else {
        Ok(h)
    }
}

const DISPATCH_C: &str = "#define KEEP __attribute__((noinline, noipa))\n\
#define UNPATCHABLE __attribute__((patchable_function_entry(0, 0)))\n\
UNPATCHABLE KEEP long plain(long x) { return x + 1; }\n\
KEEP long target(long x) { return x + 1; }\n\
KEEP long other0(long x) { return x; } KEEP long other1(long x) { return x; }\n\
KEEP long other2(long x) { return x; } KEEP long other3(long x) { return x; }\n\
KEEP long other4(long x) { return x; } KEEP long other5(long x) { return x; }\n\
KEEP long other6(long x) { return x; } KEEP long other7(long x) { return x; }\n\
KEEP long other8(long x) { return x; } KEEP long other9(long x) { return x; }\n\
UNPATCHABLE long loop_plain(long n) { long s = 0; for (long i = 0; i < n; i++) s += plain(i); return s; }\n\
UNPATCHABLE long loop_target(long n) { long s = 0; for (long i = 0; i < n; i++) s += target(i); return s; }\n\
KEEP long tail_target(long x) { return target(x + 1); }\n\
UNPATCHABLE long loop_tail(long n) { long s = 0; for (long i = 0; i < n; i++) s += tail_target(i); return s; }\n";

fn empty_cb(_ip: usize, _parent: usize, _ops: &ftrace::Ops, _regs: &mut ftrace::Regs) {}

/// The table of a benchmark: ns per call and the difference to `base`.
fn print_rows(rows: &[(String, f64)], base: f64) {
    println!(
        "{:<44} {:>9} {:>12}",
        "traced call", "ns/call", "vs untraced"
    );
    for (name, v) in rows {
        println!("{name:<44} {v:>9.2} {:>+12.2}", v - base);
    }
}

/// An empty direct-call target (`ret`) within reach of the site of `target`.
fn empty_target() -> Result<usize, String> {
    let site = ftrace::site_by_name("target").ok_or("no site for `target`")?;
    let arena = Arena::near(site.addr, site.addr + 8).map_err(|e| e.to_string())?;
    tramp::empty(arena).map_err(|e| e.to_string())
}

/// A benchmark library built with gcc and loaded into this process.
struct BenchLib {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
    handle: *mut libc::c_void,
}

impl BenchLib {
    fn build(name: &str, source: &str) -> Result<BenchLib, String> {
        let dir =
            std::env::temp_dir().join(format!("shadowgraph-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let src = dir.join(format!("{name}.c"));
        let path = dir.join(format!("lib{name}.so"));
        std::fs::write(&src, source).map_err(|e| format!("{}: {e}", src.display()))?;
        let flags = ["-O2", "-fPIC", "-shared", "-fpatchable-function-entry=5"];
        shadowgraph::cc::compile(&[&src], &flags, &path)?;
        let handle = dlopen(&path)?;
        Ok(BenchLib { dir, path, handle })
    }

    /// A `long f(long)` function of the library.
    fn func(&self, name: &str) -> Result<Loop, String> {
        let c = CString::new(name).unwrap();
        // SAFETY: handle is open; c is NUL-terminated.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            return Err(format!("{}: no symbol {name}", self.path.display()));
        }
        // SAFETY: the benchmark C functions have signature long(long).
        Ok(unsafe { std::mem::transmute::<*mut libc::c_void, Loop>(p) })
    }

    /// Whether `p` names this library.
    fn is(&self, p: &Path) -> bool {
        std::fs::canonicalize(p).ok() == std::fs::canonicalize(&self.path).ok()
    }
}

impl Drop for BenchLib {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The one-function benchmark library, its sites under the ftrace core.
fn load_dispatch_lib() -> Result<(Loop, Loop, BenchLib), String> {
    let lib = BenchLib::build("dispatch", DISPATCH_C)?;
    let (loop_plain, loop_target) = (lib.func("loop_plain")?, lib.func("loop_target")?);
    ftrace::add_loaded(|p| !lib.is(p)).map_err(|e| e.to_string())?;
    Ok((loop_plain, loop_target, lib))
}

fn bench_dispatch(calls: i64, reps: usize) -> Result<ExitCode, String> {
    let (loop_plain, loop_target, _lib) = load_dispatch_lib()?;
    let filter =
        |pats: &[&str]| ftrace::FilterSet::with_patterns(pats, &[]).map_err(|e| e.to_string());
    let ops = |pats: &[&str], flags: u32| -> Result<Arc<ftrace::Ops>, String> {
        Ok(ftrace::Ops::new(empty_cb, flags, filter(pats)?))
    };
    let reg = |o: &Arc<ftrace::Ops>| ftrace::register(o).map_err(|e| e.to_string());
    let unreg = |o: &Arc<ftrace::Ops>| ftrace::unregister(o).map_err(|e| e.to_string());
    let measure = || ns_per_call(loop_target, calls, reps);

    println!(
        "# shadowgraph bench dispatch: {calls} calls per loop, median of {reps}; empty callbacks"
    );
    let base = ns_per_call(loop_plain, calls, reps);
    let mut rows: Vec<(String, f64)> = vec![("untraced function (no site)".into(), base)];
    rows.push(("no ops (NOP5 site)".into(), measure()));

    let one = ops(&["target"], 0)?;
    reg(&one)?;
    rows.push(("1 ops (its own trampoline)".into(), measure()));
    let others: Vec<Arc<ftrace::Ops>> = (0..10)
        .map(|i| ops(&[&format!("other{i}")], 0))
        .collect::<Result<_, _>>()?;
    for o in &others {
        reg(o)?;
    }
    rows.push(("1 relevant ops + 10 on other functions".into(), measure()));
    for o in &others {
        unreg(o)?;
    }
    unreg(&one)?;

    let solo = ops(&["target"], ftrace::NO_TRAMP)?;
    reg(&solo)?;
    rows.push(("1 ops without trampoline (shared caller)".into(), measure()));
    unreg(&solo)?;

    let many: Vec<Arc<ftrace::Ops>> = (0..10)
        .map(|_| ops(&["target"], 0))
        .collect::<Result<_, _>>()?;
    for o in &many[..2] {
        reg(o)?;
    }
    rows.push(("2 relevant ops (list function)".into(), measure()));
    for o in &many[2..] {
        reg(o)?;
    }
    rows.push(("10 relevant ops (list function)".into(), measure()));
    for o in &many {
        unreg(o)?;
    }

    let ret = empty_target()?;
    let direct = ftrace::Ops::new_direct(filter(&["target"])?);
    ftrace::register_direct(&direct, ret).map_err(|e| e.to_string())?;
    rows.push(("direct call (pad to an empty target)".into(), measure()));
    let probe = ops(&["target"], 0)?;
    reg(&probe)?;
    rows.push(("direct + 1 ops (regs caller, list, jump)".into(), measure()));
    unreg(&probe)?;
    unreg(&direct)?;
    rows.push(("all unregistered (NOP5 again)".into(), measure()));

    print_rows(&rows, base);
    Ok(ExitCode::SUCCESS)
}

fn accept_all(_e: &fgraph::GraphEntry, _u: &fgraph::GraphUser, _r: &mut ftrace::Regs) -> bool {
    true
}

fn decline(_e: &fgraph::GraphEntry, _u: &fgraph::GraphUser, _r: &mut ftrace::Regs) -> bool {
    false
}

fn ignore_return(_r: &fgraph::GraphReturn, _u: &fgraph::GraphUser, _regs: &fgraph::RetRegs) {}

fn reserve_entry(e: &fgraph::GraphEntry, u: &fgraph::GraphUser, _r: &mut ftrace::Regs) -> bool {
    match u.reserve(8) {
        Some(p) => {
            // SAFETY: 8 reserved, word-aligned bytes.
            unsafe { (p as *mut u64).write(e.func as u64) };
            true
        }
        None => false,
    }
}

fn retrieve_return(_r: &fgraph::GraphReturn, u: &fgraph::GraphUser, _regs: &fgraph::RetRegs) {
    if let Some((p, _)) = u.retrieve() {
        // SAFETY: our 8 bytes in this frame.
        std::hint::black_box(unsafe { (p as *const u64).read() });
    }
}

fn timed_entry(_e: &fgraph::GraphEntry, u: &fgraph::GraphUser, _r: &mut ftrace::Regs) -> bool {
    match u.reserve(8) {
        Some(p) => {
            // SAFETY: 8 reserved, word-aligned bytes.
            unsafe { (p as *mut u64).write(shadowgraph::record::clock::now()) };
            true
        }
        None => false,
    }
}

fn timed_return(_r: &fgraph::GraphReturn, u: &fgraph::GraphUser, _regs: &fgraph::RetRegs) {
    if let Some((p, _)) = u.retrieve() {
        // SAFETY: our 8 bytes in this frame.
        let start = unsafe { (p as *const u64).read() };
        std::hint::black_box(shadowgraph::record::clock::now().wrapping_sub(start));
    }
}

/// What one timestamp costs on this machine, for the tables' readers.
fn timestamp_line(reps: usize) -> String {
    let clock = if shadowgraph::record::clock::init() {
        "rdtsc"
    } else {
        "clock_gettime"
    };
    let mut line = format!(
        "# one timestamp ({clock}) costs {:.2} ns back to back",
        timestamp_ns(reps)
    );
    if clock == "rdtsc" {
        line += &format!(
            ", {:.2} ns beside independent work; an instruction after one waits for it and costs {:.3} ns (100 independent moves)",
            tsc_in_flow_ns(reps),
            after_tsc_ns(reps)
        );
    }
    line + " on this machine (a recorded call takes two)"
}

/// What an instruction costs right after an `rdtsc`: (a read followed by
/// 100 independent register moves − a read alone) / 100. Where the read
/// lets nothing after it start before it is done (seen on Intel), each
/// such instruction costs its share of the core's issue width: the budget
/// of a recorder's own work between its two reads.
fn after_tsc_ns(reps: usize) -> f64 {
    macro_rules! moves {
        () => {
            "mov r8d, 1\nmov r9d, 2\nmov r10d, 3\nmov r11d, 4\nmov ecx, 5\n"
        };
    }
    macro_rules! moves25 {
        () => {
            concat!(moves!(), moves!(), moves!(), moves!(), moves!())
        };
    }
    const N: u32 = 2_000_000;
    let time = |with_moves: bool| {
        median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..N {
                        if with_moves {
                            // SAFETY: rdtsc and register moves only.
                            unsafe {
                                std::arch::asm!(
                                    "rdtsc",
                                    moves25!(), moves25!(), moves25!(), moves25!(),
                                    out("rax") _, out("rdx") _, out("rcx") _, out("r8") _,
                                    out("r9") _, out("r10") _, out("r11") _,
                                    options(nostack, nomem),
                                );
                            }
                        } else {
                            // SAFETY: as above, without the moves.
                            unsafe {
                                std::arch::asm!(
                                    "rdtsc",
                                    out("rax") _, out("rdx") _,
                                    options(nostack, nomem),
                                );
                            }
                        }
                    }
                    t.elapsed().as_nanos() as f64 / N as f64
                })
                .collect(),
        )
    };
    let plain = time(false);
    ((time(true) - plain) / 100.0).max(0.0)
}

/// What one `rdtsc` adds to a block of work that does not depend on it (32
/// register adds and 8 stores): near its back-to-back cost where the CPU
/// cannot overlap it with other work (seen on Intel), far less where it
/// can (seen on AMD). Said beside the back-to-back cost so that a table's
/// reader knows which of the two a traced call pays.
fn tsc_in_flow_ns(reps: usize) -> f64 {
    macro_rules! work {
        () => {
            concat!(
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "mov [{b}], r8\nmov [{b} + 8], r9\n",
                "mov [{b} + 16], r10\nmov [{b} + 24], r11\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "mov [{b} + 32], r8\nmov [{b} + 40], r9\n",
                "mov [{b} + 48], r10\nmov [{b} + 56], r11\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
            )
        };
    }
    const N: u32 = 2_000_000;
    let mut out = [0u64; 9];
    let mut time = |tsc: bool| {
        let buf = out.as_mut_ptr();
        median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..N {
                        if tsc {
                            // SAFETY: rdtsc and register arithmetic; the
                            // stores go to `out` (9 words), through `b`.
                            unsafe {
                                std::arch::asm!(
                                    "rdtsc", "mov [{b} + 64], rax", work!(),
                                    b = in(reg) buf,
                                    out("rax") _, out("rdx") _, out("r8") _,
                                    out("r9") _, out("r10") _, out("r11") _,
                                    options(nostack),
                                );
                            }
                        } else {
                            // SAFETY: as above, without the rdtsc.
                            unsafe {
                                std::arch::asm!(
                                    work!(),
                                    b = in(reg) buf,
                                    out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                                    options(nostack),
                                );
                            }
                        }
                    }
                    t.elapsed().as_nanos() as f64 / N as f64
                })
                .collect(),
        )
    };
    let plain = time(false);
    (time(true) - plain).max(0.0)
}

/// Nanoseconds per timestamp of the recording clock (`rdtsc` when the TSC
/// is usable), read back to back: the cost every recorded event pays twice.
pub fn timestamp_ns(reps: usize) -> f64 {
    shadowgraph::record::clock::init();
    const N: u32 = 2_000_000;
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                let mut s = 0u64;
                for _ in 0..N {
                    s = s.wrapping_add(shadowgraph::record::clock::now());
                }
                std::hint::black_box(s);
                t.elapsed().as_nanos() as f64 / N as f64
            })
            .collect(),
    )
}

// The floor of function-graph tracing, for the table's readers: a shadow
// stack push with return hijack at entry and a pop at return, and nothing
// else (no callbacks, no saved registers, one thread: a global stack).
//
// Register contract: `bench_floor_entry` is reached through a direct-call
// pad from a site: [rsp] = site+5, [rsp+8] = R. It saves rax around its
// work and clobbers only r11 (free at a function entry). `bench_floor_return`
// is reached by the traced function's `ret`; rax/rdx/xmm0/xmm1 hold its
// result and rcx/r11 are dead there.
std::arch::global_asm!(
    ".pushsection .text.shadowgraph_bench_floor,\"ax\",@progbits",
    "bench_floor_entry:",
    "endbr64",
    "push rax",
    "mov r11, [rip + {top}]",
    "mov rax, [rsp + 16]",
    "mov [r11], rax",
    "add r11, 8",
    "mov [rip + {top}], r11",
    "lea rax, [rip + bench_floor_return]",
    "mov [rsp + 16], rax",
    "pop rax",
    "ret",
    "bench_floor_return:",
    "endbr64",
    "mov rcx, [rip + {top}]",
    "sub rcx, 8",
    "mov [rip + {top}], rcx",
    "jmp [rcx]",
    ".popsection",
    top = sym FLOOR_TOP,
);

extern "C" {
    fn bench_floor_entry();
}

// The floors of the two ways a return comes back to the tracer, as models
// in assembly, without sites or the core: a loop calling a function that
// adds 1 to rax, (a) plain, (b) whose entry calls a trampoline that pushes
// the return address on a global shadow stack and hijacks it (its `ret`
// then mispredicts, the return-stack predictor expecting the caller), and
// (c) whose entry jumps to a stub that pushes it, pops it off the stack and
// calls the body, then pops the shadow frame and returns with `ret` (every
// return predicted) — what site stubs do (tramp.rs), and (d) the same stub
// that also reads the TSC at entry and at return and stores a 16-byte
// record {time, word} each time into one ring in memory: the least that
// any recorder of call graphs with durations does, with no thread lookup,
// no guard, no function or depth in the word, nothing for signals. Register
// contract: `bench_model_loop_*` is called as `extern "C" fn(n: i64) ->
// i64`; the models use rax, rcx, rdx, r10, r11, the shadow stack at
// FLOOR_TOP and MODEL_RING.
std::arch::global_asm!(
    ".pushsection .text.shadowgraph_bench_model,\"ax\",@progbits",
    ".p2align 4",
    "bench_model_plain:",
    "nop dword ptr [rax + rax]",
    "add rax, 1",
    "ret",
    ".p2align 4",
    "bench_model_hijacked:",
    "call bench_model_hijack_entry",
    "add rax, 1",
    "ret",
    ".p2align 4",
    "bench_model_stubbed:",
    "jmp bench_model_stub",
    "bench_model_stubbed_body:",
    "add rax, 1",
    "ret",
    ".p2align 4",
    "bench_model_hijack_entry:",
    "mov r11, [rip + {top}]",
    "mov r10, [rsp + 8]",
    "mov [r11], r10",
    "add r11, 8",
    "mov [rip + {top}], r11",
    "lea r10, [rip + bench_model_hijack_return]",
    "mov [rsp + 8], r10",
    "ret",
    "bench_model_hijack_return:",
    "mov rcx, [rip + {top}]",
    "sub rcx, 8",
    "mov [rip + {top}], rcx",
    "jmp [rcx]",
    ".p2align 4",
    "bench_model_stub:",
    model_shadow_push!(),
    "call bench_model_stubbed_body",
    model_shadow_pop_ret!(),
    ".p2align 4",
    "bench_model_recorded:",
    "jmp bench_model_recording_stub",
    "bench_model_recorded_body:",
    "add rax, 1",
    "ret",
    ".p2align 4",
    "bench_model_recording_stub:",
    model_record!("1"),
    model_shadow_push!(),
    "call bench_model_recorded_body",
    model_record!("2"),
    model_shadow_pop_ret!(),
    ".p2align 4",
    ".globl bench_model_loop_plain",
    "bench_model_loop_plain:",
    "push rbx",
    "mov rbx, rdi",
    "xor eax, eax",
    "2: call bench_model_plain",
    "dec rbx",
    "jnz 2b",
    "pop rbx",
    "ret",
    ".p2align 4",
    ".globl bench_model_loop_hijacked",
    "bench_model_loop_hijacked:",
    "push rbx",
    "mov rbx, rdi",
    "xor eax, eax",
    "2: call bench_model_hijacked",
    "dec rbx",
    "jnz 2b",
    "pop rbx",
    "ret",
    ".p2align 4",
    ".globl bench_model_loop_stubbed",
    "bench_model_loop_stubbed:",
    "push rbx",
    "mov rbx, rdi",
    "xor eax, eax",
    "2: call bench_model_stubbed",
    "dec rbx",
    "jnz 2b",
    "pop rbx",
    "ret",
    ".p2align 4",
    ".globl bench_model_loop_recorded",
    "bench_model_loop_recorded:",
    "push rbx",
    "mov rbx, rdi",
    "xor eax, eax",
    "2: call bench_model_recorded",
    "dec rbx",
    "jnz 2b",
    "pop rbx",
    "ret",
    ".popsection",
    top = sym FLOOR_TOP,
    ring = sym MODEL_RING,
    ring_pos = sym MODEL_RING_POS,
    ring_mask = const MODEL_RING_BYTES - 1,
);

// The stub models' shadow push of R (popped off the stack, so that the
// stub's call of the body reuses its slot); r10, r11 clobbered.
macro_rules! model_shadow_push {
    () => {
        "mov r11, [rip + {top}]\npop r10\nmov [r11], r10\nadd r11, 8\nmov [rip + {top}], r11\n"
    };
}
use model_shadow_push;

// The stub models' shadow pop, returning to R by `ret` (predicted); rcx
// clobbered.
macro_rules! model_shadow_pop_ret {
    () => {
        "mov rcx, [rip + {top}]\nsub rcx, 8\nmov [rip + {top}], rcx\npush qword ptr [rcx]\nret\n"
    };
}
use model_shadow_pop_ret;

// Model (d)'s record: {TSC, $word} at the next 16 bytes of MODEL_RING,
// wrapping; rax and rdx saved around it, r11 clobbered.
macro_rules! model_record {
    ($word:literal) => {
        concat!(
            "push rax\n",
            "push rdx\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rdx, rax\n",
            "mov r11, [rip + {ring_pos}]\n",
            "lea rax, [rip + {ring}]\n",
            "mov [rax + r11], rdx\n",
            "mov qword ptr [rax + r11 + 8], ",
            $word,
            "\n",
            "add r11, 16\n",
            "and r11, {ring_mask}\n",
            "mov [rip + {ring_pos}], r11\n",
            "pop rdx\n",
            "pop rax\n",
        )
    };
}
use model_record;

/// Model (d)'s ring: 1 MiB, as cache-resident as a drained ring can be.
const MODEL_RING_BYTES: usize = 1 << 20;
#[repr(align(64))]
#[allow(dead_code)] // written only by the model's assembly
struct ModelRing([u8; MODEL_RING_BYTES]);
static mut MODEL_RING: ModelRing = ModelRing([0; MODEL_RING_BYTES]);
static mut MODEL_RING_POS: usize = 0;

extern "C" {
    fn bench_model_loop_recorded(n: i64) -> i64;
    fn bench_model_loop_plain(n: i64) -> i64;
    fn bench_model_loop_hijacked(n: i64) -> i64;
    fn bench_model_loop_stubbed(n: i64) -> i64;
}

/// ns per call of the four models (plain, hijacked, stubbed, recorded).
fn model_floors(calls: i64, reps: usize) -> [f64; 4] {
    let stack: &'static mut [u64] = Box::leak(vec![0u64; 64].into_boxed_slice());
    // SAFETY: set before the models run; only this thread runs them, one
    // frame deep.
    unsafe { FLOOR_TOP = stack.as_mut_ptr() };
    let time = |f: unsafe extern "C" fn(i64) -> i64| {
        // SAFETY: the models follow the C ABI (see their contract).
        unsafe { f(calls / 10) };
        median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    // SAFETY: as above.
                    std::hint::black_box(unsafe { f(calls) });
                    t.elapsed().as_nanos() as f64 / calls as f64
                })
                .collect(),
        )
    };
    [
        time(bench_model_loop_plain),
        time(bench_model_loop_hijacked),
        time(bench_model_loop_stubbed),
        time(bench_model_loop_recorded),
    ]
}

/// What model (d) adds to a plain call: no recorder that times each call's
/// entry and exit by the TSC can cost less on this machine.
fn recorder_floor_ns(reps: usize) -> f64 {
    let [plain, _, _, recorded] = model_floors(20_000_000, reps);
    recorded - plain
}

/// Top of the floor's shadow stack (one thread only).
static mut FLOOR_TOP: *mut u64 = std::ptr::null_mut();

/// ns per call of the floor (see `bench_floor_entry`) on `target`.
fn floor_ns(loop_target: Loop, calls: i64, reps: usize) -> Result<f64, String> {
    let stack: &'static mut [u64] = Box::leak(vec![0u64; 4096].into_boxed_slice());
    // SAFETY: set before any site calls the floor; only this thread runs it.
    unsafe { FLOOR_TOP = stack.as_mut_ptr() };
    let filter = ftrace::FilterSet::with_patterns(&["target"], &[]).map_err(|e| e.to_string())?;
    let d = ftrace::Ops::new_direct(filter);
    ftrace::register_direct(&d, bench_floor_entry as *const () as usize)
        .map_err(|e| e.to_string())?;
    let ns = ns_per_call(loop_target, calls, reps);
    ftrace::unregister(&d).map_err(|e| e.to_string())?;
    Ok(ns)
}

fn bench_fgraph(calls: i64, reps: usize) -> Result<ExitCode, String> {
    fgraph::set_site_stubs(std::env::var_os("SHADOWGRAPH_NO_SITE_STUBS").is_none());
    let (loop_plain, loop_target, _lib) = load_dispatch_lib()?;
    let filter = || ftrace::FilterSet::with_patterns(&["target"], &[]).map_err(|e| e.to_string());
    let user =
        |e: fgraph::EntryFn, r: fgraph::ReturnFn| -> Result<Arc<fgraph::GraphUser>, String> {
            Ok(fgraph::GraphUser::new(e, r, filter()?, 0))
        };
    let reg = |u: &Arc<fgraph::GraphUser>| fgraph::register_graph(u).map_err(|e| e.to_string());
    let unreg = |u: &Arc<fgraph::GraphUser>| fgraph::unregister_graph(u).map_err(|e| e.to_string());
    let measure = || ns_per_call(loop_target, calls, reps);
    println!("# shadowgraph bench fgraph: {calls} calls per loop, median of {reps}; entry + return, empty callbacks, no timestamps");
    let base = ns_per_call(loop_plain, calls, reps);
    let mut rows: Vec<(String, f64)> = vec![("untraced function (no site)".into(), base)];
    let users: Vec<_> = (0..16)
        .map(|_| user(accept_all, ignore_return))
        .collect::<Result<_, _>>()?;
    reg(&users[0])?;
    if !fgraph::fast_path_active() {
        return Err("fast path not active with one user".into());
    }
    rows.push(("1 user (fast path)".into(), measure()));
    rows.push((
        "1 user, 2 threads at once (each)".into(),
        ns_per_call_two_threads(loop_target, calls, reps),
    ));
    reg(&users[1])?;
    rows.push(("2 users (loop)".into(), measure()));
    for u in &users[2..] {
        reg(u)?;
    }
    rows.push(("16 users (loop)".into(), measure()));
    for u in &users {
        unreg(u)?;
    }
    let d = user(decline, ignore_return)?;
    reg(&d)?;
    rows.push(("1 user declining every call (no hijack)".into(), measure()));
    unreg(&d)?;
    let r = user(reserve_entry, retrieve_return)?;
    reg(&r)?;
    rows.push(("1 user reserving 8 bytes per call".into(), measure()));
    unreg(&r)?;
    rows.push((
        "floor: push + hijack + pop, nothing else".into(),
        floor_ns(loop_target, calls, reps)?,
    ));
    shadowgraph::record::clock::init();
    let timed = user(timed_entry, timed_return)?;
    reg(&timed)?;
    rows.push(("1 user timing each call (2 timestamps)".into(), measure()));
    unreg(&timed)?;
    // Recording into memory, each path in a process of its own (chosen
    // before the first user registers).
    for (label, mode) in [
        ("record in memory, fused (entry+exit records)", "record"),
        (
            "record in memory, callbacks (general path)",
            "record-general",
        ),
        ("record in memory, 2 recorders (general path)", "record2"),
    ] {
        rows.push((label.into(), memory_record_in_child(mode, calls, reps)?));
    }
    rows.push(("all unregistered (NOP5 again)".into(), measure()));
    print_rows(&rows, base);
    let one = rows[1].1;
    let floor = rows
        .iter()
        .find(|(name, _)| name.starts_with("floor"))
        .map_or(f64::NAN, |r| r.1);
    println!(
        "# 1 user / floor: {:.2}× per call, {:.2}× over untraced (the aim: within 1.5×)",
        one / floor,
        (one - base) / (floor - base)
    );
    let [plain, hijacked, stubbed, recorded] = model_floors(calls, reps);
    println!(
        "# floors, asm models (no site, no core): plain call {plain:.2} ns; \
         push + hijack + pop +{:.2}; push + pop through a stub's call +{:.2}; \
         the same + two timestamped records in memory +{:.2}",
        hijacked - plain,
        stubbed - plain,
        recorded - plain
    );
    println!("{}", timestamp_line(reps));
    Ok(ExitCode::SUCCESS)
}

/// Records of this process go to rings in its memory, drained by their
/// thread into `dir` (none inside a loop of up to `calls` calls), for
/// `instances` recorders (the others into subdirectories).
fn start_memory_recording(dir: &Path, calls: i64, instances: usize) -> Result<(), String> {
    use shadowgraph::record::writer;
    shadowgraph::record::clock::init();
    writer::set_ring_bytes((calls as u64 * 2 * 16 + (1 << 20)).next_power_of_two());
    for i in 0..instances {
        let d = if i == 0 {
            dir.to_owned()
        } else {
            dir.join(i.to_string())
        };
        writer::start(i, &d, None).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The recorders of bench mode `mode` (`record`: fused; `record-general`:
/// through fgraph's callbacks; `record2`: two of those), registered.
fn memory_recorders(
    mode: &str,
    dir: &Path,
    calls: i64,
    filter: impl Fn() -> Result<Arc<ftrace::FilterSet>, String>,
) -> Result<Vec<Arc<fgraph::GraphUser>>, String> {
    let n = if mode == "record2" { 2 } else { 1 };
    start_memory_recording(dir, calls, n)?;
    (0..n)
        .map(|i| {
            let u = recorder_of(filter()?, mode == "record", i)?;
            fgraph::register_graph(&u).map_err(|e| e.to_string())?;
            Ok(u)
        })
        .collect()
}

/// The plain recorder (instance 0): an entry and an exit record per call,
/// by callbacks, or by the fused path in assembly when `fused`.
/// Several (instance `inst`, not fused) share each call's timestamps, as
/// the agent's recorders do.
fn recorder_of(
    filter: Arc<ftrace::FilterSet>,
    fused: bool,
    inst: usize,
) -> Result<Arc<fgraph::GraphUser>, String> {
    use shadowgraph::record::writer;
    use shadowgraph_data::format::Kind;
    fn entry(e: &fgraph::GraphEntry, u: &fgraph::GraphUser, _: &mut ftrace::Regs) -> bool {
        let t = fgraph::event_time();
        writer::emit_shared(u.private, Kind::Entry, e.depth as u16, e.func as u64, t);
        true
    }
    fn ret(r: &fgraph::GraphReturn, u: &fgraph::GraphUser, _: &fgraph::RetRegs) {
        let t = fgraph::event_time();
        writer::emit_shared(u.private, Kind::Exit, r.depth as u16, r.func as u64, t);
    }
    let u = fgraph::GraphUser::new(entry, ret, filter, inst);
    if fused && !shadowgraph::record::fused::attach(&u, inst, 0) {
        return Err("the fused path needs the TSC clock".into());
    }
    Ok(u)
}

/// `bench memory-record MODE` run by this binary: its ns per call.
fn memory_record_in_child(mode: &str, calls: i64, reps: usize) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate myself: {e}"))?;
    let o = std::process::Command::new(exe)
        .args(["bench", "memory-record", mode])
        .arg(format!("--calls={}", calls.min(1_000_000)))
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

/// ns per call of the bench loop recorded into memory by the fused path
/// (`record`), the callbacks (`record-general`) or two recorders'
/// callbacks (`record2`): the thread's rings, big enough for one loop, are
/// written out between loops (untimed), to a directory in /dev/shm removed
/// afterwards.
fn memory_record_ns(mode: &str, calls: i64, reps: usize) -> Result<f64, String> {
    if !["record", "record-general", "record2"].contains(&mode) {
        return Err(format!(
            "unknown mode `{mode}` (record, record-general or record2)"
        ));
    }
    fgraph::set_site_stubs(std::env::var_os("SHADOWGRAPH_NO_SITE_STUBS").is_none());
    let (_, loop_target, _lib) = load_dispatch_lib()?;
    let filter = || ftrace::FilterSet::with_patterns(&["target"], &[]).map_err(|e| e.to_string());
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
    .join(format!("shadowgraph-bench-memory-{}", std::process::id()));
    let _users = memory_recorders(mode, &dir, calls, filter)?;
    let ns = ns_per_recorded_call(loop_target, calls, reps);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ns)
}

/// [`ns_per_call`] of a recording loop: the thread's ring, big enough for
/// one loop, is written out between loops (untimed).
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

fn bench_ir(mode: &str, calls: i64) -> Result<ExitCode, String> {
    let (_, loop_target, lib) = load_dispatch_lib()?;
    // `MODE-tail`: MODE on `loop_tail`, whose traced `tail_target` ends in
    // a tail call (a jump) to the traced `target`: two calls per iteration,
    // the second in the first's return slot.
    let (mode, looped, pats): (&str, Loop, &[&str]) = match mode.strip_suffix("-tail") {
        Some(m) => (m, lib.func("loop_tail")?, &["target", "tail_target"]),
        None => (mode, loop_target, &["target"]),
    };
    let filter = || ftrace::FilterSet::with_patterns(pats, &[]).map_err(|e| e.to_string());
    let mut keep_ops = Vec::new();
    let mut keep_users = Vec::new();
    let mut keep_dir = None;
    match mode {
        "none" => {}
        "ops" | "list2" => {
            for _ in 0..if mode == "ops" { 1 } else { 2 } {
                let o = ftrace::Ops::new(empty_cb, 0, filter()?);
                ftrace::register(&o).map_err(|e| e.to_string())?;
                keep_ops.push(o);
            }
        }
        "direct" => {
            let ret = empty_target()?;
            let d = ftrace::Ops::new_direct(filter()?);
            ftrace::register_direct(&d, ret).map_err(|e| e.to_string())?;
            keep_ops.push(d);
        }
        "graph" | "graph-decline" => {
            let entry: fgraph::EntryFn = if mode == "graph" { accept_all } else { decline };
            let u = fgraph::GraphUser::new(entry, ignore_return, filter()?, 0);
            fgraph::register_graph(&u).map_err(|e| e.to_string())?;
            keep_users.push(u);
        }
        "graph2" | "graph16" => {
            for _ in 0..if mode == "graph2" { 2 } else { 16 } {
                let u = fgraph::GraphUser::new(accept_all, ignore_return, filter()?, 0);
                fgraph::register_graph(&u).map_err(|e| e.to_string())?;
                keep_users.push(u);
            }
        }
        "record" | "record-general" | "record2" => {
            // The plain recorder into a ring of this process big enough for
            // the whole loop (no drain inside it), fused unless told not;
            // or two of them.
            let dir = std::env::temp_dir().join(format!("shadowgraph-ir-{}", std::process::id()));
            keep_users.extend(memory_recorders(mode, &dir, calls, filter)?);
            keep_dir = Some(dir);
        }
        other => return Err(format!("unknown mode `{other}`")),
    }
    std::hint::black_box(looped(std::hint::black_box(calls)));
    if let Some(d) = keep_dir {
        let _ = std::fs::remove_dir_all(d);
    }
    println!("{mode}: {calls} calls of target done");
    Ok(ExitCode::SUCCESS)
}

const FIB_C: &str = "#include <stdio.h>\n#include <stdlib.h>\n\
__attribute__((noinline)) int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
int main(int argc, char **argv) { printf(\"%d\\n\", fib(argc > 1 ? atoi(argv[1]) : 30)); return 0; }\n";

/// Median wall time of `cmd` (stdout and stderr discarded), in seconds.
fn time_cmd(reps: usize, mut cmd: impl FnMut() -> std::process::Command) -> Result<f64, String> {
    let mut v = Vec::new();
    for _ in 0..reps {
        let mut c = cmd();
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let t = Instant::now();
        let st = c.status().map_err(|e| format!("cannot run {c:?}: {e}"))?;
        if !st.success() {
            return Err(format!("{c:?} failed: {st}"));
        }
        v.push(t.elapsed().as_secs_f64());
    }
    Ok(median(v))
}

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

fn bench_record(n: u32, reps: usize) -> Result<ExitCode, String> {
    let dir = std::env::temp_dir().join(format!("shadowgraph-bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let src = dir.join("fib.c");
    let exe = dir.join("fib");
    std::fs::write(&src, FIB_C).map_err(|e| e.to_string())?;
    shadowgraph::cc::compile(
        &[&src],
        &[
            "-O2",
            "-fno-optimize-sibling-calls",
            "-fpatchable-function-entry=5",
        ],
        &exe,
    )?;
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..=n {
        (a, b) = (b, a + b);
    }
    let calls = 2 * a - 1 + 1; // fib calls + main
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
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
    let (sg_data, uf_data) = (data_dir.join("sg.data"), data_dir.join("uf.data"));
    let arg = n.to_string();
    let run_plain = |k: &str| {
        let mut c = std::process::Command::new(&exe);
        c.arg(k);
        c
    };
    // `off`: the environment variable (and value) that turns a part of the
    // path off. `opts`: more options of `record`.
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
        Box::new(|| run_sg_with(&arg, Some(("SHADOWGRAPH_NO_FUSED", "1")), &[])),
        Box::new(|| run_sg_with(&arg, Some(("SHADOWGRAPH_NO_SITE_STUBS", "1")), &[])),
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
    ];
    let uf_at = runs.len();
    if uftrace {
        runs.push(Box::new(|| run_uf(&arg)));
        runs.push(Box::new(|| run_uf("1")));
        runs.push(Box::new(|| run_uf_with(&arg, &["-t", "1us"])));
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
    let sg_profile = med(9);
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
        "{:<34} {sg_timed:>9.3} {:>12.1}",
        "  (-t 1us: time filter)",
        per_call(sg_timed, sg_start)
    );
    println!(
        "{:<34} {sg_profile:>9.3} {:>12.1}",
        "  (--tracer profile: no records)",
        per_call(sg_profile, sg_start)
    );
    if uftrace {
        let (uf, uf_start, uf_timed) = (med(10), med(11), med(12));
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
        let ratios: Vec<f64> = times[1]
            .iter()
            .zip(&times[10])
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
            .zip(&times[12])
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
        let per_instr = if shadowgraph::record::clock::init() {
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
    println!("{}", timestamp_line(reps));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&data_dir);
    Ok(ExitCode::SUCCESS)
}
