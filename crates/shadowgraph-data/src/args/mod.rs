//! Arguments and return values recorded after an entry or exit record
//! (its `more` bit set), in uftrace's layout: the values of the function's
//! argument specs in order, each padded to 4 bytes — an integer or float
//! as its size, a string as a 2-byte length and its bytes, a char as one
//! byte — and the whole padded to 8. The data holds no sizes of its own:
//! a reader finds them in the specs the recording was made with
//! (`argspec:`/`retspec:` in uftrace's `info`), matched against the
//! function's name.

#![forbid(unsafe_code)]

use crate::pattern::{FunctionName, Pattern};

mod place;
pub use place::{Place, Reg, INT_REGS};

/// How a value is shown (uftrace's `/FMT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fmt {
    /// `d` (the default): decimal, hexadecimal when beyond ±100000.
    Auto,
    /// `i`: signed decimal.
    Sint,
    /// `u`: unsigned, hexadecimal beyond 100000.
    Uint,
    /// `x`: hexadecimal.
    Hex,
    /// `s`: a C string.
    Str,
    /// `c`: a character.
    Char,
    /// `f`, and `fparg`: floating point.
    Float,
    /// `S`: a `std::string`.
    StdString,
    /// `p`: a pointer.
    Ptr,
    /// `e:NAME`: an enum, by its name.
    Enum(String),
    /// `t:SIZE[:NAME]`: a structure passed by value.
    Struct(Option<String>),
}

/// One argument or return value spec: `arg2/i32`, `fparg1`, `retval/s`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgSpec {
    /// The return value (else an argument).
    pub retval: bool,
    /// The argument's number (1 for `arg1`; 0 for the return value).
    pub index: u32,
    /// How it is shown.
    pub fmt: Fmt,
    /// Its size in bytes.
    pub size: usize,
    /// Where it is read (`%rdi`, `%stack+1`): the recorder's business,
    /// the data is the same.
    pub place: Place,
}

impl ArgSpec {
    /// Whether `other` names the same value (uftrace's test: the same
    /// argument number and kind, integer or floating point, or the same
    /// register or stack word).
    fn same_argument(&self, other: &ArgSpec) -> bool {
        let float = |a: &ArgSpec| a.fmt == Fmt::Float;
        self.retval == other.retval
            && match (&self.place, &other.place) {
                (Place::Index, Place::Index) => {
                    self.index == other.index && float(self) == float(other)
                }
                (p, q) => p == q,
            }
    }

