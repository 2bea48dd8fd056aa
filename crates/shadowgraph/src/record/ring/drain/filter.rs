//! A drain that applies a time filter (`RingHeader::min_ns`) on the way to
//! the file: the thread records every call, as a plain recorder does (on
//! the paths several recorders share), and the consumer leaves out the
//! calls shorter than the threshold, as `-t` does where the thread judges
//! its calls itself (tracer::recorder::timed).
//!
//! Each call's entry waits, by its depth, until the call is judged:
//!
//! ```text
//!   ring ─► [time, word] ─► Entry at d ─► entries[d], OPEN        (waits)
//!                         ─► Exit at d  ─► long, or entry WRITTEN:
//!                                            entries below d not yet
//!                                            written, then d's, then the
//!                                            exit                 (file)
//!                                          short: none of it      (gone)
//!                         ─► Event inside a call that waits:
//!                            with it                              (waits)
//!                         ─► anything else (another event, an entry
//!                            or event that finds no room to wait,
//!                            depth 1023 and beyond): the entries
//!                            waiting below it, then it            (file)
//! ```
//!
//! An entry's data (its arguments) waits with it, and so do the built-in
//! events inside its call that come before any call it makes (a `read=`
//! trigger's values) or after its last: on a stack of the open calls'
//! records (`Waiting::data`, outermost first). An exit's data (its return
//! value) goes or stays with its call. (As uftrace keeps such events with
//! a call its time filter has not judged yet; a user event, an SDT
//! marker's, it writes with the calls it is inside of, and so does this
//! consumer.)
//!
//! A call lasts at least as long as the calls it makes, so the callers of
//! a call long enough are long enough too: writing their entries first
//! keeps the file in time order. The waiting entries stay after the
//! ring's records (`FILTER_BYTES`) from one drain to the next; only the
//! ring's consumer touches them (the writer process, or whoever holds the
//! ring's `busy` word).

use super::super::{Drained, Ring, FILTER_BYTES, HEADER_BYTES, MAX_DATA};
use super::gather::Gather;
use super::times::Times;
use super::DRAIN_CHUNK;
use shadowgraph_data::events;
use shadowgraph_data::format::Kind;
use std::sync::atomic::Ordering;

/// Depths a record can say (10 bits); the last one also stands for every
/// deeper call, which is written as it comes.
const DEPTHS: usize = 1024;

/// A record's kind (its word's low bits): an entry, an exit, an event.
const ENTRY: u64 = Kind::Entry as u64;
const EXIT: u64 = Kind::Exit as u64;
const EVENT: u64 = Kind::Event as u64;

/// The state of one depth: a call is open there…
const OPEN: u8 = 1;
/// …and its entry is in the file.
const WRITTEN: u8 = 2;
/// …and its entry has data, or events wait with it, in `Waiting::data`.
const DATA: u8 = 4;

/// Words of the stack of the waiting calls' data and events: 32 entries
/// of the most data a record has, or a thousand and more of a few
/// arguments each (a page of it is touched once calls nest that deep).
const DATA_WORDS: usize = 32 * MAX_DATA / 8;

/// What waits between drains, after a ring's records.
#[repr(C)]
struct Waiting {
    /// Per depth, the open call's entry record (its time in ns, its word).
    entries: [[u64; 2]; DEPTHS],
    /// One above the deepest open call.
    top: u64,
    /// Below this depth, every open call's entry is written.
    written_below: u64,
    /// Per depth: OPEN, WRITTEN, DATA.
    state: [u8; DEPTHS],
    /// Per depth with DATA: where its words start in `data`, how many are
    /// its entry's data, and where its events' (each its time, word,
    /// number of data words, data) end.
    data_at: [[u16; 3]; DEPTHS],
    /// Words of `data` in use: the open calls' words, outermost first.
    data_used: u64,
    /// The data and events of the calls waiting, by depth.
    data: [u64; DATA_WORDS],
}

