//! Arguments and return values (`-A`, `-R`): which sites have specs, and
//! their values taken from the registers at a call's entry and return,
//! written in uftrace's layout (`shadowgraph_data::args`) into a buffer
//! of the caller's. Capturing allocates nothing and takes no lock; a
//! string is copied with `process_vm_readv` on this process, which fails
//! on a bad pointer where a load would fault (the program is never
//! harmed by a pointer it passes).
//!
//! Where each value comes from (x86-64 SysV, as uftrace reads them):
//!
//! ```text
//!   argN, N = 1..6      rdi rsi rdx rcx r8 r9
//!   argN, N > 6         the stack: word N-6 above the return address
//!                       (read with process_vm_readv: never a fault)
//!   fpargN, argN/f      xmmN-1 (low 4 or 8 bytes)
//!   retval              rax; retval/f: xmm0
//! ```

use crate::fgraph::RetRegs;
use crate::ftrace::{self, Regs};
use crate::record::ring::MAX_DATA;
use crate::tracer::fused::{self, SiteArgs};
use shadowgraph_data::args::{ArgSpec, Fmt, Place, Reg, Specs};
use shadowgraph_data::pattern::FunctionName;

/// The longest string copied (uftrace's): longer ones end in `...`.
const STR_MAX: usize = 98;

/// The specs of a recording, by site id.
pub(crate) struct ArgTable {
    /// Per site: its argument specs (none: empty).
    entry: Vec<Box<[ArgSpec]>>,
    /// Per site: its return value spec, if any.
    ret: Vec<Option<ArgSpec>>,
    /// The `-A` lists, `;`-separated, as the recording's info keeps them.
    pub(crate) argspec: String,
    /// The `-R` lists, likewise.
    pub(crate) retspec: String,
    /// With `-a`: the built-in lists (uftrace's `argauto`, `retauto`).
    pub(crate) auto: Option<(String, String)>,
}

impl ArgTable {
    /// The table for the `-A` lists `argspec` and the `-R` lists
    /// `retspec` over the core's sites, with `auto` the specs of the traced
    /// libraries' functions from their DWARF (the program's come with the
    /// lists) and the built-in specs of C library functions where those
    /// give a site no arguments (or no return value); None when there are
    /// no specs.
    pub(crate) fn new(
        argspec: &[String],
        retspec: &[String],
        auto: bool,
    ) -> Result<Option<ArgTable>, String> {
        // (The libraries' lists go to the info only.)
        let (mut lib_args, mut lib_rets) = (Vec::new(), Vec::new());
        let libraries = if auto {
            libraries_dwarf(&mut lib_args, &mut lib_rets)
        } else {
            Default::default()
        };
        let mut specs = Specs::default();
        for list in argspec.iter().chain(retspec) {
            specs.add_list(list, false)?;
        }
        let lists = auto.then(shadowgraph_data::prototypes::lists);
        if let Some((a, r)) = &lists {
            specs.add_builtin(a)?;
            specs.add_builtin(r)?;
        }
        if specs.is_empty() && libraries.is_empty() {
            return Ok(None);
        }
        let mut t = ArgTable {
            entry: Vec::new(),
            ret: Vec::new(),
            argspec: [argspec, &lib_args].concat().join(";"),
            retspec: [retspec, &lib_rets].concat().join(";"),
            auto: lists,
        };
        for s in ftrace::sites() {
            let module = s.module.to_string_lossy();
            let library = s.library.as_ref().map(|l| l.to_string_lossy());
            let name = FunctionName {
                function: &s.function,
                symbol: &s.symbol,
                module: &module,
                library: library.as_deref(),
            };
            let mut found = specs.of(&name);
            // A library's DWARF: for its own functions (not the calls made
            // to them through a PLT), where nothing else gives specs.
            let own = s
                .library
                .is_none()
                .then(|| libraries.get(&s.module))
                .flatten();
            if let Some(own) = own.filter(|_| !found.iter().any(|a| !a.retval)) {
                found.extend(own.of(&name).into_iter().filter(|a| !a.retval));
            }
            if let Some(own) = own.filter(|_| !found.iter().any(|a| a.retval)) {
                found.extend(own.of(&name).into_iter().filter(|a| a.retval));
            }
            t.entry
                .push(found.iter().filter(|a| !a.retval).cloned().collect());
            t.ret.push(found.into_iter().find(|a| a.retval));
        }
        Ok(Some(t))
    }

