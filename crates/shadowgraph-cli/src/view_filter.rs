//! What a view shows of a recording: uftrace's filters, triggers and
//! the view options every view takes, as clap parses them, made into the
//! data crate's [`shadowgraph_data::replay::ReplayFilter`].

use crate::options;
use shadowgraph_data::dir::OpenOptions;

/// What a view shows of a recording (uftrace's replay/report filters).
#[derive(clap::Args, Debug)]
pub(crate) struct ViewFilter {
    /// Only calls inside these functions' calls (a glob, a regex where it
    /// has regex characters, /regex/; `!P`
    /// removes; `@depth=N`, `@time=T`… as triggers); repeatable.
    #[arg(short = 'F', long = "filter", value_parser = parse_filter)]
    filter: Vec<shadowgraph_data::trigger::Trigger>,
    /// Without these functions and the calls inside them; repeatable.
    #[arg(short = 'N', long = "notrace", value_parser = parse_notrace)]
    notrace: Vec<shadowgraph_data::trigger::Trigger>,
    /// FUNC@ACTION[,ACTION…]: depth=N, backtrace, trace_on, trace_off,
    /// trace, time=T, filter, notrace, caller, hide, color=C; repeatable.
    #[arg(short = 'T', long = "trigger", value_parser = parse_trigger)]
    trigger: Vec<shadowgraph_data::trigger::Trigger>,
    /// Hide these functions, their callees shown in their place (as
    /// `-T FUNC@hide`); repeatable.
    #[arg(short = 'H', long = "hide", value_parser = parse_hide)]
    hide: Vec<shadowgraph_data::trigger::Trigger>,
    /// Only the functions declared in files this regex matches, the
    /// others' callees in their place (`LOC@hide`: hide those); from the
    /// recording's `--srcline`; repeatable.
    #[arg(short = 'L', long = "loc-filter", value_name = "LOC", value_parser = shadowgraph_data::replay::Location::parse)]
    locations: Vec<shadowgraph_data::replay::Location>,
    /// Start with tracing off: a trace_on trigger switches it on.
    #[arg(long)]
    disable: bool,
    /// Only the calls of these functions and of their callers (not what
    /// they call); repeatable.
    #[arg(short = 'C', long = "caller-filter", value_parser = parse_pattern)]
    caller_filter: Vec<shadowgraph_data::pattern::Pattern>,
    /// Without the calls of functions smaller than SIZE bytes (to the next
    /// symbol); their callees shown in their place.
    #[arg(
        short = 'Z',
        long = "size-filter",
        value_name = "SIZE",
        default_value_t = 0
    )]
    size_filter: u64,
    /// Only calls nested less than DEPTH deep (0: no limit).
    #[arg(short = 'D', long = "depth", default_value_t = 0)]
    depth: u16,
    /// Only calls lasting at least TIME (10us, 1.5ms; a bare number is ns),
    /// with their callers.
    #[arg(short = 't', long = "time-filter", value_name = "TIME", value_parser = options::parse_duration_ns)]
    time_filter: Option<u64>,
    /// Only these threads (comma-separated; repeatable).
    #[arg(long = "tid", value_delimiter = ',')]
    tids: Vec<i32>,
    /// Only the records between two times, START~STOP (either may be left
    /// out): timestamps as `-f time` shows them, or times since the first
    /// record with a unit (`2ms~`), as `-f elapsed` shows them.
    #[arg(short = 'r', long = "time-range", value_name = "START~STOP", value_parser = parse_time_range)]
    time_range: Option<shadowgraph_data::time::TimeRange>,
    /// Where each function is declared (file:line), as the recording says
    /// (`record --srcline`): after entries in replay, names in report and
    /// graph.
    #[arg(long)]
    pub(crate) srcline: bool,
    /// A library call's name followed by `@` and the library it goes to
    /// (replay).
    #[arg(long)]
    pub(crate) libname: bool,
    /// How C++ and Rust names are shown: simple (the qualified name alone,
    /// as uftrace), full (types and parameters too), no (the symbols).
    #[arg(long, value_enum, default_value = "simple")]
    demangle: DemangleArg,
    /// Each object's symbols from `DIR/<object>.sym` where there is one
    /// (the recording of the object before it was stripped, say), instead
    /// of the recording's own.
    #[arg(long, value_name = "DIR")]
    with_syms: Option<std::path::PathBuf>,
    /// How patterns are taken, as uftrace's `--match`: regex (a regex
    /// where it has any regex character, `*` `?` `[` too), glob (always a
    /// glob); without it, a regex where it has regex characters other than
    /// a glob's, else a glob.
    #[arg(long = "match", value_name = "TYPE")]
    match_type: Option<crate::options::MatchArg>,
    /// Without arguments and return values.
    #[arg(long)]
    no_args: bool,
    /// Without events (a `read=` trigger's, schedule events).
    #[arg(long)]
    no_event: bool,
    /// Events are shown (uftrace's `-E` in a view: events even with
    /// `--no-event`).
    #[arg(short = 'E', long = "Event", value_name = "EVENT")]
    event: Vec<String>,
    /// Without schedule events.
    #[arg(long)]
    no_sched: bool,
    /// Without the schedule events of pre-emptions (those of a thread
    /// that waits are shown).
    #[arg(long)]
    no_sched_preempt: bool,
    /// Also the events outside every call of their thread (left out by
    /// default, as uftrace's views leave them).
    #[arg(long)]
    event_full: bool,
    /// Without library calls (their callees shown in their place, as
    /// `-H '*@PLT'`).
    #[arg(long)]
    no_libcall: bool,
    /// Taken for uftrace's command lines: the output is never paged.
    #[arg(long)]
    no_pager: bool,
    /// Taken for uftrace's command lines (where its libmcount is): not
    /// read by the views.
    #[arg(long, value_name = "PATH", hide = true)]
    libmcount_path: Option<std::path::PathBuf>,
    /// Taken for uftrace's command lines (record's option, which uftrace's
    /// views accept too): the values recorded are shown as recorded.
    #[arg(short = 'a', long, hide = true)]
    auto_args: bool,
}

