//! The filters and triggers a view applies to each thread's calls, as
//! uftrace's views apply them (its `fstack_entry`/`fstack_exit`): per
//! thread, how many `filter` calls and `notrace` calls are open and how
//! many levels the depth limit leaves, each call keeping what it found at
//! its entry and putting it back at its exit; tracing switched on and off
//! for every thread at once (`trace_on`/`trace_off`, `--disable`); the
//! shown depth counted from where showing began.

use crate::dir::DataError;
use crate::format::{Kind, Record};
use crate::trigger::{Actions, FilterMode};
use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

/// One thread's records, as a filter selects them.
pub type Records = Box<dyn Iterator<Item = Result<Record, DataError>>>;

/// The address of a backtrace line's event ([`Kind::Event`]): its depth is
/// the frame's level, its `args` the frame's function name.
pub const BACKTRACE_ADDR: u64 = (1 << 48) - 3;

/// The address of an event that gives the start time of the call whose
/// exit comes next at the event's depth, its entry not shown (tracing was
/// switched on inside it): the exit shows its duration all the same.
pub const STARTED_ADDR: u64 = (1 << 48) - 4;

/// The address of an event that says the call shown at the event's depth
/// ended unseen (tracing was switched off inside it): it is not open.
pub const ENDED_ADDR: u64 = (1 << 48) - 5;

/// Each symbol's trigger (by index in the recording's symbols), and what
/// applies to every thread.
pub(super) struct Triggers {
    pub symbols: Arc<[u64]>,
    pub actions: Arc<[Actions]>,
    /// Whether some `filter` took a function: then calls outside every
    /// `filter` call are not shown.
    pub mode_in: bool,
    /// The functions' names, for backtraces (empty: no backtrace asked).
    pub names: Arc<[Arc<str>]>,
}

impl Triggers {
    pub fn of(&self, addr: u64) -> Option<&Actions> {
        if addr == crate::sched::SCHED_ADDR {
            return None;
        }
        match self.symbols.partition_point(|&a| a <= addr) {
            0 => None,
            i => Some(&self.actions[i - 1]),
        }
    }

    fn name(&self, addr: u64) -> Arc<str> {
        match self.symbols.partition_point(|&a| a <= addr) {
            0 => Arc::from(format!("<{:x}>", crate::loads::untagged(addr))),
            i => self.names[i - 1].clone(),
        }
    }
}

const FILTERED: u8 = 1;
const NOTRACE: u8 = 2;
const NORECORD: u8 = 4;

#[derive(Clone, Copy)]
struct Frame {
    /// The depth limit left when the call began.
    orig_depth: i32,
    flags: u8,
    addr: u64,
    /// Its entry's time (0: no entry was read).
    time: u64,
    /// The depth its entry was shown at.
    shown_at: Option<u16>,
}

/// One thread's records as the filters and triggers show them; depths in
/// are stack depths (DisplayDepth's), depths out are shown depths.
pub(super) struct Fstack {
    pub inner: Records,
    pub triggers: Arc<Triggers>,
    /// The depth limit (`-D`, else the default).
    pub max: i32,
    /// Levels the limit leaves.
    pub depth: i32,
    pub in_count: u32,
    pub out_count: u32,
    frames: Vec<Frame>,
    /// The depth the next shown entry takes, once set.
    display: u16,
    display_set: bool,
    /// Tracing on, for every thread of the view.
    pub enabled: Rc<Cell<bool>>,
    ready: VecDeque<Record>,
}

impl Fstack {
    pub fn new(
        inner: Records,
        triggers: Arc<Triggers>,
        max: u16,
        enabled: Rc<Cell<bool>>,
    ) -> Fstack {
        let on = enabled.get();
        Fstack {
            inner,
            triggers,
            max: max as i32,
            depth: max as i32,
            in_count: 0,
            out_count: 0,
            frames: Vec::new(),
            display: 0,
            // With tracing off at the start, showing begins where the
            // thread is when it is switched on.
            display_set: on,
            enabled,
            ready: VecDeque::new(),
        }
    }

    /// The first call shown is shown at its stack depth (not at 0), as
    /// from a time range's start.
    pub fn show_from_stack_depth(&mut self) {
        self.display_set = false;
    }

    fn frame(&mut self, i: u16) -> &mut Frame {
        let i = i as usize;
        if self.frames.len() <= i {
            let max = self.max;
            self.frames.resize(
                i + 1,
                Frame {
                    orig_depth: max,
                    flags: 0,
                    addr: 0,
                    time: 0,
                    shown_at: None,
                },
            );
        }
        &mut self.frames[i]
    }

    /// Whether an event inside the current call is shown.
    fn shows_events(&self) -> bool {
        self.out_count == 0
            && self.depth > 0
            && !(self.triggers.mode_in && self.in_count == 0)
            && self.enabled.get()
    }

