//! The recordings' tracers as the callbacks and the metadata find them,
//! and the instances they record as.

use crate::fgraph::filters::GraphFilter;
use crate::fgraph::GraphUser;
use crate::record::writer::MAX_INSTANCES;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

/// A recording tracer: where it writes and what it filters.
pub(super) struct Tracer {
    pub dir: PathBuf,
    /// Its instance: its user's `private` word, its rings' index in the
    /// writer.
    pub inst: usize,
    /// Present when the tracer filters, or shares the program with other
    /// tracers: it keeps the tracer's own nesting, so that its records'
    /// depths do not depend on other tracers (design §6). A lone
    /// unfiltered tracer uses fgraph's depth (the same) and saves the work.
    pub filter: Option<GraphFilter>,
    pub user: Arc<GraphUser>,
    /// Time filter in clock ticks (0: none): calls shorter than this leave
    /// no records.
    pub min_ticks: u64,
    /// A profile rather than records.
    pub profile: bool,
    /// It runs on the fused path where its user is alone.
    pub fused: bool,
    /// It started on the fused path of several recorders, with the other
    /// tracers of its recording and of those beside it (set once its
    /// user is registered).
    pub multi: std::sync::atomic::AtomicBool,
    /// Its rings are drained by a writer process (which converts the
    /// recording once it has drained them).
    pub shared_rings: bool,
    /// The arguments and return values it records (`-A`, `-R`).
    pub args: Option<Arc<super::args::ArgTable>>,
    /// What each site's `read=` triggers read (`reads::mask`), where
    /// some function has one.
    pub reads: Option<Box<[u8]>>,
    /// `--watch cpu`: the processor is recorded where it changed.
    pub watch_cpu: bool,
    /// The command line that started the recording
    /// (`config::Record::command`).
    pub command: Option<String>,
}

/// One session's recording: its tracers, each an instance and a graph
/// user of its own.
pub(crate) struct Recording {
    pub(super) tracers: Vec<Arc<Tracer>>,
    /// It listens for `--control`'s commands (its metadata counts them).
    pub(super) control: bool,
    /// Its users are unregistered and its instances ended.
    pub(super) stopped: AtomicBool,
    /// Its final metadata is written; held while metadata is written, so
    /// that `note_control` never overwrites the final one.
    pub(super) finished: Mutex<bool>,
}

/// The tracer of each instance in use (null: none), as the callbacks find
/// theirs by their user's `private` word. Set before the user registers;
/// cleared, and the tracer freed, only once it is unregistered (a grace
/// period past: no callback of it runs or can start).
pub(super) static TRACERS: [AtomicPtr<Tracer>; MAX_INSTANCES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_INSTANCES];

/// The recordings under way in this process.
pub(super) static LIVE: Mutex<Vec<Arc<Recording>>> = Mutex::new(Vec::new());

pub(super) fn live() -> std::sync::MutexGuard<'static, Vec<Arc<Recording>>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// What became of an instance.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Use {
    Free,
    Taken,
    /// A profile's: its threads' tables keep its number for the life of
    /// the process.
    Retired,
}

pub(super) static INSTANCES: Mutex<[Use; MAX_INSTANCES]> = Mutex::new([Use::Free; MAX_INSTANCES]);

/// Takes `n` free instances, or says how many are in use.
pub(super) fn take_instances(n: usize) -> Result<Vec<usize>, String> {
    let mut all = INSTANCES.lock().unwrap_or_else(|e| e.into_inner());
    let free: Vec<usize> = (0..MAX_INSTANCES)
        .filter(|&i| all[i] == Use::Free)
        .take(n)
        .collect();
    if free.len() < n {
        let taken = all.iter().filter(|u| **u == Use::Taken).count();
        return Err(format!(
            "this process records with {taken} tracers already (sessions attached or started \
             with it); {MAX_INSTANCES} at most can record at once, and this session asks for {n} \
             more"
        ));
    }
    for &i in &free {
        all[i] = Use::Taken;
    }
    Ok(free)
}

/// Gives instance `i` back (a profile's is retired instead).
pub(super) fn give_back(i: usize, profile: bool) {
    let mut all = INSTANCES.lock().unwrap_or_else(|e| e.into_inner());
    all[i] = if profile { Use::Retired } else { Use::Free };
}

pub(super) fn tracer(u: &GraphUser) -> Option<&'static Tracer> {
    // Acquire: the tracer, made before it was published.
    let p = TRACERS.get(u.private)?.load(Ordering::Acquire);
    // SAFETY: a tracer published for this instance stays alive until its
    // user is unregistered and a grace period has passed; this callback
    // of that user runs before then.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Whether this process records (a recording is under way).
pub(crate) fn active() -> bool {
    !live().is_empty()
}
