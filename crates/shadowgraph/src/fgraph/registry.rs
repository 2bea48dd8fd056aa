//! Registration (design §4.7): users take slots (reused FIFO, each with the
//! epoch it registered at), join fgraph's manager ops as subops, and make
//! the single-user fast path and the registered sole path live or not; the
//! manager itself, its code chosen when the first user registers; and a
//! thread's exit, which closes its open frames.

use super::entry::{graph_entry, manager_tramp_entry};
use super::site_users;
use super::sitepath::{shadowgraph_graph_site_entry, shadowgraph_site_return_general};
use super::stack::{self};
use super::state::{
    forget_event_time, init_tp_offsets, ARRAY, EPOCH, FAST, LEAD, MULTI_ENTRY, MULTI_FRAME_WORD,
    MULTI_RETURN, NO_FRAME_WORD, OCCUPIED, SLOT_EPOCH, SLOT_PRIVATE, SOLE_FRAME_WORD,
    SOLE_HIJACKED_RETURN, SOLE_PROVIDED,
};
use super::thread::thread_key;
use super::user::{GraphError, GraphUser, MAX_USERS};
use crate::ftrace::quiesce::{self};
use crate::ftrace::{self, Ops};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Code a tracer registers to stand in for its callbacks while its user is
/// the only one (design §4.8's fast path, done by the tracer itself): where
/// the manager's trampolines, its site stubs and hijacked returns go. Each
/// entry point comes back to fgraph's general code for what it does not
/// handle: trampoline entries to [`manager_tramp_entry`], site entries and returns to
/// `shadowgraph_graph_site_entry` / `shadowgraph_site_return_general`,
/// hijacked returns to `shadowgraph_return_general`. An address of 0 keeps
/// fgraph's own.
#[derive(Clone, Copy, Debug, Default)]
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
    /// What the stubs of the sites the function selects call in to
    /// instead of `site_entry` (it returns to `site_return` all the same,
    /// and is taken only with `site_entry` itself, not its fallback).
    pub site_entry_alt: Option<crate::ftrace::AltEntry>,
}

/// The registered path, and whether the manager has taken it (then it is
/// final).
pub(super) static SOLE_PATH: Mutex<(SolePath, bool)> = Mutex::new((
    SolePath {
        trampoline_entry: 0,
        site_entry: 0,
        site_return: 0,
        site_fallback: (0, 0),
        hijacked_return: 0,
        site_entry_alt: None,
    },
    false,
));
/// The site entry the manager's stubs call (0: none, or no stubs), as
/// chosen when it was made.
pub(super) static SITE_ENTRY_CHOSEN: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

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
    // Release: the path's code and words are in place before
    // return_to_handler may jump to it (it loads the address, the jump
    // depends on it).
    SOLE_HIJACKED_RETURN.store(path.hijacked_return, Ordering::Release);
    true
}

/// Registers the code that stands in for the callbacks of every user
/// while two or more are registered and each is marked with
/// [`GraphUser::let_multi_path_stand_in`]: fgraph's site entry and return
/// jump to `entry` and `ret` then (the register contracts of
/// `shadowgraph_graph_site_entry` and `shadowgraph_site_return_general`),
/// which come back to `shadowgraph_graph_site_entry_body` and
/// `shadowgraph_site_return_body` for what they do not handle. They read
/// [`MULTI_FRAME_WORD`](super::state::MULTI_FRAME_WORD) for the users and
/// the frames' word. Before any user registers, once (the same path again
/// changes nothing): false otherwise.
pub(crate) fn register_multi_path(entry: usize, ret: usize) -> bool {
    let r = registry();
    let had = MULTI_ENTRY.load(Ordering::Relaxed);
    if r.active > 0 || (had != 0 && had != entry) {
        return had == entry;
    }
    // Relaxed: the word that sends calls to the path is published later
    // (set_fast, Release, under the same lock).
    MULTI_RETURN.store(ret, Ordering::Relaxed);
    MULTI_ENTRY.store(entry, Ordering::Relaxed);
    true
}

/// Whether `entry` is the registered multi path ([`register_multi_path`]
/// took it before).
pub(crate) fn multi_path_is(entry: usize) -> bool {
    // Relaxed: registered once, before the first user; the word that
    // sends calls to it is published later (set_fast, Release).
    entry != 0 && MULTI_ENTRY.load(Ordering::Relaxed) == entry
}

