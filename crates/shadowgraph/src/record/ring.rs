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
use shadowgraph_data::time::{Calibration, Converter};
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The ring layout's version: a writer and an agent from different builds
/// check it before recording (`SHADOWGRAPH_RING_LAYOUT`).
pub const LAYOUT: u8 = 6;
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
    pub reserve: u64,
    pub slot: u64,
    pub time: u64,
    pub depth: u16,
}
/// Bytes before the records.
pub const HEADER_BYTES: usize = 256;
/// Records per shared ring by default (2 MiB): about three milliseconds of
/// the busiest thread, which waits if the writer falls behind by more.
/// Larger than a core's L2 cache (1 MiB here): a lap of the ring then finds
/// its lines in the shared L3 rather than dirty in the writer's core (fib(30)
/// records 2 ns per call faster than with 1 MiB). Pages are used only as a
/// thread fills them.
pub const RING_RECORDS: u64 = 1 << 17;

/// The ring's header, at the start of its mapping. Producer and consumer
/// fields sit on separate cache lines.
#[repr(C)]
pub struct RingHeader {
    /// Written last (release) when the ring is created: a consumer ignores
    /// a ring without it.
    pub magic: AtomicU64,
    pub inst: u32,
    pub tid: i32,
    pub pid: i32,
    /// 1: times are raw TSC values; 0: CLOCK_MONOTONIC nanoseconds.
    pub tsc: u32,
    /// Records, a power of two.
    pub capacity: u64,
    /// The process's parent when the ring was made (a forked child's
    /// rings tell the writer where the child came from).
    pub ppid: i32,
    _pad0: u32,
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
    _pad1: u32,
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
    /// points'). See [`Ring::convert_times`].
    pub seg_raw: AtomicU64,
    pub seg_ns: AtomicU64,
    /// Held by whoever drains (in-process rings: the thread and the exit
    /// flush).
    pub busy: AtomicU32,
    _pad3: u32,
    /// The last time written (ns): the thread's times only go forward.
    pub last_ns: AtomicU64,
    pub seg_rate: AtomicU64,
    /// The calibration point (raw, ns) read when the ring was made, from
    /// which the rate of each new piece is measured.
    pub ref_raw: AtomicU64,
    pub ref_ns: AtomicU64,
    /// The line before (`prev_rate` 0: none), for times older than
    /// `seg_raw` drained after it (a time filter writes a call's entry
    /// once the call proves long enough).
    pub prev_raw: AtomicU64,
    pub prev_ns: AtomicU64,
    pub prev_rate: AtomicU64,
}

const _: () = {
    assert!(std::mem::size_of::<RingHeader>() <= HEADER_BYTES);
    assert!(std::mem::offset_of!(RingHeader, head) == 64);
    assert!(std::mem::offset_of!(RingHeader, reserve) == 72);
    assert!(std::mem::offset_of!(RingHeader, tail) == 128);
};

/// Bytes of a ring's mapping.
pub const fn ring_bytes(capacity: u64) -> usize {
    HEADER_BYTES + capacity as usize * 16
}

/// A mapped ring: its header and records.
#[derive(Clone, Copy)]
pub struct Ring {
    base: *mut u8,
}

// SAFETY: the ring is shared memory by design; every field either is an
// atomic or is owned by one side per the protocol above.
unsafe impl Send for Ring {}
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
    pub clock_step_max: u64,
}

/// [`Ring::claim_announced`]'s announcement while it reads `reserve`.
pub const UNSURE: u64 = u64::MAX;

/// The record was written by a signal handler ([`Ring::claim_announced`]).
#[derive(Debug)]
pub struct Taken;

/// The `reserve` word after claiming a slot for a `kind` record from `c`,
/// and the record's depth: the caller's or the ring's ([`Depth`]).
#[inline(always)]
fn next_reserve(c: u64, kind: Kind, from: Depth) -> (u64, u16) {
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
    (((c >> SLOT_SHIFT) + 1) << SLOT_SHIFT | next as u64, depth)
}

