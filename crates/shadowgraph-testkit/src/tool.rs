//! What a test needs of the machine: a tool (uftrace, valgrind, protoc),
//! root for a tmpfs, a usable TSC. On a developer's machine a test that
//! lacks one says so and checks nothing more; under CI (`CI` set, as
//! `.ci/run` sets it) a missing one fails the test: CI installs every
//! tool, and a check that silently does not run is a defect.

use std::process::Command;

/// Whether `tool` runs (`tool --version`). Missing: under CI the test
/// fails; else this says on stderr that `what` is not checked and
/// returns false.
pub fn require(tool: &str, what: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    available(found, &format!("{tool} (see .ci/run)"), what)
}

/// Whether a condition a test needs holds (`have`): as [`require`], with
/// `need` saying what is missing.
pub fn available(have: bool, need: &str, what: &str) -> bool {
    if have {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must provide {need}: {what} is not checked without it"
    );
    eprintln!("{need} is missing: {what} is not checked");
    false
}
