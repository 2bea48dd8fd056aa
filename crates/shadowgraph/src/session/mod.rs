//! A tracing session in this process: a [`Config`] applied to the running
//! program. The agent starts one before `main` from the configuration the
//! CLI hands it; a program that embeds the library starts one itself.
//!
//! Starting a session finds the sites of the objects the configuration
//! selects, brings them under the ftrace core, and attaches the tracers:
//! the counters of `count`, or the recorders and profiles of `record`.
//! Objects loaded later by `dlopen` join ([`objects`]); programs started
//! by exec inherit the configuration and record a session of their own
//! (`exec`).
//!
//! The first session of a process sets it up (its objects in the core,
//! dlopen followed, the clock chosen); later ones — sessions attached to
//! a running process, any number at once up to fgraph's 16 users — start
//! recordings of their own on the same sites, each with its own tracers,
//! filters and rings, and end them while the others go on. When the last
//! ends, every site is a nop again and library calls go straight to their
//! functions.

mod control;
pub use control::{agent_fifos, remove_stale_agent_fifos};
mod count;
mod exec;
mod markers;
pub mod objects;

use crate::config::{self, Config, Mode};
use crate::record::ring;
use crate::tracer::recorder;
use crate::{fgraph, ftrace, process};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The process the session started in (its forked children inherit the
/// state, but are not it).
static ROOT_PID: AtomicI32 = AtomicI32::new(0);

/// What the first session in this process set up.
static STARTED: OnceLock<Started> = OnceLock::new();

/// Sessions start and end one at a time.
static STARTING: Mutex<()> = Mutex::new(());

/// The `-P` patterns of the first session (sorted): they chose the sites
/// every later session traces. (Set by each attempt at a first session:
/// one that failed set nothing up.)
static FIRST_PATCH: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// `patch` (sorted) as a command line says it.
fn patch_words(patch: &[String]) -> String {
    match patch {
        [] => "no -P".into(),
        p => format!("-P {}", p.join(" -P ")),
    }
}

/// The sites a later session's `-P` `patch` chooses among those of the
/// core (the first session's choice, `first`), as its tracers' filter:
/// a pattern without `@LIB` names the program's functions, as the first
/// session's did; library calls are kept or left out as the session
/// asks. A function it names exactly that is no site is refused, saying
/// why.
fn later_sites(
    patch: &[String],
    first: &[String],
    libcalls: bool,
) -> Result<Arc<ftrace::FilterSet>, String> {
    let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    let program = exe
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut filter = Vec::new();
    for text in patch {
        let p = crate::prologue::parse_pattern(text).map_err(|e| format!("-P: {e}"))?;
        // (Its name or its symbol, as patterns match them.)
        let named = |one: &str| ftrace::FilterSet::with_patterns(&[one], &[]).is_ok();
        if p.is_exact() && p.module().is_none() && !named(&format!("{}@{program}", p.text())) {
            return Err(format!(
                "-P {text}: not among the functions the first recording of this process chose ({}): a later recording chooses among those",
                patch_words(first)
            ));
        }
        filter.push(match p.module() {
            Some(_) => p.text().to_string(),
            None => format!("{}@{program}", p.text()),
        });
    }
    let (notrace, plt) = match libcalls {
        true => (vec![], vec!["*@PLT".to_string()]),
        false => (vec!["*@PLT"], vec![]),
    };
    filter.extend(plt);
    let filter: Vec<&str> = filter.iter().map(String::as_str).collect();
    // (Each pattern was parsed above: what fails here matches nothing.)
    ftrace::FilterSet::with_patterns(&filter, &notrace).map_err(|_| {
        format!(
            "{}: matches no function among those the first recording of this process chose ({})",
            patch_words(patch),
            patch_words(first)
        )
    })
}

/// What [`finish`] needs of the session.
enum Started {
    Count,
    /// Recordings, each with its own tracers (one per session).
    Record,
    /// Nothing here is traced (a program started by exec that has no
    /// sites, or that `count` does not follow).
    Untraced,
}

/// The environment variable that asks the agent to list the program's
/// events instead of running it (`record --list-event`).
pub const LIST_EVENTS_ENV: &str = "SHADOWGRAPH_LIST_EVENTS";

/// `record --list-event`, in the program before its `main`: prints the
/// user SDT markers of every loaded object (uftrace's format), and ends
/// the process with status 0, as uftrace's agent does.
pub fn list_events_and_exit() -> ! {
    markers::list();
    std::process::exit(0)
}

/// Whether the process's first session has set it up: a session started
/// now records on the sites that one found.
pub fn set_up() -> bool {
    STARTED.get().is_some()
}

/// How many recordings are under way in this process (one per session
/// that records).
pub fn recordings_under_way() -> usize {
    recorder::under_way().len()
}

/// Whether this is the process the session started in (not a forked child
/// that inherited its state).
pub fn in_root_process() -> bool {
    // SAFETY: getpid has no preconditions.
    ROOT_PID.load(Ordering::Relaxed) == unsafe { libc::getpid() }
}

/// A session started by [`Session::start`]; [`Session::finish`] ends it.
#[must_use = "a session is finished by Session::finish"]
pub struct Session {
    /// Its recording (`record`; None: `count`, or nothing traced).
    recording: Option<Arc<recorder::Recording>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("records", &self.recording.is_some())
            .finish()
    }
}

