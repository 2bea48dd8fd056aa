//! Builds C programs with the system C compiler: the bundled demo, test
//! fixtures and benchmarks are compiled at run time in every site flavour.

use std::path::Path;
use std::process::Command;

/// Compiler flags of each site flavour shadowgraph understands.
pub mod flavour {
    /// gcc's five single-byte nops.
    pub const PATCHABLE: &[&str] = &["-fpatchable-function-entry=5"];
    /// The same behind `endbr64`.
    pub const PATCHABLE_CET: &[&str] = &["-fpatchable-function-entry=5", "-fcf-protection=full"];
    /// `-pg -mfentry`: `call __fentry__` (non-PIE) or `call *__fentry__@GOTPCREL` (PIE).
    pub const FENTRY: &[&str] = &["-pg", "-mfentry", "-mrecord-mcount"];
    /// The 5-byte nop form of `-pg -mfentry` (non-PIE only).
    pub const FENTRY_NOP: &[&str] = &["-pg", "-mfentry", "-mrecord-mcount", "-mnop-mcount"];
}

/// The C compiler: `$CC`, else `cc`.
pub fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

/// The C++ compiler: `$CXX`, else `g++`.
pub fn cxx_compiler() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "g++".to_string())
}

/// Compiles `sources` into `output` with `flags` (C++ sources, `.cc` or
/// `.cpp`, with the C++ compiler); `Err` carries the compiler's message.
pub fn compile(sources: &[&Path], flags: &[&str], output: &Path) -> Result<(), String> {
    let cxx = sources
        .iter()
        .any(|s| s.extension().is_some_and(|e| e == "cc" || e == "cpp"));
    let cc = if cxx { cxx_compiler() } else { compiler() };
    let out = Command::new(&cc)
        .args(flags)
        .args(sources)
        .arg("-o")
        .arg(output)
        .output()
        .map_err(|e| format!("cannot run the C compiler `{cc}`: {e} (install gcc)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{cc} {} ...` failed: {}",
            flags.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
