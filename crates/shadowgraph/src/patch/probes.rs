//! Probes: one-byte `nop`s of the program's (the probe points of its SDT
//! markers) made into `int3`. The SIGTRAP handler (trap.rs) gives a trap
//! on one to the hook armed with them, with the probe's id, instead of to
//! the program's handler; the thread then goes on after the `nop`, as if
//! it had run it.
//!
//! The probes are published before their `int3`s are written and stay
//! published for the process's life (a few bytes per probe), so that a
//! thread that trapped just before they were disarmed still finds its
//! probe (the byte is then a `nop` again: it runs it, see trap.rs).

use super::{apply, Edit, PatchError};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The probes armed last, sorted by address (null: none yet).
static PROBES: AtomicPtr<Vec<(usize, u32)>> = AtomicPtr::new(std::ptr::null_mut());
/// The hook their traps go to (a `fn(u32)`; 0: none, traps are passed
/// over).
static HOOK: AtomicUsize = AtomicUsize::new(0);
/// The edits that armed them, to disarm.
static ARMED: Mutex<Vec<Edit>> = Mutex::new(Vec::new());

const NOP: u8 = 0x90;
const INT3: u8 = 0xcc;

/// Makes each probe of `probes` (address, id) an `int3` whose trap calls
/// `hook(id)`; the probes armed before are disarmed first. `hook` runs in
/// a signal handler: it must be async-signal-safe. On `Err` (a probe's
/// byte is not a `nop`, the text cannot be written) nothing is armed.
pub fn arm(mut probes: Vec<(usize, u32)>, hook: fn(u32)) -> Result<(), PatchError> {
    disarm();
    probes.sort_unstable();
    probes.dedup_by_key(|p| p.0);
    let mut edits: Vec<Edit> = probes
        .iter()
        .map(|&(a, _)| Edit::new(a, &[NOP], &[INT3]))
        .collect();
    let table = Box::into_raw(Box::new(probes));
    // Release: the table and the hook are in place before any `int3` can
    // trap (the handler's Acquire loads); the previous table is leaked, a
    // late trap may still read it.
    PROBES.store(table, Ordering::Release);
    HOOK.store(hook as usize, Ordering::Release);
    super::trap::set_probe_hit(hit);
    apply(&mut edits)?;
    *ARMED.lock().unwrap_or_else(|e| e.into_inner()) = edits;
    Ok(())
}

/// Gives the armed probes their `nop`s back; their traps from now on are
/// passed over.
pub fn disarm() {
    let mut armed = ARMED.lock().unwrap_or_else(|e| e.into_inner());
    if armed.is_empty() {
        return;
    }
    let mut back: Vec<Edit> = armed
        .iter()
        .map(|e| Edit::new(e.addr, &[INT3], &[NOP]))
        .collect();
    // Relaxed: a trap that finds no hook only resumes.
    HOOK.store(0, Ordering::Relaxed);
    if let Err(e) = apply(&mut back) {
        crate::say!("shadowgraph: SDT markers: {e}");
    }
    armed.clear();
}

/// For the SIGTRAP handler: whether the `int3` at `site` is a probe's
/// (then its hook has run, and the thread resumes after it).
/// Async-signal-safe.
fn hit(site: usize) -> bool {
    // Acquire: the table, published before its `int3`s were written.
    let table = PROBES.load(Ordering::Acquire);
    if table.is_null() {
        return false;
    }
    // SAFETY: a published table is never freed.
    let table = unsafe { &*table };
    let Ok(i) = table.binary_search_by_key(&site, |p| p.0) else {
        return false;
    };
    // SAFETY: the probe's byte lies in mapped text (it was patched).
    if unsafe { *(site as *const u8) } != INT3 {
        // Disarmed since the trap: it is a `nop` again, which the thread
        // may as well skip (the handler resumes after the `int3`).
        return true;
    }
    // Acquire: pairs with `arm`'s Release.
    let hook = HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: only `arm` stores non-zero values, from a `fn(u32)`.
        let f: fn(u32) = unsafe { std::mem::transmute::<usize, fn(u32)>(hook) };
        f(table[i].1);
    }
    true
}
