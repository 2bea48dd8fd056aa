//! The objects a session traces: those loaded when it starts, chosen by
//! the configuration, and those the program loads and unloads later
//! (`dlopen`, `dlclose`), which join the core or leave it.

use crate::config::Objects;
use crate::process::{self, Module};
use crate::tracer::recorder;
use crate::{elf, ftrace, libcall};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Objects loaded and unloaded later are followed (graph and record modes).
static FOLLOW: AtomicBool = AtomicBool::new(false);
/// Objects already scanned for sites (with or without any): path, bias.
static SCANNED: Mutex<Vec<(PathBuf, usize)>> = Mutex::new(Vec::new());

/// The object this library's code is in, when it is not the program (the
/// agent, preloaded): never traced (it has no sites) nor scanned.
fn own_object() -> Option<PathBuf> {
    let me = crate::sys::object_of(own_object as *const () as usize)?;
    let exe = std::fs::canonicalize("/proc/self/exe").ok();
    (Some(&me) != exe.as_ref()).then_some(me)
}

/// The sites of every loaded object `which` selects, or a one-line error
/// naming the program when there are none.
pub(crate) fn discover(which: &Objects) -> Result<Vec<Module>, String> {
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
    let modules = process::discover(wanted).map_err(|e| e.to_string())?;
    if modules.iter().all(|m| m.usable().next().is_none()) {
        let found = elf::scan_file(&exe).map_err(|e| e.to_string())?;
        found.require_sites().map_err(|e| e.to_string())?;
        return Err(format!("{}: no usable sites", exe.display()));
    }
    Ok(modules)
}

/// The library calls of the traced objects `modules` (each through its
/// PLT): a module of thunk sites per object that makes any. An object
/// whose calls cannot be redirected is said once and left as it is.
pub(crate) fn library_calls(modules: &[Module]) -> Vec<Module> {
    // Relaxed: set once before any object is followed; read by the same
    // thread or after the dlopen that made it matter.
    LIBCALLS.store(true, Ordering::Relaxed);
    let mut out = Vec::new();
    for m in modules {
        match libcall::redirect(&m.path, m.bias) {
            Ok(Some(calls)) => {
                REDIRECTED
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(calls.slots);
                out.push(calls.module);
            }
            Ok(None) => {}
            Err(e) => eprintln!("shadowgraph: {e}; its library calls are not traced"),
        }
    }
    out
}

/// Whether library calls are traced: objects loaded later get theirs too.
static LIBCALLS: AtomicBool = AtomicBool::new(false);

/// The GOT slots redirected, to give back when the session ends.
static REDIRECTED: Mutex<Vec<libcall::Redirected>> = Mutex::new(Vec::new());

/// The session ends: every redirected slot gets its target back.
pub(crate) fn restore_library_calls() {
    let slots = std::mem::take(&mut *REDIRECTED.lock().unwrap_or_else(|e| e.into_inner()));
    libcall::restore(&slots);
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
/// (their sleds are converted with the other threads stopped).
pub fn after_dlopen() {
    if !FOLLOW.load(Ordering::Acquire) {
        return;
    }
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
    let mods = match process::discover(|p| new.iter().any(|(q, _)| q == p)) {
        Ok(m) => m,
        Err(e) => return eprintln!("shadowgraph: {e}; not traced"),
    };
    let mut mods: Vec<_> = mods
        .into_iter()
        .filter(|m| !ftrace::has_module(&m.path, m.bias))
        .collect();
    if LIBCALLS.load(Ordering::Relaxed) {
        let calls = library_calls(&mods);
        mods.extend(calls);
    }
    if !mods.is_empty() {
        match ftrace::add_modules(mods) {
            Ok(()) => recorder::after_new_objects(),
            Err(e) => eprintln!("shadowgraph: {e}; objects loaded by dlopen are not traced"),
        }
    }
}

/// Before `dlclose` of the object loaded at `bias`: its sites go back to
/// nops first (it may be unmapped); what was recorded of it keeps its
/// names.
pub fn before_dlclose(bias: usize) {
    if !FOLLOW.load(Ordering::Acquire) {
        return;
    }
    recorder::remember_module_maps();
    if let Err(e) = ftrace::remove_module(bias) {
        eprintln!("shadowgraph: {e} (before dlclose)");
    }
    let mut scanned = SCANNED.lock().unwrap_or_else(|e| e.into_inner());
    scanned.retain(|o| o.1 != bias);
}
