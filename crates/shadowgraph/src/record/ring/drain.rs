//! A ring's consumer side: the writer converts the published records'
//! times to nanoseconds between calibration points, writes them to the
//! thread's `.dat` file a chunk at a time, and frees their slots.

use super::{data_slots, has_data, start_calibration, Drained, Ring, MAX_DATA, SLOT_SHIFT};
use crate::clock;
use shadowgraph_data::format::{encode, Kind};
use shadowgraph_data::time::Converter;
use std::sync::atomic::Ordering;

impl Ring {
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
        // Acquire: read after `head`, set before any record with data that
        // `head` publishes.
        if h.with_data.load(Ordering::Acquire) != 0 {
            return self.drain_walking(fd, head);
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
        self.write_lost(fd, point.1, &mut out);
        // Release: the records drained are read before their slots go back
        // to the producer, which loads `tail` Acquire before reusing them.
        h.tail.store(head, Ordering::Release);
        out
    }

    /// [`Ring::drain`] of a ring some of whose records have data after
    /// them: the records are walked (a record with data is followed by its
    /// slots) and written with their data as uftrace lays it out — the
    /// 16-byte record, then the data — through a buffer; every slot is
    /// freed at the end.
    fn drain_walking(&self, fd: i32, head: u64) -> Drained {
        let h = self.header();
        let tail = h.tail.load(Ordering::Relaxed);
        let mut out = Drained::default();
        let point = clock::calibration_point();
        let (steps, worst) = self.convert_times_walking(tail, head, point);
        out.clock_steps_back = steps;
        out.clock_step_max = worst;
        let mut buf = [0u8; 4096];
        let mut n = 0usize;
        // The file's end before each write, to cut a failed one back to.
        let flush = |buf: &[u8], out: &mut Drained| -> bool {
            // SAFETY: lseek on our own descriptor.
            let end = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
            match write_all(fd, buf.as_ptr(), buf.len()) {
                Ok(()) => true,
                Err((e, done)) => {
                    out.errno = e;
                    if done > 0 && end >= 0 {
                        // SAFETY: ftruncate of our own descriptor back to
                        // where this write began (whole records only).
                        unsafe { libc::ftruncate(fd, end) };
                    }
                    false
                }
            }
        };
        let (mask, words_mask) = (h.capacity - 1, 2 * h.capacity - 1);
        let word = |linear: u64| {
            // SAFETY: a published slot's word (masked into the ring), the
            // consumer's until `tail` moves past it.
            unsafe { self.words().add((linear & words_mask) as usize).read() }
        };
        let (mut at, mut pending) = (tail, 0u64);
        while at < head {
            let i = 2 * (at & mask);
            let (w0, w1) = (word(i), word(i + 1));
            let len = if has_data(w1) {
                (word(2 * (at + 1)) as usize).min(MAX_DATA) & !7
            } else {
                0
            };
            if n + 16 + len > buf.len() {
                if out.errno == 0 && flush(&buf[..n], &mut out) {
                    out.written += pending;
                } else {
                    out.lost += pending;
                }
                (n, pending) = (0, 0);
            }
            buf[n..n + 8].copy_from_slice(&w0.to_le_bytes());
            buf[n + 8..n + 16].copy_from_slice(&w1.to_le_bytes());
            n += 16;
            for j in 0..len / 8 {
                let w = word(2 * (at + 1) + 1 + j as u64);
                buf[n..n + 8].copy_from_slice(&w.to_le_bytes());
                n += 8;
            }
            pending += 1;
            at += 1 + if has_data(w1) { data_slots(len) } else { 0 };
        }
        if pending > 0 {
            if out.errno == 0 && flush(&buf[..n], &mut out) {
                out.written += pending;
            } else {
                out.lost += pending;
            }
        }
        self.write_lost(fd, point.1, &mut out);
        // Release: as in `drain`.
        h.tail.store(head, Ordering::Release);
        out
    }

