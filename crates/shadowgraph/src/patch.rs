//! Live patching of code that other threads are executing (SPEC §2.2–2.3).
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

use crate::site::{decode_call, decode_jmp, encode_call, hex, NOP5};
use crate::{stop, sys};
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

/// One site rewrite: `old` must be in memory, `new` replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edit {
    pub addr: usize,
    len: u8,
    old: [u8; 8],
    new: [u8; 8],
}

impl Edit {
    /// Replace `old` by `new` (same length, 1..=8 bytes). Only for pairs of
    /// instructions that may be swapped live (see the module comment).
    pub fn new(addr: usize, old: &[u8], new: &[u8]) -> Edit {
        assert!(old.len() == new.len() && (1..=8).contains(&old.len()));
        let mut e = Edit {
            addr,
            len: old.len() as u8,
            old: [0; 8],
            new: [0; 8],
        };
        e.old[..old.len()].copy_from_slice(old);
        e.new[..new.len()].copy_from_slice(new);
        e
    }

    /// NOP5 → `call target`; `None` if `target` is out of `rel32` reach.
    pub fn enable(addr: usize, target: usize) -> Option<Edit> {
        Some(Edit::new(addr, &NOP5, &encode_call(addr, target)?))
    }

    /// `call target` → NOP5.
    pub fn disable(addr: usize, target: usize) -> Option<Edit> {
        Some(Edit::new(addr, &encode_call(addr, target)?, &NOP5))
    }

    /// `call from` → `call to`.
    pub fn retarget(addr: usize, from: usize, to: usize) -> Option<Edit> {
        Some(Edit::new(
            addr,
            &encode_call(addr, from)?,
            &encode_call(addr, to)?,
        ))
    }

    pub fn old(&self) -> &[u8] {
        &self.old[..self.len as usize]
    }

    pub fn new_bytes(&self) -> &[u8] {
        &self.new[..self.len as usize]
    }

    /// What a thread trapping on byte 0 must do instead of the new bytes.
    fn emulation(&self) -> Emulation {
        if self.len == 5 {
            if let Some(target) = decode_call(self.addr, self.new_bytes()) {
                return Emulation::Call {
                    target,
                    ret: self.addr + 5,
                };
            }
            if let Some(target) = decode_jmp(self.addr, self.new_bytes()) {
                return Emulation::Jump(target);
            }
        }
        // Every other new form is a nop over the whole span.
        Emulation::Resume(self.addr + self.len as usize)
    }
}

/// Why a batch was refused. Nothing was written in any case.
#[derive(Debug)]
pub enum PatchError {
    /// A site did not hold the expected bytes.
    Mismatch {
        addr: usize,
        expected: Vec<u8>,
        found: Vec<u8>,
    },
    /// Two edits of the batch overlap.
    Overlap(usize),
    /// The text could not be made writable or written.
    Io(String),
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatchError::Mismatch {
                addr,
                expected,
                found,
            } => write!(
                f,
                "site {addr:#x} holds {} instead of {}: batch refused, nothing written",
                hex(found, 8),
                hex(expected, 8)
            ),
            PatchError::Overlap(a) => write!(f, "two edits overlap at {a:#x}"),
            PatchError::Io(e) => write!(f, "cannot write code: {e}"),
        }
    }
}

impl std::error::Error for PatchError {}

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

pub fn write_mode() -> WriteMode {
    match WRITE_MODE.load(Ordering::Relaxed) {
        2 => WriteMode::ProcMem,
        _ => WriteMode::Mprotect,
    }
}

/// Counters of the patching engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct PatchStats {
    pub batches: u64,
    pub sites_written: u64,
    /// Traps on a site mid-batch, answered by emulating the new instruction.
    pub traps_emulated: u64,
    /// Traps delivered after their batch ended: the thread re-executes.
    pub traps_late: u64,
    /// Traps that were not ours, handed to the previous handler.
    pub traps_chained: u64,
}

