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
//!
//! The client leaves a helper behind (`shadowgraph hold-for`), which
//! connects and says "guard" (answered "guarding"). A thread without a
//! client of its own asks a helper to hold the threads, by the same
//! "hold"/"release" exchange: a program thread whose `dlopen` brings
//! sites in, and this thread if the client died, so that no thread of the
//! program meets an `int3` then. Its connection is closed when the
//! session has ended.

use shadowgraph::config::Config;
use shadowgraph::patch::Hold;
use shadowgraph::session::Session;
use std::ffi::{c_char, c_int, CStr};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The agent came in by `LD_PRELOAD` with a session's configuration: its
/// interposers come first in every lookup already. Relaxed: set by the
/// constructor, before any attach can call in.
pub(crate) static PRELOADED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

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
    // The thread that serves the session comes first: pthread_create may
    // wait for a lock of the loader's (its stack cache) that a thread held
    // by the caller holds, the calling one itself included. Until
    // SERVING says it is made, the caller may give the call up and try
    // again (nothing else is done by then but the socket's binding).
    let (hand_over, first_session) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("shadowgraph".into())
        .spawn({
            let (config, path) = (config.clone(), path.clone());
            move || {
                // (A call given up as the thread was being made never
                // hands a session over.)
                let wait = std::time::Duration::from_secs(120);
                let first = first_session.recv_timeout(wait).unwrap_or(None);
                serve(listener, first, config);
                let _ = std::fs::remove_file(&path);
            }
        });
    if let Err(e) = spawned {
        return -e.raw_os_error().unwrap_or(libc::EAGAIN);
    }
    // Relaxed: the caller reads it from outside, while the call runs.
    SHADOWGRAPH_SERVING.store(1, Ordering::Relaxed);
    // The program was not started for tracing: no signal of ours may end
    // one of its system calls with EINTR.
    shadowgraph::stop::set_signal_free(true);
    // A preloaded agent's interposers come first already (and its link
    // map has no search list of its own to look them up in).
    if !PRELOADED.load(Ordering::Relaxed) {
        take_over_unwinders();
    }
    // Text changes while the program runs are made with its threads held
    // by the session's client (its threads may block SIGTRAP).
    shadowgraph::patch::set_world_holder(Some(held_by_client));
    // The process's first session starts here, in the world the caller
    // stopped (its sleds are converted by plain writes). A later one starts
    // on the thread above, once the caller has let the threads run on and
    // connected: its grace periods wait for threads inside traced calls.
    let first = (!stopped.is_empty() && !shadowgraph::session::set_up()).then(|| {
        // The caller holds every other thread: text is written by plain
        // stores, and the metadata waits until they run.
        HELD_BY_CALLER.set(true);
        let s = shadowgraph::process::with_world_stopped(&stopped, || {
            Session::start_held(config.clone())
        });
        HELD_BY_CALLER.set(false);
        s
    });
    // (The thread ends at once if this fails: nothing to serve.)
    let _ = hand_over.send(first);
    0
}

/// 1 once the attach call under way has made the thread that serves its
/// session (the caller writes 0 before the call): up to then the call may
/// be given up ([`shadowgraph_attach`]).
#[no_mangle]
pub static SHADOWGRAPH_SERVING: AtomicUsize = AtomicUsize::new(0);

/// The unwinder's entry points the agent interposes (module `unwind`),
/// which a `dlopen`ed agent must take over slot by slot: an exception
/// thrown through a traced function's stub frame must find its frames
/// unhooked first, or the unwinder finds no handler and the program ends.
/// And `dlopen`/`dlclose` (module `objects`): objects the program loads
/// while recorded join the recordings, those it unloads leave first.
const TAKEN_OVER: [&str; 9] = [
    "_Unwind_RaiseException",
    "_Unwind_Resume",
    "_Unwind_ForcedUnwind",
    "_Unwind_Backtrace",
    "__cxa_begin_catch",
    "backtrace",
    "pthread_exit",
    "dlopen",
    "dlclose",
];

