//! Builds the agent (`libshadowgraph_agent.so`) and embeds it in the
//! `shadowgraph` binary, so that an installed or copied binary carries the
//! agent it was built with (launch::agent_path writes it out at run time).
//!
//! Cargo cannot make a cdylib a dependency of a binary (artifact
//! dependencies are unstable), so this runs a second cargo on the agent's
//! package with a target directory of its own: the outer build holds the
//! lock of its own. The agent is always built optimised and without debug
//! information, whatever the outer profile.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let workspace = manifest
        .ancestors()
        .nth(2)
        .expect("crates/shadowgraph-cli sits two levels below the workspace");
    for watched in [
        "Cargo.lock",
        "Cargo.toml",
        "crates/shadowgraph-agent",
        "crates/shadowgraph/src",
        "crates/shadowgraph/Cargo.toml",
        "crates/shadowgraph-data/src",
        "crates/shadowgraph-data/Cargo.toml",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    println!("cargo:rerun-if-env-changed=SHADOWGRAPH_AGENT_TARGET_DIR");

    let out = PathBuf::from(env("OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out: the agent's own
    // target directory goes beside the profiles, kept between builds.
    let target = std::env::var_os("SHADOWGRAPH_AGENT_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| match out.ancestors().nth(4) {
            Some(t) => t.join("agent"),
            None => out.join("agent"),
        });
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--lib", "-p", "shadowgraph-agent"])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target);
    // What cargo tells a build script about this package is not for the
    // inner cargo (it would take them for its own settings).
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CARGO_PKG_")
            || k.starts_with("CARGO_CFG_")
            || k.starts_with("CARGO_FEATURE_")
            || k.starts_with("CARGO_PROFILE_")
            || [
                "CARGO_TARGET_DIR",
                "CARGO_BUILD_TARGET_DIR",
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_PRIMARY_PACKAGE",
                "OUT_DIR",
                "TARGET",
                "HOST",
                "PROFILE",
                "OPT_LEVEL",
                "DEBUG",
                "NUM_JOBS",
                // `cargo clippy` runs build scripts with clippy as the
                // compiler of the workspace: the agent is built, not linted.
                "RUSTC_WORKSPACE_WRAPPER",
                "CLIPPY_ARGS",
                "CLIPPY_CONF_DIR",
            ]
            .contains(&k.as_ref())
        {
            cmd.env_remove(k.as_ref());
        }
    }
    cmd.env("CARGO_PROFILE_RELEASE_DEBUG", "0");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the agent: {e}"));
    assert!(status.success(), "building the agent failed ({status})");

    let built = target.join("release").join("libshadowgraph_agent.so");
    let bytes = std::fs::read(&built)
        .unwrap_or_else(|e| panic!("cannot read the agent {}: {e}", built.display()));
    write_if_changed(&out.join("libshadowgraph_agent.so"), &bytes);
    // The agent's identity: the file it is written to at run time is named
    // by it, so that binaries of different builds never share one.
    println!(
        "cargo:rustc-env=SHADOWGRAPH_AGENT_ID={:016x}",
        fnv1a(&bytes)
    );
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("cargo sets {k} for build scripts"))
}

/// FNV-1a, 64 bits: a name for the bytes, not a defence against anyone.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn write_if_changed(path: &Path, bytes: &[u8]) {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return;
    }
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}