static BATCHES: AtomicU64 = AtomicU64::new(0);
static SITES_WRITTEN: AtomicU64 = AtomicU64::new(0);
static TRAPS_EMULATED: AtomicU64 = AtomicU64::new(0);
static TRAPS_LATE: AtomicU64 = AtomicU64::new(0);
static TRAPS_CHAINED: AtomicU64 = AtomicU64::new(0);

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
static MEMBARRIER_OK: AtomicBool = AtomicBool::new(false);

/// Installs the SIGTRAP handler and registers for membarrier. Idempotent;
/// done by the first batch at the latest. Call again after `fork` in the
/// child (membarrier registration is per process).
pub fn init() {
    INIT.call_once(|| {
        MEMBARRIER_OK.store(sys::membarrier_register_sync_core(), Ordering::Relaxed);
        trap::install();
    });
}

/// How [`serialise`] reaches every core: `membarrier` (SYNC_CORE) or, where
/// the kernel lacks it, a signal to every thread.
pub fn serialise_method() -> &'static str {
    if MEMBARRIER_OK.load(Ordering::Relaxed) {
        "membarrier(PRIVATE_EXPEDITED_SYNC_CORE)"
    } else {
        "a signal to every thread"
    }
}

/// Re-registers for membarrier in a forked child.
pub fn after_fork_child() {
    MEMBARRIER_OK.store(sys::membarrier_register_sync_core(), Ordering::Relaxed);
}

/// Every core of the process executes a serialising instruction.
pub fn serialise() -> Result<(), PatchError> {
    if MEMBARRIER_OK.load(Ordering::Relaxed) {
        if sys::membarrier_sync_core().is_ok() {
            return Ok(());
        }
        MEMBARRIER_OK.store(false, Ordering::Relaxed);
    }
    stop::ping_all().map_err(|e| PatchError::Io(format!("cannot serialise cores: {e}")))
}

/// What a SIGTRAP on byte 0 of a site in the active batch does.
#[derive(Clone, Copy, Debug)]
enum Emulation {
    /// `call target`: push `ret`, continue at `target`.
    Call { target: usize, ret: usize },
    /// `jmp target` (a site's own stub).
    Jump(usize),
    /// A nop: continue here.
    Resume(usize),
}

/// The batch the SIGTRAP handler consults: the caller's edits, sorted by
/// address, which outlive the batch (`apply` retires it before returning).
struct ActiveBatch {
    edits: *const Edit,
    len: usize,
}

