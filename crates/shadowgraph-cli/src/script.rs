//! `script -S FILE.py` (or `FILE.lua`): a Python (or Lua) script's
//! callbacks run over a recording, as uftrace's `script` runs them
//! (`uftrace_begin(ctx)`, `uftrace_entry(ctx)`, `uftrace_exit(ctx)`,
//! `uftrace_event(ctx)`, `uftrace_end()`, and the `UFTRACE_FUNCS` list).
//! The system's `python3` (or LuaJIT, or another Lua 5.1 or later) runs the
//! script in a process of its own; the calls reach it one a line on its
//! standard input (JSON, or Lua table constructors), in time order, as the
//! views' filters select them.

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

/// What a Lua interpreter runs (`-e`): the user's script (its path in
/// `SHADOWGRAPH_SCRIPT`) loaded, then one callback per line read, each
/// line a table constructor. `UFTRACE_FUNCS` patterns with a regex's
/// characters are taken as Lua patterns.
const LUA_DRIVER: &str = r#"
local load_string = loadstring or load
dofile(os.getenv("SHADOWGRAPH_SCRIPT"))
local funcs = UFTRACE_FUNCS
local function wanted(name)
  if funcs == nil then return true end
  for _, p in ipairs(funcs) do
    if p == name or (p:find("[%.%?%*%+%-%^%$|%(%)%[%]{}]") and name:find(p)) then
      return true
    end
  end
  return false
end
local calls = {entry = uftrace_entry, exit = uftrace_exit, event = uftrace_event}
local function read(line) return load_string("return " .. line)() end
local failed = {}
local begin = read(io.read("*l"))
if uftrace_begin then uftrace_begin(begin) end
for line in io.lines() do
  local e = read(line)
  local kind = e.kind
  e.kind = nil
  local f = calls[kind]
  if f and (kind == "event" or wanted(e.name)) then
    -- A callback that fails is said once, and the others go on (as
    -- uftrace's go on).
    local ok, err = pcall(f, e)
    if not ok and not failed[kind] then
      failed[kind] = true
      io.stderr:write("shadowgraph: script: uftrace_" .. kind .. ": " .. tostring(err) .. "\n")
    end
  end
end
if uftrace_end then uftrace_end() end
io.stdout:flush()
"#;

/// The Lua interpreters tried, in order.
const LUAS: [&str; 6] = ["luajit", "lua5.4", "lua5.3", "lua5.2", "lua5.1", "lua"];

/// `v` as a Lua expression (strings with every byte outside printable
/// ASCII, `"` and `\` escaped by number).
fn lua(v: &Value) -> String {
    match v {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let mut o = String::from("\"");
            for &b in s.as_bytes() {
                match b {
                    b'"' | b'\\' => o.push_str(&format!("\\{}", b as char)),
                    0x20..=0x7e => o.push(b as char),
                    _ => o.push_str(&format!("\\{b:03}")),
                }
            }
            o.push('"');
            o
        }
        Value::Array(a) => format!("{{{}}}", a.iter().map(lua).collect::<Vec<_>>().join(",")),
        Value::Object(m) => {
            let fields: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", lua(v))).collect();
            format!("{{{}}}", fields.join(","))
        }
    }
}

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
    // A struct passed by value (`Option{...}`, `StringRef{}`): its type,
    // as uftrace's scripts get it.
    if let Some((name, _)) = v.split_once('{').filter(|(n, rest)| {
        rest.ends_with('}') && !n.is_empty() && n.chars().all(|c| c.is_alphanumeric() || c == '_')
    }) {
        return Value::from(format!("struct: {name}{{}}"));
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
    let is_lua = match script.extension().and_then(|e| e.to_str()) {
        Some("py") => false,
        Some("lua") => true,
        _ => {
            return Err(format!(
                "-S {}: scripts are Python (.py) or Lua (.lua)",
                script.display()
            ))
        }
    };
    let data = DataDir::open(dir).map_err(|e| e.to_string())?;
    let threads = replay::thread_records(&data, filter).map_err(|e| e.to_string())?;
    let mut child = match is_lua {
        false => {
            let mut python = Command::new("python3");
            python.arg("-c").arg(DRIVER).arg(script);
            spawn(python)
                .map_err(|e| format!("script: cannot run python3 ({e}): it runs .py scripts"))?
        }
        true => LUAS
            .iter()
            .find_map(|l| {
                let mut lua = Command::new(l);
                lua.arg("-e")
                    .arg(LUA_DRIVER)
                    .env("SHADOWGRAPH_SCRIPT", script);
                spawn(lua).ok()
            })
            .ok_or_else(|| {
                format!(
                    "script: no Lua to run {} ({})",
                    script.display(),
                    LUAS.join(", ")
                )
            })?,
    };
    let mut input = std::io::BufWriter::new(child.stdin.take().expect("piped"));
    let begin = json!({
        "record": false,
        "version": format!("v0.13 ( shadowgraph {} )", env!("CARGO_PKG_VERSION")),
        "cmds": cmds,
    });
    // Per thread: the entry time at each depth, for the exit's duration.
    let mut open: std::collections::HashMap<i32, Vec<u64>> = Default::default();
    let line = |v: &Value| if is_lua { lua(v) } else { v.to_string() };
    let sent = writeln!(input, "{}", line(&begin)).and_then(|()| {
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
                "address": shadowgraph_data::loads::untagged(r.addr),
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
            writeln!(input, "{}", line(&e))?;
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

/// Starts `command` (a script's interpreter) reading our pipe, writing to
/// the standard output and error `shadowgraph` was started with.
fn spawn(mut command: Command) -> std::io::Result<std::process::Child> {
    crate::logfile::program_stderr(&mut command);
    command.stdin(Stdio::piped()).spawn()
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
/// `# uftrace-option: -A fopen@arg1/s` (`--` in Lua).
pub(crate) fn script_options(script: &Path) -> Vec<String> {
    std::fs::read_to_string(script)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix('#').or_else(|| l.strip_prefix("--"))
        })
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
        assert_eq!(
            values("Option{...}, S{}"),
            vec![Value::from("struct: Option{}"), Value::from("struct: S{}")]
        );
        assert!(values("").is_empty());
    }
}
