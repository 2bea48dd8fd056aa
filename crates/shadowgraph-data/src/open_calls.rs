//! Calls a recording leaves open when it ends while the program runs on
//! (a session attached to a running process, then detached): each gets an
//! exit record at the session's end, so that every thread's records nest
//! whole, as views and uftrace expect. A process that ended before keeps
//! its calls as they were (`_exit` never returns).

use crate::format::{decode, encode, Kind, RECORD_SIZE};
use std::io::{self, Read, Write};
use std::path::Path;

/// Appends to the record file (`<tid>.dat`, times in ns) in `dir` of
/// every thread whose process `running` says still ran at the end (by the
/// directory's `tasks`; a thread it does not list is taken for a process
/// of its own) an exit for each call open at its end, innermost first, at
/// `at_ns` (or just after the thread's last record, if that is later).
/// Returns how many exits it added.
pub fn close_open_calls(dir: &Path, at_ns: u64, running: impl Fn(i32) -> bool) -> io::Result<u64> {
    let tasks = crate::uftrace::read_tasks(dir);
    let args = arg_index(dir);
    let mut info = crate::meta::Info::default();
    let _ = crate::meta::read_key_values(&dir.join("shadowgraph.info"), &mut info, &mut Vec::new());
    let compact = info.get("layout") == Some("compact");
    let mut added = 0;
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        let tid = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<i32>().ok());
        if let (Some(tid), true) = (tid, path.extension().is_some_and(|x| x == "dat")) {
            if running(tasks.get(&tid).map_or(tid, |t| t.0)) {
                added += close_in(&path, at_ns, args.as_ref(), compact)?;
            }
        }
    }
    Ok(added)
}

/// The recording's argument specs over its symbols (a raw recording's
/// `shadowgraph.info` and `symbols`), if it recorded any.
fn arg_index(dir: &Path) -> Option<crate::args::ArgIndex> {
    let mut info = crate::meta::Info::default();
    let mut skipped = Vec::new();
    crate::meta::read_key_values(&dir.join("shadowgraph.info"), &mut info, &mut skipped).ok()?;
    let specs = crate::args::Specs::recorded(&info).ok()?;
    let symbols = crate::meta::read_symbols(&dir.join("symbols"), &mut skipped).ok()?;
    let names: Vec<String> = symbols
        .iter()
        .map(|s| crate::names::demangle(&s.1))
        .collect();
    crate::args::ArgIndex::new(&specs, (&symbols, &names, None), |_| String::new())
}

