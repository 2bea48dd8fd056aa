//! Calling a function inside another, running process: one of its
//! threads is stopped with ptrace, made to call the function, and given
//! back every register it had; its other threads run on throughout.
//!
//! The stopped thread's stack during the call:
//!
//! ```text
//!   regs.rsp ─────────►  the thread's own words
//!   regs.rsp − 128       the red zone (a leaf function's scratch below
//!                        rsp): left alone
//!   … − SCRATCH          bytes the caller passes (strings), [data, data+len)
//!   call_rsp + 8         16-byte aligned: the callee's frame starts below
//!   call_rsp ─────────►  return address 0: the callee's `ret` faults,
//!                        and the SIGSEGV stop says the call is over
//! ```
//!
//! A thread interrupted inside a blocking system call (`read`, `futex`,
//! `nanosleep`, `epoll_wait`) stops with `orig_rax` the call's number and
//! `rax` one of the kernel's restart codes. The call is made with
//! `orig_rax` −1, so the kernel does not take it for a system call to
//! restart; the registers put back afterwards hold the original
//! `orig_rax` and `rax`, and the kernel restarts the system call as it
//! does after a signal handled with `SA_RESTART`: the program sees no
//! `EINTR`. The floating-point and vector state (XSAVE area) is saved and
//! put back as well.

use std::io::{Error, ErrorKind};
use std::time::{Duration, Instant};

/// Bytes kept below the interrupted rsp: the red zone.
const RED_ZONE: u64 = 128;
/// `NT_X86_XSTATE`: the whole XSAVE area, for `PTRACE_GETREGSET`.
const NT_X86_XSTATE: libc::c_int = 0x202;
/// Large enough for any XSAVE area a kernel reports (AVX-512: ~2.7 KiB,
/// AMX tiles: ~11 KiB).
const XSTATE_BYTES: usize = 16 << 10;
/// `PTRACE_EVENT_STOP`, the stop `PTRACE_INTERRUPT` causes.
const PTRACE_EVENT_STOP: i32 = 128;

/// A thread of another process, stopped under ptrace (seized). Dropping it
/// detaches; a signal sent to it while held stays pending in the kernel
/// and is delivered then.
pub struct Stopped {
    tid: i32,
    /// Whether a signal reached the thread while we waited for it (it was
    /// delivered then, its handler run).
    signalled: bool,
}

