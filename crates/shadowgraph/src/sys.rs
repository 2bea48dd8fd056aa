//! Thin wrappers over the system calls the patcher needs, and the process's
//! memory map. Functions marked *async-signal-safe* allocate nothing and take
//! no lock; they may run while other threads are parked inside a signal
//! handler holding the allocator's lock.

use std::io;
use std::os::unix::ffi::OsStrExt;

/// One line of `/proc/self/maps`.
#[derive(Clone, Debug)]
pub struct Mapping {
    /// First address.
    pub start: usize,
    /// End address (exclusive).
    pub end: usize,
    /// `PROT_*` bits.
    pub prot: i32,
    /// The mapped file (empty for anonymous memory).
    pub path: String,
}

/// Parses the process's maps, read through `/proc/thread-self`: those of
/// `/proc/self` (the main thread's) are empty once the main thread has
/// ended by `pthread_exit` while others run on.
pub fn read_maps() -> io::Result<Vec<Mapping>> {
    let text = std::fs::read_to_string("/proc/thread-self/maps")?;
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(perms)) = (it.next(), it.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        else {
            continue;
        };
        let p = perms.as_bytes();
        let mut prot = 0;
        if p.first() == Some(&b'r') {
            prot |= libc::PROT_READ;
        }
        if p.get(1) == Some(&b'w') {
            prot |= libc::PROT_WRITE;
        }
        if p.get(2) == Some(&b'x') {
            prot |= libc::PROT_EXEC;
        }
        let path = it.nth(3).unwrap_or("").to_string();
        out.push(Mapping {
            start,
            end,
            prot,
            path,
        });
    }
    Ok(out)
}

/// A fresh private anonymous mapping of `len` bytes (zeroed, read-write),
/// or None. Async-signal-safe: usable inside traced calls.
pub fn map_anonymous(len: usize) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

/// A whole file mapped read-only (private): its bytes straight from the
/// page cache, without copying them into fresh memory as a read would
/// (that is most of the cost of reading a large library at start).
pub struct MappedFile {
    base: *const u8,
    len: usize,
}

impl MappedFile {
    /// Maps the file at `path`; an error if it cannot be opened or mapped
    /// (an empty file cannot be mapped).
    pub fn open(path: &std::path::Path) -> io::Result<MappedFile> {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(path)?;
        let len = usize::try_from(f.metadata()?.len()).map_err(io::Error::other)?;
        if len == 0 {
            return Err(io::Error::other("empty file"));
        }
        // SAFETY: a new private read-only mapping of a file we opened; no
        // existing memory is touched. The mapping outlives the descriptor.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(MappedFile {
            base: p as *const u8,
            len,
        })
    }
}

impl std::ops::Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: base maps len readable bytes until drop. (A file cut
        // short meanwhile would fault: the files mapped are objects the
        // program runs, which it would fault on too.)
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: our mapping; no slice of it outlives self (Deref borrows).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Maps `len` bytes of the open file `fd` read-write and shared (a ring
/// file: the writer and the traced threads see the same bytes), with its
/// pages mapped at once if `populate` (cheap for pages already in memory).
/// None if mmap fails. Async-signal-safe.
pub fn map_shared(fd: i32, len: usize, populate: bool) -> Option<*mut u8> {
    // SAFETY: mapping a file descriptor the caller owns; no existing memory
    // is touched (the kernel picks the address).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 },
            fd,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

/// Opens (made if missing, mode 0666 less the umask) `rel` under the
/// directory `dir` holds open, for appending: `openat(2)`, so the file is
/// made in that directory even if it was renamed since it was opened.
pub fn open_append_at(dir: &std::fs::File, rel: &std::path::Path) -> io::Result<std::fs::File> {
    use std::os::unix::io::{AsRawFd, FromRawFd};
    let name = std::ffi::CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated name and a directory descriptor `dir` keeps
    // open for the call.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, 0o666 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Removes `rel` under the directory `dir` holds open (`unlinkat(2)`);
/// best effort.
pub fn unlink_at(dir: &std::fs::File, rel: &std::path::Path) {
    use std::os::unix::io::AsRawFd;
    if let Ok(name) = std::ffi::CString::new(rel.as_os_str().as_bytes()) {
        // SAFETY: a NUL-terminated name and a descriptor `dir` keeps open.
        unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
    }
}

/// The system's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The calling thread's id. Async-signal-safe.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Blocks every signal a handler could run for asynchronously (the
/// synchronous ones a fault or a trap raises stay deliverable: blocked,
/// they would kill the process); returns the mask to restore with
/// [`restore_signals`]. Raw system calls: the agent interposes the libc
/// functions. Async-signal-safe.
pub fn block_async_signals() -> u64 {
    let sync = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGSYS,
    ]
    .iter()
    .fold(0u64, |m, &s| m | 1 << (s - 1));
    let block: u64 = !sync;
    let mut old: u64 = 0;
    // SAFETY: the kernel's sigset is 8 bytes here; both pointers are valid.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK,
            &block as *const u64,
            &mut old as *mut u64,
            8usize,
        )
    };
    old
}

/// Restores the signal mask [`block_async_signals`] returned.
/// Async-signal-safe.
pub fn restore_signals(old: u64) {
    // SAFETY: as in block_async_signals.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &old as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        )
    };
}

