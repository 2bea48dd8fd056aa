//! `-E PROVIDER:EVENT`: the user SDT markers of the loaded objects that
//! the patterns name are armed as probes (crate::patch::probes), whose
//! traps the recorders record as events (`recorder::markers`), numbered
//! from uftrace's first user event id in the order found, each object's
//! in its notes' order.

use crate::tracer::recorder::{self, markers};
use crate::{elf, patch, process, sys};
use shadowgraph_data::pattern::{FunctionName, Pattern};

/// Each loaded object's SDT markers, with its load bias; one whose notes
/// cannot be read is said on stderr (with `unread`) and passed over.
fn loaded_probes(unread: &str) -> Vec<(usize, Vec<elf::sdt::SdtProbe>)> {
    let mut out = Vec::new();
    for (path, bias) in process::loaded_objects() {
        if path.as_os_str().is_empty() {
            continue;
        }
        let Ok(data) = sys::MappedFile::open(&path) else {
            continue;
        };
        match elf::sdt::probes(&path, &data) {
            Ok(found) => out.push((bias, found)),
            Err(e) => crate::say!("shadowgraph: {e}{unread}"),
        }
    }
    out
}

/// Prints the user SDT markers of every loaded object, one line each, as
/// uftrace's `--list-event` does (`[SDT event] PROVIDER:NAME ARGS`).
pub(super) fn list() {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for (_, found) in loaded_probes("") {
        for p in found {
            let _ = writeln!(out, "[SDT event] {}:{} {}", p.provider, p.name, p.args);
        }
    }
    let _ = out.flush();
}

/// The markers found: their names by event id.
pub(super) type Names = Vec<(u32, String)>;

/// Arms the markers `patterns` name (each `PROVIDER:EVENT`, both sides
/// patterns as `-F`'s), before the recording's tracers take calls: their
/// events are recorded from then on, as the calls are (see
/// `recorder::markers`). What cannot be done is said, and recording goes
/// on without it. Returns the markers' names, for [`name`].
pub(super) fn arm(patterns: &[String]) -> Names {
    let specs: Vec<(&String, Pattern, Pattern)> = patterns
        .iter()
        .filter_map(|text| {
            let parsed = text
                .split_once(':')
                .ok_or_else(|| "not PROVIDER:EVENT".to_string())
                .and_then(|(p, e)| {
                    let parse = |s| Pattern::parse(s).map_err(|e| e.to_string());
                    Ok((parse(p)?, parse(e)?))
                });
            match parsed {
                Ok((p, e)) => Some((text, p, e)),
                Err(e) => {
                    crate::say!("shadowgraph: -E {text}: {e}");
                    None
                }
            }
        })
        .collect();
    if specs.is_empty() {
        return Vec::new();
    }
    let named = |p: &Pattern, s: &str| {
        p.matches(&FunctionName {
            function: s,
            symbol: s,
            module: "",
            library: None,
        })
    };
    let mut used = vec![false; specs.len()];
    let (mut probes, mut names) = (Vec::new(), Vec::new());
    for (bias, found) in loaded_probes("; its SDT markers are not recorded") {
        for p in found {
            let Some(k) = (specs.iter())
                .position(|(_, prov, ev)| named(prov, &p.provider) && named(ev, &p.name))
            else {
                continue;
            };
            used[k] = true;
            let id = markers::FIRST_ID + names.len() as u32;
            probes.push((bias.wrapping_add(p.addr as usize), id));
            names.push((id, format!("{}:{}", p.provider, p.name)));
        }
    }
    for ((text, _, _), used) in specs.iter().zip(used) {
        if !used {
            crate::say!(
                "shadowgraph: -E {text}: no SDT marker of the program or its libraries matches"
            );
        }
    }
    if probes.is_empty() {
        return names;
    }
    if let Err(e) = patch::probes::arm(probes, markers::on_marker) {
        crate::say!("shadowgraph: SDT markers are not recorded: {e}");
        return Vec::new();
    }
    names
}

/// Names the markers armed in `rec`'s recorders' directories.
pub(super) fn name(names: &Names, rec: &recorder::Recording) {
    if names.is_empty() {
        return;
    }
    for dir in rec.recorder_dirs() {
        if let Err(e) = markers::write_names(&dir, names) {
            crate::say!("shadowgraph: {}: events.txt: {e}", dir.display());
        }
    }
}

/// Gives the armed markers their `nop`s back.
pub(super) fn disarm() {
    patch::probes::disarm();
}
