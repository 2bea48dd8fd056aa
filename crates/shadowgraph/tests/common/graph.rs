//! The graph tests' fixture (graph.c loaded into the core) and a counting
//! user, shared by the fgraph test files.

use super::*;
use shadowgraph::fgraph::{self, GraphEntry, GraphReturn, GraphUser, RetRegs};
use shadowgraph::ftrace::{self, FilterSet, Regs};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub const NAMES: [&str; 16] = [
    "g_leaf",
    "g_mid",
    "g_top",
    "g_deep",
    "g_ret_long",
    "g_ret_double",
    "g_block",
    "sched_a",
    "lock_a",
    "rcu_a",
    "sched_outer",
    "lj_run",
    "lj_level",
    "exit_deep_hooked",
    "exit_thread_hooked",
    "lj2_deep",
];

pub struct Fixture {
    pub _lib: Lib,
    pub addrs: Vec<usize>,
    pub run: extern "C" fn(i32) -> i64,
    pub families: extern "C" fn(i32) -> i64,
    pub deep: extern "C" fn(i32) -> i32,
    pub ret_long: extern "C" fn(i64) -> i64,
    pub ret_double: extern "C" fn(f64) -> f64,
    pub block: extern "C" fn(*const AtomicI32, *const AtomicI32),
    pub run_top_jumped: extern "C" fn(i32) -> i32,
    pub callback_jump: extern "C" fn(),
    pub callee_saved_changed: extern "C" fn() -> i32,
}

pub fn loaded() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let lib = load_into_core("graph", "graph.c");
        Fixture {
            addrs: NAMES
                .iter()
                .map(|n| ftrace::site_by_name(n).unwrap().addr)
                .collect(),
            run: lib.func("g_run"),
            families: lib.func("g_families"),
            deep: lib.func("g_deep"),
            ret_long: lib.func("g_ret_long"),
            ret_double: lib.func("g_ret_double"),
            block: lib.func("g_block"),
            run_top_jumped: lib.func("run_top_jumped"),
            callback_jump: lib.func("callback_jump"),
            callee_saved_changed: lib.func("callee_saved_changed"),
            _lib: lib,
        }
    })
}

pub fn idx(func: usize) -> Option<usize> {
    loaded().addrs.iter().position(|&a| a == func)
}

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    let g = M.lock().unwrap_or_else(|e| e.into_inner());
    loaded();
    g
}

/// Per-function entry/return counters, and facts seen at returns.
#[derive(Default)]
pub struct Tally {
    pub entries: [AtomicU64; 16],
    pub returns: [AtomicU64; 16],
    pub last_retval: AtomicU64,
    pub max_depth: AtomicI32,
    pub unwound: AtomicU64,
}

impl Tally {
    pub fn new() -> &'static Tally {
        Box::leak(Box::default())
    }
    pub fn take(&self) -> (Vec<u64>, Vec<u64>) {
        (
            self.entries
                .iter()
                .map(|e| e.swap(0, Ordering::Relaxed))
                .collect(),
            self.returns
                .iter()
                .map(|e| e.swap(0, Ordering::Relaxed))
                .collect(),
        )
    }
}

pub fn tally(u: &GraphUser) -> &'static Tally {
    // SAFETY: users made by `counting_user` carry a leaked Tally.
    unsafe { &*(u.private as *const Tally) }
}

/// Entries whose `site` was said, and said wrong (not the id a search of
/// every site finds).
pub static SITE_SAID: AtomicU64 = AtomicU64::new(0);
pub static SITE_WRONG: AtomicU64 = AtomicU64::new(0);

pub extern "C" fn count_entry(e: &GraphEntry, u: &GraphUser, _r: &mut Regs) -> bool {
    let t = tally(u);
    if e.site != u32::MAX {
        SITE_SAID.fetch_add(1, Ordering::Relaxed);
        if Some(e.site) != ftrace::site_id_of(e.func) {
            SITE_WRONG.fetch_add(1, Ordering::Relaxed);
        }
    }
    if let Some(i) = idx(e.func) {
        t.entries[i].fetch_add(1, Ordering::Relaxed);
    }
    t.max_depth.fetch_max(e.depth, Ordering::Relaxed);
    true
}

pub extern "C" fn count_return(r: &GraphReturn, u: &GraphUser, _regs: &RetRegs) {
    let t = tally(u);
    if let Some(i) = idx(r.func) {
        t.returns[i].fetch_add(1, Ordering::Relaxed);
    }
    t.last_retval.store(r.retval, Ordering::Relaxed);
    if r.unwound {
        t.unwound.fetch_add(1, Ordering::Relaxed);
    }
}

pub fn counting_user(filter: &[&str], t: &'static Tally) -> Arc<GraphUser> {
    let fs = if filter.is_empty() {
        FilterSet::all()
    } else {
        FilterSet::with_patterns(filter, &[]).unwrap()
    };
    GraphUser::new(count_entry, count_return, fs, t as *const Tally as usize)
}

pub fn by_name(v: &[u64], name: &str) -> u64 {
    v[NAMES.iter().position(|&n| n == name).unwrap()]
}

pub fn clean() {
    ftrace::check_invariants().unwrap();
    for s in ftrace::sites() {
        assert_eq!(s.count, 0, "{} still traced", s.function);
    }
    assert_eq!(fgraph::thread_depth(), -1, "frames left on this thread");
}
