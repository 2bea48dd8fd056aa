//! `record --compact`: the records in shadowgraph's compact layout. The
//! views show what they show of uftrace's layout, `export --uftrace`
//! writes uftrace's, uftrace refuses the compact files rather than
//! misreading them, and a damaged file is said with its offset.

mod common;

use common::*;
use std::path::Path;

/// The bytes of a recording's thread files.
fn dat_bytes(data: &Path) -> u64 {
    let d = shadowgraph_data::dir::DataDir::open(data).unwrap();
    (d.tids.iter())
        .map(|&t| std::fs::metadata(d.dat_path(t)).unwrap().len())
        .sum()
}

/// Function → calls, from `report`'s output.
fn calls(report: &str) -> std::collections::HashMap<String, u64> {
    report_rows(report)
        .into_iter()
        .map(|(f, r)| (f, r.2))
        .collect()
}

/// Replay and report of a compact recording are those of the same
/// recording in uftrace's layout (but for the times): plain, with
/// arguments and return values, and with two tracers, one of which
/// applies a time filter on its consumer's side; and the files are a
/// fraction of the size.
#[test]
fn a_compact_recording_shows_what_uftraces_layout_shows() {
    let dir = workdir("compact_views");
    let exe = build_fixture(&dir, "fib", "fib_arg.c");
    let two = ["--tracer", "a", "--tracer", "b:depth=4"];
    let cases: [(&str, &[&str]); 3] = [
        ("plain", &[]),
        ("args", &["-A", "fib@arg1", "-R", "fib@retval"]),
        ("two", &two),
    ];
    for (name, opts) in cases {
        let (u, c) = (dir.join(format!("{name}.u")), dir.join(format!("{name}.c")));
        let arg = [Path::new("16")];
        let o = record_run(&[], opts, &u, &exe, &arg);
        assert!(o.status.success(), "{}", text(&o).1);
        let compact = [opts, &["--compact"]].concat();
        let o = record_run(&[], &compact, &c, &exe, &arg);
        assert!(o.status.success(), "{}", text(&o).1);
        let dirs: Vec<(std::path::PathBuf, std::path::PathBuf)> = match name {
            "two" => ["a", "b"].iter().map(|t| (u.join(t), c.join(t))).collect(),
            _ => vec![(u.clone(), c.clone())],
        };
        for (u, c) in dirs {
            let (ur, cr) = (replay_text(&u), replay_text(&c));
            assert_eq!(shape(&cr), shape(&ur), "{name}");
            assert!(cr.contains("fib(") || name != "args", "{cr}");
            assert_eq!(calls(&report_text(&c)), calls(&report_text(&u)), "{name}");
            assert!(
                view_text("info", &c).contains("# record layout       : compact"),
                "{name}"
            );
            // (An argument's or a return value's 8 bytes stay 8; a block's
            // header takes 12.)
            let (ub, cb) = (dat_bytes(&u), dat_bytes(&c));
            let (part, of) = if name == "args" { (2, 3) } else { (1, 4) };
            assert!(
                cb * of < ub * part || ub < 4096,
                "{name}: {cb} bytes, against {ub}"
            );
        }
    }
}

/// `export --uftrace` of a compact recording writes uftrace's layout:
/// shadowgraph's replay of it is the recording's, times included, and so
/// is uftrace's. uftrace refuses the compact recording itself.
#[test]
fn a_compact_recording_exports_to_uftraces_layout() {
    let dir = workdir("compact_export");
    let exe = build_fixture(&dir, "fib", "fib_arg.c");
    let (data, out) = (dir.join("c.data"), dir.join("u.data"));
    let opts = ["--compact", "-A", "fib@arg1", "-R", "fib@retval"];
    let o = record_run(&[], &opts, &data, &exe, &[Path::new("10")]);
    assert!(o.status.success(), "{}", text(&o).1);
    let o = shadowgraph()
        .args(["export", "-d"])
        .arg(&data)
        .arg("--uftrace")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let ours = replay_text(&data);
    assert!(
        ours.contains("fib(10) {") && ours.contains("} = 55; /* fib */"),
        "{ours}"
    );
    assert_eq!(replay_text(&out), ours);
    assert!(dat_bytes(&out) > 3 * dat_bytes(&data) / 2);
    if let Some(theirs) = uftrace_view("replay", &out) {
        assert_eq!(theirs, ours);
        let o = std::process::Command::new("uftrace")
            .args(["replay", "-d"])
            .arg(&data)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(
            !o.status.success() && err.contains("unsupported file version"),
            "{out}{err}"
        );
    }
}

/// A compact file cut short, or with a damaged block after its whole
/// ones: the views show the calls of the whole blocks and say where the
/// file stopped being readable.
#[test]
fn a_damaged_compact_file_is_said_with_its_offset_and_the_rest_shown() {
    let dir = workdir("compact_damaged");
    let exe = build_fixture(&dir, "fib", "fib_arg.c");
    let data = dir.join("c.data");
    let o = record_run(&[], &["--compact"], &data, &exe, &[Path::new("24")]);
    assert!(o.status.success(), "{}", text(&o).1);
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    let dat = d.dat_path(d.tids[0]);
    let whole = std::fs::read(&dat).unwrap();
    let fib = |data: &Path| {
        let o = shadowgraph()
            .args(["report", "-d"])
            .arg(data)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        (calls(&out).get("fib").copied().unwrap_or(0), err)
    };
    let (all, err) = fib(&data);
    assert_eq!(all, 150049, "{err}");
    assert!(err.is_empty(), "{err}");
    // Junk after the last block: everything shown, the junk's offset said.
    let mut junk = whole.clone();
    junk.extend_from_slice(b"SGC1\xff\xff\xff\xff\0\0\0\0");
    std::fs::write(&dat, &junk).unwrap();
    let (n, err) = fib(&data);
    assert_eq!(n, all, "{err}");
    let at = format!("offset {}: a block of", whole.len());
    assert!(
        err.contains(&at) && err.contains(&*dat.to_string_lossy()),
        "{err}"
    );
    // Cut in its middle: the whole blocks before the cut are shown.
    std::fs::write(&dat, &whole[..whole.len() / 2]).unwrap();
    let (n, err) = fib(&data);
    assert!(n > 0 && n < all, "{n}: {err}");
    assert!(err.contains("truncated: a block at offset"), "{err}");
}
