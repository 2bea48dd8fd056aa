//! uftrace's `read=` triggers when recording: at the entry of a call whose
//! function has one, what it reads is recorded as a built-in event after
//! the entry record (`read:proc/statm`: the process's memory in KB;
//! `read:page-fault`: its major and minor page faults) and kept in the
//! call's frame; at its return, the change since is recorded before the
//! exit record (`diff:…`), as uftrace records them; and `--watch cpu`'s
//! event where the processor changed. The reads are system calls (no
//! allocation, no lock, async-signal-safe).
//!
//! ```text
//!  the call's room (fgraph::triggers::SiteTrigger::room)
//!  +0   what was read at entry (STATM | PAGE_FAULT; 0: nothing)
//!  +8   vmsize, rss, shared (KB)        [STATM]
//!  +32  major, minor page faults        [PAGE_FAULT]
//! ```

use crate::fgraph::{self, filters::GraphFilter};
use crate::record::writer;
use shadowgraph_data::trigger::Reads;
use std::sync::atomic::Ordering;

/// `read=proc/statm`.
const STATM: u64 = 1;
/// `read=page-fault`.
const PAGE_FAULT: u64 = 2;
const STATM_AT: usize = 1;
const FAULTS_AT: usize = 4;
const WORDS: usize = 6;
/// uftrace's event ids: `read:proc/statm`, `read:page-fault`, and their
/// `diff:` at the return.
const READ_STATM: u64 = 100_001;
const READ_FAULTS: u64 = 100_002;
const DIFF_STATM: u64 = 100_003;
const DIFF_FAULTS: u64 = 100_004;

/// Opens this thread's event time word if no event holds it (a lone
/// tracer's calls take none): the records written until [`close_time`]
/// share one time, as uftrace's events share their call's entry or exit
/// time. True if it was opened here.
pub(super) fn open_time() -> bool {
    let w = fgraph::event_time();
    // Relaxed: this thread's word; a signal handler's event that lands
    // meanwhile leaves it 0 (later records take their own times).
    let open = w.load(Ordering::Relaxed) == 0;
    if open {
        w.store(crate::clock::EVENT_OPEN, Ordering::Relaxed);
    }
    open
}

/// Closes the word [`open_time`] opened (`opened`).
pub(super) fn close_time(opened: bool) {
    if opened {
        // Relaxed: as in `open_time`.
        fgraph::event_time().store(0, Ordering::Relaxed);
    }
}

/// What a function's `read=` actions read (a mask for [`at_entry`]; 0:
/// none), or why a recording cannot read it.
pub(super) fn mask(r: &Reads) -> Result<u8, String> {
    if r.pmu {
        return Err(
            "read=pmu-*: the processor's counters are not read when recording (proc/statm and \
             page-fault are)"
                .into(),
        );
    }
    Ok(((r.proc_statm as u64 * STATM) | (r.page_fault as u64 * PAGE_FAULT)) as u8)
}

/// The bytes a call of a function with `mask` keeps in its frame.
pub(super) fn room(mask: u8) -> u16 {
    if mask == 0 {
        0
    } else {
        (WORDS * 8) as u16
    }
}

/// At the entry of a call recorded at `depth` (its entry record written),
/// of a function reading `mask`: the events, and the values kept.
pub(super) fn at_entry(u: &fgraph::GraphUser, f: &GraphFilter, depth: u16, mask: u8) {
    let Some((p, len)) = f.room(u) else {
        return;
    };
    if len < WORDS * 8 {
        return;
    }
    // SAFETY: WORDS words of this call's frame, reserved for the tracer
    // (8-aligned), ours until it returns.
    let w = unsafe { std::slice::from_raw_parts_mut(p, WORDS) };
    let mask = mask as u64;
    if mask & STATM != 0 {
        let v = statm();
        w[STATM_AT..STATM_AT + 3].copy_from_slice(&v);
        emit(u, depth, READ_STATM, &v);
    }
    if mask & PAGE_FAULT != 0 {
        let v = faults();
        w[FAULTS_AT..FAULTS_AT + 2].copy_from_slice(&v);
        emit(u, depth, READ_FAULTS, &v);
    }
    w[0] = mask;
}

