//! What runs inside a traced call: the saved registers, the dispatch
//! records of the shared caller, per-ops trampoline entries, the list
//! function and the recursion guard (design §3.4, §3.8).
//!
//! Nothing here allocates, locks or makes a system call (except a thread's
//! first bracket, which claims its slot lock-free).

use super::local::local;
use super::ops::{Ops, OpsList, OpsSlot, Regs, RECURSION, STUB};
use super::quiesce::Bracket;
use super::recursion::{current_tid, try_lock, unlock, Group};
use crate::tramp::EntryAction;
use std::sync::atomic::{AtomicPtr, Ordering};

/// What the shared caller runs: one record, published by a single store so
/// function and ops are never seen torn.
pub(crate) struct DispatchRecord {
    pub func: fn(&mut Regs, *const Ops),
    pub ops: *const Ops,
}

// SAFETY: records are immutable once published.
unsafe impl Sync for DispatchRecord {}
// SAFETY: as for Sync: nothing in it is tied to the thread that made it.
unsafe impl Send for DispatchRecord {}

pub(crate) static STUB_RECORD: DispatchRecord = DispatchRecord {
    func: stub_fn,
    ops: std::ptr::null(),
};

pub(crate) static LIST_RECORD: DispatchRecord = DispatchRecord {
    func: list_fn,
    ops: std::ptr::null(),
};

pub(crate) static RECORD: AtomicPtr<DispatchRecord> =
    AtomicPtr::new(&STUB_RECORD as *const DispatchRecord as *mut DispatchRecord);

pub(crate) static LIST: AtomicPtr<OpsList> = AtomicPtr::new(std::ptr::null_mut());

/// Site lookup for the hot path: sorted addresses and their ids.
pub(crate) struct SiteIndex {
    pub addrs: Vec<usize>,
    pub ids: Vec<u32>,
}

pub(crate) static SITE_INDEX: AtomicPtr<SiteIndex> = AtomicPtr::new(std::ptr::null_mut());

#[inline]
pub(crate) fn site_id(ip: usize) -> Option<u32> {
    if let Some(id) = site_hint(ip) {
        return Some(id);
    }
    // Acquire: the index is published whole (core.rs).
    let p = SITE_INDEX.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: indexes are leaked, never freed, immutable once published.
    let idx = unsafe { &*p };
    idx.addrs.binary_search(&ip).ok().map(|i| idx.ids[i])
}

/// The id of the site at `ip` if the entry under way says it: through a
/// site stub (set and cleared around the call into Rust; a signal
/// handler's entry clears it on its way out).
#[inline]
pub(crate) fn site_hint(ip: usize) -> Option<u32> {
    let c = local();
    (c.site_hint_ip.get() == ip).then(|| c.site_hint_id.get())
}

fn stub_fn(_: &mut Regs, _: *const Ops) {}

/// The shared caller's entry: load the global record inside the bracket.
pub(crate) extern "C" fn shared_entry(regs: *mut u8, _data: usize) -> EntryAction {
    // SAFETY: the trampoline passes its frame's Regs, valid for this call.
    let regs = unsafe { &mut *(regs as *mut Regs) };
    let _b = Bracket::enter_at(regs.parent_slot as usize);
    let _e = ErrnoGuard::save();
    // SAFETY: records stay valid until a grace period after unpublishing.
    let rec = unsafe { &*RECORD.load(Ordering::Acquire) };
    (rec.func)(regs, rec.ops);
    action(regs)
}

/// A per-ops trampoline's entry (regs variant): load the ops from its
/// slot inside the bracket; an empty slot means the ops is leaving.
pub(crate) extern "C" fn ops_entry(regs: *mut u8, data: usize) -> EntryAction {
    // SAFETY: as in shared_entry; `data` is the trampoline's leaked OpsSlot.
    let regs = unsafe { &mut *(regs as *mut Regs) };
    call_slot(regs, data);
    action(regs)
}

/// [`ops_entry`] for the args variant and the chained caller, which
/// return to the site (or jump on) whatever the callback did: no action
/// to compute. Their fused assembly (`ftrace::entry_asm`) comes here for
/// a thread not at rest, errno's location not yet cached, or an ops with
/// a thread filter.
pub(crate) extern "C" fn ops_entry_args(regs: *mut u8, data: usize) -> EntryAction {
    // SAFETY: as in shared_entry.
    call_slot(unsafe { &mut *(regs as *mut Regs) }, data);
    EntryAction::default()
}

/// A set caller's entry (ftrace::sets): every ops of the list in its slot,
/// inside the bracket, in order; an empty slot means the set is retired.
pub(crate) extern "C" fn set_entry(regs: *mut u8, data: usize) -> EntryAction {
    // SAFETY: as in shared_entry; `data` is the set's leaked slot.
    let (regs, slot) = unsafe {
        (
            &mut *(regs as *mut Regs),
            &*(data as *const AtomicPtr<OpsList>),
        )
    };
    let _b = Bracket::enter_at(regs.parent_slot as usize);
    let _e = ErrnoGuard::save();
    // Acquire: the list is published whole (ftrace::sets).
    let list = slot.load(Ordering::Acquire);
    if !list.is_null() {
        // SAFETY: a list in a slot is retired only after the grace period
        // that follows its replacement.
        for &o in unsafe { &(*list).ops } {
            // SAFETY: an ops in a published list outlives it.
            call_ops(unsafe { &*o }, regs);
        }
    }
    EntryAction::default()
}

