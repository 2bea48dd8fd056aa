//! A traced `vfork`'s child records into rings of its own: it runs in its
//! parent's thread-local memory, so the parent's rings are put aside for
//! it (`fgraph::on_vfork`) and given back once the child is gone, after
//! the child's rings are ended as a thread's exit ends them.

use super::rings::{release_mine, BY_SLOT, FLAGS, MINE, MINE_SLOT};
use super::state::{any_shared, MAX_INSTANCES, RINGS};
use std::cell::Cell;
use std::sync::atomic::Ordering;

/// The parent's rings while its vfork child records (zero-valid).
struct Aside {
    /// Something is put aside.
    held: Cell<bool>,
    rings: [Cell<*mut u8>; MAX_INSTANCES],
    /// Their slot indexes + 1, as in `MINE_SLOT`.
    slots: [Cell<usize>; MAX_INSTANCES],
}

crate::fast_thread_local!(
    static ASIDE: Aside;
);

/// In the child, before its first record: puts the parent's rings aside.
/// False (nothing put aside) where rings are drained by their own threads,
/// which a child would need an exit step of its own for, or when the
/// parent's are aside already.
pub(crate) fn vfork_child() -> bool {
    let a = &*ASIDE;
    if !any_shared() || a.held.get() {
        return false;
    }
    // Relaxed (all the cells here): this thread's own, which the end of an
    // instance clears only under the slot's lock, taken below to give them
    // back; the multi path's word first, as every path that takes rings
    // out of MINE does.
    BY_SLOT.word.store(0, Ordering::Relaxed);
    for inst in 0..MAX_INSTANCES {
        a.rings[inst].set(MINE[inst].swap(std::ptr::null_mut(), Ordering::Relaxed));
        a.slots[inst].set(MINE_SLOT[inst].swap(0, Ordering::Relaxed));
    }
    a.held.set(true);
    FLAGS.in_vfork_child.set(true);
    true
}

/// In the parent, the child gone (exec'd or exited): the child's rings are
/// ended (the writer drains them), and the parent's given back, those the
/// end of their instance has not taken meanwhile.
pub(crate) fn vfork_parent() {
    let a = &*ASIDE;
    if !a.held.get() {
        return;
    }
    let mask = crate::sys::block_async_signals();
    // (The word first, as every path that takes rings out of MINE.)
    BY_SLOT.word.store(0, Ordering::Relaxed);
    release_mine();
    for inst in 0..MAX_INSTANCES {
        let (b, i) = (a.rings[inst].get(), a.slots[inst].get());
        if b.is_null() || i == 0 {
            continue;
        }
        let slot = &RINGS[i - 1];
        slot.lock();
        // Under the lock, as the end of an instance takes a ring.
        if slot.ring.load(Ordering::Relaxed) == b && slot.inst.load(Ordering::Relaxed) == inst {
            MINE[inst].store(b, Ordering::Relaxed);
            MINE_SLOT[inst].store(i, Ordering::Relaxed);
        }
        slot.unlock();
    }
    a.held.set(false);
    FLAGS.in_vfork_child.set(false);
    crate::sys::restore_signals(mask);
}
