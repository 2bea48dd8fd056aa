//! The ELF reader (shadowgraph::elf) under damaged objects: real shared
//! objects built with patchable entries and with `-pg -mfentry
//! -mrecord-mcount`, with bytes changed in the ELF header, the program and
//! section header tables and anywhere else, or cut. No panic; an error
//! names the file. `SHADOWGRAPH_FUZZ_CASES` cases (default 400).

mod common;

use common::*;
use proptest::prelude::*;
use shadowgraph::elf::{build_id, scan_bytes};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The objects to damage: (path, bytes).
fn objects() -> &'static [(PathBuf, Vec<u8>)] {
    static OBJECTS: OnceLock<Vec<(PathBuf, Vec<u8>)>> = OnceLock::new();
    OBJECTS.get_or_init(|| {
        let dir = workdir("fuzz_elf");
        let src = fixture("families.c");
        [
            ("nops", &["-fpatchable-function-entry=5"][..]),
            ("fentry", &["-pg", "-mfentry", "-mrecord-mcount"][..]),
        ]
        .iter()
        .map(|(name, flags)| {
            let lib = build_lib(&dir, &src, name, flags);
            let bytes = std::fs::read(&lib).unwrap();
            (lib, bytes)
        })
        .collect()
    })
}

/// Where a change lands: a region of the object, then an offset in it.
#[derive(Clone, Debug)]
enum Region {
    Header,
    SectionHeaders,
    Anywhere,
}

#[derive(Clone, Debug)]
enum Damage {
    Write {
        region: Region,
        at: usize,
        bytes: Vec<u8>,
    },
    Cut {
        keep: usize,
    },
}

fn damage() -> impl Strategy<Value = Damage> {
    let region = prop_oneof![
        Just(Region::Header),
        Just(Region::SectionHeaders),
        Just(Region::Anywhere)
    ];
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 1..9),
        prop::collection::vec(prop::sample::select(vec![0u8, 0xff, 0x7f, 0x80, 1]), 1..9),
    ];
    prop_oneof![
        8 => (region, any::<usize>(), bytes).prop_map(|(region, at, bytes)| Damage::Write { region, at, bytes }),
        1 => any::<usize>().prop_map(|keep| Damage::Cut { keep }),
    ]
}

fn apply(b: &mut Vec<u8>, d: &Damage) {
    match d {
        Damage::Write { region, at, bytes } => {
            let (start, len) = match region {
                // The ELF header and the program headers after it.
                Region::Header => (0, 64 + 56 * 12),
                Region::SectionHeaders => {
                    let shoff = b
                        .get(0x28..0x30)
                        .map(|s| u64::from_le_bytes(s.try_into().unwrap()) as usize)
                        .unwrap_or(0);
                    (shoff.min(b.len()), 64 * 40)
                }
                Region::Anywhere => (0, b.len()),
            };
            let i = start + at % len.max(1);
            for (k, &x) in bytes.iter().enumerate() {
                if let Some(slot) = b.get_mut(i + k) {
                    *slot = x;
                }
            }
        }
        Damage::Cut { keep } => {
            let k = keep % (b.len() + 1);
            b.truncate(k);
        }
    }
}

#[test]
fn the_objects_are_read_whole_undamaged() {
    for (path, bytes) in objects() {
        let found = scan_bytes(path, bytes).unwrap();
        assert!(found.usable().count() >= 10, "{}", path.display());
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: shadowgraph_testkit::fuzz::cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn damaged_objects_are_read_or_refused_with_their_name(
        which in 0..2usize,
        damages in prop::collection::vec(damage(), 1..4),
    ) {
        let (path, original) = &objects()[which];
        let mut bytes = original.clone();
        for d in &damages {
            apply(&mut bytes, d);
        }
        let name = Path::new("/damaged").join(path.file_name().unwrap());
        if let Err(e) = scan_bytes(&name, &bytes) {
            let msg = e.to_string();
            prop_assert!(msg.contains("/damaged/"), "an error that names no file: {msg}");
        }
        // The build id is read from the file: write it there.
        let copy = path.with_extension("damaged");
        std::fs::write(&copy, &bytes).unwrap();
        let _ = build_id(&copy);
    }
}
