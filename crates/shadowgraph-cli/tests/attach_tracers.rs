//! `record -p PID --tracer …`: several tracers of one attached recording,
//! beside another recording of the same process.

mod common;

use common::attach::*;
use common::*;
use shadowgraph_data::dir::DataDir;
use shadowgraph_data::format::Kind;
use std::path::PathBuf;

/// A running fixture and two recordings of it, one beside the other.
struct Beside {
    child: Target,
    out: std::io::BufReader<std::process::ChildStdout>,
    a: PathBuf,
    b: PathBuf,
}

/// Builds `fixture` (into test directory `name`) and runs it with `args`;
/// records it with `first`'s options, then, once `function` is patched,
/// with `second`'s beside it, into `a.data` and `b.data`. Both succeed.
fn one_beside_another(
    name: &str,
    fixture: &str,
    (args, function): (&[&str], &str),
    first: &[&str],
    second: &[&str],
) -> Beside {
    let dir = workdir(name);
    let exe = build_fixture_with(&dir, "target", fixture, &["-pthread"]);
    let (child, out) = start_target(&exe, args);
    let pid = child.id().to_string();
    let (a, b) = (dir.join("a.data"), dir.join("b.data"));
    let rec = record_p_spawn(&pid, first, &a);
    wait_entry(child.id(), &exe, function, true);
    let o = record_p(&pid, second, &b);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = rec.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    Beside { child, out, a, b }
}

impl Beside {
    /// What the fixture printed after "ready", once it has ended (it ends
    /// by itself, or at a byte on its stdin).
    fn end(mut self, by_itself: bool) -> String {
        if !by_itself {
            return end_target(&mut self.child, &mut self.out);
        }
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.out, &mut rest).unwrap();
        assert!(self.child.wait().unwrap().success());
        rest
    }
}

/// Two recordings one beside the other, the second on the path it shares
/// with the first (its info says so), its calls nesting exactly.
fn shared_pair(a: &std::path::Path, b: &std::path::Path) -> (DataDir, DataDir) {
    let info = view_text("info", b);
    assert!(
        info.contains("record path         : fused (several tracers"),
        "{info}"
    );
    nests_exactly(b);
    (DataDir::open(a).unwrap(), DataDir::open(b).unwrap())
}

/// Where a thread's calls in two recordings are compared: inside both,
/// 20 ms from either end, cut in the first's pauses (`gap` ns or more
/// without a record), so that the recordings' own conversions of the
/// same clock (a few hundred nanoseconds apart) cut them alike; away from
/// the recordings' starts and ends, where a call under way belongs to one
/// and not the other.
type Call = (u64, Kind, u64, u64);
fn window(ra: &[Call], rb: &[Call], gap: u64) -> Option<(u64, u64)> {
    let lo = rb[0].0 + 20_000_000;
    let hi = rb.last()?.0.min(ra.last()?.0).checked_sub(20_000_000)?;
    let cuts: Vec<u64> = (ra.windows(2))
        .filter(|w| w[1].0 - w[0].0 > gap && w[0].0 > lo && w[1].0 < hi)
        .map(|w| (w[0].0 + w[1].0) / 2)
        .collect();
    (cuts.len() >= 2).then(|| (cuts[0], *cuts.last().unwrap()))
}

/// Thread `tid`'s entries and exits in `d`: (time, kind, function, the
/// time its call began; 0: before the recording's first record).
fn calls(d: &DataDir, tid: i32) -> Vec<Call> {
    let mut open = Vec::new();
    (records_of(d, tid).unwrap().into_iter())
        .filter(|r| matches!(r.kind, Kind::Entry | Kind::Exit))
        .map(|r| {
            let began = match r.kind {
                Kind::Entry => {
                    open.push(r.time);
                    r.time
                }
                _ => open.pop().unwrap_or(0),
            };
            (r.time, r.kind, r.addr, began)
        })
        .collect()
}

