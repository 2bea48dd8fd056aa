//! A thread's rings: made on its first record (in shared memory, a spare
//! ring taken when one is ready; else private memory), given room when
//! full (the writer waited for, or the thread's own drain), written out at
//! the thread's exit, forgotten in a forked child.

use super::state::*;
use crate::clock;
use crate::record::ring::{ring_bytes, Claim, Depth, Drained, Ring};
use shadowgraph_data::format::Kind;
use std::cell::Cell;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};

// This thread's ring per instance (null: none yet). Initial-exec TLS
// (crate::tls): read on every recorded event.
crate::fast_thread_local!(
    pub(super) static MINE: [Cell<*mut u8>; MAX_INSTANCES];
);
/// This thread's brackets were abandoned (see `Ring::recover_abandoned`):
/// so were the record writes they held, in any of its rings.
pub(super) fn recover_abandoned() {
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
    pub(super) static MINE_SLOT: [Cell<usize>; MAX_INSTANCES];
);

// Whether this thread is inside a wait for the writer: a signal handler
// that waits again inside it adds no time (the outer wait counts it). A
// handler that leaves an outer wait by siglongjmp leaves it set: the
// thread's later waits are then not timed (counted, not overstated).
crate::fast_thread_local!(
    static WAITING: Cell<bool>;
);

/// This thread's ring of instance `inst`, or None (the record counted as
/// lost) when it has none and cannot make one. A new ring starts at the
/// depth a record of `kind` at `depth` implies.
#[inline(always)]
pub(super) fn my_ring(inst: usize, kind: Kind, depth: u16) -> Option<Ring> {
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
pub(super) fn make_my_ring(inst: usize, kind: Kind, depth: u16) -> *mut u8 {
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
/// writer until `attempt` (which refreshes the ring's room) succeeds; None
/// (a record counted as lost) when it never does.
#[cold]
#[inline(never)]
pub(super) fn wait_for_room<T>(inst: usize, r: Ring, attempt: impl Fn() -> Option<T>) -> Option<T> {
    let fd = RINGS[MINE_SLOT[inst].get() - 1].fd.load(Ordering::Relaxed);
    if fd >= 0 {
        drain_local(inst, r, fd);
    } else if !WRITER_GONE.load(Ordering::Relaxed) {
        let start = clock::monotonic_ns();
        let outer = !WAITING.replace(true);
        WAITS.fetch_add(1, Ordering::Relaxed);
        loop {
            if let Some(c) = attempt() {
                if outer {
                    WAITED_NS.fetch_add(clock::monotonic_ns() - start, Ordering::Relaxed);
                    WAITING.set(false);
                }
                return Some(c);
            }
            let waited = clock::monotonic_ns() - start;
            if waited > WAIT_LIMIT_NS {
                WRITER_GONE.store(true, Ordering::Relaxed);
                if outer {
                    WAITING.set(false);
                }
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
pub(super) fn drain_local(inst: usize, r: Ring, fd: i32) {
    let h = r.header();
    // A lock: Acquire takes what the last holder drained, Release hands
    // this drain's progress to the next.
    if h.busy
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    account(inst, r.drain(fd));
    h.busy.store(0, Ordering::Release);
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
pub(super) fn claim_spare(dir: &CString, len: usize, path: &[u8; 4096]) -> Option<*mut u8> {
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
    // AcqRel: the ring, made above, is published whole to the exit flush
    // that walks RINGS (Acquire); a slot freed by Release is claimable.
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
pub(super) extern "C" fn thread_exit(v: *mut libc::c_void) {
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

pub(super) static DISABLED: AtomicBool = AtomicBool::new(false);

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
        // Release: the slot free, its fd forgotten first.
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
