//! `-a/--auto-args`: each function's argument and return value specs from
//! its DWARF, spelled as uftrace spells them (`arg1,arg2/s,fparg1/64`,
//! `retval/p`): an integer is `argN` (uftrace's default format), `char`
//! is `/c`, `char *` is `/s`, any other pointer `/p`, `float` and
//! `double` are `fpargN/32` and `/64` (numbered apart from the integers).
//! An enum is `/e:NAME` (its definition kept beside the specs, for the
//! views to name its values). A structure by value is `/tSIZE:NAME`, a
//! `std::string` by value `/S`, a `long double` `fpargN/80`. Where the
//! ABI's order of registers and stack no longer follows the arguments'
//! numbers (a structure by value, a structure returned in memory whose
//! address takes `rdi`, an argument on the stack), every spec of the
//! function says where its argument is (`%rdi+rsi`, `%xmm0`,
//! `%stack+2`), as uftrace writes them (see `super::sysv`). A function
//! with a type no spec describes gets none.

#![forbid(unsafe_code)]

use super::sysv::{self, Class, Layout, Passing};
use gimli::{AttributeValue, EndianSlice, LittleEndian};
use object::Object;
use shadowgraph_data::args::{Place, Reg};
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
    /// `long double` (80 bits, passed on the stack).
    LongDouble,
    /// A structure, union or class by value.
    Struct(Layout),
    /// A `std::string` by value (passed by reference).
    StdString,
    /// Not described by a spec.
    Unsupported,
}

/// Where the next argument goes, as the ABI hands out registers and stack.
struct Alloc {
    int: u8,
    sse: u8,
    /// The next stack word (1: the first above the return address).
    stack: u32,
    /// Some argument is not where its number says.
    explicit: bool,
}

impl Alloc {
    fn int_reg(&mut self) -> Place {
        if self.int < 6 {
            self.int += 1;
            return Place::Regs(vec![Reg::Int(self.int - 1)]);
        }
        self.stack(8, 8)
    }

    fn sse_reg(&mut self) -> Place {
        if self.sse < 8 {
            self.sse += 1;
            return Place::Regs(vec![Reg::Xmm(self.sse - 1)]);
        }
        self.stack(8, 8)
    }

    fn stack(&mut self, size: u64, align: u64) -> Place {
        self.explicit = true;
        if align >= 16 && self.stack.is_multiple_of(2) {
            self.stack += 1; // words 1, 3, 5 … are 16-byte aligned
        }
        let at = self.stack;
        self.stack += size.div_ceil(8) as u32;
        Place::Stack(at)
    }

