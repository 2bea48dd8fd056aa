//! The ftrace core on real gcc-built code: kernel-selftest-style probes with
//! exact hit counts, the filter algebra, the trampoline accounting of seed
//! 003, notrace edits, recursion, subops, direct calls with gap-free
//! retargeting, and registration churn under running threads.

mod common;

use common::*;
use shadowgraph::ftrace::{self, site_flags, FilterEdit, FilterSet, Ops, OpsFlags, Regs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const NAMES: [&str; 13] = [
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

type RunAll = extern "C" fn(i32) -> i64;
type RunOne = extern "C" fn(i32, i32) -> i64;
type IntFn = extern "C" fn(i32) -> i32;

struct Fixture {
    _lib: Lib,
    /// Site address of NAMES[i].
    addrs: Vec<usize>,
    run_all: RunAll,
    run_one: RunOne,
    plain_work: IntFn,
    outer: IntFn,
    errno_seen: IntFn,
}

impl Fixture {
    fn index(&self, ip: usize) -> Option<usize> {
        self.addrs.iter().position(|&a| a == ip)
    }
}

fn fixture() -> &'static Fixture {
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
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    let g = M.lock().unwrap_or_else(|e| e.into_inner());
    fixture();
    g
}

const ALIVE: u64 = 0xa11ce;
const DEAD: u64 = 0xdead;
static VIOLATIONS: AtomicU64 = AtomicU64::new(0);

/// Per-function hit counters behind an ops.
struct Probe {
    magic: AtomicU64,
    hits: [AtomicU64; 13],
}

impl Probe {
    fn new() -> &'static Probe {
        Box::leak(Box::new(Probe {
            magic: AtomicU64::new(ALIVE),
            hits: Default::default(),
        }))
    }
    fn take(&self) -> Vec<u64> {
        self.hits
            .iter()
            .map(|h| h.swap(0, Ordering::Relaxed))
            .collect()
    }
}

