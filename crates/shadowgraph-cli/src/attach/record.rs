//! `record -p PID`: a recording of a process that is already running. The
//! agent is brought in (or found), one of the program's threads is made to
//! call its `shadowgraph_attach` with the configuration and a control
//! socket, and the session runs until `--duration` is over, `shadowgraph`
//! is interrupted (Ctrl-C, SIGTERM), or the process exits. Then the
//! session is told to stop: the sites go back to nops and the buffers are
//! written out, and the process runs on untraced.

use super::inject::{Stopped, DATA};
use super::{hold_outside_agent, load_agent, pick_thread, AttachError, Loaded};
use crate::children::{ForwardSignals, STOP_WAITING};
use crate::options::RecordOptions;
use crate::record::{conclude_dir, prepare, Prepared};
use shadowgraph::config::Mode;
use shadowgraph::record::collect;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Records process `pid` into `data` as `opts` say, for `duration_ns` at
/// most.
pub(crate) fn record_attached(
    data: &Path,
    opts: &RecordOptions,
    pid: i32,
    duration_ns: Option<u64>,
) -> Result<ExitCode, String> {
    opts.config(Path::new("/"), Path::new("/"))?;
    let exe =
        std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| AttachError::about(pid, e).0)?;
    let Prepared {
        abs,
        rel,
        mut config,
        collector,
    } = prepare(data, opts, &exe)?;
    // (The attached process has none of our descriptors: its agent says
    // its messages on its own standard error.)
    config.log_fd = None;
    let rings = match &config.mode {
        Mode::Record(r) => r.rings.as_ref().map(|r| r.dir.clone()),
        Mode::Count(_) | Mode::Nop => None,
    }
    .ok_or("a recording without rings cannot attach")?;
    let socket = rings.join("control.sock");
    let _signals = ForwardSignals::install();
    let started = start(pid, &config.to_env_value(), &socket);
    let client = match started {
        Ok(c) => c,
        Err(e) => {
            let _ = collector.finish();
            let _ = std::fs::remove_dir_all(&abs);
            return Err(e.0);
        }
    };
    let helper = spawn_helper(pid, &socket);
    let mut sched = {
        // Every thread held while their events are opened: none is made
        // meanwhile (one made while its maker's events were being opened
        // would have some processors' events and not others'), and those
        // made later inherit their maker's. (The threads, then the lock.)
        let _held = ((!opts.no_sched && !opts.no_event) || !opts.events.is_empty())
            .then(|| lock_ptrace(pid).and_then(|l| Ok((stop_all(pid, None)?, l))));
        crate::record::open_sched(opts, (&abs, &rel), Some(pid))
    };
    if let Some(s) = &mut sched {
        s.start();
    }
    eprintln!(
        "# attached to process {pid} ({}); recording until {}",
        exe.display(),
        match duration_ns {
            Some(ns) => format!("{:.3} s have passed, Ctrl-C, or its exit", ns as f64 / 1e9),
            None => "Ctrl-C or its exit".into(),
        }
    );
    let ended_by_exit = wait(pid, &client, duration_ns);
    // Calls still under way get their exits at the session's end, in the
    // processes that run at that moment (one that ended before ended
    // inside its open calls, as by `_exit`).
    let ended_ns = shadowgraph::clock::monotonic_ns();
    let running = running_processes();
    stop(&client, pid);
    end_helper(helper);
    if let Some(s) = sched {
        s.finish();
    }
    let finished = collector.finish();
    let prog = exe.display().to_string();
    let dirs: Vec<_> = rel
        .iter()
        .map(|(_, r)| collect::instance_dir(&abs, r))
        .collect();
    crate::record::say_unmatched(dirs.iter().map(|d| d.as_path()));
    let mut write_failed = Vec::new();
    for (label, r) in &rel {
        let d = collect::instance_dir(&abs, r);
        let mut t = finished.totals.get(&d).copied().unwrap_or_default();
        if !ended_by_exit {
            let running = |pid: i32| running.contains(&pid);
            match shadowgraph_data::open_calls::close_open_calls(&d, ended_ns, running) {
                Ok(n) => t.written += n,
                Err(e) => eprintln!("shadowgraph: {}: {e}", d.display()),
            }
        }
        write_failed.extend(conclude_dir(label, &d, t, &exe, &prog, None));
        if opts.srcline || opts.dwarf_args() {
            crate::record::write_srclines(&d, opts.srcline, opts.dwarf_args());
        }
    }
    if ended_by_exit {
        eprintln!("# process {pid} exited");
    }
    if !write_failed.is_empty() {
        eprintln!(
            "shadowgraph: the recording is incomplete: writing it failed ({})",
            write_failed.join("; ")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Brings the agent into `pid`, starts the session of `config` there and
/// returns the control connection once the agent says it started.
fn start(pid: i32, config: &str, socket: &Path) -> Result<UnixStream, AttachError> {
    let ptrace_lock = lock_ptrace(pid)?;
    let agent = crate::launch::EMBEDDED_AGENT;
    let loaded = load_agent(pid, agent)?;
    let [attach, serving] =
        agent_symbols(pid, agent, ["shadowgraph_attach", "SHADOWGRAPH_SERVING"])?;
    let mut data = config.as_bytes().to_vec();
    data.push(0);
    let socket_at = data.len() as u64;
    data.extend_from_slice(socket.as_os_str().as_encoded_bytes());
    data.push(0);
    let (r, held) = call_attach(pid, loaded, (attach, serving), data, socket_at, socket)?;
    // The threads run on.
    drop(held);
    drop(ptrace_lock);
    if r < 0 {
        let why = std::io::Error::from_raw_os_error(-r);
        return Err(AttachError(format!(
            "process {pid}: the agent{} cannot start a session: {why}",
            if loaded == Loaded::Reused {
                " already there"
            } else {
                ""
            }
        )));
    }
    let client = UnixStream::connect(socket)
        .map_err(|e| AttachError(format!("process {pid}: {}: {e}", socket.display())))?;
    let line = converse(&client, pid)
        .map_err(|e| AttachError(format!("process {pid}: the agent: {e}")))?;
    match line.strip_prefix("error: ") {
        None if line == "started" => Ok(client),
        Some(why) => Err(AttachError(format!("process {pid}: {why}"))),
        None => Err(AttachError(format!(
            "process {pid}: the agent ended the session before it started"
        ))),
    }
}

/// A helper left behind (`shadowgraph hold-for`, in a process group of
/// its own), once the agent has taken it (it says so on its output,
/// within 2 s): it holds the program's threads for the program's own
/// threads (after a `dlopen`, the new library's sites change while they
/// are held) and, should we be killed, while the session ends — no thread
/// of the program may run into an `int3`. None if it cannot be started
/// (libraries loaded then are not followed, and a killed session ends by
/// `int3`).
fn spawn_helper(pid: i32, socket: &Path) -> Option<std::process::Child> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let me = std::env::current_exe().ok()?;
    let mut helper = Command::new(me)
        .arg("hold-for")
        .arg(pid.to_string())
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    // Its one line, then the end of its output.
    let mut said = String::new();
    let taken = helper
        .stdout
        .take()
        .is_some_and(|mut o| o.read_to_string(&mut said).is_ok() && said == "guarding\n");
    if !taken {
        end_helper(Some(helper));
        return None;
    }
    Some(helper)
}

/// Waits for the helper to end (the agent closes its connection as the
/// session ends), a second at most.
fn end_helper(helper: Option<std::process::Child>) {
    let Some(mut h) = helper else { return };
    let until = Instant::now() + Duration::from_secs(1);
    while matches!(h.try_wait(), Ok(None)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = h.kill();
    let _ = h.wait();
}

/// `shadowgraph hold-for PID SOCKET`: tells the agent of process `pid` it
/// is the helper of the session whose control socket is `socket` ("guard",
/// answered "guarding", which it repeats on its output before closing
/// it), then holds the process's threads whenever the agent asks, until
/// the agent closes the connection (the session ended) or the process is
/// gone.
pub(crate) fn hold_for(pid: i32, socket: &Path) {
    use std::io::Read;
    let Ok(s) = UnixStream::connect(socket) else {
        return;
    };
    if (&s).write_all(b"guard\n").is_err() {
        return;
    }
    // The answer, byte by byte: what follows it is the agent's next
    // request, for `converse`.
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut answer = Vec::new();
    let mut b = [0u8];
    while answer.last() != Some(&b'\n') && answer.len() < 16 {
        match (&s).read(&mut b) {
            Ok(1) => answer.push(b[0]),
            _ => return,
        }
    }
    if answer != b"guarding\n" {
        return;
    }
    let _ = s.set_read_timeout(None);
    {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(b"guarding\n");
        let _ = out.flush();
    }
    // Our output ends (`record -p` reads it to its end): /dev/null in its
    // place.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 of a descriptor we own onto our standard output.
        unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1) };
    }
    // Nothing but holds and releases comes on this connection.
    while let Ok(line) = converse(&s, pid) {
        if line.is_empty() {
            return;
        }
    }
}

