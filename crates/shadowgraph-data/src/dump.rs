//! `dump` as text: the records of each thread as they are in the files
//! (uftrace's plain `dump`), and the call graph as Graphviz edges
//! (uftrace's `dump --graphviz`).

#![forbid(unsafe_code)]

use super::dir::DataDir;
use super::format::Kind;
use super::graph;
use super::replay::{ReplayError, ReplayFilter};
use std::io::Write;

/// The names of uftrace's feature bits, bit 0 first.
const FEATURES: [&str; 12] = [
    "PLTHOOK",
    "TASK_SESSION",
    "KERNEL",
    "ARGUMENT",
    "RETVAL",
    "SYM_REL_ADDR",
    "MAX_STACK",
    "EVENT",
    "PERF_EVENT",
    "AUTO_ARGS",
    "DEBUG_INFO",
    "ESTIMATE_RETURN",
];

/// The names of uftrace's info bits, bit 0 first.
const INFOS: [&str; 14] = [
    "EXE_NAME",
    "EXE_BUILD_ID",
    "EXIT_STATUS",
    "CMDLINE",
    "CPUINFO",
    "MEMINFO",
    "OSINFO",
    "TASKINFO",
    "USAGEINFO",
    "LOADINFO",
    "ARG_SPEC",
    "RECORD_DATE",
    "PATTERN_TYPE",
    "VERSION",
];

/// The set bits of `mask` by name, ` | ` between them.
fn bit_names(mask: u64, names: &[&str]) -> String {
    let set: Vec<&str> = (0..names.len())
        .filter(|&i| mask & 1 << i != 0)
        .map(|i| names[i])
        .collect();
    set.join(" | ")
}

/// uftrace's plain `dump`: the header of the recording's `info` file (when
/// it has uftrace's), then each thread's records: time, thread, kind,
/// function and address, depth.
pub fn dump_text(data: &DataDir, out: &mut impl Write) -> Result<(), ReplayError> {
    dump_text_of(&[data], &ReplayFilter::default(), out)
}

