//! A thread's record ring: one producer (the traced thread, plain stores
//! and one release store of `head` per record) and one consumer (the
//! writer) that converts the records' times to nanoseconds and writes them
//! to the thread's `.dat` file.
//!
//! The producer is the thread *and its signal handlers*: a handler may
//! interrupt a record half written and record calls of its own. So a
//! record's slot is claimed by a single instruction (`cmpxchg` on
//! `reserve`, which a handler cannot split), written, and published by
//! its writer only if every slot before it is (`head` equal to its slot:
//! one `cmpxchg` moves `head` to `reserve`). A handler's records follow
//! the interrupted one's slot; the handler cannot publish them past that
//! unwritten slot, and the interrupted writer, resuming once the handler
//! has returned, publishes them with its own.
//!
//! Depths follow the ring's order: `reserve` (and so `head`) carries the
//! thread's recorded depth in its low 16 bits beside the slot number, set
//! by the same `cmpxchg` that claims a slot. A record written at rest (the
//! thread was not inside our code) has the caller's depth and sets the
//! ring's from it; one written by a signal handler that interrupted our
//! code — between a function's frame being pushed or popped and its record
//! being claimed — takes the ring's instead (an entry records it and
//! deepens it, an exit shallows it and records the result), so that its
//! calls nest in that function or follow it as the ring says, not as the
//! frames do.
//!
//! The fused recording path (record::fused) writes a thread's records at
//! rest another way where glibc registered rseq: the TSC read, the record
//! and one 16-byte store of `reserve` and `head` together (claimed and
//! published at once) in one restartable sequence, which the kernel
//! restarts if a signal or preemption lands inside it. Writers of this
//! protocol never see its half-done record: a handler that interrupts the
//! sequence runs after the kernel has sent it back to its start, and no
//! instruction boundary lies between the claim and the publish.
//!
//! The ring lives either in a file of a shared-memory directory, drained by
//! the `shadowgraph record` process (the writer outside the traced program:
//! the program pays no system call for its records, and a crash loses
//! nothing), or in the traced process's own memory, drained by its thread
//! when full. The layout is the same; it is shared by two builds of the
//! same crate only (no compatibility promise beyond `MAGIC`).

use crate::clock;
use shadowgraph_data::format::{encode, Kind};
use shadowgraph_data::time::Calibration;
use std::cell::Cell;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

pub mod drain;

/// The ring layout's version: a writer and an agent from different builds
/// check it before recording (the configuration carries it, and every ring
/// header holds it in [`MAGIC`]).
pub const LAYOUT: u8 = 7;
/// "SGRING" + [`LAYOUT`].
pub const MAGIC: u64 = u64::from_le_bytes(*b"SGRING\0\0") | (LAYOUT as u64) << 48;
/// `reserve`, `head` and `room_end` count slots from this bit; below it,
/// `reserve` and `head` hold the recorded depth.
pub const SLOT_SHIFT: u32 = 16;
const DEPTH_MASK: u64 = (1 << SLOT_SHIFT) - 1;

/// Where a record's depth comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// The caller's (the thread at rest): recorded as given; the ring's
    /// becomes one more after an entry, the same after an exit.
    Given(u16),
    /// The ring's (a handler inside our code): an entry records it and
    /// adds one, an exit takes one (not below 0) and records the result.
    Follow,
}

/// A claimed slot: `reserve` as found (what `publish` needs), the slot,
/// the record's time and depth.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    /// `reserve` as found.
    pub reserve: u64,
    /// The slot claimed.
    pub slot: u64,
    /// The record's time.
    pub time: u64,
    /// The record's depth.
    pub depth: u16,
}
/// Bytes before the records.
pub const HEADER_BYTES: usize = 256;
/// The `more` bit of a record's second word: data follows it.
pub const MORE: u64 = 1 << 2;
/// The most data after one record (uftrace's argument buffer holds 1 KiB).
pub const MAX_DATA: usize = 1024;