/// Makes a thread of process `pid` call the agent's `shadowgraph_attach`
/// (at `fns.0`) with `data` (the configuration, then the socket's path at
/// `socket_at`) and the stopped threads' contexts. An agent `loaded` now:
/// every thread stopped (ptrace), for the first session to start in a
/// stopped world, their contexts with the call. One there already: only
/// the thread that calls it, outside its code; the session starts once
/// the call has returned, the threads running. The call's first step,
/// making the thread that serves the session, may wait for a lock of the
/// loader's that a held thread holds (the caller itself, if it was
/// stopped inside `pthread_create` or `pthread_join`): when the agent's
/// word at `fns.1` does not say it is made within a second, the call is
/// given up and made again, the threads let go meanwhile (5 times at
/// most). The first session's start, with every thread held, takes the
/// loader's locks too: the threads are stopped again until none is held
/// inside the loader (2 s at most). Returns what it returned and the
/// threads held.
fn call_attach(
    pid: i32,
    loaded: Loaded,
    fns: (u64, u64),
    mut data: Vec<u8>,
    socket_at: u64,
    socket: &Path,
) -> Result<(i32, Vec<Stopped>), AttachError> {
    let (attach, serving) = fns;
    data.resize(data.len().next_multiple_of(8), 0);
    let contexts_at = data.len() as u64;
    let mut tries = 0;
    let loader = match loaded {
        Loaded::Now => super::loader_code(pid)?,
        Loaded::Reused => Vec::new(),
    };
    let started = Instant::now();
    loop {
        let (caller, mut held) = if loaded == Loaded::Now {
            let mut held = stop_all(pid, None)?;
            // None inside the loader: the session starts with every
            // thread held, and takes the loader's locks.
            if held.iter().any(|t| super::stopped_in(t, &loader)) {
                drop(held);
                if started.elapsed() > Duration::from_secs(2) {
                    return Err(AttachError(format!(
                        "process {pid}: a thread stays inside the loader (dlopen?); try again"
                    )));
                }
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            // Off the sleds' nops, so that none is left unconverted.
            for t in &mut held {
                t.step_off_nops().map_err(|e| AttachError::about(pid, e))?;
            }
            (pick_thread(pid)?, held)
        } else {
            let t = hold_outside_agent(pid)?;
            (t.tid(), vec![t])
        };
        let mut data = data.clone();
        let mut n = 0u64;
        if loaded == Loaded::Now {
            for t in &held {
                let (pc, sp) = t.context().map_err(|e| AttachError::about(pid, e))?;
                data.extend_from_slice(&pc.to_le_bytes());
                data.extend_from_slice(&sp.to_le_bytes());
                n += 1;
            }
        }
        let t = held
            .iter_mut()
            .find(|t| t.tid() == caller)
            .ok_or_else(|| AttachError(format!("process {pid}: thread {caller} is gone")))?;
        super::inject::write_memory(caller, serving, &0u64.to_le_bytes())
            .map_err(|e| AttachError::about(pid, e))?;
        let made = || {
            let mut w = [0u8; 8];
            super::inject::read_memory(caller, serving, &mut w).is_ok() && w != [0; 8]
        };
        let args = [DATA, DATA - socket_at, DATA - contexts_at, n];
        let give_up = |waited: Duration| waited > Duration::from_secs(1) && !made();
        match t.call_or_give_up(attach, &args, &data, &give_up) {
            Ok(r) => return Ok((r as i64 as i32, held)),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut && tries < 5 => {
                tries += 1;
                // The threads run again (the lock's holder with them); the
                // socket is bound anew.
                drop(held);
                let _ = std::fs::remove_file(socket);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(AttachError(format!(
                    "process {pid}: the agent could not start its thread (a lock of the \
                     loader stays held); try again"
                )))
            }
            Err(e) => return Err(AttachError::about(pid, e)),
        }
    }
}

/// One `shadowgraph` at a time stops threads of a process (two would each
/// find the other's ptrace in the way): a lock on the program's file,
/// which every one of them can open, read-only, in any mount namespace,
/// and which the kernel drops if we die. Held while it lasts.
fn lock_ptrace(pid: i32) -> Result<std::fs::File, AttachError> {
    let exe =
        std::fs::File::open(format!("/proc/{pid}/exe")).map_err(|e| AttachError::about(pid, e))?;
    // SAFETY: flock on a descriptor we own; released when it closes.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&exe), libc::LOCK_EX) };
    Ok(exe)
}

/// Reads the agent's lines until one that is not a request to hold the
/// threads, and returns it (without its newline). "hold [TID]": every
/// thread of the program (but TID, the one asking) is stopped (ptrace)
/// and "held" answered — or "not held"
/// if they cannot be, and the agent goes on without; "release": they run
/// on, and "released" is answered. The agent asks while it changes the
/// program's text (a session's start and end), so that no thread meets
/// an `int3` (a thread with SIGTRAP blocked would die of it).
fn converse(client: &UnixStream, pid: i32) -> std::io::Result<String> {
    let mut r = BufReader::new(client);
    let mut w = client;
    // (The threads, then the lock: let go in that order, so that another
    // `shadowgraph` that takes the lock finds no thread still traced.)
    let mut holding: Option<(Vec<Stopped>, std::fs::File)> = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(String::new());
        }
        let line = line.trim_end();
        let (word, asker) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "hold" => {
                // (The asking thread is left to run: it waits for the
                // answer.)
                let asker = asker.parse().ok();
                let held = lock_ptrace(pid).and_then(|l| Ok((stop_all(pid, asker)?, l)));
                match held {
                    Ok(h) => {
                        holding = Some(h);
                        w.write_all(b"held\n")?;
                    }
                    Err(_) => w.write_all(b"not held\n")?,
                }
            }
            "release" => {
                // The threads run on, the lock is free.
                drop(holding.take());
                w.write_all(b"released\n")?;
            }
            // (Threads still held are let go as this returns.)
            _ => return Ok(line.to_string()),
        }
    }
}

