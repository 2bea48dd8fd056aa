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

/// The times of [`loop_rows`]: per variant, each round's (seconds with
/// argument `n`, with 1), and the costs it printed.
struct Rows {
    rounds: Vec<Vec<(f64, f64)>>,
    costs: Vec<f64>,
    calls: u64,
}

impl Rows {
    /// What variant `a` adds to a call over variant `b` (ns), as the
    /// median of the rounds' differences: each round runs every variant
    /// once, so a slow spell of the machine that spans a round moves both
    /// alike.
    fn paired(&self, a: usize, b: usize) -> Paired {
        let mut d: Vec<f64> = self.rounds[a]
            .iter()
            .zip(&self.rounds[b])
            .map(|(&(ta, sa), &(tb, sb))| (ta - tb - (sa - sb)) * 1e9 / self.calls as f64)
            .collect();
        d.sort_by(f64::total_cmp);
        let q = |f: f64| d[((d.len() - 1) as f64 * f).round() as usize];
        Paired(q(0.5), q(0.25), q(0.75))
    }
}

/// A median of paired differences, with its rounds' quartiles.
#[derive(Clone, Copy)]
struct Paired(f64, f64, f64);

impl Paired {
    /// The same, each divided by `k`.
    fn per(self, k: f64) -> Paired {
        Paired(self.0 / k, self.1 / k, self.2 / k)
    }
}

impl std::fmt::Display for Paired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} ns (half the rounds {:.1} to {:.1})",
            self.0, self.1, self.2
        )
    }
}

/// Runs `variants` of `exe` once per round (`reps` rounds) with argument
/// `n` and with 1 (start-up), and prints each one's median seconds and
/// its cost per call over the first (untraced): (time − untraced −
/// start-up overhead) / `calls`.
fn loop_rows(
    exe: &Path,
    data: &Path,
    me: &Path,
    (n, calls): (&str, u64),
    reps: usize,
    variants: &[Variant],
) -> Result<Rows, String> {
    let run = |tool: &str, opts: &[&str], n: &str| {
        let mut c = crate::common::tool_command(tool, me, exe, data, opts);
        c.arg(n);
        c
    };
    let mut rounds = vec![Vec::new(); variants.len()];
    for _ in 0..reps {
        for ((_, tool, opts), r) in variants.iter().zip(rounds.iter_mut()) {
            let t = time_cmd(1, || run(tool, opts, n))?;
            r.push((t, time_cmd(1, || run(tool, opts, "1"))?));
        }
    }
    // (median of n, median of 1: start-up)
    let med: Vec<(f64, f64)> = rounds
        .iter()
        .map(|r| {
            let (a, b): (Vec<f64>, Vec<f64>) = r.iter().copied().unzip();
            (median(a), median(b))
        })
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
    Ok(Rows {
        rounds,
        costs,
        calls,
    })
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
    let c = loop_rows(&exe, &data, me, (&iterations, lib_calls), reps, &variants)?.costs;
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
    let rows = loop_rows(
        &exe,
        &data,
        me,
        (&calls.to_string(), total),
        reps,
        &variants,
    )?;
    // Paired by round (medians of the rounds' differences), which this
    // small a difference needs more than the rows' medians do.
    println!(
        "# an argument adds {} to a recorded call; each further one {} (medians of the \
         rounds' differences)",
        rows.paired(2, 1),
        rows.paired(3, 2).per(3.0),
    );
    if uftrace {
        println!(
            "# uftrace: an argument adds {}; each further one {}",
            rows.paired(5, 4),
            rows.paired(6, 5).per(3.0)
        );
    }
    Ok(())
}