const _: () = assert!(std::mem::size_of::<Waiting>() <= FILTER_BYTES);

impl Ring {
    /// What waits for the time filter, after the records.
    fn waiting(&self) -> *mut Waiting {
        let cap = self.header().capacity as usize;
        // SAFETY: the mapping holds ring_bytes(capacity) bytes, the
        // filter's after the records (init/attach contracts).
        unsafe { self.base.add(HEADER_BYTES + cap * 16) as *mut Waiting }
    }

    /// [`Ring::drain`] of a ring whose consumer applies a time filter of
    /// `min` ns: the records walked one by one (a record with data is
    /// followed by its slots), their times converted, the calls judged
    /// (module doc), what stays gathered in `buf` (at least 4 KiB) and
    /// written. `flush`: every entry still waiting is written at the end
    /// (a LOST record follows, which they are older than). Slots are freed
    /// as they are read: what waits is kept aside.
    pub(super) fn drain_filtered(
        &self,
        fd: i32,
        (head, min, flush): (u64, u64, bool),
        times: &mut Times,
        buf: &mut [u8],
        out: &mut Drained,
    ) {
        let h = self.header();
        let mut g = Gather::new(fd, buf, h.compact != 0);
        // SAFETY: the consumer's own state (module doc), in the mapping.
        let w = unsafe { &mut *self.waiting() };
        let mut at = h.tail.load(Ordering::Relaxed);
        let mut freed = at;
        let mut data = [0u64; MAX_DATA / 8];
        while at < head {
            let (t, w1, len, next) = self.take_record(at, head, times, &mut data);
            let depth = ((w1 >> 6) & 0x3ff) as usize;
            let kind = w1 & 3;
            let data = &data[..len / 8];
            // (An SDT marker's event is written as it comes, its call's
            // entry before it, as uftrace writes asynchronous events.)
            if kind == EVENT && !events::is_user(w1 >> 16) && w.keep_event([t, w1], data) {
                // Kept with its call.
            } else if depth >= DEPTHS - 1
                || kind > EXIT
                || kind == ENTRY && !w.has_room(depth, data.len())
            {
                // Written as it comes, after the entries waiting below it:
                // an entry's callers', an exit's own and its callers', an
                // event's all (its depth field is 0).
                let below = match kind {
                    ENTRY => depth as u64,
                    EXIT => depth as u64 + 1,
                    _ => w.top,
                };
                w.release(below, &mut g, out);
                g.push([t, w1], data, out);
                match kind {
                    ENTRY => w.open(depth, [t, w1], &[], true),
                    EXIT => w.close(depth),
                    _ => {}
                }
            } else if kind == ENTRY {
                w.open(depth, [t, w1], data, false);
            } else {
                let s = w.state[depth];
                let same = w.entries[depth][1] >> 16 == w1 >> 16;
                let short = t.saturating_sub(w.entries[depth][0]) < min;
                if s & (OPEN | WRITTEN) == OPEN && same && short {
                    // Too short: none of it.
                } else {
                    // Long, or written already, or an exit whose entry
                    // this consumer never saw: after every entry waiting
                    // at its depth and below.
                    w.release(depth as u64 + 1, &mut g, out);
                    g.push([t, w1], data, out);
                }
                w.close(depth);
            }
            at = next;
            if at - freed >= DRAIN_CHUNK {
                // Release: the slots' records are read (copied, or kept
                // aside) before they go back to the producer, which loads
                // `tail` Acquire before reusing them.
                h.tail.store(at, Ordering::Release);
                freed = at;
            }
        }
        if flush {
            w.release(w.top, &mut g, out);
        }
        g.put(out);
        // Release: as above.
        h.tail.store(at, Ordering::Release);
    }
}

impl Waiting {
    /// Whether an entry at `depth` with `words` of data can wait: there is
    /// room for them on the stack above the calls that stay open.
    fn has_room(&self, depth: usize, words: usize) -> bool {
        words == 0 || self.data_below(depth) as usize + words <= DATA_WORDS
    }

