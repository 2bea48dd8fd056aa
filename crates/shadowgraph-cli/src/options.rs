//! `record`'s options (and `live`'s), checked and turned into the
//! session's configuration.

use crate::launch::{returns, text_write};

mod args;
mod run;
mod values;

pub(crate) use run::{expand_opt_file, time_lines};
use values::{depth_within, parse_trigger, stack_bytes_for};
pub(crate) use values::{parse_buffer_size, parse_duration_ns, parse_max_stack, parse_seconds_ns};

use shadowgraph::config::{self, Config, TracerKind};
use std::path::{Path, PathBuf};

/// `record -p` and `live -p`: a running process instead of a program.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct AttachOptions {
    /// Attach to the running process PID instead of starting a program;
    /// the recording ends at --duration, on Ctrl-C, or when it exits.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "program"
    )]
    pub pid: Option<i32>,
    /// With -p: end the recording after TIME (e.g. 500ms, 2s; a number
    /// alone is seconds, as `timeout` takes it).
    #[arg(long, value_name = "TIME", requires = "pid", value_parser = parse_seconds_ns)]
    pub duration: Option<u64>,
}

/// uftrace's common options where a command has no use for them (its
/// test runner gives them to every command): taken, not read.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct UftraceCommon {
    /// The output is never paged.
    #[arg(long, hide = true)]
    no_pager: bool,
    /// Events are what the recording holds.
    #[arg(long, hide = true)]
    no_event: bool,
    /// The agent is shadowgraph's own, built in.
    #[arg(long, value_name = "PATH", hide = true)]
    libmcount_path: Option<PathBuf>,
}

/// uftrace's default port for `recv` and `record --host`.
pub(crate) const DEFAULT_PORT: u16 = 8090;

/// Where `record` sends its recording (uftrace's `--host`, `--port`).
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct NetOptions {
    /// Send the recording to a `recv` on HOST (kept there under the data
    /// directory's name, not here) once it is complete.
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// The port `recv` listens on.
    #[arg(long, value_name = "PORT", default_value_t = DEFAULT_PORT)]
    pub port: u16,
}

/// A `-P` pattern, checked.
fn parse_patch(p: &str) -> Result<String, String> {
    shadowgraph::prologue::parse_pattern(p)
        .map(|_| p.to_string())
        .map_err(|e| e.to_string())
}

/// `-F` and `-N` as uftrace orders them: for each function the last
/// pattern that names it decides, so a later `-F` takes back what an
/// earlier `-N` left out and a later `-N` what an earlier `-F` took in.
/// Given each list's patterns and their positions on the command line,
/// returns the lists with the other list's later patterns as `!`
/// removals, in order (a list the command line did not give stays empty;
/// `!` patterns given stay in their own list only).
pub(crate) fn ordered_filters(
    (filter, fi): (&[String], &[usize]),
    (notrace, ni): (&[String], &[usize]),
) -> (Vec<String>, Vec<String>) {
    if filter.is_empty() || notrace.is_empty() {
        return (filter.to_vec(), notrace.to_vec());
    }
    let mut all: Vec<(usize, bool, &String)> = fi
        .iter()
        .zip(filter)
        .map(|(&i, p)| (i, true, p))
        .chain(ni.iter().zip(notrace).map(|(&i, p)| (i, false, p)))
        .collect();
    all.sort_by_key(|e| e.0);
    let list = |own: bool| -> Vec<String> {
        all.iter()
            .filter(|(_, f, p)| *f == own || !p.starts_with('!'))
            .map(|(_, f, p)| {
                if *f == own {
                    p.to_string()
                } else {
                    format!("!{p}")
                }
            })
            .collect()
    };
    (list(true), list(false))
}

/// The positions of argument `id`'s values in `args`.
pub(crate) fn positions(args: &clap::ArgMatches, id: &str) -> Vec<usize> {
    args.indices_of(id).map(|i| i.collect()).unwrap_or_default()
}