impl Stopped {
    /// Seizes thread `tid` and stops it where it is.
    pub fn seize(tid: i32) -> Result<Stopped, Error> {
        // SAFETY: PTRACE_SEIZE with no options; the kernel checks our
        // right to trace `tid`.
        if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) } != 0 {
            return Err(Error::last_os_error());
        }
        let mut t = Stopped {
            tid,
            signalled: false,
        };
        // SAFETY: a seized thread; PTRACE_INTERRUPT only stops it.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) } != 0 {
            return Err(Error::last_os_error());
        }
        t.wait_for(|status| status >> 16 == PTRACE_EVENT_STOP)?;
        t.undo_eintr()?;
        Ok(t)
    }

    /// Moves the thread on, one instruction at a time, while it stands on
    /// a 1-byte `nop` (at most 8): a thread stopped inside a sled of
    /// 1-byte nops (`-fpatchable-function-entry=5`) would keep the sled
    /// from being converted and its function from being traced; stepping
    /// over nops changes nothing else. Not a thread inside a system call
    /// (its pc is not on a nop it is about to run).
    pub fn step_off_nops(&mut self) -> Result<(), Error> {
        for _ in 0..8 {
            let regs = self.regs()?;
            if (regs.orig_rax as i64) >= 0 {
                return Ok(());
            }
            let mut b = [0u8];
            read_memory(self.tid, regs.rip, &mut b)?;
            if b[0] != 0x90 {
                return Ok(());
            }
            // SAFETY: our stopped tracee; one instruction, then it stops.
            if unsafe { libc::ptrace(libc::PTRACE_SINGLESTEP, self.tid, 0, 0) } != 0 {
                return Err(Error::last_os_error());
            }
            self.wait_for(|status| status >> 16 == 0 && libc::WSTOPSIG(status) == libc::SIGTRAP)?;
        }
        Ok(())
    }

    /// The thread's id.
    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// Where the thread was stopped: its pc and sp.
    pub fn context(&self) -> Result<(u64, u64), Error> {
        let r = self.regs()?;
        Ok((r.rip, r.rsp))
    }

    /// Some system calls fail with `EINTR` as soon as the thread is
    /// stopped, with no signal handled and no restart code (`epoll_wait`
    /// checks for a pending signal, and the stop is one); others
    /// (`nanosleep`, `poll`) leave their rest to `restart_syscall`, which
    /// reads what the thread's last such call left, and a call made in the
    /// thread meanwhile (one that sleeps) replaces it: the restart would
    /// then fail with `EINTR`. When no signal came, the thread is set back
    /// on its `syscall` instruction with the call's number in rax (its
    /// arguments are still in their registers), to make the call again as
    /// if never stopped (a relative timeout starts anew).
    fn undo_eintr(&mut self) -> Result<(), Error> {
        /// The kernel's "restart through restart_syscall" code.
        const ERESTART_RESTARTBLOCK: i64 = 516;
        let mut regs = self.regs()?;
        let rax = regs.rax as i64;
        if self.signalled
            || (regs.orig_rax as i64) < 0
            || (rax != -(libc::EINTR as i64) && rax != -ERESTART_RESTARTBLOCK)
        {
            return Ok(());
        }
        let mut insn = [0u8; 2];
        read_memory(self.tid, regs.rip - 2, &mut insn)?;
        if insn != [0x0f, 0x05] {
            return Ok(());
        }
        regs.rip -= 2;
        regs.rax = regs.orig_rax;
        self.set_regs(&regs)
    }

    /// Waits for the thread's next stop that `done` accepts. Another stop
    /// is a signal sent to it meanwhile: delivered at once (keeping it for
    /// later would merge two raised one after the other into one), the
    /// thread resumed. An exit is an error.
    fn wait_for(&mut self, done: impl Fn(i32) -> bool) -> Result<i32, Error> {
        self.wait_or_give_up(done, None)
            .map(|s| s.expect("never given up"))
    }

    /// [`Stopped::wait_for`], or `None` as soon as `give_up(elapsed)` says
    /// so while the thread runs (looked at every 50 µs to 1 ms then;
    /// without one, a blocking wait).
    fn wait_or_give_up(
        &mut self,
        done: impl Fn(i32) -> bool,
        give_up: Option<&dyn Fn(Duration) -> bool>,
    ) -> Result<Option<i32>, Error> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(50);
        let flags = match give_up {
            Some(_) => libc::__WALL | libc::WNOHANG,
            None => libc::__WALL,
        };
        loop {
            let mut status = 0;
            // SAFETY: waiting for our own tracee, by thread id.
            let r = unsafe { libc::waitpid(self.tid, &mut status, flags) };
            if r == 0 {
                if give_up.is_some_and(|g| g(start.elapsed())) {
                    return Ok(None);
                }
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(1));
                continue;
            }
            if r < 0 {
                let e = Error::last_os_error();
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("thread {} exited", self.tid),
                ));
            }
            if done(status) {
                return Ok(Some(status));
            }
            // A signal-delivery stop (no event in the high bits): the
            // program's own signal, SIGTRAP included, goes to it now.
            let sig = if status >> 16 == 0 {
                self.signalled = true;
                libc::WSTOPSIG(status)
            } else {
                0
            };
            // SAFETY: resuming our stopped tracee with that signal (or none).
            unsafe { libc::ptrace(libc::PTRACE_CONT, self.tid, 0, sig as libc::c_long) };
        }
    }

    fn regs(&self) -> Result<libc::user_regs_struct, Error> {
        // SAFETY: a zeroed user_regs_struct is a valid out-parameter.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: our stopped tracee; the kernel fills `regs`.
        if unsafe { libc::ptrace(libc::PTRACE_GETREGS, self.tid, 0, &mut regs) } != 0 {
            return Err(Error::last_os_error());
        }
        Ok(regs)
    }

    fn set_regs(&self, regs: &libc::user_regs_struct) -> Result<(), Error> {
        // SAFETY: our stopped tracee; the kernel reads `regs`.
        if unsafe { libc::ptrace(libc::PTRACE_SETREGS, self.tid, 0, regs) } != 0 {
            return Err(Error::last_os_error());
        }
        Ok(())
    }

    /// The thread's XSAVE area (`get`), or puts `area` back.
    fn xstate(&self, area: &mut Vec<u8>, get: bool) -> Result<(), Error> {
        if get {
            area.resize(XSTATE_BYTES, 0);
        }
        let mut iov = libc::iovec {
            iov_base: area.as_mut_ptr().cast(),
            iov_len: area.len(),
        };
        let req = if get {
            libc::PTRACE_GETREGSET
        } else {
            libc::PTRACE_SETREGSET
        };
        // SAFETY: our stopped tracee; the iovec describes `area`, which
        // the kernel fills (and shortens iov_len to what it wrote) or reads.
        if unsafe { libc::ptrace(req, self.tid, NT_X86_XSTATE, &mut iov) } != 0 {
            return Err(Error::last_os_error());
        }
        if get {
            area.truncate(iov.iov_len);
        }
        Ok(())
    }

    /// Calls `function(args…)` in the thread, with `data` copied below the
    /// red zone of its stack (an argument `DATA - k`, for `k` below the
    /// data's length, is replaced by the address of its byte `k`), and
    /// returns what the function returned (rax). Every
    /// register and the vector state are put back afterwards; a system
    /// call the thread was blocked in is restarted.
    pub fn call(&mut self, function: u64, args: &[u64], data: &[u8]) -> Result<u64, Error> {
        self.call_within(function, args, data, None)
    }

    /// [`Stopped::call`], given up (`ErrorKind::TimedOut`) if it has not
    /// returned when `give_up(elapsed)` says so: the thread is stopped
    /// again wherever the call is and put back as it was (what the call
    /// did until then stays done). For a call that may wait for a lock the
    /// stopped thread itself holds (the loader's, taken by `dlopen` or
    /// `pthread_create`), which would never return.
    pub fn call_or_give_up(
        &mut self,
        function: u64,
        args: &[u64],
        data: &[u8],
        give_up: &dyn Fn(Duration) -> bool,
    ) -> Result<u64, Error> {
        self.call_within(function, args, data, Some(give_up))
    }

    fn call_within(
        &mut self,
        function: u64,
        args: &[u64],
        data: &[u8],
        give_up: Option<&dyn Fn(Duration) -> bool>,
    ) -> Result<u64, Error> {
        assert!(args.len() <= 6, "six register arguments at most");
        let saved = self.regs()?;
        let mut xstate = Vec::new();
        self.xstate(&mut xstate, true)?;
        let data_at = (saved.rsp - RED_ZONE - data.len() as u64) & !15;
        let call_rsp = data_at - 16 + 8;
        write_memory(self.tid, data_at, data)?;
        write_memory(self.tid, call_rsp, &0u64.to_le_bytes())?;
        let mut regs = saved;
        let slots = [
            &mut regs.rdi,
            &mut regs.rsi,
            &mut regs.rdx,
            &mut regs.rcx,
            &mut regs.r8,
            &mut regs.r9,
        ];
        for (slot, &a) in slots.into_iter().zip(args) {
            let into_data = DATA - a;
            *slot = if into_data < data.len().max(1) as u64 {
                data_at + into_data
            } else {
                a
            };
        }
        regs.rip = function;
        regs.rsp = call_rsp;
        regs.rax = 0;
        // Not a system call: no restart to apply on resuming.
        regs.orig_rax = u64::MAX;
        self.set_regs(&regs)?;
        // SAFETY: resuming our stopped tracee without a signal.
        if unsafe { libc::ptrace(libc::PTRACE_CONT, self.tid, 0, 0) } != 0 {
            return Err(Error::last_os_error());
        }
        // The call ends at the SIGSEGV of its return to 0; a fault anywhere
        // else is the called function's, reported (the thread is put back
        // as it was, the fault not delivered).
        let returned = |status: i32| status >> 16 == 0 && libc::WSTOPSIG(status) == libc::SIGSEGV;
        let status = match self.wait_or_give_up(returned, give_up) {
            Ok(None) => {
                // Stopped where it waits, or at its return if it came
                // meanwhile (then its result is taken after all).
                // SAFETY: our running tracee; PTRACE_INTERRUPT only stops it.
                unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, self.tid, 0, 0) };
                let stopped = self.wait_for(|s| s >> 16 == PTRACE_EVENT_STOP || returned(s));
                stopped.and_then(|s| match returned(s) {
                    true => Ok(()),
                    false => Err(Error::new(
                        ErrorKind::TimedOut,
                        format!("the call did not return (thread {})", self.tid),
                    )),
                })
            }
            other => other.map(|_| ()),
        };
        let status = status.and_then(|_| match self.regs()? {
            r if r.rip == 0 => Ok(()),
            r => Err(Error::other(format!(
                "the call faulted at {:#x} (thread {})",
                r.rip, self.tid
            ))),
        });
        let result = status.and_then(|_| self.regs()).map(|r| r.rax);
        // The SIGSEGV of the return to 0 is consumed: the next resume
        // passes no signal.
        self.set_regs(&saved)?;
        self.xstate(&mut xstate, false)?;
        result
    }
}

