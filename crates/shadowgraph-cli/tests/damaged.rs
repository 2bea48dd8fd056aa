//! Recordings cut short or damaged: every view shows what can be read,
//! and says once, naming the file and the offset, where it stopped.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// A recording of a program killed mid-call: main and die never return.
fn killed_recording(dir: &Path) -> (PathBuf, i32) {
    let exe = build_fixture(dir, "killed", "killed_midway.c");
    let data = dir.join("k.data");
    let o = record_run(&[], &["--no-libs"], &data, &exe, &[]);
    assert!(!o.status.success());
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    assert_eq!(d.tids.len(), 1);
    (data, d.tids[0])
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// `shadowgraph ARGS -d DATA [FUNCTION]`: (stdout, stderr), having
/// succeeded.
fn view(args: &[&str], data: &Path, function: Option<&str>) -> (String, String) {
    let o = shadowgraph()
        .args(args)
        .arg("-d")
        .arg(data)
        .args(function)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{args:?}: {err}");
    (out, err)
}

const VIEWS: [(&[&str], Option<&str>, &str); 5] = [
    (&["replay"], None, "  } /* work */"),
    (&["report"], None, "  leaf\n"),
    (&["graph"], Some("main"), " : (1) main\n"),
    (&["dump", "--chrome"], None, "\"name\":\"leaf\""),
    (&["dump", "--flame-graph"], None, "main;work;leaf "),
];

#[test]
fn stray_bytes_at_the_end_of_a_dat_file_are_reported_and_the_rest_is_shown() {
    let dir = workdir("truncated");
    let (data, tid) = killed_recording(&dir);
    let cut = dir.join("cut.data");
    copy_dir(&data, &cut);
    let dat = cut.join(format!("{tid}.dat"));
    let len = std::fs::metadata(&dat).unwrap().len();
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&dat)
        .unwrap()
        .write_all(b"abcde")
        .unwrap();
    let want = format!(
        "shadowgraph: warning: {}: truncated: 5 stray bytes at offset {len}; read up to there\n",
        dat.display()
    );
    for (args, function, shows) in VIEWS {
        let (whole, err) = view(args, &data, function);
        assert!(!err.contains("warning"), "{args:?}: {err}");
        let (out, err) = view(args, &cut, function);
        assert!(
            out.contains(shows),
            "{args:?}: {}",
            &out[..out.len().min(500)]
        );
        assert_eq!(out, whole, "{args:?}: everything before the cut is shown");
        assert_eq!(err.matches(&want).count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn a_corrupt_record_stops_its_file_there_and_says_where() {
    let dir = workdir("corrupt");
    let (data, tid) = killed_recording(&dir);
    let bad = dir.join("bad.data");
    copy_dir(&data, &bad);
    let dat = bad.join(format!("{tid}.dat"));
    let mut bytes = std::fs::read(&dat).unwrap();
    // The third record (leaf's first entry) zeroed: no record magic.
    bytes[32..48].fill(0);
    std::fs::write(&dat, bytes).unwrap();
    let (out, err) = view(&["report"], &bad, None);
    let rows = report_rows(&out);
    assert_eq!((rows["main"].2, rows["work"].2), (1, 1), "{out}");
    assert!(!rows.contains_key("leaf"), "{out}");
    assert!(
        err.contains(&format!(
            "{}: at offset 32: bad record magic",
            dat.display()
        )) && err.contains("; read up to there"),
        "{err}"
    );
}

#[test]
fn a_thread_listed_without_its_records_is_a_warning() {
    let dir = workdir("missing_dat");
    let (data, tid) = killed_recording(&dir);
    let gone = dir.join("gone.data");
    copy_dir(&data, &gone);
    let dat = gone.join(format!("{tid}.dat"));
    std::fs::write(&dat, b"").unwrap();
    let (_, err) = view(&["replay"], &gone, None);
    assert!(
        err.contains(&format!(
            "{}: empty: thread {tid} (in task.txt) has no records",
            dat.display()
        )),
        "{err}"
    );
    std::fs::remove_file(&dat).unwrap();
    let (_, err) = view(&["report"], &gone, None);
    assert!(
        err.contains(&format!(
            "{}: missing: thread {tid} (in task.txt) has no records",
            dat.display()
        )),
        "{err}"
    );
}

/// A line of the symbol table that makes no sense is skipped, said with
/// its file and line; the other names are shown.
#[test]
fn a_damaged_symbol_line_is_skipped_and_said() {
    let dir = workdir("bad_sym");
    let (data, _) = killed_recording(&dir);
    let bad = dir.join("badsym.data");
    copy_dir(&data, &bad);
    let sym = std::fs::read_dir(&bad)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "sym"))
        .unwrap();
    let mut bytes = b"zz\xff T garbage\n".to_vec();
    bytes.extend(std::fs::read(&sym).unwrap());
    std::fs::write(&sym, bytes).unwrap();
    let (out, err) = view(&["report"], &bad, None);
    assert!(report_rows(&out).contains_key("leaf"), "{out}");
    assert!(
        err.contains(&format!("{}: line 1: bad address `zz", sym.display()))
            && err.contains("the line is skipped"),
        "{err}"
    );
}
