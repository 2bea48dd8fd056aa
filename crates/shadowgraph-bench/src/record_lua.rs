//! `bench record`'s Lua rows: a big real trace. Lua 5.4 (the `lua-src`
//! crate's sources, built with patchable function entries by this crate's
//! build script) runs fib(27), sorts a 200,000-entry table and formats
//! 200,000 strings: tens of millions of calls, above a gigabyte of records,
//! where the writer, not the call, may set the pace. Untraced, under
//! `shadowgraph record` and under `uftrace record -P .`; the first run of
//! each tool writes to the disk's temporary directory, cold (a new
//! directory, its pages not yet in the cache), the rest where the other
//! rows' recordings go.

#![forbid(unsafe_code)]

use crate::common::{median, time_cmd, tool_command};
use std::path::Path;

/// The interpreter: the script in argv[1], run by the Lua library (the API
/// declared here: no headers needed).
const LUA_MAIN_C: &str = "#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\n\
typedef struct lua_State lua_State;\n\
lua_State *luaL_newstate(void);\n\
void luaL_openlibs(lua_State *L);\n\
int luaL_loadstring(lua_State *L, const char *s);\n\
int lua_pcallk(lua_State *L, int nargs, int nresults, int errfunc, intptr_t ctx, void *k);\n\
const char *lua_tolstring(lua_State *L, int idx, size_t *len);\n\
void lua_close(lua_State *L);\n\
int main(int argc, char **argv) {\n\
    if (argc < 2) return 2;\n\
    lua_State *L = luaL_newstate();\n\
    luaL_openlibs(L);\n\
    if (luaL_loadstring(L, argv[1]) || lua_pcallk(L, 0, 0, 0, 0, 0)) {\n\
        fprintf(stderr, \"lua: %s\\n\", lua_tolstring(L, -1, 0));\n\
        return 1;\n\
    }\n\
    lua_close(L);\n\
    return 0;\n\
}\n";

/// The workload.
const WORK_LUA: &str = "local function fib(n) if n < 2 then return n end \
return fib(n - 1) + fib(n - 2) end\n\
local s = fib(27)\n\
local t = {}\n\
for i = 1, 200000 do t[i] = (i * 7919) % 200000 end\n\
table.sort(t)\n\
local parts = {}\n\
for i = 1, 200000 do parts[#parts + 1] = string.format('%d:%s', i, tostring(i * 1.5)) end\n\
print(s, #t, #table.concat(parts, ','))\n";

