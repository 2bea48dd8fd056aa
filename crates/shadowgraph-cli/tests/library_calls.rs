//! Library calls: the calls the program makes through its PLT are traced
//! by default, as functions of the program are, on every recording path
//! and with every form of binding; `--no-libcall` leaves them out.

mod common;

use common::*;
use std::process::Command;

/// libcalls.c, built with `flags` more.
fn build(dir: &std::path::Path, name: &str, flags: &[&str]) -> std::path::PathBuf {
    let mut all = vec!["-fno-builtin", "-pthread"];
    all.extend_from_slice(flags);
    build_fixture_with(dir, name, "libcalls.c", &all)
}

#[test]
fn library_calls_are_traced_on_every_path_and_binding() {
    let dir = workdir("libcalls");
    for (name, flags) in [
        ("lazy", &["-Wl,-z,lazy"][..]),
        ("now", &["-Wl,-z,relro,-z,now"][..]),
        // Calls through GOT entries, without a PLT.
        ("noplt", &["-fno-plt", "-Wl,-z,relro,-z,now"][..]),
    ] {
        let exe = build(&dir, name, flags);
        let plain = Command::new(&exe).output().unwrap();
        assert!(plain.status.success());
        for way in Way::ALL {
            let data = dir.join(format!("{name}-{}.data", way.name()));
            let o = record_run(&[], &way.with(&["--libcall"]), &data, &exe, &[]);
            let (out, err) = text(&o);
            assert!(o.status.success(), "{name} {way:?}: {err}");
            assert_eq!(
                out,
                String::from_utf8_lossy(&plain.stdout),
                "{name} {way:?}"
            );
            assert!(err.contains("(0 lost)"), "{name} {way:?}: {err}");
            let rows = report_rows(&report_text(&data));
            for (f, calls) in [
                ("work", 4001),
                ("malloc", 4001),
                ("strlen", 8002),
                ("strcpy", 4001),
                ("free", 4001),
                ("memcpy", 4000),
                ("pthread_create", 4),
                ("pthread_join", 4),
                ("qsort", 1),
                ("printf", 1),
            ] {
                assert_eq!(
                    rows.get(f).map(|r| r.2),
                    Some(calls),
                    "{name} {way:?} {f}: {rows:?}"
                );
            }
            // The program's calls inside a library call nest under it.
            let body = replay_body(&replay_text(&data));
            let q = body
                .iter()
                .position(|l| l.trim() == "qsort() {")
                .expect("qsort() {");
            assert!(body[q + 1].trim() == "cmp();", "{:?}", &body[q..q + 4]);
        }
    }
}

