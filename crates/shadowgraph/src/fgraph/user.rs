//! What a graph user is and sees: the events its callbacks get (entry,
//! return, the saved return registers), and the user itself — its
//! callbacks, its filter (a subop of fgraph's manager), its slot, and its
//! data in the frames of the calls it accepted (reservations) and on each
//! thread (its task variable).

use super::stack::{self, thread};
use crate::ftrace::{self, CoreError, FilterSet, Ops, Regs};
use std::fmt;
use std::mem::offset_of;
use std::sync::atomic::{compiler_fence, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

/// Most users at once.
pub const MAX_USERS: usize = 16;
/// Largest reservation per user and call.
pub const MAX_RESERVE: usize = 256;

/// What an entry callback learns about the call. C layout: the assembly
/// fast path builds it.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct GraphEntry {
    /// The traced function (its site address).
    pub func: usize,
    /// Where it returns to.
    pub parent_ip: usize,
    /// Frames kept on this thread below this one, for any user.
    pub depth: i32,
    /// The function's site id when the entry knew it at no cost (through a
    /// site stub), else `u32::MAX`: [`GraphEntry::site_id`] has it either
    /// way.
    pub site: u32,
}

impl GraphEntry {
    /// The traced function's site id (`ftrace::site_id_of(func)`, which
    /// searches every site unless the entry said).
    pub fn site_id(&self) -> Option<ftrace::SiteId> {
        if self.site != u32::MAX {
            Some(self.site)
        } else {
            ftrace::site_id_of(self.func)
        }
    }
}

/// What a return callback learns. C layout: the assembly fast path builds
/// it.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct GraphReturn {
    /// The traced function's entry (its site).
    pub func: usize,
    /// Frames kept on this thread below this one, for any user.
    pub depth: i32,
    /// `rax` as the function returned it.
    pub retval: u64,
    /// Calls this thread could not hook (stack full), cumulative.
    pub overrun: u64,
    /// The frame was skipped by a non-local exit (longjmp) and is reported
    /// when detected, not when it returned.
    pub unwound: bool,
}

// The offsets the fast paths' assembly writes these at.
const _: () = assert!(
    offset_of!(GraphEntry, func) == 0
        && offset_of!(GraphEntry, parent_ip) == 8
        && offset_of!(GraphEntry, depth) == 16
        && offset_of!(GraphEntry, site) == 20
        && std::mem::size_of::<GraphEntry>() == 24
        && offset_of!(GraphReturn, func) == 0
        && offset_of!(GraphReturn, depth) == 8
        && offset_of!(GraphReturn, retval) == 16
        && offset_of!(GraphReturn, overrun) == 24
        && offset_of!(GraphReturn, unwound) == 32
        && std::mem::size_of::<GraphReturn>() == 40
);

/// Return registers saved by `return_to_handler`.
#[repr(C)]
#[derive(Debug)]
pub struct RetRegs {
    /// `rax` as the function returned it.
    pub rax: u64,
    /// `rdx` (the high half of a 128-bit return value).
    pub rdx: u64,
    /// `xmm0` (a floating-point return value).
    pub xmm0: u128,
    /// `xmm1` (the high half of a vector or complex return value).
    pub xmm1: u128,
    /// Stack pointer after the traced function's `ret`.
    pub rsp: usize,
    /// The assembly's own copy of `rsp`, which it restores.
    _rsp_again: u64,
}

impl RetRegs {
    pub(super) fn zeroed() -> RetRegs {
        RetRegs {
            rax: 0,
            rdx: 0,
            xmm0: 0,
            xmm1: 0,
            rsp: 0,
            _rsp_again: 0,
        }
    }
}

const _: () = {
    assert!(std::mem::offset_of!(RetRegs, xmm0) == 16);
    assert!(std::mem::offset_of!(RetRegs, rsp) == 48);
    assert!(std::mem::size_of::<RetRegs>() == 64);
};

/// Entry callback: `true` accepts the call (its return callback will run).
/// fgraph's assembly calls it directly, by the C calling convention (an
/// `extern "C" fn`: a panic inside aborts rather than unwinding into the
/// traced program's frames).
pub type EntryFn = extern "C" fn(ent: &GraphEntry, user: &GraphUser, regs: &mut Regs) -> bool;
/// Return callback, called as [`EntryFn`] is.
pub type ReturnFn = extern "C" fn(ret: &GraphReturn, user: &GraphUser, regs: &RetRegs);