impl RecordOptions {
    /// `-F` and `-N` as uftrace orders them ([`ordered_filters`]); with
    /// triggers (`-T`, `-C`, or a `-F`/`-N` pattern with actions), `-Z`,
    /// `--signal`, `--watch` (whose tracers keep the triggers' state), or
    /// `-F` with `-D` (whose limit restarts at each filter function's
    /// call, as uftrace's: the triggers' state does that), every one of
    /// them a trigger, in the order given, into `trigger`.
    pub(crate) fn order_filters(&mut self, args: &clap::ArgMatches) {
        use shadowgraph_data::trigger::{SpecKind, Trigger};
        self.take_trigger_args();
        let with_actions = |v: &[String], kind| {
            v.iter().any(|p| {
                Trigger::parse(p, kind).is_ok_and(|t| {
                    t.actions.words().len() > 1 || t.pattern.text() != p.trim_start_matches('!')
                })
            })
        };
        if self.trigger.is_empty()
            && self.hide.is_empty()
            && self.caller_filter.is_empty()
            && self.size_filter == 0
            && self.signal.is_empty()
            && self.watch.is_empty()
            && (self.depth == 0 || self.filter.is_empty())
            && !with_actions(&self.filter, SpecKind::Filter)
            && !with_actions(&self.notrace, SpecKind::Notrace)
        {
            let (f, n) = ordered_filters(
                (&self.filter, &positions(args, "filter")),
                (&self.notrace, &positions(args, "notrace")),
            );
            (self.filter, self.notrace) = (f, n);
            return;
        }
        let mut all: Vec<(usize, String)> = Vec::new();
        for (id, v, kind) in [
            ("filter", std::mem::take(&mut self.filter), SpecKind::Filter),
            (
                "notrace",
                std::mem::take(&mut self.notrace),
                SpecKind::Notrace,
            ),
            (
                "trigger",
                std::mem::take(&mut self.trigger),
                SpecKind::Trigger,
            ),
            (
                "hide",
                with_action(std::mem::take(&mut self.hide), "hide"),
                SpecKind::Trigger,
            ),
            (
                "caller_filter",
                with_action(std::mem::take(&mut self.caller_filter), "caller"),
                SpecKind::Trigger,
            ),
        ] {
            for (i, p) in positions(args, id).into_iter().zip(v) {
                all.push((i, Trigger::as_trigger_spec(&p, kind)));
            }
        }
        all.sort_by_key(|(i, _)| *i);
        // (A trigger of argument specs alone is -A/-R's now.)
        self.trigger = all
            .into_iter()
            .map(|(_, p)| p)
            .filter(|p| !p.ends_with('@'))
            .collect();
    }

    /// `-P` and `-U` patterns in the order the command line gave them
    /// (their positions in `args`), each `-U PAT` as `!PAT`, into
    /// [`RecordOptions::patch`].
    pub(crate) fn order_patches(&mut self, args: &clap::ArgMatches) {
        if self.unpatch.is_empty() {
            return;
        }
        let mut all: Vec<(usize, String)> = positions(args, "patch")
            .into_iter()
            .zip(self.patch.drain(..))
            .chain(
                positions(args, "unpatch")
                    .into_iter()
                    .zip(self.unpatch.drain(..).map(|p| format!("!{p}"))),
            )
            .collect();
        all.sort_by_key(|(i, _)| *i);
        self.patch = all.into_iter().map(|(_, p)| p).collect();
    }
}

/// `--match TYPE`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MatchArg {
    Regex,
    Glob,
}

impl MatchArg {
    fn config(self) -> config::PatternMatch {
        match self {
            MatchArg::Regex => config::PatternMatch::Regex,
            MatchArg::Glob => config::PatternMatch::Glob,
        }
    }

    /// `--match` as the command line `args` gives it (its last), taken
    /// before the options are parsed: patterns are parsed with them.
    pub(crate) fn apply_from(args: &[std::ffi::OsString]) {
        let mut m = None;
        let mut it = args.iter().map(|a| a.to_string_lossy());
        while let Some(a) = it.next() {
            if a == "--" {
                break;
            }
            let v = match a.strip_prefix("--match") {
                Some("") => it.next().map(|v| v.into_owned()),
                Some(rest) => rest.strip_prefix('=').map(str::to_string),
                None => None,
            };
            match v.as_deref() {
                Some("regex") => m = Some(config::PatternMatch::Regex),
                Some("glob") => m = Some(config::PatternMatch::Glob),
                _ => {}
            }
        }
        config::PatternMatch::apply(m);
    }
}

