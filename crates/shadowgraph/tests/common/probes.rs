//! The core tests' fixture (families.c loaded into the core) and a probe
//! ops counting its hits per function, shared by the ftrace test files.

use super::*;
use shadowgraph::ftrace::{self, FilterEdit, FilterSet, Ops, OpsFlags, Regs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub const NAMES: [&str; 13] = [
    "sched_tick",
    "sched_switch",
    "sched_clock_read",
    "sched_time_slice",
    "lock_acquire",
    "lock_release",
    "locks_held",
    "rcu_read_lock",
    "rcu_sync",
    "clock_gettime_fake",
    "time_now",
    "plain_work",
    "outer_calls_inner",
];

pub type RunAll = extern "C" fn(i32) -> i64;
pub type RunOne = extern "C" fn(i32, i32) -> i64;
pub type IntFn = extern "C" fn(i32) -> i32;

pub struct Fixture {
    pub _lib: Lib,
    /// Site address of NAMES[i].
    pub addrs: Vec<usize>,
    pub run_all: RunAll,
    pub run_one: RunOne,
    pub plain_work: IntFn,
    pub outer: IntFn,
    pub errno_seen: IntFn,
}

impl Fixture {
    pub fn index(&self, ip: usize) -> Option<usize> {
        self.addrs.iter().position(|&a| a == ip)
    }
}

pub fn loaded() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let lib = load_into_core("families", "families.c");
        let addrs = NAMES
            .iter()
            .map(|n| ftrace::site_by_name(n).unwrap().addr)
            .collect();
        Fixture {
            addrs,
            run_all: lib.func("run_all"),
            run_one: lib.func("run_one"),
            plain_work: lib.func("plain_work"),
            outer: lib.func("outer_calls_inner"),
            errno_seen: lib.func("errno_seen"),
            _lib: lib,
        }
    })
}

/// Tests share one core: one at a time, and each leaves it empty.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    let g = M.lock().unwrap_or_else(|e| e.into_inner());
    loaded();
    g
}

pub const ALIVE: u64 = 0xa11ce;
pub const DEAD: u64 = 0xdead;
pub static VIOLATIONS: AtomicU64 = AtomicU64::new(0);

/// Per-function hit counters behind an ops.
pub struct Probe {
    pub magic: AtomicU64,
    pub hits: [AtomicU64; 13],
}

impl Probe {
    pub fn new() -> &'static Probe {
        Box::leak(Box::new(Probe {
            magic: AtomicU64::new(ALIVE),
            hits: Default::default(),
        }))
    }
    pub fn take(&self) -> Vec<u64> {
        self.hits
            .iter()
            .map(|h| h.swap(0, Ordering::Relaxed))
            .collect()
    }
}

pub extern "C" fn probe_cb(ip: usize, _parent: usize, ops: &Ops, _regs: &mut Regs) {
    // SAFETY: every ops using probe_cb has a leaked Probe in `private`.
    let p = unsafe { &*(ops.private as *const Probe) };
    if p.magic.load(Ordering::Relaxed) != ALIVE {
        VIOLATIONS.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(i) = loaded().index(ip) {
        p.hits[i].fetch_add(1, Ordering::Relaxed);
    }
}

pub fn probe_ops(
    probe: &'static Probe,
    filter: &[&str],
    notrace: &[&str],
    flags: OpsFlags,
) -> Arc<Ops> {
    let fs = if filter.is_empty() {
        let fs = FilterSet::all();
        if !notrace.is_empty() {
            ftrace::set_notrace(&fs, FilterEdit::Set(notrace)).unwrap();
        }
        fs
    } else {
        FilterSet::with_patterns(filter, notrace).unwrap()
    };
    Ops::with_private(probe_cb, flags, fs, probe as *const Probe as usize)
}

pub fn glob(p: &str, s: &str) -> bool {
    shadowgraph_data::pattern::glob_match(p.as_bytes(), s.as_bytes())
}

/// Expected hits of run_all(n) for a probe selecting `sel`.
pub fn expect(n: u64, sel: impl Fn(&str) -> bool) -> Vec<u64> {
    NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| if i < 12 && sel(name) { n } else { 0 })
        .collect()
}

pub fn invariants() {
    ftrace::check_invariants().unwrap();
}

pub fn fixture_sites_enabled() -> usize {
    let f = loaded();
    ftrace::sites()
        .iter()
        .filter(|s| f.addrs.contains(&s.addr) && s.count > 0)
        .count()
}

pub fn assert_clean() {
    invariants();
    for s in ftrace::sites() {
        assert_eq!(s.count, 0, "{} still counted", s.function);
        assert_eq!(s.target, 0, "{} still patched", s.function);
    }
}
