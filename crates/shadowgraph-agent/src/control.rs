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

use shadowgraph::fgraph::GraphUser;
use shadowgraph::ftrace;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Commands that took effect: disables, enables.
pub static DISABLES: AtomicU64 = AtomicU64::new(0);
pub static ENABLES: AtomicU64 = AtomicU64::new(0);

/// Pauses or resumes every tracer.
pub fn set_paused(users: &[Arc<GraphUser>], paused: bool) -> Result<(), String> {
    for u in users {
        ftrace::set_paused(u.filter(), paused).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `SHADOWGRAPH_CONTROL=CTL[,ACK]`: the FIFOs to read commands from and
/// acknowledge them to.
pub fn fifos() -> Option<(String, Option<String>)> {
    let v = std::env::var("SHADOWGRAPH_CONTROL").ok()?;
    Some(match v.split_once(',') {
        Some((c, a)) => (c.to_string(), Some(a.to_string())),
        None => (v, None),
    })
}

/// Starts the thread that reads commands for `users`.
pub fn start(users: Vec<Arc<GraphUser>>, ctl: String, ack: Option<String>) -> Result<(), String> {
    // Both opened read-write: never blocks, and the command FIFO never
    // reads end-of-file when a writer goes (the next one just writes).
    let open = |p: &str| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(p)
            .map_err(|e| format!("--control {p}: {e}"))
    };
    let input = open(&ctl)?;
    let mut ack = ack.as_deref().map(open).transpose()?;
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
                    }
                    Err(e) => eprintln!("shadowgraph: control: {e}"),
                }
                if let Some(a) = ack.as_mut() {
                    let _ = a.write_all(b"ack\n");
                }
            }
        })
        .map_err(|e| format!("--control: cannot start its thread: {e}"))?;
    Ok(())
}
