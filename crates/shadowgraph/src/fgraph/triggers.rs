//! A user's triggers (uftrace's `-T`, with `-F`/`-N` among them): per
//! function, take its calls in or leave them out, set the depth limit,
//! switch tracing on or off, end tracing. The user's thread variable holds
//! what uftrace's per-thread filter holds, and each call the user accepts
//! keeps the variable as it found it, which its return puts back:
//!
//! ```text
//!  thread variable (64 bits)                 the call's reserved words
//!  63      48 47      32 31      16 15     0    +0  the recorder's word
//!  | notrace | filter   | levels   | own   |    +8  the variable at entry
//!  | calls   | calls    | left ^ D | depth |    +16 flags, time threshold
//!                                                +24 size threshold (only
//!                                                    with a `size=` trigger)
//! ```
//!
//! The recorder's word comes first, where its callbacks look for theirs
//! (the time filter's entry time, a signal handler's record depth): zero
//! until they write it.
//!
//! `filter calls` and `notrace calls` are those open on the thread;
//! `levels left` is stored exclusive-or the tracer's depth limit `D` (a
//! new thread's zero is a fresh limit); `own depth` counts the calls kept
//! open that are recorded or would be but for tracing being off (the
//! depth records carry). A call of a function without a trigger of its
//! own changes the own depth and the levels left alone, and is decided by
//! the variable and the switch alone: where no time, size or caller filter
//! needs more ([`Triggers::fusable`]), a recorder's fused path decides
//! those calls and keeps the variable for them.

use super::{GraphEntry, GraphUser};
use crate::ftrace::{current_tid, ThreadFilter};
use std::sync::atomic::{AtomicU8, Ordering};

/// What one function's trigger does (merged from every spec naming it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteTrigger {
    /// `Some(true)`: a filter function (`-F`, `filter`); `Some(false)`:
    /// a notrace function (`-N`, `notrace`).
    pub filter: Option<bool>,
    /// `depth=N`: at most N levels inside its calls.
    pub depth: Option<u16>,
    /// `trace_on` (true) / `trace_off` (false).
    pub trace: Option<bool>,
    /// `finish`: its call is the last recorded.
    pub finish: bool,
    /// `time=T` (in clock ticks): inside its calls, the time filter's
    /// threshold.
    pub time_ticks: Option<u64>,
    /// `trace`: its calls are kept whatever the time filter says.
    pub always: bool,
    /// `caller` (`-C`): its calls are kept, and the calls they are inside
    /// of; where some function has it, no other call is kept on its own.
    pub caller: bool,
    /// The function's size in bytes (`u64::MAX`: unknown, never small):
    /// below the size filter's threshold its calls are not recorded (its
    /// callees are, in its place).
    pub size: u64,
    /// `size=N`: inside its calls (and for itself), the size filter's
    /// threshold.
    pub min_size: Option<u64>,
    /// Bytes (a multiple of 8) the tracer keeps in each of its calls'
    /// frames, after the triggers' words (`GraphFilter::room`): their
    /// first word reads 0 until the tracer writes it.
    pub room: u16,
}

impl Default for SiteTrigger {
    fn default() -> Self {
        SiteTrigger {
            filter: None,
            depth: None,
            trace: None,
            finish: false,
            time_ticks: None,
            always: false,
            caller: false,
            size: u64::MAX,
            min_size: None,
            room: 0,
        }
    }
}

/// A user's triggers by site id, and the state they switch.
pub struct Triggers {
    sites: Box<[SiteTrigger]>,
    /// Whether some function is a filter function: calls outside all of
    /// them are declined.
    mode_in: bool,
    /// The depth limit (`-D`; `u16::MAX`: none), restarted at each filter
    /// function's call.
    limit: u16,
    /// The switch every thread reads: [`Triggers::ON`] while tracing is
    /// on (`trace_on`, `trace_off`), [`Triggers::FINISHED`] once a
    /// `finish` trigger fired (nothing more is recorded).
    switch: AtomicU8,
    /// Whether a fused path may decide the calls of functions without a
    /// trigger of their own (see [`Triggers::fusable`]).
    fusable: bool,
    /// The time filter's threshold outside every `time=` call (ticks).
    min_ticks: u64,
    /// Whether some trigger sets a threshold: calls keep theirs.
    has_time: bool,
    /// The size filter's threshold outside every `size=` call (`-Z`).
    min_size: u64,
    /// Whether some trigger sets a size threshold: calls keep theirs (a
    /// fourth word).
    has_size: bool,
    /// Whether some function is a caller filter's (`-C`).
    has_caller: bool,
}

