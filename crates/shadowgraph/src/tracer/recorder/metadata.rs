//! A recording's metadata, written by the traced process beside its
//! records: `shadowgraph.info` (the run, the clock's calibration points,
//! what was lost and why), `symbols` and `maps` (every traced function and
//! object, those unloaded since included), and a profile's counters.

use super::state::{active, Tracer};
use crate::clock;
use crate::record::writer;
use crate::{fgraph, ftrace};
use shadowgraph_data::dir::Info;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;

// The clock's calibration points: the first before tracing starts, the
// second soon after (an estimate of its rate for the metadata written at
// start); the final one is taken at the end.
static RAW0: AtomicU64 = AtomicU64::new(0);
static NS0: AtomicU64 = AtomicU64::new(0);
static RAW1: AtomicU64 = AtomicU64::new(0);
static NS1: AtomicU64 = AtomicU64::new(0);

/// Writes each tracer's `symbols`, `maps` and `shadowgraph.info` with the
/// clock calibration's end point (raw1, ns1): at start with an estimate (so
/// that a recording cut short by a crash stays readable), at exit for real.
fn write(
    tracers: &[Arc<Tracer>],
    raw1: u64,
    ns1: u64,
    control: Option<(u64, u64)>,
    finished: bool,
) {
    let cmd = std::fs::read("/proc/thread-self/cmdline").unwrap_or_default();
    let cmd: Vec<String> = cmd
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut syms = String::new();
    // The library each library call goes to (`--libname`), by its site.
    let mut libs = String::new();
    // A function patched at its prologue is named at its entry too.
    let mut placed = crate::process::prologue::entries();
    placed.sort_unstable();
    // Each such function's stub (the address its records carry) and its
    // entry: a view naming the functions from another recording's symbol
    // files (`--with-syms`) names a stub by its function's entry, since
    // the stubs of two runs need not lie at the same offset.
    let stubs: String = placed
        .iter()
        .map(|(s, e)| format!("{s:#x}\t{e:#x}\n"))
        .collect();
    let entries: std::collections::HashMap<usize, usize> = placed.into_iter().collect();
    for s in ftrace::sites() {
        if let Some(entry) = entries.get(&s.addr) {
            syms.push_str(&format!("{entry:#x}\t{}\n", s.symbol));
        }
        // The symbol as the object names it: views demangle it as asked
        // (`--demangle`), and so does uftrace reading our data.
        // (A stripped object's unnamed function: an empty name, which
        // views show as its address.)
        syms.push_str(&format!("{:#x}\t{}\n", s.addr, s.symbol));
        if let Some(name) = s.library.as_deref().and_then(|l| l.file_name()) {
            libs.push_str(&format!("{:#x}\t{}\n", s.addr, name.to_string_lossy()));
        }
    }
    let maps = module_maps();
    let loads = LOADS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // Where pointer arguments may point: the objects' data symbols.
    let datasyms = match tracers.iter().any(|t| t.args.is_some()) {
        true => data_symbols_text(),
        false => String::new(),
    };
    for t in tracers {
        let i = t.inst;
        let mut info = Info::default();
        info.set("format", "shadowgraph-1");
        info.set(
            "exe",
            std::fs::read_link("/proc/thread-self/exe")
                .unwrap_or_default()
                .display(),
        );
        // The recording's command line, as uftrace keeps its own; else
        // the program's.
        match &t.command {
            Some(c) => info.set("cmdline", c),
            None => info.set("cmdline", cmd.join(" ")),
        }
        info.set("pid", std::process::id());
        if crate::stop::signal_free() {
            // Joined while it ran (`record -p`): its exit is not the
            // recording's to see.
            info.set("attached", 1);
        }
        let unmatched = super::unmatched::kept();
        if !unmatched.is_empty() {
            info.set("unmatched", unmatched);
        }
        info.set(
            "clock",
            if clock::uses_tsc() {
                "tsc"
            } else {
                "monotonic"
            },
        );
        // Written out as nanoseconds (the raw points stay for reference).
        info.set("timestamps", "ns");
        if writer::compact(i) {
            // The threads' files in `shadowgraph_data::compact`'s layout.
            info.set("layout", "compact");
        }
        info.set("raw0", RAW0.load(Ordering::Relaxed));
        info.set("ns0", NS0.load(Ordering::Relaxed));
        info.set("raw1", raw1);
        info.set("ns1", ns1);
        if finished {
            info.set("finished", 1);
        }
        // With rings in shared memory the writer counts (and adds these).
        info.set("records", writer::written(i));
        info.set("lost", writer::lost(i));
        let (steps, worst) = writer::clock_steps_back(i);
        info.set("clock_steps_back", format!("{steps} / {worst}"));
        if let Some(e) = writer::write_error(i) {
            info.set("write_error", e);
        }
        info.set("overrun", fgraph::total_overruns());
        if let Some((disables, enables)) = control {
            info.set("control", format!("{disables} disables, {enables} enables"));
        }
        info.set("max_stack", fgraph::max_frames());
        let prologues = crate::process::prologue::summaries();
        if !prologues.is_empty() {
            info.set("prologues", prologues.join("; "));
        }
        info.set("recursion_drops", ftrace::recursion_drops_all());
        let (waits, waited) = writer::waits();
        info.set("writer_waits", format!("{waits} / {waited}"));
        let (drains, records) = writer::own_drains();
        info.set("own_drains", format!("{drains} / {records}"));
        if writer::writer_gave_up(i) {
            info.set("writer_gave_up", 1);
        }
        // Relaxed: set before the recording is published (live()).
        let multi = t.multi.load(Ordering::Relaxed);
        let fused = t.fused || multi;
        let path = match (t.fused, multi) {
            (true, _) => "fused",
            (_, true) => "fused-multi",
            _ => "general",
        };
        info.set("record_path", path);
        if fused && !t.profile {
            let claims = if crate::tracer::fused::uses_rseq() {
                "rseq"
            } else {
                "cmpxchg"
            };
            info.set("ring_claims", claims);
            info.set("rseq_restarts", crate::tracer::fused::rseq_restarts());
            // A plain recorder of arguments: its entry's own.
            if t.fused && t.filter.is_none() && t.args.is_some() {
                let n = crate::tracer::fused::args_entry_restarts();
                info.set("rseq_restarts_args", n);
            }
        }
        if t.profile {
            info.set("tracer", "profile");
            info.set(
                "profile_unattributed",
                crate::tracer::profile::BEYOND.load(Ordering::Relaxed),
            );
            info.set(
                "profile_no_room",
                crate::tracer::profile::NO_ROOM.load(Ordering::Relaxed),
            );
        }
        if let Some(a) = &t.args {
            // As uftrace's info keeps them; patterns as `-F` takes them.
            info.set("argspec", &a.argspec);
            info.set("retspec", &a.retspec);
            info.set("pattern_type", "glob");
            // (The C library's enums, which its functions' specs name,
            // whether they come from -a or -A.)
            info.set("enumauto", shadowgraph_data::prototypes::enums_line());
            if let Some((args, rets)) = &a.auto {
                info.set("auto-args", "1");
                info.set("argauto", args);
                info.set("retauto", rets);
            }
        }
        let dir = &t.dir;
        if t.profile && finished {
            let raw0 = RAW0.load(Ordering::Relaxed);
            let ns0 = NS0.load(Ordering::Relaxed);
            let ns_per_tick = if raw1 > raw0 && clock::uses_tsc() {
                (ns1 - ns0) as f64 / (raw1 - raw0) as f64
            } else {
                1.0
            };
            let addrs: Vec<usize> = ftrace::sites().iter().map(|s| s.addr).collect();
            let text = crate::tracer::profile::dump(i, &addrs, ns_per_tick);
            if let Err(e) = std::fs::write(dir.join("profile"), text) {
                crate::say!("shadowgraph: cannot write {}: {e}", dir.display());
            }
        }
        use shadowgraph_data::dir::write_whole;
        if let Err(e) = write_whole(&dir.join("symbols"), syms.as_bytes())
            .and_then(|_| write_whole(&dir.join("libnames"), libs.as_bytes()))
            .and_then(|_| write_whole(&dir.join("maps"), maps.as_bytes()))
            .and_then(|_| match stubs.is_empty() {
                true => Ok(()),
                false => write_whole(&dir.join("stubs"), stubs.as_bytes()),
            })
            .and_then(|_| match loads.is_empty() {
                true => Ok(()),
                false => write_whole(&dir.join("loads"), loads.as_bytes()),
            })
            .and_then(|_| match datasyms.is_empty() {
                true => Ok(()),
                false => write_whole(&dir.join("datasyms"), datasyms.as_bytes()),
            })
            .and_then(|_| info.write(dir))
        {
            crate::say!("shadowgraph: cannot write {}: {e}", dir.display());
        }
    }
}