/// [`dump_text`] of the records `filter` keeps (threads, time range, and
/// the calls its filters and triggers select), each with the depth it was
/// recorded at, as uftrace's plain dump shows them. `datas`: a recording,
/// then the programs started by exec during it, in the order they
/// started: a thread's records in each program it ran, one after the
/// other, as uftrace keeps them in one file.
pub fn dump_text_of(
    datas: &[&DataDir],
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let Some(&data) = datas.first() else {
        return Ok(());
    };
    let range = match filter.time_range {
        Some(r) => r.resolve(crate::replay::first_time(data)?),
        None => 0..=u64::MAX,
    };
    let info = std::fs::read(data.dir.join("info")).unwrap_or_default();
    if info.len() >= 32 && info.starts_with(b"Ftrace!\0") {
        let u16_at = |i: usize| u16::from_le_bytes([info[i], info[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(info[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(info[i..i + 8].try_into().expect("8 bytes"));
        let magic: String = info[..8].iter().map(|b| format!("{b:02x}")).collect();
        let (endian, class) = (info[14], info[15]);
        let (features, infos) = (u64_at(16), u64_at(24));
        let head = "uftrace file header:";
        writeln!(out, "{head} magic         = {magic}")?;
        writeln!(out, "{head} version       = {}", u32_at(8))?;
        writeln!(out, "{head} header size   = {}", u16_at(12))?;
        let e = if endian == 1 { "little" } else { "big" };
        writeln!(out, "{head} endian        = {endian} ({e})")?;
        let c = if class == 2 { "64" } else { "32" };
        writeln!(out, "{head} class         = {class} ({c} bit)")?;
        let f = bit_names(features, &FEATURES);
        writeln!(out, "{head} features      = {features:#x} ({f})")?;
        let i = bit_names(infos, &INFOS);
        writeln!(out, "{head} info          = {infos:#x} ({i})")?;
        writeln!(out)?;
    }
    // The calls the filters keep, by thread (read in time order, as the
    // views read them: triggers switch tracing for every thread).
    let selecting = !ReplayFilter {
        tids: Vec::new(),
        time_range: None,
        ..filter.clone()
    }
    .is_empty();
    // (By recording and thread.)
    type Kept = std::collections::HashMap<(usize, i32), Vec<(u64, Kind, u64)>>;
    let mut kept: Kept = Default::default();
    if selecting {
        for (tid, records, i) in crate::replay::session_threads(datas, filter)? {
            let list = kept.entry((i, tid)).or_default();
            for r in records {
                let r = r?;
                list.push((r.time, r.kind, r.addr));
            }
        }
    }
    // Threads in the order the recordings list them, the first's first.
    let mut tids: Vec<i32> = Vec::new();
    for d in datas {
        for &t in &d.tids {
            if !tids.contains(&t) {
                tids.push(t);
            }
        }
    }
    for tid in tids {
        if !(filter.tids.is_empty() || filter.tids.contains(&tid)) {
            continue;
        }
        writeln!(out, "reading {tid}.dat")?;
        for (i, &data) in datas.iter().enumerate() {
            if data.tids.contains(&tid) {
                let keep = selecting.then(|| kept.remove(&(i, tid)).unwrap_or_default());
                dump_thread(data, tid, &range, keep, out)?;
            }
        }
    }
    Ok(())
}

/// The records of thread `tid` in `data` within `range`; only those of
/// `kept` (in the thread's order) where filters select.
fn dump_thread(
    data: &DataDir,
    tid: i32,
    range: &std::ops::RangeInclusive<u64>,
    kept: Option<Vec<(u64, Kind, u64)>>,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let selecting = kept.is_some();
    let mut keep = kept.unwrap_or_default().into_iter().peekable();
    for r in data.dump_stream(tid)? {
        let r = r?;
        if !range.contains(&r.time) {
            continue;
        }
        if selecting {
            if keep.peek() != Some(&(r.time, r.kind, r.addr)) {
                continue;
            }
            keep.next();
        }
        let kind = match r.kind {
            Kind::Entry => "entry",
            Kind::Exit => "exit ",
            Kind::Event => "event",
            Kind::Lost => "lost ",
        };
        let name = match r.kind {
            Kind::Event => (crate::events::name(r.addr))
                .or_else(|| data.user_events.get(&r.addr).map(|n| &**n))
                .map_or_else(|| data.name(r.addr).to_string(), |n| n.to_string()),
            _ => data.name(r.addr).to_string(),
        };
        let time = format!("{}.{:09}", r.time / 1_000_000_000, r.time % 1_000_000_000);
        writeln!(
            out,
            "{time}  {tid:5}: [{kind}] {name}({:x}) depth: {}",
            crate::loads::untagged(r.addr),
            r.depth
        )?;
        // An entry's arguments or an exit's return value, as uftrace
        // dumps them (`dump_stream`'s: the length, then the lines).
        if let (Kind::Entry | Kind::Exit, Some((len, lines))) =
            (r.kind, r.args.as_deref().and_then(|a| a.split_once('\n')))
        {
            let what = if r.kind == Kind::Entry {
                "args "
            } else {
                "retval"
            };
            writeln!(out, "{time}  {tid:5}: [{what}] length = {len}")?;
            out.write_all(lines.as_bytes())?;
        }
    }
    Ok(())
}

/// The recorded program's file name (the graphs' root).
fn program_name(data: &DataDir) -> &str {
    let exe = data.info.get("exe").unwrap_or("");
    exe.rsplit('/').next().unwrap_or(exe)
}

/// uftrace's `dump --mermaid`: the whole program's call tree (as `graph`
/// without a function shows it) as a Mermaid flowchart in an HTML page,
/// its edges as uftrace writes them (`DEPTH_ID["caller"] -->|CALLS|
/// DEPTH_ID["callee"]`, ids in the order the functions were first called).
/// `datas`: a recording, then the programs started by exec during it, all
/// in one tree.
pub fn dump_mermaid(
    datas: &[&DataDir],
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let Some(&data) = datas.first() else {
        return Ok(());
    };
    let name = program_name(data);
    let root = graph::whole(datas, filter)?;
    writeln!(out, "<html>\n<body>")?;
    writeln!(
        out,
        "<h2>Function Call Graph for <span style=\"color:blue\">{name}</span></h2>"
    )?;
    writeln!(out, "<div class=\"mermaid\">\nflowchart TB")?;
    root.visit_numbered(name, &mut |(p, pid), (c, cid), calls, depth| {
        let quote = |s: &str| s.replace('"', "#quot;");
        writeln!(
            out,
            "  {depth}_{pid}[\"{}\"] -->|{calls}| {}_{cid}[\"{}\"];",
            quote(p),
            depth + 1,
            quote(c)
        )
    })?;
    writeln!(out, "</div>")?;
    writeln!(
        out,
        "<script src=\"https://cdn.jsdelivr.net/npm/mermaid/dist/mermaid.min.js\"></script>"
    )?;
    writeln!(
        out,
        "<script>mermaid.initialize({{ startOnLoad: true, maxTextSize: 99999999, \
         flowchart: {{ useMaxWidth: false }} }});</script>"
    )?;
    writeln!(out, "</body>\n</html>")?;
    Ok(())
}

/// uftrace's `dump --graphviz`: the whole program's call tree (as `graph`
/// without a function shows it) as a Graphviz digraph, an edge from each
/// caller to each callee labelled with the calls. `datas`: a recording,
/// then the programs started by exec during it, all in one tree.
pub fn dump_graphviz(
    datas: &[&DataDir],
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    let Some(&data) = datas.first() else {
        return Ok(());
    };
    let name = program_name(data);
    writeln!(
        out,
        "# version\":\"shadowgraph {}\"",
        env!("CARGO_PKG_VERSION")
    )?;
    if let Some(cmdline) = data.info.get("cmdline") {
        writeln!(out, "# command_line \"{cmdline}\"")?;
    }
    writeln!(out, "\ndigraph \"{name}\" {{ ")?;
    let root = graph::whole(datas, filter)?;
    root.visit(name, &mut |parent, child, calls| {
        writeln!(
            out,
            "    \"{parent}\" -> \"{child}\" [xlabel = \"{calls}\"]"
        )
    })?;
    writeln!(out, "}}")?;
    Ok(())
}
