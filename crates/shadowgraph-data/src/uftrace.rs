//! Export to uftrace's data directory format (uftrace v0.13 reads it):
//! `info` (binary header + `key:value` sections), `task.txt`, one
//! `sid-<id>.map` with the traced objects' ranges, a `<name>.sym` per object
//! (addresses relative to its base), and `<tid>.dat` with nanosecond
//! timestamps (the record layout is already uftrace's).

use super::dir::{DataDir, DataError};
use super::format::{decode, RECORD_SIZE, STUBS_SUFFIX};
use super::time::Calibration;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

/// uftrace feature bits: TASK_SESSION | SYM_REL_ADDR | MAX_STACK.
const FEATURES: u64 = 1 << 1 | 1 << 5 | 1 << 6;
/// Info sections written, in this order (uftrace's bit numbers): exename,
/// build_id, exit_status, cmdline, cpuinfo, meminfo, osinfo, taskinfo,
/// usageinfo, loadinfo, record_date, pattern_type, uftrace_version.
const INFO_MASK: u64 = 0x3bff;

/// The `info` version of a recording whose records are in the compact
/// layout: one uftrace does not read.
pub const COMPACT_VERSION: u32 = 1004;

/// Feature bits of recorded arguments and return values.
const ARGUMENT: u64 = 1 << 3;
const RETVAL: u64 = 1 << 4;
/// `-a`: the built-in specs and enums are in `info` (`argauto`, …).
const AUTO_ARGS: u64 = 1 << 9;
/// Feature bit: user events (SDT markers'), named in `events.txt`.
const EVENT: u64 = 1 << 7;
/// Feature bit: schedule events in `perf-cpu<N>.dat`.
const PERF_EVENT: u64 = 1 << 8;
/// The info section of argument specs (between loadinfo and record_date).
const ARG_SPEC: u64 = 1 << 10;

