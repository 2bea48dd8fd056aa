//! Recordings sent over the network (`record --host`, `recv`), as
//! uftrace sends them: between two shadowgraphs, and between shadowgraph
//! and uftrace 0.13 either way.

mod common;

use common::*;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command};

/// A port nobody listens on now (the kernel's choice, given back).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    l.local_addr().unwrap().port()
}

/// A receiver: `recv -d DIR --port PORT ARGS` (or uftrace's), its output
/// in DIR.out; killed when dropped.
struct Receiver(Child);

impl Receiver {
    fn start(tool: Command, dir: &Path, port: u16, args: &[&str]) -> Receiver {
        let mut c = tool;
        let out = std::fs::File::create(dir.with_extension("out")).unwrap();
        c.args(["recv", "-d"])
            .arg(dir)
            .args(["--port", &port.to_string()])
            .args(args)
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        Receiver(c.spawn().unwrap())
    }

    /// Waits until it listens (a connection taken, and closed at once:
    /// ours only; not one that connected to itself, which a local port
    /// nobody listens on yet may make).
    fn wait_listening(self, port: u16) -> Receiver {
        for _ in 0..200 {
            if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                if s.local_addr().unwrap() != s.peer_addr().unwrap() {
                    return self;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("recv never listened on {port}");
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (10 s at most) until the receiver's output at `out` holds each
/// of `lines`.
fn said(out: &Path, lines: &[&str]) {
    let mut text = String::new();
    for _ in 0..1000 {
        text = std::fs::read_to_string(out).unwrap();
        if lines.iter().all(|l| text.contains(l)) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the receiver never said all of {lines:?}; it said:\n{text}");
}

/// `record --host localhost --port PORT -d NAME EXE`, run in `cwd`.
fn record_sending(cwd: &Path, port: u16, name: &str, exe: &Path) -> std::process::Output {
    let mut c = shadowgraph();
    c.current_dir(cwd)
        .args(["record", "--no-sched", "--host", "localhost"])
        .args(["--port", &port.to_string(), "-d", name])
        .arg(exe);
    c.output().unwrap()
}

const ABC: [&str; 4] = ["main() {", "a() {", "c() {", "getpid();"];

/// abc.c built as uftrace's tests build it (-O0 -pg: both tools trace it).
fn build_abc(dir: &Path) -> std::path::PathBuf {
    let exe = dir.join("abc");
    cc(&[&fixture("abc.c")], &["-O0", "-pg"], &exe);
    exe
}

/// A recording sent to `recv` arrives whole under the name it was sent
/// with, nothing left where it was recorded; `--run-cmd` runs in the
/// receiving directory before `record` returns; a second recording
/// under the same name moves the first aside, as `record` does.
#[test]
fn a_recording_sent_arrives_whole_and_run_cmd_runs() {
    let dir = workdir("recv");
    let exe = build_abc(&dir);
    let port = free_port();
    let got = dir.join("got");
    let replay = format!("{} replay -d sent", env!("CARGO_BIN_EXE_shadowgraph"));
    let _r = Receiver::start(shadowgraph(), &got, port, &["--run-cmd", &replay]);
    // (Started just now: record waits for it to listen.)
    let o = record_sending(&dir, port, "sent", &exe);
    let err = text(&o).1;
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("sent to localhost:{port} as sent")),
        "{err}"
    );
    assert!(!dir.join("sent").exists(), "kept here too");
    let out = std::fs::read_to_string(got.with_extension("out")).unwrap();
    shows_each(&out, &ABC);
    let received = got.join("sent");
    shows_each(&replay_text(&received), &ABC);
    let d = shadowgraph_data::dir::DataDir::open(&received).unwrap();
    for &t in &d.tids {
        calls_nest_exactly(&d, t, &[]).unwrap();
    }
    let o = record_sending(&dir, port, "sent", &exe);
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(got.join("sent.old").join("info").exists());
    if uftrace_missing("uftrace reading a received recording") {
        return;
    }
    shows_each(&uftrace_view("replay", &received).unwrap(), &ABC);
}

/// uftrace 0.13's `record --host` sends to our `recv`, and our `record
/// --host` to its `recv`: each side reads what arrived.
#[test]
fn recordings_go_between_uftrace_and_shadowgraph() {
    if uftrace_missing("sending recordings between uftrace and shadowgraph") {
        return;
    }
    let dir = workdir("recv-uftrace");
    let exe = build_abc(&dir);
    // uftrace's sender, our receiver.
    let port = free_port();
    let ours = dir.join("ours");
    let r = Receiver::start(shadowgraph(), &ours, port, &[]).wait_listening(port);
    let o = Command::new("uftrace")
        .current_dir(&dir)
        .args(["record", "--host", "localhost", "--port", &port.to_string()])
        .args(["-d", "from-uftrace"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    // (uftrace's sender does not wait for the receiver to be done.)
    let info = ours.join("from-uftrace").join("task.txt");
    for _ in 0..500 {
        if info.exists() && view_text("replay", &ours.join("from-uftrace")).contains("getpid") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    drop(r);
    let got = ours.join("from-uftrace");
    assert_eq!(
        replay_text(&got),
        uftrace_view("replay", &got).unwrap(),
        "our replay of what uftrace sent"
    );
    shows_each(&replay_text(&got), &ABC);
    // Our sender, uftrace's receiver.
    let port = free_port();
    let theirs = dir.join("theirs");
    let mut u = Command::new("uftrace");
    u.current_dir(&dir);
    // (Not probed: uftrace's receiver ends on a connection that sends
    // nothing; our sender waits for it to listen.)
    let _r = Receiver::start(u, &theirs, port, &[]);
    let o = record_sending(&dir, port, "from-us", &exe);
    assert!(o.status.success(), "{}", text(&o).1);
    let got = theirs.join("from-us");
    shows_each(&uftrace_view("replay", &got).unwrap(), &ABC);
}

/// What is not a recording is refused by name, and the receiver goes on
/// serving; a name that would leave its directory is refused; `record
/// --host` with nobody listening fails at once, saying where.
#[test]
fn bad_senders_and_a_missing_receiver_are_named() {
    let dir = workdir("recv-bad");
    let exe = build_abc(&dir);
    let port = free_port();
    let got = dir.join("got");
    let _r = Receiver::start(shadowgraph(), &got, port, &[]).wait_listening(port);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    drop(s);
    // A directory name that climbs out.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let name = b"../escaped";
    let mut m = vec![0xfa, 0xce, 0, 101];
    m.extend_from_slice(&(name.len() as u32).to_be_bytes());
    m.extend_from_slice(name);
    s.write_all(&m).unwrap();
    drop(s);
    let o = record_sending(&dir, port, "fine", &exe);
    assert!(o.status.success(), "{}", text(&o).1);
    shows_each(&replay_text(&got.join("fine")), &ABC);
    assert!(!dir.join("escaped").exists());
    // Each connection is served by a thread of its own: the refusals may
    // be printed after the later recording's line.
    said(
        &got.with_extension("out"),
        &[
            "not a recording (magic 0x4745)",
            "\"../escaped\": not a name below the receiving directory",
        ],
    );
    // Nobody on this port.
    let port = free_port();
    let start = std::time::Instant::now();
    let o = record_sending(&dir, port, "lost", &exe);
    assert!(!o.status.success());
    assert!(
        text(&o)
            .1
            .contains(&format!("--host localhost:{port}: cannot connect")),
        "{}",
        text(&o).1
    );
    assert!(start.elapsed().as_secs() < 10);
}
