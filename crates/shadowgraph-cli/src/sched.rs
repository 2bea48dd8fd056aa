//! Schedule events (uftrace's `linux:schedule`): the kernel's record of
//! each time a thread of the traced program leaves a processor and comes
//! back (and, with `-E linux:task-name`, of each new name a thread takes),
//! from a perf event per processor that `record` opens on itself
//! before it starts the program, which inherits them (and they come on at
//! its exec, not before: `record`'s own switches are not recorded), or,
//! for `record -p`, per thread of the process and processor. A thread
//! copies what they gather, as it comes, into `perf-cpu<N>.dat`, the files
//! uftrace writes, which the views read.
//!
//! ```text
//!  a perf event's mapping (1 + DATA_PAGES pages)
//!  page 0      perf_event_mmap_page: data_head (+1024, the kernel's
//!              Release), data_tail (+1032, ours: what we have copied)
//!  pages 1..   the records: {u32 type, u16 misc, u16 size}, then, for a
//!              switch, its sample id {u32 pid, u32 tid, u64 time}
//! ```

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// `perf_event_attr` as far as `clockid` (PERF_ATTR_SIZE_VER5: 112
/// bytes), which is all we set.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_watermark: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
// perf_event_attr's flag bits.
const DISABLED: u64 = 1 << 0;
const INHERIT: u64 = 1 << 1;
const EXCLUDE_KERNEL: u64 = 1 << 5;
const COMM: u64 = 1 << 9;
const ENABLE_ON_EXEC: u64 = 1 << 12;
const SAMPLE_ID_ALL: u64 = 1 << 18;
const USE_CLOCKID: u64 = 1 << 25;
const CONTEXT_SWITCH: u64 = 1 << 26;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `_IO('$', 5)`: an event's records go to another's buffer.
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
/// The pages of records per processor (256 KiB): a switch out and back
/// take 48 bytes.
const DATA_PAGES: usize = 64;
/// Offsets of `data_head` and `data_tail` in the first page.
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;

/// One processor's event: its mapping and its files (one per tracer's
/// directory).
struct PerCpu {
    fd: std::os::fd::OwnedFd,
    /// The other threads' events on this processor, writing into `fd`'s
    /// buffer (`record -p`).
    others: Vec<std::os::fd::OwnedFd>,
    map: *mut u8,
    len: usize,
    files: Vec<std::fs::File>,
}

// SAFETY: the mapping is used by one thread at a time (the copier, then
// `finish` after joining it).
unsafe impl Send for PerCpu {}

impl PerCpu {
    /// Copies the records gathered since the last copy into the file.
    fn copy(&mut self) -> std::io::Result<()> {
        let page = self.len / (DATA_PAGES + 1);
        let size = (DATA_PAGES * page) as u64;
        // SAFETY: data_head and data_tail are aligned u64 words of the
        // mapping's first page; the kernel writes the head, we the tail.
        let (head, tail) = unsafe {
            (
                &*(self.map.add(DATA_HEAD) as *const AtomicU64),
                &*(self.map.add(DATA_TAIL) as *const AtomicU64),
            )
        };
        // Acquire: the records up to the head, written before it moved.
        let (h, t) = (head.load(Ordering::Acquire), tail.load(Ordering::Relaxed));
        if h == t {
            return Ok(());
        }
        let mut at = t;
        while at < h {
            let off = (at % size) as usize;
            let n = ((h - at) as usize).min(size as usize - off);
            // SAFETY: `n` bytes of the data pages (page 1 on), which the
            // kernel does not overwrite before the tail moves past them.
            let bytes = unsafe { std::slice::from_raw_parts(self.map.add(page + off), n) };
            for f in &mut self.files {
                f.write_all(bytes)?;
            }
            at += n as u64;
        }
        // Release: our reads of the records done before the kernel may
        // reuse their room.
        tail.store(h, Ordering::Release);
        Ok(())
    }
}

