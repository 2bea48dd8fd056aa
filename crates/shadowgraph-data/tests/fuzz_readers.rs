//! The data directory's readers under damaged input: real recordings
//! (`corpus/shadowgraph`, written by `shadowgraph record`; `corpus/uftrace`,
//! by uftrace 0.13) with bytes flipped, replaced, inserted or cut, files
//! emptied or removed, then opened and shown by every view. No reader may
//! panic, and every error names the file (or the directory) it is about.
//!
//! Cases per run: `SHADOWGRAPH_FUZZ_CASES` (default 400), so that CI runs
//! a bounded time and a longer run is one variable away.

use proptest::prelude::*;
use shadowgraph_data::dir::{DataDir, OpenOptions};
use shadowgraph_data::replay::ReplayFilter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

const CORPORA: [&str; 2] = ["shadowgraph", "uftrace"];

/// One change to one file of a recording (files by index, modulo their
/// number; offsets modulo the file's length).
#[derive(Clone, Debug)]
enum Damage {
    Flip {
        file: usize,
        at: usize,
        bit: u8,
    },
    Replace {
        file: usize,
        at: usize,
        bytes: Vec<u8>,
    },
    Insert {
        file: usize,
        at: usize,
        bytes: Vec<u8>,
    },
    Cut {
        file: usize,
        keep: usize,
    },
    Empty {
        file: usize,
    },
    Remove {
        file: usize,
    },
}

fn damage() -> impl Strategy<Value = Damage> {
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 1..24),
        // What text formats are made of, to reach past their first check.
        prop::collection::vec(
            prop::sample::select(b"0123456789abcdefx:=-\t\n /.,#".to_vec()),
            1..24
        ),
    ];
    prop_oneof![
        4 => (any::<usize>(), any::<usize>(), 0u8..8).prop_map(|(file, at, bit)| Damage::Flip { file, at, bit }),
        2 => (any::<usize>(), any::<usize>(), bytes.clone()).prop_map(|(file, at, bytes)| Damage::Replace { file, at, bytes }),
        2 => (any::<usize>(), any::<usize>(), bytes).prop_map(|(file, at, bytes)| Damage::Insert { file, at, bytes }),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(file, keep)| Damage::Cut { file, keep }),
        1 => any::<usize>().prop_map(|file| Damage::Empty { file }),
        1 => any::<usize>().prop_map(|file| Damage::Remove { file }),
    ]
}

fn apply(dir: &Path, d: &Damage) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    if files.is_empty() {
        return;
    }
    let pick = |i: usize| &files[i % files.len()];
    let edit = |i: usize, f: &dyn Fn(&mut Vec<u8>)| {
        let p = pick(i);
        let mut b = std::fs::read(p).unwrap();
        f(&mut b);
        std::fs::write(p, b).unwrap();
    };
    match d {
        Damage::Flip { file, at, bit } => edit(*file, &|b| {
            if !b.is_empty() {
                let i = at % b.len();
                b[i] ^= 1 << bit;
            }
        }),
        Damage::Replace { file, at, bytes } => edit(*file, &|b| {
            let i = at % (b.len() + 1);
            for (k, &x) in bytes.iter().enumerate() {
                match b.get_mut(i + k) {
                    Some(slot) => *slot = x,
                    None => b.push(x),
                }
            }
        }),
        Damage::Insert { file, at, bytes } => edit(*file, &|b| {
            let i = at % (b.len() + 1);
            b.splice(i..i, bytes.iter().copied());
        }),
        Damage::Cut { file, keep } => edit(*file, &|b| {
            let k = keep % (b.len() + 1);
            b.truncate(k);
        }),
        Damage::Empty { file } => edit(*file, &|b| b.clear()),
        Damage::Remove { file } => std::fs::remove_file(pick(*file)).unwrap(),
    }
}

fn copy_corpus(name: &str, to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// An error must say where: the directory's path (or a file's in it).
fn names_a_place(msg: &str, dir: &Path) -> Result<(), TestCaseError> {
    prop_assert!(
        msg.contains(dir.to_str().unwrap()),
        "an error that names no file: {msg}"
    );
    Ok(())
}

/// Opens `dir` and runs every view on it, output discarded.
fn every_view(dir: &Path) -> Result<(), TestCaseError> {
    let how = OpenOptions::default();
    let data = match DataDir::open_with(dir, how) {
        Ok(d) => d,
        Err(e) => return names_a_place(&e.to_string(), dir),
    };
    let f = ReplayFilter::default();
    let sink = &mut std::io::sink();
    use shadowgraph_data::{chrome, flame, graph, info, perfetto, replay, report};
    let results: Vec<Result<(), String>> = vec![
        replay::replay(&data, sink).map_err(|e| e.to_string()),
        report::report(&data, report::SortKey::Total, true, &f, sink).map_err(|e| e.to_string()),
        graph::graph(&data, Some("fib"), &f, sink).map_err(|e| e.to_string()),
        info::info(&data, sink).map_err(|e| e.to_string()),
        chrome::dump_chrome(&[&data], &f, sink).map_err(|e| e.to_string()),
        perfetto::dump_perfetto(&[&data], &f, sink).map_err(|e| e.to_string()),
        flame::dump_flame_graph(&[&data], &f, sink).map_err(|e| e.to_string()),
    ];
    for r in results {
        if let Err(e) = r {
            names_a_place(&e, dir)?;
        }
    }
    for w in data.warnings() {
        names_a_place(&w, dir)?;
    }
    Ok(())
}

/// A directory of its own per case, removed after it.
fn case_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "shadowgraph-fuzz-{}-{}",
        std::process::id(),
        // Relaxed: a counter that only has to differ.
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

#[test]
fn the_corpus_is_read_whole_undamaged() {
    for name in CORPORA {
        let dir = case_dir();
        copy_corpus(name, &dir);
        let data = DataDir::open(&dir).unwrap();
        let mut out = Vec::new();
        shadowgraph_data::replay::replay(&data, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("} /* main */"), "{name}: {text}");
        assert!(data.warnings().is_empty(), "{name}: {:?}", data.warnings());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: shadowgraph_testkit::fuzz::cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn damaged_recordings_are_shown_or_refused_with_a_place(
        corpus in 0..CORPORA.len(),
        damages in prop::collection::vec(damage(), 1..4),
    ) {
        let dir = case_dir();
        copy_corpus(CORPORA[corpus], &dir);
        for d in &damages {
            apply(&dir, d);
        }
        let r = every_view(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        r?;
    }
}
