//! Callbacks of graph users with frame data, as the agent's time filter
//! and profile keep it, that check on return that their data is where
//! `GraphUser::reserve` put it and what their entry (or the fused path's)
//! left there (tests/fused_frames*.rs).

use shadowgraph::clock;
use shadowgraph::tracer::fused::ENTRY_FLAGS;
use shadowgraph::tracer::profile::{ProfileCounters, ProfileTable};
use shadowgraph::{fgraph, ftrace};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Entries the timed user's callback saw (the general way).
pub static TIMED_ENTRIES: AtomicU64 = AtomicU64::new(0);
/// Entries the profile's callback saw (the general way).
pub static PROFILE_ENTRIES: AtomicU64 = AtomicU64::new(0);
/// Returns the callbacks saw, and those whose data was not where it
/// belongs or not what an entry leaves there.
pub static RETURNS: AtomicU64 = AtomicU64::new(0);
pub static BAD: AtomicU64 = AtomicU64::new(0);

pub extern "C" fn timed_entry(
    _: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    _: &mut ftrace::Regs,
) -> bool {
    TIMED_ENTRIES.fetch_add(1, Ordering::Relaxed);
    if let Some(p) = u.reserve(8) {
        // SAFETY: 8 reserved, aligned bytes, ours until the call returns.
        unsafe { (p as *mut u64).write(clock::now() & !ENTRY_FLAGS) };
    }
    true
}

/// A time (from either entry), never flags or 0: what the fused entry
/// leaves once it has read the clock.
pub extern "C" fn timed_return(
    _: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    _: &fgraph::RetRegs,
) {
    RETURNS.fetch_add(1, Ordering::Relaxed);
    match u.retrieve() {
        // SAFETY: our 8 bytes in the frame returning now.
        Some((p, 8)) if unsafe { (p as *const u64).read() } & ENTRY_FLAGS == 0 => {}
        _ => {
            BAD.fetch_add(1, Ordering::Relaxed);
        }
    }
}

shadowgraph::fast_thread_local!(
    pub static TABLE: Cell<*mut ProfileTable>;
);

pub const ROWS: usize = 1 << 16;

/// The profile's entry as the agent's: `{start, children, id}`, the id's
/// row counted under way (a table per thread, made on first use).
pub extern "C" fn profile_entry(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    _: &mut ftrace::Regs,
) -> bool {
    PROFILE_ENTRIES.fetch_add(1, Ordering::Relaxed);
    let Some(p) = u.reserve(24) else {
        return true;
    };
    let id = e.site_id().unwrap() as usize;
    let row = row(id);
    // SAFETY: a row of this thread's table; 24 reserved, aligned bytes.
    unsafe {
        (*row).active += 1;
        let p = p as *mut u64;
        p.write(clock::now());
        p.add(1).write(0);
        p.add(2).write(id as u64);
    }
    true
}

fn row(id: usize) -> *mut ProfileCounters {
    let mut t = TABLE.get();
    if t.is_null() {
        let rows: &'static mut [ProfileCounters] =
            Box::leak(vec![ProfileCounters::default(); ROWS].into_boxed_slice());
        t = Box::leak(Box::new(ProfileTable {
            tid: 0,
            inst: 0,
            next: std::ptr::null_mut(),
            rows: rows.as_mut_ptr(),
        }));
        TABLE.set(t);
    }
    // SAFETY: this thread's table, never freed; ids are below ROWS.
    unsafe { (*t).rows.add(id) }
}

/// Its return: the data where it belongs (an id that names the returning
/// function's row, a start that is a time), the row counted.
pub extern "C" fn profile_return(
    r: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    _: &fgraph::RetRegs,
) {
    RETURNS.fetch_add(1, Ordering::Relaxed);
    let id = ftrace::site_id_of(r.func).unwrap() as u64;
    let Some((p, 24)) = u.retrieve() else {
        BAD.fetch_add(1, Ordering::Relaxed);
        return;
    };
    // SAFETY: our 24 bytes in the frame returning now.
    let (start, got) = unsafe { ((p as *const u64).read(), (p as *const u64).add(2).read()) };
    if got != id || start == 0 {
        BAD.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let row = row(id as usize);
    // SAFETY: a row of this thread's table.
    unsafe {
        (*row).hits += 1;
        (*row).active -= 1;
    }
}

pub extern "C" fn accept(
    _: &fgraph::GraphEntry,
    _: &fgraph::GraphUser,
    _: &mut ftrace::Regs,
) -> bool {
    true
}

pub extern "C" fn ignore(_: &fgraph::GraphReturn, _: &fgraph::GraphUser, _: &fgraph::RetRegs) {}

/// Threads run `run` (common::nested_workload's) while `fused`, attached to
/// the fused path, registers and unregisters 150 times, `other` joining it
/// every third round and `beside` (a user with frame data) every fifth,
/// then `fused` alone for 50 ms. Checks that its entry callback (counting
/// in `entries`) saw few of the calls made alone (the fused path ran), no
/// frame went unmatched, and the callbacks found their data at every
/// return.
pub fn churn_and_check(
    run: extern "C" fn(i64) -> i64,
    fused: &Arc<fgraph::GraphUser>,
    entries: &AtomicU64,
    beside: &Arc<fgraph::GraphUser>,
    other: &Arc<fgraph::GraphUser>,
) {
    let sleep = |us| std::thread::sleep(std::time::Duration::from_micros(us));
    let workers = super::Workers::start(3, run, 200);
    for i in 0..150 {
        fgraph::register_graph(fused).unwrap();
        sleep(500);
        if i % 3 == 0 {
            // Two users: the general way, with fused frames in flight.
            fgraph::register_graph(other).unwrap();
            sleep(300);
            fgraph::unregister_graph(other).unwrap();
        }
        if i % 5 == 0 {
            // Callbacks with data beside it: their frames and the fused
            // user's interleave on the general way.
            fgraph::register_graph(beside).unwrap();
            sleep(300);
            fgraph::unregister_graph(beside).unwrap();
        }
        fgraph::unregister_graph(fused).unwrap();
    }
    fgraph::register_graph(fused).unwrap();
    let (e0, r0) = (entries.load(Ordering::Relaxed), workers.rounds());
    sleep(50_000);
    let (e1, r1) = (entries.load(Ordering::Relaxed), workers.rounds());
    fgraph::unregister_graph(fused).unwrap();
    assert!(workers.stop() > 0);
    fused_path_ran_and_frames_held((e0, e1), (r0, r1));
}

/// While the workers ran `run(200)` from round `r.0` to `r.1`, the
/// callback counting its entries from `e.0` to `e.1` saw few of their
/// calls (the fused path took them); no frame went unmatched, and the
/// callbacks found their data at every return.
pub fn fused_path_ran_and_frames_held(e: (u64, u64), r: (u64, u64)) {
    let calls = (r.1 - r.0) * 200 * 25;
    assert!(
        (e.1 - e.0) * 20 < calls,
        "{} of {calls} entries by the callback",
        e.1 - e.0
    );
    assert_eq!(fgraph::counters().lost_frames, 0);
    let returns = RETURNS.load(Ordering::Relaxed);
    assert!(returns > 1000, "{returns} returns by the callbacks");
    assert_eq!(BAD.load(Ordering::Relaxed), 0, "of {returns} returns");
}
