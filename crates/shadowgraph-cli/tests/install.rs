//! `cargo install` gives a working tool: the binary carries its agent, so
//! it records from any directory, and a copy of it elsewhere does too.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn an_installed_binary_records_from_another_directory() {
    let dir = workdir("install");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = workspace.join("target");
    let root = dir.join("root");
    // A target directory of its own (the test's cargo holds the lock of
    // the workspace's), kept between runs; the agent's build is shared.
    let o = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["install", "--locked", "--offline", "--quiet", "--path"])
        .arg(workspace.join("crates/shadowgraph-cli"))
        .arg("--root")
        .arg(&root)
        .arg("--target-dir")
        .arg(target.join("install-test"))
        .env("SHADOWGRAPH_AGENT_TARGET_DIR", target.join("agent"))
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(o.status.success(), "cargo install: {}", text(&o).1);
    let installed = root.join("bin/shadowgraph");
    let size = std::fs::metadata(&installed).unwrap().len();
    assert!(size < 24 << 20, "the installed binary has {size} bytes");

    // The binary alone, somewhere else, run from a third directory, with
    // nothing telling it where an agent is: it writes out its own, into a
    // private directory under TMPDIR.
    let elsewhere = dir.join("elsewhere");
    let cwd = dir.join("cwd");
    let tmp = dir.join("tmp");
    for d in [&elsewhere, &cwd, &tmp] {
        std::fs::create_dir_all(d).unwrap();
    }
    let copy = elsewhere.join("shadowgraph");
    std::fs::copy(&installed, &copy).unwrap();
    let exe = build_fixture(&dir, "prog", "fib20.c");
    for bin in [&installed, &copy] {
        let run = |args: &[&str]| {
            let o = Command::new(bin)
                .args(args)
                .current_dir(&cwd)
                .env_remove("SHADOWGRAPH_AGENT")
                .env_remove("XDG_RUNTIME_DIR")
                .env("TMPDIR", &tmp)
                .output()
                .unwrap();
            let (out, err) = text(&o);
            assert!(
                o.status.success(),
                "{} {args:?}: {out}\n{err}",
                bin.display()
            );
            out
        };
        run(&["record", "--", exe.to_str().unwrap()]);
        let replay = run(&["replay"]);
        assert!(replay.contains("main() {"), "{replay}");
        std::fs::remove_dir_all(cwd.join("shadowgraph.data")).unwrap();
    }
    // One agent file, private to the user, named by its contents.
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let private = tmp.join(format!("shadowgraph-{uid}"));
    let agents: Vec<_> = std::fs::read_dir(&private).unwrap().flatten().collect();
    assert_eq!(agents.len(), 1, "{agents:?}");
    let name = agents[0].file_name().into_string().unwrap();
    assert!(
        name.starts_with("agent-") && name.ends_with(".so"),
        "{name}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&private).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}
