//! The traced program while `record` waits for it: its end and what it
//! used, the processes it started (a pipe they all inherit), and the
//! signals sent to `record`, passed on to the program.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Waits for the traced program: how it ended, and what it used.
pub(crate) fn wait_with_usage(
    pid: i32,
    started: std::time::Instant,
) -> std::io::Result<(std::process::ExitStatus, crate::sysinfo::Usage)> {
    use std::os::unix::process::ExitStatusExt;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waiting for our own child with valid out-parameters.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut rusage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok((
        std::process::ExitStatus::from_raw(status),
        crate::sysinfo::Usage {
            rusage,
            elapsed_ns: started.elapsed().as_nanos() as u64,
        },
    ))
}

/// The traced program while it runs (0: none).
pub(crate) static CHILD: AtomicI32 = AtomicI32::new(0);

/// A signal came to `record` after the program ended, while it waited for
/// the program's descendants: stop waiting.
pub(crate) static STOP_WAITING: AtomicBool = AtomicBool::new(false);

/// A pipe whose write end the program and every process it starts inherit
/// (it is not close-on-exec; a high number, out of the way of the fds a
/// program opens): its read end reaches end-of-file once the last of them
/// has ended (or closed it), as uftrace waits for a program's children.
pub(crate) struct Lifeline {
    read: std::os::fd::OwnedFd,
    write: Option<std::os::fd::OwnedFd>,
}

impl Lifeline {
    pub(crate) fn new() -> std::io::Result<Lifeline> {
        use std::os::fd::FromRawFd;
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills two fds on success, which we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: just made, owned by nobody else.
        let (read, w) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        // F_DUPFD's copy is not close-on-exec: the program inherits it.
        // SAFETY: duplicating an fd we own.
        let inherited =
            unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&w), libc::F_DUPFD, 200) };
        if inherited < 0 {
            return Err(std::io::Error::last_os_error());
        }
        drop(w);
        Ok(Lifeline {
            read,
            // SAFETY: the duplicate is ours.
            write: Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(inherited) }),
        })
    }

    /// The program has its copy: ours goes, or we would wait for ourselves.
    pub(crate) fn handed_over(mut self) -> Lifeline {
        self.write = None;
        self
    }

    /// Waits until every process holding the write end has ended, or a
    /// signal tells `record` to stop; says what it waits for if it takes
    /// a while.
    pub(crate) fn wait_for_descendants(&self, prog: &str) {
        use std::os::fd::AsRawFd;
        let mut told = false;
        while !STOP_WAITING.load(Ordering::Acquire) {
            let mut p = libc::pollfd {
                fd: self.read.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, 200) };
            if r > 0 {
                // Nobody writes: readable means end-of-file (all gone).
                break;
            }
            if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break;
            }
            if r == 0 && !told {
                eprintln!(
                    "# {prog} ended; recording the processes it started until they end \
                     (Ctrl-C stops here; --no-children does not wait)"
                );
                told = true;
            }
        }
    }
}

/// While a program is recorded, `record` must outlive it: the writer drains
/// the program's last records after it ended. Interrupts from the terminal
/// (which reach the program too) are ignored here; those sent to `record`
/// alone (kill) are passed on to the program. The previous dispositions
/// come back on drop. (A handler, not SIG_IGN: exec resets handlers, so
/// the program starts with the default dispositions.)
pub(crate) struct ForwardSignals {
    old: Vec<(i32, libc::sigaction)>,
}

pub(crate) const FORWARDED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

extern "C" fn forward_signal(sig: i32, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // si_code ≤ 0: sent by a process (kill, sigqueue, tkill); > 0: by the
    // kernel, as the terminal's interrupt, which the program got as well.
    let child = CHILD.load(Ordering::Acquire);
    if code <= 0 && child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, sig) };
    }
    if child == 0 {
        STOP_WAITING.store(true, Ordering::Release);
    }
}

impl ForwardSignals {
    pub(crate) fn install() -> ForwardSignals {
        let mut old = Vec::new();
        for sig in FORWARDED {
            // SAFETY: installing a plain SA_SIGINFO handler; the previous
            // disposition is kept to restore.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = forward_signal as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        ForwardSignals { old }
    }
}

impl Drop for ForwardSignals {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restoring the disposition saved at install.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
    }
}
