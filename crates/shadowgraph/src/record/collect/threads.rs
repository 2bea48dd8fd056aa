//! The writer threads: one by default, or `n` (`record --num-thread`),
//! each draining the rings of the threads whose id is its own modulo `n`.
//! A thread's rings all go through one writer, which alone writes its
//! `<tid>.dat` (in the order the rings were made); the writers share
//! nothing else until the end, when their last drains are merged.

use super::{conclude, Collector, Finished, Part, BEHIND, BUSY_NAP, GATHER_BYTES};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

impl Collector {
    /// Drains in a thread of its own until the returned handle is finished.
    pub fn spawn(self) -> CollectorThread {
        self.spawn_n(1)
    }

    /// Drains with `n` threads (at least one), each the rings of the
    /// traced threads whose id is its index modulo `n`, until the returned
    /// handle is finished.
    pub fn spawn_n(mut self, n: usize) -> CollectorThread {
        let n = n.clamp(1, u32::MAX as usize) as u32;
        let stop = Arc::new(AtomicBool::new(false));
        let shm = self.shm.clone();
        let others: Vec<Collector> = (1..n).map(|k| self.share_of(k, n)).collect();
        self.share = (0, n);
        let joins = std::iter::once(self)
            .chain(others)
            .map(|c| run(c, stop.clone()))
            .collect();
        CollectorThread { stop, joins, shm }
    }

    /// Writer `k` of `n`: the same recording, none of this one's rings,
    /// files or spare ring.
    fn share_of(&self, k: u32, n: u32) -> Collector {
        Collector {
            shm: self.shm.clone(),
            top: self.top.clone(),
            top_dir: self.top_dir.clone(),
            rel: self.rel.clone(),
            sessions: HashMap::new(),
            rings: Vec::new(),
            seen: HashSet::new(),
            files: HashMap::new(),
            totals: HashMap::new(),
            tasks: HashMap::new(),
            spare: None,
            busy_nap: self.busy_nap,
            gather: vec![0; GATHER_BYTES],
            share: (k, n),
            owns_shm: false,
            passed_over: false,
        }
    }
}

/// Runs writer `c` in a thread of its own until `stop`, then drains for
/// the last time.
fn run(mut c: Collector, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Part> {
    std::thread::Builder::new()
        .name("shadowgraph-writer".into())
        .spawn(move || {
            if c.busy_nap < BUSY_NAP {
                // SAFETY: sets this thread's timer slack (1 µs); no memory
                // is passed.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64) };
            }
            let mut round = 0u64;
            let mut moved = 0;
            c.make_first_spare(&stop);
            // Acquire: pairs with `finish`'s Release; the last drain then
            // sees every ring the program made before it ended.
            while !stop.load(Ordering::Acquire) {
                // New rings are looked for every round while nothing
                // moves (a new thread's ring fills in about a millisecond
                // at full speed), every 8th while busy.
                if moved == 0 || round.is_multiple_of(8) {
                    c.scan();
                }
                round += 1;
                moved = c.drain(false);
                // Busy rings are drained often (a full ring makes its
                // thread wait), at once again after a round that moved
                // BEHIND records or more (the writer is behind); idle, a
                // wake-up per 250 µs. A ring passed over (its thread was
                // draining it, the writer behind) is looked at again after
                // a moment, about one of the thread's chunks.
                if moved >= BEHIND {
                    continue;
                }
                if c.passed_over {
                    std::thread::park_timeout(Duration::from_micros(20));
                    continue;
                }
                // A nap `finish` cuts short (unpark): the last drain
                // starts as soon as the program has ended.
                std::thread::park_timeout(if moved > 0 {
                    c.busy_nap
                } else {
                    Duration::from_micros(250)
                });
            }
            c.last_drain()
        })
        .expect("spawn the writer thread")
}

/// The running writer threads.
pub struct CollectorThread {
    stop: Arc<AtomicBool>,
    joins: Vec<std::thread::JoinHandle<Part>>,
    /// The shared-memory directory, removed at the end.
    shm: PathBuf,
}

impl CollectorThread {
    /// Runs the writers at real-time FIFO priority `prio` (1–99): they keep
    /// pace with the traced threads however busy the machine is.
    pub fn set_rt_prio(&self, prio: i32) -> io::Result<()> {
        use std::os::unix::thread::JoinHandleExt;
        let param = libc::sched_param {
            sched_priority: prio,
        };
        for j in &self.joins {
            // SAFETY: the threads are joined only by `finish`, which takes
            // `self`: each pthread_t names a live thread while `&self` is
            // held; `param` is read during the call only.
            let r =
                unsafe { libc::pthread_setschedparam(j.as_pthread_t(), libc::SCHED_FIFO, &param) };
            if r != 0 {
                return Err(io::Error::from_raw_os_error(r));
            }
        }
        Ok(())
    }

    /// Stops the threads after a last drain each; what they found.
    pub fn finish(self) -> Finished {
        // Release: see `run`.
        self.stop.store(true, Ordering::Release);
        for j in &self.joins {
            j.thread().unpark();
        }
        let parts = self
            .joins
            .into_iter()
            .map(|j| j.join().unwrap_or_default())
            .collect();
        conclude(&self.shm, parts)
    }
}