/// The tracers of one recording start and end together: a tracer with
/// `filter=mid` records as many calls of mid as one without a filter
/// beside it, whether its recording is the process's first or comes
/// while another one records (their tracers then join the graph users
/// already there). Three threads call mid ten times between short naps.
#[test]
fn a_recordings_tracers_start_and_end_together() {
    let tracers = ["--tracer", "all", "--tracer", "mid:filter=mid"];
    let t = one_beside_another(
        "attach_tracers_together",
        "attach_busy.c",
        (&[], "mid"),
        &[&["--duration", "1s"][..], &tracers].concat(),
        &[&["--duration", "300ms"][..], &tracers].concat(),
    );
    let (a, b) = (t.a.clone(), t.b.clone());
    for d in [&a, &b] {
        let all = report_rows(&report_text(&d.join("all")));
        let mid = report_rows(&report_text(&d.join("mid")));
        // (A call under way when the users are published, or when they
        // leave, may be offered to one of them and not the other: a
        // few nanoseconds' window, in each of the threads.)
        let (n, m) = (all["mid"].2, mid["mid"].2);
        assert!(
            n > 1000 && n.abs_diff(m) <= 4,
            "{}: {all:?} {mid:?}",
            d.display()
        );
        nests_exactly(&d.join("all"));
        nests_exactly(&d.join("mid"));
    }
    assert_eq!(t.end(false), "bad=0\n");
}

/// A recording attaches beside one with a function filter while every
/// thread of the program sleeps most of the time in a system call under
/// the filtered function: their stacks hold, in slots the sleeping
/// frames never wrote, return addresses the agent's code pushed there
/// while it ran deeper, which do not keep the recording from finding a
/// thread to start it. `info` says why neither knows the exit status.
#[test]
fn a_recording_attaches_beside_a_filtered_one_while_threads_sleep() {
    // (It ends by itself, after 3 s.)
    let t = one_beside_another(
        "attach_beside_filtered",
        "attach_rounds.c",
        (&["3000"], "round_"),
        &["--duration", "1s", "-F", "round_"],
        &["--duration", "200ms"],
    );
    let (a, b) = (t.a.clone(), t.b.clone());
    for d in [&a, &b] {
        let rows = report_rows(&report_text(d));
        assert!(
            rows["round_"].2 > 5 && rows["mid"].2 > 1000,
            "{}: {rows:?}",
            d.display()
        );
        nests_exactly(d);
        // Not ours to see: the process is not `record`'s child.
        assert!(
            view_text("info", d).contains(
                "exit status         : unknown (a running process, attached to by `record -p`)"
            ),
            "{}",
            d.display()
        );
    }
    assert_eq!(t.end(true), "done\n");
}

/// Two recordings attached one beside the other share one fused path (one
/// frame and one clock read per call for both, a record in each ring):
/// the second says so, and while both record, each thread's calls are
/// the same in the two, call for call. The windows compared are cut in
/// the threads' naps, so that the two recordings' own conversions of the
/// same clock (a few hundred nanoseconds apart) cut them alike.
#[test]
fn recordings_attached_beside_each_other_share_the_fused_path() {
    let t = one_beside_another(
        "attach_beside_shared",
        "attach_busy.c",
        (&[], "mid"),
        &["--duration", "1s"],
        &["--duration", "300ms"],
    );
    let (a, b) = (t.a.clone(), t.b.clone());
    assert_eq!(t.end(false), "bad=0\n");
    nests_exactly(&a);
    let (da, db) = shared_pair(&a, &b);
    the_same_between_naps(&da, &db, &|_| true);
}

/// Each thread's calls in `db` between its naps (20 µs or more without a
/// record) are those of `da` that `kept` takes (by function address),
/// call for call, in two threads or more.
fn the_same_between_naps(da: &DataDir, db: &DataDir, kept: &dyn Fn(u64) -> bool) {
    let mut compared = 0;
    for &tid in &db.tids {
        let (ra, rb) = (calls(da, tid), calls(db, tid));
        if rb.len() < 1000 {
            continue;
        }
        let Some((from, to)) = window(&ra, &rb, 20_000) else {
            continue;
        };
        let within = |r: &Vec<Call>| -> Vec<(Kind, u64)> {
            (r.iter())
                .filter(|c| c.0 > from && c.0 < to && kept(c.2))
                .map(|c| (c.1, c.2))
                .collect()
        };
        let (wa, wb) = (within(&ra), within(&rb));
        assert!(wa.len() > 500, "thread {tid}: {} records", wa.len());
        assert!(
            wa == wb,
            "thread {tid}: {} records against {}",
            wa.len(),
            wb.len()
        );
        compared += 1;
    }
    assert!(compared >= 2, "{compared} threads compared");
}