fn probe_cb(ip: usize, _parent: usize, ops: &Ops, _regs: &mut Regs) {
    // SAFETY: every ops using probe_cb has a leaked Probe in `private`.
    let p = unsafe { &*(ops.private as *const Probe) };
    if p.magic.load(Ordering::Relaxed) != ALIVE {
        VIOLATIONS.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(i) = fixture().index(ip) {
        p.hits[i].fetch_add(1, Ordering::Relaxed);
    }
}

fn probe_ops(
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

fn glob(p: &str, s: &str) -> bool {
    shadowgraph_data::pattern::glob_match(p.as_bytes(), s.as_bytes())
}

/// Expected hits of run_all(n) for a probe selecting `sel`.
fn expect(n: u64, sel: impl Fn(&str) -> bool) -> Vec<u64> {
    NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| if i < 12 && sel(name) { n } else { 0 })
        .collect()
}

fn invariants() {
    ftrace::check_invariants().unwrap();
}

fn fixture_sites_enabled() -> usize {
    let f = fixture();
    ftrace::sites()
        .iter()
        .filter(|s| f.addrs.contains(&s.addr) && s.count > 0)
        .count()
}

fn assert_clean() {
    invariants();
    for s in ftrace::sites() {
        assert_eq!(s.count, 0, "{} still counted", s.function);
        assert_eq!(s.target, 0, "{} still patched", s.function);
    }
}

#[test]
fn three_probes_with_overlapping_filters_count_exactly() {
    let _g = serial();
    let f = fixture();
    let (a, b, c) = (Probe::new(), Probe::new(), Probe::new());
    let pa = probe_ops(a, &["sched_*"], &[], OpsFlags::NONE);
    let pb = probe_ops(b, &["*lock*"], &[], OpsFlags::NONE);
    let pc = probe_ops(c, &["*time*"], &[], ftrace::RECURSION);
    let sa = |s: &str| glob("sched_*", s);
    let sb = |s: &str| glob("*lock*", s);
    let sc = |s: &str| glob("*time*", s);
    let none = |_: &str| false;
    type Step<'a> = (&'a str, Box<dyn Fn() + 'a>, [bool; 3]);
    let steps: Vec<Step> = vec![
        (
            "+a",
            Box::new(|| ftrace::register(&pa).unwrap()),
            [true, false, false],
        ),
        (
            "+b",
            Box::new(|| ftrace::register(&pb).unwrap()),
            [true, true, false],
        ),
        (
            "+c",
            Box::new(|| ftrace::register(&pc).unwrap()),
            [true, true, true],
        ),
        (
            "-b",
            Box::new(|| ftrace::unregister(&pb).unwrap()),
            [true, false, true],
        ),
        (
            "-a",
            Box::new(|| ftrace::unregister(&pa).unwrap()),
            [false, false, true],
        ),
        (
            "-c",
            Box::new(|| ftrace::unregister(&pc).unwrap()),
            [false, false, false],
        ),
    ];
    let r0 = (f.run_all)(20);
    for (name, step, on) in steps {
        step();
        invariants();
        assert_eq!((f.run_all)(20), r0, "{name}: results changed");
        let sel: [&dyn Fn(&str) -> bool; 3] = [&sa, &sb, &sc];
        for (k, probe) in [a, b, c].iter().enumerate() {
            let want = expect(20, |s| on[k] && sel[k](s));
            let _ = none;
            assert_eq!(probe.take(), want, "after {name}: probe {k}");
        }
    }
    assert_clean();
    assert_eq!(VIOLATIONS.load(Ordering::Relaxed), 0);
}

/// SPEC §6.2 #4: enabled-site counts through every add/remove order.
#[test]
fn filter_algebra_enabled_site_counts() {
    let _g = serial();
    let base = fixture_sites_enabled();
    assert_eq!(base, 0);
    let p = Probe::new();
    let i1 = probe_ops(p, &["*sched*"], &["*time*"], OpsFlags::NONE);
    let i2 = probe_ops(p, &["*lock*"], &["*clock*"], OpsFlags::NONE);
    let count = |pat: &str, nt: &str| {
        NAMES
            .iter()
            .filter(|n| glob(pat, n) && !glob(nt, n))
            .count()
    };
    let union = NAMES
        .iter()
        .filter(|n| {
            (glob("*sched*", n) && !glob("*time*", n)) || (glob("*lock*", n) && !glob("*clock*", n))
        })
        .count();
    ftrace::register(&i1).unwrap();
    let c1 = fixture_sites_enabled();
    assert_eq!(c1, count("*sched*", "*time*"));
    assert!(ftrace::site_by_name("sched_time_slice").unwrap().count == 0);
    ftrace::register(&i2).unwrap();
    assert_eq!(fixture_sites_enabled(), union);
    ftrace::unregister(&i1).unwrap();
    let c2 = fixture_sites_enabled();
    assert_eq!(c2, count("*lock*", "*clock*"));
    assert!(ftrace::site_by_name("clock_gettime_fake").unwrap().count == 0);
    ftrace::unregister(&i2).unwrap();
    assert_eq!(fixture_sites_enabled(), base);
    ftrace::register(&i2).unwrap();
    assert_eq!(fixture_sites_enabled(), c2);
    ftrace::register(&i1).unwrap();
    assert_eq!(fixture_sites_enabled(), union);
    ftrace::unregister(&i2).unwrap();
    assert_eq!(fixture_sites_enabled(), c1);
    ftrace::unregister(&i1).unwrap();
    assert_eq!(fixture_sites_enabled(), base);
    invariants();

    // Both tracing all with different notrace: a site is off only if both exclude it.
    let j1 = probe_ops(p, &[], &["*locks*"], OpsFlags::NONE);
    let j2 = probe_ops(p, &[], &["*clock*"], OpsFlags::NONE);
    ftrace::register(&j1).unwrap();
    ftrace::register(&j2).unwrap();
    for (i, n) in NAMES.iter().enumerate() {
        let s = ftrace::site_by_name(n).unwrap();
        let want = !glob("*locks*", n) as u16 + !glob("*clock*", n) as u16;
        assert_eq!(s.count, want, "{n}");
        let _ = i;
    }
    invariants();
    ftrace::unregister(&j1).unwrap();
    ftrace::unregister(&j2).unwrap();
    assert_clean();
}

/// Seed 003: the function tracer on everything (its own trampoline), then a
/// second single-function ops added and removed in every order; the shared
/// site leaves the trampoline while shared and returns to it at count 1.
#[test]
fn trampoline_accounting_of_seed_003_in_every_order() {
    let _g = serial();
    let f = fixture();
    let (pa, pb) = (Probe::new(), Probe::new());
    for order in 0..4 {
        let a = probe_ops(pa, &[], &[], OpsFlags::NONE);
        let b = probe_ops(pb, &["plain_work"], &[], OpsFlags::NONE);
        let (first, second) = if order < 2 { (&a, &b) } else { (&b, &a) };
        ftrace::register(first).unwrap();
        invariants();
        ftrace::register(second).unwrap();
        invariants();
        let pw = ftrace::site_by_name("plain_work").unwrap();
        assert_eq!(pw.count, 2);
        assert_eq!(pw.flags & site_flags::TRAMP, 0);
        assert_eq!(
            pw.target,
            ftrace::shared_callers(pw.arena).unwrap().0,
            "shared caller when shared"
        );
        let tick = ftrace::site_by_name("sched_tick").unwrap();
        let a_tramp = a.trampoline_in(tick.arena).unwrap();
        assert_eq!(tick.target, a_tramp);
        assert_ne!(tick.flags & site_flags::TRAMP, 0);
        (f.run_all)(5);
        assert_eq!(pa.take(), expect(5, |_| true));
        assert_eq!(pb.take(), expect(5, |s| s == "plain_work"));
        // Remove one: the other keeps working, plain_work back to count 1.
        let (gone, stays, stays_probe, sel): (_, _, _, &dyn Fn(&str) -> bool) = if order % 2 == 0 {
            (&b, &a, pa, &|_| true)
        } else {
            (&a, &b, pb, &|s| s == "plain_work")
        };
        ftrace::unregister(gone).unwrap();
        invariants();
        let pw = ftrace::site_by_name("plain_work").unwrap();
        assert_eq!(pw.count, 1);
        assert_eq!(
            pw.target,
            stays.trampoline_in(pw.arena).unwrap(),
            "2 -> 1 returns to the trampoline"
        );
        assert_ne!(pw.flags & site_flags::TRAMP, 0);
        (f.run_all)(3);
        assert_eq!(stays_probe.take(), expect(3, sel));
        assert_eq!(
            pa.take().iter().sum::<u64>() + pb.take().iter().sum::<u64>(),
            0
        );
        ftrace::unregister(stays).unwrap();
        assert_clean();
    }
}

#[test]
fn notrace_append_remove_and_reset() {
    let _g = serial();
    let f = fixture();
    let p = Probe::new();
    let ops = probe_ops(p, &[], &["sched_*"], OpsFlags::NONE);
    ftrace::register(&ops).unwrap();
    (f.run_all)(2);
    assert_eq!(p.take(), expect(2, |s| !glob("sched_*", s)));
    ftrace::set_notrace(ops.filter(), FilterEdit::Append(&["lock_*"])).unwrap();
    invariants();
    (f.run_all)(2);
    assert_eq!(
        p.take(),
        expect(2, |s| !glob("sched_*", s) && !glob("lock_*", s))
    );
    ftrace::set_notrace(ops.filter(), FilterEdit::Remove("sched_*")).unwrap();
    (f.run_all)(2);
    assert_eq!(p.take(), expect(2, |s| !glob("lock_*", s)));
    // Filter edits: removing the last pattern means nothing, reset means all.
    ftrace::set_filter(ops.filter(), FilterEdit::Set(&["rcu_*"])).unwrap();
    (f.run_all)(2);
    assert_eq!(p.take(), expect(2, |s| glob("rcu_*", s)));
    ftrace::set_filter(ops.filter(), FilterEdit::Remove("rcu_*")).unwrap();
    invariants();
    (f.run_all)(2);
    assert_eq!(
        p.take(),
        expect(2, |_| false),
        "an emptied filter traces nothing"
    );
    ftrace::set_filter(ops.filter(), FilterEdit::Reset).unwrap();
    (f.run_all)(2);
    assert_eq!(p.take(), expect(2, |s| !glob("lock_*", s)));
    // Paused: nothing (the sites back to nops), the patterns kept, edits
    // taken meanwhile; resumed: what the patterns select.
    ftrace::set_paused(ops.filter(), true).unwrap();
    invariants();
    (f.run_all)(2);
    assert_eq!(p.take(), expect(2, |_| false), "paused");
    ftrace::set_notrace(ops.filter(), FilterEdit::Append(&["sched_*"])).unwrap();
    (f.run_all)(2);
    assert_eq!(p.take(), expect(2, |_| false), "still paused");
    ftrace::set_paused(ops.filter(), false).unwrap();
    invariants();
    (f.run_all)(2);
    assert_eq!(
        p.take(),
        expect(2, |s| !glob("lock_*", s) && !glob("sched_*", s))
    );
    ftrace::set_notrace(ops.filter(), FilterEdit::Remove("sched_*")).unwrap();
    // Bad patterns change nothing.
    assert!(ftrace::set_filter(ops.filter(), FilterEdit::Set(&["no_such_fn*"])).is_err());
    assert!(ftrace::set_filter(ops.filter(), FilterEdit::Set(&["/bad(/"])).is_err());
    (f.run_all)(2);
    assert_eq!(p.take(), expect(2, |s| !glob("lock_*", s)));
    ftrace::unregister(&ops).unwrap();
    assert!(matches!(
        ftrace::unregister(&ops),
        Err(ftrace::CoreError::NotRegistered)
    ));
    assert_clean();
}

static RECURSE_CALLS: AtomicU64 = AtomicU64::new(0);
thread_local!(static BUSY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });

