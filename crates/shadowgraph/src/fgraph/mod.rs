//! Function-graph tracing for up to 16 simultaneous users on one shadow
//! stack per thread (SPEC §4; seeds 000 and 001).
//!
//! fgraph is one *manager ops* of the ftrace core whose subops carry the
//! users' filters, so the manager traces exactly the union of what the users
//! want. Its callback pushes a frame, offers the call to each user's entry
//! callback and, if any accepted, records them in the frame's bitmap and
//! replaces the return address with `return_to_handler`, which later runs
//! the accepting users' return callbacks and resumes at the real address.
//!
//! Deliberate differences from the kernel (SPEC §4.9): no forced bit 0 (only
//! accepting users get returns), slot generations (a reused slot's new owner
//! never gets returns of frames entered before it registered), strict
//! reservations, exact rollback of a failed registration.

pub mod filters;
pub mod stack;

use crate::ftrace::dispatch::ErrnoGuard;
use crate::ftrace::local::CoreLocal;
use crate::ftrace::quiesce::{self, Bracket};
use crate::ftrace::recursion::{held, try_lock_at_rest};
use crate::ftrace::{
    self, dispatch::site_id, try_lock, unlock, CoreError, FilterSet, Group, Ops, Regs,
};
use stack::{thread, ThreadState};
use std::fmt;
use std::mem::offset_of;
use std::sync::atomic::{compiler_fence, AtomicI32, AtomicI64, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

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
    pub func: usize,
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
    pub rax: u64,
    pub rdx: u64,
    pub xmm0: u128,
    pub xmm1: u128,
    /// Stack pointer after the traced function's `ret`.
    pub rsp: usize,
    /// The assembly's own copy of `rsp`, which it restores.
    _rsp_again: u64,
}

impl RetRegs {
    fn zeroed() -> RetRegs {
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
pub type EntryFn = fn(ent: &GraphEntry, user: &GraphUser, regs: &mut Regs) -> bool;
/// Return callback.
pub type ReturnFn = fn(ret: &GraphReturn, user: &GraphUser, regs: &RetRegs);

/// A client of the function graph.
pub struct GraphUser {
    pub entry: EntryFn,
    pub ret: ReturnFn,
    /// The client's own data.
    pub private: usize,
    filter: Arc<FilterSet>,
    subop: Arc<Ops>,
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
    /// Words the registered [`SolePath`] reads for this user, at
    /// [`GraphUser::PATH_WORDS`] (their meaning is the path's).
    pub(crate) path_words: [AtomicU64; PATH_WORDS],
    /// Whether this user, while it is the sole one, is also offered the
    /// frames a longjmp skipped that name no user (see
    /// [`GraphUser::offer_unowned_unwinds`]).
    unowned_unwinds: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for GraphUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphUser")
            .field("slot", &self.slot())
            .finish()
    }
}

fn no_op(_: usize, _: usize, _: &Ops, _: &mut Regs) {}

/// Words a [`SolePath`] keeps in each user.
pub(crate) const PATH_WORDS: usize = 4;

impl GraphUser {
    /// Offset of the [`SolePath`]'s words in a user (for its assembly).
    pub(crate) const PATH_WORDS: usize = offset_of!(GraphUser, path_words);

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
            path_words: [const { AtomicU64::new(0) }; PATH_WORDS],
            unowned_unwinds: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// While this user is the only one, its return callback is also called
    /// (`unwound` set) for frames a longjmp skipped whose users bits are
    /// empty: frames a signal handler that never returned found half made
    /// (pushed, not yet handed to the user) or half finished (handed back,
    /// not yet popped). Only the callback can tell which, e.g. from what it
    /// recorded; a user that opts in must return from such a call without
    /// effect when the frame was not its own.
    pub fn offer_unowned_unwinds(&self) {
        self.unowned_unwinds.store(true, Ordering::Release);
    }

    /// Lets the registered [`SolePath`] stand in for this user's callbacks
    /// while it is the only user (before it registers).
    pub(crate) fn let_sole_path_stand_in(&self) {
        self.sole_path.store(true, Ordering::Release);
    }

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
    AlreadyRegistered,
    NotRegistered,
    /// All 16 slots are taken.
    NoSpace,
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

// --- Global state -------------------------------------------------------------------

/// Published users by slot (null = stub: in-flight frames skip it).
/// Slots whose ARRAY entry is set (a superset while one is being cleared):
/// the general entry visits these only.
static OCCUPIED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
static ARRAY: [AtomicPtr<GraphUser>; MAX_USERS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_USERS];
/// Epoch at which each slot's current owner registered.
static SLOT_EPOCH: [AtomicU64; MAX_USERS] = [const { AtomicU64::new(u64::MAX) }; MAX_USERS];
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// The sole user while exactly one is registered (fast path), else null.
pub(crate) static FAST: AtomicPtr<GraphUser> = AtomicPtr::new(std::ptr::null_mut());
/// FAST when the sole user is one the registered [`SolePath`] stands in
/// for, else null: the path reads this one word to know it may run.
pub(crate) static SOLE_PROVIDED: AtomicPtr<GraphUser> = AtomicPtr::new(std::ptr::null_mut());
/// SOLE_PROVIDED's `frame_word` while it is set, else [`NO_FRAME_WORD`]:
/// a path that pushes frames reads the word it checks and makes them by
/// from here, one load with no user pointer to follow.
pub(crate) static SOLE_FRAME_WORD: AtomicU64 = AtomicU64::new(NO_FRAME_WORD);
/// No frame's last word: its type bits (10..11) are 3, which no word of a
/// stack has (stack::TYPE_*), and a stack's word −1 is 0.
pub(crate) const NO_FRAME_WORD: u64 = u64::MAX;

/// Code a tracer registers to stand in for its callbacks while its user is
/// the only one (SPEC §4.8's fast path, done by the tracer itself): where
/// the manager's trampolines, its site stubs and hijacked returns go. Each
/// entry point comes back to fgraph's general code for what it does not
/// handle: trampoline entries to [`manager_tramp_entry`], site entries and returns to
/// `shadowgraph_graph_site_entry` / `shadowgraph_site_return_general`,
/// hijacked returns to `shadowgraph_return_general`. An address of 0 keeps
/// fgraph's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SolePath {
    /// Where the manager's trampolines hand over instead of fgraph's
    /// caller template.
    pub trampoline_entry: usize,
    /// What the manager's site stubs call in to and return to.
    pub site_entry: usize,
    pub site_return: usize,
    /// Taken instead of the site entry and return if the code could not
    /// have its `fixed_tls!` operands written in (0: they need none).
    pub site_fallback: (usize, usize),
    /// Where `return_to_handler` goes first.
    pub hijacked_return: usize,
}

/// The registered path, and whether the manager has taken it (then it is
/// final).
static SOLE_PATH: Mutex<(SolePath, bool)> = Mutex::new((
    SolePath {
        trampoline_entry: 0,
        site_entry: 0,
        site_return: 0,
        site_fallback: (0, 0),
        hijacked_return: 0,
    },
    false,
));
/// The registered path's `hijacked_return` (0: none), which
/// `return_to_handler` jumps through. Written before the manager exists,
/// so before any return can be hijacked.
static SOLE_HIJACKED_RETURN: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);
/// The site entry the manager's stubs call (0: none, or no stubs), as
/// chosen when it was made.
static SITE_ENTRY_CHOSEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Registers the code that stands in for the callbacks of users marked
/// with [`GraphUser::let_sole_path_stand_in`]. Only before the first user
/// registers (the manager's code is chosen then, for good): false
/// otherwise, and nothing changes.
pub(crate) fn register_sole_path(path: SolePath) -> bool {
    let mut p = SOLE_PATH.lock().unwrap_or_else(|e| e.into_inner());
    if p.1 {
        return false;
    }
    p.0 = path;
    SOLE_HIJACKED_RETURN.store(path.hijacked_return, Ordering::Release);
    true
}

