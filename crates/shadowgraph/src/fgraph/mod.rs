//! Function-graph tracing for up to 16 simultaneous users on one shadow
//! stack per thread (design §4).
//!
//! fgraph is one *manager ops* of the ftrace core whose subops carry the
//! users' filters, so the manager traces exactly the union of what the users
//! want. Its callback pushes a frame, offers the call to each user's entry
//! callback and, if any accepted, records them in the frame's bitmap and
//! replaces the return address with `return_to_handler`, which later runs
//! the accepting users' return callbacks and resumes at the real address.
//!
//! Deliberate differences from the kernel (design §4.9): no forced bit 0 (only
//! accepting users get returns), slot generations (a reused slot's new owner
//! never gets returns of frames entered before it registered), strict
//! reservations, exact rollback of a failed registration.
//!
//! The parts: `user` (a user and the events it sees), `stack` (the
//! shadow stack's words and a thread's state), `state` (what the paths
//! share), `entry` and `ret` (a call's entry and return, in Rust),
//! `sitepath` (the single user's entry and return through a site stub, in
//! assembly), `unwind` (unwinders and the frames), `thread` (a thread's
//! exit), `registry` (users come and go; the manager ops), [`filters`]
//! (per-user graph filters a user may apply).

mod entry;
pub mod filters;
mod jumps;
mod layout;
mod registry;
mod ret;
mod site_users;
mod sitepath;
mod sitepath_multi;
pub(crate) mod stack;
mod state;
mod thread;
pub mod triggers;
mod unwind;
pub(crate) mod user;
mod vfork;

pub(crate) use entry::manager_tramp_entry;
pub use jumps::{finished_at_once_body, returns_twice_body};
pub(crate) use layout::graph_asm;
pub(crate) use registry::{
    chosen_site_entry, general_site_path, manager_made, multi_path_is, multi_path_live,
    register_multi_path, register_sole_path, SolePath,
};
pub use registry::{
    register_graph, register_graphs, set_site_stubs, unregister_graph, unregister_graphs,
};
pub use ret::{is_hijack, return_to_handler};
pub(crate) use site_users::{CAPACITY as SITE_USERS_CAPACITY, SITE_USERS};
pub use sitepath::site_entry_before_bracket;
pub use state::event_time;
pub(crate) use state::{
    init_tp_offsets, ARRAY, MULTI_FRAME_WORD, NO_FRAME_WORD, SLOT_PRIVATE, SOLE_FRAME_WORD,
    SOLE_PROVIDED, TP_LOCAL, TP_THREAD,
};
pub use unwind::{
    pause_depth, pause_thread, rehook_thread, resume_thread, resume_thread_to, ret_addr,
    ret_addr_of, top_ret_addr, unhook_thread,
};
pub use user::{
    Cell64, EntryFn, GraphEntry, GraphError, GraphReturn, GraphUser, RetRegs, ReturnFn,
    MAX_RESERVE, MAX_USERS,
};
pub use vfork::{on_vfork, vfork_body, VforkHooks};

use stack::thread;
pub use stack::{
    max_frames, set_stack_bytes, DEFAULT_STACK_BYTES, MAX_STACK_BYTES, MIN_STACK_BYTES,
};
use state::{FAST, LOST_FRAMES};
use std::sync::atomic::{AtomicU64, Ordering};

/// The index of this thread's first free shadow-stack word: where the next
/// frame goes (for tests of the stack's invariants).
#[doc(hidden)]
pub fn stack_top() -> usize {
    thread().curr.get()
}

/// Pushes a frame on this thread's shadow stack as an entry would, with
/// return address `ret` found at `retp`; `None` when the stack is full (for
/// tests of the stack's invariants).
///
/// # Safety
/// Either `retp` is a live return slot of this thread's stack holding
/// `ret`, or it lies below every live call's slot, so that the frame is
/// dropped as dead before anything reads or writes through it.
#[doc(hidden)]
pub unsafe fn push_frame(ret: usize, func: usize, retp: usize, depth: u16) -> Option<usize> {
    thread().push(ret, func, retp, depth)
}

/// Whether exactly one user is registered and served by the fast path.
pub fn fast_path_active() -> bool {
    !FAST.load(Ordering::Acquire).is_null()
}

/// Calls not hooked on this thread because its shadow stack was full.
pub fn thread_overrun() -> u64 {
    thread().overrun.get()
}

/// Calls of any thread not hooked because the shadow stack was full.
pub fn total_overruns() -> u64 {
    stack::OVERRUNS.load(Ordering::Relaxed)
}

/// What fgraph counted, every thread, since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphCounters {
    /// Returns whose frame could not be found (should stay 0).
    pub lost_frames: u64,
    /// Returns of frames popped early (see `stack::Graves`).
    pub revived_frames: u64,
    /// Shadow frames visited by unwinder translations (their linearity).
    pub ret_addr_visits: u64,
    /// Calls not hooked because their thread's shadow stack was full.
    pub overruns: u64,
    /// Shadow stacks mapped (in use or pooled; never unmapped).
    pub stacks_mapped: u64,
}

/// fgraph's counts now. Each is read on its own (Relaxed: they are
/// statistics, never used to order anything).
pub fn counters() -> GraphCounters {
    let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
    GraphCounters {
        lost_frames: r(&LOST_FRAMES),
        revived_frames: r(&ret::REVIVED_FRAMES),
        ret_addr_visits: r(&unwind::RET_ADDR_VISITS),
        overruns: r(&stack::OVERRUNS),
        stacks_mapped: r(&stack::STACKS_MAPPED),
    }
}

/// This thread's current graph depth (−1: no kept frame).
pub fn thread_depth() -> i32 {
    thread().depth()
}

/// Whether the frames reported to the users now as unwound are calls
/// that stay open: the thread is in its exit step (it ended by
/// `pthread_exit`, or was cancelled, inside them), or a `longjmp` left
/// them to return into a traced `setjmp` (whose exit is reported next,
/// see [`resuming`]), as uftrace shows both.
pub fn unwound_stays_open() -> bool {
    let t = thread();
    t.exiting.get() || jumps::skipping(t)
}

/// Whether `user` is offered calls now: registered, and not leaving (it
/// stops being offered calls before its unregistration returns).
pub fn offered_calls(user: &GraphUser) -> bool {
    user.slot()
        // Acquire: as the paths that find a user in its slot.
        .is_some_and(|i| std::ptr::eq(ARRAY[i].load(Ordering::Acquire), user))
}

/// Whether the return reported now is a function's second one (a
/// `longjmp` back into a traced `setjmp`): its exit belongs at its own
/// depth, below the calls the jump left open.
pub fn resuming() -> bool {
    jumps::resuming(thread())
}
