//! User SDT markers (`<sys/sdt.h>`'s `STAP_PROBE`): the `.note.stapsdt`
//! notes of an object, each naming a probe point (a one-byte `nop` the
//! compiler placed) by provider and name.
//!
//! A note (type 3, owner `stapsdt`) describes its probe as: the probe's
//! address, the link-time address of the object's `.stapsdt.base`
//! section, the semaphore's address (0: none), then the provider, the
//! name and the argument description as NUL-terminated strings. Where the
//! object was prelinked since, its `.stapsdt.base` moved by as much as the
//! probe; the probe's address is corrected by that difference, as
//! SystemTap does.

#![forbid(unsafe_code)]

use object::{Object, ObjectSection};
use std::path::Path;

/// A probe point of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdtProbe {
    /// Its provider (`STAP_PROBE(provider, name)`).
    pub provider: String,
    /// Its name.
    pub name: String,
    /// Where its arguments are (`-4@%edi`…; empty without any).
    pub args: String,
    /// The probe's `nop`, at its link-time address (add the object's load
    /// bias).
    pub addr: u64,
}

/// The note type of a probe's description.
const NT_STAPSDT: u32 = 3;

/// The probes of the ELF image `data` (named `path` in messages): none
/// where it has no `.note.stapsdt`.
pub fn probes(path: &Path, data: &[u8]) -> Result<Vec<SdtProbe>, super::ElfError> {
    let file = super::parse(path, data)?;
    let Some(notes) = file.section_by_name(".note.stapsdt") else {
        return Ok(Vec::new());
    };
    let bad = |what: &str| super::ElfError {
        path: path.to_owned(),
        message: format!(".note.stapsdt: {what}"),
    };
    let bytes = notes.data().map_err(|e| bad(&e.to_string()))?;
    let base = file.section_by_name(".stapsdt.base").map(|s| s.address());
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 12 {
        let word = |i: usize| u32::from_le_bytes(rest[4 * i..4 * i + 4].try_into().unwrap());
        let (namesz, descsz, kind) = (word(0) as usize, word(1) as usize, word(2));
        let name_end = 12 + namesz.next_multiple_of(4);
        let desc_end = name_end + descsz.next_multiple_of(4);
        if desc_end > rest.len() {
            return Err(bad("a note runs past the section's end"));
        }
        let owner = &rest[12..12 + namesz];
        let desc = &rest[name_end..name_end + descsz];
        rest = &rest[desc_end..];
        if kind != NT_STAPSDT || owner != b"stapsdt\0" {
            continue;
        }
        if desc.len() < 24 {
            return Err(bad("a probe's description is too short"));
        }
        let addr_at = |i: usize| u64::from_le_bytes(desc[8 * i..8 * i + 8].try_into().unwrap());
        let (pc, noted_base) = (addr_at(0), addr_at(1));
        let mut strings = desc[24..].split(|&b| b == 0);
        let mut text = || {
            strings
                .next()
                .map(|s| String::from_utf8_lossy(s).into_owned())
        };
        let (Some(provider), Some(name)) = (text(), text()) else {
            return Err(bad("a probe without its provider and name"));
        };
        let args = text().unwrap_or_default();
        let addr = match base {
            Some(b) if noted_base != 0 => pc.wrapping_add(b.wrapping_sub(noted_base)),
            _ => pc,
        };
        out.push(SdtProbe {
            provider,
            name,
            args,
            addr,
        });
    }
    Ok(out)
}
