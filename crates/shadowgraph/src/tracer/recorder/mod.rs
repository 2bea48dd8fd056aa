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

mod args;
mod callbacks;
pub(crate) mod markers;
mod metadata;
mod reads;
mod signals;
mod state;
mod timed;
mod triggers;
mod unmatched;

pub(crate) use metadata::{objects_loaded, remember_module_maps, Loaded};

use crate::clock;
use crate::config::{self, TracerKind};
use crate::fgraph::filters::GraphFilter;
use crate::fgraph::{self, GraphUser};
use crate::ftrace;
use crate::record::writer;
use crate::tracer::{fused, profile};
use callbacks::*;
pub(crate) use state::{active, Recording};
use state::{give_back, live, take_instances, Tracer, TRACERS};
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
/// chosen already ([`init_clock`]) and the objects are in the core. Each
/// tracer takes a free instance: several recordings may run at once
/// (sessions attached to a running process), each tracer with its own
/// user, filters and rings. The metadata is written now, or, unless
/// `metadata_now`, by [`write_start_metadata`].
pub(crate) fn start(
    r: &config::Record,
    dir: &Path,
    rings: Option<&Path>,
    control: Option<&config::Control>,
    metadata_now: bool,
    sites: Option<Arc<ftrace::FilterSet>>,
) -> Result<Arc<Recording>, String> {
    let alone = r.tracers.len() == 1;
    // With a writer process, it says which patterns matched nothing.
    unmatched::defer(rings.is_some());
    // A graph user registered before (the manager exists): shadow stacks
    // may hold frames of calls entered then, and this recording's tracers
    // keep their own nesting.
    let shared = Shared {
        later: fgraph::manager_made(),
        ticks_per_ns: metadata::take_early_calibration_point(),
        args: args::ArgTable::new(&r.argspec, &r.retspec, r.auto_args)?.map(Arc::new),
        libcalls: r.libcalls != config::LibCalls::Off,
        // The plain tracers (and those with graph filters alone) may
        // share one fused path: several of a recording from the start, or
        // of recordings attached beside one another (the path is used
        // while every registered user lets it, from the second on).
        multi: r.fused && fused::enable_multi(),
        alone,
        signals: !r.signals.is_empty(),
        watch_cpu: r.watch_cpu,
        sites,
    };
    profile::init(ftrace::sites().len());
    let insts = take_instances(r.tracers.len())?;
    let mut tracers: Vec<Tracer> = Vec::new();
    let made = (|| {
        for (i, t) in r.tracers.iter().enumerate() {
            let inst = insts[i];
            let d = t
                .name
                .as_ref()
                .map_or_else(|| dir.to_owned(), |n| dir.join(n));
            let fused_ok = alone && r.fused;
            let made = match t.kind {
                TracerKind::Profile => profile_tracer(t, inst, &d, fused_ok, &shared),
                TracerKind::Graph => {
                    let compact = r.layout == crate::config::Layout::Compact;
                    writer::start(inst, i, &d, rings, r.ring_bytes, compact)
                        .map_err(|e| format!("{}: {e}", d.display()))?;
                    graph_tracer(t, inst, &d, fused_ok, &shared)
                }
            };
            let mut made = made.map_err(|e| format!("{}: {e}", d.display()))?;
            made.shared_rings = rings.is_some();
            made.command = r.command.clone();
            tracers.push(made);
        }
        Ok::<(), String>(())
    })();
    if let Err(e) = made {
        for &inst in &insts {
            writer::end_instance(inst);
            fused::forget_multi_profile(inst);
            give_back(inst, false);
        }
        return Err(e);
    }
    // `--signal`: the handlers, switching each tracer's triggers.
    let states: Vec<_> = tracers
        .iter()
        .filter_map(|t| Some((t.inst, t.filter.as_ref()?.triggers.clone()?)))
        .collect();
    signals::install(&r.signals, &states);
    // A thread's rings of the recording's tracers are made together.
    let recorders: Vec<usize> = tracers
        .iter()
        .filter(|t| !t.profile)
        .map(|t| t.inst)
        .collect();
    writer::set_siblings(&recorders);
    let tracers: Vec<Arc<Tracer>> = tracers.into_iter().map(Arc::new).collect();
    for t in &tracers {
        // Release: the tracer is whole before a callback finds it.
        TRACERS[t.inst].store(Arc::as_ptr(t) as *mut Tracer, Ordering::Release);
    }
    let rec = Arc::new(Recording {
        tracers,
        control: control.is_some(),
        stopped: Default::default(),
        finished: Default::default(),
    });
    let users: Vec<&Arc<GraphUser>> = rec.tracers.iter().map(|t| &t.user).collect();
    // `--disable`: paused before any site is patched.
    let paused = control.is_some_and(|c| c.start_disabled);
    // All at once: every tracer is offered the same calls from the same
    // instant on.
    let registered = (users.iter())
        .filter(|_| paused)
        .try_for_each(|u| ftrace::set_paused(u.filter(), true).map_err(|e| e.to_string()))
        .and_then(|()| fgraph::register_graphs(&users).map_err(|e| e.to_string()));
    if let Err(e) = registered {
        // The instances are given back.
        rec.stopped.store(true, Ordering::Relaxed);
        release(&rec);
        return Err(e);
    }
    // What the metadata says: whether the multi path stands in for every
    // user as the recording starts (the users of all recordings; it
    // stops and starts again as they come and go).
    let multi = fgraph::multi_path_live();
    for t in &rec.tracers {
        // Relaxed: read by this thread, or after the recording is
        // published by the lock of live().
        (t.multi).store(multi && t.user.multi_path_stands_in(), Ordering::Relaxed);
    }
    live().push(rec.clone());
    if metadata_now {
        write_start_metadata(&rec);
    }
    Ok(rec)
}