/// The site entry the manager's stubs call, once it is made (0 before,
/// or without site stubs).
pub(crate) fn chosen_site_entry() -> usize {
    SITE_ENTRY_CHOSEN.load(Ordering::Relaxed)
}

/// Frames whose return could not be matched (should stay 0).
static LOST_FRAMES: AtomicU64 = AtomicU64::new(0);

struct Registry {
    /// Free slots, FIFO (`-1` = none): released slots are reused last.
    lru: [i8; MAX_USERS],
    next: usize,
    last: usize,
    active: usize,
    users: [Option<Arc<GraphUser>>; MAX_USERS],
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    lru: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    next: 0,
    last: 0,
    active: 0,
    users: [const { None }; MAX_USERS],
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

static SITE_STUBS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether the manager gives each site where it is alone its own stub
/// (tramp.rs), which calls the traced function so that its return needs no
/// hijack (the default), or has the sites call its trampolines and
/// hijacks returns (to compare). Effective if set before the first user
/// registers.
pub fn set_site_stubs(on: bool) {
    SITE_STUBS.store(on, Ordering::Relaxed);
}

/// The manager ops, made when the first user registers.
static MANAGER: OnceLock<Arc<Ops>> = OnceLock::new();

/// Whether the manager exists (its entry and return code chosen for good).
pub(crate) fn manager_made() -> bool {
    MANAGER.get().is_some() || SOLE_PATH.lock().unwrap_or_else(|e| e.into_inner()).1
}

fn manager() -> &'static Arc<Ops> {
    MANAGER.get_or_init(|| {
        init_tp_offsets();
        quiesce::on_abandoned(forget_event_time);
        // The registered path is final from here on.
        let path = {
            let mut p = SOLE_PATH.lock().unwrap_or_else(|e| e.into_inner());
            p.1 = true;
            p.0
        };
        // Every cell a `fixed_load!` reads is final now (a sole path's are
        // set before it registers), and no code reading one can run before
        // the manager is.
        crate::tls::patch_fixed_loads();
        let tls_done = crate::tls::patch_fixed_tls();
        let site = match path.site_entry {
            _ if !SITE_STUBS.load(Ordering::Relaxed) => (0, 0),
            0 => (
                shadowgraph_graph_site_entry as *const () as usize,
                shadowgraph_site_return_general as *const () as usize,
            ),
            // Code that addresses thread-local state by `fixed_tls!` may
            // not run unpatched: the site entry and return it names
            // instead.
            _ if !tls_done && path.site_fallback.0 != 0 => path.site_fallback,
            e => (e, path.site_return),
        };
        SITE_ENTRY_CHOSEN.store(site.0, Ordering::Release);
        Ops::new_manager_with_entry(
            graph_entry,
            manager_tramp_entry,
            path.trampoline_entry,
            site,
        )
    })
}

static KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();

fn thread_key() -> libc::pthread_key_t {
    *KEY.get_or_init(|| {
        let mut k: libc::pthread_key_t = 0;
        // SAFETY: creating a key with a plain extern "C" destructor.
        unsafe { libc::pthread_key_create(&mut k, Some(thread_exit)) };
        k
    })
}

/// Thread exit: open frames are reported as (unwound) exits, and the stack
/// goes back to the pool.
extern "C" fn thread_exit(_: *mut libc::c_void) {
    let t = thread();
    t.exiting.set(true);
    if t.stack.get().is_null() {
        return;
    }
    let _b = Bracket::enter();
    let r = RetRegs::zeroed();
    while let Some(start) = t.frame_below(t.curr.get()) {
        finish_frame(t, start, &r, true);
    }
    // The flag first, then the pointer (a signal handler's entry reads
    // the pointer only after the flag: ThreadState).
    t.has_stack.set(false);
    compiler_fence(Ordering::SeqCst);
    let s = t.stack.replace(std::ptr::null_mut());
    stack::release(s);
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
        revived_frames: r(&REVIVED_FRAMES),
        ret_addr_visits: r(&RET_ADDR_VISITS),
        overruns: r(&stack::OVERRUNS),
        stacks_mapped: r(&stack::STACKS_MAPPED),
    }
}

/// This thread's current graph depth (−1: no kept frame).
pub fn thread_depth() -> i32 {
    thread().depth()
}

/// Registers a graph user: from now on its entry callback is offered every
/// call its filter selects. At most 16 users (`NoSpace`).
pub fn register_graph(user: &Arc<GraphUser>) -> Result<(), GraphError> {
    let mut r = registry();
    if user.slot().is_some() {
        return Err(GraphError::AlreadyRegistered);
    }
    thread_key();
    quiesce::init();
    let next = r.next;
    let i = r.lru[next];
    if i < 0 {
        return Err(GraphError::NoSpace);
    }
    let i = i as usize;
    r.lru[next] = -1;
    r.next = (r.next + 1) % MAX_USERS;
    stack::zero_task_var_everywhere(i);
    stack::prefill(crate::stop::MAX_THREADS.min(thread_count() + 8));
    r.active += 1;
    if r.active == 2 {
        // Loop mode before any of the new user's sites is patched.
        publish_sole(std::ptr::null_mut());
    }
    let epoch = EPOCH.fetch_add(1, Ordering::AcqRel) + 1;
    SLOT_EPOCH[i].store(epoch, Ordering::Release);
    user.frame_word.store(
        stack::bitmap(stack::FRAME_WORDS, 1 << i, epoch),
        Ordering::Release,
    );
    user.offer_word.store(i as u64 + 1, Ordering::Release);
    user.slot.store(i as i32, Ordering::Release);
    r.users[i] = Some(user.clone());
    let ptr = Arc::as_ptr(user) as *mut GraphUser;
    ARRAY[i].store(ptr, Ordering::Release);
    OCCUPIED.fetch_or(1 << i, Ordering::AcqRel);
    if let Err(e) = ftrace::register_subop(manager(), &user.subop) {
        // Exact rollback.
        ARRAY[i].store(std::ptr::null_mut(), Ordering::Release);
        OCCUPIED.fetch_and(!(1 << i), Ordering::AcqRel);
        r.users[i] = None;
        user.slot.store(-1, Ordering::Release);
        SLOT_EPOCH[i].store(u64::MAX, Ordering::Release);
        r.active -= 1;
        release_slot(&mut r, i);
        quiesce::synchronize();
        set_fast(&r);
        return Err(GraphError::Core(e));
    }
    set_fast(&r);
    Ok(())
}

/// Unregisters a graph user. Returns once none of its callbacks runs or can
/// start; frames it accepted return without calling it.
pub fn unregister_graph(user: &Arc<GraphUser>) -> Result<(), GraphError> {
    let mut r = registry();
    let Some(i) = user.slot() else {
        return Err(GraphError::NotRegistered);
    };
    ARRAY[i].store(std::ptr::null_mut(), Ordering::Release);
    OCCUPIED.fetch_and(!(1 << i), Ordering::AcqRel);
    r.active -= 1;
    publish_sole(std::ptr::null_mut());
    let res = ftrace::unregister_subop(manager(), &user.subop);
    quiesce::synchronize();
    r.users[i] = None;
    SLOT_EPOCH[i].store(u64::MAX, Ordering::Release);
    user.slot.store(-1, Ordering::Release);
    release_slot(&mut r, i);
    set_fast(&r);
    res.map_err(GraphError::Core)
}

