//! Functions of a loaded object patched at their ordinary prologue
//! (`-P`, crate::prologue): their stubs written into an arena near the
//! object, then each window's first five bytes made `jmp stub` with the
//! other threads stopped. The stubs' sites form modules of the core like
//! any other sites, named by the object.
//!
//! A stub, one per function, `STUB_STRIDE` bytes apart:
//!
//! ```text
//!   stub + 0   0f 1f 44 00 00    the site (NOP5)
//!   stub + 5   …                 the window's instructions, relocated
//!   …          e9 rel32          jmp back to the window's end
//!   …          cc …              int3 up to the next stub
//! ```
//!
//! Stubs are never freed or rewritten (a thread may be inside one for any
//! time); a patched window stays patched for the life of the process.

use super::{write_stopped, CallSite, Module, NormalizeError, Normalized};
use crate::arena::{Arena, ARENA_SIZE};
use crate::patch::Edit;
use crate::prologue::{self, Judged, Relocated, Window, PATCH_LEN};
use crate::site::{encode_jmp, SiteKind, NOP5};
use std::path::Path;

/// From one stub to the next.
pub const STUB_STRIDE: usize = 64;

/// Stubs written into one arena at most (a quarter of it).
const CHUNK: usize = ARENA_SIZE / 4 / STUB_STRIDE;

/// What patching one object's prologues did.
#[derive(Debug, Default)]
pub struct Patched {
    /// Modules of the stubs' sites (one per arena used), named by the
    /// object, with its bias.
    pub modules: Vec<Module>,
    /// Functions patched.
    pub patched: usize,
    /// Functions asked for that have a patchable entry.
    pub with_site: usize,
    /// Functions refused, with the reason.
    pub refused: Vec<(String, String)>,
    /// How many were refused for each kind of reason.
    pub by_reason: Vec<(&'static str, usize)>,
}

impl Patched {
    fn refuse(&mut self, function: &str, kind: &'static str, why: String) {
        self.refused.push((function.to_owned(), why));
        match self.by_reason.iter_mut().find(|(k, _)| *k == kind) {
            Some(e) => e.1 += 1,
            None => self.by_reason.push((kind, 1)),
        }
    }

