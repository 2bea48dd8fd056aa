//! The hook of plain `-pg`, interposed: a program built with `-pg` calls
//! `mcount` after each function's prologue. Under the agent its functions
//! are traced at their prologue instead (`shadowgraph::prologue`), and the
//! hook returns at once, every register as it found it: no gprof counts
//! are kept while the agent is loaded (`gmon.out` is still written, as
//! the program's start-up files ask).

/// glibc's name for the hook.
#[no_mangle]
pub extern "C" fn mcount() {}

/// The hook's other name (older toolchains).
#[no_mangle]
pub extern "C" fn _mcount() {}
