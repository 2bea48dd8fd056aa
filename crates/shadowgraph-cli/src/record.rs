//! `record`: the program run under the agent, its rings drained by the
//! writer into the data directory, the recording completed and summed up.

use crate::children::{wait_with_usage, ForwardSignals, Lifeline, CHILD};
use crate::launch::{agent_path, check_program, exit_code, find_program, preload};
use crate::options::RecordOptions;
use shadowgraph::config;
use shadowgraph::record::collect;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::Ordering;

/// Runs `program` recording into `data` (an existing directory is renamed
/// to `<data>.old`).
pub(crate) fn record(
    data: &Path,
    opts: &RecordOptions,
    program: &[String],
) -> Result<ExitCode, String> {
    // The options checked before anything is moved or made.
    let checked = opts.config(Path::new("/"), Path::new("/"))?;
    shadowgraph::elf::set_symbol_dir(checked.with_syms.clone());
    let (prog, args) = program.split_first().ok_or("no program given")?;
    let path = find_program(prog)?;
    // (With -P, a program without patchable entries is patched; with
    // --force, its library calls are traced, unless --no-libcall leaves
    // them out: then its libraries' sites, or those of the programs it
    // starts, are what is traced, as without --force.)
    let forced = opts.force && opts.libcalls() != config::LibCalls::Off;
    let launcher = check_program(&path)?.filter(|_| opts.patch.is_empty() && !forced);
    crate::sites::check_patch(&path, &opts.patch)?;
    if let Some(why) = &launcher {
        if opts.no_children {
            return Err(format!(
                "{prog}: {why}, and --no-children keeps the programs it starts from being traced: nothing to record"
            ));
        }
    }
    let agent = agent_path()?;
    if opts.run.list_event {
        let st = program_command(&path, (prog, args), &agent, opts)
            .env(shadowgraph::session::LIST_EVENTS_ENV, "1")
            .status()
            .map_err(|e| format!("cannot run {prog}: {e}"))?;
        return Ok(exit_code(st));
    }
    if opts.run.nop {
        let config = config::Config {
            mode: config::Mode::Nop,
            ..checked
        };
        let mut command = program_command(&path, (prog, args), &agent, opts);
        return run_nop(command.env(config::ENV, config.to_env_value()), prog, opts);
    }
    let Prepared {
        abs,
        rel,
        config,
        collector,
    } = prepare_unstarted(data, opts, &path)?;
    shadowgraph::debug!(
        1,
        "running {} with the agent {}",
        path.display(),
        agent.display()
    );
    shadowgraph::debug!(2, "the agent's configuration: {}", config.to_env_value());
    let mut command = program_command(&path, (prog, args), &agent, opts);
    command.env(config::ENV, config.to_env_value());
    if opts.keep_pid {
        let program = (path.as_path(), prog.as_str(), launcher.as_deref());
        return keep_pid(command, collector, (&abs, &rel), opts, program);
    }
    let collector = start_writer(collector, opts);
    let _signals = ForwardSignals::install();
    // Unless told not to, the recording lasts as long as the program's
    // descendants too (those it forked, and the programs they became).
    let lifeline = if opts.no_children {
        None
    } else {
        Some(Lifeline::new().map_err(|e| format!("cannot make a pipe: {e}"))?)
    };
    let mut sched = open_sched(opts, (&abs, &rel), None);
    let mut program_pid = 0;
    let status = command.spawn().and_then(|child| {
        let started = std::time::Instant::now();
        let pid = child.id() as i32;
        program_pid = pid;
        CHILD.store(pid, Ordering::Release);
        if let Some(s) = &mut sched {
            s.start();
        }
        let lifeline = lifeline.map(Lifeline::handed_over);
        let st = wait_with_usage(pid, started);
        CHILD.store(0, Ordering::Release);
        if let Some(l) = lifeline {
            l.wait_for_descendants(prog);
        }
        st
    });
    if let Some(s) = sched {
        s.finish();
    }
    let finished = collector.finish();
    let (status, usage) = status.map_err(|e| format!("cannot run {prog}: {e}"))?;
    say_time(opts, &usage);
    let run = (status, &usage);
    let write_failed = conclude(
        finished,
        (&abs, &rel),
        opts,
        (&path, prog, launcher.as_deref()),
        Some(run),
        program_pid,
    );
    if !write_failed.is_empty() && status.success() {
        // (The program's own failure first.)
        return Ok(ExitCode::FAILURE);
    }
    Ok(exit_code(status))
}