/// uftrace reads the library calls of our recording by name, and shows
/// them as we do.
#[test]
fn uftrace_names_the_library_calls_we_recorded() {
    let dir = workdir("libcalls_uftrace");
    let exe = build(&dir, "lc", &[]);
    let data = dir.join("lc.data");
    let o = record_run(&[], &["--libcall"], &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    let ours = report_text(&data);
    if let Some(theirs) = uftrace_view("report", &data) {
        let names = |r: &str| {
            let mut v: Vec<(String, u64)> =
                report_rows(r).into_iter().map(|(n, s)| (n, s.2)).collect();
            v.sort();
            v
        };
        assert_eq!(names(&ours), names(&theirs));
    }
}

#[test]
fn library_calls_take_filters_by_name_and_can_be_left_out() {
    let dir = workdir("libcalls_filters");
    let exe = build(&dir, "lc", &[]);
    let rows_of = |opts: &[&str], tag: &str| {
        let data = dir.join(format!("{tag}.data"));
        let o = record_run(&[], opts, &data, &exe, &[]);
        assert!(o.status.success(), "{opts:?}: {}", text(&o).1);
        report_rows(&report_text(&data))
    };
    let rows = rows_of(&["--libcall", "-N", "str*"], "n");
    assert!(
        !rows.contains_key("strlen") && !rows.contains_key("strcpy"),
        "{rows:?}"
    );
    assert_eq!(rows["malloc"].2, 4001, "{rows:?}");
    let rows = rows_of(&["--libcall", "-F", "qsort"], "f");
    let mut names: Vec<&String> = rows.keys().collect();
    names.sort();
    assert_eq!(names, ["cmp", "qsort"], "{rows:?}");
    // `@PLT`: every library call; `@LIB`: those into that library (at
    // record time; the views know the caller's object, as uftrace's).
    let rows = rows_of(&["--libcall", "-F", "*@PLT", "-N", "pthread_*"], "plt");
    let mut names: Vec<&String> = rows.keys().collect();
    names.sort();
    let libc = [
        "cmp", "free", "malloc", "memcpy", "printf", "qsort", "strcpy", "strlen",
    ];
    assert_eq!(names, libc, "{rows:?}");
    let rows = rows_of(&["--libcall", "-N", "*@libc"], "libc");
    let mut names: Vec<&String> = rows.keys().collect();
    names.sort();
    assert_eq!(names, ["main", "thread", "work"], "{rows:?}");
    let rows = rows_of(&["--libcall", "--no-libcall"], "none");
    assert!(
        !rows.contains_key("malloc") && rows["work"].2 == 4001,
        "{rows:?}"
    );
}

/// A C++ program that throws through library calls
/// (`__cxa_allocate_exception`), longjmps, backtraces and forks runs as untraced
/// with its library calls traced, and with libstdc++'s own too (those its
/// personality routine makes while the unwinder walks are left out).
#[test]
fn exceptions_and_longjmp_through_library_calls_are_unharmed() {
    let dir = workdir("libcalls_unwind");
    let exe = build_fixture_with(&dir, "unwind", "unwind.cpp", &["-pthread"]);
    let plain = Command::new(&exe).output().unwrap();
    for opt in ["--libcall", "--nest-libcall"] {
        for way in Way::ALL {
            let data = dir.join(format!("{}{opt}.data", way.name()));
            let o = record_run(&[], &way.with(&[opt]), &data, &exe, &[]);
            let (out, err) = text(&o);
            assert!(o.status.success(), "{opt} {way:?}: {err}");
            assert_eq!(out, String::from_utf8_lossy(&plain.stdout), "{opt} {way:?}");
            let rows = report_rows(&report_text(&data));
            // The throw itself is not shown, as uftrace does not show it.
            assert!(
                rows.contains_key("__cxa_allocate_exception") && !rows.contains_key("__cxa_throw"),
                "{opt} {way:?}: {rows:?}"
            );
            // operator new calls malloc through libstdc++'s PLT.
            let nested = rows.contains_key("malloc");
            assert_eq!(nested, opt == "--nest-libcall", "{opt} {way:?}: {rows:?}");
        }
    }
}

/// An object loaded by dlopen has its library calls traced as it joins,
/// with `--nest-libcall`; without it only the program's are, as uftrace's
/// default (its `t131_lib_dlopen`).
#[test]
fn a_dlopened_objects_library_calls_are_traced() {
    let dir = workdir("libcalls_dlopen");
    cc(
        &[&fixture("plugin_libcalls.c")],
        &[
            "-O2",
            "-fno-builtin",
            "-shared",
            "-fPIC",
            "-fpatchable-function-entry=5",
        ],
        &dir.join("libplc.so"),
    );
    let exe = build_fixture_with(&dir, "host", "dlopen_libcalls.c", &["-ldl"]);
    for nest in [false, true] {
        let data = dir.join(format!("dl{nest}.data"));
        let opts: &[&str] = if nest {
            &["--nest-libcall"]
        } else {
            &["--libcall"]
        };
        let o = record_run_in(&dir, &[], opts, &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        assert_eq!(out.trim(), "10");
        let rows = report_rows(&report_text(&data));
        assert_eq!(rows.get("plug").map(|r| r.2), Some(2), "{rows:?}");
        assert_eq!(rows.get("dlopen").map(|r| r.2), Some(1), "{rows:?}");
        let strlen = rows.get("strlen").map(|r| r.2);
        assert_eq!(strlen, nest.then_some(2), "nest {nest}: {rows:?}");
        let body = replay_body(&replay_text(&data));
        let p = body
            .iter()
            .position(|l| l.trim().starts_with("plug()"))
            .expect("plug()");
        match nest {
            true => assert_eq!(body[p + 1].trim(), "strlen();", "{body:?}"),
            false => assert_eq!(body[p].trim(), "plug();", "{body:?}"),
        }
    }
}

/// Programs whose library calls do not simply return run as untraced with
/// those calls traced: swapcontext switching coroutines, getcontext
/// returned to again by setcontext, siglongjmp out of
/// signal handlers into a traced sigsetjmp, fork (both processes return),
/// exec (the image replaced inside the call: it exits with 3).
#[test]
fn calls_that_switch_jump_fork_or_exec_leave_the_program_correct() {
    let dir = workdir("libcalls_unusual");
    for (fixture, calls) in [
        ("coroutines.c", &["getcontext", "swapcontext"][..]),
        (
            "getcontext_again.c",
            &["getcontext", "setcontext", "again"][..],
        ),
        // (A siglongjmp never returns: the report, as uftrace's, counts
        // the sigsetjmp it comes back to, not the jump.)
        ("siglongjmp_alarms.c", &["__sigsetjmp"][..]),
        ("fork_child.c", &["fork", "waitpid"][..]),
        ("exec_self.c", &["execl"][..]),
    ] {
        let name = fixture.trim_end_matches(".c");
        let exe = build_fixture(&dir, name, fixture);
        let plain = Command::new(&exe).output().unwrap();
        for way in Way::ALL {
            let data = dir.join(format!("{name}-{}.data", way.name()));
            let o = record_run(&[], &way.with(&["--libcall"]), &data, &exe, &[]);
            let (out, err) = text(&o);
            assert_eq!(
                o.status.code(),
                plain.status.code(),
                "{fixture} {way:?}: {err}"
            );
            if fixture == "siglongjmp_alarms.c" {
                // "7 ALARMS": an alarm may land after the 300th jump.
                let alarms: u64 = out.trim().strip_prefix("7 ").unwrap().parse().unwrap();
                assert!(alarms >= 2400, "{way:?}: {out}");
            } else {
                let want = String::from_utf8_lossy(&plain.stdout);
                assert_eq!(out, want, "{fixture} {way:?}");
            }
            let report = report_text(&data);
            for c in calls {
                let row = format!(" {c}\n");
                assert!(report.contains(&row), "{fixture} {way:?}: {c}: {report}");
            }
        }
    }
}

/// A coroutine whose stack lies above its caller's frames (a buffer in
/// `main`'s, as uftrace's s-ucontext.c has it): its calls are inside the
/// `swapcontext` that switched to it, as uftrace nests them, not returns
/// from the calls below; the switch back closes what it left open. The
/// shadow stack stays as deep as the calls, over 1000 switches each way.
#[test]
fn a_coroutine_on_a_stack_above_its_callers_nests_in_the_switch() {
    let dir = workdir("libcalls_coroutine_local");
    let exe = build_fixture(&dir, "cls", "coroutine_local_stack.c");
    for way in Way::ALL {
        let data = dir.join(format!("{}.data", way.name()));
        let o = record_run(&[], &way.with(&["--libcall"]), &data, &exe, &[]);
        assert!(o.status.success(), "{way:?}: {}", text(&o).1);
        assert_eq!(text(&o).0, "2002001\n", "{way:?}");
        let body = replay_body(&replay_text(&data));
        let want = [
            "main() {",
            "  getcontext();",
            "  makecontext();",
            "  resume() {",
            "    swapcontext() {",
            "      co_body() {",
            "        work();",
            "        swapcontext();",
            "      } /* co_body */",
            "    } /* swapcontext */",
            "  } /* resume */",
            "  work();",
            "  resume() {",
            "    swapcontext() {",
            "      work();",
            "      swapcontext();",
            "    } /* swapcontext */",
            "  } /* resume */",
        ];
        assert_eq!(body[..want.len()], want, "{way:?}");
        let deepest = body.iter().map(|l| l.len() - l.trim_start().len()).max();
        assert_eq!(deepest, Some(8), "{way:?}");
        let rows = report_rows(&report_text(&data));
        let calls = |f: &str| rows.get(f).map(|r| r.2);
        assert_eq!(
            [
                calls("resume"),
                calls("swapcontext"),
                calls("work"),
                calls("co_body")
            ],
            [Some(1001), Some(2001), Some(2001), Some(1)],
            "{way:?}: {rows:?}"
        );
    }
}

/// `--nest-libcall`: the calls a library without sites makes through its
/// own PLT are traced too, whether it was linked or loaded by dlopen,
/// under the program's call into it; without it, only the program's.
#[test]
fn nested_library_calls_are_traced_with_nest_libcall() {
    let dir = workdir("libcalls_nested");
    // A library built without patchable entries, as most are.
    cc(
        &[&fixture("plugin_libcalls.c")],
        &["-O2", "-fno-builtin", "-shared", "-fPIC"],
        &dir.join("libplc.so"),
    );
    let linked = dir.join("linked");
    cc(
        &[&fixture("links_plugin.c"), &dir.join("libplc.so")],
        &[
            "-O2",
            "-fpatchable-function-entry=5",
            &format!("-Wl,-rpath,{}", dir.display()),
        ],
        &linked,
    );
    let opened = build_fixture_with(&dir, "opened", "dlopen_libcalls.c", &["-ldl"]);
    // plug is a library call of the linked program; the other calls it
    // through a pointer from dlsym, which is not one.
    for (exe, plain, nested) in [
        (
            &linked,
            &["plug();"][..],
            &["plug() {", "strlen();", "} /* plug */"][..],
        ),
        (&opened, &["printf();"][..], &["strlen();"][..]),
    ] {
        for (opts, want) in [
            (&["--libcall"][..], plain),
            (&["--nest-libcall"][..], nested),
        ] {
            let data = dir.join(format!(
                "{}-{}.data",
                exe.file_name().unwrap().to_string_lossy(),
                opts[0]
            ));
            let o = record_run_in(&dir, &[], opts, &data, exe, &[]);
            let (out, err) = text(&o);
            assert!(o.status.success(), "{exe:?} {opts:?}: {err}");
            assert_eq!(out.trim(), "10");
            let body = replay_body(&replay_text(&data));
            let lines: Vec<&str> = body.iter().map(|l| l.trim()).collect();
            let found = lines.windows(want.len()).filter(|w| w == &want).count();
            let times = if want == ["printf();"] { 1 } else { 2 };
            assert_eq!(found, times, "{exe:?} {opts:?}: {want:?} in {lines:?}");
            if opts[0] == "--libcall" {
                assert!(!lines.contains(&"strlen();"), "{exe:?}: {lines:?}");
            }
        }
    }
}

/// Without a PLT (`-fno-plt`), a GOT entry the code also reads as a
/// pointer keeps the function's own address (its calls go untraced); the
/// entries only called through are traced.
#[test]
fn got_entries_read_as_pointers_stay_the_functions_own() {
    let dir = workdir("libcalls_got_pointer");
    let exe = build_fixture_with(
        &dir,
        "gp",
        "got_pointer.c",
        &["-fno-builtin", "-fno-plt", "-ldl"],
    );
    let data = dir.join("gp.data");
    let o = record_run(&[], &["--libcall"], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out, "1 3 5\n");
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows.get("printf").map(|r| r.2), Some(1), "{rows:?}");
    assert!(!rows.contains_key("strlen"), "{rows:?}");
}

/// A Rust program calls libc through GOT entries (no PLT): those calls
/// are library calls too.
#[test]
fn a_rust_programs_library_calls_are_traced() {
    let dir = workdir("libcalls_rust");
    let exe = build_rust_fixture(&dir, "rustprog", "rustprog.rs");
    let data = dir.join("rs.data");
    let o = record_run(&[], &["--libcall"], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success() && out.trim() == "335", "{out}\n{err}");
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows.get("pthread_create").map(|r| r.2), Some(1), "{rows:?}");
    assert!(rows.get("free").is_some_and(|r| r.2 > 0), "{rows:?}");
}