/// Stops every thread of process `pid` that runs the program's code (those
/// a thread starts meanwhile too) but `asker`; a thread that exits
/// meanwhile is left out, and so are the agent's own: its sessions'
/// threads (one of which may ask), and its membarrier registration
/// threads, which would stop only once the kernel's grace period they
/// wait in is over.
fn stop_all(pid: i32, asker: Option<i32>) -> Result<Vec<Stopped>, AttachError> {
    let mut held: Vec<Stopped> = Vec::new();
    loop {
        let new: Vec<i32> = super::task_ids(pid)?
            .into_iter()
            .filter(|&t| {
                Some(t) != asker
                    && !held.iter().any(|h| h.tid() == t)
                    && !super::is_agent_thread(pid, t)
            })
            .collect();
        if new.is_empty() {
            return Ok(held);
        }
        for tid in new {
            match Stopped::seize(tid) {
                Ok(t) => held.push(t),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(AttachError::about(pid, e)),
            }
        }
    }
}

/// The run-time addresses in process `pid` of the agent's symbols
/// `names`: for an agent `record -p` loaded, their offsets in `agent`'s
/// bytes (the memfd holds the same) plus where the memfd is mapped; for
/// one the program was started with (`shadowgraph record`, by
/// `LD_PRELOAD`), as that file (of the build that started it) defines
/// them.
fn agent_symbols<const N: usize>(
    pid: i32,
    agent: &[u8],
    names: [&str; N],
) -> Result<[u64; N], AttachError> {
    use object::{Object, ObjectSymbol};
    let memfd = super::maps(pid)?
        .into_iter()
        .find(|m| m.offset == 0 && m.path.contains(&format!("/memfd:{}", super::MEMFD_NAME)))
        .map(|m| m.start);
    let found: Vec<Option<u64>> = match memfd {
        None => {
            super::symbols_in(pid, super::is_agent_file, &names)?.unwrap_or_else(|| vec![None; N])
        }
        Some(base) => {
            // Read in place: the embedded bytes are page aligned.
            let obj =
                object::File::parse(agent).map_err(|e| AttachError(format!("the agent: {e}")))?;
            names
                .iter()
                .map(|&n| {
                    obj.dynamic_symbols()
                        .find(|s| s.name() == Ok(n))
                        .map(|s| base + s.address())
                })
                .collect()
        }
    };
    let mut out = [0u64; N];
    for ((o, f), name) in out.iter_mut().zip(found).zip(names) {
        *o = f.ok_or_else(|| AttachError(format!("process {pid}: its agent has no `{name}`")))?;
    }
    Ok(out)
}

