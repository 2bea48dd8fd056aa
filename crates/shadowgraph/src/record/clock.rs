//! Timestamps: `rdtsc` when the TSC is invariant (CPUID 0x80000007 EDX bit
//! 8), converted to CLOCK_MONOTONIC nanoseconds outside the traced calls
//! (when a buffer is written out, between two calibration points);
//! otherwise CLOCK_MONOTONIC itself.

use std::sync::atomic::{AtomicBool, Ordering};

static USE_TSC: AtomicBool = AtomicBool::new(false);

/// Whether the TSC is invariant (constant rate, not stopped in idle).
pub fn tsc_invariant() -> bool {
    let max = std::arch::x86_64::__cpuid(0x8000_0000).eax;
    if max < 0x8000_0007 {
        return false;
    }
    std::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
}

/// Chooses the clock for this process (call once before recording): the
/// TSC if invariant. Returns whether it is the TSC.
pub fn init() -> bool {
    init_with(true)
}

/// [`init`], or CLOCK_MONOTONIC whatever the TSC (`prefer_tsc` false).
pub fn init_with(prefer_tsc: bool) -> bool {
    let tsc = prefer_tsc && tsc_invariant();
    USE_TSC.store(tsc, Ordering::Relaxed);
    tsc
}

/// Whether [`now`] reads the TSC (else it is CLOCK_MONOTONIC already).
pub fn uses_tsc() -> bool {
    USE_TSC.load(Ordering::Relaxed)
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The current timestamp in raw units. Async-signal-safe.
#[inline]
pub fn now() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        // SAFETY: rdtsc has no preconditions.
        unsafe { std::arch::x86_64::_rdtsc() }
    } else {
        monotonic_ns()
    }
}

/// [`now`] for an event several tracers' callbacks see (a call's entry or
/// return offered to each): the time the first of them took, through
/// `shared` (fgraph's event time word, `fgraph::event_time`), or a fresh
/// one when no time may be shared — no event open, or a signal handler's
/// traced call ran since the time was taken (its event left the word 0).
/// Async-signal-safe.
#[inline]
pub fn now_shared(shared: &std::sync::atomic::AtomicU64) -> u64 {
    use crate::fgraph::stack::EVENT_OPEN;
    let w = shared.load(Ordering::Relaxed);
    if w > EVENT_OPEN {
        return w;
    }
    let t = now();
    if w == EVENT_OPEN {
        // Kept only if no handler's event came since the load (one
        // instruction, which no signal splits).
        super::ring::exchange_local(shared, w, t);
    }
    t
}

/// Two (raw, ns) points, for converting raw timestamps to nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    pub raw0: u64,
    pub ns0: u64,
    pub raw1: u64,
    pub ns1: u64,
}

impl Calibration {
    /// A (raw, ns) pair read together: the raw value is the midpoint of
    /// two TSC reads around the clock read, from the tightest of three
    /// tries (a try the scheduler interrupted is wide). Async-signal-safe.
    pub fn point() -> (u64, u64) {
        if !uses_tsc() {
            let ns = monotonic_ns();
            return (ns, ns);
        }
        let mut best = (u64::MAX, 0, 0);
        for _ in 0..3 {
            let a = now();
            let ns = monotonic_ns();
            let b = now();
            let width = b.wrapping_sub(a);
            if width < best.0 {
                best = (width, a + width / 2, ns);
            }
        }
        (best.1, best.2)
    }

    /// Nanoseconds (on CLOCK_MONOTONIC) of a raw timestamp: a 32.32
    /// fixed-point rate (computed per call: one division; callers converting
    /// many timestamps use [`Calibration::converter`]).
    pub fn to_ns(&self, raw: u64) -> u64 {
        self.converter().to_ns(raw)
    }

    /// Whether times are nanoseconds already.
    pub fn is_identity(&self) -> bool {
        self.raw1 <= self.raw0
    }

    /// A converter with the rate computed once.
    pub fn converter(&self) -> Converter {
        if self.raw1 <= self.raw0 {
            return Converter {
                raw0: 0,
                ns0: 0,
                rate: 0,
            }; // identity
        }
        let rate = (((self.ns1 - self.ns0) as u128) << 32) / (self.raw1 - self.raw0) as u128;
        Converter {
            raw0: self.raw0,
            ns0: self.ns0,
            rate: rate as u64,
        }
    }
}

/// Raw timestamp → nanoseconds with a precomputed 32.32 rate.
#[derive(Clone, Copy, Debug)]
pub struct Converter {
    raw0: u64,
    ns0: u64,
    /// 0: identity.
    rate: u64,
}

impl Converter {
    /// The line through (`raw0`, `ns0`) at `rate` ns per tick (32.32 fixed
    /// point; 0: identity).
    pub fn new(raw0: u64, ns0: u64, rate: u64) -> Converter {
        Converter { raw0, ns0, rate }
    }

    pub fn raw0(&self) -> u64 {
        self.raw0
    }

    pub fn ns0(&self) -> u64 {
        self.ns0
    }

    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// [`Converter::to_ns`] of a timestamp at or after the converter's
    /// start, with a rate: one 64 × 64-bit multiply instead of signed
    /// 128-bit arithmetic (the writer converts every record's time).
    #[inline(always)]
    pub fn to_ns_from_start(&self, raw: u64) -> u64 {
        debug_assert!(raw >= self.raw0 && self.rate != 0);
        self.ns0
            .wrapping_add((((raw - self.raw0) as u128 * self.rate as u128) >> 32) as u64)
    }

    #[inline]
    pub fn to_ns(&self, raw: u64) -> u64 {
        if self.rate == 0 {
            return raw;
        }
        let d = raw as i128 - self.raw0 as i128;
        let scaled = (d * self.rate as i128) >> 32;
        (self.ns0 as i128 + scaled).max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::Converter;
    use proptest::prelude::*;

    proptest! {
        /// The writer's one-multiply conversion agrees with the general one
        /// wherever it is used: at or after the piece's start, over spans
        /// far longer than a recording (2⁵⁰ ticks) and rates from 1/16 to
        /// 4 ns per tick.
        #[test]
        fn from_start_agrees_with_to_ns(
            raw0 in 0u64..1 << 62,
            ns0 in 0u64..1 << 60,
            rate in (1u64 << 28)..(1u64 << 34),
            d in 0u64..1 << 50,
        ) {
            let c = Converter::new(raw0, ns0, rate);
            prop_assert_eq!(c.to_ns_from_start(raw0 + d), c.to_ns(raw0 + d));
        }
    }
}
