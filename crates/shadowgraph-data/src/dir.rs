//! The data directory: `info` (key=value lines: program, clock
//! calibration, counts), `symbols` (address, function), and one
//! `<tid>.dat` of 16-byte records per thread. Every read error names the
//! file and, for records, the byte offset.

use super::compact::Dat;
use super::format::{decode, Kind, Record, RECORD_SIZE};
use crate::error::err;
pub use crate::error::DataError;
use crate::meta::{
    read_key_values, read_modules, read_symbols, read_uftrace_info, read_uftrace_symbols,
    read_uftrace_task, session_start,
};
pub use crate::meta::{write_whole, Info};
use std::path::{Path, PathBuf};

/// The subdirectories of `dir` that are recordings (a tracer's, of
/// `record --tracer`), by name.
fn tracer_dirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let p = e.path();
            p.join("shadowgraph.info").exists() || p.join("info").exists()
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

pub use super::progress::Progress;

/// An opened data directory.
pub struct DataDir {
    /// The directory.
    pub dir: PathBuf,
    /// Its `info` (uftrace's, or ours in a raw recording).
    pub info: Info,
    /// Sorted by address: each function's symbol as recorded (mangled, for
    /// C++ and Rust; recordings of earlier versions hold demangled names).
    pub symbols: Vec<(u64, String)>,
    /// The names views show for `symbols`, index for index, as
    /// [`OpenOptions::names`] says.
    pub names: Vec<String>,
    /// Thread ids with a `.dat` file, ascending.
    pub tids: Vec<i32>,
    /// Traced objects: (start, end, path), by start (empty when the
    /// recording does not say).
    pub modules: Vec<(u64, u64, String)>,
    /// uftrace's schedule events per thread (`perf-cpu*.dat`).
    pub sched: std::collections::HashMap<i32, Vec<super::sched::SchedSpan>>,
    /// Each thread's new names and when it took them (`perf-cpu*.dat`,
    /// `record -E linux:task-name`).
    pub task_names: std::collections::HashMap<i32, Vec<(u64, String)>>,
    /// The names of user events (SDT markers') by id, from `events.txt`.
    pub user_events: std::sync::Arc<crate::events::UserEvents>,
    /// Arguments and return values not shown (`--no-args`).
    hide_args: bool,
    /// Built-in events not shown (`--no-event`).
    hide_events: bool,
    /// Schedule events not shown: all (`Some(false)`), those of
    /// pre-emptions (`Some(true)`).
    hide_sched: Option<bool>,
    /// Events outside every call shown too (`--event-full`).
    event_full: bool,
    /// Shared by the record streams when progress is shown.
    progress: Option<std::sync::Arc<Progress>>,
    /// What the views could not read whole, said once each: see
    /// [`DataDir::warnings`].
    warnings: Warnings,
    /// The functions with arguments or return values recorded.
    args: Option<std::sync::Arc<crate::args::ArgIndex>>,
    /// Where functions are declared (`file:line`), from the `<object>.dbg`
    /// files `record --srcline` leaves (uftrace's), by address.
    srclines: super::meta::SrcLines,
    /// The library each library call goes to, by its PLT entry.
    libnames: super::meta::LibNames,
    /// The objects loaded while the program ran (`dlopen`).
    pub loads: Vec<super::loads::Load>,
    /// How records at addresses that objects held in turn are tagged.
    generations: Option<std::sync::Arc<super::loads::Generations>>,
}

/// Warnings shared by a data directory and its record streams, each kept
/// once, in the order they came.
#[derive(Clone, Debug, Default)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Warnings {
    fn push(&self, w: String) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !v.contains(&w) {
            v.push(w);
        }
    }
}

/// The recordings of the programs started by exec inside `dir` (a
/// recording, or the directory of a launcher that recorded nothing of its
/// own), in the order they started (their `task.txt` session time; by name
/// without one).
pub fn exec_sessions_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut subs: Vec<((u64, u64), PathBuf)> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("shadowgraph.info").exists())
        .map(|p| (session_start(&p).unwrap_or((u64::MAX, 0)), p))
        .collect();
    subs.sort();
    subs.into_iter().map(|(_, p)| p).collect()
}

