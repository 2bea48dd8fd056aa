//! `-P .` on code nobody here wrote, built with plain -O2 and no tracing
//! flags: Lua 5.4 (the `lua-src` crate's sources) and SQLite (the
//! amalgamation in the `libsqlite3-sys` crate's sources), each run by a
//! small driver. The traced run's output is the untraced run's, every
//! call nests, and `sites -P .` reports its coverage.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The sources of crate `name` at `version`, fetched by cargo into its
/// registry (the crates are not built).
fn crate_sources(dir: &Path, name: &str, version: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = dir.join("Cargo.toml");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(
        &manifest,
        format!(
            "[package]\nname = \"fetch-{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             [workspace]\n[dependencies]\n{name} = \"={version}\"\n"
        ),
    )
    .unwrap();
    let o = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pkg = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in cargo metadata"));
    Path::new(pkg["manifest_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_owned()
}

/// Builds `srcs` into `out` with `flags`, linked with `libs` (after the
/// sources, where the linker looks for them).
fn build(srcs: &[&Path], flags: &[&str], libs: &[&str], out: &Path) {
    let o = Command::new(shadowgraph_testkit::cc::compiler())
        .args(flags)
        .args(srcs)
        .args(libs)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `sites -P . EXE`'s `N of M functions patchable`.
fn coverage(exe: &Path) -> (u64, u64) {
    let o = shadowgraph()
        .args(["sites", "-P", "."])
        .arg(exe)
        .output()
        .unwrap();
    let out = text(&o).0;
    let last = out.lines().last().unwrap_or("");
    let w: Vec<&str> = last.split_whitespace().collect();
    assert!(
        matches!(w[..], ["#", _, "of", _, "functions", "patchable"]),
        "{out}"
    );
    (w[1].parse().unwrap(), w[3].parse().unwrap())
}

/// Runs `exe args` untraced and under `record -P .`: the same output,
/// every call of every thread nested, nothing lost; returns the number
/// of records.
fn traced_as_untraced(dir: &Path, exe: &Path, args: &[&str]) -> u64 {
    let plain = Command::new(exe).args(args).output().unwrap();
    assert!(plain.status.success(), "{}", text(&plain).1);
    let data = dir.join("p.data");
    let args: Vec<&Path> = args.iter().map(Path::new).collect();
    let o = record_run(&[], &["-P", "."], &data, exe, &args);
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(text(&o).0, text(&plain).0);
    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    for &tid in &d.tids {
        calls_nest_exactly(&d, tid, &[]).unwrap();
    }
    assert_eq!(d.info.get("lost"), Some("0"));
    d.info.get("records").unwrap().parse().unwrap()
}

#[test]
fn lua_runs_under_p_as_untraced() {
    let dir = workdir("real_lua");
    let src = crate_sources(&dir.join("fetch"), "lua-src", "547.1.0").join("lua-5.4.7");
    let mut srcs: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    srcs.sort();
    srcs.push(fixture("real_lua.c"));
    let exe = dir.join("lua");
    let inc = format!("-I{}", src.display());
    let refs: Vec<&Path> = srcs.iter().map(|p| p.as_path()).collect();
    build(
        &refs,
        &["-O2", "-DLUA_USE_LINUX", &inc],
        &["-lm", "-ldl"],
        &exe,
    );
    let script = fixture("real_work.lua");
    let records = traced_as_untraced(&dir, &exe, &[script.to_str().unwrap()]);
    let (n, m) = coverage(&exe);
    eprintln!("lua: {n} of {m} functions patchable, {records} records");
    assert!(records > 100_000 && n * 100 >= m * 99, "{n} of {m}");
}

#[test]
fn sqlite_runs_under_p_as_untraced() {
    let dir = workdir("real_sqlite");
    let src = crate_sources(&dir.join("fetch"), "libsqlite3-sys", "0.30.1").join("sqlite3");
    let exe = dir.join("sqlite");
    let inc = format!("-I{}", src.display());
    build(
        &[&fixture("real_sqlite.c"), &src.join("sqlite3.c")],
        &["-O2", &inc],
        &["-lm", "-ldl", "-lpthread"],
        &exe,
    );
    let records = traced_as_untraced(
        &dir,
        &exe,
        &[
            "create table t(a integer primary key, b text, c real); \
             with recursive n(x) as (select 1 union all select x+1 from n where x < 2000) \
             insert into t select x, printf('v%05d', x*7 % 2000), x/3.0 from n; \
             create index tb on t(b);",
            "select count(*), sum(a), min(b), max(b), round(avg(c),3) from t where b like 'v01%'; \
             select b, count(*) from t group by substr(b,1,3) order by 2 desc limit 5; \
             select group_concat(a) from (select a from t order by b limit 10);",
        ],
    );
    let (n, m) = coverage(&exe);
    eprintln!("sqlite: {n} of {m} functions patchable, {records} records");
    assert!(records > 100_000 && n * 100 >= m * 99, "{n} of {m}");
}
