//! Site stubs under concurrency: threads run a traced workload (three
//! nested levels, so frames are always in flight) while its sites go from
//! NOP5 to `jmp stub` (a graph user alone), to `call` the list function (a
//! plain ops joins on the same functions), back to `jmp stub` and to NOP5,
//! again and again. Functions called from a stub return through it after
//! their site changed under them; every result is right, every hooked call
//! that returns while its user is registered is reported once, and the
//! core's accounting matches the code at every step.

mod common;

use common::*;
use shadowgraph::{fgraph, ftrace};
use std::sync::atomic::{AtomicU64, Ordering};

static ENTERED: AtomicU64 = AtomicU64::new(0);
static RETURNS: AtomicU64 = AtomicU64::new(0);
static OPS_CALLS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_entry(
    _: &fgraph::GraphEntry,
    _: &fgraph::GraphUser,
    _: &mut ftrace::Regs,
) -> bool {
    ENTERED.fetch_add(1, Ordering::Relaxed);
    true
}

extern "C" fn on_return(_: &fgraph::GraphReturn, _: &fgraph::GraphUser, _: &fgraph::RetRegs) {
    RETURNS.fetch_add(1, Ordering::Relaxed);
}

extern "C" fn count(_: usize, _: usize, _: &ftrace::Ops, _: &mut ftrace::Regs) {
    OPS_CALLS.fetch_add(1, Ordering::Relaxed);
}

fn stubbed(f: &str) -> bool {
    ftrace::site_by_name(f).unwrap().flags & ftrace::site_flags::STUB != 0
}

/// With patchable entries, then with the same functions patched at their
/// prologue (the sites in their stubs).
#[test]
fn sites_switch_between_stub_list_and_nop_while_threads_run() {
    for entry in ENTRIES {
        switch_while_threads_run(entry);
    }
}

fn switch_while_threads_run(entry: Entry) {
    let name = format!("stubs_stress_{entry:?}");
    let (_dir, lib, run) = nested_workload_as(&name, entry);
    let funcs = ["leaf", "mid", "top"];
    let filter = || ftrace::FilterSet::with_patterns(&funcs, &[]).unwrap();
    let user = fgraph::GraphUser::new(on_entry, on_return, filter(), 0);
    let ops = ftrace::Ops::new(count, ftrace::OpsFlags::NONE, filter());

    let workers = Workers::start(3, run, 100);
    let pause = || std::thread::sleep(std::time::Duration::from_micros(300));
    for _ in 0..100 {
        fgraph::register_graph(&user).unwrap();
        assert!(funcs.iter().all(|f| stubbed(f)), "the user alone: stubs");
        ftrace::check_invariants().unwrap();
        pause();
        ftrace::register(&ops).unwrap();
        assert!(!funcs.iter().any(|f| stubbed(f)), "two ops: the list");
        ftrace::check_invariants().unwrap();
        pause();
        ftrace::unregister(&ops).unwrap();
        assert!(funcs.iter().all(|f| stubbed(f)), "alone again: stubs");
        ftrace::check_invariants().unwrap();
        pause();
        fgraph::unregister_graph(&user).unwrap();
        ftrace::check_invariants().unwrap();
        pause();
    }
    // The user alone with the threads quiet: every entry gets its return.
    fgraph::register_graph(&user).unwrap();
    let (e0, r0) = (
        ENTERED.load(Ordering::Relaxed),
        RETURNS.load(Ordering::Relaxed),
    );
    let rounds = workers.stop();
    assert_eq!(run(10), nested_expect(10));
    let (e1, r1) = (
        ENTERED.load(Ordering::Relaxed),
        RETURNS.load(Ordering::Relaxed),
    );
    fgraph::unregister_graph(&user).unwrap();
    assert!(rounds > 0);
    assert!(OPS_CALLS.load(Ordering::Relaxed) > 0);
    assert!(
        e1 > e0 && r1 - r0 >= e1 - e0,
        "entries {e0}..{e1}, returns {r0}..{r1}"
    );
    assert_eq!(fgraph::counters().lost_frames, 0);
    assert!(RETURNS.load(Ordering::Relaxed) <= ENTERED.load(Ordering::Relaxed));
    drop_workload(&lib);
}