    /// The argument specs of site `id` (empty: none).
    pub(crate) fn entry(&self, id: ftrace::SiteId) -> &[ArgSpec] {
        self.entry.get(id as usize).map_or(&[], |s| s)
    }

    /// How the fused path records site `id`'s calls: without data, with
    /// the arguments and return value it takes itself (numbers in
    /// registers), or (a string, a stack argument) the callbacks' way.
    pub(crate) fn fused(&self, id: ftrace::SiteId) -> SiteArgs {
        let specs = self.entry(id);
        let args = match specs.is_empty() {
            true => Some(0),
            false => fused::fast_args(specs),
        };
        let ret = self.ret(id).map_or(Some((0, false)), fused::fast_retval);
        match (args, ret) {
            (Some(0), Some((0, _))) => SiteArgs::None,
            (Some(args), Some(ret)) => SiteArgs::Fast { args, ret },
            _ => SiteArgs::General,
        }
    }

    /// The return value spec of site `id`.
    pub(crate) fn ret(&self, id: ftrace::SiteId) -> Option<&ArgSpec> {
        self.ret.get(id as usize)?.as_ref()
    }
}

/// `-a`: the specs of the functions of every traced object but the
/// program (whose specs the command line gives) from its DWARF, by object
/// (by symbol in each), and added to the lists as `SYMBOL@spec` for the
/// views (which read them only where a record has data). An object that
/// cannot be read is said and left out.
fn libraries_dwarf(
    argspec: &mut Vec<String>,
    retspec: &mut Vec<String>,
) -> std::collections::HashMap<std::path::PathBuf, Specs> {
    let exe = std::fs::canonicalize("/proc/self/exe").ok();
    let mut seen = std::collections::HashSet::new();
    let mut by_object = std::collections::HashMap::new();
    for s in ftrace::sites() {
        // (Library calls' sites belong to the caller's PLT, not a file.)
        if s.library.is_some() || !seen.insert(s.module.clone()) || !s.module.is_file() {
            continue;
        }
        if std::fs::canonicalize(&s.module).ok() == exe {
            continue;
        }
        let found = match crate::elf::autoargs::auto_specs(&s.module) {
            Ok(found) if !found.functions.is_empty() => found,
            Ok(_) => continue,
            Err(e) => {
                crate::say!("shadowgraph: warning: -a: {}: {e}", s.module.display());
                continue;
            }
        };
        let mut own = Specs::default();
        for f in found.functions {
            let lists = [(f.args, &mut *argspec), (f.retval, &mut *retspec)];
            for (list, all) in lists.into_iter().filter_map(|(l, a)| Some((l?, a))) {
                if own.add_exact(&f.symbol, &list).is_ok() {
                    all.push(format!("{}@{list}", f.symbol));
                }
            }
        }
        by_object.insert(s.module.clone(), own);
    }
    by_object
}

/// The most data a record of `specs` takes (strings at their longest).
pub(crate) fn bound(specs: &[ArgSpec]) -> usize {
    let one = |s: &ArgSpec| match s.fmt {
        Fmt::Str | Fmt::StdString => (2 + STR_MAX).next_multiple_of(4),
        Fmt::Char => 4,
        _ => s.size.next_multiple_of(4),
    };
    specs.iter().map(one).sum::<usize>().next_multiple_of(8)
}

/// A record's data: small enough to clear on every call for the common
/// specs (a few numbers), else as large as a record takes.
pub(crate) const SMALL: usize = 64;
const _: () = assert!(SMALL <= MAX_DATA);

