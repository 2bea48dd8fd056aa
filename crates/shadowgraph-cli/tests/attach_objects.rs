//! What `record -p` recordings of a running process trace beyond its
//! functions: library calls, as each recording chose (a recording with
//! `--no-libcall` sees none beside one that traces them, and one that
//! asks for them gets them after one that did not), and libraries the
//! program loads while recorded.

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

/// Writes `cmd` to the program and waits for its line `answer`.
fn tell(child: &mut Target, out: &mut impl std::io::BufRead, cmd: &[u8], answer: &str) {
    use std::io::Write;
    let stdin = child.stdin.as_mut().unwrap();
    stdin.write_all(cmd).unwrap();
    stdin.flush().unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), answer);
}

/// A library the program loads while recorded (its threads blocking
/// every signal) is recorded from then on, and leaves before it is
/// unloaded; one loaded between recordings joins the next. The program's
/// results stay right throughout.
#[test]
fn libraries_loaded_while_attached_are_followed() {
    let dir = workdir("attach_dlopen");
    let exe = build_fixture_with(&dir, "target", "attach_dlopen.c", &["-pthread"]);
    let lib = dir.join("libwork.so");
    build_lib(&fixture("attach_dlopen_lib.c"), &lib);
    let (mut child, mut out) = start_target(&exe, &[lib.to_str().unwrap()]);
    let pid = child.id();
    let a = dir.join("a.data");
    let opts = ["--duration", "1500ms", "--no-sched"];
    let mut rec = record_p_spawn(&pid.to_string(), &opts, &a);
    wait_attached(&mut rec);
    tell(&mut child, &mut out, b"l", "loaded");
    std::thread::sleep(std::time::Duration::from_millis(300));
    tell(&mut child, &mut out, b"c", "closed");
    let o = rec.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    // Its library calls' slots went with it: the recording's end wrote
    // nothing where the library was (mapped again by the program).
    tell(&mut child, &mut out, b"k", "intact");
    let rows = report_rows(&report_text(&a));
    assert!(rows["libwork"].2 > 10 && rows["inner"].2 > 30, "{rows:?}");
    assert!(rows["mid"].2 > 10, "{rows:?}");
    nests_exactly(&a);
    // Loaded while nothing records: the next recording traces it.
    tell(&mut child, &mut out, b"l", "loaded");
    let b = dir.join("b.data");
    let o = record_p(&pid.to_string(), &["--duration", "300ms", "--no-sched"], &b);
    assert!(o.status.success(), "{}", text(&o).1);
    let rows = report_rows(&report_text(&b));
    assert!(rows["libwork"].2 > 10, "{rows:?}");
    nests_exactly(&b);
    tell(&mut child, &mut out, b"c", "closed");
    tell(&mut child, &mut out, b"k", "intact");
    wait_entry(pid, &exe, "mid", false);
    assert_eq!(end_target(&mut child, &mut out), "bad=0\ndone\n");
}

/// A thread that loads and unloads a library again and again is often
/// inside the loader, holding its locks: the first recording, which starts
/// with every thread held and takes those locks, waits for a moment when
/// it is not, and never hangs; later recordings and the program's own
/// loads and unloads while recorded go on right.
#[test]
fn a_thread_inside_the_loader_never_hangs_an_attach() {
    let dir = workdir("attach_loader_busy");
    let exe = build_fixture_with(&dir, "target", "attach_loader_busy.c", &["-pthread"]);
    let lib = dir.join("libwork.so");
    build_lib(&fixture("attach_dlopen_lib.c"), &lib);
    for round in 0..6 {
        let (mut child, mut out) = start_target(&exe, &[lib.to_str().unwrap()]);
        for k in 0..2 {
            let data = dir.join(format!("r{round}.{k}.data"));
            let opts = ["--duration", "100ms", "--no-sched"];
            let what = format!("round {round}.{k}");
            let o = record_p_bounded(&child.id().to_string(), &opts, &data, &what);
            if !o.status.success() {
                // (Whether the program died says more than the message.)
                std::thread::sleep(std::time::Duration::from_millis(500));
                let program = child.try_wait();
                panic!("{what}: {}; the program: {program:?}", text(&o).1);
            }
            assert!(
                report_rows(&report_text(&data))["mid"].2 > 0,
                "round {round}.{k}"
            );
        }
        assert_eq!(
            end_target(&mut child, &mut out),
            "bad=0\ndone\n",
            "round {round}"
        );
    }
}