/// Each thread's graph, as `uftrace replay` shows the recording in `data`
/// (scheduler events left out; a call whose entry and exit another
/// thread's lines separate, `f() {` then `}`, as `f();`), sorted: threads'
/// ids and order differ from run to run. A program started by exec,
/// recorded in a directory of its own (`TID-NAME`), goes on its thread's
/// graph, where uftrace's own recording holds it.
fn graphs_by_thread(data: &std::path::Path) -> Option<Vec<Vec<String>>> {
    let mut threads = thread_lines(data)?;
    let mut execs: Vec<_> = std::fs::read_dir(data)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|f| f.to_str())
                    .and_then(|f| f.split_once('-'))
                    .is_some_and(|(tid, _)| tid.parse::<u32>().is_ok())
        })
        .collect();
    execs.sort();
    for dir in execs {
        for (tid, lines) in thread_lines(&dir)? {
            match threads.iter_mut().find(|t| t.0 == tid) {
                Some(t) => t.1.extend(lines),
                None => threads.push((tid, lines)),
            }
        }
    }
    let mut graphs: Vec<Vec<String>> = threads.into_iter().map(|t| t.1).collect();
    // A call that ends the process (`_exit`) opens the last line: uftrace
    // writes a call's entry only at its return or its first child's, and
    // so never shows it.
    for g in &mut graphs {
        if g.last().is_some_and(|l| l.trim() == "_exit() {") {
            g.pop();
        }
    }
    graphs.sort();
    Some(graphs)
}