/// Writes the arguments `specs` name, from `regs` at a call's entry, into
/// `out`; returns their length (padded to 8, 0 for values of no size), or
/// None if they do not all fit (a reader finds each value's size in the
/// specs: the data holds all of them or none).
pub(crate) fn capture_args(specs: &[ArgSpec], regs: &Regs, out: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    for s in specs {
        let fits = match s.fmt {
            Fmt::Struct(_) => put_struct(s, out, &mut n, |i, dst| arg_bytes(s, regs, i, dst)),
            _ => put(s, arg_value(s, regs), out, &mut n),
        };
        if !fits {
            return None;
        }
    }
    Some(n.next_multiple_of(8))
}

/// The value of the argument `s` (not a structure) at a call's entry.
fn arg_value(s: &ArgSpec, regs: &Regs) -> u128 {
    match &s.place {
        Place::Regs(r) => r.first().map_or(0, |&r| entry_reg(r, regs)),
        Place::Stack(w) => {
            let mut b = [0u8; 16];
            let len = s.size.clamp(1, 16);
            stack_bytes(regs, *w as usize, &mut b[..len]);
            u128::from_le_bytes(b)
        }
        Place::Index if s.fmt == Fmt::Float => match s.index {
            i @ 1..=8 => regs.xmm[i as usize - 1],
            _ => 0,
        },
        Place::Index => match s.index {
            i @ 1..=6 => entry_reg(Reg::Int(i as u8 - 1), regs),
            i @ 7..=106 => {
                let mut b = [0u8; 16];
                stack_bytes(regs, i as usize - 6, &mut b[..8]);
                u128::from_le_bytes(b)
            }
            _ => 0,
        },
    }
}

/// Register `r` at a call's entry.
fn entry_reg(r: Reg, regs: &Regs) -> u128 {
    match r {
        Reg::Int(i) => [regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9]
            .get(i as usize)
            .map_or(0, |&v| v.into()),
        Reg::Xmm(i) => regs.xmm.get(i as usize).copied().unwrap_or(0),
        Reg::Rax => regs.rax.into(),
    }
}

/// Fills `dst` from the caller's stack at word `word` above the return
/// address (where `parent_slot` points), read without trusting the spec:
/// what cannot be read reads as 0.
fn stack_bytes(regs: &Regs, word: usize, dst: &mut [u8]) {
    let at = (regs.parent_slot as usize).wrapping_add(8 * word);
    let got = crate::sys::read_own_memory(at, dst);
    dst[got..].fill(0);
}

/// The bytes of the structure argument `s` (`dst`: all of them, `i`: the
/// argument's number): from the registers its placement names, eight
/// bytes each; from the stack; or, without a placement, from the integer
/// argument registers from its number on (how SysV passes a structure of
/// integers of up to 16 bytes). What is not there reads as 0.
fn arg_bytes(s: &ArgSpec, regs: &Regs, index: u32, dst: &mut [u8]) {
    dst.fill(0);
    match &s.place {
        Place::Stack(w) => stack_bytes(regs, *w as usize, dst),
        Place::Regs(r) => {
            for (chunk, &r) in dst.chunks_mut(8).zip(r) {
                chunk.copy_from_slice(&entry_reg(r, regs).to_le_bytes()[..chunk.len()]);
            }
        }
        Place::Index => {
            let first = index.max(1) as u8 - 1;
            for (k, chunk) in dst.chunks_mut(8).enumerate() {
                let v = entry_reg(Reg::Int(first.saturating_add(k as u8)), regs);
                chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
            }
        }
    }
}

