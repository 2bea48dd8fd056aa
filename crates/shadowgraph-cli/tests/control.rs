//! Tracing switched off and on while the program runs (--control).

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// `shadowgraph record` started with `env` and `opts`, the program's stdin
/// and stdout piped to the test.
fn spawn_record(
    env: &[(&str, &str)],
    opts: &[&str],
    data: &Path,
    exe: &Path,
) -> std::process::Child {
    record_command(env, opts, data, exe)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Makes a FIFO at `p`.
fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(r, 0, "mkfifo {p:?}");
}

/// `record --control CTL,ACK`: writes `cmd` to CTL and waits for its ack.
struct Control {
    ctl: PathBuf,
    ack: std::io::BufReader<std::fs::File>,
}

impl Control {
    fn new(dir: &Path) -> (Control, String) {
        let (ctl, ack) = (dir.join("ctl"), dir.join("ack"));
        let _ = std::fs::remove_file(&ctl);
        let _ = std::fs::remove_file(&ack);
        mkfifo(&ctl);
        mkfifo(&ack);
        // Read-write: opening never blocks, whoever comes first.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&ack)
            .unwrap();
        let arg = format!("{},{}", ctl.display(), ack.display());
        (
            Control {
                ctl,
                ack: std::io::BufReader::new(f),
            },
            arg,
        )
    }

    /// Drives a program that prints a line and waits for one at each
    /// phase: after line `want`, sends `cmd`, then lets it go on; then
    /// waits for `record` to succeed.
    fn run_phases(&mut self, mut child: std::process::Child, phases: &[(&str, &str)]) {
        use std::io::{BufRead, Write};
        let mut stdin = child.stdin.take().unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        for (want, cmd) in phases {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            if line.trim() != *want {
                let o = child.wait_with_output().unwrap();
                panic!("{want}: {line:?}; {}", String::from_utf8_lossy(&o.stderr));
            }
            self.send(cmd);
            writeln!(stdin, "go").unwrap();
        }
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    fn send(&mut self, cmd: &str) {
        use std::io::{BufRead, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.ctl)
            .unwrap();
        writeln!(f, "{cmd}").unwrap();
        let mut line = String::new();
        self.ack.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ack", "{cmd}");
    }
}

/// `record --control` switches tracing off and on while the program runs:
/// only the calls made while it is on are recorded (with the calls under
/// way when it goes off: their exits), and `--disable` starts it off.
#[test]
fn tracing_switched_off_and_on_while_the_program_runs() {
    let dir = workdir("control");
    let exe = build_fixture(&dir, "onoff", "on_off.c");
    let (mut control, arg) = Control::new(&dir);
    for fused in [true, false] {
        let data = dir.join(format!("ctl-{fused}.data"));
        let opts = ["--control", &arg, "--disable"];
        let child = spawn_record(&[], &Way::of(fused).with(&opts), &data, &exe);
        control.run_phases(child, &[("p0", "enable"), ("p1", "disable")]);
        let body = replay_body(&replay_text(&data));
        assert_eq!(
            body,
            [
                "b() {",
                "  a();",
                "} /* b */",
                "b() {",
                "  a();",
                "} /* b */"
            ],
            "fused: {fused}"
        );
        let info = view_text("info", &data);
        assert!(info.contains("1 disables, 1 enables"), "{info}");
    }
    // A library loaded while tracing is off stays untraced, and is traced
    // once it is on.
    let plug = fixture("plugin_on_off.c");
    let lib = dir.join("libplug.so");
    build_lib(&plug, &lib);
    let host = build_fixture(&dir, "host", "dlopen_host.c");
    let data = dir.join("dl.data");
    let mut c = record_command(&[], &["--control", &arg], &data, &host);
    let child = c
        .arg(&lib)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    control.run_phases(child, &[("p0", "disable"), ("p1", "enable")]);
    let body = replay_body(&replay_text(&data));
    assert_eq!(
        body,
        [
            "main() {",
            "  plug_api() {",
            "    plug_leaf();",
            "  } /* plug_api */",
            "  plug_api() {",
            "    plug_leaf();",
            "  } /* plug_api */",
            "} /* main */"
        ]
    );
    record_refuses(&["--disable"], &exe, "--disable needs --control");
    let nothing = dir.join("nothing");
    record_refuses(&["--control", nothing.to_str().unwrap()], &exe, "mkfifo");
}

/// Switching tracing off and on 60 times while four threads call traced
/// functions (the sites patched and unpatched under them): no crash, and
/// every thread's records are balanced, nested and in time order.
#[test]
fn switching_tracing_while_threads_run_keeps_every_record_whole() {
    let dir = workdir("control-stress");
    let exe = build_fixture_with(&dir, "spin", "spin.c", &["-fno-builtin"]);
    let (mut control, arg) = Control::new(&dir);
    for way in Way::ALL {
        use std::io::{BufRead, Write};
        let data = dir.join(format!("spin-{}.data", way.name()));
        // Library calls too: their thunks' sites switch with the rest.
        let opts = way.with(&["--control", &arg, "-b", "256K", "--libcall"]);
        let mut child = spawn_record(&[], &opts, &data, &exe);
        let mut stdin = child.stdin.take().unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "running");
        for _ in 0..30 {
            control.send("disable");
            std::thread::sleep(std::time::Duration::from_millis(2));
            control.send("enable");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        writeln!(stdin, "stop").unwrap();
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{way:?}: {err}");
        let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
        let mut records = 0;
        for &tid in &d.tids {
            in_time_order(&d, tid).unwrap();
            depths_follow_the_records(&d, tid).unwrap();
            // Every recorded call's exit too: a call under way when
            // tracing went off still returned to its tracer.
            records += every_call_closes(&d, tid).unwrap_or_else(|e| panic!("{way:?}: {e}"));
        }
        assert!(records > 10_000, "{way:?}: {records} records");
        let report = report_text(&data);
        assert!(
            report.contains(" abs\n"),
            "{way:?}: no library call: {report}"
        );
        assert!(view_text("info", &data).contains("30 disables, 30 enables"));
    }
}

/// A program killed while its tracing is switched off: the recording
/// still says how often it was switched (written as each command takes
/// effect, not only at the program's end).
#[test]
fn a_killed_program_keeps_its_control_counts() {
    use std::io::BufRead;
    let dir = workdir("control-killed");
    let exe = build_fixture(&dir, "spin", "spin.c");
    let (mut control, arg) = Control::new(&dir);
    let data = dir.join("k.data");
    let mut child = spawn_record(&[], &["--control", &arg], &data, &exe);
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "running");
    for _ in 0..3 {
        control.send("disable");
        control.send("enable");
    }
    control.send("disable");
    let rec = child.id();
    let kids = std::fs::read_to_string(format!("/proc/{rec}/task/{rec}/children")).unwrap();
    let pid: i32 = kids.split_whitespace().next().unwrap().parse().unwrap();
    // SAFETY: killing the traced program, our child's child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success());
    let info = view_text("info", &data);
    assert!(info.contains("4 disables, 3 enables"), "{info}");
}

