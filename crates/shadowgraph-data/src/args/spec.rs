//! One argument or return value spec (uftrace's `arg1/i32%rdi`).

use super::place::Place;

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
    pub(crate) fn same_argument(&self, other: &ArgSpec) -> bool {
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