/// Sends `sig` to thread `tid` of this process. Async-signal-safe.
pub fn tgkill(tid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: plain system call; a stale tid yields ESRCH.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sig) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads the ids of this process's threads into `out` (cleared first)
/// without allocating: raw `getdents64` on `/proc/self/task` into a stack
/// buffer, the ids into `out`'s capacity, which the caller reserves. More
/// threads than that is an error (a list that left some out would let a
/// caller miss them). Async-signal-safe.
pub fn list_threads(out: &mut Vec<i32>) -> io::Result<()> {
    out.clear();
    // SAFETY: the path is a valid NUL-terminated string.
    let fd = unsafe {
        libc::open(
            c"/proc/self/task".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 4096];
    let mut full = false;
    let result = loop {
        if full {
            // (ENOBUFS: no allocation for the error either.)
            break Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        // SAFETY: buf is writable for its length; fd is an open directory.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            break Err(io::Error::last_os_error());
        }
        if n == 0 {
            break Ok(());
        }
        let mut off = 0usize;
        while off < n as usize {
            // linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name[]
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            let name = &buf[off + 19..off + reclen];
            let mut tid: i32 = 0;
            let mut digits = 0;
            for &c in name.iter().take_while(|&&c| c != 0) {
                if c.is_ascii_digit() {
                    tid = tid * 10 + (c - b'0') as i32;
                    digits += 1;
                } else {
                    digits = 0;
                    break;
                }
            }
            if digits > 0 {
                if out.len() == out.capacity() {
                    full = true;
                    break;
                }
                out.push(tid);
            }
            off += reclen;
        }
    };
    // SAFETY: fd was opened above and is closed once.
    unsafe { libc::close(fd) };
    result
}

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: i32 = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: i32 = 1 << 4;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: i32 = 1 << 5;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: i32 = 1 << 6;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: i32 = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: i32 = 1 << 8;

fn membarrier(cmd: i32) -> io::Result<()> {
    // SAFETY: plain system call.
    if unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The name of the threads of [`membarrier_register_all`] when the agent
/// runs it in a process it joined (`record -p`): they run no code of the
/// program, and the attach leaves them running (a thread inside the
/// kernel's grace period would stop only at its end).
pub const REGISTERING_THREAD: &str = "shadowgraph-reg";

/// Copies up to `out.len()` bytes at `addr` of this process's memory into
/// `out` with `process_vm_readv`, which reports a bad address where a load
/// would fault; returns how many bytes it read (0: none readable).
/// Async-signal-safe; allocates nothing.
pub fn read_own_memory(addr: usize, out: &mut [u8]) -> usize {
    let read = |len: usize, out: &mut [u8]| {
        let local = libc::iovec {
            iov_base: out.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: process_vm_readv writes at most `len` (≤ `out.len()`)
        // bytes into `out` and only reads the remote range, checking it;
        // getpid has no preconditions.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        n.max(0) as usize
    };
    let n = read(out.len(), out);
    // A range running into an unreadable page may fail whole: then up to
    // the end of the first page.
    let to_page_end = 4096 - addr % 4096;
    if n == 0 && to_page_end < out.len() {
        return read(to_page_end, out);
    }
    n
}

/// Registers for every `membarrier` command the patcher and grace periods
/// use (plain, sync-core and rseq expedited), the three at once on three
/// threads. In a process that already has threads each registration waits
/// for an RCU grace period of the kernel (the new state must reach every
/// runqueue); concurrent registrations share one, where one after another
/// wait for three. A registration made already returns at once, so the
/// later calls of each subsystem find theirs done. Allocates and starts
/// threads: not for a traced call.
pub fn membarrier_register_all() {
    // The threads below take this one's name.
    debug_assert!(REGISTERING_THREAD.len() <= 15);
    let regs = [
        MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE,
        MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ,
    ];
    std::thread::scope(|s| {
        for cmd in regs {
            // Without a thread, this one registers it afterwards.
            if std::thread::Builder::new()
                .spawn_scoped(s, move || membarrier(cmd))
                .is_err()
            {
                let _ = membarrier(cmd);
            }
        }
        let _ = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
    });
}

/// Runs [`membarrier_register_all`] on a thread of its own (named
/// [`REGISTERING_THREAD`]), for a process joined late, after saying so
/// ([`membarrier_registering`]); without a thread, here.
pub fn membarrier_register_in_background() {
    // Release/Acquire: a subsystem that reads the flag and so leaves its
    // registration for later finds it before any use of membarrier.
    REGISTERING.store(true, std::sync::atomic::Ordering::Release);
    let spawned = std::thread::Builder::new()
        .name(REGISTERING_THREAD.into())
        .spawn(membarrier_register_all);
    if spawned.is_err() {
        membarrier_register_all();
    }
}

/// Whether the kernel offers `membarrier(PRIVATE_EXPEDITED_RSEQ)` (asked,
/// not registered: at once).
pub fn membarrier_offers_rseq() -> bool {
    // SAFETY: plain system call (MEMBARRIER_CMD_QUERY = 0).
    let cmds = unsafe { libc::syscall(libc::SYS_membarrier, 0, 0, 0) };
    cmds > 0 && cmds as i32 & MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ != 0
}

/// Whether [`membarrier_register_in_background`] has begun: a subsystem then
/// registers at its first use of membarrier rather than at its start, so
/// that a session starting meanwhile does not wait for the kernel's grace
/// periods (10–15 ms here) that the registrations in flight are in.
pub fn membarrier_registering() -> bool {
    REGISTERING.load(std::sync::atomic::Ordering::Acquire)
}

static REGISTERING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers for `membarrier(PRIVATE_EXPEDITED)` (per process: again after
/// fork). `false` if the kernel does not offer it.
pub fn membarrier_register_expedited() -> bool {
    membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED).is_ok()
}

/// A full memory barrier on every running thread of this process.
/// Async-signal-safe.
pub fn membarrier_expedited() -> io::Result<()> {
    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
}

/// Registers for `membarrier(PRIVATE_EXPEDITED_SYNC_CORE)`. `false` if the
/// kernel does not offer it.
pub fn membarrier_register_sync_core() -> bool {
    membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE).is_ok()
}

/// Every running thread of this process executes a core-serialising
/// instruction before this returns. Async-signal-safe.
pub fn membarrier_sync_core() -> io::Result<()> {
    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)
}

/// Registers for `membarrier(PRIVATE_EXPEDITED_RSEQ)` (per process: again
/// after fork). `false` if the kernel does not offer it (before 5.10).
pub fn membarrier_register_rseq() -> bool {
    membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ).is_ok()
}

