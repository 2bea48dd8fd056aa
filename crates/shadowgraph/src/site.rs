//! What a patchable function entry is: its kind, the bytes it holds, and the
//! instructions the patcher writes there.
//!
//! Every kind is first converted to [`NOP5`] (design §2.1, §2.5); afterwards only
//! the two 5-byte forms NOP5 ⇄ `call rel32` are ever written, whose instruction
//! boundaries ({0, 5}) agree, so a thread anywhere on the site sees either the
//! old instruction, the new one, or an `int3` standing for the new one.

use std::fmt;

/// The canonical 5-byte nop every site is converted to.
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
/// gcc's `-fpatchable-function-entry=5`: five single-byte nops.
pub const SLED: [u8; 5] = [0x90; 5];
/// `endbr64`, which `-fcf-protection` places before the site.
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// How the compiler made the entry patchable (design §2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SiteKind {
    /// `90 90 90 90 90` from gcc `-fpatchable-function-entry=5`.
    Sled,
    /// `0f 1f 44 00 xx`: one 5-byte nop (clang, rustc, or an already
    /// normalised sled).
    Nop5,
    /// `0f 1f 44 00 00` from gcc `-pg -mfentry -mrecord-mcount -mnop-mcount`.
    McountNop,
    /// `e8 rel32`: `call __fentry__` from `-pg -mfentry -mrecord-mcount`.
    FentryCall,
    /// `ff 15 rel32`: `call *__fentry__@GOTPCREL(%rip)` (PIE `-pg -mfentry`).
    FentryGot,
    /// `67 e8 rel32`: the linker-relaxed `addr32 call __fentry__`.
    FentryAddr32,
}

impl SiteKind {
    /// Length of the original instruction(s) at the site.
    pub fn byte_len(self) -> usize {
        match self {
            SiteKind::FentryGot | SiteKind::FentryAddr32 => 6,
            _ => 5,
        }
    }

    /// Short name used by `shadowgraph sites`.
    pub fn name(self) -> &'static str {
        match self {
            SiteKind::Sled => "sled",
            SiteKind::Nop5 => "nop5",
            SiteKind::McountNop => "mcount-nop",
            SiteKind::FentryCall => "fentry-call",
            SiteKind::FentryGot => "fentry-got",
            SiteKind::FentryAddr32 => "fentry-addr32",
        }
    }

    /// The bytes this site holds once converted to a plain nop. The 6-byte
    /// forms keep a trailing one-byte nop forever: a thread that was inside
    /// `__fentry__` returns to `site + 6`, and a thread inside one of our
    /// trampolines returns to `site + 5`.
    pub fn converted(self) -> &'static [u8] {
        const NOP5_NOP1: [u8; 6] = [0x0f, 0x1f, 0x44, 0x00, 0x00, 0x90];
        match self {
            SiteKind::FentryGot | SiteKind::FentryAddr32 => &NOP5_NOP1,
            _ => &NOP5,
        }
    }
}

impl fmt::Display for SiteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which section listed the site: it decides which byte patterns are valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteSource {
    /// `__patchable_function_entries`
    PatchableEntries,
    /// `__mcount_loc`
    McountLoc,
}

/// Classifies the bytes found at a listed site. `Err` says why the bytes do
/// not match any kind the section can produce; such a site is never patched.
pub fn classify(source: SiteSource, bytes: &[u8]) -> Result<SiteKind, String> {
    let b = |n: usize| bytes.get(..n);
    match source {
        SiteSource::PatchableEntries => {
            if b(5) == Some(&SLED[..]) {
                Ok(SiteKind::Sled)
            } else if b(4) == Some(&[0x0f, 0x1f, 0x44, 0x00][..]) {
                Ok(SiteKind::Nop5)
            } else if bytes.first() == Some(&0x90) {
                Err("fewer than 5 nops (built with -fpatchable-function-entry < 5?)".into())
            } else {
                Err(format!(
                    "unexpected bytes {} (not a 5-byte nop)",
                    hex(bytes, 5)
                ))
            }
        }
        SiteSource::McountLoc => match bytes {
            [0x0f, 0x1f, 0x44, 0x00, 0x00, ..] => Ok(SiteKind::McountNop),
            [0xe8, _, _, _, _, ..] => Ok(SiteKind::FentryCall),
            [0xff, 0x15, _, _, _, _, ..] => Ok(SiteKind::FentryGot),
            [0x67, 0xe8, _, _, _, _, ..] => Ok(SiteKind::FentryAddr32),
            _ => Err(format!(
                "unexpected bytes {} (not a call to __fentry__: built without -mfentry?)",
                hex(bytes, 6)
            )),
        },
    }
}

