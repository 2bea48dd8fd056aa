//! Triggers: actions taken when a function is called (uftrace's
//! `-T FUNC@ACTION[,ACTION…]`, and the same actions after a `-F`/`-N`
//! pattern). One spec is a pattern and its actions; a function's trigger
//! is what every spec matching it says, merged in command-line order
//! ([`Actions::merge`]: a later filter mode, depth or time wins; trace-on
//! and trace-off undo each other), as uftrace merges them.
//!
//! Words after the `@` that are not actions name the module
//! (`malloc@libc,backtrace`), as in uftrace.

use crate::pattern::{Pattern, PatternError};

/// Whether a filter trigger takes a function's calls in or leaves them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterMode {
    /// `filter` (`-F`): record or show only inside its calls.
    In,
    /// `notrace` (`-N`): nothing inside its calls, nor them.
    Out,
}

/// Where a trigger's `read=` action reads from, at entry and exit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    /// `read=proc/statm`: the process's memory (`/proc/self/statm`).
    pub proc_statm: bool,
    /// `read=page-fault`: the thread's minor and major page faults.
    pub page_fault: bool,
    /// `read=pmu-cycle`, `read=pmu-cache`, `read=pmu-branch`: hardware
    /// counters.
    pub pmu: bool,
}

/// A colour of `color=` (for a view that colours its lines).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Color {
    Red,
    Green,
    Blue,
    Yellow,
    Magenta,
    Cyan,
    Bold,
    Gray,
}

/// What a trigger does; every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Actions {
    /// `filter` / `notrace` (and `-F` / `-N` themselves).
    pub filter: Option<FilterMode>,
    /// `depth=N`: inside the call, at most N levels (counting it).
    pub depth: Option<u16>,
    /// `time=T`: inside the call, only calls lasting at least T (ns).
    pub time_ns: Option<u64>,
    /// `size=N`: inside the call, only functions of at least N bytes.
    pub size: Option<u64>,
    /// `trace_on` (true) or `trace_off` (false): tracing switched.
    pub trace: Option<bool>,
    /// `trace`: the call is kept whatever the time filter says.
    pub always: bool,
    /// `backtrace`: the calls it is inside of, shown before it.
    pub backtrace: bool,
    /// `caller`: the call and its callers only (`-C`).
    pub caller: bool,
    /// `hide`: the call is not shown, its callees are, in its place.
    pub hide: bool,
    /// `finish`: tracing ends at this call (the program runs on).
    pub finish: bool,
    /// `recover`: return addresses restored for the call (uftrace's, for
    /// code that walks its own stack; calls here return through stubs and
    /// have nothing to restore).
    pub recover: bool,
    /// `read=…`.
    pub read: Reads,
    /// `color=…`.
    pub color: Option<Color>,
}

impl Actions {
    /// `later` merged into these, as uftrace merges the triggers of one
    /// function.
    pub fn merge(&mut self, later: &Actions) {
        if later.filter.is_some() {
            self.filter = later.filter;
        }
        if later.depth.is_some() {
            self.depth = later.depth;
        }
        if later.time_ns.is_some() {
            self.time_ns = later.time_ns;
        }
        if later.size.is_some() {
            self.size = later.size;
        }
        if later.trace.is_some() {
            self.trace = later.trace;
        }
        if later.color.is_some() {
            self.color = later.color;
        }
        self.always |= later.always;
        self.backtrace |= later.backtrace;
        self.caller |= later.caller;
        self.hide |= later.hide;
        self.finish |= later.finish;
        self.recover |= later.recover;
        self.read.proc_statm |= later.read.proc_statm;
        self.read.page_fault |= later.read.page_fault;
        self.read.pmu |= later.read.pmu;
    }

    /// Whether it does nothing.
    pub fn is_empty(&self) -> bool {
        *self == Actions::default()
    }
}