fn recursing_cb(_ip: usize, _p: usize, _ops: &Ops, _r: &mut Regs) {
    RECURSE_CALLS.fetch_add(1, Ordering::Relaxed);
    (fixture().plain_work)(1); // traced: re-enters this callback
}

fn self_guarded_cb(_ip: usize, _p: usize, _ops: &Ops, _r: &mut Regs) {
    RECURSE_CALLS.fetch_add(1, Ordering::Relaxed);
    if BUSY.get() {
        return;
    }
    BUSY.set(true);
    (fixture().plain_work)(1);
    BUSY.set(false);
}

#[test]
fn recursion_guard_limits_reentry() {
    let _g = serial();
    let f = fixture();
    for (alone, cb, flags) in [
        (true, recursing_cb as ftrace::OpsFunc, ftrace::RECURSION),
        (false, recursing_cb as ftrace::OpsFunc, ftrace::RECURSION),
        (true, self_guarded_cb as ftrace::OpsFunc, OpsFlags::NONE),
    ] {
        let ops = Ops::new(
            cb,
            flags,
            FilterSet::with_patterns(&["plain_work"], &[]).unwrap(),
        );
        // A second ops on the same site routes through the list function.
        let other = probe_ops(Probe::new(), &["plain_work"], &[], OpsFlags::NONE);
        ftrace::register(&ops).unwrap();
        if !alone {
            ftrace::register(&other).unwrap();
        }
        RECURSE_CALLS.store(0, Ordering::Relaxed);
        assert_eq!((f.plain_work)(5), 17);
        let n = RECURSE_CALLS.load(Ordering::Relaxed);
        if flags.contains(ftrace::RECURSION) {
            assert!(n == 1 || n == 2, "guarded callback entered {n} times");
        } else {
            assert_eq!(n, 2, "self-guarded callback entered {n} times");
        }
        ftrace::unregister(&ops).unwrap();
        if !alone {
            ftrace::unregister(&other).unwrap();
        }
    }
    assert!(ftrace::recursion_drops() > 0);
    assert_clean();
}

