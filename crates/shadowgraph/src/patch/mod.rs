//! Live patching of code that other threads are executing (design §2.2–2.3).
//!
//! A batch rewrites many sites with the int3-first protocol:
//! 1. publish the batch for the SIGTRAP handler;
//! 2. verify every site holds exactly its expected old bytes — one mismatch
//!    and nothing is written;
//! 3. `0xCC` on byte 0 of every site, serialise every core;
//! 4. the remaining bytes of every site, serialise;
//! 5. the new byte 0 of every site, serialise;
//! 6. retire the batch once no SIGTRAP handler still reads it.
//!
//! A thread executing a site meanwhile sees the old instruction, the new one,
//! or `int3`, whose handler emulates the new instruction. The bytes behind
//! byte 0 are never fetched as an instruction while byte 0 is `0xCC`, and the
//! serialisation after step 4 makes every core see them before byte 0 is
//! released. Valid only for edits whose old and new forms share instruction
//! boundaries inside the edited span (nop5, call rel32 and jmp rel32 into
//! one another, and the fentry call → nop conversions); sleds need the stop-the-world path.

mod edit;
pub mod probes;
mod published;
mod trap;

use crate::hold;
pub use crate::hold::{set_world_holder, Hold};
use crate::{stop, sys};
pub use edit::{Edit, PatchError};
use published::{
    add_known, ActiveBatch, ACTIVE, READERS, TRAPS_CHAINED, TRAPS_EMULATED, TRAPS_LATE,
};
use std::io;
use std::sync::atomic::{AtomicI8, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

/// How the patcher writes to text pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// `mprotect` the page ranges of a batch writable once, store, restore
    /// the exact original protection. The fast path for large batches.
    Mprotect,
    /// `pwrite` to `/proc/self/mem`: text never becomes writable.
    ProcMem,
}

static WRITE_MODE: AtomicU8 = AtomicU8::new(0);

/// Chooses how text is written (default: `Mprotect`, falling back to
/// `ProcMem` when the system refuses writable text).
pub fn set_write_mode(mode: WriteMode) {
    WRITE_MODE.store(mode as u8 + 1, Ordering::Relaxed);
}

/// How text is written now.
pub fn write_mode() -> WriteMode {
    match WRITE_MODE.load(Ordering::Relaxed) {
        2 => WriteMode::ProcMem,
        _ => WriteMode::Mprotect,
    }
}

/// Counters of the patching engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct PatchStats {
    /// Batches applied.
    pub batches: u64,
    /// Sites rewritten.
    pub sites_written: u64,
    /// Traps on a site mid-batch, answered by emulating the new instruction.
    pub traps_emulated: u64,
    /// Traps delivered after their batch ended: the thread re-executes.
    pub traps_late: u64,
    /// Traps that were not ours, handed to the previous handler.
    pub traps_chained: u64,
}

// Statistics (these, and the trap counters): Relaxed everywhere, since
// nothing is ordered by them; read for reports.
static BATCHES: AtomicU64 = AtomicU64::new(0);
static SITES_WRITTEN: AtomicU64 = AtomicU64::new(0);
/// The counters now.
pub fn stats() -> PatchStats {
    PatchStats {
        batches: BATCHES.load(Ordering::Relaxed),
        sites_written: SITES_WRITTEN.load(Ordering::Relaxed),
        traps_emulated: TRAPS_EMULATED.load(Ordering::Relaxed),
        traps_late: TRAPS_LATE.load(Ordering::Relaxed),
        traps_chained: TRAPS_CHAINED.load(Ordering::Relaxed),
    }
}

/// The process-wide text lock: every code write happens under it.
static TEXT_LOCK: Mutex<()> = Mutex::new(());

pub(crate) fn text_lock() -> MutexGuard<'static, ()> {
    TEXT_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