    /// Parses one spec as uftrace writes it, with its placement if any
    /// (`arg1/t16:Pair%rdi+rsi`, `arg7%stack+1`).
    pub fn parse(text: &str) -> Result<ArgSpec, String> {
        let bad = |why: &str| format!("argument spec `{text}`: {why}");
        let (head, mut fmt, mut size, retval) = if let Some(r) = text.strip_prefix("retval") {
            (r, Fmt::Auto, 8, true)
        } else if let Some(r) = text.strip_prefix("fparg") {
            (r, Fmt::Float, 8, false)
        } else if let Some(r) = text.strip_prefix("arg") {
            (r, Fmt::Auto, 8, false)
        } else {
            return Err(bad("not argN, fpargN or retval"));
        };
        let digits = head.bytes().take_while(u8::is_ascii_digit).count();
        if !retval && digits == 0 {
            return Err(bad("no argument number"));
        }
        let index = head[..digits].parse().unwrap_or(0);
        let rest = &head[digits..];
        let (rest, place) = match rest.split_once('%') {
            Some((r, p)) => (r, Place::parse(p).map_err(|e| bad(&e))?),
            None => (rest, Place::Index),
        };
        if let Some(f) = rest.strip_prefix('/') {
            let mut chars = f.chars();
            let bits = match chars.next() {
                Some('d') => chars.as_str(),
                Some('i') => (fmt = Fmt::Sint, chars.as_str()).1,
                Some('u') => (fmt = Fmt::Uint, chars.as_str()).1,
                Some('x') => (fmt = Fmt::Hex, chars.as_str()).1,
                Some('s') => (fmt = Fmt::Str, chars.as_str()).1,
                Some('S') => (fmt = Fmt::StdString, chars.as_str()).1,
                Some('p') => (fmt = Fmt::Ptr, chars.as_str()).1,
                Some('c') => (fmt = Fmt::Char, size = 1, chars.as_str()).2,
                Some('f') => (fmt = Fmt::Float, chars.as_str()).1,
                Some('e') => {
                    let name = chars.as_str().strip_prefix(':').unwrap_or("");
                    if name.is_empty() {
                        return Err(bad("an enum needs its name (e:NAME)"));
                    }
                    fmt = Fmt::Enum(name.to_string());
                    ""
                }
                Some('t') => {
                    let t = chars.as_str();
                    let n = t.bytes().take_while(u8::is_ascii_digit).count();
                    size = t[..n].parse().map_err(|_| bad("a struct needs its size"))?;
                    let name = t[n..].strip_prefix(':').filter(|s| !s.is_empty());
                    fmt = Fmt::Struct(name.map(str::to_string));
                    ""
                }
                Some(d) if fmt == Fmt::Float && d.is_ascii_digit() => f,
                _ => return Err(bad("unknown format")),
            };
            if !bits.is_empty() {
                size = match (bits, &fmt) {
                    ("8", _) => 1,
                    ("16", _) => 2,
                    ("32", _) => 4,
                    ("64", _) => 8,
                    ("80", Fmt::Float) => 10,
                    _ => return Err(bad("unsupported size")),
                };
            }
        } else if !rest.is_empty() {
            return Err(bad("unexpected text"));
        }
        Ok(ArgSpec {
            retval,
            index,
            fmt,
            size,
            place,
        })
    }
}

/// The specs of a recording: for each pattern, its arguments and return
/// value, in the order given.
#[derive(Clone, Debug, Default)]
pub struct Specs {
    rules: Vec<(Pattern, Vec<ArgSpec>)>,
    /// By symbol (uftrace's `.dbg` files: `A:`/`R:` lines of a function).
    exact: std::collections::HashMap<String, Vec<ArgSpec>>,
    /// By symbol or name: built-in specs (`-a`'s of C library functions,
    /// uftrace's `argauto`/`retauto`), for what the others leave out.
    builtin: std::collections::HashMap<String, Vec<ArgSpec>>,
    /// Enums by name (`E:` lines, `enumauto`), for `e:NAME` values.
    pub enums: Enums,
}

/// Enum definitions (`enum NAME { A, B = 5, C };`), by name: each
/// value's name, largest value first.
#[derive(Clone, Debug, Default)]
pub struct Enums(std::collections::HashMap<String, Vec<(i64, String)>>);

impl Enums {
    /// Adds the definitions of `text` (`;`-separated, as uftrace writes
    /// them: C's syntax, a value a number or an earlier constant); one
    /// that cannot be read is left out.
    pub fn add(&mut self, text: &str) {
        for def in text.split(';') {
            let Some(rest) = def.trim().strip_prefix("enum") else {
                continue;
            };
            let Some((name, body)) = rest.split_once('{') else {
                continue;
            };
            let body = body.split('}').next().unwrap_or("");
            let mut vals: Vec<(i64, String)> = Vec::new();
            let mut next = 0i64;
            for item in body.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                let (n, v) = match item.split_once('=') {
                    Some((n, v)) => {
                        let v = v.trim();
                        let num = if let Some(h) = v.strip_prefix("0x") {
                            i64::from_str_radix(h, 16).ok()
                        } else if v.len() > 1 && v.starts_with('0') {
                            i64::from_str_radix(&v[1..], 8).ok()
                        } else {
                            v.parse().ok()
                        };
                        let num = num.or_else(|| vals.iter().find(|x| x.1 == v).map(|x| x.0));
                        let Some(num) = num else {
                            vals.clear();
                            break;
                        };
                        (n.trim(), num)
                    }
                    None => (item, next),
                };
                vals.push((v, n.to_string()));
                next = v + 1;
            }
            vals.sort_by_key(|v| std::cmp::Reverse(v.0));
            self.0.insert(name.trim().to_string(), vals);
        }
    }

    /// `val` of enum `name` as uftrace shows it: its constant, else the
    /// flags that make it up (`A|B`, `+0x..` for the rest), else the
    /// number (hexadecimal beyond ±100000); None for an unknown enum.
    pub fn show(&self, name: &str, val: i64) -> Option<String> {
        let vals = self.0.get(name)?;
        if let Some(v) = vals.iter().find(|v| v.0 == val) {
            return Some(v.1.clone());
        }
        let (mut left, mut parts) = (val, Vec::new());
        for (v, n) in vals {
            if *v <= left {
                left -= v;
                parts.push(n.as_str());
            }
            if left == 0 {
                break;
            }
        }
        Some(match (parts.is_empty(), left) {
            (false, 0) => parts.join("|"),
            (false, l) => format!("{}+{l:#x}", parts.join("|")),
            (true, _) if val.unsigned_abs() > 100_000 => format!("{:#x}", val as i32),
            (true, _) => val.to_string(),
        })
    }
}

