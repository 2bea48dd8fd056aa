//! The per-thread shadow stack (design §4.1–4.2): a series of 8-byte words
//! holding frames `{ret, func, retp}`, a BITMAP word per frame, DATA words
//! for reserved per-call data; the users' thread variables lie just below
//! its first word. Its size is set at start-up ([`set_stack_bytes`]).
//!
//! Every word carries the distance back to its frame's start in bits 0..9,
//! so `word[curr-1]` always leads to the top frame — at every instruction,
//! because a signal handler may push, pop or unwind at any point. Only the
//! owning thread writes its stack; pushes store the offset before `curr`
//! moves and again after (a handler may have reused the word meanwhile).

use std::cell::Cell;
use std::sync::atomic::{compiler_fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Bytes per stack unless set at start-up ([`set_stack_bytes`]): 64 KiB,
/// ~2,000 plain frames (uftrace keeps 1,024 by default; 16 KiB, ~500
/// frames, is outgrown by recursive parsers and tree walks).
/// Pages are touched only as deep as a thread goes.
pub const DEFAULT_STACK_BYTES: usize = 64 << 10;
/// The sizes a stack may be given: powers of two in this range.
pub const MIN_STACK_BYTES: usize = 4 << 10;
/// The largest size a stack may be given.
pub const MAX_STACK_BYTES: usize = 1 << 20;
/// Thread variables: one word per user slot, just below the stack's first
/// word (at a fixed distance from it whatever the stack's size).
pub const TASK_VARS: usize = 16;
/// Room a push needs above `curr`: the frame and its BITMAP word.
const PUSH_ROOM: usize = 3 + 1;

/// Words per stack, the same for every stack: set before the first is
/// mapped, never changed after.
static WORDS: AtomicUsize = AtomicUsize::new(DEFAULT_STACK_BYTES / 8);
/// `curr` from which the assembly fast paths send a call the general way
/// (which counts the overrun): the highest word a frame may use, less a
/// margin. Read by them as a plain word, written with [`WORDS`].
pub(crate) static FAST_PUSH_LIMIT: AtomicUsize =
    AtomicUsize::new(fast_push_limit(DEFAULT_STACK_BYTES / 8));

/// [`FAST_PUSH_LIMIT`] for stacks of `words` words.
const fn fast_push_limit(words: usize) -> usize {
    words - PUSH_ROOM - 4
}

/// Words per stack.
#[inline]
pub fn words() -> usize {
    WORDS.load(Ordering::Relaxed)
}

/// Frames and data never reach this word.
#[inline]
pub fn max_offset() -> usize {
    words() - PUSH_ROOM
}

/// Plain frames (no reserved data) a stack holds: the depth traced.
pub fn max_frames() -> usize {
    max_offset() / (FRAME_WORDS + 1)
}

/// Sets every shadow stack's size, in bytes: a power of two from 4 KiB to
/// 1 MiB. Only before the first stack is mapped (before any graph user
/// registers), since all stacks share it; setting the size in force is
/// always accepted.
pub fn set_stack_bytes(bytes: usize) -> Result<(), String> {
    if !bytes.is_power_of_two() || !(MIN_STACK_BYTES..=MAX_STACK_BYTES).contains(&bytes) {
        return Err(format!(
            "shadow stack size {bytes} bytes: not a power of two from 4 KiB to 1 MiB"
        ));
    }
    if bytes / 8 == words() {
        return Ok(());
    }
    // Acquire: pairs with the Release counting a mapped stack.
    if ALL_COUNT.load(Ordering::Acquire) > 0 {
        return Err("the shadow stack size can only be set before tracing starts".into());
    }
    WORDS.store(bytes / 8, Ordering::Relaxed);
    FAST_PUSH_LIMIT.store(fast_push_limit(bytes / 8), Ordering::Relaxed);
    Ok(())
}

/// Words of a frame before its BITMAP word.
pub const FRAME_WORDS: usize = 3;
/// A frame's words, by index from its start: the real return address,
/// `func | depth << 48`, the return address's stack slot (`retp`); then
/// its BITMAP word, at [`FRAME_WORDS`].
pub(crate) const FRAME_RET: usize = 0;
/// See [`FRAME_RET`].
pub(crate) const FRAME_FUNC: usize = 1;
/// See [`FRAME_RET`].
pub(crate) const FRAME_RETP: usize = 2;

pub const TYPE_RESERVED: u64 = 0;
pub const TYPE_BITMAP: u64 = 1;
pub const TYPE_DATA: u64 = 2;

#[inline]
pub fn offset_of(w: u64) -> usize {
    (w & 0x3ff) as usize
}

#[inline]
pub fn type_of(w: u64) -> u64 {
    (w >> 10) & 3
}

#[inline]
pub fn reserved(offset: usize) -> u64 {
    offset as u64 | TYPE_RESERVED << 10
}

/// BITMAP word: users in bits 12..27, the frame's epoch in bits 28..63.
#[inline]
pub fn bitmap(offset: usize, users: u16, epoch: u64) -> u64 {
    offset as u64 | TYPE_BITMAP << 10 | (users as u64) << 12 | epoch << 28
}

#[inline]
pub fn bitmap_users(w: u64) -> u16 {
    (w >> 12) as u16
}

#[inline]
pub fn bitmap_epoch(w: u64) -> u64 {
    w >> 28
}

/// DATA word: size in words − 1 in bits 12..16, user slot in bits 17..20.
#[inline]
pub const fn data(offset: usize, slot: usize, words: usize) -> u64 {
    offset as u64 | TYPE_DATA << 10 | ((words - 1) as u64) << 12 | (slot as u64) << 17
}

#[inline]
pub fn data_words(w: u64) -> usize {
    ((w >> 12) & 0x1f) as usize + 1
}

#[inline]
pub fn data_slot(w: u64) -> usize {
    ((w >> 17) & 0xf) as usize
}

/// An `i32` cell that starts at −1 when its memory is zero (stored plus
/// one), so that [`ThreadState`] can live in zero-initialised TLS.
#[derive(Default)]
#[repr(transparent)]
pub struct MinusOneCell(Cell<i32>);

impl MinusOneCell {
    #[inline(always)]
    pub fn get(&self) -> i32 {
        self.0.get() - 1
    }

    #[inline(always)]
    pub fn set(&self, v: i32) {
        self.0.set(v + 1)
    }
}

/// This thread's graph state. Cells: only this thread (and its signal
/// handlers, which restore what they change) touch it. Valid all-zero: it
/// lives in initial-exec TLS (crate::tls), one `fs`-relative address away.
/// C layout: the assembly fast paths read `has_stack`, `exiting`,
/// `unhooked`, `graph_busy` and `pause` as one 8-byte word
/// ([`BLOCKERS`]), which is [`HOOKABLE`] when the stack is there, fgraph's
/// code is not at work on the thread, and nothing stops a call from being
/// hooked: one check where there were three (the stack's pointer, the
/// word, and, on the plain fused entry, the core's recursion word).
#[repr(C)]
pub struct ThreadState {
    pub stack: Cell<*mut u64>,
    /// First free word.
    pub curr: Cell<usize>,
    /// Calls not hooked because the stack was full.
    pub overrun: Cell<u64>,
    /// `stack` is there: set after it, cleared before it goes.
    pub has_stack: Cell<bool>,
    pub exiting: Cell<bool>,
    /// The real return addresses are back in their slots (an unwinder is
    /// or was walking this stack); the next hook re-hijacks.
    pub unhooked: Cell<bool>,
    /// How many of fgraph's recursion bits (Group::Graph) the thread holds
    /// ([`crate::fgraph`]'s `lock_graph`): non-zero while fgraph's code is
    /// at work on it, e.g. between a frame's write and its publish, where
    /// a signal handler's call must not take the top frame as it stands.
    pub graph_busy: Cell<u8>,
    pub pause: Cell<u32>,
    /// Slot whose entry callback is running, −1 outside.
    pub in_entry: MinusOneCell,
    pub reserved_once: Cell<bool>,
    /// Reservations refused for lack of room.
    pub reserve_fail: Cell<u64>,
    /// One timestamp for the callbacks of the event being offered to
    /// several users: [`EVENT_OPEN`] while such an event's callbacks run
    /// and none took a time yet, then the time the first one took (set
    /// with one `cmpxchg` from `EVENT_OPEN`), 0 otherwise. Every such
    /// event ends by setting 0, so a signal handler's event that ran in
    /// between leaves 0: a time taken before it is never shared after it
    /// (it would precede the handler's records).
    pub event_time: std::sync::atomic::AtomicU64,
    /// While `unhooked`: a stack address just below the frame of the
    /// interposer that unhooked the thread. The unwinder it hands over to
    /// runs below it, and so do the calls it makes (a personality
    /// routine's `_Unwind_GetIPInfo` through a PLT); landing pads and the
    /// code after a backtrace run above it.
    pub unhooked_at: Cell<usize>,
    /// What a jump back into a function that returns twice is doing, and
    /// in which bracket (see `jumps::doing`; 0: nothing).
    pub jump: Cell<u64>,
}

/// [`ThreadState::event_time`] of an event whose callbacks have taken no
/// time yet.
pub use crate::clock::EVENT_OPEN;

/// Frames popped as unwound, with their return slot and real return
/// address. A frame looks skipped when a call below it on the shadow stack
/// returns, or a new call's slot is not below it — after a longjmp or an
/// exception, but also when the program switched to another stack
/// (swapcontext, coroutines) and back. Such a frame's function may still
/// return, through its slot, to our address: the real one is then found
/// here. A small hash table on the slot: an entry leaves when used, is
/// replaced by a newer frame of the same slot, or, when its neighbourhood
/// is full, gives way as the oldest there (a frame buried long ago that
/// then returns is fatal, as it was without the table).
pub struct Graves {
    /// Return slot (0: free, 1: being written).
    slot: [AtomicUsize; GRAVES],
    ret: [Cell<usize>; GRAVES],
    seq: [Cell<u64>; GRAVES],
    next_seq: Cell<u64>,
}

/// Frames [`Graves`] remembers per thread, at most.
pub const GRAVES: usize = 256;
/// Entries a slot may occupy, from its hash on.
const GRAVE_WINDOW: usize = 16;

impl Graves {
    fn window(slot: usize) -> impl Iterator<Item = usize> {
        let home = ((slot as u64 >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
        (0..GRAVE_WINDOW).map(move |j| (home + j) % GRAVES)
    }

    /// Remembers a popped frame: in its slot's entry (lookups want the
    /// newest; a tail-call pair's caller, buried last, then resumes at the
    /// real address directly), else a free one, else the oldest nearby.
    /// Entries are claimed with one atomic exchange: a signal handler that
    /// buries meanwhile takes another. No allocation, no system call.
    pub fn bury(&self, slot: usize, ret: usize) {
        let claim = |k: usize, from: usize| {
            self.slot[k]
                .compare_exchange(from, 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        };
        let with = |v: usize| {
            Graves::window(slot).find(|&k| self.slot[k].load(Ordering::Relaxed) == v && claim(k, v))
        };
        let k = with(slot).or_else(|| with(0)).or_else(|| {
            let k = Graves::window(slot).min_by_key(|&k| self.seq[k].get())?;
            let s = self.slot[k].load(Ordering::Relaxed);
            (s > 1 && claim(k, s)).then_some(k)
        });
        let Some(k) = k else {
            return;
        };
        let seq = self.next_seq.get() + 1;
        self.next_seq.set(seq);
        self.ret[k].set(ret);
        self.seq[k].set(seq);
        // Release: the grave's return address and sequence (plain cells)
        // are in place for whoever finds it by its slot (Acquire).
        self.slot[k].store(slot, Ordering::Release);
    }

    /// Forgets every frame.
    pub fn clear(&self) {
        for s in &self.slot {
            s.store(0, Ordering::Relaxed);
        }
    }

    /// The real return address of the frame last popped with return slot
    /// `slot`, forgotten if `take`.
    pub fn find(&self, slot: usize, take: bool) -> Option<usize> {
        let k = Graves::window(slot).find(|&k| self.slot[k].load(Ordering::Acquire) == slot)?;
        let ret = self.ret[k].get();
        if take {
            self.slot[k].store(0, Ordering::Release);
        }
        Some(ret)
    }
}

// --- Copies of frames that return twice (used by jumps.rs) ---------------------------

/// Copies a thread keeps.
pub const JUMPS: usize = 16;
/// Words of the largest frame a copy holds (the four of every frame and
/// what its users reserved).
pub(super) const JUMP_WORDS: usize = 12;
/// One call's frame, kept until a later call on its buffer has returned
/// once (the buffer no longer names it then).
pub struct Jump {
    /// The call's buffer (its first argument); 0: free; `jumps::CLAIMED`:
    /// being written.
    pub(super) buf: AtomicUsize,
    /// The real return address.
    pub(super) ret: Cell<usize>,
    /// r15 as the caller had it.
    pub(super) reg: Cell<u64>,
    /// Where the frame starts on the shadow stack, and its words.
    pub(super) at: Cell<usize>,
    pub(super) len: Cell<usize>,
    /// The first return has come.
    pub(super) returned: Cell<bool>,
    /// A `vfork`'s child: what it did at its return (`vfork::CHILD_*`).
    pub(super) child: Cell<u8>,
    /// The thread's pauses at the call (a `vfork`'s parent gets them back).
    pub(super) pause: Cell<u32>,
    pub(super) words: [Cell<u64>; JUMP_WORDS],
    /// The thread's task variables then (each user's own state, e.g. its
    /// filter's depth), given back with the frame.
    pub(super) vars: [Cell<u64>; TASK_VARS],
}

/// A thread's copies, in its stack mapping's head (zero-valid).
pub struct Jumps {
    pub(super) jumps: [Jump; JUMPS],
}

impl Jumps {
    /// Forgets every copy.
    pub fn clear(&self) {
        for j in &self.jumps {
            j.buf.store(0, Ordering::Relaxed);
        }
    }
}

/// Offset in [`ThreadState`] of the word that is [`HOOKABLE`] when the
/// thread has its stack and no state stops hooking (`exiting`,
/// `unhooked`, `graph_busy`, `pause`).
pub const BLOCKERS: usize = std::mem::offset_of!(ThreadState, has_stack);
/// The [`BLOCKERS`] word of a thread whose calls may be hooked: `has_stack`
/// (its low byte) alone.
pub const HOOKABLE: u64 = 1;
const _: () = assert!(
    BLOCKERS.is_multiple_of(8)
        && std::mem::offset_of!(ThreadState, exiting) == BLOCKERS + 1
        && std::mem::offset_of!(ThreadState, unhooked) == BLOCKERS + 2
        && std::mem::offset_of!(ThreadState, graph_busy) == BLOCKERS + 3
        && std::mem::offset_of!(ThreadState, pause) == BLOCKERS + 4
);

/// Offset in [`ThreadState`] of the word holding `in_entry` (low half) and
/// `reserved_once` (the next byte), the rest padding: the single-user path
/// saves, sets and restores both with one access each.
pub const OFFER_WORD: usize = std::mem::offset_of!(ThreadState, in_entry);
const _: () = assert!(
    OFFER_WORD.is_multiple_of(8)
        && std::mem::offset_of!(ThreadState, reserved_once) == OFFER_WORD + 4
        && std::mem::offset_of!(ThreadState, reserve_fail) == OFFER_WORD + 8
);

/// Overruns of every thread: calls not hooked because their thread's
/// shadow stack was full.
pub(super) static OVERRUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

crate::fast_thread_local!(
    static THREAD: ThreadState;
);

/// This thread's state.
#[inline(always)]
pub fn thread() -> &'static ThreadState {
    // SAFETY: THREAD is this thread's zero-initialised state (valid
    // all-zero: null pointers, zero counters, cells of −1 stored as 0),
    // only used on this thread while it runs, and never dropped, so the
    // reference stays valid until the thread is gone.
    unsafe { &*(&*THREAD as *const ThreadState) }
}

impl ThreadState {
    /// Attached, hooked, neither exiting nor paused: a call may be hooked
    /// without preparation.
    #[inline(always)]
    pub fn ready(&self) -> bool {
        !self.stack.get().is_null()
            && !self.exiting.get()
            && self.pause.get() == 0
            && !self.unhooked.get()
    }

    #[inline]
    pub fn word(&self, i: usize) -> u64 {
        // SAFETY: callers index below WORDS into this thread's live stack.
        unsafe { self.stack.get().add(i).read_volatile() }
    }

    #[inline]
    pub fn set_word(&self, i: usize, v: u64) {
        // SAFETY: as in `word`.
        unsafe { self.stack.get().add(i).write_volatile(v) }
    }

    /// Pushes a frame at nesting `depth` (kept in the frame: the thread's
    /// depth is always its top frame's, whatever a signal handler that never
    /// returned left half done); returns the index of its BITMAP word, or
    /// `None` (and counts an overrun) when the stack is full.
    #[inline]
    pub fn push(&self, ret: usize, func: usize, retp: usize, depth: u16) -> Option<usize> {
        let cur = self.curr.get();
        if cur + FRAME_WORDS + 1 >= max_offset() {
            self.overrun.set(self.overrun.get() + 1);
            OVERRUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return None;
        }
        let b = cur + FRAME_WORDS;
        // The whole frame is written before `curr` publishes it, so that a
        // signal handler arriving just after sees a complete frame (and, if
        // it never returns — siglongjmp — leaves one whose return slot is
        // real, which the next entry finds dead), then again after, since a
        // handler that ran before `curr` moved may have pushed over it.
        let write = || {
            self.set_word(cur, ret as u64);
            self.set_word(cur + 1, func as u64 | (depth as u64) << 48);
            self.set_word(cur + 2, retp as u64);
            self.set_word(b, reserved(FRAME_WORDS));
        };
        // Compiler fences only: the stack is this thread's, read by its own
        // signal handlers, which see its stores in program order.
        write();
        compiler_fence(Ordering::SeqCst);
        self.curr.set(b + 1);
        compiler_fence(Ordering::SeqCst);
        write();
        Some(b)
    }

    /// The function of the frame starting at `f`.
    #[inline]
    pub fn frame_func(&self, f: usize) -> usize {
        (self.word(f + 1) & ((1 << 48) - 1)) as usize
    }

    /// The depth of the top frame: frames kept below it for any user, −1
    /// when there is none.
    #[inline]
    pub fn depth(&self) -> i32 {
        self.frame_below(self.curr.get())
            .map_or(-1, |f| self.frame_depth(f) as i32)
    }

    /// The nesting depth of the frame starting at `f` (0: outermost).
    #[inline]
    pub fn frame_depth(&self, f: usize) -> u16 {
        (self.word(f + 1) >> 48) as u16
    }

    /// The frames below word `i` (exclusive), innermost first: each one's
    /// start, return address and return slot.
    pub fn frames_below(&self, i: usize) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        std::iter::successors(self.frame_below(i), |&f| self.frame_below(f))
            .map(|f| (f, self.word(f) as usize, self.word(f + 2) as usize))
    }

    /// Start of the top frame below word `i` (exclusive), if any.
    #[inline]
    pub fn frame_below(&self, i: usize) -> Option<usize> {
        if i == 0 {
            return None;
        }
        let o = offset_of(self.word(i - 1));
        (o > 0 && o < i).then(|| i - 1 - o)
    }

    /// Frames popped as unwound, remembered in case they were not dead:
    /// kept with the stack (after its words), not in every thread's TLS.
    #[inline]
    pub fn graves(&self) -> Option<&Graves> {
        let s = self.stack.get();
        // SAFETY: a stack mapping starts with the graves, HEAD_BYTES before
        // its first word; zero-valid, cleared when the stack is taken
        // (clear_task_vars).
        (!s.is_null()).then(|| unsafe { graves_of(s) })
    }

    /// The frames of calls that return twice, kept with the stack (after
    /// the graves).
    #[inline]
    pub fn jumps(&self) -> Option<&Jumps> {
        let s = self.stack.get();
        // SAFETY: as in `graves`: the copies follow the graves in the
        // head, zero-valid, cleared when the stack is taken.
        (!s.is_null()).then(|| unsafe { jumps_of(s) })
    }

    pub fn task_var(&self, slot: usize) -> *mut u64 {
        // SAFETY: the task variables are the 16 words below the guard word
        // that precedes the stack's first word, in the same mapping.
        unsafe { self.stack.get().offset(TASK_VAR_BASE + slot as isize) }
    }
}

// --- Stack allocation -------------------------------------------------------------

const POOL: usize = 256;
/// Every stack ever mapped (they are never unmapped while listed), so that
/// a new user's thread variable can be zeroed in all of them.
const ALL_MAX: usize = 8192;
static ALL_STACKS: [AtomicPtr<u64>; ALL_MAX] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; ALL_MAX];
static ALL_COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static FREE_STACKS: [AtomicPtr<u64>; POOL] = [const { AtomicPtr::new(std::ptr::null_mut()) }; POOL];
/// Stacks in use or pooled (never unmapped).
pub(super) static STACKS_MAPPED: AtomicU64 = AtomicU64::new(0);

/// Bytes of a stack mapping before its first word: the graves, the
/// copies of frames that return twice, the task variables, and a guard word (word −1) that stays 0, so that the
/// assembly reads "no frame below" there for an empty stack without
/// testing `curr` first. A multiple of a cache line, so that frames are
/// aligned as the mapping is.
const HEAD_BYTES: usize =
    (std::mem::size_of::<Graves>() + std::mem::size_of::<Jumps>() + (TASK_VARS + 1) * 8)
        .next_multiple_of(64);
/// Word index of thread variable 0 from a stack's first word.
pub const TASK_VAR_BASE: isize = -(TASK_VARS as isize + 1);

/// Bytes of a stack mapping: the head, then the words.
fn stack_bytes() -> usize {
    HEAD_BYTES + words() * 8
}

/// The graves of the stack whose first word is at `s`.
///
/// # Safety
/// `s` must be a stack's first word (from `map_stack`).
unsafe fn graves_of<'a>(s: *mut u64) -> &'a Graves {
    // SAFETY: per the contract, the mapping starts HEAD_BYTES before `s`
    // with the graves.
    unsafe { &*(s.cast::<u8>().sub(HEAD_BYTES) as *const Graves) }
}

/// The copies of the stack whose first word is at `s`.
///
/// # Safety
/// `s` must be a stack's first word (from `map_stack`).
unsafe fn jumps_of<'a>(s: *mut u64) -> &'a Jumps {
    // SAFETY: per the contract, the graves begin the head and the copies
    // follow them (both 8-aligned).
    unsafe {
        &*(s.cast::<u8>()
            .sub(HEAD_BYTES - std::mem::size_of::<Graves>()) as *const Jumps)
    }
}

fn map_stack() -> *mut u64 {
    let bytes = stack_bytes();
    let Some(m) = crate::sys::map_anonymous(bytes) else {
        return std::ptr::null_mut();
    };
    // SAFETY: the mapping is `bytes` long; the words start after the head.
    let p = unsafe { m.add(HEAD_BYTES) };
    let i = ALL_COUNT.fetch_add(1, Ordering::AcqRel);
    if i >= ALL_MAX {
        // Not listable: give it back rather than miss a task-variable reset.
        ALL_COUNT.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: m is the mapping just made, unused.
        unsafe { libc::munmap(m.cast(), bytes) };
        return std::ptr::null_mut();
    }
    ALL_STACKS[i].store(p as *mut u64, Ordering::Release);
    STACKS_MAPPED.fetch_add(1, Ordering::Relaxed);
    p as *mut u64
}

/// Zeroes thread variable `slot` in every stack (before a new user is
/// published into that slot: nobody reads it meanwhile).
pub fn zero_task_var_everywhere(slot: usize) {
    let n = ALL_COUNT.load(Ordering::Acquire).min(ALL_MAX);
    for s in &ALL_STACKS[..n] {
        let p = s.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: listed stacks are never unmapped; their task
            // variables lie in their heads.
            unsafe { p.offset(TASK_VAR_BASE + slot as isize).write_volatile(0) };
        }
    }
}

