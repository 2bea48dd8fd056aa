//! `-a/--auto-args`: each function's argument and return value specs from
//! its DWARF, spelled as uftrace spells them (`arg1,arg2/s,fparg1/64`,
//! `retval/p`): an integer is `argN` (uftrace's default format), `char`
//! is `/c`, `char *` is `/s`, any other pointer `/p`, `float` and
//! `double` are `fpargN/32` and `/64` (numbered apart from the integers).
//! An enum is `/e:NAME` (its definition kept beside the specs, for the
//! views to name its values). A function passing or returning what a
//! recording does not capture yet (a structure or a `std::string` by
//! value) gets no specs.

#![forbid(unsafe_code)]

use gimli::{AttributeValue, EndianSlice, LittleEndian};
use object::Object;
use std::path::Path;

type Slice<'d> = EndianSlice<'d, LittleEndian>;
type Unit<'d> = gimli::Unit<Slice<'d>>;

/// One function's specs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoSpec {
    /// Its symbol (the linkage name where there is one).
    pub symbol: String,
    /// Its arguments' specs, comma-separated (`None`: it takes none).
    pub args: Option<String>,
    /// Its return value's spec (`None`: it returns nothing).
    pub retval: Option<String>,
}

/// The specs of an object's functions, and the enums they name
/// (`enum NAME {A=0,B=5}`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AutoSpecs {
    /// Per function.
    pub functions: Vec<AutoSpec>,
    /// The definitions of the enums the specs name.
    pub enums: Vec<String>,
}

/// What a parameter or return type is, as a spec sees it.
enum Kind {
    Int,
    /// An enum: its name and its definition.
    Enum(String, String),
    Char,
    Str,
    Ptr,
    Float(u64),
    /// Not captured (a structure, a union, `std::string`, `long double`).
    Unsupported,
}

/// The specs of the functions of the object at `path` defined with
/// DWARF (none without).
pub fn auto_specs(path: &Path) -> Result<AutoSpecs, String> {
    super::lines::with_object(path, |file| {
        if file.section_by_name(".debug_info").is_none() {
            return Ok(AutoSpecs::default());
        }
        read(file).map_err(|e| format!("{}: {e}", path.display()))
    })
}

fn read(file: &object::File<'_>) -> Result<AutoSpecs, gimli::Error> {
    let owned = super::lines::sections(file)?;
    let dwarf = owned.borrow(|s| Slice::new(s, LittleEndian));
    let mut out = Vec::new();
    let mut enums: Vec<String> = Vec::new();
    let mut keep = |def: String| {
        if !enums.contains(&def) {
            enums.push(def);
        }
    };
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        let mut tree = unit.entries_tree(None)?;
        let root = tree.root()?;
        let mut children = root.children();
        while let Some(node) = children.next()? {
            let e = node.entry();
            if e.tag() != gimli::DW_TAG_subprogram
                || !matches!(
                    e.attr_value(gimli::DW_AT_low_pc)?,
                    Some(AttributeValue::Addr(_))
                )
            {
                continue;
            }
            let decl = match e.attr_value(gimli::DW_AT_specification)? {
                Some(AttributeValue::UnitRef(o)) => Some(unit.entry(o)?),
                _ => None,
            };
            let attr = |at| -> Result<Option<AttributeValue<Slice<'_>>>, gimli::Error> {
                match e.attr_value(at)? {
                    Some(v) => Ok(Some(v)),
                    None => decl.as_ref().map_or(Ok(None), |d| d.attr_value(at)),
                }
            };
            let Some(name) = attr(gimli::DW_AT_linkage_name)?.or(attr(gimli::DW_AT_name)?) else {
                continue;
            };
            let symbol = dwarf
                .attr_string(&unit, name)?
                .to_string_lossy()
                .into_owned();
            let retval = match attr(gimli::DW_AT_type)? {
                None => None,
                Some(t) => match kind(&dwarf, &unit, t)? {
                    Kind::Unsupported => continue,
                    Kind::Int => Some("retval".to_string()),
                    Kind::Char => Some("retval/c".to_string()),
                    Kind::Str => Some("retval/s".to_string()),
                    Kind::Ptr => Some("retval/p".to_string()),
                    Kind::Float(bits) => Some(format!("retval/f{bits}")),
                    Kind::Enum(name, def) => {
                        keep(def);
                        Some(format!("retval/e:{name}"))
                    }
                },
            };
            let mut args = Vec::new();
            let (mut int, mut fp) = (0, 0);
            let mut params = node.children();
            let mut supported = true;
            while let Some(p) = params.next()? {
                let p = p.entry();
                if p.tag() != gimli::DW_TAG_formal_parameter {
                    continue;
                }
                let Some(t) = p.attr_value(gimli::DW_AT_type)? else {
                    continue;
                };
                let k = kind(&dwarf, &unit, t)?;
                if let Kind::Float(bits) = k {
                    fp += 1;
                    args.push(format!("fparg{fp}/{bits}"));
                    continue;
                }
                int += 1;
                args.push(match k {
                    Kind::Int => format!("arg{int}"),
                    Kind::Char => format!("arg{int}/c"),
                    Kind::Str => format!("arg{int}/s"),
                    Kind::Ptr => format!("arg{int}/p"),
                    Kind::Float(_) => unreachable!("taken above"),
                    Kind::Enum(name, def) => {
                        keep(def);
                        format!("arg{int}/e:{name}")
                    }
                    Kind::Unsupported => {
                        supported = false;
                        break;
                    }
                });
            }
            if !supported {
                continue;
            }
            out.push(AutoSpec {
                symbol,
                args: (!args.is_empty()).then(|| args.join(",")),
                retval,
            });
        }
    }
    Ok(AutoSpecs {
        functions: out,
        enums,
    })
}

