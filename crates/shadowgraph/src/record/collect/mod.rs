//! The writer outside the traced program: `shadowgraph record` drains the
//! threads' rings (files in a shared-memory directory, made by the traced
//! process's [`super::writer`]) into each instance's `<tid>.dat`, converting
//! times to nanoseconds on the way. The traced threads make no system call
//! for their records while the writer keeps up (one whose ring stays full
//! drains it into the same file itself, by turns with the writer: the
//! ring's drain lock), and what a crashed program had recorded is still in
//! the rings when the writer drains them for the last time.
//!
//! A program the traced one starts by exec is a *session* of its own: its
//! agent announces it with `session-<id>` (holding the session's directory)
//! before it makes any ring, and its rings, which carry the id, are drained
//! into that directory (laid out as the recording's own). Rings of an
//! unannounced session (the program itself, and its forked children) go to
//! the recording's directory.

mod spare;
pub mod threads;

use super::ring::drain::DRAINER;
use super::ring::{Drained, Ring};
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Records moved in one round that mean the writer is behind: the next
/// round starts without a pause (a ring holds 131,072 by default).
const BEHIND: u64 = 1 << 15;

/// Per instance: what was written and lost, and the first write failure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Records written.
    pub written: u64,
    /// Records lost.
    pub lost: u64,
    /// errno of the first failed write (0: none).
    pub errno: i32,
    /// Times moved forward to keep each thread's increasing, and the
    /// largest step back among them (ns): see `Ring::drain`.
    pub clock_steps_back: u64,
    /// The largest of those steps back, ns.
    pub clock_step_max: u64,
}

impl Totals {
    /// Adds `more` (another drain's, or another writer's): counts summed,
    /// the largest step back kept, the first failure kept.
    fn add(&mut self, more: Totals) {
        self.written += more.written;
        self.lost += more.lost;
        self.clock_steps_back += more.clock_steps_back;
        self.clock_step_max = self.clock_step_max.max(more.clock_step_max);
        if self.errno == 0 {
            self.errno = more.errno;
        }
    }
}

/// What the last drain leaves to tell.
#[derive(Clone, Debug, Default)]
pub struct Finished {
    /// Per instance directory (of the recording and of every session).
    pub totals: HashMap<PathBuf, Totals>,
    /// Programs started by exec and recorded as sessions: (directory,
    /// process).
    pub sessions: Vec<(PathBuf, i32)>,
    /// Programs started by exec in a traced process and not traced (pid,
    /// executable, why).
    pub execs: Vec<(i32, String, String)>,
    /// Processes with rings still alive when the writer stopped (children
    /// that outlived the traced program): their later calls are missing.
    pub running: Vec<i32>,
}

struct Mapped {
    name: OsString,
    ring: Ring,
    base: *mut libc::c_void,
    len: usize,
    /// The instance directory its records go to (the recording's when the
    /// ring names no known instance: it is counted there).
    dir: PathBuf,
    /// Its `<tid>.dat`, or why there is none (errno): resolved once, when
    /// the ring is mapped.
    fd: Result<i32, i32>,
    /// Bytes from `base` this mapping has page table entries for (see
    /// [`Mapped::map_written`]).
    mapped: usize,
}

impl Mapped {
    /// Maps in this mapping's pages of the records the thread has
    /// written, in one system call, before they are read: in the ring's
    /// first lap the drain would otherwise fault on each page (a
    /// millisecond per 2 MiB in a VM), at the start of the thread's
    /// recording, when a drain late by that long makes it wait. The
    /// pages exist (the thread wrote them): nothing is allocated.
    fn map_written(&mut self) {
        if self.mapped >= self.len {
            return;
        }
        let h = self.ring.header();
        let written = h.head.load(Ordering::Acquire) >> super::ring::SLOT_SHIFT;
        let end = if written >= h.capacity {
            self.len
        } else {
            let page = crate::sys::page_size();
            (super::ring::HEADER_BYTES + written as usize * 16) / page * page
        };
        if end > self.mapped {
            // SAFETY: mapped..end lies within our mapping of len bytes;
            // populating maps pages without changing them. It fails before
            // Linux 5.14: the drain then faults them in, as before.
            unsafe {
                libc::madvise(
                    (self.base as *mut u8).add(self.mapped).cast(),
                    end - self.mapped,
                    libc::MADV_POPULATE_READ,
                )
            };
            self.mapped = end;
        }
    }
}

