//! Where an argument is read at a call's entry: uftrace's placements
//! after a spec, `%rdi`, `%rdi+rsi` (a structure's eightbytes, one
//! register each), `%xmm0`, `%stack+N` (`%stackN`): the Nth word above
//! the return address, 1 the first. Without one, `argN` is the Nth
//! integer argument register (then the stack) and `fpargN` xmmN-1. A
//! structure returned in registers says which (`retval/t16:P%rax+xmm0`).

#![forbid(unsafe_code)]

/// An argument register of x86-64 SysV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reg {
    /// An integer argument register by its order: 0 `rdi`, 1 `rsi`, 2
    /// `rdx`, 3 `rcx`, 4 `r8`, 5 `r9`.
    Int(u8),
    /// `xmm0`–`xmm7` (its low eight bytes).
    Xmm(u8),
    /// `rax`: where a return value's first eight bytes of integer class
    /// are (`rdx` its second's).
    Rax,
}

/// The integer argument registers, in order.
pub const INT_REGS: [&str; 6] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9"];

impl Reg {
    /// The register named `name` (either case).
    pub fn parse(name: &str) -> Option<Reg> {
        let name = name.to_ascii_lowercase();
        if name == "rax" {
            return Some(Reg::Rax);
        }
        if let Some(i) = INT_REGS.iter().position(|r| *r == name) {
            return Some(Reg::Int(i as u8));
        }
        match name.strip_prefix("xmm")?.as_bytes() {
            [d @ b'0'..=b'7'] => Some(Reg::Xmm(d - b'0')),
            _ => None,
        }
    }

    /// Its name, as the specs spell it.
    pub fn name(self) -> String {
        match self {
            Reg::Int(i) => INT_REGS[i as usize].to_string(),
            Reg::Xmm(i) => format!("xmm{i}"),
            Reg::Rax => "rax".to_string(),
        }
    }
}

/// Where an argument is read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Place {
    /// By its number (no placement given).
    #[default]
    Index,
    /// In these registers, eight bytes from each in turn.
    Regs(Vec<Reg>),
    /// From the `N`th word above the return address on (1: the first).
    Stack(u32),
}

impl Place {
    /// The placement after a spec's `%`.
    pub fn parse(text: &str) -> Result<Place, String> {
        let lower = text.to_ascii_lowercase();
        if let Some(n) = lower.strip_prefix("stack") {
            let n = n.strip_prefix('+').unwrap_or(n);
            return match n.parse::<u32>() {
                Ok(n @ 1..=100) => Ok(Place::Stack(n)),
                _ => Err(format!("`%{text}`: a stack word from 1 to 100")),
            };
        }
        let regs = text
            .split('+')
            .map(|r| Reg::parse(r).ok_or_else(|| format!("`%{text}`: unknown register `{r}`")))
            .collect::<Result<Vec<_>, _>>()?;
        if regs.len() > 4 {
            return Err(format!("`%{text}`: at most four registers"));
        }
        Ok(Place::Regs(regs))
    }

    /// Its text after a spec (`%rdi+xmm0`, `%stack+2`; empty for
    /// [`Place::Index`]).
    pub fn text(&self) -> String {
        match self {
            Place::Index => String::new(),
            Place::Stack(n) => format!("%stack+{n}"),
            Place::Regs(r) => {
                let names: Vec<String> = r.iter().map(|r| r.name()).collect();
                format!("%{}", names.join("+"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_parse_as_uftrace_writes_them() {
        assert_eq!(Place::parse("rdi"), Ok(Place::Regs(vec![Reg::Int(0)])));
        assert_eq!(
            Place::parse("RSI+XMM0"),
            Ok(Place::Regs(vec![Reg::Int(1), Reg::Xmm(0)]))
        );
        assert_eq!(Place::parse("stack+3"), Ok(Place::Stack(3)));
        assert_eq!(Place::parse("stack5"), Ok(Place::Stack(5)));
        assert!(Place::parse("stack+0").is_err());
        assert_eq!(
            Place::parse("rax+rdx"),
            Ok(Place::Regs(vec![Reg::Rax, Reg::Int(2)]))
        );
        assert!(Place::parse("rbx").is_err());
        assert!(Place::parse("xmm8").is_err());
        assert!(Place::parse("xmm01").is_err());
        assert_eq!(Place::parse("r9+xmm7").unwrap().text(), "%r9+xmm7");
        assert_eq!(Place::Stack(2).text(), "%stack+2");
    }
}