impl Drop for PerCpu {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(self.map.cast(), self.len) };
        let _ = (&self.fd, &self.others);
    }
}

/// What the events record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Kinds {
    /// Each time a thread leaves its processor and comes back
    /// (`linux:schedule`).
    pub(crate) switches: bool,
    /// A thread's new names (`linux:task-name`: `prctl(PR_SET_NAME)`,
    /// `pthread_setname_np`, exec).
    pub(crate) names: bool,
}

/// The schedule events of a program `record` starts.
pub(crate) struct Sched {
    cpus: Vec<PerCpu>,
    stop: Arc<AtomicBool>,
    copier: Option<std::thread::JoinHandle<Vec<PerCpu>>>,
}

impl Kinds {
    /// The perf_event_attr flags that record them.
    fn flags(self) -> u64 {
        (if self.switches { CONTEXT_SWITCH } else { 0 }) | if self.names { COMM } else { 0 }
    }
}

impl Sched {
    /// Opens an event per processor on this thread, which the program it
    /// starts next inherits, each copied into `perf-cpu<N>.dat` of every
    /// directory of `dirs`; Err says why not (perf events not permitted,
    /// say).
    pub(crate) fn open(dirs: &[std::path::PathBuf], kinds: Kinds) -> Result<Sched, String> {
        Sched::open_for(&[0], DISABLED | ENABLE_ON_EXEC | kinds.flags(), dirs)
    }

    /// [`Sched::open`] for the running process `pid` (`record -p`): an
    /// event per thread and processor, on at once, each processor's
    /// gathered into one buffer; the threads it makes later inherit them.
    pub(crate) fn open_attached(
        pid: i32,
        dirs: &[std::path::PathBuf],
        kinds: Kinds,
    ) -> Result<Sched, String> {
        let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map_err(|e| format!("/proc/{pid}/task: {e}"))?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        Sched::open_for(&tids, kinds.flags(), dirs)
    }