#[test]
fn subops_manager_traces_exactly_the_union() {
    let _g = serial();
    let f = fixture();
    let (p1, p2, p3) = (Probe::new(), Probe::new(), Probe::new());
    let manager = Ops::new_manager(ftrace::call_subops, ftrace::OpsFlags::NONE);
    let s1 = probe_ops(p1, &["sched_*"], &["*time*"], OpsFlags::NONE);
    let s2 = probe_ops(p2, &["*lock*"], &[], OpsFlags::NONE);
    ftrace::register_subop(&manager, &s1).unwrap();
    assert!(manager.is_enabled());
    ftrace::register_subop(&manager, &s2).unwrap();
    invariants();
    for n in NAMES {
        let want = (glob("sched_*", n) && !glob("*time*", n)) || glob("*lock*", n);
        assert_eq!(ftrace::site_by_name(n).unwrap().count, want as u16, "{n}");
    }
    (f.run_all)(4);
    assert_eq!(
        p1.take(),
        expect(4, |s| glob("sched_*", s) && !glob("*time*", s))
    );
    assert_eq!(p2.take(), expect(4, |s| glob("*lock*", s)));
    // A subop tracing all but *time* and rcu_*: the manager traces all and
    // excludes only what no subop wants.
    let s3 = probe_ops(p3, &[], &["*time*", "rcu_*"], OpsFlags::NONE);
    ftrace::register_subop(&manager, &s3).unwrap();
    invariants();
    for n in NAMES {
        // Off only where s3 excludes it and neither s1 nor s2 wants it.
        let excluded_by_s3 = glob("*time*", n) || glob("rcu_*", n);
        let wanted_by_s1 = glob("sched_*", n) && !glob("*time*", n);
        let wanted_by_s2 = glob("*lock*", n);
        let want = !excluded_by_s3 || wanted_by_s1 || wanted_by_s2;
        assert_eq!(ftrace::site_by_name(n).unwrap().count, want as u16, "{n}");
    }
    (f.run_all)(1);
    assert_eq!(
        p3.take(),
        expect(1, |s| !glob("*time*", s) && !glob("rcu_*", s))
    );
    assert_eq!(p2.take(), expect(1, |s| glob("*lock*", s)));
    ftrace::unregister_subop(&manager, &s2).unwrap();
    ftrace::unregister_subop(&manager, &s3).unwrap();
    invariants();
    ftrace::unregister_subop(&manager, &s1).unwrap();
    assert!(!manager.is_enabled());
    p1.take();
    assert_clean();
}