/// At the return of a call recorded at `depth`, before its exit record:
/// the change since its entry of what it read there.
pub(super) fn at_exit(u: &fgraph::GraphUser, f: &GraphFilter, depth: u16) {
    let Some((p, len)) = f.room(u) else {
        return;
    };
    if len < WORDS * 8 {
        return;
    }
    // SAFETY: as in `at_entry`: the words this call's entry wrote.
    let w = unsafe { std::slice::from_raw_parts(p, WORDS) };
    let diff = |now: &mut [u64], then: &[u64]| {
        for (n, t) in now.iter_mut().zip(then) {
            *n = n.wrapping_sub(*t);
        }
    };
    if w[0] & STATM != 0 {
        let mut v = statm();
        diff(&mut v, &w[STATM_AT..STATM_AT + 3]);
        emit(u, depth, DIFF_STATM, &v);
    }
    if w[0] & PAGE_FAULT != 0 {
        let mut v = faults();
        diff(&mut v, &w[FAULTS_AT..FAULTS_AT + 2]);
        emit(u, depth, DIFF_FAULTS, &v);
    }
}

/// uftrace's `watch:cpu` event id.
const WATCH_CPU: u64 = 100_011;

std::thread_local! {
    /// The processor this thread's last `watch:cpu` event named (-1:
    /// none yet). (A const-initialised Cell: no allocation, no destructor.)
    static CPU: std::cell::Cell<i32> = const { std::cell::Cell::new(-1) };
}

/// `--watch cpu`: at an entry (after its record) or a return (before its
/// record) of a call recorded at `depth`, a `watch:cpu` event if the
/// thread runs on another processor than its last event said, as
/// uftrace's (its data: the processor, 4 bytes).
pub(super) fn watch_cpu(u: &fgraph::GraphUser, depth: u16) {
    // SAFETY: sched_getcpu takes nothing; it reads rseq's cpu_id or asks
    // the vDSO (no lock, no allocation).
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 || CPU.with(|c| c.replace(cpu)) == cpu {
        return;
    }
    let mut data = [0u8; 8];
    data[..2].copy_from_slice(&4u16.to_le_bytes());
    data[2..6].copy_from_slice(&cpu.to_le_bytes());
    writer::emit_event(u.private, depth, WATCH_CPU, fgraph::event_time(), &data);
}

/// The event `id` with `values`, as uftrace lays out its data: their
/// length (2 bytes), the values, padding to 8 bytes.
fn emit(u: &fgraph::GraphUser, depth: u16, id: u64, values: &[u64]) {
    let mut data = [0u8; 32];
    let n = 8 * values.len();
    data[..2].copy_from_slice(&(n as u16).to_le_bytes());
    for (i, v) in values.iter().enumerate() {
        data[2 + 8 * i..10 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    let len = (2 + n).next_multiple_of(8);
    writer::emit_event(u.private, depth, id, fgraph::event_time(), &data[..len]);
}

/// The process's size, resident and shared memory in KB
/// (`/proc/self/statm`, in 4 KiB pages there); zeros if unreadable.
fn statm() -> [u64; 3] {
    const PATH: &[u8] = b"/proc/self/statm\0";
    let mut buf = [0u8; 128];
    // SAFETY: system calls with a NUL-terminated path and a buffer of
    // ours; the descriptor is closed before returning.
    let n = unsafe {
        let fd = libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            PATH.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return [0; 3];
        }
        let n = libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len());
        libc::syscall(libc::SYS_close, fd);
        n
    };
    let mut out = [0u64; 3];
    let text = &buf[..n.max(0) as usize];
    for (o, field) in out.iter_mut().zip(text.split(|&b| b == b' ')) {
        *o = field
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .fold(0u64, |a, &b| a * 10 + (b - b'0') as u64)
            * 4;
    }
    out
}

/// The process's major and minor page faults (`getrusage`).
fn faults() -> [u64; 2] {
    // SAFETY: a zeroed rusage of ours, filled by the kernel.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::syscall(libc::SYS_getrusage, libc::RUSAGE_SELF, &mut ru) != 0 {
            return [0; 2];
        }
        [ru.ru_majflt as u64, ru.ru_minflt as u64]
    }
}
