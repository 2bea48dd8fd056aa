//! Arguments and return values recorded after an entry or exit record
//! (its `more` bit set), in uftrace's layout: the values of the function's
//! argument specs in order, each padded to 4 bytes — an integer or float
//! as its size, a string as a 2-byte length and its bytes, a char as one
//! byte — and the whole padded to 8. The data holds no sizes of its own:
//! a reader finds them in the specs the recording was made with
//! (`argspec:`/`retspec:` in uftrace's `info`), matched against the
//! function's name.

#![forbid(unsafe_code)]

use crate::pattern::FunctionName;

mod dump;
mod place;
mod spec;
mod specs;
pub use place::{Place, Reg, INT_REGS};
pub use spec::{ArgSpec, Fmt};
pub use specs::{is_arg_word, spec_entry, Enums, Specs};

/// The recorded values of `specs` (the arguments, or with `retval` the
/// return value), read from the start of `data`: how many bytes they
/// take (padded to 8), and their text as uftrace shows it (`1, "two"`).
/// `symbol` names a pointer's target, if it is a known function. None
/// when `data` is too short for them.
pub fn read(
    specs: &[ArgSpec],
    retval: bool,
    data: &[u8],
    symbol: &dyn Fn(u64) -> Option<String>,
    enums: &Enums,
) -> Option<(usize, String)> {
    let mut at = 0usize;
    let mut out = String::new();
    for s in specs.iter().filter(|s| s.retval == retval) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        let used = match s.fmt {
            Fmt::Str | Fmt::StdString => {
                let len = u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?) as usize;
                let bytes = data.get(at + 2..at + 2 + len)?;
                show_string(&mut out, bytes, s.fmt == Fmt::StdString);
                2 + len
            }
            Fmt::Char => {
                out.push('\'');
                escape_char(&mut out, *data.get(at)?);
                out.push('\'');
                1
            }
            Fmt::Struct(ref name) => {
                if let Some(n) = name.as_deref().filter(|n| *n != "<lambda") {
                    out.push_str(n);
                }
                out.push_str(if s.size > 0 { "{...}" } else { "{}" });
                s.size
            }
            _ => {
                let raw = data.get(at..at + s.size)?;
                show_number(&mut out, s, raw, symbol, enums);
                s.size
            }
        };
        at += used.next_multiple_of(4);
        if retval {
            break; // the first return value only, as uftrace reads it
        }
    }
    Some((at.next_multiple_of(8), out))
}

/// A string as uftrace 0.13 shows it: quoted, escaped, `s` after a
/// `std::string`. A null pointer was recorded as the text `NULL`, shown
/// quoted as any other; only the 4 bytes `ff ff ff ff` (uftrace's own
/// null marker, which its reader looks for) show as a bare `NULL`.
fn show_string(out: &mut String, bytes: &[u8], std_string: bool) {
    if bytes == [0xff; 4] {
        out.push_str("NULL");
        return;
    }
    // Up to the first NUL, as a C string prints.
    let bytes = &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())];
    out.push('"');
    if bytes.iter().any(|&b| b >= 0x80) {
        out.push_str(&String::from_utf8_lossy(bytes));
    } else {
        for &b in bytes {
            escape_char(out, b);
        }
    }
    out.push('"');
    if std_string {
        out.push('s');
    }
}

fn escape_char(out: &mut String, c: u8) {
    match c {
        0 => out.push_str("\\0"),
        8 => out.push_str("\\b"),
        b'\n' => out.push_str("\\n"),
        c => out.push(c as char),
    }
}

/// An x87 80-bit `long double` (64-bit mantissa with its integer bit,
/// 15-bit exponent, sign) as the nearest `f64`.
fn extended(b: &[u8; 16]) -> f64 {
    let mantissa = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let top = u16::from_le_bytes([b[8], b[9]]);
    let sign = if top & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from(top & 0x7fff);
    let v = match exp {
        0 if mantissa == 0 => 0.0,
        0x7fff if mantissa << 1 == 0 => f64::INFINITY,
        0x7fff => f64::NAN,
        // mantissa / 2^63 · 2^(exp − 16383), in two steps that stay in range.
        _ => mantissa as f64 * 2f64.powi((exp - 16383 - 63).clamp(-1100, 1100)),
    };
    sign * v
}

