//! `shadowgraph-bench`: the benchmarks behind `shadowgraph bench …`, on
//! code built with gcc at run time and traced by the library's shipped
//! paths. Medians of repeated runs, with the untraced baseline measured in
//! the same run, because the machine is noisy. Not installed with the
//! `shadowgraph` tool: `shadowgraph bench` runs this binary from a
//! workspace build.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod attach;
mod clock;
mod common;
mod dispatch;
mod fgraph;
mod ir;
mod memory;
mod models;
mod patch;
mod record;
mod record_loops;
mod record_lua;
mod record_threads;

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "shadowgraph bench",
    bin_name = "shadowgraph bench",
    about = "Benchmarks of shadowgraph's tracing paths"
)]
struct Cli {
    #[command(subcommand)]
    which: Which,
}

#[derive(clap::Subcommand)]
enum Which {
    /// Cost of a traced call through the ftrace core: no ops, 1 ops, 1
    /// relevant + 10 irrelevant, 2 and 10 relevant (list function), direct.
    Dispatch {
        /// Calls per timed loop.
        #[arg(long, default_value_t = 20_000_000)]
        calls: i64,
        /// Timed repetitions (the median is reported).
        #[arg(long, default_value_t = 7)]
        reps: usize,
    },
    /// Attaching to a running process (`record -p`): a program with many
    /// patchable functions and two threads calling them; the time to the
    /// first record, the time from the end to every site back to its nop,
    /// and the cost of a call before, during and after.
    Attach {
        /// Patchable functions in the program.
        #[arg(long, default_value_t = 10_000)]
        functions: usize,
        /// Rounds, a fresh process each (medians are reported).
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
    /// Recording cost side by side with uftrace (if installed): the
    /// recursive fib program untraced, under `shadowgraph record` and under
    /// `uftrace record -P .`; ns per call, bytes per call, start-up, and the
    /// time of replay and report on the result.
    Record {
        /// fib(N): 2·fib(N+1)−1 calls.
        #[arg(long, default_value_t = 30)]
        n: u32,
        /// Rounds, every variant once per round (medians are reported).
        #[arg(long, default_value_t = 9)]
        reps: usize,
        /// Only the Lua rows (a big real trace).
        #[arg(long)]
        lua_only: bool,
    },
    /// One configuration, one untimed loop of `loop_target` calls: for
    /// instruction counting under `valgrind --tool=callgrind
    /// --toggle-collect=loop_target` (deterministic, unlike time).
    Ir {
        /// Hijack return addresses instead of returning through site stubs.
        #[arg(long)]
        hijack_returns: bool,
        /// none | ops | list2 | direct | graph-decline | graph | graph2 | graph-elsewhere |
        /// graph16 | record | record-general | record2 | record2-general |
        /// record2-depth | record2-filter | record2-decline | record2-trigger |
        /// record-arg | record-profile;
        /// `MODE-tail`: MODE on
        /// `loop_tail` (a traced function tail-calling `target`; count
        /// with --toggle-collect=loop_tail)
        mode: String,
        #[arg(default_value_t = 100_000)]
        calls: i64,
    },
    /// Cost of function-graph tracing (entry + return) with 1 user (fast
    /// path), 1 and another whose filter declines the call, 2 and 16
    /// users, and 1 user reserving 8 bytes per call.
    Fgraph {
        /// Hijack return addresses instead of returning through site stubs.
        #[arg(long)]
        hijack_returns: bool,
        /// Calls per timed loop.
        #[arg(long, default_value_t = 20_000_000)]
        calls: i64,
        /// Timed repetitions (the median is reported).
        #[arg(long, default_value_t = 7)]
        reps: usize,
    },
    /// (For `bench fgraph`, in a process of its own: the recording path is
    /// chosen once per process.) ns per call recorded into memory, `record`
    /// (fused), `record-general` (callbacks), `record2` (two recorders,
    /// fused), `record2-general` (two recorders, callbacks), or
    /// `record2-depth` / `record2-filter` / `record2-decline` /
    /// `record2-trigger` (two, fused, one with `-D 5` / `-F target` / `-F
    /// other0`, which declines every call / `-T other0@trace_on`).
    #[command(hide = true)]
    MemoryRecord {
        #[arg(long)]
        hijack_returns: bool,
        mode: String,
        #[arg(long, default_value_t = 1_000_000)]
        calls: i64,
        #[arg(long, default_value_t = 7)]
        reps: usize,
    },
    /// Cost of a call untraced / through a nop site / patched, and of
    /// flipping 10,000 sites in one batch.
    Patch {
        /// Calls per timed loop.
        #[arg(long, default_value_t = 50_000_000)]
        calls: i64,
        /// Timed repetitions (the median is reported).
        #[arg(long, default_value_t = 7)]
        reps: usize,
        /// Sites flipped per batch.
        #[arg(long, default_value_t = 10_000)]
        sites: usize,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().which {
        Which::Patch { calls, reps, sites } => patch::bench(calls, reps.max(1), sites),
        Which::Dispatch { calls, reps } => dispatch::bench(calls, reps.max(1)),
        Which::Fgraph {
            hijack_returns,
            calls,
            reps,
        } => fgraph::bench(calls, reps.max(1), hijack_returns),
        Which::Ir {
            hijack_returns,
            mode,
            calls,
        } => ir::bench(&mode, calls, hijack_returns),
        Which::Record { n, reps, lua_only } => record::bench(n, reps.max(1), lua_only),
        Which::Attach { functions, reps } => attach::bench(functions.max(1), reps.max(1)),
        Which::MemoryRecord {
            hijack_returns,
            mode,
            calls,
            reps,
        } => memory::ns_per_call(&mode, calls.max(1), reps.max(1), hijack_returns).map(|ns| {
            println!("{ns:.3}");
            ExitCode::SUCCESS
        }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shadowgraph bench: {e}");
            ExitCode::FAILURE
        }
    }
}