/// The functions the taken-over slots called, by [`TAKEN_OVER`]'s index
/// (0: none seen). Release/Acquire: written before the slot changes, read
/// by a call through it.
static REALS: [AtomicUsize; TAKEN_OVER.len()] = [const { AtomicUsize::new(0) }; TAKEN_OVER.len()];

/// What the slots the agent took over for `name` called (0: none).
pub(crate) fn taken_over(name: &CStr) -> usize {
    TAKEN_OVER
        .iter()
        .position(|n| n.as_bytes() == name.to_bytes())
        .map_or(0, |i| REALS[i].load(Ordering::Acquire))
}

/// Points every object's GOT slots for [`TAKEN_OVER`] at the agent's own
/// functions, remembering what they called. Once per process.
fn take_over_unwinders() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Our own definitions, looked up in this object first: taking
        // their address in Rust would read the agent's GOT, which the
        // loader bound to the definitions that came before it (the real
        // ones).
        let Some(map) = own_link_map() else { return };
        let to: Vec<(&str, usize)> = TAKEN_OVER
            .iter()
            .filter_map(|&n| {
                let c = std::ffi::CString::new(n).ok()?;
                // SAFETY: a lookup by a NUL-terminated name in the link
                // map of this object, which dlopen made (it has its own
                // search list, this object first).
                let p = unsafe { libc::dlsym(map, c.as_ptr()) } as usize;
                (p != 0).then_some((n, p))
            })
            .collect();
        let me = shadowgraph::sys::loader_name_of(take_over_unwinders as *const () as usize);
        let skip: Vec<std::path::PathBuf> = me.into_iter().collect();
        shadowgraph::libcall::interpose(&to, &skip, |name, real| {
            if let Some(i) = TAKEN_OVER.iter().position(|n| *n == name) {
                REALS[i].store(real, Ordering::Release);
            }
        });
    });
}

/// The agent's link map (glibc's handle for it), found without taking a
/// reference.
fn own_link_map() -> Option<*mut libc::c_void> {
    const RTLD_DL_LINKMAP: c_int = 2;
    let mut map: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: a zeroed Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr1 reads the loader's tables for an address of this
    // object and writes its link map pointer to `map`.
    let ok = unsafe {
        libc::dladdr1(
            own_link_map as *const libc::c_void,
            &mut info,
            &mut map as *mut *mut libc::c_void,
            RTLD_DL_LINKMAP,
        )
    };
    (ok != 0 && !map.is_null()).then_some(map)
}

