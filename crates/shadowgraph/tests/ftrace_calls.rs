//! What an ops may do to a traced call, on real gcc-built code: direct
//! calls with gap-free retargeting, registers and resume addresses changed,
//! errno kept, also under signals; registration churn under running
//! threads, thread filters, and objects loaded after registration.

mod common;

use common::probes::*;
use common::*;
use shadowgraph::ftrace::{self, site_flags, FilterEdit, FilterSet, Ops, OpsFlags, Regs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

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

/// The two direct targets (their counters zeroed) and plain_work's index.
fn direct_targets() -> (usize, usize, i32) {
    DIRECT_A.store(0, Ordering::SeqCst);
    DIRECT_B.store(0, Ordering::SeqCst);
    let pw = NAMES.iter().position(|&n| n == "plain_work").unwrap() as i32;
    (
        sg_test_direct_a as *const () as usize,
        sg_test_direct_b as *const () as usize,
        pw,
    )
}

#[test]
fn direct_calls_register_modify_share_and_leave() {
    let _g = serial();
    let f = loaded();
    let (ta, tb, pw) = direct_targets();
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
    // Shared with a probe: the probe's chained caller, then the direct
    // target; with a second probe, the regs caller and the list function.
    let p = Probe::new();
    let probe = probe_ops(p, &[], &[], OpsFlags::NONE);
    ftrace::register(&probe).unwrap();
    invariants();
    let s = ftrace::site_by_name("plain_work").unwrap();
    let (_, regs_caller) = ftrace::shared_callers(s.arena).unwrap();
    assert_ne!(s.target, regs_caller, "chained caller");
    assert_ne!(s.flags & site_flags::TRAMP_EN, 0);
    let r50 = (f.run_one)(pw, 50);
    assert_eq!((f.run_one)(pw, 50), r50);
    assert_eq!(DIRECT_B.swap(0, Ordering::SeqCst), 100);
    assert_eq!(p.take()[pw as usize], 100);
    let chained = s.target;
    let p2 = Probe::new();
    let probe2 = probe_ops(p2, &[], &[], OpsFlags::NONE);
    ftrace::register(&probe2).unwrap();
    invariants();
    let s = ftrace::site_by_name("plain_work").unwrap();
    assert_eq!(s.target, regs_caller, "regs caller");
    assert_eq!((f.run_one)(pw, 50), r50);
    assert_eq!(DIRECT_B.swap(0, Ordering::SeqCst), 50);
    assert_eq!((p.take()[pw as usize], p2.take()[pw as usize]), (50, 50));
    ftrace::unregister(&probe2).unwrap();
    invariants();
    // Retargeted while chained: a chained caller of the new target.
    ftrace::modify_direct(&d, ta).unwrap();
    invariants();
    let s = ftrace::site_by_name("plain_work").unwrap();
    assert!(s.target != chained && s.target != regs_caller);
    assert_eq!((f.run_one)(pw, 50), r50);
    assert_eq!(DIRECT_A.swap(0, Ordering::SeqCst), 50);
    assert_eq!(p.take()[pw as usize], 50);
    ftrace::modify_direct(&d, tb).unwrap();
    ftrace::unregister(&probe).unwrap();
    let s = ftrace::site_by_name("plain_work").unwrap();
    assert_eq!(s.target, ftrace::direct_pad(s.arena, tb).unwrap());
    ftrace::unregister(&d).unwrap();
    assert_clean();
}

/// Two threads calling plain_work (index `pw`) 1000 times a round until
/// `stop`; `calls` counts the calls made.
fn calling_plain_work(
    pw: i32,
) -> (
    Arc<AtomicBool>,
    Arc<AtomicU64>,
    Vec<std::thread::JoinHandle<()>>,
) {
    let f = loaded();
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let expect_sum: i64 = (0..1000).map(|i| i + 12).sum();
    let workers = (0..2)
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
    (stop, calls, workers)
}

#[test]
fn direct_modify_under_concurrent_calls_never_misses() {
    let _g = serial();
    loaded();
    let (ta, tb, pw) = direct_targets();
    let d = Ops::new_direct(FilterSet::with_patterns(&["plain_work", "sched_*"], &[]).unwrap());
    ftrace::register_direct(&d, ta).unwrap();
    let (stop, calls, workers) = calling_plain_work(pw);
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

/// Threads call a function whose direct call is shared with an ops that
/// comes and goes (chained caller ↔ pad), with a second ops now and then
/// (the regs caller and the list function) and retargets: every call
/// reaches the old or the new target exactly once, and no callback runs
/// after its ops left.
#[test]
fn chained_direct_calls_under_churn_never_miss() {
    let _g = serial();
    loaded();
    let (ta, tb, pw) = direct_targets();
    let d = Ops::new_direct(FilterSet::with_patterns(&["plain_work"], &[]).unwrap());
    ftrace::register_direct(&d, ta).unwrap();
    let (stop, calls, workers) = calling_plain_work(pw);
    VIOLATIONS.store(0, Ordering::Relaxed);
    let mut chained = 0;
    for round in 0..60 {
        let p = Probe::new();
        let probe = probe_ops(p, &["plain_work"], &[], OpsFlags::NONE);
        ftrace::register(&probe).unwrap();
        let s = ftrace::site_by_name("plain_work").unwrap();
        chained += (s.flags & site_flags::TRAMP_EN != 0) as u32;
        let second = (round % 4 == 0).then(|| {
            let p2 = Probe::new();
            let o = probe_ops(p2, &["plain_work"], &[], OpsFlags::NONE);
            ftrace::register(&o).unwrap();
            (o, p2)
        });
        if round % 3 == 0 {
            ftrace::modify_direct(&d, if round % 2 == 0 { tb } else { ta }).unwrap();
        }
        invariants();
        if let Some((o, p2)) = second {
            ftrace::unregister(&o).unwrap();
            p2.magic.store(DEAD, Ordering::Relaxed);
        }
        ftrace::unregister(&probe).unwrap();
        p.magic.store(DEAD, Ordering::Relaxed);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    invariants();
    ftrace::unregister(&d).unwrap();
    assert_eq!(chained, 60, "the probe and the direct call were chained");
    let hits = DIRECT_A.load(Ordering::SeqCst) + DIRECT_B.load(Ordering::SeqCst);
    let made = calls.load(Ordering::Relaxed);
    eprintln!("60 rounds: {made} calls, {hits} reached a target");
    assert_eq!(hits, made, "every call reaches the old or the new target");
    assert_eq!(
        VIOLATIONS.load(Ordering::Relaxed),
        0,
        "a callback ran after unregister returned"
    );
    assert_clean();
}

/// Threads call traced functions while ops come and go; a callback never
/// runs for an ops after unregister returned (its probe is marked dead).
#[test]
fn registration_churn_under_running_threads() {
    let _g = serial();
    let f = loaded();
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
    let mut set_served = 0;
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
        // Sites that two ops with trampolines share call their set's
        // caller: neither shared caller, no trampoline of one ops.
        set_served += NAMES
            .iter()
            .filter_map(|n| ftrace::site_by_name(n))
            .filter(|s| {
                let callers = ftrace::shared_callers(s.arena).unwrap();
                s.count >= 2
                    && s.flags & site_flags::TRAMP == 0
                    && ![0, callers.0, callers.1].contains(&s.target)
            })
            .count();
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
    assert!(set_served > 0, "no site was served by a set's caller");
    // The code grace periods (one for each unregistration that retires
    // code: up to 180 here) scan the threads' live stacks conservatively:
    // a stale word that a frame left uninitialised, pointing into a
    // trampoline just retired, holds one until it gives up (counted; the
    // code is never reused). One such word in a run happens; more is a
    // thread that stays inside.
    let given_up = ftrace::counters().code_grace_given_up;
    assert!(
        given_up <= 1,
        "{given_up} code grace periods could not complete"
    );
    assert_clean();
}

extern "C" fn clobber_errno(_ip: usize, _p: usize, _ops: &Ops, _r: &mut Regs) {
    // SAFETY: close(-1) fails with EBADF, setting errno: a callback's syscall.
    unsafe { libc::close(-1) };
}

#[test]
fn callbacks_preserve_errno_for_the_traced_function() {
    let _g = serial();
    let lib_errno_seen = loaded().errno_seen;
    for flags in [
        OpsFlags::NONE,
        ftrace::RECURSION,
        ftrace::NO_TRAMP,
        ftrace::SAVE_REGS,
    ] {
        let ops = Ops::new(
            clobber_errno,
            flags,
            FilterSet::with_patterns(&["errno_seen"], &[]).unwrap(),
        );
        ftrace::register(&ops).unwrap();
        // Each entry's first call on a thread and the next (the args
        // variant's assembly entry takes a thread whose errno location it
        // has cached).
        for i in 0..3 {
            // SAFETY: setting this thread's errno.
            unsafe { *libc::__errno_location() = 1234 + i };
            assert_eq!(
                lib_errno_seen(1),
                1235 + i,
                "errno changed under the traced function (flags {flags:?}, call {i})"
            );
        }
        ftrace::unregister(&ops).unwrap();
    }
    assert_clean();
}

static SIGNAL_CALLS: AtomicU64 = AtomicU64::new(0);
static CLOBBER_CALLS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_and_clobber_errno(_ip: usize, _p: usize, _ops: &Ops, _r: &mut Regs) {
    CLOBBER_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: close(-1) fails with EBADF, setting errno: a callback's syscall.
    unsafe { libc::close(-1) };
}

/// A handler that calls the traced function, leaving errno as it found it
/// (as a handler must).
extern "C" fn call_traced_in_handler(_: libc::c_int) {
    // SAFETY: this thread's errno, read and put back.
    let e = unsafe { *libc::__errno_location() };
    (loaded().errno_seen)(0);
    SIGNAL_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

/// An ops' own trampoline under signals whose handlers call the traced
/// function too, landing anywhere in its entry (the assembly one for a
/// thread at rest, the Rust one inside a bracket): every call reaches the
/// callback once, and errno is kept for the traced function each time.
#[test]
fn ops_entry_under_signals_counts_every_call_and_keeps_errno() {
    use std::os::unix::thread::JoinHandleExt;
    let _g = serial();
    let errno_seen = loaded().errno_seen;
    // SAFETY: installing a handler for SIGUSR1 (async-signal-safe body).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = call_traced_in_handler as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    const CALLS: i32 = 200_000;
    for flags in [OpsFlags::NONE, ftrace::RECURSION] {
        let ops = Ops::new(
            count_and_clobber_errno,
            flags,
            FilterSet::with_patterns(&["errno_seen"], &[]).unwrap(),
        );
        ftrace::register(&ops).unwrap();
        CLOBBER_CALLS.store(0, Ordering::Relaxed);
        SIGNAL_CALLS.store(0, Ordering::Relaxed);
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let worker = std::thread::spawn(move || {
            let mut wrong = 0;
            for i in 0..CALLS {
                // SAFETY: setting this thread's errno.
                unsafe { *libc::__errno_location() = i };
                if errno_seen(1) != i + 1 {
                    wrong += 1;
                }
            }
            d.store(true, Ordering::Relaxed);
            wrong
        });
        let t = worker.as_pthread_t();
        let mut sent = 0u64;
        while !done.load(Ordering::Relaxed) {
            // SAFETY: the worker is joined only below, after the last kill.
            unsafe { libc::pthread_kill(t, libc::SIGUSR1) };
            sent += 1;
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
        let wrong = worker.join().unwrap();
        ftrace::unregister(&ops).unwrap();
        let in_handlers = SIGNAL_CALLS.load(Ordering::Relaxed);
        assert_eq!(
            wrong, 0,
            "errno changed under the traced function ({flags:?})"
        );
        assert!(in_handlers > 0 && sent > 0, "no handler ran ({flags:?})");
        assert_eq!(
            CLOBBER_CALLS.load(Ordering::Relaxed),
            CALLS as u64 + in_handlers,
            "calls missed or repeated ({flags:?}; {in_handlers} in handlers)"
        );
    }
    // SAFETY: back to the default action (no signal is pending: the worker
    // has been joined).
    unsafe { libc::signal(libc::SIGUSR1, libc::SIG_DFL) };
    assert_clean();
}

extern "C" fn double_first_arg(_ip: usize, _p: usize, _ops: &Ops, r: &mut Regs) {
    r.rdi *= 100;
}

extern "C" fn replacement(x: i32) -> i32 {
    -x
}

extern "C" fn redirect_to_replacement(_ip: usize, _p: usize, _ops: &Ops, r: &mut Regs) {
    r.rip = replacement as *const () as usize;
}

#[test]
fn save_regs_and_ipmodify_change_what_runs() {
    let _g = serial();
    let f = loaded();
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
    let f = loaded();
    let p = Probe::new();
    let ops = probe_ops(p, &["plain_work"], &[], OpsFlags::NONE);
    ftrace::register(&ops).unwrap();
    // (Two calls in each thread: a thread's first traced call takes the
    // slow way, which learns where its errno is; the second, the
    // trampoline's own test of the filter.)
    let run_in_thread = || {
        std::thread::spawn(move || {
            let tid = ftrace::current_tid();
            (f.plain_work)(1);
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
        2,
        "the no-trace thread is not traced, others are"
    );
    ftrace::set_thread_filter(&ops, None);
    (f.plain_work)(1);
    run_in_thread().join().unwrap();
    assert_eq!(p.take()[11], 3);
    // Beside another ops on the function (the two call their set's
    // caller, which calls each in turn): the filter still holds for its
    // ops alone, and the other, which takes the recursion guard, sees
    // every thread.
    let q = Probe::new();
    let beside = probe_ops(q, &["plain_work"], &[], ftrace::RECURSION);
    ftrace::register(&beside).unwrap();
    let s = ftrace::site_by_name("plain_work").unwrap();
    let callers = ftrace::shared_callers(s.arena).unwrap();
    assert!(
        s.count == 2
            && s.flags & site_flags::TRAMP == 0
            && ![0, callers.0, callers.1].contains(&s.target),
        "not served by the set's caller"
    );
    ftrace::set_thread_filter(&ops, Some(ftrace::ThreadFilter::new(&[me], &[])));
    for _ in 0..3 {
        (f.plain_work)(1);
        run_in_thread().join().unwrap();
    }
    assert_eq!(p.take()[11], 3, "only the listed thread is traced");
    assert_eq!(q.take()[11], 9, "the other ops sees every thread");
    ftrace::unregister(&beside).unwrap();
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