impl DataDir {
    /// A one-line warning when the recording lost records (buffer overruns
    /// or failed writes), with the first write failure's reason: the views
    /// show what was kept, and this says that it is not all.
    /// Calls nested deeper than the shadow stack holds are not traced at
    /// all, nor calls the recursion guard dropped: said too.
    pub fn loss_warning(&self) -> Option<String> {
        let count = |k| -> u64 { self.info.get(k).and_then(|v| v.parse().ok()).unwrap_or(0) };
        let (lost, overrun) = (count("lost"), count("overrun"));
        let mut what = Vec::new();
        if lost > 0 {
            let why = match (
                self.info.get("write_error"),
                self.info.get("writer_gave_up"),
            ) {
                (Some(e), _) => format!(" (writing the trace failed: {e})"),
                (None, Some(_)) => " (a ring stayed full for 5 s: its thread stopped waiting \
                                   for the writer and dropped its records from then on)"
                    .to_string(),
                _ => String::new(),
            };
            what.push(format!("{lost} records were lost while recording{why}"));
        }
        if overrun > 0 {
            let held = self
                .info
                .get("max_stack")
                .map(|n| format!("'s {n} frames"))
                .unwrap_or_else(|| " holds".into());
            what.push(format!(
                "{overrun} calls were not traced (nested deeper than the shadow stack{held}; \
                 record with a larger --max-stack)"
            ));
        }
        let drops = count("recursion_drops");
        if drops > 0 {
            what.push(format!(
                "{drops} calls were not traced (the recursion guard dropped them: made while \
                 their thread was already inside our callbacks, such as a signal handler's \
                 calls after another handler left our code by siglongjmp)"
            ));
        }
        (!what.is_empty()).then(|| {
            format!(
                "warning: {}; the trace in {} has gaps",
                what.join("; "),
                self.dir.display()
            )
        })
    }

    /// Says how long the threads waited for the writer or drained their
    /// rings themselves (their rings full),
    /// when that was a tenth of the program's run (`run_ns`) or more: the
    /// recording then slowed the program down by that much.
    pub fn writer_wait_note(&self, run_ns: u64) -> Option<String> {
        let (n, ns) = self.info.get("writer_waits")?.split_once(" / ")?;
        let (n, ns): (u64, u64) = (n.parse().ok()?, ns.parse().ok()?);
        writer_wait_note(n, ns, run_ns, self.tids.len().max(1) as u64)
    }

    /// Programs started by exec during the recording are recorded into
    /// directories of their own inside this one: where, for the views to
    /// say so.
    pub fn sessions_notice(&self) -> Option<String> {
        let subs = self.exec_sessions();
        if subs.is_empty() {
            return None;
        }
        let subs: Vec<String> = subs.iter().map(|p| p.display().to_string()).collect();
        Some(format!(
            "note: programs started by exec have recordings of their own (view them with -d): {}",
            subs.join(", ")
        ))
    }

    /// The directories of the programs started by exec during the
    /// recording, in the order they started (their `task.txt` session
    /// time; by name without one).
    pub fn exec_sessions(&self) -> Vec<PathBuf> {
        exec_sessions_in(&self.dir)
    }

    /// Opens a data directory: uftrace's format (what `record` writes, and
    /// what uftrace writes), or the raw form a recording has before its
    /// timestamps are converted (`shadowgraph.info`, `symbols`); names in
    /// the simple form, no progress shown.
    pub fn open(dir: &Path) -> Result<DataDir, DataError> {
        DataDir::open_with(dir, OpenOptions::default())
    }