/// `--demangle`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
pub(crate) enum DemangleArg {
    #[default]
    Simple,
    Full,
    No,
}

impl From<DemangleArg> for shadowgraph_data::names::Demangle {
    fn from(d: DemangleArg) -> Self {
        use shadowgraph_data::names::Demangle;
        match d {
            DemangleArg::Simple => Demangle::Simple,
            DemangleArg::Full => Demangle::Full,
            DemangleArg::No => Demangle::No,
        }
    }
}

impl ViewFilter {
    /// `-F`, `-N` and `-T` in the order given, as triggers (a later one
    /// wins where they disagree, as in uftrace), into `trigger`.
    pub(crate) fn order(&mut self, args: &clap::ArgMatches) {
        let mut all: Vec<(usize, shadowgraph_data::trigger::Trigger)> = [
            ("filter", std::mem::take(&mut self.filter)),
            ("notrace", std::mem::take(&mut self.notrace)),
            ("trigger", std::mem::take(&mut self.trigger)),
            ("hide", std::mem::take(&mut self.hide)),
        ]
        .into_iter()
        .flat_map(|(id, v)| options::positions(args, id).into_iter().zip(v))
        .collect();
        all.sort_by_key(|(i, _)| *i);
        self.trigger = all.into_iter().map(|(_, t)| t).collect();
    }

    /// How the view opens its recordings: names as `--demangle` says,
    /// progress on a terminal unless the output itself goes there.
    pub(crate) fn open_options(&self) -> OpenOptions {
        use std::io::IsTerminal;
        OpenOptions {
            names: self.demangle.into(),
            progress: std::io::stderr().is_terminal() && !std::io::stdout().is_terminal(),
            with_syms: self.with_syms.clone(),
            no_args: self.no_args,
            no_event: self.no_event && self.event.is_empty(),
            no_sched: self.no_sched,
            no_sched_preempt: self.no_sched_preempt,
            event_full: self.event_full,
        }
    }
}

impl From<ViewFilter> for shadowgraph_data::replay::ReplayFilter {
    fn from(v: ViewFilter) -> Self {
        shadowgraph_data::replay::ReplayFilter {
            functions: Vec::new(),
            notrace: Vec::new(),
            triggers: v.trigger,
            disabled: v.disable,
            no_libcall: v.no_libcall,
            from_stack_depth: false,
            time_range: v.time_range,
            max_depth: v.depth,
            min_ns: v.time_filter.unwrap_or(0),
            tids: v.tids,
            callers: v.caller_filter,
            min_size: v.size_filter,
            locations: v.locations,
        }
    }
}

fn parse_pattern(p: &str) -> Result<shadowgraph_data::pattern::Pattern, String> {
    shadowgraph_data::pattern::Pattern::parse(p).map_err(|e| e.to_string())
}

fn parse_time_range(v: &str) -> Result<shadowgraph_data::time::TimeRange, String> {
    shadowgraph_data::time::TimeRange::parse(v)
}

fn parse_spec(
    p: &str,
    kind: shadowgraph_data::trigger::SpecKind,
) -> Result<shadowgraph_data::trigger::Trigger, String> {
    shadowgraph_data::trigger::Trigger::parse(p, kind).map_err(|e| e.to_string())
}

fn parse_filter(p: &str) -> Result<shadowgraph_data::trigger::Trigger, String> {
    parse_spec(p, shadowgraph_data::trigger::SpecKind::Filter)
}

fn parse_notrace(p: &str) -> Result<shadowgraph_data::trigger::Trigger, String> {
    parse_spec(p, shadowgraph_data::trigger::SpecKind::Notrace)
}

fn parse_trigger(p: &str) -> Result<shadowgraph_data::trigger::Trigger, String> {
    parse_spec(p, shadowgraph_data::trigger::SpecKind::Trigger)
}

fn parse_hide(p: &str) -> Result<shadowgraph_data::trigger::Trigger, String> {
    parse_spec(
        &format!("{p}@hide"),
        shadowgraph_data::trigger::SpecKind::Trigger,
    )
}
