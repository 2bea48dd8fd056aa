//! The model invariant of design §3.5, checked against the code in
//! memory (tests call it after every change they make).

use super::core::{encode, lock_core};
use super::filter::SiteId;
use super::ops::{Ops, DIRECT};
use super::site_flags;
use std::sync::Arc;

/// Checks the model invariant of design §3.5 against the code in memory:
/// counts, TRAMP/DIRECT/REGS flags, targets and bytes, trampoline use.
/// Returns the first violation.
pub fn check_invariants() -> Result<(), String> {
    use site_flags::{DISABLED, REGS, STICKY, TRAMP};
    let c = lock_core();
    for (i, s) in c.sites.iter().enumerate() {
        let id = i as SiteId;
        let name = &s.function;
        // SAFETY: reading loaded text at a known site.
        let bytes = unsafe { std::slice::from_raw_parts(s.addr as *const u8, 5) };
        if s.flags & DISABLED != 0 {
            continue;
        }
        let m: Vec<&Arc<Ops>> = c
            .list
            .iter()
            .filter(|o| o.filter_pair().contains(id))
            .collect();
        if s.count as usize != m.len() {
            return Err(format!(
                "{name}: count {} != {} matching ops",
                s.count,
                m.len()
            ));
        }
        let module = &c.modules[s.module as usize];
        let want_tramp = (m.len() == 1
            && !m[0].flags.contains(DIRECT)
            && m[0].trampoline_in(module.arena.base).is_some())
            || c.chained(&m, module.arena.base).is_some();
        if (s.flags & TRAMP != 0) != want_tramp {
            return Err(format!("{name}: TRAMP flag wrong"));
        }
        if (s.flags & site_flags::DIRECT != 0) != m.iter().any(|o| o.flags.contains(DIRECT)) {
            return Err(format!("{name}: DIRECT flag wrong"));
        }
        if (s.flags & REGS != 0) != m.iter().any(|o| o.needs_regs()) {
            return Err(format!("{name}: REGS flag wrong"));
        }
        if (s.flags & site_flags::ENABLED != 0) == m.is_empty() {
            return Err(format!("{name}: ENABLED flag wrong"));
        }
        if (s.flags & site_flags::STUB != 0) && (!want_tramp || m.len() != 1) {
            return Err(format!("{name}: STUB flag without a lone ops"));
        }
        if bytes != encode(s.addr, s.cur_target, s.flags) {
            return Err(format!(
                "{name}: memory {:02x?} does not encode target {:#x}",
                bytes, s.cur_target
            ));
        }
        if m.is_empty() && (s.cur_target != 0 || s.flags & !STICKY != 0) {
            return Err(format!(
                "{name}: unused site not clean (flags {:#x})",
                s.flags
            ));
        }
    }
    Ok(())
}