/// Writes the return value `spec` names, from `regs` as the call
/// returned, into `out`; returns its length (padded to 8), or None if it
/// does not fit.
pub(crate) fn capture_retval(spec: &ArgSpec, regs: &RetRegs, out: &mut [u8]) -> Option<usize> {
    let mut n = 0;
    let fits = if let Fmt::Struct(_) = spec.fmt {
        put_struct(spec, out, &mut n, |_, dst| ret_bytes(spec, regs, dst))
    } else {
        let raw = match spec.fmt {
            Fmt::Float if spec.size == 10 => st0(),
            Fmt::Float => regs.xmm0,
            _ => regs.rax.into(),
        };
        put(spec, raw, out, &mut n)
    };
    fits.then_some(n.next_multiple_of(8))
}

/// The x87 register st(0) as the call left it: a `long double` return
/// value (the return path leaves the x87 state alone, and Rust code on
/// x86-64 never uses it), copied, not popped.
fn st0() -> u128 {
    let mut b = [0u8; 16];
    // SAFETY: `fld st(0)` pushes a copy of st(0), which `fstp` pops into
    // our buffer (10 of its 16 bytes): the x87 stack is as it was (as the
    // inline-asm rules require of a block that declares no x87 clobber).
    unsafe {
        std::arch::asm!(
            "fld st(0)",
            "fstp tbyte ptr [{p}]",
            p = in(reg) b.as_mut_ptr(),
            options(nostack)
        );
    }
    u128::from_le_bytes(b)
}

/// The bytes of a structure returned by value: from the registers its
/// placement names (`rax`, `rdx`, `xmm0`, `xmm1`); without one, `rax` and
/// `rdx` for one of up to 16 bytes, else from memory where `rax` points
/// (SysV returns a larger one in the caller's memory, its address in
/// `rax`), read without trusting it.
fn ret_bytes(spec: &ArgSpec, regs: &RetRegs, dst: &mut [u8]) {
    dst.fill(0);
    let reg = |r: Reg| -> u128 {
        match r {
            Reg::Rax => regs.rax.into(),
            Reg::Int(2) => regs.rdx.into(),
            Reg::Xmm(0) => regs.xmm0,
            Reg::Xmm(1) => regs.xmm1,
            _ => 0,
        }
    };
    match &spec.place {
        Place::Regs(r) => {
            for (chunk, &r) in dst.chunks_mut(8).zip(r) {
                chunk.copy_from_slice(&reg(r).to_le_bytes()[..chunk.len()]);
            }
        }
        _ if dst.len() <= 16 => {
            for (chunk, r) in dst.chunks_mut(8).zip([Reg::Rax, Reg::Int(2)]) {
                chunk.copy_from_slice(&reg(r).to_le_bytes()[..chunk.len()]);
            }
        }
        _ => {
            let got = crate::sys::read_own_memory(regs.rax as usize, dst);
            dst[got..].fill(0);
        }
    }
}

/// Appends the bytes of structure `s` (`fill` writes them, given the
/// argument's number) at `*n` (then 4-aligned); false when they do not
/// fit (with the padding to 8 that ends the data).
fn put_struct(
    s: &ArgSpec,
    out: &mut [u8],
    n: &mut usize,
    fill: impl FnOnce(u32, &mut [u8]),
) -> bool {
    let at = *n;
    let end = (at + s.size).next_multiple_of(4);
    if end.next_multiple_of(8) > out.len() {
        return false;
    }
    fill(s.index, &mut out[at..at + s.size]);
    out[at + s.size..end].fill(0);
    *n = end;
    true
}

/// Appends one value at `*n` (then 4-aligned); false when it does not fit
/// (with the padding to 8 that ends the data).
fn put(s: &ArgSpec, raw: u128, out: &mut [u8], n: &mut usize) -> bool {
    let at = *n;
    let fits = |len: usize| (at + len).next_multiple_of(8) <= out.len();
    let len = match s.fmt {
        Fmt::Str | Fmt::StdString => {
            let mut text = [0u8; STR_MAX + 1];
            let got = c_string(string_text(s, raw as u64), &mut text);
            if !fits(2 + got) {
                return false;
            }
            out[at..at + 2].copy_from_slice(&(got as u16).to_le_bytes());
            out[at + 2..at + 2 + got].copy_from_slice(&text[..got]);
            2 + got
        }
        Fmt::Char => {
            if !fits(4) {
                return false;
            }
            out[at] = raw as u8;
            1
        }
        _ => {
            let size = s.size.min(16);
            if !fits(size) {
                return false;
            }
            out[at..at + size].copy_from_slice(&raw.to_le_bytes()[..size]);
            size
        }
    };
    let end = (at + len).next_multiple_of(4);
    out[at + len..end].fill(0);
    *n = end;
    true
}

