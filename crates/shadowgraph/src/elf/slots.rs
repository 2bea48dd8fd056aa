//! The GOT entries through which an object calls functions of other
//! objects: its PLT's jump slots, and the entries `-fno-plt` code calls
//! through directly.

#![forbid(unsafe_code)]

use object::read::elf::ElfFile64;
use object::{Object, ObjectSymbol, RelocationFlags};
use std::collections::HashMap;

/// A GOT entry through which the object calls a function of another
/// object (a PLT's `R_X86_64_JUMP_SLOT`, or a `R_X86_64_GLOB_DAT` called
/// through directly), and the function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JumpSlot {
    /// The GOT entry's link-time address.
    pub got: u64,
    /// The called function's symbol (dynamic symbol table), without its
    /// version.
    pub symbol: String,
    /// A PLT's jump slot (else an entry called through without a PLT).
    pub plt: bool,
    /// The symbol version the object asks for (`GLIBC_2.2.5`), if any.
    pub version: Option<String>,
}

/// The PLT's jump slots of the ELF image `file`: the calls the object
/// makes to functions of other objects.
pub fn jump_slots(file: &ElfFile64<'_>) -> Vec<JumpSlot> {
    let mut slots = relocated_slots(file, R_X86_64_JUMP_SLOT, false);
    slots.sort_by_key(|s| s.got);
    slots
}

/// The GOT entries (`R_X86_64_GLOB_DAT`) of functions of other objects
/// that the code of the ELF image `file` only calls or jumps through
/// (`call *f@GOTPCREL(%rip)`, as `-fno-plt` builds and Rust emit): library
/// calls without a PLT. An entry the code also reads otherwise (a function
/// pointer taken, compared, tested for a weak symbol) is left out, for
/// the pointer must stay the function's own.
///
/// Every 4 bytes of the executable segments are read as a RIP-relative
/// displacement ending there: one that reaches an entry (or up to 4 bytes
/// before it, for an instruction with an immediate after it) is a
/// reference, a call or jump when `ff 15` / `ff 25` (an indirect `call` /
/// `jmp` through RIP) precedes it and it reaches the entry exactly. Bytes
/// that only look like a reference make an entry look read: left out,
/// never wrongly taken. Only the entries of functions `want` names are
/// looked for (none: the code is not read).
pub fn call_only_got_slots(file: &ElfFile64<'_>, want: impl Fn(&str) -> bool) -> Vec<JumpSlot> {
    use object::{ObjectSegment, SegmentFlags};
    const PF_X: u32 = 1;
    let mut slots = relocated_slots(file, R_X86_64_GLOB_DAT, true);
    slots.retain(|s| want(&s.symbol));
    if slots.is_empty() {
        return slots;
    }
    let lo = slots.iter().map(|s| s.got).min().unwrap_or(0);
    let hi = slots.iter().map(|s| s.got).max().unwrap_or(0);
    // Entry address → (calls through it, read otherwise).
    let mut refs: HashMap<u64, (u32, bool)> = slots.iter().map(|s| (s.got, (0, false))).collect();
    for seg in file.segments() {
        let SegmentFlags::Elf { p_flags } = seg.flags() else {
            continue;
        };
        let Ok(code) = seg.data() else { continue };
        if p_flags & PF_X == 0 || code.len() < 6 {
            continue;
        }
        for end in 4..=code.len() {
            let disp = i32::from_le_bytes(code[end - 4..end].try_into().expect("4 bytes"));
            let reach = (seg.address() + end as u64).wrapping_add(disp as i64 as u64);
            // The one 8-aligned word within 4 bytes after `reach`, if any.
            let word = reach.wrapping_add(7) & !7;
            if word.wrapping_sub(reach) > 4 || !(lo..=hi).contains(&word) {
                continue;
            }
            let Some(r) = refs.get_mut(&word) else {
                continue;
            };
            let through = end >= 6 && code[end - 6] == 0xff && matches!(code[end - 5], 0x15 | 0x25);
            if through && word == reach {
                r.0 += 1;
            } else {
                r.1 = true;
            }
        }
    }
    slots.retain(|s| {
        refs.get(&s.got)
            .is_some_and(|&(calls, read)| calls > 0 && !read)
    });
    slots.sort_by_key(|s| s.got);
    slots
}

const R_X86_64_GLOB_DAT: u32 = 6;
const R_X86_64_JUMP_SLOT: u32 = 7;

/// The dynamic relocations of type `r_type` against a named symbol
/// (`undefined_functions`: only functions the object does not define).
/// The GOT entries (link-time addresses) through which the ELF image
/// `file` reaches one of the functions `names`, by its PLT or without.
pub fn got_entries_of(file: &ElfFile64<'_>, names: &[&str]) -> Vec<u64> {
    let mut out: Vec<u64> = relocated_slots(file, R_X86_64_JUMP_SLOT, false)
        .into_iter()
        .chain(relocated_slots(file, R_X86_64_GLOB_DAT, true))
        .filter(|s| names.contains(&s.symbol.as_str()))
        .map(|s| s.got)
        .collect();
    out.sort_unstable();
    out
}

fn relocated_slots(file: &ElfFile64<'_>, r_type: u32, undefined_functions: bool) -> Vec<JumpSlot> {
    use object::{ObjectSymbolTable, RelocationTarget, SymbolKind};
    let (Some(relocs), Some(dynsym)) = (file.dynamic_relocations(), file.dynamic_symbol_table())
    else {
        return Vec::new();
    };
    let versions = file
        .elf_section_table()
        .versions(file.endian(), file.data())
        .ok()
        .flatten();
    let mut slots = Vec::new();
    for (got, r) in relocs {
        let RelocationFlags::Elf { r_type: t } = r.flags() else {
            continue;
        };
        let RelocationTarget::Symbol(index) = r.target() else {
            continue;
        };
        if t != r_type {
            continue;
        }
        let Ok(sym) = dynsym.symbol_by_index(index) else {
            continue;
        };
        if undefined_functions && (!sym.is_undefined() || sym.kind() != SymbolKind::Text) {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        let symbol = name.split('@').next().unwrap_or(name).to_string();
        if !symbol.is_empty() {
            let version = versions.as_ref().and_then(|v| {
                let needed = v.version(v.version_index(file.endian(), index)).ok()??;
                Some(String::from_utf8_lossy(needed.name()).into_owned())
            });
            slots.push(JumpSlot {
                got,
                symbol,
                plt: r_type == R_X86_64_JUMP_SLOT,
                version,
            });
        }
    }
    slots
}
