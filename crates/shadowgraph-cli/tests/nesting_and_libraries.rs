//! Deep nesting and the objects a program loads: calls deeper than the
//! shadow stack or than records can say, depth-limited and filtered fused
//! recordings, tail calls, libraries opened by relative names and links,
//! and the user's own LD_PRELOAD.

mod common;

use common::*;
use std::process::Command;

/// Calls nested deeper than the shadow stack holds are not traced; the
/// program is unharmed, the trace stays balanced, and `record` and the
/// views say how many calls are missing and how to trace them. With
/// `--max-stack DEPTH` the depth traced follows it, on every recording
/// path: the shadow stack is sized for it, and deeper calls are not
/// recorded, as uftrace's.
#[test]
fn calls_deeper_than_the_shadow_stack_are_counted_and_reported() {
    let dir = workdir("deep");
    let exe = build_fixture(&dir, "deep", "recursion_3000.c");
    // Calls of `rec` traced and not traced (counted), checking the replay.
    let run = |way: Way, opts: &[&str], name: &str| -> (u64, u64) {
        let data = dir.join(format!("{name}.data"));
        let mut all = way.with(&["--no-libs"]);
        all.extend_from_slice(opts);
        let o = record_run(&[], &all, &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{name}: {err}");
        assert_eq!(out.trim(), "3000", "{name}");
        let missing: u64 = err
            .split_once("warning: ")
            .and_then(|(_, r)| r.split_once(" calls were not traced"))
            .map_or(0, |(n, _)| n.parse().unwrap());
        // Deeper than uftrace's views show by default (-D 1024).
        let o = shadowgraph()
            .args(["replay", "-D", "65535", "-d"])
            .arg(&data)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        if missing > 0 {
            assert!(
                err.contains(&format!("{missing} calls were not traced"))
                    && err.contains("record with a larger --max-stack"),
                "{name}: {err}"
            );
        } else {
            assert!(!err.contains("warning"), "{name}: {err}");
        }
        let traced = out.matches("rec() {").count() + out.matches("rec();").count();
        assert_eq!(
            out.matches("} /* rec */").count() + out.matches("rec();").count(),
            traced,
            "{name}"
        );
        // (Under --max-stack, deeper calls are left out as by -D.)
        if !opts.contains(&"--max-stack") {
            assert_eq!(
                traced as u64 + missing,
                3001,
                "{name}: every call traced or counted"
            );
        }
        let info = view_text("info", &data);
        assert!(info.contains("max stack depth"), "{name}: {info}");
        (traced as u64, missing)
    };
    for way in Way::ALL {
        let name = way.name();
        // The default: ~2,000 frames.
        let (traced, missing) = run(way, &[], &format!("{name}-default"));
        assert!(
            (1900..2100).contains(&traced) && missing > 0,
            "{name}: {traced}"
        );
        // Deep enough: every call.
        let (traced, _) = run(way, &["--max-stack", "3100"], &format!("{name}-deep"));
        assert_eq!(traced, 3001, "{name}");
        // 100 levels: main and 99 of rec, nothing deeper, nothing missing.
        let (traced, missing) = run(way, &["--max-stack", "100"], &format!("{name}-small"));
        assert_eq!((traced, missing), (99, 0), "{name}");
    }
    for (bad, want) in [
        ("0", "the depth must be between 1 and 32767"),
        ("40000", "the depth must be between 1 and 32767"),
        ("deep", "is not a depth"),
    ] {
        let o = shadowgraph()
            .args([
                "record",
                "--no-libcall",
                "--no-sched",
                "--max-stack",
                bad,
                "--",
            ])
            .arg(&exe)
            .output()
            .unwrap();
        let (_, err) = text(&o);
        assert!(!o.status.success() && err.contains(want), "{bad}: {err}");
    }
}

/// What the user preloads stays preloaded beside the agent.
#[test]
fn the_users_ld_preload_is_kept() {
    let dir = workdir("preload");
    let src = fixture("user_preload.c");
    let lib = dir.join("libhello.so");
    cc(&[&src], &["-O2", "-fPIC", "-shared"], &lib);
    let exe = build_fixture(&dir, "p", "work_once.c");
    let o = shadowgraph()
        .args(["record", "--no-libcall", "--no-sched", "--no-libs", "-d"])
        .arg(dir.join("p.data"))
        .arg("--")
        .arg(&exe)
        .env("LD_PRELOAD", &lib)
        .output()
        .unwrap();
    let err = text(&o).1;
    assert!(o.status.success(), "{err}");
    // Once in `record` itself (the variable is its environment too), once
    // in the traced program.
    assert_eq!(err.matches("user preload here").count(), 2, "{err}");
    assert!(err.contains("recorded 4 records (0 lost)"), "{err}");
}

/// A library loaded by dlopen under a relative name is traced, and `-F`/`-N`
/// patterns naming its functions (`NAME@LIB`) take effect once it is
/// loaded, on the fused and the general path alike.
#[test]
fn dlopened_library_by_relative_name_is_filtered_by_its_functions() {
    let dir = workdir("dlrel");
    let lib_src = fixture("plugin_relative.c");
    cc(
        &[&lib_src],
        &["-O2", "-shared", "-fPIC", "-fpatchable-function-entry=5"],
        &dir.join("libplug.so"),
    );
    let exe = build_fixture(&dir, "dlrel", "dlopen_relative.c");
    let run = |opts: &[&str], fused: bool| -> Vec<String> {
        let data = dir.join(format!("d{}{}.data", opts.len(), fused));
        let o = record_run_in(&dir, &[], &Way::of(fused).with(opts), &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{opts:?}: {err}");
        assert_eq!(out.trim(), "13", "{opts:?}");
        replay_body(&view_text("replay", &data))
    };
    for fused in [true, false] {
        let all = run(&[], fused);
        assert!(all.contains(&"      plug_inner();".to_string()), "{all:#?}");
        let outer = |mid: &[&str]| -> Vec<String> {
            std::iter::once("plug_outer() {")
                .chain(mid.iter().copied())
                .chain(["} /* plug_outer */"])
                .map(String::from)
                .collect()
        };
        let full = outer(&["  plug_mid() {", "    plug_inner();", "  } /* plug_mid */"]);
        assert_eq!(
            run(&["-F", "plug_outer@libplug*"], fused),
            [full.clone(), full].concat(),
            "fused: {fused}"
        );
        let cut = outer(&["  plug_mid();"]);
        assert_eq!(
            run(
                &["-F", "plug_outer@libplug*", "-N", "plug_inner@libplug*"],
                fused
            ),
            [cut.clone(), cut].concat(),
            "fused: {fused}"
        );
    }
}

/// Calls deeper than a record's 10 bits of depth keep their function:
/// the fused paths leave them to the general way, which records them at
/// depth 1023 (a depth of 1024 or more ran into the record's function
/// address: `down` + 1 in 468 of 6,608 records of this program).
#[test]
fn calls_deeper_than_records_can_say_keep_their_function() {
    let dir = workdir("deep-records");
    let exe = build_fixture(&dir, "deep", "recursion_1100.c");
    for (name, opts) in [
        ("plain", &[][..]),
        ("filtered", &["-F", "main"][..]),
        ("timed", &["-t", "1ns"][..]),
    ] {
        let data = dir.join(format!("{name}.data"));
        let o = record_run(&[], opts, &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{name}: {out}\n{err}");
        assert_eq!(out.trim(), "3300", "{name}");
        let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
        for &tid in &d.tids {
            let recs = records_of(&d, tid).unwrap();
            let funcs: std::collections::BTreeSet<u64> = recs.iter().map(|r| r.addr).collect();
            assert_eq!(funcs.len(), 2, "{name}: main and down only: {funcs:x?}");
            assert_eq!(recs.len(), 2 * (3 * 1101 + 1), "{name}");
            every_call_closes(&d, tid).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

/// `record -D N` with one tracer takes the fused path too (calls at depth
/// N or deeper are declined in place): the same replay as the general way,
/// as uftrace's `record -D N` of the same program, and `info` says which
/// path ran.
#[test]
fn depth_limited_recording_is_fused_and_exact() {
    let dir = workdir("depthfused");
    let exe = build_fixture(&dir, "dl", "depth_chain.c");
    let want = [
        "main() {",
        "  a() {",
        "    b();",
        "    d();",
        "  } /* a */",
        "  a() {",
        "    b();",
        "    d();",
        "  } /* a */",
        "  a() {",
        "    b();",
        "    d();",
        "  } /* a */",
        "} /* main */",
    ];
    let body = replay_body;
    for (fused, path) in [(true, "fused"), (false, "general")] {
        let data = dir.join(format!("{path}.data"));
        let opts = Way::of(fused).with(&["--no-libs", "-D", "3"]);
        let o = record_run(&[], &opts, &data, &exe, &[]);
        assert!(o.status.success(), "{}", text(&o).1);
        assert_eq!(body(&replay_text(&data)), want, "{path}");
        let info = view_text("info", &data);
        assert!(
            info.contains(&format!("record path         : {path}")),
            "{info}"
        );
        if let Some(theirs) = uftrace_view("replay", &data) {
            assert_eq!(body(&theirs), want, "uftrace reads the {path} recording");
        }
    }
    if require("uftrace", "the same view by uftrace") {
        let ud = dir.join("uftrace.data");
        let o = Command::new("uftrace")
            .args(["record", "--no-sched", "-D", "3", "-P", ".", "-d"])
            .arg(&ud)
            .arg(&exe)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o).1);
        // uftrace also records the kernel's schedule events (a loaded
        // machine pre-empts the program anywhere): not calls.
        let theirs: Vec<String> = body(&replay_text(&ud))
            .into_iter()
            .filter(|l| !l.trim_start().starts_with("/* linux:schedule"))
            .collect();
        assert_eq!(theirs, want, "uftrace's own -D 3");
    }
}

/// `record -F/-N/-D` with one tracer takes the fused path too: its
/// assembly applies the graph filters the way the callbacks do (the same
/// thread variable), so the fused and the general recordings replay alike
/// for every combination. `-F` with `-D` (whose limit restarts at each
/// `-F` function, as uftrace's) takes triggers, whose callbacks take the
/// `-F` function's calls and the fused path the others.
#[test]
fn filtered_recording_is_fused_and_exact() {
    let dir = workdir("filterfused");
    let exe = build_fixture(&dir, "ff", "filter_families.c");
    let body = replay_body;
    let quiet = ["quiet() {", "  b();", "  leaf();", "} /* quiet */"];
    let cases: [&[&str]; 8] = [
        &["-F", "a"],
        &["-N", "quiet"],
        &["-F", "a", "-N", "quiet"],
        &["-N", "a", "-D", "2"],
        &["-N", "b", "-D", "3"],
        &["-F", "c"],
        &["-F", "main", "-N", "leaf"],
        &["-F", "quiet", "-D", "2"],
    ];
    for opts in cases {
        let mut bodies = Vec::new();
        for (fused, path) in [(true, "fused"), (false, "general")] {
            let data = dir.join(format!("{path}.data"));
            let mut all = Way::of(fused).with(&["--no-libs"]);
            all.extend_from_slice(opts);
            let o = record_run(&[], &all, &data, &exe, &[]);
            assert!(o.status.success(), "{opts:?}: {}", text(&o).1);
            let info = view_text("info", &data);
            assert!(
                info.contains(&format!("record path         : {path}")),
                "{opts:?}: {info}"
            );
            bodies.push(body(&replay_text(&data)));
        }
        assert!(!bodies[0].is_empty(), "{opts:?}");
        assert_eq!(bodies[0], bodies[1], "{opts:?}: fused and general alike");
        if opts == ["-F", "quiet", "-D", "2"] {
            assert_eq!(bodies[0], quiet.repeat(4));
        }
    }
}

/// Optimised code's tail calls (gcc -O2 turns `return f(x)` into a jump):
/// the callee reuses its caller's return slot. Each is recorded nested in
/// its caller and returns just before it, on every recording path; the
/// fast paths keep them (their cost: the `-tail` instruction budgets).
#[test]
fn tail_calls_are_recorded_nested_in_their_callers() {
    let dir = workdir("tailcalls");
    let src = fixture("tail_calls.c");
    let exe = dir.join("tc");
    cc(&[&src], &["-O2", "-fpatchable-function-entry=5"], &exe);
    let chain = [
        "tail1() {",
        "  tail2() {",
        "    leaf();",
        "  } /* tail2 */",
        "} /* tail1 */",
    ];
    let indent = |n: usize, l: &str| format!("{}{l}", "  ".repeat(n));
    let mut whole = vec!["main() {".to_string()];
    for _ in 0..3 {
        whole.push(indent(1, "work() {"));
        whole.extend(chain.iter().map(|l| indent(2, l)));
        whole.push(indent(2, "leaf();"));
        whole.push(indent(1, "} /* work */"));
    }
    whole.push("} /* main */".into());
    let filtered: Vec<String> = (0..3).flat_map(|_| chain.map(String::from)).collect();
    for way in Way::ALL {
        let name = way.name();
        for (opts, want) in [(&[][..], &whole), (&["-F", "tail1"][..], &filtered)] {
            let data = dir.join(format!("{name}{}.data", opts.len()));
            let o = record_run(&[], &way.with(opts), &data, &exe, &[]);
            assert!(o.status.success(), "{name} {opts:?}: {}", text(&o).1);
            assert_eq!(&replay_body(&replay_text(&data)), want, "{name} {opts:?}");
        }
    }
}

/// A library the loader opens by its soname, a link to the versioned file
/// (`libver.so.1` -> `libver.so.1.0.0`, as installed libraries are): its
/// functions are named in every view, ours and uftrace's (the kernel's maps
/// name the file, the loader the link).
#[test]
fn a_library_opened_through_a_link_has_its_functions_named() {
    let dir = workdir("verlib");
    let lib_src = fixture("versioned_lib.c");
    let real = dir.join("libver.so.1.0.0");
    cc(
        &[&lib_src],
        &[
            "-O2",
            "-fPIC",
            "-shared",
            "-fpatchable-function-entry=5",
            "-Wl,-soname,libver.so.1",
        ],
        &real,
    );
    std::os::unix::fs::symlink("libver.so.1.0.0", dir.join("libver.so.1")).unwrap();
    std::os::unix::fs::symlink("libver.so.1", dir.join("libver.so")).unwrap();
    let src = fixture("versioned_main.c");
    let exe = dir.join("main");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    // Linked by the link's name; the loader looks for the soname.
    cc(
        &[&src, &dir.join("libver.so")],
        &["-O2", "-fpatchable-function-entry=5", &rpath],
        &exe,
    );
    let data = dir.join("v.data");
    record_ok(&[], &data, &exe);
    let want = |replay: &str| {
        let body: Vec<String> = replay_body(replay);
        assert_eq!(body.len(), 3 * 3 + 2, "{replay}");
        assert_eq!(body[1], "  ver_api() {", "{replay}");
        assert_eq!(body[2], "    ver_leaf();", "{replay}");
    };
    want(&replay_text(&data));
    if let Some(theirs) = uftrace_view("replay", &data) {
        want(&theirs);
    }
}

/// After `dlclose`, the next library may be loaded where the closed one
/// was: each call is named after the library loaded at its time, by our
/// views and by uftrace's, on the fused and the general path alike.
#[test]
fn libraries_loaded_in_turn_at_one_address_keep_their_names() {
    let dir = workdir("dlturns");
    let lib_src = fixture("dl_turn_lib.c");
    for (lib, inner) in [("liba.so", "fa"), ("libb.so", "gb")] {
        let define = format!("-DINNER={inner}");
        cc(
            &[&lib_src],
            &[
                "-O2",
                "-shared",
                "-fPIC",
                "-fpatchable-function-entry=5",
                &define,
            ],
            &dir.join(lib),
        );
    }
    let exe = build_fixture(&dir, "dlturns", "dl_turns.c");
    let libs: Vec<std::path::PathBuf> = ["liba.so", "libb.so", "liba.so"]
        .iter()
        .map(|l| dir.join(l))
        .collect();
    let libs: Vec<&std::path::Path> = libs.iter().map(|p| p.as_path()).collect();
    let want: Vec<String> = ["fa", "gb", "fa"]
        .iter()
        .flat_map(|f| {
            [
                "entry() {".to_string(),
                format!("  {f}();"),
                "} /* entry */".into(),
            ]
        })
        .collect();
    for fused in [true, false] {
        let data = dir.join(format!("d{fused}.data"));
        let way = Way::of(fused).with(&["-F", "entry@lib*"]);
        let o = record_run_in(&dir, &[], &way, &data, &exe, &libs);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        // The loader put each library at the same address (else this
        // shows nothing).
        let entries: Vec<&str> = out.lines().collect();
        assert_eq!(entries.len(), 3, "{out}");
        assert!(entries.iter().all(|e| *e == entries[0]), "{out}");
        assert_eq!(replay_body(&replay_text(&data)), want, "fused: {fused}");
        let report = view_text("report", &data);
        for (f, calls) in [("fa", 2), ("gb", 1), ("entry", 3)] {
            let line = report.lines().find(|l| l.ends_with(&format!("  {f}")));
            let line = line.unwrap_or_else(|| panic!("{f}: {report}"));
            assert!(line.contains(&format!(" {calls}  ")), "{report}");
        }
        if let Some(theirs) = uftrace_view("replay", &data) {
            assert_eq!(replay_body(&theirs), want, "uftrace, fused: {fused}");
        }
    }
}
