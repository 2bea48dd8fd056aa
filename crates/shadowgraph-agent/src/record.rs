//! Record mode: every call's entry and exit as 16-byte records, written per
//! thread and converted at exit into a uftrace data directory. Several
//! tracers may record at once (`shadowgraph record --tracer …`), each an
//! fgraph user with its own filters writing its own directory: the point of
//! the multi-user function graph.
//!
//! Environment: `SHADOWGRAPH_DIR`; one tracer from `SHADOWGRAPH_FILTER`,
//! `SHADOWGRAPH_NOTRACE`, `SHADOWGRAPH_DEPTH` (patterns separated by `;`),
//! or, with `SHADOWGRAPH_TRACERS=N`, N tracers `SHADOWGRAPH_TRACER_<i>` =
//! `name<TAB>filter<TAB>notrace<TAB>depth<TAB>time` recording into
//! `DIR/<name>`. `SHADOWGRAPH_TIME` (or a tracer's `time`) is a time filter
//! in ns: calls shorter than that are not recorded.

use shadowgraph::fgraph::filters::{GraphFilter, Verdict};
use shadowgraph::record::{clock, ring, writer};
use shadowgraph::{fgraph, ftrace};
use shadowgraph_data::dir::{DataDir, Info};
use shadowgraph_data::{format::Kind, uftrace};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A recording tracer: where it writes and what it filters.
struct Tracer {
    dir: PathBuf,
    /// Present when the tracer filters, or shares the program with other
    /// tracers: it keeps the tracer's own nesting, so that its records'
    /// depths do not depend on other tracers (SPEC §6.1 #16). A lone
    /// unfiltered tracer uses fgraph's depth (the same) and saves the work.
    filter: Option<GraphFilter>,
    user: Arc<fgraph::GraphUser>,
    /// Time filter in clock ticks (0: none): calls shorter than this leave
    /// no records.
    min_ticks: u64,
    /// A profile (crate::profile) rather than records.
    profile: bool,
}

/// One tracer as configured.
struct Config {
    dir: PathBuf,
    filter: GraphFilter,
    time_ns: u64,
    /// A profile tracer's function patterns (filter, notrace).
    profile: Option<(String, String)>,
}

static TRACERS: OnceLock<Vec<Tracer>> = OnceLock::new();

/// Objects loaded by dlopen joined the core: a fused tracer's filter table
/// covers their sites too (their calls took the general way until now).
pub(crate) fn after_new_objects() {
    for t in TRACERS.get().into_iter().flatten() {
        if let Some(f) = &t.filter {
            shadowgraph::record::fused::refresh_filtered(&t.user, f);
        }
    }
}
static RAW0: AtomicU64 = AtomicU64::new(0);
static NS0: AtomicU64 = AtomicU64::new(0);

fn tracer(u: &fgraph::GraphUser) -> Option<&'static Tracer> {
    TRACERS.get()?.get(u.private)
}

// A time-filtered call's word in its shadow frame (the fused path keeps
// it the same way where it stands in).
use shadowgraph::record::fused::{ENTRY_DROPPED, ENTRY_FLAGS, ENTRY_TIMING, ENTRY_WRITTEN};

// The callbacks, in two builds: TIMED for tracers with a time filter, so
// that the others pay nothing for it.
fn on_entry(e: &fgraph::GraphEntry, u: &fgraph::GraphUser, r: &mut ftrace::Regs) -> bool {
    entry::<false>(e, u, r)
}

fn on_entry_timed(e: &fgraph::GraphEntry, u: &fgraph::GraphUser, r: &mut ftrace::Regs) -> bool {
    entry::<true>(e, u, r)
}

fn on_return(r: &fgraph::GraphReturn, u: &fgraph::GraphUser, regs: &fgraph::RetRegs) {
    exit::<false>(r, u, regs)
}

fn on_return_timed(r: &fgraph::GraphReturn, u: &fgraph::GraphUser, regs: &fgraph::RetRegs) {
    exit::<true>(r, u, regs)
}

/// A plain tracer's depth limit (`-D`; 0: none), by instance.
static PLAIN_MAX_DEPTH: [std::sync::atomic::AtomicU32; writer::MAX_INSTANCES] =
    [const { std::sync::atomic::AtomicU32::new(0) }; writer::MAX_INSTANCES];

// A lone tracer without filters but a depth limit (the common `record`):
// the event's depth is the record's, and nothing else is looked at.
fn on_entry_plain(e: &fgraph::GraphEntry, u: &fgraph::GraphUser, _: &mut ftrace::Regs) -> bool {
    let max = PLAIN_MAX_DEPTH[u.private].load(Ordering::Relaxed);
    if max > 0 && e.depth >= max as i32 {
        return false;
    }
    emit_entry(u, e.depth.clamp(0, 1023) as u16, e.func);
    true
}

