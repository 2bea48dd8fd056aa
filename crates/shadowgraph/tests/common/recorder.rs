//! The plain recorder's callbacks (what the fused paths stand in for):
//! an entry and an exit record per call at fgraph's depth less than the
//! instance's limit, into recording instance `user.private`, the entries
//! counted (tests/fused*.rs).

use shadowgraph::fgraph::filters::{GraphFilter, Verdict};
use shadowgraph::record::writer;
use shadowgraph::{fgraph, ftrace};
use shadowgraph_data::format::Kind;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Entries recorded by the callback (the general way), not a fused path.
pub static GENERAL_ENTRIES: AtomicU64 = AtomicU64::new(0);

/// Each instance's depth limit (0: none), as `record -D` sets it: calls
/// this deep or deeper are not recorded.
pub static MAX_DEPTH: [AtomicU32; 4] = [const { AtomicU32::new(0) }; 4];

fn too_deep(u: &fgraph::GraphUser, depth: i32) -> bool {
    let max = MAX_DEPTH
        .get(u.private)
        .map_or(0, |m| m.load(Ordering::Relaxed));
    max > 0 && depth >= max as i32
}

pub extern "C" fn record_entry(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    _: &mut ftrace::Regs,
) -> bool {
    if too_deep(u, e.depth) {
        return false;
    }
    GENERAL_ENTRIES.fetch_add(1, Ordering::Relaxed);
    writer::emit(u.private, Kind::Entry, e.depth as u16, e.func as u64);
    true
}

pub extern "C" fn record_return(
    r: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    _: &fgraph::RetRegs,
) {
    // (A frame the multi path made is every user's, also one too deep.)
    if too_deep(u, r.depth) {
        return;
    }
    writer::emit(u.private, Kind::Exit, r.depth as u16, r.func as u64);
}

/// Each instance's graph filters, for [`filtered_entry`] and
/// [`filtered_return`].
pub static FILTERS: [OnceLock<GraphFilter>; 4] = [const { OnceLock::new() }; 4];

/// The recorder with graph filters (`record -F`, `-N`): its filters
/// first, the call recorded at the user's own depth.
pub extern "C" fn filtered_entry(
    e: &fgraph::GraphEntry,
    u: &fgraph::GraphUser,
    _: &mut ftrace::Regs,
) -> bool {
    match FILTERS[u.private].get().unwrap().entry_with(e, u, 0) {
        Verdict::Record(_) => {
            GENERAL_ENTRIES.fetch_add(1, Ordering::Relaxed);
            let depth = GraphFilter::own_depth(u) - 1;
            writer::emit(u.private, Kind::Entry, depth as u16, e.func as u64);
            true
        }
        Verdict::Silent => true,
        Verdict::Reject => false,
    }
}

pub extern "C" fn filtered_return(
    r: &fgraph::GraphReturn,
    u: &fgraph::GraphUser,
    _: &fgraph::RetRegs,
) {
    if FILTERS[u.private].get().unwrap().ret(r, u).is_some() {
        let depth = GraphFilter::own_depth(u);
        writer::emit(u.private, Kind::Exit, depth as u16, r.func as u64);
    }
}

/// Calls (entries) `workers` (each round `run(200)`: 25 calls a step)
/// make over 30 of their rounds, and how many of them [`record_entry`]
/// saw meanwhile (the general way).
pub fn calls_and_general(workers: &super::Workers) -> (u64, u64) {
    let (g0, r0) = (GENERAL_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    while workers.rounds() < r0 + 30 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let (g1, r1) = (GENERAL_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    ((r1 - r0) * 200 * 25, g1 - g0)
}

/// Every thread's records in `dir` (one file each): whole, of `sites`,
/// and nested — an exit closes the entry on top of the thread's stack (a
/// lost or doubled record shows as one that does not). An entry at a
/// depth where entries are still open closes them as left open (the
/// recorder left while they ran). Each entry is one `expect` takes (its
/// address, its depth). Returns the records, the entries left open and
/// the deepest entry.
pub fn check_nesting(
    dir: &std::path::Path,
    sites: &[u64],
    expect: &dyn Fn(u64, u16) -> bool,
) -> (u64, u64, u16) {
    let (mut records, mut open, mut deepest) = (0, 0, 0);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let bytes = std::fs::read(e.path()).unwrap();
        assert_eq!(
            bytes.len() % shadowgraph_data::format::RECORD_SIZE,
            0,
            "{}",
            e.path().display()
        );
        let mut stack: Vec<(u64, u16)> = Vec::new();
        for (k, chunk) in bytes
            .chunks_exact(shadowgraph_data::format::RECORD_SIZE)
            .enumerate()
        {
            let r = shadowgraph_data::format::decode(
                chunk.try_into().unwrap(),
                (k * shadowgraph_data::format::RECORD_SIZE) as u64,
            )
            .unwrap_or_else(|b| panic!("{}: {b}", e.path().display()));
            let at = || format!("{} record {k}", e.path().display());
            match r.kind {
                Kind::Entry => {
                    assert!(sites.contains(&r.addr), "{}: {:#x}", at(), r.addr);
                    assert!(r.depth <= 2, "{}: depth {}", at(), r.depth);
                    assert!(
                        expect(r.addr, r.depth),
                        "{}: {:#x} at depth {}",
                        at(),
                        r.addr,
                        r.depth
                    );
                    deepest = deepest.max(r.depth);
                    while stack.last().is_some_and(|&(_, d)| d >= r.depth) {
                        stack.pop();
                        open += 1;
                    }
                    stack.push((r.addr, r.depth));
                }
                Kind::Exit => {
                    assert_eq!(
                        stack.pop(),
                        Some((r.addr, r.depth)),
                        "{}: an exit not of the open entry",
                        at()
                    );
                }
                Kind::Lost => panic!("{}: records lost", at()),
                other => panic!("{}: {other:?}", at()),
            }
            records += 1;
        }
        open += stack.len() as u64;
    }
    (records, open, deepest)
}