/// What `record` (and `live`) trace.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct RecordOptions {
    /// Record only inside these functions (a glob, a regex where the
    /// pattern has regex characters as uftrace's, /regex/; @LIB);
    /// repeatable.
    #[arg(short = 'F', long = "filter")]
    filter: Vec<String>,
    /// Record arguments of functions: FUNC@arg1,arg2/i32,fparg1,arg3/s,…
    /// (uftrace's specs: formats d i u x s c f p, sizes 8-64); repeatable.
    #[arg(short = 'A', long = "argument", value_name = "SPEC")]
    argument: Vec<String>,
    /// Record return values of functions: FUNC@retval[/FMT]; repeatable.
    #[arg(short = 'R', long = "retval", value_name = "SPEC")]
    retval: Vec<String>,
    /// Record no arguments or return values (drops -A, -R and -a).
    #[arg(long)]
    no_args: bool,
    /// Record the arguments and return values of every function of the
    /// program that has debug information (DWARF), by their types
    /// (integers, characters, strings, pointers, floating point).
    #[arg(short = 'a', long = "auto-args")]
    pub(crate) auto_args: bool,
    /// Name the functions of a stripped program or library from the `.sym`
    /// files in DIR (a recording of it made before it was stripped), for
    /// filters and the recording's names.
    #[arg(long, value_name = "DIR")]
    pub(crate) with_syms: Option<std::path::PathBuf>,
    /// Run this Python script's callbacks over the recording when it is
    /// whole (as `script -S` does; uftrace's runs them while recording).
    #[arg(short = 'S', long = "script", value_name = "FILE")]
    pub(crate) script: Option<PathBuf>,
    /// Keep where each function is declared (file:line, from the
    /// program's and libraries' DWARF) for the views' --srcline.
    #[arg(long)]
    pub(crate) srcline: bool,
    /// Record nothing inside these functions; repeatable.
    #[arg(short = 'N', long = "notrace")]
    notrace: Vec<String>,
    /// FUNC@ACTION[,ACTION…] when FUNC is called: depth=N, trace_on,
    /// trace_off, finish, filter, notrace, caller, size=N, time=T, trace,
    /// read=proc/statm, read=page-fault (and backtrace, hide, color=C,
    /// which `live` applies to what it shows); repeatable.
    #[arg(short = 'T', long = "trigger", value_parser = parse_trigger)]
    pub(crate) trigger: Vec<String>,
    /// SIG@ACTION: the signal switches tracing on or off (trace_on,
    /// trace_off) or ends it (finish), as uftrace's; repeatable.
    #[arg(long, value_parser = |v: &str| config::SignalTrigger::parse(v).map(|_| v.to_string()))]
    signal: Vec<String>,
    /// What to watch (`cpu`: the processor a thread runs on, recorded at a
    /// call's entry or return where it changed, as uftrace's `-W cpu`).
    #[arg(short = 'W', long, value_name = "POINT", value_parser = ["cpu"])]
    watch: Vec<String>,
    /// Hide these functions, their callees shown in their place (as
    /// `-T FUNC@hide`, which `live` applies to what it shows); repeatable.
    #[arg(short = 'H', long = "hide", value_name = "FUNC")]
    hide: Vec<String>,
    /// Record only the calls of these functions and the calls they are
    /// inside of, not what they call (as `-T FUNC@caller`); repeatable.
    #[arg(short = 'C', long = "caller-filter", value_name = "FUNC")]
    caller_filter: Vec<String>,
    /// Patch these functions at their ordinary prologue, for programs and
    /// libraries built without tracing flags (`.`: every function; FUNC@LIB
    /// a library's; !PAT takes back); repeatable.
    #[arg(short = 'P', long = "patch", value_name = "PAT", value_parser = parse_patch)]
    pub(crate) patch: Vec<String>,
    /// Do not patch these functions (uftrace's `-U`: `-P !PAT`); taken in
    /// turn with -P, in the order given; repeatable.
    #[arg(short = 'U', long = "unpatch", value_name = "PAT", value_parser = parse_patch)]
    pub(crate) unpatch: Vec<String>,
    /// Record at most this many nested levels (0: no limit).
    #[arg(short = 'D', long = "depth", default_value_t = 0)]
    depth: u32,
    /// Record no call of a function smaller than SIZE bytes (to the next
    /// traced function); its callees in its place.
    #[arg(
        short = 'Z',
        long = "size-filter",
        value_name = "SIZE",
        default_value_t = 0
    )]
    size_filter: u64,
    /// Record only calls lasting at least TIME (e.g. 10us, 1.5ms; ns, us,
    /// ms, s; a bare number is ns); a kept call's callers are kept too.
    #[arg(short = 't', long = "time-filter", value_name = "TIME", value_parser = parse_duration_ns)]
    time_filter: Option<u64>,
    /// Trace only the program, not its libraries.
    #[arg(long)]
    no_libs: bool,
    /// How patterns are taken, as uftrace's `--match`: regex (a regex
    /// where it has any regex character, `*` `?` `[` too), glob (always a
    /// glob); without it, a regex where it has regex characters other than
    /// a glob's, else a glob.
    #[arg(long = "match", value_name = "TYPE")]
    pub(crate) match_type: Option<MatchArg>,
    /// Record only the program's own process, not the children it forks.
    #[arg(long)]
    pub(crate) no_children: bool,
    /// Record no schedule events (uftrace's `linux:schedule`: when a
    /// thread leaves its processor and comes back, recorded by default
    /// where perf events are permitted).
    #[arg(long)]
    pub(crate) no_sched: bool,
    /// Record no events but those -E names (uftrace's `--no-event`: implies
    /// --no-sched).
    #[arg(long)]
    pub(crate) no_event: bool,
    /// Record the events EVENT names (PROVIDER:NAME, each side a pattern,
    /// as uftrace's `-E`): a user SDT marker of the program or its
    /// libraries (`STAP_PROBE`), `linux:task-name` (a thread's new name,
    /// where perf events are permitted), `linux:schedule` (recorded
    /// anyway).
    #[arg(short = 'E', long = "Event", value_name = "EVENT")]
    pub(crate) events: Vec<String>,
    /// The program keeps the process id `record` was started with (uftrace's
    /// `--keep-pid`, for daemons that must keep theirs): `record` becomes
    /// the program, and a process of its own records it (its summary comes
    /// after the program has ended, once the recording is complete).
    #[arg(long)]
    pub(crate) keep_pid: bool,
    /// Each thread's buffer (e.g. 512K, 4M; default 2M): a thread whose
    /// buffer is full waits for the writer (or, the writer behind, empties
    /// it itself), so a larger one smooths bursts.
    #[arg(short = 'b', long = "buffer", value_name = "SIZE", value_parser = parse_buffer_size)]
    pub(crate) buffer: Option<u64>,
    /// Write the records in shadowgraph's compact layout, about 3 bytes
    /// each instead of uftrace's 16: smaller files and less work for the
    /// writer. shadowgraph's views read it; uftrace does not (`export
    /// --uftrace` writes its layout).
    #[arg(long)]
    pub(crate) compact: bool,
    /// Trace calls nested up to DEPTH frames deep in each thread (default
    /// 2047; at most 32767), as uftrace's: deeper calls are not recorded
    /// (as with -D DEPTH), and the shadow stack is sized for DEPTH.
    #[arg(long = "max-stack", value_name = "DEPTH", value_parser = parse_max_stack)]
    max_stack: Option<u64>,
    /// The clock timestamps are read from: `tsc` (the default: the
    /// processor's time-stamp counter, converted to CLOCK_MONOTONIC
    /// nanoseconds, if it runs at a constant rate; else mono) or `mono`
    /// (CLOCK_MONOTONIC for each timestamp: slower, no conversion).
    #[arg(long, value_name = "CLOCK", value_parser = ["tsc", "mono"])]
    clock: Option<String>,
    /// Switch tracing off and on while the program runs: commands
    /// `disable` and `enable`, one per line, written to the FIFO CTL (made
    /// with mkfifo); after each takes effect, `ack` is written to the FIFO
    /// ACK if given. Disabled, the program's functions run unpatched.
    #[arg(long, value_name = "CTL[,ACK]")]
    control: Option<String>,
    /// Start with tracing disabled: a trace_on trigger (-T) or --control
    /// enables it.
    #[arg(long)]
    pub(crate) disable: bool,
    /// Tracing `on` (the default) or `off` at the start, as --disable;
    /// with -p PID of a program recorded with -g, switches its tracing.
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub(crate) trace: Option<String>,
    /// Trace this library too (file name prefix); repeatable; implies
    /// --no-libs for the others.
    #[arg(long = "lib")]
    libs: Vec<String>,
    /// Several tracers at once, each into DIR/NAME with its own filters:
    /// `NAME[:type=graph|profile][:filter=P,P][:notrace=P,P][:trigger=SPEC]…[:depth=N][:time=T]`;
    /// repeatable. A graph tracer records every call; a profile (the type
    /// of a tracer named `profile`) keeps per-function calls, total and
    /// self time for `report` (its filter selects the functions profiled).
    /// `trigger=` takes one `-T` spec (`FUNC@ACTION,ACTION`), repeatable.
    #[arg(long = "tracer")]
    tracers: Vec<String>,
    /// Do not trace the calls the program makes to library functions
    /// through its PLT (`printf`, `malloc`, …), which are traced by
    /// default as uftrace does.
    #[arg(long, overrides_with_all = ["libcall", "nest_libcall"])]
    no_libcall: bool,
    /// Trace library calls (the default; undoes an earlier --no-libcall).
    #[arg(long, overrides_with = "no_libcall")]
    libcall: bool,
    /// Also trace the calls libraries make to each other through their
    /// PLTs (not those among the system's base libraries: libc, libm,
    /// libgcc_s, libpthread, libdl, the loader), as uftrace's option.
    #[arg(short = 'l', long, overrides_with = "no_libcall")]
    nest_libcall: bool,
    /// uftrace's "entries only, for safety": taken, and exits are
    /// recorded as always (calls return through site stubs, never through
    /// a return address the tracer rewrote, so there is nothing to be
    /// safe from).
    #[arg(short = 'e', long = "estimate-return")]
    estimate_return: bool,
    /// The loader does not write the addresses it resolves into the GOT
    /// (`LD_BIND_NOT=1` for the program, as uftrace's option).
    #[arg(long)]
    pub(crate) no_pltbind: bool,
    /// Taken for uftrace's command lines: the output is never paged.
    #[arg(long)]
    no_pager: bool,
    /// Trace a program not built for tracing (no patchable entries, no
    /// -pg): the calls it makes to library functions through its PLT, as
    /// uftrace's option; without it such a program runs untraced, and the
    /// programs it starts by exec are traced.
    #[arg(long)]
    pub(crate) force: bool,
    /// Taken for uftrace's command lines (where its libmcount is): the
    /// agent is shadowgraph's own, built in.
    #[arg(long, value_name = "PATH", hide = true)]
    libmcount_path: Option<PathBuf>,
    /// Record through fgraph's callbacks, never the fused paths (to
    /// compare them).
    #[arg(long, hide = true)]
    general_path: bool,
    /// Hijack return addresses instead of returning through site stubs
    /// (to compare them).
    #[arg(long, hide = true)]
    hijack_returns: bool,
    #[command(flatten)]
    pub(crate) run: run::RunOptions,
}

