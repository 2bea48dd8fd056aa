//! The ftrace core on real gcc-built code: kernel-selftest-style probes with
//! exact hit counts, the filter algebra, the trampoline accounting in every
//! order, notrace edits, recursion and subops.

mod common;

use common::probes::*;
use shadowgraph::ftrace::{self, site_flags, FilterEdit, FilterSet, Ops, OpsFlags, Regs};
use std::sync::atomic::{AtomicU64, Ordering};

#[test]
fn three_probes_with_overlapping_filters_count_exactly() {
    let _g = serial();
    let f = loaded();
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

/// Enabled-site counts through every add/remove order.
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
/// site leaves the trampoline for the caller of the two while shared and
/// returns to it at count 1.
#[test]
fn trampoline_accounting_in_every_order() {
    let _g = serial();
    let f = loaded();
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
        let callers = ftrace::shared_callers(pw.arena).unwrap();
        let owns = [a.trampoline_in(pw.arena), b.trampoline_in(pw.arena)];
        assert!(
            pw.target != callers.0 && pw.target != callers.1 && !owns.contains(&Some(pw.target)),
            "the set's caller when shared"
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
    let f = loaded();
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

extern "C" fn recursing_cb(_ip: usize, _p: usize, _ops: &Ops, _r: &mut Regs) {
    RECURSE_CALLS.fetch_add(1, Ordering::Relaxed);
    (loaded().plain_work)(1); // traced: re-enters this callback
}

extern "C" fn self_guarded_cb(_ip: usize, _p: usize, _ops: &Ops, _r: &mut Regs) {
    RECURSE_CALLS.fetch_add(1, Ordering::Relaxed);
    if BUSY.get() {
        return;
    }
    BUSY.set(true);
    (loaded().plain_work)(1);
    BUSY.set(false);
}

#[test]
fn recursion_guard_limits_reentry() {
    let _g = serial();
    let f = loaded();
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
        // A second ops on the same site: the two call their set's caller.
        let other = probe_ops(Probe::new(), &["plain_work"], &[], OpsFlags::NONE);
        ftrace::register(&ops).unwrap();
        if !alone {
            ftrace::register(&other).unwrap();
        }
        // Twice: the first call on a thread takes the Rust entry (errno's
        // location not yet cached), the next the assembly one.
        for _ in 0..2 {
            RECURSE_CALLS.store(0, Ordering::Relaxed);
            assert_eq!((f.plain_work)(5), 17);
            let n = RECURSE_CALLS.load(Ordering::Relaxed);
            if flags.contains(ftrace::RECURSION) {
                assert!(n == 1 || n == 2, "guarded callback entered {n} times");
            } else {
                assert_eq!(n, 2, "self-guarded callback entered {n} times");
            }
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
    let f = loaded();
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