/// Every process of the system now (the recorded one, its children, and
/// others, which no recording names).
fn running_processes() -> std::collections::HashSet<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Waits for the end of the recording: `duration_ns` passed, a signal to
/// us, or the process's exit (returns true then).
fn wait(pid: i32, client: &UnixStream, duration_ns: Option<u64>) -> bool {
    let start = Instant::now();
    let limit = duration_ns.map(Duration::from_nanos);
    let _ = client.set_nonblocking(true);
    loop {
        if STOP_WAITING.load(Ordering::Acquire) || limit.is_some_and(|l| start.elapsed() >= l) {
            let _ = client.set_nonblocking(false);
            return false;
        }
        // SAFETY: kill with signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
                .unwrap_or(true);
        if gone {
            let _ = client.set_nonblocking(false);
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Tells the session to stop and waits (10 s at most) for the agent to
/// have written everything out.
fn stop(client: &UnixStream, pid: i32) {
    let mut w = client;
    let _ = w.write_all(b"stop\n");
    let _ = client.set_read_timeout(Some(Duration::from_secs(10)));
    let line = converse(client, pid).unwrap_or_default();
    // SAFETY: kill with signal 0 only checks that the process exists.
    if line != "stopped" && unsafe { libc::kill(pid, 0) } == 0 {
        eprintln!("shadowgraph: process {pid} did not confirm the end of the session");
    }
}

/// `record` into `data`: of `program`, or of the process `attach` names;
/// then `-S`'s script over the recording.
pub(crate) fn record_or_attach(
    data: &std::path::Path,
    opts: &crate::options::RecordOptions,
    attach: &crate::options::AttachOptions,
    program: &[String],
) -> Result<std::process::ExitCode, String> {
    if let Some(pid) = attach.pid {
        if opts.run.nop {
            return Err(format!(
                "--nop runs a program untraced; with -p {pid} there is no program to run"
            ));
        }
        return record_attached(data, opts, pid, attach.duration);
    }
    crate::record::record(data, opts, program).and_then(|code| match &opts.script {
        // `record -S`: the script runs over the recording once it is
        // whole.
        Some(s) => crate::script::run(s, data, &Default::default(), program).map(|_| code),
        None => Ok(code),
    })
}
