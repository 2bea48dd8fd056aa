//! `shadowgraph bench …`: the benchmarks are a binary of their own
//! (`shadowgraph-bench`, crates/shadowgraph-bench), not part of the tool
//! `cargo install` gives: from a workspace build this runs it, building it
//! first if needed.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const BENCH: &str = "shadowgraph-bench";

/// Runs `shadowgraph-bench ARGS`, from beside this binary.
pub fn run(args: &[String]) -> Result<ExitCode, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot locate myself: {e}"))?;
    let bench = me.with_file_name(BENCH);
    if !bench.is_file() {
        build(&me)?;
    }
    let status = Command::new(&bench)
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", bench.display()))?;
    Ok(match status.code() {
        Some(c) => ExitCode::from(c.clamp(0, 255) as u8),
        None => ExitCode::FAILURE,
    })
}

/// Builds the benchmarks into `me`'s target directory, when `me` is a
/// binary of a workspace build (`…/target/<profile>/shadowgraph` under the
/// workspace).
fn build(me: &Path) -> Result<(), String> {
    let not_here = || {
        format!(
            "the benchmarks are not part of an installed shadowgraph: run them from a \
             workspace build (cargo run --release -- bench …), next to {}",
            me.display()
        )
    };
    let profile_dir = me.parent().ok_or_else(not_here)?;
    let profile = profile_dir.file_name().ok_or_else(not_here)?;
    let target = profile_dir.parent().ok_or_else(not_here)?;
    let workspace: PathBuf = target.parent().ok_or_else(not_here)?.to_owned();
    if !workspace
        .join("crates")
        .join(BENCH)
        .join("Cargo.toml")
        .is_file()
    {
        return Err(not_here());
    }
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(&workspace)
        .args(["build", "-p", BENCH])
        .arg("--target-dir")
        .arg(target);
    match profile.to_str() {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(p) => {
            cmd.args(["--profile", p]);
        }
        None => return Err(not_here()),
    }
    eprintln!("# building the benchmarks: {cmd:?}");
    let st = cmd
        .status()
        .map_err(|e| format!("cannot run cargo to build the benchmarks: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("building the benchmarks failed ({st})"))
    }
}
