//! How a replay lays its lines out (`replay`'s and `live`'s options of
//! uftrace), and what `live` takes of the views' options: uftrace's `live`
//! records, then replays with the replay options given on its line.

#![forbid(unsafe_code)]

use shadowgraph_data::replay::{Field, Look, ReplayFilter};

/// `replay`'s layout options (also `live`'s).
#[derive(clap::Args, Debug, Default)]
pub(crate) struct ReplayLook {
    /// Columns left of each function, as uftrace's `replay -f`: duration,
    /// tid, addr, time, delta (since the thread's previous line), elapsed
    /// (since the first record), task, module; comma-separated, `+LIST`
    /// to add to the default (duration,tid), or `none`.
    #[arg(short = 'f', long = "output-fields", value_name = "FIELDS", value_parser = parse_fields)]
    fields: Option<Fields>,
    /// A call without callees gets an entry and an exit line too, not
    /// one `f();` line.
    #[arg(long)]
    no_merge: bool,
    /// Exit lines without the `/* name */` comment.
    #[arg(long)]
    no_comment: bool,
    /// Each thread's calls indented in a column of their own.
    #[arg(long)]
    column_view: bool,
    /// With --column-view: levels from one thread's column to the next.
    #[arg(long, value_name = "DEPTH", default_value_t = 8)]
    column_offset: u16,
    /// A blank line where the thread changes.
    #[arg(long)]
    task_newline: bool,
    /// Every record on a line of its own, in time order (uftrace's
    /// flat format).
    #[arg(long)]
    pub(crate) flat: bool,
}

/// `-f`'s columns (one value to clap, not a list of values).
#[derive(Clone, Debug)]
struct Fields(Vec<Field>);

fn parse_fields(spec: &str) -> Result<Fields, String> {
    Field::parse_list(spec).map(Fields)
}

impl ReplayLook {
    /// The columns and layout: without `-f`, uftrace's default columns,
    /// led by the time a time range is given in.
    pub(crate) fn columns(
        &self,
        filter: &ReplayFilter,
        srcline: bool,
        libname: bool,
    ) -> (Vec<Field>, Look) {
        use shadowgraph_data::time::Bound;
        let fields = self.fields.as_ref().map_or_else(
            || {
                let r = filter.time_range.unwrap_or_default();
                let first = match [r.start, r.stop] {
                    [None, None] => None,
                    e if e.iter().any(|b| matches!(b, Some(Bound::Elapsed(_)))) => {
                        Some(Field::Elapsed)
                    }
                    _ => Some(Field::Time),
                };
                first.into_iter().chain(Field::DEFAULT).collect()
            },
            |f| f.0.clone(),
        );
        let look = Look {
            srcline,
            libname,
            no_merge: self.no_merge,
            no_comment: self.no_comment,
            column_offset: if self.column_view {
                self.column_offset
            } else {
                0
            },
            task_newline: self.task_newline,
        };
        (fields, look)
    }
}

/// What `live` shows of its recording, beyond what it records (uftrace's
/// `live` replays with the replay options on its line; its filters and
/// triggers took effect while recording).
#[derive(clap::Args, Debug, Default)]
pub(crate) struct LiveView {
    #[command(flatten)]
    pub(crate) look: ReplayLook,
    /// Show only these threads (comma-separated; repeatable).
    #[arg(long = "tid", value_delimiter = ',')]
    tids: Vec<i32>,
    /// Show only the records between two times, START~STOP (as `replay
    /// -r`).
    #[arg(short = 'r', long = "time-range", value_name = "START~STOP", value_parser = shadowgraph_data::time::TimeRange::parse)]
    time_range: Option<shadowgraph_data::time::TimeRange>,
    /// A library call's name followed by `@` and the library it goes to.
    #[arg(long)]
    pub(crate) libname: bool,
    /// How C++ and Rust names are shown: simple (the qualified name alone,
    /// as uftrace), full (types and parameters too), no (the symbols).
    #[arg(long, value_enum, default_value = "simple")]
    demangle: crate::view_filter::DemangleArg,
    /// Without the schedule events of pre-emptions.
    #[arg(long)]
    no_sched_preempt: bool,
    /// The report (total and self time per function) before the replay,
    /// as uftrace's `live --report`.
    #[arg(long)]
    pub(crate) report: bool,
}

impl LiveView {
    /// The replay's filter: the record's view triggers (backtrace, hide,
    /// color), and the threads and time range asked for.
    pub(crate) fn filter(&self, triggers: &[shadowgraph_data::trigger::Trigger]) -> ReplayFilter {
        ReplayFilter {
            triggers: triggers.to_vec(),
            tids: self.tids.clone(),
            time_range: self.time_range,
            ..Default::default()
        }
    }

    /// How the recording is opened for the replay (what `record` left out
    /// is not in it: `--no-args` needs no saying here).
    pub(crate) fn open_options(&self) -> shadowgraph_data::dir::OpenOptions {
        shadowgraph_data::dir::OpenOptions {
            names: self.demangle.into(),
            no_sched_preempt: self.no_sched_preempt,
            ..Default::default()
        }
    }
}
