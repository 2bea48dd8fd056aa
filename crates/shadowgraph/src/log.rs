//! Where the agent's messages go, and how many it says: its warnings and
//! errors (`shadowgraph: …`), on standard error or the file `--logfile`
//! gave `record` (an inherited descriptor), and with `-v` its debug lines
//! (`shadowgraph: debug: …`), as uftrace's `--logfile` and `-v` do.
//!
//! Messages are said while a session is set up or changes (never inside a
//! traced call): a line is formatted, then written by one `write(2)`, so
//! lines of several threads do not mix.

use std::fmt;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

/// The descriptor lines are written to.
static FD: AtomicI32 = AtomicI32::new(2);
/// How many debug levels are said (0: none).
static VERBOSE: AtomicU8 = AtomicU8::new(0);

/// Sends the messages to descriptor `fd` (standard error without one) and
/// says debug lines up to level `verbose`.
pub fn set(fd: Option<i32>, verbose: u8) {
    // Relaxed: each is a value of its own, read by `line` alone; the
    // session sets them before its first message.
    FD.store(fd.unwrap_or(2), Ordering::Relaxed);
    VERBOSE.store(verbose, Ordering::Relaxed);
}

/// How many levels of debug lines are said.
pub fn verbosity() -> u8 {
    // Relaxed: see `set`.
    VERBOSE.load(Ordering::Relaxed)
}

/// Whether debug lines of `level` are said.
pub fn verbose(level: u8) -> bool {
    verbosity() >= level
}

/// Writes `args` and a newline as one line (a failed write is dropped:
/// there is nowhere else to say it).
pub fn line(args: fmt::Arguments<'_>) {
    let mut text = fmt::format(args);
    text.push('\n');
    // Relaxed: see `set`.
    let fd = FD.load(Ordering::Relaxed);
    let mut rest = text.as_bytes();
    while !rest.is_empty() {
        // SAFETY: writes from a live buffer of `rest.len()` bytes; `fd` is
        // a descriptor number, at worst closed (then the call fails).
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// Says a message (the format of `format!`, without its newline) where
/// the session's messages go: see [`fn@line`].
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::log::line(format_args!($($arg)*))
    };
}

/// Says a debug line of `level` (1–3, uftrace's `-v` counted) where `-v`
/// asks for it: `shadowgraph: debug: …`.
#[macro_export]
macro_rules! debug {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::verbose($level) {
            $crate::log::line(format_args!("shadowgraph: debug: {}", format_args!($($arg)*)))
        }
    };
}
