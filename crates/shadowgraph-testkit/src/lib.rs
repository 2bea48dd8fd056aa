//! What shadowgraph's tests and benchmarks share: building the programs
//! they trace from fixture files with the system's compilers, in every
//! site flavour.

#![forbid(unsafe_code)]

pub mod cc;