/// The metadata of a recording just started, with the estimated clock
/// rate, in case the program never reaches exit (a crash, `_exit`): the
/// CLI converts such a recording.
pub(crate) fn write_start_metadata(rec: &Recording) {
    metadata::write_all(&rec.tracers, rec.control.then_some((0, 0)), false);
}

impl Recording {
    /// Its recorders' data directories (its profiles' aside).
    pub(crate) fn recorder_dirs(&self) -> Vec<std::path::PathBuf> {
        (self.tracers.iter())
            .filter(|t| !t.profile)
            .map(|t| t.dir.clone())
            .collect()
    }

    /// Its tracers' graph users (for `--control`).
    pub(crate) fn users(&self) -> Vec<Arc<GraphUser>> {
        self.tracers.iter().map(|t| t.user.clone()).collect()
    }

    /// Whether it listens for `--control`'s commands.
    pub(crate) fn listens(&self) -> bool {
        self.control
    }
}

/// The instances of `rec`, whose users are not registered (any more):
/// their rings ended, their tracers out of the table, the instances free.
fn release(rec: &Recording) {
    for t in &rec.tracers {
        writer::end_instance(t.inst);
        // Release: pairs with the callbacks' Acquire (none runs now).
        TRACERS[t.inst].store(std::ptr::null_mut(), Ordering::Release);
        if t.profile {
            fused::forget_multi_profile(t.inst);
        }
        give_back(t.inst, t.profile);
    }
}

/// A profile tracer (instance `i`), not registered.
fn profile_tracer(
    t: &config::Tracer,
    i: usize,
    d: &Path,
    fused_ok: bool,
    shared: &Shared,
) -> Result<Tracer, String> {
    std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    let user = GraphUser::new(
        profile::on_entry,
        profile::on_return,
        profile_set(&t.filter, &t.notrace, shared.libcalls)?,
        i,
    );
    // Alone, the fused path keeps its counters where sites have stubs;
    // beside others (of this recording or attached beside it), the path
    // they share, for one profile at a time.
    let (cell, rows) = profile::tables(i);
    let fused = fused_ok && fused::attach_profile(&user, i, cell, rows);
    if !fused && shared.multi {
        fused::let_multi_stand_in_profile(&user, cell, rows);
    }
    Ok(Tracer {
        dir: d.to_owned(),
        inst: i,
        filter: None,
        user,
        min_ticks: 0,
        profile: true,
        fused,
        multi: Default::default(),
        shared_rings: false,
        args: None,
        reads: None,
        watch_cpu: false,
        command: None,
    })
}

