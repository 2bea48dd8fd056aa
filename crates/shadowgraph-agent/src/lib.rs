//! The shadowgraph agent: a shared library preloaded into the traced program
//! (`LD_PRELOAD`). Its constructor runs before `main`, while the process is
//! normally single-threaded: it finds the sites of every loaded object,
//! normalises them, and attaches the tracer the CLI asked for through the
//! environment. It is built without patchable entries and never calls traced
//! code on its hot paths.
//!
//! Environment (set by the `shadowgraph` CLI):
//! * `SHADOWGRAPH_MODE=count` — count calls per function with a counting
//!   trampoline; `SHADOWGRAPH_MODE=graph` — count entries and returns per
//!   function through the ftrace core and fgraph (return hijacking);
//!   without it the agent does nothing.
//! * `SHADOWGRAPH_OUT=FILE` — where the report goes at exit (else stderr).
//! * `SHADOWGRAPH_STACK_BYTES=N` — each thread's shadow stack size (a power
//!   of two, 4 KiB to 1 MiB; default 64 KiB).
//!
//! The agent also interposes `sigaction`/`signal` so that the program can
//! never replace the patcher's SIGTRAP handler (its handler is chained
//! instead), and `sigprocmask`/`pthread_sigmask` so that SIGTRAP stays
//! deliverable: a blocked synchronous trap would kill the process.

use shadowgraph::arena::Arena;
use shadowgraph::patch::{self, Edit};
use shadowgraph::process::{self, Module};
use shadowgraph::tramp::SiteCounter;
use std::io::Write;
use std::sync::OnceLock;

mod control;
mod graph;
mod interpose;
mod profile;
mod record;
mod unwind;

/// What the constructor attached, for the report at exit.
struct Attached {
    modules: Vec<Module>,
    counter: &'static SiteCounter,
    normalized: process::Normalized,
}

static ATTACHED: OnceLock<Attached> = OnceLock::new();

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = agent_init;

