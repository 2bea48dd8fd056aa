//! Graph mode: entries and returns of every function through the ftrace
//! core and fgraph (return hijacking), including objects loaded later with
//! `dlopen`; objects are taken out before `dlclose`.

use shadowgraph::{fgraph, ftrace, process};
use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Sites counted (by core site id); later ones count as overflow.
const MAX_SITES: usize = 1 << 18;
static ENTRIES: [AtomicU64; MAX_SITES] = [const { AtomicU64::new(0) }; MAX_SITES];
static RETURNS: [AtomicU64; MAX_SITES] = [const { AtomicU64::new(0) }; MAX_SITES];
static UNCOUNTED: AtomicU64 = AtomicU64::new(0);
/// Objects loaded and unloaded later are followed (graph and record modes).
pub(crate) static ON: AtomicBool = AtomicBool::new(false);
static USER: OnceLock<Arc<fgraph::GraphUser>> = OnceLock::new();
/// Objects already scanned for sites (with or without any).
static SCANNED: Mutex<Vec<(PathBuf, usize)>> = Mutex::new(Vec::new());

#[inline]
fn bump(table: &[AtomicU64], func: usize) {
    match ftrace::site_id_of(func) {
        Some(id) if (id as usize) < MAX_SITES => {
            table[id as usize].fetch_add(1, Ordering::Relaxed);
        }
        _ => {
            UNCOUNTED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn on_entry(e: &fgraph::GraphEntry, _u: &fgraph::GraphUser, _r: &mut ftrace::Regs) -> bool {
    bump(&ENTRIES, e.func);
    true
}

fn on_return(r: &fgraph::GraphReturn, _u: &fgraph::GraphUser, _regs: &fgraph::RetRegs) {
    bump(&RETURNS, r.func);
}

pub fn attach() -> Result<(), String> {
    let modules = crate::discover_program()?;
    SCANNED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(process::loaded_objects());
    ftrace::add_modules(modules).map_err(|e| e.to_string())?;
    let user = fgraph::GraphUser::new(on_entry, on_return, ftrace::FilterSet::all(), 0);
    fgraph::register_graph(&user).map_err(|e| e.to_string())?;
    let _ = USER.set(user);
    ON.store(true, Ordering::Release);
    // SAFETY: registering a plain extern "C" function with atexit.
    unsafe { libc::atexit(report) };
    Ok(())
}

/// After a successful dlopen: bring objects not seen before under the core.
fn after_dlopen() {
    let me = crate::agent_path();
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
    let mods: Vec<_> = mods
        .into_iter()
        .filter(|m| !ftrace::has_module(&m.path, m.bias))
        .collect();
    if !mods.is_empty() {
        match ftrace::add_modules(mods) {
            Ok(()) => crate::record::after_new_objects(),
            Err(e) => eprintln!("shadowgraph: {e}; objects loaded by dlopen are not traced"),
        }
    }
}

/// The public head of glibc's `struct link_map` (<link.h>).
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
}

const RTLD_DI_LINKMAP: c_int = 2;

static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);
static REAL_DLCLOSE: AtomicUsize = AtomicUsize::new(0);

/// `dlopen(3)`: the new objects' sites join the core (their sleds are
/// converted with the other threads stopped).
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void {
    type F = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
    // SAFETY: the next definition of dlopen has this signature.
    let real = std::mem::transmute::<usize, F>(crate::next_symbol(&REAL_DLOPEN, c"dlopen"));
    let h = real(file, flags);
    if !h.is_null() && ON.load(Ordering::Acquire) {
        after_dlopen();
    }
    h
}

/// `dlclose(3)`: the object's sites go back to nops first (it may be
/// unmapped); its counts stay in the report.
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    type F = unsafe extern "C" fn(*mut c_void) -> c_int;
    if ON.load(Ordering::Acquire) && !handle.is_null() {
        let mut lm: *mut LinkMap = std::ptr::null_mut();
        // SAFETY: RTLD_DI_LINKMAP writes a link_map pointer for a valid handle.
        if libc::dlinfo(handle, RTLD_DI_LINKMAP, &mut lm as *mut _ as *mut c_void) == 0
            && !lm.is_null()
        {
            let bias = (*lm).l_addr as usize;
            crate::record::remember_module_maps();
            if let Err(e) = ftrace::remove_module(bias) {
                eprintln!("shadowgraph: {e} (before dlclose)");
            }
            let mut scanned = SCANNED.lock().unwrap_or_else(|e| e.into_inner());
            scanned.retain(|o| o.1 != bias);
        }
    }
    // SAFETY: the next definition of dlclose has this signature.
    let real = std::mem::transmute::<usize, F>(crate::next_symbol(&REAL_DLCLOSE, c"dlclose"));
    real(handle)
}

extern "C" fn report() {
    if !crate::in_root_process() {
        return; // a forked child: the report is the parent's to write
    }
    let mut text =
        String::from("# shadowgraph counts v1\n# module\tfunction\taddress\tcalls\treturns\n");
    let sites = ftrace::sites();
    for s in &sites {
        let i = s.id as usize;
        if i >= MAX_SITES || s.flags & ftrace::site_flags::TOUCHED == 0 {
            continue;
        }
        text.push_str(&format!(
            "{}\t{}\t{:#x}\t{}\t{}\n",
            s.module.display(),
            s.function,
            s.addr,
            ENTRIES[i].load(Ordering::Relaxed),
            RETURNS[i].load(Ordering::Relaxed)
        ));
    }
    text.push_str(&format!(
        "# sites={} uncounted={} lost_frames={} overrun={} sigtrap_handler_intact={}\n",
        sites.len(),
        UNCOUNTED.load(Ordering::Relaxed),
        fgraph::LOST_FRAMES.load(Ordering::Relaxed),
        fgraph::thread_overrun(),
        crate::interpose::our_sigtrap_handler_installed() as u8,
    ));
    crate::write_report(&text);
}
