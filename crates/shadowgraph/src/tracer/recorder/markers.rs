//! User SDT markers' events (`-E provider:event`): the trap of a marker's
//! probe (crate::patch::probes) records the marker's event in the
//! thread's ring of every recorder under way, at the trap's time, as
//! uftrace records a user event: no data, depth 0 in the record (the views
//! show it where the thread is). The events' names go to each recorder's
//! `events.txt`, as uftrace's.

use super::state::TRACERS;
use crate::fgraph;
use crate::ftrace::quiesce::Bracket;
use crate::record::ring::Depth;
use crate::record::writer;
use shadowgraph_data::format::Kind;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;

/// uftrace's first user event id (`EVENT_ID_USER`).
pub(crate) const FIRST_ID: u32 = 1_000_000;

/// A probe's hook: event `id` in this thread's rings. Async-signal-safe
/// (it runs in the SIGTRAP handler).
pub(crate) fn on_marker(id: u32) {
    // Inside the bracket: the tracers seen stay alive (their removal waits
    // for a grace period).
    let _b = Bracket::enter();
    // (A thread whose first record this is starts its ring at its depth.)
    let depth = (fgraph::thread_depth() + 1).max(0) as u16;
    for (inst, slot) in TRACERS.iter().enumerate() {
        // Acquire: the tracer, made before it was published.
        let t = slot.load(Ordering::Acquire);
        // SAFETY: as in `state::tracer`: published tracers outlive the
        // grace period after their removal, and we are in the bracket.
        let Some(t) = (unsafe { t.as_ref() }) else {
            continue;
        };
        // (Events while the tracer takes calls: from its registration to
        // its leaving, as its calls.)
        if t.profile || !fgraph::offered_calls(&t.user) {
            continue;
        }
        let time = fgraph::event_time();
        writer::emit_shared_from(inst, Kind::Event, depth, Depth::Given(0), id as u64, time);
    }
}

/// Writes `events.txt` (uftrace's: `EVENT: ID PROVIDER:NAME` per event)
/// into `dir`.
pub(crate) fn write_names(dir: &Path, names: &[(u32, String)]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(dir.join("events.txt"))?;
    for (id, name) in names {
        writeln!(f, "EVENT: {id} {name}")?;
    }
    Ok(())
}
