//! `script -S FILE.py`: a Python script's callbacks run over a recording,
//! as uftrace's `script` runs them (`uftrace_begin(ctx)`,
//! `uftrace_entry(ctx)`, `uftrace_exit(ctx)`, `uftrace_event(ctx)`,
//! `uftrace_end()`, and the `UFTRACE_FUNCS` list). The system's `python3`
//! runs the script in a process of its own; the calls reach it as JSON
//! lines on its standard input, in time order, as the views' filters
//! select them.

use serde_json::{json, Value};
use shadowgraph_data::dir::DataDir;
use shadowgraph_data::format::Kind;
use shadowgraph_data::replay::{self, ReplayFilter};
use std::io::Write;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

/// What `python3` runs: the user's script loaded as a module, then one
/// callback per line read.
const DRIVER: &str = r#"
import json, re, sys
path = sys.argv[1]
sys.argv = sys.argv[1:]
ns = {"__name__": "__main__", "__file__": path}
with open(path) as f:
    exec(compile(f.read(), path, "exec"), ns)
REGEX = set(".?*+-^$|()[]{}")
def matcher(p):
    if any(c in REGEX for c in p):
        r = re.compile(p)
        return lambda n: r.search(n) is not None
    return lambda n: n == p
funcs = ns.get("UFTRACE_FUNCS")
ms = [matcher(p) for p in funcs] if funcs else None
calls = {"entry": ns.get("uftrace_entry"), "exit": ns.get("uftrace_exit"),
         "event": ns.get("uftrace_event")}
begin = json.loads(sys.stdin.readline())
if ns.get("uftrace_begin"):
    begin["cmds"] = tuple(begin["cmds"])
    ns["uftrace_begin"](begin)
for line in sys.stdin:
    e = json.loads(line)
    kind = e.pop("kind")
    f = calls[kind]
    if f is None:
        continue
    if kind != "event" and ms is not None and not any(m(e["name"]) for m in ms):
        continue
    if "args" in e and kind != "event":
        e["args"] = tuple(e["args"])
    f(e)
if ns.get("uftrace_end"):
    ns["uftrace_end"]()
sys.stdout.flush()
"#;

/// A recorded value as the script gets it: a number, or a string (quotes
/// taken off).
fn value(v: &str) -> Value {
    let v = v.trim();
    if let Some(s) = v.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        return Value::from(s.replace("\\\"", "\"").replace("\\\\", "\\"));
    }
    if let Ok(i) = v.parse::<i64>() {
        return Value::from(i);
    }
    if let Some(h) = v
        .strip_prefix("0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
    {
        return Value::from(h);
    }
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() => Value::from(f),
        _ => Value::from(v),
    }
}

