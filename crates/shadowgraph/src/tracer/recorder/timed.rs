//! The time filter (`-t`): a call's entry record waits in its shadow frame
//! (one word: its entry time and the flags of [`crate::tracer::fused`]'s
//! protocol, which the fused path keeps the same way) until the call is
//! known to last long enough; its callers' entries, still waiting, are
//! written first, so that the thread's records stay in time order.

use crate::clock;
use crate::fgraph;
use crate::record::writer;
use crate::tracer::fused::{ENTRY_DROPPED, ENTRY_FLAGS, ENTRY_TIMING, ENTRY_WRITTEN};
use std::sync::atomic::{AtomicU64, Ordering};

/// A time-filtered call of `func` at `depth` returns: false if it was too
/// short to record (nothing of it is written); else its entry record is
/// written if it was not, after those of its ancestors still pending (a
/// call lasts at least as long as the calls it makes, so they will be
/// recorded too, and writing them first keeps the thread's records in time
/// order).
///
/// `every_frame`: the tracer's depths are fgraph's (each frame below a
/// call is a level), not a filter's ([`release_callers`]).
pub(super) fn keep_timed(
    u: &fgraph::GraphUser,
    min_ticks: u64,
    (func, depth): (usize, u16),
    kept: Kept<'_>,
    every_frame: bool,
) -> bool {
    let Some((p, len)) = u.retrieve() else {
        return true; // entered unfiltered
    };
    // SAFETY: our own word in the frame returning now, 8-aligned.
    let me = unsafe { &*(p as *const AtomicU64) };
    let entry = me.load(Ordering::Relaxed);
    if entry & ENTRY_WRITTEN != 0 {
        return true;
    }
    if entry & (ENTRY_DROPPED | ENTRY_TIMING) != 0 || entry == 0 {
        // Judged too short already, or never timed: its frame was left
        // (a signal handler jumped out) before it was popped, or before its
        // entry was timed (the fused path's frames are the user's from the
        // start), and is reported now as unwound. Nothing to write.
        return false;
    }
    if clock::now().wrapping_sub(entry) < min_ticks {
        // Marked by one exchange too: a handler that landed since the load
        // and released this call (its entry is written) gets its exit.
        return !crate::local::exchange(me, entry, entry | ENTRY_DROPPED);
    }
    let depth = release_callers(u, depth, entry, kept, every_frame);
    // A handler releasing its callers meanwhile (this frame among them)
    // writes the entry instead, once, before its own records.
    let words = (entry, entry, entry | ENTRY_WRITTEN);
    write_entry(u, me, words, (depth, func), (p, len), kept);
    true
}

/// What a tracer's timed calls keep in their reserved bytes, beside their
/// time word, until their entries are written.
#[derive(Clone, Copy, Default)]
pub(super) struct Kept<'a> {
    /// Where the tracer records arguments: the offset of their length
    /// (the data after it), past a function's `read=` room where it has
    /// one.
    pub args: Option<usize>,
    /// With `read=` triggers: the offset of a function's room (after the
    /// triggers' words), and each site's read mask.
    pub reads: Option<(usize, &'a [u8])>,
}

impl Kept<'_> {
    /// For a call of the function at `func`: the offset of its arguments'
    /// length, and of its `read=` room if it has one.
    pub(super) fn of(&self, func: usize) -> (Option<usize>, Option<usize>) {
        let mask = self.reads.and_then(|(_, masks)| {
            let id = crate::ftrace::site_id_of(func)?;
            masks.get(id as usize).copied()
        });
        let mask = mask.unwrap_or(0);
        let room = self.reads.filter(|_| mask != 0).map(|r| r.0);
        let args = self.args.map(|a| a + super::reads::room(mask) as usize);
        (args, room)
    }
}

/// Writes a pending entry (as `writer::emit_pending_entry`) of the call of
/// `func` whose reserved bytes are `p`, `len` long, with the arguments it
/// kept; if this wrote it, the events of what its `read=` triggers read,
/// after it at its time. Those are written with the thread's asynchronous
/// signals blocked: a handler's records (later in time) never come
/// between the entry and its events, which would step back behind them.
fn write_entry(
    u: &fgraph::GraphUser,
    word: &AtomicU64,
    words: (u64, u64, u64),
    (depth, func): (u16, usize),
    (p, len): (*mut u8, usize),
    kept: Kept<'_>,
) {
    let (args_at, room) = kept.of(func);
    let args = frame_args(p, len, args_at);
    let room = room.filter(|&at| len >= at + super::reads::room(1) as usize);
    let blocked = room.map(|_| crate::sys::block_async_signals());
    if writer::emit_pending_entry(u.private, word, words, depth, func as u64, args) {
        if let Some(at) = room {
            // (`at` and the room inside the reservation: checked above.)
            super::reads::emit_kept(u.private, p.wrapping_add(at) as *const u64, depth, words.1);
        }
    }
    if let Some(old) = blocked {
        crate::sys::restore_signals(old);
    }
}

/// Where a timed call keeps its arguments in its reserved bytes, without
/// triggers: their length after its time word, then the data.
pub(super) const TIMED_ARGS: usize = 8;

