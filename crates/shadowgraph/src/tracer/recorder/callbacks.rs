//! The recorder's fgraph callbacks: an entry and an exit record per call
//! in the thread's ring, at the depth the call has for this tracer (its own
//! nesting when it filters), or, inside a signal handler that interrupted
//! our code, where the ring says the thread is. Three builds: plain (no
//! filter but a depth limit: the common `record`), filtered, and timed
//! (`-t`: see [`super::timed`]), so that each pays only for what it uses.

use super::args;
use super::state::tracer;
use super::timed::{keep_timed, release_callers, Kept, TIMED_ARGS};
use crate::clock;
use crate::fgraph::filters::{GraphFilter, Verdict};
use crate::record::{ring, writer};
use crate::tracer::fused::{ENTRY_FLAGS, ENTRY_TIMING};
use crate::{fgraph, ftrace};
use shadowgraph_data::format::Kind;
use std::sync::atomic::{AtomicU64, Ordering};

// The callbacks, in two builds: TIMED for tracers with a time filter, so
// that the others pay nothing for it.
pub(super) extern "C" fn on_entry(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    r: &mut ftrace::Regs,
) -> bool {
    entry::<false>(e, u, r)
}

pub(super) extern "C" fn on_entry_timed(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    r: &mut ftrace::Regs,
) -> bool {
    entry::<true>(e, u, r)
}

pub(super) extern "C" fn on_return(
    r: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    regs: &fgraph::RetRegs,
) {
    exit::<false>(r, u, regs)
}

/// For a call reported as unwound: whether it stays open (the thread
/// ended inside it, or a `longjmp` left it for a traced `setjmp`). It
/// never returned, and its exit is not written, as uftrace writes none;
/// the views show it open.
#[inline(always)]
fn left_open() -> bool {
    fgraph::unwound_stays_open()
}

pub(super) extern "C" fn on_return_timed(
    r: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    regs: &fgraph::RetRegs,
) {
    exit::<true>(r, u, regs)
}

/// A plain tracer's depth limit (`-D`; 0: none), by instance.
pub(super) static PLAIN_MAX_DEPTH: [std::sync::atomic::AtomicU32; writer::MAX_INSTANCES] =
    [const { std::sync::atomic::AtomicU32::new(0) }; writer::MAX_INSTANCES];

/// Whether a plain tracer records arguments (numbers in registers, no
/// return values), by instance.
pub(super) static PLAIN_ARGS: [std::sync::atomic::AtomicBool; writer::MAX_INSTANCES] =
    [const { std::sync::atomic::AtomicBool::new(false) }; writer::MAX_INSTANCES];

// A lone tracer without filters but a depth limit (the common `record`):
// the event's depth is the record's, and nothing else is looked at but
// the arguments of a tracer that records some.
pub(super) extern "C" fn on_entry_plain(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    r: &mut ftrace::Regs,
) -> bool {
    let max = PLAIN_MAX_DEPTH[u.private].load(Ordering::Relaxed);
    if max > 0 && e.depth >= max as i32 {
        return false;
    }
    if PLAIN_ARGS[u.private].load(Ordering::Relaxed) {
        return entry::<false>(e, u, r);
    }
    emit_entry(u, e.depth.clamp(0, 1023) as u16, e.func, None, false);
    true
}

pub(super) extern "C" fn on_return_plain(
    r: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    _: &fgraph::RetRegs,
) {
    // A frame the multi path made is every user's, also one as deep as a
    // user's limit, whose entry it did not record (fused::let_multi_stand_in).
    if PLAIN_MAX_DEPTH[u.private].load(Ordering::Relaxed) != 0 && beyond_limit(r, u) {
        return;
    }
    emit_exit(u, r, r.depth.clamp(0, 1023) as u16, None);
}

/// Whether a call of a recorder with a depth limit is as deep as it (kept
/// off the path of those without one).
#[cold]
#[inline(never)]
fn beyond_limit(r: &fgraph::GraphReturn, u: &fgraph::GraphUser) -> bool {
    r.depth >= PLAIN_MAX_DEPTH[u.private].load(Ordering::Relaxed) as i32
}

/// In the 8 bytes a call entered inside a signal handler keeps in its
/// frame: the depth its entry was recorded at, with this bit.
const NESTED_DEPTH: u64 = 1 << 32;

/// Whether this callback runs in a signal handler that interrupted our
/// own code (two brackets deep).
fn nested() -> bool {
    ftrace::quiesce::bracket_depth() > 1
}

