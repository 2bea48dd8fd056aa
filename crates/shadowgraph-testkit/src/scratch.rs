//! The test binaries' scratch directories: `<tmp>/<prefix>-<pid>`, one per
//! test process. Recordings make them large (hundreds of MB per run): a
//! process removes its own as it exits, unless a test failed (what it left
//! is then there to look at), and first removes those of test processes
//! that are gone.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static ROOT: OnceLock<PathBuf> = OnceLock::new();
/// Whether a test of this process panicked. Relaxed: read at exit, after
/// every test thread has been joined.
static FAILED: AtomicBool = AtomicBool::new(false);

extern "C" fn remove_root() {
    if !FAILED.load(Ordering::Relaxed) {
        if let Some(root) = ROOT.get() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// This process's scratch directory (made on first use), after removing
/// the ones of exited processes with the same prefix.
pub fn scratch_root(prefix: &str) -> PathBuf {
    ROOT.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            FAILED.store(true, Ordering::Relaxed);
            previous(info)
        }));
        // SAFETY: registering a plain extern "C" function that never
        // unwinds.
        unsafe { libc::atexit(remove_root) };
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
