//! The objects a session traces: those loaded when it starts, chosen by
//! the configuration, and those the program loads and unloads later
//! (`dlopen`, `dlclose`), which join the core or leave it.

use crate::config::{LibCalls, Objects};
use crate::libcall::Body;
use crate::process::{self, Module};
use crate::tracer::recorder;
use crate::{elf, ftrace, libcall};
use shadowgraph_data::pattern::{glob_match, Pattern};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;

/// Objects loaded and unloaded later are followed (graph and record modes).
static FOLLOW: AtomicBool = AtomicBool::new(false);
/// Objects already scanned for sites (with or without any): path, bias.
static SCANNED: Mutex<Vec<(PathBuf, usize)>> = Mutex::new(Vec::new());

/// The object this library's code is in, when it is not the program (the
/// agent, preloaded or loaded from a memfd by `record -p`), by the name
/// the loader lists it under: never traced (it has no sites) nor scanned
/// (a memfd's `/proc/self/fd/N` may be closed).
fn own_object() -> Option<PathBuf> {
    let me = crate::sys::loader_name_of(own_object as *const () as usize)?;
    // (dladdr names the program by its argv[0].)
    let exe = std::fs::canonicalize("/proc/self/exe").ok();
    let program =
        me.as_os_str().is_empty() || (exe.is_some() && std::fs::canonicalize(&me).ok() == exe);
    (!program).then_some(me)
}

/// The `-P` patterns, for the objects loaded later too.
static PATCH: Mutex<Vec<Pattern>> = Mutex::new(Vec::new());

