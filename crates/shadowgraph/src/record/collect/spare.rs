//! The spare ring the writer makes for the program's first thread while
//! the program starts (see [`Collector::keep_spare`]).

use super::Collector;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

impl Collector {
    /// Has the writer thread ([`Collector::spawn`]) make one spare ring
    /// of `len` bytes while the program starts (none for rings over 16
    /// MiB): a ring file whose pages the writer has touched, named
    /// `writer::spare_name`, which the first thread to make a ring takes
    /// instead (`writer::claim_spare`). Its pages then cost it one mapping
    /// (~50 µs) instead of a fault each while it records (~2 µs a page in
    /// a VM: a millisecond for a 2 MiB ring, in its ring's first lap),
    /// and the writer pays for them while it has nothing else to do. Only
    /// one, for the thread most likely to record much: a spare given to a
    /// thread that records little would cost more than the pages it uses.
    pub(super) fn keep_spare(&mut self, len: usize) {
        self.spare = (len <= crate::record::writer::SPARE_MAX_BYTES).then_some(len);
    }

    /// Makes the spare ring, unless `stop` is set meanwhile.
    pub(super) fn make_first_spare(&mut self, stop: &AtomicBool) {
        if let Some(len) = self.spare.take() {
            let mut name = [0u8; 48];
            let n = crate::record::writer::spare_name(len, &mut name);
            let path = self
                .shm
                .join(std::str::from_utf8(&name[..n]).unwrap_or("spare"));
            // Failing (no memory): the thread faults its ring in.
            let _ = make_spare(&self.shm.join("spare.new"), &path, len, stop);
        }
    }
}

/// Makes the spare ring `path` of `len` bytes: built as `tmp`, its memory
/// allocated (an error, not a SIGBUS, when there is none) and its pages
/// touched, then renamed into place whole. Given up, with nothing left,
/// when `stop` is set meanwhile (the program has ended: its last drain
/// waits for no spare) or a ring appears in the directory (the program
/// made its first ring without it, and that ring needs the writer).
pub(super) fn make_spare(tmp: &Path, path: &Path, len: usize, stop: &AtomicBool) -> io::Result<()> {
    /// Bytes made at a time between looks at `stop`.
    const STEP: usize = 256 << 10;
    let _ = std::fs::remove_file(tmp);
    let f = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(tmp)?;
    let made = (|| {
        f.set_len(len as u64)?;
        let dir = tmp.parent().unwrap_or(Path::new("."));
        let ring_made = || {
            std::fs::read_dir(dir).is_ok_and(|mut d| {
                d.any(|e| e.is_ok_and(|e| e.file_name().as_encoded_bytes().ends_with(b".ring")))
            })
        };
        let base = crate::sys::map_shared(f.as_raw_fd(), len, false)
            .ok_or_else(io::Error::last_os_error)?;
        let mut at = 0;
        let mut result = Ok(());
        while at < len && result.is_ok() {
            if stop.load(Ordering::Relaxed) || ring_made() {
                result = Err(io::Error::from(io::ErrorKind::Interrupted));
                break;
            }
            let n = STEP.min(len - at);
            // SAFETY: allocating blocks of our own file, and touching
            // bytes at..at+n of our mapping of it (base maps len bytes
            // until the munmap below). The pages are written with the
            // zeros they hold (a ring is zeroed when a thread takes it),
            // by hand where the kernel cannot populate them (before
            // Linux 5.14).
            unsafe {
                if libc::fallocate(f.as_raw_fd(), 0, at as libc::off_t, n as libc::off_t) != 0 {
                    let e = io::Error::last_os_error();
                    if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::ENOMEM)) {
                        result = Err(e);
                        break;
                    }
                }
                if libc::madvise(base.add(at).cast(), n, libc::MADV_POPULATE_WRITE) != 0 {
                    let page = crate::sys::page_size();
                    for p in (at..at + n).step_by(page) {
                        std::ptr::write_volatile(base.add(p), 0);
                    }
                }
            }
            at += n;
        }
        // SAFETY: our mapping, unused from here.
        unsafe { libc::munmap(base.cast(), len) };
        result?;
        std::fs::rename(tmp, path)
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    made
}