fn close_in(
    path: &Path,
    at_ns: u64,
    args: Option<&crate::args::ArgIndex>,
    compact: bool,
) -> io::Result<u64> {
    let bytes = match compact {
        true => {
            let mut b = Vec::new();
            crate::compact::CompactReader::new(std::fs::File::open(path)?)
                .read_to_end(&mut b)
                .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
            b
        }
        false => std::fs::read(path)?,
    };
    let mut open: Vec<(u64, u16)> = Vec::new();
    let mut last = 0;
    let mut at = 0;
    while at + RECORD_SIZE <= bytes.len() {
        let chunk = &bytes[at..at + RECORD_SIZE];
        let r = decode(chunk.try_into().expect("a record's bytes"), at as u64)
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        at += RECORD_SIZE;
        if r.more && matches!(r.kind, Kind::Entry | Kind::Exit) {
            // Its arguments or return value follow: skipped.
            let (_, n) = args
                .ok_or_else(|| "a record carries arguments and the recording has no specs".into())
                .and_then(|a| a.read_after(r.addr, r.kind == Kind::Exit, &mut &bytes[at..]))
                .map_err(|e| io::Error::other(format!("{}: offset {at}: {e}", path.display())))?;
            at += n as usize;
        }
        last = last.max(r.time);
        match r.kind {
            Kind::Entry => open.push((r.addr, r.depth)),
            // The innermost open call of its function and depth closes,
            // and any left open inside it (records lost) with it.
            Kind::Exit => {
                if let Some(k) = open.iter().rposition(|&c| c == (r.addr, r.depth)) {
                    open.truncate(k);
                }
            }
            Kind::Lost | Kind::Event => {}
        }
    }
    if open.is_empty() {
        return Ok(0);
    }
    let at = at_ns.max(last + 1);
    let mut out = Vec::with_capacity(open.len() * RECORD_SIZE);
    for &(addr, depth) in open.iter().rev() {
        out.extend_from_slice(&at.to_le_bytes());
        out.extend_from_slice(&encode(Kind::Exit, depth, addr).to_le_bytes());
    }
    if compact {
        out = crate::compact::block_of(&out);
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)?
        .write_all(&out)?;
    Ok(open.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(time: u64, kind: Kind, depth: u16, addr: u64) -> Vec<u8> {
        let mut b = time.to_le_bytes().to_vec();
        b.extend_from_slice(&encode(kind, depth, addr).to_le_bytes());
        b
    }

    #[test]
    fn open_calls_get_exits_innermost_first() {
        let dir = std::env::temp_dir().join(format!("sg-open-calls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut b = Vec::new();
        for r in [
            rec(10, Kind::Entry, 0, 0xa),
            rec(11, Kind::Entry, 1, 0xb),
            rec(12, Kind::Exit, 1, 0xb),
            rec(13, Kind::Entry, 1, 0xc),
            rec(14, Kind::Entry, 2, 0xd),
        ] {
            b.extend(r);
        }
        std::fs::write(dir.join("7.dat"), &b).unwrap();
        std::fs::write(dir.join("8.dat"), rec(5, Kind::Entry, 0, 0xe)).unwrap();
        // Thread 9's process ended: its call stays open.
        std::fs::write(dir.join("9.dat"), rec(5, Kind::Entry, 0, 0xf)).unwrap();
        // ... and so does thread 10's, a thread of process 9.
        std::fs::write(dir.join("10.dat"), rec(5, Kind::Entry, 0, 0xf)).unwrap();
        std::fs::write(dir.join("tasks"), "# tid\tpid\tppid\n10\t9\t1\n").unwrap();
        assert_eq!(close_open_calls(&dir, 12, |t| t != 9).unwrap(), 4);
        assert_eq!(std::fs::read(dir.join("9.dat")).unwrap().len(), 16);
        assert_eq!(std::fs::read(dir.join("10.dat")).unwrap().len(), 16);
        let got = std::fs::read(dir.join("7.dat")).unwrap();
        let tail: Vec<(u64, u16, u64)> = got[b.len()..]
            .chunks_exact(16)
            .map(|c| {
                let r = decode(c.try_into().unwrap(), 0).unwrap();
                assert_eq!(r.kind, Kind::Exit);
                (r.time, r.depth, r.addr)
            })
            .collect();
        assert_eq!(tail, [(15, 2, 0xd), (15, 1, 0xc), (15, 0, 0xa)]);
        assert_eq!(close_open_calls(&dir, 20, |t| t != 9).unwrap(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// In a compact recording the exits come as a block of their own,
    /// after the file's: the file reads back whole, the calls closed.
    #[test]
    fn a_compact_files_open_calls_get_a_block_of_exits() {
        let dir = std::env::temp_dir().join(format!("sg-open-compact-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("shadowgraph.info"), "layout=compact\n").unwrap();
        let records: Vec<u8> = [
            rec(10, Kind::Entry, 0, 0xa),
            rec(11, Kind::Entry, 1, 0xb),
            rec(12, Kind::Exit, 1, 0xb),
            rec(13, Kind::Entry, 1, 0xc),
        ]
        .concat();
        let file = crate::compact::block_of(&records);
        std::fs::write(dir.join("7.dat"), &file).unwrap();
        assert_eq!(close_open_calls(&dir, 20, |_| true).unwrap(), 2);
        let got = std::fs::read(dir.join("7.dat")).unwrap();
        assert!(got.starts_with(&file) && got[file.len()..].starts_with(b"SGC1"));
        let mut back = Vec::new();
        crate::compact::CompactReader::new(&got[..])
            .read_to_end(&mut back)
            .unwrap();
        let exits = [rec(20, Kind::Exit, 1, 0xc), rec(20, Kind::Exit, 0, 0xa)].concat();
        assert_eq!(back, [records, exits].concat());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