/// A client of the function graph.
pub struct GraphUser {
    /// Called at each call's entry.
    pub entry: EntryFn,
    /// Called at each accepted call's return.
    pub ret: ReturnFn,
    /// The client's own data.
    pub private: usize,
    pub(super) filter: Arc<FilterSet>,
    pub(super) subop: Arc<Ops>,
    pub(crate) slot: AtomicI32,
    /// The BITMAP word of the frames the single-user path keeps for this
    /// user: its slot's bit and the epoch it registered at (set before it
    /// can become the sole user).
    pub(crate) frame_word: AtomicU64,
    /// `ThreadState::in_entry` and `reserved_once` as the single-user path
    /// sets them around this user's entry callback, as one word (see
    /// `stack::OFFER_WORD`): the slot (+1), nothing reserved.
    pub(crate) offer_word: AtomicU64,
    /// Whether the registered [`SolePath`] stands in for this user's
    /// callbacks while it is the only user (set before it registers).
    pub(crate) sole_path: std::sync::atomic::AtomicBool,
    /// Whether the registered multi path stands in for this user's
    /// callbacks while every registered user lets it (set before it
    /// registers).
    pub(super) multi_path: std::sync::atomic::AtomicBool,
    /// Words the registered [`SolePath`] reads for this user, at
    /// [`GraphUser::PATH_WORDS`] (their meaning is the path's).
    pub(crate) path_words: [AtomicU64; PATH_WORDS],
    /// Whether this user is also offered the frames a longjmp skipped that
    /// name no user (see
    /// [`GraphUser::offer_unowned_unwinds`]).
    pub(super) unowned_unwinds: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for GraphUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphUser")
            .field("slot", &self.slot())
            .finish()
    }
}

pub(super) extern "C" fn no_op(_: usize, _: usize, _: &Ops, _: &mut Regs) {}

/// Words a [`SolePath`] keeps in each user.
pub(crate) const PATH_WORDS: usize = 4;

impl GraphUser {
    /// Offset of the [`SolePath`]'s words in a user (for its assembly).
    pub(crate) const PATH_WORDS: usize = offset_of!(GraphUser, path_words);

