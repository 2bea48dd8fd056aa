//! A recording's metadata files as text: `shadowgraph.info` and uftrace's
//! `info` (as [`Info`]), `symbols`, `maps`, uftrace's `task.txt`,
//! `sid-*.map` and `*.sym`. A line that says nothing usable is skipped and
//! said (the caller shows the warnings); a file that cannot be read is an
//! error naming it.

use crate::error::{err, DataError};
use crate::time::Calibration;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `info` holds.
#[derive(Clone, Debug, Default)]
pub struct Info {
    /// Key → value, as the file holds them.
    pub fields: BTreeMap<String, String>,
}

impl Info {
    /// The value of `k`, if present.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.fields.get(k).map(String::as_str)
    }

    /// Sets `k` to `v`.
    pub fn set(&mut self, k: &str, v: impl ToString) {
        self.fields.insert(k.to_string(), v.to_string());
    }

    /// (times moved forward to keep each thread's increasing, the largest
    /// step back among them in ns), as recorded; zeros when not recorded.
    pub fn clock_steps_back(&self) -> (u64, u64) {
        let Some((n, worst)) = self
            .get("clock_steps_back")
            .and_then(|v| v.split_once(" / "))
        else {
            return (0, 0);
        };
        (n.parse().unwrap_or(0), worst.parse().unwrap_or(0))
    }

    /// How the `.dat` times become nanoseconds: identity for uftrace's
    /// data and for ours written as nanoseconds (`timestamps=ns`).
    pub fn calibration(&self) -> Calibration {
        if self.get("format") == Some("uftrace") || self.get("timestamps") == Some("ns") {
            return Calibration {
                raw0: 0,
                ns0: 0,
                raw1: 0,
                ns1: 0,
            }; // identity
        }
        let n = |k: &str| self.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        Calibration {
            raw0: n("raw0"),
            ns0: n("ns0"),
            raw1: n("raw1"),
            ns1: n("ns1"),
        }
    }

    /// Writes `shadowgraph.info` (key=value lines).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let mut s = String::from("# shadowgraph data\n");
        for (k, v) in &self.fields {
            s.push_str(&format!("{k}={}\n", v.replace('\n', " ")));
        }
        write_whole(&dir.join("shadowgraph.info"), s.as_bytes())
    }
}

/// Writes `path` under a name of its own, then renames it into place: a
/// reader (or a process killed meanwhile) sees the old file or the new one,
/// never a part of it.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

/// A text file of the recording, its bytes that are not UTF-8 replaced
/// (the lines that hold them are then judged by their form).
pub(crate) fn read_text(path: &Path) -> Result<String, DataError> {
    let bytes = std::fs::read(path).map_err(|e| err(path, format!("cannot read: {e}")))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A line of `path` that says nothing usable: skipped, and said once the
/// directory is open (whatever the rest holds is shown).
pub(crate) fn skip_line(skipped: &mut Vec<String>, path: &Path, n: usize, what: &str) {
    skipped.push(format!(
        "{}: line {}: {what}; the line is skipped",
        path.display(),
        n + 1
    ));
}

pub(crate) fn read_key_values(
    path: &Path,
    info: &mut Info,
    skipped: &mut Vec<String>,
) -> Result<(), DataError> {
    let text = read_text(path)?;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) => info.set(k, v),
            None => skip_line(skipped, path, n, "expected key=value"),
        }
    }
    Ok(())
}

pub(crate) fn read_symbols(
    path: &Path,
    skipped: &mut Vec<String>,
) -> Result<Vec<(u64, String)>, DataError> {
    let text = read_text(path)?;
    let mut symbols = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some((a, name)) = line.split_once('\t') else {
            skip_line(skipped, path, n, "expected address<TAB>name");
            continue;
        };
        match u64::from_str_radix(a.trim_start_matches("0x"), 16) {
            Ok(a) => symbols.push((a, name.to_string())),
            Err(_) => skip_line(skipped, path, n, &format!("bad address `{a}`")),
        }
    }
    symbols.sort();
    Ok(symbols)
}