/// `program` (its name and arguments) at `path`, under `agent`, as
/// `record`'s options run it (`--no-pltbind`, `--no-randomize-addr`), its
/// standard error the one `shadowgraph` was started with.
fn program_command(
    path: &Path,
    (prog, args): (&str, &[String]),
    agent: &Path,
    opts: &RecordOptions,
) -> Command {
    let mut command = Command::new(path);
    std::os::unix::process::CommandExt::arg0(&mut command, prog);
    crate::logfile::program_stderr(&mut command);
    if opts.no_pltbind {
        command.env("LD_BIND_NOT", "1");
    }
    if opts.run.no_randomize_addr {
        no_randomize_addr(&mut command);
    }
    command.args(args).env("LD_PRELOAD", preload(agent));
    command
}

/// `--time`'s lines, if asked for.
fn say_time(opts: &RecordOptions, usage: &crate::sysinfo::Usage) {
    if opts.run.time {
        print!(
            "{}",
            crate::options::time_lines(usage.elapsed_ns, &usage.rusage)
        );
    }
}

/// `--nop`: `command` (the program under the agent, nothing traced) run,
/// no recording made (`--time` said all the same), its exit status ours.
fn run_nop(command: &mut Command, prog: &str, opts: &RecordOptions) -> Result<ExitCode, String> {
    let _signals = ForwardSignals::install();
    let (status, usage) = command
        .spawn()
        .and_then(|child| {
            let pid = child.id() as i32;
            CHILD.store(pid, Ordering::Release);
            let st = wait_with_usage(pid, std::time::Instant::now());
            CHILD.store(0, Ordering::Release);
            st
        })
        .map_err(|e| format!("cannot run {prog}: {e}"))?;
    say_time(opts, &usage);
    Ok(exit_code(status))
}

/// The program runs without address space layout randomization (its
/// personality, kept across exec: linux/personality.h's
/// ADDR_NO_RANDOMIZE).
fn no_randomize_addr(command: &mut Command) {
    const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;
    // SAFETY: personality(2) is one system call, async-signal-safe, as
    // what runs between fork and exec must be; it changes the child only.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, || {
            // (0xffffffff: the current personality, unchanged.)
            let now = libc::personality(0xffff_ffff);
            if now != -1 {
                libc::personality(now as libc::c_ulong | ADDR_NO_RANDOMIZE);
            }
            Ok(())
        })
    };
}

