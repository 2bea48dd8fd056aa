//! Site discovery in files built with gcc (and g++, rustc) in every flavour:
//! exactly the instrumented functions, with their kinds and rejections.

mod common;

use common::*;
use shadowgraph::elf::{scan_file, ObjectSites};
use shadowgraph::site::SiteKind;
use shadowgraph_testkit::cc::{self, flavour};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const FUNCS: &[&str] = &[
    "leaf",
    "mid",
    "recurse",
    "many_args",
    "var_sum",
    "run",
    "run_args",
];

fn build(dir: &Path, name: &str, flags: &[&str], extra: &[&Path]) -> PathBuf {
    let out = dir.join(name);
    let src = fixture("calls.c");
    let mut srcs: Vec<&Path> = vec![&src];
    srcs.extend_from_slice(extra);
    let mut all = vec!["-O2"];
    all.extend_from_slice(flags);
    cc::compile(&srcs, &all, &out).unwrap();
    out
}

fn check(sites: &ObjectSites, want_main: bool, kind: SiteKind, endbr: bool) {
    let names: BTreeSet<&str> = sites.usable().map(|s| s.function.as_str()).collect();
    let mut want: BTreeSet<&str> = FUNCS.iter().copied().collect();
    if want_main {
        want.insert("main");
    }
    assert_eq!(names, want, "{}", sites.path.display());
    for s in sites.usable() {
        assert_eq!(
            s.kind.as_ref().unwrap(),
            &kind,
            "{}: {}",
            sites.path.display(),
            s.function
        );
        assert_eq!(s.endbr, endbr, "{}: {}", sites.path.display(), s.function);
    }
    assert_eq!(
        sites.sites.len(),
        want.len(),
        "rejected sites in {}",
        sites.path.display()
    );
}

#[test]
fn executables_in_every_flavour() {
    let dir = workdir("exe");
    let local_fentry = fixture("fentry_local.s");
    let nopie = ["-no-pie", "-fno-pie"];
    type Case<'a> = (&'a str, Vec<&'a str>, Vec<&'a Path>, SiteKind, bool);
    let cases: Vec<Case> = vec![
        ("pie_sled", vec![], vec![], SiteKind::Sled, false),
        ("nopie_sled", nopie.to_vec(), vec![], SiteKind::Sled, false),
        (
            "pie_sled_cet",
            vec!["-fcf-protection=full"],
            vec![],
            SiteKind::Sled,
            true,
        ),
        (
            "nopie_sled_cet",
            [&nopie[..], &["-fcf-protection=full"]].concat(),
            vec![],
            SiteKind::Sled,
            true,
        ),
        (
            "pie_fentry_got",
            flavour::FENTRY.to_vec(),
            vec![],
            SiteKind::FentryGot,
            false,
        ),
        (
            "pie_fentry_got_cet",
            [flavour::FENTRY, &["-fcf-protection=full"]].concat(),
            vec![],
            SiteKind::FentryGot,
            true,
        ),
        (
            "nopie_fentry_call",
            [flavour::FENTRY, &nopie[..]].concat(),
            vec![],
            SiteKind::FentryCall,
            false,
        ),
        (
            "nopie_fentry_nop",
            [flavour::FENTRY_NOP, &nopie[..]].concat(),
            vec![],
            SiteKind::McountNop,
            false,
        ),
        (
            "pie_fentry_addr32",
            flavour::FENTRY.to_vec(),
            vec![&local_fentry],
            SiteKind::FentryAddr32,
            false,
        ),
    ];
    for (name, mut flags, extra, kind, endbr) in cases {
        if !name.contains("fentry") {
            flags.extend_from_slice(flavour::PATCHABLE);
        }
        flags.push("-DWITH_MAIN");
        let exe = build(&dir, name, &flags, &extra);
        let sites = scan_file(&exe).unwrap();
        assert_eq!(
            sites.position_independent,
            name.starts_with("pie"),
            "{name}"
        );
        check(&sites, true, kind, endbr);
        // The program still runs as built.
        let out = Command::new(&exe).current_dir(&dir).output().unwrap();
        assert!(out.status.success(), "{name} does not run");
    }
}

#[test]
fn shared_libraries_in_every_flavour() {
    let dir = workdir("so");
    for (name, flags, kind, endbr) in [
        ("sled", flavour::PATCHABLE.to_vec(), SiteKind::Sled, false),
        (
            "sled_cet",
            flavour::PATCHABLE_CET.to_vec(),
            SiteKind::Sled,
            true,
        ),
        (
            "fentry",
            flavour::FENTRY.to_vec(),
            SiteKind::FentryGot,
            false,
        ),
    ] {
        let lib = build_lib(&dir, &fixture("calls.c"), name, &flags);
        let sites = scan_file(&lib).unwrap();
        assert!(sites.position_independent);
        check(&sites, false, kind, endbr);
    }
}

