//! What a tracing session does, as one typed value: the CLI builds it from
//! its options, serialises it once (JSON, in the environment variable
//! [`ENV`]) for the agent in the traced program, which parses it once and
//! hands it to [`crate::session::Session::start`]. A program that embeds
//! the library builds one the same way.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The environment variable that carries a [`Config`] to the agent.
pub const ENV: &str = "SHADOWGRAPH_CONFIG";

/// A tracing session's configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// What the session does.
    pub mode: Mode,
    /// Which loaded objects are traced.
    #[serde(default)]
    pub objects: Objects,
    /// Functions without a patchable entry to patch at their ordinary
    /// prologue (uftrace's `-P`): patterns as `-F` takes them, `.` for
    /// every function; without `@LIB` they name the program's.
    #[serde(default)]
    pub patch: Vec<String>,
    /// Each thread's shadow stack in bytes (a power of two, 4 KiB to
    /// 1 MiB; `record --max-stack` sets it); `None`: the default.
    #[serde(default)]
    pub stack_bytes: Option<usize>,
    /// How traced calls come back.
    #[serde(default)]
    pub returns: Returns,
    /// How code is written (`None`: `mprotect`, or `/proc/self/mem` where
    /// the system refuses writable text).
    #[serde(default)]
    pub text_write: Option<TextWrite>,
    /// Where this process stands among those the traced program started;
    /// the agent fills it in for the processes that inherit the
    /// configuration.
    #[serde(default)]
    pub lineage: Lineage,
    /// `--with-syms DIR`: the functions of a stripped object are named
    /// from `DIR/<object>.sym` (uftrace's symbol files, as a recording of
    /// the object before it was stripped holds them).
    #[serde(default)]
    pub with_syms: Option<PathBuf>,
    /// `--match`: how the patterns of filters, triggers and `-P` are
    /// taken (`None`: regexes where they have regex characters other than
    /// a glob's, else globs).
    #[serde(default)]
    pub pattern_match: Option<PatternMatch>,
    /// Where the agent's messages go (`record --logfile`): a descriptor
    /// the traced program inherits; `None`: standard error.
    #[serde(default)]
    pub log_fd: Option<i32>,
    /// How many levels of debug lines the agent says (`-v`, counted).
    #[serde(default)]
    pub verbose: u8,
}

/// uftrace's `--match` types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatternMatch {
    /// A regex where it has any regex character (`*`, `?`, `[` too).
    Regex,
    /// Always a glob.
    Glob,
}

impl PatternMatch {
    /// Patterns parsed from now on (in this process) are taken so.
    pub fn apply(m: Option<PatternMatch>) {
        use shadowgraph_data::pattern::{set_match_type, MatchType};
        set_match_type(match m {
            None => MatchType::Auto,
            Some(PatternMatch::Regex) => MatchType::Regex,
            Some(PatternMatch::Glob) => MatchType::Glob,
        });
    }
}

/// What a session does.
// Made once per process and moved whole: a box would only add a pointer.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Count every call of every traced function (`shadowgraph count`).
    Count(Count),
    /// Record calls into a data directory (`shadowgraph record`).
    Record(Record),
    /// Trace and record nothing, the agent loaded all the same (`record
    /// --nop`, uftrace's): the program's cost under the agent alone, to
    /// compare with.
    Nop,
}

/// `shadowgraph count`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Count {
    /// Where the counts go at exit (`None`: standard error).
    pub report: Option<PathBuf>,
    /// Count entries and returns through function-graph tracing (return
    /// hijacking or site stubs), rather than entries by a counting
    /// trampoline.
    pub graph: bool,
}

