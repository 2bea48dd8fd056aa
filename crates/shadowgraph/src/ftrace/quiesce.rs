//! The dispatch bracket and grace periods (design §3.10, §3.11 part A).
//!
//! Every trampoline entry raises its thread's bracket depth *before* it loads
//! any dispatch record or ops slot and lowers it on leaving; when the depth
//! returns to 0 the thread's exit generation advances. A writer that
//! unpublished something waits — after a `membarrier` that makes every
//! thread's increment visible or makes the thread see the new configuration —
//! until each thread that was inside at the snapshot has left (its depth was
//! 0 or its generation moved). Only the owning thread writes its word, with
//! plain stores: no shared writes and no fences on the hot path.

use super::local::local;
use crate::sys;
use std::sync::atomic::{compiler_fence, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

/// Most threads that can run trampolines at once.
pub const MAX_THREADS: usize = 4096;

/// A cache line each: every traced call writes its thread's word twice,
/// and threads sharing a line would pull it from each other's cores.
#[repr(align(64))]
struct ThreadWord {
    /// `(exit_gen << 16) | depth`
    qs: AtomicU64,
    /// Owner's tid; 0 = free.
    tid: AtomicI32,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: ThreadWord = ThreadWord {
    qs: AtomicU64::new(0),
    tid: AtomicI32::new(0),
};

static WORDS: [ThreadWord; MAX_THREADS] = [FREE; MAX_THREADS];
/// One past the highest slot ever claimed.
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
/// Calls that found no free slot (they run without a bracket: counted).
pub(super) static UNBRACKETED: AtomicU64 = AtomicU64::new(0);

static KEY_INIT: Once = Once::new();
static mut KEY: libc::pthread_key_t = 0;
static MEMBARRIER: AtomicI32 = AtomicI32::new(-1);
/// Whether grace periods also restart every restartable sequence under
/// way ([`fence_rseq_too`]).
static RSEQ_FENCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every later grace period also send each thread inside a
/// restartable sequence back to its start: the read side of code that
/// loads what a grace period protects inside such a sequence, and holds
/// no bracket (record::fused's plain path, which checks its user there).
/// False (nothing changed) if the kernel lacks
/// `membarrier(PRIVATE_EXPEDITED_RSEQ)`.
pub fn fence_rseq_too() -> bool {
    init();
    if RSEQ_FENCE.load(Ordering::Acquire) {
        return true;
    }
    if sys::membarrier_registering() && sys::membarrier_offers_rseq() {
        // Registered at the first grace period (see
        // sys::membarrier_registering).
        RSEQ_PENDING.store(true, Ordering::Relaxed);
    } else if !sys::membarrier_register_rseq() {
        return false;
    }
    // Release: after the registration, which a waiter relies on once it
    // reads true (Acquire).
    RSEQ_FENCE.store(true, Ordering::Release);
    true
}

/// Prepares the thread registry (a pthread key whose destructor frees a
/// thread's slot at exit) and registers for membarrier. Called by the core
/// before any trampoline can run.
pub fn init() {
    KEY_INIT.call_once(|| {
        // SAFETY: creating a key with a plain extern "C" destructor; KEY is
        // written once here, before any reader (Once orders it).
        unsafe {
            libc::pthread_key_create(std::ptr::addr_of_mut!(KEY), Some(release_slot));
        }
        // In a process joined late, at the first grace period (-1 until
        // then): see sys::membarrier_registering.
        if !sys::membarrier_registering() {
            MEMBARRIER.store(
                sys::membarrier_register_expedited() as i32,
                Ordering::Relaxed,
            );
        }
        // SAFETY: registering a plain extern "C" child handler.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    });
}

/// In a forked child only the forking thread exists: forget the others'
/// bracket words (a grace period would wait for them forever), the cached
/// thread id, and register for membarrier again (it is per process).
extern "C" fn after_fork_child() {
    let mine = local().slot.get();
    for (i, w) in WORDS.iter().enumerate() {
        if i + 1 != mine {
            w.qs.store(0, Ordering::Relaxed);
            w.tid.store(0, Ordering::Relaxed);
        }
    }
    if mine != 0 {
        WORDS[mine - 1].tid.store(sys::gettid(), Ordering::Relaxed);
    }
    super::recursion::reset_tid_cache();
    MEMBARRIER.store(
        sys::membarrier_register_expedited() as i32,
        Ordering::Relaxed,
    );
    if RSEQ_FENCE.load(Ordering::Relaxed) && !sys::membarrier_register_rseq() {
        // Grace periods fall back to signalling every thread (below).
        RSEQ_FENCE_BROKEN.store(true, Ordering::Relaxed);
    }
    crate::patch::after_fork_child();
}

extern "C" fn release_slot(v: *mut libc::c_void) {
    // Runs on the exiting thread: a later traced call (another destructor)
    // claims a fresh slot instead of sharing this one once it is reused.
    local().slot.set(0);
    local().word.set(std::ptr::null());
    let idx = v as usize;
    if idx > 0 && idx <= MAX_THREADS {
        let w = &WORDS[idx - 1];
        w.qs.store(0, Ordering::Relaxed);
        // Release: the slot is free once its word is 0 (a thread that
        // claims it, AcqRel, starts from there).
        w.tid.store(0, Ordering::Release);
    }
}

/// Claims a slot for this thread. Lock-free and async-signal-safe: atomics,
/// and `pthread_setspecific` on a low key (a store into the thread
/// descriptor in glibc).
#[cold]
fn claim() -> usize {
    let me = sys::gettid();
    for (i, w) in WORDS.iter().enumerate() {
        if w.tid.load(Ordering::Relaxed) == 0
            // AcqRel: claims the slot its last owner released; a waiter
            // that reads the tid (Acquire) reads this owner's words.
            && w.tid
                .compare_exchange(0, me, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            w.qs.store(0, Ordering::Relaxed);
            // AcqRel: a waiter that loads the high water (Acquire) sees
            // this slot's tid and word.
            HIGH_WATER.fetch_max(i + 1, Ordering::AcqRel);
            local().slot.set(i + 1);
            local().word.set(&w.qs);
            // SAFETY: KEY was created by init() before any trampoline ran.
            unsafe { libc::pthread_setspecific(KEY, (i + 1) as *const libc::c_void) };
            return i + 1;
        }
    }
    0
}

/// The assembly paths' `Bracket::enter_at_rest`, the thread found at rest:
/// the anchor in rax stored (at `fs:[$local + {l_anchor}]`, `$local` the
/// CoreLocal's offset), the bracket word at `[$word]` incremented, and the
/// anchor stored again: a signal handler that ran just before the
/// increment found the thread at rest and anchored its own brackets there.
#[doc(hidden)]
#[macro_export]
macro_rules! bracket_enter_at_rest {
    ($local:literal, $word:literal) => {
        concat!(
            "mov qword ptr fs:[",
            $local,
            " + {l_anchor}], rax\n",
            "inc qword ptr [",
            $word,
            "]\n",
            "mov qword ptr fs:[",
            $local,
            " + {l_anchor}], rax\n",
        )
    };
}

/// Inside the dispatch bracket while alive (null: no slot could be had).
pub struct Bracket(*const AtomicU64);

impl Bracket {
    /// Enters the bracket outside a traced call (anchored at the current
    /// stack pointer).
    #[inline(always)]
    pub fn enter() -> Bracket {
        Bracket::enter_at(stack_pointer())
    }

    /// Enters the bracket for a traced call whose return-address slot is
    /// `anchor`. While the thread's outermost bracket is open, a later
    /// entry's anchor lies strictly below the outermost one's (it is made
    /// from deeper: a callback's or an interrupting handler's calls); one at
    /// or above it means the frames that held the open brackets are gone.
    #[inline(always)]
    pub fn enter_at(anchor: usize) -> Bracket {
        let mut p = local().word.get();
        if p.is_null() {
            if claim() == 0 {
                UNBRACKETED.fetch_add(1, Ordering::Relaxed);
                return Bracket(std::ptr::null());
            }
            p = local().word.get();
        }
        // SAFETY: p points into the static WORDS array.
        let w = unsafe { &*p };
        let mut v = w.load(Ordering::Relaxed);
        if v & 0xffff == 0 {
            local().outer_anchor.set(anchor);
        } else if anchor >= local().outer_anchor.get() {
            v = abandoned(v, anchor);
        }
        // Relaxed, and a compiler fence: only this thread writes its word,
        // and a waiter orders against it by membarrier (a full barrier on
        // every CPU running the process), so the compiler alone must keep
        // the loads the bracket protects after the increment.
        w.store(v + 1, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        if v & 0xffff == 0 {
            // Again: a signal handler that ran between the anchor's store
            // and the word's found the thread at rest and anchored its own
            // brackets there; a second one inside this bracket, entered
            // from about as deep, would then take it for abandoned.
            local().outer_anchor.set(anchor);
        }
        Bracket(p)
    }

    /// Enters the bracket only if this thread is outside every bracket
    /// (the common case, taken by the fast paths): then no callback of ours
    /// runs on this thread, and there is no open bracket to compare the
    /// anchor with. `None` otherwise (or before the thread has a word): the
    /// caller takes the general way.
    #[inline(always)]
    pub fn enter_at_rest(anchor: usize) -> Option<Bracket> {
        let c = local();
        let p = c.word.get();
        if p.is_null() {
            return None;
        }
        // SAFETY: p points into the static WORDS array.
        let w = unsafe { &*p };
        let v = w.load(Ordering::Relaxed);
        if v & 0xffff != 0 {
            return None;
        }
        c.outer_anchor.set(anchor);
        // As in enter_at: Relaxed and a compiler fence.
        w.store(v + 1, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // Again, as in enter_at.
        c.outer_anchor.set(anchor);
        Some(Bracket(p))
    }
}

#[inline(always)]
fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads rsp; no memory, no flags.
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// Brackets a thread left without leaving them: a signal handler that
/// interrupted a trampoline or callback and never returned (siglongjmp).
pub(super) static ABANDONED: AtomicU64 = AtomicU64::new(0);

/// Called on the thread when its abandoned brackets are released: whatever
/// the code they held had half done on it is gone too (a record half
/// written, an event's shared time). Plain `fn()`s, async-signal-safe, in
/// the order they were set; 0: a free entry.
static ABANDON_HOOKS: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];

/// How many brackets this thread is inside: 0 outside our code, 1 in a
/// traced call's, more when a signal handler's traced call interrupted our
/// code. Async-signal-safe.
#[inline]
pub fn bracket_depth() -> u64 {
    let w = local().word.get();
    if w.is_null() {
        return 0;
    }
    // SAFETY: a thread's bracket word, once set, lives until the thread
    // exits (this thread's own).
    unsafe { &*w }.load(Ordering::Relaxed) & 0xffff
}

/// Adds a hook run when a thread's abandoned brackets are released (once
/// per hook: setting it again changes nothing). Four at most: a fifth is
/// refused (false).
pub fn on_abandoned(hook: fn()) -> bool {
    let h = hook as usize;
    for slot in &ABANDON_HOOKS {
        // AcqRel/Acquire: a hook is published whole before a thread that
        // loads the entry calls it.
        match slot.compare_exchange(0, h, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(x) if x == h => return true,
            Err(_) => {}
        }
    }
    false
}

/// A bracket is open, yet this entry is anchored at or above where the
/// outermost open one was: the frames that held them are gone, the stack
/// having been unwound past them (siglongjmp out of a handler that
/// interrupted a trampoline or callback), and with them everything they
/// held. Without this the thread's depth never returns to 0 — every grace
/// period would wait for it forever — and its recursion bits stay taken,
/// dropping all its calls. On the alternate signal stack the two positions
/// cannot be compared, and nothing is reset. Returns the word to continue
/// from.
#[cold]
#[inline(never)]
fn abandoned(v: u64, anchor: usize) -> u64 {
    let mut ss = libc::stack_t {
        ss_sp: std::ptr::null_mut(),
        ss_flags: 0,
        ss_size: 0,
    };
    // SAFETY: querying the alternate signal stack (async-signal-safe).
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) } == 0
        && ss.ss_flags & libc::SS_ONSTACK != 0
    {
        return v;
    }
    ABANDONED.fetch_add(1, Ordering::Relaxed);
    super::recursion::reset_recursion();
    for slot in &ABANDON_HOOKS {
        // Acquire: pairs with the Release that registered the hook.
        let hook = slot.load(Ordering::Acquire);
        if hook != 0 {
            // SAFETY: only `on_abandoned` stores here, from a `fn()`.
            let hook = unsafe { std::mem::transmute::<usize, fn()>(hook) };
            hook();
        }
    }
    local().outer_anchor.set(anchor);
    // Depth 0, and the exit generation moves: as if they had been left.
    ((v >> 16) + 1) << 16
}

impl Drop for Bracket {
    #[inline(always)]
    fn drop(&mut self) {
        if self.0.is_null() {
            return;
        }
        // The loads made inside the bracket stay before the decrement (as
        // in enter_at: the waiter's membarrier orders the rest).
        compiler_fence(Ordering::SeqCst);
        // SAFETY: as in enter.
        let w = unsafe { &*self.0 };
        let v = w.load(Ordering::Relaxed);
        // Depth − 1, and the exit generation + 1 when the depth reaches 0
        // (its low 16 bits are then 0, so the add cannot carry into them):
        // branch-free, on every traced call.
        let next = v - 1 + (((v & 0xffff == 1) as u64) << 16);
        w.store(next, Ordering::Relaxed);
    }
}

/// The rseq fence is promised ([`fence_rseq_too`]) but not registered yet:
/// the next grace period registers first. Release/Acquire: cleared only
/// once registered, so a grace period that finds it clear may fence.
static RSEQ_PENDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A forked child could not register for the rseq fence again.
static RSEQ_FENCE_BROKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The barrier of a grace period (see [`synchronize`]): membarrier, with
/// the rseq fence when promised, else a signal to every thread.
fn fence_running_threads() {
    let mut pinged = false;
    if MEMBARRIER.load(Ordering::Relaxed) == -1 {
        // Registered now (by the thread registering in the background
        // first, most likely: this returns at once). Relaxed: every
        // thread that registers stores the same.
        let ok = sys::membarrier_register_expedited();
        MEMBARRIER.store(ok as i32, Ordering::Relaxed);
    }
    if MEMBARRIER.load(Ordering::Relaxed) != 1 || sys::membarrier_expedited().is_err() {
        let _ = crate::stop::ping_all();
        pinged = true;
    }
    if RSEQ_PENDING.load(Ordering::Acquire) {
        if !sys::membarrier_register_rseq() {
            RSEQ_FENCE_BROKEN.store(true, Ordering::Relaxed);
        }
        RSEQ_PENDING.store(false, Ordering::Release);
    }
    // A signal also sends a thread in a restartable sequence to its abort
    // handler, so the ping above does both.
    if RSEQ_FENCE.load(Ordering::Acquire)
        && !pinged
        && (RSEQ_FENCE_BROKEN.load(Ordering::Relaxed) || sys::membarrier_rseq().is_err())
    {
        let _ = crate::stop::ping_all();
    }
}

/// Grace period, part A: returns once every thread that may have loaded
/// something unpublished before this call has left its bracket (and,
/// with [`fence_rseq_too`], its restartable sequence).
pub fn synchronize() {
    init();
    // Every thread either made its bracket increment visible before this
    // point or will see what was unpublished before it. Threads held off
    // their CPUs from outside did already (their stores left with them),
    // and one held inside a restartable sequence is sent to its abort
    // handler by the kernel as it resumes: no barrier, and no wait for
    // membarrier's registration (see sys::membarrier_registering).
    if !crate::process::world_stopped_outside() {
        fence_running_threads();
    }
    let mine = local().slot.get();
    // Acquire: every slot below the high water has its tid published.
    let n = HIGH_WATER.load(Ordering::Acquire);
    let start = Instant::now();
    for (i, w) in WORDS[..n].iter().enumerate() {
        if i + 1 == mine {
            continue; // our own callers' brackets are below us
        }
        let tid = w.tid.load(Ordering::Acquire);
        let snap = w.qs.load(Ordering::Relaxed);
        if tid == 0 || snap & 0xffff == 0 {
            continue;
        }
        let mut spins = 0u32;
        loop {
            // The bracket word Relaxed (the membarrier above orders the
            // thread's increments before it); the tid Acquire: a slot
            // released or claimed again is another thread's.
            let now = w.qs.load(Ordering::Relaxed);
            if now & 0xffff == 0 || now >> 16 != snap >> 16 || w.tid.load(Ordering::Acquire) != tid
            {
                break;
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else if start.elapsed() < Duration::from_millis(10) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
}