// Direct-call targets: count and return into the traced function's body
// (entered with [rsp] = site+5), touching no argument register.
static DIRECT_A: AtomicU64 = AtomicU64::new(0);
static DIRECT_B: AtomicU64 = AtomicU64::new(0);
std::arch::global_asm!(
    ".globl sg_test_direct_a",
    "sg_test_direct_a:",
    "lock inc qword ptr [rip + {a}]",
    "ret",
    ".globl sg_test_direct_b",
    "sg_test_direct_b:",
    "lock inc qword ptr [rip + {b}]",
    "ret",
    a = sym DIRECT_A,
    b = sym DIRECT_B,
);
extern "C" {
    fn sg_test_direct_a();
    fn sg_test_direct_b();
}

#[test]
fn direct_calls_register_modify_share_and_leave() {
    let _g = serial();
    let f = fixture();
    let (ta, tb) = (
        sg_test_direct_a as *const () as usize,
        sg_test_direct_b as *const () as usize,
    );
    let pw = NAMES.iter().position(|&n| n == "plain_work").unwrap() as i32;
    DIRECT_A.store(0, Ordering::SeqCst);
    DIRECT_B.store(0, Ordering::SeqCst);
    let d = Ops::new_direct(FilterSet::with_patterns(&["plain_work"], &[]).unwrap());
    ftrace::register_direct(&d, ta).unwrap();
    invariants();
    let s = ftrace::site_by_name("plain_work").unwrap();
    assert_eq!(s.target, ftrace::direct_pad(s.arena, ta).unwrap());
    assert_ne!(s.flags & site_flags::DIRECT_EN, 0);
    let r0 = (f.run_one)(pw, 100);
    assert_eq!(DIRECT_A.swap(0, Ordering::SeqCst), 100);
    // A second direct ops on the same function is refused.
    let d2 = Ops::new_direct(FilterSet::with_patterns(&["plain_work"], &[]).unwrap());
    assert!(matches!(
        ftrace::register_direct(&d2, tb),
        Err(ftrace::CoreError::Busy { .. })
    ));
    ftrace::modify_direct(&d, tb).unwrap();
    invariants();
    assert_eq!((f.run_one)(pw, 100), r0);
    assert_eq!(DIRECT_B.swap(0, Ordering::SeqCst), 100);
    assert_eq!(DIRECT_A.load(Ordering::SeqCst), 0);
    // Shared with a probe: regs caller, list function, then the direct target.
    let p = Probe::new();
    let probe = probe_ops(p, &[], &[], OpsFlags::NONE);
    ftrace::register(&probe).unwrap();
    invariants();
    let s = ftrace::site_by_name("plain_work").unwrap();
    assert_eq!(
        s.target,
        ftrace::shared_callers(s.arena).unwrap().1,
        "regs caller"
    );
    let r50 = (f.run_one)(pw, 50);
    assert_eq!((f.run_one)(pw, 50), r50);
    assert_eq!(DIRECT_B.swap(0, Ordering::SeqCst), 100);
    assert_eq!(p.take()[pw as usize], 100);
    ftrace::unregister(&probe).unwrap();
    let s = ftrace::site_by_name("plain_work").unwrap();
    assert_eq!(s.target, ftrace::direct_pad(s.arena, tb).unwrap());
    ftrace::unregister(&d).unwrap();
    assert_clean();
}

