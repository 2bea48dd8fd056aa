//! Chained callers (design §3.7): a site matched by one ops with a
//! trampoline and one DIRECT ops calls the first's chained caller
//! (`ftrace_chain`), which runs its callback as its trampoline
//! would and then jumps to the direct target: the work of the two alone.
//! Without it such a site takes the regs caller, the list function and
//! the direct helper.
//!
//! A chained caller shares its ops' data slot in its arena: clearing the
//! slot (the ops leaving) leaves it jumping to the target only, until the
//! site is patched away. It is kept with the ops, as its trampolines are,
//! for the ops' return.

use super::core::Core;
use super::filter::SiteId;
use super::ops::{lock, Ops, DIRECT};
use crate::tramp;
use std::sync::Arc;

// The chained caller: the args variant for a site whose one ops has a
// trampoline and whose one DIRECT ops sends the call on (design §3.7).
// Its callback runs as in the args variant; then, instead of returning to
// site+5, it jumps to the direct target with the frame gone — [rsp] =
// site+5, every argument register restored — as the target's pad would
// have entered it:
//
//   … args variant, up to its `leave`
//   jmp [rip + CHAIN_TARGET]
//   CHAIN_TARGET: .quad target     (patched in each copy)
tramp::regs_asm!(
    ".pushsection .text.shadowgraph_templates,\"ax\",@progbits",
    ".globl shadowgraph_ftrace_chain_start",
    ".hidden shadowgraph_ftrace_chain_start",
    ".globl shadowgraph_ftrace_chain_data",
    ".hidden shadowgraph_ftrace_chain_data",
    ".globl shadowgraph_ftrace_chain_fn",
    ".hidden shadowgraph_ftrace_chain_fn",
    ".globl shadowgraph_ftrace_chain_target",
    ".hidden shadowgraph_ftrace_chain_target",
    ".globl shadowgraph_ftrace_chain_end",
    ".hidden shadowgraph_ftrace_chain_end",
    "shadowgraph_ftrace_chain_start:",
    tramp::prologue!(),
    tramp::save_args!(),
    "mov rdi, rsp",
    "shadowgraph_ftrace_chain_data:",
    "movabs rsi, 0x1122334455667788",
    "shadowgraph_ftrace_chain_fn:",
    "movabs r11, 0x1122334455667788",
    "call r11",
    tramp::restore_args!(),
    "leave",
    "jmp qword ptr [rip + shadowgraph_ftrace_chain_target]",
    "shadowgraph_ftrace_chain_target:",
    ".quad 0",
    "shadowgraph_ftrace_chain_end:",
    ".popsection",
);

extern "C" {
    static shadowgraph_ftrace_chain_start: u8;
    static shadowgraph_ftrace_chain_data: u8;
    static shadowgraph_ftrace_chain_fn: u8;
    static shadowgraph_ftrace_chain_target: u8;
    static shadowgraph_ftrace_chain_end: u8;
}

/// Bytes of a chained caller ([`ftrace_chain`]).
pub(crate) fn ftrace_chain_len() -> usize {
    std::ptr::addr_of!(shadowgraph_ftrace_chain_end) as usize
        - std::ptr::addr_of!(shadowgraph_ftrace_chain_start) as usize
}

/// Generates a chained caller into `arena`: the args variant calling
/// `entry` with `data`, then a jump to the direct call's `target`.
pub(crate) fn ftrace_chain(
    arena: &crate::arena::Arena,
    entry: tramp::FtraceEntry,
    data: usize,
    target: usize,
) -> Result<usize, crate::arena::ArenaError> {
    let start = std::ptr::addr_of!(shadowgraph_ftrace_chain_start) as usize;
    let at = |sym: *const u8| sym as usize;
    // `movabs r64, imm64`: the operand at +2; the target a quad.
    let words = [
        (
            at(std::ptr::addr_of!(shadowgraph_ftrace_chain_data)) + 2,
            data as u64,
        ),
        (
            at(std::ptr::addr_of!(shadowgraph_ftrace_chain_fn)) + 2,
            entry as usize as u64,
        ),
        (
            at(std::ptr::addr_of!(shadowgraph_ftrace_chain_target)),
            target as u64,
        ),
    ];
    tramp::from_template(arena, start, start + ftrace_chain_len(), &words)
}

/// The ops a chained caller serves among those matching a site, and the
/// direct target it goes on to: exactly two ops, one DIRECT, the other
/// with a trampoline of the args variant (no site stubs, no registers to
/// write back).
fn chainable<'a>(m: &[&'a Arc<Ops>]) -> Option<(&'a Arc<Ops>, usize)> {
    let [a, b] = m else {
        return None;
    };
    let (o, d) = match (a.flags.contains(DIRECT), b.flags.contains(DIRECT)) {
        (false, true) => (*a, *b),
        (true, false) => (*b, *a),
        _ => return None,
    };
    o.plain_tramp().then(|| (o, d.direct_target()))
}

impl Core {
    /// The chained caller in the arena at `arena_base` for a site the ops
    /// `m` match, if they call for one and it was made.
    pub(super) fn chained(&self, m: &[&Arc<Ops>], arena_base: usize) -> Option<usize> {
        let (o, target) = chainable(m)?;
        let inner = lock(&o.inner);
        let c = (inner.chained.iter()).find(|c| c.0 == arena_base && c.1 == target)?;
        Some(c.2)
    }

    /// Bytes of a chained caller of `ops`: fused (entry_asm) for an ops
    /// with the core's own entry.
    pub(super) fn chained_len(ops: &Ops) -> usize {
        match ops.tramp_entry {
            None => super::entry_asm::ops_caller_len(true),
            Some(_) => ftrace_chain_len(),
        }
    }

    /// Makes the chained callers the touched sites call for (best effort:
    /// a site without one takes the regs caller and the list function, as
    /// before); `matching`: each touched site and its ops
    /// (`Core::matching`).
    pub(super) fn ensure_chains(&mut self, touched: &[SiteId], matching: &[Vec<Arc<Ops>>]) {
        if !self.list.iter().any(|o| o.flags.contains(DIRECT)) {
            return;
        }
        let mut want: Vec<(Arc<Ops>, usize, usize)> = Vec::new();
        for (&id, ops) in touched.iter().zip(matching) {
            let m: Vec<&Arc<Ops>> = ops.iter().collect();
            if let Some((o, target)) = chainable(&m) {
                let mi = self.sites[id as usize].module as usize;
                let key = (Arc::as_ptr(o), mi, target);
                if !want.iter().any(|w| (Arc::as_ptr(&w.0), w.1, w.2) == key) {
                    want.push((o.clone(), mi, target));
                }
            }
        }
        for (o, mi, target) in want {
            let arena = self.modules[mi].arena;
            let mut inner = lock(&o.inner);
            if (inner.chained.iter()).any(|c| c.0 == arena.base && c.1 == target) {
                continue;
            }
            // Its trampoline's slot there (made when it registered).
            let Some(slot) = inner.tramps.iter().find(|t| t.0 == arena.base).map(|t| t.2) else {
                continue;
            };
            let data = slot as *const _ as usize;
            let made = match o.tramp_entry {
                None => super::entry_asm::ops_caller(arena, data, Some(target)),
                Some(entry) => ftrace_chain(arena, entry, data, target),
            };
            if let Ok(code) = made {
                inner.chained.push((arena.base, target, code));
            }
        }
    }
}