/// Names each stub of a function patched at its prologue (the address
/// its records carry; the recording's `stubs` file: stub, entry) as the
/// symbol at its function's entry, where one starts there. For
/// `--with-syms`: another recording's symbol files name its own stubs,
/// which lie wherever that run placed them.
fn name_stubs_by_entries(dir: &Path, symbols: &mut Vec<(u64, String)>, skipped: &mut Vec<String>) {
    let path = dir.join("stubs");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let hex = |f: &str| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok();
    let mut named = std::collections::HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let Some((stub, entry)) = line
            .split_once('\t')
            .and_then(|(s, e)| Some((hex(s)?, hex(e)?)))
        else {
            skip_line(
                skipped,
                &path,
                n,
                "expected a stub's address and its function's",
            );
            continue;
        };
        if let Ok(i) = symbols.binary_search_by_key(&entry, |s| s.0) {
            named.insert(stub, symbols[i].1.clone());
        }
    }
    if named.is_empty() {
        return;
    }
    symbols.retain(|s| !named.contains_key(&s.0));
    symbols.extend(named);
    symbols.sort();
}

/// uftrace's `info`: "Ftrace!\0", version, header size, …, then
/// `section:value` lines.
pub(crate) fn read_uftrace_info(
    path: &Path,
    bytes: &[u8],
    info: &mut Info,
) -> Result<(), DataError> {
    if bytes.len() < 14 {
        return Err(err(path, "truncated uftrace info header"));
    }
    let hdr = u16::from_le_bytes([bytes[12], bytes[13]]) as usize;
    let text = bytes
        .get(hdr..)
        .ok_or_else(|| err(path, format!("header size {hdr} beyond the file")))?;
    for line in String::from_utf8_lossy(text).lines() {
        if let Some((k, v)) = line.split_once(':') {
            info.set(k, v);
            if let Some((sub, val)) = v.split_once('=') {
                info.set(&format!("{k}:{sub}"), val); // e.g. taskinfo:tids
            }
        }
    }
    if let Some(exe) = info.get("exename").map(str::to_string) {
        info.set("exe", exe);
    }
    Ok(())
}

/// When the session in `dir` started: `task.txt`'s `SESS timestamp=S.N`.
pub(crate) fn session_start(dir: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(dir.join("task.txt")).ok()?;
    let sess = text.lines().find(|l| l.starts_with("SESS "))?;
    let ts = sess
        .split_whitespace()
        .find_map(|f| f.strip_prefix("timestamp="))?;
    let (s, n) = ts.split_once('.').unwrap_or((ts, "0"));
    Some((s.parse().ok()?, n.parse().ok()?))
}

/// The session's pid from `task.txt` (`SESS … pid=N …`).
pub(crate) fn read_uftrace_task(dir: &Path, info: &mut Info) -> Result<(), DataError> {
    let path = dir.join("task.txt");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(()); // optional for our views
    };
    if let Some(sess) = text.lines().find(|l| l.starts_with("SESS ")) {
        if let Some(pid) = sess.split_whitespace().find_map(|f| f.strip_prefix("pid=")) {
            info.set("pid", pid);
        }
        if let Some(sid) = sess.split_whitespace().find_map(|f| f.strip_prefix("sid=")) {
            info.set("sid", sid);
        }
    }
    Ok(())
}

/// A line of `task.txt` (uftrace's): a session, a task (thread) starting,
/// or a forked process (its first thread, which has no TASK line of its
/// own in uftrace's files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TaskLine {
    /// `SESS timestamp= pid= sid= exename="…"`.
    Session { pid: i32, exe: String },
    /// `TASK timestamp= tid= pid=`.
    Task { time: String, tid: i32, pid: i32 },
    /// `FORK timestamp= pid= ppid=`.
    Fork { time: String, pid: i32, ppid: i32 },
}

