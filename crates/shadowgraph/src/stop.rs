//! Stop the world: park every other thread of the process inside a signal
//! handler, let the caller inspect (and move) their program counters, then
//! release them. Used to normalise 5-nop sleds while threads run (design §2.5)
//! and, where `membarrier` is missing, to serialise every core.
//!
//! Protocol, per thread slot (`state`): the coordinator sets REQUESTED and
//! sends the signal; the handler records PC and stack pointers, stores
//! PARKED, and spins until RELEASED; it then applies `new_pc` (if non-zero)
//! to its interrupted context and stores DONE. While threads are parked, one
//! of them may hold any lock (the allocator's included), so the coordinator's
//! inspection closure must not allocate or lock.

use crate::sys;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// Most threads one stop can park.
pub const MAX_THREADS: usize = 4096;

const FREE: u32 = 0;
const REQUESTED: u32 = 1;
const PARKED: u32 = 2;
const RELEASED: u32 = 3;
const DONE: u32 = 4;

struct Slot {
    tid: AtomicI32,
    state: AtomicU32,
    pc: AtomicUsize,
    /// Stack pointer of the interrupted context.
    sp: AtomicUsize,
    new_pc: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    tid: AtomicI32::new(0),
    state: AtomicU32::new(FREE),
    pc: AtomicUsize::new(0),
    sp: AtomicUsize::new(0),
    new_pc: AtomicUsize::new(0),
};

static SLOTS: [Slot; MAX_THREADS] = [EMPTY; MAX_THREADS];
/// Slots in use by the current stop (prefix of `SLOTS`).
static USED: AtomicUsize = AtomicUsize::new(0);
/// Ping mode: the handler acknowledges at once instead of parking.
static PING: AtomicBool = AtomicBool::new(false);
static COORDINATOR: Mutex<()> = Mutex::new(());
static INSTALL: Once = Once::new();
static SIGNAL: AtomicI32 = AtomicI32::new(0);

/// A thread parked by [`stop_world`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Parked {
    /// The thread.
    pub tid: i32,
    /// Where the thread will resume.
    pub pc: usize,
    /// Its stack pointer when interrupted.
    pub sp: usize,
    /// Set to move the thread: it resumes here instead of `pc`.
    pub new_pc: Option<usize>,
}

/// Why the world could not be stopped.
#[derive(Debug)]
pub enum StopError {
    /// A thread did not park in time (it blocks the signal, or is stuck in
    /// the kernel with the signal masked).
    Unresponsive(i32),
    /// More threads than a stop can park.
    TooManyThreads,
    /// The threads could not be listed or signalled.
    Io(io::Error),
}

impl std::fmt::Display for StopError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopError::Unresponsive(t) => write!(
                f,
                "thread {t} did not stop within 2 s (does it block signal {}?)",
                signal()
            ),
            StopError::TooManyThreads => write!(f, "more than {MAX_THREADS} threads"),
            StopError::Io(e) => write!(f, "cannot list threads: {e}"),
        }
    }
}

impl std::error::Error for StopError {}

/// The real-time signal used to park threads.
pub fn signal() -> i32 {
    let s = SIGNAL.load(Ordering::Relaxed);
    if s != 0 {
        s
    } else {
        libc::SIGRTMIN() + 6
    }
}

fn install() {
    INSTALL.call_once(|| {
        SIGNAL.store(libc::SIGRTMIN() + 6, Ordering::Relaxed);
        // SAFETY: a zeroed sigaction is a valid starting point; the handler
        // has the SA_SIGINFO signature; sigemptyset initialises the mask.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_park_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(signal(), &sa, std::ptr::null_mut());
        }
    });
}

