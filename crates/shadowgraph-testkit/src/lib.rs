//! What shadowgraph's tests and benchmarks share: building the programs
//! they trace from fixture files with the system's compilers, in every
//! site flavour; scratch directories; what a test needs of the machine.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod cc;
pub mod fuzz;
pub mod scratch;
pub mod tool;
