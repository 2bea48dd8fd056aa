//! Attaching to a running process (`record -p`): the commands, and what
//! is checked of the program and its recordings.

use super::*;

/// `shadowgraph record -p PID OPTS -d DATA`.
pub fn record_p_command(pid: &str, opts: &[&str], data: &std::path::Path) -> Command {
    let mut c = shadowgraph();
    c.args(["record", "-p", pid]).args(opts).arg("-d").arg(data);
    c
}

/// `record -p`, run to its end.
pub fn record_p(pid: &str, opts: &[&str], data: &std::path::Path) -> std::process::Output {
    record_p_command(pid, opts, data).output().unwrap()
}

/// `record -p`, run to its end, which must come within 30 s: a hang
/// fails the test (`what` names the case), the process killed.
pub fn record_p_bounded(
    pid: &str,
    opts: &[&str],
    data: &std::path::Path,
    what: &str,
) -> std::process::Output {
    let mut rec = record_p_spawn(pid, opts, data);
    let start = std::time::Instant::now();
    while rec.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() > 30 {
            let _ = rec.kill();
            panic!("{what}: record -p did not end");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    rec.wait_with_output().unwrap()
}

/// `record -p`, started in the background, its stderr piped.
pub fn record_p_spawn(pid: &str, opts: &[&str], data: &std::path::Path) -> Child {
    record_p_command(pid, opts, data)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Whether `entry` is an untraced site: the 5-byte nop, or the five
/// 1-byte nops the compiler wrote.
pub fn is_nop(entry: &[u8]) -> bool {
    entry == [0x0f, 0x1f, 0x44, 0, 0] || entry == [0x90; 5]
}

/// The 5 bytes at `function`'s entry in process `pid`.
pub fn entry_bytes(pid: u32, exe: &std::path::Path, function: &str) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let nm = Command::new("nm").arg(exe).output().unwrap();
    let addr = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find(|l| l.ends_with(&format!(" T {function}")))
        .map(|l| u64::from_str_radix(l.split(' ').next().unwrap(), 16).unwrap())
        .unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let exe = std::fs::canonicalize(exe).unwrap();
    let base = maps
        .lines()
        .find(|l| l.ends_with(exe.to_str().unwrap()))
        .map(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
        .unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut b = vec![0u8; 5];
    mem.read_exact_at(&mut b, base + addr).unwrap();
    b
}

/// Every thread's calls in the recording `data` nest exactly, none left
/// open (calls under way at the attach are not recorded, those under way
/// at the detach get their exits), and nothing was lost.
pub fn nests_exactly(data: &std::path::Path) {
    let d = shadowgraph_data::dir::DataDir::open(data).unwrap();
    assert!(!d.tids.is_empty(), "{}", data.display());
    for &tid in &d.tids {
        calls_nest_exactly(&d, tid, &[]).unwrap_or_else(|e| panic!("{}: {e}", data.display()));
    }
    assert_eq!(d.info.get("lost"), Some("0"), "{}", data.display());
}

/// Waits (20 s at most) until `function`'s entry in process `pid` is
/// patched (`traced`) or a nop again.
pub fn wait_entry(pid: u32, exe: &std::path::Path, function: &str, traced: bool) {
    let start = std::time::Instant::now();
    while is_nop(&entry_bytes(pid, exe, function)) == traced {
        assert!(
            start.elapsed().as_secs() < 20,
            "{function} traced: {}",
            !traced
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Reads `record`'s stderr (piped) until it says it is attached: the
/// recording and its helper are in place.
pub fn wait_attached(rec: &mut Child) {
    let mut err = BufReader::new(rec.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("# attached") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "record -p ended");
    }
    // (The rest is read, not kept: a full pipe would hold `record`.)
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
}
