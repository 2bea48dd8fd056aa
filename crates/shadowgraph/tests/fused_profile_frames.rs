//! The fused path's frames with data under concurrency, as
//! tests/fused_frames.rs, for a profile standing in alone
//! (record::fused::attach_profile). Its own process: the manager's entry
//! code is chosen once.

mod common;

use common::frames::*;
use common::*;
use shadowgraph::tracer::fused;
use shadowgraph::tracer::profile::ProfileTable;
use shadowgraph::{fgraph, ftrace};
use std::cell::Cell;

#[test]
fn profile_frames_pass_between_the_fused_path_and_the_callbacks() {
    let (_dir, _lib, run) = nested_workload("fused_profile_frames");
    if !fused_paths_run() {
        return;
    }
    let filter = ftrace::FilterSet::with_patterns(&NESTED, &[]).unwrap();
    let profile = fgraph::GraphUser::new(profile_entry, profile_return, filter.clone(), 0);
    let cell = &*TABLE as *const Cell<*mut ProfileTable> as usize;
    assert!(fused::attach_profile(&profile, 0, cell, ROWS));
    // The timed user's callbacks beside it: its frames and the profile's
    // interleave on the general way.
    let timed = fgraph::GraphUser::new(timed_entry, timed_return, filter.clone(), 1);
    let other = fgraph::GraphUser::new(accept, ignore, filter, 0);

    churn_and_check(run, &profile, &PROFILE_ENTRIES, &timed, &other);
}
