//! `record`'s option values checked as they are parsed: depths, sizes,
//! durations, triggers.

#![forbid(unsafe_code)]

/// `--max-stack DEPTH`: the depth, checked.
pub(crate) fn parse_max_stack(v: &str) -> Result<u64, String> {
    let most = shadowgraph::fgraph::MAX_STACK_BYTES as u64 / 32 - 1;
    match v.trim().parse::<u64>() {
        Ok(d) if (1..=most).contains(&d) => Ok(d),
        Ok(_) => Err(format!("`{v}`: the depth must be between 1 and {most}")),
        Err(_) => Err(format!("`{v}` is not a depth (a number of frames)")),
    }
}

/// The shadow stack size, in bytes, that holds `depth` plain frames (4
/// words each) above the push margin.
pub(super) fn stack_bytes_for(depth: u64) -> usize {
    ((depth + 1) * 32)
        .next_power_of_two()
        .max(shadowgraph::fgraph::MIN_STACK_BYTES as u64) as usize
}

/// A tracer's depth limit (0: none) under `--max-stack` (`max`).
pub(super) fn depth_within(depth: u32, max: Option<u64>) -> u32 {
    match max.map(|m| m.min(u32::MAX as u64) as u32) {
        Some(m) if depth == 0 || m < depth => m,
        _ => depth,
    }
}

/// A `-T` spec, checked as a trigger (kept as given).
pub(super) fn parse_trigger(v: &str) -> Result<String, String> {
    use shadowgraph_data::trigger::{SpecKind, Trigger};
    Trigger::parse(v, SpecKind::Trigger)
        .map(|_| v.to_string())
        .map_err(|e| e.to_string())
}

/// A duration with a unit (ns, us, ms, s; none: ns) in nanoseconds.
pub(crate) fn parse_duration_ns(v: &str) -> Result<u64, String> {
    shadowgraph_data::trigger::parse_duration(v)
}

/// A duration for how long to run (`--duration`): as
/// [`parse_duration_ns`], but a number without a unit is seconds.
pub(crate) fn parse_seconds_ns(v: &str) -> Result<u64, String> {
    let bare = !v.trim().is_empty() && v.trim().bytes().all(|c| c.is_ascii_digit() || c == b'.');
    parse_duration_ns(&if bare {
        format!("{}s", v.trim())
    } else {
        v.to_string()
    })
}

/// A buffer size: bytes, or with K, M or G (powers of 1024); 64K to 1G.
pub(crate) fn parse_buffer_size(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let (num, scale) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{v}` is not a size (e.g. 512K, 4M)"))?;
    match n.checked_mul(scale) {
        Some(b) if (64 << 10..=1 << 30).contains(&b) => Ok(b),
        _ => Err(format!("`{v}`: the buffer size must be between 64K and 1G")),
    }
}
