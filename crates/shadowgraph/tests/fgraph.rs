//! fgraph on real gcc-built code: entry/return with values, the kernel's
//! storage selftest, users with disjoint filters, slot reuse with a frame in
//! flight, overflow, the single-user fast path switching, limits, and users
//! registering while threads run through traced code.

mod common;

use common::graph::*;
use shadowgraph::fgraph::{self, GraphEntry, GraphError, GraphReturn, GraphUser, RetRegs};
use shadowgraph::ftrace::{FilterSet, Regs};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

#[test]
fn entries_returns_depths_and_return_values() {
    let _g = serial();
    let f = loaded();
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

/// The program's callee-saved registers come back as they were through a
/// traced call with one user (its fast path), and with two and three
/// (their loop over users, which keeps its own state in those registers).
#[test]
fn callee_saved_registers_survive_one_two_and_three_users() {
    let _g = serial();
    let f = loaded();
    let ts = [Tally::new(), Tally::new(), Tally::new()];
    let mut users = Vec::new();
    for (n, t) in ts.iter().enumerate() {
        let u = counting_user(&["g_leaf"], t);
        fgraph::register_graph(&u).unwrap();
        users.push(u);
        assert_eq!(fgraph::fast_path_active(), n == 0);
        for _ in 0..3 {
            assert_eq!((f.callee_saved_changed)(), 0, "with {} users", n + 1);
        }
        for (k, t) in ts[..=n].iter().enumerate() {
            let (e, r) = t.take();
            assert_eq!(by_name(&e, "g_leaf"), 3, "user {k} of {}", n + 1);
            assert_eq!(e, r);
        }
    }
    for u in &users {
        fgraph::unregister_graph(u).unwrap();
    }
    assert_eq!((f.callee_saved_changed)(), 0, "untraced");
    clean();
}

// --- Storage selftest ------------------------------------------------------------------

const VALUES: [(usize, u64); 4] = [
    (1, 123),
    (2, 12345),
    (4, 1234567890),
    (8, 1234567890123456789),
];
static STORE_OK: AtomicU64 = AtomicU64::new(0);
static STORE_BAD: AtomicU64 = AtomicU64::new(0);

/// private = index into VALUES.
extern "C" fn store_entry(_e: &GraphEntry, u: &GraphUser, _r: &mut Regs) -> bool {
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

extern "C" fn store_return(_r: &GraphReturn, u: &GraphUser, _regs: &RetRegs) {
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
    let f = loaded();
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
    let f = loaded();
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
    let f = loaded();
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
    let f = loaded();
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
fn fast_path_switches_1_2_3_2_1_under_load_without_losing_returns() {
    let _g = serial();
    let f = loaded();
    let (t1, t2, t3) = (Tally::new(), Tally::new(), Tally::new());
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
        std::thread::sleep(std::time::Duration::from_micros(200));
        let u3 = counting_user(&["g_*"], t3);
        fgraph::register_graph(&u3).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(200));
        fgraph::unregister_graph(&u3).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(200));
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
    // The users that came and went: never a return without its entry.
    for t in [t2, t3] {
        let (e, r) = t.take();
        for (a, b) in e.iter().zip(&r) {
            assert!(b <= a, "more returns than entries");
        }
        assert!(by_name(&e, "g_leaf") > 0);
    }
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
    let f = loaded();
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
        for (k, t) in tallies.iter().enumerate() {
            let (e, r) = t.take();
            for (a, b) in e.iter().zip(&r) {
                assert!(b <= a, "more returns than entries");
            }
            // Only calls its filter selects, though slots are reused
            // by users with other filters (the sites' masks).
            let pat = pats[(round + k) % 4];
            for (i, n) in NAMES.iter().enumerate() {
                let wanted = pat.is_empty()
                    || pat.iter().any(|p| match p.strip_suffix('*') {
                        Some(prefix) => n.starts_with(prefix),
                        None => p == n,
                    });
                assert!(
                    wanted || e[i] == 0,
                    "a user of {pat:?} got {} calls of {n}",
                    e[i]
                );
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

/// Where `hold_at_stub` holds the thread it lands on: `g_leaf`'s stub
/// (its two instructions), and fgraph's site entry before its bracket,
/// called from that stub.
static STUB: AtomicU64 = AtomicU64::new(0);
static ENTRY: AtomicU64 = AtomicU64::new(0);
static BRACKET: AtomicU64 = AtomicU64::new(0);
static HELD: AtomicBool = AtomicBool::new(false);
static RELEASE: AtomicBool = AtomicBool::new(false);

/// A signal handler that, landing on `STUB`'s instructions before its
/// call of the entry, or in the entry before its bracket called from
/// there (the site's jump made, no grace period waiting for the thread),
/// holds the thread there until `RELEASE`, once.
extern "C" fn hold_at_stub(_: i32, _: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel's ucontext for this handler.
    let regs = unsafe { &(*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs };
    let (pc, rbp) = (
        regs[libc::REG_RIP as usize] as u64,
        regs[libc::REG_RBP as usize] as u64,
    );
    let stub = STUB.load(Ordering::Relaxed);
    let before_bracket = (ENTRY.load(Ordering::Relaxed)..BRACKET.load(Ordering::Relaxed))
        .contains(&pc)
        // SAFETY: there, rbp frames the entry's call (its return address,
        // stub + 13, at rbp + 8).
        && unsafe { *((rbp + 8) as *const u64) } == stub + 13;
    if (pc == stub || pc == stub + 7 || before_bracket) && !HELD.swap(true, Ordering::SeqCst) {
        while !RELEASE.load(Ordering::SeqCst) {
            // SAFETY: async-signal-safe.
            unsafe { libc::sched_yield() };
        }
    }
}

/// A call whose thread took the site's patched jump just before the
/// site went back to a nop, and enters fgraph's bracket only after the
/// users changed, is offered to the users that want the site now: the
/// thread is held before the bracket (which a grace period waits for)
/// while the only user that wanted the site leaves, leaving a sole user
/// that does not.
#[test]
fn a_call_held_at_a_stub_across_a_change_of_users_goes_to_the_users_of_now() {
    let _g = serial();
    let f = loaded();
    let (tx, tu) = (Tally::new(), Tally::new());
    let u = counting_user(&["g_top", "g_mid"], tu);
    let x = counting_user(&["g_leaf"], tx);
    fgraph::register_graph(&u).unwrap();
    fgraph::register_graph(&x).unwrap();
    let site = shadowgraph::ftrace::site_by_name("g_leaf").unwrap().addr;
    // SAFETY: the site's five bytes, now a jump to its stub.
    let code: [u8; 5] = unsafe { std::ptr::read(site as *const [u8; 5]) };
    let rel = i32::from_le_bytes(code[1..5].try_into().unwrap());
    STUB.store((site as i64 + 5 + rel as i64) as u64, Ordering::SeqCst);
    let (entry, bracket) = fgraph::site_entry_before_bracket();
    ENTRY.store(entry as u64, Ordering::SeqCst);
    BRACKET.store(bracket as u64, Ordering::SeqCst);
    // SAFETY: a handler that only reads its context and spins.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = hold_at_stub as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicI32::new(0));
    let worker = {
        let (stop, tid) = (stop.clone(), tid.clone());
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid.store(unsafe { libc::gettid() }, Ordering::SeqCst);
            while !stop.load(Ordering::Relaxed) {
                (f.run)(5);
            }
        })
    };
    while tid.load(Ordering::SeqCst) == 0 {
        std::hint::spin_loop();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !HELD.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        // SAFETY: a signal to a thread of this process.
        unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                libc::getpid(),
                tid.load(Ordering::SeqCst),
                libc::SIGUSR2,
            )
        };
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
    let held = HELD.load(Ordering::SeqCst);
    // Held there: the site goes back to a nop, u becomes the sole user;
    // then the thread goes on into the bracket. (Undone whatever
    // happened, for the tests after this one.)
    fgraph::unregister_graph(&x).unwrap();
    let sole = fgraph::fast_path_active();
    RELEASE.store(true, Ordering::SeqCst);
    std::thread::sleep(std::time::Duration::from_millis(20));
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    fgraph::unregister_graph(&u).unwrap();
    clean();
    assert_eq!(code[0], 0xe9, "g_leaf's site jumps to its stub");
    assert!(held, "no signal landed before the bracket in 60 s");
    assert!(sole);
    let (eu, ru) = tu.take();
    assert_eq!(
        by_name(&eu, "g_leaf"),
        0,
        "the sole user got a call of a site it never wanted"
    );
    assert!(by_name(&eu, "g_top") > 0);
    assert_eq!(eu, ru);
}
