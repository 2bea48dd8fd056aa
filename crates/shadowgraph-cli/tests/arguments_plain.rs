//! Arguments of a recording that filters nothing else (`-A` with
//! numbers in registers, no return values): the plain recorder's entry
//! writes them with the record (tracer::fused, `attach_plain_args`), and
//! they replay as uftrace 0.13 records them from the same binary.

mod common;

use common::*;
use std::process::Command;

const SPECS: [&str; 10] = [
    "-A",
    "mixed@arg1/c,arg2/i16,arg3/i32,arg4/i64,fparg1,arg5/u8",
    "-A",
    "pair@arg1,arg2",
    "-A",
    "wide@arg1,arg2,arg3/x,arg4/x,arg5/i32,arg6/i8",
    // The six registers' whole words in order: kept as they came.
    "-A",
    "six@arg1,arg2,arg3,arg4,arg5,arg6",
    // Their low 4 bytes in order, an odd number of them.
    "-A",
    "three@arg1/i32,arg2/i32,arg3/i32",
];

#[test]
fn every_size_and_a_float_recorded_by_the_plain_entry_as_uftrace() {
    let dir = workdir("arguments-plain");
    let exe = dir.join("sizes");
    // -pg -mfentry -mrecord-mcount: sites for both tracers.
    cc(
        &[&fixture("args_sizes.c")],
        &["-O2", "-pg", "-mfentry", "-mrecord-mcount", "-no-pie"],
        &exe,
    );
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