/// Whether a record of instance `inst` at `depth` belongs at the ring's
/// depth instead: in a signal handler that interrupted our own code, and,
/// where the fused path's plain site entry and return hold no bracket
/// (`fused::ring_depth_witness`), whenever the ring is not at `depth`
/// (`at` more than it: 0 for an entry, 1 for an exit). Such a handler
/// landed between a frame's push and its entry record, or between an exit
/// record and the frame's pop, and the frames it finds are a level off.
#[inline(always)]
fn follows_ring(inst: usize, depth: u16, at: u16) -> bool {
    nested()
        || (crate::tracer::fused::ring_depth_witness()
            // (Calls deeper than records can say are recorded at 1023,
            // the ring's depth running on: not a sign of anything.)
            && depth < 1023
            && writer::ring_depth(inst).is_some_and(|d| d != depth + at))
}

/// The entry record of an untimed tracer's call at `depth`. Inside a
/// signal handler that interrupted our code, the ring's depth is recorded
/// (the ring's records, not the frames, say where the thread is: the
/// handler may have landed between a call's exit record and its frame's
/// pop, one frame deeper); the call keeps it in its frame, so that its
/// exit is recorded at the same depth — also when that exit is reported
/// later, at rest, as unwound (the handler left by `siglongjmp`).
/// `hold`: the call keeps its frame word anyway (0 if not such a depth),
/// so that its return comes to the callbacks, not to the fused path
/// (`fused::attach_filtered`).
#[inline(always)]
fn emit_entry(u: &fgraph::GraphUser, depth: u16, func: usize, data: Option<&[u8]>, hold: bool) {
    let follow = follows_ring(u.private, depth, 0);
    let keep = if follow || hold { u.reserve(8) } else { None };
    let from = if follow {
        ring::Depth::Follow
    } else {
        ring::Depth::Given(depth)
    };
    let (inst, time) = (u.private, fgraph::event_time());
    let at = writer::emit_shared_with_data(inst, Kind::Entry, depth, from, func as u64, time, data);
    if let Some(p) = keep {
        let word = match at {
            Some(d) if follow => NESTED_DEPTH | d as u64,
            _ => 0,
        };
        // SAFETY: 8 reserved, word-aligned bytes of this call's frame,
        // ours until it returns.
        unsafe { (p as *mut u64).write(word) };
    }
}

/// The exit record of an untimed tracer's call at `depth`: at its entry's
/// depth if it kept one ([`emit_entry`]). An exit reported as unwound (a
/// longjmp skipped the call) is written only if the ring is deeper than
/// that: the call's entry is in the ring and its exit is not. A signal
/// handler that left by `siglongjmp` may have interrupted the call's
/// entry or return anywhere, between its record and the frame being
/// handed to us or back (the frame then names no user: fgraph offers it
/// all the same, see `GraphUser::offer_unowned_unwinds`), and only the
/// ring knows which side of the record it was on. One the thread's exit
/// reports is not written ([`left_open`]).
#[inline(always)]
fn emit_exit(u: &fgraph::GraphUser, r: &fgraph::GraphReturn, depth: u16, data: Option<&[u8]>) {
    let nested = if r.unwound {
        if left_open() {
            return;
        }
        nested()
    } else {
        // (Not a setjmp's second return: at its own depth, the ring
        // deeper by the calls the jump left open.)
        follows_ring(u.private, depth, 1) && !fgraph::resuming()
    };
    let kept = if r.unwound || nested || crate::tracer::fused::ring_depth_witness() {
        u.retrieve()
            // SAFETY: the 8 bytes this call's entry reserved (a word).
            .map(|(p, _)| unsafe { (p as *const u64).read() })
            .filter(|w| w & NESTED_DEPTH != 0)
    } else {
        None
    };
    let at = kept.map_or(depth, |w| w as u16);
    if written_or_never_begun(u, r, at) {
        return;
    }
    let from = match kept {
        Some(_) => ring::Depth::Given(at),
        None if nested => ring::Depth::Follow,
        None => ring::Depth::Given(depth),
    };
    let (inst, func, time) = (u.private, r.func as u64, fgraph::event_time());
    writer::emit_shared_with_data(inst, Kind::Exit, depth, from, func, time, data);
}

/// For a call at `depth` reported as unwound: whether the ring is not
/// deeper than that, so that its exit is in the ring already or its entry
/// never was (see [`emit_exit`]).
pub(super) fn written_or_never_begun(
    u: &fgraph::GraphUser,
    r: &fgraph::GraphReturn,
    depth: u16,
) -> bool {
    r.unwound && writer::ring_depth(u.private).is_some_and(|d| d <= depth)
}