/// Whether the multi path stands in for the registered users now: a
/// description (users may come and go), not a promise.
pub(crate) fn multi_path_live() -> bool {
    // Relaxed: a description, read once.
    MULTI_FRAME_WORD.load(Ordering::Relaxed) != NO_FRAME_WORD
}

/// fgraph's own site entry and return (the callbacks' way), for a
/// [`SolePath`] whose calls must take it where its own code cannot run.
pub(crate) fn general_site_path() -> (usize, usize) {
    (
        shadowgraph_graph_site_entry as *const () as usize,
        shadowgraph_site_return_general as *const () as usize,
    )
}

/// The site entry the manager's stubs call, once it is made (0 before,
/// or without site stubs).
pub(crate) fn chosen_site_entry() -> usize {
    SITE_ENTRY_CHOSEN.load(Ordering::Relaxed)
}

pub(super) struct Registry {
    /// Free slots, FIFO (`-1` = none): released slots are reused last.
    lru: [i8; MAX_USERS],
    next: usize,
    last: usize,
    active: usize,
    users: [Option<Arc<GraphUser>>; MAX_USERS],
}

pub(super) static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    lru: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    next: 0,
    last: 0,
    active: 0,
    users: [const { None }; MAX_USERS],
});

pub(super) fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) static SITE_STUBS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(true);

/// Whether the manager gives each site where it is alone its own stub
/// (tramp.rs), which calls the traced function so that its return needs no
/// hijack (the default), or has the sites call its trampolines and
/// hijacks returns (to compare). Effective if set before the first user
/// registers.
pub fn set_site_stubs(on: bool) {
    SITE_STUBS.store(on, Ordering::Relaxed);
}

/// The manager ops, made when the first user registers.
pub(super) static MANAGER: OnceLock<Arc<Ops>> = OnceLock::new();

/// Whether the manager exists (its entry and return code chosen for good).
pub(crate) fn manager_made() -> bool {
    MANAGER.get().is_some() || SOLE_PATH.lock().unwrap_or_else(|e| e.into_inner()).1
}

pub(super) fn manager() -> &'static Arc<Ops> {
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
        let (site, alt) = match path.site_entry {
            _ if !SITE_STUBS.load(Ordering::Relaxed) => ((0, 0), None),
            0 => (general_site_path(), None),
            // Code that addresses thread-local state by `fixed_tls!` may
            // not run unpatched: the site entry and return it names
            // instead.
            _ if !tls_done && path.site_fallback.0 != 0 => (path.site_fallback, None),
            e => ((e, path.site_return), path.site_entry_alt),
        };
        SITE_ENTRY_CHOSEN.store(site.0, Ordering::Release);
        Ops::new_manager_with_entry(
            graph_entry,
            manager_tramp_entry,
            path.trampoline_entry,
            site,
            alt,
            site_users::rebuild,
        )
    })
}

/// Registers a graph user: from now on its entry callback is offered every
/// call its filter selects. At most 16 users (`NoSpace`).
pub fn register_graph(user: &Arc<GraphUser>) -> Result<(), GraphError> {
    register_graphs(&[user])
}