    /// [`DataDir::open`] as `how` says.
    pub fn open_with(dir: &Path, how: OpenOptions) -> Result<DataDir, DataError> {
        if !dir.is_dir() {
            return Err(err(
                dir,
                "no such data directory (record one with `shadowgraph record`)",
            ));
        }
        let mut info = Info::default();
        // Lines of the metadata that say nothing usable: skipped, said.
        let mut skipped = Vec::new();
        let ours = dir.join("shadowgraph.info");
        if ours.exists() {
            read_key_values(&ours, &mut info, &mut skipped)?;
        }
        let info_path = dir.join("info");
        let uftrace = match std::fs::read(&info_path) {
            Ok(bytes) if bytes.starts_with(b"Ftrace!\0") => {
                read_uftrace_info(&info_path, &bytes, &mut info)?;
                true
            }
            Ok(_) => {
                read_key_values(&info_path, &mut info, &mut skipped)?;
                false
            }
            Err(_) if ours.exists() => false,
            Err(e) => {
                // `record --tracer …` writes one recording per tracer, in
                // subdirectories: name them.
                let tracers = tracer_dirs(dir);
                if !tracers.is_empty() {
                    return Err(err(
                        dir,
                        format!(
                            "holds {} recordings, of tracers or of programs started by exec ({}): choose one, e.g. -d {}",
                            tracers.len(),
                            tracers.join(", "),
                            dir.join(&tracers[0]).display()
                        ),
                    ));
                }
                return Err(err(&info_path, format!("cannot read: {e}")));
            }
        };
        // (`ends`: where uftrace's runs of symbols end; ours say only
        // where functions begin.)
        let (mut symbols, mut modules, mut libnames, ends) = if uftrace {
            // Times in .dat files are nanoseconds already.
            info.set("format", "uftrace");
            read_uftrace_task(dir, &mut info)?;
            let (s, m, l, e) = read_uftrace_symbols(dir, how.with_syms.as_deref(), &mut skipped)?;
            (s, m, l, Some(e))
        } else {
            (
                read_symbols(&dir.join("symbols"), &mut skipped)?,
                read_modules(dir, &mut skipped)?,
                super::meta::LibNames::new(),
                None,
            )
        };
        // Ours (converted to uftrace's format too: its `.sym` files are of
        // the traced objects only) say where each library call went.
        libnames.extend(super::meta::read_libnames(dir));
        let mut loads = match uftrace {
            true => super::loads::read_uftrace(dir, how.with_syms.as_deref(), &mut skipped),
            false => super::loads::read_raw(dir, &mut skipped),
        };
        let generations = super::loads::join(&mut loads, &mut symbols, &mut modules);
        modules.sort();
        modules.dedup();
        let mut tids = Vec::new();
        for e in std::fs::read_dir(dir).map_err(|e| err(dir, format!("cannot list: {e}")))? {
            let name = e.map_err(|e| err(dir, e.to_string()))?.file_name();
            let name = name.to_string_lossy();
            if let Some(t) = name.strip_suffix(".dat").and_then(|t| t.parse().ok()) {
                tids.push(t);
            }
        }
        tids.sort_unstable();
        let names = symbols
            .iter()
            .map(|s| match s.1.is_empty() {
                // A function without a name (a stripped object's that it
                // does not export): its address, as uftrace shows one.
                true => format!("<{:x}>", super::loads::untagged(s.0)),
                false => crate::names::demangle_as(&s.1, how.names),
            })
            .collect();
        let perf = super::sched::read(dir)?;
        let mut data = DataDir {
            dir: dir.to_owned(),
            info,
            symbols,
            names,
            tids,
            modules,
            sched: perf.spans,
            task_names: perf.names,
            user_events: crate::events::read_user_events(dir).into(),
            hide_args: how.no_args,
            hide_events: how.no_event,
            hide_sched: match (how.no_event || how.no_sched, how.no_sched_preempt) {
                (true, _) => Some(false),
                (false, true) => Some(true),
                (false, false) => None,
            },
            event_full: how.event_full,
            progress: None,
            warnings: Warnings::default(),
            args: None,
            srclines: Default::default(),
            libnames,
            loads,
            generations: generations.map(std::sync::Arc::new),
        };
        data.srclines = super::meta::read_srclines(dir, &data.modules, &mut skipped);
        for w in skipped {
            data.warnings.push(w);
        }
        match data.arg_specs() {
            Ok(specs) => {
                let index =
                    crate::args::ArgIndex::new(&specs, (&data.symbols, &data.names, ends), |a| {
                        data.module_of(a).to_string()
                    });
                data.args = index.map(std::sync::Arc::new);
            }
            Err(e) => data.warnings.push(format!(
                "{}: {e}; arguments and return values are not shown",
                data.dir.display()
            )),
        }
        data.warn_of_missing_threads();
        if how.progress {
            let total: u64 = data
                .tids
                .iter()
                .filter_map(|&t| std::fs::metadata(data.dat_path(t)).ok())
                .map(|m| match data.compact() {
                    true => crate::compact::records_in(m.len()),
                    false => m.len() / RECORD_SIZE as u64,
                })
                .sum();
            data.progress = Progress::worth(total).map(std::sync::Arc::new);
        }
        Ok(data)
    }

