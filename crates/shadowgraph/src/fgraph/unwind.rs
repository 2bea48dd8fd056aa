//! Unwinders and fgraph (design §4.6): the real return addresses
//! behind hijacked slots, and a thread's frames unhooked before an
//! exception, forced unwind or backtrace walks its stack and hooked again
//! after.

use super::ret::{finish_frame, is_hijack, return_to_handler};
use super::stack::{thread, ThreadState};
use super::user::RetRegs;
use crate::ftrace::quiesce::Bracket;
use std::sync::atomic::{AtomicU64, Ordering};

// --- Unwinder translation (design §4.6) ------------------------------------------------------

/// Shadow frames visited by unwinder translations (to check linearity).
pub(super) static RET_ADDR_VISITS: AtomicU64 = AtomicU64::new(0);

/// Translates a return address an unwinder found in the slot `retp` of the
/// current thread's stack: a hijacked one (`return_to_handler`) becomes the
/// real address saved in the shadow frame. `cursor` starts at 0 and only
/// moves down the shadow stack across calls, so unwinding n frames costs
/// O(n) in all. The walk is of this thread's stack; walk another thread only
/// while it is stopped (see [`ret_addr_of`]).
pub fn ret_addr(cursor: &mut usize, ret: usize, retp: usize) -> usize {
    ret_addr_in(thread(), cursor, ret, retp)
}

/// [`ret_addr`] for the thread whose state is `t` (which must be stopped, or
/// be the caller).
pub fn ret_addr_of(t: &ThreadState, cursor: &mut usize, ret: usize, retp: usize) -> usize {
    ret_addr_in(t, cursor, ret, retp)
}

pub(super) fn ret_addr_in(t: &ThreadState, cursor: &mut usize, ret: usize, retp: usize) -> usize {
    if !is_hijack(ret) || t.stack.get().is_null() {
        return ret;
    }
    let top = if *cursor == 0 { t.curr.get() } else { *cursor };
    for (start, fret, fretp) in t.frames_below(top) {
        RET_ADDR_VISITS.fetch_add(1, Ordering::Relaxed);
        if fretp == retp && !is_hijack(fret) {
            *cursor = start;
            return fret;
        }
    }
    // A frame popped early (a stack switched away from), if remembered.
    t.graves()
        .and_then(|g| g.find(retp, false))
        .filter(|&r| !is_hijack(r))
        .unwrap_or(ret)
}

/// The real return address of the innermost hooked frame of this thread
/// (skipping tail-call frames, whose saved address is the handler itself).
pub fn top_ret_addr() -> Option<usize> {
    let t = thread();
    t.frames_below(t.curr.get())
        .map(|(_, ret, _)| ret)
        .find(|&r| !is_hijack(r))
}

// --- Unwinders (design §4.6) -------------------------------------------------------------------

/// Puts every live frame's real return address back into its slot, so that
/// an unwinder (C++ exception, forced unwind of `pthread_exit`, a panic,
/// `backtrace`) sees the real stack and never `return_to_handler`. The
/// frames stay on the shadow stack, unhooked, until [`rehook_thread`] or the
/// thread's next hook above the caller's frame: calls made below it (the
/// unwinder's own) are not hooked, for a hook would hijack the slots again
/// under the unwinder's walk. Interposers call this before handing over.
#[inline(never)]
pub fn unhook_thread() {
    let t = thread();
    if t.stack.get().is_null() {
        return;
    }
    // This frame lies below the caller's and above the unwinder's, which
    // the caller calls next in the same place (a second unwind started
    // from a cleanup pad moves the mark up to its own).
    let mark = 0u8;
    t.unhooked_at
        .set(std::hint::black_box(&mark) as *const u8 as usize);
    if t.unhooked.get() {
        return;
    }
    // Top to bottom: a tail-call frame (ret = handler) shares its slot with
    // the frame below, which then writes the real address.
    for (_, ret, retp) in t.frames_below(t.curr.get()) {
        let retp = retp as *mut usize;
        // SAFETY: retp is a return slot on this thread's stack, live while
        // its frame is on the shadow stack.
        if !is_hijack(ret) && is_hijack(unsafe { *retp }) {
            // SAFETY: the same live slot; this thread alone writes it.
            unsafe { *retp = ret };
        }
    }
    t.unhooked.set(true);
}

/// Stops hooking this thread's calls until [`resume_thread`] (nested
/// pairs count): for the length of an unwinder's walk whose callbacks are
/// the program's own, possibly traced, code, which must neither be hooked
/// nor hook the walked frames again under the walker's feet.
pub fn pause_thread() {
    let t = thread();
    t.pause.set(t.pause.get() + 1);
}

/// Ends a [`pause_thread`].
pub fn resume_thread() {
    let t = thread();
    t.pause.set(t.pause.get().saturating_sub(1));
}

/// How many [`pause_thread`]s this thread is inside.
pub fn pause_depth() -> u32 {
    thread().pause.get()
}

/// Puts this thread's pauses back to `depth` ([`pause_depth`]'s, taken
/// before): for a `vfork`'s parent, whose child, on the same thread
/// state, may have paused it and never resumed (an `exit` runs the
/// agent's exit step, which pauses the thread for good).
pub fn resume_thread_to(depth: u32) {
    thread().pause.set(depth);
}

/// After an unwinder stopped at stack pointer `sp` (a landing pad, or the
/// end of a backtrace): frames whose slot lies below `sp` are gone —
/// reported as unwound exits and popped — and the rest are hijacked again.
pub fn rehook_thread(sp: usize) {
    let t = thread();
    if t.stack.get().is_null() || !t.unhooked.get() {
        return;
    }
    let _b = Bracket::enter();
    rehook_in(t, sp);
}

pub(super) fn rehook_in(t: &ThreadState, sp: usize) {
    let r = RetRegs::zeroed();
    let rth = return_to_handler();
    while let Some(start) = t.frame_below(t.curr.get()) {
        let retp = t.word(start + 2) as usize;
        let gone = retp < sp
            || (retp == sp && {
                // SAFETY: a slot at or above sp is on the live stack.
                let now = unsafe { *(retp as *const usize) };
                now != t.word(start) as usize && !is_hijack(now)
            });
        if !gone {
            break;
        }
        finish_frame(t, start, &r, true);
    }
    for (_, ret, retp) in t.frames_below(t.curr.get()) {
        let retp = retp as *mut usize;
        // SAFETY: as in unhook_thread; a slot still holding the frame's real
        // address is the live return slot of that call.
        if !is_hijack(ret) && unsafe { *retp } == ret {
            // SAFETY: the same live slot; this thread alone writes it.
            unsafe { *retp = rth };
        }
    }
    t.unhooked.set(false);
}
