//! Getting the agent into a running process that shadowgraph did not
//! start: one of its threads is stopped with ptrace and made to create a
//! memfd, which we fill with the agent's bytes, and to `dlopen` it from
//! its own libc; the other threads run on. The memfd makes the agent's
//! path valid in the target's mount namespace whatever ours is. An agent
//! already in the process (one loaded before, or a process started under
//! `shadowgraph record`) is found in its maps and reused.

pub mod agent;
pub mod inject;
pub mod record;

use inject::{Stopped, DATA};
use std::path::Path;

/// The memfd's name, as `/proc/PID/maps` shows it (`/memfd:NAME (deleted)`).
const MEMFD_NAME: &str = "shadowgraph-agent";

/// Why the agent could not be brought into a process: a one-line message
/// that names the process and the cause.
#[derive(Debug)]
pub struct AttachError(pub String);

impl AttachError {
    /// `e`, met on process `pid`, in one line that says what it means.
    fn about(pid: i32, e: std::io::Error) -> AttachError {
        AttachError(format!("process {pid}: {}", describe(e, pid)))
    }
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How the agent came to be in the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// It was there already.
    Reused,
    /// It was loaded now.
    Now,
}

/// A mapping of `/proc/PID/maps`.
struct Mapping {
    start: u64,
    end: u64,
    executable: bool,
    /// Its offset in the file.
    offset: u64,
    path: String,
}

/// The mappings of process `pid`.
fn maps(pid: i32) -> Result<Vec<Mapping>, AttachError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| AttachError::about(pid, e))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (start, end) = f.next()?.split_once('-')?;
            let perms = f.next()?;
            let offset = u64::from_str_radix(f.next()?, 16).ok()?;
            let (_dev, _inode) = (f.next()?, f.next()?);
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                executable: perms.contains('x'),
                offset,
                path: f.collect::<Vec<_>>().join(" "),
            })
        })
        .collect())
}

/// The thread ids of process `pid` now.
fn task_ids(pid: i32) -> Result<Vec<i32>, AttachError> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| AttachError::about(pid, e))?
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

/// A one-line cause for an error about process `pid`.
fn describe(e: std::io::Error, pid: i32) -> String {
    match e.raw_os_error() {
        Some(libc::ESRCH) | Some(libc::ENOENT) => format!("no such process {pid}"),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            match scope.as_str() {
                "1" | "2" | "3" => format!(
                    "permission denied (kernel.yama.ptrace_scope is {scope}: run as root, or \
                     set it to 0 with `sysctl kernel.yama.ptrace_scope=0`)"
                ),
                _ => "permission denied (a process of another user: run as root)".into(),
            }
        }
        Some(libc::EBUSY) => {
            "permission denied: it is already being traced (a debugger or strace?)".into()
        }
        _ => e.to_string(),
    }
}

/// The process tracing `pid` with ptrace, if one does.
fn tracer_of(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&t| t != 0)
}

/// Whether the agent is mapped in process `pid`.
pub fn agent_loaded(pid: i32) -> Result<bool, AttachError> {
    Ok(maps(pid)?.iter().map(|m| &m.path).any(|p| {
        p.contains(&format!("/memfd:{MEMFD_NAME}"))
            || Path::new(p)
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| is_agent_file(f) && p.contains("shadowgraph"))
    }))
}

/// Whether a file name is the agent's, as `shadowgraph record` preloads
/// it: written out from the CLI (`agent-ID.so`), or a build's own.
fn is_agent_file(name: &str) -> bool {
    (name.starts_with("agent-") && name.ends_with(".so")) || name == "libshadowgraph_agent.so"
}

/// The run-time addresses of the dynamic symbols `names` (None for one
/// it does not define) of the first object of process `pid` whose file
/// name `which` accepts; None if no object is accepted.
fn symbols_in(
    pid: i32,
    which: impl Fn(&str) -> bool,
    names: &[&str],
) -> Result<Option<Vec<Option<u64>>>, AttachError> {
    let found = sized_symbols_in(pid, which, names)?;
    Ok(found.map(|f| f.into_iter().map(|s| s.map(|s| s.0)).collect()))
}

/// A symbol found: its run-time address and its size.
type Found = Option<(u64, u64)>;