impl Specs {
    /// The specs a recording's `info` names: uftrace's `argspec` and
    /// `retspec` (patterns as its `pattern_type` says), with `auto-args`
    /// the built-in ones, and the built-in enums (`enumauto`).
    pub fn recorded(info: &crate::meta::Info) -> Result<Specs, String> {
        let regex = info.get("pattern_type").unwrap_or("regex") == "regex";
        let mut specs = Specs::default();
        for key in ["argspec", "retspec"] {
            if let Some(list) = info.get(key).filter(|l| l.contains('@')) {
                specs.add_list(list, regex)?;
            }
        }
        if info.get("auto-args") == Some("1") {
            for key in ["argauto", "retauto"] {
                specs.add_builtin(info.get(key).unwrap_or(""))?;
            }
        }
        specs.enums.add(info.get("enumauto").unwrap_or(""));
        Ok(specs)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.exact.is_empty() && self.builtin.is_empty()
    }

    /// Adds built-in specs: uftrace's `NAME@spec,…;…` list of plain
    /// names (its `argauto` or `retauto`). A function gets their
    /// arguments only if no other spec gives it any, and their return
    /// value only if none gives it one (as uftrace's `-a` yields to
    /// `-A`, `-R` and DWARF).
    pub fn add_builtin(&mut self, list: &str) -> Result<(), String> {
        for entry in list.split(';').filter(|e| !e.is_empty()) {
            let (name, specs) = list_entry(entry)?;
            self.builtin
                .entry(name.to_string())
                .or_default()
                .extend(specs);
        }
        Ok(())
    }

    /// Adds the specs of the function whose symbol is `symbol`: `list` as
    /// a `.dbg` file's `A:` or `R:` line has it (`@arg1,arg2/s`).
    pub fn add_exact(&mut self, symbol: &str, list: &str) -> Result<(), String> {
        let specs = list
            .trim_start_matches('@')
            .split(',')
            .filter(|s| !s.is_empty())
            .map(ArgSpec::parse)
            .collect::<Result<Vec<_>, _>>()?;
        self.exact
            .entry(symbol.to_string())
            .or_default()
            .extend(specs);
        Ok(())
    }

    /// Adds uftrace's `FUNC@spec,spec;FUNC@…` list (`argspec:` and
    /// `retspec:` lines of its `info`); `regex`: its patterns are regular
    /// expressions (uftrace's default `pattern_type`), a name without
    /// their special characters meaning itself. Actions other than
    /// argument specs (triggers) are skipped.
    pub fn add_list(&mut self, list: &str, regex: bool) -> Result<(), String> {
        for entry in list.split(';').filter(|e| !e.is_empty()) {
            let (func, module, args) = spec_entry(entry)?;
            if args.is_empty() {
                continue;
            }
            let special = |c: char| ".^$*+?()[]{}|\\".contains(c);
            let text = if regex && func.contains(special) {
                format!("/{func}/")
            } else {
                func.to_string()
            };
            let text = match module {
                Some(m) => format!("{text}@{m}"),
                None => text,
            };
            let pattern = Pattern::parse(&text).map_err(|e| e.to_string())?;
            self.rules.push((pattern, args));
        }
        Ok(())
    }