/// `shadowgraph record`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// The data directory (absolute).
    pub dir: PathBuf,
    /// The tracers, each an fgraph user with its own filters; at most
    /// [`MAX_TRACERS`]. One without a name records into `dir` itself.
    pub tracers: Vec<Tracer>,
    /// The threads' rings in shared memory, drained by `shadowgraph
    /// record`'s writer; `None`: each thread writes its own records into
    /// `dir` (an embedded recording).
    #[serde(default)]
    pub rings: Option<Rings>,
    /// Each thread's ring in bytes (`-b`); `None`: the default.
    #[serde(default)]
    pub ring_bytes: Option<u64>,
    /// The clock timestamps are read from.
    #[serde(default)]
    pub clock: Clock,
    /// How the records are laid out in the threads' files (`--compact`).
    #[serde(default)]
    pub layout: Layout,
    /// Tracing switched off and on through FIFOs (`--control`).
    #[serde(default)]
    pub control: Option<Control>,
    /// Whether forked children and the programs they start by exec are
    /// recorded too (`--no-children`: false).
    #[serde(default = "yes")]
    pub children: bool,
    /// Whether a lone tracer may take the fused recording paths (false:
    /// always fgraph's callbacks, to compare).
    #[serde(default = "yes")]
    pub fused: bool,
    /// Which calls through PLTs are traced as library calls.
    #[serde(default)]
    pub libcalls: LibCalls,
    /// Arguments to record (uftrace's `-A`): `FUNC@arg1,arg2/s,…` each,
    /// `FUNC` a pattern as `-F` takes it.
    #[serde(default)]
    pub argspec: Vec<String>,
    /// Return values to record (uftrace's `-R`): `FUNC@retval[/FMT]` each.
    #[serde(default)]
    pub retspec: Vec<String>,
    /// `-a`: also the arguments and return values of well-known C
    /// library functions (`shadowgraph_data::prototypes`) where
    /// `argspec`/`retspec` give a function none.
    #[serde(default)]
    pub auto_args: bool,
    /// Signals that switch every tracer's tracing (`--signal
    /// SIG@ACTION`: `trace_on`, `trace_off`, `finish`), as uftrace's.
    #[serde(default)]
    pub signals: Vec<String>,
    /// `--watch cpu`: the processor a thread runs on is recorded at a
    /// call's entry or return where it changed (uftrace's `watch:cpu`
    /// event).
    #[serde(default)]
    pub watch_cpu: bool,
    /// `--force`: a program without sites of its own (not built for
    /// tracing) is traced all the same, by the calls it makes through its
    /// PLT, as uftrace's option traces it; else it runs untraced (a
    /// launcher, whose programs started by exec are traced).
    #[serde(default)]
    pub force: bool,
    /// `-E PROVIDER:EVENT`: the user SDT markers recorded as events (the
    /// kernel's events, `linux:…`, are `record`'s to ask perf for).
    #[serde(default)]
    pub events: Vec<String>,
    /// The command line that started the recording, as its `info` shows
    /// it (uftrace's: the arguments joined by spaces, `"` and `\\`
    /// escaped); `None`: the traced program's.
    #[serde(default)]
    pub command: Option<String>,
    /// `-g/--agent`: the recorded program listens for `record -p PID`,
    /// which switches its tracing off and on (see
    /// [`crate::session::agent_fifos`]).
    #[serde(default)]
    pub agent: bool,
}

/// How a recording lays out the records of its threads' files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// uftrace's: 16 bytes a record (uftrace reads the files as they are).
    #[default]
    Uftrace,
    /// `shadowgraph_data::compact`: a few bytes a record, read by
    /// shadowgraph's views (`export --uftrace` writes uftrace's).
    Compact,
}

/// Which calls made through an object's PLT to functions of other objects
/// (library calls) are traced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LibCalls {
    /// None (`--no-libcall`).
    Off,
    /// Those of the program (its executable), if it is traced: the
    /// default, as uftrace's.
    #[default]
    Traced,
    /// Those of every loaded object but the system's base libraries (libc,
    /// libm, libgcc_s, libpthread, libdl, the loader), which uftrace's
    /// `--nest-libcall` leaves out too: the calls libraries make to each
    /// other (`--nest-libcall`).
    Nested,
}

impl Record {
    /// A recording into `dir` by `tracers`, each thread writing its own
    /// records there (no writer process), every other setting at its
    /// default.
    pub fn into_dir(dir: impl Into<PathBuf>, tracers: Vec<Tracer>) -> Record {
        Record {
            dir: dir.into(),
            tracers,
            rings: None,
            ring_bytes: None,
            clock: Clock::Tsc,
            layout: Layout::Uftrace,
            control: None,
            children: true,
            fused: true,
            libcalls: LibCalls::Off,
            argspec: Vec::new(),
            retspec: Vec::new(),
            auto_args: false,
            signals: Vec::new(),
            watch_cpu: false,
            force: false,
            events: Vec::new(),
            command: None,
            agent: false,
        }
    }
}