fn release_slot(r: &mut Registry, i: usize) {
    let last = r.last;
    r.lru[last] = i as i8;
    r.last = (last + 1) % MAX_USERS;
}

/// Fast path on for a sole user, off otherwise.
fn set_fast(r: &Registry) {
    let sole = if r.active == 1 {
        r.users
            .iter()
            .flatten()
            .next()
            .map(|u| Arc::as_ptr(u) as *mut GraphUser)
    } else {
        None
    };
    publish_sole(sole.unwrap_or(std::ptr::null_mut()));
}

/// FAST and SOLE_PROVIDED for `sole` (null: none). A user stops being
/// either before the grace period that precedes its freeing
/// (unregister_graph).
fn publish_sole(sole: *mut GraphUser) {
    // SAFETY: a non-null `sole` is a registered user, held by the registry.
    let provided = !sole.is_null() && unsafe { &*sole }.sole_path.load(Ordering::Acquire);
    // The word before the user (a path may read both in one sequence;
    // either unpublished sends it the general way).
    SOLE_FRAME_WORD.store(
        if provided {
            // SAFETY: as above.
            unsafe { &*sole }.frame_word.load(Ordering::Acquire)
        } else {
            NO_FRAME_WORD
        },
        Ordering::Release,
    );
    SOLE_PROVIDED.store(
        if provided { sole } else { std::ptr::null_mut() },
        Ordering::Release,
    );
    FAST.store(sole, Ordering::Release);
}

fn thread_count() -> usize {
    let mut v = Vec::with_capacity(4096);
    crate::sys::list_threads(&mut v).map_or(1, |_| v.len())
}

// --- Entry ----------------------------------------------------------------------------

/// What the manager's own trampolines call: `ops_entry` with the callback
/// called directly (no indirect call, no per-ops checks the manager never
/// needs). Its trampolines are the args variant: the action is ignored.
pub(crate) extern "C" fn manager_tramp_entry(
    regs: *mut u8,
    data: usize,
) -> crate::tramp::EntryAction {
    // SAFETY: the trampoline passes its frame's Regs and its leaked slot.
    let (regs, slot) = unsafe {
        (
            &mut *(regs as *mut Regs),
            &*(data as *const crate::ftrace::OpsSlot),
        )
    };
    if let Some(_b) = Bracket::enter_at_rest(regs.parent_slot as usize) {
        let _e = ErrnoGuard::save();
        if !slot.ops.load(Ordering::Acquire).is_null() {
            let t = thread();
            let fast = FAST.load(Ordering::Acquire);
            if !fast.is_null() && t.ready() {
                if let Some(bit) = lock_graph(t, true) {
                    // SAFETY: a published user outlives the grace period
                    // that follows its removal from FAST; we are inside
                    // the bracket.
                    enter_fast(t, unsafe { &*fast }, regs);
                    unlock_graph(t, bit);
                    return crate::tramp::EntryAction::default();
                }
            }
            graph_entry_inline(regs.ip, regs.parent_ip, regs);
        }
        return crate::tramp::EntryAction::default();
    }
    let _b = Bracket::enter_at(regs.parent_slot as usize);
    let _e = ErrnoGuard::save();
    let ops = slot.ops.load(Ordering::Acquire);
    if !ops.is_null() {
        graph_entry_inline(regs.ip, regs.parent_ip, regs);
    }
    crate::tramp::EntryAction::default()
}

// --- Site stubs: the single user's fast path in assembly -----------------------------
//
// Both sides below first try what `manager_tramp_entry`/`enter_fast` and
// `graph_return`/`return_fast` do for a thread at rest with one user, with
// the user's callback called through a small Rust function; anything else
// (the bracket or a recursion bit held, no errno cached yet, no stack, not
// ready, several users or none, frames a longjmp left, a full stack, a frame
// kept for another epoch) goes the general way untouched, inside Rust.
// The thread-local state is reached at its offset from the thread pointer
// (initial-exec TLS: the same in every thread), see `init_tp_offsets`.

/// Offsets from the thread pointer of the core's and fgraph's thread-local
/// state (also read by a registered [`SolePath`]).
pub(crate) static TP_LOCAL: AtomicI64 = AtomicI64::new(0);
pub(crate) static TP_THREAD: AtomicI64 = AtomicI64::new(0);

/// Computes [`TP_LOCAL`] and [`TP_THREAD`] (before any site can reach the
/// code that reads them).
pub(crate) fn init_tp_offsets() {
    let tp: usize;
    // SAFETY: reads the thread pointer (fs:0 holds it, x86-64 TLS ABI).
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    let off = |a: usize| a.wrapping_sub(tp) as i64;
    TP_LOCAL.store(
        off(crate::ftrace::local::local() as *const CoreLocal as usize),
        Ordering::Relaxed,
    );
    TP_THREAD.store(
        off(thread() as *const ThreadState as usize),
        Ordering::Relaxed,
    );
}

// Leaves the bracket entered at rest (depth 1 → 0, exit generation + 1, in
// one instruction); clobbers rcx.
macro_rules! leave_at_rest {
    () => {
        concat!(
            crate::fixed_load!("rcx", "tp_local"),
            "mov rcx, qword ptr fs:[rcx + {l_word}]\n",
            "add qword ptr [rcx], 0xffff\n",
        )
    };
}

// The recursion bit given back (graph_busy 0 again: the fast paths take
// it at rest), errno as saved at `$errno`, the bracket left. Clobbers
// rax, rcx, rdx.
macro_rules! fast_done {
    ($errno:literal) => {
        concat!(
            crate::fixed_load!("rcx", "tp_local"),
            "and dword ptr fs:[rcx + {l_rec}], {unbit}\n",
            crate::fixed_load!("rdx", "tp_thread"),
            "mov byte ptr fs:[rdx + {t_busy}], 0\n",
            "mov rax, qword ptr fs:[rcx + {l_errno}]\n",
            "mov edx, dword ptr [rsp + ",
            $errno,
            "]\n",
            "mov dword ptr [rax], edx\n",
            "mov rcx, qword ptr fs:[rcx + {l_word}]\n",
            "add qword ptr [rcx], 0xffff\n",
        )
    };
}

// The frame {R, rdx, slot, RESERVED} at word r8 of stack rdi (R's slot is
// rbp+16). Clobbers rax.
macro_rules! frame_at_r8 {
    () => {
        concat!(
            "mov rax, [rbp + 16]\n",
            "mov [rdi + r8*8], rax\n",
            "mov [rdi + r8*8 + 8], rdx\n",
            "lea rax, [rbp + 16]\n",
            "mov [rdi + r8*8 + 16], rax\n",
            "mov qword ptr [rdi + r8*8 + 24], {frame_words}\n",
        )
    };
}