/// `dir`'s `task.txt`, line by line (none without the file; lines of
/// other kinds or without their fields are passed over).
pub(crate) fn task_lines(dir: &Path) -> Vec<TaskLine> {
    let text = std::fs::read_to_string(dir.join("task.txt")).unwrap_or_default();
    let field = |l: &str, k: &str| -> Option<String> {
        l.split_whitespace()
            .find_map(|f| f.strip_prefix(k).map(str::to_string))
    };
    let num = |l: &str, k: &str| field(l, k)?.parse::<i32>().ok();
    text.lines()
        .filter_map(|l| match l.split_whitespace().next()? {
            "SESS" => Some(TaskLine::Session {
                pid: num(l, "pid=")?,
                exe: l
                    .split_once("exename=")
                    .map_or("", |(_, e)| e)
                    .trim()
                    .trim_matches('"')
                    .to_string(),
            }),
            "TASK" => Some(TaskLine::Task {
                time: field(l, "timestamp=")?,
                tid: num(l, "tid=")?,
                pid: num(l, "pid=")?,
            }),
            "FORK" => Some(TaskLine::Fork {
                time: field(l, "timestamp=")?,
                pid: num(l, "pid=")?,
                ppid: num(l, "ppid=")?,
            }),
            _ => None,
        })
        .collect()
}

/// Symbols from `sid-*.map` (object ranges) and `<object>.sym` files
/// (addresses relative to the object's start), as absolute addresses.
pub(crate) type Modules = Vec<(u64, u64, String)>;

/// `maps` of one of our recordings (base, end, path per line); none in
/// recordings made before it existed.
pub(crate) fn read_modules(dir: &Path, skipped: &mut Vec<String>) -> Result<Modules, DataError> {
    let p = dir.join("maps");
    let Ok(text) = read_text(&p) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (n, l) in text.lines().enumerate() {
        let f: Vec<&str> = l.splitn(3, '\t').collect();
        let num = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        match f[..] {
            [b, e, path] => match (num(b), num(e)) {
                (Some(b), Some(e)) => out.push((b, e, path.to_string())),
                _ => skip_line(skipped, &p, n, "bad address"),
            },
            _ => skip_line(skipped, &p, n, "expected base<TAB>end<TAB>path"),
        }
    }
    Ok(out)
}

/// What `<object>.dbg` files say: where functions are declared
/// (`file:line`) by address, and by name for functions a recording names
/// at another address (traced through a copy of their entry); the
/// argument and return value specs of functions (`A:`/`R:` lines, by
/// symbol), and enum definitions (`E:` lines).
#[derive(Debug, Default)]
pub(crate) struct SrcLines {
    pub by_addr: std::collections::HashMap<u64, String>,
    pub by_name: std::collections::HashMap<String, String>,
    pub specs: Vec<(String, String)>,
    pub enums: Vec<String>,
}

/// The `<object>.dbg` files of `modules` (uftrace's: `F: OFFSET NAME`
/// then `L: LINE FILE` for each function with a declaration). Lines of
/// other kinds (arguments) are passed over.
pub(crate) fn read_srclines(dir: &Path, modules: &Modules, skipped: &mut Vec<String>) -> SrcLines {
    let mut out = SrcLines::default();
    for (start, _, path) in modules {
        let base = Path::new(path)
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        let p = dir.join(format!("{base}.dbg"));
        let Ok(text) = read_text(&p) else {
            continue;
        };
        let mut func = None;
        let mut name_of_f = String::new();
        for (n, l) in text.lines().enumerate() {
            if let Some(e) = l.strip_prefix("E: ") {
                out.enums.push(e.to_string());
                continue;
            }
            if let Some(a) = l.strip_prefix("A: ").or_else(|| l.strip_prefix("R: ")) {
                out.specs.push((name_of_f.clone(), a.to_string()));
                continue;
            }
            if let Some(f) = l.strip_prefix("F: ") {
                name_of_f = f.split_once(' ').map_or("", |x| x.1).to_string();
                let (a, name) = f.split_once(' ').unwrap_or((f, ""));
                match u64::from_str_radix(a, 16) {
                    Ok(a) => func = Some((start.wrapping_add(a), name)),
                    Err(_) => {
                        func = None;
                        skip_line(skipped, &p, n, &format!("bad address `{a}`"));
                    }
                }
            } else if let Some(loc) = l.strip_prefix("L: ") {
                let Some((line, file)) = loc.split_once(' ') else {
                    skip_line(skipped, &p, n, "expected LINE FILE");
                    continue;
                };
                if let Some((a, name)) = func.take() {
                    let at = format!("{file}:{line}");
                    out.by_name
                        .entry(name.to_string())
                        .or_insert_with(|| at.clone());
                    out.by_addr.insert(a, at);
                }
            }
        }
    }
    out
}

