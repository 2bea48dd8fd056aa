//! The compact record format (`record --compact`): the records of a
//! `<tid>.dat` file in blocks, each field a difference from the record
//! before it, 2–4 bytes a record where uftrace's layout takes 16.
//!
//! ```text
//!   file   := block*
//!   block  := magic "SGC1" · payload bytes (u32) · records (u32) · record*
//!   record := tag (u8) · [depth (u16)] · Δtime · Δaddr · [data bytes (u16) · data]
//!   tag    := bits 0–1  kind (uftrace's type)
//!             bit  2    more: data follows (its length, then itself)
//!             bits 3–4  Δtime's bytes: 1, 2, 4, 8
//!             bits 5–6  Δaddr's bytes: 0, 2, 4, 8
//!             bit  7    the depth follows; else it is the expected one:
//!                       an entry's, the depth after the record before;
//!                       an exit's, one less; an event's or a loss's, 0
//! ```
//!
//! All numbers are little-endian; Δtime (ns) and Δaddr are zigzag-encoded
//! differences from the record before (wrapping, 64-bit), cut to their
//! bytes. "The depth after" an entry at d is d + 1, after an exit at d it
//! is d, after anything else unchanged. Every block starts from zero
//! (time 0, address 0, depth after 0): a block stands alone, so a writer
//! needs no state between its writes, two writers may append whole blocks
//! to one file by turns, and a damaged block is found by its framing.
//! Field widths come from the tag rather than from continuation bits; a
//! writer encodes the common shape (the depth implied, no data, a time
//! byte, an address within 32 bits) by one store.
//!
//! [`CompactReader`] turns a compact file back into uftrace's layout, the
//! views' input; [`put_record`] and [`put_header`] write one without
//! allocating (a traced thread may write its own records).

use crate::format::{MAGIC, RECORD_SIZE};
use std::io::{self, Read};

/// A block's first four bytes.
pub const BLOCK_MAGIC: [u8; 4] = *b"SGC1";
/// Bytes of a block's header: magic, payload bytes, records.
pub const HEADER: usize = 12;
/// The bytes [`put_record`] needs from where it writes: the most it
/// writes before the data (tag, depth, time, address, data length: 21),
/// and room for its whole-word stores.
pub const MAX_RECORD: usize = 24;
/// The largest payload a reader accepts: a writer's block is at most its
/// drain buffer (a few hundred KiB).
const MAX_PAYLOAD: u32 = 64 << 20;

/// Where a block's differences start from, then the record before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deltas {
    time: u64,
    addr: u64,
    /// The depth after the record before (an entry's expected depth).
    next: u16,
}

#[inline(always)]
fn zigzag(v: u64) -> u64 {
    let v = v as i64;
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline(always)]
fn unzigzag(v: u64) -> u64 {
    (v >> 1) ^ (v & 1).wrapping_neg()
}

/// Δtime's width class: the power of two of its bytes (1, 2, 4, 8), by
/// comparisons (no branch; the baseline x86-64 has no `lzcnt`).
#[inline(always)]
fn time_class(z: u64) -> u8 {
    (z > 0xff) as u8 + (z > 0xffff) as u8 + (z > 0xffff_ffff) as u8
}

/// Δaddr's width class: 0, 2, 4, 8 bytes (0 only for 0).
#[inline(always)]
fn addr_class(z: u64) -> u8 {
    (z != 0) as u8 + (z > 0xffff) as u8 + (z > 0xffff_ffff) as u8
}

/// The bytes of a width class of Δtime (1, 2, 4, 8) and of Δaddr (0, 2,
/// 4, 8).
#[inline(always)]
fn time_bytes(class: u64) -> usize {
    1 << class
}

#[inline(always)]
fn addr_bytes(class: u64) -> usize {
    (1 << class) & !1
}

/// The depth a record of `kind` (uftrace's type) has when its tag does
/// not say, after `next` (for an exit at depth 0: none, 0xffff). Without
/// a branch: which records are entries follows the program's calls.
#[inline(always)]
fn expected_depth(kind: u64, next: u16) -> u16 {
    let (exit, call) = ((kind == 1) as u16, ((kind < 2) as u16).wrapping_neg());
    next.wrapping_sub(exit) & call
}

