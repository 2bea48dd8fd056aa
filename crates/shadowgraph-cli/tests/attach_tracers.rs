//! `record -p PID --tracer …`: several tracers of one attached recording,
//! beside another recording of the same process.

mod common;

use common::attach::*;
use common::*;

/// The tracers of one recording start and end together: a tracer with
/// `filter=mid` records as many calls of mid as one without a filter
/// beside it, whether its recording is the process's first or comes
/// while another one records (their tracers then join the graph users
/// already there). Three threads call mid ten times between short naps.
#[test]
fn a_recordings_tracers_start_and_end_together() {
    let dir = workdir("attach_tracers_together");
    let exe = build_fixture_with(&dir, "busy", "attach_busy.c", &["-pthread"]);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id().to_string();
    let (a, b) = (dir.join("a.data"), dir.join("b.data"));
    let tracers = ["--tracer", "all", "--tracer", "mid:filter=mid"];
    let first = record_p_spawn(&pid, &[&["--duration", "1s"][..], &tracers].concat(), &a);
    wait_entry(child.id(), &exe, "mid", true);
    let o = record_p(&pid, &[&["--duration", "300ms"][..], &tracers].concat(), &b);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    for d in [&a, &b] {
        let all = report_rows(&report_text(&d.join("all")));
        let mid = report_rows(&report_text(&d.join("mid")));
        // (A call under way when the users are published, or when they
        // leave, may be offered to one of them and not the other: a
        // few nanoseconds' window, in each of the threads.)
        let (n, m) = (all["mid"].2, mid["mid"].2);
        assert!(
            n > 1000 && n.abs_diff(m) <= 4,
            "{}: {all:?} {mid:?}",
            d.display()
        );
        nests_exactly(&d.join("all"));
        nests_exactly(&d.join("mid"));
    }
    assert_eq!(end_target(&mut child, &mut out), "bad=0\n");
}

/// A recording attaches beside one with a function filter while every
/// thread of the program sleeps most of the time in a system call under
/// the filtered function: their stacks hold, in slots the sleeping
/// frames never wrote, return addresses the agent's code pushed there
/// while it ran deeper, which do not keep the recording from finding a
/// thread to start it. `info` says why neither knows the exit status.
#[test]
fn a_recording_attaches_beside_a_filtered_one_while_threads_sleep() {
    let dir = workdir("attach_beside_filtered");
    let exe = build_fixture_with(&dir, "rounds", "attach_rounds.c", &["-pthread"]);
    // (It ends by itself, after 3 s.)
    let (mut child, mut out) = start_target(&exe, &["3000"]);
    let pid = child.id().to_string();
    let (a, b) = (dir.join("a.data"), dir.join("b.data"));
    let first = record_p_spawn(&pid, &["--duration", "1s", "-F", "round_"], &a);
    wait_entry(child.id(), &exe, "round_", true);
    let o = record_p(&pid, &["--duration", "200ms"], &b);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    for d in [&a, &b] {
        let rows = report_rows(&report_text(d));
        assert!(
            rows["round_"].2 > 5 && rows["mid"].2 > 1000,
            "{}: {rows:?}",
            d.display()
        );
        nests_exactly(d);
        // Not ours to see: the process is not `record`'s child.
        assert!(
            view_text("info", d).contains(
                "exit status         : unknown (a running process, attached to by `record -p`)"
            ),
            "{}",
            d.display()
        );
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(rest, "done\n");
}
