//! The recorder: every call's entry and exit as 16-byte records in its
//! thread's ring, which the writer turns into a data directory (uftrace's
//! format). Several recorders may run at once, each an fgraph user with
//! its own filters writing its own directory: the point of the multi-user
//! function graph. A profile ([`crate::tracer::profile`]) is set up here
//! too, as a tracer of a recording that keeps counters instead of records.
//!
//! A recorder alone takes the fused paths ([`crate::tracer::fused`]) where
//! its callbacks would only write records; they stand in for the
//! callbacks of [`callbacks`] and do the same.

mod callbacks;
mod metadata;
mod state;
mod timed;

pub(crate) use metadata::remember_module_maps;

use crate::clock;
use crate::config::{self, TracerKind};
use crate::fgraph::filters::GraphFilter;
use crate::fgraph::{self, GraphUser};
use crate::ftrace;
use crate::record::writer;
use crate::tracer::{fused, profile};
use callbacks::*;
use state::{Tracer, FUSED, TRACERS};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Chooses the clock and takes the first calibration point: before the
/// objects are scanned, so that the second point ([`start`]) comes after
/// the time that takes rather than after a wait.
pub(crate) fn init_clock(c: config::Clock) {
    clock::init_with(c == config::Clock::Tsc);
    metadata::take_first_calibration_point();
}

/// Makes one graph user per tracer of `r`, recording into `dir` (this
/// image's directory: the recording's, or an exec session's inside it),
/// their rings in `rings` (`None`: the threads write their own files), and
/// registers them — paused first if `control` says so. The clock is
/// chosen already ([`init_clock`]) and the objects are in the core.
/// Returns the users (for `--control`).
pub(crate) fn start(
    r: &config::Record,
    dir: &Path,
    rings: Option<&Path>,
    control: Option<&config::Control>,
) -> Result<Vec<Arc<GraphUser>>, String> {
    if let Some(b) = r.ring_bytes {
        writer::set_ring_bytes(b);
    }
    let alone = r.tracers.len() == 1;
    let ticks_per_ns = metadata::take_early_calibration_point();
    profile::init(ftrace::sites().len());
    let mut tracers = Vec::new();
    for (i, t) in r.tracers.iter().enumerate() {
        let d = t
            .name
            .as_ref()
            .map_or_else(|| dir.to_owned(), |n| dir.join(n));
        let fused_ok = alone && r.fused;
        let made = match t.kind {
            TracerKind::Profile => profile_tracer(t, i, &d, fused_ok),
            TracerKind::Graph => {
                writer::start(i, &d, rings).map_err(|e| format!("{}: {e}", d.display()))?;
                graph_tracer(t, i, &d, fused_ok, ticks_per_ns)
            }
        };
        tracers.push(made.map_err(|e| format!("{}: {e}", d.display()))?);
    }
    let tracers = TRACERS.get_or_init(|| tracers);
    let users: Vec<Arc<GraphUser>> = tracers.iter().map(|t| t.user.clone()).collect();
    if control.is_some_and(|c| c.start_disabled) {
        // `--disable`: paused before any site is patched.
        for u in &users {
            ftrace::set_paused(u.filter(), true).map_err(|e| e.to_string())?;
        }
    }
    for u in &users {
        fgraph::register_graph(u).map_err(|e| e.to_string())?;
    }
    // Metadata now, with the estimated clock rate, in case the program never
    // reaches exit (a crash, _exit): the CLI converts such a recording.
    metadata::write_all(tracers, control.map(|_| (0, 0)), false);
    Ok(users)
}

/// A profile tracer (instance `i`), not registered.
fn profile_tracer(
    t: &config::Tracer,
    i: usize,
    d: &Path,
    fused_ok: bool,
) -> Result<Tracer, String> {
    std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    let user = GraphUser::new(
        profile::on_entry,
        profile::on_return,
        profile_set(&t.filter, &t.notrace)?,
        i,
    );
    // Alone, the fused path keeps its counters where sites have stubs.
    let (cell, rows) = profile::tables(i);
    if fused_ok && fused::attach_profile(&user, i, cell, rows) {
        FUSED.store(true, Ordering::Relaxed);
    }
    Ok(Tracer {
        dir: d.to_owned(),
        filter: None,
        user,
        min_ticks: 0,
        profile: true,
    })
}

