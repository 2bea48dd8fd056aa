//! The profile tracer (`--tracer profile`): per function, the calls, the
//! total and self time and the spread of durations, accumulated in memory
//! per thread (no records, no shared writes) and written at exit to
//! `DIR/profile`, which `shadowgraph report` shows.
//!
//! An fgraph user reserving `{calltime, children}` in each frame: at the
//! return, `d = now − calltime` is added to the function's row and to the
//! nearest profiled caller's `children` (self time = d − children). Total
//! time is the sum of every call's duration, recursive calls included (the
//! kernel's function profiler's definition).

use crate::clock;
use crate::{fgraph, ftrace};
use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// A profile's counters of one function on one thread (`--tracer profile`), updated by its callbacks and by the fused path:
/// each field by one instruction (`sumsq` by `add`/`adc`), which a signal
/// handler of the thread updating the same row cannot split. C layout:
/// the fused path's assembly updates it.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ProfileCounters {
    /// Calls.
    pub hits: u64,
    /// Every call's duration summed (for the average and spread), ticks.
    pub total: u64,
    /// `total` less the profiled callees' time, ticks.
    pub self_time: u64,
    /// Calls of the function under way on this thread.
    pub active: u64,
    /// Σ d² in ticks².
    pub sumsq: u128,
    /// The outermost calls' durations summed: a call inside another of the
    /// same function adds nothing, so that the total is time spent.
    pub outer: u64,
    _pad: u64,
}

/// A thread's profile counters by site id, and the list all threads'
/// tables are on. C layout, as [`ProfileCounters`].
#[repr(C)]
pub struct ProfileTable {
    /// The thread.
    pub tid: i32,
    /// The tracer instance.
    pub inst: usize,
    /// The next thread's table (null: the last).
    pub next: *mut ProfileTable,
    /// Counters by site id.
    pub rows: *mut ProfileCounters,
}

type Row = ProfileCounters;
type Table = ProfileTable;

/// Rows per table: site ids at or above it (objects loaded later) are
/// counted in `BEYOND` instead.
static CAPACITY: AtomicUsize = AtomicUsize::new(0);
static TABLES: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());
/// Returns of functions without a row (no site id, or beyond the table).
pub(crate) static BEYOND: AtomicU64 = AtomicU64::new(0);
/// Calls whose frame had no room for the profile's data.
pub(crate) static NO_ROOM: AtomicU64 = AtomicU64::new(0);

crate::fast_thread_local!(
    static PROFILE_TABLES: [Cell<*mut Table>; fgraph::MAX_USERS];
);

/// Sizes the tables for the sites known now (before registering).
pub fn init(sites: usize) {
    CAPACITY.store(sites + 64, Ordering::Relaxed);
}

/// This thread's cell holding its table of instance `inst` (the same
/// offset from every thread's thread pointer), and the rows of a table
/// (after [`init`]): what the fused path needs to keep the counters itself
/// (`tracer::fused::attach_profile`).
pub(crate) fn tables(inst: usize) -> (usize, usize) {
    let cell = &PROFILE_TABLES[inst] as *const Cell<*mut Table> as usize;
    (cell, CAPACITY.load(Ordering::Relaxed))
}

/// The profile's entry callback: reserves the call's start time in its
/// frame.
pub extern "C" fn on_entry(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    _: &mut ftrace::Regs,
) -> bool {
    let Some(p) = u.reserve(24) else {
        NO_ROOM.fetch_add(1, Ordering::Relaxed);
        return true;
    };
    let p = p as *mut u64;
    // The site's id now, while the entry (through a site stub) says it: at
    // the return only a search of every site would. Its row counts the
    // call as under way (the return takes it back).
    let row = e
        .site_id()
        .and_then(|id| Some((id, row_of(u.private, id)?)));
    if let Some((_, row)) = row {
        // SAFETY: a row of this thread's table (see `row_of`).
        unsafe { crate::local::add(std::ptr::addr_of_mut!((*row).active), 1) };
    }
    let id = row.map_or(u64::MAX, |(id, _)| u64::from(id));
    // SAFETY: 24 reserved, word-aligned bytes, ours until the call returns.
    unsafe {
        p.write(clock::now_shared(fgraph::event_time()));
        p.add(1).write(0);
        p.add(2).write(id);
    }
    true
}

/// Row `id` of this thread's table for instance `inst` (made on first
/// use), or None when it has none (no memory, or a site loaded after the
/// table was sized). A row is written only by this thread and its signal
/// handlers, each field by one instruction, and read by the exit dump
/// once the threads are done.
fn row_of(inst: usize, id: ftrace::SiteId) -> Option<*mut Row> {
    let mut t = PROFILE_TABLES[inst].get();
    if t.is_null() {
        t = new_table(inst);
        if t.is_null() {
            return None;
        }
    }
    if id as usize >= CAPACITY.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: this thread's table, never freed; id < capacity.
    Some(unsafe { (*t).rows.add(id as usize) })
}