// SAFETY: the mapping is owned by the collector, which one thread drives.
unsafe impl Send for Mapped {}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping, no longer referenced.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Drains the rings of one recording.
pub struct Collector {
    shm: PathBuf,
    /// The recording's directory, and each instance's place in it (empty:
    /// the directory itself).
    top: PathBuf,
    /// `top`, held open: the threads' files are made in the directory the
    /// recording started in, wherever it is moved meanwhile (another
    /// `record` moves an old one aside, a user may rename it), never in a
    /// new one made under its name. (None if it could not be opened: by
    /// name then.)
    top_dir: Option<std::sync::Arc<File>>,
    rel: Vec<PathBuf>,
    /// Announced sessions: id → (directory, process).
    sessions: HashMap<u64, (PathBuf, i32)>,
    rings: Vec<Mapped>,
    /// Ring files seen (mapped, retired, or not valid).
    seen: HashSet<OsString>,
    files: HashMap<(PathBuf, i32), File>,
    totals: HashMap<PathBuf, Totals>,
    /// Per instance directory: thread → (process, parent process).
    tasks: HashMap<PathBuf, std::collections::BTreeMap<i32, (i32, i32)>>,
    /// The length of the spare ring the writer makes for the program's
    /// first thread (see [`Collector::keep_spare`]), if any.
    spare: Option<usize>,
    /// The writer's nap after a round that moved records but was not
    /// behind (see [`Collector::set_ring_len`]).
    busy_nap: Duration,
    /// Where records with data are gathered on their way to a file (see
    /// [`Ring::drain_with`]): large, for few writes.
    gather: Vec<u8>,
    /// (k, n): this writer drains the rings of the threads whose id is k
    /// modulo n, of n writers (see [`Collector::spawn_n`]).
    share: (u32, u32),
    /// Whether dropping this collector removes the shared-memory directory
    /// (the first writer's, until its last drain: then the recording's
    /// end, [`conclude`], does).
    owns_shm: bool,
    /// The last drain passed over a ring its thread was draining itself:
    /// the writer is behind, and goes on without its nap.
    passed_over: bool,
}

/// [`Collector::gather`]'s length: as large as the chunks records without
/// data are written in.
const GATHER_BYTES: usize = 256 << 10;

/// [`Collector::busy_nap`] for rings of the default size (2 MiB: ~1.4 ms
/// of records at full speed).
const BUSY_NAP: Duration = Duration::from_micros(100);

/// Whether process `pid` exists and has not ended: a zombie (ended, not
/// yet reaped: an orphan waits for init a moment) is not running.
fn still_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command, which is in parentheses and may
        // hold any character: after the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X')),
        Err(_) => false,
    }
}

impl Collector {
    /// A collector for rings in `shm` (created, private to the user), of
    /// instances writing to `top.join(rel[inst])`.
    pub fn new(shm: &Path, top: &Path, rel: Vec<PathBuf>) -> io::Result<Collector> {
        crate::clock::init();
        let _ = std::fs::remove_dir_all(shm);
        std::fs::DirBuilder::new().mode(0o700).create(shm)?;
        Ok(Collector {
            shm: shm.to_owned(),
            top: top.to_owned(),
            top_dir: File::open(top).ok().map(std::sync::Arc::new),
            rel,
            sessions: HashMap::new(),
            totals: HashMap::new(),
            tasks: HashMap::new(),
            rings: Vec::new(),
            seen: HashSet::new(),
            files: HashMap::new(),
            spare: None,
            busy_nap: BUSY_NAP,
            gather: vec![0; GATHER_BYTES],
            share: (0, 1),
            owns_shm: true,
            passed_over: false,
        })
    }

