//! What the benchmarks share: the timing loops and the benchmark library
//! built with gcc and loaded into this process.

use shadowgraph::arena::Arena;
use shadowgraph::{ftrace, tramp};
use std::ffi::CString;
use std::path::Path;
use std::time::Instant;

pub type Loop = extern "C" fn(i64) -> i64;

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub fn ns_per_call(f: Loop, calls: i64, reps: usize) -> f64 {
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
pub fn ns_per_call_two_threads(f: Loop, calls: i64, reps: usize) -> f64 {
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

pub const DISPATCH_C: &str = "#define KEEP __attribute__((noinline, noipa))\n\
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

pub extern "C" fn empty_cb(
    _ip: usize,
    _parent: usize,
    _ops: &ftrace::Ops,
    _regs: &mut ftrace::Regs,
) {
}

/// The table of a benchmark: ns per call and the difference to `base`.
pub fn print_rows(rows: &[(String, f64)], base: f64) {
    println!(
        "{:<44} {:>9} {:>12}",
        "traced call", "ns/call", "vs untraced"
    );
    for (name, v) in rows {
        println!("{name:<44} {v:>9.2} {:>+12.2}", v - base);
    }
}

/// An empty direct-call target (`ret`) within reach of the site of `target`.
pub fn empty_target() -> Result<usize, String> {
    let site = ftrace::site_by_name("target").ok_or("no site for `target`")?;
    let arena = Arena::near(site.addr, site.addr + 8).map_err(|e| e.to_string())?;
    tramp::empty(arena).map_err(|e| e.to_string())
}

/// A handler that does nothing, with the C calling convention.
extern "C" fn empty_handler(_ip: usize, _parent: usize, _slot: *mut usize, _data: *const ()) {}

/// A direct-call target within reach of the site of `target` that saves
/// the argument registers, calls an empty C function and restores them:
/// the floor of any callback a trampoline calls.
pub fn empty_caller_target() -> Result<usize, String> {
    let site = ftrace::site_by_name("target").ok_or("no site for `target`")?;
    let arena = Arena::near(site.addr, site.addr + 8).map_err(|e| e.to_string())?;
    tramp::caller(arena, empty_handler, std::ptr::null()).map_err(|e| e.to_string())
}

/// A benchmark library built with gcc and loaded into this process.
pub struct BenchLib {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
    handle: *mut libc::c_void,
}

impl BenchLib {
    pub fn build(name: &str, source: &str) -> Result<BenchLib, String> {
        let dir =
            std::env::temp_dir().join(format!("shadowgraph-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let src = dir.join(format!("{name}.c"));
        let path = dir.join(format!("lib{name}.so"));
        std::fs::write(&src, source).map_err(|e| format!("{}: {e}", src.display()))?;
        let flags = ["-O2", "-fPIC", "-shared", "-fpatchable-function-entry=5"];
        shadowgraph_testkit::cc::compile(&[&src], &flags, &path)?;
        let handle = dlopen(&path)?;
        Ok(BenchLib { dir, path, handle })
    }

    /// A `long f(long)` function of the library.
    pub fn func(&self, name: &str) -> Result<Loop, String> {
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
    pub fn is(&self, p: &Path) -> bool {
        std::fs::canonicalize(p).ok() == std::fs::canonicalize(&self.path).ok()
    }
}

impl Drop for BenchLib {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The one-function benchmark library, its sites under the ftrace core.
pub fn load_dispatch_lib() -> Result<(Loop, Loop, BenchLib), String> {
    let lib = BenchLib::build("dispatch", DISPATCH_C)?;
    let (loop_plain, loop_target) = (lib.func("loop_plain")?, lib.func("loop_target")?);
    ftrace::add_loaded(|p| !lib.is(p)).map_err(|e| e.to_string())?;
    Ok((loop_plain, loop_target, lib))
}

/// Median wall time of `cmd` (stdout and stderr discarded), in seconds.
pub(crate) fn time_cmd(
    reps: usize,
    mut cmd: impl FnMut() -> std::process::Command,
) -> Result<f64, String> {
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

/// The calls of fib(n): 2·fib(n+1) − 1.
pub(crate) fn fib_calls(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..=n {
        (a, b) = (b, a + b);
    }
    2 * a - 1
}

/// The command running `exe` untraced (`tool` "plain"), under uftrace
/// (`uftrace record -P . OPTS`) or under shadowgraph (`me record OPTS`), into
/// `data` (made afresh: the last run's and its `.old` removed first).
pub(crate) fn tool_command(
    tool: &str,
    me: &Path,
    exe: &Path,
    data: &Path,
    opts: &[&str],
) -> std::process::Command {
    let _ = std::fs::remove_dir_all(data);
    let _ = std::fs::remove_dir_all(data.with_extension("data.old"));
    match tool {
        "plain" => std::process::Command::new(exe),
        "uftrace" => {
            let mut c = std::process::Command::new("uftrace");
            c.args(["record", "-P", "."])
                .args(opts)
                .arg("-d")
                .arg(data)
                .arg(exe);
            c
        }
        _ => {
            // ("sgc": in the compact layout.)
            let mut c = std::process::Command::new(me);
            c.arg("record")
                .args((tool == "sgc").then_some("--compact"))
                .args(opts)
                .arg("-d")
                .arg(data)
                .arg("--")
                .arg(exe);
            c
        }
    }
}