/// Arguments as the views show them (`1, "two", 3.5`), each a value.
fn values(shown: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    let b = shown.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        match c {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                out.push(value(&shown[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    if !shown.trim().is_empty() {
        out.push(value(&shown[start..]));
    }
    out
}

/// Runs `script` over the recording in `dir` as `filter` selects it;
/// `cmds` are what its `uftrace_begin` sees as the command.
pub(crate) fn run(
    script: &Path,
    dir: &Path,
    filter: &ReplayFilter,
    cmds: &[String],
) -> Result<ExitCode, String> {
    if !script.is_file() {
        return Err(format!("-S {}: no such script", script.display()));
    }
    if script.extension().and_then(|e| e.to_str()) != Some("py") {
        return Err(format!(
            "-S {}: only Python scripts (.py) are run",
            script.display()
        ));
    }
    let data = DataDir::open(dir).map_err(|e| e.to_string())?;
    let threads = replay::thread_records(&data, filter).map_err(|e| e.to_string())?;
    let mut python = Command::new("python3");
    crate::logfile::program_stderr(&mut python);
    let mut child = python
        .arg("-c")
        .arg(DRIVER)
        .arg(script)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("script: cannot run python3 ({e}): it runs the scripts"))?;
    let mut input = std::io::BufWriter::new(child.stdin.take().expect("piped"));
    let begin = json!({
        "record": false,
        "version": format!("v0.13 ( shadowgraph {} )", env!("CARGO_PKG_VERSION")),
        "cmds": cmds,
    });
    // Per thread: the entry time at each depth, for the exit's duration.
    let mut open: std::collections::HashMap<i32, Vec<u64>> = Default::default();
    let sent = writeln!(input, "{begin}").and_then(|()| {
        for r in replay::in_time_order(threads) {
            let (tid, r) = match r {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("shadowgraph: {e}");
                    break;
                }
            };
            if r.addr == shadowgraph_data::sched::SCHED_ADDR {
                continue;
            }
            let stack = open.entry(tid).or_default();
            let d = r.depth as usize;
            let mut e = json!({
                "tid": tid,
                "depth": r.depth,
                "timestamp": r.time,
                "address": r.addr,
                "name": data.name(r.addr),
            });
            match r.kind {
                Kind::Entry => {
                    stack.truncate(d);
                    stack.resize(d, 0);
                    stack.push(r.time);
                    e["kind"] = "entry".into();
                    if let Some(a) = &r.args {
                        e["args"] = values(a).into();
                    }
                }
                Kind::Exit => {
                    let start = stack.get(d).copied().unwrap_or(r.time);
                    stack.truncate(d);
                    e["kind"] = "exit".into();
                    // (In the order uftrace's script sets them.)
                    e["duration"] = r.time.saturating_sub(start).into();
                    if let Some(v) = &r.args {
                        e["retval"] = value(v);
                    }
                }
                Kind::Event if r.addr != shadowgraph_data::replay::BACKTRACE_ADDR => {
                    // (`read:proc/statm (vmsize=… )`: the name and its
                    // values, as uftrace's script gives them.)
                    let text = r.args.as_deref().unwrap_or("");
                    let (name, args) = match text.split_once(" (") {
                        Some((n, a)) => (n, a.strip_suffix(')').unwrap_or(a)),
                        None if text.is_empty() => (e["name"].as_str().unwrap_or(""), ""),
                        None => (text, ""),
                    };
                    e["name"] = name.to_string().into();
                    e["kind"] = "event".into();
                    if !args.is_empty() {
                        e["args"] = args.into();
                    }
                }
                Kind::Event | Kind::Lost => continue,
            }
            writeln!(input, "{e}")?;
        }
        input.flush()
    });
    drop(input);
    let status = child.wait().map_err(|e| e.to_string())?;
    for w in data.warnings() {
        eprintln!("shadowgraph: warning: {w}");
    }
    match (status.success(), sent) {
        (true, Ok(())) => Ok(ExitCode::SUCCESS),
        (true, Err(e)) => Err(format!("script {}: {e}", script.display())),
        // (It stopped reading: it failed, and said why.)
        (false, _) => Err(format!("script {} failed ({status})", script.display())),
    }
}

/// `script`: with `record`, records the program `args` first (into
/// `dir`, with the options the script asks for), then runs the script.
pub(crate) fn script(
    script: &Path,
    dir: &Path,
    record: bool,
    filter: &ReplayFilter,
    args: &[String],
) -> Result<ExitCode, String> {
    if record {
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let status = Command::new(me)
            .arg("record")
            .arg("-d")
            .arg(dir)
            .args(script_options(script))
            .arg("--")
            .args(args)
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("script --record: the recording failed ({status})"));
        }
    }
    run(script, dir, filter, args)
}

/// The record options a script asks for in a comment line
/// `# uftrace-option: -A fopen@arg1/s`.
pub(crate) fn script_options(script: &Path) -> Vec<String> {
    std::fs::read_to_string(script)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .filter_map(|l| l.trim_start().strip_prefix("uftrace-option:"))
        .flat_map(|o| o.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_as_a_script_gets_them() {
        assert_eq!(
            values(r#"1, "a, \"b\"", 0x10, -2.5, ptr"#),
            vec![
                Value::from(1),
                Value::from("a, \"b\""),
                Value::from(16u64),
                Value::from(-2.5),
                Value::from("ptr")
            ]
        );
        assert!(values("").is_empty());
    }
}