/// What the entry callback should do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Record the call: 8 bytes are reserved for it (e.g. its start time),
    /// unless asked not to (`GraphFilter::entry_with`: null).
    Record(*mut u64),
    /// Accept without recording (a notrace subtree starts): return `true`.
    Silent,
    /// Decline: return `false`.
    Reject,
}

const NORECORD: u64 = 1;
/// The call is kept whatever it lasts (`trace`).
const ALWAYS: u64 = 2;
/// The call is a caller filter's: it may be kept on its own.
const CALLER: u64 = 4;
/// The flags word above its flags: the time threshold inside the call.
const THRESHOLD_SHIFT: u32 = 3;
/// The words each accepted call reserves (one more with `size=`).
const WORDS: usize = 3;
const FIELD: u64 = 0xffff;

#[derive(Clone, Copy)]
struct State {
    own: u64,
    left: u64,
    filters: u64,
    notraces: u64,
}

impl Triggers {
    /// Triggers of the sites `sites` (by id; sites beyond it have none),
    /// `mode_in` if some spec took functions in, `limit` the depth limit
    /// (0: none), tracing on at the start unless `disabled`, `min_ticks`
    /// the time filter's threshold (`-t`, 0: none), `min_size` the size
    /// filter's (`-Z`, 0: none).
    pub fn new(
        sites: Vec<SiteTrigger>,
        mode_in: bool,
        limit: u32,
        disabled: bool,
        (min_ticks, min_size): (u64, u64),
    ) -> Triggers {
        let has_time = sites.iter().any(|s| s.time_ticks.is_some());
        // (A size threshold for every call, `-Z`, is a class of sites:
        // those below it are left to the callbacks, `acts_at`.)
        let fusable = min_ticks == 0
            && sites
                .iter()
                .all(|s| s.time_ticks.is_none() && !s.always && !s.caller && s.min_size.is_none());
        Triggers {
            fusable,
            min_ticks,
            has_time,
            min_size,
            has_size: sites.iter().any(|s| s.min_size.is_some()),
            has_caller: sites.iter().any(|s| s.caller),
            sites: sites.into(),
            mode_in,
            limit: if limit == 0 {
                u16::MAX
            } else {
                limit.min(u16::MAX as u32) as u16
            },
            switch: AtomicU8::new(if disabled { 0 } else { Self::ON }),
        }
    }

    /// The switch's bit while tracing is on.
    pub const ON: u8 = 1;
    /// The switch's bit once tracing finished.
    pub const FINISHED: u8 = 2;

    /// Whether the calls of functions without a trigger of their own
    /// ([`Triggers::acts_at`]) are decided by the thread variable and the
    /// switch alone, as `Triggers::entry` decides them, which a fused
    /// path may then do: declined once FINISHED, inside a notrace
    /// function's call, outside every filter function's call where some
    /// function is one ([`Triggers::mode_in`]), or with no levels left;
    /// else accepted with the own depth one more and the levels left one
    /// less, recorded while the switch is [`Triggers::ON`], and at the
    /// return the variable one level back (a frame without reserved
    /// words: `Triggers::ret`). True unless a time or caller filter (or
    /// `trace`, or a `size=` trigger) keeps words in every call's frame.
    pub fn fusable(&self) -> bool {
        self.fusable
    }

    /// Whether site `id` has a trigger of its own, which its calls' entry
    /// must apply, or is a function smaller than the size filter's
    /// threshold, whose calls are kept but not recorded (any site, unless
    /// [`Triggers::fusable`]).
    pub fn acts_at(&self, id: crate::ftrace::SiteId) -> bool {
        !self.fusable
            || self.sites.get(id as usize).is_some_and(|s| {
                s.filter.is_some()
                    || s.depth.is_some()
                    || s.trace.is_some()
                    || s.finish
                    || s.room > 0
                    || s.size < self.min_size
            })
    }

    /// Whether some function is a filter function (calls outside all of
    /// them are declined).
    pub fn mode_in(&self) -> bool {
        self.mode_in
    }

    /// The depth limit as the thread variable's levels field is stored
    /// exclusive-or it (`u16::MAX`: none).
    pub fn limit_word(&self) -> u16 {
        self.limit
    }