/// `record --keep-pid`: this process becomes the program (`command`, by
/// exec), keeping its process id; a child of it, forked first, is the
/// writer and completes the recording once the program and the processes
/// it started have ended (a pipe they all inherit reaches end-of-file).
/// Returns in that child only.
fn keep_pid(
    mut command: Command,
    collector: collect::Collector,
    dirs: (&Path, &[(String, PathBuf)]),
    opts: &RecordOptions,
    program: (&Path, &str, Option<&str>),
) -> Result<ExitCode, String> {
    use std::os::unix::process::CommandExt;
    let lifeline = Lifeline::new().map_err(|e| format!("cannot make a pipe: {e}"))?;
    // (On at the program's exec, here; copied by the child.)
    let sched = open_sched(opts, dirs, None);
    // SAFETY: this process has one thread (the writer's is started after,
    // in the child), so the child may run anything.
    match unsafe { libc::fork() } {
        -1 => Err(format!(
            "cannot fork the writer: {}",
            std::io::Error::last_os_error()
        )),
        0 => {
            let collector = start_writer(collector, opts);
            let _signals = ForwardSignals::install();
            let mut sched = sched.and_then(|mut s| match s.map_again() {
                Ok(()) => Some(s),
                Err(e) => {
                    eprintln!("# schedule events are not recorded: {e}");
                    None
                }
            });
            if let Some(s) = &mut sched {
                s.start();
            }
            let lifeline = lifeline.handed_over();
            // SAFETY: getppid has no preconditions.
            let program_pid = unsafe { libc::getppid() };
            lifeline.wait_for_descendants(program.1);
            if let Some(s) = sched {
                s.finish();
            }
            let finished = collector.finish();
            let failed = conclude(finished, dirs, opts, program, None, program_pid);
            Ok(if failed.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        _ => {
            // The program inherits the lifeline's write end (ours, kept
            // open across exec); only an exec that failed comes back.
            let e = command.exec();
            drop(lifeline);
            Err(format!("cannot run {}: {e}", program.1))
        }
    }
}

/// Copies the schedule events of `from` (`perf-cpu<N>.dat`) into `to`, a
/// directory of a program started by exec (its views find its threads'
/// events there); a copy that fails is said.
fn copy_sched(from: &Path, to: &Path) {
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("perf-cpu") && name.ends_with(".dat") {
            if let Err(err) = std::fs::copy(e.path(), to.join(&name)) {
                eprintln!("shadowgraph: {}: {err}", to.join(&name).display());
            }
        }
    }
}

/// The schedule events of the program about to start (or of the running
/// process `attached`), unless `--no-sched`, and its threads' new names
/// where `-E linux:task-name` asks, into each tracer's directory
/// (uftrace's `perf-cpu<N>.dat`); where perf events cannot be opened,
/// said once, and the recording goes on.
pub(crate) fn open_sched(
    opts: &RecordOptions,
    (abs, rel): (&Path, &[(String, PathBuf)]),
    attached: Option<i32>,
) -> Option<crate::sched::Sched> {
    let glob =
        |e: &str, name: &str| shadowgraph_data::pattern::glob_match(e.as_bytes(), name.as_bytes());
    let names = opts.events.iter().any(|e| glob(e, "linux:task-name"));
    for e in opts.events.iter().flat_map(|e| e.split(';')) {
        if e.starts_with("linux:") && !glob(e, "linux:task-name") && !glob(e, "linux:schedule") {
            eprintln!(
                "shadowgraph: -E {e}: no such event (linux:task-name and linux:schedule are)"
            );
        }
    }
    // (`--no-event` leaves out the events recorded by default, not those
    // `-E` asks for, as uftrace's.)
    let kinds = crate::sched::Kinds {
        switches: !opts.no_sched && !opts.no_event,
        names,
    };
    if !(kinds.switches || kinds.names) {
        return None;
    }
    let dirs: Vec<PathBuf> = rel
        .iter()
        .map(|(_, r)| collect::instance_dir(abs, r))
        .collect();
    for d in &dirs {
        let _ = std::fs::create_dir_all(d);
    }
    let opened = match attached {
        None => crate::sched::Sched::open(&dirs, kinds),
        Some(pid) => crate::sched::Sched::open_attached(pid, &dirs, kinds),
    };
    match opened {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("# schedule events are not recorded: {e} (see kernel.perf_event_paranoid)");
            None
        }
    }
}

