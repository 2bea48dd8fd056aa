//! Concurrency: threads run through thousands of real sites while another
//! thread flips them all on and off, and while sleds are normalised.

mod common;

use common::*;
use shadowgraph::arena::Arena;
use shadowgraph::patch::{self, Edit};
use shadowgraph::process;
use shadowgraph::site::{NOP5, SLED};
use shadowgraph::tracer::count::SiteCounter;
use shadowgraph_testkit::cc::flavour;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

static SERIAL: Mutex<()> = Mutex::new(());

/// `n` small functions `f_i(x) = x + i` and `call_all(x)`, which calls each
/// once: sum = n*x + n(n-1)/2.
fn many_functions(dir: &Path, n: usize, empty: bool) -> PathBuf {
    let mut c = String::from("#define KEEP __attribute__((noinline, noipa))\n");
    for i in 0..n {
        if empty {
            writeln!(c, "KEEP void f_{i}(void) {{}}").unwrap();
        } else {
            writeln!(c, "KEEP long f_{i}(long x) {{ return x + {i}; }}").unwrap();
        }
    }
    c.push_str(
        "__attribute__((patchable_function_entry(0, 0), no_instrument_function,\n\
         visibility(\"default\")))\n\
         long call_all(long x) {\n  long s = 0;\n",
    );
    for i in 0..n {
        if empty {
            writeln!(c, "  f_{i}();").unwrap();
        } else {
            writeln!(c, "  s += f_{i}(x);").unwrap();
        }
    }
    c.push_str("  return s;\n}\n");
    let src = dir.join("many.c");
    std::fs::write(&src, c).unwrap();
    src
}

type CallAll = extern "C" fn(i64) -> i64;

/// What `call_all(x)` of `n` functions returns.
fn call_all_sum(n: usize, x: i64) -> i64 {
    n as i64 * x + (n * (n - 1) / 2) as i64
}

/// With the sites on (`on`, then `off` again), `threads` threads make 50
/// calls of `call_all` each at once: every result right, every site
/// counted once a call.
fn counts_exactly(
    counter: &'static SiteCounter,
    on: &[Edit],
    off: &[Edit],
    call_all: CallAll,
    n: usize,
    threads: usize,
) {
    counter.reset();
    patch::apply(&mut on.to_vec()).unwrap();
    let barrier = Arc::new(Barrier::new(threads));
    let exact: Vec<_> = (0..threads)
        .map(|_| {
            let b = barrier.clone();
            std::thread::spawn(move || {
                b.wait();
                for x in 0..50 {
                    assert_eq!(call_all(x), call_all_sum(n, x));
                }
            })
        })
        .collect();
    for w in exact {
        w.join().unwrap();
    }
    for (site, k) in counter.snapshot() {
        assert_eq!(k, threads as u64 * 50, "site {site:#x}");
    }
    patch::apply(&mut off.to_vec()).unwrap();
}

#[test]
fn threads_call_while_all_sites_flip() {
    flip_stress("flip_sled", flavour::PATCHABLE, 300);
}

/// The same on `call *__fentry__@GOTPCREL` sites, which are converted to
/// nops live (a 6-byte edit) while the threads already run through them.
#[test]
fn threads_call_while_fentry_got_sites_convert_and_flip() {
    flip_stress("flip_fgot", flavour::FENTRY, 100);
}

fn flip_stress(name: &str, flags: &[&str], flips: usize) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 2000;
    const THREADS: usize = 3;
    let dir = workdir(name);
    let lib = Lib::open(&build_lib(
        &dir,
        &many_functions(&dir, N, false),
        name,
        flags,
    ));
    let mut m = lib.module();
    assert_eq!(
        m.usable().count(),
        N,
        "call_all has no site; every f_i has one"
    );
    let call_all: CallAll = lib.func("call_all");
    let expect = |x: i64| call_all_sum(N, x);
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (stop, calls) = (stop.clone(), calls.clone());
            std::thread::spawn(move || {
                let mut x = t as i64;
                while !stop.load(Ordering::Relaxed) {
                    let got = call_all(x);
                    assert_eq!(got, expect(x), "wrong result while sites change");
                    calls.fetch_add(1, Ordering::Relaxed);
                    x += 1;
                }
            })
        })
        .collect();
    process::normalize(std::slice::from_mut(&mut m)).unwrap();
    assert_eq!(m.usable().count(), N);

    let counter = SiteCounter::new(m.usable().map(|s| s.addr));
    let (lo, hi) = m.site_range().unwrap();
    let tramp = counter.trampoline(Arena::near(lo, hi).unwrap()).unwrap();
    let on: Vec<Edit> = m
        .usable()
        .map(|s| Edit::enable(s.addr, tramp).unwrap())
        .collect();
    let off: Vec<Edit> = m
        .usable()
        .map(|s| Edit::disable(s.addr, tramp).unwrap())
        .collect();

    let traps0 = patch::stats();
    for _ in 0..flips {
        patch::apply(&mut on.clone()).unwrap();
        patch::apply(&mut off.clone()).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let traps = patch::stats();
    let rounds = calls.load(Ordering::Relaxed);
    let counted: u64 = counter.snapshot().iter().map(|c| c.1).sum();
    eprintln!(
        "{name}: {flips} on/off flips of {N} sites under {THREADS} threads: {rounds} call_all \
         rounds, {counted} counted calls, {} traps emulated, {} late",
        traps.traps_emulated - traps0.traps_emulated,
        traps.traps_late - traps0.traps_late
    );
    assert!(rounds > 0);
    assert!(counted <= rounds * N as u64, "more calls counted than made");
    assert_eq!(counter.unknown(), 0);

    // Exact counts while enabled: every call made between two batches is
    // counted once per site.
    counts_exactly(counter, &on, &off, call_all, N, THREADS);
    for s in m.usable() {
        // SAFETY: reading loaded text.
        let bytes = unsafe { std::slice::from_raw_parts(s.addr as *const u8, 5) };
        assert_eq!(bytes, NOP5);
    }
}