/// The lines of each thread of the recording in `data`, by thread id.
fn thread_lines(data: &std::path::Path) -> Option<Vec<(String, Vec<String>)>> {
    let out = uftrace_view_with("replay", data, &["-f", "tid", "--no-comment"])?;
    let mut threads: Vec<(String, Vec<String>)> = Vec::new();
    for line in out.lines().filter(|l| !l.starts_with('#')) {
        let Some((tid, call)) = line.split_once("] | ") else {
            continue;
        };
        if call.contains("linux:sched") {
            continue;
        }
        let tid = tid.trim().trim_start_matches('[').trim().to_string();
        let at = match threads.iter().position(|t| t.0 == tid) {
            Some(i) => i,
            None => {
                threads.push((tid, Vec::new()));
                threads.len() - 1
            }
        };
        let lines = &mut threads[at].1;
        let opened = lines.last().and_then(|l| l.strip_suffix(" {"));
        match opened {
            Some(f) if call.trim() == "}" && f.len() - f.trim_start().len() == call.len() - 1 => {
                let leaf = format!("{f};");
                *lines.last_mut().unwrap() = leaf;
            }
            _ => lines.push(call.to_string()),
        }
    }
    Some(threads)
}

/// The graphs of programs with threads, a signal raised inside the graph
/// (its handler nested under `raise`), a C++ exception thrown through
/// library calls, fork, and exec are what `uftrace record -P .` records
/// of the same binary, thread by thread.
#[test]
fn graphs_with_library_calls_are_uftraces() {
    let dir = workdir("libcalls_as_uftrace");
    for (fixture, flags) in [
        ("libcalls.c", &["-fno-builtin", "-pthread"][..]),
        ("raise_nested.c", &[][..]),
        ("throw_catch.cpp", &[][..]),
        ("fork_child.c", &[][..]),
        ("exec_self.c", &[][..]),
    ] {
        let name = fixture.split('.').next().unwrap();
        let exe = build_fixture_with(&dir, name, fixture, flags);
        let plain = Command::new(&exe).output().unwrap();
        let ours = dir.join(format!("{name}.data"));
        let o = record_run(&[], &["--libcall"], &ours, &exe, &[]);
        assert_eq!(
            o.status.code(),
            plain.status.code(),
            "{fixture}: {}",
            text(&o).1
        );
        assert_eq!(o.stdout, plain.stdout, "{fixture}");
        if uftrace_missing("uftrace record") {
            continue;
        }
        let ours = graphs_by_thread(&ours).unwrap();
        assert!(!ours.is_empty(), "{fixture}: nothing recorded");
        // uftrace 0.13 now and then misses a call of a thread under load:
        // its recording is taken once more before ours is found wrong.
        let mut differs = String::new();
        for attempt in 0..2 {
            let theirs = dir.join(format!("{name}-{attempt}.uftrace"));
            let u = Command::new("uftrace")
                .args(["record", "--no-sched", "-P", ".", "-d"])
                .arg(&theirs)
                .arg(&exe)
                .output()
                .unwrap();
            // (uftrace's own status is 1 for a program that exits non-zero.)
            assert!(theirs.join("info").exists(), "{fixture}: {}", text(&u).1);
            differs = difference(&ours, &graphs_by_thread(&theirs).unwrap());
            if differs.is_empty() {
                break;
            }
        }
        assert!(differs.is_empty(), "{fixture}: {differs}");
    }
}

