//! `shadowgraph count`: every call of every traced function counted, by a
//! counting trampoline at each site or through fgraph, and a report of
//! the counts at exit (the CLI reads it: `# shadowgraph counts v1`, one
//! tab-separated line per function).

use super::objects;
use crate::arena::Arena;
use crate::config::Objects;
use crate::patch::{self, Edit};
use crate::process::{self, Module};
use crate::tracer::count::{GraphCounter, SiteCounter};
use crate::{fgraph, ftrace};
use std::path::PathBuf;
use std::sync::OnceLock;

/// What a counting session counts with.
enum Counting {
    /// A trampoline per site, the objects as they were found.
    Sites {
        modules: Vec<Module>,
        counter: &'static SiteCounter,
        normalized: process::Normalized,
    },
    /// Through fgraph.
    Graph(GraphCounter),
}

static COUNTING: OnceLock<(Counting, Option<PathBuf>)> = OnceLock::new();

/// Starts counting the calls of the objects `which` selects (and of the
/// prologues `patch` asks for); the report goes to `report` (else
/// standard error) at [`finish`].
pub(crate) fn start(
    which: &Objects,
    patch: &[String],
    graph: bool,
    report: Option<PathBuf>,
) -> Result<(), String> {
    let mut modules = objects::discover(which, patch)?;
    let counting = if graph {
        objects::follow();
        ftrace::add_modules(modules).map_err(|e| e.to_string())?;
        let c = GraphCounter::new(ftrace::site_count());
        fgraph::register_graph(c.user()).map_err(|e| e.to_string())?;
        Counting::Graph(c)
    } else {
        patch::init();
        let normalized = process::normalize(&mut modules).map_err(|e| e.to_string())?;
        let counter = SiteCounter::new(modules.iter().flat_map(|m| m.usable().map(|s| s.addr)));
        let mut edits = Vec::new();
        for m in &modules {
            let Some((lo, hi)) = m.site_range() else {
                continue;
            };
            let where_ = |e: &dyn std::fmt::Display| format!("{}: {e}", m.path.display());
            let arena = Arena::near(lo, hi).map_err(|e| where_(&e))?;
            let tramp = counter.trampoline(arena).map_err(|e| where_(&e))?;
            for s in m.usable() {
                let e = Edit::enable(s.addr, tramp);
                edits.push(e.ok_or_else(|| where_(&"a trampoline out of a site's reach"))?);
            }
        }
        patch::apply(&mut edits).map_err(|e| e.to_string())?;
        Counting::Sites {
            modules,
            counter,
            normalized,
        }
    };
    let _ = COUNTING.set((counting, report));
    Ok(())
}

/// Writes the report of the counts (once the program is done).
pub(crate) fn finish(sigtrap_handler_intact: bool) {
    let Some((counting, out)) = COUNTING.get() else {
        return;
    };
    let text = match counting {
        Counting::Sites {
            modules,
            counter,
            normalized,
        } => {
            let mut text =
                String::from("# shadowgraph counts v1\n# module\tfunction\taddress\tcalls\n");
            for m in modules {
                for s in m.usable() {
                    text.push_str(&format!(
                        "{}\t{}\t{:#x}\t{}\n",
                        m.path.display(),
                        s.function,
                        s.addr - m.bias,
                        counter.count(s.addr)
                    ));
                }
            }
            let st = patch::stats();
            text.push_str(&format!(
                "# sites={} converted={} deferred={} traps_emulated={} traps_chained={} unknown_calls={} sigtrap_handler_intact={}\n",
                modules.iter().map(|m| m.usable().count()).sum::<usize>(),
                normalized.converted,
                normalized.deferred,
                st.traps_emulated,
                st.traps_chained,
                counter.unknown(),
                sigtrap_handler_intact as u8
            ));
            text
        }
        Counting::Graph(c) => {
            let mut text = String::from(
                "# shadowgraph counts v1\n# module\tfunction\taddress\tcalls\treturns\n",
            );
            let sites = ftrace::sites();
            for s in sites
                .iter()
                .filter(|s| s.flags & ftrace::site_flags::TOUCHED != 0)
            {
                let (entries, returns) = c.count(s.id);
                text.push_str(&format!(
                    "{}\t{}\t{:#x}\t{entries}\t{returns}\n",
                    s.module.display(),
                    s.function,
                    s.addr,
                ));
            }
            let g = fgraph::counters();
            text.push_str(&format!(
                "# sites={} uncounted={} lost_frames={} overrun={} sigtrap_handler_intact={}\n",
                sites.len(),
                c.uncounted(),
                g.lost_frames,
                fgraph::thread_overrun(),
                sigtrap_handler_intact as u8,
            ));
            text
        }
    };
    match out {
        Some(p) => {
            if let Err(e) = std::fs::write(p, text) {
                crate::say!("shadowgraph: cannot write {}: {e}", p.display());
            }
        }
        None => eprint!("{text}"),
    }
}
