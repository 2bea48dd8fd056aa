//! Starting a program under the agent: where the agent is, the program's
//! path, the settings every session shares, the program's exit status as
//! ours.

use shadowgraph::config;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub(crate) const AGENT: &str = "libshadowgraph_agent.so";

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

/// The agent's shared object: `$SHADOWGRAPH_AGENT`, or the newest of those
/// next to this binary (cargo puts it beside the binary, or in `deps/`
/// when it builds it as the CLI's dependency: the other may be a stale
/// copy from an earlier build).
pub(crate) fn agent_path() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SHADOWGRAPH_AGENT") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("SHADOWGRAPH_AGENT={} does not exist", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate myself: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    [
        dir.join(AGENT),
        dir.join("deps").join(AGENT),
        dir.join("../lib").join(AGENT),
    ]
    .into_iter()
    .filter_map(|c| Some((std::fs::metadata(&c).ok()?.modified().ok()?, c)))
    .max()
    .map(|(_, c)| c)
    .ok_or_else(|| {
        format!(
            "cannot find {AGENT} next to {} (build the workspace: cargo build --release, or set SHADOWGRAPH_AGENT)",
            exe.display()
        )
    })
}

/// `prog` itself if it contains a slash, else its first match in `$PATH`.
pub(crate) fn find_program(prog: &str) -> Result<PathBuf, String> {
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
