//! The hook of plain `-pg`, interposed: a program built with `-pg` calls
//! `mcount` after each function's prologue. Under the agent its functions
//! are traced at their prologue instead (`shadowgraph::prologue`), and the
//! hook returns at once, every register as it found it. No gprof profile
//! is kept while the agent is loaded: the C library's `__monstartup` and
//! `_mcleanup`, which the program's start-up files call, are replaced by
//! ones that do nothing (as uftrace's `libmcount` does), so no profiling
//! timer runs and no `gmon.out` is written, and `_mcleanup`'s calls at
//! exit (`free`, maybe the program's own) are not recorded.

/// glibc's name for the hook.
#[no_mangle]
pub extern "C" fn mcount() {}

/// The hook's other name (older toolchains).
#[no_mangle]
pub extern "C" fn _mcount() {}

/// gprof's start (called before `main` by a `-pg` program's start-up
/// files): nothing.
#[no_mangle]
pub extern "C" fn __monstartup(_low: usize, _high: usize) {}

/// gprof's end (registered by `__monstartup`'s caller with `atexit`):
/// nothing.
#[no_mangle]
pub extern "C" fn _mcleanup() {}
