//! The specs of a recording (uftrace's `argspec`/`retspec` lists, `.dbg`
//! files' `A:`/`R:` lines, the built-in ones) and which apply to a
//! function; enum definitions for `e:NAME` values.

use super::spec::ArgSpec;
use crate::pattern::{FunctionName, Pattern};

/// The specs of a recording: for each pattern, its arguments and return
/// value, in the order given.
#[derive(Clone, Debug, Default)]
pub struct Specs {
    rules: Vec<(Pattern, Vec<ArgSpec>)>,
    /// By symbol (uftrace's `.dbg` files: `A:`/`R:` lines of a function).
    exact: std::collections::HashMap<String, Vec<ArgSpec>>,
    /// By symbol or name: built-in specs (`-a`'s of C library functions,
    /// uftrace's `argauto`/`retauto`), for what the others leave out.
    builtin: std::collections::HashMap<String, Vec<ArgSpec>>,
    /// Where the built-in specs apply only to some functions (uftrace's
    /// `-A PAT` and `-R PAT` without specs, kept as such in its `argspec`
    /// and `retspec`): the patterns of those whose arguments, and of
    /// those whose return values, they give. None: every function's.
    builtin_for: Option<(Vec<Pattern>, Vec<Pattern>)>,
    /// Enums by name (`E:` lines, `enumauto`), for `e:NAME` values.
    pub enums: Enums,
}

/// Enum definitions (`enum NAME { A, B = 5, C };`), by name: each
/// value's name, largest value first.
#[derive(Clone, Debug, Default)]
pub struct Enums(std::collections::HashMap<String, Vec<(i64, String)>>);

impl Enums {
    /// Adds the definitions of `text` (`;`-separated, as uftrace writes
    /// them: C's syntax, a value a number or an earlier constant); one
    /// that cannot be read is left out.
    pub fn add(&mut self, text: &str) {
        for def in text.split(';') {
            let Some(rest) = def.trim().strip_prefix("enum") else {
                continue;
            };
            let Some((name, body)) = rest.split_once('{') else {
                continue;
            };
            let body = body.split('}').next().unwrap_or("");
            let mut vals: Vec<(i64, String)> = Vec::new();
            let mut next = 0i64;
            for item in body.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                let (n, v) = match item.split_once('=') {
                    Some((n, v)) => {
                        let v = v.trim();
                        let num = if let Some(h) = v.strip_prefix("0x") {
                            i64::from_str_radix(h, 16).ok()
                        } else if v.len() > 1 && v.starts_with('0') {
                            i64::from_str_radix(&v[1..], 8).ok()
                        } else {
                            v.parse().ok()
                        };
                        let num = num.or_else(|| vals.iter().find(|x| x.1 == v).map(|x| x.0));
                        let Some(num) = num else {
                            vals.clear();
                            break;
                        };
                        (n.trim(), num)
                    }
                    None => (item, next),
                };
                vals.push((v, n.to_string()));
                next = v + 1;
            }
            vals.sort_by_key(|v| std::cmp::Reverse(v.0));
            self.0.insert(name.trim().to_string(), vals);
        }
    }

    /// `val` of enum `name` as uftrace shows it: its constant, else the
    /// flags that make it up (`A|B`, `+0x..` for the rest), else the
    /// number (hexadecimal beyond ±100000); None for an unknown enum.
    pub fn show(&self, name: &str, val: i64) -> Option<String> {
        let vals = self.0.get(name)?;
        if let Some(v) = vals.iter().find(|v| v.0 == val) {
            return Some(v.1.clone());
        }
        let (mut left, mut parts) = (val, Vec::new());
        for (v, n) in vals {
            if *v <= left {
                left -= v;
                parts.push(n.as_str());
            }
            if left == 0 {
                break;
            }
        }
        Some(match (parts.is_empty(), left) {
            (false, 0) => parts.join("|"),
            (false, l) => format!("{}+{l:#x}", parts.join("|")),
            (true, _) if val.unsigned_abs() > 100_000 => format!("{:#x}", val as i32),
            (true, _) => val.to_string(),
        })
    }
}

impl Specs {
    /// The specs a recording's `info` names: uftrace's `argspec` and
    /// `retspec` (patterns as its `pattern_type` says), with `auto-args`
    /// the built-in ones, and the built-in enums (`enumauto`).
    pub fn recorded(info: &crate::meta::Info) -> Result<Specs, String> {
        let regex = info.get("pattern_type").unwrap_or("regex") == "regex";
        let mut specs = Specs::default();
        let mut bare = [Vec::new(), Vec::new()];
        for (key, bare) in ["argspec", "retspec"].into_iter().zip(&mut bare) {
            let list = info.get(key).unwrap_or("");
            if list.contains('@') {
                specs.add_list(list, regex)?;
            }
            for entry in list
                .split(';')
                .filter(|e| !e.is_empty() && !e.contains('@'))
            {
                bare.push(list_pattern(entry, None, regex)?);
            }
        }
        let auto = info.get("auto-args") == Some("1");
        if auto || bare.iter().any(|b| !b.is_empty()) {
            for key in ["argauto", "retauto"] {
                specs.add_builtin(info.get(key).unwrap_or(""))?;
            }
        }
        if !auto {
            let [args, rets] = bare;
            specs.builtin_for = Some((args, rets));
        }
        specs.enums.add(info.get("enumauto").unwrap_or(""));
        Ok(specs)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.exact.is_empty() && self.builtin.is_empty()
    }

