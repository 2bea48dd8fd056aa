//! A function-graph user of its own: the time of every call of `fib`, of
//! this program's C functions, as a histogram by power of two of
//! nanoseconds. Its entry callback keeps the call's start in the call's
//! shadow frame (8 reserved bytes), its return callback reads it back.
//!
//! `cargo run -p shadowgraph-examples --bin graph_user`

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use shadowgraph::clock;
use shadowgraph::fgraph::{self, GraphEntry, GraphReturn, GraphUser, RetRegs};
use shadowgraph::ftrace::{self, FilterSet, Regs};
use std::sync::atomic::{AtomicU64, Ordering};

extern "C" {
    fn fib(n: i32) -> i64;
}

/// Calls by duration: bucket k holds those of 2^k to 2^(k+1) clock ticks.
static BUCKETS: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

extern "C" fn entry(_: &GraphEntry, user: &GraphUser, _: &mut Regs) -> bool {
    let Some(word) = user.reserve(8) else {
        return false; // no room on the shadow stack: not timed
    };
    // SAFETY: 8 bytes reserved for this call, word-aligned, ours until it
    // returns.
    unsafe { (word as *mut u64).write(clock::now()) };
    true
}

extern "C" fn ret(_: &GraphReturn, user: &GraphUser, _: &RetRegs) {
    if let Some((word, _)) = user.retrieve() {
        // SAFETY: the 8 bytes our entry callback wrote for this call.
        let start = unsafe { (word as *const u64).read() };
        let ticks = clock::now().saturating_sub(start).max(1);
        // Relaxed: counts, read once the calls are done.
        BUCKETS[ticks.ilog2() as usize].fetch_add(1, Ordering::Relaxed);
    }
}

fn main() -> Result<(), String> {
    clock::init();
    // The sites of every loaded object join the ftrace core (this program
    // holds the only ones: its C functions).
    ftrace::add_loaded(|_| false).map_err(|e| e.to_string())?;
    let only_fib = FilterSet::with_patterns(&["fib"], &[]).map_err(|e| e.to_string())?;
    let user = GraphUser::new(entry, ret, only_fib, 0);
    fgraph::register_graph(&user).map_err(|e| e.to_string())?;
    // SAFETY: `long fib(int)` of c/work.c.
    let result = unsafe { fib(20) };
    // Returns once no callback of ours runs or can start.
    fgraph::unregister_graph(&user).map_err(|e| e.to_string())?;
    println!("# fib(20) = {result}; calls of fib by duration (clock ticks):");
    let mut total = 0;
    for (k, b) in BUCKETS.iter().enumerate() {
        let n = b.load(Ordering::Relaxed);
        if n > 0 {
            println!("{:>12} .. {:<12} {n}", 1u64 << k, 1u64 << (k + 1));
            total += n;
        }
    }
    println!("# {total} calls timed");
    Ok(())
}
