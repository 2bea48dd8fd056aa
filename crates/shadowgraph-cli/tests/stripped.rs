//! Stripped programs: traced all the same, their functions shown by
//! address as uftrace shows them, and named from an earlier recording's
//! symbol files with `--with-syms` (uftrace's tests t262 and t268).

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// The call graph with each `<address>` as `<ADDR>` (addresses move from
/// run to run).
fn calls(replay: &str) -> Vec<String> {
    graph_part(replay)
        .into_iter()
        .map(|l| {
            let mut out = String::new();
            let mut rest = l.as_str();
            while let Some(i) = rest.find('<') {
                match rest[i..].find('>') {
                    Some(j) if rest[i + 1..i + j].bytes().all(|b| b.is_ascii_hexdigit()) => {
                        out.push_str(&rest[..i]);
                        out.push_str("<ADDR>");
                        rest = &rest[i + j + 1..];
                    }
                    _ => {
                        out.push_str(&rest[..=i]);
                        rest = &rest[i + 1..];
                    }
                }
            }
            out + rest
        })
        .collect()
}

/// A recording's `.sym` file with its stubs' lines (a name's second line,
/// and the end's) 1 MiB further on, as if that run had placed them there.
fn with_stubs_moved(sym: &str) -> String {
    let mut seen = std::collections::HashSet::new();
    let mut out = String::new();
    for line in sym.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match (f.as_slice(), line.starts_with('#')) {
            ([a, kind, name], false) => {
                let mut a = u64::from_str_radix(a, 16).unwrap();
                if !seen.insert(name.to_string()) || *kind == "?" {
                    a += 1 << 20;
                }
                out.push_str(&format!("{a:016x} {kind} {name}\n"));
            }
            _ => out.push_str(&format!("{line}\n")),
        }
    }
    assert!(seen.len() < sym.lines().count() - 3, "no stubs in\n{sym}");
    out
}

fn strip(exe: &Path) {
    let o = Command::new("strip").arg(exe).output().unwrap();
    assert!(o.status.success(), "strip: {}", text(&o).1);
}

fn view(args: &[&str], data: &Path) -> String {
    let o = shadowgraph()
        .args(args)
        .arg("-d")
        .arg(data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?}: {}", text(&o).1);
    text(&o).0
}