/// The arguments a timed call's entry kept in its frame (`p`, `len`
/// bytes reserved): their length at byte `data` (after the time word, or
/// after the triggers' words), then the data; none where `data` is None
/// (the tracer records no arguments) or the frame kept none.
fn frame_args<'a>(p: *mut u8, len: usize, data: Option<usize>) -> &'a [u8] {
    let Some(at) = data.filter(|&at| len > at + 8) else {
        return &[];
    };
    // SAFETY: `len` bytes reserved in a frame of this thread, live while
    // its call is (our caller's or an ancestor's), 8-aligned; the entry
    // wrote the length (at most the room after it; zero before, as the
    // reservation starts) before timing the call.
    unsafe {
        let n = (p.add(at) as *const u64).read() as usize;
        std::slice::from_raw_parts(p.add(at + 8), n.min(len - at - 8))
    }
}

/// Writes the waiting entries of the callers of the call at `depth` whose
/// callback runs (from its entry or its exit), outermost first. `inner` is
/// that call's entry time. Returns the depth that call's own records go
/// at.
///
/// The depth of each: where the tracer's depths are fgraph's
/// (`every_frame`), that of its frame less the frames below it that have
/// no record before ours. Those are calls a signal handler (we) landed in,
/// in our code: one whose entry has not begun to time it, or one judged
/// too short and not yet popped; its own entry, if any, follows the
/// handler's records. A handler records at the ring's depth, except where
/// the thread has no ring yet: then it starts the ring, at the depth given
/// here — counted as fgraph's it would be one level too deep for each such
/// call. Else (a filter's depths count only frames holding its word), one
/// less per waiting caller.
pub(super) fn release_callers(
    u: &fgraph::GraphUser,
    depth: u16,
    inner: u64,
    kept: Kept<'_>,
    every_frame: bool,
) -> u16 {
    // Pending ancestors: the frames holding our word below the nearest
    // written one (frames without it, silent under a filter, are passed
    // over). `gaps`: frames holding our word, neither written nor
    // pending, beyond the outermost pending one.
    let frames = fgraph::thread_depth().max(0) as usize + 1;
    let (mut outermost, mut pending, mut gaps) = (0, 0u16, 0u16);
    // The thread's first records, none of its calls written (not a forked
    // child's, whose inherited calls were): the pending callers are all
    // its calls open below ours (a gap can only be the one we interrupted,
    // inside them), so each goes at the number of them outside it, and
    // ours after them, whether or not a filter's depth counted the gap.
    let mut fresh = writer::ring_depth(u.private).is_none();
    let mut released = 0u16;
    for k in 1..=frames {
        if let Some((q, _)) = u.retrieve_ancestor(k) {
            // SAFETY: our word in an ancestor frame, live below ours,
            // 8-aligned.
            let word = unsafe { &*(q as *const AtomicU64) };
            let w = word.load(Ordering::Relaxed);
            // Written, or (we are a signal handler) being written by the
            // code we interrupted, its slot claimed before ours.
            if w & ENTRY_WRITTEN != 0 || writer::pending_entry_state(u.private, word) == Some(true)
            {
                fresh = false;
                break;
            }
            // 0: the call's entry callback has not begun to time it (we
            // are a handler that landed in it): not pending; ENTRY_TIMING:
            // pending, timed by us.
            if w != 0 && w & ENTRY_DROPPED == 0 {
                outermost = k;
                pending += 1;
                gaps = 0;
            } else {
                gaps += 1;
            }
        }
    }
    for k in (1..=outermost).rev() {
        if let Some((q, len, f)) = u.retrieve_ancestor_call(k) {
            // SAFETY: as above, 8-aligned.
            let w = unsafe { &*(q as *const AtomicU64) };
            let was = w.load(Ordering::Relaxed);
            if was == 0 || was & ENTRY_DROPPED != 0 {
                gaps += 1;
                continue;
            }
            let d = if fresh {
                released
            } else if every_frame {
                depth.saturating_sub(k as u16 + gaps)
            } else {
                depth.saturating_sub(pending)
            };
            pending -= 1;
            released += 1;
            // Being timed (we are a handler that interrupted its entry
            // callback): the entry time of its nearest timed descendant
            // (ours, if none between), which follows everything in the
            // ring and precedes our records.
            let time = if was == ENTRY_TIMING {
                (1..k)
                    .rev()
                    .filter_map(|j| u.retrieve_ancestor(j))
                    .map(|(q, _)| {
                        // SAFETY: as above, 8-aligned.
                        unsafe { &*(q as *const AtomicU64) }.load(Ordering::Relaxed)
                    })
                    .find(|&t| t != 0 && t & (ENTRY_DROPPED | ENTRY_TIMING) == 0)
                    .map_or(inner, |t| t & !ENTRY_FLAGS)
            } else {
                was
            };
            // A handler that interrupted this loop may have written it.
            if was & ENTRY_WRITTEN == 0 {
                let words = (was, time, time | ENTRY_WRITTEN);
                write_entry(u, w, words, (d, f), (q, len), kept);
            }
        }
    }
    if fresh {
        released
    } else if every_frame {
        depth.saturating_sub(gaps)
    } else {
        depth
    }
}
