//! Calls that do not return the usual way (exceptions, longjmp, pthread_exit, coroutines), stacks the ABI does not promise, and every argument register kept.

mod common;

use common::*;
use std::collections::HashMap;
use std::process::Command;

/// The hard cases recorded (C++ exceptions through 5 traced levels,
/// pthread_exit 4 levels down, longjmp over 5 levels, backtrace() from 11
/// levels, and a forked child that throws): every thread's replay is
/// exactly the program's call structure, each frame skipped by an
/// exception or a longjmp closed where it was left, those pthread_exit
/// ended left open (as uftrace leaves them), and uftrace reads the same. On the fused recording path (the
/// default for one plain tracer) and on the general one.
#[test]
fn recorded_exceptions_longjmp_pthread_exit_and_fork_replay_exactly() {
    unwinding_program_replays_exactly(true);
}

#[test]
fn recorded_exceptions_and_longjmp_replay_exactly_on_the_general_path() {
    unwinding_program_replays_exactly(false);
}

fn unwinding_program_replays_exactly(fused: bool) {
    let dir = workdir(if fused {
        "unwindrec"
    } else {
        "unwindrec-general"
    });
    let exe = build_fixture_with(&dir, "unwind", "unwind.cpp", &["-pthread"]);
    let data = dir.join("u.data");
    let o = record_run(&[], &Way::of(fused).with(&["--no-libs"]), &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    // backtrace() and _Unwind_Backtrace see as many frames as untraced:
    // real addresses, none of ours.
    let plain = Command::new(&exe).output().unwrap();
    assert_eq!(out, String::from_utf8_lossy(&plain.stdout));
    assert_eq!(out.trim(), "s=-100 r=42 l=10 bt=15 ubt=16 child=0");
    let info = view_text("info", &data);
    let path = if fused { "fused" } else { "general" };
    assert!(
        info.contains(&format!("record path         : {path}")),
        "{info}"
    );
    // A chain: `f` called `open` levels deep, the innermost a leaf, then
    // closed back out, at indentation `base`.
    // (C++ names show in the simple form, as uftrace shows them.)
    let chain = |v: &mut Vec<String>, f: &str, open: usize, base: usize| {
        for d in 0..open {
            v.push(format!("{}{f}() {{", "  ".repeat(base + d)));
        }
        v.push(format!("{}{f}();", "  ".repeat(base + open)));
        for d in (0..open).rev() {
            v.push(format!("{}}} /* {f} */", "  ".repeat(base + d)));
        }
    };
    let mut main = vec!["main() {".to_string()];
    for _ in 0..100 {
        main.push("  catcher() {".into());
        chain(&mut main, "thrower", 5, 2);
        main.push("  } /* catcher */".into());
    }
    for _ in 0..10 {
        main.push("  lj_run() {".into());
        chain(&mut main, "lj", 5, 2);
        main.push("  } /* lj_run */".into());
    }
    chain(&mut main, "bt_depth", 10, 1);
    main.push("} /* main */".into());
    // A thread ended by pthread_exit leaves its calls open, as uftrace
    // does (its replay lists them after the calls).
    let mut exiting = vec!["exit_thread() {".to_string()];
    for d in 1..=4 {
        exiting.push(format!("{}exit_deep() {{", "  ".repeat(d)));
    }
    // A forked child's calls show from depth 0, whatever it inherited.
    let mut child = vec!["catcher() {".to_string()];
    chain(&mut child, "thrower", 3, 1);
    child.push("} /* catcher */".into());

    let replay = |cmd: &mut Command, width: usize| -> HashMap<i32, Vec<String>> {
        let o = cmd.args(["replay", "-d"]).arg(&data).output().unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        let mut by_tid: HashMap<i32, Vec<String>> = HashMap::new();
        for l in text(&o).0.lines().skip(1).take_while(|l| !l.is_empty()) {
            let (head, body) = l.split_once("] | ").unwrap();
            let tid = head[head.len() - width..].trim().parse().unwrap();
            by_tid.entry(tid).or_default().push(body.to_string());
        }
        by_tid
            .into_iter()
            .map(|(t, lines)| (t, merge_leaves(lines)))
            .collect()
    };
    let ours = replay(&mut shadowgraph(), 6);
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    let pid: i32 = d.info.get("pid").unwrap().parse().unwrap();
    assert_eq!(ours.len(), 3);
    assert_eq!(ours[&pid], main);
    let others: Vec<&Vec<String>> = ours
        .iter()
        .filter(|(t, _)| **t != pid)
        .map(|(_, v)| v)
        .collect();
    assert!(others.contains(&&exiting), "{others:?}");
    assert!(others.contains(&&child), "{others:?}");
    if require("uftrace", "the same view by uftrace") {
        let theirs = replay(&mut Command::new("uftrace"), 6);
        assert_eq!(theirs, ours, "uftrace reads every thread the same");
    }
}

/// A program that switches stacks (swapcontext coroutines, five traced
/// levels deep on the coroutine's stack at every switch) runs as untraced,
/// fused and general: the frames of the stack switched away from are
/// closed at the switch, and when their functions return later they
/// resume where they must, never at a return without its shadow frame.
/// Every call is recorded.
#[test]
fn coroutines_switching_stacks_run_and_record() {
    let dir = workdir("coro");
    let exe = build_fixture(&dir, "coro", "coroutines.c");
    let plain = Command::new(&exe).output().unwrap();
    assert!(plain.status.success());
    for way in Way::ALL {
        let name = way.name();
        let data = dir.join(format!("{name}.data"));
        let o = record_run(&[], &way.with(&["--no-libs"]), &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{name}: {out}\n{err}");
        assert_eq!(out, String::from_utf8_lossy(&plain.stdout), "{name}");
        assert!(err.contains("(0 lost)"), "{name}: {err}");
        let rows = report_rows(&report_text(&data));
        assert_eq!(rows["level"].2, 5000, "{name}: {rows:?}");
        assert_eq!(rows["work"].2, 3001, "{name}: {rows:?}");
        assert_eq!(rows["co_body"].2, 1, "{name}: {rows:?}");
        assert_eq!(rows["resume"].2, 1001, "{name}: {rows:?}");
    }
}

/// gcc calls a function it knows needs no stack alignment without it
/// (here `worker` pushes two registers and calls `mid` with rsp ≡ 8 mod
/// 16), so a traced function may return to us on an unaligned stack. Every
/// return path realigns before saving xmm0/xmm1 or calling Rust: the
/// general one (always taken without the fused path, and by the fused path
/// when a small ring is full) crashed on `movaps` before.
#[test]
fn functions_called_on_an_unaligned_stack_return_on_every_path() {
    let dir = workdir("unaligned");
    let exe = build_fixture(&dir, "ua", "unaligned.c");
    let plain = Command::new(&exe).output().unwrap();
    assert!(plain.status.success());
    for (name, opts) in [
        ("fused", &[][..]),
        ("fused, ring full", &["-b", "64K"][..]),
        ("general", &["--general-path"][..]),
        ("hijacked", &["--hijack-returns"][..]),
    ] {
        let data = dir.join(format!("{}.data", name.replace([' ', ','], "")));
        let o = record_run(&[], opts, &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{name}: {out}\n{err}");
        assert_eq!(out, String::from_utf8_lossy(&plain.stdout), "{name}");
        assert!(err.contains("(0 lost)"), "{name}: {err}");
        let rows = report_rows(&report_text(&data));
        assert_eq!(rows["mid"].2, 40000, "{name}: {rows:?}");
        assert_eq!(rows["leaf"].2, 80000, "{name}: {rows:?}");
    }
}

/// Every argument register reaches the traced function, whichever way its
/// entry is recorded: the fused entries keep five of them in xmm8–12
/// meanwhile (record::fused), the general way on the stack. The program
/// checks every result; the recorded calls nest exactly.
#[test]
fn every_argument_register_reaches_the_traced_function() {
    let dir = workdir("argument_registers");
    let exe = build_fixture(&dir, "args", "argument_registers.c");
    let ways: [&[&str]; 7] = [
        &[],
        &["-D", "8"],
        &["-F", "main"],
        &["-t", "1ns"],
        &["--tracer", "profile"],
        &["--hijack-returns"],
        &["--general-path"],
    ];
    for opts in ways {
        let data = dir.join("args.data");
        let o = record_run(&[], opts, &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{opts:?}: {out}\n{err}");
        if opts.contains(&"profile") {
            assert!(err.contains("profiled 18001 calls of 7 functions"), "{err}");
            continue;
        }
        let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
        assert!(err.contains("(0 lost)"), "{opts:?}: {err}");
        for &tid in &d.tids {
            calls_nest_exactly(&d, tid, &[]).unwrap_or_else(|e| panic!("{opts:?}: {e}"));
            let n = records_of(&d, tid).unwrap().len();
            assert!(n > 4 * 3000, "{opts:?}: {n} records");
        }
    }
}
