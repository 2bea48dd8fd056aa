//! The drains' tests: rings filled and drained into files, read back.

use super::*;
use crate::record::ring::{ring_bytes, Depth, RingHeader};
use shadowgraph_data::format::{decode, encode, Kind};
use std::sync::atomic::AtomicBool;

/// A drain frees the ring a chunk at a time: while the writer is
/// still busy with a full ring (here blocked writing its second chunk
/// into a pipe nobody reads yet), the thread already has the first
/// chunk's room back. Every record still arrives, in order.
#[test]
fn a_drain_frees_each_chunk_as_it_is_written() {
    const CAP: u64 = 4 * DRAIN_CHUNK;
    let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
    // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
    // during the test.
    let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0, 0, false) };
    // SAFETY: the header of the ring just made; times as given (ns).
    unsafe { (*(base as *mut RingHeader)).tsc = 0 };
    for k in 0..CAP {
        let c = ring
            .claim_at(|| 1000 + k, Kind::Entry, Depth::Given(0))
            .unwrap();
        ring.write(c.slot, c.time, Kind::Entry, 0, k);
        ring.publish(&c);
    }
    assert!(!ring.refresh(), "the ring is full");
    let mut fds = [0; 2];
    // SAFETY: a pipe of our own (its buffer, 64 KiB here, is smaller than
    // a chunk's 256 KiB).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let [rd, wr] = fds;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let drain = s.spawn(|| {
            let d = ring.drain(wr);
            done.store(true, Ordering::Release);
            d
        });
        let mut got = Vec::with_capacity(CAP as usize * 16);
        let mut buf = vec![0u8; 1 << 16];
        let mut read_some = |got: &mut Vec<u8>, want: usize| {
            while got.len() < want {
                // SAFETY: reading into our own buffer.
                let n = unsafe {
                    libc::read(rd, buf.as_mut_ptr().cast(), buf.len().min(want - got.len()))
                };
                assert!(n > 0, "read: {}", std::io::Error::last_os_error());
                got.extend_from_slice(&buf[..n as usize]);
            }
        };
        read_some(&mut got, DRAIN_CHUNK as usize * 16);
        room_while_the_drain_is_blocked(&ring, rd, &done);
        assert_eq!(ring.header().tail.load(Ordering::Acquire), DRAIN_CHUNK);
        read_some(&mut got, CAP as usize * 16);
        let d = drain.join().unwrap();
        assert_eq!((d.written, d.lost, d.errno), (CAP, 0, 0));
        for (k, rec) in got.chunks_exact(16).enumerate() {
            let r = decode(rec.try_into().unwrap(), k as u64 * 16).unwrap();
            assert_eq!((r.time, r.addr), (1000 + k as u64, k as u64), "record {k}");
        }
    });
    // SAFETY: our pipe's ends.
    unsafe {
        libc::close(rd);
        libc::close(wr);
    }
}

/// A drain of records with data frees their slots as it gathers them: a
/// full ring's thread has room again while the writer is still blocked
/// writing (into a pipe nobody reads yet, smaller than the ring), not
/// once the whole drain is done. Every record and its data arrive, in
/// order.
#[test]
fn a_drain_of_records_with_data_frees_them_as_it_gathers_them() {
    const CAP: u64 = 1 << 14;
    const RECORDS: u64 = CAP / 2; // each with 8 bytes of data: 2 slots
    let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
    // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
    // during the test.
    let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0, 0, false) };
    // SAFETY: the header of the ring just made; times as given (ns).
    unsafe { (*(base as *mut RingHeader)).tsc = 0 };
    for k in 0..RECORDS {
        let c = ring
            .claim_with_data(|| 1000 + k, Kind::Entry, Depth::Given(0), 8)
            .unwrap();
        ring.write_with_data(c.slot, c.time, Kind::Entry, 0, k, &(!k).to_le_bytes());
        ring.publish(&c);
    }
    assert!(!ring.refresh(), "the ring is full");
    let mut fds = [0; 2];
    // SAFETY: a pipe of our own (its buffer, 64 KiB here, is smaller than
    // the ring's 384 KiB of records and data).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let [rd, wr] = fds;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let drain = s.spawn(|| {
            let d = ring.drain_with(wr, &mut [0u8; 16 << 10]);
            done.store(true, Ordering::Release);
            d
        });
        room_while_the_drain_is_blocked(&ring, rd, &done);
        let want = RECORDS as usize * 24;
        let (mut got, mut buf) = (Vec::with_capacity(want), vec![0u8; 1 << 16]);
        while got.len() < want {
            // SAFETY: reading into our own buffer.
            let n = unsafe { libc::read(rd, buf.as_mut_ptr().cast(), buf.len()) };
            assert!(n > 0, "read: {}", std::io::Error::last_os_error());
            got.extend_from_slice(&buf[..n as usize]);
        }
        let d = drain.join().unwrap();
        assert_eq!((d.written, d.lost, d.errno), (RECORDS, 0, 0));
        assert_eq!(got.len(), want);
        for (k, rec) in got.chunks_exact(24).enumerate() {
            let r = decode(rec[..16].try_into().unwrap(), k as u64 * 24).unwrap();
            let k = k as u64;
            assert_eq!((r.time, r.addr, r.more), (1000 + k, k, true), "record {k}");
            assert_eq!(rec[16..], (!k).to_le_bytes(), "record {k}'s data");
        }
    });
    // SAFETY: our pipe's ends.
    unsafe {
        libc::close(rd);
        libc::close(wr);
    }
}