static INIT: Once = Once::new();
/// Whether `membarrier(SYNC_CORE)` serves [`serialise`]: 1 yes, 0 no, −1
/// not registered yet (in a process joined late, until the first use: see
/// sys::membarrier_registering). Relaxed: every thread that registers
/// stores the same.
static MEMBARRIER_OK: AtomicI8 = AtomicI8::new(-1);

/// Installs the SIGTRAP handler and registers for membarrier. Idempotent;
/// done by the first batch at the latest. Call again after `fork` in the
/// child (membarrier registration is per process).
pub fn init() {
    INIT.call_once(|| {
        if !sys::membarrier_registering() {
            register_sync_core();
        }
        trap::install();
    });
}

/// Registers for `membarrier(SYNC_CORE)`; whether it serves.
fn register_sync_core() -> bool {
    let ok = sys::membarrier_register_sync_core();
    MEMBARRIER_OK.store(ok as i8, Ordering::Relaxed);
    ok
}

/// Whether `membarrier(SYNC_CORE)` serves, registering first if it is not
/// yet.
fn sync_core_ok() -> bool {
    match MEMBARRIER_OK.load(Ordering::Relaxed) {
        -1 => register_sync_core(),
        v => v == 1,
    }
}

/// How [`serialise`] reaches every core: `membarrier` (SYNC_CORE) or, where
/// the kernel lacks it, a signal to every thread.
pub fn serialise_method() -> &'static str {
    if sync_core_ok() {
        "membarrier(PRIVATE_EXPEDITED_SYNC_CORE)"
    } else {
        "a signal to every thread"
    }
}

/// Re-registers for membarrier in a forked child.
pub fn after_fork_child() {
    register_sync_core();
}

/// Every core of the process executes a serialising instruction.
pub fn serialise() -> Result<(), PatchError> {
    if sync_core_ok() {
        if sys::membarrier_sync_core().is_ok() {
            return Ok(());
        }
        MEMBARRIER_OK.store(0, Ordering::Relaxed);
    }
    stop::ping_all().map_err(|e| PatchError::Io(format!("cannot serialise cores: {e}")))
}

