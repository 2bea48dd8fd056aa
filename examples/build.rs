//! Builds c/work.c with patchable function entries (the sites shadowgraph
//! patches) into a static library linked into every example.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = out.join("work.o");
    let run = |cmd: &mut Command| {
        let st = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(st.success(), "{cmd:?} failed: {st}");
    };
    run(Command::new(&cc)
        .args([
            "-c",
            "-O2",
            "-fPIC",
            "-fno-optimize-sibling-calls",
            "-fpatchable-function-entry=5",
            "c/work.c",
            "-o",
        ])
        .arg(&obj));
    run(Command::new("ar")
        .arg("rcs")
        .arg(out.join("libwork.a"))
        .arg(&obj));
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=work");
    println!("cargo:rerun-if-changed=c/work.c");
    println!("cargo:rerun-if-env-changed=CC");
}
