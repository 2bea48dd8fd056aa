//! `--logfile FILE` and `-v/--verbose` (`--debug`), as uftrace's: the
//! messages of `shadowgraph` and of the agent in the traced program go to
//! FILE instead of standard error, and `-v` (up to three times) adds debug
//! lines. The programs `shadowgraph` runs keep its standard error: only
//! the messages are moved.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// The log's descriptor the traced program inherits (-1: none).
static AGENT_FD: AtomicI32 = AtomicI32::new(-1);
/// The standard error `shadowgraph` was started with, kept for the
/// programs it runs while its own goes to the log (-1: not moved).
static STDERR: AtomicI32 = AtomicI32::new(-1);

// (Relaxed throughout: each value is set once by `start`, on the main
// thread, before any other thread or program is started.)

/// Sends this process's messages to `path` (appended to) if given, and
/// says debug lines up to level `verbose`.
pub(crate) fn start(path: Option<&Path>, verbose: u8) -> Result<(), String> {
    shadowgraph::log::set(None, verbose.min(3));
    let Some(path) = path else {
        return Ok(());
    };
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| format!("--logfile {}: {e}", path.display()))?;
    // SAFETY: dup and fcntl on descriptors this process holds (the file,
    // standard error); the results are checked.
    let (inherited, saved) = unsafe {
        (
            libc::dup(file.as_raw_fd()),
            libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3),
        )
    };
    // SAFETY: replaces descriptor 2 by the file, once `saved` holds the
    // standard error it was.
    if inherited < 0 || saved < 0 || unsafe { libc::dup2(file.as_raw_fd(), 2) } < 0 {
        return Err(format!(
            "--logfile {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    AGENT_FD.store(inherited, Ordering::Relaxed);
    STDERR.store(saved, Ordering::Relaxed);
    Ok(())
}

/// The descriptor the agent writes its messages to (`Config::log_fd`).
pub(crate) fn agent_fd() -> Option<i32> {
    let fd = AGENT_FD.load(Ordering::Relaxed);
    (fd >= 0).then_some(fd)
}

/// `-v`'s count (the runtime's log keeps it).
pub(crate) fn verbose() -> u8 {
    shadowgraph::log::verbosity()
}

/// `command` (a program run for the user) writes to the standard error
/// `shadowgraph` was started with, not to the log.
pub(crate) fn program_stderr(command: &mut std::process::Command) {
    let saved = STDERR.load(Ordering::Relaxed);
    if saved < 0 {
        return;
    }
    // SAFETY: dup of a descriptor this process keeps open to its end.
    let copy = unsafe { libc::fcntl(saved, libc::F_DUPFD_CLOEXEC, 3) };
    if copy >= 0 {
        // SAFETY: `copy` is a new descriptor owned by nothing else.
        command.stderr(unsafe { OwnedFd::from_raw_fd(copy) });
    }
}
