//! Time conversion: a recording's raw timestamps (TSC ticks, or
//! CLOCK_MONOTONIC nanoseconds already) become nanoseconds on the line
//! through two calibration points, each a (raw, ns) pair read together.

/// Two (raw, ns) points, for converting raw timestamps to nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    /// The first point's raw timestamp.
    pub raw0: u64,
    /// The first point's nanoseconds.
    pub ns0: u64,
    /// The second point's raw timestamp.
    pub raw1: u64,
    /// The second point's nanoseconds.
    pub ns1: u64,
}

impl Calibration {
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

    /// The raw timestamp of the line's origin.
    pub fn raw0(&self) -> u64 {
        self.raw0
    }

    /// The nanoseconds of the line's origin.
    pub fn ns0(&self) -> u64 {
        self.ns0
    }

    /// Nanoseconds per raw tick, 32.32 fixed point (0: identity).
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

    /// Nanoseconds of raw timestamp `raw` (before the origin too).
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