/// Every running thread of this process that is inside a restartable
/// sequence is sent to its abort handler before it runs another
/// instruction of it. Async-signal-safe.
pub fn membarrier_rseq() -> io::Result<()> {
    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)
}

/// The name the loader gives the object holding `addr` (as
/// `dl_iterate_phdr` names it: the path it was loaded by, not resolved;
/// for the program itself, its `argv[0]`).
pub fn loader_name_of(addr: usize) -> Option<std::path::PathBuf> {
    // SAFETY: a zeroed Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables for `addr`.
    let ok = unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(
        name.to_bytes(),
    )))
}

/// The path (made canonical) of the loaded object holding `addr`.
pub fn object_of(addr: usize) -> Option<std::path::PathBuf> {
    let name = loader_name_of(addr)?;
    // The program itself may be named "" by the loader.
    let path = if name.as_os_str().is_empty() {
        std::path::PathBuf::from("/proc/self/exe")
    } else {
        name
    };
    std::fs::canonicalize(path).ok()
}

/// Appends `v` in decimal to `buf` at `n`; returns the new length.
/// Allocates nothing (for paths and names made where nothing may).
pub fn put_decimal(buf: &mut [u8], mut n: usize, v: u64) -> usize {
    let mut digits = [0u8; 20];
    let mut k = 0;
    let mut v = v;
    loop {
        digits[k] = b'0' + (v % 10) as u8;
        k += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in (0..k).rev() {
        buf[n] = digits[i];
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_threads() {
        let maps = read_maps().unwrap();
        let here = maps_and_threads as *const () as usize;
        let m = maps
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .unwrap();
        assert!(m.prot & libc::PROT_EXEC != 0);
        let mut tids = Vec::with_capacity(1024);
        list_threads(&mut tids).unwrap();
        assert!(tids.contains(&gettid()));
    }
}
