//! Instruction budgets of a traced call, counted by callgrind (design §7:
//! gate on instruction counts, which are repeatable, not on time, which is
//! noisy). `shadowgraph-bench ir MODE N` sets one configuration up and calls
//! a traced function N times inside `loop_target`; callgrind counts only
//! inside that loop. A budget is today's count plus headroom: lower it when
//! the hot path gets leaner.

use std::process::Command;

const CALLS: u64 = 100_000;

/// Every path that hands a call to a user checks, inside its bracket or
/// restartable sequence, that the site's mask names the user (fgraph's
/// site masks, about ten instructions), the single user's paths too.
///
/// (mode, instructions per call at most, including the loop's own ~10;
/// `-tail` modes: per iteration of `loop_tail`, two traced calls, the
/// second a tail call)
const BUDGETS: [(&str, f64); 24] = [
    ("none", 12.0),
    // An ops' own trampoline with its entry fused in: one call, to the
    // callback.
    ("ops", 105.0),
    // Several ops with trampolines: their set's caller, its entry fused
    // in, one call to each callback.
    ("set2", 140.0),
    ("set10", 260.0),
    ("list2", 350.0),
    ("direct", 14.0),
    // A direct call and one ops: the ops' chained caller, then the target.
    ("direct-ops", 105.0),
    ("graph-decline", 185.0),
    ("graph", 290.0),
    // Several users: the stubs' path, one loop in assembly over the users
    // the site's mask names (each user named in the frame as it keeps the
    // call, and its bit taken just before its return callback).
    ("graph2", 485.0),
    // One user, and one whose filter selects other functions: the
    // site's mask names the first alone, the lead user, whose path the
    // stub takes as if it were alone.
    ("graph-elsewhere", 290.0),
    ("graph16", 1400.0),
    // The library's plain recorder, timestamps and ring writes included:
    // on the fused path (tracer::fused) and through its fgraph callbacks
    // (tracer::recorder).
    ("record", 235.0),
    ("record-general", 565.0),
    // A recorder of the call's argument (`-A target@arg1`): valgrind has
    // no rseq, which the plain entries with arguments need, so this counts
    // the way taken without it, through the callbacks.
    ("record-arg", 1100.0),
    // Two recorders on their shared fused path (valgrind has no rseq:
    // ring slots by cmpxchg), and through the callbacks, one clock read
    // per event either way.
    ("record2", 420.0),
    ("record2-general", 1060.0),
    // A recorder and a profile beside it on the shared fused path: one
    // frame with the profile's words, the recorder's records, the
    // profile's counts (valgrind has no rseq: ring slots by cmpxchg).
    ("record-profile", 440.0),
    // Two on the shared path where one has a depth limit (its limit
    // looked up by its instance each event), or graph filters (its class
    // and thread variable, its bit in the frame after its record).
    ("record2-depth", 470.0),
    ("record2-filter", 570.0),
    // The same where the graph filters decline every call (outside the
    // function they name): no record, no bit, for that user.
    ("record2-decline", 420.0),
    // Two where one has triggers (of a function never called): the
    // site's class looked up in its table before anything is written
    // (not a trigger's own), then its verdict by the triggers' thread
    // variable and switch, its record, its variable and bit after it.
    ("record2-trigger", 600.0),
    // A tail call between traced functions stays on the fast paths (two
    // calls' worth and the check that it is one), not the general way.
    ("graph-tail", 605.0),
    ("record-tail", 505.0),
];

#[test]
fn traced_call_instruction_budgets() {
    if !shadowgraph_testkit::tool::require("valgrind", "the instruction budgets") {
        return;
    }
    let dir = shadowgraph_testkit::scratch::scratch_root("shadowgraph-ir");
    std::fs::create_dir_all(&dir).unwrap();
    let mut report = Vec::new();
    for (mode, budget) in BUDGETS {
        let out = dir.join(format!("callgrind.{mode}"));
        let o = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(if mode.ends_with("-tail") {
                "--toggle-collect=loop_tail"
            } else {
                "--toggle-collect=loop_target"
            })
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(env!("CARGO_BIN_EXE_shadowgraph-bench"))
            .args(["ir", mode, &CALLS.to_string()])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let text = std::fs::read_to_string(&out).unwrap();
        let total: u64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("summary: ")
                    .or_else(|| l.strip_prefix("totals: "))
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{mode}: no totals in {}", out.display()));
        let per_call = total as f64 / CALLS as f64;
        let over = if per_call > budget { "  OVER" } else { "" };
        report.push(format!(
            "{mode}: {per_call:.1} instructions per call (budget {budget}){over}"
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        !report.iter().any(|l| l.ends_with("OVER")),
        "over budget:\n{}",
        report.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