/// A recording with a trigger (`-T mid@depth=1`) attached beside another
/// shares the fused path with it: mid's calls, the trigger's own, go
/// through the callbacks of both, and the calls inside them take the
/// shared path, which keeps the triggers' state. Between the threads'
/// naps, the second holds the first's calls but leaf's (a level inside
/// mid), call for call. (A thread inside a call of mid when the second
/// attached has that call's calls of leaf recorded: the trigger applies
/// from the first entry of mid it sees.)
#[test]
fn a_recording_with_a_trigger_beside_another_shares_the_fused_path() {
    let t = one_beside_another(
        "attach_beside_trigger",
        "attach_busy.c",
        (&[], "mid"),
        &["--duration", "1s"],
        &["--duration", "300ms", "-T", "mid@depth=1"],
    );
    let (a, b) = (t.a.clone(), t.b.clone());
    assert_eq!(t.end(false), "bad=0\n");
    nests_exactly(&a);
    let (da, db) = shared_pair(&a, &b);
    let rows = report_rows(&report_text(&b));
    assert!(rows["mid"].2 > 1000, "{rows:?}");
    for &tid in &db.tids {
        let rb = calls(&db, tid);
        let named = |c: &Call, f: &str| db.name(c.2) == f;
        let seen = (rb.iter())
            .position(|c| c.1 == Kind::Entry && named(c, "mid"))
            .unwrap_or(rb.len());
        // (mid calls leaf four times.)
        let before = rb[..seen]
            .iter()
            .filter(|c| c.1 == Kind::Entry && named(c, "leaf"));
        assert!(before.count() <= 4, "thread {tid}: {rows:?}");
        let after = rb[seen..].iter().filter(|c| named(c, "leaf"));
        assert_eq!(after.count(), 0, "thread {tid}: {rows:?}");
    }
    the_same_between_naps(&da, &db, &|addr| da.name(addr) != "leaf");
}

/// A paused recording stays paused beside another: the shared fused path
/// records a call for the recordings whose filter selects its function
/// (fgraph's site masks), and a paused one selects none. The first
/// recording records, is paused (`--control`), then a second records
/// beside it on the shared path; the first records nothing after its
/// pause.
#[test]
fn a_paused_recording_records_nothing_beside_another() {
    use std::io::{BufRead, Write};
    let dir = workdir("attach_beside_paused");
    let exe = build_fixture_with(&dir, "busy", "attach_busy.c", &["-pthread"]);
    let (ctl, ack) = (dir.join("ctl"), dir.join("ack"));
    for p in [&ctl, &ack] {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }
    // Read-write: opening never blocks, whoever comes first.
    let acks = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ack)
        .unwrap();
    let mut acks = std::io::BufReader::new(acks);
    let (mut child, mut out) = start_target(&exe, &[]);
    let pid = child.id().to_string();
    let (a, b) = (dir.join("a.data"), dir.join("b.data"));
    let control = format!("{},{}", ctl.display(), ack.display());
    let first = record_p_spawn(&pid, &["--duration", "2s", "--control", &control], &a);
    wait_entry(child.id(), &exe, "mid", true);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut f = std::fs::OpenOptions::new().write(true).open(&ctl).unwrap();
    writeln!(f, "disable").unwrap();
    let mut line = String::new();
    acks.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ack");
    let o = record_p(&pid, &["--duration", "300ms"], &b);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(end_target(&mut child, &mut out), "bad=0\n");
    let info = view_text("info", &b);
    assert!(
        info.contains("record path         : fused (several tracers"),
        "{info}"
    );
    let rows = report_rows(&report_text(&b));
    assert!(rows["mid"].2 > 1000, "{rows:?}");
    nests_exactly(&b);
    nests_exactly(&a);
    // Every call of the first began before the second's first record (the
    // calls it left open when paused end with it).
    let times = |d: &std::path::Path, entries: bool| -> Vec<u64> {
        let d = DataDir::open(d).unwrap();
        (d.tids.iter())
            .flat_map(|&t| records_of(&d, t).unwrap())
            .filter(|r| !entries || r.kind == Kind::Entry)
            .map(|r| r.time)
            .collect()
    };
    let end_a = times(&a, true).into_iter().max().unwrap();
    let start_b = times(&b, false).into_iter().min().unwrap();
    assert!(
        end_a < start_b,
        "the first's last entry {end_a}, the second's first record {start_b}"
    );
}

