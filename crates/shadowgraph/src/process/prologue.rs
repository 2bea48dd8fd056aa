//! Functions of a loaded object patched at their ordinary prologue
//! (`-P`, crate::prologue): their stubs written into an arena near the
//! object, then each window's first five bytes made `jmp stub` with the
//! other threads stopped. The stubs' sites form modules of the core like
//! any other sites, named by the object.
//!
//! A stub, one per function, each `STUB_STRIDE` bytes (and a keeper
//! before them, for a function whose stub keeps registers):
//!
//! ```text
//!   stub + 0   0f 1f 44 00 00    the site (NOP5)
//!   stub + 5   …                 the window's instructions, relocated
//!   …          e9 rel32          jmp back to the window's end
//!   …          cc …              int3 up to the next stub
//! ```
//!
//! A keeper (crate::prologue::Kept) is where the window jumps to instead
//! of the stub. rsp = R's slot (the caller's return address) on entry:
//!
//! ```text
//!   lea  rsp, [rsp − AREA]      AREA = the kept registers' words, made
//!                               8 mod 16 so that the function finds rsp
//!                               aligned as its caller left it
//!   mov  [rsp + 8·i], gpr_i     the general registers kept (i from 0)
//!   movdqu [rsp + XMMS + 16·j], xmm_j   the vector ones (XMMS = 8·gprs)
//!   call stub                   the function runs one call deeper: its
//!                               return address is the keeper's, and the
//!                               tracer's paths may change the registers
//!   (the same loads)            restored: the caller finds them as it
//!   lea  rsp, [rsp + AREA]      left them (rax, rdx, xmm0, xmm1: the
//!   ret                         result, which the tracer keeps)
//! ```
//!
//! Stubs are never freed or rewritten (a thread may be inside one for any
//! time). When the last session ends, each window gets its original bytes
//! back ([`unpatch_windows`]); a later session makes them jumps again
//! ([`repatch_windows`]). Either way a thread already in a stub goes on
//! there: its copy jumps back past the window, whose other bytes never
//! change.

use super::{write_stopped, CallSite, Module, NormalizeError, Normalized};
use crate::arena::{Arena, ARENA_SIZE};
use crate::patch::Edit;
use crate::prologue::{self, Judged, Kept, Relocated, Window, PATCH_LEN};
use crate::site::{encode_jmp, SiteKind, NOP5};
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Instruction, InstructionBlock, MemoryOperand, Register,
};
use std::path::Path;

/// The bytes of a stub.
pub const STUB_STRIDE: usize = 64;

/// The bytes of the largest keeper (every register kept), rounded up.
const KEEPER_MAX: usize = 384;

/// Stubs written into one arena at most (a quarter of it, keepers
/// included).
const CHUNK: usize = ARENA_SIZE / 4 / (STUB_STRIDE + KEEPER_MAX);

/// The keeper at `at` of a function whose stub is at `stub`, keeping
/// `kept` (see the module's diagram); empty when it keeps none.
fn keeper(kept: Kept, at: u64, stub: u64) -> Vec<u8> {
    if kept.is_empty() {
        return Vec::new();
    }
    let (general, vector) = kept.registers();
    let xmms = 8 * general.len() as i64;
    let mut area = xmms + 16 * vector.len() as i64;
    if area % 16 == 0 {
        area += 8;
    }
    let at_rsp = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    let lea = |d: i64| Instruction::with2(Code::Lea_r64_m, Register::RSP, at_rsp(d));
    // (register, its word's offset, whether a vector register)
    let slots: Vec<(Register, i64, bool)> = general
        .iter()
        .enumerate()
        .map(|(i, &r)| (r, 8 * i as i64, false))
        .chain(
            vector
                .iter()
                .enumerate()
                .map(|(j, &r)| (r, xmms + 16 * j as i64, true)),
        )
        .collect();
    let save = |&(r, d, v): &(Register, i64, bool)| {
        let code = if v {
            Code::Movdqu_xmmm128_xmm
        } else {
            Code::Mov_rm64_r64
        };
        Instruction::with2(code, at_rsp(d), r)
    };
    let load = |&(r, d, v): &(Register, i64, bool)| {
        let code = if v {
            Code::Movdqu_xmm_xmmm128
        } else {
            Code::Mov_r64_rm64
        };
        Instruction::with2(code, r, at_rsp(d))
    };
    let mut code = vec![lea(-area)];
    code.extend(slots.iter().map(save));
    code.push(Instruction::with_branch(Code::Call_rel32_64, stub));
    code.extend(slots.iter().map(load));
    code.push(lea(area));
    code.push(Ok(Instruction::with(Code::Retnq)));
    // Every operand is a register or rsp plus a displacement, the call's
    // target within reach (the arena's): encoding cannot fail.
    let code: Vec<Instruction> = code.into_iter().map(|i| i.expect("keeper")).collect();
    BlockEncoder::encode(
        64,
        InstructionBlock::new(&code, at),
        BlockEncoderOptions::NONE,
    )
    .expect("keeper encodes")
    .code_buffer
}

