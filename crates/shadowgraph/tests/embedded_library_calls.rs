//! A session that traces library calls (one per test process): the
//! library's GOT slot for `strlen` points at a thunk while the session
//! runs, the calls are recorded under their caller, and the slot is given
//! its function back when the session ends.

mod common;

use common::*;
use shadowgraph::config::{Config, Record, Tracer};
use shadowgraph::session::Session;
use std::sync::atomic::{AtomicUsize, Ordering};

#[test]
fn a_session_redirects_library_calls_and_gives_them_back() {
    let dir = workdir("session_libcalls");
    let path = build_lib(
        &dir,
        &fixture("libcall_user.c"),
        "lcuser",
        &["-fpatchable-function-entry=5", "-fno-builtin"],
    );
    let lib = Lib::open(&path);
    type Measure = extern "C" fn(*const libc::c_char) -> usize;
    let measure: Measure = lib.func("measure");
    let bytes = std::fs::read(&path).unwrap();
    let slot = shadowgraph::elf::jump_slots(&path, &bytes)
        .unwrap()
        .into_iter()
        .find(|s| s.symbol == "strlen")
        .expect("a strlen slot");
    let bias = shadowgraph::process::loaded_objects()
        .into_iter()
        .find(|(p, _)| p == &path)
        .unwrap()
        .1;
    let got = bias + slot.got as usize;
    // SAFETY: the library's GOT word for strlen (RTLD_NOW bound it).
    let word = || unsafe { (*(got as *const AtomicUsize)).load(Ordering::Acquire) };
    let before = word();

    let data = dir.join("s.data");
    let mut record = Record::into_dir(&data, vec![Tracer::default()]);
    record.libcalls = true;
    let session = Session::start(Config::record(record)).unwrap();
    assert_ne!(word(), before, "the slot points at a thunk");
    assert_eq!(measure(c"hello".as_ptr()), 5);
    session.finish();
    assert_eq!(word(), before, "the slot has its function back");
    assert_eq!(measure(c"hi".as_ptr()), 2);

    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    let mut out = Vec::new();
    shadowgraph_data::replay::replay(&d, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let body: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once("| ").map(|x| x.1))
        .collect();
    let m = body
        .iter()
        .position(|l| l.trim() == "measure() {")
        .expect(&text);
    assert_eq!(body[m + 1].trim(), "strlen();", "{text}");
}