fn on_return_plain(r: &fgraph::GraphReturn, u: &fgraph::GraphUser, _: &fgraph::RetRegs) {
    emit_exit(u, r, r.depth.clamp(0, 1023) as u16);
}

/// In the 8 bytes a call entered inside a signal handler keeps in its
/// frame: the depth its entry was recorded at, with this bit.
const NESTED_DEPTH: u64 = 1 << 32;

/// Whether this callback runs in a signal handler that interrupted our
/// own code (two brackets deep).
fn nested() -> bool {
    ftrace::quiesce::bracket_depth() > 1
}

/// Whether a record of instance `inst` at `depth` belongs at the ring's
/// depth instead: in a signal handler that interrupted our own code, and,
/// where the fused path's plain site entry and return hold no bracket
/// (`fused::ring_depth_witness`), whenever the ring is not at `depth`
/// (`at` more than it: 0 for an entry, 1 for an exit). Such a handler
/// landed between a frame's push and its entry record, or between an exit
/// record and the frame's pop, and the frames it finds are a level off.
#[inline(always)]
fn follows_ring(inst: usize, depth: u16, at: u16) -> bool {
    nested()
        || (shadowgraph::record::fused::ring_depth_witness()
            // (Calls deeper than records can say are recorded at 1023,
            // the ring's depth running on: not a sign of anything.)
            && depth < 1023
            && writer::ring_depth(inst).is_some_and(|d| d != depth + at))
}

/// The entry record of an untimed tracer's call at `depth`. Inside a
/// signal handler that interrupted our code, the ring's depth is recorded
/// (the ring's records, not the frames, say where the thread is: the
/// handler may have landed between a call's exit record and its frame's
/// pop, one frame deeper); the call keeps it in its frame, so that its
/// exit is recorded at the same depth — also when that exit is reported
/// later, at rest, as unwound (the handler left by `siglongjmp`).
#[inline(always)]
fn emit_entry(u: &fgraph::GraphUser, depth: u16, func: usize) {
    let (keep, from) = if follows_ring(u.private, depth, 0) {
        (u.reserve(8), ring::Depth::Follow)
    } else {
        (None, ring::Depth::Given(depth))
    };
    let at = writer::emit_shared_from(
        u.private,
        Kind::Entry,
        depth,
        from,
        func as u64,
        fgraph::event_time(),
    );
    if let (Some(p), Some(d)) = (keep, at) {
        // SAFETY: 8 reserved, word-aligned bytes of this call's frame,
        // ours until it returns.
        unsafe { (p as *mut u64).write(NESTED_DEPTH | d as u64) };
    }
}

/// The exit record of an untimed tracer's call at `depth`: at its entry's
/// depth if it kept one ([`emit_entry`]). An exit reported as unwound (a
/// longjmp skipped the call) is written only if the ring is deeper than
/// that: the call's entry is in the ring and its exit is not. A signal
/// handler that left by `siglongjmp` may have interrupted the call's
/// entry or return anywhere, between its record and the frame being
/// handed to us or back (the frame then names no user: fgraph offers it
/// all the same, see `GraphUser::offer_unowned_unwinds`), and only the
/// ring knows which side of the record it was on.
#[inline(always)]
fn emit_exit(u: &fgraph::GraphUser, r: &fgraph::GraphReturn, depth: u16) {
    let nested = if r.unwound {
        nested()
    } else {
        follows_ring(u.private, depth, 1)
    };
    let kept = if r.unwound || nested || shadowgraph::record::fused::ring_depth_witness() {
        u.retrieve()
            // SAFETY: the 8 bytes this call's entry reserved (a word).
            .map(|(p, _)| unsafe { (p as *const u64).read() })
            .filter(|w| w & NESTED_DEPTH != 0)
    } else {
        None
    };
    let at = kept.map_or(depth, |w| w as u16);
    if written_or_never_begun(u, r, at) {
        return;
    }
    let from = match kept {
        Some(_) => ring::Depth::Given(at),
        None if nested => ring::Depth::Follow,
        None => ring::Depth::Given(depth),
    };
    writer::emit_shared_from(
        u.private,
        Kind::Exit,
        depth,
        from,
        r.func as u64,
        fgraph::event_time(),
    );
}

/// For a call at `depth` reported as unwound: whether the ring is not
/// deeper than that, so that its exit is in the ring already or its entry
/// never was (see [`emit_exit`]).
fn written_or_never_begun(u: &fgraph::GraphUser, r: &fgraph::GraphReturn, depth: u16) -> bool {
    r.unwound && writer::ring_depth(u.private).is_some_and(|d| d <= depth)
}