#[test]
fn direct_modify_under_concurrent_calls_never_misses() {
    let _g = serial();
    let f = fixture();
    let (ta, tb) = (
        sg_test_direct_a as *const () as usize,
        sg_test_direct_b as *const () as usize,
    );
    let pw = NAMES.iter().position(|&n| n == "plain_work").unwrap() as i32;
    DIRECT_A.store(0, Ordering::SeqCst);
    DIRECT_B.store(0, Ordering::SeqCst);
    let d = Ops::new_direct(FilterSet::with_patterns(&["plain_work", "sched_*"], &[]).unwrap());
    ftrace::register_direct(&d, ta).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let expect_sum: i64 = (0..1000).map(|i| i + 12).sum();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, calls) = (stop.clone(), calls.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!((f.run_one)(pw, 1000), expect_sum);
                    calls.fetch_add(1000, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for i in 0..200 {
        ftrace::modify_direct(&d, if i % 2 == 0 { tb } else { ta }).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    invariants();
    ftrace::unregister(&d).unwrap();
    let hits = DIRECT_A.load(Ordering::SeqCst) + DIRECT_B.load(Ordering::SeqCst);
    let made = calls.load(Ordering::Relaxed);
    eprintln!("200 retargets: {made} calls, {hits} reached a target");
    assert_eq!(hits, made, "every call reaches the old or the new target");
    assert_clean();
}

/// Threads call traced functions while ops come and go; a callback never
/// runs for an ops after unregister returned (its probe is marked dead).
#[test]
fn registration_churn_under_running_threads() {
    let _g = serial();
    let f = fixture();
    let stop = Arc::new(AtomicBool::new(false));
    let r0 = (f.run_all)(50);
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!((f.run_all)(50), r0);
                }
            })
        })
        .collect();
    VIOLATIONS.store(0, Ordering::Relaxed);
    let pats: [&[&str]; 4] = [&[], &["sched_*"], &["*lock*"], &["plain_work", "time_now"]];
    for round in 0..60 {
        let probes: Vec<&'static Probe> = (0..3).map(|_| Probe::new()).collect();
        let ops: Vec<Arc<Ops>> = probes
            .iter()
            .enumerate()
            .map(|(k, p)| {
                probe_ops(
                    p,
                    pats[(round + k) % 4],
                    &[],
                    if k == 1 {
                        ftrace::NO_TRAMP
                    } else {
                        OpsFlags::NONE
                    },
                )
            })
            .collect();
        for o in &ops {
            ftrace::register(o).unwrap();
        }
        if round % 3 == 0 {
            ftrace::set_filter(ops[0].filter(), FilterEdit::Set(&["rcu_*"])).unwrap();
        }
        for (o, p) in ops.iter().zip(&probes) {
            ftrace::unregister(o).unwrap();
            p.magic.store(DEAD, Ordering::Relaxed);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        VIOLATIONS.load(Ordering::Relaxed),
        0,
        "a callback ran after unregister returned"
    );
    assert_eq!(
        ftrace::counters().code_grace_given_up,
        0,
        "a code grace period could not complete"
    );
    assert_clean();
}