/// Patterns as triggers of one `action` (`-H PAT` as `PAT@hide`).
fn with_action(patterns: Vec<String>, action: &str) -> Vec<String> {
    patterns
        .into_iter()
        .map(|p| match p.contains('@') {
            true => format!("{p},{action}"),
            false => format!("{p}@{action}"),
        })
        .collect()
}

/// A `--tracer` specification as the configuration's tracer.
pub(crate) fn parse_tracer(spec: &str) -> Result<config::Tracer, String> {
    use shadowgraph_data::trigger::{SpecKind, Trigger};
    let mut parts = spec.split(':');
    let name = parts.next().unwrap_or_default().to_string();
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(format!(
            "--tracer {spec}: needs a name (a plain directory name) first"
        ));
    }
    let mut t = config::Tracer {
        kind: if name == "profile" {
            TracerKind::Profile
        } else {
            TracerKind::Graph
        },
        name: Some(name),
        ..Default::default()
    };
    // filter=, notrace= and trigger= in the order given: with a trigger,
    // the patterns are triggers too, in that order (as -F, -N beside -T).
    let mut specs: Vec<(SpecKind, String)> = Vec::new();
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("--tracer {spec}: `{p}` is not key=value"))?;
        let list = || {
            v.split(',')
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        match k {
            "filter" => specs.extend(list().into_iter().map(|p| (SpecKind::Filter, p))),
            "notrace" => specs.extend(list().into_iter().map(|p| (SpecKind::Notrace, p))),
            // (One trigger a key: its actions are separated by commas.)
            "trigger" => specs.push((SpecKind::Trigger, v.to_string())),
            "depth" => {
                t.depth = v
                    .parse()
                    .map_err(|_| format!("--tracer {spec}: bad depth `{v}`"))?
            }
            "time" => {
                t.time_ns = parse_duration_ns(v).map_err(|e| format!("--tracer {spec}: {e}"))?
            }
            "type" => {
                t.kind = match v {
                    "graph" => TracerKind::Graph,
                    "profile" => TracerKind::Profile,
                    _ => {
                        return Err(format!(
                            "--tracer {spec}: unknown type `{v}` (graph, profile)"
                        ))
                    }
                }
            }
            other => {
                let keys = "type, filter, notrace, trigger, depth, time";
                return Err(format!("--tracer {spec}: unknown key `{other}` ({keys})"));
            }
        }
    }
    if specs.iter().any(|(k, _)| *k == SpecKind::Trigger) {
        t.triggers = specs
            .iter()
            .map(|(k, p)| Trigger::as_trigger_spec(p, *k))
            .collect();
    } else {
        for (k, p) in specs {
            match k {
                SpecKind::Notrace => t.notrace.push(p),
                _ => t.filter.push(p),
            }
        }
    }
    if t.kind == TracerKind::Profile && (t.depth > 0 || t.time_ns > 0 || !t.triggers.is_empty()) {
        return Err(format!(
            "--tracer {spec}: a profile takes filter= and notrace= only (it keeps no call records)"
        ));
    }
    Ok(t)
}