/// Where two sets of threads' graphs first differ ("" if nowhere).
fn difference(ours: &[Vec<String>], theirs: &[Vec<String>]) -> String {
    if ours.len() != theirs.len() {
        return format!("{} threads, uftrace's {}", ours.len(), theirs.len());
    }
    for (a, b) in ours.iter().zip(theirs) {
        if a != b {
            let i = a
                .iter()
                .zip(b)
                .position(|(x, y)| x != y)
                .unwrap_or(a.len().min(b.len()));
            let around = |v: &[String]| v[i.saturating_sub(3)..(i + 1).min(v.len())].join(" / ");
            return format!(
                "ours {} lines, uftrace's {}; at line {i}: ours `{}`, uftrace's `{}`",
                a.len(),
                b.len(),
                around(a),
                around(b)
            );
        }
    }
    String::new()
}

/// longjmp out of traced frames back into a traced setjmp, as uftrace
/// shows it: the frames it leaves stay open, and the setjmp's second
/// return is its exit, at its depth; main goes on. uftrace shows our
/// recording as we do, in the replay and the report.
#[test]
fn longjmp_returns_into_its_setjmp() {
    let dir = workdir("libcalls_longjmp");
    let exe = build_fixture(&dir, "lj", "longjmp_deep.c");
    for way in Way::ALL {
        let data = dir.join(format!("{}.data", way.name()));
        let o = record_run(
            &[],
            &way.with(&["--libcall", "-R", "_setjmp@retval"]),
            &data,
            &exe,
            &[],
        );
        assert!(o.status.success(), "{way:?}: {}", text(&o).1);
        assert_eq!(text(&o).0, "2 3\n");
        let replay = replay_text(&data);
        let body = replay_body(&replay);
        let round = |n: &'static str| {
            [
                "  jump() {",
                "    jump() {",
                "      jump() {",
                "        longjmp() {",
                n,
            ]
        };
        let mut want = vec!["main() {", "  _setjmp() = 0;"];
        want.extend(round("  } = 1; /* _setjmp */"));
        want.extend(round("  } = 1; /* _setjmp */"));
        want.extend(["  after();", "  printf();", "} /* main */"]);
        let got: Vec<&str> = body.iter().map(String::as_str).collect();
        assert_eq!(got, want, "{way:?}");
        // (The report counts each return of `_setjmp` and no call the
        // jumps left open, as uftrace's.)
        as_uftrace(&data, &[&["replay"], &["report"]], 0);
    }
}