    /// Adds built-in specs: uftrace's `NAME@spec,…;…` list of plain
    /// names (its `argauto` or `retauto`). A function gets their
    /// arguments only if no other spec gives it any, and their return
    /// value only if none gives it one (as uftrace's `-a` yields to
    /// `-A`, `-R` and DWARF).
    pub fn add_builtin(&mut self, list: &str) -> Result<(), String> {
        for entry in list.split(';').filter(|e| !e.is_empty()) {
            let (name, specs) = list_entry(entry)?;
            self.builtin
                .entry(name.to_string())
                .or_default()
                .extend(specs);
        }
        Ok(())
    }

    /// Adds the specs of the function whose symbol is `symbol`: `list` as
    /// a `.dbg` file's `A:` or `R:` line has it (`@arg1,arg2/s`).
    pub fn add_exact(&mut self, symbol: &str, list: &str) -> Result<(), String> {
        let specs = list
            .trim_start_matches('@')
            .split(',')
            .filter(|s| !s.is_empty())
            .map(ArgSpec::parse)
            .collect::<Result<Vec<_>, _>>()?;
        self.exact
            .entry(symbol.to_string())
            .or_default()
            .extend(specs);
        Ok(())
    }

    /// Adds uftrace's `FUNC@spec,spec;FUNC@…` list (`argspec:` and
    /// `retspec:` lines of its `info`); `regex`: its patterns are regular
    /// expressions (uftrace's default `pattern_type`), a name without
    /// their special characters meaning itself. Actions other than
    /// argument specs (triggers) are skipped.
    pub fn add_list(&mut self, list: &str, regex: bool) -> Result<(), String> {
        for entry in list.split(';').filter(|e| !e.is_empty()) {
            let (func, module, args) = spec_entry(entry)?;
            if args.is_empty() {
                continue;
            }
            self.rules.push((list_pattern(func, module, regex)?, args));
        }
        Ok(())
    }

    /// The specs that apply to a function, in order (arguments and the
    /// return value together, as uftrace lists them).
    pub fn of(&self, name: &FunctionName<'_>) -> Vec<ArgSpec> {
        // As uftrace adds them: each argument once, where it was first
        // named; a later spec of it changes its format, unless the earlier
        // one named the function itself and the later is a pattern.
        let mut merged: Vec<(ArgSpec, bool)> = Vec::new();
        let mut add =
            |a: &ArgSpec, exact: bool| match merged.iter_mut().find(|(o, _)| o.same_argument(a)) {
                Some(o) if exact || !o.1 => *o = (a.clone(), exact),
                Some(_) => {}
                None => merged.push((a.clone(), exact)),
            };
        for a in self.exact.get(name.symbol).into_iter().flatten() {
            add(a, true);
        }
        for (p, specs) in self.rules.iter().filter(|(p, _)| p.matches(name)) {
            for a in specs {
                add(a, p.is_exact());
            }
        }
        let mut found: Vec<ArgSpec> = merged.into_iter().map(|(a, _)| a).collect();
        let builtin = (self.builtin.get(name.symbol))
            .or_else(|| self.builtin.get(name.function))
            .into_iter()
            .flatten();
        let (args, ret) = (
            found.iter().any(|a| !a.retval),
            found.iter().any(|a| a.retval),
        );
        let wanted = |retval: bool| match &self.builtin_for {
            None => true,
            Some((a, r)) => (if retval { r } else { a }).iter().any(|p| p.matches(name)),
        };
        found.extend(
            builtin
                .filter(|a| if a.retval { !ret } else { !args })
                .filter(|a| wanted(a.retval))
                .cloned(),
        );
        found
    }
}

/// A list's function pattern (`regex`: uftrace's `pattern_type`, a name
/// without regex characters meaning itself), in `module` if given.
fn list_pattern(func: &str, module: Option<&str>, regex: bool) -> Result<Pattern, String> {
    let special = |c: char| ".^$*+?()[]{}|\\".contains(c);
    let text = if regex && func.contains(special) {
        format!("/{func}/")
    } else {
        func.to_string()
    };
    let text = match module {
        Some(m) => format!("{text}@{m}"),
        None => text,
    };
    Pattern::parse(&text).map_err(|e| e.to_string())
}

/// One `FUNC@spec,spec` entry of a list: the function and its argument
/// and return value specs (other actions, triggers, left out).
fn list_entry(entry: &str) -> Result<(&str, Vec<ArgSpec>), String> {
    let (func, _, specs) = spec_entry(entry)?;
    Ok((func, specs))
}

/// Whether a word after a spec's `@` is an argument spec.
pub fn is_arg_word(w: &str) -> bool {
    w.starts_with("arg") || w.starts_with("fparg") || w.starts_with("retval")
}

/// Whether a word after a spec's `@` is a trigger's action (which
/// argument lists pass over).
fn is_action_word(w: &str) -> bool {
    w.contains('=')
        || [
            "trace",
            "trace_on",
            "trace_off",
            "recover",
            "backtrace",
            "finish",
            "filter",
            "notrace",
            "hide",
            "caller",
        ]
        .contains(&w)
}

/// One `FUNC@word,word` entry as uftrace takes it: the function, the
/// module a word that is neither a spec nor an action names (`plt`: the
/// library calls; else an object's name), and the specs.
pub fn spec_entry(entry: &str) -> Result<(&str, Option<&str>, Vec<ArgSpec>), String> {
    let (func, words) = entry
        .split_once('@')
        .ok_or_else(|| format!("argument spec `{entry}`: no `@`"))?;
    let mut module = None;
    let mut specs = Vec::new();
    for w in words.split(',').filter(|w| !w.is_empty()) {
        if is_arg_word(w) {
            specs.push(ArgSpec::parse(w)?);
        } else if !is_action_word(w) {
            if let Some(m) = module {
                return Err(format!(
                    "argument spec `{entry}`: two modules, `{m}` and `{w}`"
                ));
            }
            module = Some(w);
        }
    }
    Ok((func, module, specs))
}
