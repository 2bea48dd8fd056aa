//! Every example runs and shows what it traced (CI builds and runs them
//! through `cargo test --workspace`).

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> String {
    let o = Command::new(bin).args(args).output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "{bin}: {}\n{out}{err}", o.status);
    out
}

#[test]
fn record_self_replays_its_own_calls() {
    let dir = std::env::temp_dir().join(format!("record-self-test-{}.data", std::process::id()));
    let out = run(env!("CARGO_BIN_EXE_record_self"), &[dir.to_str().unwrap()]);
    // work(5) = fib(5) + 1²+…+5² = 5 + 55.
    assert!(out.contains("# work(5) = 60"), "{out}");
    let body: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once("] | ").map(|x| x.1))
        .collect();
    assert_eq!(body.first(), Some(&"work() {"), "{out}");
    assert_eq!(body.last(), Some(&"} /* work */"), "{out}");
    // fib(5) makes 15 calls, sum_of_squares 1 and square 5.
    let calls = |f: &str| {
        body.iter()
            .filter(|l| l.trim() == format!("{f}();") || l.trim() == format!("{f}() {{"))
            .count()
    };
    assert_eq!((calls("fib"), calls("square")), (15, 5), "{out}");
    // The directory is uftrace's format, complete: its task list and info.
    assert!(dir.join("task.txt").is_file() && dir.join("info").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn graph_user_times_every_fib_call() {
    let out = run(env!("CARGO_BIN_EXE_graph_user"), &[]);
    // fib(20) makes 21891 calls.
    assert!(out.contains("# fib(20) = 6765"), "{out}");
    assert!(out.contains("# 21891 calls timed"), "{out}");
}

#[test]
fn function_tracer_counts_calls_by_caller() {
    let out = run(env!("CARGO_BIN_EXE_function_tracer"), &[]);
    // work(12) = fib(12) + 650; fib(12) makes 465 calls, one from work.
    assert!(out.contains("# work(12) = 794"), "{out}");
    for row in [
        "1  work <- (untraced code)",
        "1  fib <- work",
        "464  fib <- fib",
        "12  square <- sum_of_squares",
    ] {
        assert!(out.lines().any(|l| l.trim() == row), "no `{row}` in\n{out}");
    }
}
