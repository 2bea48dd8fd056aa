//! fgraph on real gcc-built code: entry/return with values, the kernel's
//! storage selftest, users with disjoint filters, slot reuse with a frame in
//! flight, overflow, the single-user fast path switching, limits, and users
//! registering while threads run through traced code.

mod common;

use common::*;
use shadowgraph::fgraph::{self, GraphEntry, GraphError, GraphReturn, GraphUser, RetRegs};
use shadowgraph::ftrace::{self, FilterSet, Regs};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const NAMES: [&str; 16] = [
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

struct Fixture {
    _lib: Lib,
    addrs: Vec<usize>,
    run: extern "C" fn(i32) -> i64,
    families: extern "C" fn(i32) -> i64,
    deep: extern "C" fn(i32) -> i32,
    ret_long: extern "C" fn(i64) -> i64,
    ret_double: extern "C" fn(f64) -> f64,
    block: extern "C" fn(*const AtomicI32, *const AtomicI32),
}

fn fixture() -> &'static Fixture {
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
            _lib: lib,
        }
    })
}

fn idx(func: usize) -> Option<usize> {
    fixture().addrs.iter().position(|&a| a == func)
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    let g = M.lock().unwrap_or_else(|e| e.into_inner());
    fixture();
    g
}

/// Per-function entry/return counters, and facts seen at returns.
#[derive(Default)]
struct Tally {
    entries: [AtomicU64; 16],
    returns: [AtomicU64; 16],
    last_retval: AtomicU64,
    max_depth: AtomicI32,
    unwound: AtomicU64,
}

impl Tally {
    fn new() -> &'static Tally {
        Box::leak(Box::default())
    }
    fn take(&self) -> (Vec<u64>, Vec<u64>) {
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

fn tally(u: &GraphUser) -> &'static Tally {
    // SAFETY: users made by `counting_user` carry a leaked Tally.
    unsafe { &*(u.private as *const Tally) }
}

/// Entries whose `site` was said, and said wrong (not the id a search of
/// every site finds).
static SITE_SAID: AtomicU64 = AtomicU64::new(0);
static SITE_WRONG: AtomicU64 = AtomicU64::new(0);

