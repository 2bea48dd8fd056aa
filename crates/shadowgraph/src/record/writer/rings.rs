//! A thread's rings: made on its first record (in shared memory, a spare
//! ring taken when one is ready; else private memory), given room when
//! full (the writer waited for, or the thread's own drain), written out at
//! the thread's exit, forgotten in a forked child.

use super::state::*;
use crate::clock;
use crate::record::ring::drain::{DRAINER, DRAIN_CHUNK};
use crate::record::ring::{ring_bytes, Claim, Depth, Drained, Ring};
use shadowgraph_data::format::Kind;
use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

// This thread's ring per instance (null: none yet). Initial-exec TLS
// (crate::tls): read on every recorded event. Atomic (Relaxed: plain
// loads and stores) because the end of an instance clears the cell of
// every thread that has a ring of it, once no code of the instance runs
// ([`super::end_instance`]).
crate::fast_thread_local!(
    pub(super) static MINE: [AtomicPtr<u8>; MAX_INSTANCES];
);
/// A thread's rings by graph slot, for the fused multi path: `rings[s]` is
/// the thread's ring of the instance of the user in graph slot `s`, for
/// each slot of `word`, the multi path's word (fgraph's MULTI_FRAME_WORD:
/// its users' slots and the newest epoch) they were found under. A word
/// names its users: it is published again only if no user registered
/// since (the epoch would be newer), so by the same owners of its slots,
/// whose rings on this thread stay in MINE while they are registered.
/// Every path that takes a ring out of MINE, or forgets them all, sets
/// `word` to 0 (no multi word: its slots are never none) first.
#[repr(C)]
pub(crate) struct BySlot {
    /// The multi word `rings` were found under (0: none).
    pub word: AtomicU64,
    /// The rings, by graph slot.
    pub rings: [AtomicPtr<u8>; crate::fgraph::MAX_USERS],
    /// Of `word`'s users, those the path's frames name only once it has
    /// decided for them (their bits in `word`'s places): found with the
    /// rings, by the path's own measure (recorders with graph filters).
    pub late: AtomicU64,
    /// Of `late`'s users, those with triggers, whose filter tables send
    /// the calls of some sites the general way (their bits in `word`'s
    /// places).
    pub general: AtomicU64,
    /// Of `late`'s users, those that write `watch:cpu` events (their bits
    /// in `word`'s places).
    pub watch: AtomicU64,
    /// Of `word`'s users, the profile the path keeps counters for, which
    /// has no ring (its bit in `word`'s places; 0: none), and the DATA
    /// word of its three words in a frame (0: none).
    pub profile: AtomicU64,
    /// See `profile`.
    pub profile_data: AtomicU64,
}

crate::fast_thread_local!(
    pub(super) static BY_SLOT: BySlot;
);

/// The address of this thread's [`BySlot`]: the fused multi path finds it
/// at the same offset from every thread's thread pointer.
pub(crate) fn rings_by_slot_of_this_thread() -> usize {
    &*BY_SLOT as *const BySlot as usize
}

