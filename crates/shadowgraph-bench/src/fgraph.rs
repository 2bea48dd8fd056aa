//! `bench fgraph`: function-graph tracing with empty callbacks: one user
//! (the fast path), one and another declining by its filter, two and
//! sixteen, declining, reserving, timing; the floor of any graph tracer
//! (assembly models); recording into memory by the library's recorders.

use crate::clock::timestamp_line;
use crate::common::{
    load_dispatch_lib, median, ns_per_call, ns_per_call_two_threads, print_rows, Loop,
};
use crate::memory::in_child;
use crate::models::{floor_ns, model_floors};
use shadowgraph::{fgraph, ftrace};
use std::process::ExitCode;
use std::sync::Arc;

pub(crate) extern "C" fn accept_all(
    _e: &fgraph::GraphEntry,
    _u: &fgraph::GraphUser,
    _r: &mut ftrace::Regs,
) -> bool {
    true
}

pub(crate) extern "C" fn decline(
    _e: &fgraph::GraphEntry,
    _u: &fgraph::GraphUser,
    _r: &mut ftrace::Regs,
) -> bool {
    false
}

pub(crate) extern "C" fn ignore_return(
    _r: &fgraph::GraphReturn,
    _u: &fgraph::GraphUser,
    _regs: &fgraph::RetRegs,
) {
}

extern "C" fn reserve_entry(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    _r: &mut ftrace::Regs,
) -> bool {
    match u.reserve(8) {
        Some(p) => {
            // SAFETY: 8 reserved, word-aligned bytes.
            unsafe { (p as *mut u64).write(e.func as u64) };
            true
        }
        None => false,
    }
}

extern "C" fn retrieve_return(
    _r: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    _regs: &fgraph::RetRegs,
) {
    if let Some((p, _)) = u.retrieve() {
        // SAFETY: our 8 bytes in this frame.
        std::hint::black_box(unsafe { (p as *const u64).read() });
    }
}

extern "C" fn timed_entry(
    _e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    _r: &mut ftrace::Regs,
) -> bool {
    match u.reserve(8) {
        Some(p) => {
            // SAFETY: 8 reserved, word-aligned bytes.
            unsafe { (p as *mut u64).write(shadowgraph::clock::now()) };
            true
        }
        None => false,
    }
}

extern "C" fn timed_return(
    _r: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    _regs: &fgraph::RetRegs,
) {
    if let Some((p, _)) = u.retrieve() {
        // SAFETY: our 8 bytes in this frame.
        let start = unsafe { (p as *const u64).read() };
        std::hint::black_box(shadowgraph::clock::now().wrapping_sub(start));
    }
}

/// A round's rows: (label, ns per call).
type Rows = [(String, f64)];

/// `bench fgraph`: every row measured once a round, rounds repeated
/// (`reps`), so that the machine's slow spells fall on all rows alike:
/// each row's median, and each ratio the median of the rounds' ratios.
pub fn bench(calls: i64, reps: usize, hijack_returns: bool) -> Result<ExitCode, String> {
    fgraph::set_site_stubs(!hijack_returns);
    let (loop_plain, loop_target, _lib) = load_dispatch_lib()?;
    println!(
        "# shadowgraph bench fgraph: {calls} calls per loop, {reps} rounds of every row in \
         turn (medians; ratios: the median of the rounds'); entry + return, empty callbacks, \
         no timestamps"
    );
    // (Timed rows read the clock: set up before the first round, so that
    // every round runs alike.)
    shadowgraph::clock::init();
    let rounds = (0..reps)
        .map(|_| round(calls, (loop_plain, loop_target), reps, hijack_returns))
        .collect::<Result<Vec<_>, _>>()?;
    let rows: Vec<(String, f64)> = (rounds[0].iter().enumerate())
        .map(|(i, (name, _))| {
            (
                name.clone(),
                median(rounds.iter().map(|r| r[i].1).collect()),
            )
        })
        .collect();
    print_rows(&rows, rows[0].1);
    // A row of a round, by the start of its name.
    let row = |r: &Rows, prefix: &str| {
        r.iter()
            .find(|(name, _)| name.starts_with(prefix))
            .map_or(f64::NAN, |r| r.1)
    };
    let per_round = |f: &dyn Fn(&Rows) -> f64| median(rounds.iter().map(|r| f(r)).collect());
    let one = |r: &Rows| r[1].1;
    println!(
        "# 1 user / floor: {:.2}× per call, {:.2}× over untraced (the aim: within 1.5×)",
        per_round(&|r| one(r) / row(r, "floor")),
        per_round(&|r| (one(r) - r[0].1) / (row(r, "floor") - r[0].1))
    );
    println!(
        "# 2 users / 1: {:.2}× (the aim: within 1.3×); a user whose filter declines adds \
         {:+.2} ns (the aim: at most 1); each user past the second adds {:.2} ns (the aim: \
         at most 5); 2 recorders in memory / 1: {:.2}× (the aim: within 1.3×)",
        per_round(&|r| row(r, "2 users") / one(r)),
        per_round(&|r| row(r, "1 user + 1 whose filter declines") - one(r)),
        per_round(&|r| (row(r, "16 users") - row(r, "2 users")) / 14.0),
        per_round(&|r| {
            row(r, "record in memory, 2 recorders, fused") / row(r, "record in memory, fused (")
        })
    );
    let [plain, hijacked, stubbed, recorded] = model_floors(calls, reps);
    println!(
        "# floors, asm models (no site, no core): plain call {plain:.2} ns; \
         push + hijack + pop +{:.2}; push + pop through a stub's call +{:.2}; \
         the same + two timestamped records in memory +{:.2}",
        hijacked - plain,
        stubbed - plain,
        recorded - plain
    );
    println!("{}", timestamp_line(reps));
    Ok(ExitCode::SUCCESS)
}

