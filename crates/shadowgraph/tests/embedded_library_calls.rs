//! A session that traces library calls (one per test process): the
//! library's GOT slot for `strlen` points at a thunk while the session
//! runs, the calls are recorded under their caller, and the slot is given
//! its function back when the session ends, all while four threads call
//! through the slot without pause.

mod common;

use common::*;
use shadowgraph::config::{Config, LibCalls, Record, Tracer};
use shadowgraph::session::Session;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

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
    let slot = shadowgraph::elf::library_call_slots(&path, &bytes, |_| true)
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

    // Threads calling through the slot while it is redirected and given
    // back: every call returns what it must.
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                // Relaxed: a flag polled to end the loop, ordering nothing.
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(measure(c"threads".as_ptr()), 7);
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(20));

    let data = dir.join("s.data");
    let mut record = Record::into_dir(&data, vec![Tracer::default()]);
    // (A library's calls: `--nest-libcall`; the default takes the program's.)
    record.libcalls = LibCalls::Nested;
    let session = Session::start(Config::record(record)).unwrap();
    assert_ne!(word(), before, "the slot points at a thunk");
    assert_eq!(measure(c"hello".as_ptr()), 5);
    std::thread::sleep(std::time::Duration::from_millis(20));
    session.finish();
    assert_eq!(word(), before, "the slot has its function back");
    assert_eq!(measure(c"hi".as_ptr()), 2);
    std::thread::sleep(std::time::Duration::from_millis(20));
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        assert!(c.join().unwrap() > 0);
    }

    let d = shadowgraph_data::dir::DataDir::open(&data).unwrap();
    let mut out = Vec::new();
    shadowgraph_data::replay::replay(&d, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    // Per thread (threads' lines interleave): measure() calls strlen.
    let mut by_tid: std::collections::HashMap<&str, Vec<&str>> = Default::default();
    for l in text.lines() {
        if let Some((head, body)) = l.split_once("] | ") {
            let tid = head.rsplit('[').next().unwrap().trim();
            by_tid.entry(tid).or_default().push(body.trim());
        }
    }
    let nested = by_tid.values().any(|lines| {
        lines
            .windows(2)
            .any(|w| w[0] == "measure() {" && w[1].starts_with("strlen()"))
    });
    assert!(nested, "{text}");
}
