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

use crate::config::Control;
use crate::fgraph::GraphUser;
use crate::ftrace;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
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