    /// An event (its record `rec` and `data`) inside the innermost open
    /// call, if that call waits: kept with it, if there is room. Whether
    /// it is. (Its words end the stack: an inner call's, if any came,
    /// ended with it.)
    fn keep_event(&mut self, rec: [u64; 2], data: &[u64]) -> bool {
        let Some(d) = (self.top as usize).checked_sub(1) else {
            return false;
        };
        let (at, n) = (self.data_used as usize, 3 + data.len());
        if self.state[d] & (OPEN | WRITTEN) != OPEN || at + n > DATA_WORDS {
            return false;
        }
        self.data[at..at + 3].copy_from_slice(&[rec[0], rec[1], data.len() as u64]);
        self.data[at + 3..at + n].copy_from_slice(data);
        if self.state[d] & DATA == 0 {
            self.data_at[d] = [at as u16, 0, 0];
            self.state[d] |= DATA;
        }
        self.data_used += n as u64;
        // (At most DATA_WORDS.)
        self.data_at[d][2] = self.data_used as u16;
        true
    }

    /// Where the words of the calls at `depth` and deeper begin: the stack
    /// in use, less theirs (the outermost of them with some starts it).
    fn data_below(&self, depth: usize) -> u64 {
        let open = depth..(self.top as usize).max(depth);
        (self.state[open.clone()].iter().zip(&self.data_at[open]))
            .find(|(&s, _)| s & DATA != 0)
            .map_or(self.data_used, |(_, at)| u64::from(at[0]))
    }

    /// A call entered at `depth` (its entry `rec` and its `data`, `written`
    /// already or waiting, its data with it: [`Waiting::has_room`]): the
    /// calls at its depth and deeper that never returned are forgotten (a
    /// lost record or a jump left them).
    fn open(&mut self, depth: usize, rec: [u64; 2], data: &[u64], written: bool) {
        self.data_used = self.data_below(depth);
        for s in &mut self.state[depth..(self.top as usize).max(depth)] {
            *s = 0;
        }
        self.entries[depth] = rec;
        self.state[depth] = OPEN | if written { WRITTEN } else { 0 };
        if !data.is_empty() {
            let at = self.data_used as usize;
            self.data[at..at + data.len()].copy_from_slice(data);
            // (All fit: at most DATA_WORDS.)
            let end = at + data.len();
            self.data_at[depth] = [at as u16, data.len() as u16, end as u16];
            self.data_used = end as u64;
            self.state[depth] |= DATA;
        }
        self.top = depth as u64 + 1;
        if !written {
            self.written_below = self.written_below.min(depth as u64);
        }
    }

    /// The call at `depth` returned: it, and the calls deeper that never
    /// did (a jump left them), are closed, their data gone.
    fn close(&mut self, depth: usize) {
        self.data_used = self.data_below(depth);
        for s in &mut self.state[depth..(self.top as usize).max(depth + 1)] {
            *s = 0;
        }
        self.top = depth as u64;
    }

