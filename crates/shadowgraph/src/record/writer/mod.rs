//! The traced process's side of recording: one ring per thread and
//! instance, filled with plain stores from the graph callbacks (no lock, no
//! allocation, no system call on the fast path).
//!
//! Two modes, chosen by [`start`]:
//! * **shared** (`shadowgraph record`): the rings are files in a
//!   shared-memory directory that the recording process drains to disk
//!   (`record::collect`). A thread that finds its ring full waits for the
//!   writer (nothing is lost at default settings); if the writer stops
//!   draining for 5 s, records are dropped and counted instead.
//! * **local** (the agent without the CLI): the rings are private memory
//!   and each thread writes its own out to `<dir>/<tid>.dat` when full, at
//!   thread exit, and for every thread at process exit.
//!
//! Times are raw clock values in the ring; the drain converts them to
//! nanoseconds ([`Ring::drain`]), so the files need no second pass.

mod rings;
mod state;
mod vfork;

#[cfg(test)]
pub(crate) use rings::take_spare;
pub use rings::{end_instance, flush_all, forget_after_fork, set_siblings};
pub(crate) use rings::{rings_by_slot_of_this_thread, rings_of_this_thread, BySlot};
pub use state::{
    clock_steps_back, compact, lost, own_drains, set_consumer_time_filter, set_ring_bytes,
    set_session, shared, shared_ring_len, spare_name, waits, write_error, writer_gave_up, written,
    MAX_INSTANCES, SPARE_MAX_BYTES,
};
pub(crate) use vfork::{vfork_child, vfork_parent};

