//! Arguments and return values as uftrace's plain dump shows them: a line
//! per value with its format and size (`args[2] d64: 0x000000000000002c`,
//! `retval str: hello`), a structure's bytes in rows of 16.

#![forbid(unsafe_code)]

use super::{ArgSpec, Enums, Fmt};
use std::fmt::Write;

/// uftrace's letter of each format, in its order (`ARG_SPEC_CHARS`).
fn letter(fmt: &Fmt) -> char {
    match fmt {
        Fmt::Auto => 'd',
        Fmt::Sint => 'i',
        Fmt::Uint => 'u',
        Fmt::Hex => 'x',
        Fmt::Str => 's',
        Fmt::Char => 'c',
        Fmt::Float => 'f',
        Fmt::StdString => 'S',
        Fmt::Ptr => 'p',
        Fmt::Enum(_) => 'e',
        Fmt::Struct(_) => 't',
    }
}

/// The lines of the values of `specs` (the arguments, or with `retval`
/// the return value) at the start of `data`, as uftrace's `dump` writes
/// them after `[args ]` or `[retval]`; None when `data` is too short.
pub(super) fn lines(
    specs: &[ArgSpec],
    retval: bool,
    data: &[u8],
    symbol: &dyn Fn(u64) -> Option<String>,
    enums: &Enums,
) -> Option<String> {
    let mut out = String::new();
    let mut at = 0usize;
    for (i, s) in specs.iter().filter(|s| s.retval == retval).enumerate() {
        let head = match retval {
            true => "  retval".to_string(),
            false => format!("  args[{i}]"),
        };
        let number = |n: usize| -> Option<u64> {
            let mut b = [0u8; 8];
            b[..n.min(8)].copy_from_slice(data.get(at..at + n.min(8))?);
            Some(u64::from_le_bytes(b))
        };
        let used = match &s.fmt {
            Fmt::Str | Fmt::StdString => {
                let len = u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?) as usize;
                let bytes = data.get(at + 2..at + 2 + len)?;
                let text = match bytes.get(..4) {
                    Some([0xff, 0xff, 0xff, 0xff]) => "NULL".into(),
                    _ => String::from_utf8_lossy(bytes),
                };
                let kind = if s.fmt == Fmt::Str {
                    "str"
                } else {
                    "std::string"
                };
                writeln!(out, "{head} {kind}: {text}").ok()?;
                2 + len
            }
            Fmt::Ptr => {
                let v = number(s.size)?;
                match symbol(v) {
                    Some(name) => writeln!(out, "{head} p: {v:x} (&{name})").ok()?,
                    // (C's %p, which the return value's line uses for 0.)
                    None if v == 0 && retval => writeln!(out, "{head} p: (nil)").ok()?,
                    None if v == 0 => writeln!(out, "{head} p: 0").ok()?,
                    None => writeln!(out, "{head} p: {v:#x}").ok()?,
                }
                s.size
            }
            Fmt::Enum(name) if !retval => {
                let v = number(s.size)?;
                let shift = 64 - 8 * s.size.clamp(1, 8) as u32;
                let signed = ((v << shift) as i64) >> shift;
                let text = enums.show(name, signed).unwrap_or_default();
                writeln!(out, "{head} enum {name}: {text} ({signed})").ok()?;
                s.size
            }
            Fmt::Struct(name) => {
                let bytes = data.get(at..at + s.size)?;
                write!(out, "{head} struct {}:", name.as_deref().unwrap_or("")).ok()?;
                for (c, b) in bytes.iter().enumerate() {
                    if c % 16 == 0 {
                        out.push_str("\n\t");
                    }
                    write!(out, "{b:02x} ").ok()?;
                    if c % 8 == 7 {
                        out.push(' ');
                    }
                }
                out.push('\n');
                s.size
            }
            fmt => {
                let v = number(s.size)?;
                let (bits, width) = (s.size * 8, s.size * 2);
                writeln!(out, "{head} {}{bits}: 0x{v:0width$x}", letter(fmt)).ok()?;
                s.size
            }
        };
        at += used.next_multiple_of(4);
        if retval {
            break;
        }
    }
    Some(out)
}
