//! Patterns that match no function: a warning, and tracing goes on without
//! them. Where the recording has a writer process (`shadowgraph record`),
//! it says them once the recording is whole, those that matched in no
//! program of it (a pattern may name a function of a program started by
//! exec, not of the one that started it): each program keeps its own in
//! its metadata (`unmatched`) instead of saying them.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The writer process says the warnings (set before the tracers are made).
static DEFERRED: AtomicBool = AtomicBool::new(false);

/// The warnings kept for the writer, in the order found, each once.
static KEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Whether the recording's writer says the warnings (see the module).
pub(super) fn defer(yes: bool) {
    // Relaxed: set and read on the thread that starts the recording.
    DEFERRED.store(yes, Ordering::Relaxed);
}

/// A pattern matched no function (`warning`, without the `warning: `
/// prefix): said now, or kept for the writer.
pub(super) fn warn(warning: String) {
    if !DEFERRED.load(Ordering::Relaxed) {
        return crate::say!("shadowgraph: warning: {warning}");
    }
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    if !kept.contains(&warning) {
        kept.push(warning);
    }
}

/// The warnings kept, for the metadata: tab-separated (none has a tab).
pub(super) fn kept() -> String {
    KEPT.lock().unwrap_or_else(|e| e.into_inner()).join("\t")
}
