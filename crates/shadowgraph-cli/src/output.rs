//! Views written to stdout: a recording opened, its notices and warnings
//! said on stderr, a closed pipe (`| head`) ending the output quietly; and
//! the recordings of the programs started by exec during it; the flame
//! graph rendered as SVG.

use shadowgraph_data::dir::{DataDir, OpenOptions};
use std::process::ExitCode;

/// Opens a data directory and writes a view of it to stdout (a closed pipe,
/// as with `| head`, ends the output quietly).
pub(crate) fn view(
    dir: &std::path::Path,
    how: OpenOptions,
    write: impl FnOnce(
        &shadowgraph_data::dir::DataDir,
        &mut std::io::BufWriter<std::io::StdoutLock<'static>>,
    ) -> Result<(), shadowgraph_data::replay::ReplayError>,
) -> Result<ExitCode, String> {
    view_of(dir, how, true, write)
}

/// Opens the recording at `dir` for a view of its calls (a profile has
/// none), saying its losses, and pointing at its exec sessions if `notice`.
fn open_calls(dir: &std::path::Path, how: OpenOptions, notice: bool) -> Result<DataDir, String> {
    let data = DataDir::open_with(dir, how).map_err(|e| e.to_string())?;
    if shadowgraph_data::profile::is_profile(&data) {
        return Err(format!(
            "{} holds a profile (per-function totals, no call records): see it with `shadowgraph report -d {}`",
            dir.display(),
            dir.display()
        ));
    }
    for w in [
        data.loss_warning(),
        data.sessions_notice().filter(|_| notice),
    ]
    .into_iter()
    .flatten()
    {
        eprintln!("shadowgraph: {w}");
    }
    Ok(data)
}

/// Writes a view of `datas` with `write` to stdout, then their warnings
/// (once they are dropped: that clears the progress line); a closed pipe
/// ends the output quietly.
fn write_view(
    datas: Vec<DataDir>,
    write: impl FnOnce(
        &[&DataDir],
        &mut std::io::BufWriter<std::io::StdoutLock<'static>>,
    ) -> Result<(), shadowgraph_data::replay::ReplayError>,
) -> Result<ExitCode, String> {
    use shadowgraph_data::replay::ReplayError;
    use std::io::Write;
    let refs: Vec<&DataDir> = datas.iter().collect();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let result = write(&refs, &mut out).and_then(|()| out.flush().map_err(ReplayError::Io));
    let warnings: Vec<String> = datas.iter().flat_map(|d| d.warnings()).collect();
    drop(refs);
    drop(datas);
    for w in warnings {
        eprintln!("shadowgraph: warning: {w}");
    }
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(ReplayError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// [`view`]; `notice`: whether to point at the recording's exec sessions.
pub(crate) fn view_of(
    dir: &std::path::Path,
    how: OpenOptions,
    notice: bool,
    write: impl FnOnce(
        &shadowgraph_data::dir::DataDir,
        &mut std::io::BufWriter<std::io::StdoutLock<'static>>,
    ) -> Result<(), shadowgraph_data::replay::ReplayError>,
) -> Result<ExitCode, String> {
    let data = open_calls(dir, how, notice)?;
    write_view(vec![data], |ds, out| write(ds[0], out))
}

/// A view of a recording and of every program started by exec during it
/// (and by exec in those), all at once: `write` gets the recording first,
/// then the others in the order they started.
pub(crate) fn view_merged(
    dir: &std::path::Path,
    how: OpenOptions,
    write: impl FnOnce(
        &[&DataDir],
        &mut std::io::BufWriter<std::io::StdoutLock<'static>>,
    ) -> Result<(), shadowgraph_data::replay::ReplayError>,
) -> Result<ExitCode, String> {
    let datas = session_dirs(dir)
        .iter()
        .map(|d| open_calls(d, how.clone(), false))
        .collect::<Result<Vec<_>, _>>()?;
    write_view(datas, write)
}

/// `dir` and the directories of the programs started by exec during its
/// recording (and during theirs), in the order they started.
pub(crate) fn session_dirs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut dirs = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        let more = shadowgraph_data::dir::exec_sessions_in(&dirs[i]);
        dirs.extend(more);
        i += 1;
    }
    dirs
}

/// [`view`], then the same view of every program started by exec during
/// the recording (a session of its own, in a directory inside this one),
/// each after a line that names it, in the order they started.
pub(crate) fn view_with_sessions(
    dir: &std::path::Path,
    how: OpenOptions,
    write: impl Fn(
        &shadowgraph_data::dir::DataDir,
        &mut std::io::BufWriter<std::io::StdoutLock<'static>>,
    ) -> Result<(), shadowgraph_data::replay::ReplayError>,
) -> Result<ExitCode, String> {
    use std::io::Write;
    let code = view_of(dir, how.clone(), false, &write)?;
    let sessions = match shadowgraph_data::dir::DataDir::open(dir) {
        Ok(d) => d.exec_sessions(),
        Err(_) => Vec::new(),
    };
    for s in sessions {
        let exe = shadowgraph_data::dir::DataDir::open(&s)
            .ok()
            .and_then(|d| d.info.get("exe").map(str::to_string))
            .unwrap_or_default();
        {
            let mut out = std::io::stdout().lock();
            if writeln!(
                out,
                "\n# started by exec: {exe} (recorded in {})",
                s.display()
            )
            .is_err()
            {
                return Ok(code); // closed pipe
            }
        }
        view_of(&s, how.clone(), false, &write)?;
    }
    Ok(code)
}

/// The folded stacks rendered as an SVG flame graph (widths: self time, or
/// samples of `sample_ns`), of the recording and the programs started by
/// exec during it.
pub(crate) fn flame_svg(
    dir: &std::path::Path,
    how: OpenOptions,
    filter: &shadowgraph_data::replay::ReplayFilter,
    sample_ns: Option<u64>,
) -> Result<ExitCode, String> {
    let datas = session_dirs(dir)
        .iter()
        .map(|d| DataDir::open_with(d, how.clone()).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&DataDir> = datas.iter().collect();
    for w in datas.iter().filter_map(DataDir::loss_warning) {
        eprintln!("shadowgraph: {w}");
    }
    let mut folded = Vec::new();
    shadowgraph_data::flame::dump_flame_graph_sampled(&refs, filter, sample_ns, &mut folded)
        .map_err(|e| e.to_string())?;
    for w in datas.iter().flat_map(DataDir::warnings) {
        eprintln!("shadowgraph: warning: {w}");
    }
    let folded = String::from_utf8_lossy(&folded);
    if folded.is_empty() {
        return Err(format!("{}: no calls recorded", dir.display()));
    }
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = format!(
        "shadowgraph: {}",
        refs[0].info.get("exe").unwrap_or("trace")
    );
    opts.count_name = if sample_ns.is_some() { "samples" } else { "ns" }.to_string();
    let out = std::io::BufWriter::new(std::io::stdout().lock());
    inferno::flamegraph::from_lines(&mut opts, folded.lines(), out)
        .map_err(|e| format!("rendering the flame graph: {e}"))?;
    Ok(ExitCode::SUCCESS)
}
