//! `bench patch`: a call untraced, through a nop site, patched to an empty
//! trampoline and to a counting one; flipping thousands of sites in one
//! batch, quiet and while a thread runs through them.

use crate::common::{median, ns_per_call, BenchLib};
use shadowgraph::arena::Arena;
use shadowgraph::patch::{self, Edit, WriteMode};
use shadowgraph::process;
use shadowgraph::tracer::count::SiteCounter;
use shadowgraph::tramp;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn bench_source(sites: usize) -> String {
    let mut c = String::from(
        "#define KEEP __attribute__((noinline, noipa))\n\
         #define UNPATCHABLE __attribute__((patchable_function_entry(0, 0)))\n\
         UNPATCHABLE KEEP long plain(long x) { return x + 1; }\n\
         KEEP long site(long x) { return x + 1; }\n\
         UNPATCHABLE long loop_plain(long n) { long s = 0; for (long i = 0; i < n; i++) s += plain(i); return s; }\n\
         UNPATCHABLE long loop_site(long n) { long s = 0; for (long i = 0; i < n; i++) s += site(i); return s; }\n",
    );
    for i in 0..sites {
        writeln!(c, "KEEP void f_{i}(void) {{}}").unwrap();
    }
    c.push_str("UNPATCHABLE long call_all(long x) {\n");
    for i in 0..sites {
        writeln!(c, "  f_{i}();").unwrap();
    }
    c.push_str("  return x;\n}\n");
    c
}

pub fn bench(calls: i64, reps: usize, nsites: usize) -> Result<ExitCode, String> {
    eprintln!("# building {nsites} functions with -fpatchable-function-entry=5 …");
    let lib = BenchLib::build("patch", &bench_source(nsites))?;
    let (loop_plain, loop_site, call_all) = (
        lib.func("loop_plain")?,
        lib.func("loop_site")?,
        lib.func("call_all")?,
    );
    let mut modules = process::discover(|p| lib.is(p)).map_err(|e| e.to_string())?;
    let m = modules
        .first_mut()
        .ok_or("benchmark library not found in the process")?;
    let t = Instant::now();
    let norm = process::normalize(std::slice::from_mut(m)).map_err(|e| e.to_string())?;
    let norm_ms = t.elapsed().as_secs_f64() * 1e3;
    let site = m.by_name("site").ok_or("no site for `site`")?.addr;
    let (lo, hi) = m.site_range().unwrap();
    let arena = Arena::near(lo, hi).map_err(|e| e.to_string())?;
    let empty = tramp::empty(arena).map_err(|e| e.to_string())?;
    let counter = SiteCounter::new([site]);
    let counting = counter.trampoline(arena).map_err(|e| e.to_string())?;

    println!("# shadowgraph bench patch: {calls} calls per loop, median of {reps}");
    println!(
        "# normalised {} sleds in {norm_ms:.2} ms (process single-threaded: plain writes)",
        norm.converted
    );
    let base = ns_per_call(loop_plain, calls, reps);
    let nop = ns_per_call(loop_site, calls, reps);
    patch::apply(&mut [Edit::enable(site, empty).unwrap()]).map_err(|e| e.to_string())?;
    let patched = ns_per_call(loop_site, calls, reps);
    patch::apply(&mut [Edit::retarget(site, empty, counting).unwrap()])
        .map_err(|e| e.to_string())?;
    let counted = ns_per_call(loop_site, calls, reps);
    patch::apply(&mut [Edit::disable(site, counting).unwrap()]).map_err(|e| e.to_string())?;
    println!("{:<44} {:>9} {:>10}", "call", "ns/call", "vs untraced");
    for (name, v) in [
        ("untraced (no patchable entry)", base),
        ("nop site (NOP5)", nop),
        ("patched: call to an empty trampoline", patched),
        ("patched: caller trampoline + Rust counter", counted),
    ] {
        println!("{name:<44} {v:>9.2} {:>+10.2}", v - base);
    }

    // Batches of all the f_i sites.
    let fsites: Vec<usize> = m
        .usable()
        .filter(|s| s.function.starts_with("f_"))
        .map(|s| s.addr)
        .collect();
    let on: Vec<Edit> = fsites
        .iter()
        .map(|&a| Edit::enable(a, empty).unwrap())
        .collect();
    let off: Vec<Edit> = fsites
        .iter()
        .map(|&a| Edit::disable(a, empty).unwrap())
        .collect();
    let flip = |reps: usize| -> Result<(f64, f64), String> {
        let (mut ton, mut toff) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let t = Instant::now();
            patch::apply(&mut on.clone()).map_err(|e| e.to_string())?;
            ton.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            patch::apply(&mut off.clone()).map_err(|e| e.to_string())?;
            toff.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok((median(ton), median(toff)))
    };
    println!();
    println!(
        "{:<52} {:>9} {:>9}",
        format!("batch of {} sites", fsites.len()),
        "on ms",
        "off ms"
    );
    let reps_flip = reps.max(11);
    let quiet = flip(reps_flip)?;
    println!(
        "{:<52} {:>9.3} {:>9.3}",
        "quiet (mprotect window)", quiet.0, quiet.1
    );
    let stop = Arc::new(AtomicBool::new(false));
    let runner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                call_all(1);
                rounds += 1;
            }
            rounds
        })
    };
    let traps0 = patch::stats().traps_emulated;
    let busy = flip(reps_flip)?;
    stop.store(true, Ordering::Relaxed);
    let rounds = runner.join().map_err(|_| "runner thread panicked")?;
    println!(
        "{:<52} {:>9.3} {:>9.3}",
        "a thread running through them (mprotect window)", busy.0, busy.1
    );
    patch::set_write_mode(WriteMode::ProcMem);
    let procmem = flip(3)?;
    patch::set_write_mode(WriteMode::Mprotect);
    println!(
        "{:<52} {:>9.3} {:>9.3}",
        "quiet (/proc/self/mem pwrite)", procmem.0, procmem.1
    );
    let st = patch::stats();
    println!(
        "# runner made {rounds} passes over all sites; {} int3 traps emulated under load, {} late; \
         cores serialised by {}",
        st.traps_emulated - traps0,
        st.traps_late,
        patch::serialise_method()
    );
    Ok(ExitCode::SUCCESS)
}
