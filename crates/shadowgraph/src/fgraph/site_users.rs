//! The users each site's filter selects (design §4.8): one 16-bit mask
//! per site id, bit i for the user in slot i, that the site entries read
//! in one load. With several users registered, a site only one of them
//! wants takes that user's single-user path, and the multi path records
//! a call for the users that want it only: a user whose filter declines
//! a site costs its calls a lookup, not the loop over users.
//!
//! The masks are rebuilt, under the core's lock, whenever the manager's
//! subops or their sets change (`Ops::on_subops_change`), and by the
//! registry, through the same hook, when a user is counted or leaves:
//!
//! * a user is counted (its bits set) after its subop has joined and
//!   before its slot is published in `ARRAY`: a site entry that finds its
//!   bit but not yet the user goes the general way;
//! * a user leaving is uncounted after its slot is cleared in `ARRAY` and
//!   before the grace period that precedes the slot's reuse: an entry that
//!   read a mask naming it is done before a new user takes the slot;
//! * a filter that grows sets its bits before its sites are patched, one
//!   that shrinks clears them before they are set back to nops, so a call
//!   through a site is offered to a user only while its filter selects the
//!   site, as the general way's check of each filter does.
//!
//! Each mask is stored whole (one 16-bit store): an entry finds every
//! user that registered together or none of them.
//!
//! Every path that hands a call to users reads the mask inside its
//! bracket (or its restartable sequence), the sole user's paths too: a
//! thread that passed a site's patched jump just before the site was set
//! back to a nop, or before the users changed, may run the path any time
//! later (preempted in the stub, before the bracket a grace period waits
//! for), and must then offer the call to the users that want it now.

use super::user::{GraphUser, MAX_USERS};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

/// Site ids with a mask: a site at or above it (more sites than that)
/// goes the general way, which checks each user's filter.
pub(crate) const CAPACITY: usize = 1 << 22;

/// The masks, by site id (zero pages until written).
pub(crate) static SITE_USERS: [AtomicU16; CAPACITY] = [const { AtomicU16::new(0) }; CAPACITY];

struct Counted {
    users: [Option<Arc<GraphUser>>; MAX_USERS],
    /// Masks written so far (those above are 0).
    written: usize,
}

static COUNTED: Mutex<Counted> = Mutex::new(Counted {
    users: [const { None }; MAX_USERS],
    written: 0,
});

fn counted() -> std::sync::MutexGuard<'static, Counted> {
    COUNTED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts `user` in slot `i` (Some) or no user there (None); the masks
/// change at the next [`rebuild`].
pub(super) fn set_slot(i: usize, user: Option<&Arc<GraphUser>>) {
    counted().users[i] = user.cloned();
}

/// Rewrites the masks for the counted users' filters over the first `n`
/// sites. Called with the core's lock held (the filters' pairs are
/// current and stay allocated while it is held).
pub(super) fn rebuild(n: usize) {
    let mut c = counted();
    let n = n.min(CAPACITY);
    let mut masks = vec![0u16; n];
    for (i, u) in c.users.iter().enumerate() {
        let Some(u) = u else { continue };
        for &id in u.filter.pair().resolve(n).ids() {
            if let Some(m) = masks.get_mut(id as usize) {
                *m |= 1 << i;
            }
        }
    }
    for (id, cell) in SITE_USERS.iter().enumerate().take(n.max(c.written)) {
        let m = masks.get(id).copied().unwrap_or(0);
        // Relaxed: a mask only chooses among users, each one it names
        // loaded from ARRAY (Acquire) and checked there before it is
        // offered anything; a registration writes its users' bits on its
        // own thread before it publishes their slots (Release), so an
        // entry that found a slot in OCCUPIED (Acquire) reads them after.
        // Written only where it changes, so that the sites no one wants
        // stay zero pages.
        if cell.load(Ordering::Relaxed) != m {
            cell.store(m, Ordering::Relaxed);
        }
    }
    c.written = n;
}

/// The mask of site `id` now; None for an id beyond the table.
#[inline]
pub(super) fn mask(id: u32) -> Option<u16> {
    // Relaxed: as in rebuild.
    SITE_USERS
        .get(id as usize)
        .map(|m| m.load(Ordering::Relaxed))
}

/// Whether site `id`'s mask names the user whose frame word is `word`
/// (its slot's bit; an id beyond the table: yes, its filter decides).
#[inline]
pub(super) fn selects(id: u32, word: u64) -> bool {
    match mask(id) {
        Some(m) => (u64::from(m) << 12) & word != 0,
        None => true,
    }
}

/// In assembly: the mask of the site of the stub whose return address is
/// at `[$at]` (its id at that address + `{id_off}`) in eax, from
/// `{site_users}` of `{site_users_cap}` sites; a site beyond them to
/// `$beyond`. Clobbers rax, rdx.
#[doc(hidden)]
#[macro_export]
macro_rules! site_mask {
    ($at:literal, $beyond:literal) => {
        concat!(
            "mov rax, [",
            $at,
            "]\n",
            "mov eax, dword ptr [rax + {id_off}]\n",
            "cmp eax, {site_users_cap}\n",
            "jae ",
            $beyond,
            "\n",
            "lea rdx, [rip + {site_users}]\n",
            "movzx eax, word ptr [rdx + rax*2]\n",
        )
    };
}

/// In assembly, inside the bracket (or the restartable sequence): whether
/// the site of the stub whose return address is at `[$at]` is one the
/// user whose frame word is the 32-bit operand `$word` wants (its bit in
/// the site's mask, site_mask!); else, or for a site beyond the masks, to
/// `$general`, whose way checks each user's filter. Clobbers rax, rdx.
#[doc(hidden)]
#[macro_export]
macro_rules! site_selects {
    ($at:literal, $word:literal, $general:literal) => {
        concat!(
            $crate::site_mask!($at, $general),
            "shl eax, 12\n",
            "test ",
            $word,
            ", eax\n",
            "jz ",
            $general,
            "\n",
        )
    };
}