impl RecordOptions {
    /// The tracers these options ask for (one unnamed without `--tracer`).
    pub(crate) fn tracers(&self) -> Result<Vec<config::Tracer>, String> {
        let tracers: Vec<config::Tracer> = self
            .tracers
            .iter()
            .map(|t| parse_tracer(t))
            .collect::<Result<_, _>>()?;
        if tracers.is_empty() {
            return Ok(vec![config::Tracer {
                filter: self.filter.clone(),
                notrace: self.notrace.clone(),
                depth: depth_within(self.depth, self.max_stack),
                time_ns: self.time_filter.unwrap_or(0),
                triggers: self.trigger.clone(),
                // Without --control, triggers switch tracing on.
                disabled: self.disable && self.control.is_none(),
                min_size: self.size_filter,
                ..Default::default()
            }]);
        }
        if !self.filter.is_empty()
            || !self.notrace.is_empty()
            || !self.trigger.is_empty()
            || self.size_filter > 0
            || self.depth > 0
            || self.time_filter.is_some()
        {
            return Err(
                "with --tracer, give filters inside each tracer (filter=, notrace=, trigger=, depth=, time=); -T is for one tracer"
                    .into(),
            );
        }
        Ok(tracers
            .into_iter()
            .map(|t| config::Tracer {
                depth: depth_within(t.depth, self.max_stack),
                ..t
            })
            .collect())
    }