// Entry. Register contract: reached by a stub's `call [ENTRY]` (tramp.rs):
// [rsp] = stub+13, [rsp+8] = R, every argument register live, r11 the
// site (unused here: r11 gets the manager's ops slot in that arena, from
// the stub, and the site is read from the stub too). The frame is the
// manager's caller's (tramp.rs, args variant: a Regs, with the
// stub's site as regs.ip) and 0x48 more bytes: 0x128 the ops slot, 0x130
// the saved errno, 0x138 the new frame's start, 0x140 the user, 0x148 the
// interrupted callback's in_entry and reserved_once (as `offer` keeps
// them), 0x150 the GraphEntry. Returns with
// ZF=1 if the call was hooked (the stub then calls the body, whose return
// comes back by the stub), ZF=0 if not, every argument register restored.
// The general way hooks by hijacking the slot, which is how ZF is set then.
std::arch::global_asm!(
    ".pushsection .text.shadowgraph_fgraph,\"ax\",@progbits",
    ".globl shadowgraph_graph_site_entry",
    ".hidden shadowgraph_graph_site_entry",
    "shadowgraph_graph_site_entry:",
    "endbr64",
    "mov r11, [rsp]",
    "mov r11, [r11 + {data_off}]",
    "push rbp",
    "mov rbp, rsp",
    "sub rsp, 0x170",
    "and rsp, -16",
    "mov [rsp + 0x128], r11",
    crate::tramp::save_args!("mov r11, [rbp + 8]\nmov r11, [r11 + {site_off}]\n"),
    // One user (else the general way at once), the thread at rest (a
    // bracket word at depth 0, no recursion bit) with errno's location
    // known: enter the bracket, anchored at the return slot.
    "cmp qword ptr [rip + {fast}], 0",
    "je 70f",
    crate::fixed_load!("rcx", "tp_local"),
    "mov rdx, qword ptr fs:[rcx + {l_word}]",
    "test rdx, rdx",
    "jz 70f",
    "test word ptr [rdx], 0xffff",
    "jnz 70f",
    "cmp dword ptr fs:[rcx + {l_rec}], 0",
    "jne 70f",
    "cmp qword ptr fs:[rcx + {l_errno}], 0",
    "je 70f",
    "lea rax, [rbp + 16]",
    crate::bracket_enter_at_rest!("rcx", "rdx"),
    // The manager still registered, one user, the thread ready.
    "mov rax, [rsp + 0x128]",
    "cmp qword ptr [rax], 0",
    "je 71f",
    "mov rsi, [rip + {fast}]",
    "test rsi, rsi",
    "jz 71f",
    crate::fixed_load!("r9", "tp_thread"),
    "cmp qword ptr fs:[r9 + {t_blockers}], {hookable}",
    "jne 71f",
    "mov rdi, qword ptr fs:[r9 + {t_stack}]",
    // r8 = curr, r10 = depth: one deeper than the top frame's, 0 without
    // one; a top frame whose slot is not above ours: the general way.
    "mov r8, qword ptr fs:[r9 + {t_curr}]",
    "xor r10d, r10d",
    "mov rax, [rdi + r8*8 - 8]",
    "and eax, 0x3ff",
    "jz 4f",
    "cmp rax, r8",
    "jae 4f",
    "mov rdx, r8",
    "sub rdx, rax", // f + 1
    "lea rax, [rbp + 16]",
    "cmp [rdi + rdx*8 + 8], rax",
    "jb 71f",
    "ja 6f",
    // The same slot: a tail call from the top frame's function nests in
    // it (as `enter` decides); a fresh call in a dead frame's slot goes
    // the general way, which drops that frame.
    "mov r10, [rbp + 16]",
    "mov rax, [rdi + rdx*8]",
    "shl rax, 16",
    "shr rax, 16",
    "call shadowgraph_tail_call_from",
    "jne 71f",
    "6:",
    "mov r10, [rdi + rdx*8]",
    "shr r10, 48",
    "inc r10",
    "4:",
    // Room for the frame, else the general way counts an overrun.
    "cmp r8, [rip + {room_limit}]",
    "jae 71f",
    // The recursion bit and errno, as `lock_graph` (at rest: graph_busy
    // 1) and ErrnoGuard.
    "mov dword ptr fs:[rcx + {l_rec}], {bit}",
    "mov byte ptr fs:[r9 + {t_busy}], 1",
    "mov rax, qword ptr fs:[rcx + {l_errno}]",
    "mov eax, dword ptr [rax]",
    "mov dword ptr [rsp + 0x130], eax",
    // The frame, written whole before curr publishes it and again after
    // (as ThreadState::push): a signal handler may land between two of the
    // first writes and push and pop its own frame over them, leaving some
    // words its own and others ours, so no one word tells whether it did.
    "mov rdx, r10",
    "shl rdx, 48",
    "or rdx, [rsp + 0xc8]",
    frame_at_r8!(),
    "lea rax, [r8 + 4]",
    "mov qword ptr fs:[r9 + {t_curr}], rax",
    frame_at_r8!(),
    "mov [rsp + 0x138], r8",
    "mov [rsp + 0x140], rsi",
    // The offer (as `offer`): in_entry = the user's slot, reserved_once
    // cleared (one word: stack::OFFER_WORD), put back after the callback.
    "mov rax, qword ptr fs:[r9 + {t_offer}]",
    "mov [rsp + 0x148], rax",
    "mov rax, [rsi + {u_offer}]",
    "mov qword ptr fs:[r9 + {t_offer}], rax",
    "mov rax, [rsp + 0xc8]",
    "mov [rsp + 0x150], rax",
    "mov rax, [rbp + 16]",
    "mov [rsp + 0x158], rax",
    "mov dword ptr [rsp + 0x160], r10d",
    "mov rax, [rbp + 8]",
    "mov eax, dword ptr [rax + {id_off}]",
    "mov dword ptr [rsp + 0x164], eax",
    "lea rdi, [rsp + 0x150]",
    "mov rdx, rsp",
    "call {call_entry}",
    crate::fixed_load!("rcx", "tp_thread"),
    "mov rdx, [rsp + 0x148]",
    "mov qword ptr fs:[rcx + {t_offer}], rdx",
    "mov r8, [rsp + 0x138]",
    "test al, al",
    "jz 5f",
    // Kept for the user: its BITMAP word.
    "mov rdi, qword ptr fs:[rcx + {t_stack}]",
    "mov rsi, [rsp + 0x140]",
    "mov rax, [rsi + {u_frame_word}]",
    "mov [rdi + r8*8 + 24], rax",
    fast_done!("0x130"),
    "cmp rsp, rsp",
    crate::tramp::restore_args!(),
    "leave",
    "ret",
    // Declined: the frame goes.
    "5:",
    "mov qword ptr fs:[rcx + {t_curr}], r8",
    fast_done!("0x130"),
    "test rsp, rsp",
    crate::tramp::restore_args!(),
    "leave",
    "ret",
    // The general way, from 71 with the bracket entered (left first).
    "71:",
    leave_at_rest!(),
    "70:",
    // The stub's site id for `site_id`, for the length of the call (id
    // first: a handler sees the old ip or both).
    crate::fixed_load!("rcx", "tp_local"),
    "mov rax, [rbp + 8]",
    "mov eax, dword ptr [rax + {id_off}]",
    "mov dword ptr fs:[rcx + {l_hint_id}], eax",
    "mov rax, [rsp + 0xc8]",
    "mov qword ptr fs:[rcx + {l_hint_ip}], rax",
    "mov rdi, rsp",
    "mov rsi, [rsp + 0x128]",
    "call {manager_entry}",
    crate::fixed_load!("rcx", "tp_local"),
    "mov qword ptr fs:[rcx + {l_hint_ip}], 0",
    "lea r11, [rip + shadowgraph_return_to_handler]",
    "cmp [rbp + 16], r11",
    crate::tramp::restore_args!(),
    "leave",
    "ret",
    // Return through a stub. Register contract: jumped to by the stub's
    // `jmp [RETURN]` at its return point: rsp = the returning call's
    // slot + 8, aligned or not (gcc calls functions it knows need no
    // alignment without it); rax/rdx/xmm0/xmm1 hold the result; the other
    // caller-saved registers are dead. The frame, 16-byte aligned below
    // rsp: a RetRegs (64 bytes; its rsp and the word after it hold rsp as
    // it came), 64 the saved errno, 72 the frame's start, 80 the
    // GraphReturn (40 bytes). Resumes at the real return address by `ret`
    // (the return-stack predictor holds it, the stub's call having
    // returned) with the result and rsp restored.
    ".globl shadowgraph_site_return_general",
    ".hidden shadowgraph_site_return_general",
    "shadowgraph_site_return_general:",
    "endbr64",
    "mov r11, rsp",
    "sub rsp, 128",
    "and rsp, -16",
    "mov [rsp], rax",
    "mov [rsp + 8], rdx",
    "movaps [rsp + 16], xmm0",
    "movaps [rsp + 32], xmm1",
    "mov [rsp + 48], r11",
    "mov [rsp + 56], r11",
    crate::fixed_load!("rcx", "tp_local"),
    "mov rdx, qword ptr fs:[rcx + {l_word}]",
    "test rdx, rdx",
    "jz 60f",
    "test word ptr [rdx], 0xffff",
    "jnz 60f",
    "cmp dword ptr fs:[rcx + {l_rec}], 0",
    "jne 60f",
    "cmp qword ptr fs:[rcx + {l_errno}], 0",
    "je 60f",
    "cmp qword ptr [rip + {fast}], 0",
    "je 60f",
    "mov rax, [rsp + 56]",
    "sub rax, 8",
    crate::bracket_enter_at_rest!("rcx", "rdx"),
    // The top frame f (r10) is the returning call's (its slot) and was
    // kept for the sole user alone (its BITMAP word).
    "mov rsi, [rip + {fast}]",
    "test rsi, rsi",
    "jz 61f",
    crate::fixed_load!("r9", "tp_thread"),
    "mov rdi, qword ptr fs:[r9 + {t_stack}]",
    "test rdi, rdi",
    "jz 61f",
    "mov r10, qword ptr fs:[r9 + {t_curr}]",
    "mov rax, [rdi + r10*8 - 8]",
    "and eax, 0x3ff",
    "jz 61f",
    "cmp rax, r10",
    "jae 61f",
    "sub r10, rax",
    "dec r10",
    "mov rax, [rsp + 56]",
    "sub rax, 8",
    "cmp [rdi + r10*8 + 16], rax",
    "jne 61f",
    "mov rax, [rdi + r10*8 + 24]",
    "cmp rax, [rsi + {u_frame_word}]",
    "jne 61f",
    "mov dword ptr fs:[rcx + {l_rec}], {bit}",
    "mov byte ptr fs:[r9 + {t_busy}], 1",
    "mov rax, qword ptr fs:[rcx + {l_errno}]",
    "mov eax, dword ptr [rax]",
    "mov dword ptr [rsp + 64], eax",
    // The frame's users taken before the callback (as finish_frame).
    "and dword ptr [rdi + r10*8 + 24], {users_clear}",
    "mov [rsp + 72], r10",
    // The GraphReturn: func and depth from the frame, rax, the overruns.
    "mov rax, [rdi + r10*8 + 8]",
    "mov rdx, rax",
    "shr rdx, 48",
    "mov dword ptr [rsp + 88], edx",
    "shl rax, 16",
    "shr rax, 16",
    "mov [rsp + 80], rax",
    "mov rax, [rsp]",
    "mov [rsp + 96], rax",
    "mov rax, qword ptr fs:[r9 + {t_overrun}]",
    "mov [rsp + 104], rax",
    "mov byte ptr [rsp + 112], 0",
    "lea rdi, [rsp + 80]",
    "mov rdx, rsp",
    "call {call_ret}",
    // Pop the frame; resume at its real return address.
    "mov r10, [rsp + 72]",
    crate::fixed_load!("rcx", "tp_thread"),
    "mov rdi, qword ptr fs:[rcx + {t_stack}]",
    "mov r11, [rdi + r10*8]",
    "mov qword ptr fs:[rcx + {t_curr}], r10",
    fast_done!("64"),
    "jmp 62f",
    "61:",
    leave_at_rest!(),
    "60:",
    "mov rdi, rsp",
    "call {ret}",
    "mov r11, rax",
    "62:",
    "mov rax, [rsp]",
    "mov rdx, [rsp + 8]",
    "movaps xmm0, [rsp + 16]",
    "movaps xmm1, [rsp + 32]",
    "mov rsp, [rsp + 56]",
    "push r11",
    "ret",
    // Whether a new call whose return slot is the top frame's is a tail
    // call from that frame's function (`enter`: not `fresh`), for the fast
    // paths here and in a registered SolePath. Register contract: reached by
    // `call`; r10 = the return address in the slot, rax = the top frame's
    // function. ZF=1 if r10 is `return_to_handler` (the frame hijacked the
    // slot) or the return point of a site stub of that function (inside a
    // registered block, with that function as its site literal), else
    // ZF=0. Every register preserved; no stack beyond its own pushes.
    ".globl shadowgraph_tail_call_from",
    ".hidden shadowgraph_tail_call_from",
    "shadowgraph_tail_call_from:",
    "push rcx",
    "push rdx",
    "push r11",
    "lea rdx, [rip + shadowgraph_return_to_handler]",
    "cmp r10, rdx",
    "je 3f",
    "mov rcx, [rip + {stub_block_count}]",
    "lea r11, [rip + {stub_blocks}]",
    "1:",
    "sub rcx, 1",
    "jb 2f",
    // r10 within [base, base + len − site − 8]: its site literal is in the
    // block.
    "mov rdx, r10",
    "sub rdx, [r11]",
    "jb 4f",
    "add rdx, {site_from_return} + 8",
    "cmp rdx, [r11 + 8]",
    "ja 4f",
    "cmp rax, [r10 + {site_from_return}]",
    "je 3f",
    "4:",
    "add r11, {stub_block_bytes}",
    "jmp 1b",
    "2:",
    "pop r11",
    "pop rdx",
    "pop rcx",
    "test rsp, rsp",
    "ret",
    "3:",
    "pop r11",
    "pop rdx",
    "pop rcx",
    "cmp rsp, rsp",
    "ret",
    ".popsection",
    stub_block_count = sym crate::tramp::STUB_BLOCK_COUNT,
    stub_blocks = sym crate::tramp::STUB_BLOCKS,
    stub_block_bytes = const std::mem::size_of::<crate::tramp::StubBlock>(),
    site_from_return = const crate::tramp::SITE_STUB_SITE_FROM_RETURN,
    manager_entry = sym manager_tramp_entry,
    call_entry = sym call_entry,
    call_ret = sym call_return,
    ret = sym graph_return,
    fast = sym FAST,
    tp_local = sym TP_LOCAL,
    tp_thread = sym TP_THREAD,
    l_word = const offset_of!(CoreLocal, word),
    l_rec = const offset_of!(CoreLocal, rec),
    l_anchor = const offset_of!(CoreLocal, outer_anchor),
    l_errno = const offset_of!(CoreLocal, errno),
    t_stack = const offset_of!(ThreadState, stack),
    t_curr = const offset_of!(ThreadState, curr),
    t_blockers = const stack::BLOCKERS,
    hookable = const stack::HOOKABLE,
    t_busy = const std::mem::offset_of!(ThreadState, graph_busy),
    t_offer = const stack::OFFER_WORD,
    t_overrun = const offset_of!(ThreadState, overrun),
    u_frame_word = const offset_of!(GraphUser, frame_word),
    u_offer = const offset_of!(GraphUser, offer_word),
    room_limit = sym stack::FAST_PUSH_LIMIT,
    frame_words = const stack::FRAME_WORDS,
    bit = const 1u32 << (Group::Graph as u32),
    unbit = const !(1i32 << (Group::Graph as u32)),
    // The users' bits (12..27) lie in the word's low half.
    users_clear = const !(0xffffu32 << 12),
    site_off = const crate::tramp::SITE_STUB_SITE_FROM_RET,
    data_off = const crate::tramp::SITE_STUB_DATA_FROM_RET,
    id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
    l_hint_ip = const offset_of!(CoreLocal, site_hint_ip),
    l_hint_id = const offset_of!(CoreLocal, site_hint_id),
);

