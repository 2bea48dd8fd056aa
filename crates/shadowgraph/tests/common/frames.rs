//! Callbacks of graph users with frame data, as the agent's time filter
//! and profile keep it, that check on return that their data is where
//! `GraphUser::reserve` put it and what their entry (or the fused path's)
//! left there (tests/fused_frames*.rs).

use shadowgraph::record::clock;
use shadowgraph::record::fused::{ProfileCounters, ProfileTable, ENTRY_FLAGS};
use shadowgraph::{fgraph, ftrace};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Entries the timed user's callback saw (the general way).
pub static TIMED_ENTRIES: AtomicU64 = AtomicU64::new(0);
/// Entries the profile's callback saw (the general way).
pub static PROFILE_ENTRIES: AtomicU64 = AtomicU64::new(0);
/// Returns the callbacks saw, and those whose data was not where it
/// belongs or not what an entry leaves there.
pub static RETURNS: AtomicU64 = AtomicU64::new(0);
pub static BAD: AtomicU64 = AtomicU64::new(0);

pub fn timed_entry(_: &fgraph::GraphEntry, u: &fgraph::GraphUser, _: &mut ftrace::Regs) -> bool {
    TIMED_ENTRIES.fetch_add(1, Ordering::Relaxed);
    if let Some(p) = u.reserve(8) {
        // SAFETY: 8 reserved, aligned bytes, ours until the call returns.
        unsafe { (p as *mut u64).write(clock::now() & !ENTRY_FLAGS) };
    }
    true
}

/// A time (from either entry), never flags or 0: what the fused entry
/// leaves once it has read the clock.
pub fn timed_return(_: &fgraph::GraphReturn, u: &fgraph::GraphUser, _: &fgraph::RetRegs) {
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
pub fn profile_entry(e: &fgraph::GraphEntry, u: &fgraph::GraphUser, _: &mut ftrace::Regs) -> bool {
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
pub fn profile_return(r: &fgraph::GraphReturn, u: &fgraph::GraphUser, _: &fgraph::RetRegs) {
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

pub fn accept(_: &fgraph::GraphEntry, _: &fgraph::GraphUser, _: &mut ftrace::Regs) -> bool {
    true
}

pub fn ignore(_: &fgraph::GraphReturn, _: &fgraph::GraphUser, _: &fgraph::RetRegs) {}