#[inline(always)]
fn entry<const TIMED: bool>(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    _r: &mut ftrace::Regs,
) -> bool {
    let t = tracer(u);
    let (depth, word) = match t.and_then(|t| t.filter.as_ref()) {
        None => (e.depth, None),
        // The filter's 8 bytes only for the time filter (they hold the
        // call's start).
        Some(f) => match f.entry_with(e, u, TIMED) {
            Verdict::Record(p) => (GraphFilter::own_depth(u) as i32 - 1, Some(p)),
            Verdict::Silent => return true,
            Verdict::Reject => return false,
        },
    };
    let depth = depth.clamp(0, 1023) as u16;
    if TIMED {
        // The filter's word (a recorded call's), else one of our own.
        let word = word.or_else(|| u.reserve(8).map(|p| p as *mut u64));
        if let Some(w) = word {
            // SAFETY: 8 reserved, word-aligned bytes, ours until the call
            // returns.
            let w = unsafe { &*(w as *const AtomicU64) };
            // By one exchange from ENTRY_TIMING: not if a handler wrote
            // the entry meanwhile.
            w.store(ENTRY_TIMING, Ordering::Relaxed);
            ring::exchange_local(w, ENTRY_TIMING, clock::now() & !ENTRY_FLAGS);
            return true;
        }
        // No room on the shadow stack: recorded now, unfiltered, after its
        // waiting callers (time order).
        release_callers(u, depth, clock::now() & !ENTRY_FLAGS);
    }
    emit_entry(u, depth, e.func);
    true
}

/// A time-filtered call of `func` at `depth` returns: false if it was too
/// short to record (nothing of it is written); else its entry record is
/// written if it was not, after those of its ancestors still pending (a
/// call lasts at least as long as the calls it makes, so they will be
/// recorded too, and writing them first keeps the thread's records in time
/// order).
fn keep_timed(u: &fgraph::GraphUser, min_ticks: u64, func: usize, depth: u16) -> bool {
    let Some((p, _)) = u.retrieve() else {
        return true; // entered unfiltered
    };
    // SAFETY: our own word in the frame returning now, 8-aligned.
    let me = unsafe { &*(p as *const AtomicU64) };
    let entry = me.load(Ordering::Relaxed);
    if entry & ENTRY_WRITTEN != 0 {
        return true;
    }
    if entry & (ENTRY_DROPPED | ENTRY_TIMING) != 0 || entry == 0 {
        // Judged too short already, or never timed: its frame was left
        // (a signal handler jumped out) before it was popped, or before its
        // entry was timed (the fused path's frames are the user's from the
        // start), and is reported now as unwound. Nothing to write.
        return false;
    }
    if clock::now().wrapping_sub(entry) < min_ticks {
        // Marked by one exchange too: a handler that landed since the load
        // and released this call (its entry is written) gets its exit.
        return !ring::exchange_local(me, entry, entry | ENTRY_DROPPED);
    }
    release_callers(u, depth, entry);
    // A handler releasing its callers meanwhile (this frame among them)
    // writes the entry instead, once, before its own records.
    writer::emit_pending_entry(
        u.private,
        me,
        entry,
        entry,
        entry | ENTRY_WRITTEN,
        depth,
        func as u64,
    );
    true
}

/// Writes the waiting entries of the callers of the call at `depth` whose
/// callback runs (from its entry or its exit), outermost first. `inner` is
/// that call's entry time.
fn release_callers(u: &fgraph::GraphUser, depth: u16, inner: u64) {
    // Pending ancestors: the frames holding our word below the nearest
    // written one (frames without it, silent under a filter, are passed
    // over). The j-th of them is recorded at depth - j.
    let frames = fgraph::thread_depth().max(0) as usize + 1;
    let (mut outermost, mut pending) = (0, 0u16);
    for k in 1..=frames {
        if let Some((q, _)) = u.retrieve_ancestor(k) {
            // SAFETY: our word in an ancestor frame, live below ours,
            // 8-aligned.
            let word = unsafe { &*(q as *const AtomicU64) };
            let w = word.load(Ordering::Relaxed);
            // Written, or (we are a signal handler) being written by the
            // code we interrupted, its slot claimed before ours.
            if w & ENTRY_WRITTEN != 0 || writer::pending_entry_state(u.private, word) == Some(true)
            {
                break;
            }
            // 0: the call's entry callback has not begun to time it (we
            // are a handler that landed in it): not pending; ENTRY_TIMING:
            // pending, timed by us.
            if w != 0 && w & ENTRY_DROPPED == 0 {
                outermost = k;
                pending += 1;
            }
        }
    }
    for k in (1..=outermost).rev() {
        if let Some((q, _, f)) = u.retrieve_ancestor_call(k) {
            // SAFETY: as above, 8-aligned.
            let w = unsafe { &*(q as *const AtomicU64) };
            let was = w.load(Ordering::Relaxed);
            if was == 0 || was & ENTRY_DROPPED != 0 {
                continue;
            }
            let d = depth.saturating_sub(pending);
            pending -= 1;
            // Being timed (we are a handler that interrupted its entry
            // callback): the entry time of its nearest timed descendant
            // (ours, if none between), which follows everything in the
            // ring and precedes our records.
            let time = if was == ENTRY_TIMING {
                (1..k)
                    .rev()
                    .filter_map(|j| u.retrieve_ancestor(j))
                    .map(|(q, _)| {
                        // SAFETY: as above, 8-aligned.
                        unsafe { &*(q as *const AtomicU64) }.load(Ordering::Relaxed)
                    })
                    .find(|&t| t != 0 && t & (ENTRY_DROPPED | ENTRY_TIMING) == 0)
                    .map_or(inner, |t| t & !ENTRY_FLAGS)
            } else {
                was
            };
            // A handler that interrupted this loop may have written it.
            if was & ENTRY_WRITTEN == 0 {
                let done = time | ENTRY_WRITTEN;
                writer::emit_pending_entry(u.private, w, was, time, done, d, f as u64);
            }
        }
    }
}