    /// The events of the threads `tids` (0: this one) on every processor,
    /// with `flags` beside the common ones.
    fn open_for(tids: &[i32], flags: u64, dirs: &[std::path::PathBuf]) -> Result<Sched, String> {
        // SAFETY: sysconf has no preconditions.
        let (n, page) = unsafe {
            (
                libc::sysconf(libc::_SC_NPROCESSORS_CONF).max(1) as usize,
                libc::sysconf(libc::_SC_PAGESIZE).max(4096) as usize,
            )
        };
        let attr = PerfEventAttr {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_DUMMY,
            sample_period: 1,
            sample_type: PERF_SAMPLE_TID | PERF_SAMPLE_TIME,
            flags: flags | INHERIT | EXCLUDE_KERNEL | SAMPLE_ID_ALL | USE_CLOCKID,
            clockid: libc::CLOCK_MONOTONIC,
            ..Default::default()
        };
        let mut cpus = Vec::with_capacity(n);
        'cpus: for cpu in 0..n {
            let mut fds: Vec<std::os::fd::OwnedFd> = Vec::with_capacity(tids.len());
            for &tid in tids {
                // SAFETY: perf_event_open with a valid attr for one thread
                // on one processor.
                let fd = unsafe {
                    libc::syscall(
                        libc::SYS_perf_event_open,
                        &attr as *const PerfEventAttr,
                        tid,
                        cpu as i32,
                        -1,
                        PERF_FLAG_FD_CLOEXEC,
                    )
                };
                if fd < 0 {
                    let e = std::io::Error::last_os_error();
                    match e.raw_os_error() {
                        // A processor not online.
                        Some(libc::ENODEV) | Some(libc::EINVAL) if fds.is_empty() => continue 'cpus,
                        // A thread that ended meanwhile.
                        Some(libc::ESRCH) if tid != 0 => continue,
                        _ => return Err(format!("perf_event_open: {e}")),
                    }
                }
                // SAFETY: a new fd of ours.
                fds.push(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) });
            }
            if fds.is_empty() {
                continue;
            }
            let fd = fds.remove(0);
            let len = (DATA_PAGES + 1) * page;
            // SAFETY: mapping the event's buffer (1 + 2^k pages), shared
            // and writable (we write data_tail).
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    0,
                )
            };
            if map == libc::MAP_FAILED {
                return Err(format!(
                    "mmap of a perf event: {}",
                    std::io::Error::last_os_error()
                ));
            }
            // (The first's buffer mapped: the others' records go there.)
            for other in &fds {
                // SAFETY: an ioctl between two perf events of ours.
                let r = unsafe {
                    libc::ioctl(
                        std::os::fd::AsRawFd::as_raw_fd(other),
                        PERF_EVENT_IOC_SET_OUTPUT,
                        std::os::fd::AsRawFd::as_raw_fd(&fd),
                    )
                };
                if r != 0 {
                    let e = std::io::Error::last_os_error();
                    // SAFETY: the mapping just made.
                    unsafe { libc::munmap(map, len) };
                    return Err(format!("perf event output: {e}"));
                }
            }
            let files = dirs
                .iter()
                .map(|d| {
                    let path = d.join(format!("perf-cpu{cpu}.dat"));
                    std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))
                })
                .collect::<Result<Vec<_>, String>>();
            let files = match files {
                Ok(f) => f,
                Err(e) => {
                    // SAFETY: the mapping just made.
                    unsafe { libc::munmap(map, len) };
                    return Err(e);
                }
            };
            cpus.push(PerCpu {
                fd,
                others: fds,
                map: map.cast(),
                len,
                files,
            });
        }
        Ok(Sched {
            cpus,
            stop: Arc::new(AtomicBool::new(false)),
            copier: None,
        })
    }

    /// In a child forked after [`Sched::open`]: the events' mappings made
    /// again (the kernel does not copy them into a child, VM_DONTCOPY);
    /// the inherited descriptors are the same events. Err: the events are
    /// not copied.
    pub(crate) fn map_again(&mut self) -> Result<(), String> {
        for c in &mut self.cpus {
            // SAFETY: mapping the event's buffer again, as in `open`; the
            // old address is not mapped in this process (nothing to
            // unmap).
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    c.len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    std::os::fd::AsRawFd::as_raw_fd(&c.fd),
                    0,
                )
            };
            if map == libc::MAP_FAILED {
                let e = std::io::Error::last_os_error();
                // (Not ours to unmap: forget the mappings.)
                for c in std::mem::take(&mut self.cpus) {
                    std::mem::forget(c);
                }
                return Err(format!("mmap of a perf event: {e}"));
            }
            c.map = map.cast();
        }
        Ok(())
    }

    /// Copies the events as they come (every 10 ms), on a thread of its
    /// own, until [`Sched::finish`]. Call after the program is started
    /// (a thread made before would inherit the events).
    pub(crate) fn start(&mut self) {
        let mut cpus = std::mem::take(&mut self.cpus);
        let stop = self.stop.clone();
        self.copier = std::thread::Builder::new()
            .name("shadowgraph-sched".into())
            .spawn(move || {
                // Relaxed: a stop flag; the last copy follows the join.
                while !stop.load(Ordering::Relaxed) {
                    for c in &mut cpus {
                        let _ = c.copy();
                    }
                    // (Woken at once by `finish`.)
                    std::thread::park_timeout(std::time::Duration::from_millis(10));
                }
                cpus
            })
            .ok();
    }

    /// The last copy, once the program has ended; the files are complete.
    pub(crate) fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let mut cpus = match self.copier.take() {
            Some(t) => {
                t.thread().unpark();
                t.join().unwrap_or_default()
            }
            None => std::mem::take(&mut self.cpus),
        };
        for c in &mut cpus {
            if let Err(e) = c.copy() {
                eprintln!("shadowgraph: schedule events: {e}");
            }
        }
    }
}
