//! `script -S FILE.py` (and `.lua`): a script's callbacks over a recording, as
//! uftrace's `script` runs them, compared with uftrace 0.13's on the same
//! recording; `script --record` and `record -S`.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// Writes `text` as the script `name` in `dir`.
fn script(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `TOOL script -d DATA ARGS…`'s standard output, which must succeed.
fn run(tool: &mut Command, data: &Path, args: &[&str]) -> String {
    let o = tool
        .arg("script")
        .arg("-d")
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?}: {}", text(&o).1);
    text(&o).0
}

/// Every callback with what its context holds, the script's filter list,
/// the views' filters, and the command it is given, as uftrace's.
#[test]
fn scripts_run_as_uftrace_runs_them() {
    require("python3", "the scripts");
    let data = recording("sc", "naps.c", &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"]);
    let dir = data.parent().unwrap();
    let all = script(
        dir,
        "all.py",
        r#"
def uftrace_begin(ctx):
    print("begin", ctx["record"], ctx["cmds"])
def uftrace_entry(ctx):
    print("entry", ctx["tid"] > 0, ctx["depth"], ctx["name"], ctx["timestamp"] > 0, ctx["address"] > 0)
def uftrace_exit(ctx):
    print("exit ", ctx["depth"], ctx["name"], ctx["duration"] >= 0)
def uftrace_end():
    print("end")
"#,
    );
    let only = script(
        dir,
        "only.py",
        r#"
UFTRACE_FUNCS = [ "mid", "^le" ]
def uftrace_entry(ctx):
    print("%s enter %d" % (ctx["name"], ctx["depth"]))
def uftrace_exit(ctx):
    print("%s exit" % ctx["name"])
"#,
    );
    let out = run(
        &mut shadowgraph(),
        &data,
        &["-S", all.to_str().unwrap(), "a", "b"],
    );
    assert!(
        out.starts_with("begin False ('a', 'b')\nentry True 0 main True True\nentry True 1 mid")
            && out.ends_with("exit  0 main True\nend\n"),
        "{out}"
    );
    if !require("uftrace", "the same scripts by uftrace") {
        return;
    }
    for args in [
        &["-S", all.to_str().unwrap(), "a", "b"][..],
        &["-S", all.to_str().unwrap(), "-F", "mid", "-D", "2"],
        &["-S", all.to_str().unwrap(), "-N", "fib"],
        &["-S", only.to_str().unwrap()],
    ] {
        assert_eq!(
            run(&mut shadowgraph(), &data, args),
            run(&mut Command::new("uftrace"), &data, args),
            "{args:?}"
        );
    }
}

/// `script --record` records first, with the options the script asks
/// for (`# uftrace-option:`), and `record -S` runs a script over its
/// recording; values arrive as numbers and strings; errors are said.
#[test]
fn scripts_record_and_get_values() {
    require("python3", "the scripts");
    let dir = workdir("scr");
    let exe = build_fixture_with(
        &dir,
        "scr",
        "naps.c",
        &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"],
    );
    let args = script(
        &dir,
        "args.py",
        r#"
# uftrace-option: -A mid@arg1 -R leaf@retval
def uftrace_entry(ctx):
    if "args" in ctx:
        print(ctx["name"], ctx["args"], type(ctx["args"][0]).__name__)
def uftrace_exit(ctx):
    if "retval" in ctx:
        print(ctx["name"], "=", ctx["retval"])
"#,
    );
    let data = dir.join("r.data");
    let o = shadowgraph()
        .args(["script", "-d"])
        .arg(&data)
        .arg("-S")
        .arg(&args)
        .arg("--record")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let out = text(&o).0;
    assert!(
        out.contains("mid (0,) int\nleaf = 1\nleaf = 4\nmid (1,) int\n"),
        "{out}"
    );
    let count = script(
        &dir,
        "count.py",
        "n = 0\ndef uftrace_entry(ctx):\n    global n\n    n += 1\ndef uftrace_exit(ctx):\n    pass\ndef uftrace_end():\n    print('calls', n)\n",
    );
    let o = record_run(&[], &["-S", count.to_str().unwrap()], &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(text(&o).0.ends_with("calls 14\n"), "{}", text(&o).0);
    for (s, says) in [
        (dir.join("nosuch.py"), "no such script"),
        (
            script(&dir, "x.rb", "p 1"),
            "scripts are Python (.py) or Lua (.lua)",
        ),
        (
            script(&dir, "bad.py", "def uftrace_entry(ctx):\n    1/0\n"),
            "failed",
        ),
    ] {
        let o = shadowgraph()
            .args(["script", "-d"])
            .arg(&data)
            .arg("-S")
            .arg(&s)
            .output()
            .unwrap();
        assert!(
            !o.status.success() && text(&o).1.contains(says),
            "{}",
            text(&o).1
        );
    }
}

/// A `read=` trigger's events reach `uftrace_event` with their name and
/// values, as uftrace's script gives them.
#[test]
fn scripts_see_read_events() {
    let dir = workdir("script_events");
    let exe = build_fixture(&dir, "ev", "abc.c");
    let data = dir.join("ev.data");
    record_ok(&["-T", "main@read=proc/statm"], &data, &exe);
    let s = script(
        &dir,
        "ev.py",
        "def uftrace_entry(ctx):\n  pass\ndef uftrace_exit(ctx):\n  pass\n\
         def uftrace_event(ctx):\n  print(ctx['name'], ' '.join(kv.split('=')[0] for kv in ctx['args'].split(' ')))\n",
    );
    let out = run(&mut shadowgraph(), &data, &["-S", &s.to_string_lossy()]);
    assert_eq!(
        out,
        "read:proc/statm vmsize vmrss shared\ndiff:proc/statm vmsize vmrss shared\n"
    );
}

/// `script -S FILE.lua`: a Lua script (run by LuaJIT, or another Lua)
/// gets the same callbacks and contexts as uftrace's LuaJIT scripts give
/// it: arguments in a table, the return value, the options of its
/// `-- uftrace-option:` line taken by `--record`, its `UFTRACE_FUNCS`
/// list; compared with uftrace's on the same recording.
#[test]
fn lua_scripts_run_as_uftrace_runs_them() {
    // (LuaJIT has -v, not --version.)
    let luajit = Command::new("luajit").arg("-v").output();
    if !shadowgraph_testkit::tool::available(
        luajit.is_ok_and(|o| o.status.success()),
        "luajit (see .ci/run)",
        "Lua scripts",
    ) {
        return;
    }
    let dir = workdir("lua");
    let exe = build_fixture_with(
        &dir,
        "lua",
        "naps.c",
        &["-DMIDS=2", "-DNAP_US=100", "-DFIB_N=3"],
    );
    let all = script(
        &dir,
        "all.lua",
        r#"
-- uftrace-option: -A mid@arg1 -R leaf@retval
function uftrace_begin(ctx)
  print("begin", ctx.record, table.concat(ctx.cmds, " "))
end
function uftrace_entry(ctx)
  local args = ""
  if ctx.args then
    for i, a in ipairs(ctx.args) do args = args .. " " .. type(a) .. ":" .. tostring(a) end
  end
  print("entry", ctx.tid > 0, ctx.depth, ctx.name, ctx.address > 0, args)
end
function uftrace_exit(ctx)
  local r = ctx.retval and (" = " .. type(ctx.retval) .. ":" .. ctx.retval) or ""
  print("exit", ctx.depth, ctx.name, ctx.duration >= 0, r)
end
function uftrace_end() print("end") end
"#,
    );
    let only = script(
        &dir,
        "only.lua",
        r#"
UFTRACE_FUNCS = { "mid", "^le" }
function uftrace_entry(ctx) print(ctx.name .. " enter " .. ctx.depth) end
"#,
    );
    let data = dir.join("l.data");
    let o = shadowgraph()
        .args(["script", "--record", "-d"])
        .arg(&data)
        .arg("-S")
        .arg(&all)
        .arg(&exe)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("entry\ttrue\t1\tmid\ttrue\t number:0\n")
            && out.contains("exit\t2\tleaf\ttrue\t = number:1\n")
            && out.ends_with("end\n"),
        "{out}"
    );
    if !require("uftrace", "the same Lua scripts by uftrace") {
        return;
    }
    for s in [&all, &only] {
        let args = ["-S", s.to_str().unwrap()];
        assert_eq!(
            run(&mut shadowgraph(), &data, &args),
            run(&mut Command::new("uftrace"), &data, &args),
            "{s:?}"
        );
    }
}
