//! The fused path of several plain recorders (tracer::fused's multi path)
//! under concurrency: threads run a traced workload while four recorders
//! come and go, 1 → 2 → 3 → 4 → 3 → 2 → 1 users (the calls switch between
//! fgraph's single-user path, the multi path and back with frames in
//! flight, each change a new frame word). Each recorder's records must
//! nest: every exit closes the entry on top of its thread's stack, and
//! entries left open are only those of calls a recorder left inside. Its
//! own process: the path is chosen before the first user registers. The
//! recorder that leaves in the middle of a round ends its recording (its
//! rings written out and taken from their threads under the running
//! threads) and starts a new one. One recorder has a depth limit, which
//! the path applies to it alone; another has graph filters (`-F top -N
//! leaf`), which the path applies as its callbacks do, keeping the same
//! thread variable. The third's filter leaves `leaf` out (`-N leaf` of
//! the sites), so the path records a `leaf` call for the others only
//! (fgraph's site masks), and the one with a depth limit leaves the calls
//! of `leaf` to the callbacks of every user, as a recorder of `leaf`'s
//! arguments does. The fourth has triggers to the same effect
//! (`-T top@filter -D 2`): `top`, a trigger's own function, takes the
//! general way for every user, and the path decides the calls of `mid` and
//! `leaf` by the triggers' thread variable.

mod common;

use common::recorder::{
    check_nesting, filtered_entry, filtered_return, record_entry, record_return, FILTERS,
    GENERAL_ENTRIES, MAX_DEPTH,
};
use common::*;
use shadowgraph::fgraph::triggers::{SiteTrigger, Triggers};
use shadowgraph::record::writer;
use shadowgraph::tracer::fused;
use shadowgraph::{fgraph, ftrace};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const RECORDERS: usize = 4;
const ROUNDS: usize = 60;
/// Each recorder's depth limit (`record -D`; 0: none): the workload's
/// calls are 0 to 2 deep.
const LIMITS: [u32; RECORDERS] = [0, 0, 2, 0];
/// The recorder with graph filters: `-F top -N leaf`, so top's calls at
/// its depth 0 and mid's at 1.
const FILTERED: usize = 1;
/// The recorder whose (site) filter leaves `leaf` out.
const NO_LEAF: usize = 0;
/// The recorder with triggers: `-T top@filter -D 2`, recording what
/// FILTERED records.
const TRIGGERED: usize = 3;
/// The recorder (with a depth limit) that leaves `leaf`'s calls to the
/// callbacks, as one recording its arguments does.
const WITH_ARGS: usize = 2;

