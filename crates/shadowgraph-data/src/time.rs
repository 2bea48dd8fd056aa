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

/// One end of a time range (`-r`): a timestamp (`SEC.NSEC`, as the
/// `time` column shows it) or a time since the recording's first record
/// (a duration with its unit, as the `elapsed` column shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// Nanoseconds on the recording's clock.
    At(u64),
    /// Nanoseconds after the first record.
    Elapsed(u64),
}

/// A time range (uftrace's `-r START~STOP`, either end may be left out):
/// the views show only records inside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeRange {
    /// Nothing before this.
    pub start: Option<Bound>,
    /// Nothing after this.
    pub stop: Option<Bound>,
}

impl TimeRange {
    /// Parses `START~STOP`: each a timestamp (`74469.340765344`), a time
    /// since the first record (`4.3us`, `2ms`), or nothing.
    pub fn parse(text: &str) -> Result<TimeRange, String> {
        let (a, b) = text
            .split_once('~')
            .ok_or_else(|| format!("`{text}`: START~STOP expected (either may be left out)"))?;
        let bound = |s: &str| -> Result<Option<Bound>, String> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            if s.ends_with(|c: char| c.is_ascii_alphabetic()) {
                return crate::trigger::parse_duration(s).map(|d| Some(Bound::Elapsed(d)));
            }
            let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
            let bad = || format!("`{s}`: not a timestamp (SEC.NSEC) nor a time with a unit");
            let sec: u64 = sec.parse().map_err(|_| bad())?;
            if frac.len() > 9 || !frac.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            let ns: u64 = format!("{frac:0<9}").parse().map_err(|_| bad())?;
            Ok(Some(Bound::At(sec * 1_000_000_000 + ns)))
        };
        Ok(TimeRange {
            start: bound(a)?,
            stop: bound(b)?,
        })
    }

    /// The range in timestamps, `first` the recording's first record's.
    pub fn resolve(&self, first: u64) -> std::ops::RangeInclusive<u64> {
        let at = |b: Bound| match b {
            Bound::At(t) => t,
            Bound::Elapsed(d) => first.saturating_add(d),
        };
        self.start.map_or(0, at)..=self.stop.map_or(u64::MAX, at)
    }
}

#[cfg(test)]
mod tests {
    use super::Converter;

    #[test]
    fn time_ranges_as_uftrace() {
        use super::{Bound, TimeRange};
        let r = TimeRange::parse("74469.340765344~").unwrap();
        assert_eq!(r.start, Some(Bound::At(74_469_340_765_344)));
        assert_eq!(r.stop, None);
        let r = TimeRange::parse("~4.3us").unwrap();
        assert_eq!(r.stop, Some(Bound::Elapsed(4300)));
        assert_eq!(r.resolve(1000), 0..=5300);
        assert_eq!(
            TimeRange::parse("12.5~").unwrap().start,
            Some(Bound::At(12_500_000_000))
        );
        for bad in ["12", "x~", "1.2.3~", "~5 parsecs"] {
            assert!(TimeRange::parse(bad).is_err(), "{bad}");
        }
    }
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