/// The bytes of the `.dat` files in `dir` (its threads' records).
fn dat_bytes(dir: &Path) -> u64 {
    let files = std::fs::read_dir(dir).into_iter().flatten().flatten();
    files
        .filter(|e| e.path().extension().is_some_and(|x| x == "dat"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// The writer waits a recording counts: (times, seconds).
fn waits(dir: &Path) -> (u64, f64) {
    let d = shadowgraph_data::dir::DataDir::open(dir).ok();
    let w = d.as_ref().and_then(|d| {
        let (n, ns) = d.info.get("writer_waits")?.split_once(" / ")?;
        Some((n.parse().ok()?, ns.parse::<f64>().ok()? / 1e9))
    });
    w.unwrap_or((0, 0.0))
}

/// The rows: `reps` rounds (medians), after one cold run of each tool
/// into `dir` (on disk); the other recordings in `data_dir`.
pub(crate) fn rows(
    dir: &Path,
    data_dir: &Path,
    me: &Path,
    reps: usize,
    uftrace: bool,
) -> Result<(), String> {
    let src = dir.join("lua_main.c");
    let exe = dir.join("lua_bench");
    std::fs::write(&src, LUA_MAIN_C).map_err(|e| e.to_string())?;
    // (The libraries after the archive that needs them.)
    let cc = shadowgraph_testkit::cc::compiler();
    let built = std::process::Command::new(&cc)
        .args(["-O2", "-fpatchable-function-entry=5"])
        .arg(&src)
        .arg(env!("SHADOWGRAPH_BENCH_LUA_LIB"))
        .args(["-lm", "-ldl", "-o"])
        .arg(&exe)
        .output()
        .map_err(|e| format!("cannot run the C compiler `{cc}`: {e} (install gcc)"))?;
    if !built.status.success() {
        return Err(format!(
            "building the Lua benchmark failed: {}",
            String::from_utf8_lossy(&built.stderr).trim()
        ));
    }
    let mut tools = vec!["plain", "sg", "sgc"];
    if uftrace {
        tools.push("uftrace");
    }
    let run = |tool: &str, data: &Path| {
        let mut c = tool_command(tool, me, &exe, data, &[]);
        c.arg(WORK_LUA);
        c
    };
    // Cold: a new directory on disk, each tool's first recording of it.
    let cold: Vec<(f64, (u64, f64))> = tools[1..]
        .iter()
        .map(|tool| {
            let data = dir.join(format!("lua-cold-{tool}.data"));
            let t = time_cmd(1, || run(tool, &data))?;
            let w = waits(&data);
            let _ = std::fs::remove_dir_all(&data);
            Ok((t, w))
        })
        .collect::<Result<_, String>>()?;
    let data = data_dir.join("lua.data");
    let mut times = vec![Vec::new(); tools.len()];
    let mut ratios = Vec::new();
    // shadowgraph's waits, by tool (uftrace's: none counted).
    let mut sg_waits = vec![Vec::new(); tools.len()];
    for _ in 0..reps {
        for (i, (tool, t)) in tools.iter().zip(times.iter_mut()).enumerate() {
            t.push(time_cmd(1, || run(tool, &data))?);
            if tool.starts_with("sg") {
                sg_waits[i].push(waits(&data).1);
            }
        }
        if uftrace {
            let plain = times[0].last().copied().unwrap_or(0.0);
            let (sg, uf) = (times[1].last(), times[3].last());
            if let (Some(sg), Some(uf)) = (sg, uf) {
                ratios.push((sg - plain) / (uf - plain));
            }
        }
    }
    let _ = time_cmd(1, || run("sgc", &data))?;
    let compact_bytes = dat_bytes(&data);
    let _ = time_cmd(1, || run("sg", &data))?;
    let sg_bytes = dat_bytes(&data);
    let records = sg_bytes / shadowgraph_data::format::RECORD_SIZE as u64;
    let calls = (records / 2).max(1);
    let m: Vec<f64> = times.iter().map(|t| median(t.clone())).collect();
    println!(
        "# Lua 5.4 (lua-src, patchable entries): fib(27), table.sort of 200k, 200k \
         string.format; {calls} calls ({records} records in shadowgraph's recording), \
         medians of {reps}"
    );
    println!(
        "{:<34} {:>9} {:>12} {:>12} {:>12}",
        "", "total s", "ns/call", "cold s", "waits s"
    );
    println!("{:<34} {:>9.3}", "untraced", m[0]);
    let names = ["shadowgraph record", "  (--compact)", "uftrace record -P ."];
    for (i, name) in names.iter().enumerate().take(tools.len() - 1) {
        let (t, (cold_t, (_, cold_w))) = (m[i + 1], cold[i]);
        let per_call = (t - m[0]) * 1e9 / calls as f64;
        let w = match sg_waits[i + 1].is_empty() {
            false => format!("{:.3} / {cold_w:.3}", median(sg_waits[i + 1].clone())),
            true => "-".to_string(),
        };
        println!("{name:<34} {t:>9.3} {per_call:>12.1} {cold_t:>12.3} {w:>12}");
    }
    if !ratios.is_empty() {
        println!(
            "# overhead per call, shadowgraph / uftrace: {:.3} (median of the rounds' ratios); \
             cold first runs: {:.3}",
            median(ratios),
            (cold[0].0 - m[0]) / (cold[2].0 - m[0])
        );
    }
    println!(
        "# the recording's thread files: {:.2} GB, {:.2} GB with --compact ({:.1} and {:.1} \
         bytes a record)",
        sg_bytes as f64 / 1e9,
        compact_bytes as f64 / 1e9,
        sg_bytes as f64 / records.max(1) as f64,
        compact_bytes as f64 / records.max(1) as f64
    );
    println!(
        "# waits s: the time shadowgraph's traced threads waited for the writer (full rings), \
         median / the cold run's"
    );
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}