/// The data symbols of the loaded objects (the agent's left out), as
/// `shadowgraph_data::meta::read_data_symbols` reads them: a line per
/// object (its range and path), then a line per symbol, absolute.
fn data_symbols_text() -> String {
    use std::fmt::Write;
    let mut own = String::new();
    // SAFETY: dladdr with an address in this object and a zeroed info it
    // fills; the name it points to lives as long as the object.
    unsafe {
        let mut i: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(data_symbols_text as *const libc::c_void, &mut i) != 0
            && !i.dli_fname.is_null()
        {
            own = std::ffi::CStr::from_ptr(i.dli_fname)
                .to_string_lossy()
                .into_owned();
        }
    }
    let mut out = String::new();
    for (path, bias) in crate::process::loaded_objects() {
        if path.as_os_str().is_empty() || path.to_string_lossy() == own {
            continue;
        }
        let Some(d) = crate::elf::data_symbols(&path) else {
            continue;
        };
        if d.symbols.is_empty() {
            continue;
        }
        let b = bias as u64;
        let (lo, hi) = (d.range.0 + b, d.range.1 + b);
        let _ = writeln!(out, "{lo:#x}\t{hi:#x}\t{}", path.display());
        for (a, size, kind, name) in &d.symbols {
            let _ = writeln!(out, "\t{:#x}\t{size:#x}\t{kind}\t{name}", a + b);
        }
    }
    out
}