/// A vfork child runs on its parent's stack and thread state until it
/// execs; traced, it is a task of its own, as uftrace shows it: `vfork`'s
/// exit, a traced function and the exec are the child's records, and the
/// parent's graph holds its own calls, `vfork`'s exit when the child is
/// gone included. Its shadow stack and rings are whole again after the
/// child's records: the calls after it are shown in place.
#[test]
fn a_vfork_child_records_as_a_task_of_its_own() {
    let dir = workdir("libcalls_vfork");
    let exe = build_fixture(&dir, "vf", "vfork_exec.c");
    for way in Way::ALL {
        let data = dir.join(format!("{}.data", way.name()));
        let o = record_run(&[], &way.with(&["--libcall"]), &data, &exe, &[]);
        assert!(o.status.success(), "{way:?}: {}", text(&o).1);
        assert_eq!(text(&o).0, "0 6\n");
        let replay = replay_text(&data);
        let body = replay_body(&replay);
        let want = [
            "main() {",
            "  spawn() {",
            "    vfork() {",
            "    } /* vfork */",
            "    leaf();",
            "    execl() {",
            "    } /* vfork */",
            "    waitpid();",
            "  } /* spawn */",
            "  leaf();",
            "  leaf();",
            "  leaf();",
            "  printf();",
            "} /* main */",
            "",
            // The child's exec is left open, as uftrace says.
            "uftrace stopped tracing with remaining functions",
            "================================================",
        ];
        assert_eq!(body[..want.len()], want, "{way:?}");
        assert_eq!(body[want.len() + 1..], ["[0] execl", ""], "{way:?}");
        // The child's three records are its own task's, the parent's the
        // rest.
        let tids: Vec<&str> = replay
            .lines()
            .skip(1)
            .take(14)
            .filter_map(|l| l.split_once('[')?.1.split_once(']').map(|x| x.0.trim()))
            .collect();
        let child = &tids[3];
        assert_ne!(child, &tids[0], "{replay}");
        let of_child: Vec<usize> = (0..tids.len()).filter(|&i| &tids[i] == child).collect();
        assert_eq!(of_child, [3, 4, 5], "{way:?}: {replay}");
    }
    // With forked children not recorded, the child runs untraced.
    let data = dir.join("no-children.data");
    let o = record_run(&[], &["--libcall", "--no-children"], &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    let body = replay_body(&replay_text(&data));
    assert_eq!(
        body[..4],
        ["main() {", "  spawn() {", "    vfork();", "    waitpid();"]
    );
}

/// A program that starts only thanks to lazy binding (it would call a
/// function its library lacks, but does not) starts and is traced: the
/// slot that resolves nowhere is left to the loader.
#[test]
fn a_program_that_needs_lazy_binding_still_starts() {
    let dir = workdir("libcalls_lazy");
    let lib = dir.join("liblazy.so");
    let shared = ["-O2", "-shared", "-fPIC"];
    cc(
        &[&fixture("lazy_lib.c")],
        &[&shared[..], &["-DWITH_G"]].concat(),
        &lib,
    );
    let exe = dir.join("lazy");
    cc(
        &[&fixture("lazy_main.c"), &lib],
        &[
            "-O2",
            "-fpatchable-function-entry=5",
            "-Wl,-z,lazy",
            &format!("-Wl,-rpath,{}", dir.display()),
        ],
        &exe,
    );
    // The library loses g(): bound now, the program cannot start.
    cc(&[&fixture("lazy_lib.c")], &shared, &lib);
    let now = Command::new(&exe).env("LD_BIND_NOW", "1").output().unwrap();
    assert!(!now.status.success(), "{}", text(&now).1);
    let data = dir.join("lazy.data");
    let o = record_run(&[], &["--libcall"], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out, "2\n");
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows.get("f").map(|r| r.2), Some(1), "{rows:?}");
}