/// The time conversion of a TSC ring whose calibration points are off
/// by up to ±100 ns each (as a writer migrating between vCPUs reads
/// them), drained every 100 µs, with now and then a time written 30 ms
/// late (a time filter's entry, after 30 ms of calls too short to
/// record): every converted time follows the one before it (no step
/// back); the times stray from the clock by the start rate's error in
/// the first piece (2 µs), half as much in each piece after.
#[test]
fn late_times_keep_their_place_under_noisy_calibration_points() {
    const CAP: u64 = 1 << 16;
    let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
    // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
    // during the test.
    let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0, 0, false) };
    // A clock of 2.6 ticks per ns from raw 10^9 (ns 0), whatever the
    // process's calibration: the header set as Ring::init would.
    let h = base as *mut RingHeader;
    let raw = |ns: u64| 1_000_000_000 + ns * 26 / 10;
    // SAFETY: the header of the ring just made, this thread's alone.
    unsafe {
        (*h).tsc = 1;
        for (f, v) in [
            (&(*h).seg_raw, raw(0)),
            (&(*h).seg_ns, 0),
            (&(*h).ref_raw, raw(0)),
            (&(*h).ref_ns, 0),
            // A start rate 2·10⁻⁵ off.
            (
                &(*h).seg_rate,
                ((1u128 << 32) * 10 / 26 * 100_002 / 100_000) as u64,
            ),
        ] {
            f.store(v, Ordering::Relaxed);
        }
    }
    let noise = |i: u64| (i * 7919 % 201) as i64 - 100;
    let (mut prev, mut ns, mut off_at_end) = (0u64, 0u64, 0);
    for drain in 0..3000u64 {
        // 100 µs of records, one every 25 ns; every 700th drain, after
        // 30 ms without records, the first is a late one, read just
        // after the last before the gap.
        let first = ring.header().head.load(Ordering::Relaxed) >> SLOT_SHIFT;
        let late = drain % 700 == 699;
        if late {
            ns += 30_000_000;
        }
        for k in 0..4000 {
            let t = if late && k == 0 {
                raw(ns - 30_000_000 - 10)
            } else {
                raw(ns + 25 * k)
            };
            let c = ring.claim_at(|| t, Kind::Entry, Depth::Given(0)).unwrap();
            ring.write(c.slot, c.time, Kind::Entry, 0, 0);
            ring.publish(&c);
        }
        ns += 100_000;
        let point = (raw(ns), (ns as i64 + noise(drain)) as u64);
        let last = ring.header().head.load(Ordering::Relaxed) >> SLOT_SHIFT;
        let (steps, _) = ring.convert_times(first, last, point);
        assert_eq!(steps, 0, "drain {drain}");
        for k in first..last {
            // SAFETY: a converted record's time word.
            let t = unsafe { ring.words().add(2 * (k & (CAP - 1)) as usize).read() };
            assert!(
                t > prev || k == first && drain == 0,
                "drain {drain}, record {k}"
            );
            prev = t;
        }
        let off = (prev as i64 - (ns - 25) as i64).abs();
        assert!(off <= 2_001, "drain {drain}: {off} ns off the clock");
        off_at_end = off;
        ring.header().tail.store(last, Ordering::Relaxed);
        ring.refresh();
    }
    // 420 ms in: the start rate's error halved each piece since.
    assert!(off_at_end < 300, "{off_at_end} ns off the clock at the end");
}

