//! `-P`: functions of programs built without tracing flags, patched at
//! their ordinary prologue (`sites -P` says which and why not).

mod common;

use common::*;
use std::process::Command;

/// tests/fixtures/prologues.c built with plain -O2: no tracing flags.
fn plain_build(dir: &std::path::Path) -> std::path::PathBuf {
    let exe = dir.join("prologues");
    cc(&[&fixture("prologues.c")], &["-O2", "-pthread"], &exe);
    exe
}

#[test]
fn sites_lists_what_p_patches_and_why_it_refuses() {
    let dir = workdir("prologue_sites");
    let exe = plain_build(&dir);
    let o = shadowgraph()
        .args(["sites", "-P", "."])
        .arg(&exe)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let line = |f: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(2) == Some(f))
            .unwrap_or_else(|| panic!("no {f} in\n{out}"))
            .to_string()
    };
    // Short functions (3 and 4 bytes: the filler after them is used), a
    // RIP-relative load, a jump table, a call in the first bytes.
    for (f, bytes) in [
        ("zero", "3"),
        ("inc", "4"),
        ("get_counter", "6"),
        ("pick", "5"),
    ] {
        assert_eq!(line(f).split_whitespace().nth(1), Some(bytes), "{out}");
    }
    // `work` is called directly, but calls through pointers: gcc takes
    // it to change every register, and its callers keep nothing in them.
    for f in ["twice", "fibber", "main", "run", "serve", "work"] {
        assert!(
            !line(f).contains("refused") && !line(f).contains("keeps"),
            "{out}"
        );
    }
    // Called directly and changing few registers: the stub keeps the
    // others (`leaf_add` changes eax alone; `mix` changes some itself).
    assert!(
        line("leaf_add").ends_with(
            "[keeps rcx rsi rdi r8 r9 r10 r11 xmm2 xmm3 xmm4 xmm5 xmm6 xmm7 \
             xmm8 xmm9 xmm10 xmm11 xmm12 xmm13 xmm14 xmm15]"
        ),
        "{out}"
    );
    assert!(line("mix").contains("[keeps r8 r11 xmm2 "), "{out}");
    assert!(line("fib").contains("[keeps "), "{out}");
    assert!(out.contains("# kept: 3 (called directly"), "{out}");
    assert!(
        line("into_window").contains("lands inside the patched bytes"),
        "{out}"
    );
    assert!(
        line("loop_entry").contains("loops back to the entry"),
        "{out}"
    );
    assert!(
        line("sum8").contains("called directly at") && line("sum8").contains("caller's stack"),
        "{out}"
    );
    assert!(out.contains("# refused: 1 (loop to the entry)"), "{out}");
    assert!(out.ends_with("# 16 of 19 functions patchable\n"), "{out}");

    // A pattern narrows it; `!` takes back; one that matches nothing is
    // an error that says so.
    let o = shadowgraph()
        .args(["sites", "-P", "*i*", "-P", "!fib*"])
        .arg(&exe)
        .output()
        .unwrap();
    let out = text(&o).0;
    let listed: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert_eq!(
        listed,
        [
            "main",
            "into_window",
            "inc",
            "pick",
            "twice",
            "mix",
            "mixer"
        ],
        "{out}"
    );
    let o = shadowgraph()
        .args(["sites", "-P", "nosuch"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("-P nosuch matches no function"),
        "{}",
        text(&o).1
    );
}