/// Registers several graph users at once: each call their filters select
/// is offered to every one of them from the same instant on (a traced
/// call finds all of them or none), as several tracers started together
/// expect. Their filters take effect (their sites patched) first, while
/// no call can reach them yet. All or none: if one cannot be registered,
/// none is (`NoSpace` if there are not enough free slots).
pub fn register_graphs(users: &[&Arc<GraphUser>]) -> Result<(), GraphError> {
    let mut r = registry();
    if users.iter().any(|u| u.slot().is_some()) {
        return Err(GraphError::AlreadyRegistered);
    }
    for (k, u) in users.iter().enumerate() {
        if users[..k].iter().any(|v| Arc::ptr_eq(u, v)) {
            return Err(GraphError::AlreadyRegistered);
        }
    }
    thread_key();
    quiesce::init();
    let free = (0..MAX_USERS)
        .filter(|k| r.lru[(r.next + k) % MAX_USERS] >= 0)
        .count();
    if users.len() > free {
        return Err(GraphError::NoSpace);
    }
    stack::prefill(crate::stop::MAX_THREADS.min(thread_count() + 8));
    // Their filters in the core first (the manager's union, their sites
    // patched): calls at those sites reach fgraph, which offers them to
    // no new user yet. Loop mode before any site is patched for them.
    if r.active + users.len() >= 2 {
        publish_sole(std::ptr::null_mut());
    }
    for (k, u) in users.iter().enumerate() {
        if let Err(e) = ftrace::register_subop(manager(), &u.subop) {
            // Exact rollback: the subops before leave again.
            for v in &users[..k] {
                let _ = ftrace::unregister_subop(manager(), &v.subop);
            }
            set_fast(&r);
            return Err(GraphError::Core(e));
        }
    }
    let mut slots = Vec::with_capacity(users.len());
    for _ in users {
        let next = r.next;
        slots.push(r.lru[next] as usize);
        r.lru[next] = -1;
        r.next = (r.next + 1) % MAX_USERS;
    }
    for &i in &slots {
        stack::zero_task_var_everywhere(i);
    }
    // Their bits in the sites' masks before their slots are reachable.
    for (u, &i) in users.iter().zip(&slots) {
        site_users::set_slot(i, Some(u));
    }
    ftrace::tell_manager(manager());
    r.active += users.len();
    // One epoch for all of them. Each user's words are published
    // (Release) before ARRAY[i] makes it reachable: an entry that loads the
    // user (Acquire) sees its slot, epoch and frame word. EPOCH: AcqRel,
    // each registration a newer epoch than every frame a traced call may
    // stamp before it loads it.
    let epoch = EPOCH.fetch_add(1, Ordering::AcqRel) + 1;
    let mut bits = 0u32;
    for (u, &i) in users.iter().zip(&slots) {
        SLOT_EPOCH[i].store(epoch, Ordering::Release);
        u.frame_word.store(
            stack::bitmap(stack::FRAME_WORDS, 1 << i, epoch),
            Ordering::Release,
        );
        u.offer_word.store(i as u64 + 1, Ordering::Release);
        u.slot.store(i as i32, Ordering::Release);
        // Release: before ARRAY[i] and the words that name the slot.
        SLOT_PRIVATE[i].store(u.private, Ordering::Release);
        r.users[i] = Some((*u).clone());
        ARRAY[i].store(Arc::as_ptr(u) as *mut GraphUser, Ordering::Release);
        bits |= 1 << i;
    }
    // AcqRel: the slots' bits after their users (loop mode walks the bits
    // and loads each user, Acquire), all in one store: a traced call loads
    // OCCUPIED once and finds every new user or none.
    OCCUPIED.fetch_or(bits, Ordering::AcqRel);
    set_fast(&r);
    Ok(())
}

/// Unregisters a graph user. Returns once none of its callbacks runs or can
/// start; frames it accepted return without calling it.
pub fn unregister_graph(user: &Arc<GraphUser>) -> Result<(), GraphError> {
    unregister_graphs(&[user])
}