impl Session {
    /// Starts tracing this process as `config` says. Fails with a one-line
    /// message (nothing traced) when the configuration cannot be applied:
    /// no sites, a bad pattern, a data directory that cannot be written,
    /// more tracers than can record at once, a second session of a
    /// process that counts calls.
    ///
    /// The first session sets the process up; a later one (a recording,
    /// attached while others may run) records on the sites the first
    /// found, with the clock the first chose; library calls are traced
    /// for the recordings that ask for them.
    pub fn start(config: Config) -> Result<Session, String> {
        Self::start_as(config, false)
    }

    /// [`Session::start`] while every other thread of the process is held
    /// from outside (`record -p`, ptrace): what need not be done while
    /// they wait — writing the recording's metadata — is left to
    /// [`Session::settle`], called once they run again.
    pub fn start_held(config: Config) -> Result<Session, String> {
        Self::start_as(config, true)
    }

    /// Does what [`Session::start_held`] left: writes the recording's
    /// metadata, as an unheld start does (to be called once, after a held
    /// start).
    pub fn settle(&self) {
        if let Some(rec) = &self.recording {
            recorder::write_start_metadata(rec);
        }
    }

    fn start_as(config: Config, held: bool) -> Result<Session, String> {
        config.check().map_err(|e| e.to_string())?;
        let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        match STARTED.get() {
            None => start(config, held).map(|recording| Session { recording }),
            Some(Started::Record) => another(config).map(|r| Session { recording: Some(r) }),
            Some(Started::Count) => Err("this process counts calls: it runs one session".into()),
            Some(Started::Untraced) => Err("this process is not traced: it has no sites".into()),
        }
    }

    /// Whether it traces anything (a program with no site of its own and
    /// that follows no other is let through untraced).
    pub fn traces(&self) -> bool {
        self.recording.is_some() || matches!(STARTED.get(), Some(Started::Count))
    }

    /// Ends the session: its tracing stops (the sites go back to nops
    /// unless another session traces them; after the last, the GOT slots
    /// of library calls go back to their functions), a recording's
    /// buffers are written out and its data directory completed (uftrace's
    /// format, when no writer process does it); a count's report is
    /// written.
    pub fn finish(self) {
        let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        match self.recording {
            Some(rec) => {
                recorder::stop(&rec);
                if !recorder::active() {
                    // (Their traps record nothing since the stop.)
                    markers::disarm();
                    objects::restore_originals();
                }
                let control = rec_control(&rec);
                recorder::finish(&rec, control);
            }
            None => finish(),
        }
    }
}