/// A stripped program keeps its functions' names in a separate debug
/// file (`objcopy --only-keep-debug`, found by its `.gnu_debuglink`):
/// `-P` patches them by those names, static ones included; without the
/// debug file, by their addresses.
#[test]
fn p_finds_names_in_a_separate_debug_file() {
    let dir = workdir("prologue_debuglink");
    let exe = plain_build(&dir);
    let debug = dir.join("prologues.debug");
    let run = |args: &[&std::ffi::OsStr]| {
        let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", text(&o).1);
    };
    run(&[
        "objcopy".as_ref(),
        "--only-keep-debug".as_ref(),
        exe.as_ref(),
        debug.as_ref(),
    ]);
    run(&["strip".as_ref(), "--strip-all".as_ref(), exe.as_ref()]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    run(&["objcopy".as_ref(), link.as_ref(), exe.as_ref()]);

    let o = shadowgraph()
        .args(["sites", "-P", "."])
        .arg(&exe)
        .output()
        .unwrap();
    let out = text(&o).0;
    assert!(o.status.success(), "{}", text(&o).1);
    // `work` and `leaf_add`: static or not, named by the debug file.
    for f in ["work", "leaf_add", "main"] {
        assert!(
            out.lines().any(|l| l.split_whitespace().nth(2) == Some(f)),
            "{f}: {out}"
        );
    }
    assert!(out.ends_with("# 16 of 19 functions patchable\n"), "{out}");
    let data = dir.join("p.data");
    let one = [std::path::Path::new("1")];
    let o = record_run(&[], &["-P", "."], &data, &exe, &one);
    assert!(o.status.success(), "{}", text(&o).1);
    let replay = replay_text(&data);
    assert!(
        replay.contains("  work() {\n") && replay.contains("leaf_add();"),
        "{replay}"
    );

    // Without the debug file, its functions are found by its unwind
    // tables, unnamed: `-P .` patches them, shown by address.
    std::fs::remove_file(&debug).unwrap();
    let o = record_run(&[], &["-P", "."], &data, &exe, &one);
    assert!(o.status.success(), "{}", text(&o).1);
    let replay = replay_text(&data);
    assert!(
        !replay.contains("work") && replay.contains("  <") && replay.contains(">() {\n"),
        "{replay}"
    );
}

#[test]
fn record_p_traces_a_program_built_without_flags() {
    let dir = workdir("prologue_record");
    let exe = plain_build(&dir);
    let untraced = Command::new(&exe).args(["200", "4"]).output().unwrap();
    assert!(untraced.status.success());

    // One round, one thread: every call that -P patched, nested as made.
    let data = dir.join("one.data");
    let o = record_run(&[], &["-P", "."], &data, &exe, &[std::path::Path::new("1")]);
    assert!(o.status.success(), "{}", text(&o).1);
    let one = Command::new(&exe).arg("1").output().unwrap();
    assert_eq!(o.stdout, one.stdout);
    assert_eq!(
        replay_body(&replay_text(&data)),
        [
            "main() {",
            "  work() {",
            "    zero();",
            "    inc();",
            "    get_counter();",
            "    pick();",
            "    twice() {",
            "      inc();",
            "      inc();",
            "    } /* twice */",
            "    fibber() {",
            "      fib() {",
            "        fib() {",
            "          fib() {",
            "            fib() {",
            "              fib() {",
            "                fib();",
            "              } /* fib */",
            "            } /* fib */",
            "            fib();",
            "          } /* fib */",
            "          fib() {",
            "            fib();",
            "          } /* fib */",
            "        } /* fib */",
            "        fib() {",
            "          fib() {",
            "            fib();",
            "          } /* fib */",
            "        } /* fib */",
            "        fib();",
            "      } /* fib */",
            "    } /* fibber */",
            "    mixer() {",
            "      mix() {",
            "        leaf_add();",
            "        leaf_add();",
            "        leaf_add();",
            "      } /* mix */",
            "    } /* mixer */",
            "    summer();",
            "    keep_all() {",
            "      leaf_add();",
            "    } /* keep_all */",
            "  } /* work */",
            "} /* main */",
        ]
    );

    // The recording says what -P did, object by object.
    let info = view_text("info", &data);
    assert!(
        info.contains("patched prologues   : ")
            && info.contains("prologues: 16 patched, 3 refused (1 branch into the patched bytes, 1 called directly with stack arguments, 1 loop to the entry)"),
        "{info}"
    );

    // Four threads, 200 rounds: the program's result as untraced, every
    // call of every thread nested, nothing lost.
    let data = dir.join("threads.data");
    let args = [std::path::Path::new("200"), std::path::Path::new("4")];
    let o = record_run(&[], &["-P", "."], &data, &exe, &args);
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(o.stdout, untraced.stdout);
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    assert_eq!(d.tids.len(), 5);
    for &tid in &d.tids {
        calls_nest_exactly(&d, tid, &[]).unwrap();
    }
    assert_eq!(d.info.get("lost"), Some("0"));
    let rows = report_rows(&report_text(&data));
    // 200 rounds on each thread and main's: inc three times a round.
    assert_eq!(rows["inc"].2, 3 * 200 * 5);
    assert_eq!(rows["pick"].2, 200 * 5);
}

#[test]
fn p_that_patches_nothing_is_an_error_and_no_p_says_to_use_it() {
    let dir = workdir("prologue_errors");
    let exe = plain_build(&dir);
    record_refuses(&["-P", "nosuch"], &exe, "-P nosuch patched no function");
    record_refuses(&["-P", "sum8"], &exe, "-P sum8 patched no function");
    let o = shadowgraph().args(["sites"]).arg(&exe).output().unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o)
            .1
            .contains("or patch its functions' prologues with -P"),
        "{}",
        text(&o).1
    );
}