/// A producer thread fills a small ring as fast as it can while a
/// consumer thread drains it to a file: every record arrives once, in
/// order, intact (the ring wraps ~1000 times).
#[test]
fn producer_and_consumer_threads_lose_nothing() {
    const CAP: u64 = 1024;
    const N: u64 = 1_000_000;
    let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
    // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
    // during the test.
    let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0, 0, false) };
    let path = std::env::temp_dir().join(format!("sg-ring-test-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let done = AtomicBool::new(false);
    let tsc = ring.header().tsc != 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..N {
                let c = loop {
                    // Times from 1: each after the one before it.
                    if let Some(c) = ring.claim_at(|| i + 1, Kind::Lost, Depth::Follow) {
                        break c;
                    }
                    ring.refresh();
                    std::hint::spin_loop();
                };
                ring.write(c.slot, c.time, Kind::Entry, (i % 1024) as u16, i);
                ring.publish(&c);
            }
            done.store(true, Ordering::Release);
        });
        s.spawn(|| {
            use std::os::fd::AsRawFd;
            loop {
                let finished = done.load(Ordering::Acquire);
                let d = ring.drain(file.as_raw_fd());
                assert_eq!((d.lost, d.errno), (0, 0));
                if finished && d.written == 0 {
                    break;
                }
            }
        });
    });
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(bytes.len() as u64, N * 16);
    for (i, rec) in bytes.chunks_exact(16).enumerate() {
        let r = decode(rec.try_into().unwrap(), i as u64 * 16).unwrap();
        let i = i as u64;
        assert_eq!((r.addr, r.depth as u64), (i, i % 1024), "record {i}");
        if !tsc {
            assert_eq!(r.time, i + 1, "record {i}");
        }
    }
}

