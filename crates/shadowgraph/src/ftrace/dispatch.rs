//! What runs inside a traced call: the saved registers, the dispatch
//! records of the shared caller, per-ops trampoline entries, the list
//! function and the recursion guard (SPEC §3.4, §3.8).
//!
//! Nothing here allocates, locks or makes a system call (except a thread's
//! first bracket, which claims its slot lock-free).

use super::local::local;
use super::quiesce::Bracket;
use super::Ops;
use crate::tramp::EntryAction;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Registers saved by an ftrace caller. The argument registers, `ip`,
/// `parent_ip` and `parent_slot` are always valid; the fields from `rbx` on
/// are valid (and written back) only in the regs variant, which every site
/// with a SAVE_REGS, DIRECT or IPMODIFY ops calls.
#[repr(C)]
#[derive(Debug)]
pub struct Regs {
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub r8: u64,
    pub r9: u64,
    /// Number of vector registers used by a varargs call.
    pub rax: u64,
    /// Static chain.
    pub r10: u64,
    pub xmm: [u128; 8],
    /// The traced function's caller's frame pointer.
    pub rbp: u64,
    /// The site (traced function entry, after any endbr64).
    pub ip: usize,
    /// Where the traced function returns to.
    pub parent_ip: usize,
    /// The stack slot holding `parent_ip`.
    pub parent_slot: *mut usize,
    pub rbx: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rflags: u64,
    /// Resume address (site + 5); an IPMODIFY ops may change it.
    pub rip: usize,
    /// Set (by the direct helper) to continue at a direct-call target.
    pub direct: usize,
    /// Stack pointer at the traced function's entry.
    pub rsp: usize,
    _pad: u64,
}

const _: () = {
    assert!(std::mem::offset_of!(Regs, xmm) == 0x40);
    assert!(std::mem::offset_of!(Regs, rbp) == 0xc0);
    assert!(std::mem::offset_of!(Regs, ip) == 0xc8);
    assert!(std::mem::offset_of!(Regs, parent_slot) == 0xd8);
    assert!(std::mem::offset_of!(Regs, rbx) == 0xe0);
    assert!(std::mem::offset_of!(Regs, rflags) == 0x108);
    assert!(std::mem::offset_of!(Regs, rip) == 0x110);
    assert!(std::mem::offset_of!(Regs, direct) == 0x118);
    assert!(std::mem::offset_of!(Regs, rsp) == 0x120);
    assert!(std::mem::size_of::<Regs>() == 0x130);
};

/// What the shared caller runs: one record, published by a single store so
/// function and ops are never seen torn.
pub(crate) struct DispatchRecord {
    pub func: fn(&mut Regs, *const Ops),
    pub ops: *const Ops,
}

// SAFETY: records are immutable once published.
unsafe impl Sync for DispatchRecord {}
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

/// The ops on the core list, newest first (copy-on-write; replaced lists are
/// freed after a grace period).
pub(crate) struct OpsList {
    pub ops: Vec<*const Ops>,
}

// SAFETY: immutable once published; the ops it points to outlive it.
unsafe impl Sync for OpsList {}
unsafe impl Send for OpsList {}

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

/// Data slot of a per-ops trampoline: the ops it calls, or null while the
/// ops is leaving.
pub struct OpsSlot {
    pub ops: AtomicPtr<Ops>,
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

/// A per-ops trampoline's entry: load the ops from its slot inside the
/// bracket; an empty slot means the ops is leaving.
pub(crate) extern "C" fn ops_entry(regs: *mut u8, data: usize) -> EntryAction {
    // SAFETY: as in shared_entry; `data` is the trampoline's leaked OpsSlot.
    let (regs, slot) = unsafe { (&mut *(regs as *mut Regs), &*(data as *const OpsSlot)) };
    let _b = Bracket::enter_at(regs.parent_slot as usize);
    let _e = ErrnoGuard::save();
    let ops = slot.ops.load(Ordering::Acquire);
    if !ops.is_null() {
        // SAFETY: an ops in a published slot outlives the grace period
        // that follows clearing the slot.
        call_ops(unsafe { &*ops }, regs);
    }
    action(regs)
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
        // SAFETY: as in save().
        unsafe { *self.0 = self.1 };
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

/// Calls an ops' callback, inside the recursion guard if it asked for it,
/// unless its thread filter ignores this thread.
#[inline(always)]
pub(crate) fn call_ops(ops: &Ops, regs: &mut Regs) {
    let threads = ops.threads.load(Ordering::Acquire);
    // SAFETY: thread filters are freed only after a grace period.
    if !threads.is_null() && !unsafe { &*threads }.allows(current_tid()) {
        return;
    }
    if ops.flags & super::RECURSION != 0 {
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
                if o.flags & super::STUB == 0 && o.filter_pair().contains(id) {
                    call_ops(o, regs);
                }
            }
        }
    }
    unlock(bit);
}

/// The callback of DIRECT ops: the site continues at the ops' target.
pub(crate) fn direct_helper(_ip: usize, _parent: usize, ops: &Ops, regs: &mut Regs) {
    regs.direct = ops.direct_target();
}

/// A manager's callback: its subops whose filters contain the site.
pub fn call_subops(_ip: usize, _parent: usize, manager: &Ops, regs: &mut Regs) {
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

// --- Recursion guard (SPEC §3.8) -------------------------------------------

/// A group of recursion bits: NORMAL, SIGNAL, TRANSITION.
#[derive(Clone, Copy)]
pub enum Group {
    List = 0,
    Core = 3,
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
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    Some(bit)
}

/// How many of group `g`'s bits this thread holds (0 to 3).
#[inline(always)]
pub fn held(g: Group) -> u8 {
    ((local().rec.get() >> g as u32) & 0b111).count_ones() as u8
}

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