/// `record -g/--agent` (uftrace's agent): the program listens for
/// `record -p PID` and `live -p PID`, which switch its tracing with
/// `--trace off|on` instead of attaching recordings of their own (without
/// `--trace`, they only reach it); its FIFOs go when it ends.
#[test]
fn a_program_recorded_with_g_is_told_by_record_p() {
    use std::io::{BufRead, Write};
    let dir = workdir("agent");
    let exe = build_fixture(&dir, "onoff", "on_off.c");
    let data = dir.join("g.data");
    // (--keep-pid: the program is the process started.)
    let mut child = spawn_record(&[], &["-g", "--keep-pid"], &data, &exe);
    let pid = child.id().to_string();
    // (--duration: were no agent found, an attached recording would end
    // and show itself, and the test fail, rather than wait for a
    // program that waits for the test.)
    let tell = |args: &[&str]| -> String {
        let o = shadowgraph()
            .args(args)
            .args(["-p", &pid, "--duration", "5"])
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success() && out.is_empty(), "{args:?}: {out}{err}");
        err
    };
    let mut stdin = child.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut expect = |want: &str| {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), want);
    };
    expect("p0");
    assert_eq!(tell(&["live"]), "");
    let said = tell(&["record", "--trace=off"]);
    assert!(said.contains(&format!("# process {pid}: tracing switched off")));
    writeln!(stdin, "go").unwrap();
    expect("p1");
    tell(&["live", "--trace", "on"]);
    writeln!(stdin, "go").unwrap();
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    // Off from p0 to p1: neither b() is recorded.
    let body = replay_body(&replay_text(&data));
    assert_eq!(body, ["main() {", "  a();", "  c();", "} /* main */"]);
    let (ctl, ack) = shadowgraph::session::agent_fifos(pid.parse().unwrap());
    assert!(!ctl.exists() && !ack.exists());
}
