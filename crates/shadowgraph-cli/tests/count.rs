//! `count` and `sites`: every call of every function counted exactly, in every site flavour, through the counting trampolines and through fgraph.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

#[test]
fn demo_records_and_shows_every_call_of_the_sample() {
    let o = shadowgraph().arg("demo").output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("fib(20) = 6765"), "{out}");
    assert!(out.contains("# DURATION     TID     FUNCTION\n"), "{out}");
    // The report's Calls column: every call of the sample, exactly.
    let report = out.split_once("## report").unwrap().1;
    let c: HashMap<&str, u64> = report
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = f.len();
            if n < 6 {
                return None; // header and separator lines
            }
            Some((f[n - 1], f[n - 2].parse().ok()?))
        })
        .collect();
    // fib(n) makes 2*fib(n+1)-1 calls: fib(20) and fib(15).
    assert_eq!(c["fib"], (2 * 10946 - 1) + (2 * 987 - 1), "{report}");
    assert_eq!(c["square"], 225 + 450 + 10);
    assert_eq!(c["sum_squares"], 151);
    assert_eq!(c["parse_line"], 150);
    assert_eq!(c["parse_file"], 2);
    assert_eq!(c["main"], 1);
    assert_eq!(c["worker"], 1);
    assert!(err.contains("(0 lost)"), "{err}");
}

/// Runs `exe n` plainly and counted, in the program's directory (-pg
/// programs write gmon.out into their working directory).
fn check_program(exe: &Path, n: u64, expect_main: bool) {
    let cwd = exe.parent().unwrap();
    let plain = Command::new(exe)
        .arg(n.to_string())
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(plain.status.success());
    let o = shadowgraph()
        .current_dir(cwd)
        .arg("count")
        .arg(exe)
        .arg(n.to_string())
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{}: {out}\n{err}", exe.display());
    assert!(
        out.starts_with(&String::from_utf8_lossy(&plain.stdout).to_string()),
        "output changed: {out}"
    );
    let c = counts(&out);
    let want = [
        ("run", 1),
        ("mid", n),
        ("leaf", 2 * n),
        ("recurse", 51),
        ("run_args", 1),
        ("many_args", n / 10),
        ("var_sum", n / 10),
    ];
    for (f, k) in want {
        assert_eq!(
            c.get(f).copied(),
            Some(k),
            "{}: {f}\n{out}\n{err}",
            exe.display()
        );
    }
    if expect_main {
        assert_eq!(c.get("main").copied(), Some(1), "{}", exe.display());
    }
    assert!(
        err.contains("unknown_calls=0") && err.contains("deferred=0"),
        "{err}"
    );
}

#[test]
fn executables_in_every_flavour_count_exactly() {
    let dir = workdir("flavours");
    let src = lib_fixture("calls.c");
    let local_fentry = lib_fixture("fentry_local.s");
    let nopie = ["-no-pie", "-fno-pie"];
    let patchable = ["-fpatchable-function-entry=5"];
    let fentry = ["-pg", "-mfentry", "-mrecord-mcount"];
    let cet = ["-fcf-protection=full"];
    let cases: Vec<(&str, Vec<&str>, bool)> = vec![
        ("pie_sled", patchable.to_vec(), false),
        ("nopie_sled", [&patchable[..], &nopie].concat(), false),
        ("pie_sled_cet", [&patchable[..], &cet].concat(), false),
        (
            "nopie_sled_cet",
            [&patchable[..], &cet, &nopie].concat(),
            false,
        ),
        ("pie_fentry_got", fentry.to_vec(), false),
        ("pie_fentry_got_cet", [&fentry[..], &cet].concat(), false),
        ("nopie_fentry_call", [&fentry[..], &nopie].concat(), false),
        (
            "nopie_fentry_nop",
            [&fentry[..], &["-mnop-mcount"], &nopie].concat(),
            false,
        ),
        ("pie_fentry_addr32", fentry.to_vec(), true),
    ];
    for (name, flags, with_local_fentry) in cases {
        let exe = dir.join(name);
        let mut all = vec!["-O2", "-DWITH_MAIN"];
        all.extend(flags);
        let mut srcs: Vec<&Path> = vec![&src];
        if with_local_fentry {
            srcs.push(&local_fentry);
        }
        cc(&srcs, &all, &exe);
        check_program(&exe, 400, true);
    }
}

