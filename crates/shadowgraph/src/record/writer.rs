//! The in-process side of recording: one buffer per thread, filled with
//! plain stores from the graph callbacks (no lock, no allocation), written
//! to `<dir>/<tid>.dat` by its own thread when full (one `write` per 65,536
//! records), at thread exit, and for every thread at process exit.
//!
//! Records hold raw clock values until they are written: each write-out
//! takes a calibration point and converts the buffer's times to
//! CLOCK_MONOTONIC nanoseconds by interpolating between the buffer's
//! previous point and this one (piecewise linear: every time is within the
//! points' pairing error of the real clock, however long the recording, and
//! the files need no second pass).
//!
//! A buffer is flushed by whoever holds its `busy` flag; a thread that finds
//! its full buffer busy (the exit flush) counts the record as lost, and the
//! count is written as a LOST record.

use super::clock;
use super::format::{encode, Kind};
use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Records per thread buffer (1 MiB).
pub const BUF_RECORDS: usize = 1 << 16;
/// Buffers (threads × instances) at most.
const MAX_BUFFERS: usize = 4096;
/// Recording instances (tracers writing to their own directories).
pub const MAX_INSTANCES: usize = 8;

struct ThreadBuf {
    inst: usize,
    fd: i32,
    /// Records filled.
    head: AtomicUsize,
    busy: AtomicBool,
    lost: AtomicU64,
    /// The calibration point (raw, ns) of the last write-out (or of the
    /// buffer's creation): where the next write-out's conversion starts.
    /// Touched only by whoever holds `busy`.
    seg_raw: AtomicU64,
    seg_ns: AtomicU64,
    words: *mut u64,
}

static BUFS: [AtomicPtr<ThreadBuf>; MAX_BUFFERS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_BUFFERS];
static DIRS: [OnceLock<CString>; MAX_INSTANCES] = [const { OnceLock::new() }; MAX_INSTANCES];
static KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
/// Records written to files, and records lost, per instance over all threads.
static WRITTEN: [AtomicU64; MAX_INSTANCES] = [const { AtomicU64::new(0) }; MAX_INSTANCES];
static LOST: [AtomicU64; MAX_INSTANCES] = [const { AtomicU64::new(0) }; MAX_INSTANCES];
/// The recording's start calibration (raw0, ns0, raw1, ns1): the rate used
/// when two points of a buffer are too close to give one.
static START: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Sets the start calibration (before recording starts).
pub fn set_start_calibration(c: clock::Calibration) {
    for (a, v) in START.iter().zip([c.raw0, c.ns0, c.raw1, c.ns1]) {
        a.store(v, Ordering::Relaxed);
    }
}

pub fn written(inst: usize) -> u64 {
    WRITTEN[inst].load(Ordering::Relaxed)
}

pub fn lost(inst: usize) -> u64 {
    LOST[inst].load(Ordering::Relaxed)
}

/// The first write failure of each instance (an errno; 0: none), so that
/// the loss it caused is reported with its reason (a full disk, a file size
/// limit, an I/O error) and not just counted.
static WRITE_ERRNO: [AtomicI32; MAX_INSTANCES] = [const { AtomicI32::new(0) }; MAX_INSTANCES];

/// Why records of instance `inst` could not be written, if they could not.
pub fn write_error(inst: usize) -> Option<io::Error> {
    match WRITE_ERRNO[inst].load(Ordering::Relaxed) {
        0 => None,
        e => Some(io::Error::from_raw_os_error(e)),
    }
}

// This thread's buffer per instance (null: none yet). Initial-exec TLS
// (crate::tls): read on every recorded event.
crate::fast_thread_local!(
    static MINE: [Cell<*mut ThreadBuf>; MAX_INSTANCES];
);

/// Starts recording instance `inst` into `dir` (created if missing).
pub fn start(inst: usize, dir: &Path) -> io::Result<()> {
    if inst >= MAX_INSTANCES {
        return Err(io::Error::other(format!(
            "at most {MAX_INSTANCES} recording instances"
        )));
    }
    std::fs::create_dir_all(dir)?;
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    let _ = DIRS[inst].set(c);
    KEY.get_or_init(|| {
        let mut k: libc::pthread_key_t = 0;
        // SAFETY: creating a key with a plain extern "C" destructor.
        unsafe { libc::pthread_key_create(&mut k, Some(thread_exit)) };
        k
    });
    Ok(())
}