/// A vfork child that ends by `exit` runs the agent's exit step on its
/// parent's thread state, which pauses the thread for good: the parent
/// gets its own back, and its later calls are recorded, whether `vfork`
/// is traced or not.
#[test]
fn a_vfork_child_that_calls_exit_leaves_its_parent_traced() {
    let dir = workdir("libcalls_vfork_exit");
    let exe = build_fixture(&dir, "ve", "vfork_exit.c");
    for (name, opts) in [("traced", "--libcall"), ("untraced", "--no-libcall")] {
        let data = dir.join(format!("{name}.data"));
        let o = record_run(&[], &[opts], &data, &exe, &[]);
        assert!(o.status.success(), "{name}: {}", text(&o).1);
        assert_eq!(text(&o).0, "6\n");
        let rows = report_rows(&report_text(&data));
        assert_eq!(rows.get("leaf").map(|r| r.2), Some(3), "{name}: {rows:?}");
    }
}

/// Traced vforks under running threads, with one tracer and with two: the
/// parent's threads record on while it waits; each child's records (the
/// exit of `vfork`, its call of `leaf`, its `_exit` or `execl`) are its
/// own task's, once per tracer; the parent's calls nest exactly around
/// every `vfork`, and nothing is lost.
#[test]
fn vforks_under_running_threads_and_tracers() {
    use shadowgraph_data::format::Kind;
    let dir = workdir("libcalls_vfork_threads");
    let exe = build_fixture_with(&dir, "vt", "vfork_threads.c", &["-pthread"]);
    for (name, tracers) in [
        ("one", &[][..]),
        ("two", &["--tracer", "a", "--tracer", "b"]),
    ] {
        let data = dir.join(format!("{name}.data"));
        let o = record_run(&[], &[tracers, &["--libcall"]].concat(), &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        let (bad, leaves) = out.trim().split_once(' ').unwrap();
        assert_eq!(bad, "0", "{out}");
        let leaves: u64 = leaves.parse().unwrap();
        assert_eq!(
            err.matches(" lost)").count(),
            err.matches("(0 lost)").count(),
            "{err}"
        );
        let dirs: Vec<_> = if tracers.is_empty() {
            vec![data.clone()]
        } else {
            vec![data.join("a"), data.join("b")]
        };
        for d in dirs {
            let rows = report_rows(&report_text(&d));
            assert_eq!(rows["leaf"].2, leaves, "{}: {rows:?}", d.display());
            let dd = shadowgraph_data::dir::DataDir::open(&d).unwrap();
            // main, its 3 threads, 40 children.
            assert_eq!(dd.tids.len(), 4 + 40, "{}", d.display());
            let mut children = 0;
            for &tid in &dd.tids {
                in_time_order(&dd, tid).unwrap_or_else(|e| panic!("{e}"));
                let recs = records_of(&dd, tid).unwrap();
                let first = &recs[0];
                if first.kind == Kind::Exit {
                    // A child: vfork's exit, leaf, and _exit or execl
                    // (entered, never left).
                    children += 1;
                    let kinds: Vec<_> = recs.iter().map(|r| r.kind).collect();
                    assert_eq!(kinds, [Kind::Exit, Kind::Entry, Kind::Exit, Kind::Entry]);
                    assert_eq!(recs[1].depth, first.depth, "{recs:?}");
                    assert_eq!(recs[3].depth, first.depth, "{recs:?}");
                } else {
                    calls_nest_exactly(&dd, tid, &[]).unwrap_or_else(|e| panic!("{e}"));
                }
            }
            assert_eq!(children, 40, "{}", d.display());
        }
    }
}