/// What the type `t` refers to is, following typedefs and qualifiers.
fn kind(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &Unit<'_>,
    t: AttributeValue<Slice<'_>>,
) -> Result<Kind, gimli::Error> {
    let mut pointers = 0;
    let mut at = t;
    // The nearest typedef's name (an anonymous enum goes by it).
    let mut alias: Option<String> = None;
    // (A bound: a cycle in broken DWARF ends here.)
    for _ in 0..64 {
        let AttributeValue::UnitRef(o) = at else {
            return Ok(Kind::Unsupported);
        };
        let e = unit.entry(o)?;
        match e.tag() {
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type
            | gimli::DW_TAG_ptr_to_member_type => pointers += 1,
            gimli::DW_TAG_subroutine_type if pointers > 0 => return Ok(Kind::Ptr),
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type
                if pointers == 0 =>
            {
                return Ok(Kind::Unsupported)
            }
            gimli::DW_TAG_typedef if alias.is_none() => {
                if let Some(v) = e.attr_value(gimli::DW_AT_name)? {
                    alias = Some(dwarf.attr_string(unit, v)?.to_string_lossy().into_owned());
                }
            }
            gimli::DW_TAG_enumeration_type if pointers == 0 => {
                let name = match e.attr_value(gimli::DW_AT_name)? {
                    Some(v) => Some(dwarf.attr_string(unit, v)?.to_string_lossy().into_owned()),
                    None => alias,
                };
                let Some(name) =
                    name.filter(|n| n.starts_with(|c: char| c.is_alphabetic() || c == '_'))
                else {
                    return Ok(Kind::Int);
                };
                let mut items = Vec::new();
                let mut tree = unit.entries_tree(Some(o))?;
                let mut children = tree.root()?.children();
                while let Some(c) = children.next()? {
                    let c = c.entry();
                    let (Some(n), Some(v)) = (
                        c.attr_value(gimli::DW_AT_name)?,
                        c.attr_value(gimli::DW_AT_const_value)?,
                    ) else {
                        continue;
                    };
                    let n = dwarf.attr_string(unit, n)?.to_string_lossy().into_owned();
                    let v = match v {
                        AttributeValue::Sdata(v) => v,
                        AttributeValue::Udata(v) => v as i64,
                        AttributeValue::Data1(v) => v as i8 as i64,
                        AttributeValue::Data2(v) => v as i16 as i64,
                        AttributeValue::Data4(v) => v as i32 as i64,
                        AttributeValue::Data8(v) => v as i64,
                        _ => continue,
                    };
                    items.push(format!("{n}={v}"));
                }
                if items.is_empty() {
                    return Ok(Kind::Int);
                }
                let def = format!("enum {name} {{{}}}", items.join(","));
                return Ok(Kind::Enum(name, def));
            }
            gimli::DW_TAG_base_type => {
                let name = match e.attr_value(gimli::DW_AT_name)? {
                    Some(v) => dwarf.attr_string(unit, v)?.to_string_lossy().into_owned(),
                    None => String::new(),
                };
                return Ok(match (pointers, name.as_str()) {
                    (1, "char") => Kind::Str,
                    (p, _) if p > 0 => Kind::Ptr,
                    (_, "char") => Kind::Char,
                    (_, "float") => Kind::Float(32),
                    (_, "double") => Kind::Float(64),
                    (_, "long double") => Kind::Unsupported,
                    _ => Kind::Int,
                });
            }
            _ => {}
        }
        match e.attr_value(gimli::DW_AT_type)? {
            Some(next) => at = next,
            // `void *` (or a pointer to an incomplete type).
            None if pointers > 0 => return Ok(Kind::Ptr),
            None => return Ok(Kind::Unsupported),
        }
    }
    Ok(Kind::Unsupported)
}