/// The sole user's entry callback, from the site entry's fast path (which
/// did what `offer` does around it). The callbacks are Rust functions:
/// the assembly reaches them through these two.
extern "C" fn call_entry(ent: &GraphEntry, u: &GraphUser, regs: &mut Regs) -> bool {
    (u.entry)(ent, u, regs)
}

/// The sole user's return callback, from the site return's fast path.
extern "C" fn call_return(ev: &GraphReturn, u: &GraphUser, r: &RetRegs) {
    (u.ret)(ev, u, r)
}

extern "C" {
    fn shadowgraph_graph_site_entry();
    fn shadowgraph_site_return_general();
}

/// The manager's callback (SPEC §4.3), when reached through the core's
/// dispatch rather than the manager's own trampolines.
fn graph_entry(ip: usize, parent_ip: usize, _ops: &Ops, regs: &mut Regs) {
    graph_entry_inline(ip, parent_ip, regs)
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
fn lock_graph(t: &ThreadState, at_rest: bool) -> Option<u32> {
    let bit = if at_rest {
        try_lock_at_rest(Group::Graph)?
    } else {
        try_lock(Group::Graph)?
    };
    t.graph_busy.set(held(Group::Graph));
    compiler_fence(Ordering::SeqCst);
    Some(bit)
}

/// Gives back a bit of [`lock_graph`].
#[inline(always)]
fn unlock_graph(t: &ThreadState, bit: u32) {
    unlock(bit);
    t.graph_busy.set(held(Group::Graph));
}

#[inline(always)]
fn graph_entry_inline(ip: usize, parent_ip: usize, regs: &mut Regs) {
    let t = thread();
    if t.stack.get().is_null() || t.exiting.get() || t.pause.get() > 0 || t.unhooked.get() {
        // Rare states, kept off the common path.
        if !prepare_slow(t, regs) {
            return;
        }
    }
    let Some(bit) = lock_graph(t, false) else {
        return;
    };
    enter(t, ip, parent_ip, regs);
    unlock_graph(t, bit);
}

/// The thread has no stack yet, is exiting or paused, or an unwinder left
/// its frames unhooked: returns whether the call may be hooked.
#[cold]
fn prepare_slow(t: &ThreadState, regs: &Regs) -> bool {
    if t.exiting.get() || t.pause.get() > 0 {
        return false;
    }
    if t.stack.get().is_null() && !attach_stack(t) {
        return false;
    }
    if t.unhooked.get() {
        let Some(bit) = lock_graph(t, false) else {
            return false;
        };
        rehook_in(t, regs.parent_slot as usize);
        unlock_graph(t, bit);
    }
    true
}

#[cold]
fn attach_stack(t: &ThreadState) -> bool {
    let s = stack::acquire();
    if s.is_null() {
        return false;
    }
    // SAFETY: a stack just taken from the pool (or mapped) is ours alone.
    unsafe { stack::clear_task_vars(s) };
    t.curr.set(0);
    compiler_fence(Ordering::SeqCst);
    t.stack.set(s);
    compiler_fence(Ordering::SeqCst);
    t.has_stack.set(true);
    if let Some(&k) = KEY.get() {
        // SAFETY: a valid key; any non-null value arms the destructor.
        unsafe { libc::pthread_setspecific(k, std::ptr::dangling::<libc::c_void>()) };
    }
    true
}

/// The single user's entry (SPEC §4.7): the thread is at rest (outside
/// every bracket, holding no recursion bit), attached and hooked, and `u`
/// is the sole user. As [`enter`] without the loop over slots; frames a
/// longjmp left go the general way.
#[inline(always)]
fn enter_fast(t: &ThreadState, u: &GraphUser, regs: &mut Regs) {
    let (ip, parent_ip, parent_slot) = (regs.ip, regs.parent_ip, regs.parent_slot);
    let depth = match t.frame_below(t.curr.get()) {
        None => 0,
        Some(f) if t.word(f + 2) as usize > parent_slot as usize => t.frame_depth(f) + 1,
        // A tail call from f's function nests in f, as in `enter`.
        Some(f) if t.word(f + 2) as usize == parent_slot as usize && is_hijack(parent_ip) => {
            t.frame_depth(f) + 1
        }
        Some(_) => return enter(t, ip, parent_ip, regs),
    };
    let Some(b) = t.push(parent_ip, ip, parent_slot as usize, depth) else {
        return;
    };
    let word = u.frame_word.load(Ordering::Relaxed);
    let ent = GraphEntry {
        func: ip,
        parent_ip,
        depth: depth as i32,
        site: crate::ftrace::dispatch::site_hint(ip).unwrap_or(u32::MAX),
    };
    let i = stack::bitmap_users(word).trailing_zeros() as usize;
    if !offer(t, u, i, &ent, regs) {
        t.curr.set(b - stack::FRAME_WORDS);
        return;
    }
    t.set_word(b, word);
    compiler_fence(Ordering::SeqCst);
    // SAFETY: as in `enter`.
    unsafe { *parent_slot = return_to_handler() };
}

#[inline]
fn enter(t: &ThreadState, ip: usize, parent_ip: usize, regs: &mut Regs) {
    let parent_slot = regs.parent_slot;
    // Normally the new call's return slot lies strictly below the top
    // frame's. Not so after a non-local exit skipped frames.
    let mut top = t.frame_below(t.curr.get());
    if let Some(f) = top {
        if (t.word(f + 2) as usize) <= parent_slot as usize {
            drop_dead_frames(t, parent_slot as usize, parent_ip);
            top = t.frame_below(t.curr.get());
        }
    }
    // One deeper than the frame below (kept in each frame, so right however
    // the frames below came and went).
    let depth = top.map_or(0, |f| t.frame_depth(f) + 1);
    let Some(b) = t.push(parent_ip, ip, parent_slot as usize, depth) else {
        return;
    };
    let g = EPOCH.load(Ordering::Acquire);
    let ent = GraphEntry {
        func: ip,
        parent_ip,
        depth: depth as i32,
        site: crate::ftrace::dispatch::site_hint(ip).unwrap_or(u32::MAX),
    };
    let mut bits: u16 = 0;
    let fast = FAST.load(Ordering::Acquire);
    if !fast.is_null() {
        // SAFETY: a published user outlives the grace period that follows
        // its removal from FAST.
        let u = unsafe { &*fast };
        if let Some(i) = u.slot() {
            if offer(t, u, i, &ent, regs) {
                bits = 1 << i;
            }
        }
    } else {
        let site = site_id(ip);
        let mut occupied = OCCUPIED.load(Ordering::Acquire);
        t.event_time.store(stack::EVENT_OPEN, Ordering::Relaxed);
        while occupied != 0 {
            let i = occupied.trailing_zeros() as usize;
            occupied &= occupied - 1;
            let u = ARRAY[i].load(Ordering::Acquire);
            if u.is_null() || SLOT_EPOCH[i].load(Ordering::Acquire) > g {
                continue;
            }
            // SAFETY: as above.
            let u = unsafe { &*u };
            if site.is_some_and(|s| u.filter.pair().contains(s)) && offer(t, u, i, &ent, regs) {
                bits |= 1 << i;
            }
        }
        t.event_time.store(0, Ordering::Relaxed);
    }
    if bits == 0 {
        t.curr.set(b - stack::FRAME_WORDS);
        return;
    }
    t.set_word(b, stack::bitmap(stack::FRAME_WORDS, bits, g));
    compiler_fence(Ordering::SeqCst);
    // SAFETY: parent_slot is the traced function's return-address slot on
    // this thread's stack; the frame recording it is complete.
    unsafe { *parent_slot = return_to_handler() };
}

/// Pops (reporting unwound exits) the frames a longjmp or an exception
/// skipped without any traced ancestor returning since: those whose return
/// slot lies below the new call's `slot` on this stack, and one using that
/// very slot if the slot now holds a fresh return address (`parent_ip`; a
/// tail call would find the handler there). Frames recorded on another
/// stack (we run on the alternate signal stack) are never compared.
#[cold]
fn drop_dead_frames(t: &ThreadState, slot: usize, parent_ip: usize) {
    let fresh = !is_hijack(parent_ip);
    let dead = |top: usize| {
        let retp = t.word(top + 2) as usize;
        retp < slot || (retp == slot && fresh)
    };
    // A tail call (the top frame's slot, its return point there) drops
    // nothing: known before asking the kernel about the signal stack,
    // which optimised code's tail calls would otherwise pay on every call.
    if !t.frame_below(t.curr.get()).is_some_and(dead) {
        return;
    }
    // A signal handler that interrupted our code (a bracket open below
    // this call's) may find on top the frame the interrupted code is
    // publishing (written, published, about to be written again) holding
    // what another handler, which ran just before the publish, left in
    // its words: a frame of that handler's, whose slot is this handler's
    // own. Nothing is dropped from inside a handler: a frame dead indeed
    // goes when a call below it returns (unwind_to) or at the next entry
    // outside one. (Two handlers in a row at those two points: the
    // interrupted call lost its frame and its return aborted the program,
    // about once in 400 runs of `tests/cli.rs`'s alarm program under load.)
    if crate::ftrace::quiesce::bracket_depth() > 1 {
        return;
    }
    let mut ss: libc::stack_t = libc::stack_t {
        ss_sp: std::ptr::null_mut(),
        ss_flags: 0,
        ss_size: 0,
    };
    // SAFETY: querying the alternate signal stack (async-signal-safe).
    if unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) } == 0
        && ss.ss_flags & libc::SS_ONSTACK != 0
    {
        return;
    }
    let r = RetRegs::zeroed();
    while let Some(top) = t.frame_below(t.curr.get()).filter(|&f| dead(f)) {
        finish_frame(t, top, &r, true);
    }
}

