//! uftrace's built-in events in a `.dat` file: what a `read=` trigger
//! records at a function's entry (`read:proc/statm`, `read:page-fault`,
//! `read:pmu-cycle` …) and, at its exit, the change since
//! (`diff:…`). Such an event record has its `more` bit set and is followed
//! by its data: a 2-byte length, the bytes, padding to 8.

#![forbid(unsafe_code)]

/// The first user event's id (uftrace's `EVENT_ID_USER`: SDT markers').
pub const USER_FIRST: u64 = 1_000_000;

/// Whether `id` is a user event's (the views' own events lie far above).
pub fn is_user(id: u64) -> bool {
    (USER_FIRST..1 << 32).contains(&id)
}

/// User events' names (`provider:name`) by id.
pub type UserEvents = std::collections::HashMap<u64, std::sync::Arc<str>>;

/// The user events `events.txt` in `dir` names (uftrace's lines, `EVENT:
/// ID PROVIDER:NAME`); none without the file, and lines of another form
/// are passed over, as uftrace reads it.
pub fn read_user_events(dir: &std::path::Path) -> UserEvents {
    let text = std::fs::read_to_string(dir.join("events.txt")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (id, name) = l.strip_prefix("EVENT: ")?.split_once(' ')?;
            let id: u64 = id.parse().ok()?;
            name.contains(':').then(|| (id, name.trim().into()))
        })
        .collect()
}

/// The first built-in event's id (`read:proc/statm`).
pub const FIRST: u64 = 100_001;
/// The last built-in event's id (`watch:cpu`).
pub const LAST: u64 = 100_011;

/// The name of built-in event `id`, as uftrace names it.
pub fn name(id: u64) -> Option<&'static str> {
    Some(match id {
        100_001 => "read:proc/statm",
        100_002 => "read:page-fault",
        100_003 => "diff:proc/statm",
        100_004 => "diff:page-fault",
        100_005 => "read:pmu-cycle",
        100_006 => "diff:pmu-cycle",
        100_007 => "read:pmu-cache",
        100_008 => "diff:pmu-cache",
        100_009 => "read:pmu-branch",
        100_010 => "diff:pmu-branch",
        100_011 => "watch:cpu",
        _ => return None,
    })
}

/// Event `id`'s data as uftrace's replay shows it (`vmsize=15492KB
/// vmrss=7588KB shared=5476KB`; a change with `+`, its counters unsigned
/// as uftrace keeps them), or None where it is too short.
pub fn show(id: u64, data: &[u8]) -> Option<String> {
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            data.get(8 * i..8 * i + 8)?.try_into().ok()?,
        ))
    };
    let diff = if matches!(id, 100_003 | 100_004 | 100_006 | 100_008 | 100_010) {
        "+"
    } else {
        ""
    };
    let (a, b) = (word(0), word(1));
    Some(match id {
        100_001 | 100_003 => format!(
            "vmsize={diff}{}KB vmrss={diff}{}KB shared={diff}{}KB",
            a?,
            b?,
            word(2)?
        ),
        100_002 | 100_004 => format!("major={diff}{} minor={diff}{}", a?, b?),
        100_005 | 100_006 => {
            let mut s = format!("cycles={diff}{} instructions={diff}{}", a?, b?);
            if !diff.is_empty() {
                s += &format!(" IPC={:.2}", b? as f32 / a? as f32);
            }
            s
        }
        100_007 | 100_008 => {
            let mut s = format!("refers={diff}{} misses={diff}{}", a?, b?);
            if !diff.is_empty() {
                let hit = 100.0 * a?.wrapping_sub(b?) as f64 / a? as f64;
                s += &format!(" hit={hit:.2}%");
            }
            s
        }
        100_009 | 100_010 => {
            let mut s = format!("branch={diff}{} misses={diff}{}", a?, b?);
            if !diff.is_empty() {
                let predict = 100.0 * a?.wrapping_sub(b?) as f64 / a? as f64;
                s += &format!(" predict={predict:.2}%");
            }
            s
        }
        100_011 => format!(
            "cpu={}",
            i32::from_le_bytes(data.get(..4)?.try_into().ok()?)
        ),
        _ => return None,
    })
}

/// Reads a built-in event's data after its record from `input`: its text
/// (`read:proc/statm (vmsize=… )`) and the bytes it took.
pub fn read_after(id: u64, input: &mut impl std::io::Read) -> Result<(String, u64), String> {
    let mut len = [0u8; 2];
    input
        .read_exact(&mut len)
        .map_err(|e| format!("event data: {e}"))?;
    let len = u16::from_le_bytes(len) as usize;
    let padded = (len + 2).next_multiple_of(8) - 2;
    let mut data = vec![0u8; padded];
    input
        .read_exact(&mut data)
        .map_err(|e| format!("event data ({len} bytes): {e}"))?;
    let name = name(id).unwrap_or("builtin_event");
    let text = match show(id, &data[..len]) {
        Some(s) => format!("{name} ({s})"),
        None => return Err(format!("{name}: {len} bytes of data, too few")),
    };
    Ok((text, 2 + padded as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_and_show_as_uftrace_shows_them() {
        let mut bytes = 24u16.to_le_bytes().to_vec();
        for v in [15492u64, 7588, 5476] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&[0; 6]);
        let (text, n) = read_after(100_001, &mut &bytes[..]).unwrap();
        assert_eq!(
            text,
            "read:proc/statm (vmsize=15492KB vmrss=7588KB shared=5476KB)"
        );
        assert_eq!(n, 32);
        let diff = [0u64, 8]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>();
        assert_eq!(show(100_004, &diff).as_deref(), Some("major=+0 minor=+8"));
        assert!(read_after(100_001, &mut &bytes[..10]).is_err());
    }
}