/// The depth after a record of `kind` at `depth`, `next` before it.
#[inline(always)]
fn depth_after(kind: u64, depth: u16, next: u16) -> u16 {
    let call = ((kind < 2) as u16).wrapping_neg();
    (depth.wrapping_add((kind == 0) as u16) & call) | (next & !call)
}

/// Writes the 12-byte header of a block of `payload` bytes holding
/// `records` records.
pub fn put_header(out: &mut [u8], payload: u32, records: u32) {
    out[..4].copy_from_slice(&BLOCK_MAGIC);
    out[4..8].copy_from_slice(&payload.to_le_bytes());
    out[8..12].copy_from_slice(&records.to_le_bytes());
}

/// Writes the record (`time` in ns; `word`, uftrace's second word: kind,
/// more, depth, address) at `out[at..]`, followed by `data_len` if the
/// word says `more`; returns where its data (the caller's to copy) or the
/// next record goes. `out` must have [`MAX_RECORD`] bytes from `at`.
#[inline(always)]
pub fn put_record(
    out: &mut [u8],
    at: usize,
    d: &mut Deltas,
    time: u64,
    word: u64,
    data_len: usize,
) -> usize {
    let out = &mut out[at..at + MAX_RECORD];
    let kind = word & 3;
    let depth = ((word >> 6) & 0x3ff) as u16;
    let addr = word >> 16;
    let given = expected_depth(kind, d.next) != depth;
    let zt = zigzag(time.wrapping_sub(d.time));
    let za = zigzag(addr.wrapping_sub(d.addr));
    let next = depth_after(kind, depth, d.next);
    *d = Deltas { time, addr, next };
    if (given as u64 | (word & 4)) == 0 && zt <= 0xff && za <= 0xffff_ffff {
        // Most records: the tag (the time's width class 0, the address's
        // 0 to 2), the time's byte, and the address's 0, 2 or 4 bytes; one
        // branch, which such records take in a row.
        let ac = (za != 0) as u64 + (za > 0xffff) as u64;
        let w = (word & 3) | ac << 5 | zt << 8 | za << 16;
        out[..8].copy_from_slice(&w.to_le_bytes());
        return at + 2 + addr_bytes(ac);
    }
    let (tc, ac) = (time_class(zt), addr_class(za));
    out[0] = (word & 7) as u8 | tc << 3 | ac << 5 | (given as u8) << 7;
    out[1..3].copy_from_slice(&depth.to_le_bytes());
    let mut n = 1 + 2 * given as usize;
    out[n..n + 8].copy_from_slice(&zt.to_le_bytes());
    n += time_bytes(tc as u64);
    out[n..n + 8].copy_from_slice(&za.to_le_bytes());
    n += addr_bytes(ac as u64);
    out[n..n + 2].copy_from_slice(&(data_len as u16).to_le_bytes());
    n += 2 * ((word >> 2) & 1) as usize;
    at + n
}

/// One record read back: its two words in uftrace's layout, and where its
/// data lies in the block.
struct Decoded {
    time: u64,
    word: u64,
    data: std::ops::Range<usize>,
}

/// `len` bytes at `b[*at..]`, little-endian, moved past.
fn get_le(b: &[u8], at: &mut usize, len: usize) -> Result<u64, &'static str> {
    let Some(bytes) = b.get(*at..*at + len) else {
        return Err("a record runs past its block");
    };
    *at += len;
    let mut w = [0u8; 8];
    w[..len].copy_from_slice(bytes);
    Ok(u64::from_le_bytes(w))
}