/// Fills the pool so that threads' first hooks find a stack without a
/// system call (called at registration, outside traced calls).
pub fn prefill(n: usize) {
    let mut have = FREE_STACKS
        .iter()
        .filter(|s| !s.load(Ordering::Relaxed).is_null())
        .count();
    while have < n.min(POOL) {
        let s = map_stack();
        if s.is_null() {
            return;
        }
        release(s);
        have += 1;
    }
}

/// Takes a stack: from the pool, else fresh. Lock-free, async-signal-safe.
pub fn acquire() -> *mut u64 {
    for slot in FREE_STACKS.iter() {
        if !slot.load(Ordering::Relaxed).is_null() {
            let s = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !s.is_null() {
                return s;
            }
        }
    }
    map_stack()
}

/// Returns a stack to the pool. Stacks are never unmapped (an unwinder on
/// another thread may still read one); a full pool leaks the mapping.
pub fn release(s: *mut u64) {
    for slot in FREE_STACKS.iter() {
        if slot
            .compare_exchange(std::ptr::null_mut(), s, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Zeroes a fresh stack's task variables and forgets its graves (another
/// thread's, if it comes from the pool); the rest is written before read.
///
/// # Safety
/// `s` must point to a whole stack mapping that no other thread uses.
pub unsafe fn clear_task_vars(s: *mut u64) {
    for i in 0..TASK_VARS {
        // SAFETY: per the contract, `s` is a stack's first word; its task
        // variables lie in its head.
        unsafe { s.offset(TASK_VAR_BASE + i as isize).write_volatile(0) };
    }
    // SAFETY: as above, `s` is a stack's first word.
    unsafe { graves_of(s) }.clear();
    // SAFETY: as above.
    unsafe { jumps_of(s) }.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graves() -> Box<Graves> {
        Box::new(Graves {
            slot: [const { AtomicUsize::new(0) }; GRAVES],
            ret: [const { Cell::new(0) }; GRAVES],
            seq: [const { Cell::new(0) }; GRAVES],
            next_seq: Cell::new(0),
        })
    }

    #[test]
    fn stack_size_is_checked_and_fixed_once_a_stack_exists() {
        for bad in [0, 3000, 2048, 2 << 20, 6 << 10] {
            assert!(set_stack_bytes(bad).is_err(), "{bad}");
        }
        let s = acquire();
        assert!(!s.is_null());
        let now = words() * 8;
        assert_eq!(set_stack_bytes(now), Ok(()));
        let other = if now == MAX_STACK_BYTES {
            now / 2
        } else {
            now * 2
        };
        assert!(set_stack_bytes(other)
            .unwrap_err()
            .contains("before tracing starts"));
        assert_eq!(words() * 8, now);
        // The head lies below the words: task variables and graves are
        // usable, and word −1 reads 0.
        // SAFETY: `s` is a stack just taken, ours alone.
        unsafe {
            clear_task_vars(s);
            assert_eq!(s.sub(1).read(), 0);
            assert_eq!(s.offset(TASK_VAR_BASE).read(), 0);
        }
        release(s);
    }

    #[test]
    fn graves_keep_the_newest_frame_of_a_slot_until_used() {
        let g = graves();
        g.bury(0x7000, 1);
        g.bury(0x7008, 2);
        g.bury(0x7000, 3); // a newer frame of the same slot replaces it
        assert_eq!(g.find(0x7000, false), Some(3));
        assert_eq!(g.find(0x7000, true), Some(3));
        assert_eq!(g.find(0x7000, true), None, "used: gone");
        assert_eq!(g.find(0x7008, true), Some(2));
        assert_eq!(g.find(0x7010, true), None);
    }

    #[test]
    fn graves_full_nearby_forget_the_oldest_there() {
        let g = graves();
        // Many distinct slots: every lookup of a recent one still works,
        // and the table never holds more than it has room for.
        for i in 0..10_000usize {
            g.bury(0x10_0000 + i * 8, i);
        }
        for i in 9_990..10_000usize {
            assert_eq!(g.find(0x10_0000 + i * 8, false), Some(i));
        }
        let used = g
            .slot
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count();
        assert!(used <= GRAVES);
    }
}
