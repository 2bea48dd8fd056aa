//! Progress of a view reading a large recording, on stderr.

#![forbid(unsafe_code)]

/// Reading progress shown on stderr while a view reads a large recording
/// (a percentage every 2^20 records); the line is cleared when the last
/// reader lets go of it.
#[derive(Debug)]
pub struct Progress {
    total: u64,
    read: std::sync::atomic::AtomicU64,
    shown: std::sync::atomic::AtomicBool,
}

impl Progress {
    /// Records at which progress is worth showing.
    const WORTH: u64 = 1 << 21;
    const EVERY: u64 = 1 << 20;

    /// The progress of reading `total` records, if that many are worth it.
    pub(crate) fn worth(total: u64) -> Option<Progress> {
        (total >= Self::WORTH).then(|| Progress {
            total,
            read: 0.into(),
            shown: false.into(),
        })
    }

    pub(crate) fn tick(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        // Relaxed: a count for display, read by nothing else.
        let n = self.read.fetch_add(1, Relaxed) + 1;
        if n.is_multiple_of(Self::EVERY) {
            self.shown.store(true, Relaxed);
            eprint!(
                "\r# reading records: {}% ({n} of {})",
                n * 100 / self.total.max(1),
                self.total
            );
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if *self.shown.get_mut() {
            eprint!("\r\x1b[K");
        }
    }
}