#[test]
fn rejected_sites_say_why() {
    let dir = workdir("reject");
    let short = build_lib(
        &dir,
        &fixture("calls.c"),
        "short",
        &["-fpatchable-function-entry=3"],
    );
    let s = scan_file(&short).unwrap();
    assert_eq!(s.usable().count(), 0);
    assert!(!s.sites.is_empty());
    for site in &s.sites {
        assert!(
            site.kind
                .as_ref()
                .unwrap_err()
                .contains("fewer than 5 nops"),
            "{site:?}"
        );
    }
    let prefix = build_lib(
        &dir,
        &fixture("calls.c"),
        "prefix",
        &["-fpatchable-function-entry=5,2"],
    );
    let s = scan_file(&prefix).unwrap();
    assert_eq!(s.usable().count(), 0);
    for site in &s.sites {
        assert!(
            site.kind
                .as_ref()
                .unwrap_err()
                .contains("before the function symbol"),
            "{site:?}"
        );
    }
    let e = s.require_sites().unwrap_err().to_string();
    assert!(
        e.contains("rejected") && e.contains("-fpatchable-function-entry=5"),
        "{e}"
    );
}

#[test]
fn program_without_sites_gets_a_one_line_error() {
    let dir = workdir("plain");
    let exe = build(&dir, "plain", &["-DWITH_MAIN"], &[]);
    let e = scan_file(&exe)
        .unwrap()
        .require_sites()
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\n'));
    assert!(e.contains("no patchable function entries"), "{e}");
    for how in [
        "-fpatchable-function-entry=5",
        "-pg -mfentry -mrecord-mcount",
        "-Zpatchable-function-entry=5",
    ] {
        assert!(e.contains(how), "{e}");
    }
    // Plain -pg and -finstrument-functions are traced (at the prologues
    // of the functions that call their hooks).
    for (name, flag) in [("pg", "-pg"), ("cyg", "-finstrument-functions")] {
        let exe = build(&dir, name, &["-DWITH_MAIN", flag], &[]);
        let found = scan_file(&exe).unwrap();
        assert!(found.built_with_hooks && found.sites.is_empty(), "{flag}");
        found.require_sites().unwrap();
    }
    // The other build uftrace traces (fentry without a list of entries)
    // is named, with what to add.
    let exe = build(&dir, "fentry", &["-DWITH_MAIN", "-pg", "-mfentry"], &[]);
    let e = scan_file(&exe)
        .unwrap()
        .require_sites()
        .unwrap_err()
        .to_string();
    assert!(
        !e.contains('\n') && e.contains("without -mrecord-mcount"),
        "{e}"
    );
}

#[test]
fn cpp_names_are_demangled() {
    let dir = workdir("cpp");
    let out = dir.join("libnames.so");
    let src = fixture("names.cpp");
    let r = Command::new("g++")
        .args(["-O2", "-fPIC", "-shared", "-fpatchable-function-entry=5"])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    assert!(r.success());
    let found = scan_file(&out).unwrap();
    let names: BTreeSet<(String, String)> = found
        .usable()
        .map(|s| (s.function.clone(), s.symbol.clone()))
        .collect();
    // Sites go by the simple form (uftrace's default), and keep the symbol
    // for the views' --demangle=full|no.
    for (want, symbol, full) in [
        (
            "geometry::manhattan",
            "_ZN8geometry9manhattanERKNS_5PointE",
            "geometry::manhattan(geometry::Point const&)",
        ),
        (
            "geometry::twice",
            "_ZN8geometry5twiceIiEET_S1_",
            "int geometry::twice<int>(int)",
        ),
        ("use_them", "_Z8use_themi", "use_them(int)"),
    ] {
        let pair = (want.to_string(), symbol.to_string());
        assert!(names.contains(&pair), "{pair:?} not in {names:?}");
        assert_eq!(
            shadowgraph_data::names::demangle_as(symbol, shadowgraph_data::names::Demangle::Full),
            full
        );
    }
}

#[test]
fn rust_names_and_nop5_sites() {
    let dir = workdir("rust");
    let out = dir.join("libnames_rs.so");
    let r = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .env("RUSTC_BOOTSTRAP", "1")
        .args([
            "-O",
            "-Zpatchable-function-entry=5",
            "--crate-type",
            "cdylib",
            "--crate-name",
            "names_rs",
        ])
        .arg(fixture("names.rs"))
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    assert!(r.success());
    let sites = scan_file(&out).unwrap();
    let names: BTreeSet<&str> = sites.usable().map(|s| s.function.as_str()).collect();
    assert!(names.contains("rust_entry"), "{names:?}");
    assert!(names.contains("names_rs::rust_inner"), "{names:?}");
    assert!(sites.usable().all(|s| s.kind == Ok(SiteKind::Nop5)));
}