extern "C" fn on_park_signal(_sig: i32, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let me = sys::gettid();
    // Acquire: pairs with the coordinator's Release of USED, after which
    // the slots below it hold their tids; and of each slot's REQUESTED,
    // after which its other fields are the coordinator's for this stop.
    let used = USED.load(Ordering::Acquire);
    let Some(slot) = SLOTS[..used].iter().find(|s| {
        s.tid.load(Ordering::Relaxed) == me && s.state.load(Ordering::Acquire) == REQUESTED
    }) else {
        return; // a stray or late signal: nothing asked for this thread
    };
    // Acquire: pairs with the coordinator's Release of PING before it
    // signals (the signal itself orders them too).
    if PING.load(Ordering::Acquire) {
        // Returning from a signal handler (sigreturn) serialises the core.
        // Release: DONE tells the coordinator this thread is through.
        slot.state.store(DONE, Ordering::Release);
        return;
    }
    let uc = ctx as *mut libc::ucontext_t;
    // SAFETY: the kernel passes a valid ucontext for SA_SIGINFO handlers.
    let (pc, sp) = unsafe {
        let g = &(*uc).uc_mcontext.gregs;
        (
            g[libc::REG_RIP as usize] as usize,
            g[libc::REG_RSP as usize] as usize,
        )
    };
    // Relaxed: published by the Release of PARKED below.
    slot.pc.store(pc, Ordering::Relaxed);
    slot.sp.store(sp, Ordering::Relaxed);
    slot.new_pc.store(0, Ordering::Relaxed);
    // Release: the coordinator that sees PARKED (Acquire) sees pc and sp
    // above.
    slot.state.store(PARKED, Ordering::Release);
    let mut spins = 0u32;
    // Acquire: pairs with the coordinator's Release of RELEASED, after its
    // store of new_pc, read next.
    while slot.state.load(Ordering::Acquire) != RELEASED {
        spins += 1;
        if spins < 100 {
            std::hint::spin_loop();
        } else {
            // SAFETY: sched_yield is a plain, async-signal-safe system call.
            unsafe { libc::sched_yield() };
        }
    }
    let new_pc = slot.new_pc.load(Ordering::Relaxed);
    if new_pc != 0 {
        // SAFETY: as above; the coordinator moved the PC to an instruction
        // boundary with the same meaning (design §2.5).
        unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] = new_pc as i64 };
    }
    // Release: the coordinator that sees DONE may reuse the slot.
    slot.state.store(DONE, Ordering::Release);
}

/// Preallocated room for one stop, so nothing allocates while threads are
/// parked.
pub struct StopBuffers {
    tids: Vec<i32>,
    parked: Vec<Parked>,
}

impl Default for StopBuffers {
    fn default() -> Self {
        StopBuffers {
            tids: Vec::with_capacity(MAX_THREADS),
            parked: Vec::with_capacity(MAX_THREADS),
        }
    }
}

/// Parks every other thread, calls `inspect` with them, applies the
/// `new_pc` it set, and releases them. `inspect` must not allocate or take
/// locks. Returns what `inspect` returned.
pub fn stop_world<R>(
    bufs: &mut StopBuffers,
    inspect: impl FnOnce(&mut [Parked]) -> R,
) -> Result<R, StopError> {
    let _guard = COORDINATOR.lock().unwrap_or_else(|e| e.into_inner());
    install();
    // Release: before any signal of this stop (which also orders it).
    PING.store(false, Ordering::Release);
    let parked = park_all(bufs)?;
    let result = inspect(&mut bufs.parked[..parked]);
    for (i, p) in bufs.parked[..parked].iter().enumerate() {
        SLOTS[i]
            .new_pc
            .store(p.new_pc.unwrap_or(0), Ordering::Relaxed);
    }
    release_all(parked);
    Ok(result)
}

/// Makes every other thread execute a serialising instruction (signal
/// delivery and return) and waits until all have: the fallback for
/// `membarrier(PRIVATE_EXPEDITED_SYNC_CORE)`.
pub fn ping_all() -> Result<(), StopError> {
    let _guard = COORDINATOR.lock().unwrap_or_else(|e| e.into_inner());
    install();
    PING.store(true, Ordering::Release);
    let mut bufs = StopBuffers::default();
    let n = park_all(&mut bufs)?;
    finish(n);
    Ok(())
}

