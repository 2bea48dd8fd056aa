//! Objects loaded by `dlopen` while a program was recorded, and the names
//! of addresses that two of them held in turn.
//!
//! After `dlclose`, the loader may put the next library at the address of
//! the one closed: the same address then names a function of each, by
//! time. A recording says when each object came (uftrace's `DLOP` lines of
//! `task.txt`; our raw recordings' `loads` file), and the records are
//! named by the object loaded there at their time, as uftrace names them.
//!
//! The views look functions up by address alone. So an object whose range
//! another one held too is given a *tag*, a number ≥ 1 in the address bits
//! above [`ADDR_BITS`] (unused by user-space addresses on x86-64): its
//! symbols and range are kept tagged, and a record at an address there is
//! tagged as it is read, by its time ([`Generations::tag`]). Two loads of
//! one file at one base share their tag, so their functions stay one.
//! Where an address is shown, [`untagged`] gives it back as it was.

#![forbid(unsafe_code)]

use std::path::Path;

/// The address bits of user space; a tag sits above them.
pub const ADDR_BITS: u32 = 48;

/// `addr` without its tag: the address the program ran at.
#[inline]
pub fn untagged(addr: u64) -> u64 {
    addr & ((1 << ADDR_BITS) - 1)
}

/// An object loaded while the program was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Load {
    /// When (nanoseconds, as the records' times).
    pub time: u64,
    /// The thread that loaded it.
    pub tid: i32,
    /// Its load bias (uftrace's `base`: run-time address of its link-time
    /// address 0).
    pub base: u64,
    /// The addresses its code spans, untagged.
    pub range: (u64, u64),
    /// Its file.
    pub path: String,
    /// Its functions (absolute, untagged), by address.
    pub symbols: Vec<(u64, String)>,
    /// Its tag: 0 when no other object held its addresses.
    pub tag: u64,
}

/// The objects that held the same addresses in turn: which one held an
/// address at a time.
#[derive(Debug, Default)]
pub struct Generations {
    /// (time, start, end, tag) of each load in a shared range, by time.
    by_time: Vec<(u64, u64, u64, u64)>,
    /// The lowest and highest address of them all (a quick way out).
    span: (u64, u64),
}

impl Generations {
    /// `addr` of a record at `time`, tagged after the object loaded there
    /// last at or before then (as it is when no such object was).
    #[inline]
    pub fn tag(&self, addr: u64, time: u64) -> u64 {
        if addr < self.span.0 || addr >= self.span.1 {
            return addr;
        }
        let held = self.by_time[..self.by_time.partition_point(|l| l.0 <= time)]
            .iter()
            .rev()
            .find(|l| (l.1..l.2).contains(&addr));
        match held {
            Some(l) => addr | l.3 << ADDR_BITS,
            None => addr,
        }
    }
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// Our raw recordings' `loads`: a line per object loaded (`time tid base
/// start end path`, the time in nanoseconds as the records', the rest in
/// hex), then
/// a line per function of it (a tab, `address name`), tab-separated; none
/// without the file. Lines that do not read so are skipped, said in
/// `skipped`.
pub(crate) fn read_raw(dir: &Path, skipped: &mut Vec<String>) -> Vec<Load> {
    let p = dir.join("loads");
    let Ok(text) = std::fs::read_to_string(&p) else {
        return Vec::new();
    };
    let mut out: Vec<Load> = Vec::new();
    for (n, l) in text.lines().enumerate() {
        let ok = match l.strip_prefix('\t') {
            Some(sym) => match (sym.split_once('\t'), out.last_mut()) {
                (Some((a, name)), Some(load)) => {
                    hex(a).map(|a| load.symbols.push((a, name.into())))
                }
                _ => None,
            },
            None => match l.splitn(6, '\t').collect::<Vec<_>>()[..] {
                [time, tid, base, lo, hi, path] => (|| {
                    out.push(Load {
                        time: time.parse().ok()?,
                        tid: tid.parse().ok()?,
                        base: hex(base)?,
                        range: (hex(lo)?, hex(hi)?),
                        path: path.to_string(),
                        symbols: Vec::new(),
                        tag: 0,
                    });
                    Some(())
                })(),
                _ => None,
            },
        };
        if ok.is_none() {
            super::meta::skip_line(
                skipped,
                &p,
                n,
                "expected an object loaded or a function of it",
            );
        }
    }
    for load in &mut out {
        load.symbols.sort();
    }
    out
}

/// uftrace's `DLOP` lines of `task.txt` (`DLOP timestamp=SEC.NSEC tid=
/// sid= base=HEX libname="PATH"`), each object's functions from its
/// `<name>.sym` file (in `with_syms` first, as `--with-syms` asks): offsets
/// from `base`, its range to its last `?` line.
pub(crate) fn read_uftrace(
    dir: &Path,
    with_syms: Option<&Path>,
    skipped: &mut Vec<String>,
) -> Vec<Load> {
    let task = dir.join("task.txt");
    let text = std::fs::read_to_string(&task).unwrap_or_default();
    let mut out = Vec::new();
    for (n, l) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("DLOP "))
    {
        let field = |k: &str| l.split_whitespace().find_map(|f| f.strip_prefix(k));
        let load = (|| {
            let (sec, nsec) = field("timestamp=")?.split_once('.')?;
            let time = sec.parse::<u64>().ok()? * 1_000_000_000 + nsec.parse::<u64>().ok()?;
            let path = l.split_once("libname=")?.1.trim().trim_matches('"');
            Some((
                time,
                field("tid=")?.parse().ok()?,
                hex(field("base=")?)?,
                path,
            ))
        })();
        let Some((time, tid, base, path)) = load else {
            super::meta::skip_line(
                skipped,
                &task,
                n,
                "expected timestamp, tid, base and libname",
            );
            continue;
        };
        let (_, sym) = super::meta::sym_file(dir, with_syms, path);
        let mut symbols = Vec::new();
        let mut end = 0;
        if let Ok(st) = std::fs::read_to_string(&sym) {
            for (m, fields) in crate::format::sym_lines(&st) {
                match fields.and_then(|(a, kind, f)| Some((hex(a)?, kind, f))) {
                    Some((a, "?", _)) => end = end.max(base.wrapping_add(a)),
                    Some((a, _, f)) => symbols.push((base.wrapping_add(a), f.to_string())),
                    None => super::meta::skip_line(skipped, &sym, m, "expected address type name"),
                }
            }
        }
        symbols.sort();
        let start = symbols.first().map_or(base, |s| s.0);
        let end = end.max(symbols.last().map_or(start, |s| s.0 + 1));
        out.push(Load {
            time,
            tid,
            base,
            range: (start, end),
            path: path.to_string(),
            symbols,
            tag: 0,
        });
    }
    out.sort_by_key(|l| l.time);
    out
}