/// The first client allowed in (another user's is told so and closed),
/// within 10 s.
fn first_client(listener: &UnixListener) -> Option<UnixStream> {
    use std::os::fd::AsRawFd;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut fd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one descriptor we own, described by `fd`.
        let r = unsafe { libc::poll(&mut fd, 1, left.as_millis().max(1) as i32) };
        if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
        if r <= 0 {
            continue;
        }
        match listener.accept() {
            Ok((s, _)) if peer_allowed(&s) => return Some(s),
            // Refused there.
            Ok((s, _)) => drop(answer(s)),
            Err(_) => return None,
        }
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
/// and its "stop" (or its end) ends it. Other clients may connect
/// meanwhile: one of the process's user (or root) may ask for "status";
/// another user's is told it is not allowed.
fn serve(listener: UnixListener, first: Option<Result<Session, String>>, config: Config) {
    use std::os::fd::AsRawFd;
    // The client that made the session connects at once; without one (it
    // died), the session ends after a while.
    let Some(client) = first_client(&listener) else {
        if let Some(Ok(s)) = first {
            s.finish();
        }
        return;
    };
    // Holds the threads while this session changes text (a later one's
    // start, every one's end).
    CLIENT.set(client.as_raw_fd());
    let session = match first {
        Some(s) => {
            if let Ok(s) = &s {
                s.settle();
            }
            s
        }
        None => Session::start(config),
    };
    let mut out = &client;
    let session = match session {
        Ok(s) if !s.traces() => {
            s.finish();
            let _ = out.write_all(
                b"error: no patchable function entries to trace (rebuild with \
                  -fpatchable-function-entry=5, or -pg -mfentry -mrecord-mcount)\n",
            );
            return;
        }
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            return;
        }
    };
    let _ = out.write_all(b"started\n");
    // Until "stop", or the client's end (it died: the session ends too).
    let mut line = Vec::new();
    let mut guard: Option<UnixStream> = None;
    'session: loop {
        use std::os::fd::AsRawFd;
        let mut fds = [
            libc::pollfd {
                fd: client.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll on two descriptors we own, described by `fds`.
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if fds[1].revents != 0 {
            if let Ok((other, _)) = listener.accept() {
                if let Some(g) = answer(other) {
                    let mut helpers = HELPERS.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(old) = guard.replace(g) {
                        helpers.retain(|&h| h != old.as_raw_fd());
                    }
                    helpers.extend(guard.as_ref().map(|g| g.as_raw_fd()));
                }
            }
        }
        if fds[0].revents != 0 {
            let mut buf = [0u8; 256];
            match (&client).read(&mut buf) {
                Ok(0) | Err(_) => {
                    // The client died: a helper (its own, if it came)
                    // holds the threads while the session ends.
                    CLIENT.set(-1);
                    break;
                }
                Ok(n) => line.extend_from_slice(&buf[..n]),
            }
            while let Some(end) = line.iter().position(|&b| b == b'\n') {
                let cmd: Vec<u8> = line.drain(..=end).collect();
                match cmd.trim_ascii() {
                    b"stop" => break 'session,
                    b"status" => {
                        let _ = out.write_all(status().as_bytes());
                    }
                    _ => {
                        let _ = out.write_all(b"error: unknown command\n");
                    }
                }
            }
        }
    }
    drop(listener);
    session.finish();
    CLIENT.set(-1);
    let _ = out.write_all(b"stopped\n");
    // (The helper, if any, ends as its connection closes; a hold under
    // way on a duplicate of it ends first.)
    if let Some(g) = guard {
        HELPERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|&h| h != g.as_raw_fd());
    }
}

