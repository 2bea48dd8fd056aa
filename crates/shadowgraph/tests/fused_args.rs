//! The plain recorder's entry for the sites whose arguments it records
//! (tracer::fused, `attach_plain_args`) under concurrency: threads run a
//! traced workload whose `leaf` has its argument recorded while the
//! recorder registers and unregisters in a loop and other users come and
//! go (the entry gives way to the general one and back, frames in
//! flight). Every record is whole; every entry of `leaf` the entry wrote
//! carries the argument `leaf` was given; the other functions' calls go
//! through the plain entry, without data. Its own process: the fused path,
//! once on, serves every recorder of the process.

mod common;

use common::frames::{accept, ignore};
use common::recorder::{calls_and_general, record_entry, record_return};
use common::*;
use shadowgraph::record::writer;
use shadowgraph::tracer::fused;
use shadowgraph::{fgraph, ftrace};
use shadowgraph_data::args::ArgSpec;
use shadowgraph_data::format::{decode, Kind, RECORD_SIZE};

#[test]
fn threads_record_arguments_while_the_recorder_comes_and_goes() {
    let (dir, _lib, run) = nested_workload_as("fused_args_stress", Entry::Patchable);
    let sites = nested_sites();
    if !fused_paths_run() {
        return;
    }
    let data = dir.join("data");
    writer::start(0, 0, &data, None, Some(64 << 10), false).unwrap();
    let leaf = ftrace::site_by_name("leaf").unwrap().addr;
    let mut descs = vec![0; ftrace::site_count()];
    let spec = ArgSpec::parse("arg1/i64").unwrap();
    descs[ftrace::site_id_of(leaf).unwrap() as usize] = fused::fast_args(&[spec]).unwrap();
    let filter = ftrace::FilterSet::with_patterns(&NESTED, &[]).unwrap();
    let recorder = fgraph::GraphUser::new(record_entry, record_return, filter.clone(), 0);
    // (Refused only without rseq: glibc registers it on every machine the
    // tests run on.)
    assert!(fused::attach_plain_args(&recorder, 0, &descs));
    let other = fgraph::GraphUser::new(accept, ignore, filter.clone(), 0);
    let third = fgraph::GraphUser::new(accept, ignore, filter, 0);

    let workers = Workers::start(3, run, 200);
    users_come_and_go(&recorder, &other, &third, 150, || {});
    // Alone again: the fused entries take nearly every call (the callback
    // sees a ring's first record and those of full rings).
    fgraph::register_graph(&recorder).unwrap();
    let (calls, general) = calls_and_general(&workers);
    fgraph::unregister_graph(&recorder).unwrap();
    assert!(general * 20 < calls, "{general} of {calls} by the callback");
    drop(recorder);
    stop_and_flush(workers);

    // Every record whole: a traced function at a depth it can have; an
    // entry of leaf with data is followed by its argument (a word: leaf
    // is given 0 to 400 here), and no other record has data.
    let (mut records, mut with_arg, mut plain) = (0, 0, 0);
    for e in std::fs::read_dir(&data).unwrap().flatten() {
        let bytes = std::fs::read(e.path()).unwrap();
        let mut at = 0;
        while at < bytes.len() {
            let r = decode(bytes[at..at + RECORD_SIZE].try_into().unwrap(), at as u64)
                .unwrap_or_else(|b| panic!("{}: {b}", e.path().display()));
            at += RECORD_SIZE;
            match r.kind {
                Kind::Entry | Kind::Exit => {
                    assert!(sites.contains(&r.addr), "at {at}: {:#x}", r.addr);
                    assert!(r.depth <= 2, "at {at}: depth {}", r.depth);
                    records += 1;
                }
                Kind::Lost => continue,
                other => panic!("at {at}: {other:?}"),
            }
            if r.more {
                assert!(r.kind == Kind::Entry && r.addr == leaf as u64, "at {at}");
                let v = i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
                assert!((0..=400).contains(&v), "at {at}: leaf({v})");
                at += 8;
                with_arg += 1;
            } else if r.kind == Kind::Entry && r.addr != leaf as u64 {
                plain += 1;
            }
        }
    }
    assert!(
        records > 1000 && with_arg > 1000 && plain > 100,
        "{records} records, {with_arg} with leaf's argument, {plain} others' entries"
    );
    assert!(
        fused::rseq_restarts() >= fused::args_entry_restarts(),
        "restarts counted twice"
    );
}
