//! Record mode: every call's entry and exit as 16-byte records in
//! `$SHADOWGRAPH_DIR/<tid>.dat`, with `info` (clock calibration, counts)
//! and `symbols` written at exit.

use shadowgraph::fgraph::filters::{GraphFilter, Verdict};
use shadowgraph::record::data::{DataDir, Info};
use shadowgraph::record::{clock, format::Kind, uftrace, writer};
use shadowgraph::{fgraph, ftrace};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

static DIR: OnceLock<PathBuf> = OnceLock::new();
static USER: OnceLock<Arc<fgraph::GraphUser>> = OnceLock::new();
static RAW0: AtomicU64 = AtomicU64::new(0);
static NS0: AtomicU64 = AtomicU64::new(0);

/// `-F`, `-N`, `-D` of `shadowgraph record`.
static FILTER: OnceLock<GraphFilter> = OnceLock::new();

fn on_entry(e: &fgraph::GraphEntry, u: &fgraph::GraphUser, _r: &mut ftrace::Regs) -> bool {
    if let Some(f) = FILTER.get() {
        match f.entry(e, u) {
            Verdict::Record(_) => {}
            Verdict::Silent => return true,
            Verdict::Reject => return false,
        }
    }
    writer::emit(Kind::Entry, e.depth.clamp(0, 1023) as u16, e.func as u64);
    true
}

fn on_return(r: &fgraph::GraphReturn, u: &fgraph::GraphUser, _regs: &fgraph::RetRegs) {
    if let Some(f) = FILTER.get() {
        if f.ret(r, u).is_none() {
            return;
        }
    }
    writer::emit(Kind::Exit, r.depth.clamp(0, 1023) as u16, r.func as u64);
}

/// Patterns from an environment variable (separated by `;`).
fn patterns(var: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_default()
        .split(';')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

fn filter_set(pats: &[String]) -> Result<Option<Arc<ftrace::FilterSet>>, String> {
    if pats.is_empty() {
        return Ok(None);
    }
    let p: Vec<&str> = pats.iter().map(String::as_str).collect();
    ftrace::FilterSet::with_patterns(&p, &[])
        .map(Some)
        .map_err(|e| e.to_string())
}

pub fn attach() -> Result<(), String> {
    let dir = std::env::var_os("SHADOWGRAPH_DIR")
        .map(PathBuf::from)
        .ok_or("SHADOWGRAPH_DIR is not set")?;
    let modules = crate::discover_program()?;
    clock::init();
    let (raw0, ns0) = clock::Calibration::point();
    RAW0.store(raw0, Ordering::Relaxed);
    NS0.store(ns0, Ordering::Relaxed);
    writer::start(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _ = DIR.set(dir);
    ftrace::add_modules(modules).map_err(|e| e.to_string())?;
    let (functions, notrace) = (
        patterns("SHADOWGRAPH_FILTER"),
        patterns("SHADOWGRAPH_NOTRACE"),
    );
    let max_depth = std::env::var("SHADOWGRAPH_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0);
    if !functions.is_empty() || !notrace.is_empty() || max_depth > 0 {
        let _ = FILTER.set(GraphFilter {
            max_depth,
            functions: filter_set(&functions)?,
            notrace: filter_set(&notrace)?,
            threads: None,
        });
    }
    let user = fgraph::GraphUser::new(on_entry, on_return, ftrace::FilterSet::all(), 0);
    fgraph::register_graph(&user).map_err(|e| e.to_string())?;
    let _ = USER.set(user);
    crate::graph::ON.store(true, Ordering::Release);
    // SAFETY: registering a plain extern "C" function with atexit.
    unsafe { libc::atexit(finish) };
    Ok(())
}

extern "C" fn finish() {
    let Some(dir) = DIR.get() else {
        return;
    };
    writer::flush_all();
    let (raw1, ns1) = clock::Calibration::point();
    let mut info = Info::default();
    info.set("format", "shadowgraph-1");
    info.set(
        "exe",
        std::fs::read_link("/proc/self/exe")
            .unwrap_or_default()
            .display(),
    );
    let cmd = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let cmd: Vec<String> = cmd
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    info.set("cmdline", cmd.join(" "));
    info.set("pid", std::process::id());
    info.set(
        "clock",
        if clock::tsc_invariant() {
            "tsc"
        } else {
            "monotonic"
        },
    );
    info.set("raw0", RAW0.load(Ordering::Relaxed));
    info.set("ns0", NS0.load(Ordering::Relaxed));
    info.set("raw1", raw1);
    info.set("ns1", ns1);
    info.set("records", writer::WRITTEN.load(Ordering::Relaxed));
    info.set("lost", writer::LOST.load(Ordering::Relaxed));
    info.set("overrun", fgraph::thread_overrun());
    let mut syms = String::new();
    for s in ftrace::sites() {
        syms.push_str(&format!("{:#x}\t{}\n", s.addr, s.function));
    }
    if let Err(e) = std::fs::write(dir.join("symbols"), syms)
        .and_then(|_| std::fs::write(dir.join("maps"), module_maps()))
        .and_then(|_| info.write(dir))
    {
        eprintln!("shadowgraph: cannot write {}: {e}", dir.display());
        return;
    }
    // Nanosecond timestamps and uftrace's metadata, in place: the
    // directory is then readable by uftrace as well.
    let done = DataDir::open(dir).and_then(|d| uftrace::export(&d, dir));
    if let Err(e) = done {
        eprintln!("shadowgraph: {e}");
    }
}

/// `base<TAB>end<TAB>path` for every traced object: base is its lowest
/// mapping, end the end of its last executable one.
fn module_maps() -> String {
    let mut paths: Vec<std::path::PathBuf> =
        ftrace::sites().into_iter().map(|s| s.module).collect();
    paths.sort();
    paths.dedup();
    let maps = shadowgraph::sys::read_maps().unwrap_or_default();
    let mut out = String::new();
    for p in paths {
        let mine: Vec<_> = maps
            .iter()
            .filter(|m| std::path::Path::new(&m.path) == p)
            .collect();
        let base = mine.iter().map(|m| m.start).min();
        let end = mine
            .iter()
            .filter(|m| m.prot & libc::PROT_EXEC != 0)
            .map(|m| m.end)
            .max();
        if let (Some(b), Some(e)) = (base, end) {
            out.push_str(&format!("{b:#x}\t{e:#x}\t{}\n", p.display()));
        }
    }
    out
}