    /// The switch's byte ([`Triggers::ON`], [`Triggers::FINISHED`]), for a
    /// fused path to read as [`Triggers::enabled`] does: valid while the
    /// triggers are.
    pub fn switch_byte(&self) -> *const u8 {
        self.switch.as_ptr()
    }

    /// Whether some trigger sets a time threshold, keeps calls from it, or
    /// keeps calls for what they call (`caller`): calls wait to be kept.
    pub fn timed(&self) -> bool {
        self.has_time || self.has_caller || self.sites.iter().any(|s| s.always)
    }

    /// The words each accepted call reserves before its function's room
    /// ([`SiteTrigger::room`]).
    pub fn words(&self) -> usize {
        WORDS + self.has_size as usize
    }

    /// Whether tracing is on (a `trace_on`/`trace_off` trigger switched
    /// it, or the start said).
    pub fn enabled(&self) -> bool {
        // Relaxed: a switch another thread makes is seen at its next call
        // or soon after, as in uftrace; nothing else is ordered by it.
        self.switch.load(Ordering::Relaxed) == Self::ON
    }

    /// Switches tracing on or off (`trace`) and ends it (`finish`) for
    /// every thread, as `trace_on`, `trace_off` and `finish` triggers do,
    /// from outside any call (a signal's handler). Async-signal-safe.
    pub fn switch(&self, trace: Option<bool>, finish: bool) {
        if let Some(on) = trace {
            self.turn(on);
        }
        if finish {
            // Relaxed: see `enabled`.
            self.switch.fetch_or(Self::FINISHED, Ordering::Relaxed);
        }
    }

    /// Tracing switched on or off (the FINISHED bit kept).
    fn turn(&self, on: bool) {
        // Relaxed: see `enabled`. (One atomic operation on the byte, which
        // a signal handler may switch too.)
        match on {
            true => self.switch.fetch_or(Self::ON, Ordering::Relaxed),
            false => self.switch.fetch_and(!Self::ON, Ordering::Relaxed),
        };
    }

    fn decode(&self, v: u64) -> State {
        State {
            own: v & FIELD,
            left: ((v >> 16) & FIELD) ^ self.limit as u64,
            filters: (v >> 32) & FIELD,
            notraces: v >> 48,
        }
    }

    fn encode(&self, s: State) -> u64 {
        s.own.min(FIELD)
            | ((s.left ^ self.limit as u64) & FIELD) << 16
            | s.filters.min(FIELD) << 32
            | s.notraces.min(FIELD) << 48
    }

    /// The entry of `ent` for `user` (uftrace's mcount_entry_filter_check
    /// and _record): `Record` points to the recorder's word if `word`,
    /// else is null.
    pub(super) fn entry(
        &self,
        ent: &GraphEntry,
        user: &GraphUser,
        word: bool,
        threads: Option<&ThreadFilter>,
    ) -> Verdict {
        let Some(var) = user.task_var() else {
            return Verdict::Reject;
        };
        // Relaxed: see `enabled`.
        if self.switch.load(Ordering::Relaxed) & Self::FINISHED != 0 {
            return Verdict::Reject;
        }
        let v = var.get();
        let st = self.decode(v);
        if st.notraces > 0 {
            return Verdict::Reject;
        }
        let tr = ent
            .site_id()
            .and_then(|id| self.sites.get(id as usize))
            .copied()
            .unwrap_or_default();
        let mut n = st;
        let mut flags = 0;
        match tr.filter {
            Some(true) => {
                n.filters += 1;
                n.left = self.limit as u64;
            }
            Some(false) => {
                n.notraces += 1;
                flags |= NORECORD;
            }
            None if self.mode_in && st.filters == 0 => return Verdict::Reject,
            None => {}
        }
        if let Some(d) = tr.depth {
            n.left = d as u64;
        }
        if let Some(on) = tr.trace {
            self.turn(on);
        }
        if n.left == 0 || threads.is_some_and(|t| !t.allows(current_tid())) {
            return Verdict::Reject;
        }
        n.left -= 1;
        let nearest = || {
            user.retrieve_nearest_own()
                .filter(|(_, len)| *len >= self.words() * 8)
                .map(|(q, _)| q as *const u64)
        };
        // The size threshold inside this call: its own, else its caller's.
        let min_size = if self.has_size {
            tr.min_size
                // SAFETY: an ancestor's reserved words, live below ours.
                .or_else(|| nearest().map(|q| unsafe { q.add(WORDS).read() }))
                .unwrap_or(self.min_size)
        } else {
            self.min_size
        };
        if tr.size < min_size {
            flags |= NORECORD;
        }
        // (The depth records carry counts recorded calls only.)
        if flags & NORECORD == 0 {
            n.own += 1;
        }
        if tr.always {
            flags |= ALWAYS;
        }
        if tr.caller {
            flags |= CALLER;
        }
        if self.has_time {
            // The threshold inside this call: its own, else its caller's.
            // SAFETY: an ancestor's reserved words, live below ours.
            let outer = nearest().map(|q| unsafe { q.add(2).read() } >> THRESHOLD_SHIFT);
            let t = tr.time_ticks.or(outer).unwrap_or(self.min_ticks);
            flags |= t.min(u64::MAX >> THRESHOLD_SHIFT) << THRESHOLD_SHIFT;
        }
        let room = (tr.room as usize).next_multiple_of(8);
        let Some(p) = user.reserve(self.words() * 8 + room) else {
            return Verdict::Reject;
        };
        // SAFETY: words() reserved, 8-aligned words of this call's frame,
        // ours until it returns.
        unsafe {
            let w = p as *mut u64;
            w.write(0);
            w.add(1).write(v);
            w.add(2).write(flags);
            if self.has_size {
                w.add(WORDS).write(min_size);
            }
            if room > 0 {
                w.add(self.words()).write(0);
            }
        }
        var.set(self.encode(n));
        // Named at once, as GraphFilter::entry_with does: `ret` puts the
        // variable back however the callback is left.
        user.name_in_frame();
        // Relaxed: see `enabled`.
        let record = flags & NORECORD == 0 && self.switch.load(Ordering::Relaxed) & Self::ON != 0;
        if tr.finish {
            // (This call's entry is still recorded: the caller writes it.)
            self.switch.fetch_or(Self::FINISHED, Ordering::Relaxed);
        }
        if record {
            Verdict::Record(if word {
                p as *mut u64
            } else {
                std::ptr::null_mut()
            })
        } else {
            Verdict::Silent
        }
    }