/// Joins `loads` to a recording's `symbols` and `modules` (both by
/// address): an object whose addresses no other one held is one of the
/// modules, its functions among the symbols, as an object loaded at the
/// start; the objects that held the same addresses in turn are tagged
/// (each load's [`Load::tag`]), their symbols and ranges added tagged.
/// Returns how to tag records, when some are.
pub(crate) fn join(
    loads: &mut [Load],
    symbols: &mut Vec<(u64, String)>,
    modules: &mut Vec<(u64, u64, String)>,
) -> Option<Generations> {
    if loads.is_empty() {
        return None;
    }
    let overlap = |a: (u64, u64), b: (u64, u64)| a.0 < b.1 && b.0 < a.1;
    // A module that is a load's object (a map lists it from its lowest
    // mapping, a DLOP line's symbols from its first function).
    let same = |l: &Load, m: &(u64, u64, String)| m.2 == l.path && overlap((m.0, m.1), l.range);
    // Objects of the start that a later load took the place of keep their
    // names untagged, before it.
    let at_start: Vec<(u64, u64, String)> = modules
        .iter()
        .filter(|m| !loads.iter().any(|l| same(l, m)))
        .cloned()
        .collect();
    // One tag per file and base, in the order they first came.
    let mut tags: Vec<(String, u64)> = Vec::new();
    for i in 0..loads.len() {
        let l = &loads[i];
        let shared = at_start.iter().any(|m| overlap((m.0, m.1), l.range))
            || loads
                .iter()
                .any(|o| (o.path != l.path || o.base != l.base) && overlap(o.range, l.range));
        if !shared {
            continue;
        }
        let key = (l.path.clone(), l.base);
        let k = match tags.iter().position(|t| *t == key) {
            Some(k) => k,
            None => {
                tags.push(key);
                tags.len() - 1
            }
        };
        loads[i].tag = k as u64 + 1;
    }
    let tagged: Vec<&Load> = loads.iter().filter(|l| l.tag != 0).collect();
    // Untagged: the objects whose addresses were theirs alone.
    for l in loads.iter().filter(|l| l.tag == 0) {
        if !modules.iter().any(|m| same(l, m)) {
            modules.push((l.range.0, l.range.1, l.path.clone()));
        }
        symbols.extend(l.symbols.iter().cloned());
    }
    if tagged.is_empty() {
        symbols.sort();
        symbols.dedup();
        modules.sort();
        return None;
    }
    // The shared ranges' untagged symbols are those of the objects of the
    // start there (a raw recording lists every object's, at their
    // untagged addresses).
    let in_shared = |a: u64| tagged.iter().any(|l| (l.range.0..l.range.1).contains(&a));
    let of_start = |a: u64| at_start.iter().any(|m| (m.0..m.1).contains(&a));
    symbols.retain(|s| !in_shared(s.0) || of_start(s.0));
    modules.retain(|m| !tagged.iter().any(|l| same(l, m)));
    let mut gens = Generations {
        by_time: Vec::new(),
        span: (u64::MAX, 0),
    };
    let mut done: Vec<u64> = Vec::new();
    for l in &tagged {
        let t = l.tag << ADDR_BITS;
        gens.by_time.push((l.time, l.range.0, l.range.1, l.tag));
        gens.span = (gens.span.0.min(l.range.0), gens.span.1.max(l.range.1));
        if done.contains(&l.tag) {
            continue;
        }
        done.push(l.tag);
        modules.push((l.range.0 | t, l.range.1 | t, l.path.clone()));
        symbols.extend(l.symbols.iter().map(|(a, n)| (a | t, n.clone())));
    }
    gens.by_time.sort_by_key(|l| l.0);
    symbols.sort();
    symbols.dedup();
    modules.sort();
    Some(gens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(time: u64, path: &str, range: (u64, u64), f: &str) -> Load {
        Load {
            time,
            tid: 1,
            base: range.0,
            range,
            path: path.into(),
            symbols: vec![(range.0 + 0x10, f.into())],
            tag: 0,
        }
    }

    /// Objects that held one range in turn are told apart by the time of
    /// each address; one loaded twice keeps one tag; one alone is a plain
    /// module.
    #[test]
    fn addresses_held_in_turn_are_named_by_time() {
        let mut loads = vec![
            load(100, "/l/a.so", (0x7000, 0x8000), "fa"),
            load(200, "/l/b.so", (0x7000, 0x7800), "gb"),
            load(300, "/l/a.so", (0x7000, 0x8000), "fa"),
            load(400, "/l/c.so", (0x9000, 0xa000), "hc"),
        ];
        // A raw recording's map and symbols list every object's, untagged.
        let mut symbols = vec![
            (0x1010, "main".into()),
            (0x7010, "fa".into()),
            (0x7010, "gb".into()),
        ];
        let mut modules = vec![
            (0x1000, 0x2000, "/l/main".into()),
            (0x7000, 0x8000, "/l/a.so".into()),
            (0x7000, 0x7800, "/l/b.so".into()),
        ];
        let g = join(&mut loads, &mut symbols, &mut modules).unwrap();
        let tags: Vec<u64> = loads.iter().map(|l| l.tag).collect();
        assert_eq!(tags, [1, 2, 1, 0]);
        let (t1, t2) = (1 << ADDR_BITS, 2 << ADDR_BITS);
        assert_eq!(
            symbols,
            [
                (0x1010, "main".to_string()),
                (0x9010, "hc".into()),
                (0x7010 | t1, "fa".into()),
                (0x7010 | t2, "gb".into())
            ]
        );
        assert_eq!(
            modules,
            [
                (0x1000, 0x2000, "/l/main".to_string()),
                (0x9000, 0xa000, "/l/c.so".into()),
                (0x7000 | t1, 0x8000 | t1, "/l/a.so".into()),
                (0x7000 | t2, 0x7800 | t2, "/l/b.so".into())
            ]
        );
        assert_eq!(g.tag(0x7010, 150), 0x7010 | t1);
        assert_eq!(g.tag(0x7010, 250), 0x7010 | t2);
        assert_eq!(g.tag(0x7010, 350), 0x7010 | t1);
        // Past b's end while b was loaded: the last object that held it
        // (as uftrace looks it up).
        assert_eq!(g.tag(0x7900, 250), 0x7900 | t1);
        // Before any load, and outside every shared range.
        assert_eq!(g.tag(0x7010, 50), 0x7010);
        assert_eq!(g.tag(0x1010, 250), 0x1010);
        assert_eq!(untagged(0x7010 | t2), 0x7010);
    }

    /// An object of the start whose place a later one took keeps its
    /// names before it; a load no other object overlapped changes nothing.
    #[test]
    fn an_object_of_the_start_keeps_its_names_before_the_next() {
        let mut loads = vec![load(100, "/l/b.so", (0x7000, 0x8000), "gb")];
        let mut symbols = vec![(0x7010, "fa".into())];
        let mut modules = vec![(0x7000, 0x8000, "/l/a.so".into())];
        let g = join(&mut loads, &mut symbols, &mut modules).unwrap();
        let t1 = 1 << ADDR_BITS;
        assert_eq!(
            symbols,
            [(0x7010, "fa".to_string()), (0x7010 | t1, "gb".into())]
        );
        assert_eq!(g.tag(0x7010, 50), 0x7010);
        assert_eq!(g.tag(0x7010, 150), 0x7010 | t1);

        // uftrace's DLOP line of an object its map lists too.
        let mut loads = vec![load(100, "/l/b.so", (0x7000, 0x7800), "gb")];
        let mut symbols = vec![(0x7010, "gb".into())];
        let mut modules = vec![(0x7000, 0x8000, "/l/b.so".into())];
        assert!(join(&mut loads, &mut symbols, &mut modules).is_none());
        assert_eq!(symbols, [(0x7010, "gb".to_string())]);
        assert_eq!(modules, [(0x7000, 0x8000, "/l/b.so".to_string())]);
    }
}
