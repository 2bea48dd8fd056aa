//! The recording's tracers as the callbacks and the metadata find them.

use crate::fgraph::filters::GraphFilter;
use crate::fgraph::GraphUser;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

/// A recording tracer: where it writes and what it filters.
pub(super) struct Tracer {
    pub dir: PathBuf,
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
}

/// The recording's tracers, by instance (a user's `private` word).
pub(super) static TRACERS: OnceLock<Vec<Tracer>> = OnceLock::new();

/// A lone tracer runs on the fused path.
pub(super) static FUSED: AtomicBool = AtomicBool::new(false);

pub(super) fn tracer(u: &GraphUser) -> Option<&'static Tracer> {
    TRACERS.get()?.get(u.private)
}

/// Whether this process records (its tracers are made).
pub(crate) fn active() -> bool {
    TRACERS.get().is_some()
}
