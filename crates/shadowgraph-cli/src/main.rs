//! `shadowgraph`: the command-line tool. Thin: parsing, running the traced
//! program under the agent, printing. The work is in the `shadowgraph` crate.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod attach;
mod bench;
mod children;
mod count;
mod demo;
mod launch;
mod live;
mod logfile;
mod net;
mod options;
mod output;
mod record;
mod replay_args;
mod sched;
mod script;
mod sites;
mod sysinfo;
mod view_filter;

use view_filter::ViewFilter;

use clap::{Parser, Subcommand};
use output::{view, view_merged, view_with_sessions};
use shadowgraph_data::dir::{DataDir, OpenOptions};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "shadowgraph",
    version,
    about = "Function tracing for native programs, ftrace-style",
    override_usage = "shadowgraph <COMMAND>\n       shadowgraph [RECORD OPTIONS] PROGRAM [ARGS]...   (as `shadowgraph live`)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Write shadowgraph's messages (and the agent's, in the traced
    /// program) to FILE, appended, instead of standard error.
    #[arg(long, global = true, value_name = "FILE")]
    logfile: Option<PathBuf>,
    /// Say debug lines too (up to three times, more each time).
    #[arg(short = 'v', long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// The same as -v.
    #[arg(long, global = true)]
    debug: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Build the bundled sample C program, trace it, print what was traced.
    Demo {
        /// Keep the build directory here instead of a temporary one.
        #[arg(long)]
        keep: Option<PathBuf>,
    },
    /// Remove what recordings killed before their end left behind: the
    /// threads' ring buffers (in /dev/shm, else the temporary directory)
    /// of `record` processes that are gone (`record` does this too as it
    /// starts; live recordings' are kept); and the agents that other
    /// builds of shadowgraph wrote out.
    Clean,
    /// (Started by `record -p`, not by hand.) Holds process PID's threads
    /// whenever the agent asks on SOCKET, until it closes it: how a
    /// recording whose `shadowgraph` was killed still ends without `int3`.
    #[command(hide = true)]
    HoldFor {
        /// The attached process.
        pid: i32,
        /// Its agent's control socket.
        socket: PathBuf,
    },
    /// List the patchable sites of an executable or shared library.
    Sites {
        /// The executable or shared library to scan (what `record` would
        /// patch in it: each function with a patchable entry, and its kind).
        file: PathBuf,
        /// Also list rejected sites (with the reason).
        #[arg(long)]
        all: bool,
        /// List instead the functions `record -P PAT` would patch at their
        /// ordinary prologue, and those it would refuse, with the reason
        /// (`.`: every function; repeatable; `!PAT` takes back).
        #[arg(short = 'P', long = "patch", value_name = "PAT", value_parser = parse_patch_pattern)]
        patch: Vec<shadowgraph_data::pattern::Pattern>,
    },
    /// Run a program with every function call counted; print the counts.
    Count {
        /// Show only the N most called functions (0: all).
        #[arg(long, default_value_t = 0)]
        top: usize,
        /// Count through function-graph tracing: entries and returns (the
        /// return of every call comes back through fgraph, as the graph
        /// tracers' do).
        #[arg(long)]
        graph: bool,
        /// With --graph: hijack return addresses instead of returning
        /// through site stubs (to compare them).
        #[arg(long, hide = true)]
        hijack_returns: bool,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        program: Vec<String>,
    },
    /// Run a program (or attach to a running one, -p) and record every
    /// call's entry and exit (with times) into a data directory.
    Record {
        /// Data directory (an existing one is renamed to DIR.old).
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        #[command(flatten)]
        opts: options::RecordOptions,
        #[command(flatten)]
        attach: options::AttachOptions,
        #[command(flatten)]
        net: options::NetOptions,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, required_unless_present = "pid")]
        program: Vec<String>,
    },
    /// Receive recordings that `record --host` sends (uftrace's `recv`),
    /// each into a directory of the name it was sent with, until killed.
    Recv {
        /// Where the received directories go (made if missing; left at its
        /// default name, the current directory, as uftrace's).
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        /// The port to listen on.
        #[arg(long, value_name = "PORT", default_value_t = options::DEFAULT_PORT)]
        port: u16,
        /// A shell command run in the receiving directory once each
        /// recording is whole (e.g. `shadowgraph replay -d NAME`).
        #[arg(long, value_name = "COMMAND")]
        run_cmd: Option<String>,
        #[command(flatten)]
        _common: options::UftraceCommon,
    },
    /// Print the recorded call graph with durations (uftrace's layout).
    Replay {
        /// Data directory.
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        #[command(flatten)]
        look: replay_args::ReplayLook,
        /// Taken for uftrace's command lines (the program the recording
        /// was made of): not read.
        #[arg(hide = true, trailing_var_arg = true)]
        _program: Vec<String>,
        #[command(flatten)]
        filter: ViewFilter,
    },
    /// Total time, self time and calls per function.
    Report {
        /// Data directory.
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        /// Sort by these keys, in turn (comma-separated): total, self, call,
        /// func, total-avg, total-min, total-max, self-avg, self-min,
        /// self-max; with --avg-total or --avg-self, avg, min and max too
        /// [default: total; with --avg-*, avg].
        #[arg(short = 's', long = "sort")]
        sort: Option<String>,
        /// The columns (uftrace's): total, total-avg, total-min, total-max,
        /// self, self-avg, self-min, self-max, call; `+F,…` adds to the
        /// default ones; `all`; `none`. Shown in that order.
        #[arg(short = 'f', long = "output-fields", value_name = "FIELDS")]
        fields: Option<String>,
        /// Average, least and most time of a call in place of the default
        /// columns.
        #[arg(long, conflicts_with = "avg_self")]
        avg_total: bool,
        /// Average, least and most self time of a call in place of the
        /// default columns.
        #[arg(long)]
        avg_self: bool,
        /// One row per thread and function.
        #[arg(long, conflicts_with = "diff")]
        threads: bool,
        /// One row per task (thread): the time its calls cover, that less
        /// its time off the processor, its calls (uftrace's `report
        /// --task`; `-f` takes total, self, func, tid).
        #[arg(long, conflicts_with_all = ["diff", "threads"])]
        task: bool,
        /// How the recording in DIFF differs from this one (uftrace's
        /// `report --diff`): total, self time and calls of each function in
        /// both and the change, largest changes first.
        #[arg(long, value_name = "DIFF")]
        diff: Option<PathBuf>,
        /// With --diff: abs or no-abs (sort by the size of a change, or
        /// increases first), percent or no-percent, full (both values beside
        /// each change) or compact; comma-separated.
        #[arg(long, value_name = "POLICY", requires = "diff", value_parser = shadowgraph_data::diff::DiffPolicy::parse)]
        diff_policy: Option<shadowgraph_data::diff::DiffPolicy>,
        /// With --diff: sort by the first recording's values (0), the
        /// second's (1) or the changes (2, the default).
        #[arg(long, value_name = "INDEX", requires = "diff", value_parser = clap::value_parser!(u8).range(0..=2))]
        sort_column: Option<u8>,
        /// Taken for uftrace's command lines (the program the recording
        /// was made of): not read.
        #[arg(hide = true, trailing_var_arg = true)]
        _program: Vec<String>,
        #[command(flatten)]
        filter: ViewFilter,
    },
    /// The call paths to a function and its call tree, aggregated; without
    /// a function, the whole program's call tree.
    Graph {
        /// Data directory.
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        /// The function (none: the whole program, under its name).
        function: Option<String>,
        /// Columns left of the tree, as uftrace's `graph -f`: total, self,
        /// addr; comma-separated, `+LIST` to add to the default (total),
        /// or `none`.
        #[arg(short = 'f', long = "output-fields", value_name = "FIELDS", value_parser = parse_graph_fields)]
        fields: Option<GraphFields>,
        /// The tasks instead: who made whom (processes, threads), each's
        /// lifetime and that less its time off the processor (uftrace's
        /// `graph --task`).
        #[arg(long)]
        task: bool,
        #[command(flatten)]
        filter: ViewFilter,
    },
    /// What a recording says about the machine, the run and itself
    /// (uftrace's `info` layout).
    Info {
        /// Data directory.
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        /// Each task (thread) of the recording: when it began, whether it
        /// is a process (F) and a session's first (S), its name, the size
        /// of its records (uftrace's `info --task`).
        #[arg(long)]
        task: bool,
        #[command(flatten)]
        _common: options::UftraceCommon,
        /// Taken for uftrace's command lines (the program the recording
        /// was made of): not read.
        #[arg(hide = true, trailing_var_arg = true)]
        _program: Vec<String>,
    },
    /// Write the recording in another format.
    Dump {
        /// Data directory.
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        /// Chrome trace-event JSON (chrome://tracing, Perfetto's UI).
        #[arg(long, conflicts_with_all = ["flame_graph", "perfetto"])]
        chrome: bool,
        /// A Perfetto trace (protobuf TrackEvents, interned names, one track
        /// per thread): for big traces in ui.perfetto.dev.
        #[arg(long, conflicts_with = "flame_graph")]
        perfetto: bool,
        /// Folded stacks weighted by self time (ns), for flame graphs.
        #[arg(long)]
        flame_graph: bool,
        /// With --flame-graph: render the SVG (inferno) instead of the
        /// folded text.
        #[arg(long)]
        svg: bool,
        /// With --flame-graph: weights in samples of TIME (a path's self
        /// time over TIME, callees' time taken from their callers in whole
        /// samples), as uftrace's `--sample-time`.
        #[arg(long, value_name = "TIME", requires = "flame_graph", value_parser = options::parse_duration_ns)]
        sample_time: Option<u64>,
        /// The whole program's call graph as a Graphviz digraph (`dot`).
        #[arg(long, conflicts_with_all = ["chrome", "perfetto", "flame_graph"])]
        graphviz: bool,
        /// The whole program's call graph as a Mermaid flowchart in an HTML
        /// page.
        #[arg(long, conflicts_with_all = ["chrome", "perfetto", "flame_graph", "graphviz"])]
        mermaid: bool,
        /// Taken for uftrace's command lines (the program the recording
        /// was made of): not read.
        #[arg(hide = true, trailing_var_arg = true)]
        _program: Vec<String>,
        #[command(flatten)]
        filter: ViewFilter,
    },
    /// Convert a recording into uftrace's data format (`uftrace replay -d OUT`).
    Export {
        /// Data directory.
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        /// Output directory (uftrace format).
        #[arg(long = "uftrace", required = true)]
        uftrace: PathBuf,
    },
    /// Run a Python script's callbacks over a recording (uftrace's
    /// `script`: uftrace_begin, uftrace_entry, uftrace_exit, uftrace_event,
    /// uftrace_end, and UFTRACE_FUNCS).
    Script {
        /// Data directory.
        #[arg(short = 'd', long = "data", default_value = "shadowgraph.data")]
        data: PathBuf,
        /// The script (`.py`, run by the system's python3).
        #[arg(short = 'S', long = "script", required = true)]
        script: PathBuf,
        /// Record the program (ARGS) first, with the options the script
        /// names in a `# uftrace-option: …` line.
        #[arg(long)]
        record: bool,
        #[command(flatten)]
        filter: ViewFilter,
        /// With --record, the program and its arguments; else what
        /// uftrace_begin sees as `cmds`.
        #[arg(trailing_var_arg = true)]
        args: Vec<String>,
    },
    /// Record a program into a temporary directory and replay it at exit.
    Live {
        #[command(flatten)]
        opts: options::RecordOptions,
        #[command(flatten)]
        attach: options::AttachOptions,
        #[command(flatten)]
        view: replay_args::LiveView,
        /// The program and its arguments.
        #[arg(trailing_var_arg = true, required_unless_present = "pid")]
        program: Vec<String>,
    },
    /// Benchmarks: `bench patch`, `bench dispatch`, `bench fgraph`,
    /// `bench record`, `bench ir` (from a workspace build; see `bench
    /// --help`).
    #[command(disable_help_flag = true)]
    Bench {
        /// What `shadowgraph-bench` takes.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// `shadowgraph PROGRAM [ARGS]`, or with record options first, is
/// `shadowgraph live …`, as uftrace without a command: `live` goes in
/// front of anything that is not a command or a top-level option.
fn live_by_default(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let Some(first) = args.get(1).and_then(|a| a.to_str()) else {
        return args;
    };
    let cli = Cli::command();
    let known = cli
        .get_subcommands()
        .flat_map(|c| std::iter::once(c.get_name()).chain(c.get_all_aliases()))
        .chain(["help", "-h", "--help", "-V", "--version"])
        .any(|k| k == first);
    if !known {
        args.insert(1, "live".into());
    }
    args
}

/// The data directory the commands take by default: `shadowgraph.data`,
/// or uftrace's `uftrace.data` when run as `uftrace` (a link of that name),
/// so that scripts written for uftrace find their recordings.
fn default_data_dir(args: &[std::ffi::OsString]) -> &'static str {
    let me = args.first().map(std::path::Path::new);
    match me.and_then(|p| p.file_name()) {
        Some(n) if n == "uftrace" => "uftrace.data",
        _ => "shadowgraph.data",
    }
}