/// Requests every thread (re-listing until no new one appears) and waits
/// for each to park (or acknowledge a ping). Returns how many slots are used.
fn park_all(bufs: &mut StopBuffers) -> Result<usize, StopError> {
    let me = sys::gettid();
    bufs.parked.clear();
    let mut used = 0usize;
    USED.store(0, Ordering::Release);
    loop {
        sys::list_threads(&mut bufs.tids).map_err(StopError::Io)?;
        let mut added = false;
        for &tid in &bufs.tids {
            if tid == me
                || SLOTS[..used]
                    .iter()
                    .any(|s| s.tid.load(Ordering::Relaxed) == tid)
            {
                continue;
            }
            if used == MAX_THREADS {
                release_all(used);
                return Err(StopError::TooManyThreads);
            }
            let s = &SLOTS[used];
            s.tid.store(tid, Ordering::Relaxed);
            // Release (both): a handler that finds the slot through USED
            // and REQUESTED (Acquire) sees its tid.
            s.state.store(REQUESTED, Ordering::Release);
            used += 1;
            USED.store(used, Ordering::Release);
            added = true;
            if sys::tgkill(tid, signal()).is_err() {
                // Thread already gone.
                s.state.store(DONE, Ordering::Release);
            }
        }
        if !added {
            break;
        }
        // Wait for everything requested so far before re-listing: a parked
        // thread cannot create new threads.
        if let Err(tid) = wait_parked(used) {
            release_all(used);
            return Err(StopError::Unresponsive(tid));
        }
    }
    if PING.load(Ordering::Relaxed) {
        return Ok(used);
    }
    for s in &SLOTS[..used] {
        // Acquire: pairs with the handler's Release of PARKED: its pc and
        // sp are read next.
        let state = s.state.load(Ordering::Acquire);
        bufs.parked.push(Parked {
            tid: s.tid.load(Ordering::Relaxed),
            // A thread that vanished reports no PC and is skipped.
            pc: if state == PARKED {
                s.pc.load(Ordering::Relaxed)
            } else {
                0
            },
            sp: s.sp.load(Ordering::Relaxed),
            new_pc: None,
        });
    }
    Ok(used)
}

fn wait_parked(used: usize) -> Result<(), i32> {
    let target = if PING.load(Ordering::Relaxed) {
        DONE
    } else {
        PARKED
    };
    let start = Instant::now();
    for s in &SLOTS[..used] {
        loop {
            // Acquire: pairs with the handler's Release of the state it
            // reached (its fields written before).
            let st = s.state.load(Ordering::Acquire);
            if st == target || st == DONE {
                break;
            }
            let tid = s.tid.load(Ordering::Relaxed);
            // Signal 0 probes existence: an exited thread never answers.
            if sys::tgkill(tid, 0).is_err() {
                s.state.store(DONE, Ordering::Release);
                break;
            }
            if start.elapsed() > Duration::from_secs(2) {
                return Err(tid);
            }
            // SAFETY: plain system call.
            unsafe { libc::sched_yield() };
        }
    }
    Ok(())
}

fn release_all(used: usize) {
    for s in &SLOTS[..used] {
        // Acquire/Release: a parked handler that sees RELEASED sees the
        // new_pc stored before it.
        if s.state.load(Ordering::Acquire) == PARKED {
            s.state.store(RELEASED, Ordering::Release);
        }
    }
    finish(used);
}

/// Waits until every parked thread has left the handler, then frees slots.
fn finish(used: usize) {
    let start = Instant::now();
    for s in &SLOTS[..used] {
        loop {
            // As in release_all: the handler's DONE (Release) frees the
            // slot; RELEASED (Release) publishes new_pc.
            match s.state.load(Ordering::Acquire) {
                DONE => break,
                PARKED => s.state.store(RELEASED, Ordering::Release),
                REQUESTED if start.elapsed() > Duration::from_secs(2) => {
                    // Never answered; a late handler finds no REQUESTED slot.
                    break;
                }
                _ => {}
            }
            // SAFETY: plain system call.
            unsafe { libc::sched_yield() };
        }
    }
    USED.store(0, Ordering::Release);
    for s in &SLOTS[..used] {
        s.state.store(FREE, Ordering::Release);
        s.tid.store(0, Ordering::Relaxed);
    }
}

/// Address ranges of stacks, read before stopping, for conservative scans
/// of parked threads' stacks (design §2.5).
pub struct StackMap {
    ranges: Vec<(usize, usize)>,
}

impl StackMap {
    /// Every readable, writable mapping (thread stacks live among them).
    pub fn read() -> io::Result<StackMap> {
        let ranges = sys::read_maps()?
            .into_iter()
            .filter(|m| {
                m.prot & (libc::PROT_READ | libc::PROT_WRITE) == libc::PROT_READ | libc::PROT_WRITE
            })
            .map(|m| (m.start, m.end))
            .collect();
        Ok(StackMap { ranges })
    }

