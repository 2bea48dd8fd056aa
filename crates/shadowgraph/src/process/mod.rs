//! Sites of the objects loaded in this process, and their normalisation to
//! the one patchable form, NOP5 (design §2.1, §2.5); functions without a
//! patchable entry are given one at their prologue ([`prologue`]).

pub mod prologue;

use crate::elf::{self, ElfError, FoundSite};
use crate::patch::{self, Edit, PatchError, TextWindow};
use crate::site::{classify, SiteKind, NOP5, SLED};
use crate::stop::{self, StackMap, StopBuffers};
use crate::sys;
use std::ffi::CStr;
use std::fmt;
use std::path::{Path, PathBuf};

/// A patchable entry of a loaded object, at its run-time address.
#[derive(Clone, Debug)]
pub struct CallSite {
    /// The site's run-time address.
    pub addr: usize,
    /// The function's name in the simple demangled form (`elf::demangle`).
    pub function: String,
    /// Its symbol as the object names it.
    pub symbol: String,
    /// The form the compiler produced.
    pub kind: SiteKind,
    /// `None` while the site can be patched; otherwise why it is DISABLED.
    pub disabled: Option<String>,
    /// For a library call (crate libcall): the object that defines the
    /// function called, which patterns' `@LIB` names.
    pub library: Option<PathBuf>,
}

impl CallSite {
    /// Whether it can be patched.
    pub fn usable(&self) -> bool {
        self.disabled.is_none()
    }
}

/// A loaded object with its sites.
#[derive(Clone, Debug)]
pub struct Module {
    /// The object's file.
    pub path: PathBuf,
    /// Load bias: run-time address = link-time address + bias.
    pub bias: usize,
    /// Sorted by address.
    pub sites: Vec<CallSite>,
}

impl Module {
    /// Smallest range holding every usable site.
    pub fn site_range(&self) -> Option<(usize, usize)> {
        let mut it = self.sites.iter().filter(|s| s.usable());
        let first = it.next()?.addr;
        let last = self.sites.iter().rev().find(|s| s.usable())?.addr;
        Some((first, last + 8))
    }

    /// Its sites that can be patched.
    pub fn usable(&self) -> impl Iterator<Item = &CallSite> {
        self.sites.iter().filter(|s| s.usable())
    }

    /// The first site of function `function`, by name.
    pub fn by_name(&self, function: &str) -> Option<&CallSite> {
        self.sites.iter().find(|s| s.function == function)
    }
}