/// The process the CLI started (its children inherit LD_PRELOAD and the
/// environment, but are not what was asked for: they run untraced, and
/// never write over the parent's report or recording).
static ROOT_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Whether this process is the one the agent attached in (not a forked
/// child that inherited its state).
pub(crate) fn in_root_process() -> bool {
    // SAFETY: getpid has no preconditions.
    ROOT_PID.load(std::sync::atomic::Ordering::Relaxed) == unsafe { libc::getpid() }
}

extern "C" fn agent_init() {
    let Ok(mode) = std::env::var("SHADOWGRAPH_MODE") else {
        return;
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    // `record` follows programs started by exec (each a session of its own)
    // when its writer drains the rings, unless told not to.
    let follow_exec = mode == "record"
        && std::env::var_os("SHADOWGRAPH_SHM").is_some()
        && std::env::var_os("SHADOWGRAPH_NO_CHILDREN").is_none();
    match std::env::var("SHADOWGRAPH_ROOT_PID")
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    {
        // A program the traced one started (fork + exec): not traced, but
        // the writer hears of it.
        Some(root) if root != pid && !follow_exec => {
            note_untraced_exec(
                pid,
                "programs started by exec are followed only by `record`",
            );
            return;
        }
        _ => {
            // SAFETY: setenv in a constructor, while the process has one thread.
            unsafe {
                libc::setenv(
                    c"SHADOWGRAPH_ROOT_PID".as_ptr(),
                    std::ffi::CString::new(pid.to_string()).unwrap().as_ptr(),
                    1,
                )
            };
        }
    }
    ROOT_PID.store(pid, std::sync::atomic::Ordering::Relaxed);
    // Returns come back through each site's stub, unless told to hijack
    // them (SHADOWGRAPH_NO_SITE_STUBS=1, to compare).
    shadowgraph::fgraph::set_site_stubs(std::env::var_os("SHADOWGRAPH_NO_SITE_STUBS").is_none());
    // Every shadow stack's size, before the first is mapped.
    if let Ok(v) = std::env::var("SHADOWGRAPH_STACK_BYTES") {
        let set = v
            .parse()
            .map_err(|_| format!("SHADOWGRAPH_STACK_BYTES=`{v}` is not a number"))
            .and_then(shadowgraph::fgraph::stack::set_stack_bytes);
        if let Err(e) = set {
            eprintln!("shadowgraph: {e}; the program runs untraced");
            return;
        }
    }
    let result = match mode.as_str() {
        "count" => attach_counter(),
        "graph" => graph::attach(),
        "record" => record::attach(),
        other => Err(format!(
            "unknown SHADOWGRAPH_MODE `{other}` (expected `count`, `graph` or `record`)"
        )),
    };
    if let Err(e) = result {
        eprintln!("shadowgraph: {e}; the program runs untraced");
    }
}

/// Leaves `exec-<pid>` (the executable's path, a tab, why) in the writer's
/// shared-memory directory, so that `record` can say what was not traced.
pub(crate) fn note_untraced_exec(pid: i32, why: &str) {
    if std::env::var_os("SHADOWGRAPH_NO_CHILDREN").is_some() {
        return; // not wanted: nothing missing
    }
    if let Some(shm) = std::env::var_os("SHADOWGRAPH_SHM") {
        let exe = std::fs::read_link("/proc/thread-self/exe").unwrap_or_default();
        let _ = std::fs::write(
            std::path::Path::new(&shm).join(format!("exec-{pid}")),
            format!("{}\t{why}", exe.display()),
        );
    }
}

/// Counts every call of every function of every loaded object with sites.
fn attach_counter() -> Result<(), String> {
    let mut modules = discover_program()?;
    patch::init();
    let normalized = process::normalize(&mut modules).map_err(|e| e.to_string())?;
    let counter = SiteCounter::new(modules.iter().flat_map(|m| m.usable().map(|s| s.addr)));
    let mut edits = Vec::new();
    for m in &modules {
        let Some((lo, hi)) = m.site_range() else {
            continue;
        };
        let arena = Arena::near(lo, hi).map_err(|e| format!("{}: {e}", m.path.display()))?;
        let tramp = counter
            .trampoline(arena)
            .map_err(|e| format!("{}: {e}", m.path.display()))?;
        edits.extend(
            m.usable()
                .map(|s| Edit::enable(s.addr, tramp).expect("arena in reach")),
        );
    }
    patch::apply(&mut edits).map_err(|e| e.to_string())?;
    let _ = ATTACHED.set(Attached {
        modules,
        counter,
        normalized,
    });
    // SAFETY: registering a plain extern "C" function with atexit.
    unsafe { libc::atexit(agent_exit) };
    Ok(())
}

/// Sites of every loaded object except the agent, or a one-line error
/// naming the program when there are none.
pub(crate) fn discover_program() -> Result<Vec<Module>, String> {
    let me = agent_path();
    let exe = std::fs::read_link("/proc/thread-self/exe").unwrap_or_default();
    // SHADOWGRAPH_LIBS: unset or "all" → every object; "none" → the program
    // only; else `;`-separated file names of the libraries to trace too.
    let libs = std::env::var("SHADOWGRAPH_LIBS").unwrap_or_default();
    let wanted = |p: &std::path::Path| -> bool {
        if Some(p) == me.as_deref() {
            return false;
        }
        if p == exe || libs.is_empty() || libs == "all" {
            return true;
        }
        let name = p
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        libs.split(';')
            .any(|l| !l.is_empty() && l != "none" && name.starts_with(l))
    };
    let modules = process::discover(wanted).map_err(|e| e.to_string())?;
    if modules.iter().all(|m| m.usable().next().is_none()) {
        let found = shadowgraph::elf::scan_file(&exe).map_err(|e| e.to_string())?;
        found.require_sites().map_err(|e| e.to_string())?;
        return Err(format!("{}: no usable sites", exe.display()));
    }
    Ok(modules)
}

extern "C" fn agent_exit() {
    let Some(a) = ATTACHED.get() else {
        return;
    };
    if !in_root_process() {
        return; // a forked child: the report is the parent's to write
    }
    let mut text = String::from("# shadowgraph counts v1\n# module\tfunction\taddress\tcalls\n");
    for m in &a.modules {
        for s in m.usable() {
            text.push_str(&format!(
                "{}\t{}\t{:#x}\t{}\n",
                m.path.display(),
                s.function,
                s.addr - m.bias,
                a.counter.count(s.addr)
            ));
        }
    }
    let st = patch::stats();
    let intact = interpose::our_sigtrap_handler_installed();
    text.push_str(&format!(
        "# sites={} converted={} deferred={} traps_emulated={} traps_chained={} unknown_calls={} sigtrap_handler_intact={}\n",
        a.modules.iter().map(|m| m.usable().count()).sum::<usize>(),
        a.normalized.converted,
        a.normalized.deferred,
        st.traps_emulated,
        st.traps_chained,
        a.counter.unknown(),
        intact as u8
    ));
    write_report(&text);
}

/// Writes the report to `$SHADOWGRAPH_OUT` (else stderr).
pub(crate) fn write_report(text: &str) {
    match std::env::var_os("SHADOWGRAPH_OUT") {
        Some(p) => {
            if let Err(e) = std::fs::write(&p, text) {
                eprintln!("shadowgraph: cannot write {}: {e}", p.to_string_lossy());
            }
        }
        None => {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
    }
}

/// The next definition of `name` after this object (libc's, libgcc's, …),
/// cached in `cache`. Aborts with a message if there is none: an
/// interposer without its real function has nothing safe to do.
pub(crate) fn next_symbol(cache: &std::sync::atomic::AtomicUsize, name: &std::ffi::CStr) -> usize {
    use std::sync::atomic::Ordering;
    let p = cache.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: RTLD_NEXT lookup of a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if p == 0 {
        let msg = b"shadowgraph: an interposed function has no next definition\n";
        // SAFETY: write(2) of a static buffer, then abort.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    cache.store(p, Ordering::Relaxed);
    p
}

/// Path of this shared object, to leave it out of discovery.
pub(crate) fn agent_path() -> Option<std::path::PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr fills `info` for an address inside a loaded object.
    let ok = unsafe { libc::dladdr(agent_init as *const () as *const libc::c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    std::fs::canonicalize(name.to_str().ok()?).ok()
}