/// A recording with a time filter (`-t 100us`) attached beside another
/// shares the fused path with it: its threads record every call, and its
/// writer leaves out the short ones. Between the threads' naps, it holds
/// exactly the calls of the first recording that lasted 100 µs or made a
/// call that did (each round's sleep, its callers), call for call.
#[test]
fn a_time_filtered_recording_beside_another_keeps_the_long_calls() {
    // (It ends by itself, after 3 s.)
    let t = one_beside_another(
        "attach_beside_timed",
        "attach_rounds.c",
        (&["3000"], "round_"),
        &["--duration", "1s"],
        &["--duration", "300ms", "-t", "100us"],
    );
    let (a, b) = (t.a.clone(), t.b.clone());
    assert_eq!(t.end(true), "done\n");
    let (da, db) = shared_pair(&a, &b);
    let mut compared = 0;
    for &tid in &db.tids {
        let (ra, rb) = (calls(&da, tid), calls(&db, tid));
        if rb.len() < 20 {
            continue;
        }
        // The first's calls that lasted 100 µs or made one that did.
        let mut kept = vec![false; ra.len()];
        let mut open: Vec<(usize, bool)> = Vec::new();
        for (i, r) in ra.iter().enumerate() {
            match r.1 {
                Kind::Entry => open.push((i, false)),
                _ => {
                    let Some((e, inner)) = open.pop() else {
                        continue;
                    };
                    assert_eq!(ra[e].2, r.2, "thread {tid}: the first's nesting");
                    if inner || r.0 - ra[e].0 >= 100_000 {
                        (kept[e], kept[i]) = (true, true);
                        if let Some(p) = open.last_mut() {
                            p.1 = true;
                        }
                    }
                }
            }
        }
        // (Cut in the sleeps: 150 µs or more without a record.)
        let Some((from, to)) = window(&ra, &rb, 150_000) else {
            continue;
        };
        // (The calls that began there: one under way when the second
        // started is not the second's.)
        let inside = |c: &Call| c.3 > from && c.0 < to;
        let want: Vec<(Kind, u64)> = (ra.iter().zip(&kept))
            .filter(|(c, &k)| k && inside(c))
            .map(|(c, _)| (c.1, c.2))
            .collect();
        let got: Vec<(Kind, u64)> = (rb.iter())
            .filter(|c| inside(c))
            .map(|c| (c.1, c.2))
            .collect();
        assert!(want.len() >= 6, "thread {tid}: {} records", want.len());
        assert!(want == got, "thread {tid}: {want:x?} against {got:x?}");
        compared += 1;
    }
    assert!(compared >= 2, "{compared} threads compared");
}

/// A recording of a recorder and a profile attached beside another: the
/// three share one fused path (the profile's counts kept by it, its info
/// says so), and the profile counts the calls of mid and leaf that the
/// recorder of its own recording records, but for those under way as the
/// recording ends (one of each function a thread at most).
#[test]
fn a_profile_attached_beside_a_recording_shares_the_fused_path() {
    let t = one_beside_another(
        "attach_beside_profile",
        "attach_busy.c",
        (&[], "mid"),
        &["--duration", "1s"],
        &[
            "--tracer",
            "rec",
            "--tracer",
            "prof:type=profile",
            "--duration",
            "300ms",
        ],
    );
    let b = t.b.clone();
    assert_eq!(t.end(false), "bad=0\n");
    let info = view_text("info", &b.join("prof"));
    assert!(
        info.contains("record path         : fused (several tracers"),
        "{info}"
    );
    let report = |d: &str| {
        let o = shadowgraph()
            .args(["report", "-d"])
            .arg(b.join(d))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        report_rows(&text(&o).0)
    };
    let (prof, rec) = (report("prof"), report("rec"));
    for f in ["mid", "leaf"] {
        let (p, r) = (prof[f].2, rec[f].2);
        assert!(p > 1000 && p.abs_diff(r) <= 3, "{f}: {prof:?} {rec:?}");
    }
}
