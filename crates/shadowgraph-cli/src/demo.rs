//! `demo`: the bundled sample built with patchable entries, recorded and
//! shown.

use crate::options::RecordOptions;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

pub(crate) const DEMO_C: &str = include_str!("../samples/demo.c");
pub(crate) fn demo(keep: Option<PathBuf>) -> Result<ExitCode, String> {
    let kept = keep.is_some();
    let dir = match keep {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("shadowgraph-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = build_record_show(&dir, kept);
    if !kept {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

/// The sample built, recorded and shown in `dir`.
fn build_record_show(dir: &std::path::Path, kept: bool) -> Result<ExitCode, String> {
    let src = dir.join("demo.c");
    let exe = dir.join("demo");
    std::fs::write(&src, DEMO_C).map_err(|e| format!("{}: {e}", src.display()))?;
    let flags = ["-O2", "-pthread", "-fpatchable-function-entry=5"];
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    eprintln!(
        "# building the sample: {cc} {} {}",
        flags.join(" "),
        src.display()
    );
    let built = Command::new(&cc)
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .map_err(|e| format!("cannot run the C compiler `{cc}`: {e} (install gcc)"))?;
    if !built.success() {
        return Err(format!("`{cc}` could not build the sample ({built})"));
    }
    eprintln!("# recording it (every function entry patched before main):");
    let data = dir.join("shadowgraph.data");
    let code = crate::record::record(
        &data,
        &RecordOptions::default(),
        &[exe.to_string_lossy().into_owned()],
    )?;
    let d = shadowgraph_data::dir::DataDir::open(&data).map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    shadowgraph_data::replay::replay(&d, &mut text).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&text);
    const SHOWN: usize = 40;
    println!(
        "\n## replay: the call graph with durations (first {SHOWN} of {} lines)",
        text.lines().count()
    );
    for l in text.lines().take(SHOWN + 1) {
        println!("{l}");
    }
    println!("\n## report: time and calls per function, most calls first (report -s call)");
    let mut out = std::io::stdout().lock();
    shadowgraph_data::report::report(
        &d,
        shadowgraph_data::report::SortKey::Calls,
        false,
        &Default::default(),
        &mut out,
    )
    .map_err(|e| e.to_string())?;
    if kept {
        println!(
            "\n# the whole trace: shadowgraph replay -d {0}   (uftrace replay -d {0} reads it too)",
            data.display()
        );
    } else {
        println!(
            "\n# the sample and its recording are removed now (demo --keep DIR keeps them); \
             your own program: shadowgraph record ./prog, then shadowgraph replay"
        );
    }
    Ok(code)
}