/// An argument of [`Stopped::call`] that stands for the address of the
/// data passed (`DATA - k`: of its byte `k`).
pub const DATA: u64 = u64::MAX;

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: detaching our tracee; it runs on from its restored
        // registers (signals sent meanwhile are pending in the kernel).
        unsafe { libc::ptrace(libc::PTRACE_DETACH, self.tid, 0, 0) };
    }
}

/// Reads `out.len()` bytes at `addr` in the memory of the process of
/// thread `tid` (ours to trace).
pub fn read_memory(tid: i32, addr: u64, out: &mut [u8]) -> Result<(), Error> {
    use std::os::unix::fs::FileExt;
    std::fs::File::open(format!("/proc/{tid}/mem"))?.read_exact_at(out, addr)
}

/// Writes `bytes` at `addr` in the memory of the process of thread `tid`
/// (ours to trace).
pub fn write_memory(tid: i32, addr: u64, bytes: &[u8]) -> Result<(), Error> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{tid}/mem"))?;
    mem.write_all_at(bytes, addr)
}

/// Reads up to `out.len()` bytes at `addr` in the memory of the process of
/// thread `tid` (ours to trace), stopping where the mapping ends; returns
/// how many it read (0 on any error).
pub fn read_some(tid: i32, addr: u64, out: &mut [u8]) -> usize {
    use std::os::unix::fs::FileExt;
    let Ok(mem) = std::fs::File::open(format!("/proc/{tid}/mem")) else {
        return 0;
    };
    let mut got = 0;
    while got < out.len() {
        match mem.read_at(&mut out[got..], addr + got as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    got
}
