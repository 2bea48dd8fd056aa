//! Starting a program under the agent: where the agent is, the program's
//! path, the settings every session shares, the program's exit status as
//! ours.

use shadowgraph::config;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `LD_PRELOAD` for the traced program: the agent first, then whatever the
/// user preloads already (kept, not replaced).
pub(crate) fn preload(agent: &Path) -> std::ffi::OsString {
    let mut v = agent.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// Bytes at a page's alignment: an ELF image whose headers can be read in
/// place.
#[repr(C, align(4096))]
struct PageAligned<B: ?Sized>(B);

static AGENT_BYTES: &PageAligned<[u8]> = &PageAligned(*include_bytes!(concat!(
    env!("OUT_DIR"),
    "/libshadowgraph_agent.so"
)));

/// The agent this binary was built with (build.rs), page aligned.
pub(crate) static EMBEDDED_AGENT: &[u8] = &AGENT_BYTES.0;
/// A name for [`EMBEDDED_AGENT`]'s bytes.
const AGENT_ID: &str = env!("SHADOWGRAPH_AGENT_ID");

/// The agent's shared object: `$SHADOWGRAPH_AGENT`, or the agent embedded
/// in this binary, written once to a private directory under a name that
/// its bytes determine (so that concurrent runs share it, and binaries of
/// other builds never take it for theirs).
pub(crate) fn agent_path() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SHADOWGRAPH_AGENT") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("SHADOWGRAPH_AGENT={} does not exist", p.display()))
        };
    }
    let dir = private_dir()?;
    let path = dir.join(format!("agent-{AGENT_ID}.so"));
    let fits = |m: std::fs::Metadata| m.is_file() && m.len() == EMBEDDED_AGENT.len() as u64;
    if std::fs::symlink_metadata(&path).is_ok_and(fits) {
        return Ok(path);
    }
    // Written whole or not at all: a concurrent run sees the file or none.
    shadowgraph_data::dir::write_whole(&path, EMBEDDED_AGENT)
        .map_err(|e| format!("cannot write the agent to {}: {e}", path.display()))?;
    Ok(path)
}

/// Removes the agents other builds of shadowgraph wrote out (and partial
/// files of interrupted writes) from the private directory: a process that
/// preloaded one keeps its mapping. Returns those removed, with their
/// sizes.
pub(crate) fn remove_other_agents() -> Vec<(PathBuf, u64)> {
    let Ok(dir) = private_dir() else {
        return Vec::new();
    };
    // (This build's agent, and a copy of it being written, stay.)
    let mine = format!("agent-{AGENT_ID}.so");
    let mut removed = Vec::new();
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("agent-") || name.starts_with(&mine) {
            continue;
        }
        let len = e.metadata().map(|m| m.len()).unwrap_or(0);
        if std::fs::remove_file(e.path()).is_ok() {
            removed.push((e.path(), len));
        }
    }
    removed
}

/// `$XDG_RUNTIME_DIR/shadowgraph`, else `$TMPDIR/shadowgraph-UID`: made
/// if missing, and used only if it is a directory of ours that nobody else
/// may write (a file preloaded into programs must not be replaceable by
/// another user).
fn private_dir() -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) if Path::new(&d).is_dir() => PathBuf::from(d).join("shadowgraph"),
        _ => std::env::temp_dir().join(format!("shadowgraph-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let m = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a private directory of this user (owner {}, mode {:o}): remove it, or set SHADOWGRAPH_AGENT",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    Ok(dir)
}

/// Whether `path` can be run under the agent: Ok(None) if it has sites
/// of its own, Ok(Some(why not)) if it has none but may start programs
/// that do (a script, or a dynamically linked launcher such as `make` or
/// `sh`: run, with the agent passed on to what they start), Err if nothing
/// it runs could be traced (a static program) or it cannot be read.
pub(crate) fn check_program(path: &Path) -> Result<Option<String>, String> {
    let script = std::fs::read(path)
        .map(|b| b.starts_with(b"#!"))
        .unwrap_or(false);
    if script {
        return Ok(Some("a script".to_string()));
    }
    let found = shadowgraph::elf::scan_file(path).map_err(|e| e.to_string())?;
    if found.hooks_unnamed {
        return Err(format!(
            "{}: built with -pg or -finstrument-functions and stripped of its symbols: its \
             functions cannot be found (keep its symbol table, name them with --with-syms DIR, \
             or build with -pg -mfentry -mrecord-mcount)",
            path.display()
        ));
    }
    match found.require_traceable_program() {
        Ok(()) => Ok(None),
        Err(_) if found.has_interpreter => Ok(Some("no patchable function entries".to_string())),
        Err(e) => Err(e.to_string()),
    }
}

/// `prog` itself if it contains a slash or is an executable file in the
/// current directory (as uftrace takes it), else its first match in
/// `$PATH`.
pub(crate) fn find_program(prog: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let here = Path::new(".").join(prog);
    if !prog.contains('/')
        && std::fs::metadata(&here)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    {
        return Ok(here);
    }
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{prog}: no such program"))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{prog}: not found in PATH"))
}