fn get_record(b: &[u8], at: &mut usize, d: &mut Deltas) -> Result<Decoded, &'static str> {
    if let Some(w) = b.get(*at..*at + 8) {
        // The common shape ([`put_record`]'s one store), read as one word.
        let w = u64::from_le_bytes(w.try_into().unwrap());
        let ac = w >> 5 & 3;
        if w & 0b1001_1100 == 0 && ac < 3 {
            let kind = w & 3;
            let depth = expected_depth(kind, d.next);
            if depth > 0x3ff {
                return Err("an exit at no depth");
            }
            let len = addr_bytes(ac);
            let time = d.time.wrapping_add(unzigzag(w >> 8 & 0xff));
            let za = (w >> 16) & ((1u64 << (8 * len)) - 1);
            let addr = d.addr.wrapping_add(unzigzag(za));
            if addr >> 48 != 0 {
                return Err("an address out of range");
            }
            *at += 2 + len;
            *d = Deltas {
                time,
                addr,
                next: depth_after(kind, depth, d.next),
            };
            return Ok(Decoded {
                time,
                word: kind | MAGIC << 3 | (depth as u64) << 6 | addr << 16,
                data: *at..*at,
            });
        }
    }
    let tag = get_le(b, at, 1)?;
    let kind = tag & 3;
    let depth = match tag >> 7 {
        0 => match expected_depth(kind, d.next) {
            0xffff => return Err("an exit at no depth"),
            e => e as u64,
        },
        _ => get_le(b, at, 2)?,
    };
    if depth > 0x3ff {
        return Err("a depth out of range");
    }
    let dt = get_le(b, at, time_bytes(tag >> 3 & 3))?;
    let da = get_le(b, at, addr_bytes(tag >> 5 & 3))?;
    let time = d.time.wrapping_add(unzigzag(dt));
    let addr = d.addr.wrapping_add(unzigzag(da));
    if addr >> 48 != 0 {
        return Err("an address out of range");
    }
    let len = match tag & 4 {
        0 => 0,
        _ => get_le(b, at, 2)? as usize,
    };
    if len > b.len() - *at {
        return Err("a record's data runs past its block");
    }
    let data = *at..*at + len;
    *at = data.end;
    *d = Deltas {
        time,
        addr,
        next: depth_after(kind, depth as u16, d.next),
    };
    Ok(Decoded {
        time,
        word: (tag & 7) | MAGIC << 3 | depth << 6 | addr << 16,
        data,
    })
}

/// A compact file read as uftrace's layout: 16-byte records, each with
/// its data after it. A damaged or cut block is an error of kind
/// `InvalidData` naming its offset in the file, after the whole blocks
/// before it.
pub struct CompactReader<R> {
    inner: R,
    /// The file offset of the next block.
    offset: u64,
    payload: Vec<u8>,
    out: Vec<u8>,
    at: usize,
    failed: Option<io::Error>,
}

impl<R: Read> CompactReader<R> {
    /// Reads the compact file `inner` from its start.
    pub fn new(inner: R) -> CompactReader<R> {
        CompactReader {
            inner,
            offset: 0,
            payload: Vec::new(),
            out: Vec::new(),
            at: 0,
            failed: None,
        }
    }

