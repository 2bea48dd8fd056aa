//! `count`: the program run with every call of every traced function
//! counted, and the counts shown.

use crate::launch::{agent_path, exit_code, find_program, preload, returns, tempfile, text_write};
use shadowgraph::config::{self, Config};
use std::path::Path;
use std::process::{Command, ExitCode};

/// One line of the agent's count report.
pub(crate) struct Counted {
    pub module: String,
    pub function: String,
    pub calls: u64,
    /// Returns seen (graph mode only).
    pub returns: Option<u64>,
}

/// Runs `program` with every call counted (through fgraph when `graph`).
/// Returns its exit status, the counts and the report's summary line.
pub(crate) fn run_counted(
    program: &[String],
    graph: bool,
    hijack_returns: bool,
) -> Result<(std::process::ExitStatus, Vec<Counted>, String), String> {
    let (prog, args) = program.split_first().ok_or("no program given")?;
    let path = find_program(prog)?;
    let found = shadowgraph::elf::scan_file(&path).map_err(|e| e.to_string())?;
    found
        .require_traceable_program()
        .map_err(|e| e.to_string())?;
    let agent = agent_path()?;
    let out = tempfile("counts")?;
    let config = Config {
        mode: config::Mode::Count(config::Count {
            report: Some(out.clone()),
            graph,
        }),
        objects: config::Objects::All,
        patch: Vec::new(),
        stack_bytes: None,
        returns: returns(hijack_returns),
        text_write: text_write()?,
        with_syms: None,
        pattern_match: None,
        log_fd: crate::logfile::agent_fd(),
        verbose: crate::logfile::verbose(),
        lineage: Default::default(),
    };
    let mut command = Command::new(&path);
    crate::logfile::program_stderr(&mut command);
    let status = std::os::unix::process::CommandExt::arg0(&mut command, prog)
        .args(args)
        .env("LD_PRELOAD", preload(&agent))
        .env(config::ENV, config.to_env_value())
        .status()
        .map_err(|e| format!("cannot run {prog}: {e}"))?;
    let text = std::fs::read_to_string(&out).map_err(|_| {
        format!("{prog} produced no trace (exited with {status} before the agent reported; see messages above)")
    })?;
    let _ = std::fs::remove_file(&out);
    let mut counts = Vec::new();
    let mut summary = String::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(s) = line.strip_prefix("# sites=") {
            summary = format!("sites={s}");
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| format!("{}: line {}: {what}", out.display(), n + 1);
        let num = |v: &str| v.parse::<u64>().map_err(|_| bad("bad count"));
        let f: Vec<&str> = line.split('\t').collect();
        let (module, function, calls, returns) = match f[..] {
            [m, func, _addr, c] => (m, func, num(c)?, None),
            [m, func, _addr, c, r] => (m, func, num(c)?, Some(num(r)?)),
            _ => return Err(bad("malformed agent report")),
        };
        counts.push(Counted {
            module: module.to_string(),
            function: function.to_string(),
            calls,
            returns,
        });
    }
    Ok((status, counts, summary))
}

pub(crate) fn count(
    program: &[String],
    top: usize,
    graph: bool,
    hijack_returns: bool,
) -> Result<ExitCode, String> {
    let (status, mut counts, summary) = run_counted(program, graph, hijack_returns)?;
    counts.sort_by(|a, b| b.calls.cmp(&a.calls).then(a.function.cmp(&b.function)));
    print_counts(&counts, top);
    eprintln!("# {summary}");
    Ok(exit_code(status))
}

pub(crate) fn print_counts(counts: &[Counted], top: usize) {
    let graph = counts.iter().any(|c| c.returns.is_some());
    if graph {
        println!("{:>12} {:>12}  FUNCTION", "CALLS", "RETURNS");
    } else {
        println!("{:>12}  FUNCTION", "CALLS");
    }
    let n = if top == 0 {
        counts.len()
    } else {
        top.min(counts.len())
    };
    for c in &counts[..n] {
        let module = Path::new(&c.module)
            .file_name()
            .map(|f| f.to_string_lossy())
            .unwrap_or_default();
        match c.returns {
            Some(r) => println!("{:>12} {:>12}  {}  [{}]", c.calls, r, c.function, module),
            None => println!("{:>12}  {}  [{}]", c.calls, c.function, module),
        }
    }
    let open = counts
        .iter()
        .filter(|c| c.returns.is_some_and(|r| r != c.calls))
        .count();
    if open > 0 {
        println!("# {open} functions were still running when the report was written");
    }
}
