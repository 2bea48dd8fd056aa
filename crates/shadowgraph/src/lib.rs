//! shadowgraph: the Linux kernel's ftrace function-tracing machinery in user
//! space. This crate holds the in-process API, layer by layer (SPEC §1):
//!
//! * L0 sites & patcher — [`elf`] finds patchable entries in files,
//!   [`process`] in loaded objects (and converts them to one patchable
//!   form), [`patch`] rewrites them live with the int3-first protocol,
//!   [`stop`] parks threads when an edit is not safe to make live,
//!   [`arena`] and [`tramp`] hold the trampolines that sites call.
//! * L1 core — [`ftrace`]: ops, filters, per-site accounting, the shared
//!   caller and list function, per-ops trampolines, direct calls, subops,
//!   the recursion guard and grace periods.
//! * L2 — [`fgraph`]: one shadow stack per thread shared by up to 16
//!   function-graph users.
//! * L4 — [`record`]: per-thread record buffers, the data directory, replay.

pub mod arena;
pub mod cc;
pub mod elf;
pub mod fgraph;
pub mod ftrace;
pub mod patch;
pub mod process;
pub mod record;
pub mod site;
pub mod stop;
pub mod sys;
pub mod tls;
pub mod tramp;
