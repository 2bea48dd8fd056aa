//! `shadowgraph`: the command-line tool. Thin: parsing, running the traced
//! program under the agent, printing. The work is in the `shadowgraph` crate.

mod bench;
mod run;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "shadowgraph",
    version,
    about = "Function tracing for native programs, ftrace-style"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the bundled sample C program, trace it, print what was traced.
    Demo {
        /// Keep the build directory here instead of a temporary one.
        #[arg(long)]
        keep: Option<PathBuf>,
    },
    /// List the patchable sites of an executable or shared library.
    Sites {
        file: PathBuf,
        /// Also list rejected sites (with the reason).
        #[arg(long)]
        all: bool,
    },
    /// Run a program with every function call counted; print the counts.
    Count {
        /// Show only the N most called functions (0: all).
        #[arg(long, default_value_t = 0)]
        top: usize,
        /// Count through function-graph tracing: entries and returns (the
        /// return of every call is hijacked, as the graph tracers do).
        #[arg(long)]
        graph: bool,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        program: Vec<String>,
    },
    /// Benchmarks (not timed tests): `bench patch`.
    Bench {
        #[command(subcommand)]
        which: bench::Which,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { keep } => run::demo(keep),
        Command::Sites { file, all } => sites(&file, all),
        Command::Count {
            top,
            graph,
            program,
        } => run::count(&program, top, graph),
        Command::Bench { which } => bench::run(which),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shadowgraph: {e}");
            ExitCode::FAILURE
        }
    }
}

fn sites(file: &std::path::Path, all: bool) -> Result<ExitCode, String> {
    let found = shadowgraph::elf::scan_file(file).map_err(|e| e.to_string())?;
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
