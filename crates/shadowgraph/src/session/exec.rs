//! Programs started by exec while a recording runs: the recorded program
//! is session 0, and every program it (or a child) starts by exec is a
//! session of its own, recorded into `<dir>/<pid>-<program>/` laid out as
//! the recording. The configuration an exec'd image inherits says it is
//! one; its session announces itself to the writer (`<rings>/session-<id>`:
//! pid, directory) before it makes any ring, and its rings carry the id.

use crate::clock;
use crate::record::writer;
use std::path::{Path, PathBuf};

/// Starts this image's session: returns its directory and its id (which
/// the images it starts by exec inherit).
pub(super) fn start_session(
    top: &Path,
    rings: &Path,
    started_by_exec: bool,
) -> Result<(PathBuf, u64), String> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let id = ((pid as u64) << 40) | (clock::monotonic_ns() & ((1 << 40) - 1)) | 1;
    if !started_by_exec {
        return Ok((top.to_owned(), id));
    }
    let exe = std::fs::read_link("/proc/thread-self/exe").unwrap_or_default();
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "program".into());
    let mut dir = top.join(format!("{pid}-{name}"));
    let mut k = 2;
    while dir.exists() {
        dir = top.join(format!("{pid}-{name}-{k}"));
        k += 1;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tmp = rings.join(format!(".session-{id}"));
    std::fs::write(&tmp, format!("{pid}\t{}\n", dir.display()))
        .and_then(|_| std::fs::rename(&tmp, rings.join(format!("session-{id}"))))
        .map_err(|e| format!("{}: {e}", rings.display()))?;
    writer::set_session(id);
    Ok((dir, id))
}

/// The session id an untraced launcher passes on, so that the programs it
/// starts by exec record into directories of their own (no session has
/// it: a launcher records nothing).
pub(super) fn launcher_session() -> u64 {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    ((pid as u64) << 40) | 1
}

/// Leaves `exec-<pid>` (the executable's path, a tab, why) in the writer's
/// rings directory, so that `record` can say what was not traced.
pub(super) fn note_untraced(rings: &Path, pid: i32, why: &str) {
    let exe = std::fs::read_link("/proc/thread-self/exe").unwrap_or_default();
    let _ = std::fs::write(
        rings.join(format!("exec-{pid}")),
        format!("{}\t{why}", exe.display()),
    );
}