/// What the tracers of a recording share.
struct Shared {
    /// A graph user was registered before (another recording's): shadow
    /// stacks may hold frames of calls entered then.
    later: bool,
    /// The clock's estimated rate.
    ticks_per_ns: f64,
    /// The arguments and return values to record.
    args: Option<Arc<args::ArgTable>>,
    /// Whether library calls are recorded (`--no-libcall`: not, even
    /// where another recording of the process traces them).
    libcalls: bool,
    /// Whether the fused path of several plain recorders is available.
    multi: bool,
    /// Whether signals switch tracing (`--signal`): the tracers keep the
    /// triggers' state.
    signals: bool,
    /// `--watch cpu`: the tracers record the processor where it changes
    /// (in their callbacks).
    watch_cpu: bool,
    /// The recording has one tracer.
    alone: bool,
    /// The sites its tracers are called for, where the recording chose
    /// some (a later recording's `-P`); else [`reach`]'s.
    sites: Option<Arc<ftrace::FilterSet>>,
}

/// The sites a recording's tracer is called for: every one, or, without
/// library calls, every one but theirs (a recording attached later may
/// trace them, or trace them already, for itself).
fn reach(libcalls: bool) -> Result<Arc<ftrace::FilterSet>, String> {
    if libcalls {
        return Ok(ftrace::FilterSet::all());
    }
    ftrace::FilterSet::all_except(&["*@PLT"]).map_err(|e| e.to_string())
}