/// Slots after a record that its `len` bytes of data take (their length
/// word first).
pub const fn data_slots(len: usize) -> u64 {
    (8 + len).div_ceil(16) as u64
}

/// Whether a record's second word says data follows it in the ring: the
/// `more` bit of an entry, an exit or an event (a `read=` trigger's; a
/// lost record's count is all it says).
#[inline(always)]
pub fn has_data(word: u64) -> bool {
    word & MORE != 0 && word & 3 != Kind::Lost as u64
}
/// Records per shared ring by default (2 MiB): about three milliseconds of
/// the busiest thread, which waits if the writer falls behind by more.
/// Larger than a core's L2 cache: a lap of the ring then finds its lines
/// in the shared L3 rather than dirty in the writer's core. Pages are used
/// only as a thread fills them.
pub const RING_RECORDS: u64 = 1 << 17;

/// The ring's header, at the start of its mapping. Producer and consumer
/// fields sit on separate cache lines.
#[repr(C)]
pub struct RingHeader {
    /// Written last (release) when the ring is created: a consumer ignores
    /// a ring without it.
    pub magic: AtomicU64,
    /// The tracer instance writing it.
    pub inst: u32,
    /// The thread writing it.
    pub tid: i32,
    /// The thread's process.
    pub pid: i32,
    /// 1: times are raw TSC values; 0: CLOCK_MONOTONIC nanoseconds.
    pub tsc: u32,
    /// Records, a power of two.
    pub capacity: u64,
    /// The process's parent when the ring was made (a forked child's
    /// rings tell the writer where the child came from).
    pub ppid: i32,
    /// 1: the consumer writes the compact layout
    /// (`shadowgraph_data::compact`); 0: uftrace's. Set by the maker.
    pub compact: u32,
    /// The recording session of the process image that made the ring (a
    /// program started by exec is a session of its own, recorded into its
    /// own directory).
    pub session: u64,
    /// `capacity - 1`: a record's index from its number.
    pub mask: u64,
    /// `mask << 4`: a record's byte offset from a `reserve` value shifted
    /// right by `SLOT_SHIFT - 4` (the depth's top bits, then below bit 4,
    /// fall outside it): one instruction fewer per record on the fused
    /// path.
    pub offset_mask: u64,
    // --- producer line
    /// Records published, from bit `SLOT_SHIFT` (the next one goes to that
    /// number modulo `capacity`), and below it the depth after them: the
    /// value `reserve` had when they were all written.
    pub head: AtomicU64,
    /// Slots claimed (≥ `head`), from bit `SLOT_SHIFT`: those in between
    /// are being written by the thread or a signal handler that interrupted
    /// it, or were written by a handler that interrupted the writer of an
    /// earlier one. Below: the depth of the next entry. Beside `head`, in
    /// the same 16 bytes: the fused path claims and publishes a record by
    /// one store of both (record::fused).
    pub reserve: AtomicU64,
    /// Records the producer dropped (no room in time); the consumer takes
    /// them and writes a LOST record.
    pub lost: AtomicU64,
    /// The thread exited: the ring gets no more records.
    pub closed: AtomicU32,
    /// Set (Release, before the record is claimed) once a record with
    /// data after it ([`Ring::write_with_data`]) was written: the
    /// consumer then walks the records, since not every slot is one.
    pub with_data: AtomicU32,
    /// The end of the room the producer knows of: `tail + capacity` as of
    /// its last look at `tail`, from bit `SLOT_SHIFT` so that `reserve`
    /// compares with it whole (its own field: reading `tail` on every
    /// record would pull the consumer's cache line). Slots below it are
    /// free or the producer's.
    pub room_end: AtomicU64,
    _pad2: [u64; 3],
    // --- consumer line
    /// Records consumed (their slots may be reused).
    pub tail: AtomicU64,
    /// The line raw times are converted by: it starts at `seg_raw` (ns
    /// `seg_ns`) with `seg_rate` ns per tick (32.32 fixed point; first the
    /// start calibration's, 0 if the ring's maker had none: then the
    /// points'). See `Ring::convert_times`.
    pub seg_raw: AtomicU64,
    /// The nanoseconds of `seg_raw`.
    pub seg_ns: AtomicU64,
    /// Held by whoever drains: 0 free, else the holder ([`drain::DRAINER`], or
    /// the thread that drains its own ring: its tid). In-process rings:
    /// the thread and the exit flush; shared rings: the writer, and the
    /// thread itself while the writer is behind (`Ring::try_lock_drain`).
    pub busy: AtomicU32,
    _pad3: u32,
    /// The last time written (ns): the thread's times only go forward.
    pub last_ns: AtomicU64,
    /// The line's rate: ns per tick, 32.32 fixed point.
    pub seg_rate: AtomicU64,
    /// The calibration point (raw, ns) read when the ring was made, from
    /// which the rate of each new piece is measured.
    pub ref_raw: AtomicU64,
    /// The nanoseconds of `ref_raw`.
    pub ref_ns: AtomicU64,
    /// The line before (`prev_rate` 0: none), for times older than
    /// `seg_raw` drained after it (a time filter writes a call's entry
    /// once the call proves long enough).
    pub prev_raw: AtomicU64,
    /// The nanoseconds of `prev_raw`.
    pub prev_ns: AtomicU64,
    /// The previous line's rate (0: none).
    pub prev_rate: AtomicU64,
    /// The time filter its consumer applies (ns; 0: none): a call shorter
    /// than this, none of whose calls is written, is left out of the file
    /// (see `drain::filter`). Set by the maker.
    pub min_ns: u64,
    /// Records the thread wrote from its shared ring itself, the writer
    /// behind, for the writer to count with its own (`Ring::take_own`).
    pub own_written: AtomicU64,
    /// Records lost by those drains.
    pub own_lost: AtomicU64,
    /// Times those drains moved forward.
    pub own_steps: AtomicU32,
    /// Their first write failure (errno; 0: none).
    pub own_errno: AtomicI32,
}