/// Appends one record for this thread. Async-signal-safe: plain stores;
/// a system call only when the buffer is full or on the thread's first
/// record (mmap + open).
#[inline]
pub fn emit(inst: usize, kind: Kind, depth: u16, addr: u64) {
    if let Some((buf, h)) = next_slot(inst) {
        // Read after a flush the slot may have needed: its time is not the
        // traced call's.
        store(buf, h, clock::now(), kind, depth, addr);
    }
}

/// [`emit`] with a timestamp taken earlier (the entry of a call kept by a
/// time filter, written once its duration is known). The caller keeps the
/// thread's records in time order.
#[inline]
pub fn emit_at(inst: usize, time: u64, kind: Kind, depth: u16, addr: u64) {
    if let Some((buf, h)) = next_slot(inst) {
        store(buf, h, time, kind, depth, addr);
    }
}

#[inline(always)]
fn store(buf: &ThreadBuf, h: usize, t: u64, kind: Kind, depth: u16, addr: u64) {
    // SAFETY: h < BUF_RECORDS: two words inside the buffer.
    unsafe {
        buf.words.add(2 * h).write(t);
        buf.words.add(2 * h + 1).write(encode(kind, depth, addr));
    }
    buf.head.store(h + 1, Ordering::Release);
}

/// This thread's buffer of instance `inst` and its next free record, or
/// None (counted as lost) when there is none.
#[inline(always)]
fn next_slot(inst: usize) -> Option<(&'static ThreadBuf, usize)> {
    let mut b = MINE[inst].get();
    if b.is_null() {
        b = create(inst);
        if b.is_null() {
            LOST[inst].fetch_add(1, Ordering::Relaxed);
            return None;
        }
    }
    // SAFETY: `b` is this thread's live buffer; buffers are never unmapped.
    let buf = unsafe { &*b };
    let mut h = buf.head.load(Ordering::Relaxed);
    if h == BUF_RECORDS {
        flush(buf);
        h = buf.head.load(Ordering::Relaxed);
        if h == BUF_RECORDS {
            buf.lost.fetch_add(1, Ordering::Relaxed);
            return None;
        }
    }
    Some((buf, h))
}

#[cold]
fn create(inst: usize) -> *mut ThreadBuf {
    if DISABLED.load(Ordering::Acquire) {
        return std::ptr::null_mut();
    }
    let Some(dir) = DIRS[inst].get() else {
        return std::ptr::null_mut();
    };
    let tid = crate::sys::gettid();
    // "<dir>/<tid>.dat" without allocating.
    let mut path = [0u8; 4096];
    let d = dir.as_bytes();
    if d.len() + 20 > path.len() {
        return std::ptr::null_mut();
    }
    path[..d.len()].copy_from_slice(d);
    let mut n = d.len();
    path[n] = b'/';
    n += 1;
    let mut digits = [0u8; 12];
    let mut k = 0;
    let mut v = tid as u32;
    loop {
        digits[k] = b'0' + (v % 10) as u8;
        k += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in (0..k).rev() {
        path[n] = digits[i];
        n += 1;
    }
    path[n..n + 4].copy_from_slice(b".dat");
    // SAFETY: path is NUL-terminated (zero-filled beyond n + 4).
    let fd = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        return std::ptr::null_mut();
    }
    let size = std::mem::size_of::<ThreadBuf>().next_multiple_of(64) + BUF_RECORDS * 16;
    // SAFETY: anonymous mapping; mmap is async-signal-safe.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        // SAFETY: closing the fd opened above.
        unsafe { libc::close(fd) };
        return std::ptr::null_mut();
    }
    let b = p as *mut ThreadBuf;
    let seg = clock::Calibration::point();
    // SAFETY: the mapping is large enough for the header and the records.
    unsafe {
        b.write(ThreadBuf {
            inst,
            fd,
            head: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            lost: AtomicU64::new(0),
            seg_raw: AtomicU64::new(seg.0),
            seg_ns: AtomicU64::new(seg.1),
            words: (p as *mut u8).add(std::mem::size_of::<ThreadBuf>().next_multiple_of(64))
                as *mut u64,
        });
    }
    for slot in BUFS.iter() {
        if slot
            .compare_exchange(std::ptr::null_mut(), b, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            break;
        }
    }
    MINE[inst].set(b);
    if let Some(&k) = KEY.get() {
        // SAFETY: valid key; non-null arms the destructor.
        unsafe { libc::pthread_setspecific(k, b as *const libc::c_void) };
    }
    b
}