    /// The threads' rings are `len` bytes (`-b`): the writer makes the
    /// first thread's ahead (`Collector::keep_spare`), and naps for less
    /// between drains of smaller ones, which fill sooner (a 64 KiB ring in
    /// ~45 µs): in proportion, 10 µs at least, with a timer slack of 1 µs
    /// instead of 50 (fib(30) with -b 64K waited 252 ms for the writer,
    /// with -b 256K 53 ms; now 60 and 15 ms, medians of 11 runs).
    pub fn set_ring_len(&mut self, len: usize) {
        let default = super::writer::shared_ring_len(None);
        self.busy_nap = BUSY_NAP
            .mul_f64(len as f64 / default as f64)
            .clamp(Duration::from_micros(10), BUSY_NAP);
        self.keep_spare(len);
    }

    /// Where instance `inst` of session `session` writes.
    fn dir_of(&self, session: u64, inst: usize) -> Option<PathBuf> {
        let base = self.sessions.get(&session).map_or(&self.top, |s| &s.0);
        self.rel.get(inst).map(|r| instance_dir(base, r))
    }

    /// Maps the rings created since the last scan. Rings are kept in the
    /// order their threads made them (a thread may make a second ring
    /// after closing its first, late in its exit): draining in that order
    /// keeps each `.dat` file in time order.
    pub fn scan(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.shm) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        // Announcements first: they precede their sessions' rings.
        entries.sort_by_key(|e| !e.file_name().to_string_lossy().starts_with("session-"));
        for e in entries {
            let name = e.file_name();
            if self.seen.contains(&name) {
                continue;
            }
            if let Some(id) = name
                .to_string_lossy()
                .strip_prefix("session-")
                .and_then(|v| v.parse::<u64>().ok())
            {
                // "<pid>\t<directory>"; complete once it ends with a newline.
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                if let Some((pid, dir)) = text
                    .strip_suffix('\n')
                    .and_then(|t| t.split_once('\t'))
                    .and_then(|(p, d)| Some((p.parse().ok()?, PathBuf::from(d))))
                {
                    self.sessions.insert(id, (dir, pid));
                    self.seen.insert(name);
                }
                continue;
            }
            if !name.to_string_lossy().ends_with(".ring") {
                continue;
            }
            // Another writer's (its thread's records all go through one
            // writer: its file is written in order).
            let (k, n) = self.share;
            if n > 1 && creation_order(&name).2 % n as u64 != k as u64 {
                self.seen.insert(name);
                continue;
            }
            match map_ring(&e.path()) {
                Some((ring, base, len)) => {
                    self.seen.insert(name.clone());
                    let h = ring.header();
                    let dir = self.dir_of(h.session, h.inst as usize);
                    let fd = self
                        .file(dir.as_deref(), h.tid)
                        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO));
                    if let Some(dir) = &dir {
                        self.tasks
                            .entry(dir.clone())
                            .or_default()
                            .insert(h.tid, (h.pid, h.ppid));
                    }
                    self.rings.push(Mapped {
                        name,
                        ring,
                        base,
                        len,
                        dir: dir.unwrap_or_else(|| self.top.clone()),
                        fd,
                        mapped: 0,
                    });
                }
                // Not initialised yet (or not a ring): looked at again at
                // the next scan.
                None => continue,
            }
        }
        self.rings.sort_by_key(|m| creation_order(&m.name));
    }

    /// Drains every mapped ring once; rings of exited threads are removed
    /// once empty. A ring its thread is draining itself (the writer was
    /// behind) is passed over this time, unless this is the `last` drain:
    /// then the program has ended, and a drain lock still held is one its
    /// holder died with. Returns the records moved, those the threads
    /// drained themselves included.
    pub fn drain(&mut self, last: bool) -> u64 {
        let mut moved = 0;
        let mut i = 0;
        self.passed_over = false;
        while i < self.rings.len() {
            self.rings[i].map_written();
            let m = &self.rings[i];
            // Read before draining: a ring closed then gets nothing more.
            let closed = m.ring.header().closed.load(Ordering::Acquire) != 0;
            // Its own thread's drain (the writer was behind) has it: next
            // time. At the last drain the program has ended: a lock held
            // still (after a moment for a process that outlived it) is one
            // its holder died with, in the middle of a chunk: what is left
            // is counted lost, untouched (its times may be converted
            // already, and part of the chunk written).
            let locked = !m.ring.try_lock_drain(DRAINER)
                && (!last || !lock_within(&m.ring, Duration::from_millis(100)));
            if locked && !last {
                self.passed_over = true;
                i += 1;
                continue;
            }
            let mut d = match (locked, m.fd) {
                (true, _) => Drained {
                    lost: m.ring.discard(),
                    ..Drained::default()
                },
                (false, Ok(fd)) => {
                    let d = m.ring.drain_with(fd, &mut self.gather);
                    m.ring.unlock_drain();
                    d
                }
                (false, Err(errno)) => {
                    let lost = m.ring.discard();
                    m.ring.unlock_drain();
                    Drained {
                        written: 0,
                        // No file to write to: the records are dropped, counted.
                        lost,
                        errno,
                        ..Drained::default()
                    }
                }
            };
            moved += d.written + d.lost;
            // What the thread drained itself, counted with ours (and as
            // moved: the writer was behind).
            let own = m.ring.take_own();
            moved += own.written + own.lost;
            d.written += own.written;
            d.lost += own.lost;
            d.clock_steps_back += own.clock_steps_back;
            if d.errno == 0 {
                d.errno = own.errno;
            }
            let t = match self.totals.get_mut(&m.dir) {
                Some(t) => t,
                None => self.totals.entry(m.dir.clone()).or_default(),
            };
            t.add(Totals {
                written: d.written,
                lost: d.lost,
                errno: d.errno,
                clock_steps_back: d.clock_steps_back,
                clock_step_max: d.clock_step_max,
            });
            if closed {
                let m = self.rings.remove(i);
                let _ = std::fs::remove_file(self.shm.join(&m.name));
                continue;
            }
            i += 1;
        }
        moved
    }

    fn file(&mut self, dir: Option<&Path>, tid: i32) -> io::Result<i32> {
        let dir = dir.ok_or_else(|| io::Error::other("ring of an unknown instance"))?;
        let key = (dir.to_owned(), tid);
        if let Some(f) = self.files.get(&key) {
            return Ok(f.as_raw_fd());
        }
        let name = format!("{tid}.dat");
        let f = match (&self.top_dir, dir.strip_prefix(&self.top)) {
            (Some(top), Ok(rel)) => crate::sys::open_append_at(top, &rel.join(name))?,
            _ => File::options()
                .create(true)
                .append(true)
                .open(dir.join(name))?,
        };
        let fd = f.as_raw_fd();
        self.files.insert(key, f);
        Ok(fd)
    }

    /// The last scan and drain (the traced program has exited): everything
    /// the rings hold goes to the files, each instance's `tasks` file says
    /// which process every thread belonged to, and the shared-memory
    /// directory goes.
    pub fn finish(self) -> Finished {
        let shm = self.shm.clone();
        conclude(&shm, vec![self.last_drain()])
    }

    /// This writer's last scan and drain: what it wrote, lost and saw.
    fn last_drain(mut self) -> Part {
        self.owns_shm = false;
        self.scan();
        self.drain(true);
        // A thread whose ring got no record (its tracer's filters took
        // none of its calls, while another tracer's made the rings of
        // every tracer at once): no file and no task, as a tracer alone
        // makes none, rather than an empty file the views take for
        // records lost.
        for ((dir, tid), f) in &self.files {
            if f.metadata().is_ok_and(|m| m.len() == 0) {
                let name = format!("{tid}.dat");
                match (&self.top_dir, dir.strip_prefix(&self.top)) {
                    (Some(top), Ok(rel)) => crate::sys::unlink_at(top, &rel.join(name)),
                    _ => drop(std::fs::remove_file(dir.join(name))),
                }
                if let Some(t) = self.tasks.get_mut(dir) {
                    t.remove(tid);
                }
            }
        }
        let mut running: Vec<i32> = self
            .rings
            .iter()
            .map(|m| m.ring.header().pid)
            .filter(|&pid| still_running(pid))
            .collect();
        running.sort_unstable();
        running.dedup();
        // A process that is exiting has closed its files (the end `record`
        // waited for) a moment before it becomes a zombie: a short grace.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(200);
        while !running.is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(2));
            running.retain(|&pid| still_running(pid));
        }
        // A process that died mid-record (killed) left slots claimed and
        // never published: lost, and counted.
        for m in &self.rings {
            let h = m.ring.header();
            if running.binary_search(&h.pid).is_err() {
                let shift = super::ring::SLOT_SHIFT;
                let unpublished = (h.reserve.load(Ordering::Acquire) >> shift)
                    .saturating_sub(h.head.load(Ordering::Acquire) >> shift);
                if unpublished > 0 {
                    self.totals.entry(m.dir.clone()).or_default().lost += unpublished;
                }
            }
        }
        self.rings.clear();
        Part {
            totals: std::mem::take(&mut self.totals),
            sessions: std::mem::take(&mut self.sessions),
            tasks: std::mem::take(&mut self.tasks),
            running,
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.rings.clear();
        if self.owns_shm {
            let _ = std::fs::remove_dir_all(&self.shm);
        }
    }
}