#[inline(always)]
fn exit<const TIMED: bool>(
    r: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    _regs: &fgraph::RetRegs,
) {
    let t = tracer(u);
    let depth = match t.and_then(|t| t.filter.as_ref()) {
        None => r.depth,
        Some(f) => match f.ret(r, u) {
            Some(_) => GraphFilter::own_depth(u) as i32,
            None => return,
        },
    };
    let depth = depth.clamp(0, 1023) as u16;
    if TIMED {
        if let Some(t) = t {
            if !keep_timed(u, t.min_ticks, r.func, depth) {
                return;
            }
        }
        if written_or_never_begun(u, r, depth) {
            return;
        }
        writer::emit_shared(
            u.private,
            Kind::Exit,
            depth,
            r.func as u64,
            fgraph::event_time(),
        );
    } else {
        emit_exit(u, r, depth);
    }
}

fn filter_set(pats: &str) -> Result<Option<Arc<ftrace::FilterSet>>, String> {
    let p: Vec<&str> = pats.split(';').filter(|p| !p.is_empty()).collect();
    if p.is_empty() {
        return Ok(None);
    }
    ftrace::FilterSet::with_patterns(&p, &[])
        .map(Some)
        .map_err(|e| e.to_string())
}

fn graph_filter(filter: &str, notrace: &str, depth: &str) -> Result<GraphFilter, String> {
    Ok(GraphFilter {
        max_depth: depth.parse().unwrap_or(0),
        functions: filter_set(filter)?,
        notrace: filter_set(notrace)?,
        threads: None,
    })
}

/// Sessions (SPEC-free: ours): the recorded program is session 0, and
/// every program it (or a child) starts by exec is a session of its own,
/// recorded into `<top>/<pid>-<program>/` laid out as the recording. The
/// environment tells an exec'd image that it is one; its agent announces
/// the session to the writer (`<shm>/session-<id>`: pid, directory) before
/// it makes any ring, and its rings carry the id. Returns this image's
/// directory.
fn start_session(
    top: &std::path::Path,
    shm: &std::path::Path,
    started_by_exec: bool,
) -> Result<PathBuf, String> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let id = ((pid as u64) << 40) | (clock::monotonic_ns() & ((1 << 40) - 1)) | 1;
    let dir = if started_by_exec {
        let exe = std::fs::read_link("/proc/thread-self/exe").unwrap_or_default();
        let name = exe
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "program".into());
        let mut dir = top.join(format!("{pid}-{name}"));
        let mut k = 2;
        while dir.exists() {
            dir = top.join(format!("{pid}-{name}-{k}"));
            k += 1;
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let tmp = shm.join(format!(".session-{id}"));
        std::fs::write(&tmp, format!("{pid}\t{}\n", dir.display()))
            .and_then(|_| std::fs::rename(&tmp, shm.join(format!("session-{id}"))))
            .map_err(|e| format!("{}: {e}", shm.display()))?;
        writer::set_session(id);
        dir
    } else {
        top.to_owned()
    };
    // SAFETY: setenv in the constructor, while the process has one thread.
    unsafe {
        libc::setenv(
            c"SHADOWGRAPH_SESSION".as_ptr(),
            std::ffi::CString::new(id.to_string()).unwrap().as_ptr(),
            1,
        )
    };
    Ok(dir)
}