const _: () = {
    assert!(std::mem::size_of::<RingHeader>() <= HEADER_BYTES);
    assert!(std::mem::offset_of!(RingHeader, head) == 64);
    assert!(std::mem::offset_of!(RingHeader, reserve) == 72);
    assert!(std::mem::offset_of!(RingHeader, tail) == 128);
};

/// Bytes after a ring's records for what its consumer's time filter keeps
/// (`drain::filter`; pages never touched without one).
pub const FILTER_BYTES: usize = 64 << 10;

/// Bytes of a ring's mapping: its header, its records, then
/// [`FILTER_BYTES`].
pub const fn ring_bytes(capacity: u64) -> usize {
    HEADER_BYTES + capacity as usize * 16 + FILTER_BYTES
}

/// A mapped ring: its header and records.
#[derive(Clone, Copy)]
pub struct Ring {
    base: *mut u8,
}

// SAFETY: the ring is shared memory by design; every field either is an
// atomic or is owned by one side per the protocol above.
unsafe impl Send for Ring {}
// SAFETY: as for Send: concurrent access goes through the atomics.
unsafe impl Sync for Ring {}

/// What one drain moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Records written to the file.
    pub written: u64,
    /// Records lost: dropped by the producer, or not writable.
    pub lost: u64,
    /// The write failure (errno), if any.
    pub errno: i32,
    /// Times that stepped back and were moved forward to keep the thread's
    /// times increasing, and the largest step back among them (ns).
    pub clock_steps_back: u64,
    /// The largest of those steps back, ns.
    pub clock_step_max: u64,
}

/// [`Ring::claim_announced`]'s announcement while it reads `reserve`.
pub const UNSURE: u64 = u64::MAX;

