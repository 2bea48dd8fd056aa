//! Arguments and return values (`-A`, `-R`): recorded in uftrace's
//! format, shown as uftrace shows them, the program unharmed by a pointer
//! that is no string.

mod common;

use common::*;
use std::process::Command;

/// Recorded by shadowgraph and by uftrace 0.13 from the same binary with
/// the same specs, the two recordings replay alike (arguments, return
/// values, strings, chars, floats, function pointers); uftrace reads
/// ours as we do; a pointer that is no string shows as uftrace shows it
/// and the program's output is its own.
#[test]
fn arguments_and_return_values_are_recorded_as_uftrace_records_them() {
    let dir = workdir("arguments");
    let exe = dir.join("args");
    // -pg -mfentry -mrecord-mcount: sites for both tracers.
    cc(
        &[&fixture("args_values.c")],
        &["-O0", "-pg", "-mfentry", "-mrecord-mcount", "-no-pie"],
        &exe,
    );
    let plain = Command::new(&exe).output().unwrap();
    let ours = dir.join("ours.data");
    let mut opts: Vec<&str> = Vec::new();
    for (o, s) in ARGS_VALUES_SPECS {
        opts.extend([o, s]);
    }
    let o = record_run(&[], &opts, &ours, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(o.stdout, plain.stdout, "the program's output is its own");
    let replay = replay_text(&ours);
    shows_each(
        &replay,
        &[
            "add(1, 2) = 3;",
            "neg(-5) = 0x4c4b40;",
            "str(\"hello\", 0x3) = 8;",
            "next('a') = 'b';",
            "half(3.000000) = 1.500000;",
            "third(9.000000) = 3.000000;",
            "call(&add) {",
            "big(0x75bcd15) = 0x75bcd15000;",
            "name(0) = \"NULL\";",
            "peek(\"<0x10>\");",
            "many(1, 7, 8) = 36;",
        ],
    );
    if uftrace_missing("recording arguments beside uftrace") {
        return;
    }
    assert_eq!(uftrace_view("replay", &ours).unwrap(), replay);
    // The plain dump's values (`[args ] length = 8`, `  args[0] d32:
    // 0x00000001`, `  retval str: …`) as uftrace's.
    let dump = view_text("dump", &ours);
    assert!(dump.contains(": [args ] length = "), "{dump}");
    assert_eq!(
        threads_dump(&dump),
        threads_dump(&uftrace_view("dump", &ours).unwrap())
    );
    let theirs = dir.join("theirs.data");
    let mut u = Command::new("uftrace");
    // (--no-sched: uftrace records a thread's pre-emptions where perf lets
    // it, as `/* linux:schedule */` lines we do not record.)
    u.args(["record", "--no-libcall", "--no-sched", "-d"])
        .arg(&theirs);
    for (o, s) in ARGS_VALUES_SPECS {
        u.args([o, s]);
    }
    let o = u.arg(&exe).output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(
        graph_part(&replay),
        graph_part(&uftrace_view("replay", &theirs).unwrap())
    );
}

/// The threads' part of a plain dump (uftrace's goes on with its perf
/// events' files).
fn threads_dump(dump: &str) -> Vec<&str> {
    dump.lines()
        .skip_while(|l| !l.starts_with("reading "))
        .take_while(|l| !l.starts_with("reading perf-"))
        .collect()
}

/// Specs are checked before the program runs: a bad one is named.
#[test]
fn bad_argument_specs_are_named() {
    let dir = workdir("arguments-bad");
    let exe = build_fixture(&dir, "fib", "fib20.c");
    for (opt, spec, says) in [
        ("-A", "fib[", "unclosed `[`"),
        ("-A", "fib@arg1/q", "unknown format"),
        ("-A", "fib@retval", "-A takes argN or fpargN"),
        ("-R", "fib@arg1", "-R takes retval"),
        ("-A", "fib@arg1/i12", "unsupported size"),
        ("-A", "fib@arg1/t16%rbx", "unknown register `rbx`"),
        ("-A", "fib@arg1%stack+0", "a stack word from 1 to 100"),
    ] {
        let o = record_run(&[], &[opt, spec], &dir.join("x.data"), &exe, &[]);
        assert!(!o.status.success(), "{opt} {spec}");
        let err = text(&o).1;
        assert!(
            err.contains(spec) && err.contains(says),
            "{opt} {spec}: {err}"
        );
    }
}

/// Library calls take specs as functions do: a string argument of
/// `strlen` and its return value, the format of a variadic `printf`.
#[test]
fn library_calls_arguments_are_recorded() {
    let dir = workdir("arguments-libcalls");
    let exe = dir.join("args");
    cc(
        &[&fixture("args_values.c")],
        &["-O2", "-fpatchable-function-entry=5"],
        &exe,
    );
    let data = dir.join("l.data");
    let opts = [
        "--libcall",
        "-A",
        "strlen@arg1/s",
        "-R",
        "strlen@retval",
        "-A",
        "printf@arg1/s",
    ];
    let o = record_run(&[], &opts, &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    let replay = replay_text(&data);
    shows_each(&replay, &["strlen(\"hello\") = 5;", "printf(\"%ld\\n\");"]);
    if let Some(theirs) = uftrace_view("replay", &data) {
        assert_eq!(theirs, replay);
    }
}

/// A Rust program's functions, named as views show them (`prog::add`).
#[test]
fn rust_functions_arguments_are_recorded() {
    let dir = workdir("arguments-rust");
    let exe = build_rust_fixture(&dir, "rustargs", "rust_args.rs");
    let data = dir.join("r.data");
    let opts = [
        "-A",
        "prog::add@arg1,arg2",
        "-R",
        "prog::add@retval",
        "-A",
        "prog::scale@fparg1,fparg2",
        "-R",
        "prog::scale@retval/f",
        "-A",
        "prog::first_byte@arg1/s",
        "-R",
        "prog::first_byte@retval/c",
    ];
    let o = record_run(&[], &opts, &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(text(&o).0, "42 6 114\n");
    let replay = replay_text(&data);
    shows_each(
        &replay,
        &[
            "prog::add(40, 2) = 42;",
            "prog::scale(1.500000, 4.000000) = 6.000000;",
            "prog::first_byte(\"rust\") = 'r';",
        ],
    );
}

/// `-a`: every function's arguments and return value from the program's
/// DWARF, by type (integers, longs, floats and doubles, strings, a char,
/// a pointer, an enum by its constants' names, none), as uftrace's `-a`
/// records and shows them; uftrace reads ours as we do; without debug
/// information it is said and nothing is recorded of arguments.
#[test]
fn auto_args_are_recorded_as_uftrace_records_them() {
    let dir = workdir("auto-args");
    let exe = dir.join("auto");
    let flags = ["-O0", "-pg", "-mfentry", "-mrecord-mcount", "-no-pie"];
    cc(
        &[&fixture("auto_args.c")],
        &[&["-g"], &flags[..]].concat(),
        &exe,
    );
    let ours = dir.join("ours.data");
    let o = record_run(&[], &["-a"], &ours, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    let replay = replay_text(&ours);
    shows_each(
        &replay,
        &[
            "main(1, 0x",
            "int_add(1, 2) = 3;",
            "lmul(3, -4) = -12;",
            "half(5.000000) = 2.500000;",
            "fadd(1.500000, 2.250000) = 3.750000;",
            "pick(\"hello\", 1) = \"ello\";",
            "first(\"xyz\") = 'x';",
            "same(0) = 0;",
            "mixed(-7, 2.500000, \"abc\", 'q') = 205;",
            "nothing();",
            "paint(GREEN) = GREEN;",
            "} = 0; /* main */",
        ],
    );
    let plain = dir.join("plain");
    cc(&[&fixture("auto_args.c")], &flags, &plain);
    let o = record_run(&[], &["-a"], &dir.join("plain.data"), &plain, &[]);
    assert!(
        o.status.success()
            && text(&o)
                .1
                .contains("has no debug information (build it with -g)"),
        "{}",
        text(&o).1
    );
    if uftrace_missing("recording arguments beside uftrace") {
        return;
    }
    assert_eq!(uftrace_view("replay", &ours).unwrap(), replay);
    let theirs = dir.join("theirs.data");
    uftrace_record(&theirs, &["-a", "--no-libcall"], &exe);
    // (argv is where each run's stack is.)
    let calls = |r: &str| -> Vec<String> {
        graph_part(r)
            .into_iter()
            .map(|l| match l.split_once(", 0x") {
                Some((head, _)) if l.starts_with("main(") => format!("{head}, ARGV) {{"),
                _ => l,
            })
            .collect()
    };
    // (uftrace's recording read by us as well.)
    assert_eq!(calls(&replay_text(&theirs)), calls(&replay));
    assert_eq!(
        calls(&replay),
        calls(&uftrace_view("replay", &theirs).unwrap())
    );
}

/// `-a` on a program without debug information: the calls it makes to
/// the C library show their arguments and return values from the
/// built-in prototypes (flags and constants by name), as uftrace shows
/// them; uftrace reads ours as we do, and we read uftrace's as it does.
#[test]
fn library_calls_auto_args_as_uftrace() {
    let dir = workdir("libc-args");
    let exe = dir.join("lc");
    cc(
        &[&fixture("libc_args.c")],
        &["-O0", "-pg", "-fno-builtin"],
        &exe,
    );
    let ours = dir.join("ours.data");
    let o = record_run(&[], &["-a", "--libcall"], &ours, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(text(&o).0, "35\n");
    let replay = replay_text(&ours);
    shows_each(
        &replay,
        &[
            "main() {",
            "open(\"/dev/null\", O_APPEND|O_WRONLY) = ",
            ", 3) = 3;",
            "atoi(\"42\") = 42;",
            "strtod(\"2.5\", 0) = 2.500000;",
            "strtol(\"-17\", 0, 10) = -17;",
            "strlen(\"hello\") = 5;",
            "strchr(\"hello\", 'l') = \"llo\";",
            "strcmp(\"abc\", \"abd\") = -1;",
            "mmap(0, 4096, PROT_WRITE|PROT_READ, MAP_ANON|MAP_PRIVATE, -1, 0) = 0x",
            "clock_gettime(CLOCK_MONOTONIC, 0x",
            "signal(SIGUSR1, 0x1) = 0;",
            "raise(SIGUSR1) = 0;",
            "access(\"/\", R_OK|X_OK) = 0;",
            "snprintf(0x",
            ", 32, \"%d\") = 2;",
            "puts(\"35\") = 3;",
            "getenv(\"SHADOWGRAPH_NO_SUCH_VARIABLE\") = \"NULL\";",
            "} /* main */",
        ],
    );
    if uftrace_missing("recording arguments beside uftrace") {
        return;
    }
    assert_eq!(uftrace_view("replay", &ours).unwrap(), replay);
    let theirs = dir.join("theirs.data");
    uftrace_record(&theirs, &["-a"], &exe);
    as_uftrace(&theirs, &[&["replay"]], 0);
}

/// C++ functions given `std::string`s (`S`: libstdc++'s object, by
/// reference or pointer; short, long, longer than a copy keeps), at -O0
/// and -O2: shown as uftrace shows them, uftrace reads ours as we do, and
/// the calls equal uftrace's recording of the same binary.
#[test]
fn std_strings_are_recorded_as_uftrace_records_them() {
    let dir = workdir("std-strings");
    let specs = ["-A", "measure@arg1/S", "-A", "count@arg1/S,arg2/c"];
    let calls = |r: &str| -> Vec<String> { graph_part(r) };
    for opt in ["-O0", "-O2"] {
        let exe = dir.join(format!("s{opt}"));
        cc(&[&fixture("std_strings.cc")], &[opt, "-pg"], &exe);
        let ours = dir.join(format!("ours{opt}.data"));
        let o = record_run(&[], &specs, &ours, &exe, &[]);
        assert!(o.status.success(), "{}", text(&o).1);
        assert_eq!(text(&o).0, "194\n");
        let view = |data: &std::path::Path, c: &mut Command| {
            let o = c
                .args(["replay", "-F", "measure", "-F", "count", "-D", "1", "-d"])
                .arg(data)
                .output()
                .unwrap();
            text(&o).0
        };
        let replay = view(&ours, &mut shadowgraph());
        let long = format!("measure(\"{}...\"s);", "x".repeat(95));
        shows_each(
            &replay,
            &[
                "measure(\"hi\"s);",
                &long,
                "measure(\"hithere, a string longer than fifteen\"s);",
                "count(\"hithere, a string longer than fifteen\"s, 'e');",
            ],
        );
        if uftrace_missing("recording std::string arguments beside uftrace") {
            return;
        }
        assert_eq!(view(&ours, &mut Command::new("uftrace")), replay);
        let theirs = dir.join(format!("theirs{opt}.data"));
        let mut opts = vec!["--no-libcall"];
        opts.extend(specs);
        uftrace_record(&theirs, &opts, &exe);
        assert_eq!(
            calls(&view(&theirs, &mut Command::new("uftrace"))),
            calls(&replay)
        );
    }
}

/// With a time filter (`-t`), the calls long enough keep their arguments
/// (an entry written late, once a callee proved long, too) and return
/// values; the short ones leave nothing. So with triggers beside it (whose
/// words the calls keep too: `depth=`, `-C`), and with a caller filter
/// alone. As uftrace records them. Where the triggers only limit the
/// depth, the threads take the fused path and the rings' consumer leaves
/// the short calls out, their data with them.
#[test]
fn arguments_of_time_filtered_calls_are_recorded() {
    let dir = workdir("timed-args");
    let exe = dir.join("ta");
    cc(&[&fixture("timed_args.c")], &["-O2", "-pg"], &exe);
    let specs = [
        "-A",
        "outer@arg1",
        "-A",
        "slow@arg1,arg2/s",
        "-A",
        "quick@arg1",
        "-R",
        "outer@retval",
        "-R",
        "slow@retval",
    ];
    let want = [
        "main() {",
        "  outer(7) {",
        "    slow(1, \"first\") = 2;",
        "    slow(2, \"second\") = 4;",
        "  } = 7; /* outer */",
        "} /* main */",
    ];
    let filters: [&[&str]; 4] = [
        &["-t", "5ms"],
        &["-t", "5ms", "-T", "main@depth=4"],
        &["-t", "5ms", "-C", "slow"],
        &["-C", "slow", "-N", "quick"],
    ];
    for (k, filter) in filters.into_iter().enumerate() {
        let opts = [filter, &specs[..]].concat();
        let ours = dir.join(format!("ours{k}.data"));
        let o = record_run(&[], &opts, &ours, &exe, &[]);
        assert!(o.status.success(), "{}", text(&o).1);
        let replay = replay_text(&ours);
        assert_eq!(graph_part(&replay), want, "{filter:?}: {replay}");
        let info = view_text("info", &ours);
        if k < 2
            && shadowgraph_testkit::tool::available(
                shadowgraph::clock::init(),
                "an invariant TSC",
                "the fused path",
            )
        {
            assert!(info.contains("record path         : fused"), "{info}");
        }
        if uftrace_missing("recording time-filtered arguments beside uftrace") {
            return;
        }
        assert_eq!(uftrace_view("replay", &ours).unwrap(), replay);
        let theirs = dir.join(format!("theirs{k}.data"));
        let opts = [&["--no-libcall"][..], &opts].concat();
        uftrace_record(&theirs, &opts, &exe);
        assert_eq!(
            graph_part(&uftrace_view("replay", &theirs).unwrap()),
            want,
            "{filter:?}"
        );
    }
}

/// `-a` reads a traced library's DWARF too: its functions show their
/// arguments and return values (an enum by name), the program's calls to
/// them through the PLT do not (the program has no DWARF), as uftrace
/// shows them; uftrace reads ours as we do.
#[test]
fn auto_args_of_a_library_come_from_its_own_dwarf() {
    let dir = workdir("auto-args-lib");
    let lib = dir.join("libsc.so");
    let flags = ["-O2", "-g", "-pg", "-fPIC", "-shared"];
    cc(&[&fixture("auto_args_lib.c")], &flags, &lib);
    let exe = dir.join("m");
    // (The library by its path: the program needs it from there.)
    cc(
        &[&fixture("auto_args_lib_main.c"), &lib],
        &["-O0", "-pg"],
        &exe,
    );
    let ours = dir.join("ours.data");
    let o = record_run(&[], &["-a", "--libcall"], &ours, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(text(&o).0, "23 0.25\n");
    let replay = replay_text(&ours);
    let calls = graph_part(&replay);
    for shown in [
        "  ratio() {",
        "    ratio(1.000000, 4) = 0.250000;",
        "  scale() {",
        "    scale(7, FAST, \"fast\") = 21;",
        "    scale(2, SLOW, \"slow\") = 2;",
        "  printf(\"%d %.2f\\n\") = 8;",
    ] {
        assert!(calls.iter().any(|l| l == shown), "{shown} in\n{replay}");
    }
    if uftrace_missing("recording a library's arguments beside uftrace") {
        return;
    }
    assert_eq!(uftrace_view("replay", &ours).unwrap(), replay);
}

/// `-a` and C structures by value, at -O0 and -O2: passed in memory
/// (packed, larger than 16 bytes), in integer registers, in xmm registers,
/// in both, empty; returned in registers and in memory (its address
/// taking rdi); the arguments after them where the ABI puts them; a long
/// double on the stack. Each call replays as uftrace 0.13 shows it but
/// where uftrace records a wrong value (`vec`'s and `mixed`'s return
/// values, the double after a long double); uftrace reads ours as we do,
/// and its dump of ours shows each structure's own bytes.
#[test]
fn structures_by_value_are_recorded_as_uftrace_records_them() {
    let dir = workdir("struct-args");
    let want = [
        "foo(Option{...}, StringRef{}, 44, 55, 66);",
        "pair(Pair{...}, 3) = 6;",
        "vec(Vec2{...}, 2.000000) = 8.000000;",
        "mixed(1, Mixed{...}, 2) = 18;",
        "big(Big{...}, 4) = 10;",
        "mkpair(5, 6) = Pair{...};",
        "mkbig(7, 8) = Big{...};",
        "mkvec(3.000000) = Vec2{...};",
        "small(Small{...}, 2, 3, 4, 5, 6, 7) = 28;",
        "num(Num{...}, Arr{...}) = 186;",
        "after(-1999997.000000, 1, 2.500000) = 0xffe17b86;",
        // A long double returned in st(0).
        "ldhalf(9.000000) = 4.500000;",
    ];
    for opt in ["-O0", "-O2"] {
        let exe = dir.join(format!("s{opt}"));
        let flags = ["-g", opt, "-pg", "-mfentry", "-mrecord-mcount", "-no-pie"];
        cc(&[&fixture("struct_args.c")], &flags, &exe);
        let ours = dir.join(format!("ours{opt}.data"));
        let o = record_run(&[], &["-a"], &ours, &exe, &[]);
        assert!(o.status.success(), "{}", text(&o).1);
        assert_eq!(text(&o).0, "-1999667\n");
        let replay = replay_text(&ours);
        // At -O2 gcc calls a copy of foo taking other arguments
        // (foo.constprop.0): it gets no specs, as uftrace gives it none.
        let skip = usize::from(opt == "-O2");
        shows_each(&replay, &want[skip..]);
        if skip == 1 {
            shows_each(&replay, &["foo.constprop.0();"]);
        }
        if uftrace_missing("recording structures by value beside uftrace") {
            return;
        }
        assert_eq!(uftrace_view("replay", &ours).unwrap(), replay);
        // (uftrace 0.13's dump aborts at a long double, its own too.)
        let dump = uftrace_view_with("dump", &ours, &["-N", "after", "-N", "ldhalf"]).unwrap();
        let o = shadowgraph()
            .args(["dump", "-N", "after", "-N", "ldhalf", "-d"])
            .arg(&ours)
            .output()
            .unwrap();
        assert_eq!(threads_dump(&text(&o).0), threads_dump(&dump));
        let structs = [
            "0b 16 00 00 00 00 00 00  00 21 00", // Option {11, 22, 33}, packed
            "01 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00", // Pair {1, 2}
            "07 00 00 00 00 00 00 00  00 00 00 00 00 00 21 40", // Mixed {7, 8.5}
            "01 00 00 00 00 00 00 00  02 00 00 00 00 00 00 00  \n\t03 00", // Big
            "00 00 00 00 00 00 08 40  00 00 00 00 00 00 18 40", // returned Vec2 {3, 6}
            "07 00 00 00 00 00 00 00  0f 00 00 00 00 00 00 00  \n\t38 00", // returned Big
        ];
        for bytes in &structs[skip..] {
            assert!(dump.contains(bytes), "{bytes} in\n{dump}");
        }
        let theirs = dir.join(format!("theirs{opt}.data"));
        uftrace_record(&theirs, &["-a", "--no-libcall"], &exe);
        let right = |r: &str| -> Vec<String> {
            let wrong = ["vec(", "mixed(", "after("];
            let lines = graph_part(r).into_iter();
            lines
                .filter(|l| !wrong.iter().any(|w| l.trim_start().starts_with(w)))
                .collect()
        };
        assert_eq!(
            right(&uftrace_view("replay", &theirs).unwrap()),
            right(&replay)
        );
    }
}

/// C++ by value: a `std::string` argument and return value, a class with
/// a destructor (passed by reference) beside a plain structure, tag types
/// of no data (`forward_iterator_tag{}`), constructors and destructors
/// (`this`, from their variants' DWARF), `name[abi:cxx11]` named as
/// uftrace names it: the whole program replays as uftrace 0.13 shows it.
#[test]
fn cxx_values_by_value_are_recorded_as_uftrace_records_them() {
    let dir = workdir("cxx-struct-args");
    let exe = dir.join("cxx");
    let flags = ["-g", "-O0", "-pg", "-mfentry", "-mrecord-mcount", "-no-pie"];
    cc(&[&fixture("struct_args.cc")], &flags, &exe);
    let ours = dir.join("ours.data");
    let o = record_run(&[], &["-a"], &ours, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(text(&o).0, "27\n");
    let replay = replay_text(&ours);
    shows_each(
        &replay,
        &[
            "greet(\"hello\"s, 2) = 7;",
            "name::cxx11(1) {",
            "} = \"somebody\"s; /* name::cxx11 */",
            "own(Owner{...}, Plain{...}) = 12;",
            "Owner::~Owner(0x",
            "std::__iterator_category(0x",
            ") = random_access_iterator_tag{};",
        ],
    );
    if uftrace_missing("recording C++ values beside uftrace") {
        return;
    }
    assert_eq!(uftrace_view("replay", &ours).unwrap(), replay);
    let theirs = dir.join("theirs.data");
    uftrace_record(&theirs, &["-a", "--no-libcall"], &exe);
    // (Stack addresses differ from run to run.)
    let calls = |r: &str| -> Vec<String> {
        let unstack = |l: String| {
            let mut out = String::new();
            let mut rest = l.as_str();
            while let Some(i) = rest.find("0x7ff") {
                out.push_str(&rest[..i]);
                out.push_str("STACK");
                rest = rest[i + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
            }
            out + rest
        };
        graph_part(r).into_iter().map(unstack).collect()
    };
    assert_eq!(
        calls(&uftrace_view("replay", &theirs).unwrap()),
        calls(&replay)
    );
}

/// `-A` placements read what they name, whatever the argument's number:
/// `%rdi`, `%xmm0`, `%stack+1` (the first word above the return address,
/// a long double's 10 bytes there), a structure in `%rdi`; shown as
/// uftrace 0.13 shows them, and uftrace reads ours as we do.
#[test]
fn placements_read_the_registers_and_stack_words_they_name() {
    let dir = workdir("arg-placements");
    let exe = dir.join("s");
    let flags = ["-g", "-O0", "-pg", "-mfentry", "-mrecord-mcount", "-no-pie"];
    cc(&[&fixture("struct_args.c")], &flags, &exe);
    let specs = [
        "-A",
        "small@arg7%stack+1,arg1/t4:Small%rdi",
        "-A",
        "mixed@fparg1%xmm0,arg1/i32%rdi",
        "-A",
        "after@fparg1/80%stack+1,fparg2%xmm0",
    ];
    let ours = dir.join("ours.data");
    let o = record_run(&[], &specs, &ours, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    let view = |c: &mut Command, data: &std::path::Path| {
        let o = c
            .args(["replay", "-F", "small", "-F", "mixed", "-F", "after", "-d"])
            .arg(data)
            .output()
            .unwrap();
        graph_part(&text(&o).0)
    };
    let want = [
        "mixed(8.500000, 1);",
        "small(7, Small{...});",
        "after(-1999997.000000, 2.500000);",
    ];
    assert_eq!(view(&mut shadowgraph(), &ours), want);
    if uftrace_missing("recording placements beside uftrace") {
        return;
    }
    assert_eq!(view(&mut Command::new("uftrace"), &ours), want);
    let theirs = dir.join("theirs.data");
    let mut opts = vec!["--no-libcall"];
    opts.extend(specs);
    uftrace_record(&theirs, &opts, &exe);
    assert_eq!(view(&mut Command::new("uftrace"), &theirs), want);
}

/// `-A PAT` and `-R PAT` without specs (uftrace's): the arguments and
/// return values of the functions PAT names, from the program's DWARF or
/// (for C library functions) the built-in prototypes, as uftrace 0.13
/// records them with the same options.
#[test]
fn patterns_without_specs_take_dwarf_and_prototypes_as_uftrace() {
    let dir = workdir("args-bare");
    let exe = dir.join("bare");
    let flags = ["-g", "-O0", "-pg", "-fno-builtin"];
    cc(&[&fixture("auto_args.c")], &flags, &exe);
    let lc = dir.join("lc");
    cc(&[&fixture("libc_args.c")], &flags[1..], &lc);
    for (exe, opts, want) in [
        (
            &exe,
            &["-A", "^int_", "-R", "pick", "-F", "main"][..],
            &["int_add(1, 2);", "pick() = \"ello\";"][..],
        ),
        (
            &lc,
            &["-A", "^str", "-R", "^str", "-A", "raise", "--libcall"][..],
            &["strlen(\"hello\") = 5;", "raise(SIGUSR1);"][..],
        ),
    ] {
        let ours = dir.join("ours.data");
        let o = record_run(&[], opts, &ours, exe, &[]);
        assert!(o.status.success(), "{opts:?}: {}", text(&o).1);
        let replay = replay_text(&ours);
        shows_each(&replay, want);
        if uftrace_missing("recording arguments beside uftrace") {
            continue;
        }
        let theirs = dir.join("theirs.data");
        let mut theirs_opts = opts.to_vec();
        theirs_opts.retain(|o| *o != "--libcall");
        if !opts.contains(&"--libcall") {
            theirs_opts.push("--no-libcall");
        }
        uftrace_record(&theirs, &theirs_opts, exe);
        // (uftrace 0.13 records strtod's double as 0.000000 under `-R PAT`,
        // its own replay says so too; under -a it records 2.500000.)
        let calls = |r: &str| -> Vec<String> {
            graph_part(r)
                .into_iter()
                .filter(|l| !l.trim_start().starts_with("strtod("))
                .collect()
        };
        assert_eq!(calls(&replay_text(&theirs)), calls(&replay), "{opts:?}");
    }
}

/// A plain `-pg` program's functions are traced through stubs of their
/// patched prologues; a pointer to one, recorded as an argument, is named
/// after it (its entry is named in the recording too), by us and uftrace.
#[test]
fn function_pointers_of_a_pg_program_are_named() {
    let dir = workdir("args-pg-pointer");
    let exe = dir.join("av");
    cc(&[&fixture("args_values.c")], &["-O0", "-pg"], &exe);
    let data = dir.join("av.data");
    record_ok(&["-A", "call@arg1/p"], &data, &exe);
    let replay = replay_text(&data);
    shows_each(&replay, &["call(&add) {"]);
    if let Some(theirs) = uftrace_view("replay", &data) {
        shows_each(&theirs, &["call(&add) {"]);
    }
}

/// A pointer argument to a data object is shown by the object's name, the
/// program's or a library's (`&stdout`'s FILE), as uftrace shows it; a
/// pointer into data is never named after a function.
#[test]
fn pointers_to_data_are_named_as_uftrace_names_them() {
    let dir = workdir("data-pointers");
    let exe = dir.join("dp");
    cc(&[&fixture("data_pointers.c")], &["-O0", "-pg"], &exe);
    let specs = ["-A", "put@arg1/p,arg2", "-A", "same@arg1/p,arg2/p"];
    let ours = dir.join("ours.data");
    record_ok(&specs, &ours, &exe);
    let replay = replay_text(&ours);
    let want = [
        "main() {",
        "  put(&hidden, 1);",
        "  put(&shared, 2);",
        "  put(&maybe, 3);",
        "  same(&_IO_2_1_stdout_, &_IO_2_1_stderr_);",
        "} /* main */",
    ];
    assert_eq!(graph_part(&replay), want, "{replay}");
    if uftrace_missing("recording data pointers beside uftrace") {
        return;
    }
    assert_eq!(uftrace_view("replay", &ours).unwrap(), replay);
    let theirs = dir.join("theirs.data");
    let mut opts = vec!["--no-libcall"];
    opts.extend(specs);
    uftrace_record(&theirs, &opts, &exe);
    assert_eq!(graph_part(&uftrace_view("replay", &theirs).unwrap()), want);
}

/// C++ arguments without data, as uftrace takes them: an empty structure
/// (`nothing{}`, no register), a comparator and a lambda of internal
/// linkage (`less{...}`, `{...}`: the next integer register's byte).
#[test]
fn empty_classes_are_taken_as_uftrace_takes_them() {
    let dir = workdir("cxx-tags");
    let exe = dir.join("tags");
    cc(&[&fixture("cxx_tags.cc")], &["-O0", "-g", "-pg"], &exe);
    let opts = ["-A", ".", "-R", ".", "-F", "main", "-D", "2"];
    let ours = dir.join("ours.data");
    record_ok(&opts, &ours, &exe);
    // (Addresses differ between runs: 0xN.)
    let calls = |r: &str| -> Vec<String> {
        let hex = |t: &str| -> String {
            let mut out = String::new();
            let mut rest = t;
            while let Some(i) = rest.find("0x") {
                out.push_str(&rest[..i + 2]);
                out.push('N');
                rest = rest[i + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
            }
            out + rest
        };
        graph_part(r).iter().map(|l| hex(l)).collect()
    };
    let replay = replay_text(&ours);
    let ours_calls = calls(&replay);
    for shown in [
        "  keep(nothing{}, DOWN, 4) = 8;",
        "  std::sort(0xN, 0xN, &below);",
        "  std::sort(0xN, 0xN, less{...});",
        "  std::sort(0xN, 0xN, {...});",
    ] {
        assert!(
            ours_calls.iter().any(|l| l == shown),
            "{shown} in {ours_calls:#?}"
        );
    }
    if uftrace_missing("recording C++ empty classes beside uftrace") {
        return;
    }
    let theirs = dir.join("theirs.data");
    uftrace_record(&theirs, &[&["--no-libcall"][..], &opts].concat(), &exe);
    assert_eq!(ours_calls, calls(&uftrace_view("replay", &theirs).unwrap()));
}
