//! An object's separate debug file, where its full symbol table is when
//! the object itself was stripped (distributions ship them apart, in
//! `-dbg`/`-debuginfo` packages). Looked for as gdb does: by the object's
//! build id, `/usr/lib/debug/.build-id/NN/REST.debug`; then by its
//! `.gnu_debuglink` name, beside the object, in the `.debug` directory
//! beside it, and under `/usr/lib/debug` followed by the object's
//! directory. A file found by name is taken only if its build id, when
//! both have one, is the object's.

#![forbid(unsafe_code)]

use object::Object;
use std::path::{Path, PathBuf};

/// Where distributions install debug files.
const DEBUG_ROOT: &str = "/usr/lib/debug";

/// The debug file of the object `file` found at `path`, if one is there.
pub(crate) fn find(path: &Path, file: &object::File<'_>) -> Option<PathBuf> {
    let id = file.build_id().ok().flatten().filter(|id| id.len() > 1);
    if let Some(id) = id {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let by_id = Path::new(DEBUG_ROOT)
            .join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..]));
        if by_id.is_file() {
            return Some(by_id);
        }
    }
    let (name, _crc) = file.gnu_debuglink().ok().flatten()?;
    let name = Path::new(std::str::from_utf8(name).ok()?);
    // Only a file name: the link names no directory.
    if name.components().count() != 1 {
        return None;
    }
    let dir = std::fs::canonicalize(path).ok()?.parent()?.to_path_buf();
    let candidates = [
        dir.join(name),
        dir.join(".debug").join(name),
        Path::new(DEBUG_ROOT)
            .join(dir.strip_prefix("/").unwrap_or(&dir))
            .join(name),
    ];
    candidates.into_iter().find(|c| {
        c.is_file()
            && std::fs::canonicalize(c).ok() != std::fs::canonicalize(path).ok()
            && same_build(id, c)
    })
}

/// Whether the debug file at `c` is of the build `id` (either without one
/// counts as the same).
fn same_build(id: Option<&[u8]>, c: &Path) -> bool {
    let Some(id) = id else { return true };
    // (Mapped, not read: debug files are often large.)
    let Ok(data) = crate::sys::MappedFile::open(c) else {
        return false;
    };
    match object::File::parse(&*data).map(|f| f.build_id()) {
        Ok(Ok(Some(other))) => other == id,
        Ok(_) => true,
        Err(_) => false,
    }
}
