//! The `/proc/self/mem` writer (text never writable) does the same job as
//! the mprotect window, and traps that are not ours reach the SIGTRAP
//! handler the program had installed before the patcher. A test binary of
//! its own: the write mode and the SIGTRAP disposition are process-wide.

mod common;

use common::*;
use shadowgraph::arena::Arena;
use shadowgraph::patch::{self, Edit, WriteMode};
use shadowgraph::process;
use shadowgraph::site::NOP5;
use shadowgraph::tracer::count::SiteCounter;
use shadowgraph_testkit::cc::flavour;
use std::sync::atomic::{AtomicUsize, Ordering};

type Run = extern "C" fn(i32) -> i64;

static PROGRAM_TRAPS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn program_handler(_: i32) {
    PROGRAM_TRAPS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn procmem_writer_and_chained_sigtrap() {
    // The program's handler exists before the patcher initialises.
    // SAFETY: installing a plain handler for SIGTRAP.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = program_handler as *const () as usize;
        libc::sigaction(libc::SIGTRAP, &sa, std::ptr::null_mut());
    }
    patch::set_write_mode(WriteMode::ProcMem);
    patch::init();

    let dir = workdir("procmem");
    let lib = Lib::open(&build_lib(&dir, &fixture("calls.c"), "pm", flavour::FENTRY));
    let mut m = lib.module();
    process::normalize(std::slice::from_mut(&mut m)).unwrap();
    let maps_before = std::fs::read_to_string("/proc/self/maps").unwrap();
    let counter = SiteCounter::new(m.usable().map(|s| s.addr));
    let (lo, hi) = m.site_range().unwrap();
    let tramp = counter.trampoline(Arena::near(lo, hi).unwrap()).unwrap();
    let mut on: Vec<Edit> = m
        .usable()
        .map(|s| Edit::enable(s.addr, tramp).unwrap())
        .collect();
    patch::apply(&mut on).unwrap();
    let run: Run = lib.func("run");
    let r = run(100);
    assert_eq!(counter.count(m.by_name("leaf").unwrap().addr), 200);
    let mut off: Vec<Edit> = m
        .usable()
        .map(|s| Edit::disable(s.addr, tramp).unwrap())
        .collect();
    patch::apply(&mut off).unwrap();
    assert_eq!(run(100), r);
    for s in m.usable() {
        // SAFETY: reading loaded text; the FGOT form keeps a trailing nop.
        let b = unsafe { std::slice::from_raw_parts(s.addr as *const u8, 6) };
        assert_eq!(&b[..5], NOP5);
        assert_eq!(b[5], 0x90);
    }
    // Text was never made writable: the library's mappings are unchanged.
    let path = lib.path.to_str().unwrap().to_string();
    let lines = |maps: &str| -> Vec<String> {
        maps.lines()
            .filter(|l| l.ends_with(&path))
            .map(|l| l.to_string())
            .collect()
    };
    assert_eq!(
        lines(&maps_before),
        lines(&std::fs::read_to_string("/proc/self/maps").unwrap())
    );

    // A breakpoint of the program's own and a SIGTRAP sent by kill are not
    // ours: both reach the handler installed before us.
    let chained0 = patch::stats().traps_chained;
    // SAFETY: executes a breakpoint; the handler returns after it.
    unsafe { std::arch::asm!("int3") };
    // SAFETY: raising a handled signal.
    unsafe { libc::raise(libc::SIGTRAP) };
    assert_eq!(PROGRAM_TRAPS.load(Ordering::SeqCst), 2);
    assert_eq!(patch::stats().traps_chained - chained0, 2);
    assert_eq!(
        patch::previous_sigtrap_action().sa_sigaction,
        program_handler as *const () as usize
    );
}
