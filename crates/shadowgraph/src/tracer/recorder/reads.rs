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
    if let Some((p, _)) = f.room(u).filter(|r| r.1 >= WORDS * 8) {
        keep(p, mask);
        // SAFETY: the words `keep` wrote, this call's until it returns.
        let w = unsafe { std::slice::from_raw_parts(p, WORDS) };
        events(w, |id, v| emit(u, depth, id, v));
    }
}

/// Under a time filter, at the entry of a call of a function reading
/// `mask`: the values read, kept in its room (`f.room`), their events
/// written with its entry when it is known to last long enough
/// ([`emit_kept`]).
pub(super) fn keep_at_entry(u: &fgraph::GraphUser, f: &GraphFilter, mask: u8) {
    if let Some((p, _)) = f.room(u).filter(|r| r.1 >= WORDS * 8) {
        keep(p, mask);
    }
}

/// The events of the values a call's entry kept at `room` (its frame's
/// room of WORDS words, [`keep_at_entry`]), at its entry's `time` and
/// `depth`, right after its entry record was written late.
pub(super) fn emit_kept(inst: usize, room: *const u64, depth: u16, time: u64) {
    // SAFETY: WORDS words of a frame of this thread (the caller's or an
    // ancestor's, live below it) that its entry filled.
    let w = unsafe { std::slice::from_raw_parts(room, WORDS) };
    events(w, |id, v| emit_values(inst, depth, id, v, Some(time)));
}

/// Reads what `mask` asks into the room at `p` (WORDS words of a frame's
/// reserved bytes, ours until its call returns), the mask first.
fn keep(p: *mut u64, mask: u8) {
    // SAFETY: as said: WORDS reserved, 8-aligned words.
    let w = unsafe { std::slice::from_raw_parts_mut(p, WORDS) };
    let mask = mask as u64;
    if mask & STATM != 0 {
        w[STATM_AT..STATM_AT + 3].copy_from_slice(&statm());
    }
    if mask & PAGE_FAULT != 0 {
        w[FAULTS_AT..FAULTS_AT + 2].copy_from_slice(&faults());
    }
    w[0] = mask;
}

/// `emit` of each `read:` event of the values kept in `w`.
fn events(w: &[u64], mut emit: impl FnMut(u64, &[u64])) {
    if w[0] & STATM != 0 {
        emit(READ_STATM, &w[STATM_AT..STATM_AT + 3]);
    }
    if w[0] & PAGE_FAULT != 0 {
        emit(READ_FAULTS, &w[FAULTS_AT..FAULTS_AT + 2]);
    }
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

/// `--watch cpu`: at an entry (after its record) or a return (before its
/// record) of a call recorded at `depth`, a `watch:cpu` event if the
/// thread runs on another processor than its last event in the tracer's
/// records said, as uftrace's (its data: the processor, 4 bytes).
pub(super) fn watch_cpu(u: &fgraph::GraphUser, depth: u16) {
    // SAFETY: sched_getcpu takes nothing; it reads rseq's cpu_id or asks
    // the vDSO (no lock, no allocation).
    let cpu = unsafe { libc::sched_getcpu() };
    // (The thread's last event's processor is kept where the fused path,
    // which leaves the calls on another one to these callbacks, reads it.)
    if cpu < 0 || !crate::tracer::fused::cpu_moved(u.private, cpu as u32) {
        return;
    }
    let mut data = [0u8; 8];
    data[..2].copy_from_slice(&4u16.to_le_bytes());
    data[2..6].copy_from_slice(&cpu.to_le_bytes());
    writer::emit_event(u.private, depth, WATCH_CPU, fgraph::event_time(), &data);
}

/// The event `id` with `values`, as uftrace lays out its data: their
/// length (2 bytes), the values, padding to 8 bytes; at the thread's
/// event time.
fn emit(u: &fgraph::GraphUser, depth: u16, id: u64, values: &[u64]) {
    emit_values(u.private, depth, id, values, None);
}

/// [`emit`] into instance `inst`'s ring, at `time` if given.
fn emit_values(inst: usize, depth: u16, id: u64, values: &[u64], time: Option<u64>) {
    let mut data = [0u8; 32];
    let n = 8 * values.len();
    data[..2].copy_from_slice(&(n as u16).to_le_bytes());
    for (i, v) in values.iter().enumerate() {
        data[2 + 8 * i..10 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    let len = (2 + n).next_multiple_of(8);
    match time {
        Some(t) => writer::emit_event_at(inst, depth, id, t, &data[..len]),
        None => writer::emit_event(inst, depth, id, fgraph::event_time(), &data[..len]),
    }
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
