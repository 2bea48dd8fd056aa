//! Records gathered on their way to the file, a buffer at a time, in
//! uftrace's layout or the compact one (`shadowgraph_data::compact`: the
//! buffer is one block, its header written last); and the drain of a
//! compact ring, which walks its records through one.

use super::super::{data_slots, has_data, Drained, Ring, MAX_DATA};
use super::times::{prefetch, Times, PREFETCH_RECORDS};
use super::{drop_partial_record, write_all, DRAIN_CHUNK};
use shadowgraph_data::compact::{self, Deltas, HEADER, MAX_RECORD};
use shadowgraph_data::format::{encode, Kind};
use std::sync::atomic::Ordering;

/// Records gathered in a buffer, written when it is full or at
/// [`Gather::put`].
pub(super) struct Gather<'a> {
    fd: i32,
    buf: &'a mut [u8],
    n: usize,
    records: u64,
    /// The file's end, to cut a failed write back to (the ring's thread and
    /// the writer may both append to the file, one drain at a time).
    end: i64,
    /// The compact layout: the buffer is one block, `deltas` its state.
    compact: bool,
    deltas: Deltas,
}

impl<'a> Gather<'a> {
    /// Gathers for `fd` in `buf` (room for a block's header and the
    /// largest record it is given, with its data), in the compact layout
    /// if `compact`.
    pub(super) fn new(fd: i32, buf: &'a mut [u8], compact: bool) -> Gather<'a> {
        // SAFETY: lseek on our own descriptor.
        let end = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        Gather {
            fd,
            buf,
            n: if compact { HEADER } else { 0 },
            records: 0,
            end,
            compact,
            deltas: Deltas::default(),
        }
    }

    /// Appends a record and its `data` (words), writing the buffer first
    /// if they do not fit.
    #[inline(always)]
    pub(super) fn push(&mut self, rec: [u64; 2], data: &[u64], out: &mut Drained) {
        let most = if self.compact { MAX_RECORD } else { 16 };
        if self.n + most + 8 * data.len() > self.buf.len() {
            self.put(out);
        }
        if self.compact {
            let len = 8 * data.len();
            self.n = compact::put_record(self.buf, self.n, &mut self.deltas, rec[0], rec[1], len);
            if !has_data(rec[1]) {
                self.records += 1;
                return;
            }
        } else {
            self.buf[self.n..self.n + 8].copy_from_slice(&rec[0].to_le_bytes());
            self.buf[self.n + 8..self.n + 16].copy_from_slice(&rec[1].to_le_bytes());
            self.n += 16;
        }
        for w in data {
            self.buf[self.n..self.n + 8].copy_from_slice(&w.to_le_bytes());
            self.n += 8;
        }
        self.records += 1;
    }

    /// Writes what is gathered (after a failed write: counted lost).
    pub(super) fn put(&mut self, out: &mut Drained) {
        let (n, records) = (self.n, self.records);
        let start = if self.compact { HEADER } else { 0 };
        (self.n, self.records, self.deltas) = (start, 0, Deltas::default());
        if records == 0 {
            return;
        }
        if out.errno != 0 {
            out.lost += records;
            return;
        }
        if self.compact {
            compact::put_header(self.buf, (n - HEADER) as u32, records as u32);
        }
        match write_all(self.fd, self.buf.as_ptr(), n) {
            Ok(()) => {
                self.end += n as i64;
                out.written += records;
            }
            Err((e, done)) => {
                out.errno = e;
                out.lost += records;
                if done > 0 && self.end >= 0 {
                    // SAFETY: ftruncate of our own descriptor back to
                    // where this write began.
                    unsafe { libc::ftruncate(self.fd, self.end) };
                } else {
                    drop_partial_record(self.fd, done % 16);
                }
            }
        }
    }
}

impl Ring {
    /// [`Ring::drain`] of a compact ring without a consumer's filter,
    /// records `tail..to`: each record's time converted (and written back,
    /// as `convert_run` does: a line the writer wrote is handed back to the
    /// thread at once), the record and its data encoded in `buf` and
    /// written a block at a time. Slots are freed a chunk at a time, once
    /// their records are in the buffer.
    pub(super) fn drain_compact(
        &self,
        fd: i32,
        to: u64,
        times: &mut Times,
        buf: &mut [u8],
        out: &mut Drained,
    ) {
        let h = self.header();
        let mut g = Gather::new(fd, buf, true);
        let mut at = h.tail.load(Ordering::Relaxed);
        let mut freed = at;
        let mut data = [0u64; MAX_DATA / 8];
        while at < to {
            let (t, w1, len, next) = self.take_record(at, to, times, &mut data);
            g.push([t, w1], &data[..len / 8], out);
            at = next;
            if at - freed >= DRAIN_CHUNK {
                // Release: the slots' records are read (copied into the
                // buffer) before they go back to the producer, which loads
                // `tail` Acquire before reusing them.
                h.tail.store(at, Ordering::Release);
                freed = at;
            }
        }
        g.put(out);
    }

    /// The record at slot `at` of a drain to `to` (published, the
    /// consumer's until `tail` moves past it): its time converted, and
    /// written back (as `convert_run` converts in place: a line the writer
    /// wrote is handed back to the thread at once), its word, its data
    /// copied into `data` and its length in bytes (0 without), and the
    /// slot after it and its data.
    #[inline(always)]
    pub(super) fn take_record(
        &self,
        at: u64,
        to: u64,
        times: &mut Times,
        data: &mut [u64; MAX_DATA / 8],
    ) -> (u64, u64, usize, u64) {
        let h = self.header();
        let (mask, words_mask) = (h.capacity - 1, 2 * h.capacity - 1);
        let words = self.words();
        let word = |linear: u64| {
            // SAFETY: a published slot's word (masked into the ring), the
            // consumer's until `tail` moves past it.
            unsafe { words.add((linear & words_mask) as usize).read() }
        };
        if at.is_multiple_of(4) && at + PREFETCH_RECORDS < to {
            prefetch(words.wrapping_add((2 * ((at + PREFETCH_RECORDS) & mask)) as usize));
        }
        // SAFETY: a published record, as above.
        let (t, w1) = unsafe {
            let r = words.add(2 * (at & mask) as usize);
            let t = times.ns(r.read());
            r.write(t);
            (t, r.add(1).read())
        };
        if !has_data(w1) {
            return (t, w1, 0, at + 1);
        }
        let len = (word(2 * at + 2) as usize).min(MAX_DATA) & !7;
        for (j, d) in data[..len / 8].iter_mut().enumerate() {
            *d = word(2 * at + 3 + j as u64);
        }
        (t, w1, len, at + 1 + data_slots(len))
    }

    /// After a drain: a LOST record at `ns` for what the producer dropped
    /// (taken from the ring, counted in `out`), written unless a write
    /// failed already.
    pub(super) fn write_lost(&self, fd: i32, ns: u64, out: &mut Drained) {
        let dropped = self.header().lost.swap(0, Ordering::Relaxed);
        if dropped == 0 {
            return;
        }
        out.lost += dropped;
        if out.errno != 0 {
            return;
        }
        // In the ring's layout; counted lost above, not written.
        let mut buf = [0u8; 16 + HEADER + MAX_RECORD];
        let mut g = Gather::new(fd, &mut buf, self.header().compact != 0);
        let mut mark = Drained::default();
        g.push([ns, encode(Kind::Lost, 0, dropped)], &[], &mut mark);
        g.put(&mut mark);
        out.errno = mark.errno;
    }
}