/// A recording tracer (instance `i`), not registered.
fn graph_tracer(
    t: &config::Tracer,
    i: usize,
    d: &Path,
    fused_ok: bool,
    ticks_per_ns: f64,
) -> Result<Tracer, String> {
    let filter = GraphFilter {
        max_depth: t.depth,
        functions: filter_set(&t.filter)?,
        notrace: filter_set(&t.notrace)?,
        threads: None,
    };
    // A tracer limited by depth alone (`-D`) is plain too: its entry
    // declines calls too deep, and nothing else is looked at. Its own
    // nesting is fgraph's: it accepts every call above its limit, so every
    // frame below one it accepts is its own, whatever other tracers keep.
    let min_ticks = (t.time_ns as f64 * ticks_per_ns) as u64;
    // The time filter's callbacks apply a depth limit only through the
    // filter: with one (`-t` and `-D`), they are not plain.
    let plain = filter.functions.is_none()
        && filter.notrace.is_none()
        && filter.threads.is_none()
        && (min_ticks == 0 || filter.max_depth == 0);
    let max_depth = filter.max_depth;
    let filter = (!plain).then_some(filter);
    let all = ftrace::FilterSet::all;
    let user = if min_ticks > 0 {
        let u = GraphUser::new(on_entry_timed, on_return_timed, all(), i);
        if filter.is_none() {
            // As a plain tracer's (emit_exit): its frames' words say
            // whether their entries were written, the ring whether their
            // exits were.
            u.offer_unowned_unwinds();
        }
        // A time filter alone: the fused path keeps the entry times and
        // drops the short calls where sites have stubs.
        if fused_ok && filter.is_none() && fused::attach_timed(&u, i, min_ticks) {
            FUSED.store(true, Ordering::Relaxed);
        }
        u
    } else if filter.is_none() {
        PLAIN_MAX_DEPTH[i].store(max_depth, Ordering::Relaxed);
        let u = GraphUser::new(on_entry_plain, on_return_plain, all(), i);
        // Its exits reported as unwound are written or not by the ring's
        // depth, whoever the frame names (emit_exit).
        u.offer_unowned_unwinds();
        // Its callbacks only emit the two records: the fused path may
        // stand in for them when it is alone.
        if fused_ok && fused::attach(&u, i, max_depth) {
            FUSED.store(true, Ordering::Relaxed);
        }
        u
    } else {
        let u = GraphUser::new(on_entry, on_return, all(), i);
        // A lone tracer with graph filters: the fused path applies them
        // the same way (fgraph::filters) where sites have stubs.
        if fused_ok
            && filter
                .as_ref()
                .is_some_and(|f| fused::attach_filtered(&u, i, f))
        {
            FUSED.store(true, Ordering::Relaxed);
        }
        u
    };
    Ok(Tracer {
        dir: d.to_owned(),
        filter,
        user,
        min_ticks,
        profile: false,
    })
}

/// The filter set of patterns (`None`: no pattern, no filter). A pattern
/// that matches no function is said and left out; when none is left the
/// set selects nothing (`-F` of functions that do not exist: nothing is
/// inside them).
fn filter_set(patterns: &[String]) -> Result<Option<Arc<ftrace::FilterSet>>, String> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let kept = matching(patterns)?;
    let p: Vec<&str> = kept.iter().map(String::as_str).collect();
    ftrace::FilterSet::with_patterns(&p, &[])
        .map(Some)
        .map_err(|e| e.to_string())
}