/// A recording tracer (instance `i`), not registered.
fn graph_tracer(
    t: &config::Tracer,
    i: usize,
    d: &Path,
    fused_ok: bool,
    shared: &Shared,
) -> Result<Tracer, String> {
    let (ticks_per_ns, later, args) = (shared.ticks_per_ns, shared.later, shared.args.clone());
    let min_ticks = (t.time_ns as f64 * ticks_per_ns) as u64;
    // Triggers (and `--disable` and `-Z` with them) decide in place of
    // the other filters, in the callbacks; where they decide by their
    // thread variable alone (`Triggers::fusable`), the fused filtered path
    // takes the calls of functions without a trigger of their own.
    let mut triggers_by_consumer = false;
    let (triggers, reads) = if t.triggers.is_empty()
        && !t.disabled
        && t.min_size == 0
        && !shared.signals
        && !shared.watch_cpu
    {
        (None, None)
    } else {
        let ticks = (min_ticks, ticks_per_ns);
        let limits = (t.depth, t.min_size);
        // A call with arguments keeps them (their length, then the data)
        // where its triggers' words and `read=` room leave space for them.
        let arg_room = |i: usize| -> u16 {
            let specs = args
                .as_ref()
                .map_or(&[][..], |a| a.entry(i as ftrace::SiteId));
            let n = 8 + args::bound(specs);
            let taken = 8 * 4 + reads::room(u8::MAX) as usize;
            match specs.is_empty() || taken + n > fgraph::MAX_RESERVE {
                true => 0,
                false => n as u16,
            }
        };
        let consumer_ok = !shared.signals && !shared.watch_cpu;
        // `--signal` and `--watch` make triggers of a tracer that has
        // none (`--tracer NAME:filter=…`): its filter and notrace patterns
        // are triggers then too, as `-F` and `-N` beside `-T`.
        let specs = match t.triggers.is_empty() {
            true => as_triggers(&t.filter, &t.notrace),
            false => t.triggers.clone(),
        };
        let made = triggers::triggers(&specs, limits, t.disabled, ticks, &arg_room, consumer_ok)?;
        triggers_by_consumer = made.by_consumer;
        (Some(Arc::new(made.triggers)), made.reads)
    };
    // Triggers with time thresholds take the time filter's callbacks.
    let mut timed = min_ticks > 0 || triggers.as_ref().is_some_and(|t| t.timed());
    // A time filter beside other tracers on the path they share (of its
    // recording, or of one attached beside it), or beside graph filters
    // (`-F`, `-N`, `-D`: the fused filtered path's, or triggers that only
    // take functions in or out and limit the depth), or beside arguments
    // or return values to record: its threads record every call its
    // graph filters take, as a tracer without it does, and the consumer
    // of its rings leaves out the short ones, with their data, on the way
    // to the file (record::ring::drain::filter; a short call's callees
    // are shorter still, so the depths of the calls kept stay theirs).
    // Alone, unfiltered and without data, the fused time filter keeps
    // short calls out of the rings.
    let graph_filters = !t.filter.is_empty() || !t.notrace.is_empty() || t.depth > 0;
    let by_consumer = triggers_by_consumer
        || min_ticks > 0
            && triggers.is_none()
            && !shared.watch_cpu
            && (shared.multi && (!shared.alone || later) || graph_filters || args.is_some());
    if by_consumer {
        writer::set_consumer_time_filter(i, t.time_ns);
        timed = false;
    }
    if timed && shared.watch_cpu {
        // (Events wait nowhere: a call's entry may be written long after
        // its reads.)
        return Err(
            "--watch is not recorded together with a time or caller filter (-t, time=, trace, -C, \
             caller)"
                .into(),
        );
    }
    let filter = GraphFilter {
        max_depth: if triggers.is_some() { 0 } else { t.depth },
        functions: filter_set(&t.filter)?,
        notrace: filter_set(&t.notrace)?,
        threads: None,
        triggers,
    };
    // A tracer limited by depth alone (`-D`) is plain too: its entry
    // declines calls too deep, and nothing else is looked at. Its own
    // nesting is fgraph's: it accepts every call above its limit, so every
    // frame below one it accepts is its own, whatever other tracers keep
    // — unless it comes `later` than another user, when frames of calls
    // entered before it may be below.
    // The time filter's callbacks apply a depth limit only through the
    // filter: with one (`-t` and `-D`), they are not plain.
    // Arguments are taken by the filtered callbacks (which see the
    // registers), and by the plain ones where every function's are
    // numbers in registers and no return value is recorded (the fused
    // path's plain entry takes those itself); the fused paths leave the
    // calls of other functions with arguments or a return value to them.
    // Triggers that decide by their thread variable alone leave the calls
    // of functions without a trigger of their own to the fused filtered
    // path (`fused::attach_filtered`), which with `--watch` leaves the
    // calls on another processor than the thread's last event named to
    // the callbacks too.
    let fused_ok = fused_ok && filter.triggers.as_ref().is_none_or(|t| t.fusable());
    let unfiltered = !later
        && filter.triggers.is_none()
        && filter.functions.is_none()
        && filter.notrace.is_none()
        && filter.threads.is_none()
        && (!timed || filter.max_depth == 0);
    // Each site's descriptor for the plain entry, where every site's
    // arguments are the fused path's and no return value is (where the
    // fused path could not take them, the filtered one, which sends the
    // functions with arguments the general way and the others its own).
    let plain_args = args
        .as_ref()
        .filter(|_| unfiltered && filter.max_depth == 0 && !timed)
        .filter(|_| !fused_ok || fused::plain_args_possible())
        .and_then(|a| {
            (0..ftrace::site_count() as ftrace::SiteId)
                .map(|id| match a.fused(id) {
                    fused::SiteArgs::None => Some(0),
                    fused::SiteArgs::Fast { args, ret: (0, _) } => Some(args),
                    _ => None,
                })
                .collect::<Option<Vec<u64>>>()
        });
    let plain = unfiltered && (args.is_none() || plain_args.is_some());
    let max_depth = filter.max_depth;
    let filter = (!plain).then_some(filter);
    let sites = match &shared.sites {
        Some(s) => s.clone(),
        None => reach(shared.libcalls)?,
    };
    let all = || sites.clone();
    let fused;
    let user = if timed {
        let u = GraphUser::new(on_entry_timed, on_return_timed, all(), i);
        if filter.is_none() {
            // As a plain tracer's (emit_exit): its frames' words say
            // whether their entries were written, the ring whether their
            // exits were.
            u.offer_unowned_unwinds();
        }
        // A time filter alone: the fused path keeps the entry times and
        // drops the short calls where sites have stubs.
        fused = fused_ok && filter.is_none() && fused::attach_timed(&u, i, min_ticks);
        u
    } else if filter.is_none() {
        PLAIN_MAX_DEPTH[i].store(max_depth, Ordering::Relaxed);
        PLAIN_ARGS[i].store(plain_args.is_some(), Ordering::Relaxed);
        let u = GraphUser::new(on_entry_plain, on_return_plain, all(), i);
        // Its exits reported as unwound are written or not by the ring's
        // depth, whoever the frame names (emit_exit).
        u.offer_unowned_unwinds();
        // Its callbacks only emit the two records (with the arguments of
        // the functions that have some): the fused path may stand in for
        // them when it is alone.
        fused = fused_ok
            && match &plain_args {
                None => fused::attach(&u, i, max_depth),
                Some(descs) => fused::attach_plain_args(&u, i, descs),
            };
        // With other plain recorders, all of them at once (each with its
        // depth limit), the calls of the functions with arguments left to
        // the callbacks.
        if shared.multi {
            match (&plain_args, &args) {
                (Some(_), Some(a)) => {
                    fused::let_multi_stand_in_with_args(&u, max_depth, &|id| {
                        a.fused(id) != fused::SiteArgs::None
                    });
                }
                _ => {
                    fused::let_multi_stand_in(&u, max_depth);
                }
            }
        }
        u
    } else {
        let u = GraphUser::new(on_entry, on_return, all(), i);
        // A lone tracer with graph filters: the fused path applies them
        // the same way (fgraph::filters) where sites have stubs.
        let n = ftrace::site_count() as ftrace::SiteId;
        let each: Vec<fused::SiteArgs> = (0..n)
            .map(|id| args.as_ref().map_or(fused::SiteArgs::None, |a| a.fused(id)))
            .collect();
        // (A site added since has no specs: the table was made before.)
        let sites = |id: ftrace::SiteId| {
            each.get(id as usize)
                .copied()
                .unwrap_or(fused::SiteArgs::None)
        };
        // Where most functions have values only the callbacks take
        // (strings, stack arguments), the fused path would only try their
        // calls before handing them over.
        let general = each.iter().filter(|&&s| s == fused::SiteArgs::General);
        fused = fused_ok
            && general.count() * 2 <= each.len()
            && filter
                .as_ref()
                .is_some_and(|f| fused::attach_filtered(&u, i, f, &sites, shared.watch_cpu));
        // With other recorders on the multi path, its filters (or
        // triggers, as on the fused filtered path) applied there, which
        // records no data: the calls of functions with arguments or return
        // values to record go to the callbacks.
        if shared.multi {
            if let Some(f) = &filter {
                fused::let_multi_stand_in_filtered(&u, f, &sites, shared.watch_cpu);
            }
        }
        u
    };
    Ok(Tracer {
        dir: d.to_owned(),
        inst: i,
        filter,
        user,
        min_ticks,
        profile: false,
        fused,
        multi: Default::default(),
        shared_rings: false,
        args,
        reads,
        watch_cpu: shared.watch_cpu,
        command: None,
    })
}

