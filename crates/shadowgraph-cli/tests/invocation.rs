//! The command line as uftrace's users type it: a program with no command
//! is `live`; a script or a launcher is run, and the programs it starts
//! are recorded; a command missing what it needs says what.

mod common;

use common::*;

/// `shadowgraph [OPTIONS] PROGRAM` records and replays, as `live`.
#[test]
fn a_program_without_a_command_is_live() {
    let dir = workdir("no_command");
    let exe = build_fixture(&dir, "fib", "fib_arg.c");
    let o = shadowgraph()
        .args(["-D", "2", "--no-libs"])
        .arg(&exe)
        .arg("5")
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let body = replay_body(&out[out.find("# DURATION").expect("a replay")..]);
    assert_eq!(body[0], "main() {", "{out}");
    // (An event, such as the scheduler pre-empting a call at depth 2,
    // shows one level inside it.)
    assert!(
        body.iter()
            .all(|l| !l.starts_with("    ") || l.trim_start().starts_with("/*")),
        "-D 2: {body:?}"
    );
}

/// A shell running two traced programs: the shell is not traced, each
/// program is recorded into a directory of its own (with its own names),
/// and the top directory names them.
#[test]
fn a_launcher_is_run_and_the_programs_it_starts_are_recorded() {
    let dir = workdir("launcher");
    let exe = build_fixture(&dir, "fib", "fib_arg.c");
    let script = dir.join("run.sh");
    std::fs::write(&script, format!("#!/bin/sh\n{0} 3\n{0} 4\n", exe.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let line = format!("{0} 3; {0} 4", exe.display());
    for (name, program) in [
        ("script", vec![script.to_str().unwrap()]),
        ("sh", vec!["sh", "-c", &line]),
    ] {
        let data = dir.join(format!("{name}.data"));
        let o = shadowgraph()
            .args(["record", "--no-libcall", "--no-sched", "--no-libs", "-d"])
            .arg(&data)
            .arg("--")
            .args(&program)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{name}: {err}");
        assert_eq!(out, "2\n3\n", "{name}");
        assert!(
            err.contains("it ran untraced, and each program it started"),
            "{name}: {err}"
        );
        let mut subs: Vec<_> = std::fs::read_dir(&data)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        subs.sort();
        assert_eq!(subs.len(), 2, "{name}: {subs:?}");
        let mut fib_calls = Vec::new();
        for s in &subs {
            let rows = report_rows(&report_text(s));
            assert_eq!(rows["main"].2, 1, "{name}: {rows:?}");
            fib_calls.push(rows["fib"].2);
        }
        fib_calls.sort();
        assert_eq!(fib_calls, [5, 9], "{name}: fib(3) and fib(4)");
        let o = shadowgraph()
            .args(["replay", "-d"])
            .arg(&data)
            .output()
            .unwrap();
        let err = text(&o).1;
        assert!(
            !o.status.success() && err.contains("holds 2 recordings") && err.contains("choose one"),
            "{name}: {err}"
        );
    }
    // Nothing could be recorded: said before anything runs.
    let o = shadowgraph()
        .args([
            "record",
            "--no-libcall",
            "--no-sched",
            "--no-children",
            "-d",
        ])
        .arg(dir.join("none.data"))
        .arg("--")
        .arg(&script)
        .output()
        .unwrap();
    let err = text(&o).1;
    assert!(
        !o.status.success() && err.contains("--no-children"),
        "{err}"
    );
}

/// `dump` without a format is the plain text dump, of an existing
/// recording; --svg goes with --flame-graph only.
#[test]
fn dump_names_a_missing_recording_and_svg_needs_a_flame_graph() {
    let o = shadowgraph()
        .args(["dump", "-d", "/nonexistent"])
        .output()
        .unwrap();
    let err = text(&o).1;
    assert!(
        !o.status.success() && err.contains("/nonexistent: no such data directory"),
        "{err}"
    );
    let o = shadowgraph().args(["dump", "--svg"]).output().unwrap();
    let err = text(&o).1;
    assert_eq!(
        err.trim(),
        "shadowgraph: --svg renders a flame graph: use it with --flame-graph"
    );
}

/// A program without patchable entries whose library has some is
/// recorded as any other (the library's functions), not taken for a
/// launcher.
#[test]
fn a_program_without_sites_is_traced_in_its_libraries() {
    let dir = workdir("nosites_main");
    build_lib(&fixture("lib_with_sites.c"), &dir.join("libwithsites.so"));
    let exe = dir.join("main");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    cc(
        &[&fixture("nosites_main.c"), &dir.join("libwithsites.so")],
        &["-O2", &rpath],
        &exe,
    );
    let o = std::process::Command::new(&exe).output().unwrap();
    let data = dir.join("d.data");
    let r = record_run(&[], &[], &data, &exe, &[]);
    let (out, err) = text(&r);
    assert!(r.status.success(), "{err}");
    assert_eq!(out.as_bytes(), o.stdout);
    assert!(
        !err.contains("untraced") && !err.contains("nothing was recorded"),
        "{err}"
    );
    let rows = report_rows(&report_text(&data));
    assert_eq!(rows["libwork"].2, 1, "{rows:?}");
    assert_eq!(rows["inner"].2, 10, "{rows:?}");
}

/// Run as `uftrace` (a link of that name), the commands take uftrace's
/// default data directory, `uftrace.data`; and a forked child stands in
/// `task.txt` as uftrace writes it: its FORK line, no TASK line of its own
/// (uftrace's tests take the last TASK line for the parent's thread).
#[test]
fn as_uftrace_the_data_directory_is_uftraces() {
    let dir = workdir("as_uftrace");
    let exe = build_fixture(&dir, "forks", "fork_returns.c");
    let link = dir.join("uftrace");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_shadowgraph"), &link).unwrap();
    let o = std::process::Command::new(&link)
        .current_dir(&dir)
        .args(["record", "--no-libcall"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(dir.join("uftrace.data/info").is_file());
    assert!(!dir.join("shadowgraph.data").exists());
    let o = std::process::Command::new(&link)
        .current_dir(&dir)
        .args(["replay", "--no-pager"])
        .output()
        .unwrap();
    assert!(
        o.status.success() && text(&o).0.contains("main()"),
        "{}",
        text(&o).1
    );
    let tasks = std::fs::read_to_string(dir.join("uftrace.data/task.txt")).unwrap();
    let field = |l: &str, k: &str| {
        l.split_whitespace()
            .find_map(|f| f.strip_prefix(k).map(str::to_string))
    };
    let fork = tasks.lines().find(|l| l.starts_with("FORK ")).unwrap();
    let child = field(fork, "pid=").unwrap();
    let last_task = tasks.lines().rfind(|l| l.starts_with("TASK ")).unwrap();
    assert_eq!(field(last_task, "tid="), field(fork, "ppid="), "{tasks}");
    assert!(
        !tasks
            .lines()
            .any(|l| l.starts_with("TASK ") && field(l, "tid=") == Some(child.clone())),
        "{tasks}"
    );
}

/// `--force`: a program not built for tracing is traced by the calls it
/// makes through its PLT, as uftrace's option traces it (the same
/// replay); with `-a`, their arguments from the C library's prototypes,
/// which uftrace reads as we do. Without it, or with `--no-libcall`, the
/// program runs untraced.
#[test]
fn force_traces_a_program_not_built_for_tracing_by_its_library_calls() {
    let dir = workdir("force");
    let exe = dir.join("plain");
    cc(&[&fixture("libc_args.c")], &["-O2", "-fno-builtin"], &exe);
    let untraced = record_run(&[], &["--libcall"], &dir.join("u.data"), &exe, &[]);
    let err = text(&untraced).1;
    assert!(err.contains("it ran untraced"), "{err}");
    // With --no-libcall, --force traces what it would without it.
    let o = record_run(&[], &["--force"], &dir.join("n.data"), &exe, &[]);
    assert!(text(&o).1.contains("it ran untraced"), "{}", text(&o).1);
    let data = dir.join("f.data");
    let o = record_run(&[], &["--libcall", "--force"], &data, &exe, &[]);
    let err = text(&o).1;
    assert!(o.status.success() && !err.contains("untraced"), "{err}");
    let ours = replay_body(&view_text("replay", &data));
    assert!(
        ours.len() > 10 && ours.contains(&"puts();".into()),
        "{ours:?}"
    );
    let args = dir.join("a.data");
    let o = record_run(&[], &["--libcall", "--force", "-a"], &args, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    let with_args = view_text("replay", &args);
    assert!(with_args.contains("puts(\"35\") = 3;"), "{with_args}");
    if uftrace_missing("uftrace record --force") {
        return;
    }
    assert_eq!(uftrace_view("replay", &args).unwrap(), with_args);
    let theirs = dir.join("uftrace.data");
    uftrace_record(&theirs, &["--force"], &exe);
    assert_eq!(replay_body(&uftrace_view("replay", &theirs).unwrap()), ours);
}

/// uftrace's `--opt-file` (options from a file, after the command line's;
/// the program too when the command line has none), `--time` (the run's
/// times as uftrace prints them) and `--no-randomize-addr` (the same
/// addresses run after run).
#[test]
fn opt_file_time_and_no_randomize_addr_as_uftraces() {
    let dir = workdir("run_options");
    let exe = dir.join("abc");
    cc(
        &[&fixture("abc.c")],
        &["-O0", "-fpatchable-function-entry=5"],
        &exe,
    );
    let opts = dir.join("opts");
    std::fs::write(&opts, "record\n-F b # from b on\n'--no-libcall'\n").unwrap();
    let data = dir.join("o.data");
    let o = record_run(
        &[],
        &["--opt-file", opts.to_str().unwrap()],
        &data,
        &exe,
        &[],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(
        replay_body(&replay_text(&data)),
        ["b() {", "  c();", "} /* b */"]
    );
    // The program from the file, a later -F winning over none.
    let with_program = dir.join("opts2");
    std::fs::write(&with_program, format!("-F c\n{}\n", exe.display())).unwrap();
    let data = dir.join("p.data");
    // (--no-sched: a pre-emption inside getpid would be an event.)
    let o = shadowgraph()
        .args(["record", "--no-sched", "-d"])
        .arg(&data)
        .arg(format!("--opt-file={}", with_program.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(
        replay_body(&replay_text(&data)),
        ["c() {", "  getpid();", "} /* c */"]
    );
    // A view takes it too, its file a word of its own or after `=`.
    let view_opts = dir.join("view_opts");
    std::fs::write(&view_opts, "-F c\n").unwrap();
    for given in [
        vec!["--opt-file".to_string(), view_opts.display().to_string()],
        vec![format!("--opt-file={}", view_opts.display())],
    ] {
        let o = shadowgraph()
            .arg("replay")
            .args(&given)
            .arg("-d")
            .arg(dir.join("o.data"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{given:?}: {}", text(&o).1);
        assert_eq!(replay_body(&text(&o).0), ["c();"], "{given:?}");
    }
    let missing = shadowgraph()
        .args(["record", "--opt-file", "/nonexistent/opts"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        text(&missing)
            .1
            .contains("--opt-file /nonexistent/opts: cannot read it"),
        "{}",
        text(&missing).1
    );
    // --time: three lines on stdout, as uftrace's.
    let o = record_run(&[], &["--time"], &dir.join("t.data"), &exe, &[]);
    let out = text(&o).0;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("elapsed time: ") && lines[0].ends_with(" sec"),
        "{out}"
    );
    assert!(lines[1].starts_with(" system time: ") && lines[1].ends_with("000 sec"));
    assert!(lines[2].starts_with("   user time: ") && lines[2].ends_with("000 sec"));
    // --no-randomize-addr: a stack address twice the same.
    let src = dir.join("aslr.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void) { int x; printf(\"%p\\n\", (void *)&x); return 0; }\n",
    )
    .unwrap();
    let aslr = dir.join("aslr");
    cc(&[&src], &["-O2", "-fpatchable-function-entry=5"], &aslr);
    let address = |opts: &[&str]| {
        let o = record_run(&[], opts, &dir.join("a.data"), &aslr, &[]);
        assert!(o.status.success(), "{}", text(&o).1);
        text(&o).0
    };
    let fixed = ["--no-randomize-addr"];
    assert_eq!(address(&fixed), address(&fixed));
    assert_ne!(
        address(&[]),
        address(&[]),
        "addresses randomized by default"
    );
}

/// `--nop` runs the program under the agent with nothing recorded and no
/// directory made (a `-pg` program writes no `gmon.out`: the agent's hooks
/// replace gprof's), `--time` said all the same; `--rt-prio` runs the
/// writers at real-time priority, `--num-thread` says how many; `-g` and
/// `--libmcount-single` are taken: as uftrace's.
#[test]
fn nop_rt_prio_and_uftraces_other_record_options() {
    let dir = workdir("nop");
    let pg = dir.join("abc_pg");
    cc(&[&fixture("abc.c")], &["-O0", "-pg"], &pg);
    let data = dir.join("n.data");
    let o = shadowgraph()
        .current_dir(&dir)
        .args(["record", "--nop", "--time", "-d"])
        .arg(&data)
        .arg(&pg)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.starts_with("elapsed time:"), "{out}");
    assert!(!data.exists(), "--nop made {}", data.display());
    assert!(!dir.join("gmon.out").exists(), "the agent was not loaded");
    // (Without the agent the same program writes it.)
    let alone = std::process::Command::new(&pg)
        .current_dir(&dir)
        .status()
        .unwrap();
    assert!(alone.success() && dir.join("gmon.out").exists());
    // With -p there is no program to run: said, not ignored.
    let o = shadowgraph()
        .args(["record", "--nop", "-p", "1"])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("--nop") && err.contains("-p 1"), "{err}");
    let exe = dir.join("writer_priority");
    cc(
        &[&fixture("writer_priority.c")],
        &["-O0", "-fpatchable-function-entry=5"],
        &exe,
    );
    // (Two writers where the machine has two processors.)
    let opts = [
        "--rt-prio",
        "10",
        "--num-thread",
        "2",
        "-g",
        "--libmcount-single",
    ];
    let o = record_run(&[], &opts, &dir.join("rt.data"), &exe, &[]);
    let writers = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    // Where this system lets no process take real-time priority, the
    // recording goes on and says so.
    let allowed = std::process::Command::new("chrt")
        .args(["-f", "10", "true"])
        .status()
        .expect("chrt (util-linux)")
        .success();
    let each = |line: &str| vec![line; writers].join("\n");
    if allowed {
        assert_eq!(out.trim(), each("writer policy 1 priority 10"), "{err}");
    } else {
        assert_eq!(out.trim(), each("writer policy 0 priority 0"), "{err}");
        assert!(
            err.contains("--rt-prio 10: the writer keeps its priority"),
            "{err}"
        );
    }
    let o = record_run(&[], &["--rt-prio", "0"], &dir.join("rt.data"), &exe, &[]);
    assert!(!o.status.success() && text(&o).1.contains("0 is not in 1..=99"));
}

/// `--logfile FILE` takes the messages of `shadowgraph` and of the agent
/// in the traced program (appended), while the program's own standard
/// error stays where it was; `-v` (or `--debug`) adds debug lines: what
/// is run, where it records, the sites each object has traced. As
/// uftrace's.
#[test]
fn logfile_and_verbose_as_uftraces() {
    let dir = workdir("logfile");
    let exe = dir.join("naps");
    cc(
        &[&fixture("naps.c")],
        &[
            "-O0",
            "-fpatchable-function-entry=5",
            "-DMIDS=2",
            "-DNAP_US=1",
            "-DFIB_N=5",
        ],
        &exe,
    );
    let log = dir.join("log.txt");
    let data = dir.join("l.data");
    let logfile = format!("--logfile={}", log.display());
    let o = record_run(&[], &[&logfile, "-v"], &data, &exe, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "16 5");
    assert!(
        err.starts_with("mid took ") && err.lines().count() == 1,
        "{err}"
    );
    let said = std::fs::read_to_string(&log).unwrap();
    // (The agent's lines: it runs in the program.)
    for want in [
        "shadowgraph: debug: running ",
        &format!("shadowgraph: debug: {}: 5 of 5 sites traced", exe.display()),
        "shadowgraph: debug: process ",
        "# recorded ",
    ] {
        assert!(said.contains(want), "{want:?} in {said}");
    }
    // Errors too, appended.
    let o = shadowgraph()
        .args(["replay", "--tid", "1", "-d"])
        .arg(&data)
        .arg(&logfile)
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).1.is_empty());
    let again = std::fs::read_to_string(&log).unwrap();
    assert!(again.starts_with(&said), "appended");
    assert!(again.contains("--tid 1: no such thread"), "{again}");
    // Without a log file, on standard error; --debug as -v.
    let o = record_run(&[], &["--debug"], &data, &exe, &[]);
    let err = text(&o).1;
    assert!(
        err.contains("sites traced") && err.contains("mid took"),
        "{err}"
    );
    let o = record_run(&[], &[], &data, &exe, &[]);
    assert!(!text(&o).1.contains("debug:"));
}

/// A data directory a recording is writing into is neither moved aside
/// nor removed by another `record` (uftrace's way with an existing one,
/// which would part the first recording's files from its metadata): the
/// second is refused, clearly, and the first ends whole. Once it has
/// ended, the directory is moved aside as any other.
#[test]
fn a_directory_being_recorded_into_is_left_alone() {
    let dir = workdir("busy_data_dir");
    let exe = build_fixture_with(&dir, "target", "attach_target.c", &["-pthread"]);
    let data = dir.join("x.data");
    // (The target runs until a byte arrives on its stdin, which is
    // `record`'s.)
    let mut first = shadowgraph()
        .args(["record", "--no-libcall", "-d"])
        .arg(&data)
        .arg("--")
        .arg(&exe)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(first.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    // Another recording into the same directory (the target runs 1 ms).
    let another = || {
        shadowgraph()
            .args(["record", "--no-libcall", "-d"])
            .arg(&data)
            .arg("--")
            .arg(&exe)
            .arg("1")
            .output()
            .unwrap()
    };
    for d in [&data, &dir.join("x.data.old")] {
        if d.ends_with("x.data.old") {
            // (A recording under way in DIR.old, which a new recording
            // into DIR would remove: made by moving the first one aside,
            // DIR an old one.)
            std::fs::rename(&data, d).unwrap();
            std::fs::create_dir(&data).unwrap();
        }
        let o = another();
        let err = text(&o).1;
        assert!(!o.status.success(), "{err}");
        assert!(
            err.contains(&format!(
                "{}: a recording is under way into it; give another directory (-d)",
                d.display()
            )),
            "{err}"
        );
    }
    std::fs::remove_dir(&data).unwrap();
    std::fs::rename(dir.join("x.data.old"), &data).unwrap();
    std::io::Write::write_all(first.stdin.as_mut().unwrap(), b"x").unwrap();
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let rows = report_rows(&report_text(&data));
    assert!(rows["mid"].2 > 0, "{rows:?}");
    // Ended: moved aside by the next recording.
    let o = another();
    assert!(o.status.success(), "{}", text(&o).1);
    let old = report_rows(&report_text(&dir.join("x.data.old")));
    assert_eq!(old["mid"].2, rows["mid"].2);
}