/// The record was written by a signal handler ([`Ring::claim_announced`]).
#[derive(Debug)]
pub struct Taken;

/// The `reserve` word after claiming `slots` slots for a `kind` record
/// (and its data) from `c`, and the record's depth: the caller's or the
/// ring's ([`Depth`]).
#[inline(always)]
fn next_reserve(c: u64, kind: Kind, from: Depth, slots: u64) -> (u64, u16) {
    let d = match from {
        Depth::Given(d) => d,
        Depth::Follow => (c & DEPTH_MASK) as u16,
    };
    // 16-bit arithmetic, as the assembly's: the slot never borrows or
    // carries from the depth.
    let (next, depth) = match (kind, from) {
        (Kind::Entry, _) => (d.wrapping_add(1), d),
        (Kind::Exit, Depth::Given(_)) => (d, d),
        (Kind::Exit, Depth::Follow) => (d.saturating_sub(1), d.saturating_sub(1)),
        _ => ((c & DEPTH_MASK) as u16, d),
    };
    (
        ((c >> SLOT_SHIFT) + slots) << SLOT_SHIFT | next as u64,
        depth,
    )
}

impl Ring {
    /// Initialises a ring in `base` (zeroed memory of `ring_bytes(cap)`).
    ///
    /// # Safety
    /// `base` must be a fresh, zeroed, writable mapping of at least
    /// `ring_bytes(capacity)` bytes, 64-aligned, that lives for the
    /// process's life.
    /// `depth`: the thread's recorded depth so far (the frames it has open
    /// when its first record is written: a forked child's); `min_ns`: the
    /// time filter its consumer applies (0: none); `compact`: its consumer
    /// writes the compact layout.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn init(
        base: *mut u8,
        inst: usize,
        tid: i32,
        pid: i32,
        capacity: u64,
        session: u64,
        depth: u16,
        min_ns: u64,
        compact: bool,
    ) -> Ring {
        debug_assert!(capacity.is_power_of_two());
        let (raw, ns) = clock::calibration_point();
        let h = base as *mut RingHeader;
        // SAFETY: per the contract; fields written before `magic` publishes.
        unsafe {
            std::ptr::addr_of_mut!((*h).inst).write(inst as u32);
            std::ptr::addr_of_mut!((*h).tid).write(tid);
            std::ptr::addr_of_mut!((*h).pid).write(pid);
            std::ptr::addr_of_mut!((*h).tsc).write(clock::uses_tsc() as u32);
            std::ptr::addr_of_mut!((*h).capacity).write(capacity);
            std::ptr::addr_of_mut!((*h).mask).write(capacity - 1);
            std::ptr::addr_of_mut!((*h).offset_mask).write((capacity - 1) << 4);
            // Relaxed: the header is published by the magic's Release,
            // stored last.
            (*h).room_end
                .store(capacity << SLOT_SHIFT, Ordering::Relaxed);
            (*h).reserve.store(depth as u64, Ordering::Relaxed);
            (*h).head.store(depth as u64, Ordering::Relaxed);
            std::ptr::addr_of_mut!((*h).ppid).write(libc::getppid());
            std::ptr::addr_of_mut!((*h).session).write(session);
            std::ptr::addr_of_mut!((*h).min_ns).write(min_ns);
            std::ptr::addr_of_mut!((*h).compact).write(compact as u32);
            (*h).seg_raw.store(raw, Ordering::Relaxed);
            (*h).seg_ns.store(ns, Ordering::Relaxed);
            (*h).ref_raw.store(raw, Ordering::Relaxed);
            (*h).ref_ns.store(ns, Ordering::Relaxed);
            // The first piece's rate: the start calibration's, if the
            // process has one (see convert_times).
            (*h).seg_rate
                .store(start_calibration().converter().rate(), Ordering::Relaxed);
            (*h).magic.store(MAGIC, Ordering::Release);
        }
        Ring { base }
    }

    /// A ring mapped at `base` by someone else, if its header is complete
    /// and fits in `len` bytes.
    ///
    /// # Safety
    /// `base` must map `len` readable and writable bytes for as long as the
    /// returned ring is used.
    pub unsafe fn attach(base: *mut u8, len: usize) -> Option<Ring> {
        if len < HEADER_BYTES {
            return None;
        }
        let r = Ring { base };
        let h = r.header();
        // Acquire: pairs with the maker's Release of the magic, written
        // last: the header's other fields are in place.
        if h.magic.load(Ordering::Acquire) != MAGIC
            || !h.capacity.is_power_of_two()
            || ring_bytes(h.capacity) > len
        {
            return None;
        }
        Some(r)
    }

    /// The ring at `base`, trusted to be initialised.
    ///
    /// # Safety
    /// `base` must hold a ring made by [`Ring::init`] that stays mapped
    /// while the returned value is used.
    #[inline(always)]
    pub(crate) unsafe fn from_base(base: *mut u8) -> Ring {
        Ring { base }
    }

    /// The ring's header.
    #[inline(always)]
    pub fn header(&self) -> &RingHeader {
        // SAFETY: base maps a header (init/attach contracts).
        unsafe { &*(self.base as *const RingHeader) }
    }

    #[inline(always)]
    fn words(&self) -> *mut u64 {
        // SAFETY: the records follow the header.
        unsafe { self.base.add(HEADER_BYTES) as *mut u64 }
    }

    /// Publishes the records up to `reserve` if the claim `c`, just
    /// written, is the first unpublished one (`head` is `reserve` as the
    /// claim found it); else the writer of an earlier slot, which this one
    /// interrupted (a signal handler's record), publishes it when it
    /// resumes. A handler that records between our exchange and our second
    /// look at `reserve` publishes its own (`head` is its claim's then);
    /// one that records before the exchange is published by it.
    /// Async-signal-safe; producer only.
    #[inline(always)]
    pub fn publish(&self, c: &Claim) {
        let h = self.header();
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        let mut from = c.reserve;
        loop {
            // Relaxed: `reserve` and `head` are this thread's and its
            // signal handlers' (program order); the consumer orders its
            // reads of the records by `head`'s exchange (a locked
            // instruction, a full barrier on x86-64).
            let r = h.reserve.load(Ordering::Relaxed);
            if !crate::local::exchange(&h.head, from, r) || h.reserve.load(Ordering::Relaxed) == r {
                return;
            }
            from = r;
        }
    }

    /// Claims the next slot if there is room for it as far as the producer
    /// knows (room only grows, so a claimed slot stays writable), with
    /// `time()` read just before the claim takes effect — again if a signal
    /// handler claimed meanwhile — so that records of handlers that come
    /// before it in the ring are older and those after it newer: a
    /// thread's records stay in time order. The ring's depth moves with the
    /// same exchange, from the caller's or its own ([`Depth`]). The slot is
    /// then written ([`Ring::write`]) and published ([`Ring::publish`]).
    #[inline(always)]
    pub fn claim_at(&self, time: impl Fn() -> u64, kind: Kind, from: Depth) -> Option<Claim> {
        self.claim_slots(time, kind, from, 1)
    }

    /// [`Ring::claim_at`] of `slots` slots at once (a record and its data).
    #[inline(always)]
    fn claim_slots(
        &self,
        time: impl Fn() -> u64,
        kind: Kind,
        from: Depth,
        slots: u64,
    ) -> Option<Claim> {
        let h = self.header();
        loop {
            let c = h.reserve.load(Ordering::Relaxed);
            // The last slot claimed must be below the room's end.
            if c + ((slots - 1) << SLOT_SHIFT) >= h.room_end.load(Ordering::Relaxed) {
                return None;
            }
            let t = time();
            let (n, depth) = next_reserve(c, kind, from, slots);
            if crate::local::exchange(&h.reserve, c, n) {
                return Some(Claim {
                    reserve: c,
                    slot: c >> SLOT_SHIFT,
                    time: t,
                    depth,
                });
            }
        }
    }

    /// [`Ring::claim_at`] for a record with `data_len` bytes of data after
    /// it (a multiple of 8, at most [`MAX_DATA`]): the record's slot and
    /// the data's ([`data_slots`]), claimed by one exchange; then
    /// [`Ring::write_with_data`] and [`Ring::publish`].
    pub fn claim_with_data(
        &self,
        time: impl Fn() -> u64,
        kind: Kind,
        from: Depth,
        data_len: usize,
    ) -> Option<Claim> {
        debug_assert!(data_len.is_multiple_of(8) && data_len <= MAX_DATA);
        let h = self.header();
        // Release: set before any such record is claimed (and so before it
        // is published); the consumer reads it after `head`. Once.
        if h.with_data.load(Ordering::Relaxed) == 0 {
            h.with_data.store(1, Ordering::Release);
        }
        self.claim_slots(time, kind, from, 1 + data_slots(data_len))
    }

    /// [`Ring::claim_at`] for a record timed earlier (`time`: a call's
    /// entry, written once the call proved long enough) that a signal
    /// handler may write in our stead: it must come before the records of
    /// any handler that lands before our claim, older as it is. Before
    /// each attempt `announce` holds the `reserve` value the claim starts
    /// from ([`UNSURE`] while it is being read): a handler that finds
    /// `reserve` still there (or the announcement unsure) knows the record
    /// is not claimed, writes it itself before its own, and `pending()`
    /// turns false here ([`Taken`]). `Ok(None)`: no room. `data_len`: the
    /// bytes of data the record has after it (its slots are claimed too,
    /// as [`Ring::claim_with_data`] claims them).
    #[inline]
    pub fn claim_announced(
        &self,
        time: u64,
        kind: Kind,
        from: Depth,
        announce: &Cell<u64>,
        pending: impl Fn() -> bool,
        data_len: usize,
    ) -> Result<Option<Claim>, Taken> {
        let h = self.header();
        let slots = if data_len > 0 {
            // Release: as in claim_with_data.
            if h.with_data.load(Ordering::Relaxed) == 0 {
                h.with_data.store(1, Ordering::Release);
            }
            1 + data_slots(data_len)
        } else {
            1
        };
        loop {
            // Compiler fences: the announcement is read by this thread's
            // own signal handlers, which see its stores in program order.
            announce.set(UNSURE);
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            let c = h.reserve.load(Ordering::Relaxed);
            announce.set(c);
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            // A handler that came since the announcement was unsure, and
            // recorded here, wrote our record first.
            if !pending() {
                return Err(Taken);
            }
            if h.reserve.load(Ordering::Relaxed) != c {
                continue;
            }
            if c + ((slots - 1) << SLOT_SHIFT) >= h.room_end.load(Ordering::Relaxed) {
                return Ok(None);
            }
            // From the announced value only: a handler that lands before
            // the exchange makes it fail, and the next round finds the
            // record written.
            let (n, depth) = next_reserve(c, kind, from, slots);
            if crate::local::exchange(&h.reserve, c, n) {
                return Ok(Some(Claim {
                    reserve: c,
                    slot: c >> SLOT_SHIFT,
                    time,
                    depth,
                }));
            }
        }
    }

    /// The `reserve` word, for [`Ring::claim_announced`]'s handlers.
    #[inline]
    pub fn reserve_now(&self) -> u64 {
        self.header().reserve.load(Ordering::Relaxed)
    }

    /// The ring's depth as its last claimed record left it.
    pub fn depth_now(&self) -> u16 {
        (self.reserve_now() & DEPTH_MASK) as u16
    }

    /// Re-reads `tail` (the consumer moved it?); returns whether there is
    /// room for another record now.
    pub fn refresh(&self) -> bool {
        let h = self.header();
        let t = h.tail.load(Ordering::Acquire);
        h.room_end
            .store((t + h.capacity) << SLOT_SHIFT, Ordering::Relaxed);
        (h.reserve.load(Ordering::Relaxed) >> SLOT_SHIFT) - t < h.capacity
    }

    /// Stores record `slot` (from [`Ring::claim_at`]); [`Ring::publish`]
    /// publishes it.
    #[inline(always)]
    pub fn write(&self, slot: u64, time: u64, kind: Kind, depth: u16, addr: u64) {
        let h = self.header();
        let i = (slot & h.mask) as usize;
        // SAFETY: i < capacity: two words inside the ring, claimed by us
        // and not the consumer's until `head` moves past them.
        unsafe {
            self.words().add(2 * i).write(time);
            self.words().add(2 * i + 1).write(encode(kind, depth, addr));
        }
    }

    /// Stores record `slot` (from [`Ring::claim_with_data`]) with its `more`
    /// bit, and `data` after it: its length in the next slot's first
    /// word, then its bytes, word by word (wrapping at the ring's end).
    pub fn write_with_data(
        &self,
        slot: u64,
        time: u64,
        kind: Kind,
        depth: u16,
        addr: u64,
        data: &[u8],
    ) {
        let h = self.header();
        let i = (slot & h.mask) as usize;
        let words_mask = (2 * h.capacity - 1) as usize;
        let first = 2 * (slot as usize + 1);
        // SAFETY: every index is masked into the ring's words; the slots
        // are claimed by us and not the consumer's until `head` moves past
        // them.
        unsafe {
            self.words().add(2 * i).write(time);
            self.words()
                .add(2 * i + 1)
                .write(encode(kind, depth, addr) | MORE);
            self.words()
                .add(first & words_mask)
                .write(data.len() as u64);
            for (j, w) in data.chunks(8).enumerate() {
                let mut b = [0u8; 8];
                b[..w.len()].copy_from_slice(w);
                self.words()
                    .add((first + 1 + j) & words_mask)
                    .write(u64::from_le_bytes(b));
            }
        }
    }

    /// The thread's writers on this ring were abandoned — a signal handler
    /// that interrupted one never returned (siglongjmp) — as the bracket
    /// they ran in tells (`quiesce::on_abandoned`, called where no writer
    /// of this thread is in progress): the slots claimed and not published,
    /// which they may have left half written, are given back and counted as
    /// lost, and the ring publishes again. Producer only.
    pub fn recover_abandoned(&self) {
        let h = self.header();
        let head = h.head.load(Ordering::Relaxed);
        let claimed = (h.reserve.load(Ordering::Relaxed) >> SLOT_SHIFT) - (head >> SLOT_SHIFT);
        if claimed == 0 {
            return;
        }
        // Back to the published slot and depth.
        h.reserve.store(head, Ordering::Relaxed);
        h.lost.fetch_add(claimed, Ordering::Relaxed);
    }

    /// Counts a record the producer could not store.
    pub fn drop_record(&self) {
        self.header().lost.fetch_add(1, Ordering::Relaxed);
    }
}

/// The recording's start calibration (set in the traced process): the
/// rate of a ring's first piece, and of its times when its points are too
/// close to give one.
static START: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Sets the recording's start calibration (in the traced process, before
/// the first ring is made).
pub fn set_start_calibration(c: Calibration) {
    for (a, v) in START.iter().zip([c.raw0, c.ns0, c.raw1, c.ns1]) {
        a.store(v, Ordering::Relaxed);
    }
}

pub(super) fn start_calibration() -> Calibration {
    // Relaxed: set once at start-up, before the threads that read it exist.
    let s = START.each_ref().map(|a| a.load(Ordering::Relaxed));
    Calibration {
        raw0: s[0],
        ns0: s[1],
        raw1: s[2],
        ns1: s[3],
    }
}