/// This thread's brackets were abandoned (see `Ring::recover_abandoned`):
/// so were the record writes they held, in any of its rings.
pub(super) fn recover_abandoned() {
    for m in MINE.iter() {
        let b = m.load(Ordering::Relaxed);
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
    &*MINE as *const [AtomicPtr<u8>; MAX_INSTANCES] as usize
}

// The slot index of MINE's rings + 1 (0: none), cleared with them.
crate::fast_thread_local!(
    pub(super) static MINE_SLOT: [AtomicUsize; MAX_INSTANCES];
);

/// This thread's flags of its rings, in one cache line of static TLS
/// (each `fast_thread_local!` takes a line of its own, and the agent's
/// static TLS must fit in what glibc keeps for objects loaded by
/// `dlopen`, as `record -p` loads it). Zero: all false.
pub(super) struct ThreadFlags {
    /// Whether this thread is inside a wait for the writer: a signal
    /// handler that waits again inside it adds no time (the outer wait
    /// counts it). A handler that leaves an outer wait by siglongjmp leaves
    /// it set: the thread's later waits are then not timed (counted, not
    /// overstated).
    waiting: Cell<bool>,
    /// Whether this thread has ended its rings (its exit): a ring it makes
    /// after that (records late in its exit) is drained by the writer
    /// alone, after the ones before it, which it may not have drained yet,
    /// so that the thread's file stays in order.
    ended_mine: Cell<bool>,
    /// Whether a vfork child runs in this thread's memory (vfork.rs): its
    /// descriptors are not the parent's, which ends the child's rings, so
    /// the child leaves them to the writer.
    pub(super) in_vfork_child: Cell<bool>,
    /// Whether this thread's exit step has been deferred once (see
    /// thread_exit).
    exit_deferred: Cell<bool>,
}

crate::fast_thread_local!(
    pub(super) static FLAGS: ThreadFlags;
);

/// This thread's ring of instance `inst`, or None (the record counted as
/// lost) when it has none and cannot make one. A new ring starts at the
/// depth a record of `kind` at `depth` implies.
#[inline(always)]
pub(super) fn my_ring(inst: usize, kind: Kind, depth: u16) -> Option<Ring> {
    let mut b = MINE[inst].load(Ordering::Relaxed);
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
pub(super) fn make_my_ring(inst: usize, kind: Kind, depth: u16) -> *mut u8 {
    let open = if kind == Kind::Exit {
        depth.saturating_add(1)
    } else {
        depth
    };
    let mask = crate::sys::block_async_signals();
    let mut b = MINE[inst].load(Ordering::Relaxed);
    if b.is_null() {
        b = create(inst, open);
        // The thread's rings of the instance's siblings too, at the same
        // depth: they take the same calls, and a signal handler that
        // lands between this record and theirs records in them where
        // the thread is for them (one made by the handler would start at
        // the handler's depth, deeper than their first record).
        // Relaxed: set before any of their users registers.
        let mut others = SIBLINGS[inst].load(Ordering::Relaxed) & !(1 << inst);
        while others != 0 {
            let j = others.trailing_zeros() as usize;
            others &= others - 1;
            if MINE[j].load(Ordering::Relaxed).is_null() && DIRS[j].get().is_some() {
                create(j, open);
            }
        }
    }
    crate::sys::restore_signals(mask);
    b
}

/// Each instance's siblings (bit j: instance j), itself included: the
/// tracers of one recording, which take the same calls (0: none).
pub(super) static SIBLINGS: [std::sync::atomic::AtomicU64; MAX_INSTANCES] =
    [const { std::sync::atomic::AtomicU64::new(0) }; MAX_INSTANCES];

/// Makes `insts` siblings: a thread's first ring of one of them comes
/// with its rings of the others (before their users register).
pub fn set_siblings(insts: &[usize]) {
    let all = insts.iter().fold(0u64, |m, &i| m | 1 << i);
    for &i in insts {
        // Relaxed: read by the threads the users' registration (which
        // publishes with Release) sends into the callbacks.
        SIBLINGS[i].store(all, Ordering::Relaxed);
    }
}

/// The ring is full as far as the producer knew: re-read the consumer's
/// position, drain it ourselves (local mode) or wait for the writer; a
/// claimed slot and its time, or None (counted as lost).
#[cold]
#[inline(never)]
pub(super) fn make_room(
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
/// writer until `attempt` (which refreshes the ring's room) succeeds,
/// draining it ourselves meanwhile where the writer is behind
/// ([`drain_own`]); None (a record counted as lost) when it never does.
#[cold]
#[inline(never)]
pub(super) fn wait_for_room<T>(inst: usize, r: Ring, attempt: impl Fn() -> Option<T>) -> Option<T> {
    let fd = RINGS[MINE_SLOT[inst].load(Ordering::Relaxed) - 1]
        .fd
        .load(Ordering::Relaxed);
    if fd >= 0 {
        drain_local(inst, r, fd);
    } else if !WRITER_GONE[inst].load(Ordering::Relaxed) {
        let start = clock::monotonic_ns();
        let outer = !FLAGS.waiting.replace(true);
        WAITS.fetch_add(1, Ordering::Relaxed);
        let me = crate::sys::gettid() as u32;
        loop {
            if let Some(c) = attempt() {
                if outer {
                    WAITED_NS.fetch_add(clock::monotonic_ns() - start, Ordering::Relaxed);
                    FLAGS.waiting.set(false);
                }
                return Some(c);
            }
            // A handler of a synchronous signal (the others are blocked
            // there) that landed in this thread's own drain of the ring:
            // the drain goes on only once the handler returns, and the
            // writer passes over a ring another drains. The record is
            // dropped (counted), as local mode drops one.
            if r.drain_holder() == me {
                if outer {
                    FLAGS.waiting.set(false);
                }
                break;
            }
            let waited = clock::monotonic_ns() - start;
            // The writer behind (no room after the spin, or at once where
            // it cannot run beside us): the thread drains its ring itself,
            // into the file the writer appends it to, one drain at a time
            // (the ring's drain lock), then looks for room again.
            if (waited >= WAIT_SPIN_NS || !SPIN_FOR_ROOM.load(Ordering::Relaxed))
                && drain_own(inst, r, me)
            {
                continue;
            }
            if waited > WAIT_LIMIT_NS {
                WRITER_GONE[inst].store(true, Ordering::Relaxed);
                if outer {
                    FLAGS.waiting.set(false);
                }
                break;
            }
            if waited < WAIT_SPIN_NS && SPIN_FOR_ROOM.load(Ordering::Relaxed) {
                // The writer frees the ring a chunk at a time: room
                // comes back within microseconds of a chunk's write, and a
                // nap (50 µs at least, often twice that) would lose most
                // of it. Yielding, not spinning: where the program's
                // threads outnumber the processors, a spinning thread
                // takes the writer's processor (or that of a thread with
                // room to record); where a processor is idle, the yield
                // returns at once.
                // SAFETY: sched_yield takes no arguments and cannot fail
                // on Linux; a system call, async-signal-safe.
                unsafe { libc::sched_yield() };
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
pub(super) fn drain_local(inst: usize, r: Ring, fd: i32) {
    if !r.try_lock_drain(DRAINER) {
        return;
    }
    account(inst, r.drain(fd));
    r.unlock_drain();
}

/// Shared mode, the writer behind: this thread (`me`, its tid) drains its
/// ring `r` of instance `inst` itself, unless the writer is at it, into
/// the file the writer drains it into (`<tid>.dat` in the instance's
/// directory, opened once, appended to: the drain lock keeps the two
/// drains apart, so the file takes the records in their order). What it
/// drained is counted in the ring, for the writer's totals. Whether it
/// moved any record. Async-signal-safe.
pub(super) fn drain_own(inst: usize, r: Ring, me: u32) -> bool {
    // (A vfork child's rings are ended by its parent, which has other
    // descriptors: the child waits for the writer.)
    if FLAGS.ended_mine.get() || FLAGS.in_vfork_child.get() {
        return false;
    }
    let k = MINE_SLOT[inst].load(Ordering::Relaxed);
    let Some(slot) = k.checked_sub(1).and_then(|k| RINGS.get(k)) else {
        return false;
    };
    let mut fd = slot.own_fd.load(Ordering::Relaxed);
    if fd < 0 {
        fd = open_dat_file(inst, r.header().tid);
        if fd < 0 {
            return false;
        }
        // (A signal handler of this thread may have opened one meanwhile:
        // its stays, ours goes.)
        if let Err(theirs) =
            slot.own_fd
                .compare_exchange(-1, fd, Ordering::Relaxed, Ordering::Relaxed)
        {
            // SAFETY: the descriptor just opened, which nothing else has.
            unsafe { libc::close(fd) };
            fd = theirs;
        }
    }
    // With the asynchronous signals blocked for the drain (a chunk
    // converted and written): a handler that landed in it could not
    // record (its ring full, and drained by no one until it returned);
    // delivered after it, it finds room.
    let mask = crate::sys::block_async_signals();
    if !r.try_lock_drain(me) {
        crate::sys::restore_signals(mask);
        return false;
    }
    // One chunk: room for the thread to record on, while the writer
    // (on another processor, if there is one) drains the rest.
    let d = r.drain_some(fd, DRAIN_CHUNK);
    r.add_own(&d);
    r.unlock_drain();
    crate::sys::restore_signals(mask);
    let moved = d.written + d.lost > 0;
    if moved {
        OWN_DRAINS.fetch_add(1, Ordering::Relaxed);
        OWN_RECORDS.fetch_add(d.written, Ordering::Relaxed);
    }
    moved
}

/// Thread `tid`'s file of instance `inst` (`<tid>.dat` in its directory,
/// which its writer, or the thread itself in local mode, drains its ring
/// into), opened for appending (-1 if it cannot be). Async-signal-safe.
fn open_dat_file(inst: usize, tid: i32) -> i32 {
    let Some(dir) = DIRS[inst].get() else {
        return -1;
    };
    let mut name = [0u8; 32];
    let n = put_decimal(&mut name, 0, tid as u64);
    name[n..n + 4].copy_from_slice(b".dat");
    let mut path = [0u8; 4096];
    if !path_in(dir, &name[..n + 4], &mut path) {
        return -1;
    }
    // SAFETY: path is NUL-terminated; open is async-signal-safe.
    unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        )
    }
}

pub(super) fn account(inst: usize, d: Drained) {
    WRITTEN[inst].fetch_add(d.written, Ordering::Relaxed);
    LOST[inst].fetch_add(d.lost, Ordering::Relaxed);
    CLOCK_STEPS_BACK[inst].fetch_add(d.clock_steps_back, Ordering::Relaxed);
    CLOCK_STEP_MAX[inst].fetch_max(d.clock_step_max, Ordering::Relaxed);
    if d.errno != 0 {
        let _ =
            WRITE_ERRNO[inst].compare_exchange(0, d.errno, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// A ring file in the shared-memory directory `dir`, mapped; None if one
/// cannot be made.
pub(super) fn create_shared(
    dir: &CStr,
    inst: usize,
    tid: i32,
    pid: i32,
    name: &mut [u8; 96],
    path: &mut [u8; 4096],
) -> Option<*mut u8> {
    // <index>-<pid>-<tid>-<seq>-<session>.ring: unique even when a tid is
    // reused, or a process starts another program by exec.
    let mut n = put_decimal(name, 0, INDEX[inst].load(Ordering::Relaxed) as u64);
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
    let len = ring_bytes(SHARED_RECORDS[inst].load(Ordering::Relaxed));
    if let Some(p) = claim_spare(inst, dir, len, path) {
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
pub(super) fn has_room(fd: i32, len: usize) -> bool {
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
pub(super) fn claim_spare(
    inst: usize,
    dir: &CStr,
    len: usize,
    path: &[u8; 4096],
) -> Option<*mut u8> {
    if SPARE_TRIED[inst].swap(true, Ordering::Relaxed) {
        return None;
    }
    take_spare(dir, len, path)
}

/// [`claim_spare`] without its once-per-process guard.
pub(crate) fn take_spare(dir: &CStr, len: usize, path: &[u8; 4096]) -> Option<*mut u8> {
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
pub(super) fn create(inst: usize, depth: u16) -> *mut u8 {
    // Acquire: pairs with the Release that disabled ring-making.
    if DISABLED.load(Ordering::Acquire) {
        return std::ptr::null_mut();
    }
    let tid = crate::sys::gettid();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut name = [0u8; 96];
    let mut path = [0u8; 4096];
    let records = SHARED_RECORDS[inst].load(Ordering::Relaxed);
    let shared_ring = SHM[inst]
        .get()
        .and_then(|shm| create_shared(shm, inst, tid, pid, &mut name, &mut path));
    let (base, fd, cap) = if let Some(base) = shared_ring {
        (base, -1, records)
    } else {
        // Local: the agent alone, or no shared ring could be made (a file
        // size limit, a full /dev/shm): this thread writes its own.
        let fd = open_dat_file(inst, tid);
        if fd < 0 {
            return std::ptr::null_mut();
        }
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
            INDEX[inst].load(Ordering::Relaxed) as usize,
            tid,
            pid,
            cap,
            SESSION.load(Ordering::Relaxed),
            depth,
            // Relaxed: set before the instance's user is registered.
            MIN_NS[inst].load(Ordering::Relaxed),
            COMPACT[inst].load(Ordering::Relaxed),
        )
    };
    // A free slot, filled under its lock (one held by the end of an
    // instance or a thread's exit is passed over): whoever takes the lock
    // later finds the slot whole. Release (ring): the ring, made above, is
    // published whole to the exit flush that walks RINGS (Acquire).
    let Some(i) = RINGS.iter().position(|s| {
        if !s.try_lock() {
            return false;
        }
        let free = s.ring.load(Ordering::Relaxed).is_null();
        if free {
            s.fd.store(fd, Ordering::Relaxed);
            s.own_fd.store(-1, Ordering::Relaxed);
            s.inst.store(inst, Ordering::Relaxed);
            s.mine.store(
                &MINE[inst] as *const AtomicPtr<u8> as *mut AtomicPtr<u8>,
                Ordering::Relaxed,
            );
            s.mine_slot.store(
                &MINE_SLOT[inst] as *const AtomicUsize as *mut AtomicUsize,
                Ordering::Relaxed,
            );
            s.by_slot.store(
                &BY_SLOT.word as *const AtomicU64 as *mut AtomicU64,
                Ordering::Relaxed,
            );
            s.ring.store(base, Ordering::Release);
        }
        s.unlock();
        free
    }) else {
        return std::ptr::null_mut(); // more rings than slots: leaked, lost
    };
    MINE[inst].store(base, Ordering::Relaxed);
    MINE_SLOT[inst].store(i + 1, Ordering::Relaxed);
    if let Some(&k) = KEY.get() {
        // SAFETY: valid key; non-null arms the destructor.
        unsafe { libc::pthread_setspecific(k, base as *const libc::c_void) };
    }
    base
}

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
pub(super) extern "C" fn thread_exit(v: *mut libc::c_void) {
    if !FLAGS.exit_deferred.replace(true) {
        if let Some(&k) = KEY.get() {
            // SAFETY: re-setting this thread's value of our key from its
            // destructor asks glibc for another round (up to 4).
            if unsafe { libc::pthread_setspecific(k, v) } == 0 {
                return;
            }
        }
    }
    let mask = crate::sys::block_async_signals();
    FLAGS.ended_mine.set(true);
    release_mine();
    crate::sys::restore_signals(mask);
}

/// Ends every ring in this thread's cells (see [`release`]); signals
/// blocked by the caller.
pub(super) fn release_mine() {
    for inst in 0..MAX_INSTANCES {
        let i = MINE_SLOT[inst].load(Ordering::Relaxed);
        if i == 0 {
            continue;
        }
        let slot = &RINGS[i - 1];
        slot.lock();
        // Under the lock: the end of the instance may have taken it.
        let b = MINE[inst].load(Ordering::Relaxed);
        if !b.is_null() {
            release(slot, inst, b);
        }
        slot.unlock();
    }
}

/// Ends the ring `b` of instance `inst` in `slot` (its lock held), taking
/// it out of its thread's cells first: local mode, written out and its
/// file closed; shared mode, marked closed for the writer (which drains
/// and removes it) and unmapped.
pub(super) fn release(slot: &Slot, inst: usize, b: *mut u8) {
    // SAFETY: the cells of the ring's thread, which is alive: it ends its
    // rings under this lock before it exits. Relaxed (all three): the
    // thread itself ends its rings in its own order; another thread ends
    // an instance only once no code of it runs (its users unregistered,
    // so no multi word that names them is published: the thread's word
    // is matched no more).
    unsafe {
        (*slot.by_slot.load(Ordering::Relaxed)).store(0, Ordering::Relaxed);
        (*slot.mine.load(Ordering::Relaxed)).store(std::ptr::null_mut(), Ordering::Relaxed);
        (*slot.mine_slot.load(Ordering::Relaxed)).store(0, Ordering::Relaxed);
    }
    // SAFETY: a ring made by `create`, out of its thread's cells now: a
    // signal handler recording from here on makes a new one.
    let r = unsafe { Ring::from_base(b) };
    let fd = slot.fd.load(Ordering::Relaxed);
    if fd >= 0 {
        drain_local(inst, r, fd);
        // SAFETY: the fd belongs to this ring, which nobody uses any more.
        unsafe { libc::close(fd) };
    }
    let own = slot.own_fd.swap(-1, Ordering::Relaxed);
    if own >= 0 {
        // SAFETY: the thread's own descriptor of its ring's file; the
        // ring is out of its thread's cells, so no drain of its uses it.
        unsafe { libc::close(own) };
    }
    r.header().closed.store(1, Ordering::Release);
    let bytes = ring_bytes(r.header().capacity);
    slot.fd.store(-1, Ordering::Relaxed);
    slot.ring.store(std::ptr::null_mut(), Ordering::Release);
    if fd < 0 {
        // SAFETY: a shared ring is its thread's alone in this process
        // (`flush_all` drains local rings only) and out of its cells and
        // RINGS: nothing here reads it again.
        unsafe { libc::munmap(b.cast(), bytes) };
    }
}

pub(super) static DISABLED: AtomicBool = AtomicBool::new(false);

/// In a forked child: forget every ring (they hold the parent's records
/// and, shared, are the parent's to fill) without writing them. With a
/// writer process the child records on into rings of its own (unless
/// `record_on` is false); drained by its own threads it would need its own
/// exit step, so it records nothing more. Async-signal-safe.
pub fn forget_after_fork(record_on: bool) {
    if !any_shared() || !record_on {
        DISABLED.store(true, Ordering::Release);
    }
    for s in RINGS.iter() {
        s.fd.store(-1, Ordering::Relaxed);
        let own = s.own_fd.swap(-1, Ordering::Relaxed);
        if own >= 0 {
            // SAFETY: the parent's thread's descriptor, inherited: the
            // child's copy, which nothing here uses any more.
            unsafe { libc::close(own) };
        }
        // Release: the slot free, its fd forgotten first.
        s.ring.store(std::ptr::null_mut(), Ordering::Release);
    }
    BY_SLOT.word.store(0, Ordering::Relaxed);
    for c in MINE.iter() {
        c.store(std::ptr::null_mut(), Ordering::Relaxed);
    }
    for c in MINE_SLOT.iter() {
        c.store(0, Ordering::Relaxed);
    }
}

/// Writes out every ring its thread drains (at process exit; a thread
/// still running may keep appending to its own ring afterwards: those
/// records are lost). Shared rings are the writer's to drain.
pub fn flush_all() {
    for s in RINGS.iter() {
        // A slot being filled or ended is passed over (a fatal signal may
        // have landed in its holder).
        if !s.try_lock() {
            continue;
        }
        let b = s.ring.load(Ordering::Acquire);
        let fd = s.fd.load(Ordering::Relaxed);
        if !b.is_null() && fd >= 0 {
            // SAFETY: a local ring is unmapped only by `release`, under
            // the lock held here.
            let r = unsafe { Ring::from_base(b) };
            drain_local(s.inst.load(Ordering::Relaxed), r, fd);
        }
        s.unlock();
    }
}

/// Ends every ring of instance `inst` (each as its thread's exit would)
/// and forgets its directories: the instance may be taken again. Only
/// once no code of the instance runs or can start (its graph user
/// unregistered, a grace period past).
pub fn end_instance(inst: usize) {
    for s in RINGS.iter() {
        if s.ring.load(Ordering::Acquire).is_null() {
            continue;
        }
        s.lock();
        let b = s.ring.load(Ordering::Relaxed);
        if !b.is_null() && s.inst.load(Ordering::Relaxed) == inst {
            release(s, inst, b);
        }
        s.unlock();
    }
    DIRS[inst].set(None);
    SHM[inst].set(None);
    SIBLINGS[inst].store(0, Ordering::Relaxed);
}