    /// Calls `f` on every word from `sp` to the end of the mapping holding
    /// it (the live part of a downward-growing stack). Allocates nothing.
    pub fn scan_from(&self, sp: usize, mut f: impl FnMut(usize)) {
        let Some(&(_, end)) = self.ranges.iter().find(|&&(lo, hi)| lo <= sp && sp < hi) else {
            return;
        };
        let mut p = sp & !7;
        while p + 8 <= end {
            // SAFETY: [p, end) lies in a readable mapping read before the
            // world stopped; stacks are never unmapped while their thread
            // is parked.
            f(unsafe { std::ptr::read_volatile(p as *const usize) });
            p += 8;
        }
    }
}

/// Whether threads are never signalled to be inspected ([`set_signal_free`]).
static SIGNAL_FREE: AtomicBool = AtomicBool::new(false);

/// From now on, [`wait_code_quiescent`] sends no signal: a process joined
/// while it runs (`record -p`) must not see a `nanosleep` or `epoll_wait`
/// end with `EINTR` for our sake. A thread blocked in a system call is
/// inspected where the kernel keeps its user pc and sp
/// (`/proc/self/task/TID/syscall`); one that runs is looked at again
/// later.
pub fn set_signal_free(on: bool) {
    // Relaxed: set before the session that reads it starts.
    SIGNAL_FREE.store(on, Ordering::Relaxed);
}

/// Whether threads are never signalled ([`set_signal_free`]): the process
/// was joined while it ran.
pub fn signal_free() -> bool {
    SIGNAL_FREE.load(Ordering::Relaxed)
}

/// A thread of this process as its `/proc/self/task/TID/syscall` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    Gone,
    /// Running: its registers are not shown.
    Running,
    /// Blocked in a system call, at this user pc and sp.
    Blocked {
        pc: usize,
        sp: usize,
    },
    /// Stopped outside a system call (by ptrace, or a stop signal), at
    /// this user pc and sp.
    Stopped {
        pc: usize,
        sp: usize,
    },
}

/// Where thread `tid` of this process is: "NR arg×6 sp pc" while blocked
/// in a system call, "-1 sp pc" stopped outside one, "running". Read
/// without allocating (also while other threads are held).
pub(crate) fn seen(tid: i32) -> Seen {
    let mut path = [0u8; 48];
    let prefix = b"/proc/self/task/";
    path[..prefix.len()].copy_from_slice(prefix);
    let n = sys::put_decimal(&mut path, prefix.len(), tid.unsigned_abs() as u64);
    path[n..n + 9].copy_from_slice(b"/syscall\0");
    let mut text = [0u8; 256];
    // SAFETY: `path` is NUL-terminated; the descriptor is read into
    // `text` within its length and closed once.
    let len = unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Seen::Gone;
        }
        let r = libc::read(fd, text.as_mut_ptr().cast(), text.len());
        libc::close(fd);
        r
    };
    if len <= 0 {
        return Seen::Gone;
    }
    let mut fields = text[..len as usize]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let Some(first) = fields.next() else {
        return Seen::Gone;
    };
    if first == b"running" {
        return Seen::Running;
    }
    let (mut sp, mut pc) = (None, None);
    for f in fields {
        (sp, pc) = (pc, hex(f));
    }
    match (sp, pc, first.first()) {
        (Some(sp), Some(pc), Some(b'-')) => Seen::Stopped { pc, sp },
        (Some(sp), Some(pc), _) => Seen::Blocked { pc, sp },
        _ => Seen::Running,
    }
}

/// A `0x…` hexadecimal word.
fn hex(f: &[u8]) -> Option<usize> {
    let digits = f.strip_prefix(b"0x")?;
    let mut v: usize = 0;
    for &c in digits {
        let d = (c as char).to_digit(16)? as usize;
        v = v.checked_mul(16)?.checked_add(d)?;
    }
    Some(v)
}

