//! `record -p` recordings of one process, each with its own choice of
//! library calls: a recording with `--no-libcall` sees none beside one
//! that traces them, and one that asks for them gets them after one that
//! did not.

mod common;

use common::attach::*;
use common::*;

/// Recording `a` (`opts_a`) runs while `b` (`opts_b`) comes and goes.
fn overlapping(
    pid: u32,
    exe: &std::path::Path,
    (a, opts_a): (&std::path::Path, &[&str]),
    (b, opts_b): (&std::path::Path, &[&str]),
) {
    let mut opts: Vec<&str> = vec!["--duration", "1500ms", "--no-sched"];
    opts.extend(opts_a);
    let first = record_p_spawn(&pid.to_string(), &opts, a);
    wait_entry(pid, exe, "mid", true);
    let mut opts: Vec<&str> = vec!["--duration", "300ms", "--no-sched"];
    opts.extend(opts_b);
    let o = record_p(&pid.to_string(), &opts, b);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    nests_exactly(a);
    nests_exactly(b);
}

#[test]
fn each_recording_chooses_its_library_calls() {
    let dir = workdir("attach_libcalls");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id();
    // The process's first recording traces no library call; a later one
    // asks for them.
    let (a, b) = (dir.join("a.data"), dir.join("b.data"));
    overlapping(pid, &exe, (&a, &["--no-libcall"]), (&b, &[]));
    let (ra, rb) = (report_rows(&report_text(&a)), report_rows(&report_text(&b)));
    assert!(ra["mid"].2 > 10 && !ra.contains_key("nanosleep"), "{ra:?}");
    assert!(rb["mid"].2 > 5 && rb["nanosleep"].2 > 5, "{rb:?}");
    // Then the other way round, library calls traced for the process now.
    let (c, d) = (dir.join("c.data"), dir.join("d.data"));
    overlapping(pid, &exe, (&c, &[]), (&d, &["--no-libcall"]));
    let (rc, rd) = (report_rows(&report_text(&c)), report_rows(&report_text(&d)));
    assert!(rc["mid"].2 > 10 && rc["nanosleep"].2 > 10, "{rc:?}");
    assert!(rd["mid"].2 > 5 && !rd.contains_key("nanosleep"), "{rd:?}");
    wait_entry(pid, &exe, "mid", false);
    assert_eq!(end_target(&mut child, &mut out), "done\n");
}
