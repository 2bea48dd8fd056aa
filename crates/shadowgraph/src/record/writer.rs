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

use super::ring::{ring_bytes, Claim, Depth, Drained, Ring, RING_RECORDS};
use crate::clock;
use shadowgraph_data::format::Kind;
use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Rings (threads × instances) at most.
const MAX_RINGS: usize = 4096;
/// Recording instances (tracers writing to their own directories).
pub const MAX_INSTANCES: usize = 8;
/// How long a thread waits for the writer to make room before dropping.
const WAIT_LIMIT_NS: u64 = 5_000_000_000;
/// How long of that it spins before it naps, if the writer can run
/// meanwhile on another processor ([`SPIN_FOR_ROOM`]).
const WAIT_SPIN_NS: u64 = 200_000;
/// More than one processor to run on (when recording started).
static SPIN_FOR_ROOM: AtomicBool = AtomicBool::new(false);

/// How many processors this thread may run on (its affinity mask: the
/// program, and the writer with it, may have been confined to fewer than
/// are online, e.g. by `taskset`).
fn cpus_to_run_on() -> u32 {
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
struct Slot {
    ring: AtomicPtr<u8>,
    fd: AtomicI32,
}

static RINGS: [Slot; MAX_RINGS] = [const {
    Slot {
        ring: AtomicPtr::new(std::ptr::null_mut()),
        fd: AtomicI32::new(-1),
    }
}; MAX_RINGS];
/// Instance `i`'s data directory (for rings its threads drain themselves).
static DIRS: [OnceLock<CString>; MAX_INSTANCES] = [const { OnceLock::new() }; MAX_INSTANCES];
/// The shared-memory directory of the rings the writer drains, if any.
static SHM: OnceLock<CString> = OnceLock::new();
/// This process image's recording session (see [`set_session`]).
static SESSION: AtomicU64 = AtomicU64::new(0);
/// Records per ring, shared or local (a power of two; 2 MiB by default: a
/// local ring makes one `write` per 131,072 records).
static SHARED_RECORDS: AtomicU64 = AtomicU64::new(RING_RECORDS);

/// Records per ring for `bytes` of records: rounded up to a power of two of
/// at least 4096 records (64 KiB).
fn records_for(bytes: u64) -> u64 {
    (bytes / 16).max(4096).next_power_of_two()
}

/// Sets the size of the threads' rings: `bytes` of records (see
/// [`records_for`]).
pub fn set_ring_bytes(bytes: u64) {
    SHARED_RECORDS.store(records_for(bytes), Ordering::Relaxed);
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
/// The spare ring was tried for (by this process image, or the one it was
/// forked from): there is one, and only the first try may find it.
static SPARE_TRIED: AtomicBool = AtomicBool::new(false);

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
/// The writer stopped draining (a wait timed out): drop instead of waiting.
static WRITER_GONE: AtomicBool = AtomicBool::new(false);
static KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
static SEQ: AtomicUsize = AtomicUsize::new(0);
/// Local mode: records written to files, and lost, per instance.
static WRITTEN: [AtomicU64; MAX_INSTANCES] = [const { AtomicU64::new(0) }; MAX_INSTANCES];
static LOST: [AtomicU64; MAX_INSTANCES] = [const { AtomicU64::new(0) }; MAX_INSTANCES];
/// The first write failure of each instance (an errno; 0: none), so that
/// the loss it caused is reported with its reason.
static WRITE_ERRNO: [AtomicI32; MAX_INSTANCES] = [const { AtomicI32::new(0) }; MAX_INSTANCES];

/// Local mode: per instance, times moved forward to keep each thread's
/// increasing and the largest step back among them (ns).
static CLOCK_STEPS_BACK: [AtomicU64; MAX_INSTANCES] = [const { AtomicU64::new(0) }; MAX_INSTANCES];
static CLOCK_STEP_MAX: [AtomicU64; MAX_INSTANCES] = [const { AtomicU64::new(0) }; MAX_INSTANCES];

/// Local mode: (times moved forward, largest step back in ns) of instance
/// `inst` so far.
pub fn clock_steps_back(inst: usize) -> (u64, u64) {
    (
        CLOCK_STEPS_BACK[inst].load(Ordering::Relaxed),
        CLOCK_STEP_MAX[inst].load(Ordering::Relaxed),
    )
}

/// Times a thread found its ring full and waited for the writer, and the
/// nanoseconds it waited in all (shared mode).
static WAITS: AtomicU64 = AtomicU64::new(0);
static WAITED_NS: AtomicU64 = AtomicU64::new(0);

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

/// Whether the rings are drained by another process (a thread whose ring
/// could not be made there drains its own).
pub fn shared() -> bool {
    SHM.get().is_some()
}

// This thread's ring per instance (null: none yet). Initial-exec TLS
// (crate::tls): read on every recorded event.
crate::fast_thread_local!(
    static MINE: [Cell<*mut u8>; MAX_INSTANCES];
);
/// This thread's brackets were abandoned (see `Ring::recover_abandoned`):
/// so were the record writes they held, in any of its rings.
fn recover_abandoned() {
    for m in MINE.iter() {
        let b = m.get();
        if !b.is_null() {
            // SAFETY: this thread's ring, made by `create`; only its exit
            // step unmaps it, after taking it out of MINE.
            unsafe { Ring::from_base(b) }.recover_abandoned();
        }
    }
}

/// The address of this thread's rings (`[*mut u8; MAX_INSTANCES]`): the
/// fused recording path finds them at the same offset from every thread's
/// thread pointer.
pub(crate) fn rings_of_this_thread() -> usize {
    &*MINE as *const [Cell<*mut u8>; MAX_INSTANCES] as usize
}

// (local mode) the slot index of MINE's rings + 1, for their files.
crate::fast_thread_local!(
    static MINE_SLOT: [Cell<usize>; MAX_INSTANCES];
);

/// Starts recording instance `inst`: into the data directory `dir`
/// (created if missing), or, when `shm` is given, into rings in that
/// shared-memory directory, which `record::collect` drains.
pub fn start(inst: usize, dir: &Path, shm: Option<&Path>) -> io::Result<()> {
    if inst >= MAX_INSTANCES {
        return Err(io::Error::other(format!(
            "at most {MAX_INSTANCES} recording instances"
        )));
    }
    std::fs::create_dir_all(dir)?;
    let c = |p: &Path| CString::new(p.as_os_str().as_encoded_bytes()).map_err(io::Error::other);
    let _ = DIRS[inst].set(c(dir)?);
    if let Some(s) = shm {
        let _ = SHM.set(c(s)?);
    }
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
/// ring makes our claim retry, and the retry reads the word again.
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
    let c = r
        .claim_at(|| clock::now_shared(shared), kind, from)
        .or_else(|| make_room(inst, r, clock::now, kind, from))?;
    r.write(c.slot, c.time, kind, c.depth, addr);
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
pub fn emit_pending_entry(
    inst: usize,
    word: &AtomicU64,
    pending: u64,
    time: u64,
    done: u64,
    depth: u16,
    addr: u64,
) -> bool {
    let nested = crate::ftrace::quiesce::bracket_depth() > 1;
    if nested {
        if !crate::local::exchange(word, pending, done) {
            return false;
        }
        emit_at(inst, time, Kind::Entry, depth, addr);
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
    let attempt = || match r.claim_announced(time, Kind::Entry, from, &a.at, still) {
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
            r.write(c.slot, c.time, Kind::Entry, c.depth, addr);
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
    let b = MINE[inst].get();
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
    let b = MINE[inst].get();
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
fn depth_from(depth: u16) -> Depth {
    if crate::ftrace::quiesce::bracket_depth() > 1 {
        Depth::Follow
    } else {
        Depth::Given(depth)
    }
}

/// This thread's ring of instance `inst`, or None (the record counted as
/// lost) when it has none and cannot make one. A new ring starts at the
/// depth a record of `kind` at `depth` implies.
#[inline(always)]
fn my_ring(inst: usize, kind: Kind, depth: u16) -> Option<Ring> {
    let mut b = MINE[inst].get();
    if b.is_null() {
        b = make_my_ring(inst, kind, depth);
        if b.is_null() {
            LOST[inst].fetch_add(1, Ordering::Relaxed);
            return None;
        }
    }
    // SAFETY: this thread's ring, made by `create`; only its exit step
    // unmaps it, after taking it out of MINE.
    Some(unsafe { Ring::from_base(b) })
}

/// This thread's first ring of instance `inst`, made with signals blocked:
/// a handler that made one of its own meanwhile would leave the thread
/// two, which reach the file out of order. (One that came before the mask
/// made it: then it is the one.)
#[cold]
#[inline(never)]
fn make_my_ring(inst: usize, kind: Kind, depth: u16) -> *mut u8 {
    let open = if kind == Kind::Exit {
        depth.saturating_add(1)
    } else {
        depth
    };
    let mask = crate::sys::block_async_signals();
    let mut b = MINE[inst].get();
    if b.is_null() {
        b = create(inst, open);
    }
    crate::sys::restore_signals(mask);
    b
}

/// The ring is full as far as the producer knew: re-read the consumer's
/// position, drain it ourselves (local mode) or wait for the writer; a
/// claimed slot and its time, or None (counted as lost).
#[cold]
#[inline(never)]
fn make_room(
    inst: usize,
    r: Ring,
    time: impl Fn() -> u64,
    kind: Kind,
    from: Depth,
) -> Option<Claim> {
    let room = || {
        if r.refresh() {
            r.claim_at(&time, kind, from)
        } else {
            None
        }
    };
    room().or_else(|| wait_for_room(inst, r, room))
}

/// The ring is full: drains it ourselves (local mode) or waits for the
/// writer until `attempt` (which refreshes the ring's room) succeeds; None
/// (a record counted as lost) when it never does.
#[cold]
#[inline(never)]
fn wait_for_room<T>(inst: usize, r: Ring, attempt: impl Fn() -> Option<T>) -> Option<T> {
    let fd = RINGS[MINE_SLOT[inst].get() - 1].fd.load(Ordering::Relaxed);
    if fd >= 0 {
        drain_local(inst, r, fd);
    } else if !WRITER_GONE.load(Ordering::Relaxed) {
        let start = clock::monotonic_ns();
        WAITS.fetch_add(1, Ordering::Relaxed);
        loop {
            if let Some(c) = attempt() {
                WAITED_NS.fetch_add(clock::monotonic_ns() - start, Ordering::Relaxed);
                return Some(c);
            }
            let waited = clock::monotonic_ns() - start;
            if waited > WAIT_LIMIT_NS {
                WRITER_GONE.store(true, Ordering::Relaxed);
                break;
            }
            if waited < WAIT_SPIN_NS && SPIN_FOR_ROOM.load(Ordering::Relaxed) {
                // The writer frees the ring a chunk at a time: room
                // comes back within microseconds of a chunk's write, and a
                // nap (50 µs at least, often twice that) would lose most
                // of it.
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                continue;
            }
            let nap = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000,
            };
            // SAFETY: nanosleep is async-signal-safe; errors only shorten it.
            unsafe { libc::nanosleep(&nap, std::ptr::null_mut()) };
        }
    }
    let c = attempt();
    if c.is_none() {
        r.drop_record();
    }
    c
}

/// Local mode: drains a ring to its file, unless someone else is at it.
fn drain_local(inst: usize, r: Ring, fd: i32) {
    let h = r.header();
    if h.busy
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    account(inst, r.drain(fd));
    h.busy.store(0, Ordering::Release);
}

fn account(inst: usize, d: Drained) {
    WRITTEN[inst].fetch_add(d.written, Ordering::Relaxed);
    LOST[inst].fetch_add(d.lost, Ordering::Relaxed);
    CLOCK_STEPS_BACK[inst].fetch_add(d.clock_steps_back, Ordering::Relaxed);
    CLOCK_STEP_MAX[inst].fetch_max(d.clock_step_max, Ordering::Relaxed);
    if d.errno != 0 {
        let _ =
            WRITE_ERRNO[inst].compare_exchange(0, d.errno, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// "<dir>/<name>" as a NUL-terminated path, without allocating.
fn path_in(dir: &CString, name: &[u8], out: &mut [u8]) -> bool {
    let d = dir.as_bytes();
    if d.len() + 1 + name.len() + 1 > out.len() {
        return false;
    }
    out.fill(0);
    out[..d.len()].copy_from_slice(d);
    out[d.len()] = b'/';
    out[d.len() + 1..d.len() + 1 + name.len()].copy_from_slice(name);
    true
}

/// Appends `v` in decimal to `buf` at `n`; returns the new length.
fn put_decimal(buf: &mut [u8], mut n: usize, v: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut k = 0;
    let mut v = v;
    loop {
        digits[k] = b'0' + (v % 10) as u8;
        k += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in (0..k).rev() {
        buf[n] = digits[i];
        n += 1;
    }
    n
}

/// A ring file in the shared-memory directory `dir`, mapped; None if one
/// cannot be made.
fn create_shared(
    dir: &CString,
    inst: usize,
    tid: i32,
    pid: i32,
    name: &mut [u8; 96],
    path: &mut [u8; 4096],
) -> Option<*mut u8> {
    // <inst>-<pid>-<tid>-<seq>-<session>.ring: unique even when a tid is
    // reused, or a process starts another program by exec.
    let mut n = put_decimal(name, 0, inst as u64);
    for v in [
        pid as u64,
        tid as u64,
        SEQ.fetch_add(1, Ordering::Relaxed) as u64,
        SESSION.load(Ordering::Relaxed),
    ] {
        name[n] = b'-';
        n = put_decimal(name, n + 1, v);
    }
    name[n..n + 5].copy_from_slice(b".ring");
    if !path_in(dir, &name[..n + 5], path) {
        return None;
    }
    let len = ring_bytes(SHARED_RECORDS.load(Ordering::Relaxed));
    if let Some(p) = claim_spare(dir, len, path) {
        return Some(p);
    }
    // SAFETY: path is NUL-terminated; the file is new (O_EXCL) and
    // sized before it is mapped shared; mmap/ftruncate/close are
    // async-signal-safe.
    unsafe {
        let fd = libc::open(
            path.as_ptr().cast(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600,
        );
        if fd < 0 {
            return None;
        }
        // The pages come as they are written (a thread that records
        // little takes little: allocating all of them here would cost a
        // short-lived thread ~0.25 ms). A file system without room for the
        // ring, where a page written later would be a SIGBUS in the traced
        // program, sends the thread to write its own records instead.
        let p = if libc::ftruncate(fd, len as libc::off_t) == 0 && has_room(fd, len) {
            crate::sys::map_shared(fd, len, false)
        } else {
            None
        };
        libc::close(fd);
        if p.is_none() {
            libc::unlink(path.as_ptr().cast());
        }
        p
    }
}

/// Whether the file system of `fd` has twice `len` bytes free (the
/// writer's files may grow there too). Async-signal-safe.
fn has_room(fd: i32, len: usize) -> bool {
    // SAFETY: a zeroed statfs is filled by the call; fstatfs is a plain
    // system call on an fd we own.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::fstatfs(fd, &mut st) != 0 {
            return true; // cannot tell: room assumed
        }
        (st.f_bavail as u128) * (st.f_bsize as u128) >= 2 * len as u128
    }
}

/// Takes the writer's spare ring (see `collect::Collector::set_ring_len`)
/// as the ring file `path` and maps it with its pages; None if it is gone
/// or another thread tried for it first.
fn claim_spare(dir: &CString, len: usize, path: &[u8; 4096]) -> Option<*mut u8> {
    if SPARE_TRIED.swap(true, Ordering::Relaxed) {
        return None;
    }
    take_spare(dir, len, path)
}

/// [`claim_spare`] without its once-per-process guard.
pub(crate) fn take_spare(dir: &CString, len: usize, path: &[u8; 4096]) -> Option<*mut u8> {
    let mut name = [0u8; 32];
    let mut spare = [0u8; 256]; // small: a signal handler may get here
    let n = spare_name(len, &mut name);
    if !path_in(dir, &name[..n], &mut spare) {
        return None;
    }
    // SAFETY: both paths are NUL-terminated; rename, open, mmap, close and
    // unlink are async-signal-safe. The rename is atomic: of the processes
    // that try (a forked child's first thread may), one gets the spare and
    // the others ENOENT, and what it gets is a whole file the writer
    // finished before it gave it this name.
    unsafe {
        if libc::rename(spare.as_ptr().cast(), path.as_ptr().cast()) != 0 {
            return None;
        }
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC);
        let p = if fd >= 0 {
            let p = crate::sys::map_shared(fd, len, true);
            libc::close(fd);
            p
        } else {
            None
        };
        if p.is_none() {
            libc::unlink(path.as_ptr().cast());
        }
        p
    }
}

#[cold]
fn create(inst: usize, depth: u16) -> *mut u8 {
    if DISABLED.load(Ordering::Acquire) {
        return std::ptr::null_mut();
    }
    let tid = crate::sys::gettid();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut name = [0u8; 96];
    let mut path = [0u8; 4096];
    let shared_ring = SHM
        .get()
        .and_then(|shm| create_shared(shm, inst, tid, pid, &mut name, &mut path));
    let (base, fd, cap) = if let Some(base) = shared_ring {
        (base, -1, SHARED_RECORDS.load(Ordering::Relaxed))
    } else {
        // Local: the agent alone, or no shared ring could be made (a file
        // size limit, a full /dev/shm): this thread writes its own.
        let Some(dir) = DIRS[inst].get() else {
            return std::ptr::null_mut();
        };
        let n = put_decimal(&mut name, 0, tid as u64);
        name[n..n + 4].copy_from_slice(b".dat");
        if !path_in(dir, &name[..n + 4], &mut path) {
            return std::ptr::null_mut();
        }
        // SAFETY: path is NUL-terminated.
        let fd = unsafe {
            libc::open(
                path.as_ptr().cast(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            return std::ptr::null_mut();
        }
        let records = SHARED_RECORDS.load(Ordering::Relaxed);
        let Some(p) = crate::sys::map_anonymous(ring_bytes(records)) else {
            // SAFETY: closing the fd opened above.
            unsafe { libc::close(fd) };
            return std::ptr::null_mut();
        };
        (p, fd, records)
    };
    // SAFETY: a fresh zeroed mapping of the ring's size, unmapped only by
    // this thread's exit step.
    unsafe {
        Ring::init(
            base,
            inst,
            tid,
            pid,
            cap,
            SESSION.load(Ordering::Relaxed),
            depth,
        )
    };
    let Some(i) = RINGS.iter().position(|s| {
        s.ring
            .compare_exchange(
                std::ptr::null_mut(),
                base,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }) else {
        return std::ptr::null_mut(); // more rings than slots: leaked, lost
    };
    RINGS[i].fd.store(fd, Ordering::Release);
    MINE[inst].set(base);
    MINE_SLOT[inst].set(i + 1);
    if let Some(&k) = KEY.get() {
        // SAFETY: valid key; non-null arms the destructor.
        unsafe { libc::pthread_setspecific(k, base as *const libc::c_void) };
    }
    base
}

// This thread's exit step has been deferred once (see thread_exit).
crate::fast_thread_local!(
    static EXIT_DEFERRED: Cell<bool>;
);

/// Thread exit: the thread's rings get no more records. Local mode: write
/// them out and close their files; shared mode: mark them closed for the
/// writer, which drains and removes them, and unmap them, so that a
/// program whose threads come and go does not keep every one's ring
/// (the writer's own mapping holds the file until it has drained it).
///
/// Other thread-exit steps may still record (fgraph reports the frames a
/// `pthread_exit` left open as exits): the first call only re-arms the
/// key, so that glibc calls it again after every other destructor of this
/// round has run, and the records stay in the thread's one ring, in order.
extern "C" fn thread_exit(v: *mut libc::c_void) {
    if !EXIT_DEFERRED.replace(true) {
        if let Some(&k) = KEY.get() {
            // SAFETY: re-setting this thread's value of our key from its
            // destructor asks glibc for another round (up to 4).
            if unsafe { libc::pthread_setspecific(k, v) } == 0 {
                return;
            }
        }
    }
    for inst in 0..MAX_INSTANCES {
        let b = MINE[inst].replace(std::ptr::null_mut());
        if b.is_null() {
            continue;
        }
        let i = MINE_SLOT[inst].replace(0) - 1;
        // SAFETY: this thread's ring, out of MINE now: a signal handler
        // recording from here on makes a new one.
        let r = unsafe { Ring::from_base(b) };
        let fd = RINGS[i].fd.load(Ordering::Relaxed);
        if fd >= 0 {
            drain_local(inst, r, fd);
            // SAFETY: the fd belongs to this ring, which nobody uses any more.
            unsafe { libc::close(fd) };
        }
        r.header().closed.store(1, Ordering::Release);
        let bytes = ring_bytes(r.header().capacity);
        RINGS[i].fd.store(-1, Ordering::Release);
        RINGS[i].ring.store(std::ptr::null_mut(), Ordering::Release);
        if fd < 0 {
            // SAFETY: a shared ring is this thread's alone in this process
            // (`flush_all` drains local rings only) and out of MINE and
            // RINGS: nothing here reads it again.
            unsafe { libc::munmap(b.cast(), bytes) };
        }
    }
}

static DISABLED: AtomicBool = AtomicBool::new(false);

/// In a forked child: forget every ring (they hold the parent's records
/// and, shared, are the parent's to fill) without writing them. With a
/// writer process the child records on into rings of its own (unless
/// `record_on` is false); drained by its own threads it would need its own
/// exit step, so it records nothing more. Async-signal-safe.
pub fn forget_after_fork(record_on: bool) {
    if !shared() || !record_on {
        DISABLED.store(true, Ordering::Release);
    }
    for s in RINGS.iter() {
        s.fd.store(-1, Ordering::Relaxed);
        s.ring.store(std::ptr::null_mut(), Ordering::Release);
    }
    for c in MINE.iter() {
        c.set(std::ptr::null_mut());
    }
    for c in MINE_SLOT.iter() {
        c.set(0);
    }
}

/// Writes out every ring its thread drains (at process exit; a thread
/// still running may keep appending to its own ring afterwards: those
/// records are lost). Shared rings are the writer's to drain.
pub fn flush_all() {
    for s in RINGS.iter() {
        let b = s.ring.load(Ordering::Acquire);
        let fd = s.fd.load(Ordering::Acquire);
        if !b.is_null() && fd >= 0 {
            // SAFETY: rings are never unmapped.
            let r = unsafe { Ring::from_base(b) };
            drain_local(r.header().inst as usize, r, fd);
        }
    }
}
