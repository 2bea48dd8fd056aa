//! The fused path's frames with data under concurrency, for a time
//! filter standing in alone (record::fused::attach_timed;
//! tests/fused_profile_frames.rs: a profile): frames the fused entry
//! pushed return through fgraph's general way and the callbacks, and
//! frames the callbacks pushed return through the fused path, while users
//! come and go (common::frames::churn_and_check). The callbacks find their
//! data where `GraphUser::reserve` put it, in either kind of frame: the
//! layouts agree. Its own process: the manager's entry code is chosen once.

mod common;

use common::frames::*;
use common::*;
use shadowgraph::tracer::fused;
use shadowgraph::{fgraph, ftrace};

#[test]
fn frames_with_data_pass_between_the_fused_path_and_the_callbacks() {
    let (_dir, _lib, run) = nested_workload("fused_frames");
    if !fused_paths_run() {
        return;
    }
    let filter = ftrace::FilterSet::with_patterns(&NESTED, &[]).unwrap();
    // The timed user stands in alone; the profile's callbacks (their rows
    // the test's) and `other` come and go beside it.
    let timed = fgraph::GraphUser::new(timed_entry, timed_return, filter.clone(), 0);
    // A threshold no call reaches: every call the fused return judges is
    // dropped there, the others go the callbacks' way.
    assert!(fused::attach_timed(&timed, 0, u64::MAX >> 8));
    let profile = fgraph::GraphUser::new(profile_entry, profile_return, filter.clone(), 1);
    let other = fgraph::GraphUser::new(accept, ignore, filter, 0);

    churn_and_check(run, &timed, &TIMED_ENTRIES, &profile, &other);
}