    /// The argument and return value specs the recording was made with
    /// (uftrace's `argspec`, `retspec`, and with `auto-args` its
    /// built-in ones).
    fn arg_specs(&self) -> Result<crate::args::Specs, String> {
        let mut specs = crate::args::Specs::recorded(&self.info)?;
        // `-a`'s: per function in the objects' `.dbg` files, with the
        // enums they name (which win over the built-in ones).
        for (symbol, list) in &self.srclines.specs {
            specs.add_exact(symbol, list)?;
        }
        for e in &self.srclines.enums {
            specs.enums.add(e);
        }
        Ok(specs)
    }

    /// What could not be read whole so far: threads that `task.txt` lists
    /// without records (said when the directory is opened), record files
    /// cut short or corrupt (said when a view reads them, which stops
    /// there: what came before is shown). One line each, naming the file
    /// and the offset.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A thread `task.txt` lists whose `.dat` is missing or empty: its
    /// records were lost (a killed writer, a deleted file), not absent.
    fn warn_of_missing_threads(&self) {
        let Ok(text) = std::fs::read_to_string(self.dir.join("task.txt")) else {
            return;
        };
        for line in text.lines().filter(|l| l.starts_with("TASK ")) {
            let Some(tid) = line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("tid="))
                .and_then(|t| t.parse::<i32>().ok())
            else {
                continue;
            };
            let path = self.dat_path(tid);
            match std::fs::metadata(&path) {
                Ok(m) if m.len() > 0 => {}
                Ok(_) => self.warnings.push(format!(
                    "{}: empty: thread {tid} (in task.txt) has no records",
                    path.display()
                )),
                Err(_) => self.warnings.push(format!(
                    "{}: missing: thread {tid} (in task.txt) has no records",
                    path.display()
                )),
            }
        }
    }

    /// The name its tasks go by, as the kernel's `comm` holds it: the
    /// program's file name, at most 15 bytes (uftrace's task name).
    pub fn task_name(&self) -> &str {
        let exe = self.info.get("exe").unwrap_or("");
        let name = exe.rsplit('/').next().unwrap_or(exe);
        name.get(..15).unwrap_or(name)
    }

    /// The file of thread `tid`'s records.
    pub fn dat_path(&self, tid: i32) -> PathBuf {
        self.dir.join(format!("{tid}.dat"))
    }

    /// Whether a schedule event (`preempted`: of a pre-emption) is left
    /// out (`--no-sched`, `--no-event`, `--no-sched-preempt`): it is still
    /// read, so that a function it happened in is shown with braces, as
    /// uftrace shows it.
    pub fn sched_hidden(&self, preempted: bool) -> bool {
        self.hide_sched
            .is_some_and(|only_preempted| !only_preempted || preempted)
    }

    /// Whether events are left out (`--no-event`).
    pub fn events_hidden(&self) -> bool {
        self.hide_events
    }

    /// Whether a thread's events outside every call it made are shown
    /// (`--event-full`); uftrace's views leave them out by default.
    pub fn events_outside_shown(&self) -> bool {
        self.event_full
    }

    /// The records of one thread, read as they are consumed (memory stays
    /// bounded whatever the trace's size), times converted to nanoseconds.
    pub fn stream(&self, tid: i32) -> Result<RecordStream, DataError> {
        self.stream_with(tid, false)
    }

    /// As [`DataDir::stream`], each record's arguments or return value as
    /// uftrace's plain dump shows them: `args` holds their length (before
    /// the padding), a newline, then a line per value (`  args[0] d32:
    /// 0x00000007`).
    pub fn dump_stream(&self, tid: i32) -> Result<RecordStream, DataError> {
        self.stream_with(tid, true)
    }

    fn stream_with(&self, tid: i32, dump_args: bool) -> Result<RecordStream, DataError> {
        let path = self.dat_path(tid);
        let file =
            std::fs::File::open(&path).map_err(|e| err(&path, format!("cannot read: {e}")))?;
        Ok(RecordStream {
            input: std::io::BufReader::with_capacity(1 << 16, Dat::new(file, self.compact())),
            path,
            offset: 0,
            conv: self.info.calibration().converter(),
            failed: false,
            progress: self.progress.clone(),
            warnings: self.warnings.clone(),
            args: self.args.clone(),
            hide_args: self.hide_args,
            hide_events: self.hide_events,
            user_events: self.user_events.clone(),
            dump_args,
            generations: self.generations.clone(),
        })
    }

    /// Where the function at `addr` is declared (`file:line`), if the
    /// recording says (`record --srcline`).
    pub fn srcline(&self, addr: u64) -> Option<&str> {
        if self.srclines.by_addr.is_empty() {
            return None;
        }
        // The function the address is in (a record may name an address
        // past its entry: mcount's), by its address, else by its symbol
        // (a function traced through a copy of its entry is recorded at
        // the copy).
        let (start, symbol) = match self.symbols.partition_point(|s| s.0 <= addr) {
            0 => (addr, None),
            i => (self.symbols[i - 1].0, Some(&self.symbols[i - 1].1)),
        };
        self.srclines
            .by_addr
            .get(&start)
            .or_else(|| self.srclines.by_name.get(symbol?))
            .map(String::as_str)
    }

    /// The library the library call at `addr` goes to (`printf`:
    /// `libc.so.6`), if the recording says.
    pub fn libname(&self, addr: u64) -> Option<&str> {
        if self.libnames.is_empty() {
            return None;
        }
        let start = match self.symbols.partition_point(|s| s.0 <= addr) {
            0 => addr,
            i => self.symbols[i - 1].0,
        };
        self.libnames.get(&start).map(String::as_str)
    }

    /// Whether the threads' files are in the compact layout
    /// ([`crate::compact`]; `record --compact`).
    pub fn compact(&self) -> bool {
        self.info.get("layout") == Some("compact")
    }

    /// All records of one thread (small traces, tests).
    pub fn records(&self, tid: i32) -> Result<Vec<Record>, DataError> {
        self.stream(tid)?.collect()
    }

    /// The path of the traced object holding `addr` ("" if unknown).
    pub fn module_of(&self, addr: u64) -> &str {
        match self.modules.partition_point(|m| m.0 <= addr) {
            0 => "",
            i if addr < self.modules[i - 1].1 => &self.modules[i - 1].2,
            _ => "",
        }
    }

    /// The bytes of the function at `addr`: to the next symbol, or to the end
    /// of its object's code (as uftrace sizes functions from its symbol
    /// files); 0 for an address with no symbol there.
    pub fn function_size(&self, addr: u64) -> u64 {
        let i = self.symbols.partition_point(|s| s.0 <= addr);
        if i == 0 || self.symbols[i - 1].0 != addr {
            return 0;
        }
        let end = self
            .modules
            .iter()
            .find(|m| addr >= m.0 && addr < m.1)
            .map(|m| m.1);
        let next = self.symbols.get(i).map(|s| s.0);
        match (next, end) {
            (Some(n), Some(e)) => n.min(e) - addr,
            (Some(x), None) | (None, Some(x)) => x - addr,
            (None, None) => 0,
        }
    }

    /// The function holding `addr` (the nearest symbol at or below it:
    /// our records hold function entries, uftrace's an address just inside);
    /// the bare address when it lies in no known object (a symbol of
    /// another object is never borrowed).
    pub fn name(&self, addr: u64) -> std::borrow::Cow<'_, str> {
        if addr == super::sched::SCHED_ADDR {
            return "linux:schedule".into();
        }
        if !self.modules.is_empty() && self.module_of(addr).is_empty() {
            return format!("<{:x}>", super::loads::untagged(addr)).into();
        }
        match self.symbols.partition_point(|s| s.0 <= addr) {
            0 => format!("<{:x}>", super::loads::untagged(addr)).into(),
            i => self.names[i - 1].as_str().into(),
        }
    }
}

