//! A ring's consumer side: the writer converts the published records'
//! times to nanoseconds between calibration points, writes them to the
//! thread's `.dat` file a chunk at a time, and frees their slots.

use super::{data_slots, has_data, Drained, Ring, MAX_DATA, SLOT_SHIFT};
use crate::clock;
use std::sync::atomic::Ordering;
use times::{prefetch, Times, PREFETCH_RECORDS};

mod filter;
mod gather;
mod times;
pub use times::SEGMENT_NS;

impl Ring {
    /// Consumer: converts the published records' times to nanoseconds,
    /// writes them to `fd`, then a LOST record for what the producer
    /// dropped, and frees their slots. Async-signal-safe (no allocation;
    /// `write` and the vDSO clock only). A failed write loses the records
    /// (counted) and stops this drain. Records with data are gathered
    /// through a buffer on the stack ([`DRAIN_BUFFER`] bytes); see
    /// [`Ring::drain_with`].
    pub fn drain(&self, fd: i32) -> Drained {
        self.drain_with(fd, &mut [0u8; DRAIN_BUFFER])
    }

    /// [`Ring::drain`] of at most `max` records, where the ring has no
    /// records with data and no consumer's filter (else all of it, as
    /// [`Ring::drain`]): a thread that drains its own ring frees a chunk
    /// and records on, while the writer goes on with the rest. The records
    /// the producer dropped are written (a LOST record at the drain's time)
    /// only by a drain that reaches the last record, after it.
    pub fn drain_some(&self, fd: i32, max: u64) -> Drained {
        self.drain_up_to(fd, &mut [0u8; DRAIN_BUFFER], max)
    }

    /// [`Ring::drain`] with the caller's buffer for gathering records with
    /// data (larger: fewer writes; at least 4 KiB is used whatever its
    /// length).
    pub fn drain_with(&self, fd: i32, buf: &mut [u8]) -> Drained {
        self.drain_up_to(fd, buf, u64::MAX)
    }

    /// [`Ring::drain_with`], of at most `max` records where the ring has
    /// none with data and no consumer's filter ([`Ring::drain_some`]).
    fn drain_up_to(&self, fd: i32, buf: &mut [u8], max: u64) -> Drained {
        let h = self.header();
        let head = h.head.load(Ordering::Acquire) >> SLOT_SHIFT;
        let tail = h.tail.load(Ordering::Relaxed);
        let dropped = h.lost.load(Ordering::Relaxed);
        let mut out = Drained::default();
        if head == tail && dropped == 0 {
            return out;
        }
        let point = clock::calibration_point();
        let mut times = self.times(point);
        // Where this drain ends: the last record but for a plain ring's
        // part.
        let mut to = head;
        // The walks gather in `buf`, or where it is too short in one of our
        // own (a drain of a ring without data uses neither).
        let mut own = [0u8; MIN_BUFFER];
        let buf = if buf.len() >= MIN_BUFFER {
            buf
        } else {
            &mut own[..]
        };
        // Acquire (`with_data`): read after `head`, set before any record
        // with data that `head` publishes.
        let with_data = h.with_data.load(Ordering::Acquire) != 0;
        if h.min_ns != 0 {
            let how = (head, h.min_ns, dropped != 0);
            self.drain_filtered(fd, how, &mut times, buf, &mut out);
        } else if h.compact != 0 {
            if !with_data {
                to = head.min(tail.saturating_add(max));
            }
            self.drain_compact(fd, to, &mut times, buf, &mut out);
        } else if with_data {
            self.drain_walking(fd, head, &mut times, buf, &mut out);
        } else {
            to = head.min(tail.saturating_add(max));
            self.drain_plain(fd, to, &mut times, &mut out);
        }
        self.end_times(times, &mut out);
        if to == head {
            self.write_lost(fd, point.1, &mut out);
        }
        // Release: the records drained are read before their slots go back
        // to the producer, which loads `tail` Acquire before reusing them.
        h.tail.store(to, Ordering::Release);
        out
    }

    /// [`Ring::drain`] of a ring whose records have no data: written from
    /// the ring a chunk at a time, each freed once written.
    fn drain_plain(&self, fd: i32, head: u64, times: &mut Times, out: &mut Drained) {
        let h = self.header();
        let cap = h.capacity;
        let mut at = h.tail.load(Ordering::Relaxed);
        while at < head {
            let i = at & (cap - 1);
            let n = (head - at).min(cap - i).min(DRAIN_CHUNK);
            self.convert_run(times, at, at + n);
            // SAFETY: records i..i+n are inside the ring and published.
            let p = unsafe { self.words().add(2 * i as usize) as *const u8 };
            match write_all(fd, p, n as usize * 16) {
                Ok(()) => out.written += n,
                Err((e, done)) => {
                    out.errno = e;
                    out.written += done as u64 / 16;
                    out.lost += head - at - done as u64 / 16;
                    drop_partial_record(fd, done % 16);
                    return;
                }
            }
            at += n;
            // Freed a chunk at a time: a thread waiting for room resumes
            // after one chunk, not after the whole drain (Release: as at
            // the drain's end).
            h.tail.store(at, Ordering::Release);
        }
    }