    /// A structure's place: its eightbytes in registers if there are
    /// enough of each kind left, else (or in memory) the stack.
    fn structure(&mut self, l: &Layout) -> Place {
        self.explicit = true;
        match &l.passing {
            Passing::Reference => self.int_reg(),
            Passing::Memory => self.stack(l.size, l.align),
            Passing::Regs(c) if c.is_empty() => Place::Stack(self.stack),
            Passing::Regs(c) => {
                let ints = c.iter().filter(|c| **c == Class::Int).count() as u8;
                let sses = c.len() as u8 - ints;
                if self.int + ints > 6 || self.sse + sses > 8 {
                    return self.stack(l.size, l.align);
                }
                let regs = c.iter().map(|c| match c {
                    Class::Int => (Reg::Int(self.int), self.int += 1).0,
                    _ => (Reg::Xmm(self.sse), self.sse += 1).0,
                });
                Place::Regs(regs.collect())
            }
        }
    }
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
    // Every function symbol by address: a function's specs go to each of
    // its names (a C++ constructor's or destructor's variants are one
    // function under two symbols, C1/C2, D1/D2).
    let mut names: std::collections::HashMap<u64, Vec<String>> = Default::default();
    for sym in object::Object::symbols(file) {
        use object::ObjectSymbol;
        if sym.kind() == object::SymbolKind::Text && sym.address() != 0 {
            if let Ok(n) = sym.name() {
                names.entry(sym.address()).or_default().push(n.to_string());
            }
        }
    }
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
        // Every function with code, wherever its entry is: at the unit's
        // top, or inside a namespace, a class or another function (a
        // local class's member, a lambda).
        let mut functions = Vec::new();
        let mut cursor = unit.entries();
        while let Some((_, e)) = cursor.next_dfs()? {
            if e.tag() == gimli::DW_TAG_subprogram {
                if let Some(AttributeValue::Addr(low_pc)) = e.attr_value(gimli::DW_AT_low_pc)? {
                    functions.push((e.offset(), low_pc));
                }
            }
        }
        for (offset, low_pc) in functions {
            let mut tree = unit.entries_tree(Some(offset))?;
            let node = tree.root()?;
            let e = node.entry();
            // Its declaration: through the abstract instance a concrete
            // one (a C++ constructor's or destructor's variants, an
            // inlined function's copy) points to, then the declaration in
            // its class.
            let mut chain = Vec::new();
            let mut at = e.clone();
            for _ in 0..3 {
                let next = match at.attr_value(gimli::DW_AT_abstract_origin)? {
                    Some(v) => Some(v),
                    None => at.attr_value(gimli::DW_AT_specification)?,
                };
                let Some(AttributeValue::UnitRef(o)) = next else {
                    break;
                };
                at = unit.entry(o)?;
                chain.push(at.clone());
            }
            let attr = |at| -> Result<Option<AttributeValue<Slice<'_>>>, gimli::Error> {
                if let Some(v) = e.attr_value(at)? {
                    return Ok(Some(v));
                }
                for d in &chain {
                    if let Some(v) = d.attr_value(at)? {
                        return Ok(Some(v));
                    }
                }
                Ok(None)
            };
            let linkage = attr(gimli::DW_AT_linkage_name)?;
            let has_linkage = linkage.is_some();
            let Some(name) = linkage.or(attr(gimli::DW_AT_name)?) else {
                continue;
            };
            let symbol = dwarf
                .attr_string(&unit, name)?
                .to_string_lossy()
                .into_owned();
            let mut alloc = Alloc {
                int: 0,
                sse: 0,
                stack: 1,
                explicit: false,
            };
            let retval = match attr(gimli::DW_AT_type)? {
                None => None,
                Some(t) => match kind(&dwarf, &unit, t)? {
                    Kind::Unsupported => continue,
                    Kind::Int => Some("retval".to_string()),
                    Kind::Char => Some("retval/c".to_string()),
                    Kind::Str => Some("retval/s".to_string()),
                    Kind::Ptr => Some("retval/p".to_string()),
                    Kind::Float(bits) => Some(format!("retval/f{bits}")),
                    // In st(0), as uftrace reads it.
                    Kind::LongDouble => Some("retval/f80".to_string()),
                    Kind::Enum(name, def) => {
                        keep(def);
                        Some(format!("retval/e:{name}"))
                    }
                    Kind::StdString => {
                        // Returned in the caller's memory, its address in
                        // rax; the address is passed in rdi.
                        (alloc.int, alloc.explicit) = (1, true);
                        Some("retval/S".to_string())
                    }
                    Kind::Struct(l) => {
                        let place = match &l.passing {
                            Passing::Regs(c) => returned_in(c),
                            _ => {
                                (alloc.int, alloc.explicit) = (1, true);
                                Place::Index
                            }
                        };
                        Some(format!("retval/{}{}", struct_format(&l), place.text()))
                    }
                },
            };
            let mut args: Vec<(String, Place)> = Vec::new();
            let (mut int, mut fp) = (0, 0);
            let mut params = node.children();
            let mut supported = true;
            while let Some(p) = params.next()? {
                let p = p.entry();
                if p.tag() != gimli::DW_TAG_formal_parameter {
                    continue;
                }
                let t = match (
                    p.attr_value(gimli::DW_AT_type)?,
                    p.attr_value(gimli::DW_AT_abstract_origin)?,
                ) {
                    (Some(t), _) => t,
                    // A concrete instance's parameter: its type is its
                    // abstract one's.
                    (None, Some(AttributeValue::UnitRef(o))) => {
                        match unit.entry(o)?.attr_value(gimli::DW_AT_type)? {
                            Some(t) => t,
                            None => continue,
                        }
                    }
                    _ => continue,
                };
                let k = kind(&dwarf, &unit, t)?;
                match k {
                    Kind::Float(bits) => {
                        fp += 1;
                        args.push((format!("fparg{fp}/{bits}"), alloc.sse_reg()));
                        continue;
                    }
                    Kind::LongDouble => {
                        fp += 1;
                        args.push((format!("fparg{fp}/80"), alloc.stack(16, 16)));
                        continue;
                    }
                    _ => {}
                }
                int += 1;
                let place = match &k {
                    Kind::Struct(l) => alloc.structure(l),
                    _ => alloc.int_reg(),
                };
                let spec = match k {
                    Kind::Int => format!("arg{int}"),
                    Kind::Char => format!("arg{int}/c"),
                    Kind::Str => format!("arg{int}/s"),
                    Kind::Ptr => format!("arg{int}/p"),
                    Kind::StdString => format!("arg{int}/S"),
                    Kind::Struct(l) => format!("arg{int}/{}", struct_format(&l)),
                    Kind::Float(_) | Kind::LongDouble => unreachable!("taken above"),
                    Kind::Enum(name, def) => {
                        keep(def);
                        format!("arg{int}/e:{name}")
                    }
                    Kind::Unsupported => {
                        supported = false;
                        break;
                    }
                };
                args.push((spec, place));
            }
            if !supported {
                continue;
            }
            let args: Vec<String> = args
                .into_iter()
                .map(|(spec, place)| match alloc.explicit {
                    true => spec + &place.text(),
                    false => spec,
                })
                .collect();
            let args = (!args.is_empty()).then(|| args.join(","));
            let symbols = match names.get(&low_pc) {
                // A copy of the function under other names only (gcc's
                // `.constprop.0`, `.isra.0` clones): its parameters are
                // not the declared ones. (A function the DWARF names
                // without its symbol — a C++ one of internal linkage, a
                // lambda's `std::sort` — goes by the symbols at its
                // address, unless they are a clone's.)
                Some(at)
                    if !at.contains(&symbol)
                        && (has_linkage || at.iter().any(|n| n.contains('.'))) =>
                {
                    continue
                }
                Some(at) => at.clone(),
                None => vec![symbol],
            };
            for symbol in symbols {
                out.push(AutoSpec {
                    symbol,
                    args: args.clone(),
                    retval: retval.clone(),
                });
            }
        }
    }
    Ok(AutoSpecs {
        functions: out,
        enums,
    })
}