/// The sites of every loaded object `which` selects, and the prologues
/// `patch` asks for (uftrace's `-P`), or a one-line error naming the
/// program when there are none.
pub(crate) fn discover(which: &Objects, patch: &[String]) -> Result<Vec<Module>, String> {
    let patterns = patch
        .iter()
        .map(|p| crate::prologue::parse_pattern(p).map_err(|e| format!("-P: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let me = own_object();
    let exe = std::fs::read_link("/proc/thread-self/exe").unwrap_or_default();
    let wanted = |p: &Path| -> bool {
        if Some(p) == me.as_deref() {
            return false;
        }
        match which {
            _ if p == exe => true,
            Objects::All => true,
            Objects::Program(libs) => {
                let name = p
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                libs.iter().any(|l| !l.is_empty() && name.starts_with(l))
            }
        }
    };
    let (mut modules, pg) = process::discover_with_hooks(wanted).map_err(|e| e.to_string())?;
    select_sites(&patterns, &mut modules, &exe);
    let own = objects_of(&modules);
    modules.extend(patch_hooked(&pg));
    if !patterns.is_empty() {
        let objects: Vec<(PathBuf, usize)> = process::loaded_objects()
            .into_iter()
            .filter(|(p, _)| Some(p.as_path()) != me.as_deref())
            .collect();
        modules.extend(patch_prologues(&patterns, &objects, (&modules, &own), &exe));
        *PATCH.lock().unwrap_or_else(|e| e.into_inner()) = patterns;
    }
    if modules.iter().all(|m| m.usable().next().is_none()) {
        if !patch.is_empty() {
            return Err(format!(
                "{}: -P {} patched no function (`shadowgraph sites -P PAT {}` tells why)",
                exe.display(),
                patch.join(" -P "),
                exe.display()
            ));
        }
        let found = elf::scan_file(&exe).map_err(|e| e.to_string())?;
        if found.built_with_hooks {
            // (Stripped, and its unwind tables do not cover the functions
            // that call the hook: none was found.)
            return Err(format!(
                "{}: built with -pg or -finstrument-functions and stripped of its symbols: no \
                 function calling its hook was found (keep its symbol table, name them with \
                 --with-syms DIR, or build with -pg -mfentry -mrecord-mcount)",
                exe.display()
            ));
        }
        found.require_sites().map_err(|e| e.to_string())?;
        return Err(format!("{}: no usable sites", exe.display()));
    }
    Ok(modules)
}

/// `-P` and `-U` (`patterns`, in order) on objects with sites of their
/// own (patchable entries, fentry calls) that they name (the program by a
/// pattern without `@LIB`, a library by `@LIB`): only the sites of the
/// functions they select are traced, as uftrace's dynamic tracing uses an
/// object's patchable entries where it has them; their other functions'
/// prologues are not patched.
fn select_sites(patterns: &[Pattern], modules: &mut [Module], exe: &Path) {
    if patterns.is_empty() {
        return;
    }
    for m in modules.iter_mut() {
        let program = m.path == exe;
        let path = m.path.to_string_lossy().into_owned();
        let named = patterns
            .iter()
            .any(|p| p.names_module_of(&path) || (program && p.module().is_none()));
        if !named {
            continue;
        }
        let path = m.path.clone();
        m.sites
            .retain(|s| crate::prologue::wanted(patterns, &path, program, &s.function));
    }
}

/// The objects (path, bias) of `modules`.
fn objects_of(modules: &[Module]) -> Vec<(PathBuf, usize)> {
    modules.iter().map(|m| (m.path.clone(), m.bias)).collect()
}

/// The modules of the stubs of every function of `objects` (path, bias),
/// built with plain `-pg`, that calls `mcount`.
fn patch_hooked(objects: &[(PathBuf, usize)]) -> Vec<Module> {
    let mut out = Vec::new();
    for (path, bias) in objects {
        let asked = crate::prologue::Asked::Hooked;
        match process::prologue::patch_object(path, *bias, &[], asked) {
            Ok(p) => out.extend(p.modules),
            Err(e) => crate::say!("shadowgraph: {e}; its functions are not patched"),
        }
    }
    out
}

/// The modules of the stubs of the prologues `patterns` ask for in
/// `objects` (path, bias): the program's, and those of libraries a
/// pattern names; `with_sites` the modules of their patchable entries.
/// An object that cannot be patched is said once and left as it is.
fn patch_prologues(
    patterns: &[Pattern],
    objects: &[(PathBuf, usize)],
    (with_sites, own): (&[Module], &[(PathBuf, usize)]),
    exe: &Path,
) -> Vec<Module> {
    let mut out = Vec::new();
    for (path, bias) in objects {
        let program = path == exe;
        let named = patterns
            .iter()
            .any(|p| p.names_module_of(&path.to_string_lossy()));
        // (An object with sites of its own is traced at those.)
        if (!program && !named) || own.contains(&(path.clone(), *bias)) {
            continue;
        }
        let mut sites: Vec<u64> = with_sites
            .iter()
            .filter(|m| m.path == *path)
            .flat_map(|m| m.sites.iter().map(move |s| (s.addr - m.bias) as u64))
            .collect();
        sites.sort_unstable();
        let named = |sym: &str| crate::prologue::wanted(patterns, path, program, sym);
        let asked = crate::prologue::Asked::Named(&named);
        match process::prologue::patch_object(path, *bias, &sites, asked) {
            Ok(p) => {
                if p.patched + p.refused.len() > 0 {
                    crate::say!(
                        "# -P: {} (`shadowgraph sites -P PAT {}` lists them)",
                        p.summary(path),
                        path.display()
                    );
                }
                out.extend(p.modules)
            }
            Err(e) => crate::say!("shadowgraph: {e}; its functions are not patched"),
        }
    }
    out
}

/// Objects whose PLTs `--nest-libcall` leaves alone, as uftrace's does:
/// the system's base libraries (their calls to each other are the
/// implementation of the calls traced) and the loader.
const BASE_LIBRARIES: [&str; 11] = [
    "libc.so.6",
    "libc-2.*.so",
    "libm.so.6",
    "libm-2.*.so",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libpthread-2.*.so",
    "libdl.so.2",
    "libdl-2.*.so",
    "ld-linux-*.so.*",
    "linux-vdso.so.1",
];

/// Whether `mode` redirects the PLT of the object at `path`, which has
/// sites to trace (`traced`) or not, and is the program itself
/// (`program`) or not. Never the agent's own.
fn makes_library_calls(
    mode: LibCalls,
    path: &Path,
    (traced, program): (bool, bool),
    me: Option<&Path>,
) -> bool {
    let name = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
    match mode {
        LibCalls::Off => false,
        _ if Some(path) == me || path.as_os_str().is_empty() => false,
        LibCalls::Traced => traced && program,
        LibCalls::Nested => {
            traced
                || !BASE_LIBRARIES
                    .iter()
                    .any(|b| glob_match(b.as_bytes(), name.as_bytes()))
        }
    }
}

/// The library calls that `mode` traces, of the objects `modules` (those
/// traced) and, with [`LibCalls::Nested`], of the other loaded objects
/// `others`: a module of thunk sites per object that makes any. An object
/// whose calls cannot be redirected is said once and left as it is.
pub(crate) fn library_calls(
    mode: LibCalls,
    modules: &[Module],
    others: &[(PathBuf, usize)],
) -> Vec<Module> {
    let traced: Vec<(&Path, usize)> = modules.iter().map(|m| (m.path.as_path(), m.bias)).collect();
    calls_of(mode, &traced, others)
}

/// The library calls of the program alone, which has no sites of its own
/// (uftrace's `--force`), and (`Nested`) of the `others`.
pub(crate) fn program_library_calls(mode: LibCalls, others: &[(PathBuf, usize)]) -> Vec<Module> {
    let exe = std::fs::read_link("/proc/thread-self/exe").unwrap_or_default();
    let objects = process::loaded_objects();
    let program: Vec<(&Path, usize)> = objects
        .iter()
        .filter(|(p, _)| *p == exe)
        .map(|(p, b)| (p.as_path(), *b))
        .collect();
    calls_of(mode, &program, others)
}

/// A recording after the first asks for library calls (`mode`) where the
/// first did not (`--no-libcall`), or not for as many objects: those of
/// the traced objects (and, `Nested`, of the others) not traced yet are
/// from now on. The recordings without library calls leave them out
/// (their users' sites exclude `*@PLT`).
pub(crate) fn add_library_calls(mode: LibCalls) -> Result<(), String> {
    // (Their GOTs are read: none may be unloaded meanwhile.)
    let _turn = changing();
    // By path: a library calls' module has a bias of its own (its
    // thunks' arena), not its object's.
    let has_calls = |p: &Path| ftrace::has_module_path(&libcall::module_path(p));
    let traced: Vec<(PathBuf, usize)> = ftrace::objects();
    let others: Vec<(PathBuf, usize)> = match mode {
        LibCalls::Nested => process::loaded_objects(),
        _ => Vec::new(),
    };
    let others: Vec<(PathBuf, usize)> = others.into_iter().filter(|(p, _)| !has_calls(p)).collect();
    let traced: Vec<(&Path, usize)> = traced
        .iter()
        .filter(|(p, _)| !has_calls(p))
        .map(|(p, b)| (p.as_path(), *b))
        .collect();
    let mods = calls_of(mode, &traced, &others);
    if mods.is_empty() {
        return Ok(());
    }
    ftrace::add_modules(mods).map_err(|e| e.to_string())
}

/// [`library_calls`] of the objects `modules` (path, bias) traced.
fn calls_of(
    mode: LibCalls,
    modules: &[(&Path, usize)],
    others: &[(PathBuf, usize)],
) -> Vec<Module> {
    // Relaxed: raised by the first session before any object is followed
    // (by a later one only to trace more); read by the same thread or
    // after the dlopen that made it matter.
    LIBCALLS.fetch_max(mode as u8, Ordering::Relaxed);
    let me = own_object();
    // One per object (an object may have several modules: its patchable
    // entries', its patched prologues').
    let mut traced: Vec<(&Path, usize, bool)> = Vec::new();
    for &(path, bias) in modules {
        if !traced.iter().any(|t| t.1 == bias) {
            traced.push((path, bias, true));
        }
    }
    let rest = others
        .iter()
        // (By bias: two objects never share one, and the paths may be
        // spelt differently.)
        .filter(|(_, b)| !modules.iter().any(|m| m.1 == *b))
        .map(|(p, b)| (p.as_path(), *b, false));
    // (The loader lists the program first.)
    let program = process::loaded_objects().first().map(|o| o.1);
    let mut out = Vec::new();
    // The returns of `setjmp`, `getcontext` and `vfork` are fgraph's to
    // look after.
    libcall::set_body(Body::ReturnsTwice, crate::fgraph::returns_twice_body());
    libcall::set_body(Body::FinishedAtOnce, crate::fgraph::finished_at_once_body());
    libcall::set_body(Body::Vfork, crate::fgraph::vfork_body());
    for (path, bias, has_sites) in traced.into_iter().chain(rest) {
        let is_program = Some(bias) == program;
        if !makes_library_calls(mode, path, (has_sites, is_program), me.as_deref()) {
            continue;
        }
        match libcall::redirect(path, bias) {
            Ok(Some(calls)) => {
                let mut r = REDIRECTED.lock().unwrap_or_else(|e| e.into_inner());
                if !r.1 {
                    // No session records now: they wait for the next.
                    libcall::restore(&calls.slots);
                }
                r.0.extend(calls.slots);
                out.push(calls.module);
            }
            Ok(None) => {}
            Err(e) => crate::say!("shadowgraph: {e}; its library calls are not traced"),
        }
    }
    out
}

/// Which library calls are traced ([`LibCalls`] as a byte): objects loaded
/// later get theirs too.
static LIBCALLS: AtomicU8 = AtomicU8::new(LibCalls::Off as u8);

fn libcalls_mode() -> LibCalls {
    match LIBCALLS.load(Ordering::Relaxed) {
        x if x == LibCalls::Traced as u8 => LibCalls::Traced,
        x if x == LibCalls::Nested as u8 => LibCalls::Nested,
        _ => LibCalls::Off,
    }
}

/// The GOT slots made traceable, and whether they point at their thunks
/// now (while a session records) or hold their targets (between
/// sessions: the calls cost nothing then).
static REDIRECTED: Mutex<(Vec<libcall::Redirected>, bool)> = Mutex::new((Vec::new(), true));

/// The last session ends: every redirected slot gets its target back,
/// every patched prologue its original bytes.
pub(crate) fn restore_originals() {
    // (Slots are written: no object may be unloaded meanwhile.)
    let _turn = changing();
    let mut r = REDIRECTED.lock().unwrap_or_else(|e| e.into_inner());
    if std::mem::replace(&mut r.1, false) {
        libcall::restore(&r.0);
    }
    match process::prologue::unpatch_windows() {
        Ok(0) => {}
        Ok(n) => crate::say!(
            "shadowgraph: {n} patched prologues stay patched (a thread's stack points into them)"
        ),
        Err(e) => crate::say!("shadowgraph: {e}; patched prologues stay patched"),
    }
}

/// A session starts after others ended: the slots point at their thunks
/// again, the prologues jump to their stubs again.
pub(crate) fn reapply_patches() {
    // (Slots are written: no object may be unloaded meanwhile.)
    let _turn = changing();
    let mut r = REDIRECTED.lock().unwrap_or_else(|e| e.into_inner());
    if !std::mem::replace(&mut r.1, true) {
        libcall::reapply(&r.0);
    }
    match process::prologue::repatch_windows() {
        Ok(0) => {}
        Ok(n) => crate::say!("shadowgraph: {n} prologues not patched again (a stopped thread may resume inside one); their calls are not recorded"),
        Err(e) => crate::say!("shadowgraph: {e}; prologues are not patched again"),
    }
}

/// From now on, objects loaded and unloaded are followed; those loaded
/// now count as scanned.
pub(crate) fn follow() {
    SCANNED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(process::loaded_objects());
    FOLLOW.store(true, Ordering::Release);
}

/// After a successful `dlopen`: the objects not seen before join the core
/// (their sleds are converted with the other threads stopped). In a
/// process joined while it ran, only while a recording is under way and
/// its helper can hold the threads: else they join at the next `dlopen`
/// or recording's start.
pub fn after_dlopen() {
    if !FOLLOW.load(Ordering::Acquire) {
        return;
    }
    if crate::stop::signal_free() {
        // Only if the threads can be held now (else the new objects wait,
        // unlooked at, for the next `dlopen` or recording).
        if !recorder::active() || !crate::hold::ask(crate::hold::Hold::Begin) {
            return;
        }
        crate::hold::ask(crate::hold::Hold::End);
    }
    join_loaded();
}

/// Objects are looked at (and join the core) or unloaded one at a time:
/// an object read while another thread's `dlclose` unmaps it would fault.
/// A thread may nest (a destructor that `dlclose`s another object).
static CHANGING: Mutex<()> = Mutex::new(());

std::thread_local! {
    /// How deep this thread is in [`changing`].
    static CHANGING_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// This thread's turn to change the loaded objects, until it is dropped.
struct Changing {
    _turn: Option<std::sync::MutexGuard<'static, ()>>,
}

fn changing() -> Changing {
    let depth = CHANGING_DEPTH.get();
    CHANGING_DEPTH.set(depth + 1);
    Changing {
        _turn: (depth == 0).then(|| CHANGING.lock().unwrap_or_else(|e| e.into_inner())),
    }
}

impl Drop for Changing {
    fn drop(&mut self) {
        CHANGING_DEPTH.set(CHANGING_DEPTH.get() - 1);
    }
}

/// `dlclose` of the object loaded at `bias` (None: not known): its sites
/// go back to nops first (what was recorded of it keeps its names), and
/// `unload` (the real `dlclose`) runs before any other thread looks at
/// the loaded objects.
pub fn around_dlclose<R>(bias: Option<usize>, unload: impl FnOnce() -> R) -> R {
    let _turn = changing();
    if let Some(b) = bias {
        before_dlclose(b);
    }
    unload()
}

/// The objects loaded since they were last looked at join the core.
pub(crate) fn join_loaded() {
    let _turn = changing();
    // Before the objects' first call can be recorded: when they came.
    let when = crate::clock::monotonic_ns();
    let me = own_object();
    let mut scanned = SCANNED.lock().unwrap_or_else(|e| e.into_inner());
    let new: Vec<(PathBuf, usize)> = process::loaded_objects()
        .into_iter()
        .filter(|o| !scanned.contains(o) && Some(&o.0) != me.as_ref())
        .collect();
    if new.is_empty() {
        return;
    }
    scanned.extend(new.iter().cloned());
    drop(scanned);
    let (mods, pg) = match process::discover_with_hooks(|p| new.iter().any(|(q, _)| q == p)) {
        Ok(m) => m,
        Err(e) => return crate::say!("shadowgraph: {e}; not traced"),
    };
    let mut mods: Vec<_> = mods
        .into_iter()
        .filter(|m| !ftrace::has_module(&m.path, m.bias))
        .collect();
    // The -P patterns that name a library apply to it when it comes.
    let patterns = PATCH.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let exe = std::fs::read_link("/proc/thread-self/exe").unwrap_or_default();
    select_sites(&patterns, &mut mods, &exe);
    let own = objects_of(&mods);
    mods.extend(patch_hooked(&pg));
    if !patterns.is_empty() {
        let patched = patch_prologues(&patterns, &new, (&mods, &own), &exe);
        mods.extend(patched);
    }
    let mode = libcalls_mode();
    if mode != LibCalls::Off {
        let calls = library_calls(mode, &mods, &new);
        mods.extend(calls);
    }
    if !mods.is_empty() {
        let loaded = loaded_functions(&mods, &new);
        match ftrace::add_modules(mods) {
            Ok(()) => {
                recorder::after_new_objects();
                recorder::objects_loaded(when, &loaded);
            }
            Err(e) => crate::say!("shadowgraph: {e}; objects loaded by dlopen are not traced"),
        }
    }
}

/// The functions of each of the `new` objects among `mods` (their own
/// sites and patched prologues, not their library calls): path, bias,
/// (address, symbol) each.
fn loaded_functions(mods: &[Module], new: &[(PathBuf, usize)]) -> Vec<recorder::Loaded> {
    let mut out: Vec<recorder::Loaded> = Vec::new();
    for m in mods
        .iter()
        .filter(|m| new.contains(&(m.path.clone(), m.bias)))
    {
        let sites = m.sites.iter().map(|s| (s.addr, s.symbol.clone()));
        match out
            .iter_mut()
            .find(|o| o.path == m.path && o.bias == m.bias)
        {
            Some(o) => o.functions.extend(sites),
            None => out.push(recorder::Loaded {
                path: m.path.clone(),
                bias: m.bias,
                functions: sites.collect(),
            }),
        }
    }
    out
}

/// Before `dlclose` of the object loaded at `bias`: its sites go back to
/// nops first (it may be unmapped); what was recorded of it keeps its
/// names.
fn before_dlclose(bias: usize) {
    if !FOLLOW.load(Ordering::Acquire) {
        return;
    }
    recorder::remember_module_maps();
    if let Err(e) = ftrace::remove_module(bias) {
        crate::say!("shadowgraph: {e} (before dlclose)");
    }
    process::prologue::forget_windows(bias);
    // Its GOT goes with it: its slots are neither given back nor
    // redirected again (the addresses may be another object's by then).
    REDIRECTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .0
        .retain(|r| r.object != bias);
    let mut scanned = SCANNED.lock().unwrap_or_else(|e| e.into_inner());
    scanned.retain(|o| o.1 != bias);
}