/// `record -p PID -P .` on a program built without flags, whose threads
/// run through the functions being patched without pause, three
/// recordings one after another in each process (the later ones turn
/// the same stubs' sites on and off again): every result stays right,
/// during the recordings and after them.
#[test]
fn attach_patches_prologues_under_running_threads() {
    let dir = workdir("prologue_attach");
    let exe = plain_build(&dir);
    for round in 0..3 {
        let (mut child, mut out) = start_target(&exe, &["serve", "3"]);
        for again in 0..3 {
            let data = dir.join(format!("a{round}-{again}.data"));
            let o = shadowgraph()
                .args([
                    "record",
                    "-p",
                    &child.id().to_string(),
                    "-P",
                    ".",
                    "--duration",
                    "100ms",
                ])
                .arg("-d")
                .arg(&data)
                .output()
                .unwrap();
            assert!(o.status.success(), "round {round}.{again}: {}", text(&o).1);
            // (A window a held thread was inside, or that a word of its
            // stack points into, is deferred: any one may be.)
            let rows = report_rows(&report_text(&data));
            let calls: u64 = rows.values().map(|r| r.2).sum();
            assert!(
                rows.len() >= 4 && calls > 0,
                "round {round}.{again}: {rows:?}"
            );
            let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
            for &tid in &d.tids {
                calls_nest_exactly(&d, tid, &[]).unwrap();
            }
            // Detached: the program's code is the file's again.
            if let Err(at) = text_as_in_file(child.id(), &exe) {
                panic!("round {round}.{again}: {at}");
            }
        }
        // Some more rounds after the last detach, then the verdict.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let rest = end_target(&mut child, &mut out);
        assert_eq!(rest, "bad=0\n", "round {round}");
    }
}

/// Whether the `.text` of the program `exe` running as `pid` is byte for
/// byte its file's; else the first address where it is not.
fn text_as_in_file(pid: u32, exe: &std::path::Path) -> Result<(), String> {
    use object::{Object, ObjectSection};
    use std::io::{Read, Seek, SeekFrom};
    let data = std::fs::read(exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let text = file.section_by_name(".text").unwrap();
    let want = text.data().unwrap();
    // A PIE's bias: where its first mapping (file offset 0) starts.
    let path = std::fs::canonicalize(exe).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let bias = maps
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() == 6 && f[2] == "00000000" && std::path::Path::new(f[5]) == path
        })
        .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    mem.seek(SeekFrom::Start(bias + text.address())).unwrap();
    let mut got = vec![0; want.len()];
    mem.read_exact(&mut got).unwrap();
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(format!(
            "code at {:#x} differs from the file's",
            text.address() + i as u64
        )),
    }
}