std::thread_local! {
    /// The session's client, on the thread serving it (-1: none): the
    /// holder of the world while that thread changes text.
    static CLIENT: std::cell::Cell<c_int> = const { std::cell::Cell::new(-1) };
    /// On the thread the attach calls in, while the caller holds every
    /// other thread (the first session's start).
    static HELD_BY_CALLER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The patcher's world holder ([`shadowgraph::patch::set_world_holder`]):
/// the caller of the attach holds every thread already while the first
/// session starts; on a thread serving a session, its client stops every thread of the
/// program (ptrace) at "hold" and answers "held", lets them go at
/// "release" and answers "released". Elsewhere, or if the client is gone:
/// not held. Plain reads and writes on the socket: nothing allocates.
fn held_by_client(what: Hold) -> bool {
    if HELD_BY_CALLER.get() {
        return true;
    }
    match CLIENT.get() {
        -1 => held_by_helper(what),
        fd => exchange(fd, what),
    }
}

/// The helpers of the sessions under way (their connections'
/// descriptors): any one of them holds the threads for a thread that has
/// no client of its own — a program thread that changes text after its
/// `dlopen`, or looks for a grace period; a session's thread whose client
/// died.
static HELPERS: std::sync::Mutex<Vec<c_int>> = std::sync::Mutex::new(Vec::new());

/// The hold such a thread has under way: the duplicate of a helper's
/// descriptor it asked on (−1: none; −2: one being asked for). One at a
/// time: the helpers' connections carry one exchange at once.
static HELPER_HOLD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// [`held_by_client`] on a thread without a client: a helper stops every
/// thread of the program but this one (by its id) at "hold TID".
fn held_by_helper(what: Hold) -> bool {
    use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
    // HELPER_HOLD is a lock (Acquire as it is taken, Release as it is let
    // go); the descriptor stored in between is this thread's own.
    match what {
        Hold::Begin => {
            // (Taken before the hold, never inside one: a thread that
            // waits here is not one of those held.)
            while HELPER_HOLD
                .compare_exchange(-1, -2, Acquire, Relaxed)
                .is_err()
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // Duplicated under the list's lock: a session's thread takes
            // its helper out of the list under it before closing it, so
            // the descriptor is open (and the helper's) while it is here.
            let fd = {
                let helpers = HELPERS.lock().unwrap_or_else(|e| e.into_inner());
                // SAFETY: dup of a descriptor the list holds open (above).
                helpers.first().map_or(-1, |&h| unsafe { libc::dup(h) })
            };
            let held = fd >= 0 && exchange(fd, Hold::Begin);
            if held {
                HELPER_HOLD.store(fd, Relaxed);
            } else {
                if fd >= 0 {
                    // SAFETY: our duplicate, closed once.
                    unsafe { libc::close(fd) };
                }
                HELPER_HOLD.store(-1, Release);
            }
            held
        }
        Hold::End => {
            let fd = HELPER_HOLD.load(Relaxed);
            if fd < 0 {
                return false;
            }
            let released = exchange(fd, Hold::End);
            // SAFETY: our duplicate, closed once.
            unsafe { libc::close(fd) };
            HELPER_HOLD.store(-1, Release);
            released
        }
    }
}

/// One exchange on `fd` (a client's or a helper's connection): "hold TID"
/// answered "held", or "release" answered "released" (TID: this thread,
/// which is not to be held).
fn exchange(fd: c_int, what: Hold) -> bool {
    let mut line = [0u8; 32];
    let len = match what {
        Hold::Begin => {
            line[..5].copy_from_slice(b"hold ");
            // SAFETY: gettid has no preconditions.
            let n = shadowgraph::sys::put_decimal(&mut line, 5, unsafe { libc::gettid() } as u64);
            line[n] = b'\n';
            n + 1
        }
        Hold::End => {
            line[..8].copy_from_slice(b"release\n");
            8
        }
    };
    let answer: &[u8] = match what {
        Hold::Begin => b"held\n",
        Hold::End => b"released\n",
    };
    // SAFETY: a send of a buffer of ours on a connection the caller keeps
    // open; MSG_NOSIGNAL: a peer that died is an error here, not a SIGPIPE
    // that would end the program.
    let sent = unsafe { libc::send(fd, line.as_ptr().cast(), len, libc::MSG_NOSIGNAL) };
    if sent != len as isize {
        return false;
    }
    // The answer's line, byte by byte: nothing after it is taken from the
    // socket (the next line is the session's).
    let mut got = [0u8; 16];
    let mut n = 0;
    while n < got.len() {
        // SAFETY: a one-byte read into `got`, inside it.
        let r = unsafe { libc::read(fd, got[n..].as_mut_ptr().cast(), 1) };
        if r <= 0 {
            if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        n += 1;
        if got[n - 1] == b'\n' {
            break;
        }
    }
    &got[..n] == answer
}

/// A client other than the session's: another user's is refused; one of
/// ours is answered one command ("status"), within a second, or is the
/// helper the session's client left behind ("guard", answered
/// "guarding"), returned to be kept.
fn answer(mut other: UnixStream) -> Option<UnixStream> {
    if !peer_allowed(&other) {
        let _ = other.write_all(b"error: not allowed: another user's client\n");
        return None;
    }
    let _ = other.set_read_timeout(Some(std::time::Duration::from_secs(1)));
    let mut cmd = String::new();
    let _ = BufReader::new(&other).read_line(&mut cmd);
    let reply = match cmd.trim() {
        "status" => status(),
        "guard" => {
            let _ = other.set_read_timeout(None);
            let _ = other.write_all(b"guarding\n");
            return Some(other);
        }
        _ => "error: unknown command (this session's client alone may stop it)\n".into(),
    };
    let _ = other.write_all(reply.as_bytes());
    None
}

/// "status: …": what the agent is doing in this process.
fn status() -> String {
    format!(
        "status: recording; {} recordings under way in process {}\n",
        shadowgraph::session::recordings_under_way(),
        std::process::id()
    )
}