/// Code grace period (design §3.11 part B): returns `true` once no other
/// thread's PC, and no word on the live part of its stacks (a return
/// address into the code, or a PC saved in a signal frame), lies in one of
/// `ranges`. Conservative: a stale word that happens to point there delays
/// it. Gives up (`false`) after about a second, or if threads cannot be
/// stopped (or, signal-free, while one keeps running).
pub fn wait_code_quiescent(ranges: &[(usize, usize)]) -> bool {
    if ranges.is_empty() {
        return true;
    }
    let Ok(stacks) = StackMap::read() else {
        return false;
    };
    let inside = |w: usize| ranges.iter().any(|&(lo, hi)| lo <= w && w < hi);
    // Whether a thread's pc, or a word of its stack from `sp` up, is inside.
    let touches = |pc: usize, sp: usize| {
        let mut hit = inside(pc);
        stacks.scan_from(sp, |w| hit |= inside(w));
        hit
    };
    if SIGNAL_FREE.load(Ordering::Relaxed) {
        let me = sys::gettid();
        let mut tids = Vec::with_capacity(MAX_THREADS);
        for _ in 0..200 {
            // Held from outside where a holder can (every thread that runs
            // the program's code is then stopped where the kernel shows
            // it; those left running are the agent's own, which never run
            // traced code): nothing below allocates until they go on.
            let held = crate::hold::exists() && crate::hold::ask(crate::hold::Hold::Begin);
            let listed = sys::list_threads(&mut tids).is_ok();
            let busy = !listed
                || tids
                    .iter()
                    .filter(|&&t| t != me)
                    .any(|&tid| match seen(tid) {
                        Seen::Gone => false,
                        Seen::Running => !held,
                        Seen::Blocked { pc, sp } => touches(pc, sp),
                        Seen::Stopped { pc, sp } => !held || touches(pc, sp),
                    });
            if held {
                crate::hold::ask(crate::hold::Hold::End);
            }
            if !busy {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        return false;
    }
    let mut bufs = StopBuffers::default();
    for _ in 0..200 {
        let busy = stop_world(&mut bufs, |parked| {
            let mut busy = false;
            for p in parked.iter().filter(|p| p.pc != 0) {
                // The thread's own stack, from where it was stopped: its
                // frames, and those of a handler it was running (on an
                // alternate stack too: its sp is then there). Not the
                // parking handler's stack from its sp: only its own frame
                // and the kernel's signal frame lie there, whose saved PC
                // is p.pc, and the parts of its xsave area the kernel does
                // not write keep old words (a trampoline's address among
                // them) through every later stop.
                busy |= touches(p.pc, p.sp);
            }
            busy
        });
        match busy {
            Ok(false) => return true,
            Ok(true) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `seen` reads a thread blocked in `read` as blocked (at a pc and sp
    /// of its own), this one as running, a thread that is not as gone.
    #[test]
    fn threads_are_seen_where_the_kernel_shows_them() {
        let mut fds = [0i32; 2];
        // SAFETY: pipe writes two descriptors into `fds`.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            tx.send(sys::gettid()).unwrap();
            let mut b = 0u8;
            // SAFETY: a one-byte read into `b`.
            unsafe { libc::read(fds[0], (&mut b as *mut u8).cast(), 1) }
        });
        let tid = rx.recv().unwrap();
        let start = std::time::Instant::now();
        while !matches!(seen(tid), Seen::Blocked { .. }) {
            assert!(start.elapsed().as_secs() < 10, "{:?}", seen(tid));
            std::thread::sleep(Duration::from_millis(2));
        }
        let Seen::Blocked { pc, sp } = seen(tid) else {
            unreachable!()
        };
        assert!(pc != 0 && sp != 0);
        assert_eq!(seen(i32::MAX), Seen::Gone);
        // A thread that spins: running (or runnable) whenever looked at.
        let spin = std::sync::Arc::new(AtomicBool::new(true));
        let (tx, rx) = std::sync::mpsc::channel();
        let spinner = std::thread::spawn({
            let spin = spin.clone();
            move || {
                tx.send(sys::gettid()).unwrap();
                while spin.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }
        });
        assert_eq!(seen(rx.recv().unwrap()), Seen::Running);
        spin.store(false, Ordering::Relaxed);
        spinner.join().unwrap();
        // SAFETY: a one-byte write from a static buffer.
        assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
        assert_eq!(reader.join().unwrap(), 1);
    }
}