/// How a view opens a data directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// How symbols are shown (`--demangle`).
    pub names: crate::names::Demangle,
    /// Whether reading a large recording shows its progress on stderr.
    pub progress: bool,
    /// `--with-syms DIR`: each object's symbols from `DIR/<object>.sym`
    /// where there is one (a recording of the object before it was
    /// stripped), instead of the recording's own.
    pub with_syms: Option<PathBuf>,
    /// `--no-args`: arguments and return values are read past, not shown.
    pub no_args: bool,
    /// `--no-event`: no event is shown (built-in ones, schedule ones).
    pub no_event: bool,
    /// `--no-sched`: no schedule event is shown.
    pub no_sched: bool,
    /// `--no-sched-preempt`: no schedule event of a pre-emption is shown
    /// (those of a thread that waited of its own accord are).
    pub no_sched_preempt: bool,
    /// `--event-full`: a thread's events outside every call it made (a
    /// schedule event between two of its top-level calls, a new name)
    /// are shown too; uftrace's views leave them out by default.
    pub event_full: bool,
}

/// Records of one `.dat` file, decoded one at a time.
pub struct RecordStream {
    /// Arguments and return values read past, not kept (`--no-args`).
    hide_args: bool,
    /// Built-in events read past, not kept (`--no-event`).
    hide_events: bool,
    user_events: std::sync::Arc<crate::events::UserEvents>,
    /// Arguments and return values as the plain dump shows them
    /// ([`DataDir::dump_stream`]).
    dump_args: bool,
    input: std::io::BufReader<Dat>,
    path: PathBuf,
    offset: u64,
    conv: super::time::Converter,
    failed: bool,
    progress: Option<std::sync::Arc<Progress>>,
    warnings: Warnings,
    args: Option<std::sync::Arc<crate::args::ArgIndex>>,
    generations: Option<std::sync::Arc<super::loads::Generations>>,
}

