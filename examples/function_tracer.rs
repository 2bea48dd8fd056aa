//! A function tracer (an ftrace ops): counts calls of this program's C
//! functions by (function, caller), from the call's site and return
//! address, with no return hooked. Several ops could trace the same
//! functions at once; this one is alone and gets its own trampoline.
//!
//! `cargo run -p shadowgraph-examples --bin function_tracer`

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use shadowgraph::ftrace::{self, FilterSet, Ops, OpsFlags, Regs};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

extern "C" {
    fn work(n: i32) -> i64;
}

/// Calls by (site id, caller's return address): a small open-addressed
/// table, since callbacks must not allocate or lock.
const SLOTS: usize = 1024;
static KEYS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static COUNTS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

extern "C" fn on_call(ip: usize, parent_ip: usize, _: &Ops, _: &mut Regs) {
    let Some(id) = ftrace::site_id_of(ip) else {
        return;
    };
    let key = (u64::from(id) << 48) | (parent_ip as u64 & ((1 << 48) - 1));
    let mut i = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize;
    for _ in 0..SLOTS {
        // AcqRel: a key is claimed once, by one thread; Relaxed counts.
        match KEYS[i].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
            Err(k) if k != key => i = (i + 1) % SLOTS,
            _ => {
                COUNTS[i].fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
}

fn main() -> Result<(), String> {
    ftrace::add_loaded(|_| false).map_err(|e| e.to_string())?;
    let ops = Ops::new(on_call, OpsFlags::NONE, FilterSet::all());
    ftrace::register(&ops).map_err(|e| e.to_string())?;
    // SAFETY: `long work(int)` of c/work.c.
    let result = unsafe { work(12) };
    // Returns once no thread runs, or can start, the callback.
    ftrace::unregister(&ops).map_err(|e| e.to_string())?;
    let sites = ftrace::sites();
    // The traced function a return address lies in: the nearest site at or
    // below it (our functions are small and adjacent; a caller without a
    // site, such as this Rust code, may borrow a name, so it is checked
    // against the function's symbol size where the table knows it).
    let mut by_addr: Vec<(usize, &str)> = sites
        .iter()
        .map(|s| (s.addr, s.function.as_str()))
        .collect();
    by_addr.sort_unstable();
    let caller_of = |ret: usize| match by_addr.partition_point(|&(a, _)| a <= ret) {
        0 => "(untraced code)",
        i if ret - by_addr[i - 1].0 < 256 => by_addr[i - 1].1,
        _ => "(untraced code)",
    };
    let mut rows = BTreeMap::new();
    for (k, c) in KEYS.iter().zip(&COUNTS) {
        let key = k.load(Ordering::Relaxed);
        if key != 0 {
            let f = sites[(key >> 48) as usize].function.as_str();
            let caller = caller_of((key & ((1 << 48) - 1)) as usize);
            *rows.entry((f, caller)).or_insert(0) += c.load(Ordering::Relaxed);
        }
    }
    println!("# work(12) = {result}");
    println!("{:>8}  FUNCTION <- CALLER", "CALLS");
    for ((f, caller), n) in rows {
        println!("{n:>8}  {f} <- {caller}");
    }
    Ok(())
}