    /// Writes the entries still waiting below `depth`, outermost first,
    /// each with its data, then the events kept with it.
    fn release(&mut self, depth: u64, g: &mut Gather<'_>, out: &mut Drained) {
        let to = depth.min(self.top);
        for d in self.written_below..to {
            let d = d as usize;
            if self.state[d] & (OPEN | WRITTEN) != OPEN {
                continue;
            }
            let [at, n, end] = match self.state[d] & DATA {
                0 => [0; 3],
                _ => self.data_at[d].map(usize::from),
            };
            g.push(self.entries[d], &self.data[at..at + n], out);
            let mut k = at + n;
            while k < end {
                let (rec, len) = ([self.data[k], self.data[k + 1]], self.data[k + 2] as usize);
                g.push(rec, &self.data[k + 3..k + 3 + len], out);
                k += 3 + len;
            }
            self.state[d] |= WRITTEN;
        }
        self.written_below = self.written_below.max(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ring::{ring_bytes, Depth, RingHeader};
    use shadowgraph_data::format::decode;
    use std::os::fd::AsRawFd;

    /// A ring whose consumer filters calls shorter than `min` ns, its times
    /// nanoseconds already, and a file to drain it into.
    /// (`compact`: in the compact layout.)
    fn filtered_ring(
        min: u64,
        name: &str,
        compact: bool,
    ) -> (Ring, std::fs::File, std::path::PathBuf) {
        const CAP: u64 = 4096;
        let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
        // SAFETY: a fresh zeroed mapping of the ring's size, never
        // unmapped during the test.
        let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0, min, compact) };
        // SAFETY: the header of the ring just made; times as given (ns).
        unsafe { (*(base as *mut RingHeader)).tsc = 0 };
        let path = std::env::temp_dir().join(format!("sg-filter-{name}-{}", std::process::id()));
        (ring, std::fs::File::create(&path).unwrap(), path)
    }

    /// Records (time, kind, depth, function) in the ring, as a thread
    /// writes them.
    fn put(ring: &Ring, recs: &[(u64, Kind, u16, u64)]) {
        for &(time, kind, depth, addr) in recs {
            let c = ring.claim_at(|| time, kind, Depth::Given(depth)).unwrap();
            ring.write(c.slot, c.time, kind, depth, addr);
            ring.publish(&c);
        }
    }

    /// The file's records as (time, kind, depth, function), in either
    /// layout.
    fn read_back(path: &std::path::Path, compact: bool) -> Vec<(u64, Kind, u16, u64)> {
        let bytes = super::super::tests::read_uftrace_layout(path, compact);
        (bytes.chunks_exact(16).enumerate())
            .map(|(k, b)| {
                let r = decode(b.try_into().unwrap(), 16 * k as u64).unwrap();
                (r.time, r.kind, r.depth, r.addr)
            })
            .collect()
    }

    use Kind::{Entry as E, Event as V, Exit as X, Lost as L};

    /// A user event's id (an SDT marker's), and a built-in one's.
    const USER: u64 = events::USER_FIRST;
    const READ: u64 = events::FIRST;

    /// A record with data: (time, kind, depth, function, its data's words).
    type WithData = (u64, Kind, u16, u64, Vec<u64>);

    /// Records in the ring as a thread writes them, each with its data
    /// (none where empty). A test's data starts with its number of words.
    fn put_data(ring: &Ring, recs: &[WithData]) {
        for (time, kind, depth, addr, data) in recs {
            if data.is_empty() {
                put(ring, &[(*time, *kind, *depth, *addr)]);
                continue;
            }
            let bytes: Vec<u8> = data.iter().flat_map(|w| w.to_le_bytes()).collect();
            let from = Depth::Given(*depth);
            let c = (ring.claim_with_data(|| *time, *kind, from, bytes.len())).unwrap();
            ring.write_with_data(c.slot, c.time, *kind, *depth, *addr, &bytes);
            ring.publish(&c);
        }
    }

    /// The file's records with their data (its first word their number).
    fn read_back_data(path: &std::path::Path, compact: bool) -> Vec<WithData> {
        let bytes = super::super::tests::read_uftrace_layout(path, compact);
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let (mut at, mut got) = (0, Vec::new());
        while at < bytes.len() {
            let r = decode(bytes[at..at + 16].try_into().unwrap(), at as u64).unwrap();
            let more = crate::record::ring::has_data(word(at + 8));
            at += 16;
            let n = if more { word(at) as usize } else { 0 };
            let data = (0..n).map(|k| word(at + 8 * k)).collect();
            at += 8 * n;
            got.push((r.time, r.kind, r.depth, r.addr, data));
        }
        got
    }