    /// The specs that apply to a function, in order (arguments and the
    /// return value together, as uftrace lists them).
    pub fn of(&self, name: &FunctionName<'_>) -> Vec<ArgSpec> {
        // As uftrace adds them: each argument once, where it was first
        // named; a later spec of it changes its format, unless the earlier
        // one named the function itself and the later is a pattern.
        let mut merged: Vec<(ArgSpec, bool)> = Vec::new();
        let mut add =
            |a: &ArgSpec, exact: bool| match merged.iter_mut().find(|(o, _)| o.same_argument(a)) {
                Some(o) if exact || !o.1 => *o = (a.clone(), exact),
                Some(_) => {}
                None => merged.push((a.clone(), exact)),
            };
        for a in self.exact.get(name.symbol).into_iter().flatten() {
            add(a, true);
        }
        for (p, specs) in self.rules.iter().filter(|(p, _)| p.matches(name)) {
            for a in specs {
                add(a, p.is_exact());
            }
        }
        let mut found: Vec<ArgSpec> = merged.into_iter().map(|(a, _)| a).collect();
        let builtin = (self.builtin.get(name.symbol))
            .or_else(|| self.builtin.get(name.function))
            .into_iter()
            .flatten();
        let (args, ret) = (
            found.iter().any(|a| !a.retval),
            found.iter().any(|a| a.retval),
        );
        found.extend(
            builtin
                .filter(|a| if a.retval { !ret } else { !args })
                .cloned(),
        );
        found
    }
}

/// One `FUNC@spec,spec` entry of a list: the function and its argument
/// and return value specs (other actions, triggers, left out).
fn list_entry(entry: &str) -> Result<(&str, Vec<ArgSpec>), String> {
    let (func, _, specs) = spec_entry(entry)?;
    Ok((func, specs))
}

/// Whether a word after a spec's `@` is an argument spec.
pub fn is_arg_word(w: &str) -> bool {
    w.starts_with("arg") || w.starts_with("fparg") || w.starts_with("retval")
}

/// Whether a word after a spec's `@` is a trigger's action (which
/// argument lists pass over).
fn is_action_word(w: &str) -> bool {
    w.contains('=')
        || [
            "trace",
            "trace_on",
            "trace_off",
            "recover",
            "backtrace",
            "finish",
            "filter",
            "notrace",
            "hide",
            "caller",
        ]
        .contains(&w)
}

/// One `FUNC@word,word` entry as uftrace takes it: the function, the
/// module a word that is neither a spec nor an action names (`plt`: the
/// library calls; else an object's name), and the specs.
pub fn spec_entry(entry: &str) -> Result<(&str, Option<&str>, Vec<ArgSpec>), String> {
    let (func, words) = entry
        .split_once('@')
        .ok_or_else(|| format!("argument spec `{entry}`: no `@`"))?;
    let mut module = None;
    let mut specs = Vec::new();
    for w in words.split(',').filter(|w| !w.is_empty()) {
        if is_arg_word(w) {
            specs.push(ArgSpec::parse(w)?);
        } else if !is_action_word(w) {
            if let Some(m) = module {
                return Err(format!(
                    "argument spec `{entry}`: two modules, `{m}` and `{w}`"
                ));
            }
            module = Some(w);
        }
    }
    Ok((func, module, specs))
}

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
        take(buf.len().next_multiple_of(8) - buf.len(), &mut buf)?;
        let symbol = |p: u64| {
            let i = self.addrs.partition_point(|&a| a <= p).checked_sub(1)?;
            let within = match &self.ends {
                _ if self.addrs[i] == p => true,
                Some(ends) => ends
                    .get(ends.partition_point(|&e| e <= self.addrs[i]))
                    .is_some_and(|&end| p < end),
                None => false,
            };
            within.then(|| self.names[i].clone())
        };
        read(specs, retval, &buf, &symbol, &self.enums)
            .map(|(_, text)| (text, buf.len() as u64))
            .ok_or_else(|| "the data after a record is shorter than its specs".to_string())
    }
}