/// [`symbols_in`], with each symbol's size.
fn sized_symbols_in(
    pid: i32,
    which: impl Fn(&str) -> bool,
    names: &[&str],
) -> Result<Option<Vec<Found>>, AttachError> {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let maps = maps(pid)?;
    let Some((start, path)) = maps.iter().find_map(|m| {
        let file = Path::new(&m.path).file_name().and_then(|f| f.to_str());
        (m.offset == 0 && file.is_some_and(&which)).then_some((m.start, &m.path))
    }) else {
        return Ok(None);
    };
    // The file as the target sees it, in its mount namespace.
    let inside = format!("/proc/{pid}/root{path}");
    let bytes =
        std::fs::read(&inside).map_err(|e| AttachError(format!("process {pid}: {inside}: {e}")))?;
    let obj = object::File::parse(&*bytes)
        .map_err(|e| AttachError(format!("process {pid}: {path}: {e}")))?;
    let first = obj.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    let mut found = vec![None; names.len()];
    // By their bytes, the few names asked for first: checking every
    // symbol's name as text (and whether it is defined) took libc's
    // thousands of symbols milliseconds of the attach.
    for s in obj.dynamic_symbols() {
        let Ok(name) = s.name_bytes() else {
            continue;
        };
        if let Some(i) = names.iter().position(|n| n.as_bytes() == name) {
            if s.is_definition() {
                found[i] = Some((start - first + s.address(), s.size()));
            }
        }
    }
    Ok(Some(found))
}

/// The thread of process `pid` to stop: the main one while it lives,
/// else any other.
fn pick_thread(pid: i32) -> Result<i32, AttachError> {
    let alive = |tid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.chars().next()))
            .flatten()
            .is_some_and(|state| state != 'Z' && state != 'X')
    };
    if alive(pid) {
        return Ok(pid);
    }
    task_ids(pid)?
        .into_iter()
        .find(|&t| alive(t))
        .ok_or_else(|| AttachError(format!("process {pid} has no live thread")))
}

/// Whether thread `tid` of process `pid` is one of the agent's own (a
/// recording's serving thread, or one registering for membarrier): it
/// runs none of the program's code and is never held.
fn is_agent_thread(pid: i32, tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).is_ok_and(|c| {
        let c = c.trim_end();
        c == "shadowgraph" || c == shadowgraph::sys::REGISTERING_THREAD
    })
}

/// The executable ranges of the agent in process `pid` (loaded by
/// `record -p`, or preloaded by `record`).
fn agent_code(pid: i32) -> Result<Vec<(u64, u64)>, AttachError> {
    let name = format!("/memfd:{MEMFD_NAME}");
    let preloaded = |p: &str| {
        Path::new(p)
            .file_name()
            .and_then(|f| f.to_str())
            .is_some_and(is_agent_file)
    };
    Ok(maps(pid)?
        .into_iter()
        .filter(|m| m.executable && (m.path.contains(&name) || preloaded(&m.path)))
        .map(|m| (m.start, m.end))
        .collect())
}

