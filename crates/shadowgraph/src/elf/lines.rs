//! Where each function of an object is declared (source file and line),
//! from its DWARF, or its separate debug file's when the object has none:
//! what `--srcline` shows, as uftrace reads it (the subprogram's
//! `DW_AT_decl_file` and `DW_AT_decl_line`, the file named as the
//! compiler was given it).

#![forbid(unsafe_code)]

use gimli::{AttributeValue, EndianSlice, LittleEndian};
use object::{Object, ObjectSection, ObjectSegment};
use std::borrow::Cow;
use std::path::Path;

/// A function's declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    /// Its entry, relative to the object's first loadable segment (as the
    /// offsets of uftrace's `.sym` and `.dbg` files are).
    pub offset: u64,
    /// Its name in the DWARF (the linkage name where there is one).
    pub name: String,
    /// The source file, as the compiler was given it.
    pub file: String,
    /// The line of its declaration.
    pub line: u64,
}

type Slice<'d> = EndianSlice<'d, LittleEndian>;

/// The declarations of the functions of the object at `path` (from its
/// debug file if it carries no DWARF), by offset; empty without DWARF.
pub fn declared_functions(path: &Path) -> Result<Vec<Declared>, String> {
    with_object(path, |file| {
        // Offsets count from the first loadable segment's page, in the
        // object itself (a debug file's segments are the same).
        let base = file
            .segments()
            .map(|s| s.address() & !0xfff)
            .min()
            .unwrap_or(0);
        if file.section_by_name(".debug_info").is_some() {
            return read(file, base).map_err(|e| format!("{}: {e}", path.display()));
        }
        match super::debug::find(path, file) {
            Some(debug) => with_object(&debug, |d| {
                read(d, base).map_err(|e| format!("{}: {e}", debug.display()))
            }),
            None => Ok(Vec::new()),
        }
    })
}

/// `f` of the object file at `path`, mapped (debug files are often large);
/// errors name the file.
pub(super) fn with_object<T>(
    path: &Path,
    f: impl FnOnce(&object::File<'_>) -> Result<T, String>,
) -> Result<T, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let data = crate::sys::MappedFile::open(path).map_err(|e| at(&e))?;
    let file = object::File::parse(&*data).map_err(|e| at(&e))?;
    f(&file)
}

/// The DWARF sections of `file` (decompressed where they are; empty
/// where it has none), for `gimli`.
pub(super) fn sections<'d>(
    file: &object::File<'d>,
) -> Result<gimli::DwarfSections<Cow<'d, [u8]>>, gimli::Error> {
    gimli::DwarfSections::load(|id: gimli::SectionId| {
        Ok::<_, gimli::Error>(
            file.section_by_name(id.name())
                .and_then(|s| s.uncompressed_data().ok())
                .unwrap_or(Cow::Borrowed(&[])),
        )
    })
}

fn read(file: &object::File<'_>, base: u64) -> Result<Vec<Declared>, gimli::Error> {
    let owned = sections(file)?;
    let dwarf = owned.borrow(|s| Slice::new(s, LittleEndian));
    let mut out = Vec::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        let mut entries = unit.entries();
        while let Some((_, e)) = entries.next_dfs()? {
            if e.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let Some(AttributeValue::Addr(low)) = e.attr_value(gimli::DW_AT_low_pc)? else {
                continue; // a declaration, or only inlined
            };
            // The declaration may be another entry's (a C++ method
            // defined outside its class).
            let decl = match e.attr_value(gimli::DW_AT_specification)? {
                Some(AttributeValue::UnitRef(o)) => Some(unit.entry(o)?),
                _ => None,
            };
            let attr = |at| -> Result<Option<AttributeValue<Slice<'_>>>, gimli::Error> {
                match e.attr_value(at)? {
                    Some(v) => Ok(Some(v)),
                    None => match &decl {
                        Some(d) => d.attr_value(at),
                        None => Ok(None),
                    },
                }
            };
            let name = match attr(gimli::DW_AT_linkage_name)?.or(attr(gimli::DW_AT_name)?) {
                Some(v) => dwarf.attr_string(&unit, v)?.to_string_lossy().into_owned(),
                None => continue,
            };
            let (Some(AttributeValue::FileIndex(fi)), Some(AttributeValue::Udata(line))) =
                (attr(gimli::DW_AT_decl_file)?, attr(gimli::DW_AT_decl_line)?)
            else {
                continue;
            };
            let Some(file) = file_name(&dwarf, &unit, fi)? else {
                continue;
            };
            out.push(Declared {
                offset: low.wrapping_sub(base),
                name,
                file,
                line,
            });
        }
    }
    out.sort_by_key(|d| d.offset);
    out.dedup_by_key(|d| d.offset);
    Ok(out)
}

/// File `index` of the unit's line table: its name, after its directory
/// unless that is the compilation's own (as the compiler was given it).
fn file_name(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    index: u64,
) -> Result<Option<String>, gimli::Error> {
    let Some(program) = &unit.line_program else {
        return Ok(None);
    };
    let header = program.header();
    let Some(file) = header.file(index) else {
        return Ok(None);
    };
    let name = dwarf
        .attr_string(unit, file.path_name())?
        .to_string_lossy()
        .into_owned();
    let dir = match file.directory(header) {
        Some(d) if file.directory_index() != 0 => {
            dwarf.attr_string(unit, d)?.to_string_lossy().into_owned()
        }
        _ => String::new(),
    };
    Ok(Some(if dir.is_empty() || name.starts_with('/') {
        name
    } else {
        format!("{dir}/{name}")
    }))
}