/// A `FUNC@spec,…;…` list with each `FUNC` (a glob or `/regex/`, as `-F`
/// takes it) as the regular expression uftrace matches the same names
/// with: a name without special characters as itself.
fn regex_list(list: &str) -> String {
    list.split(';')
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once('@') {
            Some((func, specs)) => format!("{}@{specs}", glob_regex(func)),
            None => e.to_string(),
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// A spec's function pattern as uftrace's regex (a pattern that does not
/// parse is written as given: the recording was made with it).
fn glob_regex(p: &str) -> String {
    match crate::pattern::Pattern::parse(p) {
        Ok(pat) if pat.module().is_none() && !pat.negated() => pat.regex_source(),
        _ => p.to_string(),
    }
}

fn err(path: &Path, e: impl std::fmt::Display) -> DataError {
    DataError {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

/// A traced object: load base, end of its code, path.
#[derive(Clone, Debug)]
pub struct ModuleMap {
    /// Load address of its first mapping.
    pub base: u64,
    /// End of its code.
    pub end: u64,
    /// Its file.
    pub path: PathBuf,
}

/// Reads `maps` of one of our data directories.
pub fn read_maps(data: &DataDir) -> Result<Vec<ModuleMap>, DataError> {
    let p = data.dir.join("maps");
    let text = std::fs::read_to_string(&p).map_err(|e| err(&p, format!("cannot read: {e}")))?;
    let mut out = Vec::new();
    for (n, l) in text.lines().enumerate() {
        let f: Vec<&str> = l.splitn(3, '\t').collect();
        let num = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16);
        match f[..] {
            [b, e, path] => out.push(ModuleMap {
                base: num(b).map_err(|_| err(&p, format!("line {}: bad base", n + 1)))?,
                end: num(e).map_err(|_| err(&p, format!("line {}: bad end", n + 1)))?,
                path: PathBuf::from(path),
            }),
            _ => {
                return Err(err(
                    &p,
                    format!("line {}: expected base<TAB>end<TAB>path", n + 1),
                ))
            }
        }
    }
    Ok(out)
}

/// Copies a `.dat` file converting its timestamps to nanoseconds; checks
/// every record. Returns the first record's time.
fn convert_dat(src: &Path, dst: &Path, cal: &Calibration) -> Result<Option<u64>, DataError> {
    use std::io::Read;
    let mut input = std::fs::File::open(src).map_err(|e| err(src, format!("cannot read: {e}")))?;
    let mut output = std::fs::File::create(dst).map_err(|e| err(dst, e))?;
    let mut buf = vec![0u8; RECORD_SIZE * 65536];
    let mut offset = 0u64;
    let mut first = None;
    let conv = cal.converter();
    loop {
        let mut n = 0;
        while n < buf.len() {
            match input.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(src, format!("cannot read: {e}"))),
            }
        }
        if n == 0 {
            return Ok(first);
        }
        if n % RECORD_SIZE != 0 {
            return Err(err(
                src,
                format!(
                    "truncated: {} stray bytes at offset {}",
                    n % RECORD_SIZE,
                    offset + (n - n % RECORD_SIZE) as u64
                ),
            ));
        }
        for (i, rec) in buf[..n].chunks_exact_mut(RECORD_SIZE).enumerate() {
            let r = decode(
                rec[..].try_into().unwrap(),
                offset + (i * RECORD_SIZE) as u64,
            )
            .map_err(|e| err(src, e))?;
            let ns = conv.to_ns(r.time);
            first.get_or_insert(ns);
            rec[..8].copy_from_slice(&ns.to_le_bytes());
        }
        output.write_all(&buf[..n]).map_err(|e| err(dst, e))?;
        offset += n as u64;
        if n < buf.len() {
            return Ok(first);
        }
    }
}

/// `tasks` (written by the recording's writer): tid → (pid, ppid).
pub(crate) fn read_tasks(dir: &Path) -> std::collections::HashMap<i32, (i32, i32)> {
    let text = std::fs::read_to_string(dir.join("tasks")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split('\t').map(|v| v.parse::<i32>().ok());
            Some((f.next()??, (f.next()??, f.next()??)))
        })
        .collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Copies a compact `.dat` file (times in ns) in uftrace's layout.
/// Returns the first record's time.
fn decode_dat(src: &Path, dst: &Path) -> Result<Option<u64>, DataError> {
    let file = std::fs::File::open(src).map_err(|e| err(src, format!("cannot read: {e}")))?;
    let mut input = std::io::BufReader::new(crate::compact::Dat::new(file, true));
    let mut output = std::io::BufWriter::new(std::fs::File::create(dst).map_err(|e| err(dst, e))?);
    std::io::copy(&mut input, &mut output).map_err(|e| err(src, e))?;
    output.flush().map_err(|e| err(dst, e))?;
    first_time_of(dst, false)
}

/// The time of a `.dat` file's first record (checked), if it has one
/// (`compact`: in that layout).
fn first_time_of(path: &Path, compact: bool) -> Result<Option<u64>, DataError> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| err(path, format!("cannot read: {e}")))?;
    let mut f = crate::compact::Dat::new(f, compact);
    let mut b = [0u8; RECORD_SIZE];
    let mut n = 0;
    while n < RECORD_SIZE {
        match f.read(&mut b[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(path, format!("cannot read: {e}"))),
        }
    }
    match n {
        0 => Ok(None),
        RECORD_SIZE => Ok(Some(decode(&b, 0).map_err(|e| err(path, e))?.time)),
        _ => Err(err(path, format!("truncated: {n} stray bytes at offset 0"))),
    }
}

/// The session map's lines: each run of consecutive mappings (sorted by
/// address) of one object as one line, as uftrace merges them; an
/// object's later runs under its path with [`STUBS_SUFFIX`](crate::format::STUBS_SUFFIX) (and a
/// number from the second on), each with a symbol file of its own.
fn map_lines(maps: &[ModuleMap]) -> Vec<(u64, u64, PathBuf)> {
    let mut out: Vec<(u64, u64, PathBuf)> = Vec::new();
    let mut runs: std::collections::HashMap<&Path, usize> = Default::default();
    for group in maps.chunk_by(|a, b| a.path == b.path) {
        let (base, end) = (group[0].base, group[group.len() - 1].end);
        let n = runs.entry(&group[0].path).or_default();
        let path = match *n {
            0 => group[0].path.clone(),
            1 => PathBuf::from(format!("{}{STUBS_SUFFIX}", group[0].path.display())),
            k => PathBuf::from(format!("{}{STUBS_SUFFIX}{k}", group[0].path.display())),
        };
        *n += 1;
        out.push((base, end, path));
    }
    out
}

/// The `<name>.sym` of each object that held another's addresses (once
/// per file): its functions from its base, as uftrace reads those of a
/// DLOP line.
fn write_load_symbols(data: &DataDir, out: &Path) -> Result<(), DataError> {
    let mut done = std::collections::HashSet::new();
    for l in data.loads.iter().filter(|l| l.tag != 0) {
        let name = Path::new(&l.path)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !done.insert(name.clone()) {
            continue;
        }
        let mut s = format!("# symbols: {}\n# path name: {}\n", l.symbols.len(), l.path);
        for (a, n) in l.symbols.iter().filter(|s| !s.1.is_empty()) {
            writeln!(s, "{:016x} T {n}", a - l.base).unwrap();
        }
        writeln!(s, "{:016x} ? __func_end", l.range.1 - l.base).unwrap();
        let p = out.join(format!("{name}.sym"));
        std::fs::write(&p, s).map_err(|e| err(&p, e))?;
    }
    Ok(())
}