/// `--control`'s counts, for the recording that listens for it.
fn rec_control(rec: &recorder::Recording) -> Option<(u64, u64)> {
    rec.listens().then(control::counts)
}

/// A session after the first: a recording on the sites the core has.
fn another(config: Config) -> Result<Arc<recorder::Recording>, String> {
    let Mode::Record(r) = &config.mode else {
        return Err("counting calls (`count`) is only the first session of a process".into());
    };
    if r.control.is_some() {
        return Err("`--control` is only for the first session of a process".into());
    }
    // The sites in the core are those the first session's -P chose (the
    // others were never added): a later session's -P chooses among them,
    // for its own tracers; without one, it traces them all.
    let mut patch = config.patch.clone();
    patch.sort();
    let first = FIRST_PATCH
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let choose = || later_sites(&config.patch, &first, r.libcalls != config::LibCalls::Off);
    let chooses = first != patch && !patch.is_empty();
    if chooses {
        // Refused before anything changes; made again below, over the
        // library calls this session may add (a filter set is resolved
        // again as sites come only once an ops holds it).
        choose()?;
    }
    objects::reapply_patches();
    // Objects loaded by dlopen since the last recording (none follows
    // them in between).
    objects::join_loaded();
    if r.libcalls != config::LibCalls::Off {
        if let Err(e) = objects::add_library_calls(r.libcalls) {
            crate::say!("shadowgraph: {e}; library calls are not traced for this recording");
        }
    }
    let sites = match chooses {
        true => Some(choose()?),
        false => None,
    };
    let rings = r.rings.as_ref().map(|x| x.dir.as_path());
    // (The markers armed are the last recording's that asks for some:
    // without `-E`, those armed stay.)
    let names = markers::arm(&r.events);
    let rec = recorder::start(r, &r.dir, rings, None, true, sites);
    match &rec {
        Ok(made) => markers::name(&names, made),
        Err(_) if !recorder::active() => {
            markers::disarm();
            objects::restore_originals();
        }
        Err(_) => {}
    }
    rec
}

/// Completes the session of this process, if any, as the process ends
/// (the agent calls it at exit): as [`Session::finish`], tracing left on
/// for the threads that still run. In a forked child, nothing: the session
/// is the parent's to finish.
pub fn finish() {
    if !in_root_process() {
        return;
    }
    match STARTED.get() {
        Some(Started::Count) => count::finish(crate::patch::sigtrap_handler_intact()),
        Some(Started::Record) => {
            control::stop_listening();
            for rec in recorder::under_way() {
                let control = rec_control(&rec);
                recorder::finish(&rec, control);
            }
        }
        Some(Started::Untraced) | None => {}
    }
}

/// The first session: sets the process up, then starts its recording (if
/// it records and has anything to trace).
fn start(config: Config, held: bool) -> Result<Option<Arc<recorder::Recording>>, String> {
    let mut rec = None;
    let started = set_up_first(config, &mut rec, held)?;
    let _ = STARTED.set(started);
    Ok(rec)
}