/// What tracer `t`'s timed calls keep in their reserved bytes until their
/// entries are written: their arguments after the time word
/// ([`TIMED_ARGS`]), or, with triggers, in the room the triggers keep for
/// each function after their words (past its `read=` room, whose values
/// wait there too).
fn kept(t: Option<&super::state::Tracer>) -> Kept<'_> {
    let Some(t) = t else {
        return Kept::default();
    };
    let words = t
        .filter
        .as_ref()
        .and_then(|f| f.triggers.as_ref())
        .map(|tr| 8 * tr.words());
    Kept {
        args: t.args.as_ref().map(|_| words.unwrap_or(TIMED_ARGS)),
        reads: words.zip(t.reads.as_deref()),
    }
}

#[inline(always)]
fn entry<const TIMED: bool>(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    regs: &mut ftrace::Regs,
) -> bool {
    let t = tracer(u);
    // Arguments, where `-A` names the function; a return value to take
    // holds the call's return here, away from the fused paths' (the
    // single one's and the one several share).
    let (specs, hold) = match (t, e.site_id()) {
        (Some(t), Some(id)) => match &t.args {
            Some(a) => (
                a.entry(id),
                a.ret(id).is_some() && (t.fused || u.multi_path_stands_in()),
            ),
            None => (&[][..], false),
        },
        _ => (&[][..], false),
    };
    // A timed call keeps its time word and (within what a frame may
    // reserve) its arguments until it is known to last long enough.
    let room = match TIMED {
        false => 0,
        true if specs.is_empty() || kept(t).args.is_none() => 8,
        true => match TIMED_ARGS + 8 + args::bound(specs) {
            r if r <= fgraph::MAX_RESERVE => r,
            _ => 8,
        },
    };
    let (depth, word) = match t.and_then(|t| t.filter.as_ref()) {
        None => (e.depth, None),
        // The filter's bytes only for the time filter (they hold the
        // call's start).
        Some(f) => match f.entry_with(e, u, room) {
            Verdict::Record(p) => (GraphFilter::own_depth(u) as i32 - 1, Some(p)),
            Verdict::Silent => return true,
            Verdict::Reject => return false,
        },
    };
    // `read=`: what the function's triggers read, after its entry (at its
    // time, or with it when it is written late).
    let read = match (t, e.site_id()) {
        (Some(t), Some(id)) => t.reads.as_ref().and_then(|r| r.get(id as usize).copied()),
        _ => None,
    }
    .unwrap_or(0);
    let mut depth = depth.clamp(0, 1023) as u16;
    if TIMED {
        // The filter's word (a recorded call's), else one of our own.
        let word = word.or_else(|| u.reserve(room).map(|p| p as *mut u64));
        if let Some(w) = word {
            // The arguments where the tracer keeps them (`kept`), in this
            // call's reservation (`w`, `len` bytes) if it has room; the
            // values its `read=` triggers read, in their room.
            let at = kept(t).of(e.func).0.filter(|_| !specs.is_empty());
            let reserved = u.retrieve().filter(|r| r.0 == w as *mut u8);
            if let Some(f) = t.and_then(|t| t.filter.as_ref()).filter(|_| read != 0) {
                super::reads::keep_at_entry(u, f, read);
            }
            if let (Some(at), Some((_, len))) = (at, reserved) {
                if len > at + 8 {
                    // SAFETY: `len` reserved, word-aligned bytes, ours
                    // until the call returns: the arguments' length at
                    // `at`, then the data, written before the call is timed
                    // (a handler may write its entry from then on).
                    unsafe {
                        let p = (w as *mut u8).add(at);
                        let data = std::slice::from_raw_parts_mut(p.add(8), len - at - 8);
                        let n = args::capture_args(specs, regs, data).unwrap_or(0);
                        (p as *mut u64).write(n as u64);
                    }
                }
            }
            // SAFETY: 8 reserved, word-aligned bytes, ours until the call
            // returns.
            let w = unsafe { &*(w as *const AtomicU64) };
            // By one exchange from ENTRY_TIMING: not if a handler wrote
            // the entry meanwhile.
            w.store(ENTRY_TIMING, Ordering::Relaxed);
            crate::local::exchange(w, ENTRY_TIMING, clock::now() & !ENTRY_FLAGS);
            return true;
        }
        // No room on the shadow stack: recorded now, unfiltered, after its
        // waiting callers (time order).
        let every_frame = t.is_none_or(|t| t.filter.is_none());
        let time = clock::now() & !ENTRY_FLAGS;
        depth = release_callers(u, depth, time, kept(t), every_frame);
    }
    let watch = t.is_some_and(|t| t.watch_cpu);
    let opened = (read != 0 || watch) && super::reads::open_time();
    if specs.is_empty() {
        emit_entry(u, depth, e.func, None, hold);
    } else if args::bound(specs) <= args::SMALL {
        let mut data = [0u8; args::SMALL];
        let n = args::capture_args(specs, regs, &mut data);
        emit_entry(u, depth, e.func, n.map(|n| &data[..n]), hold);
    } else {
        let mut data = [0u8; ring::MAX_DATA];
        let n = args::capture_args(specs, regs, &mut data);
        emit_entry(u, depth, e.func, n.map(|n| &data[..n]), hold);
    }
    if let Some(f) = t.and_then(|t| t.filter.as_ref()).filter(|_| read != 0) {
        super::reads::at_entry(u, f, depth, read);
    }
    if watch {
        super::reads::watch_cpu(u, depth);
    }
    super::reads::close_time(opened);
    true
}