/// The profile's return callback: adds the call to its function's row.
pub extern "C" fn on_return(_: &fgraph::GraphReturn, u: &fgraph::GraphUser, _: &fgraph::RetRegs) {
    // The event's time, shared with the other tracers that see it.
    let now = clock::now_shared(fgraph::event_time());
    let Some((p, _)) = u.retrieve() else {
        return;
    };
    let p = p as *const u64;
    // SAFETY: our 24 bytes in the frame returning now.
    let (start, children, id) = unsafe { (p.read(), p.add(1).read(), p.add(2).read()) };
    let d = now.saturating_sub(start);
    if let Some((q, _)) = u.retrieve_nearest_own() {
        // SAFETY: the caller's frame data, live below ours.
        unsafe { crate::local::add((q as *mut u64).add(1), d) };
    }
    // The entry found the row (else it left no id); the same again.
    let row = (id != u64::MAX)
        .then(|| row_of(u.private, id as ftrace::SiteId))
        .flatten();
    let Some(row) = row else {
        BEYOND.fetch_add(1, Ordering::Relaxed);
        return;
    };
    // SAFETY: a row of this thread's table (see `row_of`), each field
    // updated by one instruction that a handler updating the same row
    // cannot split.
    unsafe {
        crate::local::add(std::ptr::addr_of_mut!((*row).hits), 1);
        crate::local::add(std::ptr::addr_of_mut!((*row).total), d);
        crate::local::add(
            std::ptr::addr_of_mut!((*row).self_time),
            d.saturating_sub(children),
        );
        crate::local::add_u128(std::ptr::addr_of_mut!((*row).sumsq), d as u128 * d as u128);
        if crate::local::dec(std::ptr::addr_of_mut!((*row).active)) {
            crate::local::add(std::ptr::addr_of_mut!((*row).outer), d);
        }
    }
}

/// This thread's table for instance `inst`: one anonymous mapping (zero
/// pages until touched), async-signal-safe.
#[cold]
fn new_table(inst: usize) -> *mut Table {
    let cap = CAPACITY.load(Ordering::Relaxed);
    let len = std::mem::size_of::<Table>().next_multiple_of(64) + cap * std::mem::size_of::<Row>();
    let Some(p) = crate::sys::map_anonymous(len) else {
        return std::ptr::null_mut();
    };
    let t = p as *mut Table;
    // SAFETY: the mapping holds the header and `cap` rows (zero = empty).
    unsafe {
        t.write(Table {
            tid: crate::sys::gettid(),
            inst,
            next: std::ptr::null_mut(),
            rows: p.add(std::mem::size_of::<Table>().next_multiple_of(64)) as *mut Row,
        });
    }
    // A lock-free push: the table is written before it is published
    // (AcqRel below); the exit dump walks the list from its head (Acquire).
    let mut head = TABLES.load(Ordering::Acquire);
    loop {
        // SAFETY: t is ours until published.
        unsafe { (*t).next = head };
        match TABLES.compare_exchange(head, t, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    PROFILE_TABLES[inst].set(t);
    t
}

/// The profile of instance `inst` as text: `tid addr hits total self
/// sumsq outer` per row with calls, times in nanoseconds (`conv` turns clock
/// ticks into them).
pub fn dump(inst: usize, sites: &[usize], ns_per_tick: f64) -> String {
    let mut out = String::from(
        "# shadowgraph profile v2\n# tid\taddress\tcalls\ttotal_ns\tself_ns\tsum_sq_ns2\touter_ns\n",
    );
    let cap = CAPACITY.load(Ordering::Relaxed).min(sites.len());
    let mut t = TABLES.load(Ordering::Acquire);
    while !t.is_null() {
        // SAFETY: tables are never freed; their rows were written by
        // threads that are done (exit) or stopped changing them.
        let tab = unsafe { &*t };
        if tab.inst == inst {
            for (id, &addr) in sites.iter().enumerate().take(cap) {
                // SAFETY: id < capacity.
                let row = unsafe { *tab.rows.add(id) };
                if row.hits == 0 {
                    continue;
                }
                let ns = |v: u64| (v as f64 * ns_per_tick).round() as u64;
                let sq = (row.sumsq as f64 * ns_per_tick * ns_per_tick).round();
                let _ = writeln!(
                    out,
                    "{}\t{addr:#x}\t{}\t{}\t{}\t{sq}\t{}",
                    tab.tid,
                    row.hits,
                    ns(row.total),
                    ns(row.self_time),
                    ns(row.outer)
                );
            }
        }
        t = tab.next;
    }
    out
}