    /// An entry at stack depth `d`: whether it is shown (uftrace's
    /// fstack_entry).
    fn entry(&mut self, r: &Record) -> bool {
        let d = r.depth;
        let depth = self.depth;
        let f = self.frame(d);
        *f = Frame {
            orig_depth: depth,
            flags: 0,
            addr: r.addr,
            time: r.time,
            shown_at: None,
        };
        if self.out_count > 0 {
            self.frames[d as usize].flags |= NORECORD;
            return false;
        }
        let triggers = self.triggers.clone();
        let none = Actions::default();
        let tr = triggers.of(r.addr).unwrap_or(&none);
        match tr.filter {
            Some(FilterMode::In) => {
                self.in_count += 1;
                self.frames[d as usize].flags |= FILTERED;
                self.depth = self.max;
            }
            Some(FilterMode::Out) => {
                self.out_count += 1;
                self.frames[d as usize].flags |= NOTRACE | NORECORD;
                return false;
            }
            None if triggers.mode_in && self.in_count == 0 => {
                self.frames[d as usize].flags |= NORECORD;
                return false;
            }
            None => {}
        }
        if let Some(n) = tr.depth {
            self.depth = n as i32;
        }
        match tr.trace {
            Some(true) => self.enabled.set(true),
            Some(false) => {
                self.enabled.set(false);
                self.display_set = false;
            }
            None => {}
        }
        if !self.enabled.get() {
            // Not marked: its exit shows if tracing is on again by then.
            return false;
        }
        if self.depth <= 0 || tr.hide {
            self.frames[d as usize].flags |= NORECORD;
            return false;
        }
        self.depth -= 1;
        if !self.display_set {
            self.display = d;
            self.display_set = true;
        }
        self.frames[d as usize].shown_at = Some(self.display);
        if tr.backtrace {
            for i in 0..d {
                let addr = self.frames[i as usize].addr;
                self.ready.push_back(Record {
                    time: r.time,
                    kind: Kind::Event,
                    more: false,
                    depth: i,
                    addr: BACKTRACE_ADDR,
                    args: Some(triggers.name(addr)),
                });
            }
        }
        true
    }

    /// An exit at stack depth `d`: whether it is shown (uftrace's
    /// fstack_exit, and replay's test before it).
    fn exit(&mut self, d: u16) -> bool {
        let f = *self.frame(d);
        let shown = self.enabled.get() && f.flags & NORECORD == 0;
        if f.flags & FILTERED != 0 {
            self.in_count = self.in_count.saturating_sub(1);
        } else if f.flags & NOTRACE != 0 {
            self.out_count = self.out_count.saturating_sub(1);
        }
        self.frames[d as usize].flags = 0;
        self.frames[d as usize].shown_at = None;
        self.depth = f.orig_depth;
        if shown && !self.display_set {
            // (A forked child's first record is an exit.)
            self.display = d + 1;
            self.display_set = true;
        }
        let marker = |addr, depth, time| Record {
            time,
            kind: Kind::Event,
            more: false,
            depth,
            addr,
            args: None,
        };
        match (shown, f.shown_at) {
            (true, None) if f.time != 0 => {
                let at = self.display.saturating_sub(1);
                self.ready.push_back(marker(STARTED_ADDR, at, f.time));
            }
            (false, Some(at)) => self.ready.push_back(marker(ENDED_ADDR, at, f.time)),
            _ => {}
        }
        shown
    }
}

impl Iterator for Fstack {
    type Item = Result<Record, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Some(Ok(r));
            }
            let mut r = match self.inner.next()? {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            let sched = r.addr == crate::sched::SCHED_ADDR;
            match r.kind {
                // A schedule event's pair: shown where its call is.
                Kind::Entry if sched => {
                    let shown = self.shows_events();
                    self.frame(r.depth).flags = if shown { 0 } else { NORECORD };
                    if !shown {
                        continue;
                    }
                    r.depth = self.display;
                    self.display = self.display.saturating_add(1);
                }
                Kind::Exit if sched => {
                    if self.frame(r.depth).flags & NORECORD != 0 {
                        continue;
                    }
                    self.display = self.display.saturating_sub(1);
                    r.depth = self.display;
                }
                Kind::Entry => {
                    if !self.entry(&r) {
                        continue;
                    }
                    r.depth = self.display;
                    self.display = self.display.saturating_add(1);
                }
                Kind::Exit => {
                    if !self.exit(r.depth) {
                        continue;
                    }
                    self.display = self.display.saturating_sub(1);
                    r.depth = self.display;
                }
                Kind::Lost => {
                    r.depth = self.display;
                    self.display_set = false;
                }
                Kind::Event => {
                    if !self.shows_events() {
                        continue;
                    }
                    r.depth = self.display;
                }
            }
            self.ready.push_back(r);
        }
    }
}

/// The time of a stream's next record (None at its end).
pub(super) fn peek_time(st: &mut std::iter::Peekable<Records>) -> Result<Option<u64>, DataError> {
    match st.peek() {
        Some(Ok(r)) => Ok(Some(r.time)),
        Some(Err(e)) => Err(e.clone()),
        None => Ok(None),
    }
}