fn set_up_first(
    mut config: Config,
    rec: &mut Option<Arc<recorder::Recording>>,
    held: bool,
) -> Result<Started, String> {
    crate::log::set(config.log_fd, config.verbose);
    let mut patch = config.patch.clone();
    patch.sort();
    *FIRST_PATCH.lock().unwrap_or_else(|e| e.into_inner()) = patch;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    crate::elf::set_symbol_dir(config.with_syms.clone());
    crate::config::PatternMatch::apply(config.pattern_match);
    let record = match &config.mode {
        Mode::Record(r) => Some(r.clone()),
        Mode::Count(_) | Mode::Nop => None,
    };
    // `record` follows programs started by exec (each a session of its
    // own) when its writer drains the rings, unless told not to.
    let follows_exec = record
        .as_ref()
        .is_some_and(|r| r.rings.is_some() && r.children);
    let started_by_exec = config.lineage.root_pid.is_some_and(|root| root != pid);
    if started_by_exec && !follows_exec {
        // A program the traced one started: not traced, but the writer
        // hears of it.
        if let Some(r) = record.as_ref().filter(|r| r.children) {
            if let Some(rings) = &r.rings {
                exec::note_untraced(
                    &rings.dir,
                    pid,
                    "programs started by exec are followed only by `record`",
                );
            }
        }
        return Ok(Started::Untraced);
    }
    ROOT_PID.store(pid, Ordering::Relaxed);
    config.lineage.root_pid = Some(pid);
    pass_on(&config);
    if let Some(w) = config.text_write {
        crate::patch::set_write_mode(match w {
            config::TextWrite::Mprotect => crate::patch::WriteMode::Mprotect,
            config::TextWrite::ProcMem => crate::patch::WriteMode::ProcMem,
        });
    }
    // Returns come back through each site's stub, unless told to hijack
    // them (to compare).
    fgraph::set_site_stubs(config.returns == config::Returns::SiteStubs);
    // Every shadow stack's size, before the first is mapped.
    if let Some(b) = config.stack_bytes {
        fgraph::set_stack_bytes(b)?;
    }
    let started = match &config.mode {
        Mode::Count(c) => {
            count::start(&config.objects, &config.patch, c.graph, c.report.clone())?;
            Started::Count
        }
        Mode::Record(r) => start_recording(&r.clone(), &mut config, rec, held)?,
        // (The agent's hooks, `mcount` and the others, do nothing.)
        Mode::Nop => Started::Untraced,
    };
    Ok(started)
}

