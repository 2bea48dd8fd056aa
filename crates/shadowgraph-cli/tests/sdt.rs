//! User SDT markers (`-E PROVIDER:EVENT`, `<sys/sdt.h>`'s `STAP_PROBE`):
//! each hit of a marker asked for is an event where its thread is, as
//! uftrace records and shows it, none lost while threads hit them at once.

mod common;

use common::attach::record_p;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn build(dir: &Path) -> PathBuf {
    build_fixture_with(dir, "sdt", "sdt_markers.c", &["-pthread"])
}

/// `shadowgraph dump`'s event lines of `name`.
fn events(dump: &str, name: &str) -> usize {
    let want = format!("[event] {name}(");
    dump.lines().filter(|l| l.contains(&want)).count()
}

#[test]
fn markers_are_events_where_uftrace_shows_them() {
    let dir = workdir("sdt_shown");
    let exe = build(&dir);
    let data = dir.join("ours.data");
    let o = record_run(&[], &["-E", "app:*"], &data, &exe, &[Path::new("one")]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out, "5\n");
    let ours = replay_body(&replay_text(&data));
    let shown = |l: &str| ours.iter().filter(|o| o.trim() == l).count();
    assert_eq!(
        (shown("/* app:tick */"), shown("/* app:tock */")),
        (5, 1),
        "{ours:#?}"
    );
    // uftrace shows our recording as we do, and records the same.
    as_uftrace(&data, &[&["replay"], &["replay", "--no-event"]], 0);
    if uftrace_missing("uftrace record -E") {
        return;
    }
    // (uftrace's on the program built for it.)
    let pg = dir.join("sdt-pg");
    cc(
        &[&fixture("sdt_markers.c")],
        &["-pg", "-O0", "-pthread"],
        &pg,
    );
    let theirs = dir.join("theirs.data");
    let _ = std::fs::remove_dir_all(&theirs);
    let u = Command::new("uftrace")
        .args(["record", "--no-sched", "--no-libcall", "-E", "app:*"])
        .args(["--match", "glob", "-d"])
        .arg(&theirs)
        .arg(&pg)
        .arg("one")
        .output()
        .unwrap();
    assert!(u.status.success(), "{}", text(&u).1);
    let theirs = uftrace_view("replay", &theirs).unwrap();
    assert_eq!(replay_body(&theirs), ours);
}

#[test]
fn every_hit_of_threads_at_once_is_recorded() {
    let dir = workdir("sdt_threads");
    let exe = build(&dir);
    let plain = Command::new(&exe).output().unwrap();
    for round in 0..3 {
        let data = dir.join(format!("t{round}.data"));
        let o = record_run(&[], &["-E", "app:*", "-E", "nope:*"], &data, &exe, &[]);
        let err = text(&o).1;
        assert!(o.status.success(), "{err}");
        assert_eq!(o.stdout, plain.stdout);
        assert!(err.contains("-E nope:*: no SDT marker"), "{err}");
        let dump = view_text("dump", &data);
        assert_eq!(events(&dump, "app:tick"), 4 * 5000, "{err}");
        assert_eq!(events(&dump, "app:tock"), 4 * 500);
        assert_eq!(events(&dump, "misc:skipped"), 0);
        let names = std::fs::read_to_string(data.join("events.txt")).unwrap();
        assert_eq!(names.lines().count(), 2, "{names}");
    }
}

/// Attached to a running program (`record -p`), its markers are armed
/// while its threads hit them, recorded until the detach, and given their
/// `nop`s back: the program runs on, its count its own.
#[test]
fn markers_armed_and_disarmed_while_threads_run() {
    let dir = workdir("sdt_attach");
    let exe = build(&dir);
    let (mut child, mut out) = start_target(&exe, &["serve"]);
    let pid = child.id().to_string();
    for round in 0..3 {
        let data = dir.join(format!("a{round}.data"));
        let o = record_p(&pid, &["--duration", "200ms", "-E", "app:tick"], &data);
        let err = text(&o).1;
        assert!(o.status.success(), "{err}");
        let dump = view_text("dump", &data);
        assert!(events(&dump, "app:tick") > 100, "{err}");
        // Every tick call recorded holds its event (the markers are
        // armed before the calls are traced, and disarmed after), but each
        // thread's last, which the detach cut short.
        let mut inside: std::collections::HashMap<&str, usize> = Default::default();
        let mut last_bad: std::collections::HashMap<&str, bool> = Default::default();
        let (mut calls, mut bad) = (0, 0);
        for l in dump.lines() {
            // (`TIME  TID: [KIND] …`)
            let tid = l
                .split(':')
                .next()
                .and_then(|h| h.split_whitespace().nth(1));
            let tid = tid.unwrap_or("");
            if l.contains("[entry] tick(") {
                inside.insert(tid, 0);
            } else if l.contains("[event] app:tick(") {
                if let Some(n) = inside.get_mut(tid) {
                    *n += 1;
                }
            } else if l.contains("[exit ] tick(") {
                if let Some(n) = inside.remove(tid) {
                    calls += 1;
                    bad += last_bad.insert(tid, n != 1).unwrap_or(false) as usize;
                }
            }
        }
        assert!(
            calls > 100 && bad == 0,
            "{calls} calls, {bad} without one event"
        );
    }
    let probe = {
        let nm = Command::new("readelf")
            .arg("-n")
            .arg(&exe)
            .output()
            .unwrap();
        let notes = String::from_utf8_lossy(&nm.stdout).into_owned();
        // The first probe listed is app:tick's (tick comes first).
        let at = notes.split("Location: 0x").nth(1).unwrap();
        u64::from_str_radix(&at[..16], 16).unwrap()
    };
    let base = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let bias = base
        .lines()
        .find(|l| l.ends_with(exe.to_str().unwrap()))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .unwrap();
    let mut byte = [0u8];
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    mem.read_exact_at(&mut byte, bias + probe).unwrap();
    assert_eq!(byte, [0x90], "the probe's nop is back");
    let n: u64 = end_target(&mut child, &mut out).trim().parse().unwrap();
    assert!(n > 0);
}

/// `--list-event` lists the markers of the program and its libraries in
/// uftrace's format, before the program's `main` (which does not run),
/// as `record` and as `live`; the same list as uftrace's.
#[test]
fn list_event_lists_the_markers_as_uftrace() {
    let dir = workdir("sdt_list");
    let exe = build(&dir);
    let want = "[SDT event] app:tick \n[SDT event] app:tock \n[SDT event] misc:skipped \n";
    for cmd in [&["record", "--list-event"][..], &["--list-event"]] {
        let o = shadowgraph()
            .args(cmd)
            .arg(&exe)
            .arg("one")
            .output()
            .unwrap();
        assert!(o.status.success(), "{cmd:?}: {}", text(&o).1);
        // (The program's own output, "5", is not there: it did not run.)
        assert_eq!(text(&o).0, want, "{cmd:?}");
    }
    if uftrace_missing("uftrace --list-event") {
        return;
    }
    let theirs = Command::new("uftrace")
        .arg("--list-event")
        .arg(&exe)
        .arg("one")
        .output()
        .unwrap();
    assert_eq!(text(&theirs).0, want);
}