impl Actions {
    /// The actions as `-T` takes them (`filter,depth=2,backtrace`).
    pub fn words(&self) -> Vec<String> {
        let mut w: Vec<String> = Vec::new();
        match self.filter {
            Some(FilterMode::In) => w.push("filter".into()),
            Some(FilterMode::Out) => w.push("notrace".into()),
            None => {}
        }
        if let Some(d) = self.depth {
            w.push(format!("depth={d}"));
        }
        if let Some(t) = self.time_ns {
            w.push(format!("time={t}ns"));
        }
        if let Some(s) = self.size {
            w.push(format!("size={s}"));
        }
        match self.trace {
            Some(true) => w.push("trace_on".into()),
            Some(false) => w.push("trace_off".into()),
            None => {}
        }
        let flags = [
            (self.always, "trace"),
            (self.backtrace, "backtrace"),
            (self.caller, "caller"),
            (self.hide, "hide"),
            (self.finish, "finish"),
            (self.recover, "recover"),
            (self.read.proc_statm, "read=proc/statm"),
            (self.read.page_fault, "read=page-fault"),
            (self.read.pmu, "read=pmu-cycle"),
        ];
        w.extend(flags.iter().filter(|f| f.0).map(|f| f.1.to_string()));
        if let Some(c) = self.color {
            w.push(format!("color={}", format!("{c:?}").to_lowercase()));
        }
        w
    }
}

/// One trigger spec: the functions a pattern matches, and what to do when
/// they are called.
#[derive(Clone, Debug)]
pub struct Trigger {
    /// The functions.
    pub pattern: Pattern,
    /// What to do.
    pub actions: Actions,
    /// The option it came from.
    pub kind: SpecKind,
}

/// Which spec a text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecKind {
    /// `-T`: every action.
    Trigger,
    /// `-F`: a filter, `@` followed by the actions a filter takes
    /// (`depth=`, `time=`, `size=`, `filter`, `notrace`, `caller`, `hide`;
    /// others are left out, as uftrace leaves them).
    Filter,
    /// `-N`: as `-F`, leaving the functions out.
    Notrace,
}

/// A spec that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerError(pub String);

impl SpecKind {
    /// The option's flag (`-T`, `-F`, `-N`).
    pub fn flag(self) -> &'static str {
        match self {
            SpecKind::Trigger => "-T",
            SpecKind::Filter => "-F",
            SpecKind::Notrace => "-N",
        }
    }
}

impl std::fmt::Display for TriggerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TriggerError {}

impl From<PatternError> for TriggerError {
    fn from(e: PatternError) -> Self {
        TriggerError(e.to_string())
    }
}

/// A duration as uftrace's options take it (`10us`, `1.5ms`, `2s`; a
/// bare number is nanoseconds), in nanoseconds.
pub fn parse_duration(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let scale = match unit {
        "" | "ns" | "nsec" => 1.0,
        "us" | "usec" => 1e3,
        "ms" | "msec" => 1e6,
        "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        _ => return Err(format!("`{v}`: unknown time unit `{unit}` (ns, us, ms, s)")),
    };
    match num.parse::<f64>() {
        Ok(n) if n.is_finite() && n * scale < u64::MAX as f64 => Ok((n * scale).round() as u64),
        _ => Err(format!("`{v}` is not a duration (e.g. 10us, 1.5ms)")),
    }
}

/// Where the actions start in `text`: the first `@` after the pattern (a
/// regex's closing `/` first).
fn split_at_actions(text: &str) -> (&str, Option<&str>) {
    let from = match text.trim_start_matches('!').strip_prefix('/') {
        Some(inner) => text.len() - inner.len() + inner.rfind('/').map_or(inner.len(), |i| i + 1),
        None => 0,
    };
    match text[from..].find('@') {
        Some(i) => (&text[..from + i], Some(&text[from + i + 1..])),
        None => (text, None),
    }
}

impl Trigger {
    /// `text`, a spec of `kind`, as `-T` takes it ([`Trigger::spec`]); a
    /// spec that does not parse as it is given (the configuration's check
    /// says what is wrong with it).
    pub fn as_trigger_spec(text: &str, kind: SpecKind) -> String {
        Trigger::parse(text, kind).map_or_else(|_| text.to_string(), |t| t.spec())
    }

    /// The spec as `-T` takes it (a `-F`/`-N` spec with its filter action
    /// spelt out): `Trigger::parse(&t.spec(), SpecKind::Trigger)` gives
    /// `t` back.
    pub fn spec(&self) -> String {
        let text = self.pattern.text();
        let mut words = self.actions.words();
        let body = match self.pattern.module() {
            Some(m) => {
                words.insert(0, m.to_string());
                text.strip_suffix(&format!("@{m}")).unwrap_or(text)
            }
            None => text,
        };
        format!("{body}@{}", words.join(","))
    }