/// Times that step back (another CPU's TSC) or repeat are moved 1 ns
/// after the thread's previous one, across drains; steps back are
/// counted.
#[test]
fn a_threads_times_only_go_forward() {
    const CAP: u64 = 16;
    let base = crate::sys::map_anonymous(ring_bytes(CAP)).unwrap();
    // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
    // during the test.
    let ring = unsafe { Ring::init(base, 0, 1, 1, CAP, 0, 0, 0, false) };
    if ring.header().tsc != 0 {
        return; // times are converted: the steps would not be these
    }
    let path = std::env::temp_dir().join(format!("sg-ring-fwd-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let put = |times: &[u64]| {
        use std::os::fd::AsRawFd;
        for &t in times {
            let c = ring.claim_at(|| t, Kind::Lost, Depth::Follow).unwrap();
            ring.write(c.slot, c.time, Kind::Entry, 0, 0);
            ring.publish(&c);
        }
        let d = ring.drain(file.as_raw_fd());
        (d.written, d.clock_steps_back, d.clock_step_max)
    };
    assert_eq!(put(&[100, 200, 195, 195, 300, 50]), (6, 3, 250));
    // An equal time moves too, but is not a step back.
    assert_eq!(put(&[310, 301, 400, 400]), (4, 1, 9));
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let times: Vec<u64> = bytes
        .chunks_exact(16)
        .enumerate()
        .map(|(i, rec)| decode(rec.try_into().unwrap(), i as u64 * 16).unwrap().time)
        .collect();
    assert_eq!(times, [100, 200, 201, 202, 300, 301, 310, 311, 400, 401]);
}

/// Records with data after them (arguments) go out as uftrace lays
/// them out: the record, then the data, the ring's length words and
/// padding left out, across the ring's end too; their times are
/// converted, the data is not; the records without data around them
/// are untouched, and a ring with none drains as before.
#[test]
fn records_with_data_are_written_with_their_data() {
    // (In either layout: the compact one read back as uftrace's.)
    for compact in [false, true] {
        let (ring, file, f) = ring_into_file_in(16, &format!("data{compact}"), compact);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let mut expect: Vec<u8> = Vec::new();
        let mut time = 100u64;
        let mut put = |ring: &Ring, data: Option<Vec<u8>>, expect: &mut Vec<u8>| {
            time += 10;
            let kind = if time.is_multiple_of(20) {
                Kind::Exit
            } else {
                Kind::Entry
            };
            match data {
                None => {
                    let c = ring.claim_at(|| time, kind, Depth::Given(3)).unwrap();
                    ring.write(c.slot, c.time, kind, 3, 0x1234);
                    ring.publish(&c);
                    expect.extend_from_slice(&time.to_le_bytes());
                    expect.extend_from_slice(&encode(kind, 3, 0x1234).to_le_bytes());
                }
                Some(d) => {
                    let c = ring
                        .claim_with_data(|| time, kind, Depth::Given(3), d.len())
                        .unwrap();
                    ring.write_with_data(c.slot, c.time, kind, 3, 0x5678, &d);
                    ring.publish(&c);
                    expect.extend_from_slice(&time.to_le_bytes());
                    let w = encode(kind, 3, 0x5678) | crate::record::ring::MORE;
                    expect.extend_from_slice(&w.to_le_bytes());
                    expect.extend_from_slice(&d);
                }
            }
        };
        let data = |n: usize, tag: u8| Some((0..n).map(|i| tag ^ i as u8).collect::<Vec<u8>>());
        // 1 + 2 + 1 + 4 slots, drained; then 3 + 1 + 5 slots: the last
        // record's data wraps past the ring's end.
        put(&ring, None, &mut expect);
        put(&ring, data(8, 0x11), &mut expect);
        put(&ring, None, &mut expect);
        put(&ring, data(48, 0x22), &mut expect);
        let d = ring.drain(fd);
        assert_eq!((d.written, d.lost, d.errno), (4, 0, 0));
        assert!(ring.refresh());
        put(&ring, data(24, 0x33), &mut expect);
        put(&ring, None, &mut expect);
        put(&ring, data(64, 0x44), &mut expect);
        let d = ring.drain(fd);
        assert_eq!((d.written, d.lost, d.errno), (3, 0, 0));
        drop(f);
        let got = read_uftrace_layout(&file, compact);
        assert_eq!(got.len(), expect.len());
        assert!(
            got == expect,
            "the file differs from the records and data written"
        );
        // Each record decodes, its data skipped by its length.
        let mut at = 0;
        let mut n = 0;
        while at < got.len() {
            let r = decode(got[at..at + 16].try_into().unwrap(), at as u64).unwrap();
            at += 16 + if r.more { [8, 48, 24, 64][n / 2] } else { 0 };
            n += 1;
        }
        assert_eq!(n, 7);
    }
}

/// Long runs of records without data (written from the ring, across
/// its end in two writes) between records with data (copied), over
/// many drains: the file holds every record and its data in order.
#[test]
fn long_runs_between_records_with_data_are_written_in_order() {
    let (ring, file, f) = ring_into_file(256, "runs");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    let (mut expect, mut time, mut seed) = (Vec::<u8>::new(), 100u64, 7u64);
    let mut next = |m: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % m
    };
    let mut total = 0;
    for _ in 0..40 {
        // Up to 200 slots a round: a run of 0–149 plain records, then
        // a record with 8–64 bytes of data, until the round is full.
        let mut used = 0;
        let mut n = 0;
        while used < 150 {
            let run = next(150).min(199 - used);
            for _ in 0..run {
                time += 1;
                let c = ring
                    .claim_at(|| time, Kind::Entry, Depth::Given(2))
                    .unwrap();
                ring.write(c.slot, c.time, Kind::Entry, 2, 0x1000 + time);
                ring.publish(&c);
                expect.extend_from_slice(&time.to_le_bytes());
                expect.extend_from_slice(&encode(Kind::Entry, 2, 0x1000 + time).to_le_bytes());
            }
            used += run;
            n += run;
            let len = 8 * (1 + next(8) as usize);
            if used + 1 + data_slots(len) > 199 {
                break;
            }
            time += 1;
            let d: Vec<u8> = (0..len).map(|i| (time as u8) ^ i as u8).collect();
            let c = ring
                .claim_with_data(|| time, Kind::Exit, Depth::Given(3), d.len())
                .unwrap();
            ring.write_with_data(c.slot, c.time, Kind::Exit, 3, 0x2000, &d);
            ring.publish(&c);
            expect.extend_from_slice(&time.to_le_bytes());
            let w = encode(Kind::Exit, 3, 0x2000) | crate::record::ring::MORE;
            expect.extend_from_slice(&w.to_le_bytes());
            expect.extend_from_slice(&d);
            used += 1 + data_slots(len);
            n += 1;
        }
        let d = ring.drain(fd);
        assert_eq!((d.written, d.lost, d.errno), (n, 0, 0));
        assert!(ring.refresh());
        total += n;
    }
    drop(f);
    let got = std::fs::read(&file).unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(total > 2000);
    assert_eq!(got.len(), expect.len());
    assert!(got == expect, "the file differs from the records written");
}

/// A ring of `cap` slots whose times are nanoseconds already, and a file
/// `sg-ring-<name>-<pid>` to drain it into.
fn ring_into_file(cap: u64, name: &str) -> (Ring, std::path::PathBuf, std::fs::File) {
    ring_into_file_in(cap, name, false)
}