/// Unregisters several graph users at once: no call is offered to any of
/// them from the same instant on (a call entering finds all of them or
/// none), after one grace period for all. Those not registered are passed
/// over (`NotRegistered` if none is); the first error of the core is
/// returned, every user having left.
pub fn unregister_graphs(users: &[&Arc<GraphUser>]) -> Result<(), GraphError> {
    let mut r = registry();
    let mut gone: Vec<(&Arc<GraphUser>, usize)> = Vec::with_capacity(users.len());
    for u in users {
        if let Some(i) = u.slot() {
            if !gone.iter().any(|&(_, j)| j == i) {
                gone.push((u, i));
            }
        }
    }
    if gone.is_empty() {
        return Err(GraphError::NotRegistered);
    }
    // The fast paths' words first (the sole user's and the multi path's;
    // Release, as in set_fast), so that every call goes the general way
    // before the users leave it: a thread that finds a user gone there
    // finds it gone on the fast paths too. In the other order a thread
    // could drop some of its frames' exits by the general way (ARRAY
    // empty: the frames an exception unwound) and then record a later
    // exit by a fast path still naming the user, out of its nesting. No
    // call enters a fast path for these users after the grace period
    // below.
    publish_sole(std::ptr::null_mut());
    LEAD.store(std::ptr::null_mut(), Ordering::Release);
    MULTI_FRAME_WORD.store(NO_FRAME_WORD, Ordering::Release);
    // Then unreachable (Release: after the words above), then their bits,
    // all in one store: a traced call that still finds a bit finds no
    // user; the grace period below waits out those that found them before.
    let mut bits = 0u32;
    for &(_, i) in &gone {
        ARRAY[i].store(std::ptr::null_mut(), Ordering::Release);
        bits |= 1 << i;
    }
    OCCUPIED.fetch_and(!bits, Ordering::AcqRel);
    // Out of the sites' masks before the grace period (which an entry
    // that read a mask naming them finishes within), so before their
    // slots are reused.
    for &(_, i) in &gone {
        site_users::set_slot(i, None);
    }
    ftrace::tell_manager(manager());
    r.active -= gone.len();
    let mut res = Ok(());
    for &(u, _) in &gone {
        let left = ftrace::unregister_subop(manager(), &u.subop);
        if res.is_ok() {
            res = left;
        }
    }
    quiesce::synchronize();
    for &(u, i) in &gone {
        r.users[i] = None;
        // Release: after the grace period no call uses the slot; a later
        // registration publishes its own epoch before the slot is
        // reachable.
        SLOT_EPOCH[i].store(u64::MAX, Ordering::Release);
        u.slot.store(-1, Ordering::Release);
        release_slot(&mut r, i);
    }
    set_fast(&r);
    res.map_err(GraphError::Core)
}

pub(super) fn release_slot(r: &mut Registry, i: usize) {
    let last = r.last;
    r.lru[last] = i as i8;
    r.last = (last + 1) % MAX_USERS;
}

/// Fast path on for a sole user, off otherwise; the lead user (LEAD) the
/// one in the lowest slot; the stubs' loop over users for two or more.
pub(super) fn set_fast(r: &Registry) {
    // Relaxed: a hint (see MANY); the users are published before.
    super::state::MANY.store(r.active >= 2, Ordering::Relaxed);
    // Release: the users' words (ARRAY, their fields) are published
    // before the word that sends calls to the multi path, which loads it
    // first and them through it.
    MULTI_FRAME_WORD.store(multi_word(r), Ordering::Release);
    let first = r
        .users
        .iter()
        .flatten()
        .next()
        .map_or(std::ptr::null_mut(), |u| Arc::as_ptr(u) as *mut GraphUser);
    // Release: as FAST's (publish_sole).
    LEAD.store(first, Ordering::Release);
    publish_sole(if r.active == 1 {
        first
    } else {
        std::ptr::null_mut()
    });
}

/// The multi path's frame word for the registered users (see
/// MULTI_FRAME_WORD): two or more, every one marked, the path registered.
fn multi_word(r: &Registry) -> u64 {
    let users = || r.users.iter().flatten();
    if r.active < 2
        || MULTI_ENTRY.load(Ordering::Relaxed) == 0
        || !users().all(|u| u.multi_path.load(Ordering::Acquire))
    {
        return NO_FRAME_WORD;
    }
    let bits = users()
        .filter_map(|u| u.slot())
        .fold(0u16, |b, i| b | 1 << i);
    // Acquire: every user's slot epoch is at most this one.
    stack::bitmap(stack::FRAME_WORDS, bits, EPOCH.load(Ordering::Acquire))
}

/// FAST and SOLE_PROVIDED for `sole` (null: none). A user stops being
/// either before the grace period that precedes its freeing
/// (unregister_graph).
pub(super) fn publish_sole(sole: *mut GraphUser) {
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
    // Release (all three): each word is read by the fast paths with one
    // load, Acquire or dependent (the user's fields through the pointer);
    // the frame word goes first, so that a path reading both sees this
    // user's word or sends the call the general way.
    SOLE_PROVIDED.store(
        if provided { sole } else { std::ptr::null_mut() },
        Ordering::Release,
    );
    FAST.store(sole, Ordering::Release);
}

pub(super) fn thread_count() -> usize {
    let mut v = Vec::with_capacity(4096);
    crate::sys::list_threads(&mut v).map_or(1, |_| v.len())
}