fn clobber_errno(_ip: usize, _p: usize, _ops: &Ops, _r: &mut Regs) {
    // SAFETY: close(-1) fails with EBADF, setting errno: a callback's syscall.
    unsafe { libc::close(-1) };
}

#[test]
fn callbacks_preserve_errno_for_the_traced_function() {
    let _g = serial();
    let lib_errno_seen = fixture().errno_seen;
    for flags in [OpsFlags::NONE, ftrace::NO_TRAMP, ftrace::SAVE_REGS] {
        let ops = Ops::new(
            clobber_errno,
            flags,
            FilterSet::with_patterns(&["errno_seen"], &[]).unwrap(),
        );
        ftrace::register(&ops).unwrap();
        // SAFETY: setting this thread's errno.
        unsafe { *libc::__errno_location() = 1234 };
        assert_eq!(
            lib_errno_seen(1),
            1235,
            "errno changed under the traced function (flags {flags:?})"
        );
        ftrace::unregister(&ops).unwrap();
    }
    assert_clean();
}

fn double_first_arg(_ip: usize, _p: usize, _ops: &Ops, r: &mut Regs) {
    r.rdi *= 100;
}

extern "C" fn replacement(x: i32) -> i32 {
    -x
}

fn redirect_to_replacement(_ip: usize, _p: usize, _ops: &Ops, r: &mut Regs) {
    r.rip = replacement as *const () as usize;
}