/// [`ring_into_file`], its consumer writing the compact layout if
/// `compact`.
fn ring_into_file_in(
    cap: u64,
    name: &str,
    compact: bool,
) -> (Ring, std::path::PathBuf, std::fs::File) {
    let base = crate::sys::map_anonymous(ring_bytes(cap)).unwrap();
    // SAFETY: a fresh zeroed mapping of the ring's size, never unmapped
    // during the test.
    let ring = unsafe { Ring::init(base, 0, 1, 1, cap, 0, 0, 0, compact) };
    // SAFETY: the header of the ring just made; times as given (ns).
    unsafe { (*(base as *mut RingHeader)).tsc = 0 };
    let file = std::env::temp_dir().join(format!("sg-ring-{name}-{}", std::process::id()));
    let f = std::fs::File::create(&file).unwrap();
    (ring, file, f)
}

/// The file at `path` in uftrace's layout: as it is, or decoded from the
/// compact layout (`compact`: the file must start with a compact block);
/// removed.
pub(super) fn read_uftrace_layout(path: &std::path::Path, compact: bool) -> Vec<u8> {
    use std::io::Read;
    let bytes = std::fs::read(path).unwrap();
    let _ = std::fs::remove_file(path);
    assert_eq!(
        bytes.starts_with(&shadowgraph_data::compact::BLOCK_MAGIC),
        compact && !bytes.is_empty()
    );
    if !compact {
        return bytes;
    }
    let mut out = Vec::new();
    shadowgraph_data::compact::CompactReader::new(&bytes[..])
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// Waits (10 s at most) until `ring` has room again while its drain,
/// writing into a pipe whose read end `rd` nobody reads, is still blocked
/// (`done` not set).
fn room_while_the_drain_is_blocked(ring: &Ring, rd: i32, done: &AtomicBool) {
    let t0 = std::time::Instant::now();
    while !ring.refresh() {
        if t0.elapsed().as_secs() >= 10 {
            // SAFETY: our pipe's read end: the drain's write fails
            // (EPIPE) and the test can end.
            unsafe { libc::close(rd) };
            panic!("no room while the drain is blocked");
        }
        std::thread::yield_now();
    }
    assert!(
        !done.load(Ordering::Acquire),
        "the drain finished without our reads"
    );
}

/// The ring's thread and the writer drain one ring into one file by turns,
/// each through its own descriptor (appending), one drain at a time (the
/// drain lock): the thread a part of it whenever it finds the ring full,
/// the writer all of it every 200 µs. Every record arrives once, in
/// order, and what the thread drained is counted for the writer.
#[test]
fn the_thread_and_the_writer_drain_one_ring_by_turns() {
    use std::os::fd::AsRawFd;
    const CAP: u64 = 1024;
    const N: u64 = 300_000;
    // (In either layout: blocks of the two appenders, by turns.)
    for compact in [false, true] {
        let (ring, path, _file) = ring_into_file_in(CAP, &format!("turns{compact}"), compact);
        let append = || {
            std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap()
        };
        let (mine, theirs) = (append(), append());
        let done = AtomicBool::new(false);
        let own_drains = std::sync::atomic::AtomicU64::new(0);
        let counted = std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..N {
                    let c = loop {
                        if let Some(c) = ring.claim_at(|| i + 1, Kind::Lost, Depth::Follow) {
                            break c;
                        }
                        if !ring.refresh() && ring.try_lock_drain(7) {
                            // A part of it, as a thread drains its own.
                            let d = ring.drain_some(mine.as_raw_fd(), 300);
                            ring.add_own(&d);
                            ring.unlock_drain();
                            own_drains.fetch_add(1, Ordering::Relaxed);
                        }
                    };
                    ring.write(c.slot, c.time, Kind::Entry, (i % 1024) as u16, i);
                    ring.publish(&c);
                }
                done.store(true, Ordering::Release);
            });
            let writer = s.spawn(|| {
                let mut counted = 0;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    if ring.try_lock_drain(DRAINER) {
                        let d = ring.drain(theirs.as_raw_fd());
                        ring.unlock_drain();
                        assert_eq!((d.lost, d.errno), (0, 0));
                        counted += d.written + ring.take_own().written;
                        if finished && d.written == 0 {
                            break counted;
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            });
            writer.join().unwrap()
        });
        let bytes = read_uftrace_layout(&path, compact);
        assert!(
            own_drains.load(Ordering::Relaxed) > 0,
            "the thread never drained"
        );
        assert_eq!(counted, N);
        assert_eq!(bytes.len() as u64, N * 16);
        for (i, rec) in bytes.chunks_exact(16).enumerate() {
            let r = decode(rec.try_into().unwrap(), i as u64 * 16).unwrap();
            let i = i as u64;
            assert_eq!(
                (r.time, r.addr, r.depth as u64),
                (i + 1, i, i % 1024),
                "record {i}"
            );
        }
    }
}