    /// `--control CTL[,ACK]` checked: FIFOs, made absolute (the agent opens
    /// them whatever its directory).
    pub(crate) fn control(&self) -> Result<Option<config::Control>, String> {
        if self.disable && self.control.is_none() {
            let on = self.trigger.iter().any(|t| {
                shadowgraph_data::trigger::Trigger::parse(
                    t,
                    shadowgraph_data::trigger::SpecKind::Trigger,
                )
                .is_ok_and(|t| t.actions.trace == Some(true))
            });
            if !on || !self.tracers.is_empty() {
                return Err("--disable needs --control or a trace_on trigger \
                     (-T FUNC@trace_on), to enable tracing later"
                    .into());
            }
        }
        let Some(c) = &self.control else {
            return Ok(None);
        };
        let fifos: Vec<&str> = c.split(',').collect();
        if fifos.len() > 2 {
            return Err(format!("--control {c}: CTL or CTL,ACK"));
        }
        let mut abs = Vec::new();
        for p in fifos {
            use std::os::unix::fs::FileTypeExt;
            match std::fs::metadata(p) {
                Ok(m) if m.file_type().is_fifo() => {}
                Ok(_) => return Err(format!("--control {p}: not a FIFO (make one with mkfifo)")),
                Err(e) => return Err(format!("--control {p}: {e} (make it with mkfifo)")),
            }
            abs.push(std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p)));
        }
        let mut abs = abs.into_iter();
        Ok(Some(config::Control {
            commands: abs.next().expect("one FIFO at least"),
            acks: abs.next(),
            start_disabled: self.disable,
        }))
    }

    /// The session's configuration: recording into `dir` (absolute), the
    /// threads' rings in `rings`, this command's line its command line.
    /// Patterns are checked here (a one-line
    /// error before the program starts).
    pub(crate) fn config(&self, dir: &Path, rings: &Path) -> Result<Config, String> {
        let objects = if !self.libs.is_empty() {
            config::Objects::Program(self.libs.clone())
        } else if self.no_libs {
            config::Objects::Program(Vec::new())
        } else {
            config::Objects::All
        };
        let config = Config {
            pattern_match: self.match_type.map(MatchArg::config),
            mode: config::Mode::Record(config::Record {
                dir: dir.to_owned(),
                tracers: self.tracers()?,
                rings: Some(config::Rings {
                    dir: rings.to_owned(),
                    layout: shadowgraph::record::ring::LAYOUT,
                }),
                ring_bytes: self.buffer,
                layout: match self.compact {
                    true => config::Layout::Compact,
                    false => config::Layout::Uftrace,
                },
                clock: match self.clock.as_deref() {
                    Some("mono") => config::Clock::Monotonic,
                    _ => config::Clock::Tsc,
                },
                control: self.control()?,
                children: !self.no_children,
                fused: !self.general_path,
                libcalls: self.libcalls(),
                argspec: self.arg_specs(&self.argument, false)?,
                retspec: self.arg_specs(&self.retval, true)?,
                auto_args: self.auto_args && !self.no_args,
                signals: self.signal.clone(),
                watch_cpu: !self.watch.is_empty(),
                force: self.force,
                events: self.user_events(),
                command: Some(command_line()),
                agent: self.run.agent,
            }),
            objects,
            patch: self.patch.clone(),
            stack_bytes: self.max_stack.map(stack_bytes_for),
            returns: returns(self.hijack_returns),
            text_write: text_write()?,
            lineage: Default::default(),
            with_syms: self
                .with_syms
                .as_deref()
                .map(std::path::absolute)
                .transpose()
                .map_err(|e| format!("--with-syms: {e}"))?,
            log_fd: crate::logfile::agent_fd(),
            verbose: crate::logfile::verbose(),
        };
        config.check().map_err(|e| e.to_string())?;
        Ok(config)
    }

    /// The `-E` specs of user SDT markers (uftrace's: `;` separates
    /// several in one), the kernel's (`linux:…`) aside.
    pub(crate) fn user_events(&self) -> Vec<String> {
        (self.events.iter())
            .flat_map(|e| e.split(';'))
            .filter(|e| !e.is_empty() && !e.starts_with("linux:"))
            .map(String::from)
            .collect()
    }

    /// Which library calls are traced (of `--no-libcall` and
    /// `--nest-libcall`, the later one holds).
    pub(crate) fn libcalls(&self) -> config::LibCalls {
        match (self.no_libcall, self.nest_libcall) {
            (true, _) => config::LibCalls::Off,
            (false, true) => config::LibCalls::Nested,
            (false, false) => config::LibCalls::Traced,
        }
    }

    /// What `live` shows besides the recording: `-T`'s view actions
    /// (backtrace, hide, color), which a recording does not apply, as
    /// uftrace's `live` passes them to its replay.
    pub(crate) fn view_triggers(&self) -> Vec<shadowgraph_data::trigger::Trigger> {
        use shadowgraph_data::trigger::{Actions, SpecKind, Trigger};
        self.trigger
            .iter()
            .filter_map(|s| Trigger::parse(s, SpecKind::Trigger).ok())
            .filter_map(|mut t| {
                let a = &t.actions;
                t.actions = Actions {
                    backtrace: a.backtrace,
                    hide: a.hide,
                    color: a.color,
                    ..Default::default()
                };
                (!t.actions.is_empty()).then_some(t)
            })
            .collect()
    }

    pub(crate) fn tracer_names(&self) -> Vec<String> {
        self.tracers
            .iter()
            .filter_map(|t| parse_tracer(t).ok())
            .filter_map(|t| t.name)
            .collect()
    }
}

/// This command's line as uftrace keeps its own: the arguments joined by
/// spaces, `"` and `\\` escaped.
fn command_line() -> String {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    args.join(" ").replace('\\', "\\\\").replace('"', "\\\"")
}