impl Ring {
    /// Initialises a ring in `base` (zeroed memory of `ring_bytes(cap)`).
    ///
    /// # Safety
    /// `base` must be a fresh, zeroed, writable mapping of at least
    /// `ring_bytes(capacity)` bytes, 64-aligned, that lives for the
    /// process's life.
    /// `depth`: the thread's recorded depth so far (the frames it has open
    /// when its first record is written: a forked child's).
    pub unsafe fn init(
        base: *mut u8,
        inst: usize,
        tid: i32,
        pid: i32,
        capacity: u64,
        session: u64,
        depth: u16,
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
            (*h).room_end
                .store(capacity << SLOT_SHIFT, Ordering::Relaxed);
            (*h).reserve.store(depth as u64, Ordering::Relaxed);
            (*h).head.store(depth as u64, Ordering::Relaxed);
            std::ptr::addr_of_mut!((*h).ppid).write(libc::getppid());
            std::ptr::addr_of_mut!((*h).session).write(session);
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
        let h = self.header();
        loop {
            let c = h.reserve.load(Ordering::Relaxed);
            if c >= h.room_end.load(Ordering::Relaxed) {
                return None;
            }
            let t = time();
            let (n, depth) = next_reserve(c, kind, from);
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

    /// [`Ring::claim_at`] for a record timed earlier (`time`: a call's
    /// entry, written once the call proved long enough) that a signal
    /// handler may write in our stead: it must come before the records of
    /// any handler that lands before our claim, older as it is. Before
    /// each attempt `announce` holds the `reserve` value the claim starts
    /// from ([`UNSURE`] while it is being read): a handler that finds
    /// `reserve` still there (or the announcement unsure) knows the record
    /// is not claimed, writes it itself before its own, and `pending()`
    /// turns false here ([`Taken`]). `Ok(None)`: no room.
    #[inline]
    pub fn claim_announced(
        &self,
        time: u64,
        kind: Kind,
        from: Depth,
        announce: &Cell<u64>,
        pending: impl Fn() -> bool,
    ) -> Result<Option<Claim>, Taken> {
        let h = self.header();
        loop {
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
            if c >= h.room_end.load(Ordering::Relaxed) {
                return Ok(None);
            }
            // From the announced value only: a handler that lands before
            // the exchange makes it fail, and the next round finds the
            // record written.
            let (n, depth) = next_reserve(c, kind, from);
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

    /// Consumer: converts the published records' times to nanoseconds,
    /// writes them to `fd`, then a LOST record for what the producer
    /// dropped, and frees their slots. Async-signal-safe (no allocation;
    /// `write` and the vDSO clock only). A failed write loses the records
    /// (counted) and stops this drain.
    pub fn drain(&self, fd: i32) -> Drained {
        let h = self.header();
        let head = h.head.load(Ordering::Acquire) >> SLOT_SHIFT;
        let tail = h.tail.load(Ordering::Relaxed);
        let dropped = h.lost.load(Ordering::Relaxed);
        let mut out = Drained::default();
        if head == tail && dropped == 0 {
            return out;
        }
        let point = clock::calibration_point();
        let cap = h.capacity;
        let mut at = tail;
        while at < head {
            let i = at & (cap - 1);
            let n = (head - at).min(cap - i).min(DRAIN_CHUNK);
            let (steps, worst) = self.convert_times(at, at + n, point);
            out.clock_steps_back += steps;
            out.clock_step_max = out.clock_step_max.max(worst);
            // SAFETY: records i..i+n are inside the ring and published.
            let p = unsafe { self.words().add(2 * i as usize) as *const u8 };
            match write_all(fd, p, n as usize * 16) {
                Ok(()) => out.written += n,
                Err((e, done)) => {
                    out.errno = e;
                    out.written += done as u64 / 16;
                    out.lost += head - at - done as u64 / 16;
                    drop_partial_record(fd, done % 16);
                    break;
                }
            }
            at += n;
            // Freed a chunk at a time: a thread waiting for room resumes
            // after one chunk, not after the whole drain.
            h.tail.store(at, Ordering::Release);
        }
        let dropped = h.lost.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            out.lost += dropped;
            let rec = [point.1, encode(Kind::Lost, 0, dropped)];
            if out.errno == 0 {
                if let Err((e, done)) = write_all(fd, rec.as_ptr().cast(), 16) {
                    out.errno = e;
                    drop_partial_record(fd, done);
                }
            }
        }
        h.tail.store(head, Ordering::Release);
        out
    }

    /// Consumer: frees every published record without writing it (there
    /// is nowhere to write); returns how many records that loses.
    pub fn discard(&self) -> u64 {
        let h = self.header();
        let head = h.head.load(Ordering::Acquire) >> SLOT_SHIFT;
        let tail = h.tail.load(Ordering::Relaxed);
        let dropped = h.lost.swap(0, Ordering::Relaxed);
        h.tail.store(head, Ordering::Release);
        head - tail + dropped
    }

    /// Converts the raw times of records `from..to` to nanoseconds, given
    /// the calibration point (raw, ns) read for this drain. Times map by a
    /// continuous line in pieces, each at least [`SEGMENT_NS`] long: the
    /// points are read every drain (every 100 µs on a busy ring), and a
    /// line through two points that close would take their reading error
    /// (up to ~100 ns each here) as a rate, off by 10⁻³ — a microsecond
    /// over a millisecond, which a time written late (a time filter's
    /// entry, written once its call proves long enough) would be misplaced
    /// by against the times around it (before: up to 15 times per run of 8
    /// threads under `-t 2us`, by up to 190 ns). Once the current piece spans the
    /// segment, the next one starts where it ends, at the rate measured
    /// since the ring was made, corrected to meet the clock again over the
    /// next few pieces (NTP may slew CLOCK_MONOTONIC). Times older than
    /// the current piece follow the one before it.
    fn convert_times(&self, from: u64, to: u64, point: (u64, u64)) -> (u64, u64) {
        let h = self.header();
        if h.tsc == 0 {
            return self.convert(from, to, |t| t);
        }
        let (ref_raw, ref_ns) = (
            h.ref_raw.load(Ordering::Relaxed),
            h.ref_ns.load(Ordering::Relaxed),
        );
        let mut rate = h.seg_rate.load(Ordering::Relaxed);
        if rate == 0 && point.0 > ref_raw && point.1 > ref_ns {
            // The ring's maker had no rate to start with: the points'.
            rate = ((((point.1 - ref_ns) as u128) << 32) / (point.0 - ref_raw) as u128) as u64;
        }
        if rate == 0 {
            // No time between the points to measure a rate: raw times
            // follow the start calibration's.
            let c = start_calibration().converter();
            return self.convert(from, to, |t| c.to_ns(t));
        }
        let mut line = Converter::new(
            h.seg_raw.load(Ordering::Relaxed),
            h.seg_ns.load(Ordering::Relaxed),
            rate,
        );
        let mut prev = Converter::new(
            h.prev_raw.load(Ordering::Relaxed),
            h.prev_ns.load(Ordering::Relaxed),
            h.prev_rate.load(Ordering::Relaxed),
        );
        if point.0 > line.raw0() && point.0 > ref_raw && point.1 >= line.ns0() + SEGMENT_NS {
            // The rate since the ring was made (its error shrinks as the
            // ring ages), and what the piece ending here missed the clock
            // by, made up over the next few.
            let life = (point.0 - ref_raw) as i128;
            let measured = (((point.1 - ref_ns) as i128) << 32) / life;
            let end = line.to_ns(point.0);
            let behind = point.1 as i128 - end as i128;
            let piece = (point.0 - line.raw0()) as i128;
            let next = (measured + (behind << 32) / (piece * CATCH_UP)).max(1) as u64;
            prev = line;
            line = Converter::new(point.0, end, next);
            h.prev_raw.store(prev.raw0(), Ordering::Relaxed);
            h.prev_ns.store(prev.ns0(), Ordering::Relaxed);
            h.prev_rate.store(prev.rate(), Ordering::Relaxed);
            h.seg_raw.store(point.0, Ordering::Relaxed);
            h.seg_ns.store(end, Ordering::Relaxed);
            h.seg_rate.store(next, Ordering::Relaxed);
        }
        let seg_raw = line.raw0();
        self.convert(from, to, |t| {
            if t >= seg_raw {
                // The common case: the current piece (its rate is never 0).
                line.to_ns_from_start(t)
            } else if prev.rate() != 0 {
                prev.to_ns(t)
            } else {
                line.to_ns(t)
            }
        })
    }

    /// Rewrites the times of records `from..to` by `f`, each at least 1 ns
    /// after the one before it, so that every call lasts at least 1 ns.
    /// The records are in the order their times were read on one thread,
    /// so an equal or earlier time is a clock artefact: two reads of a
    /// virtual machine's TSC a few ns apart can return values 1 tick apart
    /// (the same ns); the TSCs of two CPUs differ by a few ns (a thread that
    /// migrates between a call's entry and exit would otherwise get a
    /// negative duration); a time older than the conversion's piece before
    /// the current one is placed by extrapolation. Returns how many times stepped back (equal ones are not
    /// counted) and the largest step (ns).
    fn convert(&self, from: u64, to: u64, f: impl Fn(u64) -> u64) -> (u64, u64) {
        let h = self.header();
        let mask = h.capacity - 1;
        let mut last = h.last_ns.load(Ordering::Relaxed);
        let (mut steps, mut worst) = (0, 0);
        for k in from..to {
            // SAFETY: a published record's time word, the consumer's until
            // `tail` moves past it.
            unsafe {
                let w = self.words().add(2 * (k & mask) as usize);
                // A hint, which reads nothing: one line in four records;
                // none beyond this drain's (the thread may be writing
                // those).
                if k % 4 == 0 && k + PREFETCH_RECORDS < to {
                    let ahead = self
                        .words()
                        .add(2 * ((k + PREFETCH_RECORDS) & mask) as usize);
                    std::arch::x86_64::_mm_prefetch(
                        ahead as *const i8,
                        std::arch::x86_64::_MM_HINT_T0,
                    );
                }
                let mut t = f(w.read());
                if t <= last {
                    if t < last {
                        steps += 1;
                        worst = worst.max(last - t);
                    }
                    t = last + 1;
                }
                w.write(t);
                last = t;
            }
        }
        h.last_ns.store(last, Ordering::Relaxed);
        (steps, worst)
    }
}

/// How far ahead (records: 4 KiB) the conversion asks for the ring's
/// lines. They are most often still in the producing thread's cache, and
/// the conversion waited for each in turn: prefetched, fib(30)'s 86 MB
/// took the writer 63 ms instead of 71 (its waits for room went from a
/// few per run to about none).
const PREFETCH_RECORDS: u64 = 256;

/// Records a drain converts and writes before it frees their slots (256
/// KiB): a full ring's thread waits for one chunk, not for the writer's
/// whole drain of it (2 MiB took it ~0.5 ms here, and fib(30) waited 44
/// times per run).
const DRAIN_CHUNK: u64 = 1 << 14;

/// The shortest piece of a ring's time conversion (see
/// [`Ring::convert_times`]): 100 ms. A calibration point is off by up to
/// ~100 ns on a virtual machine (the writer reads it on whichever vCPU it
/// runs, each with its own view of the clock): over 100 ms, a rate error
/// of 10⁻⁶.
pub const SEGMENT_NS: u64 = 100_000_000;

/// How many times the span since a ring was made a piece of its time
/// conversion takes to meet the clock again (see [`Ring::convert_times`]).
const CATCH_UP: i128 = 2;

/// The recording's start calibration (set in the traced process): the
/// rate of a ring's first piece, and of its times when its points are too
/// close to give one.
static START: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

pub fn set_start_calibration(c: Calibration) {
    for (a, v) in START.iter().zip([c.raw0, c.ns0, c.raw1, c.ns1]) {
        a.store(v, Ordering::Relaxed);
    }
}

fn start_calibration() -> Calibration {
    let s = START.each_ref().map(|a| a.load(Ordering::Relaxed));
    Calibration {
        raw0: s[0],
        ns0: s[1],
        raw1: s[2],
        ns1: s[3],
    }
}

/// A write that failed after `stray` bytes of a record: cut them off, so
/// that the file holds whole records only.
fn drop_partial_record(fd: i32, stray: usize) {
    if stray == 0 {
        return;
    }
    // SAFETY: lseek and ftruncate on our own descriptor.
    unsafe {
        let end = libc::lseek(fd, 0, libc::SEEK_END);
        if end >= stray as libc::off_t {
            libc::ftruncate(fd, end - stray as libc::off_t);
        }
    }
}

/// Writes `len` bytes at `p` to `fd`, retrying short writes and EINTR.
/// A write of 0 bytes to a regular file means no space. On failure:
/// (errno, bytes written before it).
fn write_all(fd: i32, mut p: *const u8, mut len: usize) -> Result<(), (i32, usize)> {
    let mut done = 0;
    while len > 0 {
        // SAFETY: [p, p + len) is readable (callers' contracts).
        let n = unsafe { libc::write(fd, p.cast(), len) };
        if n < 0 {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if e == libc::EINTR {
                continue;
            }
            return Err((e, done));
        }
        if n == 0 {
            return Err((libc::ENOSPC, done));
        }
        len -= n as usize;
        done += n as usize;
        // SAFETY: advancing within the range.
        p = unsafe { p.add(n as usize) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shadowgraph_data::format::decode;
    use std::sync::atomic::AtomicBool;

    /// A drain frees the ring a chunk at a time: while the writer is
    /// still busy with a full ring (here blocked writing its second chunk
    /// into a pipe nobody reads yet), the thread already has the first
    /// chunk's room back. Every record still arrives, in order.
    #[test]
    fn a_drain_frees_each_chunk_as_it_is_written() {
        const CAP: u64 = 4 * DRAIN_CHUNK;
        let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
        // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
        // during the test.
        let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0) };
        // SAFETY: the header of the ring just made; times as given (ns).
        unsafe { (*(base as *mut RingHeader)).tsc = 0 };
        for k in 0..CAP {
            let c = ring
                .claim_at(|| 1000 + k, Kind::Entry, Depth::Given(0))
                .unwrap();
            ring.write(c.slot, c.time, Kind::Entry, 0, k);
            ring.publish(&c);
        }
        assert!(!ring.refresh(), "the ring is full");
        let mut fds = [0; 2];
        // SAFETY: a pipe of our own (its buffer, 64 KiB here, is smaller than
        // a chunk's 256 KiB).
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let [rd, wr] = fds;
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let drain = s.spawn(|| {
                let d = ring.drain(wr);
                done.store(true, Ordering::Release);
                d
            });
            let mut got = Vec::with_capacity(CAP as usize * 16);
            let mut buf = vec![0u8; 1 << 16];
            let mut read_some = |got: &mut Vec<u8>, want: usize| {
                while got.len() < want {
                    // SAFETY: reading into our own buffer.
                    let n = unsafe {
                        libc::read(rd, buf.as_mut_ptr().cast(), buf.len().min(want - got.len()))
                    };
                    assert!(n > 0, "read: {}", std::io::Error::last_os_error());
                    got.extend_from_slice(&buf[..n as usize]);
                }
            };
            read_some(&mut got, DRAIN_CHUNK as usize * 16);
            let t0 = std::time::Instant::now();
            while !ring.refresh() {
                if t0.elapsed().as_secs() >= 10 {
                    // SAFETY: our pipe's read end: the drain's write fails
                    // (EPIPE) and the scope can end.
                    unsafe { libc::close(rd) };
                    panic!("no room while the drain is blocked");
                }
                std::thread::yield_now();
            }
            assert!(
                !done.load(Ordering::Acquire),
                "the drain finished without our reads"
            );
            assert_eq!(ring.header().tail.load(Ordering::Acquire), DRAIN_CHUNK);
            read_some(&mut got, CAP as usize * 16);
            let d = drain.join().unwrap();
            assert_eq!((d.written, d.lost, d.errno), (CAP, 0, 0));
            for (k, rec) in got.chunks_exact(16).enumerate() {
                let r = decode(rec.try_into().unwrap(), k as u64 * 16).unwrap();
                assert_eq!((r.time, r.addr), (1000 + k as u64, k as u64), "record {k}");
            }
        });
        // SAFETY: our pipe's ends.
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
    }

    /// The time conversion of a TSC ring whose calibration points are off
    /// by up to ±100 ns each (as a writer migrating between vCPUs reads
    /// them), drained every 100 µs, with now and then a time written 30 ms
    /// late (a time filter's entry, after 30 ms of calls too short to
    /// record): every converted time follows the one before it (no step
    /// back); the times stray from the clock by the start rate's error in
    /// the first piece (2 µs), half as much in each piece after.
    #[test]
    fn late_times_keep_their_place_under_noisy_calibration_points() {
        const CAP: u64 = 1 << 16;
        let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
        // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
        // during the test.
        let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0) };
        // A clock of 2.6 ticks per ns from raw 10^9 (ns 0), whatever the
        // process's calibration: the header set as Ring::init would.
        let h = base as *mut RingHeader;
        let raw = |ns: u64| 1_000_000_000 + ns * 26 / 10;
        // SAFETY: the header of the ring just made, this thread's alone.
        unsafe {
            (*h).tsc = 1;
            for (f, v) in [
                (&(*h).seg_raw, raw(0)),
                (&(*h).seg_ns, 0),
                (&(*h).ref_raw, raw(0)),
                (&(*h).ref_ns, 0),
                // A start rate 2·10⁻⁵ off.
                (
                    &(*h).seg_rate,
                    ((1u128 << 32) * 10 / 26 * 100_002 / 100_000) as u64,
                ),
            ] {
                f.store(v, Ordering::Relaxed);
            }
        }
        let noise = |i: u64| (i * 7919 % 201) as i64 - 100;
        let (mut prev, mut ns, mut off_at_end) = (0u64, 0u64, 0);
        for drain in 0..3000u64 {
            // 100 µs of records, one every 25 ns; every 700th drain, after
            // 30 ms without records, the first is a late one, read just
            // after the last before the gap.
            let first = ring.header().head.load(Ordering::Relaxed) >> SLOT_SHIFT;
            let late = drain % 700 == 699;
            if late {
                ns += 30_000_000;
            }
            for k in 0..4000 {
                let t = if late && k == 0 {
                    raw(ns - 30_000_000 - 10)
                } else {
                    raw(ns + 25 * k)
                };
                let c = ring.claim_at(|| t, Kind::Entry, Depth::Given(0)).unwrap();
                ring.write(c.slot, c.time, Kind::Entry, 0, 0);
                ring.publish(&c);
            }
            ns += 100_000;
            let point = (raw(ns), (ns as i64 + noise(drain)) as u64);
            let last = ring.header().head.load(Ordering::Relaxed) >> SLOT_SHIFT;
            let (steps, _) = ring.convert_times(first, last, point);
            assert_eq!(steps, 0, "drain {drain}");
            for k in first..last {
                // SAFETY: a converted record's time word.
                let t = unsafe { ring.words().add(2 * (k & (CAP - 1)) as usize).read() };
                assert!(
                    t > prev || k == first && drain == 0,
                    "drain {drain}, record {k}"
                );
                prev = t;
            }
            let off = (prev as i64 - (ns - 25) as i64).abs();
            assert!(off <= 2_001, "drain {drain}: {off} ns off the clock");
            off_at_end = off;
            ring.header().tail.store(last, Ordering::Relaxed);
            ring.refresh();
        }
        // 420 ms in: the start rate's error halved each piece since.
        assert!(off_at_end < 300, "{off_at_end} ns off the clock at the end");
    }

    /// A producer thread fills a small ring as fast as it can while a
    /// consumer thread drains it to a file: every record arrives once, in
    /// order, intact (the ring wraps ~1000 times).
    #[test]
    fn producer_and_consumer_threads_lose_nothing() {
        const CAP: u64 = 1024;
        const N: u64 = 1_000_000;
        let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
        // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
        // during the test.
        let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0) };
        let path = std::env::temp_dir().join(format!("sg-ring-test-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let done = AtomicBool::new(false);
        let tsc = ring.header().tsc != 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..N {
                    let c = loop {
                        // Times from 1: each after the one before it.
                        if let Some(c) = ring.claim_at(|| i + 1, Kind::Lost, Depth::Follow) {
                            break c;
                        }
                        ring.refresh();
                        std::hint::spin_loop();
                    };
                    ring.write(c.slot, c.time, Kind::Entry, (i % 1024) as u16, i);
                    ring.publish(&c);
                }
                done.store(true, Ordering::Release);
            });
            s.spawn(|| {
                use std::os::fd::AsRawFd;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    let d = ring.drain(file.as_raw_fd());
                    assert_eq!((d.lost, d.errno), (0, 0));
                    if finished && d.written == 0 {
                        break;
                    }
                }
            });
        });
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(bytes.len() as u64, N * 16);
        for (i, rec) in bytes.chunks_exact(16).enumerate() {
            let r = decode(rec.try_into().unwrap(), i as u64 * 16).unwrap();
            let i = i as u64;
            assert_eq!((r.addr, r.depth as u64), (i, i % 1024), "record {i}");
            if !tsc {
                assert_eq!(r.time, i + 1, "record {i}");
            }
        }
    }

    /// Times that step back (another CPU's TSC) or repeat are moved 1 ns
    /// after the thread's previous one, across drains; steps back are
    /// counted.
    #[test]
    fn a_threads_times_only_go_forward() {
        const CAP: u64 = 16;
        let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
        // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
        // during the test.
        let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0) };
        if ring.header().tsc != 0 {
            return; // times are converted: the steps would not be these
        }
        let path = std::env::temp_dir().join(format!("sg-ring-fwd-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let put = |times: &[u64]| {
            use std::os::fd::AsRawFd;
            for &t in times {
                let c = ring.claim_at(|| t, Kind::Lost, Depth::Follow).unwrap();
                ring.write(c.slot, c.time, Kind::Entry, 0, 0);
                ring.publish(&c);
            }
            let d = ring.drain(file.as_raw_fd());
            (d.written, d.clock_steps_back, d.clock_step_max)
        };
        assert_eq!(put(&[100, 200, 195, 195, 300, 50]), (6, 3, 250));
        // An equal time moves too, but is not a step back.
        assert_eq!(put(&[310, 301, 400, 400]), (4, 1, 9));
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let times: Vec<u64> = bytes
            .chunks_exact(16)
            .enumerate()
            .map(|(i, rec)| decode(rec.try_into().unwrap(), i as u64 * 16).unwrap().time)
            .collect();
        assert_eq!(times, [100, 200, 201, 202, 300, 301, 310, 311, 400, 401]);
    }
}
