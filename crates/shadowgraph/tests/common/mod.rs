//! Helpers shared by the integration tests: build fixtures with gcc, load
//! them, look functions up.
#![allow(dead_code)]

use std::ffi::CString;
use std::path::{Path, PathBuf};

pub mod frames;
pub mod graph;
pub mod probes;
pub mod recorder;
use shadowgraph_testkit::scratch;

/// A fresh directory under the target dir, unique per test.
pub fn workdir(name: &str) -> PathBuf {
    let dir = scratch::scratch_root("shadowgraph-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Builds `src` as a shared library with `flags` (plus -O2 -fPIC -shared).
pub fn build_lib(dir: &Path, src: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(format!("lib{name}.so"));
    let mut all = vec!["-O2", "-fPIC", "-shared"];
    all.extend_from_slice(flags);
    shadowgraph_testkit::cc::compile(&[src], &all, &out).unwrap();
    out
}

/// A dlopen'ed library; never closed (its code may be on a trampoline's
/// path for the life of the test process).
pub struct Lib {
    pub path: PathBuf,
    handle: *mut libc::c_void,
}

impl Lib {
    pub fn open(path: &Path) -> Lib {
        let c = CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: valid C string; RTLD_NOW resolves everything up front.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {} failed", path.display());
        Lib {
            path: path.to_owned(),
            handle,
        }
    }

    pub fn sym(&self, name: &str) -> usize {
        let c = CString::new(name).unwrap();
        // SAFETY: handle is open; name is a valid C string.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        assert!(!p.is_null(), "no symbol {name}");
        p as usize
    }

    /// The function `name` with the given signature.
    pub fn func<F: Copy>(&self, name: &str) -> F {
        let p = self.sym(name);
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
        // SAFETY: the caller names a function of signature F.
        unsafe { std::mem::transmute_copy(&p) }
    }

    /// Where the loader put this library (its bias).
    pub fn bias(&self) -> usize {
        let path = std::fs::canonicalize(&self.path).unwrap();
        shadowgraph::process::loaded_objects()
            .into_iter()
            .find(|(p, _)| std::fs::canonicalize(p).ok().as_ref() == Some(&path))
            .unwrap()
            .1
    }

    /// The module view of this library in the running process.
    pub fn module(&self) -> shadowgraph::process::Module {
        let path = std::fs::canonicalize(&self.path).unwrap();
        let mut mods = shadowgraph::process::discover(|p| {
            std::fs::canonicalize(p).map(|c| c == path).unwrap_or(false)
        })
        .unwrap();
        assert_eq!(mods.len(), 1, "module {} not found", self.path.display());
        mods.pop().unwrap()
    }
}

// SAFETY: the handle is dlopen's, usable from any thread; the library
// stays loaded while the Lib lives.
unsafe impl Send for Lib {}
// SAFETY: as for Send: dlsym and dlclose are thread-safe.
unsafe impl Sync for Lib {}

/// Builds the fixture `file` as `lib<name>.so` (sled flavour), loads it and
/// puts its sites under the ftrace core.
pub fn load_into_core(name: &str, file: &str) -> Lib {
    let dir = workdir(name);
    let lib = Lib::open(&build_lib(
        &dir,
        &fixture(file),
        name,
        shadowgraph_testkit::cc::flavour::PATCHABLE,
    ));
    shadowgraph::ftrace::add_modules(vec![lib.module()]).unwrap();
    lib
}

/// How the workload's functions are made traceable: built with patchable
/// entries, or built without any flag and patched at their ordinary
/// prologue (`-P`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Patchable,
    Prologue,
}

/// Both, for the stress tests' relocated-prologue variants.
pub const ENTRIES: [Entry; 2] = [Entry::Patchable, Entry::Prologue];

/// A library whose `run(n)` calls `top` n times, `top` calls `mid` 8 times
/// and `mid` calls `leaf` twice (three traced levels: frames are always in
/// flight), built in `workdir(name)` and brought under the core; returns
/// the directory, the library and `run`.
pub fn nested_workload(name: &str) -> (PathBuf, Lib, extern "C" fn(i64) -> i64) {
    nested_workload_as(name, Entry::Patchable)
}

/// [`nested_workload`] made traceable as `entry` says: with
/// [`Entry::Prologue`], `leaf`, `mid` and `top` are patched at their
/// prologue (`run` is not). [`drop_workload`] takes it out of the core
/// again, so that the other variant can come in the same process.
pub fn nested_workload_as(name: &str, entry: Entry) -> (PathBuf, Lib, extern "C" fn(i64) -> i64) {
    const SOURCE: &str = "#define KEEP __attribute__((noinline, noipa))\n\
KEEP long leaf(long x) { return x + 1; }\n\
KEEP long mid(long x) { return leaf(x) + leaf(x + 1); }\n\
KEEP long top(long x) { long s = 0; for (int i = 0; i < 8; i++) s += mid(x + i); return s; }\n\
__attribute__((patchable_function_entry(0, 0))) long run(long n) {\n\
  long s = 0; for (long i = 0; i < n; i++) s += top(i); return s; }\n";
    let dir = workdir(name);
    let src = dir.join("work.c");
    std::fs::write(&src, SOURCE).unwrap();
    let flags = match entry {
        Entry::Patchable => shadowgraph_testkit::cc::flavour::PATCHABLE,
        Entry::Prologue => &[],
    };
    let lib = Lib::open(&build_lib(&dir, &src, name, flags));
    let modules = match entry {
        Entry::Patchable => vec![lib.module()],
        Entry::Prologue => {
            let named = |s: &str| matches!(s, "leaf" | "mid" | "top");
            let asked = shadowgraph::prologue::Asked::Named(&named);
            let p = shadowgraph::process::prologue::patch_object(&lib.path, lib.bias(), &[], asked)
                .unwrap();
            assert_eq!(p.patched, 3, "{}", p.summary(&lib.path));
            p.modules
        }
    };
    shadowgraph::ftrace::add_modules(modules).unwrap();
    let run = lib.func("run");
    (dir, lib, run)
}

/// The nested workload's traced functions.
pub const NESTED: [&str; 3] = ["leaf", "mid", "top"];

/// The core's site addresses of the nested workload's traced functions.
pub fn nested_sites() -> Vec<u64> {
    NESTED
        .iter()
        .map(|f| shadowgraph::ftrace::site_by_name(f).unwrap().addr as u64)
        .collect()
}

/// Whether the fused paths can run here (an invariant TSC), said where not.
pub fn fused_paths_run() -> bool {
    shadowgraph_testkit::tool::available(
        shadowgraph::clock::init(),
        "an invariant TSC (the fused path needs one)",
        "the fused path",
    )
}

/// The workload `lib` out of the core (its threads stopped).
pub fn drop_workload(lib: &Lib) {
    shadowgraph::ftrace::remove_module(lib.bias()).unwrap();
}

/// What `run(n)` of [`nested_workload`] returns: Σ_{i<n} Σ_{j<8} (2(i+j) + 3).
pub fn nested_expect(n: i64) -> i64 {
    (0..n)
        .map(|i| (0..8).map(|j| 2 * (i + j) + 3).sum::<i64>())
        .sum()
}

/// Threads calling `run(n)` of [`nested_workload`] in a loop, each result
/// checked, until stopped.
pub struct Workers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    rounds: std::sync::Arc<std::sync::atomic::AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Workers {
    pub fn start(count: usize, run: extern "C" fn(i64) -> i64, n: i64) -> Workers {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let threads = (0..count)
            .map(|_| {
                let (stop, rounds) = (stop.clone(), rounds.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        assert_eq!(run(n), nested_expect(n));
                        rounds.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Workers {
            stop,
            rounds,
            threads,
        }
    }

    /// Calls of `run` completed so far, by all threads.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the threads and waits for them (a failed check fails here).
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let rounds = self.rounds.clone();
        for t in self.threads {
            t.join().unwrap();
        }
        rounds.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// `recorder` registered and unregistered `rounds` times (half a
/// millisecond each), and every third time, while it is, `other` and then
/// `third` join and leave (two users, three, two, one again), with
/// `first` run once after its first registration: a fused path switching
/// with frames in flight, and the stubs' loop over users.
pub fn users_come_and_go(
    recorder: &std::sync::Arc<shadowgraph::fgraph::GraphUser>,
    other: &std::sync::Arc<shadowgraph::fgraph::GraphUser>,
    third: &std::sync::Arc<shadowgraph::fgraph::GraphUser>,
    rounds: usize,
    first: impl FnOnce(),
) {
    use shadowgraph::fgraph::{register_graph, unregister_graph};
    let pause = |us| std::thread::sleep(std::time::Duration::from_micros(us));
    let mut first = Some(first);
    for i in 0..rounds {
        register_graph(recorder).unwrap();
        if let Some(f) = first.take() {
            f();
        }
        pause(500);
        if i % 3 == 0 {
            register_graph(other).unwrap();
            pause(300);
            register_graph(third).unwrap();
            pause(300);
            unregister_graph(third).unwrap();
            pause(300);
            unregister_graph(other).unwrap();
            pause(300);
        }
        unregister_graph(recorder).unwrap();
    }
}

/// The end of a stress run: the threads stopped after a moment without
/// the user that was just dropped, the rings written out; they ran, and
/// no frame was lost.
pub fn stop_and_flush(workers: Workers) {
    std::thread::sleep(std::time::Duration::from_millis(20));
    let rounds = workers.stop();
    shadowgraph::record::writer::flush_all();
    assert!(rounds > 0);
    assert_eq!(shadowgraph::fgraph::counters().lost_frames, 0);
}