/// A program built with plain `-pg` (a call of `mcount` after each
/// function's prologue) or `-finstrument-functions` (calls of
/// `__cyg_profile_func_enter/exit`) is traced with no option: each
/// function that calls the hook is patched at its prologue, and the
/// replay is uftrace's, call for call. Its result with threads is the
/// untraced one.
#[test]
fn pg_and_instrument_functions_are_traced_as_uftrace_traces_them() {
    for (name, flag) in [("pg", "-pg"), ("cyg", "-finstrument-functions")] {
        hooked_build_is_traced_as_uftrace_traces_it(name, flag);
    }
}

fn hooked_build_is_traced_as_uftrace_traces_it(name: &str, flag: &str) {
    let dir = workdir(&format!("prologue_{name}"));
    let exe = dir.join(name);
    cc(
        &[&fixture("prologues.c")],
        &["-O2", "-pthread", "-DHOOKED", flag],
        &exe,
    );
    let o = shadowgraph().arg("sites").arg(&exe).output().unwrap();
    let out = text(&o).0;
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(
        out.contains("built with -pg or -finstrument-functions"),
        "{out}"
    );
    assert!(out.ends_with("# 16 of 16 functions patchable\n"), "{out}");

    let ours = dir.join("ours.data");
    let one = [std::path::Path::new("1")];
    let o = record_run_in(&dir, &[], &[], &ours, &exe, &one);
    assert!(o.status.success(), "{}", text(&o).1);
    let replay = replay_text(&ours);
    assert!(replay.contains("  fibber() {\n"), "{replay}");
    let threads = [std::path::Path::new("50"), std::path::Path::new("4")];
    let untraced = Command::new(&exe)
        .args(threads)
        .current_dir(&dir)
        .output()
        .unwrap();
    let o = record_run_in(&dir, &[], &[], &dir.join("t.data"), &exe, &threads);
    assert_eq!(o.stdout, untraced.stdout);
    // With library calls: the hooks are never among them (a caller of
    // mcount keeps its arguments in their registers across the call, which
    // a traced return would not keep).
    let lib = dir.join("lib.data");
    let o = record_run_in(&dir, &[], &["--libcall"], &lib, &exe, &threads);
    assert_eq!(o.stdout, untraced.stdout, "{flag}: {}", text(&o).1);
    let rows = report_rows(&report_text(&lib));
    assert!(rows.contains_key("pthread_create"), "{rows:?}");
    for hook in [
        "mcount",
        "__cyg_profile_func_enter",
        "__cyg_profile_func_exit",
    ] {
        assert!(!rows.contains_key(hook), "{flag}: {rows:?}");
    }

    if uftrace_missing("-pg and -finstrument-functions beside uftrace") {
        return;
    }
    let theirs = dir.join("theirs.data");
    let o = Command::new("uftrace")
        .args(["record", "--no-libcall", "--no-sched", "-d"])
        .arg(&theirs)
        .arg(&exe)
        .arg("1")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(
        replay_body(&replay),
        replay_body(&uftrace_view("replay", &theirs).unwrap()),
        "{flag}"
    );
}

/// `-P PAT@LIB` names a library loaded later by `dlopen`, built without
/// tracing flags: its functions are patched when it comes.
#[test]
fn p_names_a_library_dlopen_loads() {
    let dir = workdir("prologue_dlopen");
    cc(
        &[&fixture("plugin_libcalls.c")],
        &["-O2", "-shared", "-fPIC"],
        &dir.join("libplc.so"),
    );
    let exe = build_fixture_with(&dir, "host", "dlopen_libcalls.c", &["-ldl"]);
    let data = dir.join("dl.data");
    let o = record_run_in(&dir, &[], &["-P", ".@libplc"], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "10");
    assert!(err.contains("libplc.so: 1 patched"), "{err}");
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows.get("plug").map(|r| r.2), Some(2), "{rows:?}");
    assert_eq!(rows.get("main").map(|r| r.2), Some(1), "{rows:?}");
}