fn count_entry(e: &GraphEntry, u: &GraphUser, _r: &mut Regs) -> bool {
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

fn count_return(r: &GraphReturn, u: &GraphUser, _regs: &RetRegs) {
    let t = tally(u);
    if let Some(i) = idx(r.func) {
        t.returns[i].fetch_add(1, Ordering::Relaxed);
    }
    t.last_retval.store(r.retval, Ordering::Relaxed);
    if r.unwound {
        t.unwound.fetch_add(1, Ordering::Relaxed);
    }
}

fn counting_user(filter: &[&str], t: &'static Tally) -> Arc<GraphUser> {
    let fs = if filter.is_empty() {
        FilterSet::all()
    } else {
        FilterSet::with_patterns(filter, &[]).unwrap()
    };
    GraphUser::new(count_entry, count_return, fs, t as *const Tally as usize)
}

fn by_name(v: &[u64], name: &str) -> u64 {
    v[NAMES.iter().position(|&n| n == name).unwrap()]
}

fn clean() {
    ftrace::check_invariants().unwrap();
    for s in ftrace::sites() {
        assert_eq!(s.count, 0, "{} still traced", s.function);
    }
    assert_eq!(fgraph::thread_depth(), -1, "frames left on this thread");
}

#[test]
fn entries_returns_depths_and_return_values() {
    let _g = serial();
    let f = fixture();
    let t = Tally::new();
    let u = counting_user(&[], t);
    fgraph::register_graph(&u).unwrap();
    assert!(fgraph::fast_path_active());
    let said = SITE_SAID.load(Ordering::Relaxed);
    let r0 = (f.run)(10);
    let (e, r) = t.take();
    assert_eq!(by_name(&e, "g_top"), 10);
    assert_eq!(by_name(&e, "g_mid"), 10);
    assert_eq!(by_name(&e, "g_leaf"), 20);
    assert_eq!(e, r, "one return per entry");
    assert_eq!(
        t.max_depth.load(Ordering::Relaxed),
        2,
        "g_top 0, g_mid 1, g_leaf 2"
    );
    assert_eq!((f.ret_long)(7), 21);
    assert_eq!(t.last_retval.load(Ordering::Relaxed), 21);
    assert_eq!((f.ret_double)(2.0), 3.0, "xmm0 survives return_to_handler");
    assert_eq!((f.deep)(100), 100);
    let (e, r) = t.take();
    assert_eq!(by_name(&e, "g_deep"), 101);
    assert_eq!(e, r);
    // Entries through site stubs say their site, rightly.
    assert!(SITE_SAID.load(Ordering::Relaxed) > said);
    assert_eq!(SITE_WRONG.load(Ordering::Relaxed), 0);
    fgraph::unregister_graph(&u).unwrap();
    assert_eq!((f.run)(10), r0);
    assert_eq!(t.take().0.iter().sum::<u64>(), 0);
    clean();
}

// --- Storage selftest (SPEC §6.2 #1) ------------------------------------------------------

const VALUES: [(usize, u64); 4] = [
    (1, 123),
    (2, 12345),
    (4, 1234567890),
    (8, 1234567890123456789),
];
static STORE_OK: AtomicU64 = AtomicU64::new(0);
static STORE_BAD: AtomicU64 = AtomicU64::new(0);

/// private = index into VALUES.
fn store_entry(_e: &GraphEntry, u: &GraphUser, _r: &mut Regs) -> bool {
    let (size, val) = VALUES[u.private];
    let Some(p) = u.reserve(size) else {
        STORE_BAD.fetch_add(1, Ordering::Relaxed);
        return false;
    };
    // A second reservation in the same entry is refused.
    if u.reserve(8).is_some() {
        STORE_BAD.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: p points to `size` reserved bytes.
    unsafe { std::ptr::copy_nonoverlapping(val.to_le_bytes().as_ptr(), p, size) };
    true
}

fn store_return(_r: &GraphReturn, u: &GraphUser, _regs: &RetRegs) {
    let (size, val) = VALUES[u.private];
    match u.retrieve() {
        Some((p, n)) if n >= size => {
            let mut b = [0u8; 8];
            // SAFETY: p points to n ≥ size bytes of our data.
            unsafe { std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), size) };
            let mask = if size == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * size)) - 1
            };
            if u64::from_le_bytes(b) == val & mask {
                STORE_OK.fetch_add(1, Ordering::Relaxed);
            } else {
                STORE_BAD.fetch_add(1, Ordering::Relaxed);
            }
        }
        _ => {
            STORE_BAD.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
fn storage_selftest_each_size_then_four_users() {
    let _g = serial();
    let f = fixture();
    let fs = || FilterSet::with_patterns(&["g_top", "g_leaf"], &[]).unwrap();
    for (k, (size, _)) in VALUES.iter().enumerate() {
        let u = GraphUser::new(store_entry, store_return, fs(), k);
        fgraph::register_graph(&u).unwrap();
        STORE_OK.store(0, Ordering::Relaxed);
        (f.run)(10);
        fgraph::unregister_graph(&u).unwrap();
        assert_eq!(STORE_BAD.load(Ordering::Relaxed), 0, "size {size}");
        assert_eq!(
            STORE_OK.load(Ordering::Relaxed),
            30,
            "size {size}: each return read its value"
        );
    }
    let users: Vec<_> = (0..4)
        .map(|k| GraphUser::new(store_entry, store_return, fs(), k))
        .collect();
    for u in &users {
        fgraph::register_graph(u).unwrap();
    }
    assert!(!fgraph::fast_path_active());
    STORE_OK.store(0, Ordering::Relaxed);
    (f.run)(10);
    assert_eq!(STORE_BAD.load(Ordering::Relaxed), 0);
    assert_eq!(
        STORE_OK.load(Ordering::Relaxed),
        4 * 30,
        "four DATA records per frame, each intact"
    );
    for u in users.iter().rev() {
        fgraph::unregister_graph(u).unwrap();
    }
    clean();
}

#[test]
fn three_users_with_disjoint_filters_and_an_unfiltered_fourth() {
    let _g = serial();
    let f = fixture();
    let said = SITE_SAID.load(Ordering::Relaxed);
    let (ts, tl, tr, ta) = (Tally::new(), Tally::new(), Tally::new(), Tally::new());
    let us = counting_user(&["sched_*"], ts);
    let ul = counting_user(&["lock_*"], tl);
    let ur = counting_user(&["rcu_*"], tr);
    let ua = counting_user(&[], ta);
    fgraph::register_graph(&us).unwrap();
    (f.families)(5);
    fgraph::register_graph(&ul).unwrap();
    (f.families)(5);
    fgraph::register_graph(&ur).unwrap();
    (f.families)(5);
    fgraph::register_graph(&ua).unwrap();
    (f.families)(5);
    let (es, rs) = ts.take();
    let (el, rl) = tl.take();
    let (er, rr) = tr.take();
    let (ea, ra) = ta.take();
    // Each sees only its family, also when nested inside another's function.
    for (e, r, fam, rounds) in [
        (&es, &rs, "sched_", 4u64),
        (&el, &rl, "lock_", 3),
        (&er, &rr, "rcu_", 2),
    ] {
        for (i, n) in NAMES.iter().enumerate() {
            let per_round = match *n {
                "sched_outer" | "lock_a" | "rcu_a" | "sched_a" => {
                    5 * if *n == "sched_outer" { 1 } else { 2 }
                }
                _ => 0,
            };
            let want = if n.starts_with(fam) {
                per_round * rounds
            } else {
                0
            };
            assert_eq!(e[i], want, "{fam} user on {n}");
            assert_eq!(r[i], want, "{fam} user returns on {n}");
        }
    }
    assert_eq!(by_name(&ea, "sched_outer"), 5);
    assert_eq!(by_name(&ea, "lock_a"), 10);
    assert_eq!(ea, ra);
    // Several users: the general way says the site too (the stub's hint).
    assert!(SITE_SAID.load(Ordering::Relaxed) > said);
    assert_eq!(SITE_WRONG.load(Ordering::Relaxed), 0);
    for u in [&ua, &us, &ul, &ur] {
        fgraph::unregister_graph(u).unwrap();
    }
    clean();
}

#[test]
fn reused_slot_never_gets_returns_of_older_frames() {
    let _g = serial();
    let f = fixture();
    let (ta, tb) = (Tally::new(), Tally::new());
    let a = counting_user(&["g_block"], ta);
    fgraph::register_graph(&a).unwrap();
    let slot_a = a.slot().unwrap();
    let go = Arc::new(AtomicI32::new(0));
    let entered = Arc::new(AtomicI32::new(0));
    let th = {
        let (go, entered) = (go.clone(), entered.clone());
        std::thread::spawn(move || (f.block)(&*go, &*entered))
    };
    while entered.load(Ordering::SeqCst) == 0 {
        std::hint::spin_loop();
    }
    fgraph::unregister_graph(&a).unwrap();
    // Cycle the FIFO until a new user lands in A's slot.
    let b = loop {
        let b = counting_user(&["g_block"], tb);
        fgraph::register_graph(&b).unwrap();
        if b.slot() == Some(slot_a) {
            break b;
        }
        fgraph::unregister_graph(&b).unwrap();
    };
    go.store(1, Ordering::SeqCst);
    th.join().unwrap();
    let (_, rb) = tb.take();
    assert_eq!(
        by_name(&rb, "g_block"),
        0,
        "B got the return of a frame entered before it registered"
    );
    let (ea, ra) = ta.take();
    assert_eq!(
        (by_name(&ea, "g_block"), by_name(&ra, "g_block")),
        (1, 0),
        "A left before the return"
    );
    fgraph::unregister_graph(&b).unwrap();
    clean();
}

#[test]
fn overflow_is_counted_and_harmless() {
    let _g = serial();
    let f = fixture();
    let t = Tally::new();
    let u = counting_user(&["g_deep"], t);
    fgraph::register_graph(&u).unwrap();
    let before = fgraph::thread_overrun();
    assert_eq!((f.deep)(3000), 3000, "result unchanged");
    let overrun = fgraph::thread_overrun() - before;
    let (e, r) = t.take();
    assert_eq!(e, r, "every hooked call returned through the handler");
    let hooked = by_name(&e, "g_deep");
    assert!(hooked > 400 && hooked < 3001, "hooked {hooked}");
    assert_eq!(
        hooked + overrun,
        3001,
        "each call either hooked or counted as overrun"
    );
    fgraph::unregister_graph(&u).unwrap();
    clean();
}

#[test]
fn fast_path_switches_1_2_1_under_load_without_losing_returns() {
    let _g = serial();
    let f = fixture();
    let (t1, t2) = (Tally::new(), Tally::new());
    let u1 = counting_user(&["g_*"], t1);
    fgraph::register_graph(&u1).unwrap();
    assert!(fgraph::fast_path_active());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let r0 = (f.run)(20);
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!((f.run)(20), r0);
                }
            })
        })
        .collect();
    for _ in 0..50 {
        let u2 = counting_user(&["g_leaf"], t2);
        fgraph::register_graph(&u2).unwrap();
        assert!(!fgraph::fast_path_active());
        fgraph::unregister_graph(&u2).unwrap();
        assert!(
            fgraph::fast_path_active(),
            "2 -> 1 must end on the fast path"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    fgraph::unregister_graph(&u1).unwrap();
    let (e, r) = t1.take();
    assert_eq!(e, r, "u1 lost or doubled returns across mode switches");
    assert!(by_name(&e, "g_leaf") > 0);
    clean();
}

#[test]
fn limits_and_double_registration() {
    let _g = serial();
    let t = Tally::new();
    let users: Vec<_> = (0..16).map(|_| counting_user(&["g_leaf"], t)).collect();
    for u in &users {
        fgraph::register_graph(u).unwrap();
    }
    let extra = counting_user(&["g_leaf"], t);
    assert!(matches!(
        fgraph::register_graph(&extra),
        Err(GraphError::NoSpace)
    ));
    assert!(matches!(
        fgraph::register_graph(&users[3]),
        Err(GraphError::AlreadyRegistered)
    ));
    let slots: Vec<usize> = users.iter().map(|u| u.slot().unwrap()).collect();
    let mut sorted = slots.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 16);
    // Free slots are reused FIFO: release 5 then 9; the next two get 5, 9.
    fgraph::unregister_graph(&users[5]).unwrap();
    fgraph::unregister_graph(&users[9]).unwrap();
    let (x, y) = (counting_user(&[], t), counting_user(&[], t));
    fgraph::register_graph(&x).unwrap();
    fgraph::register_graph(&y).unwrap();
    assert_eq!((x.slot(), y.slot()), (Some(slots[5]), Some(slots[9])));
    assert!(matches!(
        fgraph::unregister_graph(&users[5]),
        Err(GraphError::NotRegistered)
    ));
    for (i, u) in users.iter().enumerate() {
        if i != 5 && i != 9 {
            fgraph::unregister_graph(u).unwrap();
        }
    }
    fgraph::unregister_graph(&x).unwrap();
    fgraph::unregister_graph(&y).unwrap();
    clean();
}

