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

/// CLOCK_MONOTONIC now, in nanoseconds (vDSO; async-signal-safe).
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

/// A shared time word ([`now_shared`]) while its event's callbacks run and
/// none has taken a time yet.
pub const EVENT_OPEN: u64 = 1;

/// [`now`] for an event several tracers' callbacks see (a call's entry or
/// return offered to each): the time the first of them took, through
/// `shared` (fgraph's event time word, `fgraph::event_time`), or a fresh
/// one when no time may be shared — no event open, or a signal handler's
/// traced call ran since the time was taken (its event left the word 0).
/// Async-signal-safe.
#[inline]
pub fn now_shared(shared: &std::sync::atomic::AtomicU64) -> u64 {
    let w = shared.load(Ordering::Relaxed);
    if w > EVENT_OPEN {
        return w;
    }
    let t = now();
    if w == EVENT_OPEN {
        // Kept only if no handler's event came since the load (one
        // instruction, which no signal splits).
        crate::local::exchange(shared, w, t);
    }
    t
}

/// A (raw, ns) pair read together: the raw value is the midpoint of
/// two TSC reads around the clock read, from the tightest of three
/// tries (a try the scheduler interrupted is wide). Async-signal-safe.
pub fn calibration_point() -> (u64, u64) {
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