/// What a recording's end says and completes: the programs left untraced,
/// each directory's summary and metadata (`launcher`: why the program
/// itself has no sites, where it only starts others; `run`: its exit and
/// usage, where known). Returns where writing the records failed.
fn conclude(
    finished: collect::Finished,
    (abs, rel): (&Path, &[(String, PathBuf)]),
    opts: &RecordOptions,
    (path, prog, launcher): (&Path, &str, Option<&str>),
    run: Option<(std::process::ExitStatus, &crate::sysinfo::Usage)>,
    program_pid: i32,
) -> Vec<String> {
    let totals = finished.totals;
    // One line per program and reason: a program that runs `system()` in
    // a loop starts the same shell many times.
    let mut untraced: std::collections::BTreeMap<(&str, &str), Vec<i32>> = Default::default();
    for (pid, exe, why) in &finished.execs {
        untraced.entry((exe, why)).or_default().push(*pid);
    }
    for ((exe, why), pids) in untraced {
        match pids[..] {
            [pid] => eprintln!("# not traced: process {pid} started {exe} (exec): {why}"),
            _ => eprintln!(
                "# not traced: {} processes started {exe} (exec; {}{}): {why}",
                pids.len(),
                pids.iter()
                    .take(3)
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if pids.len() > 3 { ", …" } else { "" }
            ),
        }
    }
    if !finished.running.is_empty() {
        eprintln!(
            "shadowgraph: warning: processes {:?} started by {prog} were still running when it exited: their later calls are not recorded",
            finished.running
        );
    }
    // A program without sites of its own whose libraries have some
    // recorded itself (its metadata is there): no launcher after all.
    let launcher = launcher.filter(|_| {
        !rel.iter().any(|(_, r)| {
            collect::instance_dir(abs, r)
                .join("shadowgraph.info")
                .exists()
        })
    });
    if let Some(why) = &launcher {
        eprintln!(
            "# {prog}: {why}; it ran untraced, and each program it started that has patchable entries is recorded into a directory of its own"
        );
    }
    // The recording's directories, then those of every program started by
    // exec (a session of its own each).
    // (label, directory, whether it is an exec session's whose exit is not
    // the program's)
    // (A launcher records nothing of its own.)
    let mut dirs: Vec<(String, PathBuf, bool)> = rel
        .iter()
        .filter(|_| launcher.is_none())
        .map(|(label, r)| (label.clone(), collect::instance_dir(abs, r), false))
        .collect();
    if launcher.is_some() && finished.sessions.is_empty() {
        eprintln!(
            "shadowgraph: warning: nothing was recorded: no program {prog} started had patchable entries"
        );
    }
    for (base, pid) in &finished.sessions {
        let what = format!(
            "process {pid} ({}, started by exec): ",
            base.file_name().unwrap_or_default().to_string_lossy()
        );
        // A program the recorded one became by exec ends as it ends: its
        // exit status is ours to tell. Another process's is not.
        let foreign = *pid != program_pid;
        for (label, r) in rel {
            let d = collect::instance_dir(base, r);
            // The schedule events of every process, with its calls.
            copy_sched(&collect::instance_dir(abs, r), &d);
            dirs.push((format!("{what}{label}"), d, foreign));
        }
    }
    say_unmatched(dirs.iter().map(|d| d.1.as_path()));
    // Where writing the records failed, and why.
    let mut write_failed = Vec::new();
    for (label, d, foreign) in dirs {
        let t = totals.get(&d).copied().unwrap_or_default();
        // The program's exit and usage are the recording's, not those of
        // a session in another process (not ours to wait for).
        let run = run.filter(|_| !foreign);
        write_failed.extend(conclude_dir(&label, &d, t, path, prog, run));
        if opts.srcline || opts.dwarf_args() {
            write_srclines(&d, opts.srcline, opts.dwarf_args());
        }
    }
    if !write_failed.is_empty() {
        // The summary above says what was kept; the status says that it is
        // not the whole recording.
        eprintln!(
            "shadowgraph: the recording is incomplete: writing it failed ({})",
            write_failed.join("; ")
        );
    }
    write_failed
}

/// The warnings of the patterns that matched no function, once for the
/// recording: those of every program in it that recorded (the agents keep
/// them in their metadata, `unmatched`: a pattern may match in a program
/// started by exec and not in the one that started it).
pub(crate) fn say_unmatched<'a>(dirs: impl IntoIterator<Item = &'a Path>) {
    let mut common: Option<Vec<String>> = None;
    for d in dirs {
        let Ok(info) = shadowgraph_data::dir::DataDir::open(d).map(|dd| dd.info) else {
            continue;
        };
        let here: Vec<String> = info
            .get("unmatched")
            .map(|v| v.split('\t').map(str::to_string).collect())
            .unwrap_or_default();
        common = Some(match common {
            None => here,
            Some(c) => c.into_iter().filter(|w| here.contains(w)).collect(),
        });
    }
    for w in common.into_iter().flatten() {
        eprintln!("shadowgraph: warning: {w}");
    }
}

