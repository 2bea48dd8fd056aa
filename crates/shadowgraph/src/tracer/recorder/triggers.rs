//! A tracer's trigger specs (`-T`, and its `-F`/`-N` among them when it
//! has any) made into fgraph's per-site triggers: each site gets what the
//! specs that name it say, merged in order, as uftrace merges them.

use crate::fgraph::triggers::{SiteTrigger, Triggers};
use crate::ftrace;
use shadowgraph_data::pattern::FunctionName;
use shadowgraph_data::trigger::{FilterMode, SpecKind, Trigger};

/// The triggers of `specs` over the sites in the core (`depth`: the
/// tracer's `-D`, 0 for none; `disabled`: tracing starts off; the time
/// filter's threshold in ticks, and the clock's ticks per ns). A spec
/// that names no function is said on stderr and left out.
pub(super) fn triggers(
    specs: &[String],
    depth: u32,
    disabled: bool,
    (min_ticks, ticks_per_ns): (u64, f64),
) -> Result<Triggers, String> {
    let parsed = specs
        .iter()
        .map(|s| Trigger::parse(s, SpecKind::Trigger).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let sites = ftrace::sites();
    let modules: Vec<String> = sites
        .iter()
        .map(|s| s.module.to_string_lossy().into_owned())
        .collect();
    let names: Vec<FunctionName<'_>> = sites
        .iter()
        .zip(&modules)
        .map(|(s, m)| FunctionName {
            function: &s.function,
            symbol: &s.symbol,
            module: m,
            library: s.library.as_deref().and_then(|l| l.to_str()),
        })
        .collect();
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
            eprintln!(
                "shadowgraph: warning: trigger `{}` matches no function; tracing goes on without it",
                t.pattern.text()
            );
            continue;
        }
        mode_in |= t.actions.filter == Some(FilterMode::In);
    }
    let sites = actions
        .iter()
        .map(|a| SiteTrigger {
            filter: a.filter.map(|m| m == FilterMode::In),
            depth: a.depth,
            trace: a.trace,
            finish: a.finish,
            time_ticks: a.time_ns.map(|t| (t as f64 * ticks_per_ns) as u64),
            always: a.always,
        })
        .collect();
    Ok(Triggers::new(sites, mode_in, depth, disabled, min_ticks))
}