impl RecordStream {
    /// Stops the stream at the current offset, saying why: the records
    /// before it are what can be shown.
    fn cut(&mut self, why: String) -> Option<Result<Record, DataError>> {
        self.failed = true;
        self.warnings
            .push(format!("{}: {why}; read up to there", self.path.display()));
        None
    }
}

impl Iterator for RecordStream {
    type Item = Result<Record, DataError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        use std::io::{BufRead, Read};
        if self.failed {
            return None;
        }
        let mut b = [0u8; RECORD_SIZE];
        let mut n = 0;
        // Most records are whole in the buffer: copied out of it at once.
        if let Some(whole) = self.input.buffer().get(..RECORD_SIZE) {
            b.copy_from_slice(whole);
            self.input.consume(RECORD_SIZE);
            n = RECORD_SIZE;
        }
        while n < RECORD_SIZE {
            match self.input.read(&mut b[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // A compact file's damaged block, after the whole ones.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return self.cut(e.to_string())
                }
                Err(e) => {
                    self.failed = true;
                    return Some(Err(err(
                        &self.path,
                        format!("cannot read at offset {}: {e}", self.offset),
                    )));
                }
            }
        }
        if n == 0 {
            return None;
        }
        if n < RECORD_SIZE {
            return self.cut(format!(
                "truncated: {n} stray bytes at offset {}",
                self.offset
            ));
        }
        let mut r = match decode(&b, self.offset) {
            Ok(r) => r,
            Err(e) => return self.cut(format!("at {e}")),
        };
        self.offset += RECORD_SIZE as u64;
        r.time = self.conv.to_ns(r.time);
        if let Some(g) = self.generations.as_deref() {
            if matches!(r.kind, Kind::Entry | Kind::Exit) {
                r.addr = g.tag(r.addr, r.time);
            }
        }
        if r.more && matches!(r.kind, Kind::Entry | Kind::Exit) {
            // Arguments or a return value follow, sized by the specs.
            let Some(index) = self.args.clone() else {
                return self.cut(format!(
                    "a record at offset {} carries arguments, and the recording has no \
                     argument specs",
                    self.offset - RECORD_SIZE as u64
                ));
            };
            let retval = r.kind == Kind::Exit;
            let read = match self.dump_args {
                true => index
                    .dump_after(r.addr, retval, &mut self.input)
                    .map(|(len, text, n)| (format!("{len}\n{text}"), n)),
                false => index.read_after(r.addr, retval, &mut self.input),
            };
            match read {
                Ok((text, n)) => {
                    r.args = (!self.hide_args).then(|| text.into());
                    self.offset += n;
                }
                Err(e) => return self.cut(format!("offset {}: {e}", self.offset)),
            }
        }
        if r.more
            && r.kind == Kind::Event
            && (crate::events::FIRST..=crate::events::LAST).contains(&r.addr)
        {
            // A built-in event's data (a `read=` trigger's).
            match crate::events::read_after(r.addr, &mut self.input) {
                Ok((text, n)) => {
                    // (An event without its text is not shown.)
                    r.args = (!self.hide_events).then(|| text.into());
                    self.offset += n;
                }
                Err(e) => return self.cut(format!("offset {}: {e}", self.offset)),
            }
        }
        if r.kind == Kind::Event && crate::events::is_user(r.addr) && !self.hide_events {
            // A user event's name: the views show it (uftrace's: no data).
            r.args = self.user_events.get(&r.addr).cloned();
        }
        if let Some(p) = &self.progress {
            p.tick();
        }
        Some(Ok(r))
    }
}