/// A plain library whose constructor starts threads that call its
/// functions without pause is patched as dlopen returns, the other
/// threads stopped by a signal (a thread stopped on a window's first
/// bytes goes on in the copy, or the window waits): six processes, every
/// result right, the functions recorded.
#[test]
fn p_patches_a_library_whose_threads_run_through_it() {
    let dir = workdir("prologue_spinning");
    cc(
        &[&fixture("plugin_spinning.c")],
        &["-O2", "-shared", "-fPIC", "-pthread"],
        &dir.join("libspin.so"),
    );
    let exe = build_fixture_with(&dir, "host", "dlopen_spinning.c", &["-ldl"]);
    for round in 0..6 {
        let data = dir.join(format!("s{round}.data"));
        let o = record_run_in(&dir, &[], &["-P", ".@libspin"], &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "round {round}: {err}");
        assert_eq!(out, "bad=0\n", "round {round}");
        let rows = report_rows(&report_text(&data));
        assert!(
            ["sq", "add3", "mix"].iter().any(|f| rows.contains_key(*f)),
            "round {round}: {rows:?}"
        );
    }
}

/// `-U PAT` (uftrace's unpatch) takes back what an earlier `-P` asked,
/// in the order given: `-P . -U 'fib*'` leaves fib and fibber alone,
/// `-U 'fib*' -P .` patches them again.
#[test]
fn unpatch_takes_back_in_order() {
    let dir = workdir("prologue_unpatch");
    let exe = plain_build(&dir);
    let one = [std::path::Path::new("1")];
    // (options, fibber traced, fib traced)
    for (opts, fibber, fib) in [
        (&["-P", ".", "-U", "fib*"][..], false, false),
        (&["-U", "fib*", "-P", "."], true, true),
        (
            &["--patch", ".", "--unpatch", "fib", "-P", "fibber"],
            true,
            false,
        ),
    ] {
        let data = dir.join("u.data");
        let o = record_run(&[], opts, &data, &exe, &one);
        assert!(o.status.success(), "{opts:?}: {}", text(&o).1);
        let replay = replay_text(&data);
        let shown = (replay.contains(" fibber("), replay.contains(" fib("));
        assert_eq!(shown, (fibber, fib), "{opts:?}: {replay}");
        assert!(replay.contains("leaf_add();"), "{opts:?}: {replay}");
    }
}

/// In an object with patchable entries, `-P` and `-U` choose among them
/// (uftrace's `t264`/`t265`): a function without one is not patched at
/// its prologue.
#[test]
fn p_selects_among_an_objects_own_sites() {
    let dir = workdir("prologue_own_sites");
    let exe = dir.join("some");
    cc(&[&fixture("patchable_some.c")], &["-O0"], &exe);
    for (opts, want) in [
        (&["-P", "."][..], "main() { a() { c(); } }"),
        (&["-P", ".", "-U", "a"][..], "main() { c(); }"),
        (&["-P", "main", "-P", "c"][..], "main() { c(); }"),
    ] {
        let data = dir.join("s.data");
        record_ok(opts, &data, &exe);
        let shape: Vec<String> = replay_body(&replay_text(&data))
            .iter()
            .map(|l| l.trim().replace(" /* main */", "").replace(" /* a */", ""))
            .collect();
        assert_eq!(shape.join(" "), want, "{opts:?}");
    }
}

/// A function called directly that indexes an array of its own frame is
/// patched (`-P`): an index from below the return address stays in the
/// frame; the program computes what it computes untraced.
#[test]
fn p_patches_a_function_indexing_its_own_array() {
    let dir = workdir("prologue_local_array");
    let exe = dir.join("la");
    cc(
        &[&fixture("local_array.c")],
        &["-O0", "-funroll-loops"],
        &exe,
    );
    let untraced = Command::new(&exe).output().unwrap();
    let data = dir.join("la.data");
    let o = record_run(&[], &["-P", "."], &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(o.stdout, untraced.stdout);
    let calls = graph_part(&replay_text(&data));
    assert!(calls.iter().any(|l| l == "  big();"), "{calls:#?}");
}