    /// After a drain: a LOST record at `ns` for what the producer dropped
    /// (taken from the ring, counted in `out`), written unless a write
    /// failed already.
    fn write_lost(&self, fd: i32, ns: u64, out: &mut Drained) {
        let dropped = self.header().lost.swap(0, Ordering::Relaxed);
        if dropped == 0 {
            return;
        }
        out.lost += dropped;
        let rec = [ns, encode(Kind::Lost, 0, dropped)];
        if out.errno == 0 {
            if let Err((e, done)) = write_all(fd, rec.as_ptr().cast(), 16) {
                out.errno = e;
                drop_partial_record(fd, done);
            }
        }
    }

    /// Consumer: frees every published record without writing it (there
    /// is nowhere to write); returns how many records that loses.
    pub fn discard(&self) -> u64 {
        let h = self.header();
        let head = h.head.load(Ordering::Acquire) >> SLOT_SHIFT;
        let tail = h.tail.load(Ordering::Relaxed);
        let dropped = h.lost.swap(0, Ordering::Relaxed);
        // Acquire: as in `drain`.
        let records = if h.with_data.load(Ordering::Acquire) != 0 {
            self.count_records(tail, head)
        } else {
            head - tail
        };
        h.tail.store(head, Ordering::Release);
        records + dropped
    }

    /// The records in slots `from..to` (a record's data slots are not
    /// records).
    fn count_records(&self, from: u64, to: u64) -> u64 {
        let h = self.header();
        let (mask, words_mask) = (h.capacity - 1, 2 * h.capacity - 1);
        let (mut at, mut n) = (from, 0);
        while at < to {
            // SAFETY: published words, masked into the ring.
            let w1 = unsafe { self.words().add((2 * (at & mask) + 1) as usize).read() };
            at += 1;
            if has_data(w1) {
                // SAFETY: as above.
                let len = unsafe { self.words().add(((2 * at) & words_mask) as usize).read() };
                at += data_slots((len as usize).min(MAX_DATA) & !7);
            }
            n += 1;
        }
        n
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
        self.convert_times_as(from, to, point, false)
    }

    /// [`Ring::convert_times`] over records some of which have data after
    /// them (skipped: not times).
    fn convert_times_walking(&self, from: u64, to: u64, point: (u64, u64)) -> (u64, u64) {
        self.convert_times_as(from, to, point, true)
    }