/// Writes out what the buffer holds (and a LOST record for what it
/// dropped). Returns false if someone else is flushing it.
fn flush(buf: &ThreadBuf) -> bool {
    if buf
        .busy
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    let h = buf.head.load(Ordering::Acquire);
    let point = clock::Calibration::point();
    to_ns(buf, h, point);
    let mut bytes = h * 16;
    let mut p = buf.words as *const u8;
    while bytes > 0 {
        // SAFETY: [p, p + bytes) lies in the buffer's filled records.
        let n = unsafe { libc::write(buf.fd, p.cast(), bytes) };
        if n <= 0 {
            if n < 0 && std::io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // Disk full or similar: the records are lost, and counted. A
            // write of 0 bytes to a regular file means no space.
            let errno = if n < 0 {
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO)
            } else {
                libc::ENOSPC
            };
            let _ = WRITE_ERRNO[buf.inst].compare_exchange(
                0,
                errno,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            buf.lost.fetch_add((bytes / 16) as u64, Ordering::Relaxed);
            break;
        }
        bytes -= n as usize;
        // SAFETY: advancing within the buffer.
        p = unsafe { p.add(n as usize) };
    }
    WRITTEN[buf.inst].fetch_add((h * 16 - bytes) as u64 / 16, Ordering::Relaxed);
    let lost = buf.lost.swap(0, Ordering::Relaxed);
    if lost > 0 {
        LOST[buf.inst].fetch_add(lost, Ordering::Relaxed);
        let rec = [point.1, encode(Kind::Lost, 0, lost)];
        // SAFETY: writing a 16-byte local record.
        unsafe { libc::write(buf.fd, rec.as_ptr().cast(), 16) };
    }
    buf.head.store(0, Ordering::Release);
    buf.busy.store(false, Ordering::Release);
    true
}

/// Converts the times of the buffer's first `h` records to nanoseconds,
/// between the buffer's last calibration point and `point` (which becomes
/// the last). Times outside the two points (a time filter's entry written
/// late) are extrapolated along the same line.
fn to_ns(buf: &ThreadBuf, h: usize, point: (u64, u64)) {
    let (raw0, ns0) = (
        buf.seg_raw.load(Ordering::Relaxed),
        buf.seg_ns.load(Ordering::Relaxed),
    );
    buf.seg_raw.store(point.0, Ordering::Relaxed);
    buf.seg_ns.store(point.1, Ordering::Relaxed);
    if !clock::uses_tsc() {
        return; // CLOCK_MONOTONIC already
    }
    let conv = if point.0 > raw0 && point.1 > ns0 {
        clock::Calibration {
            raw0,
            ns0,
            raw1: point.0,
            ns1: point.1,
        }
        .converter()
    } else {
        let s = START.each_ref().map(|a| a.load(Ordering::Relaxed));
        clock::Calibration {
            raw0: s[0],
            ns0: s[1],
            raw1: s[2],
            ns1: s[3],
        }
        .converter()
    };
    for i in 0..h {
        // SAFETY: i < h ≤ BUF_RECORDS: a filled record's time word, ours
        // while `busy` is held.
        unsafe {
            let w = buf.words.add(2 * i);
            w.write(conv.to_ns(w.read()));
        }
    }
}

/// Thread exit: flush and close every buffer of this thread.
extern "C" fn thread_exit(_: *mut libc::c_void) {
    for inst in 0..MAX_INSTANCES {
        let b = MINE[inst].replace(std::ptr::null_mut());
        if b.is_null() {
            continue;
        }
        // SAFETY: this thread's buffer; buffers are never unmapped.
        let buf = unsafe { &*b };
        flush(buf);
        for slot in BUFS.iter() {
            if slot.load(Ordering::Acquire) == b {
                slot.store(std::ptr::null_mut(), Ordering::Release);
            }
        }
        // SAFETY: the fd belongs to this buffer, which nobody uses any more.
        unsafe { libc::close(buf.fd) };
    }
}

static DISABLED: AtomicBool = AtomicBool::new(false);

/// In a forked child: forget every buffer (they hold the parent's records
/// and share its files) without writing, and record nothing more (counted
/// as lost). Async-signal-safe.
pub fn disable_after_fork() {
    DISABLED.store(true, Ordering::Release);
    for slot in BUFS.iter() {
        slot.store(std::ptr::null_mut(), Ordering::Release);
    }
    for c in MINE.iter() {
        c.set(std::ptr::null_mut());
    }
}

/// Flushes every thread's buffer (at process exit; a thread still running
/// may keep appending to its own buffer afterwards: those records are lost).
pub fn flush_all() {
    for slot in BUFS.iter() {
        let b = slot.load(Ordering::Acquire);
        if !b.is_null() {
            // SAFETY: buffers are never unmapped.
            flush(unsafe { &*b });
        }
    }
}