/// The library each library call goes to, by the address of its PLT
/// entry (`--libname`).
pub(crate) type LibNames = std::collections::HashMap<u64, String>;

/// Our recordings' `libnames` (address, library per line); none in those
/// made before it existed.
pub(crate) fn read_libnames(dir: &Path) -> LibNames {
    let Ok(text) = read_text(&dir.join("libnames")) else {
        return LibNames::new();
    };
    text.lines()
        .filter_map(|l| {
            let (a, lib) = l.split_once('\t')?;
            Some((
                u64::from_str_radix(a.trim_start_matches("0x"), 16).ok()?,
                lib.to_string(),
            ))
        })
        .collect()
}

/// The name of the object at `path` and its `<name>.sym` file: in
/// `with_syms` where there is one there (`--with-syms`), else in `dir`.
pub(crate) fn sym_file(dir: &Path, with_syms: Option<&Path>, path: &str) -> (String, PathBuf) {
    let name = Path::new(path)
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sym = with_syms
        .map(|w| w.join(format!("{name}.sym")))
        .filter(|w| w.exists())
        .unwrap_or_else(|| dir.join(format!("{name}.sym")));
    (name, sym)
}

/// A uftrace recording's symbols (by address), objects, library calls'
/// libraries, and where runs of symbols end (its `?` lines, sorted).
pub(crate) type UftraceSymbols = (Vec<(u64, String)>, Modules, LibNames, Vec<u64>);