/// The first calibration point, before tracing starts.
pub(super) fn take_first_calibration_point() {
    let (raw0, ns0) = clock::calibration_point();
    RAW0.store(raw0, Ordering::Relaxed);
    NS0.store(ns0, Ordering::Relaxed);
}

/// A second calibration point a few hundred microseconds after the first
/// (a clock rate before tracing starts: for the time filters, and for the
/// metadata written at start); returns the ticks per nanosecond.
pub(super) fn take_early_calibration_point() -> f64 {
    let (raw0, ns0) = (RAW0.load(Ordering::Relaxed), NS0.load(Ordering::Relaxed));
    let (raw1, ns1) = loop {
        let (raw, ns) = clock::calibration_point();
        if ns >= ns0 + 500_000 {
            break (raw, ns);
        }
        std::hint::spin_loop();
    };
    RAW1.store(raw1, Ordering::Relaxed);
    NS1.store(ns1, Ordering::Relaxed);
    crate::record::ring::set_start_calibration(shadowgraph_data::time::Calibration {
        raw0,
        ns0,
        raw1,
        ns1,
    });
    raw1.saturating_sub(raw0) as f64 / ns1.saturating_sub(ns0).max(1) as f64
}

/// Every tracer's metadata: at start with the early calibration point (so
/// that a recording cut short by a crash stays readable), when `finished`
/// with a point taken now.
pub(super) fn write_all(tracers: &[Arc<Tracer>], control: Option<(u64, u64)>, finished: bool) {
    let (raw1, ns1) = if finished {
        clock::calibration_point()
    } else {
        (RAW1.load(Ordering::Relaxed), NS1.load(Ordering::Relaxed))
    };
    write(tracers, raw1, ns1, control, finished);
}

/// Ranges of traced objects since unloaded (dlclose), kept so that their
/// recorded calls keep their names: (base, end, path).
static UNLOADED_MAPS: Mutex<Vec<(usize, usize, String)>> = Mutex::new(Vec::new());

/// Before objects may be unmapped (dlclose): note the ranges of every
/// traced object while they are still mapped.
pub(crate) fn remember_module_maps() {
    if !active() {
        return;
    }
    let now = current_module_maps();
    let mut kept = UNLOADED_MAPS.lock().unwrap_or_else(|e| e.into_inner());
    kept.extend(now);
    kept.sort();
    kept.dedup();
}