    /// Built-in events inside a call that waits (a `read=` trigger's,
    /// before its first callee and after its last) wait with it: gone
    /// with a short call, written after its entry once it proves long; an
    /// event inside a call written already, or inside none, is written as
    /// it comes, and so is a user event, after the entries of the calls
    /// it is inside of (which are kept, however short).
    #[test]
    fn a_consumers_time_filter_keeps_events_with_their_calls() {
        let recs: Vec<WithData> = vec![
            (1000, E, 0, 0xa0, vec![]),     // main
            (1005, V, 0, READ + 1, vec![]), // waits with main
            (1010, E, 1, 0xb1, vec![]),     // b, short
            (1015, V, 0, READ + 2, vec![2, 0x21]),
            (1020, E, 2, 0xc2, vec![]), // short
            (1025, X, 2, 0xc2, vec![]),
            (1030, V, 0, READ + 3, vec![]), // after b's callee: b's still
            (1040, X, 1, 0xb1, vec![]),
            (1050, E, 1, 0xd1, vec![]), // d, long
            (1055, V, 0, READ + 4, vec![2, 0x41]),
            (1060, E, 2, 0xe2, vec![]), // short
            (1065, X, 2, 0xe2, vec![]),
            (1070, V, 0, READ + 5, vec![]),
            (1200, X, 1, 0xd1, vec![]),
            (1210, V, 0, READ + 6, vec![]), // inside main, written
            (1220, E, 1, 0xf1, vec![]),     // short, but …
            (1225, V, 0, USER, vec![]),     // … a user event inside
            (1230, X, 1, 0xf1, vec![]),
            (3000, X, 0, 0xa0, vec![]),
            (3010, V, 0, READ + 7, vec![]), // inside no call
        ];
        for compact in [false, true] {
            let (ring, f, path) = filtered_ring(100, "events", compact);
            // (Drained in two parts: main's event waits across them.)
            for part in [&recs[..6], &recs[6..]] {
                put_data(&ring, part);
                ring.drain(f.as_raw_fd());
            }
            let want: Vec<WithData> = vec![
                (1000, E, 0, 0xa0, vec![]),
                (1005, V, 0, READ + 1, vec![]),
                (1050, E, 1, 0xd1, vec![]),
                (1055, V, 0, READ + 4, vec![2, 0x41]),
                (1070, V, 0, READ + 5, vec![]),
                (1200, X, 1, 0xd1, vec![]),
                (1210, V, 0, READ + 6, vec![]),
                (1220, E, 1, 0xf1, vec![]),
                (1225, V, 0, USER, vec![]),
                (1230, X, 1, 0xf1, vec![]),
                (3000, X, 0, 0xa0, vec![]),
                (3010, V, 0, READ + 7, vec![]),
            ];
            assert_eq!(read_back_data(&path, compact), want);
        }
    }