#[test]
fn save_regs_and_ipmodify_change_what_runs() {
    let _g = serial();
    let f = fixture();
    let filter = || FilterSet::with_patterns(&["plain_work"], &[]).unwrap();
    // SAVE_REGS: the callback rewrites an argument register.
    let regs_ops = Ops::new(double_first_arg, ftrace::SAVE_REGS, filter());
    ftrace::register(&regs_ops).unwrap();
    assert_eq!((f.plain_work)(5), 512);
    ftrace::unregister(&regs_ops).unwrap();
    // IPMODIFY: the call continues in a replacement, which returns to the caller.
    let ip_ops = Ops::new(
        redirect_to_replacement,
        ftrace::IPMODIFY | ftrace::SAVE_REGS,
        filter(),
    );
    ftrace::register(&ip_ops).unwrap();
    assert_eq!((f.plain_work)(5), -5);
    assert_eq!(
        (f.outer)(5),
        -4,
        "a traced caller gets the replacement's result"
    );
    // One IP-modifying ops per site.
    let other = Ops::new(
        redirect_to_replacement,
        ftrace::IPMODIFY | ftrace::SAVE_REGS,
        filter(),
    );
    assert!(matches!(
        ftrace::register(&other),
        Err(ftrace::CoreError::Busy { .. })
    ));
    // Shared with a plain probe (list function through the regs caller).
    let p = Probe::new();
    let probe = probe_ops(p, &["plain_work"], &[], OpsFlags::NONE);
    ftrace::register(&probe).unwrap();
    assert_eq!((f.plain_work)(7), -7);
    assert_eq!(p.take()[11], 1);
    ftrace::unregister(&probe).unwrap();
    ftrace::unregister(&ip_ops).unwrap();
    assert_eq!((f.plain_work)(5), 17);
    let s = ftrace::site_by_name("plain_work").unwrap();
    assert_ne!(s.flags & site_flags::MODIFIED, 0, "sticky MODIFIED stays");
    assert_clean();
}

#[test]
fn thread_filter_admits_only_listed_threads() {
    let _g = serial();
    let f = fixture();
    let p = Probe::new();
    let ops = probe_ops(p, &["plain_work"], &[], OpsFlags::NONE);
    ftrace::register(&ops).unwrap();
    let run_in_thread = || {
        std::thread::spawn(move || {
            let tid = ftrace::current_tid();
            (f.plain_work)(1);
            tid
        })
    };
    let me = ftrace::current_tid();
    ftrace::set_thread_filter(&ops, Some(ftrace::ThreadFilter::new(&[me], &[])));
    (f.plain_work)(1);
    let other = run_in_thread().join().unwrap();
    assert_ne!(other, me);
    assert_eq!(p.take()[11], 1, "only the listed thread is traced");
    ftrace::set_thread_filter(&ops, Some(ftrace::ThreadFilter::new(&[], &[me])));
    (f.plain_work)(1);
    run_in_thread().join().unwrap();
    assert_eq!(
        p.take()[11],
        1,
        "the no-trace thread is not traced, others are"
    );
    ftrace::set_thread_filter(&ops, None);
    (f.plain_work)(1);
    run_in_thread().join().unwrap();
    assert_eq!(p.take()[11], 2);
    ftrace::unregister(&ops).unwrap();
    assert_clean();
}

/// Objects added while ops are registered: an ops tracing all gets their
/// functions, and a pattern naming a module not loaded yet resolves when it
/// arrives.
#[test]
fn objects_added_later_join_registered_filters() {
    let _g = serial();
    let (pa, pb) = (Probe::new(), Probe::new());
    let all = probe_ops(pa, &[], &[], OpsFlags::NONE);
    let later = Ops::with_private(
        probe_cb,
        OpsFlags::NONE,
        FilterSet::with_patterns(&["mid@liblater.so"], &[]).unwrap(),
        pb as *const Probe as usize,
    );
    ftrace::register(&all).unwrap();
    ftrace::register(&later).unwrap();
    let lib = load_into_core("later", "calls.c");
    invariants();
    let mid = ftrace::site_by_name("mid").unwrap();
    assert_eq!(mid.count, 2, "both ops now trace the new object's mid");
    assert_eq!(ftrace::site_by_name("leaf").unwrap().count, 1);
    let run: extern "C" fn(i32) -> i64 = lib.func("run");
    run(3);
    ftrace::unregister(&all).unwrap();
    ftrace::unregister(&later).unwrap();
    assert_clean();
}