#[inline(always)]
fn call_slot(regs: &mut Regs, data: usize) {
    // SAFETY: `data` is the trampoline's leaked OpsSlot.
    let slot = unsafe { &*(data as *const OpsSlot) };
    let _b = Bracket::enter_at(regs.parent_slot as usize);
    let _e = ErrnoGuard::save();
    let ops = slot.ops.load(Ordering::Acquire);
    if !ops.is_null() {
        // SAFETY: an ops in a published slot outlives the grace period
        // that follows clearing the slot.
        call_ops(unsafe { &*ops }, regs);
    }
}

/// Callbacks may make system calls; the traced function (and, at a return,
/// its caller) must find `errno` as it was left.
pub(crate) struct ErrnoGuard(*mut i32, i32);

impl ErrnoGuard {
    #[inline(always)]
    pub(crate) fn save() -> ErrnoGuard {
        let mut p = local().errno.get();
        if p.is_null() {
            // SAFETY: __errno_location returns this thread's errno slot,
            // which never moves: cached for the thread's life.
            p = unsafe { libc::__errno_location() };
            local().errno.set(p);
        }
        // SAFETY: p is valid for the life of the thread.
        ErrnoGuard(p, unsafe { *p })
    }
}

impl Drop for ErrnoGuard {
    #[inline(always)]
    fn drop(&mut self) {
        // Written only when a callback changed it: an unconditional store
        // would chain each traced call's load of errno to the store of the
        // call before (a store-to-load forwarding on every call).
        // SAFETY: as in save().
        unsafe {
            if *self.0 != self.1 {
                *self.0 = self.1;
            }
        }
    }
}

#[inline]
pub(crate) fn action(regs: &Regs) -> EntryAction {
    // Only the regs variant acts on this, and it initialises both fields.
    if regs.direct != 0 {
        EntryAction {
            target: regs.direct,
            action: 1,
        }
    } else if regs.rip != regs.ip + 5 {
        EntryAction {
            target: regs.rip,
            action: 2,
        }
    } else {
        EntryAction::default()
    }
}

/// Calls an ops' callback, inside the recursion guard if it asked for it,
/// unless its thread filter ignores this thread.
#[inline(always)]
pub(crate) fn call_ops(ops: &Ops, regs: &mut Regs) {
    let threads = ops.threads.load(Ordering::Acquire);
    // SAFETY: thread filters are freed only after a grace period.
    if !threads.is_null() && !unsafe { &*threads }.allows(current_tid()) {
        return;
    }
    if ops.flags.contains(RECURSION) {
        let Some(bit) = try_lock(Group::Core) else {
            return;
        };
        (ops.func)(regs.ip, regs.parent_ip, ops, regs);
        unlock(bit);
    } else {
        (ops.func)(regs.ip, regs.parent_ip, ops, regs);
    }
}

/// The single-ops record: a thread may have stalled between crossing a
/// site and loading the record, so the filter is tested again.
pub(crate) fn single_fn(regs: &mut Regs, ops: *const Ops) {
    // SAFETY: the record's ops outlives the record.
    let ops = unsafe { &*ops };
    if let Some(id) = site_id(regs.ip) {
        if ops.filter_pair().contains(id) {
            call_ops(ops, regs);
        }
    }
}

/// The list function: every ops on the core list whose filter contains the
/// site, newest first; STUB ops are counted but never called.
pub(crate) fn list_fn(regs: &mut Regs, _: *const Ops) {
    let Some(bit) = try_lock(Group::List) else {
        return;
    };
    if let Some(id) = site_id(regs.ip) {
        let list = LIST.load(Ordering::Acquire);
        if !list.is_null() {
            // SAFETY: lists are freed only after a grace period.
            for &o in unsafe { &(*list).ops } {
                // SAFETY: ops on a published list outlive it.
                let o = unsafe { &*o };
                if !o.flags.contains(STUB) && o.filter_pair().contains(id) {
                    call_ops(o, regs);
                }
            }
        }
    }
    unlock(bit);
}

/// The callback of DIRECT ops: the site continues at the ops' target.
pub(crate) extern "C" fn direct_helper(_ip: usize, _parent: usize, ops: &Ops, regs: &mut Regs) {
    regs.direct = ops.direct_target();
}

/// A manager's callback: its subops whose filters contain the site.
pub extern "C" fn call_subops(_ip: usize, _parent: usize, manager: &Ops, regs: &mut Regs) {
    let Some(id) = site_id(regs.ip) else {
        return;
    };
    let list = manager.subops_list.load(Ordering::Acquire);
    if list.is_null() {
        return;
    }
    // SAFETY: subop lists are freed only after a grace period.
    for &o in unsafe { &(*list).ops } {
        // SAFETY: subops on a published list outlive it.
        let o = unsafe { &*o };
        if o.filter_pair().contains(id) {
            call_ops(o, regs);
        }
    }
}

// --- Recursion guard (design §3.8) -------------------------------------------
