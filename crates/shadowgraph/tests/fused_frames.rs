//! The fused path's frames with data (record::fused: a time filter's word;
//! tests/fused_profile_frames.rs: a profile's three) under concurrency: threads run a traced workload
//! while the fused user registers and unregisters in a loop and a second
//! user comes and goes, so that frames the fused entry pushed return
//! through fgraph's general way and the callbacks, and frames the callbacks
//! pushed return through the fused path. The callbacks find their data
//! where `GraphUser::reserve` put it, in either kind of frame: the layouts
//! agree. Its own process: the manager's entry code is chosen once.

mod common;

use common::frames::*;
use common::*;
use shadowgraph::record::clock;
use shadowgraph::record::fused;
use shadowgraph::{fgraph, ftrace};
use std::sync::atomic::Ordering;

#[test]
fn frames_with_data_pass_between_the_fused_path_and_the_callbacks() {
    let (_dir, _lib, run) = nested_workload("fused_frames");
    if !clock::init() {
        eprintln!("no usable TSC: the fused path is off on this machine");
        return;
    }
    let filter = ftrace::FilterSet::with_patterns(&["leaf", "mid", "top"], &[]).unwrap();
    // A user per kind; the manager's site entry is chosen with the first
    // to register, so the timed one stands in alone, and the profile one
    // (attached too: its rows are the test's) goes the general way.
    let timed = fgraph::GraphUser::new(timed_entry, timed_return, filter.clone(), 0);
    // A threshold no call reaches: every call the fused return judges is
    // dropped there, the others go the callbacks' way.
    assert!(fused::attach_timed(&timed, 0, u64::MAX >> 8));
    let profile = fgraph::GraphUser::new(profile_entry, profile_return, filter.clone(), 1);
    let other = fgraph::GraphUser::new(accept, ignore, filter, 0);

    let workers = Workers::start(3, run, 200);
    for i in 0..150 {
        fgraph::register_graph(&timed).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(500));
        if i % 3 == 0 {
            // Two users: the general way, with fused frames in flight.
            fgraph::register_graph(&other).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(300));
            fgraph::unregister_graph(&other).unwrap();
        }
        if i % 5 == 0 {
            // The profile's callbacks beside it: its frames and the timed
            // user's interleave on the general way.
            fgraph::register_graph(&profile).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(300));
            fgraph::unregister_graph(&profile).unwrap();
        }
        fgraph::unregister_graph(&timed).unwrap();
    }
    // Alone, the timed user's calls go the fused way: its callback sees
    // few entries.
    fgraph::register_graph(&timed).unwrap();
    let (e0, r0) = (TIMED_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (e1, r1) = (TIMED_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    fgraph::unregister_graph(&timed).unwrap();
    let rounds = workers.stop();
    assert!(rounds > 0);
    let calls = (r1 - r0) * 200 * 25;
    assert!(
        (e1 - e0) * 20 < calls,
        "{} of {calls} entries by the callback",
        e1 - e0
    );
    assert_eq!(fgraph::LOST_FRAMES.load(Ordering::Relaxed), 0);
    let returns = RETURNS.load(Ordering::Relaxed);
    assert!(returns > 1000, "{returns} returns by the callbacks");
    assert_eq!(BAD.load(Ordering::Relaxed), 0, "of {returns} returns");
}
