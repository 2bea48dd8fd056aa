//! The data directory: `info` (key=value lines: program, clock
//! calibration, counts), `symbols` (address, function), and one
//! `<tid>.dat` of 16-byte records per thread. Every read error names the
//! file and, for records, the byte offset.

use super::clock::Calibration;
use super::format::{decode, Record, RECORD_SIZE};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct DataError {
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for DataError {}

fn err(path: &Path, message: impl Into<String>) -> DataError {
    DataError {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// What `info` holds.
#[derive(Clone, Debug, Default)]
pub struct Info {
    pub fields: BTreeMap<String, String>,
}

impl Info {
    pub fn get(&self, k: &str) -> Option<&str> {
        self.fields.get(k).map(String::as_str)
    }

    pub fn set(&mut self, k: &str, v: impl ToString) {
        self.fields.insert(k.to_string(), v.to_string());
    }

    pub fn calibration(&self) -> Calibration {
        let n = |k: &str| self.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        Calibration {
            raw0: n("raw0"),
            ns0: n("ns0"),
            raw1: n("raw1"),
            ns1: n("ns1"),
        }
    }

    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let mut s = String::from("# shadowgraph data\n");
        for (k, v) in &self.fields {
            s.push_str(&format!("{k}={}\n", v.replace('\n', " ")));
        }
        std::fs::write(dir.join("info"), s)
    }
}

/// An opened data directory.
pub struct DataDir {
    pub dir: PathBuf,
    pub info: Info,
    /// Sorted by address.
    pub symbols: Vec<(u64, String)>,
    /// Thread ids with a `.dat` file, ascending.
    pub tids: Vec<i32>,
}

impl DataDir {
    pub fn open(dir: &Path) -> Result<DataDir, DataError> {
        if !dir.is_dir() {
            return Err(err(
                dir,
                "no such data directory (record one with `shadowgraph record`)",
            ));
        }
        let info_path = dir.join("info");
        let text = std::fs::read_to_string(&info_path)
            .map_err(|e| err(&info_path, format!("cannot read: {e}")))?;
        let mut info = Info::default();
        for (n, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| err(&info_path, format!("line {}: expected key=value", n + 1)))?;
            info.set(k, v);
        }
        let sym_path = dir.join("symbols");
        let text = std::fs::read_to_string(&sym_path)
            .map_err(|e| err(&sym_path, format!("cannot read: {e}")))?;
        let mut symbols = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let (a, name) = line.split_once('\t').ok_or_else(|| {
                err(
                    &sym_path,
                    format!("line {}: expected address<TAB>name", n + 1),
                )
            })?;
            let a = u64::from_str_radix(a.trim_start_matches("0x"), 16)
                .map_err(|_| err(&sym_path, format!("line {}: bad address `{a}`", n + 1)))?;
            symbols.push((a, name.to_string()));
        }
        symbols.sort();
        let mut tids = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| err(dir, format!("cannot list: {e}")))? {
            let name = e.map_err(|e| err(dir, e.to_string()))?.file_name();
            let name = name.to_string_lossy();
            if let Some(t) = name.strip_suffix(".dat").and_then(|t| t.parse().ok()) {
                tids.push(t);
            }
        }
        tids.sort_unstable();
        Ok(DataDir {
            dir: dir.to_owned(),
            info,
            symbols,
            tids,
        })
    }

    pub fn dat_path(&self, tid: i32) -> PathBuf {
        self.dir.join(format!("{tid}.dat"))
    }

    /// All records of one thread, times converted to nanoseconds.
    pub fn records(&self, tid: i32) -> Result<Vec<Record>, DataError> {
        let path = self.dat_path(tid);
        let bytes = std::fs::read(&path).map_err(|e| err(&path, format!("cannot read: {e}")))?;
        let whole = bytes.len() / RECORD_SIZE * RECORD_SIZE;
        if whole != bytes.len() {
            return Err(err(
                &path,
                format!(
                    "truncated: {} stray bytes at offset {whole}",
                    bytes.len() - whole
                ),
            ));
        }
        let cal = self.info.calibration();
        let mut out = Vec::with_capacity(bytes.len() / RECORD_SIZE);
        for (i, chunk) in bytes.chunks_exact(RECORD_SIZE).enumerate() {
            let mut r = decode(chunk.try_into().unwrap(), (i * RECORD_SIZE) as u64)
                .map_err(|e| err(&path, e.to_string()))?;
            r.time = cal.to_ns(r.time);
            out.push(r);
        }
        Ok(out)
    }

    /// The function at `addr`.
    pub fn name(&self, addr: u64) -> String {
        match self.symbols.binary_search_by_key(&addr, |s| s.0) {
            Ok(i) => self.symbols[i].1.clone(),
            Err(_) => format!("{addr:#x}"),
        }
    }
}