    /// Entries with data (arguments) wait with their data: a short call
    /// leaves neither, with its exit's data (a return value) too; a long
    /// one's callers are written with theirs; an entry whose data finds
    /// the stack of waiting data full is written as it comes, after the
    /// entries waiting below it; the stack's room comes back as calls
    /// return.
    #[test]
    fn a_consumers_time_filter_keeps_the_data_of_the_calls_it_keeps() {
        let most = MAX_DATA / 8;
        // n calls nested, each with the most data: the last finds no room
        // above main's two words and the others'.
        let n = (DATA_WORDS / most) as u16;
        let big = |d: u16| [vec![most as u64], vec![u64::from(d); most - 1]].concat();
        let at = |t: u64, d: u16| t + u64::from(d);
        let nested = (1..=n).map(|d| (at(2000, 10 * d), E, d, at(0x100, d), big(d)));
        let returns = (1..=n)
            .rev()
            .map(|d| (at(2400, 10 * (n - d)), X, d, at(0x100, d), vec![]));
        // All but one nested again, each short: there is room for them
        // once the others returned.
        let again: Vec<WithData> = (1..n)
            .map(|d| (at(3000, d), E, d, at(0x200, d), big(d)))
            .chain(
                (1..n)
                    .rev()
                    .map(|d| (at(3050, n - 1 - d), X, d, at(0x200, d), vec![])),
            )
            .collect();
        let recs: Vec<WithData> = [
            vec![
                (1000, E, 0, 0xa0, vec![2, 0x11]), // main(0x11)
                (1010, E, 1, 0xa1, vec![2, 0x22]), // short
                (1020, X, 1, 0xa1, vec![2, 0x23]), // … with its value
                (1030, E, 1, 0xb1, vec![3, 0x33, 0x34]),
                (1040, E, 2, 0xc2, vec![]), // long
                (1300, X, 2, 0xc2, vec![2, 0x44]),
                (1310, E, 2, 0xd2, vec![2, 0x55]), // short, under a written b
                (1320, X, 2, 0xd2, vec![]),
                (1330, X, 1, 0xb1, vec![]),
            ],
            nested.clone().collect(),
            returns.clone().collect(),
            again,
            vec![
                (3100, E, 1, 0xf1, vec![2, 0x66]), // short
                (3110, X, 1, 0xf1, vec![]),
                (3120, E, 1, 0x91, vec![2, 0x77]), // long: its own data
                (3300, X, 1, 0x91, vec![]),
                (4000, X, 0, 0xa0, vec![]),
            ],
        ]
        .concat();
        for compact in [false, true] {
            let (ring, f, path) = filtered_ring(100, "data", compact);
            // (Drained three times: the ring holds 4096 slots, an entry
            // with the most data 65.)
            let returned = 9 + 2 * n as usize;
            for part in [&recs[..12], &recs[12..returned], &recs[returned..]] {
                put_data(&ring, part);
                ring.drain(f.as_raw_fd());
                ring.refresh();
            }
            let want: Vec<WithData> = [
                vec![
                    (1000, E, 0, 0xa0, vec![2, 0x11]),
                    (1030, E, 1, 0xb1, vec![3, 0x33, 0x34]),
                    (1040, E, 2, 0xc2, vec![]),
                    (1300, X, 2, 0xc2, vec![2, 0x44]),
                    (1330, X, 1, 0xb1, vec![]),
                ],
                nested.clone().collect(),
                returns.clone().collect(),
                vec![
                    (3120, E, 1, 0x91, vec![2, 0x77]),
                    (3300, X, 1, 0x91, vec![]),
                    (4000, X, 0, 0xa0, vec![]),
                ],
            ]
            .concat();
            assert_eq!(read_back_data(&path, compact), want);
        }
    }

    /// Short calls leave nothing; a long one is written with the entries
    /// of its callers first, in time order; a call whose entry is written
    /// keeps its exit, however short; entries wait from one drain to the
    /// next; a user event, a record at the deepest depth and an exit
    /// whose entry never came are written as they come, after the entries
    /// waiting below them.
    #[test]
    fn a_consumers_time_filter_keeps_the_long_calls_and_their_callers() {
        for compact in [false, true] {
            let (ring, f, path) = filtered_ring(100, "keeps", compact);
            put(
                &ring,
                &[
                    (1000, E, 0, 0xa0), // main
                    (1010, E, 1, 0xa1), // short
                    (1020, X, 1, 0xa1),
                    (1030, E, 1, 0xb1), // b, long by its callee
                    (1040, E, 2, 0xc2), // c, long
                    (1300, X, 2, 0xc2),
                    (1310, E, 2, 0xd2), // short, under a written b
                    (1320, X, 2, 0xd2),
                    (1330, X, 1, 0xb1),
                    (1400, E, 1, 0xe1), // waits across the drain
                ],
            );
            let d = ring.drain(f.as_raw_fd());
            assert_eq!((d.written, d.lost, d.errno), (5, 0, 0));
            put(
                &ring,
                &[
                    (1410, V, 0, USER), // a user event: e's entry first
                    (1420, X, 1, 0xe1), // e's exit: its entry is written
                    (1430, E, 1, 0xf1), // left open by a jump
                    (1440, X, 1, 0x91), // an exit whose entry never came
                    (1450, E, 1023, 0x77),
                    (1460, X, 1023, 0x77),
                    (1470, E, 1, 0x51), // short
                    (1480, X, 1, 0x51),
                    (3000, X, 0, 0xa0),
                ],
            );
            let d = ring.drain(f.as_raw_fd());
            assert_eq!((d.written, d.lost, d.errno), (8, 0, 0));
            assert_eq!(
                read_back(&path, compact),
                [
                    (1000, E, 0, 0xa0),
                    (1030, E, 1, 0xb1),
                    (1040, E, 2, 0xc2),
                    (1300, X, 2, 0xc2),
                    (1330, X, 1, 0xb1),
                    (1400, E, 1, 0xe1),
                    (1410, V, 0, USER),
                    (1420, X, 1, 0xe1),
                    (1430, E, 1, 0xf1),
                    (1440, X, 1, 0x91),
                    (1450, E, 1023, 0x77),
                    (1460, X, 1023, 0x77),
                    (3000, X, 0, 0xa0),
                ]
            );
        }
    }

