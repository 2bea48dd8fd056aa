//! Functions built with plain `-pg` or `-finstrument-functions`: each
//! calls a profiling hook (`mcount` after its prologue; or
//! `__cyg_profile_func_enter`, with `__cyg_profile_func_exit` before it
//! returns) through its PLT or its GOT entry, and that call, not a
//! patchable entry, is what the compiler left for tracers. Such a
//! function is patched at its prologue like any other; its hook calls
//! stay (the agent's `mcount` and glibc's `__cyg_profile_func_*` return
//! at once).

use super::analyse::Text;
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, OpKind};

/// The profiling hooks whose callers are traced.
pub use crate::elf::PROFILING_HOOKS as HOOKS;

/// The starts of the functions of `text` that call a hook whose GOT
/// entries are `got` (sorted), directly through them or through a PLT
/// entry in `plt` that jumps through them; sorted.
pub(super) fn callers(text: &Text<'_, '_>, got: &[u64], plt: &[(u64, u64)]) -> Vec<u64> {
    if got.is_empty() {
        return Vec::new();
    }
    // The GOT entry a PLT entry at `t` jumps through.
    let through_plt = |t: u64| -> Option<u64> {
        plt.iter().find(|&&(a, b)| t >= a && t < b)?;
        let bytes = text.contents.read(t, 16)?;
        let mut dec = Decoder::with_ip(64, bytes, t, DecoderOptions::NONE);
        let mut ins = Instruction::default();
        while dec.can_decode() {
            dec.decode_out(&mut ins);
            if ins.is_ip_rel_memory_operand() {
                return Some(ins.ip_rel_memory_address());
            }
        }
        None
    };
    let hook = |a: Option<u64>| a.is_some_and(|a| got.binary_search(&a).is_ok());
    let mut out = Vec::new();
    for &(start, size, _) in text.functions {
        let Some(bytes) = text.contents.read(start, size).filter(|_| size > 0) else {
            continue;
        };
        let mut dec = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
        let mut ins = Instruction::default();
        while dec.can_decode() {
            dec.decode_out(&mut ins);
            let calls = match ins.flow_control() {
                FlowControl::IndirectCall if ins.is_ip_rel_memory_operand() => {
                    hook(Some(ins.ip_rel_memory_address()))
                }
                FlowControl::Call if ins.op_kind(0) == OpKind::NearBranch64 => {
                    hook(through_plt(ins.near_branch_target()))
                }
                _ => false,
            };
            if calls {
                out.push(start);
                break;
            }
        }
    }
    out
}
