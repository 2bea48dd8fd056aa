//! Which recorders the multi path (multi.rs) stands in for, and what it
//! keeps of each: a plain recorder's depth limit, a filtered one's
//! filter table, and, for any of them, the sites whose calls it leaves to
//! the callbacks of every user (a trigger's own function, arguments or a
//! return value to record). All of it is set before the user registers,
//! and read by the path only after MULTI_FRAME_WORD, which fgraph
//! publishes (Release) when the user registers.

use super::site_args::GENERAL;
use crate::fgraph::GraphUser;
use crate::ftrace::SiteId;
use crate::record::writer;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Each recording instance's depth limit on the multi path (0: none):
/// its records are those of calls less deep ([`let_multi_stand_in`]).
pub(super) static MULTI_MAX_DEPTH: [AtomicU32; writer::MAX_INSTANCES] =
    [const { AtomicU32::new(0) }; writer::MAX_INSTANCES];

/// Each recording instance's graph filters on the multi path, a
/// `FusedFilter` (0: none, `let_multi_stand_in_filtered`).
pub(super) static MULTI_FILTER: [AtomicU64; writer::MAX_INSTANCES] =
    [const { AtomicU64::new(0) }; writer::MAX_INSTANCES];

/// The sites every filter of [`MULTI_FILTER`] has a class for (ids
/// below; `u64::MAX` while none has been made): a call of a site beyond
/// goes the general way, before the path writes anything.
pub(super) static MULTI_FILTER_SITES: AtomicU64 = AtomicU64::new(u64::MAX);

/// Whether a user of the multi path ever had a depth limit: until one
/// has, the path looks at none.
pub(super) static MULTI_ANY_LIMIT: AtomicBool = AtomicBool::new(false);

/// Whether a user of the multi path ever had graph filters: until one
/// has, the path looks at none.
pub(super) static MULTI_ANY_FILTER: AtomicBool = AtomicBool::new(false);

/// Lets the multi path stand in for `user`, a graph user (not registered
/// yet) whose entry callback only emits an entry record of every call at
/// the depth fgraph gives less than `max_depth` (0: any), and whose return
/// callback only emits the exit record of those, to recording instance
/// `user.private` — the plain recorder. False (nothing changed) for an
/// instance out of range.
pub fn let_multi_stand_in(user: &GraphUser, max_depth: u32) -> bool {
    if user.private >= writer::MAX_INSTANCES {
        return false;
    }
    // Relaxed (all): read by the path only after MULTI_FRAME_WORD, which
    // fgraph publishes (Release) when the user registers, later. (An
    // instance used again: no filters of an earlier recorder.)
    MULTI_MAX_DEPTH[user.private].store(max_depth, Ordering::Relaxed);
    MULTI_FILTER[user.private].store(0, Ordering::Relaxed);
    MULTI_CLASSES[user.private].store(0, Ordering::Relaxed);
    if max_depth != 0 {
        MULTI_ANY_LIMIT.store(true, Ordering::Relaxed);
    }
    user.let_multi_path_stand_in();
    true
}

/// [`let_multi_stand_in`] for a plain recorder whose entry callback also
/// records the arguments of the sites `has_args` names (no return
/// values): the path takes the calls of the other sites, and leaves every
/// call of those to the callbacks, of every user (it records no data).
/// False (nothing changed) as for [`let_multi_stand_in`].
pub fn let_multi_stand_in_with_args(
    user: &GraphUser,
    max_depth: u32,
    has_args: &dyn Fn(SiteId) -> bool,
) -> bool {
    if !let_multi_stand_in(user, max_depth) {
        return false;
    }
    let n = crate::ftrace::sites().len();
    let classes: Vec<u8> = (0..n as SiteId)
        .map(|id| if has_args(id) { GENERAL } else { 0 })
        .collect();
    let classes = Box::leak(classes.into_boxed_slice());
    set_classes(user.private, classes.as_ptr(), n as u64);
    true
}

/// What the multi path keeps of a recorder with graph filters
/// (`let_multi_stand_in_filtered`): its filter table `table` (a
/// `FusedFilter`, never freed), and the table's site classes.
pub(super) fn stand_in_filtered(user: &GraphUser, table: u64, classes: *const u8, len: u64) {
    // Relaxed (all): see the module's comment.
    MULTI_FILTER_SITES.fetch_min(len, Ordering::Relaxed);
    MULTI_MAX_DEPTH[user.private].store(0, Ordering::Relaxed);
    MULTI_FILTER[user.private].store(table, Ordering::Relaxed);
    set_classes(user.private, classes, len);
    MULTI_ANY_FILTER.store(true, Ordering::Relaxed);
    user.let_multi_path_stand_in();
}

/// Each recording instance's site classes on the multi path where the
/// calls of some sites go the general way (a byte per site id, with
/// [`GENERAL`] where the recorder's callbacks must take the call); 0:
/// none. Its users' bits are in the thread's `BySlot::general`, and the
/// entry looks their sites up before it writes anything (multi.rs, label
/// 84). The table covers every site below [`MULTI_FILTER_SITES`].
pub(super) static MULTI_CLASSES: [AtomicU64; writer::MAX_INSTANCES] =
    [const { AtomicU64::new(0) }; writer::MAX_INSTANCES];

/// `classes` (`len` bytes, never freed) as instance `inst`'s
/// [`MULTI_CLASSES`] if some site is [`GENERAL`] in it, else none.
fn set_classes(inst: usize, classes: *const u8, len: u64) {
    // SAFETY: a filter table's classes, `len` bytes, never freed.
    let bytes = unsafe { std::slice::from_raw_parts(classes, len as usize) };
    let general = bytes.iter().any(|c| c & GENERAL != 0);
    // Relaxed (both): see the module's comment.
    if general {
        MULTI_FILTER_SITES.fetch_min(len, Ordering::Relaxed);
        MULTI_ANY_FILTER.store(true, Ordering::Relaxed);
    }
    MULTI_CLASSES[inst].store(if general { classes as u64 } else { 0 }, Ordering::Relaxed);
}