/// What one writer's last drain leaves: [`conclude`] merges those of
/// every writer of a recording.
#[derive(Default)]
struct Part {
    totals: HashMap<PathBuf, Totals>,
    sessions: HashMap<u64, (PathBuf, i32)>,
    /// Per instance directory: thread → (process, parent process).
    tasks: HashMap<PathBuf, std::collections::BTreeMap<i32, (i32, i32)>>,
    running: Vec<i32>,
}

/// Takes `ring`'s drain lock for the writer, waiting up to `wait` for its
/// holder: whether it got it.
fn lock_within(ring: &Ring, wait: Duration) -> bool {
    let t0 = std::time::Instant::now();
    while !ring.try_lock_drain(DRAINER) {
        if t0.elapsed() > wait {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// The recording's end, once every writer has drained for the last time
/// (`parts`): each instance's `tasks` file, the programs started by exec
/// that were not traced, and the shared-memory directory `shm` removed.
fn conclude(shm: &Path, parts: Vec<Part>) -> Finished {
    let mut totals: HashMap<PathBuf, Totals> = HashMap::new();
    let mut sessions = HashMap::new();
    let mut tasks: HashMap<PathBuf, std::collections::BTreeMap<i32, (i32, i32)>> = HashMap::new();
    let mut running = Vec::new();
    for p in parts {
        for (dir, t) in p.totals {
            totals.entry(dir).or_default().add(t);
        }
        sessions.extend(p.sessions);
        for (dir, t) in p.tasks {
            tasks.entry(dir).or_default().extend(t);
        }
        running.extend(p.running);
    }
    running.sort_unstable();
    running.dedup();
    for (dir, tasks) in &tasks {
        let mut text = String::from("# tid\tpid\tppid\n");
        for (tid, (pid, ppid)) in tasks {
            text.push_str(&format!("{tid}\t{pid}\t{ppid}\n"));
        }
        let _ = std::fs::write(dir.join("tasks"), text);
    }
    let mut execs = Vec::new();
    if let Ok(entries) = std::fs::read_dir(shm) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("exec-").and_then(|p| p.parse().ok()) {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                let (exe, why) = text.split_once('\t').unwrap_or((&text, ""));
                execs.push((pid, exe.to_string(), why.trim().to_string()));
            }
        }
    }
    execs.sort();
    let _ = std::fs::remove_dir_all(shm);
    let mut sessions: Vec<(PathBuf, i32)> = sessions.into_values().collect();
    sessions.sort();
    Finished {
        totals,
        sessions,
        execs,
        running,
    }
}

/// An instance's directory in a recording (or session) directory: `rel`
/// inside it, or (empty `rel`) the directory itself.
pub fn instance_dir(base: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        base.to_owned()
    } else {
        base.join(rel)
    }
}