/// Loaded objects: (path, bias). The main program is `/proc/self/exe`'s
/// target; an object loaded by a relative name (`dlopen("./libx.so")`,
/// a relative `LD_LIBRARY_PATH`) is named by the file its first segment
/// is mapped from (`/proc/self/maps`), not by the name, which the working
/// directory may no longer resolve.
pub fn loaded_objects() -> Vec<(PathBuf, usize)> {
    // (name, bias, address of its first loaded segment)
    type Seen = Vec<(PathBuf, usize, usize)>;
    extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info (its program headers
        // included) and our Vec pointer.
        unsafe {
            let out = &mut *(data as *mut Seen);
            let name = if (*info).dlpi_name.is_null() {
                ""
            } else {
                CStr::from_ptr((*info).dlpi_name).to_str().unwrap_or("")
            };
            let path = if name.is_empty() && out.is_empty() {
                std::fs::read_link("/proc/thread-self/exe").unwrap_or_default()
            } else {
                PathBuf::from(name)
            };
            let bias = (*info).dlpi_addr as usize;
            let phdrs = (0..(*info).dlpi_phnum as usize).map(|i| &*(*info).dlpi_phdr.add(i));
            let first = phdrs
                .filter(|p| p.p_type == libc::PT_LOAD)
                .map(|p| bias.wrapping_add(p.p_vaddr as usize))
                .next()
                .unwrap_or(0);
            out.push((path, bias, first));
        }
        0
    }
    let mut seen: Seen = Vec::new();
    // SAFETY: the callback matches the expected signature and only touches `seen`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut seen as *mut _ as *mut libc::c_void) };
    let maps = if seen
        .iter()
        .any(|(p, _, _)| !p.as_os_str().is_empty() && !p.is_absolute())
    {
        crate::sys::read_maps().unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut out: Vec<(PathBuf, usize)> = seen
        .into_iter()
        .map(|(p, bias, first)| {
            if p.as_os_str().is_empty() || p.is_absolute() {
                return (p, bias);
            }
            let file = maps
                .iter()
                .find(|m| m.start <= first && first < m.end && m.path.starts_with('/'))
                .map_or(p, |m| PathBuf::from(&m.path));
            (file, bias)
        })
        .collect();
    // The vDSO and other objects without a file on disk have no sites to read.
    out.retain(|(p, _)| p.is_absolute() && p.exists());
    out
}

/// Discovers the sites of every loaded object whose path satisfies `want`.
/// Objects without any listed site are skipped; unreadable ones are errors.
pub fn discover(want: impl Fn(&Path) -> bool) -> Result<Vec<Module>, ElfError> {
    discover_with_hooks(want).map(|(m, _)| m)
}

/// Loaded objects: (path, bias).
pub type Objects = Vec<(PathBuf, usize)>;

/// [`discover`], and the objects without sites built with plain `-pg`,
/// whose functions are patched at their prologue ([`prologue`]).
pub fn discover_with_hooks(
    want: impl Fn(&Path) -> bool,
) -> Result<(Vec<Module>, Objects), ElfError> {
    let mut modules = Vec::new();
    let mut pg = Vec::new();
    for (path, bias) in loaded_objects() {
        if !want(&path) {
            continue;
        }
        let found = elf::scan_file(&path)?;
        if found.built_with_hooks {
            let bias = if found.position_independent { bias } else { 0 };
            pg.push((path, bias));
            continue;
        }
        if found.sites.is_empty() {
            continue;
        }
        let bias = if found.position_independent { bias } else { 0 };
        modules.push(Module {
            path,
            bias,
            sites: found.sites.iter().map(|s| in_memory(s, bias)).collect(),
        });
    }
    Ok((modules, pg))
}

/// The run-time view of a found site: its bytes are re-read from memory, so
/// a site changed since the file was written (or already converted) is seen
/// as it is.
fn in_memory(s: &FoundSite, bias: usize) -> CallSite {
    let addr = s.addr as usize + bias;
    let (kind, disabled) = match &s.kind {
        Err(why) => (SiteKind::Nop5, Some(why.clone())),
        Ok(file_kind) => {
            // SAFETY: the site lies in the text of a loaded object (the file
            // says so and the address is biased by the loader's own bias).
            let mem =
                unsafe { std::slice::from_raw_parts(addr as *const u8, file_kind.byte_len()) };
            match classify(s.source, mem) {
                Ok(_) if mem[..5] == NOP5 => (*file_kind, None),
                Ok(k) if k == *file_kind => (*file_kind, None),
                Ok(k) => (
                    *file_kind,
                    Some(format!("holds a {k} though the file has a {file_kind}")),
                ),
                Err(why) => (*file_kind, Some(why)),
            }
        }
    };
    CallSite {
        addr,
        function: s.function.clone(),
        symbol: s.symbol.clone(),
        kind,
        disabled,
        library: None,
    }
}

/// Result of [`normalize`].
#[derive(Clone, Debug, Default)]
pub struct Normalized {
    /// Sites rewritten to NOP5.
    pub converted: usize,
    /// Sleds left alone because a thread might resume inside them.
    pub deferred: usize,
    /// Parked threads moved from inside a sled to its end.
    pub moved: usize,
    /// Whether other threads had to be stopped.
    pub stopped_world: bool,
}

/// Why normalisation failed (nothing was written).
#[derive(Debug)]
pub enum NormalizeError {
    /// The sites could not be rewritten.
    Patch(PatchError),
    /// The other threads could not be stopped.
    Stop(stop::StopError),
}

impl fmt::Display for NormalizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NormalizeError::Patch(e) => write!(f, "{e}"),
            NormalizeError::Stop(e) => write!(f, "cannot stop threads to convert sleds: {e}"),
        }
    }
}

impl std::error::Error for NormalizeError {}

impl From<PatchError> for NormalizeError {
    fn from(e: PatchError) -> Self {
        NormalizeError::Patch(e)
    }
}

