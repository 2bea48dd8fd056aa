//! `--signal SIG@ACTION`: a signal that switches every tracer's tracing
//! on or off or ends it, as uftrace's: the agent's handler for the
//! signal, installed when the recording starts. A program that installs
//! its own later replaces it, or calls it as the handler it found (as
//! uftrace's tests do).

use crate::config::SignalTrigger;
use crate::fgraph::triggers::Triggers;
use crate::record::writer::MAX_INSTANCES;
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};
use std::sync::Arc;

/// The tracers' trigger states the handler switches (each an `Arc`
/// given up for good: a handler may run at any time after).
static TRIGGERS: [AtomicPtr<Triggers>; MAX_INSTANCES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_INSTANCES];

/// Per signal number: what it does ([`ON`], [`OFF`], [`FINISH`]).
static ACTIONS: [AtomicU8; 65] = [const { AtomicU8::new(0) }; 65];
const ON: u8 = 1;
const OFF: u8 = 2;
const FINISH: u8 = 4;

/// Installs the handler for each of `specs` (parsed before the program
/// ran), switching `triggers` (each tracer's, by instance). A signal
/// whose handler cannot be set is said on stderr, as uftrace says it.
pub(super) fn install(specs: &[String], triggers: &[(usize, Arc<Triggers>)]) {
    if specs.is_empty() {
        return;
    }
    for (inst, t) in triggers {
        // Release: the triggers whole before the handler can find them.
        TRIGGERS[*inst].store(Arc::into_raw(t.clone()) as *mut Triggers, Ordering::Release);
    }
    for spec in specs {
        let Ok(s) = SignalTrigger::parse(spec) else {
            continue;
        };
        let Some(slot) = ACTIONS.get(s.signal as usize) else {
            continue;
        };
        let act = match s.trace {
            Some(true) => ON,
            Some(false) => OFF,
            None => 0,
        } | if s.finish { FINISH } else { 0 };
        // Relaxed: read by the handler, installed below (sigaction orders
        // what came before it for the handler it sets).
        slot.store(act, Ordering::Relaxed);
        // SAFETY: a zeroed sigaction with a handler of the right type and
        // an empty mask; the old action is not needed.
        let set = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(s.signal, &sa, std::ptr::null_mut())
        };
        if set != 0 {
            crate::say!("shadowgraph: warning: cannot set a handler for --signal {spec}");
        }
    }
}

/// The handler: the signal's actions on every tracer's triggers.
/// Async-signal-safe: atomic loads and stores only.
extern "C" fn on_signal(sig: libc::c_int) {
    let Some(act) = ACTIONS.get(sig as usize) else {
        return;
    };
    // Relaxed: see `install`.
    let act = act.load(Ordering::Relaxed);
    for t in &TRIGGERS {
        // Acquire: pairs with the Release that published it.
        // SAFETY: an Arc given up for good (never freed).
        if let Some(t) = unsafe { t.load(Ordering::Acquire).as_ref() } {
            let trace = match act & (ON | OFF) {
                ON => Some(true),
                OFF => Some(false),
                _ => None,
            };
            t.switch(trace, act & FINISH != 0);
        }
    }
}
