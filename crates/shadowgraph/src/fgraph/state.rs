//! What fgraph publishes for the paths a traced call takes: the users by
//! slot and the epochs they registered at, the sole user (its fast path)
//! and the registered sole path's words, the thread-pointer offsets the
//! assembly addresses thread-local state by, fgraph's recursion bit, and
//! the counts the paths keep.

use super::stack::{thread, ThreadState};
use super::user::{GraphUser, MAX_USERS};
use crate::ftrace::recursion::{held, try_lock_at_rest};
use crate::ftrace::{try_lock, unlock, Group};
use std::sync::atomic::{compiler_fence, AtomicI64, AtomicPtr, AtomicU64, Ordering};

/// Published users by slot (null = stub: in-flight frames skip it).
/// Slots whose ARRAY entry is set (a superset while one is being cleared):
/// the general entry visits these only.
pub(super) static OCCUPIED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
pub(crate) static ARRAY: [AtomicPtr<GraphUser>; MAX_USERS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_USERS];
/// Each published user's `private` word by slot, stored before its ARRAY
/// entry and left in place after (a slot's next owner overwrites it
/// before publishing itself): a path that found the slot's user in a
/// published word (MULTI_FRAME_WORD) under the bracket reads it with one
/// load, no user pointer to follow.
pub(crate) static SLOT_PRIVATE: [std::sync::atomic::AtomicUsize; MAX_USERS] =
    [const { std::sync::atomic::AtomicUsize::new(0) }; MAX_USERS];
/// Epoch at which each slot's current owner registered.
pub(super) static SLOT_EPOCH: [AtomicU64; MAX_USERS] =
    [const { AtomicU64::new(u64::MAX) }; MAX_USERS];
pub(super) static EPOCH: AtomicU64 = AtomicU64::new(0);
/// The sole user while exactly one is registered (fast path), else null.
pub(crate) static FAST: AtomicPtr<GraphUser> = AtomicPtr::new(std::ptr::null_mut());
/// The user whose one-user path the site stubs take (sitepath.rs): the
/// sole user, or with several, the one in the lowest slot, for the calls
/// of sites whose filter mask names it alone and the frames kept for it
/// alone; null while none is registered, and from the start of an
/// unregistration to its end. A user stops being it before the grace
/// period that precedes its freeing.
pub(crate) static LEAD: AtomicPtr<GraphUser> = AtomicPtr::new(std::ptr::null_mut());
/// Two users or more are registered: the site stubs' fast paths offer a
/// call to each in turn (sitepath_multi.rs), as the general entry
/// does. A hint: what they read of the users is read as `enter` reads it.
pub(crate) static MANY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// FAST when the sole user is one the registered [`SolePath`] stands in
/// for, else null: the path reads this one word to know it may run.
pub(crate) static SOLE_PROVIDED: AtomicPtr<GraphUser> = AtomicPtr::new(std::ptr::null_mut());
/// SOLE_PROVIDED's `frame_word` while it is set, else [`NO_FRAME_WORD`]:
/// a path that pushes frames reads the word it checks and makes them by
/// from here, one load with no user pointer to follow.
pub(crate) static SOLE_FRAME_WORD: AtomicU64 = AtomicU64::new(NO_FRAME_WORD);
/// While two users or more are registered and the registered multi path
/// ([`register_multi_path`](super::registry::register_multi_path)) stands
/// in for every one of them: the BITMAP word of the frames it keeps for
/// them all (their bits, the newest epoch, so that the general return
/// treats such a frame as one `offer_all` kept for each), else
/// [`NO_FRAME_WORD`]. fgraph's site entry and return hand a call over to
/// the path while it is set; the path reads this one word to know it may
/// run, and for whom.
pub(crate) static MULTI_FRAME_WORD: AtomicU64 = AtomicU64::new(NO_FRAME_WORD);
/// The registered multi path's site entry and return (0: none).
pub(super) static MULTI_ENTRY: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);
pub(super) static MULTI_RETURN: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);
/// No frame's last word: its type bits (10..11) are 3, which no word of a
/// stack has (stack::TYPE_*), and a stack's word −1 is 0.
pub(crate) const NO_FRAME_WORD: u64 = u64::MAX;

/// The registered path's `hijacked_return` (0: none), which
/// `return_to_handler` jumps through. Written before the manager exists,
/// so before any return can be hijacked.
pub(super) static SOLE_HIJACKED_RETURN: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Frames whose return could not be matched (should stay 0).
pub(super) static LOST_FRAMES: AtomicU64 = AtomicU64::new(0);

/// Offsets from the thread pointer of the core's and fgraph's thread-local
/// state (also read by a registered [`SolePath`]).
pub(crate) use crate::ftrace::local::TP_LOCAL;
pub(crate) static TP_THREAD: AtomicI64 = AtomicI64::new(0);

/// Computes [`TP_LOCAL`] and [`TP_THREAD`] (before any site can reach the
/// code that reads them).
pub(crate) fn init_tp_offsets() {
    crate::ftrace::local::init_tp_local();
    TP_THREAD.store(
        crate::tls::tp_offset(thread() as *const ThreadState as usize),
        Ordering::Relaxed,
    );
}

/// fgraph's recursion bit (Group::Graph), taken as `try_lock` does, or only
/// with no bit held at all (`try_lock_at_rest`), and mirrored in the
/// thread's `graph_busy`: how many of its bits the thread holds, set from
/// the recursion word itself (a count left by a holder that never came
/// back, after the core reset the bits, is mended at the next take). The
/// assembly fast paths read it in the blockers word: the plain fused
/// entry, which holds no bit and no bracket, finds there that fgraph's
/// code is at work on the thread (a frame perhaps written and not yet
/// published, or published and not yet written again) without reading
/// the core's recursion word.
#[inline(always)]
pub(super) fn lock_graph(t: &ThreadState, at_rest: bool) -> Option<u32> {
    let bit = if at_rest {
        try_lock_at_rest(Group::Graph)?
    } else {
        try_lock(Group::Graph)?
    };
    t.graph_busy.set(held(Group::Graph));
    // As the recursion bits: this thread's, ordered by a compiler fence.
    compiler_fence(Ordering::SeqCst);
    Some(bit)
}

/// Gives back a bit of [`lock_graph`].
#[inline(always)]
pub(super) fn unlock_graph(t: &ThreadState, bit: u32) {
    unlock(bit);
    t.graph_busy.set(held(Group::Graph));
}

/// A thread's brackets were abandoned: so was the event whose time its
/// users shared (its word would otherwise keep that time for callbacks
/// outside any event: with a sole user left, forever), and a jump's
/// landing it was in (`jumps`: what it was doing is over).
pub(super) fn forget_event_time() {
    thread().event_time.store(0, Ordering::Relaxed);
    thread().jump.set(0);
}

/// This thread's shared event time word (`ThreadState::event_time`):
/// tracers whose callbacks would each read the clock for the same event
/// may take one time through it (`record::writer::emit_shared`).
#[inline(always)]
pub fn event_time() -> &'static std::sync::atomic::AtomicU64 {
    &thread().event_time
}