/// Rewrites every usable site to NOP5, the only form patched afterwards.
///
/// * Single-instruction forms (a non-canonical 5-byte nop, `call __fentry__`
///   and its 6-byte GOT/addr32 variants) have instruction boundaries the
///   NOP5 form keeps, so they go through the live int3 batch.
/// * Sleds (five 1-byte nops) do not: while other threads exist they are
///   stopped; a thread paused inside a sled is moved past it, and a sled that
///   a conservative scan of the parked threads' stacks finds referenced
///   (an interrupted context could resume inside) is deferred: DISABLED.
pub fn normalize(modules: &mut [Module]) -> Result<Normalized, NormalizeError> {
    let mut live: Vec<Edit> = Vec::new();
    let mut sleds: Vec<usize> = Vec::new();
    for s in modules
        .iter()
        .flat_map(|m| m.sites.iter())
        .filter(|s| s.usable())
    {
        // SAFETY: usable sites lie in loaded text.
        let mem = unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.kind.byte_len()) };
        if mem[..5] == NOP5 {
            continue; // already canonical (mcount-nop, or converted before)
        }
        match s.kind {
            SiteKind::Sled => sleds.push(s.addr),
            _ => live.push(Edit::new(s.addr, mem, s.kind.converted())),
        }
    }
    let mut out = Normalized::default();
    patch::apply(&mut live)?;
    out.converted += live.len();
    if !sleds.is_empty() {
        let deferred = convert_sleds(&sleds, &mut out)?;
        for m in modules.iter_mut() {
            for s in m.sites.iter_mut() {
                if deferred.binary_search(&s.addr).is_ok() {
                    s.disabled =
                        Some("sled deferred: a stopped thread may resume inside it".into());
                }
            }
        }
    }
    Ok(out)
}

/// The other threads' saved contexts (pc, sp) while a tracer outside the
/// process holds them stopped (ptrace), set by [`with_world_stopped`].
static STOPPED_OUTSIDE: std::sync::Mutex<Option<Vec<(usize, usize)>>> = std::sync::Mutex::new(None);

/// Runs `f` knowing that every other thread of the process is held
/// stopped from outside (by `shadowgraph record -p`, with ptrace) at the
/// contexts `stopped` (pc, sp each). Sleds are then converted by plain
/// writes, with no signal to park the threads (a signal would end a
/// `nanosleep` or an `epoll_wait` under way with `EINTR`); a sled a
/// stopped pc is inside, or that a word of a stopped thread's stack
/// points into, is deferred.
pub fn with_world_stopped<R>(stopped: &[(usize, usize)], f: impl FnOnce() -> R) -> R {
    *STOPPED_OUTSIDE.lock().unwrap_or_else(|e| e.into_inner()) = Some(stopped.to_vec());
    WORLD_HELD.set(true);
    let r = f();
    WORLD_HELD.set(false);
    *STOPPED_OUTSIDE.lock().unwrap_or_else(|e| e.into_inner()) = None;
    r
}

/// Whether this thread runs inside [`with_world_stopped`]: every other
/// thread that runs the program's code is held off its CPU from outside.
pub fn world_stopped_outside() -> bool {
    WORLD_HELD.get()
}

