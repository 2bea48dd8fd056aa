//! A drain's time conversion: the records' raw times to nanoseconds, by
//! the ring's continuous line in pieces, each time at least 1 ns after the
//! thread's one before it.

use crate::record::ring::{start_calibration, Drained, Ring};
use shadowgraph_data::time::Converter;
use std::sync::atomic::Ordering;

/// The shortest piece of a ring's time conversion (see `Ring::times`):
/// 100 ms. A calibration point is off by up to ~100 ns on a virtual
/// machine (the writer reads it on whichever vCPU it runs, each with its
/// own view of the clock): over 100 ms, a rate error of 10⁻⁶.
pub const SEGMENT_NS: u64 = 100_000_000;

/// How many times the span since a ring was made a piece of its time
/// conversion takes to meet the clock again (see [`Ring::times`]).
const CATCH_UP: i128 = 2;

/// How far ahead (records: 4 KiB) a conversion asks for the ring's lines.
/// They are most often still in the producing thread's cache, and the
/// conversion would wait for each in turn: prefetched, the writer keeps
/// up with fib(30) with about no waits for room.
pub(super) const PREFETCH_RECORDS: u64 = 256;

/// How raw times map to nanoseconds in one drain.
#[derive(Clone, Copy)]
enum Map {
    /// The times are nanoseconds already (no TSC).
    Same,
    /// By the start calibration (no time between points to measure a
    /// rate yet).
    Start(Converter),
    /// By the current piece, and for older times the one before it.
    Pieces { line: Converter, prev: Converter },
}

/// One drain's conversion ([`Ring::times`]), record by record
/// ([`Times::ns`]); [`Ring::end_times`] keeps its state for the next
/// drain.
pub(super) struct Times {
    map: Map,
    /// The thread's last time written (ns).
    last: u64,
    steps: u64,
    worst: u64,
}

impl Times {
    /// The nanoseconds of the next record's raw time `raw`: at least 1 ns
    /// after the record before it. The records come in the order their
    /// times were read on one thread, so an equal or earlier time is a
    /// clock artefact: two reads of a virtual machine's TSC a few ns apart
    /// can return values 1 tick apart (the same ns); the TSCs of two CPUs
    /// differ by a few ns (a thread that migrates between a call's entry
    /// and exit would otherwise get a negative duration); a time older
    /// than the piece before the current one is placed by extrapolation.
    /// Steps back are counted (equal times are not), with the largest.
    #[inline(always)]
    pub(super) fn ns(&mut self, raw: u64) -> u64 {
        let mut t = match self.map {
            Map::Same => raw,
            Map::Start(c) => c.to_ns(raw),
            Map::Pieces { line, prev } => {
                if raw >= line.raw0() {
                    // The common case: the current piece (its rate is
                    // never 0).
                    line.to_ns_from_start(raw)
                } else if prev.rate() != 0 {
                    prev.to_ns(raw)
                } else {
                    line.to_ns(raw)
                }
            }
        };
        if t <= self.last {
            if t < self.last {
                self.steps += 1;
                self.worst = self.worst.max(self.last - t);
            }
            t = self.last + 1;
        }
        self.last = t;
        t
    }
}

impl Ring {
    /// The conversion of one drain, given the calibration point (raw, ns)
    /// read for it. Times map by a continuous line in pieces, each at
    /// least [`SEGMENT_NS`] long: the points are read every drain (every
    /// 100 µs on a busy ring), and a line through two points that close
    /// would take their reading error (up to ~100 ns each here) as a rate,
    /// off by 10⁻³ — a microsecond over a millisecond, which a time written
    /// late (a time filter's entry, written once its call proves long
    /// enough) would be misplaced by against the times around it. Once the
    /// current piece spans the segment, the next one starts where it
    /// ends, at the rate measured since the ring was made, corrected to
    /// meet the clock again over the next few pieces (NTP may slew
    /// CLOCK_MONOTONIC). Times older than the current piece follow the one
    /// before it.
    pub(super) fn times(&self, point: (u64, u64)) -> Times {
        let h = self.header();
        // Relaxed (the conversion words, here and below): only the drainer
        // reads and writes them, one at a time (`busy`, or the writer
        // process alone), after the maker's Release of the magic.
        let last = h.last_ns.load(Ordering::Relaxed);
        let with = |map| Times {
            map,
            last,
            steps: 0,
            worst: 0,
        };
        if h.tsc == 0 {
            return with(Map::Same);
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
            return with(Map::Start(start_calibration().converter()));
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
        with(Map::Pieces { line, prev })
    }

    /// Keeps a drain's last time for the next one, and counts its steps
    /// back in `out`.
    pub(super) fn end_times(&self, t: Times, out: &mut Drained) {
        // Relaxed: the drainer's own word, as in `times`.
        self.header().last_ns.store(t.last, Ordering::Relaxed);
        out.clock_steps_back += t.steps;
        out.clock_step_max = out.clock_step_max.max(t.worst);
    }

    /// Rewrites in the ring the times of records `from..to`, none of which
    /// has data after it.
    pub(super) fn convert_run(&self, t: &mut Times, from: u64, to: u64) {
        let mask = self.header().capacity - 1;
        for k in from..to {
            // SAFETY: a published record's time word, the consumer's until
            // `tail` moves past it.
            unsafe {
                let w = self.words().add(2 * (k & mask) as usize);
                // A hint, which reads nothing: one line in four records;
                // none beyond this run's (the thread may be writing those).
                if k.is_multiple_of(4) && k + PREFETCH_RECORDS < to {
                    prefetch(
                        self.words()
                            .add(2 * ((k + PREFETCH_RECORDS) & mask) as usize),
                    );
                }
                w.write(t.ns(w.read()));
            }
        }
    }

    /// [`Ring::convert_run`] in one go, for tests: returns the steps back
    /// and the largest.
    #[cfg(test)]
    pub(super) fn convert_times(&self, from: u64, to: u64, point: (u64, u64)) -> (u64, u64) {
        let mut t = self.times(point);
        self.convert_run(&mut t, from, to);
        let mut out = Drained::default();
        self.end_times(t, &mut out);
        (out.clock_steps_back, out.clock_step_max)
    }
}

/// Asks for the cache line at `p`: a hint, which reads nothing (and so
/// cannot fault).
#[inline(always)]
pub(super) fn prefetch(p: *const u64) {
    // SAFETY: prefetch is a hint: no access is made, any address is valid.
    unsafe { std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0) }
}