/// `record`: the recorders of `r`, into this image's directory (their
/// metadata written now unless the world is `held`).
fn start_recording(
    r: &config::Record,
    config: &mut Config,
    rec: &mut Option<Arc<recorder::Recording>>,
    held: bool,
) -> Result<Started, String> {
    if let Some(rings) = &r.rings {
        if rings.layout != ring::LAYOUT {
            return Err(format!(
                "this agent writes ring layout {} but the `shadowgraph` running it reads layout {}: they come from different builds (rebuild both: cargo build --release)",
                ring::LAYOUT,
                rings.layout
            ));
        }
    }
    let follow = r.rings.as_ref().filter(|_| r.children);
    let started_by_exec = follow.is_some() && config.lineage.session.is_some();
    // `--force`: a program without sites is traced by its library calls.
    let forced = r.force && config.patch.is_empty() && r.libcalls != config::LibCalls::Off;
    let modules = match objects::discover(&config.objects, &config.patch) {
        Ok(m) => m,
        Err(_) if forced => Vec::new(),
        Err(e) if started_by_exec => {
            // A program the traced one started (a shell, a tool) that was
            // not built for tracing: said once by `record`, not here.
            if let Some(rings) = follow {
                // SAFETY: getpid has no preconditions.
                exec::note_untraced(&rings.dir, unsafe { libc::getpid() }, &e);
            }
            return Ok(Started::Untraced);
        }
        Err(_) if follow.is_some() && config.patch.is_empty() && !built_with_hooks() => {
            // The recorded program itself has nothing to trace: a script's
            // interpreter or a launcher (`sh -c`, `make`), which `record`
            // let through and said so. The programs it starts by exec are
            // sessions of their own, each in its directory.
            config.lineage.session = Some(exec::launcher_session());
            pass_on(config);
            return Ok(Started::Untraced);
        }
        Err(e) => return Err(e),
    };
    let dir = match follow {
        Some(rings) => {
            let (dir, id) = exec::start_session(&r.dir, &rings.dir, started_by_exec)?;
            config.lineage.session = Some(id);
            pass_on(config);
            dir
        }
        None => r.dir.clone(),
    };
    recorder::init_clock(r.clock);
    let mut modules = modules;
    if r.libcalls != config::LibCalls::Off {
        let others = match r.libcalls {
            config::LibCalls::Nested => process::loaded_objects(),
            _ => Vec::new(),
        };
        let calls = if modules.is_empty() {
            objects::program_library_calls(r.libcalls, &others)
        } else {
            objects::library_calls(r.libcalls, &modules, &others)
        };
        modules.extend(calls);
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    crate::debug!(1, "process {pid}: recording into {}", dir.display());
    for m in &modules {
        let traced = m.usable().count();
        let (path, n) = (m.path.display(), m.sites.len());
        crate::debug!(
            1,
            "{path}: {traced} of {n} sites traced (load bias {:#x})",
            m.bias
        );
        for s in m.usable() {
            crate::debug!(2, "{path}: {} at {:#x} ({:?})", s.function, s.addr, s.kind);
        }
        for s in m.sites.iter().filter(|s| !s.usable()) {
            let why = s.disabled.as_deref().unwrap_or("");
            crate::debug!(
                3,
                "{path}: {} at {:#x} not traced: {why}",
                s.function,
                s.addr
            );
        }
    }
    ftrace::add_modules(modules).map_err(|e| e.to_string())?;
    objects::follow();
    CHILDREN_RECORD.store(r.children, Ordering::Relaxed);
    install_fatal_handlers();
    // SAFETY: registering a plain extern "C" child handler.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    crate::fgraph::on_vfork(&VFORK_HOOKS);
    // Set up: sessions after this one record on the same sites, even if
    // this one's recording cannot start.
    let _ = STARTED.set(Started::Record);
    // Only the recorded program's first image listens for commands.
    let control = r.control.as_ref().filter(|_| !started_by_exec);
    let rings = r.rings.as_ref().map(|x| x.dir.as_path());
    let names = markers::arm(&r.events);
    let made =
        recorder::start(r, &dir, rings, control, !held, None).inspect_err(|_| markers::disarm())?;
    markers::name(&names, &made);
    if let Some(c) = control {
        control::start(made.users(), c)?;
    }
    if r.agent && !started_by_exec {
        control::listen_as_agent(made.users());
    }
    *rec = Some(made);
    Ok(Started::Record)
}

/// Whether this program was built with plain `-pg` or
/// `-finstrument-functions` (`record` traces it: it is no launcher, and
/// failing to find its functions is said).
fn built_with_hooks() -> bool {
    crate::elf::scan_file(std::path::Path::new("/proc/self/exe")).is_ok_and(|f| f.built_with_hooks)
}

/// The configuration, with this process's place in the lineage, for the
/// programs it starts by exec: when it came through the environment, it
/// is passed on the same way.
fn pass_on(config: &Config) {
    if std::env::var_os(config::ENV).is_none() {
        return;
    }
    let Ok(v) = std::ffi::CString::new(config.to_env_value()) else {
        return;
    };
    let k = std::ffi::CString::new(config::ENV).expect("no NUL in the name");
    // SAFETY: setenv with NUL-terminated strings, while the process has one
    // thread (the agent's constructor runs before main).
    unsafe { libc::setenv(k.as_ptr(), v.as_ptr(), 1) };
}

/// Forked children go on recording (`record` without `--no-children`).
static CHILDREN_RECORD: AtomicBool = AtomicBool::new(false);

/// A forked child inherits the parent's rings: it must not write them.
extern "C" fn after_fork_child() {
    recorder::after_fork_child(CHILDREN_RECORD.load(Ordering::Relaxed));
}

/// A traced `vfork`'s child records into rings of its own (when forked
/// children are recorded); its parent gets its own back.
static VFORK_HOOKS: crate::fgraph::VforkHooks = crate::fgraph::VforkHooks {
    child: || CHILDREN_RECORD.load(Ordering::Relaxed) && recorder::vfork_child(),
    parent: recorder::vfork_parent,
};

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
    if in_root_process() {
        recorder::flush();
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