/// Filter and notrace patterns as the trigger specs that do the same
/// (`P@filter`, `P@notrace`), the filters first.
fn as_triggers(filter: &[String], notrace: &[String]) -> Vec<String> {
    use shadowgraph_data::trigger::{SpecKind, Trigger};
    let kinds = std::iter::repeat(SpecKind::Filter).zip(filter);
    kinds
        .chain(std::iter::repeat(SpecKind::Notrace).zip(notrace))
        .map(|(k, p)| Trigger::as_trigger_spec(p, k))
        .collect()
}

/// The filter set of patterns (`None`: no pattern, no filter). A pattern
/// that matches no function is said and left out; when none is left there
/// is no filter, as in uftrace (`-F` of a function that does not exist
/// records every call).
fn filter_set(patterns: &[String]) -> Result<Option<Arc<ftrace::FilterSet>>, String> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let kept = matching(patterns)?;
    if kept.is_empty() {
        return Ok(None);
    }
    let p: Vec<&str> = kept.iter().map(String::as_str).collect();
    ftrace::FilterSet::with_patterns(&p, &[])
        .map(Some)
        .map_err(|e| e.to_string())
}

/// `patterns` without those that match no traced function (each said
/// once on stderr: tracing goes on without it). A bad pattern is an error.
fn matching(patterns: &[String]) -> Result<Vec<String>, String> {
    use shadowgraph_data::pattern::{unmatched, Pattern};
    let parsed = patterns
        .iter()
        .map(|p| Pattern::parse(p).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let sites = ftrace::sites();
    let modules = triggers::site_modules(&sites);
    let names = triggers::site_names(&sites, &modules);
    let missing: Vec<String> = unmatched(&parsed, &names)
        .into_iter()
        .map(|p| p.text().to_string())
        .collect();
    // (A `!` pattern that removes nothing is harmless: not said.)
    for p in missing.iter().filter(|p| !p.starts_with('!')) {
        unmatched::warn(format!(
            "pattern `{p}` matches no function; tracing goes on without it (a function of a \
             library loaded later by dlopen is named `{p}@LIB`)"
        ));
    }
    Ok(patterns
        .iter()
        .filter(|p| !missing.contains(p))
        .cloned()
        .collect())
}

/// A profile's own filter set: the functions it profiles (library calls
/// only if `libcalls`).
fn profile_set(
    filter: &[String],
    notrace: &[String],
    libcalls: bool,
) -> Result<Arc<ftrace::FilterSet>, String> {
    let (filter_kept, notrace) = (matching(filter)?, matching(notrace)?);
    let f: Vec<&str> = filter_kept.iter().map(String::as_str).collect();
    let mut n: Vec<&str> = notrace.iter().map(String::as_str).collect();
    if !libcalls {
        n.push("*@PLT");
    }
    // (Every -F pattern unmatched: no filter, as for records.)
    if !f.is_empty() {
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
    for rec in live().iter() {
        for t in &rec.tracers {
            if let Some(f) = &t.filter {
                let sites = |id| {
                    t.args
                        .as_ref()
                        .map_or(fused::SiteArgs::None, |a| a.fused(id))
                };
                fused::refresh_filtered(&t.user, f, &sites);
            }
        }
    }
}

/// Stops `rec`: every tracer's user unregistered (its sites back to nops
/// unless another user wants them), then its threads' rings ended (shared
/// ones closed for the writer, local ones written out) and its instances
/// given back; it is no longer under way. Returns once no callback of
/// theirs runs or can start. Once; later calls do nothing.
pub(crate) fn stop(rec: &Arc<Recording>) {
    if rec.stopped.swap(true, Ordering::AcqRel) {
        return;
    }
    // All at once: no tracer is offered a call the others are not.
    let users: Vec<&Arc<GraphUser>> = rec.tracers.iter().map(|t| &t.user).collect();
    if let Err(e) = fgraph::unregister_graphs(&users) {
        let dirs: Vec<String> = (rec.tracers.iter())
            .map(|t| t.dir.display().to_string())
            .collect();
        crate::say!("shadowgraph: {}: {e}", dirs.join(", "));
    }
    release(rec);
    live().retain(|r| !Arc::ptr_eq(r, rec));
}

/// Writes out what the buffers hold: the process is about to end
/// abnormally (a fatal signal). Async-signal-safe.
pub(crate) fn flush() {
    writer::flush_all();
}

/// Tracing was switched off or on (`control`'s counts of disables and
/// enables so far): the metadata of the recording that listens says so
/// now, so that a program killed before its end still tells how its
/// recording was switched.
pub(crate) fn note_control(control: (u64, u64)) {
    let recs: Vec<Arc<Recording>> = live().iter().filter(|r| r.control).cloned().collect();
    for rec in recs {
        let done = rec.finished.lock().unwrap_or_else(|e| e.into_inner());
        if !*done {
            metadata::write_all(&rec.tracers, Some(control), false);
        }
    }
}

/// The end of `rec` in this process: the buffers written out, the
/// metadata with the final calibration point (and `control`'s counts of
/// disables and enables), and, when no writer process drains the rings,
/// uftrace's metadata in place. Once; later calls do nothing.
pub(crate) fn finish(rec: &Recording, control: Option<(u64, u64)>) {
    // Held throughout: a second caller waits for the first to be done.
    let mut done = rec.finished.lock().unwrap_or_else(|e| e.into_inner());
    if std::mem::replace(&mut *done, true) {
        return;
    }
    writer::flush_all();
    metadata::write_all(&rec.tracers, control, true);
    for t in rec.tracers.iter().filter(|t| !t.profile) {
        if t.shared_rings {
            continue; // the writer converts once it has drained the rings
        }
        // uftrace's metadata, in place: the directory is then readable by
        // uftrace as well.
        let conv = shadowgraph_data::dir::DataDir::open(&t.dir)
            .and_then(|d| shadowgraph_data::uftrace::export(&d, &t.dir));
        if let Err(e) = conv {
            crate::say!("shadowgraph: {e}");
        }
    }
}

/// The recordings under way (those the process's end finishes).
pub(crate) fn under_way() -> Vec<Arc<Recording>> {
    live().clone()
}

/// In a forked child: the parent's rings are not its own. With the writer
/// process it records on into rings of its own (its records go to its
/// threads' `.dat` files) if `record_on`; else it records nothing.
pub(crate) fn after_fork_child(record_on: bool) {
    writer::forget_after_fork(record_on);
}

/// In a traced `vfork`'s child, before its first record: the parent's
/// rings are put aside (the same memory), and the child's records go to
/// rings of its own. False when the child cannot record (rings that its
/// own threads drain would need an exit step of its own).
pub(crate) fn vfork_child() -> bool {
    writer::vfork_child()
}

/// In the parent of a traced `vfork`, once its child is gone: the child's
/// rings end (the writer drains them) and the parent's are its own again.
pub(crate) fn vfork_parent() {
    writer::vfork_parent();
}
