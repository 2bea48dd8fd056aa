//! `shadowgraph sites`: what `record` would patch in an object, at its
//! patchable entries or (`-P`) at ordinary prologues.

use shadowgraph::prologue;
use shadowgraph_data::pattern::Pattern;
use std::path::Path;
use std::process::ExitCode;

/// The patchable entries of `file` (and with `all` the rejected ones).
pub(crate) fn sites(file: &std::path::Path, all: bool) -> Result<ExitCode, String> {
    let found = shadowgraph::elf::scan_file(file).map_err(|e| e.to_string())?;
    if found.built_with_hooks {
        println!(
            "# {}: built with -pg or -finstrument-functions: its functions that call the profiling hook are patched at their prologue",
            file.display()
        );
        return listed(
            file,
            &found,
            prologue::Asked::Hooked,
            "built with profiling hooks",
            all,
        );
    }
    if !all {
        found.require_sites().map_err(|e| e.to_string())?;
    }
    let usable = found.usable().count();
    println!(
        "# {}: {} sites, {} rejected",
        file.display(),
        usable,
        found.sites.len() - usable
    );
    println!(
        "# {:>16}  {:<13}  {:<6}  FUNCTION",
        "ADDRESS", "KIND", "ENDBR"
    );
    for s in &found.sites {
        match &s.kind {
            Ok(k) => println!(
                "{:>18}  {:<13}  {:<6}  {}",
                format!("{:#x}", s.addr),
                k.name(),
                if s.endbr { "yes" } else { "no" },
                s.function
            ),
            Err(why) if all => println!(
                "{:>18}  {:<13}  {:<6}  {}  [rejected: {why}]",
                format!("{:#x}", s.addr),
                "-",
                if s.endbr { "yes" } else { "no" },
                s.function
            ),
            Err(_) => {}
        }
    }
    if !all && usable < found.sites.len() {
        println!("# (--all lists the rejected sites and why)");
    }
    found.require_sites().map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

/// The functions of `file` that `-P patterns` ask for: each patched at
/// its prologue (the window's bytes), by its patchable entry, or refused
/// and why; counts by reason, and `N of M functions patchable`. With
/// `all`, also the functions traced by their patchable entry.
pub(crate) fn prologues(file: &Path, patterns: &[Pattern], all: bool) -> Result<ExitCode, String> {
    let found = shadowgraph::elf::scan_file(file).map_err(|e| e.to_string())?;
    let named = |sym: &str| prologue::wanted(patterns, file, true, sym);
    let p: Vec<&str> = patterns.iter().map(|p| p.text()).collect();
    let what = format!("-P {}", p.join(" -P "));
    listed(file, &found, prologue::Asked::Named(&named), &what, all)
}

/// Lists the functions of `file` (scanned: `found`) that `asked` names,
/// as [`prologues`] says; `what` names the request in the error when
/// there are none.
fn listed(
    file: &Path,
    found: &shadowgraph::elf::ObjectSites,
    asked: prologue::Asked<'_>,
    what: &str,
    all: bool,
) -> Result<ExitCode, String> {
    let sites: Vec<u64> = found.usable().map(|s| s.addr).collect();
    let data = std::fs::read(file).map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
    let request = asked;
    let judged = prologue::judge(file, &data, &sites, request).map_err(|e| e.to_string())?;
    let patchable = judged.patchable().count();
    let asked = judged.functions.len() + judged.with_site;
    println!(
        "# {}: {} functions asked for: {} patched at their prologue, {} by their patchable entry, {} refused",
        file.display(),
        asked,
        patchable,
        judged.with_site,
        judged.functions.len() - patchable
    );
    println!("# {:>16}  {:<6}  FUNCTION", "ADDRESS", "BYTES");
    for j in &judged.functions {
        match &j.window {
            Ok(w) if !w.kept.is_empty() => println!(
                "{:>18}  {:<6}  {}  [keeps {}]",
                format!("{:#x}", w.at),
                w.len,
                j.function,
                w.kept.names().collect::<Vec<_>>().join(" ")
            ),
            Ok(w) => println!(
                "{:>18}  {:<6}  {}",
                format!("{:#x}", w.at),
                w.len,
                j.function
            ),
            Err(why) => println!(
                "{:>18}  {:<6}  {}  [refused: {why}]",
                format!("{:#x}", j.entry),
                "-",
                j.function
            ),
        }
    }
    if all {
        for s in found.usable() {
            let named = match request {
                prologue::Asked::Named(f) => f(&s.symbol),
                prologue::Asked::Hooked => false,
            };
            if named {
                println!(
                    "{:>18}  {:<6}  {}  [patchable entry: {}]",
                    format!("{:#x}", s.addr),
                    "-",
                    s.function,
                    s.kind.as_ref().map(|k| k.name()).unwrap_or("-")
                );
            }
        }
    }
    let kept = judged
        .patchable()
        .filter(|(_, w)| !w.kept.is_empty())
        .count();
    if kept > 0 {
        println!("# kept: {kept} (called directly: their stubs keep registers across the call)");
    }
    for (why, n) in judged.refusals() {
        println!("# refused: {n} ({why})");
    }
    println!(
        "# {} of {asked} functions patchable",
        patchable + judged.with_site
    );
    if asked == 0 {
        return Err(format!("{}: {what} matches no function", file.display()));
    }
    Ok(ExitCode::SUCCESS)
}

/// Before `record -P PATS PROGRAM` starts it: an error when the patterns
/// name no library and patch nothing in the program, which has no
/// patchable entry either (the error `sites -P` would say it with).
pub(crate) fn check_patch(program: &Path, patch: &[String]) -> Result<(), String> {
    let patterns: Vec<Pattern> = patch
        .iter()
        .filter_map(|p| prologue::parse_pattern(p).ok())
        .collect();
    if patterns.is_empty() || patterns.iter().any(|p| p.module().is_some()) {
        return Ok(());
    }
    let found = shadowgraph::elf::scan_file(program).map_err(|e| e.to_string())?;
    if found.usable().next().is_some() {
        return Ok(());
    }
    let data =
        std::fs::read(program).map_err(|e| format!("{}: cannot read: {e}", program.display()))?;
    let named = |sym: &str| prologue::wanted(&patterns, program, true, sym);
    let judged = prologue::judge(program, &data, &[], prologue::Asked::Named(&named))
        .map_err(|e| e.to_string())?;
    if judged.patchable().next().is_some() {
        return Ok(());
    }
    Err(format!(
        "{}: -P {} patched no function (`shadowgraph sites -P PAT {}` tells why)",
        program.display(),
        patch.join(" -P "),
        program.display()
    ))
}
