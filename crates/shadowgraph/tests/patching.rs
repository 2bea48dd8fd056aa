//! Live patching of gcc-built code loaded into this (multi-threaded) test
//! process: discovery, normalisation, counting trampolines, argument
//! preservation, the verify-before-write refusal and the int3 emulation.

mod common;

use common::*;
use shadowgraph::arena::Arena;
use shadowgraph::patch::{self, BatchStep, Edit, PatchError};
use shadowgraph::process::{self, Module};
use shadowgraph::site::NOP5;
use shadowgraph::tracer::count::SiteCounter;
use shadowgraph_testkit::cc::flavour;
use std::sync::Mutex;

type Run = extern "C" fn(i32) -> i64;
type RunArgs = extern "C" fn(i32) -> f64;
type Recurse = extern "C" fn(i32) -> i32;
type Leaf = extern "C" fn(i32) -> i32;

/// Patching tests share the global patcher state; run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bytes_at(addr: usize, n: usize) -> Vec<u8> {
    // SAFETY: test reads of loaded text.
    unsafe { std::slice::from_raw_parts(addr as *const u8, n).to_vec() }
}

fn prepare(name: &str, flags: &[&str]) -> (Lib, Module) {
    let dir = workdir(name);
    let lib = Lib::open(&build_lib(&dir, &fixture("calls.c"), name, flags));
    let mut m = lib.module();
    let n = process::normalize(std::slice::from_mut(&mut m)).unwrap();
    assert_eq!(n.deferred, 0);
    for s in m.usable() {
        assert_eq!(bytes_at(s.addr, 5), NOP5, "{} not normalised", s.function);
    }
    (lib, m)
}

fn enable_all(m: &Module, counter: &'static SiteCounter) -> (usize, Vec<Edit>) {
    let (lo, hi) = m.site_range().unwrap();
    let arena = Arena::near(lo, hi).unwrap();
    let tramp = counter.trampoline(arena).unwrap();
    let mut edits: Vec<Edit> = m
        .usable()
        .map(|s| Edit::enable(s.addr, tramp).unwrap())
        .collect();
    patch::apply(&mut edits).unwrap();
    (tramp, edits)
}

fn disable_all(m: &Module, tramp: usize) {
    let mut edits: Vec<Edit> = m
        .usable()
        .map(|s| Edit::disable(s.addr, tramp).unwrap())
        .collect();
    patch::apply(&mut edits).unwrap();
}

fn check_counts_in_flavour(name: &str, flags: &[&str]) {
    let _g = serial();
    let (lib, m) = prepare(name, flags);
    let names: Vec<&str> = m.usable().map(|s| s.function.as_str()).collect();
    for f in [
        "leaf",
        "mid",
        "recurse",
        "many_args",
        "var_sum",
        "run",
        "run_args",
    ] {
        assert!(
            names.contains(&f),
            "{name}: site of {f} not found in {names:?}"
        );
    }
    let run: Run = lib.func("run");
    let run_args: RunArgs = lib.func("run_args");
    let recurse: Recurse = lib.func("recurse");
    let (r0, a0, c0) = (run(1000), run_args(100), recurse(50));

    let counter = SiteCounter::new(m.usable().map(|s| s.addr));
    let (tramp, _) = enable_all(&m, counter);
    assert_eq!(run(1000), r0, "{name}: result changed under tracing");
    assert_eq!(run_args(100), a0, "{name}: arguments not preserved");
    assert_eq!(recurse(50), c0);
    let count = |f: &str| counter.count(m.by_name(f).unwrap().addr);
    assert_eq!(count("run"), 1);
    assert_eq!(count("mid"), 1000);
    assert_eq!(count("leaf"), 2000);
    assert_eq!(count("run_args"), 1);
    assert_eq!(count("many_args"), 100);
    assert_eq!(count("var_sum"), 100);
    assert_eq!(count("recurse"), 51);
    assert_eq!(counter.unknown(), 0);

    disable_all(&m, tramp);
    for s in m.usable() {
        assert_eq!(bytes_at(s.addr, 5), NOP5);
    }
    assert_eq!(run(1000), r0);
    assert_eq!(count("mid"), 1000, "{name}: counted after disable");
}

#[test]
fn counts_every_call_sled() {
    check_counts_in_flavour("sled", flavour::PATCHABLE);
}