/// An object loaded by `dlopen` while recording, and its traced functions.
pub(crate) struct Loaded {
    /// Its file, as the loader names it.
    pub path: std::path::PathBuf,
    /// Its load bias.
    pub bias: usize,
    /// (address, symbol) of each traced function.
    pub functions: Vec<(usize, String)>,
}

/// The objects loaded while recording, as `shadowgraph_data::loads`
/// reads them (`loads`): after `dlclose`, the next object may be loaded
/// at the same addresses, and the records are named by the object there
/// at their time.
static LOADS: Mutex<String> = Mutex::new(String::new());

/// `objects` were loaded at `when` (CLOCK_MONOTONIC nanoseconds, as the
/// records' times are written; before any of their calls
/// was recorded) and joined the core: noted with their ranges while they
/// are mapped.
pub(crate) fn objects_loaded(when: u64, objects: &[Loaded]) {
    use std::fmt::Write;
    if !active() || objects.is_empty() {
        return;
    }
    let maps = current_module_maps();
    let tid = crate::sys::gettid();
    let mut text = String::new();
    for o in objects {
        let path = o.path.display().to_string();
        let Some(first) = o.functions.iter().map(|f| f.0).min() else {
            continue;
        };
        let Some(&(lo, hi, _)) = maps
            .iter()
            .find(|m| m.2 == path && (m.0..m.1).contains(&first))
        else {
            continue;
        };
        let _ = writeln!(text, "{when}\t{tid}\t{:x}\t{lo:x}\t{hi:x}\t{path}", o.bias);
        for (a, name) in &o.functions {
            let _ = writeln!(text, "\t{a:x}\t{name}");
        }
    }
    LOADS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push_str(&text);
}

/// `base<TAB>end<TAB>path` for every object traced during the run (those
/// mapped now and those unloaded since).
fn module_maps() -> String {
    let mut all = current_module_maps();
    all.extend(
        UNLOADED_MAPS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned(),
    );
    all.sort();
    all.dedup();
    all.iter()
        .map(|(b, e, p)| format!("{b:#x}\t{e:#x}\t{p}\n"))
        .collect()
}

/// Every traced object mapped now: base is its lowest mapping, end the end
/// of its last executable one.
fn current_module_maps() -> Vec<(usize, usize, String)> {
    let sites = ftrace::sites();
    let mut paths: Vec<std::path::PathBuf> = sites.iter().map(|s| s.module.clone()).collect();
    paths.sort();
    paths.dedup();
    let maps = crate::sys::read_maps().unwrap_or_default();
    let mut out = Vec::new();
    for p in paths {
        if p.as_os_str().to_string_lossy().ends_with("@plt") && !p.exists() {
            // An object's library calls: their thunks, named as a module of
            // their own (crate::libcall).
            let mine = sites.iter().filter(|s| s.module == p).map(|s| s.addr);
            if let (Some(b), Some(e)) = (mine.clone().min(), mine.max()) {
                out.push((b, e + crate::libcall::THUNK_STRIDE, p.display().to_string()));
            }
            continue;
        }
        // The kernel names the file itself; the loader the name it opened
        // (`libfoo.so.1`, often a link to `libfoo.so.1.2.3`).
        let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        let mine: Vec<_> = maps
            .iter()
            .filter(|m| {
                let m = std::path::Path::new(&m.path);
                m == p || m == real
            })
            .collect();
        let base = mine.iter().map(|m| m.start).min();
        let end = mine
            .iter()
            .filter(|m| m.prot & libc::PROT_EXEC != 0)
            .map(|m| m.end)
            .max();
        if let (Some(b), Some(e)) = (base, end) {
            out.push((b, e, p.display().to_string()));
            // Its functions patched at their prologue: their sites are in
            // stubs outside the object (crate::process::prologue), named
            // by a range of their own under the object's path.
            let stubs = sites
                .iter()
                .filter(|s| s.module == p && (s.addr < b || s.addr >= e))
                .map(|s| s.addr);
            if let (Some(lo), Some(hi)) = (stubs.clone().min(), stubs.max()) {
                let stride = crate::process::prologue::STUB_STRIDE;
                out.push((lo, hi + stride, p.display().to_string()));
            }
        }
    }
    out
}