fn main() -> ExitCode {
    // Like other Unix tools: a closed pipe (`| head`) ends us quietly.
    // SAFETY: restoring the default disposition of SIGPIPE.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    use clap::{CommandFactory, FromArgMatches};
    let args = live_by_default(std::env::args_os().collect());
    let args = options::expand_opt_file(&Cli::command(), args);
    // (Patterns are parsed with the options: --match first.)
    options::MatchArg::apply_from(&args);
    // An option given twice is taken once, the last one winning (as
    // uftrace's command lines take them).
    let dir = default_data_dir(&args);
    let matches = Cli::command()
        .mut_subcommands(|s| {
            let s = s.args_override_self(true);
            let has_data = s.get_arguments().any(|a| a.get_id() == "data");
            match has_data {
                true => s.mut_arg("data", |a| a.default_value(dir)),
                false => s,
            }
        })
        .get_matches_from(args);
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let verbose = cli.verbose.max(u8::from(cli.debug));
    if let Err(e) = logfile::start(cli.logfile.as_deref(), verbose) {
        eprintln!("shadowgraph: {e}");
        return ExitCode::FAILURE;
    }
    // -P and -U, -F and -N in the order given.
    if let Some((_, sub)) = matches.subcommand() {
        match &mut cli.command {
            Command::Record { opts, .. } | Command::Live { opts, .. } => {
                opts.order_patches(sub);
                opts.order_filters(sub);
                // (uftrace's later spelling of --disable.)
                opts.disable |= opts.trace.as_deref() == Some("off");
            }
            Command::Replay { filter, .. }
            | Command::Report { filter, .. }
            | Command::Graph { filter, .. }
            | Command::Dump { filter, .. }
            | Command::Script { filter, .. } => filter.order(sub),
            _ => {}
        }
    }
    let result = match cli.command {
        Command::Demo { keep } => demo::demo(keep),
        Command::HoldFor { pid, socket } => {
            attach::record::hold_for(pid, &socket);
            Ok(ExitCode::SUCCESS)
        }
        Command::Clean => {
            launch::clean();
            Ok(ExitCode::SUCCESS)
        }
        Command::Sites { file, all, patch } if patch.is_empty() => sites::sites(&file, all),
        Command::Sites { file, all, patch } => sites::prologues(&file, &patch, all),
        Command::Count {
            top,
            graph,
            hijack_returns,
            program,
        } => count::count(&program, top, graph, hijack_returns),
        Command::Record {
            opts,
            attach: options::AttachOptions { pid: Some(pid), .. },
            ..
        } if opts.keep_pid => Err(format!(
            "--keep-pid keeps the process id of a program record starts; process {pid} \
             (-p) keeps its own"
        )),
        // A program recorded with -g: its recording is told, not attached.
        Command::Record {
            opts,
            attach: options::AttachOptions { pid: Some(pid), .. },
            ..
        }
        | Command::Live {
            opts,
            attach: options::AttachOptions { pid: Some(pid), .. },
            ..
        } if attach::agent::listening(pid) => attach::agent::forward(pid, opts.trace.as_deref()),
        Command::Record {
            data,
            opts,
            attach,
            net:
                options::NetOptions {
                    host: Some(host),
                    port,
                },
            program,
        } => net::record_and_send(&data, &opts, &attach, &program, (&host, port)),
        Command::Record {
            data,
            opts,
            attach,
            program,
            ..
        } => attach::record::record_or_attach(&data, &opts, &attach, &program),
        Command::Recv {
            data,
            port,
            run_cmd,
            ..
        } => {
            let default =
                data.as_os_str() == default_data_dir(&std::env::args_os().collect::<Vec<_>>());
            net::recv(&data, default, port, run_cmd.as_deref()).map(|()| ExitCode::SUCCESS)
        }
        Command::Script {
            data,
            script,
            record,
            filter,
            args,
        } => script::script(&script, &data, record, &filter.into(), &args),
        Command::Replay {
            data, look, filter, ..
        } => {
            let how = filter.open_options();
            let (srcline, libname) = (filter.srcline, filter.libname);
            let filter: shadowgraph_data::replay::ReplayFilter = filter.into();
            let (fields, look_) = look.columns(&filter, srcline, libname);
            view_merged(&data, how, |ds, o| match look.flat {
                true => shadowgraph_data::replay::replay_flat(ds, &filter, o),
                false => shadowgraph_data::replay::replay_sessions(ds, &filter, &fields, look_, o),
            })
        }
        Command::Report {
            data,
            fields,
            task: true,
            filter,
            ..
        } => {
            use shadowgraph_data::report_task::{report_tasks, TaskField};
            let fields = match fields.as_deref() {
                Some(f) => TaskField::parse_list(f).map_err(|e| format!("-f {e}")),
                None => Ok(TaskField::DEFAULT.to_vec()),
            };
            let how = filter.open_options();
            let f = filter.into();
            fields.and_then(|fields| view(&data, how, |d, o| report_tasks(d, &fields, &f, o)))
        }
        Command::Report {
            data,
            sort,
            fields,
            avg_total,
            avg_self,
            threads,
            diff,
            diff_policy,
            sort_column,
            filter,
            ..
        } => {
            use shadowgraph_data::report::Averages;
            let averages = match (avg_total, avg_self) {
                _ if fields.is_some() && (avg_total || avg_self) => {
                    eprintln!(
                        "shadowgraph: warning: --avg-total and --avg-self are ignored with -f"
                    );
                    Averages::None
                }
                (true, _) => Averages::Total,
                (_, true) => Averages::SelfTime,
                _ => Averages::None,
            };
            let how = filter.open_options();
            let policy = diff_policy.unwrap_or_default();
            let columns = Columns {
                sort: sort.as_deref(),
                fields: fields.as_deref(),
                averages,
                srcline: filter.srcline,
                policy: shadowgraph_data::diff::DiffPolicy {
                    column: sort_column.unwrap_or(2),
                    ..policy
                },
            };
            report(
                &data,
                how,
                columns,
                threads,
                diff.as_deref(),
                &filter.into(),
            )
        }
        Command::Dump {
            data,
            chrome,
            perfetto,
            flame_graph,
            svg,
            sample_time,
            graphviz,
            mermaid,
            filter,
            ..
        } => {
            use shadowgraph_data::{chrome, dump, flame, perfetto as pf};
            let how = filter.open_options();
            let f: shadowgraph_data::replay::ReplayFilter = filter.into();
            // Each program started by exec in the same dump.
            match (chrome, perfetto, flame_graph, svg) {
                _ if graphviz => view_merged(&data, how, |d, o| dump::dump_graphviz(d, &f, o)),
                _ if mermaid => view_merged(&data, how, |d, o| dump::dump_mermaid(d, &f, o)),
                (_, _, false, true) => {
                    Err("--svg renders a flame graph: use it with --flame-graph".to_string())
                }
                (_, _, true, true) => output::flame_svg(&data, how, &f, sample_time),
                (_, _, true, false) => view_merged(&data, how, |d, o| {
                    flame::dump_flame_graph_sampled(d, &f, sample_time, o)
                }),
                (_, true, _, _) => view_merged(&data, how, |d, o| pf::dump_perfetto(d, &f, o)),
                (true, _, _, _) => view_merged(&data, how, |d, o| chrome::dump_chrome(d, &f, o)),
                _ => view_merged(&data, how, |d, o| dump::dump_text_of(d, &f, o)),
            }
        }
        Command::Live {
            opts,
            attach,
            view,
            program,
        } => live::live(&opts, &view, |dir| match attach.pid {
            Some(pid) => attach::record::record_attached(dir, &opts, pid, attach.duration),
            None => record::record(dir, &opts, &program),
        }),
        Command::Graph {
            data,
            function,
            fields,
            task,
            filter,
        } => {
            use shadowgraph_data::graph::GraphField;
            let fields = fields.map_or_else(|| GraphField::DEFAULT.to_vec(), |f| f.0);
            let how = filter.open_options();
            let srcline = filter.srcline;
            let f = filter.into();
            match task {
                true => view(&data, how, |d, o| {
                    shadowgraph_data::task_graph::task_graph(d, &f, o)
                }),
                // Each program started by exec a graph of its own.
                false => output::view_merged(&data, how, |ds, o| {
                    let look = (srcline, &fields[..]);
                    shadowgraph_data::graph::graph_sessions(ds, function.as_deref(), &f, look, o)
                }),
            }
        }
        Command::Info { data, task, .. } => {
            let d = shadowgraph_data::dir::DataDir::open(&data).map_err(|e| e.to_string());
            d.and_then(|d| {
                let mut out = std::io::stdout().lock();
                match task {
                    true => shadowgraph_data::info::task_info(&d, &mut out),
                    false => shadowgraph_data::info::info(&d, &mut out),
                }
                .map_err(|e| e.to_string())
            })
            .map(|()| ExitCode::SUCCESS)
        }
        Command::Export { data, uftrace } => {
            let d = shadowgraph_data::dir::DataDir::open(&data).map_err(|e| e.to_string());
            d.and_then(|d| {
                shadowgraph_data::uftrace::export(&d, &uftrace).map_err(|e| e.to_string())
            })
            .map(|()| ExitCode::SUCCESS)
        }
        Command::Bench { args } => bench::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("shadowgraph: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `graph -f`'s columns (one value to clap, not a list of values).
#[derive(Clone, Debug)]
struct GraphFields(Vec<shadowgraph_data::graph::GraphField>);

fn parse_graph_fields(spec: &str) -> Result<GraphFields, String> {
    shadowgraph_data::graph::GraphField::parse_list(spec).map(GraphFields)
}

fn parse_patch_pattern(p: &str) -> Result<shadowgraph_data::pattern::Pattern, String> {
    shadowgraph::prologue::parse_pattern(p).map_err(|e| e.to_string())
}

/// `report`'s columns and order, as given.
struct Columns<'a> {
    sort: Option<&'a str>,
    fields: Option<&'a str>,
    averages: shadowgraph_data::report::Averages,
    srcline: bool,
    /// `--diff-policy` and `--sort-column`.
    policy: shadowgraph_data::diff::DiffPolicy,
}

fn report(
    dir: &std::path::Path,
    how: OpenOptions,
    columns: Columns<'_>,
    threads: bool,
    diff: Option<&std::path::Path>,
    filter: &shadowgraph_data::replay::ReplayFilter,
) -> Result<ExitCode, String> {
    use shadowgraph_data::report::{Averages, Layout, SortKey};
    let mut layout = Layout::parse(columns.fields, columns.sort, columns.averages)?;
    layout.srcline = columns.srcline;
    // A diff's columns: of total, self and call.
    let diff_columns = match (diff, columns.fields) {
        (Some(_), Some(f)) => shadowgraph_data::diff::DiffColumn::parse_list(f)?,
        _ => shadowgraph_data::diff::DiffColumn::ALL.to_vec(),
    };
    let plain = (columns.fields.is_none() || diff.is_some()) && columns.averages == Averages::None;
    // Per thread, a diff and a profile: the default columns, one key.
    let key = match (plain, &layout.keys[..]) {
        (true, [k @ (SortKey::Total | SortKey::SelfTime | SortKey::Calls | SortKey::Name)]) => *k,
        // (Rows of equal keys are in name order anyway: `-s call,func`.)
        (true, [k @ (SortKey::Total | SortKey::SelfTime | SortKey::Calls), SortKey::Name]) => *k,
        _ if threads || diff.is_some() => {
            return Err(
                "--threads and --diff show the default columns, sorted by one of total, self, \
                 call, func"
                    .into(),
            )
        }
        _ => SortKey::Total,
    };
    let data = DataDir::open_with(dir, how.clone()).map_err(|e| e.to_string())?;
    if let Some(other) = diff {
        use shadowgraph_data::profile::is_profile;
        let other = DataDir::open_with(other, how).map_err(|e| e.to_string())?;
        if let Some(d) = [&data, &other].into_iter().find(|d| is_profile(d)) {
            return Err(format!(
                "{} holds a profile: --diff compares recordings of calls",
                d.dir.display()
            ));
        }
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        let policy = columns.policy;
        let result = shadowgraph_data::diff::report_diff_of(
            &data,
            &other,
            (key, &diff_columns),
            policy,
            filter,
            &mut out,
        )
        .and_then(|()| {
            use std::io::Write;
            out.flush()
                .map_err(shadowgraph_data::replay::ReplayError::Io)
        });
        for w in data.warnings().into_iter().chain(other.warnings()) {
            eprintln!("shadowgraph: warning: {w}");
        }
        return result
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| e.to_string());
    }
    if shadowgraph_data::profile::is_profile(&data) {
        if !plain || layout.keys.len() > 1 {
            return Err(format!(
                "{} holds a profile: it shows the default columns, sorted by one of total, \
                 self, call, func",
                dir.display()
            ));
        }
        if !filter.triggers.is_empty()
            || filter.disabled
            || filter.max_depth > 0
            || filter.min_ns > 0
        {
            return Err(format!(
                "{} holds a profile (no call records): -F/-N/-T/-D/-t do not apply (--tid and -s do)",
                dir.display()
            ));
        }
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        return shadowgraph_data::profile::report(&data, key, threads, &filter.tids, &mut out)
            .and_then(|()| {
                use std::io::Write;
                out.flush()
                    .map_err(shadowgraph_data::replay::ReplayError::Io)
            })
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| e.to_string());
    }
    drop(data);
    if threads {
        return view_with_sessions(dir, how, |d, o| {
            shadowgraph_data::report::report(d, key, threads, filter, o)
        });
    }
    view_merged(dir, how, |ds, o| {
        shadowgraph_data::report::report_sessions(ds, &layout, filter, o)
    })
}