/// Offers the call to user `u` in slot `i`; a declining user's data goes.
#[inline]
fn offer(t: &ThreadState, u: &GraphUser, i: usize, ent: &GraphEntry, regs: &mut Regs) -> bool {
    let save = t.curr.get();
    // Restored, not reset: this may be a signal handler's call that
    // interrupted another entry callback, which may still reserve.
    let outer = (t.in_entry.get(), t.reserved_once.get());
    t.in_entry.set(i as i32);
    t.reserved_once.set(false);
    let ok = (u.entry)(ent, u, regs);
    t.in_entry.set(outer.0);
    t.reserved_once.set(outer.1);
    if !ok {
        t.curr.set(save);
    }
    ok
}

// --- Return ---------------------------------------------------------------------------

// The general return: RetRegs saved (16-byte aligned below rsp, which may
// not be: its rsp and the word after it hold rsp as it came), graph_return
// called, the real return address left in r11, the return registers and
// rsp restored. r11 is dead at a return.
macro_rules! return_body {
    () => {
        concat!(
            "mov r11, rsp\n",
            "sub rsp, 64\n",
            "and rsp, -16\n",
            "mov [rsp], rax\n",
            "mov [rsp + 8], rdx\n",
            "movaps [rsp + 16], xmm0\n",
            "movaps [rsp + 32], xmm1\n",
            "mov [rsp + 48], r11\n",
            "mov [rsp + 56], r11\n",
            "mov rdi, rsp\n",
            "call {ret}\n",
            "mov r11, rax\n",
            "mov rax, [rsp]\n",
            "mov rdx, [rsp + 8]\n",
            "movaps xmm0, [rsp + 16]\n",
            "movaps xmm1, [rsp + 32]\n",
            "mov rsp, [rsp + 56]\n",
        )
    };
}

