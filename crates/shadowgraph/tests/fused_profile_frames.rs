//! The fused path's frames with data, as tests/fused_frames.rs, for a
//! profile standing in alone (record::fused::attach_profile): threads run
//! a traced workload while the profile registers and unregisters in a loop
//! and other users come and go, so that frames the fused entry pushed
//! return through fgraph's general way and the callbacks, and frames the
//! callbacks pushed return through the fused path. The callbacks find
//! their data where `GraphUser::reserve` put it, in either kind of frame:
//! the layouts agree. Its own process: the manager's entry code is chosen
//! once.

mod common;

use common::frames::*;
use common::*;
use shadowgraph::record::clock;
use shadowgraph::record::fused::{self, ProfileTable};
use shadowgraph::{fgraph, ftrace};
use std::cell::Cell;
use std::sync::atomic::Ordering;

#[test]
fn profile_frames_pass_between_the_fused_path_and_the_callbacks() {
    let (_dir, _lib, run) = nested_workload("fused_profile_frames");
    if !clock::init() {
        eprintln!("no usable TSC: the fused path is off on this machine");
        return;
    }
    let filter = ftrace::FilterSet::with_patterns(&["leaf", "mid", "top"], &[]).unwrap();
    let profile = fgraph::GraphUser::new(profile_entry, profile_return, filter.clone(), 0);
    let cell = &*TABLE as *const Cell<*mut ProfileTable> as usize;
    assert!(fused::attach_profile(&profile, 0, cell, ROWS));
    // The timed user's callbacks beside it: its frames and the profile's
    // interleave on the general way.
    let timed = fgraph::GraphUser::new(timed_entry, timed_return, filter.clone(), 1);
    let other = fgraph::GraphUser::new(accept, ignore, filter, 0);

    let workers = Workers::start(3, run, 200);
    for i in 0..150 {
        fgraph::register_graph(&profile).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(500));
        if i % 3 == 0 {
            // Two users: the general way, with fused frames in flight.
            fgraph::register_graph(&other).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(300));
            fgraph::unregister_graph(&other).unwrap();
        }
        if i % 5 == 0 {
            fgraph::register_graph(&timed).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(300));
            fgraph::unregister_graph(&timed).unwrap();
        }
        fgraph::unregister_graph(&profile).unwrap();
    }
    // Alone, the profile's calls go the fused way: its callback sees few
    // entries (a thread's first, which makes its table).
    fgraph::register_graph(&profile).unwrap();
    let (e0, r0) = (PROFILE_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (e1, r1) = (PROFILE_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    fgraph::unregister_graph(&profile).unwrap();
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