    /// [`Ring::drain`] of a ring some of whose records have data after
    /// them: the records are walked (a record with data is followed by its
    /// slots) and written with their data as uftrace lays it out — the
    /// 16-byte record, then the data — gathered in `buf`, their times
    /// converted on the way (and written back, see below); the rest of a
    /// long run of records without data is written from the ring as
    /// [`Ring::drain_plain`] writes it. Slots are freed as their records
    /// are gathered or written: a thread waiting for room resumes after
    /// one buffer, not after the whole drain.
    fn drain_walking(
        &self,
        fd: i32,
        head: u64,
        times: &mut Times,
        buf: &mut [u8],
        out: &mut Drained,
    ) {
        let h = self.header();
        // The file's end, to cut a failed write back to (whole records
        // only), followed as writes succeed: its end, not this
        // descriptor's offset (the ring's thread and the writer may both
        // append to the file, one drain at a time).
        // SAFETY: lseek on our own descriptor.
        let mut end = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        let mut put = |p: *const u8, len: usize, records: u64, out: &mut Drained| {
            if out.errno != 0 {
                out.lost += records;
                return;
            }
            match write_all(fd, p, len) {
                Ok(()) => {
                    end += len as i64;
                    out.written += records;
                }
                Err((e, done)) => {
                    out.errno = e;
                    out.lost += records;
                    if done > 0 && end >= 0 {
                        // SAFETY: ftruncate of our own descriptor back to
                        // where this write began.
                        unsafe { libc::ftruncate(fd, end) };
                    }
                }
            }
        };
        let (mask, words_mask) = (h.capacity - 1, 2 * h.capacity - 1);
        let words = self.words();
        let word = |linear: u64| {
            // SAFETY: a published slot's word (masked into the ring), the
            // consumer's until `tail` moves past it.
            unsafe { words.add((linear & words_mask) as usize).read() }
        };
        let (cap, b) = (buf.len(), buf.as_mut_ptr());
        let (mut n, mut pending) = (0usize, 0u64);
        let mut at = h.tail.load(Ordering::Relaxed);
        // Records without data gathered in a row.
        let mut run = 0u64;
        while at < head {
            let i = at & mask;
            if run >= DIRECT_RUN {
                // A long run of records without data: the rest of it (not
                // across the ring's end) written from the ring.
                run = 0;
                let limit = (head - at).min(h.capacity - i).min(DRAIN_CHUNK);
                let mut k = 0;
                while k < limit && !has_data(word(2 * (i + k) + 1)) {
                    k += 1;
                }
                if k == 0 {
                    continue;
                }
                if pending > 0 {
                    // Release (each store of `tail` here): the slots'
                    // records are read (copied) before they go back.
                    h.tail.store(at, Ordering::Release);
                    put(b, n, pending, out);
                    (n, pending) = (0, 0);
                }
                self.convert_run(times, at, at + k);
                // SAFETY: records i..i+k are inside the ring and published.
                let p = unsafe { words.add(2 * i as usize) as *const u8 };
                put(p, k as usize * 16, k, out);
                at += k;
                h.tail.store(at, Ordering::Release);
                continue;
            }
            // Records, and their data, into the buffer while it has room
            // for the largest, up to a long run without data.
            if n + 16 + MAX_DATA > cap {
                h.tail.store(at, Ordering::Release);
                put(b, n, pending, out);
                (n, pending) = (0, 0);
            }
            let full = cap - 16 - MAX_DATA;
            while at < head && n <= full && run < DIRECT_RUN {
                let i = at & mask;
                if at + PREFETCH_RECORDS < head {
                    prefetch(words.wrapping_add((2 * ((at + PREFETCH_RECORDS) & mask)) as usize));
                }
                // SAFETY: a published record (inside the ring, the
                // consumer's until `tail` moves past it), and 16 + MAX_DATA
                // bytes of the buffer from n (n <= full).
                let w1 = unsafe {
                    let r = words.add(2 * i as usize);
                    let w1 = r.add(1).read();
                    let t = times.ns(r.read());
                    // The time written back, as `convert_run` converts in
                    // place: a line the writer only read stays shared in
                    // its processor's cache, and the thread, writing it
                    // again on its next lap of the ring, waits for each
                    // such line (on some machines for whole runs, at a
                    // third of their speed); a line the writer wrote is
                    // handed over at once.
                    r.write(t);
                    (b.add(n) as *mut u64).write_unaligned(t);
                    (b.add(n + 8) as *mut u64).write_unaligned(w1);
                    w1
                };
                n += 16;
                pending += 1;
                // With the two slots after it published (nearly always),
                // without a branch on whether it has data (which records
                // have some follows the program's calls, and a branch on it
                // would miss often): its first two data words copied
                // either way, and its length (0 without data) taken.
                let more = has_data(w1) as u64;
                if at + 3 <= head {
                    // (Masked: the slots may be past the ring's end.)
                    let first = [word(2 * at + 3), word(2 * at + 4)];
                    // SAFETY: as above.
                    unsafe { (b.add(n) as *mut [u64; 2]).write_unaligned(first) };
                    let len = (more * word(2 * at + 2)).min(MAX_DATA as u64) & !7;
                    for j in 2..len / 8 {
                        // SAFETY: as above.
                        unsafe {
                            (b.add(n + 8 * j as usize) as *mut u64)
                                .write_unaligned(word(2 * at + 3 + j))
                        };
                    }
                    n += len as usize;
                    at += 1 + more * data_slots(len as usize);
                    run = (run + 1) * (1 - more);
                    continue;
                }
                at += 1;
                if more == 0 {
                    run += 1;
                    continue;
                }
                run = 0;
                // The data's length word, then its words.
                let len = (word(2 * at) as usize).min(MAX_DATA) & !7;
                for j in 0..len as u64 / 8 {
                    // SAFETY: as above.
                    unsafe { (b.add(n) as *mut u64).write_unaligned(word(2 * at + 1 + j)) };
                    n += 8;
                }
                at += data_slots(len);
            }
        }
        if pending > 0 {
            h.tail.store(at, Ordering::Release);
            put(b, n, pending, out);
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
}

/// `busy`'s value while the writer (or an in-process flush) drains a ring:
/// never a thread's id.
pub const DRAINER: u32 = u32::MAX;

impl Ring {
    /// Takes the ring's drain lock for `holder` ([`DRAINER`], or the
    /// ring's thread: its tid) if nobody holds it.
    pub fn try_lock_drain(&self, holder: u32) -> bool {
        // Acquire: what the last holder drained (`tail`, the time line
        // and the consumer's filter state) is seen.
        self.header()
            .busy
            .compare_exchange(0, holder, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Gives the drain lock back.
    pub fn unlock_drain(&self) {
        // Release: this drain's progress goes to the next holder.
        self.header().busy.store(0, Ordering::Release);
    }

    /// Who holds the drain lock (0: nobody).
    pub fn drain_holder(&self) -> u32 {
        self.header().busy.load(Ordering::Relaxed)
    }

    /// Counts `d`, a drain the ring's thread made itself, for the writer
    /// ([`Ring::take_own`]).
    pub fn add_own(&self, d: &Drained) {
        let h = self.header();
        // Relaxed (all): counts, added up once the recording ends.
        h.own_written.fetch_add(d.written, Ordering::Relaxed);
        h.own_lost.fetch_add(d.lost, Ordering::Relaxed);
        h.own_steps
            .fetch_add(d.clock_steps_back as u32, Ordering::Relaxed);
        if d.errno != 0 {
            let _ = h
                .own_errno
                .compare_exchange(0, d.errno, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// What the ring's thread drained itself since the last call, taken.
    pub fn take_own(&self) -> Drained {
        let h = self.header();
        // Relaxed (all): as in add_own.
        Drained {
            written: h.own_written.swap(0, Ordering::Relaxed),
            lost: h.own_lost.swap(0, Ordering::Relaxed),
            errno: h.own_errno.swap(0, Ordering::Relaxed),
            clock_steps_back: h.own_steps.swap(0, Ordering::Relaxed) as u64,
            clock_step_max: 0,
        }
    }
}

/// Records a drain converts and writes before it frees their slots (256
/// KiB): a full ring's thread waits for one chunk, not for the writer's
/// whole drain of it (2 MiB took it ~0.5 ms here, and fib(30) waited 44
/// times per run).
pub const DRAIN_CHUNK: u64 = 1 << 14;

/// Records without data `drain_walking` copies in a row beside the records
/// with data before it writes the rest of their run from the ring.
const DIRECT_RUN: u64 = 64;

/// The buffer [`Ring::drain`] gathers records with data in (on the stack:
/// a drain may run in a signal handler or a thread's own wait for room).
pub const DRAIN_BUFFER: usize = 16 << 10;

/// The least buffer a drain gathers in: room for a record with the most
/// data, several times over.
const MIN_BUFFER: usize = 4 << 10;

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