fn yes() -> bool {
    true
}

/// Most tracers one recording holds.
pub const MAX_TRACERS: usize = 8;

/// One tracer of a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tracer {
    /// Its directory inside the recording's (`None`: the recording's own).
    #[serde(default)]
    pub name: Option<String>,
    /// What it keeps.
    #[serde(default)]
    pub kind: TracerKind,
    /// Record only inside these functions (patterns as `-F` takes them).
    #[serde(default)]
    pub filter: Vec<String>,
    /// Record nothing inside these functions (`-N`).
    #[serde(default)]
    pub notrace: Vec<String>,
    /// Record at most this many nested levels (0: no limit).
    #[serde(default)]
    pub depth: u32,
    /// Record only calls lasting at least this many nanoseconds, with
    /// their callers (0: every call).
    #[serde(default)]
    pub time_ns: u64,
    /// Triggers (uftrace's `-T FUNC@ACTION,…`), in order. With any, the
    /// tracer's `filter` and `notrace` patterns must be among them
    /// (`FUNC@filter`, `FUNC@notrace`, in command-line order) rather than
    /// in those lists.
    #[serde(default)]
    pub triggers: Vec<String>,
    /// Tracing starts off; a `trace_on` trigger switches it on.
    #[serde(default)]
    pub disabled: bool,
    /// Record no call of a function smaller than this many bytes (to the
    /// next traced function), its callees in its place (`-Z`; 0: all).
    #[serde(default)]
    pub min_size: u64,
}

/// A `--signal` spec: the signal and what it does (uftrace's `SIG@ACTION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalTrigger {
    /// The signal's number.
    pub signal: i32,
    /// `trace_on` (true), `trace_off` (false).
    pub trace: Option<bool>,
    /// `finish`: nothing more is recorded.
    pub finish: bool,
}

/// The signals uftrace names, without `SIG`.
const SIGNALS: [(&str, i32); 31] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

impl SignalTrigger {
    /// `SIG@ACTION[,ACTION]`: a signal by name (`SIGUSR1`, `USR1`,
    /// `RTMIN+3`, `SIGRTMAX-1`) or number, and `trace_on`, `trace_off`
    /// or `finish`, as uftrace takes them.
    pub fn parse(spec: &str) -> Result<SignalTrigger, String> {
        use shadowgraph_data::trigger::{Actions, SpecKind, Trigger};
        let bad = |why: &str| format!("--signal {spec}: {why}");
        let (name, _) = spec
            .split_once('@')
            .ok_or_else(|| bad("give SIG@ACTION, e.g. SIGUSR1@finish"))?;
        let t = Trigger::parse(spec, SpecKind::Trigger).map_err(|e| bad(&e.to_string()))?;
        let mut rest = t.actions.clone();
        (rest.trace, rest.finish) = (None, false);
        if rest != Actions::default() || (t.actions.trace.is_none() && !t.actions.finish) {
            return Err(bad("a signal takes trace_on, trace_off or finish"));
        }
        let short = name.strip_prefix("SIG").unwrap_or(name);
        let (rtmin, rtmax) = (libc::SIGRTMIN(), libc::SIGRTMAX());
        let rt = |base: i32, off: &str| -> Option<i32> {
            let n = if off.is_empty() { 0 } else { off.parse().ok()? };
            Some(base + n).filter(|s| (rtmin..=rtmax).contains(s))
        };
        let signal = if let Ok(n) = name.parse::<i32>() {
            Some(n).filter(|n| (1..=rtmax).contains(n))
        } else if let Some(off) = short.strip_prefix("RTMIN") {
            rt(rtmin, off)
        } else if let Some(off) = short.strip_prefix("RTMAX") {
            rt(rtmax, off)
        } else {
            SIGNALS.iter().find(|s| s.0 == short).map(|s| s.1)
        }
        .ok_or_else(|| bad(&format!("no signal `{name}`")))?;
        Ok(SignalTrigger {
            signal,
            trace: t.actions.trace,
            finish: t.actions.finish,
        })
    }
}

