//! A profile beside recorders on the shared fused path (tracer::fused's
//! multi path, `let_multi_stand_in_profile`) under concurrency: threads
//! run a traced workload while the profile and two recorders come and go
//! in changing orders, and a user with frame data of its own (the time
//! filter's callbacks) joins now and then, which sends every call the
//! general way with the path's frames in flight. The profile's frames,
//! made by the path or by its callbacks, must pass between the two: its
//! return callback finds its data where `GraphUser::reserve` puts it, no
//! frame goes unmatched, and the recorders' records nest. Its own
//! process: the path is chosen before the first user registers.

mod common;

use common::frames::{
    fused_path_ran_and_frames_held, profile_entry, profile_return, timed_entry, timed_return,
    PROFILE_ENTRIES, ROWS, TABLE,
};
use common::recorder::{check_nesting, record_entry, record_return};
use common::*;
use shadowgraph::record::writer;
use shadowgraph::tracer::fused;
use shadowgraph::tracer::profile::ProfileTable;
use shadowgraph::{fgraph, ftrace};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The profile's instance (beside the recorders' 0 and 1).
const PROFILE: usize = 2;

#[test]
fn a_profile_and_recorders_come_and_go_on_the_shared_path() {
    let (dir, _lib, run) = nested_workload_as("fused_multi_profile", Entry::Patchable);
    let sites = nested_sites();
    if !fused_paths_run() {
        return;
    }
    let data = |i: usize| dir.join(format!("data{i}"));
    for i in 0..2 {
        writer::start(i, i, &data(i), None, Some(256 << 10), false).unwrap();
    }
    assert!(fused::enable_multi());
    let filter = ftrace::FilterSet::with_patterns(&NESTED, &[]).unwrap();
    let profile = fgraph::GraphUser::new(profile_entry, profile_return, filter.clone(), PROFILE);
    let cell = &*TABLE as *const Cell<*mut ProfileTable> as usize;
    assert!(fused::let_multi_stand_in_profile(&profile, cell, ROWS));
    let recorders: Vec<_> = (0..2)
        .map(|i| {
            let u = fgraph::GraphUser::new(record_entry, record_return, filter.clone(), i);
            assert!(fused::let_multi_stand_in(&u, 0));
            u
        })
        .collect();
    // A user with frame data of its own, which the path does not stand in
    // for: while it is registered, every call goes the general way.
    let timed = fgraph::GraphUser::new(timed_entry, timed_return, filter, 3);

    let workers = Workers::start(3, run, 200);
    let pause = || std::thread::sleep(Duration::from_micros(400));
    let reg = |u: &std::sync::Arc<fgraph::GraphUser>| fgraph::register_graph(u).unwrap();
    let unreg = |u: &std::sync::Arc<fgraph::GraphUser>| fgraph::unregister_graph(u).unwrap();
    for round in 0..90 {
        let (a, b) = (&recorders[round % 2], &recorders[(round + 1) % 2]);
        // The profile first, between the recorders, or last.
        let order: [&std::sync::Arc<fgraph::GraphUser>; 3] = match round % 3 {
            0 => [&profile, a, b],
            1 => [a, &profile, b],
            _ => [a, b, &profile],
        };
        for u in order {
            reg(u);
            pause();
        }
        if round % 5 == 0 {
            reg(&timed);
            pause();
            unreg(&timed);
            pause();
        }
        // The one in the middle leaves first.
        unreg(order[1]);
        pause();
        unreg(order[0]);
        pause();
        unreg(order[2]);
    }
    // The profile and both recorders for 30 rounds of the workers: the
    // path takes the profile's calls (its callbacks only a thread's first
    // ones, before it has a table).
    reg(&profile);
    reg(&recorders[0]);
    reg(&recorders[1]);
    let (e0, r0) = (PROFILE_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    while workers.rounds() < r0 + 30 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (e1, r1) = (PROFILE_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    for u in [&recorders[1], &profile, &recorders[0]] {
        unreg(u);
    }
    assert!(workers.stop() > 0);
    writer::flush_all();
    fused_path_ran_and_frames_held((e0, e1), (r0, r1));
    for i in 0..2 {
        writer::end_instance(i);
        // Every departure leaves at most each worker's three frames open:
        // 90 rounds and the last.
        let (records, open, _) = check_nesting(&data(i), &sites, &|_, _| true);
        assert!(records > 10_000, "recorder {i}: {records} records");
        assert!(
            open <= 91 * 3 * 3,
            "recorder {i}: {open} entries never closed"
        );
    }
    fused::forget_multi_profile(PROFILE);
}
