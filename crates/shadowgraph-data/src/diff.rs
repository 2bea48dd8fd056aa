//! `report --diff`: how a second recording differs from a first,
//! function by function (matched by name: addresses differ from run to
//! run), in uftrace's layout, as `--diff-policy` and `--sort-column`
//! shape it.

use super::dir::DataDir;
use super::replay::{format_duration, ReplayFilter};
use super::report::{collect, FuncStats, ReportError, SortKey};
use std::collections::HashMap;
use std::io::Write;

/// uftrace's `--diff-policy` and `--sort-column`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiffPolicy {
    /// `abs` (the default): sorted by the size of a change, not its sign
    /// (`no-abs`: increases first).
    pub absolute: bool,
    /// `percent`: changes as percentages of the first recording's values
    /// (`no-percent`, the default: as times).
    pub percent: bool,
    /// `full`: both recordings' values beside each change (`compact`, the
    /// default: the changes alone).
    pub full: bool,
    /// `--sort-column`: 0 sorts by the first recording's values, 1 by the
    /// second's, 2 (the default) by the changes.
    pub column: u8,
}

impl Default for DiffPolicy {
    fn default() -> Self {
        DiffPolicy {
            absolute: true,
            percent: false,
            full: false,
            column: 2,
        }
    }
}

impl DiffPolicy {
    /// Parses `--diff-policy` (comma-separated: `abs`, `no-abs`,
    /// `percent`, `no-percent`, `full`, `compact`) over the defaults.
    pub fn parse(text: &str) -> Result<DiffPolicy, String> {
        let mut p = DiffPolicy::default();
        for w in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let (on, what) = match w.strip_prefix("no-") {
                Some(r) => (false, r),
                None => (true, w),
            };
            match what {
                "abs" => p.absolute = on,
                "percent" => p.percent = on,
                "full" if on => p.full = true,
                "compact" if on => p.full = false,
                _ => {
                    return Err(format!(
                        "--diff-policy {text}: unknown `{w}` (abs, no-abs, percent, no-percent, full, compact)"
                    ))
                }
            }
        }
        Ok(p)
    }
}

/// A time change as uftrace's diff writes it: `+1.234 us`, `0 us`.
fn signed(d: i128) -> String {
    if d == 0 {
        return "0 us".to_string();
    }
    let sign = if d < 0 { '-' } else { '+' };
    format!(
        "{sign}{}",
        format_duration(Some(d.unsigned_abs() as u64)).trim_start()
    )
}

/// A change as a percentage of `base`, in 8 columns (`N/A` where either
/// side is 0).
fn percent(base: u64, pair: u64) -> String {
    if base == 0 || pair == 0 {
        return format!("{:>7} ", "N/A");
    }
    let p = (100.0 * (pair as f64 - base as f64) / base as f64).clamp(-999.99, 999.99);
    format!("{p:+7.2}%")
}

/// A time, or `-` for none, in 10 columns.
fn time_or_dash(t: u64) -> String {
    if t == 0 {
        format!("{:>10}", "-")
    } else {
        format_duration(Some(t))
    }
}

/// Writes how the recording `other` differs from `base`, function by
/// function, in uftrace's `report --diff` layout: the change of total
/// time, self time and calls, `other` less `base` (uftrace 0.13 writes the
/// times' changes the other way round, base less other, but not the
/// calls' nor the percentages); a function only one of them has counts
/// as zero in the other; sorted by the `sort` column (names ascending for
/// `func`) as `policy` says.
pub fn report_diff(
    base: &DataDir,
    other: &DataDir,
    sort: SortKey,
    policy: DiffPolicy,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReportError> {
    report_diff_of(base, other, (sort, &DiffColumn::ALL), policy, filter, out)
}

/// A column of `report --diff` (`-f total,self,call`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffColumn {
    /// Total time.
    Total,
    /// Self time.
    SelfTime,
    /// Calls.
    Calls,
}

impl DiffColumn {
    /// Every column, in uftrace's default order.
    pub const ALL: [DiffColumn; 3] = [Self::Total, Self::SelfTime, Self::Calls];

    /// `-f`'s list for a diff: of `total`, `self` and `call`, shown in that
    /// order whatever the order given (as uftrace's).
    pub fn parse_list(spec: &str) -> Result<Vec<DiffColumn>, String> {
        let mut out = Vec::new();
        for f in spec.split(',').filter(|f| !f.is_empty()) {
            let c = match f {
                "total" => Self::Total,
                "self" => Self::SelfTime,
                "call" => Self::Calls,
                _ => return Err(format!("-f `{f}`: --diff shows total, self and call")),
            };
            if !out.contains(&c) {
                out.push(c);
            }
        }
        Ok(Self::ALL.into_iter().filter(|c| out.contains(c)).collect())
    }
}