fn show_number(
    out: &mut String,
    s: &ArgSpec,
    raw: &[u8],
    symbol: &dyn Fn(u64) -> Option<String>,
    enums: &Enums,
) {
    let mut b = [0u8; 16];
    b[..raw.len()].copy_from_slice(raw);
    let u = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    // The value as a signed number of its size.
    let shift = 64 - 8 * s.size.min(8) as u32;
    let signed = ((u << shift) as i64) >> shift;
    let unsigned = (u << shift) >> shift;
    let hex = |v: u64| {
        if v == 0 {
            "0".to_string()
        } else {
            format!("{v:#x}")
        }
    };
    let text = match &s.fmt {
        Fmt::Auto
            if s.size == 8 && (0xffff_0000..=0xffff_ffff).contains(&u) && u != 0xffff_0000 =>
        {
            // A negative 32-bit value in a 64-bit register.
            (u as u32 as i32).to_string()
        }
        Fmt::Auto if !(-100_000..=100_000).contains(&signed) => hex(unsigned),
        Fmt::Auto | Fmt::Sint => signed.to_string(),
        Fmt::Uint if unsigned > 100_000 => hex(unsigned),
        Fmt::Uint => unsigned.to_string(),
        Fmt::Hex => hex(unsigned),
        Fmt::Float => match s.size {
            4 => format!("{:.6}", f32::from_le_bytes(b[..4].try_into().expect("4"))),
            10 => format!("{:.6}", extended(&b)),
            _ => format!("{:.6}", f64::from_le_bytes(b[..8].try_into().expect("8"))),
        },
        Fmt::Ptr => match symbol(u) {
            Some(name) => format!("&{name}"),
            None => hex(u),
        },
        Fmt::Enum(name) => enums
            .show(name, signed as i32 as i64)
            .unwrap_or_else(|| format!("<ENUM?> {:x}", signed as i32)),
        Fmt::Str | Fmt::StdString | Fmt::Char | Fmt::Struct(_) => unreachable!("shown above"),
    };
    out.push_str(&text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_show_as_uftrace_shows_them() {
        let mut e = Enums::default();
        e.add("enum color {RED,GREEN=5};enum flag { A = 0x1, B = 02, C = 4, D = C };enum bits { X = 1, Y = 2, Z = 4 };");
        assert_eq!(e.show("color", 5).as_deref(), Some("GREEN"));
        assert_eq!(e.show("color", 0).as_deref(), Some("RED"));
        assert_eq!(e.show("flag", 3).as_deref(), Some("B|A"));
        assert_eq!(e.show("bits", 11).as_deref(), Some("Z|Y|X+0x4"));
        assert_eq!(e.show("flag", 4).as_deref(), Some("C"));
        assert_eq!(
            e.show("color", 200_000).as_deref(),
            Some("GREEN|RED+0x30d3b")
        );
        assert_eq!(e.show("nosuch", 1), None);
    }

    #[test]
    fn specs_parse_as_uftrace_writes_them() {
        let a = ArgSpec::parse("arg2/i32").unwrap();
        assert_eq!((a.index, a.fmt, a.size, a.retval), (2, Fmt::Sint, 4, false));
        let f = ArgSpec::parse("fparg1").unwrap();
        assert_eq!((f.fmt, f.size), (Fmt::Float, 8));
        let r = ArgSpec::parse("retval/f64").unwrap();
        assert_eq!((r.retval, r.fmt, r.size), (true, Fmt::Float, 8));
        assert_eq!(ArgSpec::parse("arg1/c").unwrap().size, 1);
        assert_eq!(
            ArgSpec::parse("arg3/e:uft_mmap_prot").unwrap().fmt,
            Fmt::Enum("uft_mmap_prot".into())
        );
        assert_eq!(ArgSpec::parse("arg1%stack+1").unwrap().index, 1);
        assert!(ArgSpec::parse("arg1/q").is_err());
        assert!(ArgSpec::parse("arg/x").is_err());
        assert!(ArgSpec::parse("arg1/x12").is_err());
    }

    #[test]
    fn long_doubles_read_as_their_nearest_double() {
        let f80 = |mantissa: u64, top: u16| {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&mantissa.to_le_bytes());
            b[8..10].copy_from_slice(&top.to_le_bytes());
            extended(&b)
        };
        assert_eq!(f80(0xc000_0000_0000_0000, 0x3fff), 1.5);
        assert_eq!(f80(0x8000_0000_0000_0000, 0xc000), -2.0);
        assert_eq!(f80(0, 0), 0.0);
        assert_eq!(f80(0x8000_0000_0000_0000, 0x7fff), f64::INFINITY);
        let tiny = f80(0x8637_bd05_af6c_69b6, 0xbfec); // -0.000002
        assert!((tiny + 0.000002).abs() < 1e-18, "{tiny}");
    }

    #[test]
    fn values_read_and_show_as_uftrace_shows_them() {
        let specs: Vec<ArgSpec> = ["arg1", "arg2/s", "arg3/x", "arg4/c", "retval/i32"]
            .iter()
            .map(|s| ArgSpec::parse(s).unwrap())
            .collect();
        let mut d = Vec::new();
        d.extend_from_slice(&(-5i64).to_le_bytes());
        d.extend_from_slice(&5u16.to_le_bytes());
        d.extend_from_slice(b"hello\0");
        d.extend_from_slice(&[0; 0]); // 2 + 5 = 7, padded to 8
        d.truncate(8 + 7);
        d.push(0);
        d.extend_from_slice(&255u64.to_le_bytes());
        d.extend_from_slice(&[b'a', 0, 0, 0]);
        let none = |_| None;
        let (n, text) = read(&specs, false, &d, &none, &Enums::default()).unwrap();
        assert_eq!(text, r#"-5, "hello", 0xff, 'a'"#);
        assert_eq!(n, 32);
        let (n, text) = read(
            &specs,
            true,
            &(-1i32).to_le_bytes(),
            &none,
            &Enums::default(),
        )
        .unwrap();
        assert_eq!((n, text.as_str()), (8, "-1"));
        assert!(read(&specs, false, &d[..10], &none, &Enums::default()).is_none());
        let big = 0x1234_5678u64.to_le_bytes();
        assert_eq!(
            read(&specs[..1], false, &big, &none, &Enums::default())
                .unwrap()
                .1,
            "0x12345678"
        );
    }
}

/// A recording's symbols (address, symbol), the names views show for
/// them, and where runs of them end, if the recording says.
pub type Symbols<'a> = (&'a [(u64, String)], &'a [String], Option<Vec<u64>>);

/// The specs of a recording resolved to its functions, for its record
/// streams: which symbols have arguments or a return value recorded.
#[derive(Debug, Default)]
pub struct ArgIndex {
    /// Symbol start addresses, ascending.
    addrs: Vec<u64>,
    /// Per symbol: its specs (empty: none).
    specs: Vec<std::sync::Arc<[ArgSpec]>>,
    /// Per symbol: its name (a pointer to it is shown as `&name`).
    names: Vec<String>,
    /// Where runs of symbols end, ascending, when the recording says
    /// (uftrace's): a symbol then spans up to the next symbol or end, and
    /// a pointer anywhere in it is shown by its name, as uftrace shows it;
    /// else only a pointer to a symbol's start is.
    ends: Option<Vec<u64>>,
    /// The enums `e:NAME` values are shown by.
    enums: Enums,
}

impl ArgIndex {
    /// Resolves `specs` over the symbols (address, symbol), their shown
    /// `names` and where runs of them end (if known), in the objects
    /// `module_of` names; None when no function has any.
    pub fn new(
        specs: &Specs,
        (symbols, names, ends): Symbols<'_>,
        module_of: impl Fn(u64) -> String,
    ) -> Option<ArgIndex> {
        if specs.is_empty() {
            return None;
        }
        let mut index = ArgIndex {
            enums: specs.enums.clone(),
            ends,
            ..ArgIndex::default()
        };
        for ((addr, symbol), name) in symbols.iter().zip(names) {
            let module = module_of(*addr);
            let f = FunctionName {
                function: name,
                symbol,
                module: &module,
                library: None,
            };
            index.addrs.push(*addr);
            index.specs.push(specs.of(&f).into());
            index.names.push(name.clone());
        }
        index.specs.iter().any(|s| !s.is_empty()).then_some(index)
    }

    /// The specs of the function holding `addr` (its nearest symbol at or
    /// below it).
    fn specs_at(&self, addr: u64) -> &[ArgSpec] {
        match self.addrs.partition_point(|&a| a <= addr) {
            0 => &[],
            i => &self.specs[i - 1],
        }
    }

    /// Reads the data after a record of the function at `addr` whose
    /// `more` bit is set (`retval`: an exit's) from `input`, and returns
    /// its text and how many bytes it took. An error says why it cannot be
    /// read: no spec applies to the function (its size is unknown), or the
    /// file ends inside it.
    pub fn read_after(
        &self,
        addr: u64,
        retval: bool,
        input: &mut impl std::io::Read,
    ) -> Result<(String, u64), String> {
        let (specs, buf, _) = self.take(addr, retval, input)?;
        read(specs, retval, &buf, &|p| self.symbol(p), &self.enums)
            .map(|(_, text)| (text, buf.len() as u64))
            .ok_or_else(|| "the data after a record is shorter than its specs".to_string())
    }

    /// As [`ArgIndex::read_after`], the data as uftrace's plain dump shows
    /// it: its length (before the padding to 8), then a line per value
    /// (`  args[0] d32: 0x00000007`).
    pub fn dump_after(
        &self,
        addr: u64,
        retval: bool,
        input: &mut impl std::io::Read,
    ) -> Result<(usize, String, u64), String> {
        let (specs, buf, len) = self.take(addr, retval, input)?;
        dump::lines(specs, retval, &buf, &|p| self.symbol(p), &self.enums)
            .map(|text| (len, text, buf.len() as u64))
            .ok_or_else(|| "the data after a record is shorter than its specs".to_string())
    }

    /// The specs of the function at `addr` and the data after its record
    /// read from `input` (padded to 8), and its length before the padding.
    fn take(
        &self,
        addr: u64,
        retval: bool,
        input: &mut impl std::io::Read,
    ) -> Result<(&[ArgSpec], Vec<u8>, usize), String> {
        let specs = self.specs_at(addr);
        if !specs.iter().any(|s| s.retval == retval) {
            return Err(format!(
                "a record at {addr:#x} carries {} but no spec of the recording names its function",
                if retval {
                    "a return value"
                } else {
                    "arguments"
                }
            ));
        }
        let mut buf = Vec::new();
        let mut take = |n: usize, buf: &mut Vec<u8>| {
            let at = buf.len();
            buf.resize(at + n, 0);
            input
                .read_exact(&mut buf[at..])
                .map_err(|e| format!("the data after a record: {e}"))
        };
        for s in specs.iter().filter(|s| s.retval == retval) {
            let at = buf.len();
            let len = match s.fmt {
                Fmt::Str | Fmt::StdString => {
                    take(2, &mut buf)?;
                    2 + u16::from_le_bytes([buf[at], buf[at + 1]]) as usize
                }
                Fmt::Char => 1,
                _ => s.size,
            };
            take(len.next_multiple_of(4) - (buf.len() - at), &mut buf)?;
            if retval {
                break;
            }
        }
        let len = buf.len();
        take(buf.len().next_multiple_of(8) - buf.len(), &mut buf)?;
        Ok((specs, buf, len))
    }

    /// The name a pointer to `p` is shown by: the symbol it points to the
    /// start of, or into where the recording says where runs of symbols
    /// end.
    fn symbol(&self, p: u64) -> Option<String> {
        let i = self.addrs.partition_point(|&a| a <= p).checked_sub(1)?;
        let within = match &self.ends {
            _ if self.addrs[i] == p => true,
            Some(ends) => ends
                .get(ends.partition_point(|&e| e <= self.addrs[i]))
                .is_some_and(|&end| p < end),
            None => false,
        };
        within.then(|| self.names[i].clone())
    }
}
