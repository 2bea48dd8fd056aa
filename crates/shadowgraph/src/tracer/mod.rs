//! The tracers (design §5): clients of the ftrace core and of fgraph
//! that do something with the calls they see.
//!
//! * [`count`] — per-function call counts, by a counting trampoline or
//!   through fgraph.
//! * `recorder` — entry and exit records into per-thread rings, the data
//!   a recording's views show; several at once, each with its own filters.
//! * [`profile`] — per-function calls, total and self time, in memory.
//! * [`fused`] — the recorder and the profile fused into fgraph's
//!   single-user path in assembly: registered with fgraph as its sole-user
//!   path when one of them is alone.

pub mod count;
pub mod fused;
pub mod profile;
pub(crate) mod recorder;