/// A keeper's bytes, rounded up to 16 (the stub after it stays aligned).
fn keeper_len(kept: Kept) -> usize {
    keeper(kept, 0, 1 << 20).len().next_multiple_of(16)
}

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

/// A window written: its edit (original bytes → jump), where its copy
/// is and where a thread on each of its instruction boundaries goes in it
/// (`Relocated::moved`), and its object's bias.
struct Placed {
    edit: Edit,
    /// The function's entry (its symbol's address).
    entry: usize,
    copy: usize,
    moved: Vec<(usize, usize)>,
    bias: usize,
    jumps: bool,
}

/// Every window written, whether it holds its jump now or its original
/// bytes.
static PLACED: std::sync::Mutex<Vec<Placed>> = std::sync::Mutex::new(Vec::new());

/// The last session ended: every window that holds its jump gets its
/// original bytes back, the other threads stopped (none can be inside a
/// jump's bytes 1–4). Returns how many windows are left as jumps (a word
/// of a stopped thread's stack pointed into one).
pub fn unpatch_windows() -> Result<usize, String> {
    flip_windows(false)
}

/// A session starts after every other ended: the windows are jumps again
/// (a thread stopped inside one's bytes 1–4 moved to its copy). Returns
/// how many are left with their original bytes (deferred).
pub fn repatch_windows() -> Result<usize, String> {
    flip_windows(true)
}

fn flip_windows(to_jump: bool) -> Result<usize, String> {
    let mut all = PLACED.lock().unwrap_or_else(|e| e.into_inner());
    let todo: Vec<usize> = (0..all.len())
        .filter(|&i| all[i].jumps != to_jump)
        .collect();
    if todo.is_empty() {
        return Ok(0);
    }
    let mut edits: Vec<(usize, Edit)> = todo
        .iter()
        .map(|&i| {
            let e = all[i].edit;
            (
                i,
                if to_jump {
                    e
                } else {
                    Edit::new(e.addr, e.new_bytes(), e.old())
                },
            )
        })
        .collect();
    edits.sort_by_key(|(_, e)| e.addr);
    let only: Vec<Edit> = edits.iter().map(|(_, e)| *e).collect();
    let moved = |k: usize, pc: usize| -> Option<usize> {
        if !to_jump {
            return None;
        }
        let p = &all[edits[k].0];
        let off = pc - p.edit.addr;
        p.moved.iter().find(|m| m.0 == off).map(|m| p.copy + m.1)
    };
    let mut n = Normalized::default();
    let deferred = write_stopped(&only, &moved, &mut n).map_err(|e| e.to_string())?;
    let mut left = 0;
    for ((i, _), d) in edits.iter().zip(deferred) {
        if d {
            left += 1;
        } else {
            all[*i].jumps = to_jump;
        }
    }
    Ok(left)
}

/// The functions patched at their prologue: (the site of each one's stub,
/// the function's entry), so that the entry is named too (a pointer to
/// the function, an argument, holds it).
pub fn entries() -> Vec<(usize, usize)> {
    // (A stub's site is the 5 bytes before its copy.)
    PLACED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|p| (p.copy - 5, p.entry))
        .collect()
}