    /// Reads `buf` whole: false at the end of the file before any of it.
    fn fill(&mut self, buf_len: usize, what: &str) -> io::Result<bool> {
        let mut n = 0;
        while n < buf_len {
            match self.inner.read(&mut self.payload[n..buf_len]) {
                Ok(0) if n == 0 => return Ok(false),
                Ok(0) => {
                    return Err(bad(format!(
                        "truncated: {what} at offset {} cut after {n} of {buf_len} bytes",
                        self.offset
                    )))
                }
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Decodes the next block into `out`: false at the end of the file.
    fn next_block(&mut self) -> io::Result<bool> {
        self.payload.resize(HEADER, 0);
        if !self.fill(HEADER, "a block header")? {
            return Ok(false);
        }
        if self.payload[..4] != BLOCK_MAGIC {
            return Err(bad(format!(
                "offset {}: not a compact block (bad magic)",
                self.offset
            )));
        }
        let word = |i: usize| u32::from_le_bytes(self.payload[i..i + 4].try_into().unwrap());
        let (len, records) = (word(4), word(8));
        if len > MAX_PAYLOAD {
            return Err(bad(format!(
                "offset {}: a block of {len} bytes (at most {MAX_PAYLOAD})",
                self.offset
            )));
        }
        self.payload.resize(len as usize, 0);
        if len > 0 && !self.fill(len as usize, "a block")? {
            return Err(bad(format!(
                "truncated: the block at offset {} has no records",
                self.offset
            )));
        }
        self.out.clear();
        self.at = 0;
        let (mut at, mut d) = (0, Deltas::default());
        for _ in 0..records {
            let r = get_record(&self.payload, &mut at, &mut d)
                .map_err(|e| bad(format!("block at offset {}: {e}", self.offset)))?;
            let rec = (r.word as u128) << 64 | r.time as u128;
            self.out.extend_from_slice(&rec.to_le_bytes());
            self.out.extend_from_slice(&self.payload[r.data]);
        }
        if at != self.payload.len() {
            return Err(bad(format!(
                "block at offset {}: {} bytes after its {records} records",
                self.offset,
                self.payload.len() - at
            )));
        }
        self.offset += (HEADER + self.payload.len()) as u64;
        Ok(true)
    }
}

fn bad(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl<R: Read> Read for CompactReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.out.len() {
            if let Some(e) = &self.failed {
                return Err(io::Error::new(e.kind(), e.to_string()));
            }
            match self.next_block() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(e) => {
                    let again = io::Error::new(e.kind(), e.to_string());
                    self.failed = Some(e);
                    return Err(again);
                }
            }
        }
        let n = buf.len().min(self.out.len() - self.at);
        buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// A thread's file read as uftrace's layout, whichever layout it is in.
pub enum Dat {
    /// uftrace's layout, read as it is.
    Uftrace(std::fs::File),
    /// The compact layout, decoded.
    Compact(CompactReader<std::fs::File>),
}

impl Dat {
    /// `file`, in the compact layout if `compact`.
    pub fn new(file: std::fs::File, compact: bool) -> Dat {
        match compact {
            true => Dat::Compact(CompactReader::new(file)),
            false => Dat::Uftrace(file),
        }
    }
}

impl Read for Dat {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Dat::Uftrace(f) => f.read(buf),
            Dat::Compact(c) => c.read(buf),
        }
    }
}

/// About how many records a compact file of `bytes` holds (for progress).
pub fn records_in(bytes: u64) -> u64 {
    bytes / 3
}

/// Encodes uftrace-layout `records` (16 bytes each, no data after them)
/// as one compact block.
pub fn block_of(records: &[u8]) -> Vec<u8> {
    let n = records.len() / RECORD_SIZE;
    let mut out = vec![0u8; HEADER + n * MAX_RECORD];
    let (mut at, mut d) = (HEADER, Deltas::default());
    for r in records.chunks_exact(RECORD_SIZE) {
        let w = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().unwrap());
        at = put_record(&mut out, at, &mut d, w(0), w(8) & !4, 0);
    }
    put_header(&mut out, (at - HEADER) as u32, n as u32);
    out.truncate(at);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{encode, Kind};
    use proptest::prelude::*;

    /// Writes records (time, word, data) as blocks of `per_block`.
    fn write(records: &[(u64, u64, Vec<u8>)], per_block: usize) -> Vec<u8> {
        let mut file = Vec::new();
        for chunk in records.chunks(per_block.max(1)) {
            let mut buf = vec![0u8; HEADER + chunk.len() * (MAX_RECORD + 64)];
            let (mut at, mut d) = (HEADER, Deltas::default());
            for (t, w, data) in chunk {
                at = put_record(&mut buf, at, &mut d, *t, *w, data.len());
                if w & 4 != 0 {
                    buf[at..at + data.len()].copy_from_slice(data);
                    at += data.len();
                }
            }
            put_header(&mut buf, (at - HEADER) as u32, chunk.len() as u32);
            file.extend_from_slice(&buf[..at]);
        }
        file
    }