/// `patterns` without those that match no traced function (each said
/// once on stderr: tracing goes on without it). A bad pattern is an error.
fn matching(patterns: &[String]) -> Result<Vec<String>, String> {
    use shadowgraph_data::pattern::{unmatched, FunctionName, Pattern};
    let parsed = patterns
        .iter()
        .map(|p| Pattern::parse(p).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let sites = ftrace::sites();
    let modules: Vec<String> = sites
        .iter()
        .map(|s| s.module.to_string_lossy().into_owned())
        .collect();
    let names: Vec<FunctionName<'_>> = sites
        .iter()
        .zip(&modules)
        .map(|(s, m)| FunctionName {
            function: &s.function,
            symbol: &s.symbol,
            module: m,
            library: s.library.as_deref().and_then(|l| l.to_str()),
        })
        .collect();
    let missing: Vec<String> = unmatched(&parsed, &names)
        .into_iter()
        .map(|p| p.text().to_string())
        .collect();
    for p in &missing {
        eprintln!(
            "shadowgraph: warning: pattern `{p}` matches no function; tracing goes on without it \
             (a function of a library loaded later by dlopen is named `{p}@LIB`)"
        );
    }
    Ok(patterns
        .iter()
        .filter(|p| !missing.contains(p))
        .cloned()
        .collect())
}

/// A profile's own filter set: the functions it profiles.
fn profile_set(filter: &[String], notrace: &[String]) -> Result<Arc<ftrace::FilterSet>, String> {
    let (filter_kept, notrace) = (matching(filter)?, matching(notrace)?);
    let f: Vec<&str> = filter_kept.iter().map(String::as_str).collect();
    let n: Vec<&str> = notrace.iter().map(String::as_str).collect();
    // (Every -F pattern unmatched: the profile selects nothing.)
    if !filter.is_empty() {
        return ftrace::FilterSet::with_patterns(&f, &n).map_err(|e| e.to_string());
    }
    let fs = ftrace::FilterSet::all();
    if !n.is_empty() {
        ftrace::set_notrace(&fs, ftrace::FilterEdit::Set(&n)).map_err(|e| e.to_string())?;
    }
    Ok(fs)
}

/// Objects loaded by dlopen joined the core: a fused tracer's filter table
/// covers their sites too (their calls took the general way until now).
pub(crate) fn after_new_objects() {
    for t in TRACERS.get().into_iter().flatten() {
        if let Some(f) = &t.filter {
            fused::refresh_filtered(&t.user, f);
        }
    }
}

/// Stops recording: every tracer's user unregistered (its sites back to
/// nops unless another user wants them); returns once no callback of
/// theirs runs or can start.
pub(crate) fn stop() {
    for t in TRACERS.get().into_iter().flatten() {
        if let Err(e) = fgraph::unregister_graph(&t.user) {
            eprintln!("shadowgraph: {}: {e}", t.dir.display());
        }
    }
}

/// Writes out what the buffers hold: the process is about to end
/// abnormally (a fatal signal). Async-signal-safe.
pub(crate) fn flush() {
    writer::flush_all();
}

/// Whether [`finish`] ran; held while metadata is written, so that
/// [`note_control`] never overwrites the final metadata.
static FINISHED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Tracing was switched off or on (`control`'s counts of disables and
/// enables so far): the metadata says so now, so that a program killed
/// before its end still tells how its recording was switched.
pub(crate) fn note_control(control: (u64, u64)) {
    let Some(tracers) = TRACERS.get() else {
        return;
    };
    let done = FINISHED.lock().unwrap_or_else(|e| e.into_inner());
    if !*done {
        metadata::write_all(tracers, Some(control), false);
    }
}

/// The end of the recording in this process: the buffers written out, the
/// metadata with the final calibration point (and `control`'s counts of
/// disables and enables), and, when no writer process drains the rings,
/// uftrace's metadata in place. Once; later calls do nothing.
pub(crate) fn finish(control: Option<(u64, u64)>) {
    let Some(tracers) = TRACERS.get() else {
        return;
    };
    // Held throughout: a second caller waits for the first to be done.
    let mut done = FINISHED.lock().unwrap_or_else(|e| e.into_inner());
    if std::mem::replace(&mut *done, true) {
        return;
    }
    writer::flush_all();
    metadata::write_all(tracers, control, true);
    if writer::shared() {
        return; // the writer converts once it has drained the rings
    }
    for t in tracers.iter().filter(|t| !t.profile) {
        // uftrace's metadata, in place: the directory is then readable by
        // uftrace as well.
        let conv = shadowgraph_data::dir::DataDir::open(&t.dir)
            .and_then(|d| shadowgraph_data::uftrace::export(&d, &t.dir));
        if let Err(e) = conv {
            eprintln!("shadowgraph: {e}");
        }
    }
}

/// In a forked child: the parent's rings are not its own. With the writer
/// process it records on into rings of its own (its records go to its
/// threads' `.dat` files) if `record_on`; else it records nothing.
pub(crate) fn after_fork_child(record_on: bool) {
    writer::forget_after_fork(record_on);
}