#[test]
fn users_come_and_go_while_threads_run() {
    let _g = serial();
    let f = fixture();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|k| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (r0, q0) = ((f.run)(30), (f.families)(10));
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!((f.run)(30), r0);
                    assert_eq!((f.families)(10), q0);
                    if k == 0 {
                        assert_eq!((f.deep)(50), 50);
                    }
                }
            })
        })
        .collect();
    let pats: [&[&str]; 4] = [&[], &["g_*"], &["sched_*", "lock_a"], &["g_leaf"]];
    for round in 0..40 {
        let tallies: Vec<&'static Tally> = (0..3).map(|_| Tally::new()).collect();
        let users: Vec<_> = (0..3)
            .map(|k| counting_user(pats[(round + k) % 4], tallies[k]))
            .collect();
        for u in &users {
            fgraph::register_graph(u).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
        for u in &users {
            fgraph::unregister_graph(u).unwrap();
        }
        for t in &tallies {
            let (e, r) = t.take();
            for (a, b) in e.iter().zip(&r) {
                assert!(b <= a, "more returns than entries");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(fgraph::counters().lost_frames, 0);
    clean();
}

struct Walk {
    frames: usize,
    hijacked: usize,
    translated_ok: usize,
    lo: usize,
    hi: usize,
}

static WALK: Mutex<Walk> = Mutex::new(Walk {
    frames: 0,
    hijacked: 0,
    translated_ok: 0,
    lo: 0,
    hi: 0,
});

/// Walks the frame-pointer chain from inside fp_deep(0), translating every
/// return address as an unwinder would.
extern "C" fn walker(fp: *const usize) {
    let mut w = WALK.lock().unwrap();
    let (lo, hi) = (w.lo, w.hi);
    let mut cursor = 0usize;
    let mut fp = fp;
    loop {
        // SAFETY: fp_deep frames keep a frame pointer (see graph.c): [fp] is
        // the caller's fp, [fp+8] the return address.
        let (next, ret) = unsafe { (*fp as *const usize, *fp.add(1)) };
        let retp = fp as usize + 8;
        let real = fgraph::ret_addr(&mut cursor, ret, retp);
        w.frames += 1;
        if fgraph::is_hijack(ret) {
            w.hijacked += 1;
        }
        if !fgraph::is_hijack(real) && (lo..hi).contains(&real) {
            w.translated_ok += 1;
        }
        if !(lo..hi).contains(&real) {
            break; // left the fixture: the caller is the test's own code
        }
        fp = next;
    }
}

#[test]
fn unwinder_translation_of_a_400_deep_stack_is_linear() {
    let _g = serial();
    let f = fixture();
    let set_walker: extern "C" fn(extern "C" fn(*const usize)) = f._lib.func("set_walker");
    let fp_deep: extern "C" fn(i32) -> i32 = f._lib.func("fp_deep");
    set_walker(walker);
    let site = ftrace::site_by_name("fp_deep").unwrap().addr;
    {
        let mut w = WALK.lock().unwrap();
        *w = Walk {
            frames: 0,
            hijacked: 0,
            translated_ok: 0,
            lo: site - 4096,
            hi: site + 4096,
        };
    }
    let t = Tally::new();
    let u = counting_user(&["fp_deep"], t);
    fgraph::register_graph(&u).unwrap();
    let v0 = fgraph::counters().ret_addr_visits;
    assert_eq!(fp_deep(400), 400);
    let visits = fgraph::counters().ret_addr_visits - v0;
    fgraph::unregister_graph(&u).unwrap();
    let w = WALK.lock().unwrap();
    assert_eq!(
        w.hijacked, 401,
        "every hooked frame's slot held our address (a stub's or the handler's)"
    );
    assert_eq!(w.frames, 401, "walked to the outermost frame");
    assert_eq!(
        w.translated_ok, 400,
        "real addresses inside fp_deep (the last returns to the test)"
    );
    assert!(
        visits <= 2 * 401,
        "unwind visited {visits} shadow frames for 401 frames"
    );
    clean();
}

#[test]
fn longjmp_over_traced_frames_reports_them_as_unwound_exits() {
    let _g = serial();
    let f = fixture();
    let lj_run: extern "C" fn() -> i32 = f._lib.func("lj_run");
    let t = Tally::new();
    let u = counting_user(&["lj_*"], t);
    fgraph::register_graph(&u).unwrap();
    assert_eq!(lj_run(), 1);
    assert_eq!(lj_run(), 1, "again: the stack is consistent");
    fgraph::unregister_graph(&u).unwrap();
    // lj_run + 6 lj_level frames per run; the 6 skipped ones are reported
    // (flagged unwound) when lj_run returns: one exit per entry.
    let entries: u64 = t.entries.iter().map(|e| e.load(Ordering::Relaxed)).sum();
    let returns: u64 = t.returns.iter().map(|e| e.load(Ordering::Relaxed)).sum();
    assert_eq!((entries, returns), (14, 14));
    assert_eq!(t.unwound.load(Ordering::Relaxed), 12);
    clean();
}

#[test]
fn signal_handler_calls_are_nested_frames() {
    let _g = serial();
    let f = fixture();
    let sig_raiser: extern "C" fn(i32) -> i32 = f._lib.func("sig_raiser");
    let t = Tally::new();
    let u = counting_user(&[], t);
    fgraph::register_graph(&u).unwrap();
    assert_eq!(sig_raiser(4), 8);
    fgraph::unregister_graph(&u).unwrap();
    let (e, r) = t.take();
    assert_eq!(e, r);
    assert_eq!(by_name(&e, "g_mid"), 1, "the handler's call was traced");
    assert_eq!(by_name(&e, "g_leaf"), 3);
    clean();
}

static ORDER: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn order_entry(_e: &GraphEntry, _u: &GraphUser, _r: &mut Regs) -> bool {
    true
}

fn order_return(r: &GraphReturn, _u: &GraphUser, _regs: &RetRegs) {
    ORDER.lock().unwrap().push(r.func);
}

#[test]
fn tail_call_frames_both_return_innermost_first() {
    let _g = serial();
    let f = fixture();
    let tail_a: extern "C" fn(i32) -> i32 = f._lib.func("tail_a");
    let (a, b) = (
        ftrace::site_by_name("tail_a").unwrap().addr,
        ftrace::site_by_name("tail_b").unwrap().addr,
    );
    let u = GraphUser::new(
        order_entry,
        order_return,
        FilterSet::with_patterns(&["tail_*"], &[]).unwrap(),
        0,
    );
    fgraph::register_graph(&u).unwrap();
    ORDER.lock().unwrap().clear();
    assert_eq!(tail_a(3), 13);
    fgraph::unregister_graph(&u).unwrap();
    assert_eq!(*ORDER.lock().unwrap(), vec![b, a]);
    clean();
}

#[test]
fn forked_child_keeps_tracing_and_can_unregister() {
    let _g = serial();
    let f = fixture();
    let t = Tally::new();
    let u = counting_user(&["g_*"], t);
    fgraph::register_graph(&u).unwrap();
    let r0 = (f.run)(5);
    t.take();
    // SAFETY: the child only runs traced C code, our callbacks (no locks
    // held by other threads are needed: the tests are serialised) and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok_run = (f.run)(5) == r0;
        let (e, r) = t.take();
        let ok_counts = by_name(&e, "g_leaf") == 10 && e == r;
        let ok_unreg = fgraph::unregister_graph(&u).is_ok();
        let ok_after = (f.run)(5) == r0 && t.take().0.iter().sum::<u64>() == 0;
        let code = (!ok_run) as i32
            | ((!ok_counts) as i32) << 1
            | ((!ok_unreg) as i32) << 2
            | ((!ok_after) as i32) << 3;
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child crashed: status {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "child checks failed (bits: run, counts, unregister, after)"
    );
    // The parent still traces.
    (f.run)(5);
    assert_eq!(by_name(&t.take().0, "g_leaf"), 10);
    fgraph::unregister_graph(&u).unwrap();
    clean();
}

use shadowgraph::fgraph::filters::{GraphFilter, Verdict};

/// A user recording (through its GraphFilter) which functions it saw.
struct Filtered {
    filter: GraphFilter,
    tally: &'static Tally,
}

fn filtered_entry(e: &GraphEntry, u: &GraphUser, _r: &mut Regs) -> bool {
    // SAFETY: users made by filtered_user carry a leaked Filtered.
    let f = unsafe { &*(u.private as *const Filtered) };
    match f.filter.entry(e, u) {
        Verdict::Record(p) => {
            // SAFETY: 8 reserved bytes.
            unsafe { p.write(e.func as u64) };
            if let Some(i) = idx(e.func) {
                f.tally.entries[i].fetch_add(1, Ordering::Relaxed);
            }
            true
        }
        Verdict::Silent => true,
        Verdict::Reject => false,
    }
}

fn filtered_return(r: &GraphReturn, u: &GraphUser, _regs: &RetRegs) {
    // SAFETY: as in filtered_entry.
    let f = unsafe { &*(u.private as *const Filtered) };
    if let Some(p) = f.filter.ret(r, u) {
        // SAFETY: the 8 bytes reserved at entry hold the function.
        assert_eq!(unsafe { p.read() }, r.func as u64, "data of another frame");
        if let Some(i) = idx(r.func) {
            f.tally.returns[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn filtered_user(filter: GraphFilter, t: &'static Tally) -> Arc<GraphUser> {
    let f: &'static Filtered = Box::leak(Box::new(Filtered { filter, tally: t }));
    GraphUser::new(
        filtered_entry,
        filtered_return,
        FilterSet::all(),
        f as *const Filtered as usize,
    )
}

fn names_seen(t: &Tally) -> Vec<(&'static str, u64)> {
    let (e, r) = t.take();
    assert_eq!(e, r, "recorded entries and returns differ");
    NAMES
        .iter()
        .zip(e)
        .filter(|(_, n)| *n > 0)
        .map(|(n, c)| (*n, c))
        .collect()
}

#[test]
fn graph_filters_depth_functions_notrace_threads() {
    let _g = serial();
    let f = fixture();
    let fs = |p: &[&str]| Some(FilterSet::with_patterns(p, &[]).unwrap());
    let cases: Vec<(GraphFilter, Vec<(&str, u64)>)> = vec![
        (
            GraphFilter {
                max_depth: 2,
                ..Default::default()
            },
            vec![("g_mid", 3), ("g_top", 3)],
        ),
        (
            GraphFilter {
                functions: fs(&["g_mid"]),
                ..Default::default()
            },
            vec![("g_leaf", 6), ("g_mid", 3)],
        ),
        (
            GraphFilter {
                notrace: fs(&["g_mid"]),
                ..Default::default()
            },
            vec![("g_top", 3)],
        ),
        (
            GraphFilter {
                functions: fs(&["g_top"]),
                notrace: fs(&["g_mid"]),
                ..Default::default()
            },
            vec![("g_top", 3)],
        ),
        (
            GraphFilter {
                functions: fs(&["g_mid"]),
                max_depth: 1,
                ..Default::default()
            },
            vec![("g_mid", 3)],
        ),
    ];
    for (filter, want) in cases {
        let t = Tally::new();
        let u = filtered_user(filter, t);
        fgraph::register_graph(&u).unwrap();
        (f.run)(3);
        fgraph::unregister_graph(&u).unwrap();
        let mut got = names_seen(t);
        got.sort();
        let mut want = want;
        want.sort();
        assert_eq!(got, want);
    }
    // Thread filter: only this thread is recorded.
    let t = Tally::new();
    let me = ftrace::current_tid();
    let u = filtered_user(
        GraphFilter {
            threads: Some(ftrace::ThreadFilter::new(&[me], &[])),
            ..Default::default()
        },
        t,
    );
    fgraph::register_graph(&u).unwrap();
    (f.run)(1);
    std::thread::spawn(move || (f.run)(1)).join().unwrap();
    fgraph::unregister_graph(&u).unwrap();
    assert_eq!(
        names_seen(t).iter().map(|x| x.1).sum::<u64>(),
        4,
        "one g_top, g_mid, 2 g_leaf"
    );
    clean();
}

/// SPEC §6.2 #13: a second user keeps frames inside a notrace subtree of the
/// first; the first records nothing there and resumes after it.
#[test]
fn notrace_subtree_stays_silent_while_another_user_keeps_frames() {
    let _g = serial();
    let f = fixture();
    let (ta, tb) = (Tally::new(), Tally::new());
    let a = filtered_user(
        GraphFilter {
            notrace: Some(FilterSet::with_patterns(&["g_mid"], &[]).unwrap()),
            ..Default::default()
        },
        ta,
    );
    let b = counting_user(&[], tb);
    fgraph::register_graph(&a).unwrap();
    fgraph::register_graph(&b).unwrap();
    (f.run)(4);
    fgraph::unregister_graph(&b).unwrap();
    fgraph::unregister_graph(&a).unwrap();
    assert_eq!(names_seen(ta), vec![("g_top", 4)]);
    let (eb, rb) = tb.take();
    assert_eq!((by_name(&eb, "g_leaf"), by_name(&rb, "g_leaf")), (8, 8));
    clean();
}

#[test]
fn thread_exiting_inside_traced_frames_reports_them() {
    let _g = serial();
    let f = fixture();
    let run_exit_thread: extern "C" fn() -> i64 = f._lib.func("run_exit_thread_hooked");
    let set_before_exit: extern "C" fn(extern "C" fn()) = f._lib.func("set_before_exit");
    // What the agent's pthread_exit interposer does before the forced
    // unwind: the unwinder must see real return addresses.
    extern "C" fn unhook() {
        fgraph::unhook_thread();
    }
    set_before_exit(unhook);
    let t = Tally::new();
    let u = counting_user(&["exit_*"], t);
    fgraph::register_graph(&u).unwrap();
    assert_eq!(run_exit_thread(), 42, "pthread_exit value");
    assert_eq!(run_exit_thread(), 42);
    fgraph::unregister_graph(&u).unwrap();
    let (e, r) = t.take();
    assert_eq!(by_name(&e, "exit_deep_hooked"), 8);
    assert_eq!(by_name(&e, "exit_thread_hooked"), 2);
    assert_eq!(
        e, r,
        "open frames of an exiting thread are reported as exits"
    );
    assert!(t.unwound.load(Ordering::Relaxed) >= 10);
    clean();
}

#[test]
fn frames_skipped_by_longjmp_to_an_untraced_setjmp_are_dropped_at_entry() {
    let _g = serial();
    let f = fixture();
    let lj2_loop: extern "C" fn(i32) -> i32 = f._lib.func("lj2_loop");
    let t = Tally::new();
    let u = counting_user(&["lj2_*"], t);
    fgraph::register_graph(&u).unwrap();
    let over0 = fgraph::thread_overrun();
    assert_eq!(lj2_loop(2000), 2000);
    assert_eq!(
        fgraph::thread_overrun(),
        over0,
        "dead frames filled the shadow stack"
    );
    assert!(
        fgraph::thread_depth() < 4,
        "at most the last round's frames remain"
    );
    // The last round's frames are dropped by the next traced entry.
    assert_eq!(lj2_loop(1), 1);
    fgraph::unregister_graph(&u).unwrap();
    let (e, r) = t.take();
    assert_eq!(by_name(&e, "lj2_deep"), 2001 * 4);
    assert!(
        by_name(&r, "lj2_deep") >= 2000 * 4,
        "skipped frames reported as exits"
    );
    // Leave no frame behind for the other tests on this thread.
    fgraph::register_graph(&u).unwrap();
    (f.run)(1);
    fgraph::unregister_graph(&u).unwrap();
    t.take();
}

/// A signal handler that interrupted our code (a bracket open below its
/// calls') drops no frame as dead, whatever the top frame's slot: the
/// interrupted code may be publishing that frame (written, published,
/// about to be written again) with the words another handler, which ran
/// just before the publish, left in it (a frame of that handler's, whose
/// slot is this one's). Outside such a handler the same frame goes.
#[test]
fn a_handler_inside_our_code_drops_no_frame_as_dead() {
    let _g = serial();
    let f = fixture();
    let leaf: extern "C" fn(i32) -> i32 = f._lib.func("g_leaf");
    let t = Tally::new();
    let u = counting_user(&[], t);
    fgraph::register_graph(&u).unwrap();
    assert_eq!(leaf(2), 4);
    let base = fgraph::stack_top();
    // A frame whose return slot lies below every call's here: dead by the
    // slots, as a longjmp leaves one, or as the words a handler left.
    // SAFETY: slot 8 lies below every live call's return slot.
    unsafe { fgraph::push_frame(0x1000, leaf as usize, 8, 0) }.unwrap();
    let top = fgraph::stack_top();
    {
        // The interrupted code's bracket, then the handler's call.
        let _interrupted = ftrace::quiesce::Bracket::enter();
        assert_eq!(leaf(2), 4);
        assert_eq!(
            fgraph::stack_top(),
            top,
            "a handler's call dropped the top frame"
        );
    }
    // At rest, the next call drops it.
    assert_eq!(leaf(2), 4);
    assert_eq!(fgraph::stack_top(), base, "the dead frame stayed");
    fgraph::unregister_graph(&u).unwrap();
    let (e, r) = t.take();
    assert_eq!(by_name(&e, "g_leaf"), by_name(&r, "g_leaf"));
    clean();
}

/// SPEC §6.1 #3: signals arriving at any instruction of the entry and
/// return paths (a 20 µs timer aimed at the thread, over 1000 rounds of
/// 1000 traced calls), whose handler calls traced functions and — second part — leaves
/// every 8th time by siglongjmp out of whatever it interrupted. Every round
/// that completes has the right sum (each hijacked return resumed at its
/// address with its value); entries and returns balance (frames a jump
/// skipped are reported as unwound exits); no return ever lacks its frame.
#[test]
fn signals_that_push_pop_and_unwind_anywhere() {
    let _g = serial();
    let f = fixture();
    type Fuzz = extern "C" fn(i32, i32, *mut i64, *mut i64, *mut i64, *mut i64);
    let fuzz: Fuzz = f._lib.func("g_fuzz");
    let leaf: extern "C" fn(i32) -> i32 = f._lib.func("g_leaf");
    for unwind in [0, 1] {
        let t = Tally::new();
        let u = counting_user(&[], t);
        fgraph::register_graph(&u).unwrap();
        let lost = fgraph::counters().lost_frames;
        let (mut good, mut bad, mut left, mut hits) = (0i64, 0i64, 0i64, 0i64);
        fuzz(1000, unwind, &mut good, &mut bad, &mut left, &mut hits);
        // A last traced call finds the frames a final jump left behind.
        assert_eq!(leaf(2), 4);
        fgraph::unregister_graph(&u).unwrap();
        assert_eq!(bad, 0, "unwind={unwind}: a round's sum was wrong");
        assert!(hits > 500, "unwind={unwind}: only {hits} signals");
        if unwind == 1 {
            assert!(left > 10, "only {left} rounds left by a jump");
        } else {
            assert_eq!(left, 0);
        }
        assert_eq!(good + left, 1000, "every round completed or was left");
        assert_eq!(fgraph::counters().lost_frames, lost);
        if unwind == 1 {
            assert!(ftrace::counters().abandoned_brackets > 0);
        }
        assert_eq!(
            fgraph::thread_depth(),
            -1,
            "unwind={unwind}: frames left over"
        );
        let (e, r) = t.take();
        if unwind == 0 {
            assert_eq!(e, r, "entries and returns balance");
        } else {
            // A jump can leave one entry callback it interrupted without its
            // exit (the frame's users were not yet published), never more,
            // and never an exit without its entry.
            let extra: u64 = e.iter().zip(&r).map(|(e, r)| e - r).sum();
            assert!(
                e.iter().zip(&r).all(|(e, r)| r <= e) && extra <= left as u64,
                "entries {e:?} returns {r:?}, {left} rounds left"
            );
        }
        assert!(by_name(&e, "g_top") >= (1000 - left as u64) * 1000);
        assert!(by_name(&e, "g_mid") as i64 >= hits.min(1));
    }
    clean();
}