/// Each configured tracer.
fn configure(dir: &std::path::Path) -> Result<Vec<Config>, String> {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let n: usize = var("SHADOWGRAPH_TRACERS").parse().unwrap_or(0);
    if n == 0 {
        let f = graph_filter(
            &var("SHADOWGRAPH_FILTER"),
            &var("SHADOWGRAPH_NOTRACE"),
            &var("SHADOWGRAPH_DEPTH"),
        )?;
        let time_ns = var("SHADOWGRAPH_TIME").parse().unwrap_or(0);
        return Ok(vec![Config {
            dir: dir.to_owned(),
            filter: f,
            time_ns,
            profile: None,
        }]);
    }
    if n > writer::MAX_INSTANCES {
        return Err(format!("at most {} tracers", writer::MAX_INSTANCES));
    }
    (0..n)
        .map(|i| {
            let spec = var(&format!("SHADOWGRAPH_TRACER_{i}"));
            let f: Vec<&str> = spec.split('\t').collect();
            let [name, filter, notrace, depth, time, kind] = f[..] else {
                return Err(format!("SHADOWGRAPH_TRACER_{i}: malformed"));
            };
            let profile = match kind {
                "graph" => None,
                "profile" => Some((filter.to_string(), notrace.to_string())),
                other => return Err(format!("SHADOWGRAPH_TRACER_{i}: unknown type `{other}`")),
            };
            Ok(Config {
                dir: dir.join(name),
                filter: if profile.is_some() {
                    GraphFilter::default()
                } else {
                    graph_filter(filter, notrace, depth)?
                },
                time_ns: time.parse().unwrap_or(0),
                profile,
            })
        })
        .collect()
}

/// A profile's own filter set: the functions it profiles.
fn profile_set(filter: &str, notrace: &str) -> Result<Arc<ftrace::FilterSet>, String> {
    let split =
        |p: &'static str| -> Vec<&'static str> { p.split(';').filter(|p| !p.is_empty()).collect() };
    let filter: &'static str = Box::leak(filter.to_string().into_boxed_str());
    let notrace: &'static str = Box::leak(notrace.to_string().into_boxed_str());
    let (f, n) = (split(filter), split(notrace));
    if !f.is_empty() {
        return ftrace::FilterSet::with_patterns(&f, &n).map_err(|e| e.to_string());
    }
    let fs = ftrace::FilterSet::all();
    if !n.is_empty() {
        ftrace::set_notrace(&fs, ftrace::FilterEdit::Set(&n)).map_err(|e| e.to_string())?;
    }
    Ok(fs)
}

