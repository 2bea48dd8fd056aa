//! Functions built without a patchable entry (uftrace's `-P`): which of
//! them can be patched at their ordinary prologue, and the relocated
//! copy of the bytes a patch displaces.
//!
//! A function's first whole instructions that cover five bytes (after a
//! leading `endbr64`, which stays: indirect branches land on it) are its
//! *window*. Patched, the window's first five bytes become `jmp stub`,
//! and the stub, in an arena within rel32 reach, is an ordinary site
//! followed by the window's instructions re-encoded for their new place:
//!
//! ```text
//!   entry  f3 0f 1e fa        endbr64 (when the function has one: kept)
//!   w      e9 rel32           jmp stub         (bytes w+1..w+4 overwritten:
//!   w+5    …                  the window's bytes from here on are kept)
//!
//!   stub+0   0f 1f 44 00 00   the site: a NOP5 the core patches as any
//!   stub+5   …                the window's instructions, relocated (RIP-
//!                             relative operands and branches re-encoded)
//!   …        e9 rel32         jmp w+len        (back after the window)
//! ```
//!
//! A call in the window returns to the function itself, not to the copy:
//! it becomes a push of its original return address and a jump, so its
//! callee unwinds through the function's own frame information. A
//! function shorter than five bytes (`lea eax,[rdi+1]; ret`) is patched
//! when the filler after it (`int3`, nops) up to five bytes belongs to no
//! other function; its copy ends with its own `ret`.
//!
//! A function is refused ([`Refusal`]) when a branch anywhere in the
//! object (or a jump table it uses) lands on bytes 1–4 of the window, or
//! a jump inside it goes back to its entry (a loop that would be counted
//! as a call); when the window cannot be decoded or relocated; when it
//! lies outside the object's executable sections.
//!
//! A function another function of the object calls (or tail-jumps to)
//! directly may have callers that keep values across the call in any
//! call-clobbered register it (with what it calls) leaves alone: gcc's
//! interprocedural register allocation (`-fipa-ra`, on at `-O2` unless
//! entries are made patchable). The tracer's paths keep only what the
//! ABI asks of them, so such a function's stub keeps those registers
//! itself ([`Kept`], found by `clobbers`): it saves them, calls the
//! function one call deeper, and restores them when it returns. That
//! moves the function's stack by the saved words: one that reads its
//! caller's stack (arguments passed there, `frame`) is refused. Calls
//! through a pointer, a PLT or from another object follow the ABI.
//! Threads stopped inside bytes 1–4 when the patch is written are the
//! writer's to move ([`Relocated::moved`]).
//!
//! Objects built with plain `-pg` or `-finstrument-functions` have the
//! functions that call the profiling hook patched without being asked
//! ([`Asked::Hooked`]).

mod analyse;
mod clobbers;
mod frame;
mod mcount;
mod relocate;
mod window;

pub use mcount::HOOKS;
pub use relocate::{relocate, Relocated};
pub use window::{Kept, Refusal, Window, PATCH_LEN};

use crate::elf::{Contents, ElfError, FunctionSymbols};
use object::{Object, ObjectSection, SectionKind};
use shadowgraph_data::pattern::{FunctionName, Pattern, PatternError};
use std::path::{Path, PathBuf};

/// One function of an object, judged.
#[derive(Clone, Debug)]
pub struct Judged {
    /// Its entry (its symbol's address), link time.
    pub entry: u64,
    /// Its symbol as the object names it.
    pub symbol: String,
    /// Its name in the simple demangled form.
    pub function: String,
    /// Its window, or why it is refused.
    pub window: Result<Window, Refusal>,
}

/// The functions of one object that `-P` patterns asked for.
#[derive(Clone, Debug)]
pub struct ObjectPrologues {
    /// The file read.
    pub path: PathBuf,
    /// Functions asked for that have a patchable entry already (they are
    /// traced by it).
    pub with_site: usize,
    /// The others, by address.
    pub functions: Vec<Judged>,
}

impl ObjectPrologues {
    /// Functions that can be patched.
    pub fn patchable(&self) -> impl Iterator<Item = (&Judged, &Window)> {
        self.functions
            .iter()
            .filter_map(|j| j.window.as_ref().ok().map(|w| (j, w)))
    }

