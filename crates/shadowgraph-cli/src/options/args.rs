//! `record`'s arguments and return values: `-A`/`-R` specs checked, those
//! without specs and `-a` taken from DWARF and the C library's prototypes,
//! and the argument specs among `-T`'s actions.

#![forbid(unsafe_code)]

use super::RecordOptions;
use shadowgraph::config::{self, Config};
use std::path::Path;

impl RecordOptions {
    /// The argument specs among `-T`'s actions (uftrace's `FUNC@arg1`,
    /// `retval`, `auto-args`) as `-A`/`-R` would give them (`auto-args`:
    /// the function's own, as `-A FUNC -R FUNC`).
    pub(super) fn take_trigger_args(&mut self) {
        use shadowgraph_data::args::is_arg_word;
        for t in &self.trigger {
            let Some((func, words)) = t.split_once('@') else {
                continue;
            };
            let words: Vec<&str> = words.split(',').collect();
            if words.contains(&"auto-args") {
                self.argument.push(func.to_string());
                self.retval.push(func.to_string());
            }
            let args: Vec<&str> = words
                .iter()
                .copied()
                .filter(|w| is_arg_word(w) && !w.starts_with("retval"))
                .collect();
            if !args.is_empty() {
                self.argument.push(format!("{func}@{}", args.join(",")));
            }
            if let Some(r) = words.iter().find(|w| w.starts_with("retval")) {
                self.retval.push(format!("{func}@{r}"));
            }
        }
    }

    /// Whether specs come from DWARF: `-a`, or `-A`/`-R` naming functions
    /// without specs.
    pub(crate) fn dwarf_args(&self) -> bool {
        !self.no_args
            && (self.auto_args
                || self
                    .argument
                    .iter()
                    .chain(&self.retval)
                    .any(|g| !g.contains('@')))
    }

    /// `-a`: the argument and return value specs of `program`'s functions
    /// from its DWARF, added to `config`'s (`-A`/`-R` first: they win;
    /// the config's `auto_args` adds those of C library functions);
    /// `-A PAT` and `-R PAT` without specs (uftrace's: the arguments, or
    /// the return value, of the functions PAT names, by their DWARF) too.
    pub(crate) fn add_auto_args(&self, config: &mut Config, program: &Path) -> Result<(), String> {
        use shadowgraph_data::pattern::{FunctionName, Pattern};
        let bare = |given: &[String]| -> Vec<Pattern> {
            given
                .iter()
                .filter(|g| !g.contains('@'))
                .filter_map(|g| Pattern::parse(g).ok())
                .collect()
        };
        let (args_of, ret_of) = (bare(&self.argument), bare(&self.retval));
        let asked = self.auto_args || !args_of.is_empty() || !ret_of.is_empty();
        if !asked || self.no_args {
            return Ok(());
        }
        let config::Mode::Record(r) = &mut config.mode else {
            return Ok(());
        };
        let specs = shadowgraph::elf::autoargs::auto_specs(program)?;
        if specs.functions.is_empty() {
            let what = if self.auto_args {
                "-a"
            } else {
                "-A/-R without specs"
            };
            eprintln!(
                "shadowgraph: warning: {what}: {} has no debug information (build it with -g): only C library functions' arguments are recorded",
                program.display()
            );
        }
        let module = program.to_string_lossy();
        for s in specs.functions {
            let function = shadowgraph_data::names::demangle(&s.symbol);
            let name = FunctionName {
                function: &function,
                symbol: &s.symbol,
                module: &module,
                library: None,
            };
            let named = |ps: &[Pattern]| ps.iter().any(|p| p.matches(&name));
            if let Some(a) = s.args.filter(|_| self.auto_args || named(&args_of)) {
                r.argspec.push(format!("{}@{a}", s.symbol));
            }
            if let Some(v) = s.retval.filter(|_| self.auto_args || named(&ret_of)) {
                r.retspec.push(format!("{}@{v}", s.symbol));
            }
        }
        // The C library functions they name, by their built-in prototypes
        // (`-a` takes them all in the agent).
        if !self.auto_args {
            let (args, rets) = shadowgraph_data::prototypes::lists();
            let named = |ps: &[Pattern], entry: &str| {
                let f = entry.split_once('@').map_or(entry, |e| e.0);
                let name = FunctionName {
                    function: f,
                    symbol: f,
                    module: "",
                    library: None,
                };
                ps.iter().any(|p| p.module().is_none() && p.matches(&name))
            };
            for (list, ps, out) in [
                (args, &args_of, &mut r.argspec),
                (rets, &ret_of, &mut r.retspec),
            ] {
                let own: Vec<String> = list
                    .split(';')
                    .filter(|e| !e.is_empty() && named(ps, e))
                    .map(str::to_string)
                    .collect();
                out.extend(own);
            }
        }
        Ok(())
    }

    /// `-A` (or with `retval`, `-R`) specs, checked: `FUNC@spec,…` each,
    /// every spec one uftrace takes, `FUNC` a pattern as `-F` takes it.
    pub(super) fn arg_specs(&self, given: &[String], retval: bool) -> Result<Vec<String>, String> {
        if self.no_args {
            return Ok(Vec::new());
        }
        let opt = if retval { "-R" } else { "-A" };
        let mut specs_given = Vec::new();
        for g in given {
            if !g.contains('@') {
                // (The function's own, from its DWARF: `add_auto_args`.)
                shadowgraph_data::pattern::Pattern::parse(g)
                    .map_err(|e| format!("{opt} {g}: {e}"))?;
                continue;
            }
            specs_given.push(g.clone());
            let (func, module, specs) =
                shadowgraph_data::args::spec_entry(g).map_err(|e| format!("{opt} {g}: {e}"))?;
            let pattern = match module {
                Some(m) => format!("{func}@{m}"),
                None => func.to_string(),
            };
            shadowgraph_data::pattern::Pattern::parse(&pattern)
                .map_err(|e| format!("{opt} {g}: {e}"))?;
            if specs.iter().any(|a| a.retval != retval) {
                let want = if retval { "retval" } else { "argN or fpargN" };
                return Err(format!("{opt} {g}: {opt} takes {want}"));
            }
        }
        Ok(specs_given)
    }
}
