//! `live`: a recording into a temporary directory, shown as `replay` (or
//! `report`) shows it, then removed.

use crate::options::RecordOptions;
use std::path::Path;
use std::process::ExitCode;

/// Records into a temporary directory (by `record`: a program started, or
/// a process attached to), replays as `view` says, and removes it.
pub(crate) fn live(
    opts: &RecordOptions,
    view: &crate::replay_args::LiveView,
    record: impl FnOnce(&Path) -> Result<ExitCode, String>,
) -> Result<ExitCode, String> {
    let dir = std::env::temp_dir().join(format!("shadowgraph-live-{}", std::process::id()));
    let code = record(&dir)?;
    // A closed pipe must not end us before the directory is removed: the
    // writes fail instead (and end the showing quietly).
    // SAFETY: ignoring SIGPIPE for this process, which starts no program
    // from here on.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    // One recording, or one per tracer (a profile is shown as its report).
    let names = opts.tracer_names();
    let shown = if names.is_empty() {
        show_live(&dir, None, &opts.view_triggers(), opts, view)
    } else {
        names
            .iter()
            .try_for_each(|n| show_live(&dir.join(n), Some(n), &[], opts, view))
    };
    let _ = std::fs::remove_dir_all(&dir);
    shown?;
    Ok(code)
}

/// `live`'s view of one recording directory: replay (after the report
/// with `--report`), or a profile's report; headed by the tracer's name
/// when there are several. Programs started by exec are shown in the same
/// stream, as `replay` shows them. Without a recording `record` has said
/// why already. A reader that stops reading (`| head`) ends it quietly.
/// `triggers` apply to the replay where they name recorded functions;
/// `opts`, the recording's: where it keeps declarations (`--srcline`), and
/// whether it started with tracing off (`--disable`: the first call shown
/// is shown at its depth, as uftrace's `live` shows it).
pub(crate) fn show_live(
    dir: &Path,
    tracer: Option<&str>,
    triggers: &[shadowgraph_data::trigger::Trigger],
    opts: &RecordOptions,
    view: &crate::replay_args::LiveView,
) -> Result<(), String> {
    let srcline = opts.srcline;
    use shadowgraph_data::dir::DataDir;
    use shadowgraph_data::replay::{self, ReplayError};
    use shadowgraph_data::{profile, report};
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let how = view.open_options();
    let datas: Vec<DataDir> = crate::output::session_dirs(dir)
        .iter()
        .filter_map(|d| DataDir::open_with(d, how.clone()).ok())
        .collect();
    let refs: Vec<&DataDir> = datas.iter().collect();
    let shown = (|| -> Result<(), ReplayError> {
        if let Some(t) = tracer {
            writeln!(out, "## tracer {t}")?;
        }
        let Some(&first) = refs.first() else {
            return Ok(());
        };
        if profile::is_profile(first) {
            return profile::report(first, report::SortKey::Total, false, &[], &mut out);
        }
        let mut filter = view.filter(triggers).without_unmatched(first);
        filter.from_stack_depth = opts.disable;
        if view.report {
            let layout = report::Layout::parse(None, None, report::Averages::None)
                .map_err(|e| ReplayError::Io(std::io::Error::other(e)))?;
            write!(out, "#\n# uftrace report\n#\n")?;
            report::report_sessions(&refs, &layout, &filter, &mut out)?;
            write!(out, "\n#\n# uftrace replay\n#\n")?;
        }
        let (fields, look) = view.look.columns(&filter, srcline, view.libname);
        match view.look.flat {
            true => replay::replay_flat(&refs, &filter, &mut out),
            false => replay::replay_sessions(&refs, &filter, &fields, look, &mut out),
        }
    })();
    match shown.and_then(|()| out.flush().map_err(ReplayError::Io)) {
        Err(ReplayError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(|e| e.to_string()),
    }
}
