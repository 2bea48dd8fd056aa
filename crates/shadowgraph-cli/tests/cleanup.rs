//! What shadowgraph leaves behind: nothing from a demo, and nothing that
//! `clean` (or the next `record`) does not remove after a killed `record`.

mod common;

use common::*;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `shadowgraph demo` in a temporary directory of its own: afterwards it
/// holds only the agent's private directory.
#[test]
fn demo_leaves_nothing_behind() {
    let tmp = workdir("demo_tmp");
    let o = shadowgraph()
        .arg("demo")
        .env("TMPDIR", &tmp)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("most calls first"), "{out}");
    let left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    assert_eq!(left, [format!("shadowgraph-{uid}")]);
}

/// The tests that run `clean` run one at a time: each would remove what
/// the other left to see removed.
static CLEAN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `record` of forever.c with its rings in `rings`, once the program runs.
fn start(rings: &Path, data: &Path, exe: &Path) -> (Child, i32) {
    start_with(rings, &[], data, exe)
}

/// [`start`] with record options `opts`.
fn start_with(rings: &Path, opts: &[&str], data: &Path, exe: &Path) -> (Child, i32) {
    let mut child = record_command(
        &[("SHADOWGRAPH_RINGS_DIR", rings.to_str().unwrap())],
        opts,
        data,
        exe,
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "running");
    let rec = child.id();
    let kids = std::fs::read_to_string(format!("/proc/{rec}/task/{rec}/children")).unwrap();
    let program = kids.split_whitespace().next().unwrap().parse().unwrap();
    (child, program)
}

fn kill9(pid: i32) {
    // SAFETY: killing a process this test started (or its child).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

/// A `record` killed with SIGKILL cannot remove its rings: `clean` does,
/// and leaves those of a recording still running.
#[test]
fn clean_removes_the_rings_of_a_killed_record_and_no_live_ones() {
    let _one = CLEAN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("clean");
    let exe = build_fixture(&dir, "forever", "forever.c");
    let rings = dir.join("rings");
    std::fs::create_dir_all(&rings).unwrap();
    let (mut killed, killed_program) = start(&rings, &dir.join("a.data"), &exe);
    let (mut live, live_program) = start(&rings, &dir.join("b.data"), &exe);
    let ring_dir = |c: &Child| rings.join(format!("shadowgraph-rings-{}", c.id()));
    assert!(ring_dir(&killed).is_dir() && ring_dir(&live).is_dir());
    kill9(killed.id() as i32);
    killed.wait().unwrap();
    kill9(killed_program);
    let o = shadowgraph()
        .arg("clean")
        .env("SHADOWGRAPH_RINGS_DIR", &rings)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains(&format!("removed {}", ring_dir(&killed).display())),
        "{out}"
    );
    assert!(!ring_dir(&killed).exists());
    assert!(
        ring_dir(&live).is_dir(),
        "a live recording's rings are kept"
    );
    kill9(live_program);
    live.wait().unwrap();
    assert!(!ring_dir(&live).exists(), "record removes its own rings");
    let o = Command::new(env!("CARGO_BIN_EXE_shadowgraph"))
        .arg("clean")
        .env("SHADOWGRAPH_RINGS_DIR", &rings)
        .output()
        .unwrap();
    assert!(!text(&o).0.contains("rings)"), "{}", text(&o).0);
}

/// A program recorded with `-g` and killed with SIGKILL cannot remove its
/// agent's FIFOs: `clean` does, and keeps those of a program still running.
#[test]
fn clean_removes_the_agent_fifos_of_a_killed_program_and_no_live_ones() {
    let _one = CLEAN.lock().unwrap_or_else(|e| e.into_inner());
    let dir = workdir("clean_fifos");
    let exe = build_fixture(&dir, "forever", "forever.c");
    let rings = dir.join("rings");
    std::fs::create_dir_all(&rings).unwrap();
    let (mut killed, killed_program) = start_with(&rings, &["-g"], &dir.join("a.data"), &exe);
    let (mut live, live_program) = start_with(&rings, &["-g"], &dir.join("b.data"), &exe);
    let fifo = |pid: i32| shadowgraph::session::agent_fifos(pid).0;
    assert!(fifo(killed_program).exists() && fifo(live_program).exists());
    kill9(killed_program);
    killed.wait().unwrap();
    assert!(fifo(killed_program).exists(), "SIGKILL leaves the FIFO");
    let o = shadowgraph().arg("clean").output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains(&format!("removed {}", fifo(killed_program).display())),
        "{out}"
    );
    assert!(!fifo(killed_program).exists());
    assert!(fifo(live_program).exists(), "a live program's FIFO is kept");
    kill9(live_program);
    live.wait().unwrap();
    let o = shadowgraph().arg("clean").output().unwrap();
    assert!(!fifo(live_program).exists(), "{}", text(&o).0);
}
