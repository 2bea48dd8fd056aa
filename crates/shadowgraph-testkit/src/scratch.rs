//! The test binaries' scratch directories: `<tmp>/<prefix>-<pid>`, one per
//! test process. Recordings make them large (hundreds of MB per run), so
//! each process first removes those of test processes that are gone.

use std::path::PathBuf;
use std::sync::OnceLock;

/// This process's scratch directory (made on first use), after removing
/// the ones of exited processes with the same prefix.
pub fn scratch_root(prefix: &str) -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let tmp = std::env::temp_dir();
        let lead = format!("{prefix}-");
        for e in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(&lead))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        tmp.join(format!("{prefix}-{}", std::process::id()))
    })
    .clone()
}
