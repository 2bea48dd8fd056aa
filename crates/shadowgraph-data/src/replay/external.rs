//! External data (uftrace's `extern.dat` in a recording's directory):
//! lines `SEC.NSEC MESSAGE` another tool wrote, shown by `replay` among the
//! calls at their times (`/* external-data: MESSAGE */`).

use crate::dir::DataDir;

/// The messages of `data`'s `extern.dat` inside `range`, by time (none
/// without the file). Comment (`#`) and blank lines are passed over, and
/// lines without a timestamp and a message.
pub(super) fn messages(
    data: &DataDir,
    range: &std::ops::RangeInclusive<u64>,
) -> Vec<(u64, String)> {
    let Ok(text) = std::fs::read_to_string(data.dir.join("extern.dat")) else {
        return Vec::new();
    };
    let mut out: Vec<(u64, String)> = text
        .lines()
        .map(str::trim_start)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (ts, msg) = l.split_once([' ', '\t'])?;
            let msg = msg.trim();
            let t = match crate::time::TimeRange::parse(&format!("{ts}~"))
                .ok()?
                .start?
            {
                crate::time::Bound::At(t) => t,
                crate::time::Bound::Elapsed(_) => return None,
            };
            (!msg.is_empty() && range.contains(&t)).then(|| (t, msg.to_string()))
        })
        .collect();
    out.sort_by_key(|m| m.0);
    out
}