/// What a tracer keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TracerKind {
    /// Every call's entry and exit records.
    #[default]
    Graph,
    /// Per-function calls, total and self time, and their spread, in
    /// memory (no records).
    Profile,
}

/// The threads' rings in shared memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rings {
    /// The directory the rings are made in (`/dev/shm/…`).
    pub dir: PathBuf,
    /// The ring layout the writer reads ([`crate::record::ring::LAYOUT`]):
    /// an agent of another build refuses to record.
    pub layout: u8,
}

/// The clock records are timed by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// The TSC where its rate is constant, converted to CLOCK_MONOTONIC
    /// nanoseconds; else CLOCK_MONOTONIC.
    #[default]
    Tsc,
    /// CLOCK_MONOTONIC for every timestamp.
    Monotonic,
}

/// `record --control CTL[,ACK] [--disable]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Control {
    /// The FIFO commands (`disable`, `enable`) are read from (absolute).
    pub commands: PathBuf,
    /// The FIFO `ack` is written to once a command took effect.
    #[serde(default)]
    pub acks: Option<PathBuf>,
    /// Tracing starts switched off.
    #[serde(default)]
    pub start_disabled: bool,
}

/// Which loaded objects are traced.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objects {
    /// The program and every library with sites.
    #[default]
    All,
    /// The program, and the libraries whose file names start with one of
    /// these (none: the program alone).
    Program(Vec<String>),
}

/// How traced calls come back to the tracers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Returns {
    /// Through each site's stub, which calls the function (a real
    /// call/ret pair: the return-stack predictor stays right).
    #[default]
    SiteStubs,
    /// By hijacking return addresses (to compare).
    Hijack,
}

/// How the patcher writes code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextWrite {
    /// `mprotect` the pages writable for the write, then restore them.
    Mprotect,
    /// `pwrite` to `/proc/self/mem`: text never becomes writable.
    ProcMem,
}

/// Where a process stands among those the traced program started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lineage {
    /// The process the session began in; `None` in that process itself.
    #[serde(default)]
    pub root_pid: Option<i32>,
    /// The recording session this image was started by exec inside of.
    #[serde(default)]
    pub session: Option<u64>,
}

/// Whether a recording can apply this trigger, or says why not.
fn check_trigger(spec: &str) -> Result<(), String> {
    use shadowgraph_data::trigger::{SpecKind, Trigger};
    let t = Trigger::parse(spec, SpecKind::Trigger).map_err(|e| e.to_string())?;
    if t.actions.read.pmu {
        return Err(format!(
            "-T {spec}: the processor's counters (read=pmu-*) are not read when recording \
             (read=proc/statm and read=page-fault are)"
        ));
    }
    Ok(())
}

