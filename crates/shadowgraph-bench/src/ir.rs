//! `bench ir MODE N`: one configuration and one untimed loop of N traced
//! calls, for instruction counting under callgrind (the instruction
//! budgets of tests/instructions.rs).

use crate::common::{empty_cb, empty_target, load_dispatch_lib, Loop};
use crate::fgraph::{accept_all, decline, ignore_return};
use crate::memory::{Recording, MODES};
use shadowgraph::{fgraph, ftrace};
use std::process::ExitCode;

pub fn bench(mode: &str, calls: i64, hijack_returns: bool) -> Result<ExitCode, String> {
    fgraph::set_site_stubs(!hijack_returns);
    let (base, tail) = match mode.strip_suffix("-tail") {
        Some(m) => (m, true),
        None => (mode, false),
    };
    if MODES.contains(&base) {
        // The library's recorders, on every site of the benchmark library.
        let r = Recording::start(base, calls, hijack_returns)?;
        let looped = r.lib.func(if tail { "loop_tail" } else { "loop_target" })?;
        std::hint::black_box(looped(std::hint::black_box(calls)));
        println!("{mode}: {calls} calls of target done");
        return Ok(ExitCode::SUCCESS);
    }
    let (_, loop_target, lib) = load_dispatch_lib()?;
    // `MODE-tail`: MODE on `loop_tail`, whose traced `tail_target` ends in
    // a tail call (a jump) to the traced `target`: two calls per iteration,
    // the second in the first's return slot.
    let (mode, looped, pats): (&str, Loop, &[&str]) = match mode.strip_suffix("-tail") {
        Some(m) => (m, lib.func("loop_tail")?, &["target", "tail_target"]),
        None => (mode, loop_target, &["target"]),
    };
    let filter = || ftrace::FilterSet::with_patterns(pats, &[]).map_err(|e| e.to_string());
    let mut keep_ops = Vec::new();
    let mut keep_users = Vec::new();
    match mode {
        "none" => {}
        "ops" | "set2" | "set10" | "list2" => {
            // Two ops with trampolines take their set's caller; without,
            // the shared caller and the list function.
            let flags = match mode {
                "list2" => ftrace::NO_TRAMP,
                _ => ftrace::OpsFlags::NONE,
            };
            let n = match mode {
                "ops" => 1,
                "set10" => 10,
                _ => 2,
            };
            for _ in 0..n {
                let o = ftrace::Ops::new(empty_cb, flags, filter()?);
                ftrace::register(&o).map_err(|e| e.to_string())?;
                keep_ops.push(o);
            }
        }
        "direct" | "direct-ops" => {
            let ret = empty_target()?;
            let d = ftrace::Ops::new_direct(filter()?);
            ftrace::register_direct(&d, ret).map_err(|e| e.to_string())?;
            keep_ops.push(d);
            if mode == "direct-ops" {
                // Its chained caller: the ops' trampoline, then the target.
                let o = ftrace::Ops::new(empty_cb, ftrace::OpsFlags::NONE, filter()?);
                ftrace::register(&o).map_err(|e| e.to_string())?;
                keep_ops.push(o);
            }
        }
        "graph" | "graph-decline" => {
            let entry: fgraph::EntryFn = if mode == "graph" { accept_all } else { decline };
            let u = fgraph::GraphUser::new(entry, ignore_return, filter()?, 0);
            fgraph::register_graph(&u).map_err(|e| e.to_string())?;
            keep_users.push(u);
        }
        "graph2" | "graph16" => {
            for _ in 0..if mode == "graph2" { 2 } else { 16 } {
                let u = fgraph::GraphUser::new(accept_all, ignore_return, filter()?, 0);
                fgraph::register_graph(&u).map_err(|e| e.to_string())?;
                keep_users.push(u);
            }
        }
        "graph-elsewhere" => {
            // One user, and one whose filter selects another function.
            let u = fgraph::GraphUser::new(accept_all, ignore_return, filter()?, 0);
            let elsewhere =
                ftrace::FilterSet::with_patterns(&["other0"], &[]).map_err(|e| e.to_string())?;
            let v = fgraph::GraphUser::new(accept_all, ignore_return, elsewhere, 0);
            for u in [u, v] {
                fgraph::register_graph(&u).map_err(|e| e.to_string())?;
                keep_users.push(u);
            }
        }
        other => return Err(format!("unknown mode `{other}`")),
    }
    std::hint::black_box(looped(std::hint::black_box(calls)));
    println!("{mode}: {calls} calls of target done");
    Ok(ExitCode::SUCCESS)
}