static ACTIVE: AtomicPtr<ActiveBatch> = AtomicPtr::new(std::ptr::null_mut());
/// SIGTRAP handlers that may hold a pointer loaded from `ACTIVE`.
static READERS: AtomicUsize = AtomicUsize::new(0);

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
    known::add(&edits.iter().map(|e| e.addr).collect::<Vec<_>>());

    let window = TextWindow::open_for(edits.iter().map(|e| (e.addr, e.len as usize)))?;

    let batch = Box::new(ActiveBatch {
        edits: edits.as_ptr(),
        len: edits.len(),
    });
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
/// serialised. On `Err` nothing was written if the old bytes did not
/// match; a write error may leave some edits made.
pub(crate) fn apply_unreached(edits: &[Edit]) -> Result<(), PatchError> {
    if edits.is_empty() {
        return Ok(());
    }
    init();
    let _text = text_lock();
    verify(edits)?;
    let window = TextWindow::open_for(edits.iter().map(|e| (e.addr, e.len as usize)))?;
    let written = write_quiescent(&window, edits);
    window.close();
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

/// Addresses of every site ever written, so that a trap delivered after its
/// batch ended is still recognised as ours. Append-only: chunks are never
/// freed, so the signal handler can read them without locks.
mod known {
    use std::sync::atomic::{AtomicPtr, Ordering};

    struct Chunk {
        sorted: Box<[usize]>,
        next: *const Chunk,
    }

    static HEAD: AtomicPtr<Chunk> = AtomicPtr::new(std::ptr::null_mut());

    /// Async-signal-safe.
    pub(super) fn contains(addr: usize) -> bool {
        let mut p = HEAD.load(Ordering::Acquire) as *const Chunk;
        while !p.is_null() {
            // SAFETY: chunks are leaked, immutable after publication.
            let c = unsafe { &*p };
            if c.sorted.binary_search(&addr).is_ok() {
                return true;
            }
            p = c.next;
        }
        false
    }

    /// Called under the text lock (single writer), with `sorted` in
    /// ascending order: one merge walk per chunk instead of a search per
    /// address.
    pub(super) fn add(sorted: &[usize]) {
        let mut known = vec![false; sorted.len()];
        let mut p = HEAD.load(Ordering::Acquire) as *const Chunk;
        while !p.is_null() {
            // SAFETY: chunks are leaked, immutable after publication.
            let c = unsafe { &*p };
            let mut j = 0;
            for (i, &a) in sorted.iter().enumerate() {
                while j < c.sorted.len() && c.sorted[j] < a {
                    j += 1;
                }
                if j < c.sorted.len() && c.sorted[j] == a {
                    known[i] = true;
                }
            }
            p = c.next;
        }
        let new: Vec<usize> = sorted
            .iter()
            .zip(&known)
            .filter(|(_, &k)| !k)
            .map(|(&a, _)| a)
            .collect();
        if new.is_empty() {
            return;
        }
        let chunk = Box::new(Chunk {
            sorted: new.into_boxed_slice(),
            next: HEAD.load(Ordering::Acquire),
        });
        HEAD.store(Box::into_raw(chunk), Ordering::Release);
    }
}

/// The SIGTRAP handler: emulates a site's new instruction for a thread that
/// hit the temporary `int3`, and hands every other trap to the handler the
/// program (or a debugger stub) installed.
mod trap {
    use super::*;
    use std::cell::UnsafeCell;

    /// The disposition to chain to. Double-buffered: `set_previous` writes
    /// the slot not in use, then flips `PREV_INDEX` (writers are serialised
    /// by `PREV_LOCK`).
    struct Previous(UnsafeCell<[libc::sigaction; 2]>);
    // SAFETY: written only under PREV_LOCK into the inactive slot; readers
    // copy the active slot.
    unsafe impl Sync for Previous {}

    static PREV: Previous = Previous(UnsafeCell::new(unsafe { std::mem::zeroed() }));
    static PREV_INDEX: AtomicUsize = AtomicUsize::new(0);
    static PREV_LOCK: Mutex<()> = Mutex::new(());

    static INSTALLED: AtomicBool = AtomicBool::new(false);

    /// Whether our SIGTRAP handler has been installed.
    pub fn installed() -> bool {
        INSTALLED.load(Ordering::Acquire)
    }

    /// The address of our SIGTRAP handler, to recognise it.
    pub fn handler_address() -> usize {
        on_sigtrap as *const () as usize
    }

    /// Whether the kernel's SIGTRAP disposition is still our handler (asked
    /// of the kernel itself: a `sigaction` interposer would answer with the
    /// program's own request).
    pub fn handler_intact() -> bool {
        // The kernel's struct sigaction: handler, flags, restorer, mask.
        let mut k = [0usize; 4];
        // SAFETY: rt_sigaction with a null new action only writes the
        // current one into `k`, which is as large as the kernel's struct
        // with its 8-byte mask.
        let r = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                libc::SIGTRAP,
                std::ptr::null::<usize>(),
                k.as_mut_ptr(),
                8usize,
            )
        };
        r == 0 && k[0] == handler_address()
    }

    pub(super) fn install() {
        let _g = PREV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: zeroed sigaction is valid; the handler has the SA_SIGINFO
        // signature; `old` receives the previous disposition, stored in the
        // inactive slot before ours becomes active.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigtrap as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            let slot = 1 - PREV_INDEX.load(Ordering::Relaxed);
            let prev = &mut (*PREV.0.get())[slot];
            libc::sigaction(libc::SIGTRAP, &sa, prev);
            PREV_INDEX.store(slot, Ordering::Release);
        }
        INSTALLED.store(true, Ordering::Release);
    }

    /// Records the disposition a program asked for while ours stays
    /// installed (used by the agent's `sigaction` interposer).
    pub fn set_previous(action: &libc::sigaction) {
        let _g = PREV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let slot = 1 - PREV_INDEX.load(Ordering::Relaxed);
        // SAFETY: the inactive slot is not read by handlers that loaded the
        // index after the last flip; writers are serialised by PREV_LOCK.
        unsafe { (*PREV.0.get())[slot] = *action };
        PREV_INDEX.store(slot, Ordering::Release);
    }

    pub fn previous() -> libc::sigaction {
        // SAFETY: copies the active slot (see `Previous`).
        unsafe { (*PREV.0.get())[PREV_INDEX.load(Ordering::Acquire)] }
    }

    const SI_KERNEL: i32 = 0x80;

    extern "C" fn on_sigtrap(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let uc = ctx as *mut libc::ucontext_t;
        // SAFETY: the kernel passes valid siginfo and ucontext pointers to an
        // SA_SIGINFO handler.
        let (code, pc) = unsafe {
            (
                (*info).si_code,
                (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] as usize,
            )
        };
        // `int3` reports SI_KERNEL with the PC after the 0xCC byte.
        if code == SI_KERNEL && pc > 0 {
            let site = pc - 1;
            READERS.fetch_add(1, Ordering::SeqCst);
            let batch = ACTIVE.load(Ordering::SeqCst);
            let emulation = if batch.is_null() {
                None
            } else {
                // SAFETY: `retire` frees a batch (and `apply` returns, ending
                // the edits' borrow) only after READERS drops to zero
                // following its swap, so both stay valid here.
                let edits = unsafe { std::slice::from_raw_parts((*batch).edits, (*batch).len) };
                edits
                    .binary_search_by_key(&site, |e| e.addr)
                    .ok()
                    .map(|i| edits[i].emulation())
            };
            READERS.fetch_sub(1, Ordering::SeqCst);
            if let Some(em) = emulation {
                // SAFETY: rewriting the interrupted context. For a call, the
                // word below rsp is free: no red zone is live at a function
                // entry, and the signal frame lies below the red zone.
                unsafe {
                    let g = &mut (*uc).uc_mcontext.gregs;
                    match em {
                        Emulation::Call { target, ret } => {
                            let sp = g[libc::REG_RSP as usize] as usize - 8;
                            *(sp as *mut usize) = ret;
                            g[libc::REG_RSP as usize] = sp as i64;
                            g[libc::REG_RIP as usize] = target as i64;
                        }
                        Emulation::Jump(to) | Emulation::Resume(to) => {
                            g[libc::REG_RIP as usize] = to as i64
                        }
                    }
                }
                TRAPS_EMULATED.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // SAFETY: a known site lies in mapped text.
            if known::contains(site) && unsafe { *(site as *const u8) } != 0xcc {
                // The batch finished before the signal arrived: run the
                // instruction that is there now.
                // SAFETY: as above, rewriting the interrupted context.
                unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] = site as i64 };
                TRAPS_LATE.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        TRAPS_CHAINED.fetch_add(1, Ordering::Relaxed);
        chain(sig, info, ctx);
    }

    fn chain(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let prev = previous();
        let h = prev.sa_sigaction;
        if h == libc::SIG_IGN {
            return;
        }
        if h == libc::SIG_DFL {
            // Deliver with the default action (core dump): restore it and
            // re-raise; the signal stays blocked until we return.
            // SAFETY: plain signal-disposition calls, async-signal-safe.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &sa, std::ptr::null_mut());
                let _ = crate::sys::tgkill(crate::sys::gettid(), sig);
            }
            return;
        }
        // SAFETY: `h` is the handler the program installed, with the
        // signature its flags declare.
        unsafe {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(h);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(i32) = std::mem::transmute(h);
                f(sig);
            }
        }
    }
}

pub use trap::{
    handler_address as sigtrap_handler_address, handler_intact as sigtrap_handler_intact,
    installed as sigtrap_installed, previous as previous_sigtrap_action,
    set_previous as set_previous_sigtrap_action,
};
