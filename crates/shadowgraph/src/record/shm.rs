//! Where the threads' rings of a recording live: a directory of the
//! recording process (`shadowgraph-TAG-PID`) in `/dev/shm` or the
//! temporary directory, removed when the recording ends, and, when its
//! process was killed first, by the next recording or `shadowgraph clean`.

use std::path::{Path, PathBuf};

/// Where the shared-memory directory of a recording may go, best first:
/// `$SHADOWGRAPH_RINGS_DIR` if set (alone: e.g. a container's /dev/shm is
/// small), else `/dev/shm` (memory), then the temporary directory
/// (systems without a usable /dev/shm).
pub fn shm_dirs(tag: &str) -> Vec<PathBuf> {
    bases()
        .into_iter()
        .map(|base| {
            remove_stale(&base, tag);
            base.join(format!("shadowgraph-{tag}-{}", std::process::id()))
        })
        .collect()
}

/// The directories rings may go in (see [`shm_dirs`]) that exist.
fn bases() -> Vec<PathBuf> {
    let mut bases = match std::env::var_os("SHADOWGRAPH_RINGS_DIR") {
        Some(d) => vec![PathBuf::from(d)],
        None => vec![PathBuf::from("/dev/shm"), std::env::temp_dir()],
    };
    bases.dedup();
    bases.retain(|b| b.is_dir());
    bases
}

/// Removes the ring directories of recordings (`shm_dirs("rings")`) whose
/// recording process is gone, wherever rings may go; never one whose
/// process exists. Returns those removed, with the bytes they held.
pub fn remove_stale_rings() -> Vec<(PathBuf, u64)> {
    bases()
        .iter()
        .flat_map(|b| remove_stale(b, "rings"))
        .collect()
}

/// Removes the shared-memory directories of recordings whose process is
/// gone (killed before it could clean up): their rings hold memory.
/// Returns those removed, with the bytes they held.
fn remove_stale(base: &Path, tag: &str) -> Vec<(PathBuf, u64)> {
    let prefix = format!("shadowgraph-{tag}-");
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(base) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&prefix)
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only asks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let bytes = std::fs::read_dir(e.path())
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|f| f.metadata().ok())
                .map(|m| m.len())
                .sum();
            if std::fs::remove_dir_all(e.path()).is_ok() {
                removed.push((e.path(), bytes));
            }
        }
    }
    removed
}