    fn convert_times_as(&self, from: u64, to: u64, point: (u64, u64), walk: bool) -> (u64, u64) {
        let h = self.header();
        if h.tsc == 0 {
            return self.convert(from, to, walk, |t| t);
        }
        // Relaxed (the conversion words, here and below): only the drainer
        // reads and writes them, one at a time (`busy`, or the writer
        // process alone), after the maker's Release of the magic.
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
            return self.convert(from, to, walk, |t| c.to_ns(t));
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
        self.convert(from, to, walk, |t| {
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
    fn convert(&self, from: u64, to: u64, walk: bool, f: impl Fn(u64) -> u64) -> (u64, u64) {
        let h = self.header();
        let mask = h.capacity - 1;
        let mut last = h.last_ns.load(Ordering::Relaxed);
        let (mut steps, mut worst) = (0, 0);
        let mut next = from;
        for k in from..to {
            if k < next {
                continue; // a record's data, not a record
            }
            next = k + 1;
            if walk {
                // SAFETY: the record's second word, and its data's length
                // word after it, published (masked into the ring).
                unsafe {
                    let w1 = self.words().add(2 * (k & mask) as usize + 1).read();
                    if has_data(w1) {
                        let len = self.words().add(2 * ((k + 1) & mask) as usize).read();
                        next += data_slots((len as usize).min(MAX_DATA) & !7);
                    }
                }
            }
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
        // Relaxed: the drainer's own word, as above.
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
/// `Ring::convert_times`): 100 ms. A calibration point is off by up to
/// ~100 ns on a virtual machine (the writer reads it on whichever vCPU it
/// runs, each with its own view of the clock): over 100 ms, a rate error
/// of 10⁻⁶.
pub const SEGMENT_NS: u64 = 100_000_000;

/// How many times the span since a ring was made a piece of its time
/// conversion takes to meet the clock again (see [`Ring::convert_times`]).
const CATCH_UP: i128 = 2;

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
    use crate::record::ring::{ring_bytes, Depth, RingHeader};
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

    /// Records with data after them (arguments) go out as uftrace lays
    /// them out: the record, then the data, the ring's length words and
    /// padding left out, across the ring's end too; their times are
    /// converted, the data is not; the records without data around them
    /// are untouched, and a ring with none drains as before.
    #[test]
    fn records_with_data_are_written_with_their_data() {
        const CAP: u64 = 16;
        let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
        // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
        // during the test.
        let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0) };
        // SAFETY: the header of the ring just made; times as given (ns).
        unsafe { (*(base as *mut RingHeader)).tsc = 0 };
        let file = std::env::temp_dir().join(format!("sg-ring-data-{}", std::process::id()));
        let f = std::fs::File::create(&file).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let mut expect: Vec<u8> = Vec::new();
        let mut time = 100u64;
        let mut put = |ring: &Ring, data: Option<Vec<u8>>, expect: &mut Vec<u8>| {
            time += 10;
            let kind = if time.is_multiple_of(20) {
                Kind::Exit
            } else {
                Kind::Entry
            };
            match data {
                None => {
                    let c = ring.claim_at(|| time, kind, Depth::Given(3)).unwrap();
                    ring.write(c.slot, c.time, kind, 3, 0x1234);
                    ring.publish(&c);
                    expect.extend_from_slice(&time.to_le_bytes());
                    expect.extend_from_slice(&encode(kind, 3, 0x1234).to_le_bytes());
                }
                Some(d) => {
                    let c = ring
                        .claim_with_data(|| time, kind, Depth::Given(3), d.len())
                        .unwrap();
                    ring.write_with_data(c.slot, c.time, kind, 3, 0x5678, &d);
                    ring.publish(&c);
                    expect.extend_from_slice(&time.to_le_bytes());
                    let w = encode(kind, 3, 0x5678) | crate::record::ring::MORE;
                    expect.extend_from_slice(&w.to_le_bytes());
                    expect.extend_from_slice(&d);
                }
            }
        };
        let data = |n: usize, tag: u8| Some((0..n).map(|i| tag ^ i as u8).collect::<Vec<u8>>());
        // 1 + 2 + 1 + 4 slots, drained; then 3 + 1 + 5 slots: the last
        // record's data wraps past the ring's end.
        put(&ring, None, &mut expect);
        put(&ring, data(8, 0x11), &mut expect);
        put(&ring, None, &mut expect);
        put(&ring, data(48, 0x22), &mut expect);
        let d = ring.drain(fd);
        assert_eq!((d.written, d.lost, d.errno), (4, 0, 0));
        assert!(ring.refresh());
        put(&ring, data(24, 0x33), &mut expect);
        put(&ring, None, &mut expect);
        put(&ring, data(64, 0x44), &mut expect);
        let d = ring.drain(fd);
        assert_eq!((d.written, d.lost, d.errno), (3, 0, 0));
        drop(f);
        let got = std::fs::read(&file).unwrap();
        let _ = std::fs::remove_file(&file);
        assert_eq!(got.len(), expect.len());
        assert!(
            got == expect,
            "the file differs from the records and data written"
        );
        // Each record decodes, its data skipped by its length.
        let mut at = 0;
        let mut n = 0;
        while at < got.len() {
            let r = decode(got[at..at + 16].try_into().unwrap(), at as u64).unwrap();
            at += 16 + if r.more { [8, 48, 24, 64][n / 2] } else { 0 };
            n += 1;
        }
        assert_eq!(n, 7);
    }
}
