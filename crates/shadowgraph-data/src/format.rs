//! The 16-byte record: `u64 time; u64 {type:2, more:1, magic:3 = 0b101,
//! depth:10, addr:48}` (uftrace's layout), 32 bytes per traced call.

use std::fmt;

/// The 3-bit magic every record carries (bits 3–5 of its second word).
pub const MAGIC: u64 = 0b101;
/// Bytes per record.
pub const RECORD_SIZE: usize = 16;

/// What a record marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A function's entry.
    Entry = 0,
    /// A function's return.
    Exit = 1,
    /// Records lost at this point (their number in `addr`).
    Lost = 2,
    /// An event (uftrace's; views skip it).
    Event = 3,
}

/// One decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Timestamp (raw clock units in a `.dat` file, nanoseconds after
    /// conversion).
    pub time: u64,
    /// What it marks.
    pub kind: Kind,
    /// uftrace's `more` bit: arguments or return values follow (for a
    /// schedule event: the thread was pre-empted).
    pub more: bool,
    /// Nesting depth of the call (10 bits).
    pub depth: u16,
    /// Function address (for LOST: the number of records lost).
    pub addr: u64,
    /// The arguments (an entry's) or return value (an exit's) recorded
    /// after it, as uftrace shows them (`1, "two"`; `3`).
    pub args: Option<std::sync::Arc<str>>,
}

/// The second word of a record: kind, magic, depth and address packed.
#[inline]
pub fn encode(kind: Kind, depth: u16, addr: u64) -> u64 {
    kind as u64 | MAGIC << 3 | ((depth as u64) & 0x3ff) << 6 | (addr & ((1 << 48) - 1)) << 16
}

/// A record that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord {
    /// Byte offset of the record in its file.
    pub offset: u64,
    /// What is wrong with it.
    pub why: &'static str,
}

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "offset {}: {}", self.offset, self.why)
    }
}

/// Decodes one record read at byte `offset` of its file.
pub fn decode(bytes: &[u8; RECORD_SIZE], offset: u64) -> Result<Record, BadRecord> {
    let time = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let w = u64::from_le_bytes(bytes[8..].try_into().unwrap());
    if (w >> 3) & 0b111 != MAGIC {
        return Err(BadRecord {
            offset,
            why: "bad record magic (corrupt or not a shadowgraph/uftrace data file)",
        });
    }
    let kind = match w & 3 {
        0 => Kind::Entry,
        1 => Kind::Exit,
        2 => Kind::Lost,
        _ => Kind::Event,
    };
    Ok(Record {
        time,
        kind,
        more: (w >> 2) & 1 != 0,
        depth: ((w >> 6) & 0x3ff) as u16,
        addr: w >> 16,
        args: None,
    })
}

/// The suffix of the path under which a session map lists an object's
/// mappings after its first run of them (`prog@stubs`, `prog@stubs2`): the
/// stubs of its patched prologues, away from it.
pub const STUBS_SUFFIX: &str = "@stubs";

/// The lines of a uftrace `.sym` file's `text` (`ADDR KIND NAME`, the
/// address in hex relative to the object's load base), by their index,
/// comments and blank lines left out: the three fields, or None for a line
/// that does not have them.
pub fn sym_lines(text: &str) -> impl Iterator<Item = (usize, Option<(&str, &str, &str)>)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && !l.is_empty())
        .map(|(n, l)| {
            let mut it = l.splitn(3, ' ');
            let fields = (|| Some((it.next()?, it.next()?, it.next()?)))();
            (n, fields)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let w = encode(Kind::Exit, 17, 0x7f12_3456_789a);
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&42u64.to_le_bytes());
        b[8..].copy_from_slice(&w.to_le_bytes());
        let r = decode(&b, 0).unwrap();
        assert_eq!(
            (r.time, r.kind, r.depth, r.addr, r.more),
            (42, Kind::Exit, 17, 0x7f12_3456_789a, false)
        );
        b[8] ^= 0x08; // break the magic
        assert!(decode(&b, 32)
            .unwrap_err()
            .to_string()
            .starts_with("offset 32: bad record magic"));
    }
}
