//! The fused recording path (record::fused) under concurrency: threads run
//! a traced workload while the fused recorder registers and unregisters in
//! a loop (the manager's stubs are made and retired each time, the path
//! switches with frames in flight) and while a second user comes and goes
//! (the fused path gives way to the general one and back). Its own process:
//! the fused path, once on, serves every recorder of the process.

mod common;

use common::frames::{accept, ignore};
use common::recorder::{calls_and_general, record_entry, record_return};
use common::*;
use shadowgraph::record::writer;
use shadowgraph::tracer::fused;
use shadowgraph::{fgraph, ftrace};
use shadowgraph_data::format::{decode, Kind, RECORD_SIZE};

#[test]
fn threads_record_while_the_fused_recorder_comes_and_goes() {
    record_while_the_recorder_comes_and_goes(Entry::Patchable);
}

/// The same on the functions patched at their prologue, in a process of
/// its own (this test binary run again for the test below alone).
#[test]
fn the_same_on_functions_patched_at_their_prologue() {
    let me = std::env::current_exe().unwrap();
    let o = std::process::Command::new(me)
        .args([
            "--exact",
            "prologue_variant_in_its_own_process",
            "--ignored",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("1 passed"),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
#[ignore = "run by the_same_on_functions_patched_at_their_prologue, in its own process"]
fn prologue_variant_in_its_own_process() {
    record_while_the_recorder_comes_and_goes(Entry::Prologue);
}

fn record_while_the_recorder_comes_and_goes(entry: Entry) {
    let name = format!("fused_stress_{entry:?}");
    let (dir, _lib, run) = nested_workload_as(&name, entry);
    let sites = nested_sites();

    if !fused_paths_run() {
        return;
    }
    // Small local rings: the threads drain them often (the general way's
    // make_room) while the fused path writes them.
    let data = dir.join("data");
    writer::start(0, 0, &data, None, Some(64 << 10), false).unwrap();
    let filter = ftrace::FilterSet::with_patterns(&NESTED, &[]).unwrap();
    let recorder = fgraph::GraphUser::new(record_entry, record_return, filter.clone(), 0);
    assert!(fused::attach(&recorder, 0, 0));
    let other = fgraph::GraphUser::new(accept, ignore, filter.clone(), 0);
    let third = fgraph::GraphUser::new(accept, ignore, filter, 0);

    let workers = Workers::start(3, run, 200);
    users_come_and_go(&recorder, &other, &third, 150, || {
        // The loads of thread-local offsets and rseq's are immediates
        // now (the manager, made by the first registration, wrote them).
        let (imm, all) = shadowgraph::tls::fixed_loads();
        assert!(all > 20, "{all} fixed loads listed");
        assert_eq!(imm, all, "fixed loads rewritten as immediates");
        // And the plain path's thread-local operands hold their
        // offsets (it could not run with the placeholders).
        assert!(shadowgraph::tls::fixed_tls_done());
        // With rseq, the sites' stubs call the plain entry (no bracket,
        // the ring's depth the handlers' witness).
        if fused::uses_rseq() && ftrace::quiesce::fence_rseq_too() {
            assert!(fused::ring_depth_witness());
        }
        // Each site jumps to its own stub, which calls the function.
        for f in ["leaf", "mid", "top"] {
            let s = ftrace::site_by_name(f).unwrap();
            assert_ne!(s.flags & ftrace::site_flags::STUB, 0, "{f}");
            // SAFETY: reading a loaded site's five bytes.
            let op = unsafe { *(s.addr as *const u8) };
            assert_eq!(op, 0xe9, "{f}: jmp to its stub");
        }
        ftrace::check_invariants().unwrap();
    });
    // After all that, the recorder alone takes the fused path again (its
    // callback sees a ring's first record and those of full rings).
    fgraph::register_graph(&recorder).unwrap();
    let (calls, general) = calls_and_general(&workers);
    fgraph::unregister_graph(&recorder).unwrap();
    assert!(
        general * 20 < calls,
        "{general} of {calls} entries by the callback"
    );
    // The recorder goes (fused::attach keeps no reference to it) while the
    // threads still call through the sites' stubs: the plain path reads
    // nothing of it but its frame word's copy, and finds no fused user.
    assert_eq!(std::sync::Arc::strong_count(&recorder), 1, "held elsewhere");
    drop(recorder);
    stop_and_flush(workers);

    // Every record whole: a traced function, at a depth it can have.
    let (mut records, mut entries) = (0, 0);
    for e in std::fs::read_dir(&data).unwrap().flatten() {
        let bytes = std::fs::read(e.path()).unwrap();
        assert_eq!(bytes.len() % RECORD_SIZE, 0, "{}", e.path().display());
        for (k, chunk) in bytes.chunks_exact(RECORD_SIZE).enumerate() {
            let r = decode(chunk.try_into().unwrap(), (k * RECORD_SIZE) as u64)
                .unwrap_or_else(|b| panic!("{}: {b}", e.path().display()));
            match r.kind {
                Kind::Entry | Kind::Exit => {
                    assert!(sites.contains(&r.addr), "record {k}: {:#x}", r.addr);
                    assert!(r.depth <= 2, "record {k}: depth {}", r.depth);
                    records += 1;
                    entries += (r.kind == Kind::Entry) as u64;
                }
                Kind::Lost => {}
                other => panic!("record {k}: {other:?}"),
            }
        }
    }
    assert!(records > 1000 && entries > 0, "{records} records");
}
