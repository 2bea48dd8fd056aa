//! The agent allocates nothing from the traced program's `malloc`.

mod common;

use common::*;
use std::process::Command;

/// A program whose own `malloc`/`calloc`/`realloc`/`free` return blocks
/// aligned to 8 bytes only, and are traced themselves: the agent starts,
/// traces the program's threads and its allocator's calls, and the
/// program's output is its untraced output.
#[test]
fn a_program_with_its_own_traced_8_aligned_malloc_is_traced() {
    let dir = workdir("own_malloc");
    let exe = build_fixture_with(&dir, "om", "own_malloc.c", &["-pthread"]);
    let plain = Command::new(&exe).output().unwrap();
    assert!(plain.status.success());
    for way in Way::ALL {
        let data = dir.join(format!("{}.data", way.name()));
        let o = record_run(&[], &way.with(&[]), &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{way:?}: {out}\n{err}");
        assert_eq!(out, String::from_utf8_lossy(&plain.stdout), "{way:?}");
        assert!(err.contains("(0 lost)"), "{way:?}: {err}");
        let rows = report_rows(&report_text(&data));
        assert_eq!(rows["work"].2, 401, "{way:?}: {rows:?}");
        assert_eq!(rows["thread"].2, 4, "{way:?}: {rows:?}");
        // Threads and stdio allocate through the program's calloc/malloc,
        // traced as any of its functions.
        assert!(
            rows["calloc"].2 + rows["malloc"].2 >= 4,
            "{way:?}: {rows:?}"
        );
    }
}

/// The same program built with plain `-pg`: its functions are traced
/// through stubs that lie below it (its 64 MiB heap takes the room above),
/// with its PLT's stubs between them and it. Every function is named, by
/// our views and by uftrace's reading of the recording.
#[test]
fn a_pg_program_whose_stubs_lie_below_it_is_named() {
    let dir = workdir("own_malloc_pg");
    let exe = dir.join("om");
    cc(
        &[&fixture("own_malloc.c")],
        &["-pg", "-O0", "-pthread"],
        &exe,
    );
    let data = dir.join("om.data");
    record_ok(&["--libcall"], &data, &exe);
    let rows = report_text(&data);
    for f in ["main", "thread", "work", "malloc", "free", "pthread_create"] {
        assert!(report_rows(&rows).contains_key(f), "{f}: {rows}");
    }
    assert!(!rows.contains("<"), "{rows}");
    if let Some(theirs) =
        uftrace_view_with("replay", &data, &["--tid", &tid_of_main(&data), "-D", "2"])
    {
        assert!(theirs.contains("| main() {"), "{theirs}");
        assert!(theirs.contains("|   pthread_create();"), "{theirs}");
        assert!(!theirs.contains("<"), "{theirs}");
    }
}

/// The recording's first thread (the program's main thread).
fn tid_of_main(data: &std::path::Path) -> String {
    let d = shadowgraph_data::dir::DataDir::open(data).unwrap();
    d.info.get("pid").unwrap().to_string()
}

/// A `-pg` program with its own `malloc` and `free`: nothing is recorded
/// after `main` (gprof's `_mcleanup` does not run, the agent's end is not
/// the program's calls), and no `gmon.out` is written, as with uftrace.
#[test]
fn nothing_after_main_of_a_pg_program_with_its_own_malloc() {
    let dir = workdir("malloc_after_main");
    let exe = build_fixture_with(&dir, "mam", "malloc_after_main.c", &["-pg", "-O0"]);
    let data = dir.join("mam.data");
    let o = record_run_in(&dir, &[], &["--libcall"], &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(!dir.join("gmon.out").exists());
    let ours = shape(&view_text("replay", &data));
    assert_eq!(
        ours.last().map(String::as_str),
        Some("D|} /* main */"),
        "{ours:#?}"
    );
    if require("uftrace", "uftrace's recording of the same program") {
        let theirs = dir.join("u.data");
        let o = Command::new("uftrace")
            .args(["record", "--no-sched", "-d"])
            .arg(&theirs)
            .arg(&exe)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        let theirs = uftrace_view("replay", &theirs).unwrap();
        assert_eq!(ours, shape(&theirs));
    }
}