#[inline(always)]
fn exit<const TIMED: bool>(r: &fgraph::GraphReturn, u: &fgraph::GraphUser, regs: &fgraph::RetRegs) {
    let t = tracer(u);
    let depth = match t.and_then(|t| t.filter.as_ref()) {
        None => r.depth,
        Some(f) => match f.ret(r, u) {
            Some(_) => GraphFilter::own_depth(u) as i32,
            None => return,
        },
    };
    let depth = depth.clamp(0, 1023) as u16;
    if TIMED {
        if r.unwound && left_open() {
            return;
        }
        if let Some(t) = t {
            // The threshold for this call: triggers' (`time=`, `trace`,
            // `caller`), else the tracer's.
            let min = t
                .filter
                .as_ref()
                .and_then(|f| f.threshold(u))
                .unwrap_or(t.min_ticks);
            let every_frame = t.filter.is_none();
            if !keep_timed(u, min, (r.func, depth), kept(Some(t)), every_frame) {
                return;
            }
        }
        if written_or_never_begun(u, r, depth) {
            return;
        }
        // `read=`: the change since the entry, before the exit, at its time
        // (the entry's values were written with it).
        let reads = t.filter(|t| t.reads.is_some() && !r.unwound);
        let opened = reads.is_some() && super::reads::open_time();
        if let Some(f) = reads.and_then(|t| t.filter.as_ref()) {
            super::reads::at_exit(u, f, depth);
        }
        let (inst, func, from) = (u.private, r.func as u64, writer::depth_from(depth));
        match retval_spec(t, r) {
            None => writer::emit_shared(inst, Kind::Exit, depth, func, fgraph::event_time()),
            Some(s) => with_retval(s, regs, |data| {
                let time = fgraph::event_time();
                writer::emit_shared_with_data(inst, Kind::Exit, depth, from, func, time, data);
            }),
        }
        super::reads::close_time(opened);
    } else {
        // `read=`: the change since the entry, before the exit, at its time.
        let reads = t.filter(|t| t.reads.is_some() && !r.unwound);
        let watch = t.is_some_and(|t| t.watch_cpu) && !r.unwound;
        let opened = (reads.is_some() || watch) && super::reads::open_time();
        if let Some(f) = reads.and_then(|t| t.filter.as_ref()) {
            super::reads::at_exit(u, f, depth);
        }
        if watch {
            super::reads::watch_cpu(u, depth);
        }
        match retval_spec(t, r) {
            None => emit_exit(u, r, depth, None),
            Some(s) => with_retval(s, regs, |data| emit_exit(u, r, depth, data)),
        }
        super::reads::close_time(opened);
    }
}

/// `f` of the data of return value `s` (None if it does not fit a record):
/// in a buffer a string at its longest fits, or, for a larger structure,
/// one of the most data a record takes.
#[inline(always)]
fn with_retval(
    s: &shadowgraph_data::args::ArgSpec,
    regs: &fgraph::RetRegs,
    f: impl FnOnce(Option<&[u8]>),
) {
    if args::bound(std::slice::from_ref(s)) <= 112 {
        let mut data = [0u8; 112];
        let n = args::capture_retval(s, regs, &mut data);
        f(n.map(|n| &data[..n]))
    } else {
        let mut data = [0u8; ring::MAX_DATA];
        let n = args::capture_retval(s, regs, &mut data);
        f(n.map(|n| &data[..n]))
    }
}

/// The return value to record of the call returning, where `-R` names its
/// function (not for a call reported as unwound: it returned none).
fn retval_spec<'a>(
    t: Option<&'a super::state::Tracer>,
    r: &fgraph::GraphReturn,
) -> Option<&'a shadowgraph_data::args::ArgSpec> {
    let a = t?.args.as_ref()?;
    if r.unwound {
        return None;
    }
    a.ret(ftrace::site_id_of(r.func)?)
}