use crate::clock;
use crate::record::ring::{Depth, Ring};
use rings::*;
use shadowgraph_data::format::Kind;
use state::*;
use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Starts recording instance `inst` (a free one: never started, or ended
/// by [`end_instance`]), the tracer `index` of its session: into the data
/// directory `dir` (created if missing), or, when `shm` is given, into
/// rings in that shared-memory directory, which `record::collect` drains
/// (their names and headers carry `index`). Its rings hold `ring_bytes`
/// of records (None: the default); their consumer writes the compact
/// layout if `compact` (`shadowgraph_data::compact`), else uftrace's.
pub fn start(
    inst: usize,
    index: usize,
    dir: &Path,
    shm: Option<&Path>,
    ring_bytes: Option<u64>,
    compact: bool,
) -> io::Result<()> {
    if inst >= MAX_INSTANCES {
        return Err(io::Error::other(format!(
            "at most {MAX_INSTANCES} recording instances"
        )));
    }
    std::fs::create_dir_all(dir)?;
    let c = |p: &Path| CString::new(p.as_os_str().as_encoded_bytes()).map_err(io::Error::other);
    let (dir, shm) = (c(dir)?, shm.map(c).transpose()?);
    reset_counts(inst);
    set_ring_bytes(inst, ring_bytes);
    COMPACT[inst].store(compact, Ordering::Relaxed);
    INDEX[inst].store(index as u32, Ordering::Relaxed);
    DIRS[inst].set(Some(dir));
    SHM[inst].set(shm);
    crate::ftrace::quiesce::on_abandoned(recover_abandoned);
    SPIN_FOR_ROOM.store(cpus_to_run_on() > 1, Ordering::Relaxed);
    KEY.get_or_init(|| {
        let mut k: libc::pthread_key_t = 0;
        // SAFETY: creating a key with a plain extern "C" destructor.
        unsafe { libc::pthread_key_create(&mut k, Some(thread_exit)) };
        k
    });
    Ok(())
}

/// Appends one record for this thread, timed now. Async-signal-safe, and
/// reentrant: a signal handler that interrupts it may record too. The
/// record is at `depth`, unless a signal handler writes it inside our own
/// code: then at the ring's depth (see `ring`).
#[inline]
pub fn emit(inst: usize, kind: Kind, depth: u16, addr: u64) {
    let Some(r) = my_ring(inst, kind, depth) else {
        return;
    };
    // Timed as the slot is claimed, after any wait it needed: its time is
    // not the wait's.
    let from = depth_from(depth);
    if let Some(c) = r
        .claim_at(clock::now, kind, from)
        .or_else(|| make_room(inst, r, clock::now, kind, from))
    {
        r.write(c.slot, c.time, kind, c.depth, addr);
        r.publish(&c);
    }
}

/// [`emit`] for one of several tracers recording the same event (a call's
/// entry or return offered to each): the record's time is the event's,
/// read once for all of them through `shared` ([`clock::now_shared`]). It
/// is read again when a signal handler's traced call ran since it was
/// taken: the handler's records, newer, may sit in this ring before ours.
/// A handler that lands after the time is read and claims a slot in this
/// ring makes our claim retry, and the retry reads the word again. A ring
/// without room waits for it, and its record still takes the event's time
/// (unless a handler's event came meanwhile): the same as the other
/// tracers', which did not wait.
#[inline(always)]
pub fn emit_shared(inst: usize, kind: Kind, depth: u16, addr: u64, shared: &AtomicU64) {
    emit_shared_from(inst, kind, depth, depth_from(depth), addr, shared);
}

/// [`emit_shared`] at the depth `from` says, whoever writes it (`depth`:
/// the caller's, where a new ring starts); the depth recorded, or None if
/// the record was lost (counted).
#[inline(always)]
pub fn emit_shared_from(
    inst: usize,
    kind: Kind,
    depth: u16,
    from: Depth,
    addr: u64,
    shared: &AtomicU64,
) -> Option<u16> {
    let r = my_ring(inst, kind, depth)?;
    let time = || clock::now_shared(shared);
    let c = r
        .claim_at(time, kind, from)
        .or_else(|| make_room(inst, r, time, kind, from))?;
    r.write(c.slot, c.time, kind, c.depth, addr);
    r.publish(&c);
    Some(c.depth)
}

/// [`emit_shared_from`] of a record with `data` after it (arguments or a
/// return value, uftrace's layout: a multiple of 8 bytes, at most
/// `ring::MAX_DATA`; empty: values of no size, the record's `more` bit
/// set all the same, as uftrace sets it); None: a plain record (a caller
/// passing None gets `emit_shared_from` itself, the rest folded away).
#[inline(always)]
pub fn emit_shared_with_data(
    inst: usize,
    kind: Kind,
    depth: u16,
    from: Depth,
    addr: u64,
    shared: &AtomicU64,
    data: Option<&[u8]>,
) -> Option<u16> {
    match data {
        None => emit_shared_from(inst, kind, depth, from, addr, shared),
        Some(data) => emit_data_record(inst, kind, depth, from, addr, shared, data),
    }
}

/// A built-in event `id` (a `read=` trigger's) and its `data` (uftrace's
/// layout: its length in 2 bytes, the bytes, padding to 8), at the time
/// `shared` holds, in the ring of a call at `depth`. Its own depth field
/// is 0, as uftrace writes it; the ring's depth stays.
pub fn emit_event(inst: usize, depth: u16, id: u64, shared: &AtomicU64, data: &[u8]) {
    emit_data_record(inst, Kind::Event, depth, Depth::Given(0), id, shared, data);
}

/// [`emit_event`] at `time` (the events of an entry written late take its
/// time).
pub fn emit_event_at(inst: usize, depth: u16, id: u64, time: u64, data: &[u8]) {
    emit_data_record_timed(
        inst,
        Kind::Event,
        depth,
        Depth::Given(0),
        id,
        &|| time,
        data,
    );
}

/// [`emit_shared_with_data`]'s record with data.
#[inline]
fn emit_data_record(
    inst: usize,
    kind: Kind,
    depth: u16,
    from: Depth,
    addr: u64,
    shared: &AtomicU64,
    data: &[u8],
) -> Option<u16> {
    // (After a wait for room too: the event's time, as emit_shared's.)
    let time = || clock::now_shared(shared);
    emit_data_record_timed(inst, kind, depth, from, addr, &time, data)
}

/// A record with data at the time `time` gives (read as the slot is
/// claimed, after any wait for room).
fn emit_data_record_timed(
    inst: usize,
    kind: Kind,
    depth: u16,
    from: Depth,
    addr: u64,
    time: &dyn Fn() -> u64,
    data: &[u8],
) -> Option<u16> {
    let r = my_ring(inst, kind, depth)?;
    let claim = || r.claim_with_data(time, kind, from, data.len());
    let c = claim()
        .or_else(|| rings::wait_for_room(inst, r, || if r.refresh() { claim() } else { None }))?;
    r.write_with_data(c.slot, c.time, kind, c.depth, addr, data);
    r.publish(&c);
    Some(c.depth)
}

/// [`emit`] with a timestamp taken earlier (the entry of a call kept by a
/// time filter, written once its duration is known). The caller keeps the
/// thread's records in time order.
#[inline]
pub fn emit_at(inst: usize, time: u64, kind: Kind, depth: u16, addr: u64) {
    let Some(r) = my_ring(inst, kind, depth) else {
        return;
    };
    let from = depth_from(depth);
    if let Some(c) = r
        .claim_at(|| time, kind, from)
        .or_else(|| make_room(inst, r, || time, kind, from))
    {
        r.write(c.slot, c.time, kind, c.depth, addr);
        r.publish(&c);
    }
}

/// The entry record this thread is writing, outside any signal handler
/// that interrupted our code, for a call timed earlier: its pending word
/// (0: none), its instance, and the `reserve` value its claim starts from
/// (`Ring::claim_announced`). A handler that lands meanwhile learns from
/// it whether the record is already claimed (it then comes before the
/// handler's) or is for the handler to write first.
struct Announcement {
    word: Cell<usize>,
    inst: Cell<usize>,
    at: Cell<u64>,
}

crate::fast_thread_local!(
    static ANNOUNCED: Announcement;
);

/// Writes the entry record of a call timed earlier, at `time`, whose
/// `word` holds `pending` until the record is written and then `done`;
/// false if it was not ours to write (`word` had changed: a signal handler
/// wrote it). A signal handler that lands at any point finds the record
/// written before its own records or writes it first itself
/// ([`pending_entry_state`]), so the ring stays in time order; handlers
/// use the plain protocol for their own (mark `word`, then [`emit_at`]).
/// `data`: the call's arguments, written after the record.
pub fn emit_pending_entry(
    inst: usize,
    word: &AtomicU64,
    (pending, time, done): (u64, u64, u64),
    depth: u16,
    addr: u64,
    data: &[u8],
) -> bool {
    let nested = crate::ftrace::quiesce::bracket_depth() > 1;
    if nested {
        if !crate::local::exchange(word, pending, done) {
            return false;
        }
        if data.is_empty() {
            emit_at(inst, time, Kind::Entry, depth, addr);
        } else {
            let at = depth_from(depth);
            emit_data_record_timed(inst, Kind::Entry, depth, at, addr, &|| time, data);
        }
        return true;
    }
    // Announced before the ring is looked up: a handler that lands while
    // it is being made writes the record (into a ring of its own making).
    let a = &*ANNOUNCED;
    a.inst.set(inst);
    a.at.set(super::ring::UNSURE);
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    a.word.set(word as *const AtomicU64 as usize);
    let Some(r) = my_ring(inst, Kind::Entry, depth) else {
        a.word.set(0);
        return false;
    };
    let still = || word.load(Ordering::Relaxed) == pending;
    let from = Depth::Given(depth);
    let len = data.len();
    let attempt = || match r.claim_announced(time, Kind::Entry, from, &a.at, still, len) {
        Ok(Some(c)) => Some(Some(c)),
        Ok(None) => None,
        Err(_) => Some(None),
    };
    let claimed = match attempt() {
        Some(c) => c,
        None => wait_for_room(inst, r, || if r.refresh() { attempt() } else { None }).flatten(),
    };
    let mine = match claimed {
        Some(c) => {
            if data.is_empty() {
                r.write(c.slot, c.time, Kind::Entry, c.depth, addr);
            } else {
                r.write_with_data(c.slot, c.time, Kind::Entry, c.depth, addr, data);
            }
            r.publish(&c);
            // Nobody else writes it now: a handler finds it claimed.
            word.store(done, Ordering::Relaxed);
            true
        }
        // Lost (counted) if still ours: nobody is to write it later, with a
        // time older than what follows.
        None => crate::local::exchange(word, pending, done),
    };
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    a.word.set(0);
    mine
}

/// For a signal handler that interrupted our code and found `word` (a
/// call's pending entry, instance `inst`) not written: `Some(true)` if the
/// code it interrupted has claimed the record's slot (the record comes
/// before the handler's: treat it as written), `Some(false)` if that code
/// announced it but has not claimed it (the handler writes it), `None` if
/// nobody is writing it.
pub fn pending_entry_state(inst: usize, word: &AtomicU64) -> Option<bool> {
    let a = &*ANNOUNCED;
    if a.word.get() != word as *const AtomicU64 as usize || a.inst.get() != inst {
        return None;
    }
    let at = a.at.get();
    let b = MINE[inst].load(Ordering::Relaxed);
    if b.is_null() {
        return Some(false); // no ring yet: nothing claimed
    }
    // SAFETY: this thread's ring, made by `create`; only its exit step
    // unmaps it, after taking it out of MINE.
    let r = unsafe { Ring::from_base(b) };
    Some(at != super::ring::UNSURE && r.reserve_now() != at)
}

/// The depth this thread's ring of instance `inst` is at (after its
/// last record claimed: one more than an entry's, an exit's), if it has
/// one.
pub fn ring_depth(inst: usize) -> Option<u16> {
    let b = MINE[inst].load(Ordering::Relaxed);
    if b.is_null() {
        return None;
    }
    // SAFETY: this thread's ring, made by `create`; only its exit step
    // unmaps it, after taking it out of MINE.
    Some(unsafe { Ring::from_base(b) }.depth_now())
}

/// The caller's depth, unless this record is written by a signal handler
/// that interrupted our own code (two brackets deep): the ring's then.
#[inline(always)]
pub fn depth_from(depth: u16) -> Depth {
    if crate::ftrace::quiesce::bracket_depth() > 1 {
        Depth::Follow
    } else {
        Depth::Given(depth)
    }
}
