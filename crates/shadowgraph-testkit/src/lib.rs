//! What shadowgraph's tests and benchmarks share: building the programs
//! they trace from fixture files with the system's compilers, in every
//! site flavour; scratch directories; what a test needs of the machine.

#![forbid(unsafe_code)]

pub mod cc;
pub mod scratch;
pub mod tool;