#[test]
fn shared_library_flavours_count_exactly() {
    let dir = workdir("libs");
    for (name, flags) in [
        ("sled", vec!["-fpatchable-function-entry=5"]),
        (
            "sled_cet",
            vec!["-fpatchable-function-entry=5", "-fcf-protection=full"],
        ),
        ("fentry", vec!["-pg", "-mfentry", "-mrecord-mcount"]),
    ] {
        let sub = dir.join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let lib = sub.join("libcalls.so");
        let mut all = vec!["-O2", "-fPIC", "-shared"];
        all.extend(&flags);
        cc(&[&lib_fixture("calls.c")], &all, &lib);
        let exe = sub.join("uses_lib");
        let rpath = format!("-Wl,-rpath,{}", sub.display());
        cc(
            &[&fixture("uses_lib.c"), &lib],
            &["-O2", "-fpatchable-function-entry=5", &rpath],
            &exe,
        );
        let o = shadowgraph().arg("count").arg(&exe).output().unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        let c = counts(&out);
        for (f, k) in [
            ("main", 1),
            ("run", 1),
            ("mid", 300),
            ("leaf", 600),
            ("recurse", 51),
            ("many_args", 30),
            ("var_sum", 30),
        ] {
            assert_eq!(c.get(f).copied(), Some(k), "{name}: {f}\n{out}");
        }
        assert!(
            out.contains("[libcalls.so]") && out.contains("[uses_lib]"),
            "{out}"
        );
    }
}

#[test]
fn program_sigtrap_handler_is_chained_and_ours_stays() {
    let dir = workdir("traps");
    let exe = dir.join("traps");
    cc(
        &[&fixture("traps.c")],
        &["-O2", "-fpatchable-function-entry=5"],
        &exe,
    );
    let o = shadowgraph().arg("count").arg(&exe).output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("caught 4, r=10"), "{out}");
    assert_eq!(counts(&out)["work"], 10);
    assert!(
        err.contains("sigtrap_handler_intact=1") && err.contains("traps_chained=4"),
        "{err}"
    );
}

#[test]
fn sites_lists_and_explains() {
    let dir = workdir("sites");
    let exe = dir.join("prog");
    cc(
        &[&lib_fixture("calls.c")],
        &[
            "-O2",
            "-DWITH_MAIN",
            "-fpatchable-function-entry=5",
            "-fcf-protection=full",
        ],
        &exe,
    );
    let o = shadowgraph().arg("sites").arg(&exe).output().unwrap();
    let (out, _) = text(&o);
    assert!(o.status.success());
    assert!(out.contains(": 8 sites, 0 rejected"), "{out}");
    for f in ["main", "leaf", "many_args"] {
        assert!(
            out.lines()
                .any(|l| l.contains("sled") && l.contains("yes") && l.ends_with(f)),
            "{f}: {out}"
        );
    }

    let plain = dir.join("plain");
    cc(&[&lib_fixture("calls.c")], &["-O2", "-DWITH_MAIN"], &plain);
    for cmd in [vec!["sites"], vec!["count"]] {
        let o = shadowgraph().args(&cmd).arg(&plain).output().unwrap();
        let (_, err) = text(&o);
        assert!(!o.status.success());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("no patchable function entries")
                && err.contains("-fpatchable-function-entry=5"),
            "{err}"
        );
    }
    // A static program: the agent cannot come in; said in one line, and
    // the program is not run.
    let stat = dir.join("static");
    cc(
        &[&lib_fixture("calls.c")],
        &[
            "-O2",
            "-DWITH_MAIN",
            "-static",
            "-fpatchable-function-entry=5",
        ],
        &stat,
    );
    for cmd in [
        vec!["count"],
        vec!["record", "--no-libcall", "--no-sched", "-d"],
    ] {
        let mut c = shadowgraph();
        c.args(&cmd);
        if cmd[0] == "record" {
            c.arg(dir.join("static.data")).arg("--");
        }
        let o = c.arg(&stat).output().unwrap();
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{cmd:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{cmd:?}: {err}");
        assert!(err.contains("statically linked"), "{cmd:?}: {err}");
    }
    let o = shadowgraph()
        .args(["count", "/no/such/program"])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.lines().count() == 1 && err.contains("/no/such/program"),
        "{err}"
    );
}