    /// A user with these callbacks, tracing the functions `filter`
    /// selects; `private` is the client's own word. Not yet registered
    /// ([`register_graph`](crate::fgraph::register_graph)).
    pub fn new(
        entry: EntryFn,
        ret: ReturnFn,
        filter: Arc<FilterSet>,
        private: usize,
    ) -> Arc<GraphUser> {
        let subop = Ops::new(no_op, ftrace::OpsFlags::NONE, filter.clone());
        Arc::new(GraphUser {
            entry,
            ret,
            private,
            filter,
            subop,
            slot: AtomicI32::new(-1),
            frame_word: AtomicU64::new(0),
            offer_word: AtomicU64::new(0),
            sole_path: std::sync::atomic::AtomicBool::new(false),
            multi_path: std::sync::atomic::AtomicBool::new(false),
            path_words: [const { AtomicU64::new(0) }; PATH_WORDS],
            unowned_unwinds: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Its return callback is also called (`unwound` set) for frames a
    /// longjmp skipped whose users bits do not name it: frames a signal
    /// handler that never returned found half made (pushed, not yet handed
    /// to every user: its entry callback may have run, its bit not yet
    /// set) or half finished (its bit taken, its callback not done, or
    /// the frame not yet popped). Only the callback
    /// can tell which, and whether the call was its own at all, e.g. from
    /// what it recorded; a user that opts in must return from such a call
    /// without effect when the frame was not its own.
    pub fn offer_unowned_unwinds(&self) {
        self.unowned_unwinds.store(true, Ordering::Release);
    }

    /// Lets the registered [`SolePath`] stand in for this user's callbacks
    /// while it is the only user (before it registers).
    pub(crate) fn let_sole_path_stand_in(&self) {
        self.sole_path.store(true, Ordering::Release);
    }

    /// Lets the registered multi path stand in for this user's callbacks
    /// while two users or more are registered and it stands in for each
    /// (before it registers).
    pub(crate) fn let_multi_path_stand_in(&self) {
        self.multi_path.store(true, Ordering::Release);
    }

    /// Whether the multi path may stand in for it.
    pub(crate) fn multi_path_stands_in(&self) -> bool {
        self.multi_path.load(Ordering::Acquire)
    }

    /// The functions it traces.
    pub fn filter(&self) -> &Arc<FilterSet> {
        &self.filter
    }

    /// The slot while registered.
    #[inline]
    pub fn slot(&self) -> Option<usize> {
        usize::try_from(self.slot.load(Ordering::Acquire)).ok()
    }

    /// This user's variable on the current thread (zero at registration and
    /// at thread start). `None` before the thread's first traced call.
    #[inline]
    pub fn task_var(&self) -> Option<&'static Cell64> {
        let slot = self.slot()?;
        let t = thread();
        if t.stack.get().is_null() {
            None
        } else {
            // SAFETY: the task variable word lives as long as the stack,
            // which is never unmapped.
            Some(unsafe { &*(t.task_var(slot) as *const Cell64) })
        }
    }

    /// Reserves `bytes` (1..=256) of per-call data in the frame being built:
    /// only inside this user's own entry callback, once per call. The memory
    /// is word-aligned and zeroed (a signal handler that looks at it before
    /// the callback writes it, through `retrieve_ancestor`, sees zeros, not
    /// what an earlier frame left); it vanishes if the entry declines.
    pub fn reserve(&self, bytes: usize) -> Option<*mut u8> {
        let slot = self.slot()?;
        let t = thread();
        {
            if t.in_entry.get() != slot as i32
                || t.reserved_once.get()
                || bytes == 0
                || bytes > MAX_RESERVE
            {
                return None;
            }
            let w = bytes.div_ceil(8);
            let cur = t.curr.get();
            let new = cur + w + 1;
            if new >= stack::max_offset() {
                t.reserve_fail.set(t.reserve_fail.get() + 1);
                return None;
            }
            let val = stack::data(stack::offset_of(t.word(cur - 1)) + w + 1, slot, w);
            // Written whole before `curr` publishes them and again after (a
            // handler in between may have used the words), as frames are.
            let write = || {
                for i in cur..new - 1 {
                    t.set_word(i, 0);
                }
                t.set_word(new - 1, val);
            };
            // As a push (stack.rs): this thread's words, compiler fences.
            write();
            compiler_fence(Ordering::SeqCst);
            t.curr.set(new);
            compiler_fence(Ordering::SeqCst);
            write();
            t.reserved_once.set(true);
            // SAFETY: words cur..new-1 belong to the reservation.
            Some(unsafe { t.stack.get().add(cur) as *mut u8 })
        }
    }

    /// Names this user in the BITMAP word of the frame being built, at
    /// once: only inside its own entry callback, which then keeps the call
    /// (fgraph names it there again when the callback returns true, and
    /// takes the name back when it returns false). A tracer that keeps
    /// per-thread state calls it right after changing that state: a signal
    /// handler that leaves the callback by `siglongjmp` from then on
    /// reports the frame to the user as unwound, and its return callback
    /// puts the state back.
    pub(crate) fn name_in_frame(&self) {
        let Some(slot) = self.slot() else {
            return;
        };
        let t = thread();
        if t.in_entry.get() != slot as i32 || t.stack.get().is_null() {
            return;
        }
        // The frame below this user's reservation, if any (its DATA word's
        // offset reaches the frame's start, as a push's BITMAP word does).
        let Some(f) = t.frame_below(t.curr.get()) else {
            return;
        };
        let b = f + stack::FRAME_WORDS;
        let w = t.word(b);
        // Relaxed: published before the user was (registry.rs).
        let own = self.frame_word.load(Ordering::Relaxed);
        // Another user named already (the loop over several): its epoch
        // kept, this user's bit added; else this user's own word.
        let named = match stack::type_of(w) {
            stack::TYPE_BITMAP => w | (own & (0xffff << 12)),
            stack::TYPE_RESERVED => own,
            _ => return,
        };
        t.set_word(b, named);
    }

    /// This user's data in the frame whose callback runs (or is being built).
    pub fn retrieve(&self) -> Option<(*mut u8, usize)> {
        self.retrieve_ancestor(0)
    }

    /// This user's data `k` kept frames down (k = 0: the current frame).
    pub fn retrieve_ancestor(&self, k: usize) -> Option<(*mut u8, usize)> {
        self.retrieve_ancestor_call(k).map(|(p, n, _)| (p, n))
    }

    /// [`GraphUser::retrieve_ancestor`], with the function of that frame's
    /// call (for k ≥ 1; the current frame's is in the callback's event).
    pub fn retrieve_ancestor_call(&self, k: usize) -> Option<(*mut u8, usize, usize)> {
        let slot = self.slot()?;
        let t = thread();
        {
            if t.stack.get().is_null() {
                return None;
            }
            // Top word of the k-th frame from the top.
            let mut top = t.curr.get();
            for _ in 0..k {
                let start = t.frame_below(top)?;
                top = start;
            }
            // (0 while the frame is being built: its header is not final.)
            let func = t.frame_below(top).map_or(0, |f| t.frame_func(f));
            let mut i = top;
            loop {
                if i == 0 {
                    return None;
                }
                let w = t.word(i - 1);
                if stack::type_of(w) != stack::TYPE_DATA {
                    return None; // BITMAP (or RESERVED) reached: none of ours
                }
                let n = stack::data_words(w);
                if stack::data_slot(w) == slot {
                    // SAFETY: the n words below the DATA word are its data.
                    let data = unsafe { t.stack.get().add(i - 1 - n) as *mut u8 };
                    return Some((data, n * 8, func));
                }
                i -= n + 1;
            }
        }
    }

    /// The nearest ancestor frame holding this user's data (k = 1, 2, …).
    pub fn retrieve_nearest_own(&self) -> Option<(*mut u8, usize)> {
        let frames = thread().depth().max(0) as usize + 1;
        (1..=frames).find_map(|k| self.retrieve_ancestor(k))
    }
}

/// A thread variable word.
pub type Cell64 = std::cell::Cell<u64>;

/// Registration errors.
#[derive(Debug)]
pub enum GraphError {
    /// The user is registered already.
    AlreadyRegistered,
    /// The user is not registered.
    NotRegistered,
    /// All 16 slots are taken.
    NoSpace,
    /// The ftrace core refused the user's ops.
    Core(CoreError),
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::AlreadyRegistered => write!(f, "graph user already registered"),
            GraphError::NotRegistered => write!(f, "graph user not registered"),
            GraphError::NoSpace => write!(f, "all {MAX_USERS} graph slots are in use"),
            GraphError::Core(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for GraphError {}