/// The same on functions built without any flag, patched at their
/// prologue (`-P`) while the threads already run through them: each
/// window written with the threads stopped (a thread on its bytes 1–4
/// moved to its copy), every stub keeping registers for its function
/// (`call_all` calls them directly), the stubs' sites flipped on and off,
/// and between flips the windows given their original bytes back and
/// patched again. Every result stays right; counts are exact while the
/// sites are on; at the end the library's code is its file's again.
#[test]
fn threads_call_while_prologues_patch_flip_and_unpatch() {
    use object::{Object, ObjectSection};
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 2000;
    const THREADS: usize = 3;
    let name = "flip_prologue";
    let dir = workdir(name);
    // (Called directly, not through the PLT.)
    let flags = ["-fvisibility=hidden"];
    let path = build_lib(&dir, &many_functions(&dir, N, false), name, &flags);
    let lib = Lib::open(&path);
    let call_all: CallAll = lib.func("call_all");
    let expect = |x: i64| call_all_sum(N, x);
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (stop, calls) = (stop.clone(), calls.clone());
            std::thread::spawn(move || {
                let mut x = t as i64;
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(
                        call_all(x),
                        expect(x),
                        "wrong result while prologues change"
                    );
                    calls.fetch_add(1, Ordering::Relaxed);
                    x += 1;
                }
            })
        })
        .collect();
    let canon = std::fs::canonicalize(&path).unwrap();
    let bias = process::loaded_objects()
        .into_iter()
        .find(|(p, _)| std::fs::canonicalize(p).ok().as_ref() == Some(&canon))
        .unwrap()
        .1;
    let named = |s: &str| s.starts_with("f_");
    let asked = shadowgraph::prologue::Asked::Named(&named);
    let p = process::prologue::patch_object(&path, bias, &[], asked).unwrap();
    let sites: Vec<usize> = p
        .modules
        .iter()
        .flat_map(|m| m.usable().map(|s| s.addr))
        .collect();
    // (A window a stopped thread was inside, or a stacked word points
    // into, is deferred: a few may be.)
    assert!(sites.len() + 10 >= N, "{} of {N} patched", sites.len());
    let judged =
        shadowgraph::prologue::judge(&path, &std::fs::read(&path).unwrap(), &[], asked).unwrap();
    assert!(judged.patchable().all(|(_, w)| !w.kept.is_empty()));

    let counter = SiteCounter::new(sites.iter().copied());
    let (lo, hi) = (
        sites[0].min(sites[sites.len() - 1]),
        sites.iter().copied().max().unwrap(),
    );
    let tramp = counter.trampoline(Arena::near(lo, hi).unwrap()).unwrap();
    let on: Vec<Edit> = sites
        .iter()
        .map(|&s| Edit::enable(s, tramp).unwrap())
        .collect();
    let off: Vec<Edit> = sites
        .iter()
        .map(|&s| Edit::disable(s, tramp).unwrap())
        .collect();
    let mut left = 0;
    for i in 0..60 {
        patch::apply(&mut on.clone()).unwrap();
        patch::apply(&mut off.clone()).unwrap();
        if i % 6 == 5 {
            left += process::prologue::unpatch_windows().unwrap();
            left += process::prologue::repatch_windows().unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let rounds = calls.load(Ordering::Relaxed);
    let counted: u64 = counter.snapshot().iter().map(|c| c.1).sum();
    eprintln!(
        "{name}: {} windows, 60 flips, 10 unpatch/repatch, {rounds} call_all rounds, \
         {counted} counted calls, {left} windows left behind once",
        sites.len()
    );
    assert!(rounds > 0 && counted <= rounds * N as u64);
    assert_eq!(counter.unknown(), 0);

    // Every window patched again (no thread runs now): exact counts.
    assert_eq!(process::prologue::repatch_windows().unwrap(), 0);
    counts_exactly(counter, &on, &off, call_all, N, THREADS);

    // Unpatched: the library's code is its file's.
    assert_eq!(process::prologue::unpatch_windows().unwrap(), 0);
    let data = std::fs::read(&path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let text = file.section_by_name(".text").unwrap();
    let want = text.data().unwrap();
    // SAFETY: the library's loaded text, mapped while it stays loaded.
    let got = unsafe {
        std::slice::from_raw_parts((bias as u64 + text.address()) as *const u8, want.len())
    };
    assert!(got == want, "the library's code differs from its file's");
    assert_eq!(call_all(7), expect(7));
}

type Void = extern "C" fn();

/// Sleds are normalised while threads run through them: a thread stopped
/// inside a sled is moved past it, and every call keeps working.
#[test]
fn sleds_normalised_while_threads_run_through_them() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 500;
    let mut moved = 0;
    let mut rounds = 0;
    // Fresh copies until some thread was caught inside a sled (bounded:
    // alone, one is within 5–10 rounds; a loaded machine may not run the
    // workers at the instant the world stops for many more).
    while rounds < 100 && (moved == 0 || rounds < 5) {
        let dir = workdir(&format!("sled{rounds}"));
        let lib = Lib::open(&build_lib(
            &dir,
            &many_functions(&dir, N, true),
            &format!("sled{rounds}"),
            flavour::PATCHABLE,
        ));
        let mut m = lib.module();
        let call_all: CallAll = lib.func("call_all");
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        call_all(0);
                    }
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let r = process::normalize(std::slice::from_mut(&mut m)).unwrap();
        assert!(r.stopped_world);
        std::thread::sleep(std::time::Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        moved += r.moved;
        assert_eq!(r.converted + r.deferred, N);
        for s in m.sites.iter() {
            // SAFETY: reading loaded text.
            let b = unsafe { std::slice::from_raw_parts(s.addr as *const u8, 5) };
            if s.usable() {
                assert_eq!(b, NOP5);
            } else {
                assert_eq!(b, SLED, "a deferred sled must stay untouched");
            }
        }
        let f: Void = lib.func("f_7");
        f();
        rounds += 1;
    }
    eprintln!("{rounds} normalisations under load; {moved} threads moved out of a sled");
    assert!(
        moved > 0,
        "no thread was ever caught inside a sled in {rounds} rounds"
    );
}

static PARK_AT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static IN_HANDLER: AtomicBool = AtomicBool::new(false);
static LEAVE_HANDLER: AtomicBool = AtomicBool::new(false);

extern "C" fn fake_interrupted_in_sled(_: i32, _: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let uc = ctx as *mut libc::ucontext_t;
    // SAFETY: valid ucontext from the kernel; the original PC is put back
    // before returning, so the thread never actually resumes in the sled.
    unsafe {
        let g = &mut (*uc).uc_mcontext.gregs;
        let orig = g[libc::REG_RIP as usize];
        g[libc::REG_RIP as usize] = PARK_AT.load(Ordering::SeqCst) as i64;
        IN_HANDLER.store(true, Ordering::SeqCst);
        while !LEAVE_HANDLER.load(Ordering::SeqCst) {
            libc::sched_yield();
        }
        g[libc::REG_RIP as usize] = orig;
    }
}

/// A context interrupted at sled+2 (its PC saved in a signal frame on the
/// thread's stack) must not see its sled rewritten: the sled is deferred.
#[test]
fn sled_with_interrupted_context_inside_is_deferred() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("defer");
    let lib = Lib::open(&build_lib(
        &dir,
        &fixture("calls.c"),
        "defer",
        flavour::PATCHABLE,
    ));
    let mut m = lib.module();
    let victim = m.by_name("leaf").unwrap().addr;
    PARK_AT.store(victim + 2, Ordering::SeqCst);
    // SAFETY: installing a handler for SIGUSR2, used by this test only.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = fake_interrupted_in_sled as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
    }
    let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let t = {
        let tid = tid.clone();
        std::thread::spawn(move || {
            tid.store(shadowgraph::sys::gettid(), Ordering::SeqCst);
            while !LEAVE_HANDLER.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        })
    };
    while tid.load(Ordering::SeqCst) == 0 {
        std::hint::spin_loop();
    }
    shadowgraph::sys::tgkill(tid.load(Ordering::SeqCst), libc::SIGUSR2).unwrap();
    while !IN_HANDLER.load(Ordering::SeqCst) {
        std::hint::spin_loop();
    }
    let r = process::normalize(std::slice::from_mut(&mut m)).unwrap();
    LEAVE_HANDLER.store(true, Ordering::SeqCst);
    t.join().unwrap();
    assert!(r.deferred >= 1);
    let leaf = m.by_name("leaf").unwrap();
    assert!(
        leaf.disabled.as_deref().unwrap_or("").contains("deferred"),
        "{leaf:?}"
    );
    // SAFETY: reading loaded text.
    let bytes = unsafe { std::slice::from_raw_parts(victim as *const u8, 5) };
    assert_eq!(bytes, SLED);
    assert!(m.by_name("mid").unwrap().usable());
}