/// A program built with `-pg -mfentry -mrecord-mcount`, then stripped: its
/// functions are traced and shown by address (as uftrace shows them);
/// `replay --with-syms DIR` names them from the recording made before the
/// strip (t262), and `record -F a --with-syms DIR` filters by those names
/// (t268); uftrace reads the names the same way.
#[test]
fn a_stripped_program_is_traced_and_named_from_symbol_files() {
    let dir = workdir("stripped");
    let exe = dir.join("abc");
    cc(
        &[&fixture("abc.c")],
        &["-pg", "-mfentry", "-mrecord-mcount"],
        &exe,
    );
    let syms = dir.join("abc.syms");
    let o = record_run(&[], &[], &syms, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    strip(&exe);
    let data = dir.join("stripped.data");
    let o = record_run(&[], &[], &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    // (Recorded without library calls.)
    let named = [
        "main() {",
        "  a() {",
        "    b() {",
        "      c();",
        "    } /* b */",
        "  } /* a */",
        "} /* main */",
    ];
    let unnamed = [
        "<ADDR>() {",
        "  <ADDR>() {",
        "    <ADDR>() {",
        "      <ADDR>();",
        "    } /* <ADDR> */",
        "  } /* <ADDR> */",
        "} /* <ADDR> */",
    ];
    assert_eq!(calls(&replay_text(&data)), unnamed);
    let with = ["replay", "--with-syms", syms.to_str().unwrap()];
    assert_eq!(calls(&view(&with, &data)), named);
    let filtered = dir.join("filtered.data");
    let o = record_run(
        &[],
        &["-F", "a", "--with-syms", syms.to_str().unwrap()],
        &filtered,
        &exe,
        &[],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let inner: Vec<String> = named[1..6].iter().map(|l| l[2..].to_string()).collect();
    assert_eq!(calls(&replay_text(&filtered)), inner);
    if uftrace_missing("reading a stripped program's recording beside uftrace") {
        return;
    }
    assert_eq!(calls(&uftrace_view("replay", &data).unwrap()), unnamed);
    let theirs = uftrace_view_with("replay", &data, &["--with-syms", syms.to_str().unwrap()]);
    assert_eq!(calls(&theirs.unwrap()), named);
}

/// A program built with plain `-pg` and stripped: its functions are found
/// by its unwind tables (`.eh_frame`), traced and shown by address, and
/// named by a recording's symbol files before the strip, ours or
/// uftrace's, wherever either run placed its stubs (`replay
/// --with-syms`, as uftrace's); named at record time by uftrace's symbol
/// files (`record --with-syms`). Built without unwind tables, nothing
/// finds them: a one-line error names it and says what would.
#[test]
fn a_stripped_plain_pg_program_is_found_by_its_unwind_tables() {
    let dir = workdir("stripped-pg");
    let exe = dir.join("abc");
    cc(&[&fixture("abc.c")], &["-pg"], &exe);
    let ours_before = dir.join("before.data");
    record_ok(&[], &ours_before, &exe);
    let theirs = dir.join("theirs.syms");
    let have_uftrace = !uftrace_missing("a symbol directory recorded by uftrace");
    if have_uftrace {
        uftrace_record(&theirs, &[], &exe);
    }
    strip(&exe);
    let unnamed = dir.join("x.data");
    record_ok(&[], &unnamed, &exe);
    let replay = replay_text(&unnamed);
    let calls = graph_part(&replay);
    // main { a { b { c } } }, by address.
    assert_eq!(calls.len(), 7, "{replay}");
    assert!(
        calls[0].starts_with("<") && calls[0].ends_with(">() {"),
        "{replay}"
    );
    assert!(
        calls[3].starts_with("      <") && calls[3].ends_with(">();"),
        "{replay}"
    );
    let named = view(
        &["replay", "--with-syms", ours_before.to_str().unwrap()],
        &unnamed,
    );
    assert_eq!(graph_part(&named), graph_part(&replay_text(&ours_before)));
    // The functions' stubs lie wherever a run finds room near the program:
    // with the run before's elsewhere than this run's, the names go by the
    // functions' entries all the same.
    let moved = dir.join("moved.syms");
    std::fs::create_dir_all(&moved).unwrap();
    let sym = std::fs::read_to_string(ours_before.join("abc.sym")).unwrap();
    std::fs::write(moved.join("abc.sym"), with_stubs_moved(&sym)).unwrap();
    let named = view(
        &["replay", "--with-syms", moved.to_str().unwrap()],
        &unnamed,
    );
    assert_eq!(graph_part(&named), graph_part(&replay_text(&ours_before)));
    if have_uftrace {
        assert_eq!(uftrace_view("replay", &unnamed).unwrap(), replay);
        // uftrace's symbol files, which list no stubs, name them too.
        let named = view(
            &["replay", "--with-syms", theirs.to_str().unwrap()],
            &unnamed,
        );
        assert_eq!(graph_part(&named), graph_part(&replay_text(&ours_before)));
    }
    let bare = dir.join("bare");
    cc(
        &[&fixture("abc.c")],
        &[
            "-pg",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
        &bare,
    );
    strip(&bare);
    let o = record_run(&[], &[], &dir.join("bare.data"), &bare, &[]);
    let err = text(&o).1;
    assert!(
        err.contains(&*bare.to_string_lossy())
            && err.contains("stripped of its symbols")
            && err.contains("--with-syms"),
        "{err}"
    );
    if !have_uftrace {
        return;
    }
    let data = dir.join("named.data");
    let o = record_run(
        &[],
        &["--with-syms", theirs.to_str().unwrap()],
        &data,
        &exe,
        &[],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    let replay = replay_text(&data);
    for line in [
        "main() {",
        "  a() {",
        "    b() {",
        "      c();",
        "} /* main */",
    ] {
        assert!(replay.contains(line), "{line} in\n{replay}");
    }
}