/// A configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// A recording, every other setting at its default.
    pub fn record(r: Record) -> Config {
        Config {
            mode: Mode::Record(r),
            objects: Objects::All,
            patch: Vec::new(),
            stack_bytes: None,
            returns: Returns::SiteStubs,
            text_write: None,
            lineage: Lineage::default(),
            with_syms: None,
            pattern_match: None,
            log_fd: None,
            verbose: 0,
        }
    }

    /// The configuration the environment carries ([`ENV`]), if any.
    pub fn from_env() -> Result<Option<Config>, ConfigError> {
        match std::env::var(ENV) {
            Ok(v) => Config::parse(&v).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(e) => Err(ConfigError(format!("{ENV}: {e}"))),
        }
    }

    /// Parses and checks a serialised configuration.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let c: Config =
            serde_json::from_str(text).map_err(|e| ConfigError(format!("{ENV}: {e}")))?;
        c.check()?;
        Ok(c)
    }

    /// The configuration serialised, for [`ENV`].
    pub fn to_env_value(&self) -> String {
        serde_json::to_string(self).expect("a configuration always serialises")
    }

    /// Checks what the types cannot say: patterns, the number of tracers,
    /// what each kind of tracer takes.
    pub fn check(&self) -> Result<(), ConfigError> {
        for p in &self.patch {
            crate::prologue::parse_pattern(p).map_err(|e| ConfigError(format!("-P: {e}")))?;
        }
        let Mode::Record(r) = &self.mode else {
            return Ok(());
        };
        if r.tracers.is_empty() || r.tracers.len() > MAX_TRACERS {
            return Err(ConfigError(format!(
                "a recording has 1 to {MAX_TRACERS} tracers, not {}",
                r.tracers.len()
            )));
        }
        for t in &r.tracers {
            let who = t
                .name
                .as_deref()
                .map_or(String::new(), |n| format!("tracer {n}: "));
            if let Some(n) = &t.name {
                if n.is_empty() || n.contains('/') || n.starts_with('.') {
                    return Err(ConfigError(format!(
                        "tracer `{n}`: a tracer's name is a plain directory name"
                    )));
                }
            }
            for p in t.filter.iter().chain(&t.notrace) {
                shadowgraph_data::pattern::Pattern::parse(p)
                    .map_err(|e| ConfigError(format!("{who}{e}")))?;
            }
            for s in &t.triggers {
                check_trigger(s).map_err(|e| ConfigError(format!("{who}{e}")))?;
            }
            // (The triggers' state decides in place of these lists.)
            let patterns = !t.filter.is_empty() || !t.notrace.is_empty();
            let triggered = !t.triggers.is_empty() || t.disabled || t.min_size > 0;
            if triggered && patterns {
                return Err(ConfigError(format!(
                    "{who}with triggers (or disabled, or a size filter), filter and notrace patterns are triggers too"
                )));
            }
            if t.kind == TracerKind::Profile
                && (t.depth > 0
                    || t.time_ns > 0
                    || !t.triggers.is_empty()
                    || t.disabled
                    || t.min_size > 0)
            {
                return Err(ConfigError(format!(
                    "{who}a profile takes filter= and notrace= only (it keeps no call records)"
                )));
            }
        }
        if r.tracers.len() > 1 && r.tracers.iter().any(|t| t.name.is_none()) {
            return Err(ConfigError(
                "several tracers each need a name (their directories)".into(),
            ));
        }
        for (k, t) in r.tracers.iter().enumerate() {
            if let Some(n) = &t.name {
                if r.tracers[..k].iter().any(|u| u.name.as_ref() == Some(n)) {
                    return Err(ConfigError(format!(
                        "tracer `{n}` is named twice: each tracer records into a directory of its own"
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checks() {
        let c = Config {
            mode: Mode::Record(Record {
                dir: "/tmp/x".into(),
                tracers: vec![Tracer {
                    filter: vec!["main".into()],
                    depth: 3,
                    ..Default::default()
                }],
                rings: None,
                ring_bytes: Some(1 << 20),
                clock: Clock::Monotonic,
                layout: Layout::Compact,
                control: None,
                children: true,
                fused: true,
                libcalls: LibCalls::Nested,
                argspec: vec!["add@arg1,arg2/s".into()],
                retspec: vec!["add@retval".into()],
                auto_args: true,
                signals: Vec::new(),
                watch_cpu: false,
                force: false,
                events: vec!["uftrace:*".into()],
                command: Some("shadowgraph record -A \"x\"".into()),
                agent: true,
            }),
            objects: Objects::Program(vec!["libfoo".into()]),
            patch: vec![".".into(), "!main".into()],
            stack_bytes: None,
            returns: Returns::SiteStubs,
            text_write: Some(TextWrite::ProcMem),
            lineage: Lineage::default(),
            with_syms: None,
            pattern_match: None,
            log_fd: Some(3),
            verbose: 2,
        };
        assert_eq!(Config::parse(&c.to_env_value()).unwrap(), c);
        let mut bad = c.clone();
        if let Mode::Record(r) = &mut bad.mode {
            r.tracers[0].filter = vec!["[abc".into()];
        }
        let e = Config::parse(&bad.to_env_value()).unwrap_err();
        assert!(e.0.contains("bad pattern `[abc`"), "{e}");
        // Two tracers of one name would write one directory.
        let mut twice = c.clone();
        if let Mode::Record(r) = &mut twice.mode {
            r.tracers = ["a", "b", "a"]
                .map(|n| Tracer {
                    name: Some(n.into()),
                    ..Default::default()
                })
                .to_vec();
        }
        assert_eq!(
            twice.check().unwrap_err().0,
            "tracer `a` is named twice: each tracer records into a directory of its own"
        );
        assert!(Config::parse("{\"mode\":1}")
            .unwrap_err()
            .0
            .starts_with(ENV));
    }
}