/// `e8 rel32` from `site` to `target`, or `None` if out of ±2 GiB reach.
pub fn encode_call(site: usize, target: usize) -> Option<[u8; 5]> {
    encode_rel32(0xe8, site, target)
}

/// `e9 rel32` (jmp) from `site` to `target`, or `None` if out of reach.
pub fn encode_jmp(site: usize, target: usize) -> Option<[u8; 5]> {
    encode_rel32(0xe9, site, target)
}

fn encode_rel32(opcode: u8, site: usize, target: usize) -> Option<[u8; 5]> {
    let rel = (target as i64).wrapping_sub(site as i64 + 5);
    let rel = i32::try_from(rel).ok()?;
    let r = rel.to_le_bytes();
    Some([opcode, r[0], r[1], r[2], r[3]])
}

/// Target of an `e8 rel32` at `site`, if `bytes` is one.
pub fn decode_call(site: usize, bytes: &[u8]) -> Option<usize> {
    decode_rel32(0xe8, site, bytes)
}

/// Target of an `e9 rel32` at `site`, if `bytes` is one.
pub fn decode_jmp(site: usize, bytes: &[u8]) -> Option<usize> {
    decode_rel32(0xe9, site, bytes)
}

fn decode_rel32(opcode: u8, site: usize, bytes: &[u8]) -> Option<usize> {
    match bytes {
        [op, a, b, c, d, ..] if *op == opcode => {
            let rel = i32::from_le_bytes([*a, *b, *c, *d]) as i64;
            Some((site as i64 + 5 + rel) as usize)
        }
        _ => None,
    }
}

/// Space-separated hex of the first `n` bytes, for messages.
pub fn hex(bytes: &[u8], n: usize) -> String {
    let v: Vec<String> = bytes.iter().take(n).map(|b| format!("{b:02x}")).collect();
    if v.is_empty() {
        "<none>".into()
    } else {
        v.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_every_kind() {
        use SiteSource::*;
        assert_eq!(classify(PatchableEntries, &SLED), Ok(SiteKind::Sled));
        assert_eq!(
            classify(PatchableEntries, &[0x0f, 0x1f, 0x44, 0x00, 0x08]),
            Ok(SiteKind::Nop5)
        );
        assert_eq!(classify(McountLoc, &NOP5), Ok(SiteKind::McountNop));
        assert_eq!(
            classify(McountLoc, &[0xe8, 1, 2, 3, 4]),
            Ok(SiteKind::FentryCall)
        );
        assert_eq!(
            classify(McountLoc, &[0xff, 0x15, 1, 2, 3, 4]),
            Ok(SiteKind::FentryGot)
        );
        assert_eq!(
            classify(McountLoc, &[0x67, 0xe8, 1, 2, 3, 4]),
            Ok(SiteKind::FentryAddr32)
        );
        assert!(classify(PatchableEntries, &[0x90, 0x90, 0x55, 0x48, 0x89]).is_err());
        assert!(classify(McountLoc, &[0x55, 0x48, 0x89, 0xe5, 0x90]).is_err());
        assert!(classify(McountLoc, &[0xe8]).is_err());
    }

    #[test]
    fn call_round_trip_and_reach() {
        let site = 0x7f00_0000_1000usize;
        for target in [site + 5, site - 0x1000, site + 0x7fff_0000] {
            let c = encode_call(site, target).unwrap();
            assert_eq!(decode_call(site, &c), Some(target));
            let j = encode_jmp(site, target).unwrap();
            assert_eq!(decode_jmp(site, &j), Some(target));
            assert_eq!(decode_call(site, &j), None);
        }
        assert!(encode_call(site, site + (1usize << 32)).is_none());
    }
}
