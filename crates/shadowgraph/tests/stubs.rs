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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const SOURCE: &str = "#define KEEP __attribute__((noinline, noipa))\n\
KEEP long leaf(long x) { return x + 1; }\n\
KEEP long mid(long x) { return leaf(x) + leaf(x + 1); }\n\
KEEP long top(long x) { long s = 0; for (int i = 0; i < 8; i++) s += mid(x + i); return s; }\n\
__attribute__((patchable_function_entry(0, 0))) long run(long n) {\n\
  long s = 0; for (long i = 0; i < n; i++) s += top(i); return s; }\n";

static ENTRIES: AtomicU64 = AtomicU64::new(0);
static RETURNS: AtomicU64 = AtomicU64::new(0);
static OPS_CALLS: AtomicU64 = AtomicU64::new(0);

fn on_entry(_: &fgraph::GraphEntry, _: &fgraph::GraphUser, _: &mut ftrace::Regs) -> bool {
    ENTRIES.fetch_add(1, Ordering::Relaxed);
    true
}

fn on_return(_: &fgraph::GraphReturn, _: &fgraph::GraphUser, _: &fgraph::RetRegs) {
    RETURNS.fetch_add(1, Ordering::Relaxed);
}

fn count(_: usize, _: usize, _: &ftrace::Ops, _: &mut ftrace::Regs) {
    OPS_CALLS.fetch_add(1, Ordering::Relaxed);
}

/// run(n) = Σ_{i<n} Σ_{j<8} (2(i+j) + 3)
fn expect(n: i64) -> i64 {
    (0..n)
        .map(|i| (0..8).map(|j| 2 * (i + j) + 3).sum::<i64>())
        .sum()
}

fn stubbed(f: &str) -> bool {
    ftrace::site_by_name(f).unwrap().flags & ftrace::site_flags::STUB != 0
}

#[test]
fn sites_switch_between_stub_list_and_nop_while_threads_run() {
    let dir = workdir("stubs_stress");
    let src = dir.join("work.c");
    std::fs::write(&src, SOURCE).unwrap();
    let lib = Lib::open(&build_lib(
        &dir,
        &src,
        "stubwork",
        shadowgraph::cc::flavour::PATCHABLE,
    ));
    ftrace::add_modules(vec![lib.module()]).unwrap();
    let run: extern "C" fn(i64) -> i64 = lib.func("run");
    let funcs = ["leaf", "mid", "top"];
    let filter = || ftrace::FilterSet::with_patterns(&funcs, &[]).unwrap();
    let user = fgraph::GraphUser::new(on_entry, on_return, filter(), 0);
    let ops = ftrace::Ops::new(count, 0, filter());

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (stop, rounds) = (stop.clone(), rounds.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(run(100), expect(100));
                    rounds.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
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
        ENTRIES.load(Ordering::Relaxed),
        RETURNS.load(Ordering::Relaxed),
    );
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(run(10), expect(10));
    let (e1, r1) = (
        ENTRIES.load(Ordering::Relaxed),
        RETURNS.load(Ordering::Relaxed),
    );
    fgraph::unregister_graph(&user).unwrap();
    assert!(rounds.load(Ordering::Relaxed) > 0);
    assert!(OPS_CALLS.load(Ordering::Relaxed) > 0);
    assert!(
        e1 > e0 && r1 - r0 >= e1 - e0,
        "entries {e0}..{e1}, returns {r0}..{r1}"
    );
    assert_eq!(fgraph::LOST_FRAMES.load(Ordering::Relaxed), 0);
    assert!(RETURNS.load(Ordering::Relaxed) <= ENTRIES.load(Ordering::Relaxed));
}