// return_to_handler: where a hijacked return lands.
// Entered by the traced function's `ret`: rsp = its return slot + 8,
// aligned or not; rax/rdx and xmm0/xmm1 hold the return value (x87 st0,
// for long double, is never touched by Rust code). Saves them in a RetRegs,
// calls graph_return (which yields the real return address), restores them
// and jumps there through r11. Everything else is dead at a return or
// callee-saved in Rust.
std::arch::global_asm!(
    ".pushsection .text.shadowgraph_fgraph,\"ax\",@progbits",
    ".globl shadowgraph_return_to_handler",
    ".hidden shadowgraph_return_to_handler",
    "shadowgraph_return_to_handler:",
    "endbr64",
    // The registered sole path first, if any; it comes back to the
    // general one below for anything unusual. (r11 is dead at a return.)
    "mov r11, qword ptr [rip + {sole_return}]",
    "test r11, r11",
    "jz 1f",
    "jmp r11",
    "1:",
    ".globl shadowgraph_return_general",
    ".hidden shadowgraph_return_general",
    "shadowgraph_return_general:",
    return_body!(),
    "jmp r11",
    ".popsection",
    ret = sym graph_return,
    sole_return = sym SOLE_HIJACKED_RETURN,
);

extern "C" {
    fn shadowgraph_return_to_handler();
}

/// The address hijacked return slots hold.
pub fn return_to_handler() -> usize {
    shadowgraph_return_to_handler as *const () as usize
}

/// Whether a return slot holding `addr` was taken over by us: hijacked
/// (`return_to_handler`) or filled by a site stub's call (its return
/// point); the real address is then in a shadow frame.
pub fn is_hijack(addr: usize) -> bool {
    addr == return_to_handler() || crate::tramp::is_stub_return(addr)
}

extern "C" fn graph_return(r: &mut RetRegs) -> usize {
    // Anchored at the returning call's slot.
    let slot = r.rsp - 8;
    if let Some(_b) = Bracket::enter_at_rest(slot) {
        let _e = ErrnoGuard::save();
        let t = thread();
        if let Some(f) = t.frame_below(t.curr.get()) {
            if t.word(f + 2) as usize == slot {
                let w = t.word(f + stack::FRAME_WORDS);
                let fast = FAST.load(Ordering::Acquire);
                // SAFETY: as in manager_tramp_entry.
                if !fast.is_null() && w == unsafe { &*fast }.frame_word.load(Ordering::Relaxed) {
                    if let Some(bit) = lock_graph(t, true) {
                        // SAFETY: as above.
                        return return_fast(t, f, w, unsafe { &*fast }, r, bit);
                    }
                }
            }
        }
        return return_general(t, slot, r);
    }
    let _b = Bracket::enter_at(slot);
    let _e = ErrnoGuard::save();
    return_general(thread(), slot, r)
}