#[test]
fn graph_mode_survives_exceptions_pthread_exit_longjmp_backtrace_and_fork() {
    let dir = workdir("unwind");
    let exe = dir.join("unwind");
    cc(
        &[&fixture("unwind.cpp")],
        &["-O2", "-pthread", "-fpatchable-function-entry=5"],
        &exe,
    );
    let plain = Command::new(&exe).output().unwrap();
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stdout)
    );
    let o = shadowgraph()
        .args(["count", "--graph"])
        .arg(&exe)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(
        o.status.success(),
        "traced program misbehaved:\n{out}\n{err}"
    );
    assert!(out.starts_with("s=-100 r=42 l=10"), "{out}");
    let c = graph_counts(&out);
    let get = |f: &str| *c.get(f).unwrap_or_else(|| panic!("{f} missing:\n{out}"));
    assert_eq!(
        get("thrower"),
        (600, 600),
        "thrown-through frames are reported as exits"
    );
    assert_eq!(get("catcher"), (100, 100));
    assert_eq!(
        get("exit_deep"),
        (4, 4),
        "frames of an exiting thread are reported"
    );
    assert_eq!(get("lj"), (60, 60), "longjmp'ed frames are reported");
    assert_eq!(get("bt_depth"), (11, 11));
    assert_eq!(get("main"), (1, 1));
    assert!(!out.contains("still running"), "{out}");
}

#[test]
fn graph_mode_follows_dlopen_and_dlclose_while_a_thread_runs() {
    let dir = workdir("dl");
    let lib = dir.join("libcalls.so");
    build_lib(&lib_fixture("calls.c"), &lib);
    let exe = dir.join("dl");
    cc(
        &[&fixture("dl.c")],
        &["-O2", "-pthread", "-fpatchable-function-entry=5", "-ldl"],
        &exe,
    );
    let plain = Command::new(&exe).arg(&lib).output().unwrap();
    assert!(plain.status.success());
    let o = shadowgraph()
        .args(["count", "--graph"])
        .arg(&exe)
        .arg(&lib)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.starts_with(&*String::from_utf8_lossy(&plain.stdout)),
        "{out}"
    );
    // The library was loaded twice (two module records): sum per function.
    let mut sum: HashMap<String, (u64, u64)> = HashMap::new();
    for l in out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("CALLS"))
        .skip(1)
    {
        let mut it = l.split_whitespace();
        let (Some(c), Some(r), Some(f)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let (Ok(c), Ok(r)) = (c.parse::<u64>(), r.parse::<u64>()) else {
            continue;
        };
        let e = sum.entry(f.to_string()).or_default();
        e.0 += c;
        e.1 += r;
    }
    assert_eq!(sum.get("run"), Some(&(2, 2)), "{out}");
    assert_eq!(sum.get("mid"), Some(&(150, 150)), "{out}");
    assert_eq!(sum.get("leaf"), Some(&(300, 300)), "{out}");
    let spin = sum.get("spin_work").copied().unwrap_or_default();
    assert!(spin.0 > 0 && spin.0 == spin.1, "{out}");
    assert!(err.contains("lost_frames=0"), "{err}");
}