#[test]
fn recorders_come_and_go_on_the_shared_path() {
    let (dir, _lib, run) = nested_workload_as("fused_multi", Entry::Patchable);
    let sites = nested_sites();
    if !fused_paths_run() {
        return;
    }
    // Local rings, small enough for the threads to drain them often (the
    // general way's make_room, where the path finds too little room)
    // between the path's records.
    // Recorder i's k-th recording (a recorder that leaves in the middle
    // of a round ends its recording and starts a new one).
    let data = |i: usize, k: usize| dir.join(format!("data{i}-{k}"));
    let start = |i: usize, k: usize| {
        writer::start(i, i, &data(i, k), None, Some(256 << 10), false).unwrap();
    };
    for i in 0..RECORDERS {
        start(i, 0);
    }
    assert!(fused::enable_multi());
    let filter = ftrace::FilterSet::with_patterns(&NESTED, &[]).unwrap();
    // A recorder with graph filters or triggers, `f`, on the shared path.
    let filtered_user = |i: usize, f: &fgraph::filters::GraphFilter| {
        let u = fgraph::GraphUser::new(filtered_entry, filtered_return, filter.clone(), i);
        assert!(fused::let_multi_stand_in_filtered(
            &u,
            f,
            &|_| fused::SiteArgs::None,
            false
        ));
        u
    };
    let users: Vec<Arc<fgraph::GraphUser>> = (0..RECORDERS)
        .map(|i| {
            if i == FILTERED {
                let set = |p: &str| Some(ftrace::FilterSet::with_patterns(&[p], &[]).unwrap());
                let f = FILTERS[i].get_or_init(|| fgraph::filters::GraphFilter {
                    functions: set("top"),
                    notrace: set("leaf"),
                    ..Default::default()
                });
                return filtered_user(i, f);
            }
            if i == TRIGGERED {
                let f = FILTERS[i].get_or_init(|| {
                    let top = ftrace::site_by_name("top").unwrap().id as usize;
                    let mut each = vec![SiteTrigger::default(); ftrace::sites().len()];
                    each[top].filter = Some(true);
                    fgraph::filters::GraphFilter {
                        triggers: Some(Arc::new(Triggers::new(each, true, 2, false, (0, 0)))),
                        ..Default::default()
                    }
                });
                return filtered_user(i, f);
            }
            MAX_DEPTH[i].store(LIMITS[i], Ordering::Relaxed);
            let filter = match i {
                NO_LEAF => ftrace::FilterSet::with_patterns(&NESTED, &["leaf"]).unwrap(),
                _ => filter.clone(),
            };
            let u = fgraph::GraphUser::new(record_entry, record_return, filter, i);
            match i {
                // As a recorder of leaf's arguments: its calls go to the
                // callbacks of every user.
                WITH_ARGS => {
                    let leaf = ftrace::site_by_name("leaf").unwrap().id;
                    assert!(fused::let_multi_stand_in_with_args(&u, LIMITS[i], &|id| id == leaf));
                }
                _ => assert!(fused::let_multi_stand_in(&u, LIMITS[i])),
            }
            u
        })
        .collect();
    let workers = Workers::start(3, run, 200);
    let pause = || std::thread::sleep(Duration::from_micros(400));
    let reg = |i: usize| fgraph::register_graph(&users[i]).unwrap();
    let unreg = |i: usize| fgraph::unregister_graph(&users[i]).unwrap();
    let mut recording = [0usize; RECORDERS];
    // Departures by recording.
    let mut left = std::collections::HashMap::<(usize, usize), u64>::new();
    for round in 0..ROUNDS {
        // A different recorder first each round; a different one leaves
        // in the middle.
        let [a, b, c, d] = [0, 1, 2, 3].map(|k| (round + k) % RECORDERS);
        reg(a);
        pause();
        reg(b);
        pause();
        reg(c);
        pause();
        reg(d);
        pause();
        unreg(b);
        // Its recording ends under the running threads (its rings
        // written out and taken from their threads: no thread's rings by
        // slot may name them again) and a new one starts.
        *left.entry((b, recording[b])).or_default() += 1;
        writer::end_instance(b);
        recording[b] += 1;
        start(b, recording[b]);
        pause();
        unreg(d);
        pause();
        unreg(c);
        pause();
        unreg(a);
        for i in [a, c, d] {
            *left.entry((i, recording[i])).or_default() += 1;
        }
    }
    // Two recorders for 30 rounds of the workers: the path takes their
    // calls (the callbacks only a ring's first record, and those of full
    // rings).
    reg(0);
    reg(1);
    let (g0, r0) = (GENERAL_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    while workers.rounds() < r0 + 30 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (g1, r1) = (GENERAL_ENTRIES.load(Ordering::Relaxed), workers.rounds());
    unreg(1);
    unreg(0);
    for i in [0, 1] {
        *left.entry((i, recording[i])).or_default() += 1;
    }
    // 9 calls of 25 a round entered by each (top and mid).
    let calls = (r1 - r0) * 200 * (9 + 9);
    assert!(
        (g1 - g0) * 10 < calls,
        "{} of {calls} entries by the callbacks",
        g1 - g0
    );
    let rounds = workers.stop();
    writer::flush_all();
    assert!(rounds > 0);
    assert_eq!(fgraph::counters().lost_frames, 0);

    let mut records_of = [0u64; RECORDERS];
    let mut deepest = [0u16; RECORDERS];
    for (&(i, k), &gone) in &left {
        let (records, open, deep) = match i {
            FILTERED | TRIGGERED => check_nesting(&data(i, k), &sites, &|addr, depth| {
                (addr, depth) == (sites[2], 0) || (addr, depth) == (sites[1], 1)
            }),
            NO_LEAF => check_nesting(&data(i, k), &sites, &|addr, _| addr != sites[0]),
            _ => check_nesting(&data(i, k), &sites, &|_, depth| {
                LIMITS[i] == 0 || (depth as u32) < LIMITS[i]
            }),
        };
        records_of[i] += records;
        deepest[i] = deepest[i].max(deep);
        // A recorder that leaves leaves at most each worker's three
        // frames open.
        assert!(
            open <= gone * 3 * 3,
            "recorder {i}, recording {k}: {open} entries never closed, {gone} departures"
        );
    }
    for (i, records) in records_of.iter().enumerate() {
        assert!(*records > 10_000, "recorder {i}: {records} records");
        // As deep as its limit or filters let it (or the workload goes).
        let want = match (i, LIMITS[i]) {
            (FILTERED | NO_LEAF | TRIGGERED, _) => 1,
            (_, 0) => 2,
            (_, m) => m as u16 - 1,
        };
        assert_eq!(deepest[i], want, "recorder {i}: its deepest record");
    }
}