/// (session, pid, tid, seq) of a ring file named
/// `<inst>-<pid>-<tid>-<seq>-<session>.ring`.
fn creation_order(name: &OsString) -> (u64, u64, u64, u64) {
    let name = name.to_string_lossy();
    let f: Vec<u64> = name
        .trim_end_matches(".ring")
        .split('-')
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    (at(3), at(0), at(1), at(2))
}

/// Maps a ring file, if it holds an initialised ring.
fn map_ring(path: &Path) -> Option<(Ring, *mut libc::c_void, usize)> {
    let f = File::options().read(true).write(true).open(path).ok()?;
    let len = f.metadata().ok()?.len() as usize;
    if len == 0 {
        return None;
    }
    let base = crate::sys::map_shared(f.as_raw_fd(), len, false)? as *mut libc::c_void;
    // SAFETY: base maps len bytes until we unmap it (Mapped's drop).
    match unsafe { Ring::attach(base as *mut u8, len) } {
        Some(r) => Some((r, base, len)),
        None => {
            // SAFETY: our mapping, unused.
            unsafe { libc::munmap(base, len) };
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::spare::make_spare;
    use super::*;
    use crate::record::ring::{ring_bytes, Depth};
    use shadowgraph_data::format::Kind;
    use std::sync::atomic::AtomicBool;

    /// A collector of one instance writing to `<tmp>/data`, its rings in
    /// `<tmp>/shm`, `tmp` a fresh directory named after `test`: (tmp, shm,
    /// top, collector).
    fn collector_in_tmp(test: &str) -> (PathBuf, PathBuf, PathBuf, Collector) {
        let tmp = std::env::temp_dir().join(format!("sg-{test}-{}", std::process::id()));
        let (shm, top) = (tmp.join("shm"), tmp.join("data"));
        std::fs::create_dir_all(&top).unwrap();
        let c = Collector::new(&shm, &top, vec![PathBuf::new()]).unwrap();
        (tmp, shm, top, c)
    }

    /// A process killed while recording: two records published, three
    /// claimed and never published (its writers were mid-record). The last
    /// drain writes the two and counts the three as lost.
    #[test]
    fn slots_a_killed_process_claimed_are_counted_lost() {
        let (tmp, shm, top, mut c) = collector_in_tmp("collect-test");
        // A process that is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id() as i32;
        child.wait().unwrap();
        let path = shm.join(format!("0-{dead}-{dead}-1-0.ring"));
        let len = ring_bytes(4096);
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(len as u64).unwrap();
        let base = crate::sys::map_shared(f.as_raw_fd(), len, false).unwrap();
        // SAFETY: a fresh shared mapping of the zeroed file's whole length,
        // page-aligned, never unmapped while the test runs.
        let ring = unsafe { Ring::init(base, 0, dead, dead, 4096, 0, 0, 0, false) };
        for i in 0..2 {
            let c = ring.claim_at(|| i, Kind::Entry, Depth::Given(0)).unwrap();
            ring.write(c.slot, c.time, Kind::Entry, c.depth, 0x1000);
            ring.publish(&c);
        }
        for _ in 0..3 {
            ring.claim_at(|| 9, Kind::Entry, Depth::Given(0)).unwrap();
        }
        c.scan();
        let done = c.finish();
        let t = done.totals[&top];
        assert_eq!((t.written, t.lost), (2, 3));
        let _ = std::fs::remove_dir_all(&tmp);
    }

    /// The spare ring: whole, zeroed and in memory when it gets its name;
    /// of threads racing for it, exactly one takes it (the others make
    /// their own), and none is made again.
    #[test]
    fn the_spare_ring_is_made_whole_and_taken_once() {
        use std::os::unix::fs::MetadataExt;
        let (tmp, shm, _, mut c) = collector_in_tmp("spare-test");
        let len = ring_bytes(4096);
        c.keep_spare(len);
        let spares = |c: &Collector| {
            let mut v: Vec<String> = std::fs::read_dir(&c.shm)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("spare"))
                .collect();
            v.sort();
            v
        };
        c.make_first_spare(&AtomicBool::new(false));
        c.make_first_spare(&AtomicBool::new(false));
        assert_eq!(spares(&c), [format!("spare-{len}")]);
        let m = std::fs::metadata(shm.join(format!("spare-{len}"))).unwrap();
        assert_eq!(m.len() as usize, len);
        assert!(m.blocks() as usize * 512 >= len, "its memory is allocated");

        // Eight threads race for it, as threads of forked processes would
        // (in one process only the first looks): one gets it.
        let dir = std::ffi::CString::new(shm.as_os_str().as_encoded_bytes()).unwrap();
        let taken: Vec<bool> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|t| {
                    let dir = dir.clone();
                    let shm = &shm;
                    s.spawn(move || {
                        let mut path = [0u8; 4096];
                        let name = shm.join(format!("0-1-{t}-{t}-0.ring"));
                        let b = name.as_os_str().as_encoded_bytes();
                        path[..b.len()].copy_from_slice(b);
                        let got = crate::record::writer::take_spare(&dir, len, &path);
                        if let Some(p) = got {
                            // SAFETY: the claimed mapping is len bytes long.
                            let ring = unsafe { std::slice::from_raw_parts_mut(p, len) };
                            assert!(ring.iter().all(|&b| b == 0), "a spare is zeroed");
                            ring[len - 1] = 1;
                            // SAFETY: our mapping, unused from here.
                            unsafe { libc::munmap(p.cast(), len) };
                        }
                        got.is_some()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(taken.iter().filter(|&&t| t).count(), 1, "{taken:?}");
        assert!(spares(&c).is_empty());
        c.make_first_spare(&AtomicBool::new(false));
        assert!(spares(&c).is_empty(), "one spare only");

        // A ring appeared while a spare was being made: given up whole.
        for e in std::fs::read_dir(&shm).unwrap().flatten() {
            std::fs::remove_file(e.path()).unwrap(); // the racers' rings
        }
        let (tmp_spare, spare) = (shm.join("spare.new"), shm.join("spare-late"));
        let appear = shm.join("0-1-1-1-0.ring");
        let e = std::thread::scope(|s| {
            let maker =
                s.spawn(|| make_spare(&tmp_spare, &spare, 256 << 20, &AtomicBool::new(false)));
            while !tmp_spare.exists() && !maker.is_finished() {
                std::thread::yield_now();
            }
            std::fs::write(&appear, b"").unwrap();
            maker.join().unwrap()
        });
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::Interrupted);
        assert!(!tmp_spare.exists() && !spare.exists());
        std::fs::remove_file(&appear).unwrap();

        // The program ended while a spare was being made: given up whole.
        let stop = AtomicBool::new(true);
        let (tmp_spare, spare) = (shm.join("spare.new"), shm.join("spare-late"));
        let e = make_spare(&tmp_spare, &spare, len, &stop).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Interrupted);
        assert!(!tmp_spare.exists() && !spare.exists());
        drop(c);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
