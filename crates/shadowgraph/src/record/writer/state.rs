//! The writer's settings and counts: where the rings go and how large
//! they are, and what was written, lost and waited for, by instance.

use crate::record::ring::{ring_bytes, RING_RECORDS};
use std::ffi::{c_char, CStr, CString};
use std::io;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
use std::sync::OnceLock;

/// Rings (threads × instances) at most.
pub(super) const MAX_RINGS: usize = 4096;
/// Recording instances (tracers writing to their own directories) at
/// once: as many as fgraph has users.
pub const MAX_INSTANCES: usize = crate::fgraph::MAX_USERS;
/// How long a thread waits for the writer to make room before dropping.
pub(super) const WAIT_LIMIT_NS: u64 = 5_000_000_000;
/// How long of that it yields the processor before it naps, if the
/// writer can run meanwhile on another processor ([`SPIN_FOR_ROOM`]).
pub(super) const WAIT_SPIN_NS: u64 = 200_000;
/// More than one processor to run on (when recording started).
pub(super) static SPIN_FOR_ROOM: AtomicBool = AtomicBool::new(false);

/// How many processors this thread may run on (its affinity mask: the
/// program, and the writer with it, may have been confined to fewer than
/// are online, e.g. by `taskset`).
pub(super) fn cpus_to_run_on() -> u32 {
    // SAFETY: a zeroed cpu_set_t is an empty set, filled by the call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 1;
        }
        libc::CPU_COUNT(&set) as u32
    }
}

/// A live ring of this process, and (local mode) the file it drains to.
/// Its fields change only with `lock` held (the ring's thread making or
/// ending it, or the end of its instance: [`super::end_instance`]); a
/// signal handler that finds a slot locked passes over it.
pub(super) struct Slot {
    pub ring: AtomicPtr<u8>,
    pub fd: AtomicI32,
    /// Shared mode: the thread's own descriptor of the file the writer
    /// drains the ring into, opened the first time the thread drains the
    /// ring itself (the writer behind: [`super::rings::drain_own`]); -1:
    /// none.
    pub own_fd: AtomicI32,
    pub lock: AtomicBool,
    /// The instance the ring records.
    pub inst: AtomicUsize,
    /// The thread's cells naming the ring (its `MINE[inst]` and
    /// `MINE_SLOT[inst]`), which the end of the instance clears.
    pub mine: AtomicPtr<AtomicPtr<u8>>,
    pub mine_slot: AtomicPtr<AtomicUsize>,
    /// The thread's word of its rings by graph slot (`BY_SLOT.word`),
    /// cleared with them.
    pub by_slot: AtomicPtr<std::sync::atomic::AtomicU64>,
}

impl Slot {
    /// Takes the slot's lock if it is free.
    pub fn try_lock(&self) -> bool {
        // Acquire: what the last holder wrote is seen.
        !self.lock.swap(true, Ordering::Acquire)
    }

    /// Takes the slot's lock, waiting for its holder (a few instructions
    /// and system calls of the ring's end).
    pub fn lock(&self) {
        while !self.try_lock() {
            std::hint::spin_loop();
        }
    }

    pub fn unlock(&self) {
        // Release: hands what was written to the next holder.
        self.lock.store(false, Ordering::Release);
    }
}

pub(super) static RINGS: [Slot; MAX_RINGS] = [const {
    Slot {
        ring: AtomicPtr::new(std::ptr::null_mut()),
        fd: AtomicI32::new(-1),
        own_fd: AtomicI32::new(-1),
        lock: AtomicBool::new(false),
        inst: AtomicUsize::new(0),
        mine: AtomicPtr::new(std::ptr::null_mut()),
        mine_slot: AtomicPtr::new(std::ptr::null_mut()),
        by_slot: AtomicPtr::new(std::ptr::null_mut()),
    }
}; MAX_RINGS];

/// A path of an instance's, set while it records: a `CString` given up
/// by `into_raw` (null: none), read by ring-making code (signal handlers
/// included) and taken back once its instance has ended.
pub(super) struct InstancePath(AtomicPtr<c_char>);

impl InstancePath {
    /// The path, if one is set.
    pub fn get(&self) -> Option<&CStr> {
        // Acquire: the string is written whole before it is published.
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: a string from CString::into_raw, freed only by `set`
        // once its instance has ended (no code of it runs: a grace period
        // has passed).
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
    }

    /// Sets the path (None: none), freeing the one before.
    pub fn set(&self, path: Option<CString>) {
        let new = path.map_or(std::ptr::null_mut(), CString::into_raw);
        // AcqRel: publishes the new string, takes the old one's.
        let old = self.0.swap(new, Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: from CString::into_raw, unreachable now (see `get`).
            drop(unsafe { CString::from_raw(old) });
        }
    }
}

/// Instance `i`'s data directory (for rings its threads drain themselves).
pub(super) static DIRS: [InstancePath; MAX_INSTANCES] =
    [const { InstancePath(AtomicPtr::new(std::ptr::null_mut())) }; MAX_INSTANCES];