/// [`DataDir::writer_wait_note`] of `waits` waits of `waited_ns` in all,
/// by `threads` threads, in a run of `run_ns`: said per thread (the waits
/// of threads that run at once add up to more than the run).
fn writer_wait_note(waits: u64, waited_ns: u64, run_ns: u64, threads: u64) -> Option<String> {
    let per_thread = waited_ns / threads.max(1);
    (waits > 0 && waited_ns >= 1_000_000 && per_thread.saturating_mul(10) >= run_ns).then(|| {
        let who = if threads > 1 {
            format!(
                "the program's {threads} threads each spent {:.1} ms on average",
                per_thread as f64 / 1e6
            )
        } else {
            format!("the program spent {:.1} ms", waited_ns as f64 / 1e6)
        };
        format!(
            "note: {who} ({waits} times in all) with full buffers, waiting for the writer \
             or emptying them themselves, \
             {:.0}% of the run; a larger buffer (-b) absorbs bursts, a faster disk (or \
             /dev/shm) a writer slower throughout",
            100.0 * per_thread as f64 / run_ns.max(1) as f64
        )
    })
}

#[cfg(test)]
mod tests {
    use super::writer_wait_note;

    /// Said when the waits were a tenth of the run or more (and a
    /// millisecond at least), not for the few that most runs have.
    #[test]
    fn long_waits_for_the_writer_are_noted() {
        let ms = 1_000_000;
        assert_eq!(writer_wait_note(0, 0, 70 * ms, 1), None);
        assert_eq!(writer_wait_note(16, 2 * ms, 70 * ms, 1), None);
        assert_eq!(writer_wait_note(3, ms / 2, 2 * ms, 1), None);
        let n = writer_wait_note(67, 10_300_000, 80 * ms, 1).unwrap();
        assert!(
            n.contains("the program spent 10.3 ms (67 times in all)")
                && n.contains("13% of the run"),
            "{n}"
        );
        // Eight threads waiting at once: per thread, never above the run.
        let n = writer_wait_note(800, 8 * 59 * ms, 100 * ms, 8).unwrap();
        assert!(
            n.contains("8 threads each spent 59.0 ms on average") && n.contains("59% of the run"),
            "{n}"
        );
        assert_eq!(writer_wait_note(800, 8 * 5 * ms, 100 * ms, 8), None);
    }
}
