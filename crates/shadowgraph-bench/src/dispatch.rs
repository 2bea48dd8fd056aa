//! `bench dispatch`: a traced call through the ftrace core with empty
//! callbacks: one ops (its own trampoline), beside unrelated ones, without
//! a trampoline, several (their set's caller; without trampolines, the
//! list function), direct calls alone and with ops.

use crate::common::{
    empty_caller_target, empty_cb, empty_target, load_dispatch_lib, ns_per_call, print_rows,
};
use shadowgraph::ftrace;
use std::process::ExitCode;
use std::sync::Arc;

pub fn bench(calls: i64, reps: usize) -> Result<ExitCode, String> {
    let (loop_plain, loop_target, _lib) = load_dispatch_lib()?;
    let filter =
        |pats: &[&str]| ftrace::FilterSet::with_patterns(pats, &[]).map_err(|e| e.to_string());
    let ops = |pats: &[&str], flags: ftrace::OpsFlags| -> Result<Arc<ftrace::Ops>, String> {
        Ok(ftrace::Ops::new(empty_cb, flags, filter(pats)?))
    };
    let reg = |o: &Arc<ftrace::Ops>| ftrace::register(o).map_err(|e| e.to_string());
    let unreg = |o: &Arc<ftrace::Ops>| ftrace::unregister(o).map_err(|e| e.to_string());
    let measure = || ns_per_call(loop_target, calls, reps);

    println!(
        "# shadowgraph bench dispatch: {calls} calls per loop, median of {reps}; empty callbacks"
    );
    let base = ns_per_call(loop_plain, calls, reps);
    let mut rows: Vec<(String, f64)> = vec![("untraced function (no site)".into(), base)];
    rows.push(("no ops (NOP5 site)".into(), measure()));

    let one = ops(&["target"], ftrace::OpsFlags::NONE)?;
    reg(&one)?;
    rows.push(("1 ops (its own trampoline)".into(), measure()));
    let others: Vec<Arc<ftrace::Ops>> = (0..10)
        .map(|i| ops(&[&format!("other{i}")], ftrace::OpsFlags::NONE))
        .collect::<Result<_, _>>()?;
    for o in &others {
        reg(o)?;
    }
    rows.push(("1 relevant ops + 10 on other functions".into(), measure()));
    for o in &others {
        unreg(o)?;
    }
    unreg(&one)?;

    let solo = ops(&["target"], ftrace::NO_TRAMP)?;
    reg(&solo)?;
    rows.push(("1 ops without trampoline (shared caller)".into(), measure()));
    unreg(&solo)?;

    let many: Vec<Arc<ftrace::Ops>> = (0..10)
        .map(|_| ops(&["target"], ftrace::OpsFlags::NONE))
        .collect::<Result<_, _>>()?;
    for o in &many[..2] {
        reg(o)?;
    }
    rows.push(("2 relevant ops (their set's caller)".into(), measure()));
    for o in &many[2..] {
        reg(o)?;
    }
    rows.push(("10 relevant ops (their set's caller)".into(), measure()));
    for o in &many {
        unreg(o)?;
    }
    let listed: Vec<Arc<ftrace::Ops>> = (0..10)
        .map(|_| ops(&["target"], ftrace::NO_TRAMP))
        .collect::<Result<_, _>>()?;
    for o in &listed[..2] {
        reg(o)?;
    }
    rows.push((
        "2 ops without trampolines (list function)".into(),
        measure(),
    ));
    for o in &listed[2..] {
        reg(o)?;
    }
    rows.push((
        "10 ops without trampolines (list function)".into(),
        measure(),
    ));
    for o in &listed {
        unreg(o)?;
    }

    let ret = empty_target()?;
    let direct = ftrace::Ops::new_direct(filter(&["target"])?);
    ftrace::register_direct(&direct, ret).map_err(|e| e.to_string())?;
    rows.push(("direct call (pad to an empty target)".into(), measure()));
    let probe = ops(&["target"], ftrace::OpsFlags::NONE)?;
    reg(&probe)?;
    rows.push(("direct + 1 ops (its chained caller)".into(), measure()));
    let second = ops(&["target"], ftrace::OpsFlags::NONE)?;
    reg(&second)?;
    rows.push(("direct + 2 ops (regs caller, list, jump)".into(), measure()));
    unreg(&second)?;
    unreg(&probe)?;
    unreg(&direct)?;
    // The floor of a callback: the direct call's target saves the
    // argument registers and calls an empty C function.
    let floor = ftrace::Ops::new_direct(filter(&["target"])?);
    ftrace::register_direct(&floor, empty_caller_target()?).map_err(|e| e.to_string())?;
    rows.push((
        "floor: direct call, saved registers, empty C fn".into(),
        measure(),
    ));
    unreg(&floor)?;
    rows.push(("all unregistered (NOP5 again)".into(), measure()));

    print_rows(&rows, base);
    Ok(ExitCode::SUCCESS)
}
