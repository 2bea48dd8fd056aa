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
    /// 16-byte record, then the data — through a buffer, but for long runs
    /// of records without data, written from the ring and freed at once
    /// (a thread waiting for room resumes); the rest is freed at the end.
    fn drain_walking(&self, fd: i32, head: u64) -> Drained {
        let h = self.header();
        let tail = h.tail.load(Ordering::Relaxed);
        let mut out = Drained::default();
        let point = clock::calibration_point();
        let (steps, worst) = self.convert_times_walking(tail, head, point);
        out.clock_steps_back = steps;
        out.clock_step_max = worst;
        // The file's end, to cut a failed write back to (whole records
        // only), followed as writes succeed.
        // SAFETY: lseek on our own descriptor.
        let mut end = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
        let mut put = |p: *const u8, len: usize, out: &mut Drained| -> bool {
            if out.errno != 0 {
                return false;
            }
            match write_all(fd, p, len) {
                Ok(()) => {
                    end += len as i64;
                    true
                }
                Err((e, done)) => {
                    out.errno = e;
                    if done > 0 && end >= 0 {
                        // SAFETY: ftruncate of our own descriptor back to
                        // where this write began.
                        unsafe { libc::ftruncate(fd, end) };
                    }
                    false
                }
            }
        };
        let mut buf = [0u8; 16384];
        let (mut n, mut pending) = (0usize, 0u64);
        let (mask, words_mask) = (h.capacity - 1, 2 * h.capacity - 1);
        let word = |linear: u64| {
            // SAFETY: a published slot's word (masked into the ring), the
            // consumer's until `tail` moves past it.
            unsafe { self.words().add((linear & words_mask) as usize).read() }
        };
        let mut at = tail;
        while at < head {
            // A run of records without data (not across the ring's end):
            // written from the ring as `drain` writes, when long enough to
            // be worth a write of its own, else copied with the rest.
            let i = at & mask;
            let limit = (head - at).min(h.capacity - i).min(DRAIN_CHUNK);
            let mut k = 0;
            while k < limit && !has_data(word(2 * (i + k) + 1)) {
                k += 1;
            }
            if k >= DIRECT_RUN {
                if pending > 0 {
                    let ok = put(buf.as_ptr(), n, &mut out);
                    *(if ok { &mut out.written } else { &mut out.lost }) += pending;
                    (n, pending) = (0, 0);
                }
                // SAFETY: records i..i+k are inside the ring and published.
                let p = unsafe { self.words().add(2 * i as usize) as *const u8 };
                let ok = put(p, k as usize * 16, &mut out);
                *(if ok { &mut out.written } else { &mut out.lost }) += k;
                at += k;
                // Freed as it goes, as `drain` frees its chunks.
                h.tail.store(at, Ordering::Release);
                continue;
            }
            // One record (with its data, if any) into the buffer.
            let w1 = word(2 * i + 1);
            let len = if has_data(w1) {
                (word(2 * (at + 1)) as usize).min(MAX_DATA) & !7
            } else {
                0
            };
            if n + 16 + len > buf.len() {
                let ok = put(buf.as_ptr(), n, &mut out);
                *(if ok { &mut out.written } else { &mut out.lost }) += pending;
                (n, pending) = (0, 0);
            }
            buf[n..n + 8].copy_from_slice(&word(2 * i).to_le_bytes());
            buf[n + 8..n + 16].copy_from_slice(&w1.to_le_bytes());
            n += 16;
            let first = (2 * (at + 1) + 1) & words_mask;
            if first as usize + len / 8 <= words_mask as usize + 1 {
                // SAFETY: the data's words, published, inside the ring (not
                // past its end), into the buffer's room checked above.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.words().add(first as usize) as *const u8,
                        buf.as_mut_ptr().add(n),
                        len,
                    )
                };
                n += len;
            } else {
                for j in 0..len / 8 {
                    let w = word(first + j as u64);
                    buf[n..n + 8].copy_from_slice(&w.to_le_bytes());
                    n += 8;
                }
            }
            pending += 1;
            at += 1 + if has_data(w1) { data_slots(len) } else { 0 };
        }
        if pending > 0 {
            let ok = put(buf.as_ptr(), n, &mut out);
            *(if ok { &mut out.written } else { &mut out.lost }) += pending;
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

/// A run of records without data this long is written from the ring by
/// `drain_walking`, a shorter one copied beside the records with data.
const DIRECT_RUN: u64 = 64;

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
mod tests;