/// Writes `data` as a uftrace data directory at `out` (created).
pub fn export(data: &DataDir, out: &Path) -> Result<(), DataError> {
    std::fs::create_dir_all(out).map_err(|e| err(out, e))?;
    let mut maps = read_maps(data)?;
    // The objects that held the same addresses in turn are named by
    // their DLOP lines alone, as uftrace names objects loaded by dlopen:
    // by the time of each address (were they in the map, uftrace would
    // look there first).
    let tagged = |p: &Path| (data.loads.iter()).any(|l| l.tag != 0 && Path::new(&l.path) == p);
    maps.retain(|m| !tagged(&m.path));
    maps.sort_by_key(|m| m.base);
    let pid: u64 = data
        .info
        .get("pid")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let exe = data.info.get("exe").unwrap_or("").to_string();
    let cal = data.info.calibration();
    let start_ns: u64 = data
        .info
        .get("ns0")
        .and_then(|v| v.parse().ok())
        .unwrap_or(cal.ns0);
    let sid = format!(
        "{:016x}",
        pid.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ start_ns
    );

    // <tid>.dat with nanosecond times, converted in chunks (in place when
    // `out` is the recording itself: through a temporary file).
    let mut first_time = Vec::new();
    for &tid in &data.tids {
        let src = data.dat_path(tid);
        let dst = out.join(format!("{tid}.dat"));
        let first = if cal.is_identity() && same_file(&src, &dst) {
            // Nanoseconds already, in place: nothing to copy (a compact
            // recording stays compact; its `info` says so to uftrace).
            first_time_of(&src, data.compact())?
        } else if data.compact() {
            // Nanoseconds already: decoded.
            let tmp = out.join(format!("{tid}.dat.tmp"));
            let first = decode_dat(&src, &tmp)?;
            std::fs::rename(&tmp, &dst).map_err(|e| err(&dst, e))?;
            first
        } else {
            let tmp = out.join(format!("{tid}.dat.tmp"));
            let first = convert_dat(&src, &tmp, &cal)?;
            std::fs::rename(&tmp, &dst).map_err(|e| err(&dst, e))?;
            first
        };
        first_time.push((tid, first.unwrap_or(start_ns)));
    }

    // task.txt
    let ts = |ns: u64| format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
    let mut task = format!(
        "SESS timestamp={} pid={pid} sid={sid} exename=\"{exe}\"\n",
        ts(start_ns)
    );
    // Threads of forked children (the writer's `tasks` file: tid, pid,
    // ppid): a FORK line for each child, in place of its first thread's
    // TASK line when that is the child's own.
    let tasks = read_tasks(&data.dir);
    let mut forked = std::collections::HashSet::new();
    first_time.sort_by_key(|&(tid, t)| (t, tid));
    for (tid, t) in &first_time {
        let (tpid, ppid) = tasks.get(tid).copied().unwrap_or((pid as i32, 0));
        if tpid as u64 != pid && forked.insert(tpid) {
            writeln!(task, "FORK timestamp={} pid={tpid} ppid={ppid}", ts(*t)).unwrap();
            // (A child's first thread is its FORK line, as uftrace
            // writes it: scripts take the last TASK line for the parent.)
            if *tid == tpid {
                continue;
            }
        }
        writeln!(task, "TASK timestamp={} tid={tid} pid={tpid}", ts(*t)).unwrap();
    }
    for l in &data.loads {
        writeln!(
            task,
            "DLOP timestamp={} tid={} sid={sid} base={:x} libname=\"{}\"",
            ts(l.time),
            l.tid,
            l.base,
            l.path
        )
        .unwrap();
    }
    let p = out.join("task.txt");
    std::fs::write(&p, task).map_err(|e| err(&p, e))?;
    write_load_symbols(data, out)?;

    let mut lines = map_lines(&maps);
    // Objects whose data pointers point to: each traced object's symbols
    // go into its own file, the others' into files of their own (lines of
    // the map that no function is in).
    let objects = crate::meta::read_data_symbols(&data.dir, &mut Vec::new());
    let overlaps =
        |o: &crate::meta::DataObject, l: &(u64, u64, PathBuf)| o.range.0 < l.1 && l.0 < o.range.1;
    for o in &objects {
        if !lines.iter().any(|l| overlaps(o, l)) {
            lines.push((o.range.0, o.range.1, o.path.clone()));
        }
    }
    lines.sort_by_key(|l| l.0);
    let mut map = String::new();
    for (base, end, path) in &lines {
        writeln!(
            map,
            "{base:x}-{end:x} r-xp 00000000 00:00 0                          {}",
            path.display()
        )
        .unwrap();
    }
    // uftrace's map reader needs a last line after the objects: it always
    // writes the stack mapping there.
    writeln!(
        map,
        "7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]"
    )
    .unwrap();
    let p = out.join(format!("sid-{sid}.map"));
    std::fs::write(&p, map).map_err(|e| err(&p, e))?;

    // <name>.sym: the traced functions in each line's range, relative to
    // its start.
    for (base, end, path) in &lines {
        // (A library call's thunk is uftrace's PLT function, `P`.)
        let kind = match path.to_string_lossy().ends_with(crate::pattern::PLT_SUFFIX) {
            true => 'P',
            false => 'T',
        };
        // (address, size: data only, kind, name)
        let mut syms: Vec<(u64, u64, char, &str)> = data
            .symbols
            .iter()
            .filter(|(a, n)| !n.is_empty() && (*base..*end).contains(a))
            .map(|(a, n)| (a - base, 0, kind, n.as_str()))
            .collect();
        for o in objects
            .iter()
            .filter(|o| overlaps(o, &(*base, *end, path.clone())))
        {
            syms.extend(
                (o.symbols.iter())
                    .filter(|s| (*base..*end).contains(&s.0))
                    .map(|s| (s.0 - base, s.1, s.2, s.3.as_str())),
            );
        }
        syms.sort_by_key(|s| s.0);
        syms.dedup_by_key(|s| s.0);
        let mut s = format!(
            "# symbols: {}\n# path name: {}\n",
            syms.len(),
            path.display()
        );
        for (i, (a, size, kind, n)) in syms.iter().enumerate() {
            writeln!(s, "{a:016x} {kind} {n}").unwrap();
            // A data symbol ends where its size says (as uftrace's files
            // mark it), not at the next symbol.
            let next = syms.get(i + 1).map_or(u64::MAX, |s| s.0);
            if *size > 0 && a + size < next {
                writeln!(s, "{:016x} ? __sym_end", a + size).unwrap();
            }
        }
        writeln!(s, "{:016x} ? __func_end", end - base).unwrap();
        let name = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let p = out.join(format!("{name}.sym"));
        std::fs::write(&p, s).map_err(|e| err(&p, e))?;
    }

    // perf-cpu<N>.dat: schedule events, and events.txt: the user events'
    // names, as they are (copied where the export goes elsewhere).
    let (mut perf, mut user_events) = (false, false);
    for e in std::fs::read_dir(&data.dir)
        .map_err(|e| err(&data.dir, e))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let is_perf = name.starts_with("perf-cpu") && name.ends_with(".dat");
        if is_perf || name == "events.txt" {
            perf |= is_perf;
            user_events |= !is_perf;
            let dst = out.join(&name);
            if !same_file(&e.path(), &dst) {
                std::fs::copy(e.path(), &dst).map_err(|e| err(&dst, e))?;
            }
        }
    }

    // info: binary header, then the sections, from what `record` noted
    // (shadowgraph.info); what it did not note is written as unknown.
    let tids: Vec<String> = data.tids.iter().map(|t| t.to_string()).collect();
    let field = |k: &str, default: &str| data.info.get(k).unwrap_or(default).to_string();
    let num = |k: &str| data.info.get(k).and_then(|v| v.parse::<u64>().ok());
    let elapsed = num("elapsed_ns").unwrap_or_else(|| {
        num("ns1")
            .unwrap_or(0)
            .saturating_sub(num("ns0").unwrap_or(0))
    });
    // The raw wait status, as uftrace keeps it.
    let exit_code = field("exit_raw", "0");
    let mut text = String::new();
    writeln!(text, "exename:{exe}").unwrap();
    writeln!(text, "build_id:{}", field("build_id", &"0".repeat(40))).unwrap();
    writeln!(text, "exit_status:{exit_code}").unwrap();
    writeln!(text, "cmdline:{}", field("cmdline", "")).unwrap();
    writeln!(
        text,
        "cpuinfo:lines=2\ncpuinfo:nr_cpus={} (online/possible)\ncpuinfo:desc={}",
        field("cpus", "0 / 0"),
        field("cpu_desc", "unknown")
    )
    .unwrap();
    writeln!(
        text,
        "meminfo:{}",
        field("memory", "0.0 / 0.0 GB (free / total)")
    )
    .unwrap();
    writeln!(
        text,
        "osinfo:lines=3\nosinfo:kernel={}\nosinfo:hostname={}\nosinfo:distro={}",
        field("kernel", "unknown"),
        field("hostname", "unknown"),
        field("distro", "\"unknown\"")
    )
    .unwrap();
    writeln!(
        text,
        "taskinfo:lines=2\ntaskinfo:nr_tid={}\ntaskinfo:tids={}",
        tids.len(),
        tids.join(",")
    )
    .unwrap();
    writeln!(
        text,
        "usageinfo:lines=6\nusageinfo:systime={}\nusageinfo:usrtime={}\nusageinfo:ctxsw={} (voluntary / involuntary)\nusageinfo:maxrss={}\nusageinfo:pagefault={} (major / minor)\nusageinfo:iops={} (read / write)",
        field("systime", "0.000000"),
        field("usrtime", "0.000000"),
        field("ctxsw", "0 / 0"),
        field("maxrss_kb", "0"),
        field("pagefault", "0 / 0"),
        field("iops", "0 / 0"),
    )
    .unwrap();
    writeln!(text, "loadinfo:{}", field("load", "0.00 / 0.00 / 0.00")).unwrap();
    // Arguments and return values recorded: uftrace's section, its
    // patterns as regular expressions (its pattern_type).
    let specs: Vec<(&str, String)> = ["argspec", "retspec"]
        .into_iter()
        .filter_map(|k| Some((k, regex_list(data.info.get(k).filter(|v| v.contains('@'))?))))
        .collect();
    let auto = data.info.get("auto-args") == Some("1");
    if !specs.is_empty() || auto {
        writeln!(text, "argspec:lines={}", specs.len() + 3 + auto as usize).unwrap();
        for (k, v) in &specs {
            writeln!(text, "{k}:{v}").unwrap();
        }
        for k in ["argauto", "retauto"] {
            let list = data.info.get(k).filter(|_| auto).map(regex_list);
            writeln!(text, "{k}:{}", list.unwrap_or_default()).unwrap();
        }
        let enums = data.info.get("enumauto");
        writeln!(text, "enumauto:{}", enums.unwrap_or_default()).unwrap();
        if auto {
            writeln!(text, "auto-args:1").unwrap();
        }
    }
    writeln!(text, "record_date:{}", field("record_date", "unknown")).unwrap();
    writeln!(
        text,
        "elapsed_time:{}.{:09} sec",
        elapsed / 1_000_000_000,
        elapsed % 1_000_000_000
    )
    .unwrap();
    writeln!(text, "pattern_type:regex").unwrap();
    writeln!(
        text,
        "uftrace_version:v0.13 ( shadowgraph {} )",
        env!("CARGO_PKG_VERSION")
    )
    .unwrap();
    let mut info = Vec::with_capacity(40 + text.len());
    info.extend_from_slice(b"Ftrace!\0");
    // The version: uftrace's 4, or for a recording left in the compact
    // layout one that uftrace refuses ("unsupported file version") rather
    // than misreading its records.
    let version: u32 = match data.compact() && same_file(&data.dir, out) {
        true => COMPACT_VERSION,
        false => 4,
    };
    info.extend_from_slice(&version.to_le_bytes());
    info.extend_from_slice(&40u16.to_le_bytes()); // header size
    info.push(1); // little endian
    info.push(2); // ELF class 64
    let (features, mask) = if specs.is_empty() && !auto {
        (FEATURES, INFO_MASK)
    } else if auto {
        (
            FEATURES | ARGUMENT | RETVAL | AUTO_ARGS,
            INFO_MASK | ARG_SPEC,
        )
    } else {
        (FEATURES | ARGUMENT | RETVAL, INFO_MASK | ARG_SPEC)
    };
    let features =
        features | if perf { PERF_EVENT } else { 0 } | if user_events { EVENT } else { 0 };
    info.extend_from_slice(&features.to_le_bytes());
    info.extend_from_slice(&mask.to_le_bytes());
    info.extend_from_slice(&1024u16.to_le_bytes()); // max stack
    info.extend_from_slice(&[0u8; 6]);
    info.extend_from_slice(text.as_bytes());
    let p = out.join("info");
    std::fs::write(&p, info).map_err(|e| err(&p, e))?;
    let p = out.join("default.opts");
    std::fs::write(&p, "").map_err(|e| err(&p, e))?;
    Ok(())
}
