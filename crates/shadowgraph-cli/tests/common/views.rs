//! Running a view of a recording, by shadowgraph or by uftrace, and
//! comparing the two.

use super::{build_fixture_with, record_ok, require, shadowgraph, text, workdir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Records `fixture` (built with `defs`) into `<name>/<name>.data`.
pub fn recording(name: &str, fixture: &str, defs: &[&str]) -> PathBuf {
    let dir = workdir(name);
    let exe = build_fixture_with(&dir, name, fixture, defs);
    let data = dir.join(format!("{name}.data"));
    record_ok(&[], &data, &exe);
    data
}

/// `TOOL VIEW -d DATA ARGS…` (`args[0]` the view).
pub fn run_view(tool: &mut Command, data: &Path, args: &[&str]) -> Output {
    tool.arg(args[0])
        .arg("-d")
        .arg(data)
        .args(&args[1..])
        .output()
        .unwrap()
}

/// [`run_view`]'s output, which must succeed.
pub fn view(tool: &mut Command, data: &Path, args: &[&str]) -> String {
    let o = run_view(tool, data, args);
    assert!(o.status.success(), "{args:?}: {}", text(&o).1);
    text(&o).0
}

/// Each view of `data` with each of `cases` prints what uftrace's prints
/// (all but `skip` first lines).
pub fn as_uftrace(data: &Path, cases: &[&[&str]], skip: usize) {
    if !require("uftrace", "the same views by uftrace") {
        return;
    }
    for args in cases {
        let tail = |s: String| s.lines().skip(skip).collect::<Vec<_>>().join("\n");
        assert_eq!(
            tail(view(&mut shadowgraph(), data, args)),
            tail(view(&mut Command::new("uftrace"), data, args)),
            "{args:?}"
        );
    }
}

/// `uftrace record --no-sched OPTS -d DATA EXE` (a directory there
/// before is replaced), which must succeed: uftrace's own recording of a
/// program, to compare with ours (without the schedule events it records
/// where perf lets it, which we do not).
pub fn uftrace_record(data: &Path, opts: &[&str], exe: &Path) {
    let _ = std::fs::remove_dir_all(data);
    let o = Command::new("uftrace")
        .args(["record", "--no-sched"])
        .args(opts)
        .arg("-d")
        .arg(data)
        .arg(exe)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "uftrace record {opts:?}: {}",
        text(&o).1
    );
}