pub(crate) fn read_uftrace_symbols(
    dir: &Path,
    with_syms: Option<&Path>,
    skipped: &mut Vec<String>,
) -> Result<UftraceSymbols, DataError> {
    let mut symbols = Vec::new();
    let mut modules: Modules = Vec::new();
    let mut ends = Vec::new();
    // PLT entries (`P`), and which library defines each name first.
    let mut plt: Vec<(u64, String)> = Vec::new();
    let mut defined: std::collections::HashMap<String, String> = Default::default();
    let entries = std::fs::read_dir(dir).map_err(|e| err(dir, format!("cannot list: {e}")))?;
    for e in entries {
        let p = e.map_err(|e| err(dir, e.to_string()))?.path();
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !(name.starts_with("sid-") && name.ends_with(".map")) {
            continue;
        }
        let text = read_text(&p)?;
        for (n, line) in text.lines().enumerate() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(range), Some(path)) = (f.first(), f.get(5)) else {
                continue;
            };
            if !path.starts_with('/') {
                continue;
            }
            let Some((start, end)) = range.split_once('-').and_then(|(a, b)| {
                Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                ))
            }) else {
                skip_line(skipped, &p, n, "bad address range");
                continue;
            };
            // Consecutive lines of one object are one mapping from the
            // first's start, as uftrace reads them.
            if let Some(last) = modules.last_mut().filter(|m| m.2 == *path) {
                last.1 = end;
                continue;
            }
            modules.push((start, end, path.to_string()));
            let (base, sym) = sym_file(dir, with_syms, path);
            let Ok(st) = read_text(&sym) else {
                continue;
            };
            for (m, fields) in crate::format::sym_lines(&st) {
                let Some((a, kind, fname)) = fields else {
                    skip_line(skipped, &sym, m, "expected address type name");
                    continue;
                };
                if kind == "?" {
                    if let Ok(a) = u64::from_str_radix(a, 16) {
                        ends.push(start.wrapping_add(a));
                    }
                    continue;
                }
                match kind {
                    "T" | "t" | "W" | "w" | "i" => {
                        defined
                            .entry(fname.to_string())
                            .or_insert_with(|| base.clone());
                    }
                    _ => {}
                }
                match u64::from_str_radix(a, 16) {
                    Ok(a) => {
                        if kind == "P" {
                            plt.push((start.wrapping_add(a), fname.to_string()));
                        }
                        symbols.push((start.wrapping_add(a), fname.to_string()))
                    }
                    Err(_) => skip_line(skipped, &sym, m, &format!("bad address `{a}`")),
                }
            }
        }
    }
    // (An object's stubs away from it are listed under its path and a
    // suffix of ours: they are that object's.)
    for m in &mut modules {
        if let Some(i) = m.2.rfind(crate::format::STUBS_SUFFIX) {
            let rest = &m.2[i + crate::format::STUBS_SUFFIX.len()..];
            if rest.bytes().all(|b| b.is_ascii_digit()) {
                m.2.truncate(i);
            }
        }
    }
    symbols.sort();
    symbols.dedup_by_key(|s| s.0);
    if with_syms.is_some() {
        name_stubs_by_entries(dir, &mut symbols, skipped);
    }
    let libnames = plt
        .into_iter()
        .filter_map(|(a, n)| Some((a, defined.get(&n)?.clone())))
        .collect();
    ends.sort_unstable();
    Ok((symbols, modules, libnames, ends))
}

/// A loaded object's data symbols, from our recordings' `datasyms`
/// (written when arguments are recorded: pointers are named after what
/// they point to, as uftrace names them).
#[derive(Clone, Debug)]
pub(crate) struct DataObject {
    /// The addresses its loadable segments span.
    pub(crate) range: (u64, u64),
    /// Its file.
    pub(crate) path: PathBuf,
    /// (address, size, uftrace's kind letter, name), by address.
    pub(crate) symbols: Vec<(u64, u64, char, String)>,
}

/// Our recordings' `datasyms`: an object per unindented line (`lo hi
/// path`), its symbols on the indented lines after it (`addr size kind
/// name`), tab-separated, addresses in hex; none if there is no such file.
/// Lines that do not read so are skipped (said in `skipped`).
pub(crate) fn read_data_symbols(dir: &Path, skipped: &mut Vec<String>) -> Vec<DataObject> {
    let p = dir.join("datasyms");
    let Ok(text) = std::fs::read_to_string(&p) else {
        return Vec::new();
    };
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let mut out: Vec<DataObject> = Vec::new();
    for (n, l) in text.lines().enumerate() {
        let ok = match l.strip_prefix('\t') {
            Some(sym) => {
                let f: Vec<&str> = sym.splitn(4, '\t').collect();
                match (&f[..], out.last_mut()) {
                    ([a, size, kind, name], Some(o)) => (|| {
                        let kind = kind.chars().next()?;
                        o.symbols
                            .push((hex(a)?, hex(size)?, kind, name.to_string()));
                        Some(())
                    })(),
                    _ => None,
                }
            }
            None => match l.splitn(3, '\t').collect::<Vec<_>>()[..] {
                [lo, hi, path] => (|| {
                    out.push(DataObject {
                        range: (hex(lo)?, hex(hi)?),
                        path: PathBuf::from(path),
                        symbols: Vec::new(),
                    });
                    Some(())
                })(),
                _ => None,
            },
        };
        if ok.is_none() {
            skip_line(skipped, &p, n, "expected an object or a data symbol");
        }
    }
    out
}
