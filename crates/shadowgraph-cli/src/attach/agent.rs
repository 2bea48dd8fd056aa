//! `record -p PID` and `live -p PID` where process PID is a program
//! recorded with `-g/--agent`, as uftrace's client of its agent: the
//! options are passed to the running recording (`--trace on|off` switches
//! its tracing, through the FIFOs its agent listens on) instead of an
//! attached recording of its own being made. Without `--trace` it only
//! checks that the agent answers, as uftrace 0.13's client does.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::process::ExitCode;

/// How long the agent may take to answer a command.
const ANSWER_MS: i32 = 10_000;

/// The command FIFO of process `pid`'s agent, open for writing, if an
/// agent listens on it (a FIFO no process reads, left by one that was
/// killed, cannot be opened so).
fn command_fifo(pid: i32) -> Option<std::fs::File> {
    let (ctl, _) = shadowgraph::session::agent_fifos(pid);
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(ctl)
        .ok()
}

/// Whether process `pid` runs with an agent listening (`record -g`).
pub(crate) fn listening(pid: i32) -> bool {
    command_fifo(pid).is_some()
}

/// Passes `trace` (`on`, `off`) to the agent of process `pid`, and waits
/// until it took effect; without one, only that the agent is there.
pub(crate) fn forward(pid: i32, trace: Option<&str>) -> Result<ExitCode, String> {
    let no_agent = || format!("process {pid}: its agent (record -g) no longer listens");
    let mut ctl = command_fifo(pid).ok_or_else(no_agent)?;
    let command = match trace {
        Some("off") => "disable",
        Some("on") => "enable",
        _ => return Ok(ExitCode::SUCCESS),
    };
    let (_, ack) = shadowgraph::session::agent_fifos(pid);
    // (The agent holds the acknowledgement FIFO open: this open does not
    // wait for a writer.)
    let ack = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&ack)
        .map_err(|e| format!("{}: {e}", ack.display()))?;
    ctl.write_all(format!("{command}\n").as_bytes())
        .map_err(|_| no_agent())?;
    let mut poll = libc::pollfd {
        fd: ack.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polls one descriptor we hold, described by `poll`.
    if unsafe { libc::poll(&mut poll, 1, ANSWER_MS) } != 1 {
        return Err(format!(
            "process {pid}: its agent did not answer within {} s",
            ANSWER_MS / 1000
        ));
    }
    let mut line = String::new();
    BufReader::new(ack)
        .read_line(&mut line)
        .map_err(|e| format!("process {pid}: {e}"))?;
    eprintln!("# process {pid}: tracing switched {}", trace.unwrap_or(""));
    Ok(ExitCode::SUCCESS)
}
