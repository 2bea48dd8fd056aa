//! fgraph and the life of a traced program: unwinders walking hooked
//! stacks, longjmp, signal handlers, tail calls, fork, graph filters,
//! threads exiting inside traced frames, and signals landing anywhere in
//! fgraph's own code.

mod common;

use common::graph::*;
use shadowgraph::fgraph::{self, GraphEntry, GraphReturn, GraphUser, RetRegs};
use shadowgraph::ftrace::{self, FilterSet, Regs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

struct Walk {
    frames: usize,
    hijacked: usize,
    translated_ok: usize,
    lo: usize,
    hi: usize,
}

static WALK: Mutex<Walk> = Mutex::new(Walk {
    frames: 0,
    hijacked: 0,
    translated_ok: 0,
    lo: 0,
    hi: 0,
});

/// Walks the frame-pointer chain from inside fp_deep(0), translating every
/// return address as an unwinder would.
extern "C" fn walker(fp: *const usize) {
    let mut w = WALK.lock().unwrap();
    let (lo, hi) = (w.lo, w.hi);
    let mut cursor = 0usize;
    let mut fp = fp;
    loop {
        // SAFETY: fp_deep frames keep a frame pointer (see graph.c): [fp] is
        // the caller's fp, [fp+8] the return address.
        let (next, ret) = unsafe { (*fp as *const usize, *fp.add(1)) };
        let retp = fp as usize + 8;
        let real = fgraph::ret_addr(&mut cursor, ret, retp);
        w.frames += 1;
        if fgraph::is_hijack(ret) {
            w.hijacked += 1;
        }
        if !fgraph::is_hijack(real) && (lo..hi).contains(&real) {
            w.translated_ok += 1;
        }
        if !(lo..hi).contains(&real) {
            break; // left the fixture: the caller is the test's own code
        }
        fp = next;
    }
}

#[test]
fn unwinder_translation_of_a_400_deep_stack_is_linear() {
    let _g = serial();
    let f = loaded();
    let set_walker: extern "C" fn(extern "C" fn(*const usize)) = f._lib.func("set_walker");
    let fp_deep: extern "C" fn(i32) -> i32 = f._lib.func("fp_deep");
    set_walker(walker);
    let site = ftrace::site_by_name("fp_deep").unwrap().addr;
    {
        let mut w = WALK.lock().unwrap();
        *w = Walk {
            frames: 0,
            hijacked: 0,
            translated_ok: 0,
            lo: site - 4096,
            hi: site + 4096,
        };
    }
    let t = Tally::new();
    let u = counting_user(&["fp_deep"], t);
    fgraph::register_graph(&u).unwrap();
    let v0 = fgraph::counters().ret_addr_visits;
    assert_eq!(fp_deep(400), 400);
    let visits = fgraph::counters().ret_addr_visits - v0;
    fgraph::unregister_graph(&u).unwrap();
    let w = WALK.lock().unwrap();
    assert_eq!(
        w.hijacked, 401,
        "every hooked frame's slot held our address (a stub's or the handler's)"
    );
    assert_eq!(w.frames, 401, "walked to the outermost frame");
    assert_eq!(
        w.translated_ok, 400,
        "real addresses inside fp_deep (the last returns to the test)"
    );
    assert!(
        visits <= 2 * 401,
        "unwind visited {visits} shadow frames for 401 frames"
    );
    clean();
}

#[test]
fn longjmp_over_traced_frames_reports_them_as_unwound_exits() {
    let _g = serial();
    let f = loaded();
    let lj_run: extern "C" fn() -> i32 = f._lib.func("lj_run");
    let t = Tally::new();
    let u = counting_user(&["lj_*"], t);
    fgraph::register_graph(&u).unwrap();
    assert_eq!(lj_run(), 1);
    assert_eq!(lj_run(), 1, "again: the stack is consistent");
    fgraph::unregister_graph(&u).unwrap();
    // lj_run + 6 lj_level frames per run; the 6 skipped ones are reported
    // (flagged unwound) when lj_run returns: one exit per entry.
    let entries: u64 = t.entries.iter().map(|e| e.load(Ordering::Relaxed)).sum();
    let returns: u64 = t.returns.iter().map(|e| e.load(Ordering::Relaxed)).sum();
    assert_eq!((entries, returns), (14, 14));
    assert_eq!(t.unwound.load(Ordering::Relaxed), 12);
    clean();
}

#[test]
fn signal_handler_calls_are_nested_frames() {
    let _g = serial();
    let f = loaded();
    let sig_raiser: extern "C" fn(i32) -> i32 = f._lib.func("sig_raiser");
    let t = Tally::new();
    let u = counting_user(&[], t);
    fgraph::register_graph(&u).unwrap();
    assert_eq!(sig_raiser(4), 8);
    fgraph::unregister_graph(&u).unwrap();
    let (e, r) = t.take();
    assert_eq!(e, r);
    assert_eq!(by_name(&e, "g_mid"), 1, "the handler's call was traced");
    assert_eq!(by_name(&e, "g_leaf"), 3);
    clean();
}

static ORDER: Mutex<Vec<usize>> = Mutex::new(Vec::new());

extern "C" fn order_entry(_e: &GraphEntry, _u: &GraphUser, _r: &mut Regs) -> bool {
    true
}

extern "C" fn order_return(r: &GraphReturn, _u: &GraphUser, _regs: &RetRegs) {
    ORDER.lock().unwrap().push(r.func);
}

#[test]
fn tail_call_frames_both_return_innermost_first() {
    let _g = serial();
    let f = loaded();
    let tail_a: extern "C" fn(i32) -> i32 = f._lib.func("tail_a");
    let (a, b) = (
        ftrace::site_by_name("tail_a").unwrap().addr,
        ftrace::site_by_name("tail_b").unwrap().addr,
    );
    let u = GraphUser::new(
        order_entry,
        order_return,
        FilterSet::with_patterns(&["tail_*"], &[]).unwrap(),
        0,
    );
    fgraph::register_graph(&u).unwrap();
    ORDER.lock().unwrap().clear();
    assert_eq!(tail_a(3), 13);
    fgraph::unregister_graph(&u).unwrap();
    assert_eq!(*ORDER.lock().unwrap(), vec![b, a]);
    clean();
}

#[test]
fn forked_child_keeps_tracing_and_can_unregister() {
    let _g = serial();
    let f = loaded();
    let t = Tally::new();
    let u = counting_user(&["g_*"], t);
    fgraph::register_graph(&u).unwrap();
    let r0 = (f.run)(5);
    t.take();
    // SAFETY: the child only runs traced C code, our callbacks (no locks
    // held by other threads are needed: the tests are serialised) and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok_run = (f.run)(5) == r0;
        let (e, r) = t.take();
        let ok_counts = by_name(&e, "g_leaf") == 10 && e == r;
        let ok_unreg = fgraph::unregister_graph(&u).is_ok();
        let ok_after = (f.run)(5) == r0 && t.take().0.iter().sum::<u64>() == 0;
        let code = (!ok_run) as i32
            | ((!ok_counts) as i32) << 1
            | ((!ok_unreg) as i32) << 2
            | ((!ok_after) as i32) << 3;
        // SAFETY: leaving the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child crashed: status {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "child checks failed (bits: run, counts, unregister, after)"
    );
    // The parent still traces.
    (f.run)(5);
    assert_eq!(by_name(&t.take().0, "g_leaf"), 10);
    fgraph::unregister_graph(&u).unwrap();
    clean();
}