/// A structure's format: `tSIZE:NAME` (`tSIZE` for an anonymous one).
fn struct_format(l: &Layout) -> String {
    match &l.name {
        Some(n) => format!("t{}:{n}", l.size),
        None => format!("t{}", l.size),
    }
}

/// Where a structure returned in registers is: integer eightbytes in
/// rax then rdx, SSE ones in xmm0 then xmm1.
fn returned_in(classes: &[Class]) -> Place {
    let (mut int, mut sse) = (0, 0);
    let regs = classes.iter().map(|c| match c {
        Class::Int => {
            int += 1;
            [Reg::Rax, Reg::Int(2)][int - 1]
        }
        _ => {
            sse += 1;
            Reg::Xmm(sse - 1)
        }
    });
    match regs.collect::<Vec<_>>() {
        r if r.is_empty() => Place::Index,
        r => Place::Regs(r),
    }
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
                let name = match e.attr_value(gimli::DW_AT_name)? {
                    Some(v) => Some(dwarf.attr_string(unit, v)?.to_string_lossy().into_owned()),
                    None => None,
                };
                if name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("basic_string<char,"))
                {
                    return Ok(Kind::StdString);
                }
                return Ok(match sysv::layout(dwarf, unit, o, name) {
                    Some(l) => Kind::Struct(l),
                    None => Kind::Unsupported,
                });
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
                    (_, "long double") => Kind::LongDouble,
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
