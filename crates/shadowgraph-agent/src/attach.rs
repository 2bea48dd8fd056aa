//! A session started in a running process (`shadowgraph record -p PID`):
//! the CLI loads the agent with ptrace, stops every thread of the program
//! (ptrace: a blocking system call under way is restarted, never ended
//! with `EINTR`), and makes one of them call [`shadowgraph_attach`] with
//! the session's configuration (the same typed message the environment
//! carries at start-up), the path of a control socket, and the contexts
//! the threads were stopped at. The session starts inside that call, with
//! the world stopped (sleds are converted by plain writes, no signal
//! sent); then a thread of the agent's serves the socket for the
//! session's length:
//!
//! ```text
//!   client (shadowgraph)              agent
//!   connect            ─────────►     SO_PEERCRED: the process's uid or root
//!                      ◄─────────     "started\n" | "error: WHY\n"
//!   "stop\n" (or EOF: the client
//!   died)              ─────────►     the session ends: sites back to nops,
//!                                     GOT slots back, buffers written out
//!                      ◄─────────     "stopped\n"; the thread ends
//! ```

use shadowgraph::config::Config;
use shadowgraph::session::Session;
use std::ffi::{c_char, c_int, CStr};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};

/// Starts a session of `config` (JSON, NUL-terminated), every other
/// thread being held stopped at the `n` contexts `stopped` (pc, sp
/// pairs), and serves it on a Unix socket bound at `socket`. Returns 0
/// (the session's own failure is told on the socket), or −errno when the
/// socket cannot be made, or −EINVAL for a configuration that does not
/// parse.
///
/// # Safety
/// `config` and `socket` are NUL-terminated strings; `stopped` points to
/// `n` pairs of words.
#[no_mangle]
pub unsafe extern "C" fn shadowgraph_attach(
    config: *const c_char,
    socket: *const c_char,
    stopped: *const [usize; 2],
    n: usize,
) -> c_int {
    // SAFETY: the caller passes NUL-terminated strings and `n` pairs.
    let (config, socket, stopped) = unsafe {
        (
            CStr::from_ptr(config),
            CStr::from_ptr(socket),
            std::slice::from_raw_parts(stopped, n),
        )
    };
    let stopped: Vec<(usize, usize)> = stopped.iter().map(|c| (c[0], c[1])).collect();
    let Some(config) = config.to_str().ok().and_then(|c| Config::parse(c).ok()) else {
        return -libc::EINVAL;
    };
    let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(socket.to_bytes()));
    let listener = match UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => return -e.raw_os_error().unwrap_or(libc::EIO),
    };
    // The program was not started for tracing: no signal of ours may end
    // one of its system calls with EINTR.
    shadowgraph::stop::set_signal_free(true);
    let session = shadowgraph::process::with_world_stopped(&stopped, || Session::start(config));
    let spawned = std::thread::Builder::new()
        .name("shadowgraph".into())
        .spawn(move || {
            serve(listener, session);
            let _ = std::fs::remove_file(&path);
        });
    match spawned {
        Ok(_) => 0,
        Err(e) => -e.raw_os_error().unwrap_or(libc::EAGAIN),
    }
}

/// Whether the peer of `s` runs as this process's user or as root.
fn peer_allowed(s: &UnixStream) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed ucred is a valid out-parameter.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED fills `cred` for a connected Unix socket.
    let ok = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    } == 0;
    // SAFETY: getuid has no preconditions.
    ok && (cred.uid == 0 || cred.uid == unsafe { libc::getuid() })
}

/// The session's life: the first allowed client hears whether it started,
/// and its "stop" (or its end) ends it.
fn serve(listener: UnixListener, session: Result<Session, String>) {
    // The client that made the session connects at once; one that never
    // does (it died) leaves the session to end after a while.
    let _ = listener.set_nonblocking(true);
    let waited = std::time::Instant::now();
    let client = loop {
        match listener.accept() {
            Ok((s, _)) if peer_allowed(&s) => break s,
            Ok((mut s, _)) => {
                let _ = s.write_all(b"error: not allowed: another user's client\n");
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if waited.elapsed() > std::time::Duration::from_secs(10) {
                    if let Ok(s) = session {
                        s.finish();
                    }
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(_) => return,
        }
    };
    let _ = client.set_nonblocking(false);
    drop(listener);
    let mut out = match client.try_clone() {
        Ok(o) => o,
        Err(_) => return,
    };
    let session = match session {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            return;
        }
    };
    let _ = out.write_all(b"started\n");
    // Until "stop", or the client's end (it died: the session ends too).
    for line in BufReader::new(client).lines() {
        match line {
            Ok(l) if l.trim() == "stop" => break,
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    session.finish();
    let _ = out.write_all(b"stopped\n");
}