pub fn attach() -> Result<(), String> {
    let top = std::env::var_os("SHADOWGRAPH_DIR")
        .map(PathBuf::from)
        .ok_or("SHADOWGRAPH_DIR is not set")?;
    // Rings in shared memory drained by `shadowgraph record`, or (the agent
    // used alone) drained by each thread into the directory.
    let shm = std::env::var_os("SHADOWGRAPH_SHM").map(PathBuf::from);
    if let (Some(_), Ok(theirs)) = (&shm, std::env::var("SHADOWGRAPH_RING_LAYOUT")) {
        if theirs != ring::LAYOUT.to_string() {
            return Err(format!(
                "this agent writes ring layout {} but the `shadowgraph` running it reads layout {theirs}: they come from different builds (rebuild both: cargo build --release)",
                ring::LAYOUT
            ));
        }
    }
    NO_CHILDREN.store(
        std::env::var_os("SHADOWGRAPH_NO_CHILDREN").is_some(),
        Ordering::Relaxed,
    );
    if let Some(b) = std::env::var("SHADOWGRAPH_RING_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        writer::set_ring_bytes(b);
    }
    let follow = shm.is_some() && !NO_CHILDREN.load(Ordering::Relaxed);
    let started_by_exec = follow && std::env::var_os("SHADOWGRAPH_SESSION").is_some();
    let modules = match crate::discover_program() {
        Ok(m) => m,
        Err(e) if started_by_exec => {
            // A program the traced one started (a shell, a tool) that was
            // not built for tracing: said once by `record`, not here.
            // SAFETY: getpid has no preconditions.
            crate::note_untraced_exec(unsafe { libc::getpid() }, &e);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let dir = match &shm {
        Some(shm) if follow => start_session(&top, shm, started_by_exec)?,
        _ => top,
    };
    // SHADOWGRAPH_CLOCK=mono: CLOCK_MONOTONIC even where the TSC would do.
    clock::init_with(std::env::var("SHADOWGRAPH_CLOCK").as_deref() != Ok("mono"));
    let (raw0, ns0) = clock::calibration_point();
    RAW0.store(raw0, Ordering::Relaxed);
    NS0.store(ns0, Ordering::Relaxed);
    ftrace::add_modules(modules).map_err(|e| e.to_string())?;
    let mut tracers = Vec::new();
    let config = configure(&dir)?;
    let alone = config.len() == 1;
    // A clock rate (a second calibration point) before tracing starts: for
    // the time filters, and for the metadata written at start.
    let (raw1, ns1) = early_calibration_point();
    let ticks_per_ns = raw1.saturating_sub(raw0) as f64 / ns1.saturating_sub(ns0).max(1) as f64;
    shadowgraph::record::ring::set_start_calibration(shadowgraph_data::time::Calibration {
        raw0,
        ns0,
        raw1,
        ns1,
    });
    crate::profile::init(ftrace::sites().len());
    for (i, c) in config.into_iter().enumerate() {
        let Config {
            dir: d,
            filter,
            time_ns,
            profile,
        } = c;
        if let Some((f, n)) = profile {
            std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
            let set = profile_set(&f, &n).map_err(|e| format!("{}: {e}", d.display()))?;
            let user =
                fgraph::GraphUser::new(crate::profile::on_entry, crate::profile::on_return, set, i);
            // Alone, the fused path keeps its counters where sites have
            // stubs.
            if alone
                && std::env::var_os("SHADOWGRAPH_NO_FUSED").is_none()
                && crate::profile::attach_fused(&user, i)
            {
                FUSED.store(true, Ordering::Relaxed);
            }
            tracers.push(Tracer {
                dir: d,
                filter: None,
                user,
                min_ticks: 0,
                profile: true,
            });
            continue;
        }
        writer::start(i, &d, shm.as_deref()).map_err(|e| format!("{}: {e}", d.display()))?;
        // A tracer limited by depth alone (`-D`) is plain too: its entry
        // declines calls too deep, and nothing else is looked at. Its own
        // nesting is fgraph's: it accepts every call above its limit, so
        // every frame below one it accepts is its own, whatever other
        // tracers keep.
        let min_ticks = (time_ns as f64 * ticks_per_ns) as u64;
        // The time filter's callbacks apply a depth limit only through
        // the filter: with one (`-t` and `-D`), they are not plain.
        let plain = filter.functions.is_none()
            && filter.notrace.is_none()
            && filter.threads.is_none()
            && (min_ticks == 0 || filter.max_depth == 0);
        let max_depth = filter.max_depth;
        let filter = (!plain).then_some(filter);
        let user = if min_ticks > 0 {
            let u = fgraph::GraphUser::new(
                on_entry_timed,
                on_return_timed,
                ftrace::FilterSet::all(),
                i,
            );
            if filter.is_none() {
                // As a plain tracer's (emit_exit): its frames' words say
                // whether their entries were written, the ring whether
                // their exits were.
                u.offer_unowned_unwinds();
            }
            // A time filter alone: the fused path keeps the entry times
            // and drops the short calls where sites have stubs.
            if alone
                && filter.is_none()
                && std::env::var_os("SHADOWGRAPH_NO_FUSED").is_none()
                && shadowgraph::record::fused::attach_timed(&u, i, min_ticks)
            {
                FUSED.store(true, Ordering::Relaxed);
            }
            u
        } else if filter.is_none() {
            PLAIN_MAX_DEPTH[i].store(max_depth, Ordering::Relaxed);
            let u = fgraph::GraphUser::new(
                on_entry_plain,
                on_return_plain,
                ftrace::FilterSet::all(),
                i,
            );
            // Its exits reported as unwound are written or not by the
            // ring's depth, whoever the frame names (emit_exit).
            u.offer_unowned_unwinds();
            // Its callbacks only emit the two records: the fused path may
            // stand in for them when it is alone (SHADOWGRAPH_NO_FUSED=1:
            // never, to compare).
            if alone
                && std::env::var_os("SHADOWGRAPH_NO_FUSED").is_none()
                && shadowgraph::record::fused::attach(&u, i, max_depth)
            {
                FUSED.store(true, Ordering::Relaxed);
            }
            u
        } else {
            let u = fgraph::GraphUser::new(on_entry, on_return, ftrace::FilterSet::all(), i);
            // A lone tracer with graph filters: the fused path applies
            // them the same way (fgraph::filters) where sites have stubs.
            if alone
                && std::env::var_os("SHADOWGRAPH_NO_FUSED").is_none()
                && filter
                    .as_ref()
                    .is_some_and(|f| shadowgraph::record::fused::attach_filtered(&u, i, f))
            {
                FUSED.store(true, Ordering::Relaxed);
            }
            u
        };
        tracers.push(Tracer {
            dir: d,
            filter,
            user,
            min_ticks,
            profile: false,
        });
    }
    let tracers = TRACERS.get_or_init(|| tracers);
    // `--disable`: paused before any site is patched.
    let users: Vec<Arc<fgraph::GraphUser>> = tracers.iter().map(|t| t.user.clone()).collect();
    let control = crate::control::fifos().filter(|_| !started_by_exec);
    if control.is_some() && std::env::var_os("SHADOWGRAPH_DISABLED").is_some() {
        crate::control::set_paused(&users, true)?;
    }
    for t in tracers {
        fgraph::register_graph(&t.user).map_err(|e| e.to_string())?;
    }
    if let Some((ctl, ack)) = control {
        crate::control::start(users, ctl, ack)?;
    }
    crate::graph::ON.store(true, Ordering::Release);
    // Metadata now, with the estimated clock rate, in case the program never
    // reaches exit (a crash, _exit): the CLI converts such a recording.
    write_metadata(tracers, raw1, ns1, false);
    install_fatal_handlers();
    // SAFETY: registering a plain extern "C" child handler.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    // SAFETY: registering a plain extern "C" function with atexit.
    unsafe { libc::atexit(finish) };
    Ok(())
}

static FINISHED: Mutex<bool> = Mutex::new(false);

/// The recorder runs on the fused path (record::fused).
static FUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Writes each tracer's `symbols`, `maps` and `shadowgraph.info` with the
/// clock calibration's end point (raw1, ns1): at start with an estimate (so
/// that a recording cut short by a crash stays readable), at exit for real.
fn write_metadata(tracers: &[Tracer], raw1: u64, ns1: u64, finished: bool) {
    let cmd = std::fs::read("/proc/thread-self/cmdline").unwrap_or_default();
    let cmd: Vec<String> = cmd
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut syms = String::new();
    for s in ftrace::sites() {
        // The symbol as the object names it: views demangle it as asked
        // (`--demangle`), and so does uftrace reading our data.
        syms.push_str(&format!("{:#x}\t{}\n", s.addr, s.symbol));
    }
    let maps = module_maps();
    for (i, t) in tracers.iter().enumerate() {
        let mut info = Info::default();
        info.set("format", "shadowgraph-1");
        info.set(
            "exe",
            std::fs::read_link("/proc/thread-self/exe")
                .unwrap_or_default()
                .display(),
        );
        info.set("cmdline", cmd.join(" "));
        info.set("pid", std::process::id());
        info.set(
            "clock",
            if clock::uses_tsc() {
                "tsc"
            } else {
                "monotonic"
            },
        );
        // Written out as nanoseconds (the raw points stay for reference).
        info.set("timestamps", "ns");
        info.set("raw0", RAW0.load(Ordering::Relaxed));
        info.set("ns0", NS0.load(Ordering::Relaxed));
        info.set("raw1", raw1);
        info.set("ns1", ns1);
        if finished {
            info.set("finished", 1);
        }
        // With rings in shared memory the writer counts (and adds these).
        info.set("records", writer::written(i));
        info.set("lost", writer::lost(i));
        let (steps, worst) = writer::clock_steps_back(i);
        info.set("clock_steps_back", format!("{steps} / {worst}"));
        if let Some(e) = writer::write_error(i) {
            info.set("write_error", e);
        }
        info.set("overrun", fgraph::total_overruns());
        if crate::control::fifos().is_some() {
            use crate::control::{DISABLES, ENABLES};
            info.set(
                "control",
                format!(
                    "{} disables, {} enables",
                    DISABLES.load(Ordering::Relaxed),
                    ENABLES.load(Ordering::Relaxed)
                ),
            );
        }
        info.set("max_stack", fgraph::stack::max_frames());
        info.set("recursion_drops", ftrace::recursion_drops_all());
        let (waits, waited) = writer::waits();
        info.set("writer_waits", format!("{waits} / {waited}"));
        let fused = FUSED.load(Ordering::Relaxed);
        info.set("record_path", if fused { "fused" } else { "general" });
        if fused && !t.profile {
            let claims = if shadowgraph::record::fused::uses_rseq() {
                "rseq"
            } else {
                "cmpxchg"
            };
            info.set("ring_claims", claims);
            info.set("rseq_restarts", shadowgraph::record::fused::rseq_restarts());
        }
        if t.profile {
            info.set("tracer", "profile");
            info.set(
                "profile_unattributed",
                crate::profile::BEYOND.load(Ordering::Relaxed),
            );
            info.set(
                "profile_no_room",
                crate::profile::NO_ROOM.load(Ordering::Relaxed),
            );
        }
        let dir = &t.dir;
        if t.profile && finished {
            let raw0 = RAW0.load(Ordering::Relaxed);
            let ns0 = NS0.load(Ordering::Relaxed);
            let ns_per_tick = if raw1 > raw0 && clock::uses_tsc() {
                (ns1 - ns0) as f64 / (raw1 - raw0) as f64
            } else {
                1.0
            };
            let addrs: Vec<usize> = ftrace::sites().iter().map(|s| s.addr).collect();
            let text = crate::profile::dump(i, &addrs, ns_per_tick);
            if let Err(e) = std::fs::write(dir.join("profile"), text) {
                eprintln!("shadowgraph: cannot write {}: {e}", dir.display());
            }
        }
        if let Err(e) = std::fs::write(dir.join("symbols"), &syms)
            .and_then(|_| std::fs::write(dir.join("maps"), &maps))
            .and_then(|_| info.write(dir))
        {
            eprintln!("shadowgraph: cannot write {}: {e}", dir.display());
        }
    }
}

/// A second calibration point a few hundred microseconds after the first.
fn early_calibration_point() -> (u64, u64) {
    let ns0 = NS0.load(Ordering::Relaxed);
    loop {
        let (raw, ns) = clock::calibration_point();
        if ns >= ns0 + 500_000 {
            return (raw, ns);
        }
        std::hint::spin_loop();
    }
}

extern "C" fn finish() {
    let Some(tracers) = TRACERS.get() else {
        return;
    };
    if !crate::in_root_process() {
        return; // a forked child: the recording is the parent's to finish
    }
    let mut done = FINISHED.lock().unwrap_or_else(|e| e.into_inner());
    if std::mem::replace(&mut *done, true) {
        return;
    }
    writer::flush_all();
    let (raw1, ns1) = clock::calibration_point();
    write_metadata(tracers, raw1, ns1, true);
    if writer::shared() {
        return; // the writer converts once it has drained the rings
    }
    for t in tracers.iter().filter(|t| !t.profile) {
        // uftrace's metadata, in place: the directory is then readable by
        // uftrace as well.
        let dir = &t.dir;
        if let Err(e) = DataDir::open(dir).and_then(|d| uftrace::export(&d, dir)) {
            eprintln!("shadowgraph: {e}");
        }
    }
}

/// A forked child inherits the parent's rings: it must not write them. With
/// the writer process it records on into rings of its own (its records go
/// to its threads' `.dat` files), unless told not to; else it records
/// nothing.
extern "C" fn after_fork_child() {
    writer::forget_after_fork(!NO_CHILDREN.load(Ordering::Relaxed));
}

/// `record --no-children`: forked children record nothing.
static NO_CHILDREN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

const FATAL: [i32; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// A crash: write out what the buffers hold, then let the signal do what it
/// would have done (the faulting instruction runs again, or the signal is
/// raised again, under the default disposition).
extern "C" fn on_fatal(sig: i32) {
    if crate::in_root_process() {
        writer::flush_all();
    }
    // SAFETY: restoring the default disposition and re-raising are
    // async-signal-safe; the signal stays blocked until we return.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        if sig == libc::SIGABRT {
            libc::raise(sig);
        }
    }
}

fn install_fatal_handlers() {
    for sig in FATAL {
        // SAFETY: querying and installing dispositions; ours only replaces
        // the default one (a program's own handler is left alone).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut old);
            if old.sa_sigaction == libc::SIG_DFL {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_fatal as *const () as usize;
                sa.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    }
}

/// Ranges of traced objects since unloaded (dlclose), kept so that their
/// recorded calls keep their names: (base, end, path).
static UNLOADED_MAPS: Mutex<Vec<(usize, usize, String)>> = Mutex::new(Vec::new());

/// Before objects may be unmapped (dlclose): note the ranges of every
/// traced object while they are still mapped.
pub(crate) fn remember_module_maps() {
    if TRACERS.get().is_none() {
        return;
    }
    let now = current_module_maps();
    let mut kept = UNLOADED_MAPS.lock().unwrap_or_else(|e| e.into_inner());
    kept.extend(now);
    kept.sort();
    kept.dedup();
}

/// `base<TAB>end<TAB>path` for every object traced during the run (those
/// mapped now and those unloaded since).
fn module_maps() -> String {
    let mut all = current_module_maps();
    all.extend(
        UNLOADED_MAPS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned(),
    );
    all.sort();
    all.dedup();
    all.iter()
        .map(|(b, e, p)| format!("{b:#x}\t{e:#x}\t{p}\n"))
        .collect()
}

/// Every traced object mapped now: base is its lowest mapping, end the end
/// of its last executable one.
fn current_module_maps() -> Vec<(usize, usize, String)> {
    let mut paths: Vec<std::path::PathBuf> =
        ftrace::sites().into_iter().map(|s| s.module).collect();
    paths.sort();
    paths.dedup();
    let maps = shadowgraph::sys::read_maps().unwrap_or_default();
    let mut out = Vec::new();
    for p in paths {
        // The kernel names the file itself; the loader the name it opened
        // (`libfoo.so.1`, often a link to `libfoo.so.1.2.3`).
        let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        let mine: Vec<_> = maps
            .iter()
            .filter(|m| {
                let m = std::path::Path::new(&m.path);
                m == p || m == real
            })
            .collect();
        let base = mine.iter().map(|m| m.start).min();
        let end = mine
            .iter()
            .filter(|m| m.prot & libc::PROT_EXEC != 0)
            .map(|m| m.end)
            .max();
        if let (Some(b), Some(e)) = (base, end) {
            out.push((b, e, p.display().to_string()));
        }
    }
    out
}
