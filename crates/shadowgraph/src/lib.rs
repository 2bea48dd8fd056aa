//! shadowgraph: the Linux kernel's ftrace function-tracing machinery in user
//! space, as a library that runs inside the traced process. Layer by layer,
//! in the order a traced call goes through them (design §1):
//!
//! * Sites — [`elf`] finds patchable entries in files, [`process`] in
//!   loaded objects (and converts them to one patchable form), [`site`]
//!   names their kinds.
//! * Patching — [`patch`] rewrites them live with the int3-first protocol,
//!   [`stop`] parks threads when an edit is not safe to make live (or
//!   [`hold`] has them held from outside),
//!   [`arena`] and [`tramp`] hold the trampolines that sites call.
//! * Core — [`ftrace`]: ops, filters, per-site accounting, the shared
//!   caller and list function, per-ops trampolines, direct calls, subops,
//!   the recursion guard and grace periods.
//! * [`fgraph`] — one shadow stack per thread shared by up to 16
//!   function-graph users.
//! * Tracers — [`tracer`]: counters, the recorder, the profile, and their
//!   fused single-user paths.
//! * Rings — [`record`]: per-thread record rings, the clock, and the writer
//!   that drains them into a data directory (`shadowgraph_data`'s format).
//!
//! [`session`] applies a [`config::Config`] to the running process: the
//! agent starts one before `main`; a program can start one itself:
//!
//! ```no_run
//! use shadowgraph::config::{Config, Mode, Record, Tracer};
//! use shadowgraph::session::Session;
//!
//! let config = Config::record(Record::into_dir("/tmp/trace.data", vec![Tracer::default()]));
//! let session = Session::start(config).expect("tracing starts");
//! // ... the calls to trace ...
//! session.finish(); // the data directory is complete: `shadowgraph replay -d /tmp/trace.data`
//! ```

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod alloc;
pub mod arena;
pub mod clock;
pub mod config;
pub mod elf;
pub mod fgraph;
pub mod ftrace;
pub mod hold;
pub mod libcall;
pub mod local;
pub mod log;
pub mod patch;
pub mod process;
pub mod prologue;
pub mod record;
pub mod session;
pub mod site;
pub mod stop;
pub mod sys;
pub mod tls;
pub mod tracer;
pub mod tramp;
