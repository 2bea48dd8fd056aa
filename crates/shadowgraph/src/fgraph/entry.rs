//! A traced call's entry (design §4.3): from the manager's trampolines or
//! the core's dispatch, the frame pushed, the call offered to the sole
//! user (fast) or to every user in slot order, the return hooked if any
//! accepted; frames a longjmp left behind are dropped first.

use super::ret::{finish_frame, is_hijack, return_to_handler};
use super::site_users;
use super::stack::{self, thread, ThreadState};
use super::state::{lock_graph, unlock_graph, ARRAY, EPOCH, FAST, OCCUPIED, SLOT_EPOCH};
use super::thread::KEY;
use super::unwind::rehook_in;
use super::user::{GraphEntry, GraphUser, RetRegs};
use crate::ftrace::dispatch::ErrnoGuard;
use crate::ftrace::quiesce::Bracket;
use crate::ftrace::{dispatch::site_id, Ops, Regs};
use std::sync::atomic::{compiler_fence, Ordering};

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
        // Acquire (both): inside the bracket, what the registry published
        // before these words (the ops, the user's fields) is seen whole.
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
    // Acquire: as above.
    let ops = slot.ops.load(Ordering::Acquire);
    if !ops.is_null() {
        graph_entry_inline(regs.ip, regs.parent_ip, regs);
    }
    crate::tramp::EntryAction::default()
}

/// The manager's callback (design §4.3), when reached through the core's
/// dispatch rather than the manager's own trampolines.
pub(super) extern "C" fn graph_entry(ip: usize, parent_ip: usize, _ops: &Ops, regs: &mut Regs) {
    graph_entry_inline(ip, parent_ip, regs)
}