/// A thread of process `pid`, whose agent is loaded already, held stopped
/// where it runs none of the agent's code (not one of the agent's own
/// threads): the agent's code it is made to call may then take the
/// agent's locks. Preferably one whose pc, and every word of the top 64
/// KiB of its stack, lie outside the agent; after 200 ms without one,
/// one whose words inside the agent are all stale ([`returns_into`]):
/// a thread blocked in a system call keeps, in slots its frames never
/// wrote, return addresses the agent's code pushed there while it ran
/// deeper in an earlier traced call, which would otherwise hold every
/// thread of a program that sleeps there off for as long as it does.
/// Tried for 2 s.
fn hold_outside_agent(pid: i32) -> Result<Stopped, AttachError> {
    let code = agent_code(pid)?;
    let started = std::time::Instant::now();
    loop {
        let lenient = started.elapsed() > std::time::Duration::from_millis(200);
        for tid in task_ids(pid)? {
            if is_agent_thread(pid, tid) {
                continue;
            }
            let Ok(t) = Stopped::seize(tid) else { continue };
            if !stopped_in(&t, &code) || (lenient && !returns_into(&t, &code)) {
                return Ok(t);
            }
        }
        if started.elapsed() > std::time::Duration::from_secs(2) {
            return Err(AttachError(format!(
                "process {pid}: every thread is busy in the agent (another session starting or \
                 ending?); try again"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether stopped thread `t` runs code in `ranges`, or returns to some:
/// its pc, or a word of the top 64 KiB of its stack, is inside one.
pub(crate) fn stopped_in(t: &Stopped, ranges: &[(u64, u64)]) -> bool {
    stack_words_in(t, ranges, |_| true)
}

/// Whether stopped thread `t` runs the agent's code (`ranges`) or may
/// return to it: its pc is inside, or a word of the top 64 KiB of its
/// stack is a return address there that can be live. A word that follows
/// a direct call from the agent's code to its own code (not to a PLT
/// stub, through which it calls out) is not: had that call not
/// returned, the thread would be in the agent's code, or in code the
/// agent called out to, whose return address is another such word.
fn returns_into(t: &Stopped, ranges: &[(u64, u64)]) -> bool {
    let inside = |w: u64| ranges.iter().any(|&(lo, hi)| lo <= w && w < hi);
    let read = |at: u64, out: &mut [u8]| inject::read_some(t.tid(), at, out) == out.len();
    stack_words_in(t, ranges, |w| {
        let mut call = [0u8; 5];
        // A direct call (E8 rel32) just before the word, inside the agent.
        if !inside(w.wrapping_sub(5)) || !read(w - 5, &mut call) || call[0] != 0xe8 {
            return true;
        }
        let rel = i32::from_le_bytes(call[1..].try_into().expect("4 bytes"));
        let target = w.wrapping_add_signed(rel.into());
        let mut head = [0u8; 8];
        if !inside(target) || !read(target, &mut head) {
            return true;
        }
        // A PLT stub: [endbr64] [bnd] jmp [rip + GOT slot].
        let mut code = &head[..];
        if code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
            code = &code[4..];
        }
        if code.starts_with(&[0xf2]) {
            code = &code[1..];
        }
        code.starts_with(&[0xff, 0x25])
    })
}

/// Whether stopped thread `t`'s pc is in `ranges`, or a word of the top
/// 64 KiB of its stack is and `counts` says it counts.
fn stack_words_in(t: &Stopped, ranges: &[(u64, u64)], counts: impl Fn(u64) -> bool) -> bool {
    let inside = |w: u64| ranges.iter().any(|&(lo, hi)| lo <= w && w < hi);
    let Ok((pc, sp)) = t.context() else {
        return true;
    };
    let mut stack = vec![0u8; 64 << 10];
    // A read that stops at the stack's end reads less: what it got is
    // checked.
    let got = inject::read_some(t.tid(), sp, &mut stack);
    inside(pc)
        || stack[..got]
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
            .any(|w| inside(w) && counts(w))
}

/// The code of process `pid` that runs with a lock of the loader's taken:
/// the loader's own (`dlopen`, `dlclose`, `dlsym` run there) and libc's
/// `dl_iterate_phdr` (whose callbacks run under its lock). A thread held
/// there may hold such a lock, which the first session's start, made
/// with every thread held, would wait for forever (it makes a thread,
/// whose TLS the loader sets up under its lock, and looks symbols up).
pub(crate) fn loader_code(pid: i32) -> Result<Vec<(u64, u64)>, AttachError> {
    let loader = |p: &str| {
        Path::new(p)
            .file_name()
            .and_then(|f| f.to_str())
            .is_some_and(|f| f.starts_with("ld-linux") || f.starts_with("ld-2."))
    };
    let mut code: Vec<(u64, u64)> = maps(pid)?
        .into_iter()
        .filter(|m| m.executable && loader(&m.path))
        .map(|m| (m.start, m.end))
        .collect();
    let libc_file = |f: &str| f == "libc.so.6" || (f.starts_with("libc-") && f.ends_with(".so"));
    if let Some(found) = sized_symbols_in(pid, libc_file, &["dl_iterate_phdr"])? {
        code.extend(found[0].map(|(at, size)| (at, at + size.max(1))));
    }
    Ok(code)
}

/// Whether the program of process `pid` names an interpreter (the
/// dynamic loader): its file has an `.interp` section.
fn is_dynamic(pid: i32) -> bool {
    use object::Object;
    std::fs::read(format!("/proc/{pid}/exe"))
        .ok()
        .is_some_and(|b| {
            object::File::parse(&*b).is_ok_and(|f| f.section_by_name(".interp").is_some())
        })
}

/// Brings the agent (its file's bytes, `agent`) into process `pid`, or
/// finds it there.
pub fn load_agent(pid: i32, agent: &[u8]) -> Result<Loaded, AttachError> {
    if let Some(tracer) = tracer_of(pid) {
        return Err(AttachError(format!(
            "process {pid} is already being traced by process {tracer} (a debugger or strace?)"
        )));
    }
    if agent_loaded(pid)? {
        return Ok(Loaded::Reused);
    }
    let libc_file = |f: &str| f == "libc.so.6" || (f.starts_with("libc-") && f.ends_with(".so"));
    const NEEDED: [&str; 4] = ["memfd_create", "dlopen", "dlerror", "close"];
    // A program that has only just started may not have its libc mapped
    // yet: a dynamic one (its file names an interpreter) gets a second.
    let started = std::time::Instant::now();
    let found = loop {
        match symbols_in(pid, libc_file, &NEEDED)? {
            Some(found) => break found,
            None if started.elapsed() < std::time::Duration::from_secs(1) && is_dynamic(pid) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            None => {
                return Err(AttachError(format!(
                    "process {pid} is not linked with libc dynamically (a static program \
                     cannot load the agent)"
                )))
            }
        }
    };
    let mut addrs = [0u64; NEEDED.len()];
    for ((a, f), name) in addrs.iter_mut().zip(&found).zip(NEEDED) {
        *a = f.ok_or_else(|| {
            AttachError(format!(
                "process {pid}: its libc has no `{name}` (glibc 2.34 or later is needed)"
            ))
        })?;
    }
    let [memfd_create, dlopen, dlerror, close] = addrs;
    let tid = pick_thread(pid)?;
    let err = |what: &str, e: std::io::Error| {
        AttachError(format!("process {pid}: {what}: {}", describe(e, pid)))
    };
    let mut t = Stopped::seize(tid).map_err(|e| err("cannot stop it", e))?;
    let mut name = MEMFD_NAME.as_bytes().to_vec();
    name.push(0);
    let fd = t
        .call(memfd_create, &[DATA, libc::MFD_CLOEXEC as u64], &name)
        .map_err(|e| err("memfd_create", e))? as i64 as i32;
    if fd < 0 {
        return Err(AttachError(format!("process {pid}: memfd_create failed")));
    }
    // The memfd is the target's; we fill it through its /proc entry.
    let filled = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, agent));
    let opened = filled
        .map_err(|e| err("cannot write the agent", e))
        .and_then(|()| {
            let mut path = format!("/proc/self/fd/{fd}").into_bytes();
            path.push(0);
            t.call(dlopen, &[DATA, libc::RTLD_NOW as u64], &path)
                .map_err(|e| err("dlopen", e))
        });
    // The mapping keeps the agent; the descriptor is not the program's.
    let _ = t.call(close, &[fd as u64], &[]);
    match opened? {
        0 => {
            let why = t
                .call(dlerror, &[], &[])
                .ok()
                .filter(|&p| p != 0)
                .and_then(|p| read_c_string(pid, p))
                .unwrap_or_else(|| "unknown error".into());
            Err(AttachError(format!(
                "process {pid}: dlopen of the agent failed: {why}"
            )))
        }
        _ => Ok(Loaded::Now),
    }
}

/// The NUL-terminated string at `addr` in process `pid` (up to 4 KiB).
fn read_c_string(pid: i32, addr: u64) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0u8; 4096];
    let n = mem.read_at(&mut buf, addr).ok()?;
    let end = buf[..n].iter().position(|&b| b == 0).unwrap_or(n);
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Write};
    use std::process::{Command, Stdio};

    /// Threads blocked in read, nanosleep, a futex wait and epoll_wait are
    /// each stopped and made to call `getpid` (and a function that
    /// faults, reported as such, and `pause`, given up); then the agent
    /// is loaded
    /// (and found the second time). No call the program made fails with
    /// EINTR, its output is as untraced, and it exits 0.
    #[test]
    fn calls_in_blocked_threads_restart_their_system_calls() {
        let dir = shadowgraph_testkit::scratch::scratch_root("shadowgraph-cli-unit");
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("blocked");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blocked.c");
        shadowgraph_testkit::cc::compile(&[&src], &["-O2", "-pthread"], &exe).unwrap();
        let mut child = Command::new(&exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        // Every thread blocked in its call.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let libc_file = |f: &str| f == "libc.so.6";
        let found = symbols_in(pid, libc_file, &["getpid", "pause"])
            .unwrap()
            .unwrap();
        let (getpid, pause) = (found[0].unwrap(), found[1].unwrap());
        let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .map(|t| t.unwrap().file_name().to_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(tids.len(), 4, "{tids:?}");
        for &tid in &tids {
            let mut t = Stopped::seize(tid).unwrap();
            assert_eq!(
                t.call(getpid, &[], &[]).unwrap(),
                pid as u64,
                "thread {tid}"
            );
            // A call that faults is reported; the thread is put back.
            let e = t.call(0x10, &[], &[]).unwrap_err().to_string();
            assert!(e.starts_with("the call faulted at 0x10"), "{e}");
            // One that never returns is given up when asked; the thread
            // is put back (its own call restarted).
            let give_up = |waited: std::time::Duration| waited.as_millis() > 100;
            let e = t.call_or_give_up(pause, &[], &[], &give_up).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
            assert_eq!(t.call(getpid, &[], &[]).unwrap(), pid as u64);
        }
        assert!(!agent_loaded(pid).unwrap());
        assert_eq!(
            load_agent(pid, crate::launch::EMBEDDED_AGENT).unwrap(),
            Loaded::Now
        );
        assert!(agent_loaded(pid).unwrap());
        assert_eq!(
            load_agent(pid, crate::launch::EMBEDDED_AGENT).unwrap(),
            Loaded::Reused
        );
        child.stdin.as_mut().unwrap().write_all(b"x").unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(rest, "done\n");
        assert!(status.success(), "{status}");
    }

    #[test]
    fn a_missing_process_is_named() {
        let e = load_agent(999_999_999, b"").unwrap_err();
        assert_eq!(e.0, "process 999999999: no such process 999999999");
    }
}
