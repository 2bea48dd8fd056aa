//! Tracing switched off and on while the program runs (`record --control
//! CTL[,ACK] [--disable]`, as `perf record --control fifo:CTL,ACK`): a
//! thread of the agent reads commands, one per line, from the FIFO `CTL`
//! — `disable`, `enable` — and after each writes `ack` to the FIFO `ACK`,
//! if given, once it has taken effect.
//!
//! `disable` pauses every tracer's filter set (`ftrace::set_paused`): the
//! sites go back to nops, so the program runs at full speed, and calls
//! under way still record their exits (their frames keep their tracers).
//! `enable` patches them in again, live, while the program's threads run.
//! Only the recorded program's first process listens (a FIFO wants one
//! reader); processes it starts keep the state they started or forked in.
//!
//! `record -g/--agent` (uftrace's agent) has the program listen the same
//! way on FIFOs named after its process id ([`agent_fifos`]), which
//! `record -p PID` and `live -p PID` write to instead of attaching.

use crate::config::Control;
use crate::fgraph::GraphUser;
use crate::ftrace;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Commands that took effect: disables, enables. Relaxed: counts for the
/// metadata, read once the program is done.
static DISABLES: AtomicU64 = AtomicU64::new(0);
static ENABLES: AtomicU64 = AtomicU64::new(0);

/// The commands that took effect: (disables, enables).
pub(crate) fn counts() -> (u64, u64) {
    (
        DISABLES.load(Ordering::Relaxed),
        ENABLES.load(Ordering::Relaxed),
    )
}

/// Pauses or resumes every tracer.
fn set_paused(users: &[Arc<GraphUser>], paused: bool) -> Result<(), String> {
    for u in users {
        ftrace::set_paused(u.filter(), paused).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The FIFOs (commands, acks) the agent of process `pid`, recorded with
/// `-g/--agent`, listens on: in a directory of the user's own in `/tmp`.
pub fn agent_fifos(pid: i32) -> (PathBuf, PathBuf) {
    // SAFETY: getuid has no preconditions.
    let dir = PathBuf::from(format!("/tmp/shadowgraph-agent-{}", unsafe {
        libc::getuid()
    }));
    (
        dir.join(format!("{pid}.ctl")),
        dir.join(format!("{pid}.ack")),
    )
}

/// Removes the agent FIFOs of processes that ended without removing them
/// (killed with SIGKILL): those of a pid no process has now (a pid taken
/// again since keeps them). Returns those removed.
pub fn remove_stale_agent_fifos() -> Vec<PathBuf> {
    let (ctl, _) = agent_fifos(0);
    let Some(Ok(entries)) = ctl.parent().map(std::fs::read_dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        let pid = p
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<i32>().ok());
        let ext = p.extension().and_then(|x| x.to_str());
        let (Some(pid), Some("ctl" | "ack")) = (pid, ext) else {
            continue;
        };
        let stale = !Path::new(&format!("/proc/{pid}")).exists();
        if stale && std::fs::remove_file(&p).is_ok() {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Whether this process made its agent's FIFOs (removed at its end).
static LISTENING: AtomicBool = AtomicBool::new(false);

/// `-g/--agent`: makes this process's agent FIFOs and listens on them for
/// `users`. A failure is said; the recording goes on without them.
pub(crate) fn listen_as_agent(users: Vec<Arc<GraphUser>>) {
    // SAFETY: getpid has no preconditions.
    let (ctl, ack) = agent_fifos(unsafe { libc::getpid() });
    let made = (|| -> Result<(), String> {
        let dir = ctl.parent().expect("a directory");
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        }
        for f in [&ctl, &ack] {
            let _ = std::fs::remove_file(f); // a dead process's, same id
            let c = std::ffi::CString::new(f.as_os_str().as_bytes()).expect("no NUL");
            // SAFETY: mkfifo with a NUL-terminated path.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(format!("{}: {e}", f.display()));
            }
        }
        // Relaxed: read by `stop_listening` on the thread that ends the
        // recording, after this one has returned.
        LISTENING.store(true, Ordering::Relaxed);
        let c = Control {
            commands: ctl.clone(),
            acks: Some(ack.clone()),
            start_disabled: false,
        };
        start(users, &c)
    })();
    if let Err(e) = made {
        crate::say!("shadowgraph: warning: --agent: {e}; record -p cannot reach this process");
    }
}

/// Removes this process's agent FIFOs, if it made them.
pub(crate) fn stop_listening() {
    if LISTENING.swap(false, Ordering::Relaxed) {
        // SAFETY: getpid has no preconditions.
        let (ctl, ack) = agent_fifos(unsafe { libc::getpid() });
        let _ = std::fs::remove_file(ctl);
        let _ = std::fs::remove_file(ack);
    }
}

/// Starts the thread that reads commands for `users`.
pub(crate) fn start(users: Vec<Arc<GraphUser>>, c: &Control) -> Result<(), String> {
    // Both opened read-write: never blocks, and the command FIFO never
    // reads end-of-file when a writer goes (the next one just writes).
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(p)
            .map_err(|e| format!("--control {}: {e}", p.display()))
    };
    let input = open(&c.commands)?;
    let mut ack = c.acks.as_deref().map(open).transpose()?;
    std::thread::Builder::new()
        .name("shadowgraph-ctl".into())
        .spawn(move || {
            for line in BufReader::new(input).lines() {
                let Ok(line) = line else { break };
                let cmd = line.trim();
                let result = match cmd {
                    "" => continue,
                    "disable" => set_paused(&users, true).map(|_| &DISABLES),
                    "enable" => set_paused(&users, false).map(|_| &ENABLES),
                    other => Err(format!(
                        "unknown control command `{other}` (enable, disable)"
                    )),
                };
                match result {
                    Ok(count) => {
                        count.fetch_add(1, Ordering::Relaxed);
                        crate::tracer::recorder::note_control(counts());
                    }
                    Err(e) => crate::say!("shadowgraph: control: {e}"),
                }
                if let Some(a) = ack.as_mut() {
                    let _ = a.write_all(b"ack\n");
                }
            }
        })
        .map_err(|e| format!("--control: cannot start its thread: {e}"))?;
    Ok(())
}