/// Where the characters of the string `raw` is are: `raw` itself for a C
/// string; for a `std::string` (libstdc++'s: its first word points to its
/// characters, NUL-terminated), that word, read without trusting it (an
/// object that cannot be read leaves `raw`, shown as a bad pointer).
fn string_text(s: &ArgSpec, raw: u64) -> u64 {
    if s.fmt != Fmt::StdString || raw == 0 {
        return raw;
    }
    let mut w = [0u8; 8];
    if crate::sys::read_own_memory(raw as usize, &mut w) == 8 {
        u64::from_le_bytes(w)
    } else {
        raw
    }
}

/// The C string at `p`, as uftrace records one: `NULL` for a null
/// pointer, `<0x…>` for one that cannot be read, else its bytes up to
/// its NUL, at most [`STR_MAX`] (a longer one ends in `...`). Returns
/// the length written into `out`.
fn c_string(p: u64, out: &mut [u8; STR_MAX + 1]) -> usize {
    if p == 0 {
        out[..4].copy_from_slice(b"NULL");
        return 4;
    }
    let got = crate::sys::read_own_memory(p as usize, &mut out[..]);
    if got == 0 {
        return hex_pointer(p, out);
    }
    match out[..got].iter().position(|&b| b == 0) {
        Some(end) => end,
        None if got > STR_MAX => {
            out[STR_MAX - 3..STR_MAX].copy_from_slice(b"...");
            STR_MAX
        }
        // Readable up to a page's end without a NUL: what was read.
        None => got,
    }
}

/// `<0x…>` of `p` into `out`; its length.
fn hex_pointer(p: u64, out: &mut [u8; STR_MAX + 1]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = (64 - p.leading_zeros()).div_ceil(4).max(1) as usize;
    out[..3].copy_from_slice(b"<0x");
    for k in 0..digits {
        out[3 + k] = HEX[(p >> (4 * (digits - 1 - k)) & 0xf) as usize];
    }
    out[3 + digits] = b'>';
    4 + digits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_fill_a_buffer_of_their_bound() {
        let specs: Vec<ArgSpec> = (1..=6)
            .map(|i| ArgSpec::parse(&format!("arg{i}")).unwrap())
            .chain(["arg7/i32", "fparg1"].map(|s| ArgSpec::parse(s).unwrap()))
            .collect();
        assert_eq!(bound(&specs), 64);
        let mut out = [0u8; 64];
        let mut n = 0;
        for s in &specs {
            assert!(put(s, 7, &mut out, &mut n), "{s:?}");
        }
        assert_eq!(n, 60);
        assert!(!put(&specs[0], 7, &mut out, &mut n), "no room for more");
        // A string return value at its longest fits the exit's buffer.
        let s = ArgSpec::parse("retval/s").unwrap();
        assert!(bound(&[s]) <= 112);
    }

    #[test]
    fn strings_are_copied_without_faulting() {
        let mut out = [0u8; STR_MAX + 1];
        let s = b"hello\0";
        let n = c_string(s.as_ptr() as u64, &mut out);
        assert_eq!(&out[..n], b"hello");
        let n = c_string(0, &mut out);
        assert_eq!(&out[..n], b"NULL");
        let n = c_string(0x10, &mut out);
        assert_eq!(&out[..n], b"<0x10>");
        let long = [b'a'; 300];
        let n = c_string(long.as_ptr() as u64, &mut out);
        assert_eq!(n, STR_MAX);
        assert!(out[..n].ends_with(b"aaa..."));
    }
}