    /// The return of a call `user` accepted: the thread's state put back
    /// as the call found it; `Some` (the recorder's word) when its exit is
    /// recorded.
    pub(super) fn ret(&self, user: &GraphUser) -> Option<*mut u64> {
        let var = user.task_var()?;
        let Some((p, len)) = user.retrieve() else {
            if self.fusable {
                // A frame a fused path kept, without words (see
                // `Triggers::fusable`): the call of a function without a
                // trigger of its own took one own level and one level
                // left, and is recorded while tracing is on.
                let st = self.decode(var.get());
                var.set(self.encode(State {
                    own: st.own.saturating_sub(1),
                    left: st.left + 1,
                    ..st
                }));
                return self.enabled().then(std::ptr::null_mut);
            }
            return None;
        };
        if len < self.words() * 8 {
            return None;
        }
        // SAFETY: the words this call's entry reserved and wrote,
        // 8-aligned.
        let (saved, flags) = unsafe {
            let w = p as *const u64;
            (w.add(1).read(), w.add(2).read())
        };
        var.set(saved);
        if flags & NORECORD != 0 || !self.enabled() {
            return None;
        }
        Some(p as *mut u64)
    }

    /// The bytes the tracer keeps in the frame of the call whose entry or
    /// return callback runs ([`SiteTrigger::room`]), if it has any.
    pub(super) fn room(&self, user: &GraphUser) -> Option<(*mut u64, usize)> {
        let (p, len) = user.retrieve()?;
        let at = self.words() * 8;
        // SAFETY: inside the reservation of `len` bytes, 8-aligned.
        (len > at).then(|| (unsafe { p.add(at) } as *mut u64, len - at))
    }

    /// The time filter's threshold (ticks) for the call returning now:
    /// 0 if it is kept whatever it lasted (`trace`), `u64::MAX` if it is
    /// not kept on its own (some function is a caller filter's, not this
    /// one: it is kept only when a call inside it is).
    pub(super) fn threshold(&self, user: &GraphUser) -> u64 {
        let flags = match user.retrieve() {
            // SAFETY: the words this call's entry reserved and wrote.
            Some((p, len)) if len >= WORDS * 8 => unsafe { (p as *const u64).add(2).read() },
            _ => 0,
        };
        if flags & ALWAYS != 0 {
            0
        } else if self.has_caller && flags & CALLER == 0 {
            u64::MAX
        } else if self.has_time {
            flags >> THRESHOLD_SHIFT
        } else {
            self.min_ticks
        }
    }
}