#[inline(always)]
pub(super) fn graph_entry_inline(ip: usize, parent_ip: usize, regs: &mut Regs) {
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
pub(super) fn prepare_slow(t: &ThreadState, regs: &Regs) -> bool {
    if t.exiting.get() || t.pause.get() > 0 {
        return false;
    }
    if t.stack.get().is_null() && !attach_stack(t) {
        return false;
    }
    if t.unhooked.get() {
        if (regs.parent_slot as usize) < t.unhooked_at.get() {
            // A call the unwinder makes while it walks the stack.
            return false;
        }
        let Some(bit) = lock_graph(t, false) else {
            return false;
        };
        rehook_in(t, regs.parent_slot as usize);
        unlock_graph(t, bit);
    }
    true
}

#[cold]
pub(super) fn attach_stack(t: &ThreadState) -> bool {
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

/// The single user's entry (design §4.8): the thread is at rest (outside
/// every bracket, holding no recursion bit), attached and hooked, and `u`
/// is the sole user. As [`enter`] without the loop over slots; frames a
/// longjmp left go the general way.
#[inline(always)]
pub(super) fn enter_fast(t: &ThreadState, u: &GraphUser, regs: &mut Regs) {
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
    // Relaxed: published before the user was (registry.rs), and the user
    // was loaded Acquire.
    let word = u.frame_word.load(Ordering::Relaxed);
    let ent = GraphEntry {
        func: ip,
        parent_ip,
        depth: depth as i32,
        site: crate::ftrace::dispatch::site_hint(ip).unwrap_or(u32::MAX),
    };
    // The site still the user's (site_users.rs; a call through the
    // manager's trampolines names no site: its filter took it).
    if ent.site != u32::MAX && !site_users::selects(ent.site, word) {
        t.curr.set(b - stack::FRAME_WORDS);
        return;
    }
    let i = stack::bitmap_users(word).trailing_zeros() as usize;
    if !offer(t, u, i, &ent, regs) {
        t.curr.set(b - stack::FRAME_WORDS);
        return;
    }
    t.set_word(b, word);
    // The frame whole before the slot points at the handler (only this
    // thread and its handlers read them: the compiler alone may reorder).
    compiler_fence(Ordering::SeqCst);
    // SAFETY: as in `enter`.
    unsafe { *parent_slot = return_to_handler() };
}

#[inline]
pub(super) fn enter(t: &ThreadState, ip: usize, parent_ip: usize, regs: &mut Regs) {
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
    // Acquire (here and below): the registry's words, published before
    // the epoch, the user and its bit (registry.rs).
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
        // Relaxed: as in enter_fast.
        let word = u.frame_word.load(Ordering::Relaxed);
        // The site still the user's, as in enter_fast.
        let wanted = ent.site == u32::MAX || site_users::selects(ent.site, word);
        if let Some(i) = u.slot().filter(|_| wanted) {
            if offer(t, u, i, &ent, regs) {
                bits = 1 << i;
            }
        }
    } else if let Some(site) = site_id(ip) {
        bits = offer_all(t, &ent, regs, (site, b), g);
    }
    if bits == 0 {
        t.curr.set(b - stack::FRAME_WORDS);
        return;
    }
    t.set_word(b, stack::bitmap(stack::FRAME_WORDS, bits, g));
    // As above: the frame whole before the slot is hijacked.
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
pub(super) fn drop_dead_frames(t: &ThreadState, slot: usize, parent_ip: usize) {
    let fresh = !is_hijack(parent_ip);
    let dead = |top: usize| {
        let retp = t.word(top + 2) as usize;
        retp < slot || (retp == slot && fresh)
    };
    // A tail call (the top frame's slot, its return point there) drops
    // nothing: known before asking the kernel about the signal stack,
    // which optimised code's tail calls would otherwise pay on every call.
    let Some(top) = t.frame_below(t.curr.get()).filter(|&f| dead(f)) else {
        return;
    };
    // A call on the stack a `swapcontext` switched to (a coroutine's,
    // which may lie above the frames below, in a buffer of theirs): not a
    // return from them; the call is inside the switch, as uftrace nests it.
    // (The switch back returns through the switcher's frame: `unwind_to`
    // closes what the coroutine left open above it.)
    if crate::libcall::switches_stacks(t.frame_func(top)) {
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
/// Offers the call `ent` (of site `site`) to every user registered at or
/// before epoch `g` whose filter takes the site, in slot order, as
/// [`offer`] does for one; the bits of those that kept it. The event's
/// time is shared by all of them. Each user that keeps it is named in the
/// frame's BITMAP word `b` at once, as the single user is: a handler that
/// lands in a later user's callback and leaves by siglongjmp reports the
/// frame to it as unwound (a user with graph filters counted it).
pub(super) fn offer_all(
    t: &ThreadState,
    ent: &GraphEntry,
    regs: &mut Regs,
    (site, b): (crate::ftrace::SiteId, usize),
    g: u64,
) -> u16 {
    let mut bits: u16 = 0;
    // Acquire (here and below): the registry's words, published before
    // the user and its bit (registry.rs).
    let mut occupied = OCCUPIED.load(Ordering::Acquire);
    // The users the site's filters select, when it has a mask (read after
    // OCCUPIED: a user found there has its bits in the masks, written
    // before its slot's bit was published).
    let mask = super::site_users::mask(site);
    occupied &= mask.map_or(u32::MAX, u32::from);
    // (As `offer` keeps them, once for all the users: restored, not reset,
    // as this may be a signal handler's call inside another's callback.)
    let outer = (t.in_entry.get(), t.reserved_once.get());
    // Relaxed: this thread's word (its handlers see it in program order).
    t.event_time.store(stack::EVENT_OPEN, Ordering::Relaxed);
    while occupied != 0 {
        let i = occupied.trailing_zeros() as usize;
        occupied &= occupied - 1;
        let u = ARRAY[i].load(Ordering::Acquire);
        if u.is_null() || SLOT_EPOCH[i].load(Ordering::Acquire) > g {
            continue;
        }
        // SAFETY: a published user outlives the grace period that follows
        // its slot's clearing; we are inside the bracket.
        let u = unsafe { &*u };
        // Without a mask, each user's filter. (A call may come through a
        // site a user that left wanted, not yet a nop again: its mask no
        // longer names the user, nor does this filter test pass.)
        if mask.is_none() && !u.filter.pair().contains(site) {
            continue;
        }
        let save = t.curr.get();
        t.in_entry.set(i as i32);
        t.reserved_once.set(false);
        if (u.entry)(ent, u, regs) {
            bits |= 1 << i;
            t.set_word(b, stack::bitmap(stack::FRAME_WORDS, bits, g));
        } else {
            t.curr.set(save);
            // The name the callback may have given itself taken back.
            t.set_word(
                b,
                match bits {
                    0 => stack::reserved(stack::FRAME_WORDS),
                    _ => stack::bitmap(stack::FRAME_WORDS, bits, g),
                },
            );
        }
    }
    t.event_time.store(0, Ordering::Relaxed);
    t.in_entry.set(outer.0);
    t.reserved_once.set(outer.1);
    bits
}

pub(super) fn offer(
    t: &ThreadState,
    u: &GraphUser,
    i: usize,
    ent: &GraphEntry,
    regs: &mut Regs,
) -> bool {
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