/// A recording's directory and its writer (started, or not yet: `C`),
/// made before tracing starts.
pub(crate) struct Prepared<C = collect::threads::CollectorThread> {
    /// The data directory, absolute.
    pub abs: PathBuf,
    /// Each tracer's label and place in it.
    pub rel: Vec<(String, PathBuf)>,
    /// The configuration for the agent.
    pub config: config::Config,
    /// The writer, draining the rings.
    pub collector: C,
}

/// Makes the data directory `data` (an existing one is moved to
/// `<data>.old`) and starts the writer that drains the traced threads'
/// rings (shared memory) into it.
/// `program`: the executable (for `-a`, the specs of its functions).
pub(crate) fn prepare(
    data: &Path,
    opts: &RecordOptions,
    program: &Path,
) -> Result<Prepared, String> {
    let p = prepare_unstarted(data, opts, program)?;
    Ok(Prepared {
        abs: p.abs,
        rel: p.rel,
        config: p.config,
        collector: start_writer(p.collector, opts),
    })
}

/// The writers started: `--num-thread` of them (at most one per online
/// processor, as uftrace's), at `--rt-prio`'s priority if given (said,
/// and recorded all the same, where the system refuses it).
fn start_writer(
    collector: collect::Collector,
    opts: &RecordOptions,
) -> collect::threads::CollectorThread {
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let n = opts.run.num_thread.map_or(1, |n| (n as usize).min(cpus));
    let writer = collector.spawn_n(n);
    if let Some(prio) = opts.run.rt_prio {
        if let Err(e) = writer.set_rt_prio(prio) {
            eprintln!("shadowgraph: warning: --rt-prio {prio}: the writer keeps its priority: {e}");
        }
    }
    writer
}

