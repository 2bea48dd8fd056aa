//! `bench record`'s threads rows: fib(N) in one thread, then in two at
//! once, untraced, under `shadowgraph record` and under `uftrace record`:
//! the cost of a call in each thread, and what a second thread recording
//! at the same time does to it.

#![forbid(unsafe_code)]

use crate::common::{fib_calls, time_cmd};
use std::path::Path;

/// fib(argv[1]) in argv[2] threads at once.
const FIB_THREADS_C: &str = "#include <pthread.h>\n#include <stdio.h>\n#include <stdlib.h>\n\
__attribute__((noinline)) int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n\
static int n, out[8];\n\
static void *run(void *p) { out[(long)p] = fib(n); return 0; }\n\
int main(int argc, char **argv) { n = atoi(argv[1]); int k = atoi(argv[2]); pthread_t t[8];\n\
if (k < 1 || k > 8) return 2;\n\
for (long i = 0; i < k; i++) pthread_create(&t[i], 0, run, (void *)i);\n\
for (int i = 0; i < k; i++) pthread_join(t[i], 0);\n\
printf(\"%d\\n\", out[0]); return 0; }\n";

/// The rows, every variant once per round (`reps` rounds, medians); the
/// recordings in `data_dir`.
pub(crate) fn rows(
    dir: &Path,
    data_dir: &Path,
    me: &Path,
    n: u32,
    reps: usize,
    uftrace: bool,
) -> Result<(), String> {
    let src = dir.join("fib_threads.c");
    let exe = dir.join("fib_threads");
    std::fs::write(&src, FIB_THREADS_C).map_err(|e| e.to_string())?;
    shadowgraph_testkit::cc::compile(
        &[&src],
        &[
            "-O2",
            "-pthread",
            "-fno-optimize-sibling-calls",
            "-fpatchable-function-entry=5",
        ],
        &exe,
    )?;
    let calls = fib_calls(n);
    let data = data_dir.join("threads.data");
    let run = |tool: &str, n: &str, threads: &str| {
        let mut c = crate::common::tool_command(tool, me, &exe, &data, &[]);
        c.args([n, threads]);
        c
    };
    let mut tools = vec!["plain", "sg", "sgc"];
    if uftrace {
        tools.push("uftrace");
    }
    let arg = n.to_string();
    // [tool][threads - 1]: (times of fib(n), times of fib(1): start-up)
    let mut times = vec![[(Vec::new(), Vec::new()), (Vec::new(), Vec::new())]; tools.len()];
    for _ in 0..reps {
        for (tool, t) in tools.iter().zip(times.iter_mut()) {
            for (k, threads) in ["1", "2"].iter().enumerate() {
                t[k].0.push(time_cmd(1, || run(tool, &arg, threads))?);
                t[k].1.push(time_cmd(1, || run(tool, "1", threads))?);
            }
        }
    }
    let med = |v: &Vec<f64>| crate::common::median(v.clone());
    let m: Vec<[(f64, f64); 2]> = times
        .iter()
        .map(|t| [(med(&t[0].0), med(&t[0].1)), (med(&t[1].0), med(&t[1].1))])
        .collect();
    // A thread's calls run beside the other's: the wall time is each
    // thread's.
    let per_call = |tool: usize, k: usize| {
        let ((plain, plain1), (t, start)) = (m[0][k], m[tool][k]);
        (t - plain - (start - plain1).max(0.0)) * 1e9 / calls as f64
    };
    // Records lost by the last two-thread recording (0 expected).
    let _ = time_cmd(1, || run("sg", &arg, "2"))?;
    let lost = shadowgraph_data::dir::DataDir::open(&data)
        .ok()
        .and_then(|d| d.info.get("lost").map(str::to_string))
        .unwrap_or_else(|| "?".into());
    println!(
        "# threads: fib({n}), {calls} calls in each of 1 and 2 threads at once; ns per call of \
         each thread, medians of {reps}"
    );
    println!(
        "{:<34} {:>9} {:>12} {:>9}",
        "", "1 thread", "2 threads", "ratio"
    );
    let rows = [
        (1, "shadowgraph record"),
        (2, "  (--compact)"),
        (3, "uftrace record -P ."),
    ];
    for (i, name) in rows {
        if i >= tools.len() {
            continue;
        }
        let (one, two) = (per_call(i, 0), per_call(i, 1));
        println!("{name:<34} {one:>9.1} {two:>12.1} {:>9.2}", two / one);
    }
    println!("# records lost by shadowgraph's two-thread recording: {lost}");
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}