    /// One line: the object, how many were patched, how many refused by
    /// reason (most frequent first).
    pub fn summary(&self, path: &Path) -> String {
        let mut by = self.by_reason.clone();
        by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let reasons: Vec<String> = by.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let mut line = format!("{}: {} patched", path.display(), self.patched);
        if !reasons.is_empty() {
            line.push_str(&format!(
                ", {} refused ({})",
                self.refused.len(),
                reasons.join(", ")
            ));
        }
        line
    }
}

/// Each object's [`Patched::summary`] so far, for the recording's info.
static SUMMARIES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// The summaries of the objects patched so far, one per object.
pub fn summaries() -> Vec<String> {
    SUMMARIES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Patches the prologues of the functions of the object at `path`, loaded
/// at `bias`, that `asked` names and that have no site among `sites`
/// (link-time addresses, sorted).
pub fn patch_object(
    path: &Path,
    bias: usize,
    sites: &[u64],
    asked: prologue::Asked<'_>,
) -> Result<Patched, String> {
    let data =
        crate::sys::MappedFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let judged = prologue::judge(path, &data, sites, asked).map_err(|e| e.to_string())?;
    drop(data);
    let mut out = Patched {
        with_site: judged.with_site,
        ..Patched::default()
    };
    let mut todo: Vec<(&Judged, &Window)> = Vec::new();
    for j in &judged.functions {
        match &j.window {
            Ok(w) => todo.push((j, w)),
            Err(why) => out.refuse(&j.function, why.kind(), why.to_string()),
        }
    }
    for chunk in todo.chunks(CHUNK) {
        patch_chunk(path, chunk, bias, &mut out)?;
    }
    if out.patched + out.refused.len() > 0 {
        let mut all = SUMMARIES.lock().unwrap_or_else(|e| e.into_inner());
        all.push(out.summary(path));
    }
    Ok(out)
}

/// One arena's worth of stubs, written, then their windows patched.
fn patch_chunk(
    path: &Path,
    chunk: &[(&Judged, &Window)],
    bias: usize,
    out: &mut Patched,
) -> Result<(), String> {
    let at = |w: &Window| w.at as usize + bias;
    let lo = chunk.iter().map(|(_, w)| at(w)).min().unwrap_or(0);
    let hi = chunk.iter().map(|(_, w)| at(w) + w.len).max().unwrap_or(0);
    let arena = Arena::near_with_room(lo, hi, STUB_STRIDE * chunk.len() + 4096)
        .map_err(|e| e.to_string())?;
    // Each window's copy, or why it cannot be made here.
    let mut copies: Vec<Result<Relocated, String>> = Vec::with_capacity(chunk.len());
    let first = arena
        .alloc_with(STUB_STRIDE * chunk.len(), |first| {
            let mut code = Vec::with_capacity(STUB_STRIDE * chunk.len());
            for (i, (_, w)) in chunk.iter().enumerate() {
                let stub = first + i * STUB_STRIDE;
                // SAFETY: the window lies in the object's loaded text (the
                // file says so; the address is biased by the loader's bias).
                let mem = unsafe { std::slice::from_raw_parts(at(w) as *const u8, w.len) };
                let copy = prologue::relocate(mem, w, at(w) as u64, (stub + 5) as u64)
                    .map_err(|e| e.to_string())
                    .and_then(|r| {
                        if r.code.len() + 5 > STUB_STRIDE {
                            Err(format!("its copy takes {} bytes", r.code.len()))
                        } else {
                            Ok(r)
                        }
                    });
                if let Ok(r) = &copy {
                    code.extend_from_slice(&NOP5);
                    code.extend_from_slice(&r.code);
                }
                code.resize((i + 1) * STUB_STRIDE, 0xcc);
                copies.push(copy);
            }
            code
        })
        .map_err(|e| e.to_string())?;
    // The patches: (index in the chunk, edit), by address.
    let mut edits: Vec<(usize, Edit)> = Vec::new();
    for (i, ((j, w), copy)) in chunk.iter().zip(&copies).enumerate() {
        let stub = first + i * STUB_STRIDE;
        if let Err(why) = copy {
            out.refuse(&j.function, "not relocatable here", why.clone());
            continue;
        }
        // SAFETY: the patched bytes lie in the loaded text: the window's,
        // and for a function shorter than them the filler after it, which
        // the analysis found executable.
        let mem = unsafe { std::slice::from_raw_parts(at(w) as *const u8, PATCH_LEN) };
        let Some(jmp) = encode_jmp(at(w), stub) else {
            out.refuse(
                &j.function,
                "out of reach",
                "its stub is out of reach".into(),
            );
            continue;
        };
        edits.push((i, Edit::new(at(w), mem, &jmp)));
    }
    edits.sort_by_key(|(_, e)| e.addr);
    let only: Vec<Edit> = edits.iter().map(|(_, e)| *e).collect();
    let moved = |k: usize, pc: usize| -> Option<usize> {
        let i = edits[k].0;
        let off = pc - at(chunk[i].1);
        let r = copies[i].as_ref().ok()?;
        let to = r.moved.iter().find(|m| m.0 == off)?.1;
        Some(first + i * STUB_STRIDE + 5 + to)
    };
    let mut n = Normalized::default();
    let deferred =
        write_stopped(&only, &moved, &mut n).map_err(|e: NormalizeError| e.to_string())?;
    let mut sites = Vec::new();
    for ((i, _), d) in edits.iter().zip(deferred) {
        let j = chunk[*i].0;
        if d {
            let why = "deferred: a stopped thread may resume inside its first bytes";
            out.refuse(&j.function, "deferred", why.into());
            continue;
        }
        sites.push(CallSite {
            addr: first + i * STUB_STRIDE,
            function: j.function.clone(),
            symbol: j.symbol.clone(),
            kind: SiteKind::Nop5,
            disabled: None,
            library: None,
        });
    }
    out.patched += sites.len();
    if !sites.is_empty() {
        sites.sort_by_key(|s| s.addr);
        out.modules.push(Module {
            path: path.to_owned(),
            bias,
            sites,
        });
    }
    Ok(())
}