/// [`prepare`], the writer made and not started.
fn prepare_unstarted(
    data: &Path,
    opts: &RecordOptions,
    program: &Path,
) -> Result<Prepared<collect::Collector>, String> {
    if data.exists() {
        let old = PathBuf::from(format!("{}.old", data.display()));
        // A recording under way keeps writing where it is: neither moved
        // aside (its files and its metadata would part) nor removed.
        for d in [data, old.as_path()] {
            if recording_into(d) {
                return Err(under_way(d));
            }
        }
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(data, &old)
            .map_err(|e| format!("cannot move {} aside: {e}", data.display()))?;
    }
    std::fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
    hold_while_recording(data)?;
    let abs = std::fs::canonicalize(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let names = opts.tracer_names();
    // Each instance's place in a recording directory (and in a session's).
    let rel: Vec<(String, PathBuf)> = if names.is_empty() {
        vec![(String::new(), PathBuf::new())]
    } else {
        names
            .iter()
            .map(|n| (format!("tracer {n}: "), PathBuf::from(n)))
            .collect()
    };
    // The writer: drains the traced threads' rings (shared memory) into
    // the directories while the program runs.
    // (In /dev/shm, else in the temporary directory.)
    let rel_dirs: Vec<PathBuf> = rel.iter().map(|r| r.1.clone()).collect();
    let mut failed = Vec::new();
    let mut made = None;
    for shm in shadowgraph::record::shm::shm_dirs("rings") {
        match collect::Collector::new(&shm, &abs, rel_dirs.clone()) {
            Ok(c) => {
                made = Some((shm, c));
                break;
            }
            Err(e) => failed.push(format!("{}: {e}", shm.display())),
        }
    }
    let (shm, mut collector) =
        made.ok_or_else(|| format!("no place for the threads' buffers ({})", failed.join("; ")))?;
    let mut config = opts.config(&abs, &shm)?;
    opts.add_auto_args(&mut config, program)?;
    collector.set_ring_len(shadowgraph::record::writer::shared_ring_len(opts.buffer));
    Ok(Prepared {
        abs,
        rel,
        config,
        collector,
    })
}

/// Marks the data directory `data` as one a recording writes into, until
/// this process ends: an exclusive `flock` on the directory, which the
/// kernel drops when the process does, however it ends.
fn hold_while_recording(data: &Path) -> Result<(), String> {
    let d = std::fs::File::open(data).map_err(|e| format!("{}: {e}", data.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(d.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(under_way(data));
    }
    // Held as long as the process lives (closed on exec: no program it
    // starts holds it).
    std::mem::forget(d);
    Ok(())
}

/// Why a recording cannot be made in `d`: another one writes into it.
fn under_way(d: &Path) -> String {
    format!(
        "{}: a recording is under way into it; give another directory (-d)",
        d.display()
    )
}

/// Whether a recording is writing into the directory `d` (another
/// process holds [`hold_while_recording`]'s lock on it).
fn recording_into(d: &Path) -> bool {
    let Ok(f) = std::fs::File::open(d) else {
        return false;
    };
    // SAFETY: flock on a descriptor we own; released when it closes.
    let busy = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0;
    busy && std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

/// `record --srcline` (and `-a`): beside each traced object's `.sym`, a
/// `.dbg` file (uftrace's) with where each of its functions is declared,
/// from its DWARF (or its debug file's), and with `enums` the definitions
/// of the enums `-a`'s specs of the object name. An object without says
/// nothing; a program without is said once, with `srcline` (asked for).
pub(crate) fn write_srclines(d: &Path, srcline: bool, enums: bool) {
    let Ok(dd) = shadowgraph_data::dir::DataDir::open(d) else {
        return;
    };
    let mut done = std::collections::HashSet::new();
    for (i, (_, _, path)) in dd.modules.iter().enumerate() {
        // (An object mapped twice is one; `@plt` ranges are not files.)
        if !done.insert(path) || !Path::new(path).is_file() {
            continue;
        }
        let lines = match shadowgraph::elf::lines::declared_functions(Path::new(path)) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("shadowgraph: --srcline: {e}");
                continue;
            }
        };
        if lines.is_empty() {
            if i == 0 && srcline {
                eprintln!(
                    "shadowgraph: --srcline: {path} has no debug information (build it with -g)"
                );
            }
            continue;
        }
        let mut text = format!("# path name: {path}\n");
        if enums {
            let defs = shadowgraph::elf::autoargs::auto_specs(Path::new(path)).unwrap_or_default();
            for e in defs.enums {
                text.push_str(&format!("E: {e}\n"));
            }
        }
        for l in &lines {
            text.push_str(&format!(
                "F: {:x} {}\nL: {} {}\n",
                l.offset, l.name, l.line, l.file
            ));
        }
        let base = Path::new(path)
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        let p = d.join(format!("{base}.dbg"));
        if let Err(e) = std::fs::write(&p, text) {
            eprintln!("shadowgraph: --srcline: {}: {e}", p.display());
        }
    }
}

/// Completes the recording directory `d` (labelled `label`) of `prog`
/// (`exe`) with what the writer counted (`t`), converts it to uftrace's
/// format and sums it up on stderr; `run` is the program's exit and usage
/// when they are the recording's. Returns why writing it failed, if it
/// did.
pub(crate) fn conclude_dir(
    label: &str,
    d: &Path,
    t: collect::Totals,
    exe: &Path,
    prog: &str,
    run: Option<(std::process::ExitStatus, &crate::sysinfo::Usage)>,
) -> Option<String> {
    let mut write_failed = None;
    let info_path = d.join("shadowgraph.info");
    if info_path.exists() {
        let finished = complete_metadata(d, t, exe, run).unwrap_or(false);
        if !finished {
            // Cut short (crash, _exit): the agent wrote metadata at
            // start; the rings held the rest.
            match run {
                None => eprintln!("# {label}it ended without the recording's exit step; what it recorded is kept"),
                Some((status, _)) => eprintln!("# {label}{prog} ended without the recording's exit step ({status}); what it recorded is kept"),
            }
        }
        let converted = shadowgraph_data::dir::DataDir::open(d).and_then(|dd| {
            if shadowgraph_data::profile::is_profile(&dd) {
                Ok(()) // no records to convert
            } else {
                shadowgraph_data::uftrace::export(&dd, d)
            }
        });
        if let Err(e) = converted {
            eprintln!("shadowgraph: {e}");
        }
    }
    match shadowgraph_data::dir::DataDir::open(d) {
        Ok(dd) if shadowgraph_data::profile::is_profile(&dd) => {
            match shadowgraph_data::profile::read(&dd) {
                Ok(rows) => eprintln!(
                    "# {label}profiled {} calls of {} functions into {}",
                    rows.values().map(|r| r.calls).sum::<u64>(),
                    rows.keys()
                        .map(|k| k.1)
                        .collect::<std::collections::HashSet<_>>()
                        .len(),
                    d.display()
                ),
                Err(e) => eprintln!("shadowgraph: {label}{e}"),
            }
        }
        Ok(dd) => {
            // The writer's count once the exit step has run (a file's
            // length counts the data after records as records too); else
            // counted from the files.
            let counted = dd.info.get("finished").and(dd.info.get("records"));
            let records = counted.and_then(|n| n.parse::<u64>().ok()).unwrap_or_else(|| {
                dd.tids
                    .iter()
                    .filter_map(|&t| std::fs::metadata(dd.dat_path(t)).ok())
                    .map(|m| match dd.compact() {
                        true => shadowgraph_data::compact::records_in(m.len()),
                        false => m.len() / 16,
                    })
                    .sum()
            });
            eprintln!(
                "# {label}recorded {records} records ({} lost) from {} threads into {}",
                dd.info.get("lost").unwrap_or("?"),
                dd.tids.len(),
                d.display()
            );
            if let Some(w) = dd.loss_warning() {
                eprintln!("shadowgraph: {label}{w}");
            }
            if let Some(e) = dd.info.get("write_error") {
                write_failed = Some(format!("{}: {e}", d.display()));
            }
            if let Some(n) = run.and_then(|(_, usage)| dd.writer_wait_note(usage.elapsed_ns)) {
                eprintln!("shadowgraph: {label}{n}");
            }
        }
        Err(_) => match run {
            Some((status, _)) => eprintln!(
                "shadowgraph: {prog} exited ({status}) without a complete recording in {} (see above)",
                d.display()
            ),
            None => eprintln!(
                "shadowgraph: {label}no complete recording in {} (see above)",
                d.display()
            ),
        },
    }
    write_failed
}

/// Adds what the writer counted to the agent's `shadowgraph.info`;
/// returns whether the agent finished the recording (its exit step ran).
pub(crate) fn complete_metadata(
    dir: &Path,
    t: collect::Totals,
    exe: &Path,
    run: Option<(std::process::ExitStatus, &crate::sysinfo::Usage)>,
) -> Result<bool, String> {
    use shadowgraph_data::dir::{DataDir, Info};
    let d = DataDir::open(dir).map_err(|e| e.to_string())?;
    let n = |k: &str| {
        d.info
            .get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let finished = d.info.get("finished").is_some();
    let mut info = Info::default();
    for (k, v) in &d.info.fields {
        info.set(k, v);
    }
    info.set("records", n("records") + t.written);
    info.set("lost", n("lost") + t.lost);
    let (steps, worst) = d.info.clock_steps_back();
    info.set(
        "clock_steps_back",
        format!(
            "{} / {}",
            steps + t.clock_steps_back,
            worst.max(t.clock_step_max)
        ),
    );
    if t.errno != 0 && d.info.get("write_error").is_none() {
        info.set("write_error", std::io::Error::from_raw_os_error(t.errno));
    }
    // A session's program is not `exe`: the agent named its own.
    let exe = d
        .info
        .get("exe")
        .map(PathBuf::from)
        .unwrap_or(exe.to_owned());
    crate::sysinfo::describe_machine(&mut info);
    if let Some((status, usage)) = run {
        crate::sysinfo::describe_run(&mut info, &exe, status, usage);
    } else if let Some(id) = shadowgraph::elf::build_id(&exe) {
        info.set("build_id", id);
    }
    info.write(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(finished)
}
