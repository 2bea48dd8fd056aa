//! Arguments of a recording that filters nothing else (`-A` with
//! numbers in registers, no return values): the plain recorder's entry
//! writes them with the record (tracer::fused, `attach_plain_args`), and
//! they replay as uftrace 0.13 records them from the same binary; beside
//! other tracers, the calls of those functions go to the callbacks.

mod common;

use common::*;
use std::process::Command;

const SPECS: [&str; 32] = [
    "-A",
    "mixed@arg1/c,arg2/i16,arg3/i32,arg4/i64,fparg1,arg5/u8",
    "-A",
    "pair@arg1,arg2",
    "-A",
    "wide@arg1,arg2,arg3/x,arg4/x,arg5/i32,arg6/i8",
    // The first 1–6 registers' whole words in order: each count an entry
    // of its own (plain_regs.rs).
    "-A",
    "w1@arg1",
    "-A",
    "w2@arg1,arg2",
    "-A",
    "w3@arg1,arg2,arg3",
    "-A",
    "w4@arg1,arg2,arg3,arg4",
    "-A",
    "w5@arg1,arg2,arg3,arg4,arg5",
    "-A",
    "six@arg1,arg2,arg3,arg4,arg5,arg6",
    // Their low 4 bytes in order, 1–6 of them.
    "-A",
    "h1@arg1/i32",
    "-A",
    "h2@arg1/i32,arg2/i32",
    "-A",
    "three@arg1/i32,arg2/i32,arg3/i32",
    "-A",
    "h3@arg1/i32,arg2/i32,arg3/i32",
    "-A",
    "h4@arg1/i32,arg2/i32,arg3/i32,arg4/i32",
    "-A",
    "h5@arg1/i32,arg2/i32,arg3/i32,arg4/i32,arg5/i32",
    "-A",
    "h6@arg1/i32,arg2/i32,arg3/i32,arg4/i32,arg5/i32,arg6/i32",
];

/// args_sizes.c built in `dir`, with sites for both tracers (`-pg
/// -mfentry -mrecord-mcount`).
fn sizes(dir: &std::path::Path) -> std::path::PathBuf {
    let exe = dir.join("sizes");
    cc(
        &[&fixture("args_sizes.c")],
        &["-O2", "-pg", "-mfentry", "-mrecord-mcount", "-no-pie"],
        &exe,
    );
    exe
}

#[test]
fn every_size_and_a_float_recorded_by_the_plain_entry_as_uftrace() {
    let dir = workdir("arguments-plain");
    let exe = sizes(&dir);
    let ours = dir.join("ours.data");
    let o = record_run(&[], &SPECS, &ours, &exe, &[]);
    let err = text(&o).1;
    assert!(o.status.success(), "{err}");
    // The summary counts records, not the data after them.
    let d = shadowgraph_data::dir::DataDir::open(&ours).unwrap();
    let n: usize = d.tids.iter().map(|&t| d.records(t).unwrap().len()).sum();
    assert!(err.contains(&format!("recorded {n} records")), "{n}: {err}");
    let info = view_text("info", &ours);
    assert!(info.contains("of them with arguments"), "{info}");
    let replay = replay_text(&ours);
    shows_each(
        &replay,
        &[
            "mixed('A', -2, -3, 1099511627776, 0.000000, 200);",
            "mixed('C', -4, -3, 1099511627778, 5.000000, 202);",
            "pair(1, 7);",
            "wide(2, -2, 0x200000000, 0xfffffffe00000000, 5, 6);",
            "six(2, -2, 0x10000000000, 4, 5, -6);",
            "three(2, -7, 1048576);",
            "w1(0x1000000000);",
            "w2(0x2000000000, -1);",
            "w3(0x3000000000, -1, 2);",
            "w4(0x1000000000, -1, 2, -3);",
            "w5(0x3000000000, -1, 2, -3, 4);",
            "h1(0);",
            "h2(-1, 1);",
            "h3(-2, 1, -2);",
            "h4(-1, 1, -2, 3);",
            "h5(-2, 1, -2, 3, -4);",
            "h6(-1, 1, -2, 3, -4, 5);",
        ],
    );
    if uftrace_missing("recording arguments beside uftrace") {
        return;
    }
    let theirs = dir.join("theirs.data");
    let o = Command::new("uftrace")
        .args(["record", "--no-libcall", "--no-sched", "-d"])
        .arg(&theirs)
        .args(SPECS)
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(
        graph_part(&replay),
        graph_part(&uftrace_view("replay", &theirs).unwrap())
    );
}

/// Arguments beside other tracers: the path several tracers share records
/// no data, so the calls of the functions with arguments or a return
/// value to record go to every tracer's callbacks, and the others stay on
/// the shared path. Each tracer records what it records alone: a plain
/// one (its entry's arguments), one with a depth limit, and, with return
/// values, one with a function filter (the callbacks keep the return of
/// such a call in its frame, away from the shared return).
#[test]
fn arguments_beside_other_tracers_record_as_alone() {
    let dir = workdir("arguments-shared");
    let exe = sizes(&dir);
    let graph = |d: &std::path::Path| graph_part(&replay_text(d));
    for (k, (extra, b, alone)) in [
        (&[][..], "b:depth=2", &["-D", "2"]),
        (
            &["-R", "pair@retval", "-R", "w3@retval"][..],
            "b:filter=h*",
            &["-F", "h*"],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let specs: Vec<&str> = SPECS.iter().chain(extra).copied().collect();
        let record = |opts: &[&str], data: &std::path::Path| {
            let all: Vec<&str> = opts.iter().chain(&specs).copied().collect();
            let o = record_run(&[], &all, data, &exe, &[]);
            assert!(o.status.success(), "{opts:?}: {}", text(&o).1);
        };
        let (solo_a, solo_b, shared) = (
            dir.join(format!("a{k}.data")),
            dir.join(format!("b{k}.data")),
            dir.join(format!("shared{k}.data")),
        );
        record(&[], &solo_a);
        record(alone, &solo_b);
        record(&["--tracer", "a", "--tracer", b], &shared);
        let info = view_text("info", &shared.join("a"));
        assert!(
            info.contains("record path         : fused (several tracers"),
            "{b}: {info}"
        );
        assert_eq!(graph(&shared.join("a")), graph(&solo_a), "{extra:?}: a");
        assert_eq!(graph(&shared.join("b")), graph(&solo_b), "{extra:?}: {b}");
    }
}