/// The single user's return: the top frame is the returning call's and was
/// kept for `u` alone, which is still the sole user (its `frame_word`
/// names its slot and epoch).
#[inline(always)]
fn return_fast(t: &ThreadState, f: usize, w: u64, u: &GraphUser, r: &RetRegs, bit: u32) -> usize {
    // Users taken before the callback runs, as in finish_frame.
    t.set_word(f + stack::FRAME_WORDS, w & !(0xffff << 12));
    let ev = GraphReturn {
        func: t.frame_func(f),
        depth: t.frame_depth(f) as i32,
        retval: r.rax,
        overrun: t.overrun.get(),
        unwound: false,
    };
    (u.ret)(&ev, u, r);
    unlock_graph(t, bit);
    let ret = t.word(f) as usize;
    compiler_fence(Ordering::SeqCst);
    t.curr.set(f);
    ret
}

/// The return of the call whose return slot is `slot`, any number of users,
/// inside the bracket.
#[inline(always)]
fn return_general(t: &ThreadState, slot: usize, r: &RetRegs) -> usize {
    let f = match t.frame_below(t.curr.get()) {
        Some(top) if t.word(top + 2) as usize == slot => top,
        _ => match unwind_to(t, slot, r) {
            Some(f) => f,
            None => return revive(t, slot),
        },
    };
    let ret = t.word(f) as usize;
    finish_frame(t, f, r, false);
    ret
}

/// The frame whose return slot is `slot` lies below the top: the frames
/// above it were skipped by a non-local exit (longjmp), or belong to
/// another stack the program switched away from. Report and pop them;
/// returns the matching frame, or `None` (nothing popped) when no live
/// frame has that slot.
#[cold]
fn unwind_to(t: &ThreadState, slot: usize, r: &RetRegs) -> Option<usize> {
    let mut top = t.curr.get();
    let f = loop {
        let start = t.frame_below(top)?;
        if t.word(start + 2) as usize == slot {
            break start;
        }
        top = start;
    };
    while let Some(start) = t.frame_below(t.curr.get()) {
        if start == f {
            break;
        }
        finish_frame(t, start, r, true);
    }
    Some(f)
}

/// A hijacked return whose frame was popped as unwound, though its
/// function was alive on a stack the program had switched away from
/// (swapcontext, coroutines): its exit was reported then; it resumes at
/// the real address remembered for its slot.
#[cold]
fn revive(t: &ThreadState, slot: usize) -> usize {
    match t.graves().and_then(|g| g.find(slot, true)) {
        Some(ret) => {
            REVIVED_FRAMES.fetch_add(1, Ordering::Relaxed);
            ret
        }
        None => fatal_no_frame(slot),
    }
}

/// Returns of frames popped early (see [`stack::Graves`]).
static REVIVED_FRAMES: AtomicU64 = AtomicU64::new(0);

/// Runs the return callbacks of the frame at `f` (the top one) and pops it.
#[inline(always)]
fn finish_frame(t: &ThreadState, f: usize, r: &RetRegs, unwound: bool) {
    let w = t.word(f + stack::FRAME_WORDS);
    let depth = t.frame_depth(f);
    if unwound {
        if let Some(g) = t.graves() {
            g.bury(t.word(f + 2) as usize, t.word(f) as usize);
        }
    }
    if stack::bitmap_users(w) != 0 {
        // The frame's users are taken before their callbacks run: if one is
        // left for good (siglongjmp out of a handler that interrupted it),
        // the frame, found dead later, reports no second return.
        t.set_word(f + stack::FRAME_WORDS, w & !(0xffff << 12));
    }
    if let Some(bit) = lock_graph(t, false) {
        let ev = GraphReturn {
            func: t.frame_func(f),
            depth: depth as i32,
            retval: r.rax,
            overrun: t.overrun.get(),
            unwound,
        };
        let (users, epoch) = if stack::type_of(w) == stack::TYPE_BITMAP {
            (stack::bitmap_users(w), stack::bitmap_epoch(w))
        } else {
            (0, 0)
        };
        if unwound && users == 0 {
            let sole = FAST.load(Ordering::Acquire);
            // SAFETY: as for ARRAY's users below: published, and we are
            // inside the bracket.
            if let Some(u) = unsafe { sole.as_ref() } {
                if u.unowned_unwinds.load(Ordering::Relaxed) {
                    (u.ret)(&ev, u, r);
                }
            }
        }
        let mut bits = users;
        t.event_time.store(stack::EVENT_OPEN, Ordering::Relaxed);
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let u = ARRAY[i].load(Ordering::Acquire);
            if !u.is_null() && SLOT_EPOCH[i].load(Ordering::Acquire) <= epoch {
                // SAFETY: published users outlive the grace period after
                // their slot is cleared; we are inside the bracket.
                let u = unsafe { &*u };
                (u.ret)(&ev, u, r);
            }
        }
        t.event_time.store(0, Ordering::Relaxed);
        unlock_graph(t, bit);
    }
    compiler_fence(Ordering::SeqCst);
    t.curr.set(f);
}

/// A thread's brackets were abandoned: so was the event whose time its
/// users shared (its word would otherwise keep that time for callbacks
/// outside any event: with a sole user left, forever).
fn forget_event_time() {
    thread().event_time.store(0, Ordering::Relaxed);
}

/// This thread's shared event time word ([`ThreadState::event_time`]):
/// tracers whose callbacks would each read the clock for the same event
/// may take one time through it (`record::writer::emit_shared`).
#[inline(always)]
pub fn event_time() -> &'static std::sync::atomic::AtomicU64 {
    &thread().event_time
}

#[cold]
fn fatal_no_frame(_slot: usize) -> ! {
    LOST_FRAMES.fetch_add(1, Ordering::Relaxed);
    let msg: &[u8] =
        b"shadowgraph: fatal: a hijacked return has no shadow frame; no safe address to resume\n";
    // SAFETY: write(2) of a static buffer (no allocation here), then abort.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

// --- Unwinder translation (SPEC §4.6) ------------------------------------------------------

/// Shadow frames visited by unwinder translations (to check linearity).
static RET_ADDR_VISITS: AtomicU64 = AtomicU64::new(0);

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

fn ret_addr_in(t: &ThreadState, cursor: &mut usize, ret: usize, retp: usize) -> usize {
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

// --- Unwinders (SPEC §4.9 g) -------------------------------------------------------------------

/// Puts every live frame's real return address back into its slot, so that
/// an unwinder (C++ exception, forced unwind of `pthread_exit`, a panic,
/// `backtrace`) sees the real stack and never `return_to_handler`. The
/// frames stay on the shadow stack, unhooked, until [`rehook_thread`] or the
/// thread's next hook. Interposers call this before handing over.
pub fn unhook_thread() {
    let t = thread();
    if t.stack.get().is_null() || t.unhooked.get() {
        return;
    }
    // Top to bottom: a tail-call frame (ret = handler) shares its slot with
    // the frame below, which then writes the real address.
    for (_, ret, retp) in t.frames_below(t.curr.get()) {
        let retp = retp as *mut usize;
        // SAFETY: retp is a return slot on this thread's stack, live while
        // its frame is on the shadow stack.
        if !is_hijack(ret) && is_hijack(unsafe { *retp }) {
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

fn rehook_in(t: &ThreadState, sp: usize) {
    let r = RetRegs::zeroed();
    let rth = return_to_handler();
    while let Some(start) = t.frame_below(t.curr.get()) {
        let retp = t.word(start + 2) as usize;
        // SAFETY: a slot at or above sp is on the live stack.
        let gone = retp < sp
            || (retp == sp && {
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
            unsafe { *retp = rth };
        }
    }
    t.unhooked.set(false);
}