thread_local! {
    /// Set on the thread that runs [`with_world_stopped`]'s function.
    static WORLD_HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Converts sleds to NOP5; returns the deferred ones (sorted).
fn convert_sleds(sleds: &[usize], out: &mut Normalized) -> Result<Vec<usize>, NormalizeError> {
    let edits: Vec<Edit> = sleds.iter().map(|&a| Edit::new(a, &SLED, &NOP5)).collect();
    let deferred = write_stopped(&edits, &|i, _| Some(sleds[i] + 5), out)?;
    Ok(deferred_sleds(sleds, &deferred, out))
}

/// Writes `edits` (sorted by address; each a 5-byte edit whose old and
/// new instructions do not share their boundaries, so that no thread may
/// run through it meanwhile) with every other thread stopped, or none
/// running. A thread stopped on bytes 1–4 of edit `i` at `pc` goes on at
/// `moved(i, pc)` (`None`: the edit is deferred); an edit whose bytes 1–4
/// a word of a stopped thread's stack points into (an interrupted context
/// could resume there) is deferred. Returns which edits were deferred,
/// counting in `out` those written and the threads moved.
pub(crate) fn write_stopped(
    edits: &[Edit],
    moved: &dyn Fn(usize, usize) -> Option<usize>,
    out: &mut Normalized,
) -> Result<Vec<bool>, NormalizeError> {
    // Serialising cores by membarrier where threads run (signals would
    // not do for threads held from outside: those need none).
    patch::init();
    let _text = patch::text_lock();
    patch::verify(edits)?;
    let window = TextWindow::open_for(edits.iter().map(|e| (e.addr, 5)))?;
    let inside = |word: usize| -> Option<usize> {
        // Index of the edit whose bytes 1–4 hold `word`.
        let i = edits.partition_point(|e| e.addr < word);
        (i > 0 && word - edits[i - 1].addr < 5).then(|| i - 1)
    };
    let outside = STOPPED_OUTSIDE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let stacks = || match StackMap::read() {
        Ok(s) => Ok(s),
        Err(e) => {
            window.close();
            Err(PatchError::Io(format!("/proc/thread-self/maps: {e}")))
        }
    };
    // Held from outside: a thread is not ours to move; its edit waits.
    // Nothing to serialise afterwards: the held threads are off their CPUs
    // and resume through the kernel (see patch::apply's held batch).
    let write_held = |contexts: &[(usize, usize)], stacks: &StackMap, out: &mut Normalized| {
        let mut deferred = vec![false; edits.len()];
        for &(pc, sp) in contexts {
            if let Some(i) = inside(pc) {
                deferred[i] = true;
            }
            stacks.scan_from(sp, |w| {
                if let Some(i) = inside(w) {
                    deferred[i] = true;
                }
            });
        }
        for (e, &d) in edits.iter().zip(deferred.iter()) {
            if !d && patch::write_quiescent(&window, std::slice::from_ref(e)).is_ok() {
                out.converted += 1;
            }
        }
        deferred
    };
    if let Some(contexts) = outside {
        let deferred = write_held(&contexts, &stacks()?, out);
        window.close();
        return Ok(deferred);
    }
    let mut threads = Vec::with_capacity(2);
    let single = sys::list_threads(&mut threads).is_ok() && threads.len() == 1;
    if single {
        // No other thread exists, and only this one could create one.
        let r = patch::write_quiescent(&window, edits);
        window.close();
        r?;
        out.converted += edits.len();
        return Ok(vec![false; edits.len()]);
    }
    if crate::hold::exists() {
        // A process joined late (`record -p`: its threads may block every
        // signal, and none of ours may reach them): they are held from
        // outside while the edits are made, their contexts read where the
        // kernel shows them — or, if they cannot be, the edits wait.
        // Everything is allocated before the hold.
        let stacks = stacks()?;
        let mut tids = Vec::with_capacity(stop::MAX_THREADS);
        let mut contexts = Vec::with_capacity(stop::MAX_THREADS);
        let me = sys::gettid();
        let held = crate::hold::ask(crate::hold::Hold::Begin);
        let deferred = if held && sys::list_threads(&mut tids).is_ok() {
            for &t in tids.iter().filter(|&&t| t != me) {
                // (A thread still running is one of the agent's own, which
                // the holder leaves: it runs none of the program's code.)
                if let stop::Seen::Blocked { pc, sp } | stop::Seen::Stopped { pc, sp } =
                    stop::seen(t)
                {
                    contexts.push((pc, sp));
                }
            }
            write_held(&contexts, &stacks, out)
        } else {
            vec![true; edits.len()]
        };
        window.close();
        if held {
            crate::hold::ask(crate::hold::Hold::End);
        }
        return Ok(deferred);
    }

    out.stopped_world = true;
    let stacks = stacks()?;
    let mut deferred = vec![false; edits.len()];
    let mut bufs = StopBuffers::default();
    let mut moves = 0usize;
    let stopped = stop::stop_world(&mut bufs, |parked| {
        // Nothing below allocates: every thread but this one is parked.
        let me = 0u8;
        stacks.scan_from(std::ptr::addr_of!(me) as usize, |w| {
            if let Some(i) = inside(w) {
                deferred[i] = true;
            }
        });
        for p in parked.iter_mut().filter(|p| p.pc != 0) {
            if let Some(i) = inside(p.pc) {
                match moved(i, p.pc) {
                    Some(to) => {
                        p.new_pc = Some(to);
                        moves += 1;
                    }
                    None => deferred[i] = true,
                }
            }
            // The thread's own stack from where it was stopped (as
            // stop::wait_code_quiescent scans it): not the parking
            // handler's frame, whose saved PC is p.pc (moved above) and
            // whose xsave area keeps stale words the kernel did not write,
            // which would defer an edit for nothing.
            stacks.scan_from(p.sp, |w| {
                if let Some(i) = inside(w) {
                    deferred[i] = true;
                }
            });
        }
        let mut n = 0;
        for (e, &d) in edits.iter().zip(deferred.iter()) {
            if !d {
                // Plain stores into pages opened before the stop.
                if patch::write_quiescent(&window, std::slice::from_ref(e)).is_ok() {
                    n += 1;
                }
            }
        }
        n
    });
    window.close();
    let written = stopped.map_err(NormalizeError::Stop)?;
    // Threads resumed through sigreturn (serialising); other cores that
    // never stopped do not exist. Serialise anyway for the coordinator's peers.
    patch::serialise()?;
    out.converted += written;
    out.moved += moves;
    Ok(deferred)
}

/// The sleds `deferred` marks, counted in `out`.
fn deferred_sleds(sleds: &[usize], deferred: &[bool], out: &mut Normalized) -> Vec<usize> {
    let d: Vec<usize> = sleds
        .iter()
        .zip(deferred)
        .filter(|(_, &d)| d)
        .map(|(&s, _)| s)
        .collect();
    out.deferred += d.len();
    d
}