/// One round of `bench fgraph`: each row's ns per call, measured once
/// (after a warm-up), in the order printed; the rows recording into
/// memory, in a child process each, as the median of `child_reps` loops
/// of fewer calls (`memory::in_child`).
fn round(
    calls: i64,
    (loop_plain, loop_target): (Loop, Loop),
    child_reps: usize,
    hijack_returns: bool,
) -> Result<Vec<(String, f64)>, String> {
    let filter = || ftrace::FilterSet::with_patterns(&["target"], &[]).map_err(|e| e.to_string());
    let user =
        |e: fgraph::EntryFn, r: fgraph::ReturnFn| -> Result<Arc<fgraph::GraphUser>, String> {
            Ok(fgraph::GraphUser::new(e, r, filter()?, 0))
        };
    let reg = |u: &Arc<fgraph::GraphUser>| fgraph::register_graph(u).map_err(|e| e.to_string());
    let unreg = |u: &Arc<fgraph::GraphUser>| fgraph::unregister_graph(u).map_err(|e| e.to_string());
    let measure = || ns_per_call(loop_target, calls, 1);
    let base = ns_per_call(loop_plain, calls, 1);
    let mut rows: Vec<(String, f64)> = vec![("untraced function (no site)".into(), base)];
    let users: Vec<_> = (0..16)
        .map(|_| user(accept_all, ignore_return))
        .collect::<Result<_, _>>()?;
    reg(&users[0])?;
    if !fgraph::fast_path_active() {
        return Err("fast path not active with one user".into());
    }
    rows.push(("1 user (fast path)".into(), measure()));
    rows.push((
        "1 user, 2 threads at once (each)".into(),
        ns_per_call_two_threads(loop_target, calls, 1),
    ));
    // A second user whose filter declines the call (another function):
    // what it adds to the first's.
    let elsewhere = fgraph::GraphUser::new(
        accept_all,
        ignore_return,
        ftrace::FilterSet::with_patterns(&["other0"], &[]).map_err(|e| e.to_string())?,
        0,
    );
    reg(&elsewhere)?;
    rows.push((
        "1 user + 1 whose filter declines (its mask)".into(),
        measure(),
    ));
    unreg(&elsewhere)?;
    reg(&users[1])?;
    rows.push(("2 users (loop)".into(), measure()));
    for u in &users[2..] {
        reg(u)?;
    }
    rows.push(("16 users (loop)".into(), measure()));
    for u in &users {
        unreg(u)?;
    }
    let d = user(decline, ignore_return)?;
    reg(&d)?;
    rows.push(("1 user declining every call (no hijack)".into(), measure()));
    unreg(&d)?;
    let r = user(reserve_entry, retrieve_return)?;
    reg(&r)?;
    rows.push(("1 user reserving 8 bytes per call".into(), measure()));
    unreg(&r)?;
    rows.push((
        "floor: push + hijack + pop, nothing else".into(),
        floor_ns(loop_target, calls, 1)?,
    ));
    let timed = user(timed_entry, timed_return)?;
    reg(&timed)?;
    rows.push(("1 user timing each call (2 timestamps)".into(), measure()));
    unreg(&timed)?;
    // Recording into memory, each path in a process of its own (chosen
    // before the first user registers).
    for (label, mode) in [
        ("record in memory, fused (entry+exit records)", "record"),
        (
            "record in memory, callbacks (general path)",
            "record-general",
        ),
        ("record in memory, fused, target's argument", "record-arg"),
        ("record in memory, 2 recorders, fused", "record2"),
        ("record in memory, 2, one with -D 5, fused", "record2-depth"),
        ("record in memory, 2, one with -F target", "record2-filter"),
        (
            "record in memory, 2, one whose -F declines",
            "record2-decline",
        ),
        ("record in memory, 2, one with a trigger", "record2-trigger"),
        (
            "record in memory, 2 recorders (general path)",
            "record2-general",
        ),
        ("record in memory, 1 recorder + a profile", "record-profile"),
    ] {
        let ns = in_child(mode, calls, child_reps, hijack_returns)?;
        rows.push((label.into(), ns));
    }
    rows.push(("all unregistered (NOP5 again)".into(), measure()));
    Ok(rows)
}