/// Instance `i`'s shared-memory directory of the rings the writer drains,
/// if any.
pub(super) static SHM: [InstancePath; MAX_INSTANCES] =
    [const { InstancePath(AtomicPtr::new(std::ptr::null_mut())) }; MAX_INSTANCES];
/// Instance `i`'s index among its session's tracers: its rings carry it
/// (their header and file name), for the session's writer.
pub(super) static INDEX: [AtomicU32; MAX_INSTANCES] = [const { AtomicU32::new(0) }; MAX_INSTANCES];
/// This process image's recording session (see [`set_session`]).
pub(super) static SESSION: AtomicU64 = AtomicU64::new(0);
/// Records per ring, shared or local, by instance (a power of two; 2 MiB
/// by default: a local ring makes one `write` per 131,072 records).
pub(super) static SHARED_RECORDS: [AtomicU64; MAX_INSTANCES] =
    [const { AtomicU64::new(RING_RECORDS) }; MAX_INSTANCES];

/// The time filter the consumer of each instance's rings applies (ns; 0:
/// none): see `ring::drain::filter`.
pub(super) static MIN_NS: [AtomicU64; MAX_INSTANCES] = [const { AtomicU64::new(0) }; MAX_INSTANCES];

/// Whether the consumer of each instance's rings writes the compact layout
/// (set before its first ring is made).
pub(super) static COMPACT: [AtomicBool; MAX_INSTANCES] =
    [const { AtomicBool::new(false) }; MAX_INSTANCES];

/// Whether the consumer of instance `inst`'s rings writes the compact
/// layout.
pub fn compact(inst: usize) -> bool {
    COMPACT[inst].load(Ordering::Relaxed)
}

/// Has the consumer of instance `inst`'s rings leave out the calls shorter
/// than `ns` (0: none), those of them that make no call long enough: a
/// time filter applied on the way to the file, for a tracer whose threads
/// record every call. Before its first ring is made.
pub fn set_consumer_time_filter(inst: usize, ns: u64) {
    MIN_NS[inst].store(ns, Ordering::Relaxed);
}

/// Records per ring for `bytes` of records: rounded up to a power of two of
/// at least 4096 records (64 KiB).
pub(super) fn records_for(bytes: u64) -> u64 {
    (bytes / 16).max(4096).next_power_of_two()
}

/// Sets the size of the threads' rings of instance `inst`: `bytes` of
/// records (see `records_for`); None: the default.
pub fn set_ring_bytes(inst: usize, bytes: Option<u64>) {
    let records = bytes.map_or(RING_RECORDS, records_for);
    SHARED_RECORDS[inst].store(records, Ordering::Relaxed);
}

/// The length of a ring file for `bytes` of records (None: the default
/// size), as the traced threads make them.
pub fn shared_ring_len(bytes: Option<u64>) -> usize {
    ring_bytes(bytes.map_or(RING_RECORDS, records_for))
}

/// The largest ring the writer makes a spare of (see
/// `collect::Collector::set_ring_len`): more would be memory held for a
/// thread that may never record that much.
pub const SPARE_MAX_BYTES: usize = 16 << 20;
/// The spare ring of an instance's writer was tried for (by this process
/// image, or the one it was forked from): there is one, and only the
/// first try may find it.
pub(super) static SPARE_TRIED: [AtomicBool; MAX_INSTANCES] =
    [const { AtomicBool::new(false) }; MAX_INSTANCES];

/// Writes the file name of the spare ring of `len` bytes, `spare-<len>`,
/// to `buf` (at least 32 bytes); returns its length. The length is in the
/// name so that a ring of another size is never taken.
pub fn spare_name(len: usize, buf: &mut [u8]) -> usize {
    buf[..6].copy_from_slice(b"spare-");
    put_decimal(buf, 6, len as u64)
}

/// Names the recording session of this process image: its rings carry it,
/// and the writer sends them to that session's directory. A forked child
/// keeps its parent's session; a program started by exec gets its own.
pub fn set_session(id: u64) {
    SESSION.store(id, Ordering::Relaxed);
}
/// An instance's writer stopped draining (a wait timed out): drop instead
/// of waiting.
pub(super) static WRITER_GONE: [AtomicBool; MAX_INSTANCES] =
    [const { AtomicBool::new(false) }; MAX_INSTANCES];
pub(super) static KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
pub(super) static SEQ: AtomicUsize = AtomicUsize::new(0);
// The counters below (written, lost, clock steps, waits) are statistics:
// Relaxed everywhere, read once the threads that add to them are done.

/// Local mode: records written to files, and lost, per instance.
pub(super) static WRITTEN: [AtomicU64; MAX_INSTANCES] =
    [const { AtomicU64::new(0) }; MAX_INSTANCES];