    /// Refused functions counted by reason, most frequent first.
    pub fn refusals(&self) -> Vec<(&'static str, usize)> {
        let mut by: Vec<(&'static str, usize)> = Vec::new();
        for j in &self.functions {
            if let Err(r) = &j.window {
                match by.iter_mut().find(|(k, _)| *k == r.kind()) {
                    Some(e) => e.1 += 1,
                    None => by.push((r.kind(), 1)),
                }
            }
        }
        by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        by
    }
}

/// Parses a `-P` pattern: as `-F` takes them, with uftrace's `.` (its
/// regex for every function) meaning `*`.
pub fn parse_pattern(text: &str) -> Result<Pattern, PatternError> {
    let (neg, rest) = match text.strip_prefix('!') {
        Some(r) => ("!", r),
        None => ("", text),
    };
    match rest.strip_prefix('.') {
        Some(module) if module.is_empty() || module.starts_with('@') => {
            Pattern::parse(&format!("{neg}*{module}"))
        }
        _ => Pattern::parse(text),
    }
}

/// Whether `-P` `patterns` ask for the function named `symbol` of the
/// object at `path` (the program when `program`): as uftrace's, a
/// pattern without `@LIB` names the program's functions, and a later
/// `!` pattern takes back what earlier ones asked for.
pub fn wanted(patterns: &[Pattern], path: &Path, program: bool, symbol: &str) -> bool {
    let module = path.to_string_lossy();
    let function = shadowgraph_data::names::demangle(symbol);
    let name = FunctionName {
        function: &function,
        symbol,
        module: &module,
        library: None,
    };
    let mut yes = false;
    for p in patterns {
        if (p.module().is_some() || program) && p.matches(&name) {
            yes = !p.negated();
        }
    }
    yes
}

/// Functions never patched: the program's entry point is jumped to by
/// the kernel with no return address on the stack, and the C start-up
/// helpers run before any tracing could (uftrace skips the same).
const NEVER: [&str; 3] = ["_start", "__libc_csu_init", "__libc_csu_fini"];

/// Which functions of an object are asked for.
#[derive(Clone, Copy)]
pub enum Asked<'a> {
    /// Those whose symbol the function accepts (`-P` patterns).
    Named(&'a dyn Fn(&str) -> bool),
    /// Those built with plain `-pg` or `-finstrument-functions`: each
    /// calls a profiling hook ([`HOOKS`]).
    Hooked,
}

/// Judges the functions of the ELF image `data` (named `path`) that
/// `asked` names, except those at one of the link-time addresses `sites`
/// (sorted: functions with a patchable entry, traced by it).
pub fn judge(
    path: &Path,
    data: &[u8],
    sites: &[u64],
    asked: Asked<'_>,
) -> Result<ObjectPrologues, ElfError> {
    let file = crate::elf::parse(path, data)?;
    let symbols = FunctionSymbols::new(path, &file);
    let contents = Contents::new(&file);
    let exec: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| (s.address(), s.address() + s.size()))
        .collect();
    // A symbol without a size (hand-written assembly, the C start-up
    // files' helpers) ends where the next begins, or its section ends.
    let all = symbols.all();
    let functions: Vec<(u64, u64, String)> = all
        .iter()
        .enumerate()
        .map(|(i, (start, size, name))| {
            let size = match *size {
                0 => {
                    let section_end = exec
                        .iter()
                        .find(|&&(a, b)| *start >= a && *start < b)
                        .map_or(*start, |&(_, b)| b);
                    let next = all.get(i + 1).map_or(u64::MAX, |n| n.0);
                    next.min(section_end) - start
                }
                n => n,
            };
            (*start, size, name.clone())
        })
        .collect();
    let text = analyse::Text {
        contents: &contents,
        symbols: &symbols,
        functions: &functions,
        exec: &exec,
    };
    let mut out = ObjectPrologues {
        path: path.to_owned(),
        with_site: 0,
        functions: Vec::new(),
    };
    let plt: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| matches!(s.name(), Ok(".plt" | ".plt.sec" | ".plt.got")))
        .map(|s| (s.address(), s.address() + s.size()))
        .collect();
    let pg = match asked {
        Asked::Hooked => {
            let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(data).ok();
            let got = elf.map_or(Vec::new(), |f| {
                crate::elf::slots::got_entries_of(&f, &mcount::HOOKS)
            });
            Some(mcount::callers(&text, &got, &plt))
        }
        Asked::Named(_) => None,
    };
    let want = |symbol: &str, start: u64| match (asked, &pg) {
        (Asked::Named(f), _) => f(symbol),
        (Asked::Hooked, Some(callers)) => callers.binary_search(&start).is_ok(),
        (Asked::Hooked, None) => false,
    };
    let entry = object::Object::entry(&file);
    let mut asked = Vec::new();
    for (i, ((start, size, symbol), (_, given, _))) in functions.iter().zip(all).enumerate() {
        // A symbol without a size (the C start-up files' helpers, hand-
        // written assembly) is not taken for a function, as uftrace's
        // symbol tables do not.
        // (The entry point by its address too: a stripped object's is
        // unnamed.)
        let skip = *given == 0
            || NEVER.contains(&symbol.as_str())
            || *start == entry
            || analyse::is_part(symbol);
        if skip || !want(symbol, *start) {
            continue;
        }
        // A site is at the entry, or after its endbr64.
        let has_site = |a: u64| sites.binary_search(&a).is_ok();
        if has_site(*start) || has_site(start + 4) {
            out.with_site += 1;
            continue;
        }
        asked.push((i, *start, *size, symbol.clone()));
    }
    if asked.is_empty() {
        return Ok(out);
    }
    let targets = analyse::branch_targets(&text);
    let changed = clobbers::changed(&text, &plt);
    for (i, start, size, symbol) in asked {
        let risk = Kept::from_bits(clobbers::TRACER_CHANGES & !changed[i]);
        let reads_stack = || frame::reads_caller_stack(&text, &targets, i);
        let window =
            analyse::window(&text, &targets, start, size, risk, reads_stack).and_then(|w| {
                // Relocatable at an address as far as an arena may be.
                let bytes = contents.read(w.at, w.len as u64).unwrap_or_default();
                relocate(bytes, &w, w.at, w.at + (1 << 30))?;
                Ok(w)
            });
        out.functions.push(Judged {
            entry: start,
            function: shadowgraph_data::names::demangle(&symbol),
            symbol,
            window,
        });
    }
    Ok(out)
}