/// Applies the batch with the int3-first protocol while other threads run.
/// Sorts `edits` by address. On `Err` nothing was written.
pub fn apply(edits: &mut [Edit]) -> Result<(), PatchError> {
    if edits.is_empty() {
        return Ok(());
    }
    init();
    edits.sort_by_key(|e| e.addr);
    for w in edits.windows(2) {
        if w[0].addr + w[0].len as usize > w[1].addr {
            return Err(PatchError::Overlap(w[1].addr));
        }
    }
    let _text = text_lock();
    verify(edits)?;
    if hold::exists() {
        // Planned first: nothing below allocates while the threads are
        // held (one may be stopped inside the allocator).
        let window = TextWindow::new(edits.iter().map(|e| (e.addr, e.len as usize)))?;
        if hold::ask(Hold::Begin) {
            // Nothing else runs the program's code: plain stores. Pages
            // that cannot be made writable are left to the batch below
            // (its window falls back to /proc/self/mem).
            // No serialising afterwards: a held thread is off its CPU,
            // stopped in the kernel with nothing of the program's in
            // flight, and resumes through the kernel's return to user
            // mode, fetching whatever the stores left (as a debugger's
            // breakpoints are written into a stopped inferior). Nor, then,
            // a wait for membarrier's registration in a process joined
            // late (sys::membarrier_registering).
            let opened = window.open().is_ok();
            let r = opened.then(|| {
                let written = write_quiescent(&window, edits);
                window.close();
                written
            });
            hold::ask(Hold::End);
            if let Some(r) = r {
                r?;
                BATCHES.fetch_add(1, Ordering::Relaxed);
                SITES_WRITTEN.fetch_add(edits.len() as u64, Ordering::Relaxed);
                return Ok(());
            }
        }
    }
    add_known(&edits.iter().map(|e| e.addr).collect::<Vec<_>>());

    let window = TextWindow::open_for(edits.iter().map(|e| (e.addr, e.len as usize)))?;

    let batch = Box::new(ActiveBatch {
        edits: edits.as_ptr(),
        len: edits.len(),
    });
    // SeqCst (here, in retire and with READERS): the SIGTRAP handler
    // increments READERS, then loads ACTIVE; retire swaps ACTIVE, then
    // reads READERS. Only a single total order over the two makes one of
    // them see the other's write (store-then-load on both sides).
    ACTIVE.store(Box::into_raw(batch), Ordering::SeqCst);

    let result = (|| {
        for e in edits.iter() {
            window.write(e.addr, &[0xcc])?;
        }
        serialise()?;
        step_hook(BatchStep::Int3Written);
        for e in edits.iter() {
            window.write(e.addr + 1, &e.new_bytes()[1..])?;
        }
        serialise()?;
        step_hook(BatchStep::TailWritten);
        for e in edits.iter() {
            window.write(e.addr, &e.new_bytes()[..1])?;
        }
        serialise()
    })();
    if result.is_err() {
        // Only the /proc/self/mem path can fail mid-way. Put the old bytes
        // back in the same order (int3 stays until the tail is restored).
        for e in edits.iter() {
            let _ = window.write(e.addr, &[0xcc]);
        }
        let _ = serialise();
        for e in edits.iter() {
            let _ = window.write(e.addr + 1, &e.old()[1..]);
        }
        let _ = serialise();
        for e in edits.iter() {
            let _ = window.write(e.addr, &e.old()[..1]);
        }
        let _ = serialise();
    }
    window.close();
    retire();
    result?;
    BATCHES.fetch_add(1, Ordering::Relaxed);
    SITES_WRITTEN.fetch_add(edits.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// Points inside a batch where a test may act (run calls through the
/// sites while they hold `int3`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchStep {
    /// Byte 0 of every site is `0xCC`; the rest is old.
    Int3Written,
    /// Byte 0 is `0xCC`; the rest is new.
    TailWritten,
}

static STEP_HOOK: AtomicUsize = AtomicUsize::new(0);

/// Test support: `hook` runs at each [`BatchStep`] of every batch, with the
/// text lock held. Not for production use.
#[doc(hidden)]
pub fn set_step_hook(hook: Option<fn(BatchStep)>) {
    STEP_HOOK.store(hook.map_or(0, |h| h as usize), Ordering::SeqCst);
}

fn step_hook(step: BatchStep) {
    // SeqCst: a test's hook, set before the batch (no ordering needed
    // beyond seeing it; the strongest costs nothing here).
    let h = STEP_HOOK.load(Ordering::SeqCst);
    if h != 0 {
        // SAFETY: only `set_step_hook` stores non-zero values, from a
        // `fn(BatchStep)`.
        let f: fn(BatchStep) = unsafe { std::mem::transmute::<usize, fn(BatchStep)>(h) };
        f(step);
    }
}

/// Writes `edits` with plain stores, for when no thread can execute them:
/// the process is single-threaded, or every other thread is parked by
/// [`stop::stop_world`] (then `window` must have been built and opened
/// beforehand, since nothing may allocate while threads are parked).
/// The caller holds the text lock and has verified the old bytes.
pub(crate) fn write_quiescent(window: &TextWindow, edits: &[Edit]) -> Result<(), PatchError> {
    for e in edits {
        window.write(e.addr, e.new_bytes())?;
    }
    Ok(())
}

/// Writes `edits` to code no thread can reach yet (it is published later,
/// by a release store the executing thread's path reads): verified,
/// written by plain stores under the text lock, then every core
/// serialised — unless a holder holds every other thread meanwhile (they
/// resume through the kernel, as after [`apply`]'s held batch, and a
/// process joined late does not wait for membarrier's registration). On
/// `Err` nothing was written if the old bytes did not match; a write
/// error may leave some edits made.
pub(crate) fn apply_unreached(edits: &[Edit]) -> Result<(), PatchError> {
    if edits.is_empty() {
        return Ok(());
    }
    init();
    let _text = text_lock();
    verify(edits)?;
    let window = TextWindow::open_for(edits.iter().map(|e| (e.addr, e.len as usize)))?;
    let held = hold::exists() && hold::ask(Hold::Begin);
    let written = write_quiescent(&window, edits);
    window.close();
    if held {
        hold::ask(Hold::End);
        return written;
    }
    written?;
    serialise()
}

/// Checks that every site holds its expected old bytes.
pub(crate) fn verify(edits: &[Edit]) -> Result<(), PatchError> {
    for e in edits {
        // SAFETY: sites lie in mapped, readable text of a loaded object
        // (the caller discovered them there); reading races only with our
        // own writes, which the text lock excludes.
        let found = unsafe { std::slice::from_raw_parts(e.addr as *const u8, e.len as usize) };
        if found != e.old() {
            return Err(PatchError::Mismatch {
                addr: e.addr,
                expected: e.old().to_vec(),
                found: found.to_vec(),
            });
        }
    }
    Ok(())
}

fn retire() {
    let old = ACTIVE.swap(std::ptr::null_mut(), Ordering::SeqCst);
    // A handler that incremented READERS before the swap may still use
    // `old`; one that increments after it sees null.
    while READERS.load(Ordering::SeqCst) != 0 {
        std::hint::spin_loop();
    }
    if !old.is_null() {
        // SAFETY: `old` came from Box::into_raw in `apply`, and no handler
        // holds it any more (READERS drained after the swap).
        drop(unsafe { Box::from_raw(old) });
    }
}

/// The text pages touched by a batch, made writable once for the batch.
pub(crate) struct TextWindow {
    mode: WriteMode,
    /// (start, end, original protection), page aligned, merged.
    ranges: Vec<(usize, usize, i32)>,
}

impl TextWindow {
    /// Plans the window for the given (address, length) spans. Allocates;
    /// `open`, `write` and `close` do not.
    pub(crate) fn new(spans: impl Iterator<Item = (usize, usize)>) -> Result<Self, PatchError> {
        let mode = write_mode();
        let mut ranges = Vec::new();
        if mode == WriteMode::Mprotect {
            let maps = sys::read_maps()
                .map_err(|e| PatchError::Io(format!("/proc/thread-self/maps: {e}")))?;
            let page = sys::page_size();
            // Spans come sorted by address: most fall in the last range.
            for (addr, len) in spans {
                let mut p = addr & !(page - 1);
                while p < addr + len {
                    if !matches!(ranges.last(), Some(&(start, end, _)) if start <= p && p < end) {
                        let i = maps.partition_point(|m| m.end <= p);
                        let Some(m) = maps.get(i).filter(|m| m.start <= p) else {
                            return Err(PatchError::Io(format!("site {addr:#x} is not mapped")));
                        };
                        match ranges.last_mut() {
                            Some((_, end, prot)) if *end == p && *prot == m.prot => *end = p + page,
                            _ => ranges.push((p, p + page, m.prot)),
                        }
                    }
                    p += page;
                }
            }
        }
        Ok(TextWindow { mode, ranges })
    }

    /// Plans and opens a window, falling back to `/proc/self/mem` when the
    /// system refuses writable text and no mode was chosen explicitly.
    pub(crate) fn open_for(
        spans: impl Iterator<Item = (usize, usize)> + Clone,
    ) -> Result<Self, PatchError> {
        Self::open_planned(|| TextWindow::new(spans.clone()))
    }

    /// [`TextWindow::open_for`] the bytes `start..end` of our own code,
    /// whose protection is `prot`: planned without reading the process's
    /// mappings (an arena's code is written a dozen times at start).
    pub(crate) fn open_known(start: usize, end: usize, prot: i32) -> Result<Self, PatchError> {
        Self::open_planned(|| {
            let page = sys::page_size();
            let ranges = vec![(start & !(page - 1), end.next_multiple_of(page), prot)];
            let mode = write_mode();
            Ok(TextWindow {
                mode,
                ranges: if mode == WriteMode::Mprotect {
                    ranges
                } else {
                    Vec::new()
                },
            })
        })
    }

    fn open_planned(plan: impl Fn() -> Result<Self, PatchError>) -> Result<Self, PatchError> {
        let w = plan()?;
        match w.open() {
            Ok(()) => Ok(w),
            Err(_) if WRITE_MODE.load(Ordering::Relaxed) == 0 => {
                set_write_mode(WriteMode::ProcMem);
                let w = plan()?;
                w.open()?;
                Ok(w)
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn open(&self) -> Result<(), PatchError> {
        for (i, &(start, end, prot)) in self.ranges.iter().enumerate() {
            // SAFETY: the range covers mapped text pages; adding PROT_WRITE
            // keeps them readable and executable for running threads.
            let r =
                unsafe { libc::mprotect(start as *mut _, end - start, prot | libc::PROT_WRITE) };
            if r != 0 {
                let e = io::Error::last_os_error();
                for &(s, e2, p) in &self.ranges[..i] {
                    // SAFETY: restores the protection read from maps.
                    unsafe { libc::mprotect(s as *mut _, e2 - s, p) };
                }
                return Err(PatchError::Io(format!(
                    "mprotect {start:#x}..{end:#x}: {e} (try SHADOWGRAPH_TEXT_WRITE=procmem)"
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn write(&self, addr: usize, bytes: &[u8]) -> Result<(), PatchError> {
        match self.mode {
            WriteMode::Mprotect => {
                for (i, &b) in bytes.iter().enumerate() {
                    // SAFETY: `open` made the page writable; each store is a
                    // single byte, so a concurrent fetch sees old or new.
                    unsafe { std::ptr::write_volatile((addr + i) as *mut u8, b) };
                }
                Ok(())
            }
            WriteMode::ProcMem => procmem_write(addr, bytes),
        }
    }

    pub(crate) fn close(&self) {
        for &(start, end, prot) in &self.ranges {
            // SAFETY: restores the exact protection read from maps.
            unsafe { libc::mprotect(start as *mut _, end - start, prot) };
        }
    }
}

static PROC_MEM_FD: AtomicUsize = AtomicUsize::new(usize::MAX);

fn procmem_write(addr: usize, bytes: &[u8]) -> Result<(), PatchError> {
    let mut fd = PROC_MEM_FD.load(Ordering::Relaxed);
    if fd == usize::MAX {
        // SAFETY: valid NUL-terminated path.
        let f = unsafe {
            libc::open(
                c"/proc/thread-self/mem".as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC,
            )
        };
        if f < 0 {
            return Err(PatchError::Io(format!(
                "open /proc/thread-self/mem: {}",
                io::Error::last_os_error()
            )));
        }
        fd = f as usize;
        // AcqRel: one fd for everyone; a racer that lost closes its own
        // and uses the winner's (Acquire).
        if let Err(other) =
            PROC_MEM_FD.compare_exchange(usize::MAX, fd, Ordering::AcqRel, Ordering::Relaxed)
        {
            // SAFETY: we opened f and lost the race; close ours.
            unsafe { libc::close(f) };
            fd = other;
        }
    }
    // SAFETY: bytes is a valid buffer; the kernel writes through the page
    // tables with FOLL_FORCE, so text stays read-only.
    let n = unsafe {
        libc::pwrite(
            fd as i32,
            bytes.as_ptr().cast(),
            bytes.len(),
            addr as libc::off_t,
        )
    };
    if n == bytes.len() as isize {
        Ok(())
    } else {
        Err(PatchError::Io(format!(
            "pwrite /proc/thread-self/mem at {addr:#x}: {}",
            io::Error::last_os_error()
        )))
    }
}

pub use trap::{
    handler_address as sigtrap_handler_address, handler_intact as sigtrap_handler_intact,
    installed as sigtrap_installed, previous as previous_sigtrap_action,
    set_previous as set_previous_sigtrap_action,
};