pub(super) static LOST: [AtomicU64; MAX_INSTANCES] = [const { AtomicU64::new(0) }; MAX_INSTANCES];
/// The first write failure of each instance (an errno; 0: none), so that
/// the loss it caused is reported with its reason.
pub(super) static WRITE_ERRNO: [AtomicI32; MAX_INSTANCES] =
    [const { AtomicI32::new(0) }; MAX_INSTANCES];

/// Local mode: per instance, times moved forward to keep each thread's
/// increasing and the largest step back among them (ns).
pub(super) static CLOCK_STEPS_BACK: [AtomicU64; MAX_INSTANCES] =
    [const { AtomicU64::new(0) }; MAX_INSTANCES];
pub(super) static CLOCK_STEP_MAX: [AtomicU64; MAX_INSTANCES] =
    [const { AtomicU64::new(0) }; MAX_INSTANCES];

/// Local mode: (times moved forward, largest step back in ns) of instance
/// `inst` so far.
pub fn clock_steps_back(inst: usize) -> (u64, u64) {
    (
        CLOCK_STEPS_BACK[inst].load(Ordering::Relaxed),
        CLOCK_STEP_MAX[inst].load(Ordering::Relaxed),
    )
}

/// Times a thread found its ring full and waited for the writer (or,
/// the writer behind, drained it itself), and the nanoseconds that took
/// in all (shared mode).
pub(super) static WAITS: AtomicU64 = AtomicU64::new(0);
pub(super) static WAITED_NS: AtomicU64 = AtomicU64::new(0);

/// Times a thread drained its shared ring itself, the writer behind, and
/// the records it wrote so.
pub(super) static OWN_DRAINS: AtomicU64 = AtomicU64::new(0);
pub(super) static OWN_RECORDS: AtomicU64 = AtomicU64::new(0);

/// (drains of their own rings by the program's threads, records they
/// wrote so), all threads so far.
pub fn own_drains() -> (u64, u64) {
    (
        OWN_DRAINS.load(Ordering::Relaxed),
        OWN_RECORDS.load(Ordering::Relaxed),
    )
}

/// Whether a thread gave up waiting for instance `inst`'s writer (a ring
/// stayed full for `WAIT_LIMIT_NS`): records are dropped from then on,
/// counted as lost.
pub fn writer_gave_up(inst: usize) -> bool {
    WRITER_GONE[inst].load(Ordering::Relaxed)
}

/// (waits for the writer, nanoseconds waited), all threads so far.
pub fn waits() -> (u64, u64) {
    (
        WAITS.load(Ordering::Relaxed),
        WAITED_NS.load(Ordering::Relaxed),
    )
}

/// Local mode: records of instance `inst` written so far.
pub fn written(inst: usize) -> u64 {
    WRITTEN[inst].load(Ordering::Relaxed)
}

/// Records of instance `inst` lost so far (local mode; in shared mode, the
/// ones lost before reaching a ring).
pub fn lost(inst: usize) -> u64 {
    LOST[inst].load(Ordering::Relaxed)
}

/// Why records of instance `inst` could not be written, if they could not.
pub fn write_error(inst: usize) -> Option<io::Error> {
    match WRITE_ERRNO[inst].load(Ordering::Relaxed) {
        0 => None,
        e => Some(io::Error::from_raw_os_error(e)),
    }
}

/// Whether instance `inst`'s rings are drained by another process (a
/// thread whose ring could not be made there drains its own).
pub fn shared(inst: usize) -> bool {
    SHM[inst].get().is_some()
}

/// Whether any instance's rings are drained by another process.
pub(super) fn any_shared() -> bool {
    SHM.iter().any(|s| s.get().is_some())
}

/// Instance `inst` starts afresh: its counts at zero, its writer not
/// given up on, its spare ring not tried for.
pub(super) fn reset_counts(inst: usize) {
    for c in [
        &WRITTEN[inst],
        &LOST[inst],
        &CLOCK_STEPS_BACK[inst],
        &CLOCK_STEP_MAX[inst],
    ] {
        c.store(0, Ordering::Relaxed);
    }
    WRITE_ERRNO[inst].store(0, Ordering::Relaxed);
    WRITER_GONE[inst].store(false, Ordering::Relaxed);
    SPARE_TRIED[inst].store(false, Ordering::Relaxed);
    MIN_NS[inst].store(0, Ordering::Relaxed);
    COMPACT[inst].store(false, Ordering::Relaxed);
}

/// "<dir>/<name>" as a NUL-terminated path, without allocating.
pub(super) fn path_in(dir: &CStr, name: &[u8], out: &mut [u8]) -> bool {
    let d = dir.to_bytes();
    if d.len() + 1 + name.len() + 1 > out.len() {
        return false;
    }
    out.fill(0);
    out[..d.len()].copy_from_slice(d);
    out[d.len()] = b'/';
    out[d.len() + 1..d.len() + 1 + name.len()].copy_from_slice(name);
    true
}

pub(super) use crate::sys::put_decimal;