use shadowgraph::fgraph::filters::{GraphFilter, Verdict};

/// A user recording (through its GraphFilter) which functions it saw.
struct Filtered {
    filter: GraphFilter,
    tally: &'static Tally,
}

/// Set: the next entry callback of g_leaf that keeps the call raises a
/// signal whose handler leaves the callback by siglongjmp
/// (`run_top_jumped`).
static JUMP_AT_LEAF: AtomicBool = AtomicBool::new(false);

extern "C" fn filtered_entry(e: &GraphEntry, u: &GraphUser, _r: &mut Regs) -> bool {
    // SAFETY: users made by filtered_user carry a leaked Filtered.
    let f = unsafe { &*(u.private as *const Filtered) };
    match f.filter.entry(e, u) {
        Verdict::Record(p) => {
            // SAFETY: 8 reserved bytes.
            unsafe { p.write(e.func as u64) };
            if idx(e.func) == Some(0) && JUMP_AT_LEAF.swap(false, Ordering::Relaxed) {
                (loaded().callback_jump)();
            }
            if let Some(i) = idx(e.func) {
                f.tally.entries[i].fetch_add(1, Ordering::Relaxed);
            }
            true
        }
        Verdict::Silent => true,
        Verdict::Reject => false,
    }
}

extern "C" fn filtered_return(r: &GraphReturn, u: &GraphUser, _regs: &RetRegs) {
    // SAFETY: as in filtered_entry.
    let f = unsafe { &*(u.private as *const Filtered) };
    if let Some(p) = f.filter.ret(r, u) {
        // SAFETY: the 8 bytes reserved at entry hold the function.
        assert_eq!(unsafe { p.read() }, r.func as u64, "data of another frame");
        if let Some(i) = idx(r.func) {
            f.tally.returns[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn filtered_user(filter: GraphFilter, t: &'static Tally) -> Arc<GraphUser> {
    let f: &'static Filtered = Box::leak(Box::new(Filtered { filter, tally: t }));
    GraphUser::new(
        filtered_entry,
        filtered_return,
        FilterSet::all(),
        f as *const Filtered as usize,
    )
}

fn names_seen(t: &Tally) -> Vec<(&'static str, u64)> {
    let (e, r) = t.take();
    assert_eq!(e, r, "recorded entries and returns differ");
    NAMES
        .iter()
        .zip(e)
        .filter(|(_, n)| *n > 0)
        .map(|(n, c)| (*n, c))
        .collect()
}

#[test]
fn graph_filters_depth_functions_notrace_threads() {
    let _g = serial();
    let f = loaded();
    let fs = |p: &[&str]| Some(FilterSet::with_patterns(p, &[]).unwrap());
    let cases: Vec<(GraphFilter, Vec<(&str, u64)>)> = vec![
        (
            GraphFilter {
                max_depth: 2,
                ..Default::default()
            },
            vec![("g_mid", 3), ("g_top", 3)],
        ),
        (
            GraphFilter {
                functions: fs(&["g_mid"]),
                ..Default::default()
            },
            vec![("g_leaf", 6), ("g_mid", 3)],
        ),
        (
            GraphFilter {
                notrace: fs(&["g_mid"]),
                ..Default::default()
            },
            vec![("g_top", 3)],
        ),
        (
            GraphFilter {
                functions: fs(&["g_top"]),
                notrace: fs(&["g_mid"]),
                ..Default::default()
            },
            vec![("g_top", 3)],
        ),
        (
            GraphFilter {
                functions: fs(&["g_mid"]),
                max_depth: 1,
                ..Default::default()
            },
            vec![("g_mid", 3)],
        ),
    ];
    for (filter, want) in cases {
        let t = Tally::new();
        let u = filtered_user(filter, t);
        fgraph::register_graph(&u).unwrap();
        (f.run)(3);
        fgraph::unregister_graph(&u).unwrap();
        let mut got = names_seen(t);
        got.sort();
        let mut want = want;
        want.sort();
        assert_eq!(got, want);
    }
    // Thread filter: only this thread is recorded.
    let t = Tally::new();
    let me = ftrace::current_tid();
    let u = filtered_user(
        GraphFilter {
            threads: Some(ftrace::ThreadFilter::new(&[me], &[])),
            ..Default::default()
        },
        t,
    );
    fgraph::register_graph(&u).unwrap();
    (f.run)(1);
    std::thread::spawn(move || (f.run)(1)).join().unwrap();
    fgraph::unregister_graph(&u).unwrap();
    assert_eq!(
        names_seen(t).iter().map(|x| x.1).sum::<u64>(),
        4,
        "one g_top, g_mid, 2 g_leaf"
    );
    clean();
}

/// A signal handler that leaves a `-F g_mid` user's entry callback by
/// siglongjmp after its filter took the call (g_leaf, inside g_mid):
/// the frames left behind are reported to the user as unwound, its
/// thread variable is put back, and later calls of g_top (outside g_mid)
/// stay unrecorded — alone (the single user's path) and beside a second
/// user (the loop over several).
#[test]
fn graph_filters_recover_from_siglongjmp_out_of_their_callback() {
    let _g = serial();
    let f = loaded();
    for beside in [false, true] {
        let t = Tally::new();
        let u = filtered_user(
            GraphFilter {
                functions: Some(FilterSet::with_patterns(&["g_mid"], &[]).unwrap()),
                ..Default::default()
            },
            t,
        );
        fgraph::register_graph(&u).unwrap();
        let other = counting_user(&[], Tally::new());
        if beside {
            fgraph::register_graph(&other).unwrap();
        }
        JUMP_AT_LEAF.store(true, Ordering::Relaxed);
        assert_eq!((f.run_top_jumped)(1), -1, "the handler jumped");
        assert!(!JUMP_AT_LEAF.load(Ordering::Relaxed));
        // A traced call outside g_mid finds the frames the jump left.
        (f.deep)(0);
        t.take();
        (f.run)(3);
        let (e, r) = t.take();
        assert_eq!(e, r, "beside {beside}: entries and returns");
        let seen = |n: &str| e[NAMES.iter().position(|x| *x == n).unwrap()];
        assert_eq!(
            (seen("g_top"), seen("g_mid"), seen("g_leaf")),
            (0, 3, 6),
            "beside {beside}: only calls inside g_mid"
        );
        if beside {
            fgraph::unregister_graph(&other).unwrap();
        }
        fgraph::unregister_graph(&u).unwrap();
    }
    clean();
}

/// A second user keeps frames inside a notrace subtree of the
/// first; the first records nothing there and resumes after it.
#[test]
fn notrace_subtree_stays_silent_while_another_user_keeps_frames() {
    let _g = serial();
    let f = loaded();
    let (ta, tb) = (Tally::new(), Tally::new());
    let a = filtered_user(
        GraphFilter {
            notrace: Some(FilterSet::with_patterns(&["g_mid"], &[]).unwrap()),
            ..Default::default()
        },
        ta,
    );
    let b = counting_user(&[], tb);
    fgraph::register_graph(&a).unwrap();
    fgraph::register_graph(&b).unwrap();
    (f.run)(4);
    fgraph::unregister_graph(&b).unwrap();
    fgraph::unregister_graph(&a).unwrap();
    assert_eq!(names_seen(ta), vec![("g_top", 4)]);
    let (eb, rb) = tb.take();
    assert_eq!((by_name(&eb, "g_leaf"), by_name(&rb, "g_leaf")), (8, 8));
    clean();
}

#[test]
fn thread_exiting_inside_traced_frames_reports_them() {
    let _g = serial();
    let f = loaded();
    let run_exit_thread: extern "C" fn() -> i64 = f._lib.func("run_exit_thread_hooked");
    let set_before_exit: extern "C" fn(extern "C" fn()) = f._lib.func("set_before_exit");
    // What the agent's pthread_exit interposer does before the forced
    // unwind: the unwinder must see real return addresses.
    extern "C" fn unhook() {
        fgraph::unhook_thread();
    }
    set_before_exit(unhook);
    let t = Tally::new();
    let u = counting_user(&["exit_*"], t);
    fgraph::register_graph(&u).unwrap();
    assert_eq!(run_exit_thread(), 42, "pthread_exit value");
    assert_eq!(run_exit_thread(), 42);
    fgraph::unregister_graph(&u).unwrap();
    let (e, r) = t.take();
    assert_eq!(by_name(&e, "exit_deep_hooked"), 8);
    assert_eq!(by_name(&e, "exit_thread_hooked"), 2);
    assert_eq!(
        e, r,
        "open frames of an exiting thread are reported as exits"
    );
    assert!(t.unwound.load(Ordering::Relaxed) >= 10);
    clean();
}

#[test]
fn frames_skipped_by_longjmp_to_an_untraced_setjmp_are_dropped_at_entry() {
    let _g = serial();
    let f = loaded();
    let lj2_loop: extern "C" fn(i32) -> i32 = f._lib.func("lj2_loop");
    let t = Tally::new();
    let u = counting_user(&["lj2_*"], t);
    fgraph::register_graph(&u).unwrap();
    let over0 = fgraph::thread_overrun();
    assert_eq!(lj2_loop(2000), 2000);
    assert_eq!(
        fgraph::thread_overrun(),
        over0,
        "dead frames filled the shadow stack"
    );
    assert!(
        fgraph::thread_depth() < 4,
        "at most the last round's frames remain"
    );
    // The last round's frames are dropped by the next traced entry.
    assert_eq!(lj2_loop(1), 1);
    fgraph::unregister_graph(&u).unwrap();
    let (e, r) = t.take();
    assert_eq!(by_name(&e, "lj2_deep"), 2001 * 4);
    assert!(
        by_name(&r, "lj2_deep") >= 2000 * 4,
        "skipped frames reported as exits"
    );
    // Leave no frame behind for the other tests on this thread.
    fgraph::register_graph(&u).unwrap();
    (f.run)(1);
    fgraph::unregister_graph(&u).unwrap();
    t.take();
}

/// A signal handler that interrupted our code (a bracket open below its
/// calls') drops no frame as dead, whatever the top frame's slot: the
/// interrupted code may be publishing that frame (written, published,
/// about to be written again) with the words another handler, which ran
/// just before the publish, left in it (a frame of that handler's, whose
/// slot is this one's). Outside such a handler the same frame goes.
#[test]
fn a_handler_inside_our_code_drops_no_frame_as_dead() {
    let _g = serial();
    let f = loaded();
    let leaf: extern "C" fn(i32) -> i32 = f._lib.func("g_leaf");
    let t = Tally::new();
    let u = counting_user(&[], t);
    fgraph::register_graph(&u).unwrap();
    assert_eq!(leaf(2), 4);
    let base = fgraph::stack_top();
    // A frame whose return slot lies below every call's here: dead by the
    // slots, as a longjmp leaves one, or as the words a handler left.
    // SAFETY: slot 8 lies below every live call's return slot.
    unsafe { fgraph::push_frame(0x1000, leaf as usize, 8, 0) }.unwrap();
    let top = fgraph::stack_top();
    {
        // The interrupted code's bracket, then the handler's call.
        let _interrupted = ftrace::quiesce::Bracket::enter();
        assert_eq!(leaf(2), 4);
        assert_eq!(
            fgraph::stack_top(),
            top,
            "a handler's call dropped the top frame"
        );
    }
    // At rest, the next call drops it.
    assert_eq!(leaf(2), 4);
    assert_eq!(fgraph::stack_top(), base, "the dead frame stayed");
    fgraph::unregister_graph(&u).unwrap();
    let (e, r) = t.take();
    assert_eq!(by_name(&e, "g_leaf"), by_name(&r, "g_leaf"));
    clean();
}

/// The frame-offset invariant (design §4.1): signals arriving at any instruction of the entry and
/// return paths (a 20 µs timer aimed at the thread, over 1000 rounds of
/// 1000 traced calls), whose handler calls traced functions and — second part — leaves
/// every 8th time by siglongjmp out of whatever it interrupted. Every round
/// that completes has the right sum (each hijacked return resumed at its
/// address with its value); entries and returns balance (frames a jump
/// skipped are reported as unwound exits); no return ever lacks its frame.
#[test]
fn signals_that_push_pop_and_unwind_anywhere() {
    let _g = serial();
    let f = loaded();
    type Fuzz = extern "C" fn(i32, i32, *mut i64, *mut i64, *mut i64, *mut i64);
    let fuzz: Fuzz = f._lib.func("g_fuzz");
    let leaf: extern "C" fn(i32) -> i32 = f._lib.func("g_leaf");
    for unwind in [0, 1] {
        let t = Tally::new();
        let u = counting_user(&[], t);
        fgraph::register_graph(&u).unwrap();
        let lost = fgraph::counters().lost_frames;
        let (mut good, mut bad, mut left, mut hits) = (0i64, 0i64, 0i64, 0i64);
        fuzz(1000, unwind, &mut good, &mut bad, &mut left, &mut hits);
        // A last traced call finds the frames a final jump left behind.
        assert_eq!(leaf(2), 4);
        fgraph::unregister_graph(&u).unwrap();
        assert_eq!(bad, 0, "unwind={unwind}: a round's sum was wrong");
        assert!(hits > 500, "unwind={unwind}: only {hits} signals");
        if unwind == 1 {
            assert!(left > 10, "only {left} rounds left by a jump");
        } else {
            assert_eq!(left, 0);
        }
        assert_eq!(good + left, 1000, "every round completed or was left");
        assert_eq!(fgraph::counters().lost_frames, lost);
        if unwind == 1 {
            assert!(ftrace::counters().abandoned_brackets > 0);
        }
        assert_eq!(
            fgraph::thread_depth(),
            -1,
            "unwind={unwind}: frames left over"
        );
        let (e, r) = t.take();
        if unwind == 0 {
            assert_eq!(e, r, "entries and returns balance");
        } else {
            // A jump can leave one entry callback it interrupted without its
            // exit (the frame's users were not yet published), never more,
            // and never an exit without its entry.
            let extra: u64 = e.iter().zip(&r).map(|(e, r)| e - r).sum();
            assert!(
                e.iter().zip(&r).all(|(e, r)| r <= e) && extra <= left as u64,
                "entries {e:?} returns {r:?}, {left} rounds left"
            );
        }
        assert!(by_name(&e, "g_top") >= (1000 - left as u64) * 1000);
        assert!(by_name(&e, "g_mid") as i64 >= hits.min(1));
    }
    clean();
}
