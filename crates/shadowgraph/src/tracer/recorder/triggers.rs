//! A tracer's trigger specs (`-T`, and its `-F`/`-N` among them when it
//! has any) made into fgraph's per-site triggers: each site gets what the
//! specs that name it say, merged in order, as uftrace merges them.

use crate::fgraph::triggers::{SiteTrigger, Triggers};
use crate::ftrace;
use shadowgraph_data::trigger::{FilterMode, SpecKind, Trigger};

/// What each site's `read=` triggers read ([`super::reads::mask`]).
pub(super) type SiteReads = Box<[u8]>;

/// The size of a PLT entry, a library call's size for `-Z` (as uftrace's).
const PLT_ENTRY: u64 = 16;

/// The triggers of `specs` over the sites in the core (`depth`: the
/// tracer's `-D`, 0 for none; `disabled`: tracing starts off; the time
/// filter's threshold in ticks, and the clock's ticks per ns). A spec
/// that names no function is said on stderr and left out. With them, what
/// each site's `read=` actions read ([`super::reads::mask`]), where some
/// function has one.
/// `arg_room`: per site id, the bytes its calls keep for their arguments
/// beside what their `read=` triggers keep (a time filter's calls keep
/// their arguments until they are known to last long enough).
/// `by_consumer`: whether the rings' consumer may apply the time filter
/// (see [`Triggered::by_consumer`]).
pub(super) fn triggers(
    specs: &[String],
    (depth, min_size): (u32, u64),
    disabled: bool,
    (min_ticks, ticks_per_ns): (u64, f64),
    arg_room: &dyn Fn(usize) -> u16,
    by_consumer: bool,
) -> Result<Triggered, String> {
    let parsed = specs
        .iter()
        .map(|s| Trigger::parse(s, SpecKind::Trigger).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let sites = ftrace::sites();
    let modules = site_modules(&sites);
    let names = site_names(&sites, &modules);
    let mut actions = vec![shadowgraph_data::trigger::Actions::default(); sites.len()];
    let mut mode_in = false;
    for t in &parsed {
        let mut hit = false;
        for (i, n) in names.iter().enumerate() {
            if t.pattern.matches(n) {
                actions[i].merge(&t.actions);
                hit = true;
            }
        }
        if !hit {
            super::unmatched::warn(format!(
                "trigger `{}` matches no function; tracing goes on without it",
                t.pattern.text()
            ));
            continue;
        }
        mode_in |= t.actions.filter == Some(FilterMode::In);
    }
    // Each function's size, as uftrace's `-Z` takes it: its symbol's, a
    // library call's that of a PLT entry; unknown (never small) without
    // a sized symbol.
    let mut size = vec![u64::MAX; sites.len()];
    if min_size > 0 || actions.iter().any(|a| a.size.is_some()) {
        let mut objects = std::collections::HashMap::new();
        for (i, s) in sites.iter().enumerate() {
            size[i] = if s.library.is_some() {
                PLT_ENTRY
            } else {
                let sizes = objects
                    .entry(&s.module)
                    .or_insert_with(|| crate::elf::function_sizes(&s.module));
                sizes.get(&s.symbol).copied().unwrap_or(u64::MAX)
            };
        }
    }
    let reads = actions
        .iter()
        .map(|a| super::reads::mask(&a.read))
        .collect::<Result<Box<[u8]>, _>>()?;
    // A time filter (`-t`) beside triggers that take functions in or out,
    // limit the depth or read values (no switch, no thresholds of their
    // own): the triggers record every call they take, and the rings'
    // consumer leaves out the short ones, with the events (`read=`'s)
    // inside them.
    let by_consumer = by_consumer
        && min_ticks > 0
        && !disabled
        && min_size == 0
        && actions.iter().all(|a| {
            a.trace.is_none()
                && !a.finish
                && a.time_ns.is_none()
                && !a.always
                && !a.caller
                && a.size.is_none()
        });
    let min_ticks = if by_consumer { 0 } else { min_ticks };
    // Arguments wait in a call's room only for a time filter (a call's
    // entry written once it proves long enough): without one, a function
    // has room for its `read=` values alone (and, where that is none, no
    // trigger of its own: `Triggers::acts_at`).
    let timed = min_ticks > 0
        || actions
            .iter()
            .any(|a| a.time_ns.is_some() || a.always || a.caller);
    let sites: Vec<SiteTrigger> = actions
        .iter()
        .zip(size)
        .zip(&reads)
        .enumerate()
        .map(|(i, ((a, size), &read))| SiteTrigger {
            filter: a.filter.map(|m| m == FilterMode::In),
            depth: a.depth,
            trace: a.trace,
            finish: a.finish,
            time_ticks: a.time_ns.map(|t| (t as f64 * ticks_per_ns) as u64),
            always: a.always,
            caller: a.caller,
            size,
            min_size: a.size,
            room: super::reads::room(read) + if timed { arg_room(i) } else { 0 },
        })
        .collect();
    let thresholds = (min_ticks, min_size);
    let triggers = Triggers::new(sites, mode_in, depth, disabled, thresholds);
    let reads = reads.iter().any(|&m| m != 0).then_some(reads);
    Ok(Triggered {
        triggers,
        reads,
        by_consumer,
    })
}

/// A tracer's triggers ([`triggers`]).
pub(super) struct Triggered {
    pub triggers: Triggers,
    /// What each site's `read=` triggers read, where some function has one.
    pub reads: Option<SiteReads>,
    /// Whether the time filter is left to the rings' consumer: the
    /// triggers were made without it.
    pub by_consumer: bool,
}

/// Each site's object, as patterns match it (`@LIB`).
pub(super) fn site_modules(sites: &[ftrace::SiteState]) -> Vec<String> {
    sites
        .iter()
        .map(|s| s.module.to_string_lossy().into_owned())
        .collect()
}

/// Each site's names as patterns match them, its object's from
/// `modules` ([`site_modules`]).
pub(super) fn site_names<'s>(
    sites: &'s [ftrace::SiteState],
    modules: &'s [String],
) -> Vec<shadowgraph_data::pattern::FunctionName<'s>> {
    sites
        .iter()
        .zip(modules)
        .map(|(s, m)| shadowgraph_data::pattern::FunctionName {
            function: &s.function,
            symbol: &s.symbol,
            module: m,
            library: s.library.as_deref().and_then(|l| l.to_str()),
        })
        .collect()
}