/// [`report_diff`] with the columns given (`-f`).
pub fn report_diff_of(
    base: &DataDir,
    other: &DataDir,
    (sort, columns): (SortKey, &[DiffColumn]),
    policy: DiffPolicy,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReportError> {
    let by_name = |d: &DataDir| -> Result<HashMap<String, FuncStats>, ReportError> {
        let mut m: HashMap<String, FuncStats> = HashMap::new();
        for ((_, addr), s) in collect(d, false, filter)? {
            let e = m.entry(d.name(addr).into_owned()).or_default();
            e.total += s.total;
            e.self_time += s.self_time;
            e.calls += s.calls;
        }
        Ok(m)
    };
    let (a, b) = (by_name(base)?, by_name(other)?);
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    let zero = FuncStats::default();
    let pair = |n: &String| (a.get(n).unwrap_or(&zero), b.get(n).unwrap_or(&zero));
    // The sort column's values, as a number larger first.
    let key = |n: &String| -> f64 {
        let (x, y) = pair(n);
        let (u, v) = match sort {
            // (The CLI takes no other column's key with --diff.)
            SortKey::Total | SortKey::Column(_) => (x.total, y.total),
            SortKey::SelfTime => (x.self_time, y.self_time),
            SortKey::Calls => (x.calls, y.calls),
            SortKey::Name => return 0.0,
        };
        let change = match policy.column {
            0 => return u as f64,
            1 => return v as f64,
            _ if policy.percent && u == 0 => 0.0,
            _ if policy.percent => 100.0 * (v as f64 - u as f64) / u as f64,
            _ => v as f64 - u as f64,
        };
        if policy.absolute {
            change.abs()
        } else {
            change
        }
    };
    names.sort_by(|m, n| key(n).total_cmp(&key(m)).then_with(|| m.cmp(n)));
    writeln!(out, "#")?;
    writeln!(out, "# shadowgraph diff")?;
    for (i, (role, d)) in [("base", base), ("diff", other)].iter().enumerate() {
        writeln!(
            out,
            "#  [{i}] {role}: {}\t(from {})",
            d.dir.display(),
            d.info.get("cmdline").unwrap_or("?")
        )?;
    }
    writeln!(out, "#")?;
    let (tw, cw) = match (policy.full, policy.percent) {
        (false, _) => (11, 11),
        (true, false) => (35, 32),
        (true, true) => (32, 32),
    };
    let head = |c: &DiffColumn| -> (&str, usize) {
        let (h, w) = match c {
            DiffColumn::Total => ("Total time", tw),
            DiffColumn::SelfTime => ("Self time", tw),
            DiffColumn::Calls => ("Calls", cw),
        };
        (h, w)
    };
    let (mut heads, mut rules) = (String::new(), String::new());
    for c in columns {
        let (h, w) = head(c);
        let h = if policy.full {
            format!("{h} (diff)")
        } else {
            h.to_string()
        };
        heads.push_str(&format!("   {h:>w$}"));
        rules.push_str(&format!("   {}", "=".repeat(w)));
    }
    writeln!(out, "{heads}   Function")?;
    writeln!(out, "{rules}   ====================")?;
    let time = |x: u64, y: u64| -> String {
        let change = if policy.percent {
            percent(x, y)
        } else {
            format!("{:>11}", signed(y as i128 - x as i128))
        };
        if policy.full {
            format!("{}  {}  {change}", time_or_dash(x), time_or_dash(y))
        } else {
            format!("{change:>11}")
        }
    };
    for n in names {
        let (x, y) = pair(n);
        let c = y.calls as i128 - x.calls as i128;
        let calls = if policy.full {
            format!(" {:>9}  {:>9}  {:>9}", x.calls, y.calls, format!("{c:+}"))
        } else {
            format!("{:>11}", format!("{c:+}"))
        };
        let mut line = String::new();
        for c in columns {
            let cell = match c {
                DiffColumn::Total => time(x.total, y.total),
                DiffColumn::SelfTime => time(x.self_time, y.self_time),
                DiffColumn::Calls => calls.clone(),
            };
            line.push_str(&format!("   {cell}"));
        }
        writeln!(out, "{line}   {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_as_uftrace() {
        let p = DiffPolicy::parse("no-abs,percent,full").unwrap();
        assert!(!p.absolute && p.percent && p.full);
        let p = DiffPolicy::parse("full,compact,no-percent").unwrap();
        assert_eq!(p, DiffPolicy::default());
        assert!(DiffPolicy::parse("abs,sideways").is_err());
        assert_eq!(percent(1062, 381), " -64.12%");
        assert_eq!(percent(0, 5), "    N/A ");
    }
}