pub(crate) fn tempfile(what: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir();
    Ok(dir.join(format!("shadowgraph-{what}-{}", std::process::id())))
}

/// The program's exit status as ours; killed by a signal: 128 + the
/// signal's number, as a shell reports it.
pub(crate) fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    }
}

/// How returns come back: through site stubs unless `--hijack-returns`.
pub(crate) fn returns(hijack: bool) -> config::Returns {
    if hijack {
        config::Returns::Hijack
    } else {
        config::Returns::SiteStubs
    }
}

/// How code is written: `SHADOWGRAPH_TEXT_WRITE=procmem|mprotect`, else the
/// patcher's choice.
pub(crate) fn text_write() -> Result<Option<config::TextWrite>, String> {
    match std::env::var("SHADOWGRAPH_TEXT_WRITE").as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("procmem") => Ok(Some(config::TextWrite::ProcMem)),
        Ok("mprotect") => Ok(Some(config::TextWrite::Mprotect)),
        Ok(other) => Err(format!(
            "SHADOWGRAPH_TEXT_WRITE=`{other}`: procmem or mprotect"
        )),
    }
}

/// `clean`: removes what `record` processes and recorded programs killed
/// before their end left behind, and the agents of other builds; says what
/// it removed.
pub(crate) fn clean() {
    let rings = shadowgraph::record::shm::remove_stale_rings();
    let agents = remove_other_agents();
    let fifos = shadowgraph::session::remove_stale_agent_fifos();
    if rings.is_empty() && agents.is_empty() && fifos.is_empty() {
        println!("nothing to remove");
    }
    for (what, list) in [("rings", rings), ("an agent of another build", agents)] {
        for (path, bytes) in list {
            println!(
                "removed {} ({:.1} MB: {what})",
                path.display(),
                bytes as f64 / 1e6
            );
        }
    }
    for path in fifos {
        println!(
            "removed {} (the -g FIFO of a program that has ended)",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::EMBEDDED_AGENT;

    /// The agent's static TLS block, with its alignment's padding, fits in
    /// the 1664 bytes glibc keeps by default for objects loaded by `dlopen`
    /// with initial-exec TLS, as `record -p` loads the agent into a
    /// running program (which would fail with "cannot allocate memory in
    /// static TLS block").
    #[test]
    fn the_agents_static_tls_fits_glibcs_reserve_for_dlopen() {
        use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
        let elf = ElfFile64::<object::Endianness>::parse(EMBEDDED_AGENT).unwrap();
        let e = elf.endian();
        let headers = elf.elf_header().program_headers(e, EMBEDDED_AGENT).unwrap();
        let tls = (headers.iter())
            .find(|p| p.p_type(e) == object::elf::PT_TLS)
            .expect("the agent has a TLS segment");
        let (size, align) = (tls.p_memsz(e), tls.p_align(e));
        assert!(
            size + align <= 1664,
            "the agent's static TLS takes {size} bytes (aligned to {align}): more than glibc \
             keeps for dlopen; put fast_thread_local! variables together"
        );
    }
}
