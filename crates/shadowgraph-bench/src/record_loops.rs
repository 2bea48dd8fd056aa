//! `bench record`'s rows of programs that make their calls from one loop:
//! library calls (`memcpy` and `strlen` through the PLT), and arguments
//! where the writer keeps up (a function doing work of its own between
//! calls, so that a call's cost is the program's, not the writer's pace).

#![forbid(unsafe_code)]

use crate::common::{median, time_cmd};
use std::path::Path;

/// Library calls: `memcpy` and `strlen` through the PLT, N times each.
const LIBLOOP_C: &str = "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\
int main(int argc, char **argv) { long n = atol(argv[1]); char b[16]; size_t t = 0;\n\
for (long i = 0; i < n; i++) { memcpy(b, \"abcdefg\", 8); t += strlen(b); }\n\
printf(\"%zu\\n\", t); return 0; }\n";

/// `work(i)` (about 25 ns of its own) called N times from `outer`.
const WORK_C: &str = "#include <stdio.h>\n#include <stdlib.h>\n\
__attribute__((noinline)) long work(long x) { long s = x; for (int i = 0; i < 40; i++) s = s * 3 + i; return s; }\n\
__attribute__((noinline)) long outer(long n) { long s = 0; for (long i = 0; i < n; i++) s += work(i); return s; }\n\
int main(int argc, char **argv) { printf(\"%ld\\n\", outer(atol(argv[1]))); return 0; }\n";

/// A variant of a loop's rows: its label, the tool (`plain`, `sg`,
/// `uftrace`) and the tool's options.
type Variant<'a> = (&'a str, &'a str, &'a [&'a str]);

/// Runs `variants` of `exe` once per round (`reps` rounds) with argument
/// `n` and with 1 (start-up), and prints each one's median seconds and
/// its cost per call over the first (untraced): (time − untraced −
/// start-up overhead) / `calls`. Returns those costs.
fn loop_rows(
    exe: &Path,
    data: &Path,
    me: &Path,
    (n, calls): (&str, u64),
    reps: usize,
    variants: &[Variant],
) -> Result<Vec<f64>, String> {
    let run = |tool: &str, opts: &[&str], n: &str| {
        let mut c = crate::common::tool_command(tool, me, exe, data, opts);
        c.arg(n);
        c
    };
    // (median of n, median of 1: start-up)
    let mut times = vec![(Vec::new(), Vec::new()); variants.len()];
    for _ in 0..reps {
        for ((_, tool, opts), t) in variants.iter().zip(times.iter_mut()) {
            t.0.push(time_cmd(1, || run(tool, opts, n))?);
            t.1.push(time_cmd(1, || run(tool, opts, "1"))?);
        }
    }
    let med: Vec<(f64, f64)> = times
        .into_iter()
        .map(|(a, b)| (median(a), median(b)))
        .collect();
    let (plain, plain1) = med[0];
    let per_call =
        |(t, start): (f64, f64)| (t - plain - (start - plain1).max(0.0)) * 1e9 / calls as f64;
    let mut costs = Vec::new();
    for ((label, _, _), &m) in variants.iter().zip(&med) {
        match costs.is_empty() {
            true => println!("{label:<34} {:>9.3}", m.0),
            false => println!("{label:<34} {:>9.3} {:>12.1}", m.0, per_call(m)),
        }
        costs.push(per_call(m));
    }
    let _ = std::fs::remove_dir_all(data);
    Ok(costs)
}

/// Builds `source` (patchable entries, -O2 and `flags`) as `name` in `dir`.
fn build(
    dir: &Path,
    name: &str,
    source: &str,
    flags: &[&str],
) -> Result<std::path::PathBuf, String> {
    let src = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&src, source).map_err(|e| e.to_string())?;
    let mut all = vec!["-O2", "-fpatchable-function-entry=5"];
    all.extend(flags);
    shadowgraph_testkit::cc::compile(&[&src], &all, &exe)?;
    Ok(exe)
}

/// The library-call rows: a loop of `memcpy` and `strlen` (about `calls`
/// calls through the PLT) untraced, under `record` with and without
/// library calls, and under `uftrace record -P .` (which traces library
/// calls by default).
pub(crate) fn library_calls(
    dir: &Path,
    data_dir: &Path,
    me: &Path,
    calls: u64,
    reps: usize,
    uftrace: bool,
) -> Result<(), String> {
    let exe = build(dir, "libloop", LIBLOOP_C, &["-fno-builtin"])?;
    let iterations = (calls / 2).to_string();
    let lib_calls = 2 * (calls / 2) + 1; // memcpy, strlen; printf
    let mut variants: Vec<Variant> = vec![
        ("untraced", "plain", &[]),
        ("shadowgraph record", "sg", &[]),
        ("  (--no-libcall)", "sg", &["--no-libcall"]),
    ];
    if uftrace {
        variants.push(("uftrace record -P .", "uftrace", &[]));
    }
    println!(
        "# library calls: memcpy + strlen through the PLT, {lib_calls} calls, medians of {reps}"
    );
    let data = data_dir.join("lib.data");
    let c = loop_rows(&exe, &data, me, (&iterations, lib_calls), reps, &variants)?;
    if uftrace {
        println!(
            "# overhead per library call, shadowgraph / uftrace: {:.3}",
            c[1] / c[3]
        );
    }
    Ok(())
}

/// The argument rows: `work(i)` called `calls` times untraced, under
/// `record`, with its argument (`-A work@arg1`) and with four (the three
/// after the first whatever the registers hold), and the same under
/// uftrace: what an argument adds to a call where the program, not the
/// writer, sets the pace.
pub(crate) fn arguments(
    dir: &Path,
    data_dir: &Path,
    me: &Path,
    calls: u64,
    reps: usize,
    uftrace: bool,
) -> Result<(), String> {
    let exe = build(dir, "work", WORK_C, &[])?;
    let (one, four) = (["-A", "work@arg1"], ["-A", "work@arg1,arg2,arg3,arg4"]);
    let mut variants: Vec<Variant> = vec![
        ("untraced", "plain", &[]),
        ("shadowgraph record", "sg", &[]),
        ("  (-A work@arg1)", "sg", &one),
        ("  (-A work@arg1,arg2,arg3,arg4)", "sg", &four),
    ];
    if uftrace {
        variants.push(("uftrace record -P .", "uftrace", &[]));
        variants.push(("  (-A work@arg1)", "uftrace", &one));
        variants.push(("  (-A work@arg1,arg2,arg3,arg4)", "uftrace", &four));
    }
    println!(
        "# arguments where the writer keeps up: work(i), about 25 ns of its own, {calls} \
         calls from a loop, medians of {reps}"
    );
    let data = data_dir.join("work.data");
    let total = calls + 2; // outer, main
    let c = loop_rows(
        &exe,
        &data,
        me,
        (&calls.to_string(), total),
        reps,
        &variants,
    )?;
    println!(
        "# an argument adds {:.1} ns to a recorded call; each further one {:.1} ns{}",
        c[2] - c[1],
        (c[3] - c[2]) / 3.0,
        if uftrace {
            format!(
                " (uftrace: {:.1} and {:.1})",
                c[5] - c[4],
                (c[6] - c[5]) / 3.0
            )
        } else {
            String::new()
        }
    );
    Ok(())
}
