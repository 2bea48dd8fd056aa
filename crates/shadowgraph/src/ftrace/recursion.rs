//! The recursion guard (design §3.8) and the thread's cached id: state of
//! the thread's own, in its core-local block, read and written by plain
//! loads and stores (a signal handler of the thread restores what it
//! changes before the interrupted code goes on).

use super::local::local;
use std::sync::atomic::Ordering;

/// This thread's id, cached (a thread's id never changes; a forked child
/// starts from the parent's cache and must reset it).
#[inline]
pub fn current_tid() -> i32 {
    let t = local().tid.get();
    if t != 0 {
        return t;
    }
    let t = crate::sys::gettid();
    local().tid.set(t);
    t
}

/// Forgets the cached thread id (in a forked child).
pub fn reset_tid_cache() {
    local().tid.set(0);
}

/// A group of recursion bits: NORMAL, SIGNAL, TRANSITION.
#[derive(Clone, Copy)]
pub enum Group {
    /// The list function's bits.
    List = 0,
    /// The core caller's bits.
    Core = 3,
    /// fgraph's bits.
    Graph = 6,
}

const NORMAL: u32 = 0;
const SIGNAL: u32 = 1;
const TRANSITION: u32 = 2;
/// Bits of the recursion word from which the signal-handler depth is kept
/// (the signal wrappers that will maintain it are not interposed yet).
const SIG_SHIFT: u32 = 16;

/// Takes the group's bit for the current context, or the transition bit
/// once; `None` (counted as a drop) when both are held.
#[inline]
pub fn try_lock(g: Group) -> Option<u32> {
    // One word: recursion bits below SIG_SHIFT, signal-handler depth above.
    let rec = local().rec.get();
    let ctx = if rec >> SIG_SHIFT > 0 { SIGNAL } else { NORMAL };
    let mut bit = g as u32 + ctx;
    if rec & (1 << bit) != 0 {
        bit = g as u32 + TRANSITION;
        if rec & (1 << bit) != 0 {
            local().rec_drops.set(local().rec_drops.get() + 1);
            REC_DROPS_ALL.fetch_add(1, Ordering::Relaxed);
            return None;
        }
    }
    local().rec.set(rec | 1 << bit);
    // The bit is set before the guarded code runs (only this thread and
    // its handlers read it: a compiler fence orders them).
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    Some(bit)
}

/// The fast paths' guard: takes the group's normal bit if this thread
/// holds no bit at all (outside every bracket it holds none).
#[inline(always)]
pub fn try_lock_at_rest(g: Group) -> Option<u32> {
    let c = local();
    if c.rec.get() != 0 {
        return None;
    }
    let bit = g as u32 + NORMAL;
    c.rec.set(1 << bit);
    // As in try_lock.
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    Some(bit)
}

/// How many of group `g`'s bits this thread holds (0 to 3).
#[inline(always)]
pub fn held(g: Group) -> u8 {
    ((local().rec.get() >> g as u32) & 0b111).count_ones() as u8
}

/// Releases recursion bit `bit`, taken by `trylock`.
#[inline]
pub fn unlock(bit: u32) {
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    local().rec.set(local().rec.get() & !(1 << bit));
}

/// Forgets every recursion bit of this thread: their holders' frames are
/// gone (see `quiesce::abandoned`).
pub(crate) fn reset_recursion() {
    local().rec.set(0);
    // A site hint left by an entry that never came back goes too.
    local().site_hint_ip.set(0);
}

/// Calls this thread dropped because a guarded callback recursed too deep.
pub fn recursion_drops() -> u64 {
    local().rec_drops.get()
}

/// The same, all threads.
static REC_DROPS_ALL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Calls every thread dropped because a guarded callback recursed too deep.
pub fn recursion_drops_all() -> u64 {
    REC_DROPS_ALL.load(Ordering::Relaxed)
}
