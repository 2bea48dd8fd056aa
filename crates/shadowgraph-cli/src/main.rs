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
    /// Run a program and record every call's entry and exit (with times)
    /// into a data directory.
    Record {
        /// Data directory (an existing one is renamed to DIR.old).
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        program: Vec<String>,
    },
    /// Print the recorded call graph with durations (uftrace's layout).
    Replay {
        /// Data directory.
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
    },
    /// Benchmarks (not timed tests): `bench patch`, `bench dispatch`, `bench fgraph`.
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
        Command::Record { data, program } => run::record(&data, &program),
        Command::Replay { data } => replay(&data),
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

fn replay(dir: &std::path::Path) -> Result<ExitCode, String> {
    use std::io::Write;
    let data = shadowgraph::record::data::DataDir::open(dir).map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match shadowgraph::record::replay::replay(&data, &mut out) {
        Ok(()) => {}
        // A closed pipe (`| head`) ends the output quietly.
        Err(shadowgraph::record::replay::ReplayError::Io(e))
            if e.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            return Ok(ExitCode::SUCCESS)
        }
        Err(e) => return Err(e.to_string()),
    }
    let _ = out.flush();
    Ok(ExitCode::SUCCESS)
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
