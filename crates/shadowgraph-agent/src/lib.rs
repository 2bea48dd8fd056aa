//! The shadowgraph agent: a shared library preloaded into the traced
//! program (`LD_PRELOAD`). Its constructor runs before `main`, while the
//! process is normally single-threaded: it reads the session's
//! configuration from the environment (`SHADOWGRAPH_CONFIG`, written by the
//! `shadowgraph` CLI) and starts it ([`shadowgraph::session::Session`]);
//! the session ends at exit. Without the variable the agent does nothing
//! until `shadowgraph record -p` loads it into a running process and
//! starts a session there ([`attach`]).
//!
//! Beyond that, the agent interposes what a preloaded tracer must see:
//! `sigaction`/`signal`/signal masks, so that the patcher's SIGTRAP
//! handler stays installed and deliverable ([`interpose`]); the unwinder's
//! entry points and `pthread_exit`, so that unwinders never see a hijacked
//! return ([`unwind`]); `dlopen`/`dlclose`, so that objects loaded later
//! are traced and unloaded ones leave first ([`objects`]); `execve` and
//! `posix_spawn` with an environment of the program's own, so that the
//! programs they start are traced too ([`exec`]).

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod attach;
mod exec;
mod interpose;
mod mcount;
mod next;
mod objects;
mod unwind;
mod vfork;

use shadowgraph::alloc::MmapAlloc;
use shadowgraph::config::Config;
use shadowgraph::session::{self, Session};

/// Everything the agent allocates comes from its own mappings, never from
/// the program's `malloc`: the program's may be its own (with another
/// alignment), may be traced, or may be in any state when the agent runs.
#[global_allocator]
static ALLOC: MmapAlloc = MmapAlloc::new();

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = agent_init;

extern "C" fn agent_init() {
    MmapAlloc::register_fork_handlers(&ALLOC);
    if std::env::var_os(session::LIST_EVENTS_ENV).is_some() {
        session::list_events_and_exit();
    }
    let config = match Config::from_env() {
        Ok(Some(c)) => {
            attach::PRELOADED.store(true, std::sync::atomic::Ordering::Relaxed);
            c
        }
        Ok(None) => {
            // Loaded into a running process by `record -p`: the kernel's
            // grace periods for membarrier registration (one per command
            // in a process with threads) pass while the session is
            // prepared, on a thread of their own.
            shadowgraph::sys::membarrier_register_in_background();
            return;
        }
        Err(e) => return eprintln!("shadowgraph: {e}; the program runs untraced"),
    };
    // Finished at exit (session::finish): the handle is not kept.
    // What the agent calls while it sets up (the C library, which may
    // call the program's own `malloc`) is not the program's: not hooked.
    shadowgraph::fgraph::pause_thread();
    let started = Session::start(config);
    // (After the start, which passes the session's lineage on in the
    // environment.)
    exec::keep_environment();
    shadowgraph::fgraph::resume_thread();
    if let Err(e) = started {
        return eprintln!("shadowgraph: {e}; the program runs untraced");
    }
    // SAFETY: registering a plain extern "C" function with atexit.
    unsafe { libc::atexit(agent_exit) };
}

extern "C" fn agent_exit() {
    // What the agent does from here on (it may call the C library, which
    // may call the program's own `malloc`) is not the program's: this
    // thread's calls are no longer hooked (the process is ending).
    shadowgraph::fgraph::pause_thread();
    session::finish();
}