    /// Parses `PATTERN[@WORD,…]` as `kind` takes it: each word an action
    /// or the module; `-F`/`-N` specs take their filter mode from their
    /// kind (a `!` pattern of `-F` leaves out, as uftrace's).
    pub fn parse(text: &str, kind: SpecKind) -> Result<Trigger, TriggerError> {
        let bad = |why: String| TriggerError(format!("`{text}`: {why}"));
        let (body, words) = split_at_actions(text);
        let mut actions = Actions::default();
        let mut module: Option<&str> = None;
        // (Argument specs and `auto-args` are `record`'s -A/-R; a trigger
        // of them alone is one.)
        let mut args = false;
        for w in words.into_iter().flat_map(|w| w.split(',')) {
            let lower = w.to_ascii_lowercase();
            let value = |name: &str| w.get(name.len()..).unwrap_or("");
            let filter_action = [
                "filter", "notrace", "depth=", "time=", "size=", "caller", "hide",
            ]
            .iter()
            .any(|a| lower.starts_with(a));
            let known = filter_action
                || [
                    "trace",
                    "finish",
                    "read=",
                    "color=",
                    "backtrace",
                    "recover",
                    "arg",
                    "fparg",
                    "retval",
                    "auto-args",
                ]
                .iter()
                .any(|a| lower.starts_with(a));
            if known && kind != SpecKind::Trigger && !filter_action {
                continue; // as uftrace: a filter's other actions are left out
            }
            if lower.starts_with("filter") {
                actions.filter = Some(FilterMode::In);
            } else if lower.starts_with("notrace") {
                actions.filter = Some(FilterMode::Out);
            } else if lower.starts_with("depth=") {
                let d = value("depth=")
                    .parse::<u16>()
                    .ok()
                    .filter(|&d| d <= 1024)
                    .ok_or_else(|| bad(format!("bad depth in `{w}` (0 to 1024)")))?;
                actions.depth = Some(d);
            } else if lower.starts_with("time=") {
                actions.time_ns = Some(parse_duration(value("time=")).map_err(bad)?);
            } else if lower.starts_with("size=") {
                let s = value("size=")
                    .parse::<u64>()
                    .map_err(|_| bad(format!("bad size in `{w}` (bytes)")))?;
                actions.size = Some(s);
            } else if lower.starts_with("caller") {
                actions.caller = true;
            } else if lower.starts_with("hide") {
                actions.hide = true;
            } else if let Some(how) = lower.strip_prefix("trace") {
                match how.trim_start_matches(['_', '-']) {
                    "" => actions.always = true,
                    "on" => actions.trace = Some(true),
                    "off" => actions.trace = Some(false),
                    _ => {
                        return Err(bad(format!(
                            "unknown trace action `{w}` (trace, trace_on, trace_off)"
                        )))
                    }
                }
            } else if lower.starts_with("finish") {
                actions.finish = true;
            } else if lower.starts_with("backtrace") {
                actions.backtrace = true;
            } else if lower.starts_with("recover") {
                actions.recover = true;
            } else if lower.starts_with("read=") {
                match value("read=") {
                    "proc/statm" => actions.read.proc_statm = true,
                    "page-fault" => actions.read.page_fault = true,
                    "pmu-cycle" | "pmu-cache" | "pmu-branch" => actions.read.pmu = true,
                    r => {
                        return Err(bad(format!(
                            "unknown read target `{r}` (proc/statm, page-fault, pmu-cycle, pmu-cache, pmu-branch)"
                        )))
                    }
                }
            } else if lower.starts_with("color=") {
                let c = match value("color=") {
                    "red" => Color::Red,
                    "green" => Color::Green,
                    "blue" => Color::Blue,
                    "yellow" => Color::Yellow,
                    "magenta" => Color::Magenta,
                    "cyan" => Color::Cyan,
                    "bold" => Color::Bold,
                    "gray" => Color::Gray,
                    c => return Err(bad(format!("unknown color `{c}`"))),
                };
                actions.color = Some(c);
            } else if known {
                // (Checked as `-A`/`-R` specs where `record` takes them.)
                args = true;
            } else if w.is_empty() {
                return Err(bad("empty action after `@`".into()));
            } else if let Some(m) = module {
                return Err(bad(format!("two modules, `{m}` and `{w}`")));
            } else {
                module = Some(w);
            }
        }
        match kind {
            SpecKind::Trigger => {}
            SpecKind::Filter => {
                let neg = body.starts_with('!');
                actions.filter = Some(if neg { FilterMode::Out } else { FilterMode::In });
            }
            SpecKind::Notrace => actions.filter = Some(FilterMode::Out),
        }
        let body = if kind == SpecKind::Trigger {
            body
        } else {
            body.strip_prefix('!').unwrap_or(body)
        };
        let text = match module {
            Some(m) => format!("{body}@{m}"),
            None => body.to_string(),
        };
        if kind == SpecKind::Trigger && actions.is_empty() && !args {
            return Err(bad(
                "no action after `@` (e.g. depth=1, trace_off, backtrace)".into(),
            ));
        }
        Ok(Trigger {
            pattern: Pattern::parse(&text)?,
            actions,
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_as_uftrace() {
        let t = Trigger::parse("alloc3@depth=1", SpecKind::Filter).unwrap();
        assert_eq!(t.pattern.text(), "alloc3");
        assert_eq!(t.actions.depth, Some(1));
        assert_eq!(t.actions.filter, Some(FilterMode::In));
        let t = Trigger::parse("free2@depth=1,backtrace", SpecKind::Trigger).unwrap();
        assert!(t.actions.backtrace && t.actions.filter.is_none());
        let t = Trigger::parse("malloc@libc,trace-off", SpecKind::Trigger).unwrap();
        assert_eq!(t.pattern.module(), Some("libc"));
        assert_eq!(t.actions.trace, Some(false));
        let t = Trigger::parse("operator new@trace_on", SpecKind::Trigger).unwrap();
        assert_eq!(t.pattern.text(), "operator new");
        assert_eq!(t.actions.trace, Some(true));
        let t = Trigger::parse("main@time=1.5ms", SpecKind::Trigger).unwrap();
        assert_eq!(t.actions.time_ns, Some(1_500_000));
        let t = Trigger::parse("/^ns::ns2/@notrace", SpecKind::Trigger).unwrap();
        assert_eq!(t.actions.filter, Some(FilterMode::Out));
        assert_eq!(t.pattern.text(), "/^ns::ns2/");
        // A filter leaves out what it does not take.
        let t = Trigger::parse("f@backtrace,depth=2", SpecKind::Notrace).unwrap();
        assert!(!t.actions.backtrace);
        assert_eq!(t.actions.filter, Some(FilterMode::Out));
        let t = Trigger::parse("!f", SpecKind::Filter).unwrap();
        assert_eq!(t.actions.filter, Some(FilterMode::Out));
        assert!(!t.pattern.negated());
        for spec in [
            "f@libc,filter,depth=3,trace_off,backtrace,color=red",
            "/^a.b$/@time=1000ns,hide,read=page-fault",
        ] {
            let t = Trigger::parse(spec, SpecKind::Trigger).unwrap();
            let again = Trigger::parse(&t.spec(), SpecKind::Trigger).unwrap();
            assert_eq!(
                (again.pattern.text(), &again.actions),
                (t.pattern.text(), &t.actions)
            );
        }
        let t = Trigger::parse("!f@libc", SpecKind::Filter).unwrap();
        assert_eq!(t.spec(), "f@libc,notrace");
        for bad in ["f@depth=x", "f", "f@trace_up", "f@color=pink", "f@a,b"] {
            assert!(Trigger::parse(bad, SpecKind::Trigger).is_err(), "{bad}");
        }
    }

    #[test]
    fn merges_later_over_earlier() {
        let mut a = Trigger::parse("f@filter,depth=3,trace_on", SpecKind::Trigger)
            .unwrap()
            .actions;
        a.merge(
            &Trigger::parse("f@notrace,trace_off,backtrace", SpecKind::Trigger)
                .unwrap()
                .actions,
        );
        assert_eq!(a.filter, Some(FilterMode::Out));
        assert_eq!(a.depth, Some(3));
        assert_eq!(a.trace, Some(false));
        assert!(a.backtrace);
        assert_eq!(parse_duration("2us"), Ok(2000));
    }
}