#[test]
fn counts_every_call_sled_behind_endbr64() {
    check_counts_in_flavour("sled_cet", flavour::PATCHABLE_CET);
}

#[test]
fn counts_every_call_fentry_got() {
    check_counts_in_flavour("fentry_got", flavour::FENTRY);
}

#[test]
fn counts_every_call_fentry_got_behind_endbr64() {
    let mut f = flavour::FENTRY.to_vec();
    f.push("-fcf-protection=full");
    check_counts_in_flavour("fentry_got_cet", &f);
}

/// Negative control: one tampered site makes the whole batch refused, and
/// not one byte of any other site changes.
#[test]
fn tampered_site_refuses_whole_batch() {
    let _g = serial();
    let (lib, m) = prepare("tamper", flavour::PATCHABLE);
    let victim = m.by_name("mid").unwrap().addr;
    // Another valid 5-byte nop: a change the batch does not expect.
    let other_nop = [0x0f, 0x1f, 0x44, 0x00, 0x08];
    patch::apply(&mut [Edit::new(victim, &NOP5, &other_nop)]).unwrap();

    let counter = SiteCounter::new(m.usable().map(|s| s.addr));
    let (lo, hi) = m.site_range().unwrap();
    let tramp = counter.trampoline(Arena::near(lo, hi).unwrap()).unwrap();
    let before: Vec<Vec<u8>> = m.usable().map(|s| bytes_at(s.addr, 5)).collect();
    let mut edits: Vec<Edit> = m
        .usable()
        .map(|s| Edit::enable(s.addr, tramp).unwrap())
        .collect();
    match patch::apply(&mut edits) {
        Err(PatchError::Mismatch { addr, found, .. }) => {
            assert_eq!(addr, victim);
            assert_eq!(found, other_nop);
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    let after: Vec<Vec<u8>> = m.usable().map(|s| bytes_at(s.addr, 5)).collect();
    assert_eq!(before, after, "a refused batch wrote something");
    let run: Run = lib.func("run");
    run(10);
    assert_eq!(counter.snapshot().iter().map(|c| c.1).sum::<u64>(), 0);
}

static HOOK_LEAF: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static HOOK_RESULTS: Mutex<Vec<(BatchStep, i32)>> = Mutex::new(Vec::new());

fn call_leaf_from_another_thread(step: BatchStep) {
    let f = HOOK_LEAF.load(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: HOOK_LEAF holds the address of the fixture's `leaf`.
    let leaf: Leaf = unsafe { std::mem::transmute::<usize, Leaf>(f) };
    let r = std::thread::spawn(move || leaf(20)).join().unwrap();
    HOOK_RESULTS.lock().unwrap().push((step, r));
}

/// A thread executing a site while it holds the temporary `int3` gets the
/// new instruction emulated: counted while enabling, not while disabling.
#[test]
fn thread_hitting_int3_mid_batch_gets_new_instruction() {
    let _g = serial();
    let (lib, m) = prepare("int3", flavour::PATCHABLE);
    let leaf_site = m.by_name("leaf").unwrap().addr;
    HOOK_LEAF.store(lib.sym("leaf"), std::sync::atomic::Ordering::SeqCst);
    let counter = SiteCounter::new([leaf_site]);
    let (lo, hi) = m.site_range().unwrap();
    let tramp = counter.trampoline(Arena::near(lo, hi).unwrap()).unwrap();
    let traps0 = patch::stats().traps_emulated;

    patch::set_step_hook(Some(call_leaf_from_another_thread));
    let r = patch::apply(&mut [Edit::enable(leaf_site, tramp).unwrap()]);
    patch::set_step_hook(None);
    r.unwrap();
    assert_eq!(
        counter.count(leaf_site),
        2,
        "both mid-batch calls reach the new call"
    );

    patch::set_step_hook(Some(call_leaf_from_another_thread));
    let r = patch::apply(&mut [Edit::disable(leaf_site, tramp).unwrap()]);
    patch::set_step_hook(None);
    r.unwrap();
    assert_eq!(
        counter.count(leaf_site),
        2,
        "mid-batch calls while disabling are not counted"
    );

    let results = std::mem::take(&mut *HOOK_RESULTS.lock().unwrap());
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|&(_, r)| r == 61), "{results:?}");
    assert_eq!(patch::stats().traps_emulated - traps0, 4);
}