/// The object loaded at `bias` goes (dlclose): its windows with it.
pub fn forget_windows(bias: usize) {
    PLACED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|p| p.bias != bias);
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
    // Where each function's keeper (or stub, without one) starts, and its
    // stub: offsets from the first.
    let mut starts = Vec::with_capacity(chunk.len());
    let mut stubs = Vec::with_capacity(chunk.len());
    let mut len = 0;
    for (_, w) in chunk {
        starts.push(len);
        len += keeper_len(w.kept);
        stubs.push(len);
        len += STUB_STRIDE;
    }
    let arena = Arena::near_with_room(lo, hi, len + 4096).map_err(|e| e.to_string())?;
    // Each window's copy, or why it cannot be made here.
    let mut copies: Vec<Result<Relocated, String>> = Vec::with_capacity(chunk.len());
    let first = arena
        .alloc_with(len, |first| {
            let mut code = Vec::with_capacity(len);
            for (i, (_, w)) in chunk.iter().enumerate() {
                let stub = first + stubs[i];
                let kept = keeper(w.kept, (first + starts[i]) as u64, stub as u64);
                code.extend_from_slice(&kept);
                code.resize(stubs[i], 0xcc);
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
                code.resize(stubs[i] + STUB_STRIDE, 0xcc);
                copies.push(copy);
            }
            code
        })
        .map_err(|e| e.to_string())?;
    // The patches: (index in the chunk, edit), by address.
    let mut edits: Vec<(usize, Edit)> = Vec::new();
    for (i, ((j, w), copy)) in chunk.iter().zip(&copies).enumerate() {
        // The window jumps to the keeper, where there is one.
        let stub = first + starts[i];
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
        Some(first + stubs[i] + 5 + to)
    };
    let mut n = Normalized::default();
    let deferred =
        write_stopped(&only, &moved, &mut n).map_err(|e: NormalizeError| e.to_string())?;
    let mut sites = Vec::new();
    let mut placed = PLACED.lock().unwrap_or_else(|e| e.into_inner());
    for ((i, e), d) in edits.iter().zip(deferred) {
        let j = chunk[*i].0;
        if d {
            let why = "deferred: a stopped thread may resume inside its first bytes";
            out.refuse(&j.function, "deferred", why.into());
            continue;
        }
        if let Ok(r) = &copies[*i] {
            placed.push(Placed {
                edit: *e,
                entry: chunk[*i].1.entry as usize + bias,
                copy: first + stubs[*i] + 5,
                moved: r.moved.clone(),
                bias,
                jumps: true,
            });
        }
        sites.push(CallSite {
            addr: first + stubs[*i],
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

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind};

    /// A keeper saves each kept register below rsp, moved by a multiple
    /// of 16 plus 8, calls the stub, loads each back from where it was
    /// saved, and returns; nothing else.
    #[test]
    fn a_keeper_saves_calls_restores_and_returns() {
        for bits in [1, 0b11, 1 << 7, (1 << 21) - 1, 0b101 | 1 << 20] {
            let kept = Kept::from_bits(bits);
            let code = keeper(kept, 0x10_0000, 0x10_0400);
            assert!(code.len() <= KEEPER_MAX && keeper_len(kept) >= code.len());
            let all: Vec<Instruction> =
                Decoder::with_ip(64, &code, 0x10_0000, DecoderOptions::NONE)
                    .into_iter()
                    .collect();
            let n = kept.len();
            assert_eq!(all.len(), 2 * n + 4, "{all:?}");
            let area = all[0].memory_displacement64() as i64;
            assert_eq!(all[0].mnemonic(), Mnemonic::Lea);
            assert!(area < 0 && (-area) % 16 == 8, "{area}");
            assert_eq!(all[2 * n + 2].memory_displacement64() as i64, -area);
            let call = &all[n + 1];
            assert_eq!(call.mnemonic(), Mnemonic::Call);
            assert_eq!(call.near_branch_target(), 0x10_0400);
            assert_eq!(all[2 * n + 3].mnemonic(), Mnemonic::Ret);
            let (general, vector) = kept.registers();
            let regs: Vec<Register> = general.into_iter().chain(vector).collect();
            for (k, r) in regs.iter().enumerate() {
                let (save, load) = (&all[1 + k], &all[n + 2 + k]);
                assert_eq!(save.op_kind(0), OpKind::Memory);
                assert_eq!(
                    (save.op_register(1), save.memory_base()),
                    (*r, Register::RSP)
                );
                assert_eq!(
                    (load.op_register(0), load.memory_base()),
                    (*r, Register::RSP)
                );
                let at = save.memory_displacement64();
                assert_eq!(at, load.memory_displacement64());
                assert!((at as i64) < -area);
            }
        }
    }
}