    /// A call left by a jump (its exit never comes, its caller's does)
    /// waits no more: an exit at its depth later is one whose entry this
    /// consumer never saw (written as it comes), and a later call there
    /// is judged on its own.
    #[test]
    fn calls_a_jump_left_wait_no_more() {
        for compact in [false, true] {
            let (ring, f, path) = filtered_ring(100, "jump", compact);
            put(
                &ring,
                &[
                    (1000, E, 0, 0xa0),
                    (1010, E, 1, 0xb1),
                    (1020, E, 2, 0xc2), // left by a jump
                    (1030, X, 0, 0xa0), // short: a, b and c gone
                    (1040, E, 0, 0xd0),
                    (1045, X, 2, 0xc2), // no call open there
                    (1050, E, 1, 0xe1),
                    (1060, E, 2, 0xc2),
                    (1500, X, 2, 0xc2), // long: d, e, then this call of c
                    (1510, X, 1, 0xe1),
                    (1520, X, 0, 0xd0),
                ],
            );
            let d = ring.drain(f.as_raw_fd());
            assert_eq!((d.written, d.lost, d.errno), (7, 0, 0));
            assert_eq!(
                read_back(&path, compact),
                [
                    (1040, E, 0, 0xd0),
                    (1045, X, 2, 0xc2),
                    (1050, E, 1, 0xe1),
                    (1060, E, 2, 0xc2),
                    (1500, X, 2, 0xc2),
                    (1510, X, 1, 0xe1),
                    (1520, X, 0, 0xd0),
                ]
            );
        }
    }

    /// Records the thread dropped (a LOST record at the drain's end) come
    /// after the entries waiting then, which are written first: the file
    /// stays in time order, and their calls' exits follow.
    #[test]
    fn entries_waiting_before_a_loss_are_written_before_it() {
        for compact in [false, true] {
            let (ring, f, path) = filtered_ring(100, "lost", compact);
            put(&ring, &[(1000, E, 0, 0xa0), (1010, E, 1, 0xa1)]);
            ring.header().lost.store(3, Ordering::Relaxed);
            let d = ring.drain(f.as_raw_fd());
            assert_eq!((d.written, d.lost), (2, 3));
            put(&ring, &[(1020, X, 1, 0xa1), (1030, X, 0, 0xa0)]);
            ring.drain(f.as_raw_fd());
            let got = read_back(&path, compact);
            assert_eq!(got.len(), 5, "{got:x?}");
            assert_eq!(got[..2], [(1000, E, 0, 0xa0), (1010, E, 1, 0xa1)]);
            assert_eq!((got[2].1, got[2].3), (L, 3));
            assert_eq!(got[3..], [(1020, X, 1, 0xa1), (1030, X, 0, 0xa0)]);
        }
    }
}