    fn uftrace_layout(records: &[(u64, u64, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (t, w, data) in records {
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&w.to_le_bytes());
            if w & 4 != 0 {
                out.extend_from_slice(data);
            }
        }
        out
    }

    fn read_all(file: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        CompactReader::new(file).read_to_end(&mut out)?;
        Ok(out)
    }

    fn record() -> impl Strategy<Value = (u64, u64, Vec<u8>)> {
        (
            any::<u64>(),
            0u64..4,
            any::<bool>(),
            0u16..1024,
            prop_oneof![0u64..1 << 48, 0x400000u64..0x401000],
            proptest::collection::vec(any::<u8>(), 0..48),
        )
            .prop_map(|(t, kind, more, depth, addr, data)| {
                let kind = [Kind::Entry, Kind::Exit, Kind::Lost, Kind::Event][kind as usize];
                (t, encode(kind, depth, addr) | (more as u64) << 2, data)
            })
    }

    /// Calls as a thread makes them: entries and exits nesting (or not,
    /// now and then), times close together, functions a few bytes to a
    /// few MiB apart: the short forms' ground.
    fn calls() -> impl Strategy<Value = Vec<(u64, u64, Vec<u8>)>> {
        proptest::collection::vec((any::<bool>(), 0u64..400, 0usize..6, any::<u8>()), 0..300)
            .prop_map(|steps| {
                let funcs = [
                    0x401136,
                    0x401200,
                    0x40ff00,
                    0x4a0000,
                    0x7f00_0000_1000,
                    0x401136,
                ];
                let (mut t, mut depth, mut out) = (1u64 << 40, 0u16, Vec::new());
                for (enter, dt, f, odd) in steps {
                    t += dt;
                    let kind = if enter || depth == 0 {
                        Kind::Entry
                    } else {
                        Kind::Exit
                    };
                    if kind == Kind::Exit {
                        depth -= 1;
                    }
                    // Now and then a depth out of turn, or an argument.
                    let d = if odd < 8 { depth + odd as u16 } else { depth };
                    let more = (odd >= 250) as u64;
                    out.push((
                        t,
                        encode(kind, d, funcs[f]) | more << 2,
                        vec![odd; 8 * more as usize],
                    ));
                    if kind == Kind::Entry {
                        depth += 1;
                    }
                }
                out
            })
    }

    proptest! {
        /// Calls as threads make them read back as uftrace's layout.
        #[test]
        fn calls_read_back_as_uftraces_layout(records in calls(), per_block in 1usize..400) {
            let file = write(&records, per_block);
            prop_assert_eq!(read_all(&file).unwrap(), uftrace_layout(&records));
        }

        /// Whatever the records, blocks of any size read back as uftrace's
        /// layout of them.
        #[test]
        fn any_records_read_back_as_uftraces_layout(
            records in proptest::collection::vec(record(), 0..200),
            per_block in 1usize..50,
        ) {
            let file = write(&records, per_block);
            prop_assert_eq!(read_all(&file).unwrap(), uftrace_layout(&records));
        }
    }

    /// A traced call of a recursive function takes a few bytes, not 32.
    #[test]
    fn width_classes_hold_their_values() {
        for bits in 0..64 {
            for z in [
                1u64 << bits,
                (1u64 << bits) - 1,
                (2u64 << bits).wrapping_sub(1),
            ] {
                let (t, a) = (
                    time_bytes(time_class(z) as u64),
                    addr_bytes(addr_class(z) as u64),
                );
                let need = (64 - z.leading_zeros() as usize).div_ceil(8);
                assert!(t >= need.max(1) && t < 2 * need.max(1), "{z:#x}: {t}");
                assert!(a >= need && a < 2 * need.max(2), "{z:#x}: {a}");
            }
        }
    }

    #[test]
    fn nested_calls_take_a_few_bytes_each() {
        let mut records = Vec::new();
        let mut t = 1_000_000_000_000;
        for depth in 0..100u16 {
            t += 23;
            records.push((t, encode(Kind::Entry, depth, 0x401136), Vec::new()));
        }
        for depth in (0..100u16).rev() {
            t += 41;
            records.push((t, encode(Kind::Exit, depth, 0x401136), Vec::new()));
        }
        let file = write(&records, 1000);
        assert!(file.len() < 3 * 200 + 32, "{} bytes", file.len());
        assert_eq!(read_all(&file).unwrap(), uftrace_layout(&records));
        assert_eq!(
            block_of(&uftrace_layout(&records)),
            file,
            "block_of writes the same"
        );
    }

    /// A cut or damaged block is an error naming its offset, after the
    /// whole blocks before it.
    #[test]
    fn a_damaged_block_is_said_with_its_offset() {
        let records: Vec<_> = (0..10u64)
            .map(|i| (100 + i, encode(Kind::Entry, i as u16, 0x1000), Vec::new()))
            .collect();
        let file = write(&records, 5);
        let first = HEADER + u32::from_le_bytes(file[4..8].try_into().unwrap()) as usize;
        let mut r = CompactReader::new(&file[..file.len() - 1]);
        let mut out = Vec::new();
        let e = r.read_to_end(&mut out).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains(&format!("offset {first}")), "{e}");
        assert_eq!(out, uftrace_layout(&records[..5]));
        let mut bad_magic = file.clone();
        bad_magic[first] = b'X';
        let e = read_all(&bad_magic).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
        let mut overlong = file.clone();
        overlong[8] = 4; // four records claimed: one byte string left over
        let e = read_all(&overlong).unwrap_err();
        assert!(e.to_string().contains("bytes after its 4 records"), "{e}");
    }
}
