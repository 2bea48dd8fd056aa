//! Site discovery in an ELF file (executable or shared library), read from
//! disk with the `object` crate.
//!
//! The compiler lists every patchable entry in a section:
//! `__patchable_function_entries` (gcc/clang/rustc patchable-function-entry)
//! or `__mcount_loc` (gcc `-pg -mfentry -mrecord-mcount`). Entries are link
//! time addresses; ld writes them into the section and adds `R_X86_64_RELATIVE`
//! relocations for position-independent objects, while some linkers leave the
//! words zero and keep the value only in the relocation's addend — both forms
//! are read here.

pub mod autoargs;
mod debug;
pub mod lines;
pub mod sdt;
pub mod slots;
pub mod sysv;

pub use slots::JumpSlot;

use crate::site::{classify, SiteKind, SiteSource, ENDBR64};
use object::{Object, ObjectSection, ObjectSymbol, RelocationFlags, SectionKind};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// A site found in a file, at its link-time address.
#[derive(Clone, Debug)]
pub struct FoundSite {
    /// Address the patcher rewrites (after a leading `endbr64`, if any).
    pub addr: u64,
    /// Name of the function the site belongs to, demangled in the simple
    /// form (see [`shadowgraph_data::names::demangle`]).
    pub function: String,
    /// Its symbol as the object names it (mangled, for C++ and Rust).
    pub symbol: String,
    /// Section that listed it.
    pub source: SiteSource,
    /// The kind of the bytes in the file, or why they cannot be patched.
    pub kind: Result<SiteKind, String>,
    /// Whether an `endbr64` precedes the site.
    pub endbr: bool,
}

/// Every site of one ELF object.
#[derive(Clone, Debug)]
pub struct ObjectSites {
    /// The file read.
    pub path: PathBuf,
    /// `ET_DYN` (PIE executable or shared library): addresses are relative
    /// to the load bias.
    pub position_independent: bool,
    /// Names a program interpreter (the dynamic loader): false for a
    /// statically linked program, which LD_PRELOAD cannot reach.
    pub has_interpreter: bool,
    /// Sorted by address, duplicates removed.
    pub sites: Vec<FoundSite>,
    /// When it has no site: how it was instrumented instead, if it was
    /// (a build uftrace traces but we cannot), and what to add.
    pub other_instrumentation: Option<&'static str>,
    /// It has no site and calls a profiling hook (`mcount`: built with
    /// plain `-pg`; `__cyg_profile_func_enter`: `-finstrument-functions`):
    /// its functions that call it are patched at their prologue
    /// (crate::prologue).
    pub built_with_hooks: bool,
    /// Built so and stripped of what would find its functions (no symbol
    /// table, no debug file, no `--with-syms` file, no unwind tables).
    pub hooks_unnamed: bool,
}

/// Failure to read sites from a file: always says which file and what.
#[derive(Debug)]
pub struct ElfError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for ElfError {}

/// The profiling hooks whose callers are traced at their prologue:
/// `-pg`'s, and the entry hook of `-finstrument-functions`.
pub const PROFILING_HOOKS: [&str; 3] = ["mcount", "_mcount", "__cyg_profile_func_enter"];

/// How to build a program so that shadowgraph can trace it.
pub const HOW_TO_BUILD: &str = "rebuild it with gcc/clang -fpatchable-function-entry=5, \
     gcc -pg -mfentry -mrecord-mcount, or rustc -Zpatchable-function-entry=5, \
     or patch its functions' prologues with -P";

impl ObjectSites {
    /// Sites that can be patched.
    pub fn usable(&self) -> impl Iterator<Item = &FoundSite> {
        self.sites.iter().filter(|s| s.kind.is_ok())
    }

    /// `Err` with a one-line explanation when the object has no usable site.
    /// [`ObjectSites::require_sites`], for a program to start traced: it
    /// must also be linked dynamically, since the agent comes in by the
    /// dynamic loader (LD_PRELOAD), which a static program has not.
    pub fn require_traceable_program(&self) -> Result<(), ElfError> {
        self.require_sites()?;
        if self.has_interpreter {
            return Ok(());
        }
        Err(ElfError {
            path: self.path.clone(),
            message: "statically linked: the tracing agent is loaded by the dynamic \
                      loader (LD_PRELOAD), which a static program does not use; \
                      rebuild it without -static"
                .to_string(),
        })
    }

    /// Ok if the object has a usable site; else an error that says how it
    /// was built instead, if it can tell, and what flags to build it with.
    pub fn require_sites(&self) -> Result<(), ElfError> {
        if self.usable().next().is_some() || self.built_with_hooks {
            return Ok(());
        }
        let message = if let (true, Some(how)) = (self.sites.is_empty(), self.other_instrumentation)
        {
            format!("no patchable function entries: {how}")
        } else if self.sites.is_empty() {
            format!("no patchable function entries; {HOW_TO_BUILD}")
        } else {
            format!(
                "all {} listed sites were rejected (first: {}: {}); {HOW_TO_BUILD}",
                self.sites.len(),
                self.sites[0].function,
                self.sites[0].kind.as_ref().unwrap_err()
            )
        };
        Err(ElfError {
            path: self.path.clone(),
            message,
        })
    }
}

/// Reads `path` and lists its sites.
pub fn scan_file(path: &Path) -> Result<ObjectSites, ElfError> {
    let cannot_read = |e: std::io::Error| ElfError {
        path: path.to_owned(),
        message: format!("cannot read: {e}"),
    };
    match crate::sys::MappedFile::open(path) {
        Ok(data) => scan_bytes(path, &data),
        // An empty file, or one that cannot be mapped: read (the error
        // then says what is wrong with it).
        Err(_) => scan_bytes(path, &std::fs::read(path).map_err(cannot_read)?),
    }
}

/// The ELF image `data` (named `path` in messages), if it is one of
/// x86-64.
pub(crate) fn parse<'d>(path: &Path, data: &'d [u8]) -> Result<object::File<'d>, ElfError> {
    let err = |message: String| ElfError {
        path: path.to_owned(),
        message,
    };
    let file =
        object::File::parse(data).map_err(|e| err(format!("not a readable ELF file: {e}")))?;
    if file.architecture() != object::Architecture::X86_64 {
        return Err(err(format!(
            "architecture {:?} is not supported (x86-64 only)",
            file.architecture()
        )));
    }
    Ok(file)
}

/// Lists the sites of the ELF image `data` (named `path` in messages).
pub fn scan_bytes(path: &Path, data: &[u8]) -> Result<ObjectSites, ElfError> {
    let err = |message: String| ElfError {
        path: path.to_owned(),
        message,
    };
    let file = parse(path, data)?;
    let position_independent = matches!(file.kind(), object::ObjectKind::Dynamic);
    // What placing the sites takes, read only for an object that has any
    // (most libraries have none: libc's symbols and relocations would cost
    // milliseconds of every traced program's start).
    let mut context = None;
    let mut sites = Vec::new();
    for (name, source) in [
        ("__patchable_function_entries", SiteSource::PatchableEntries),
        ("__mcount_loc", SiteSource::McountLoc),
    ] {
        // A linker may keep several input sections of the same name apart.
        for section in file.sections().filter(|s| s.name() == Ok(name)) {
            let (relative, symbols, text, contents) = context.get_or_insert_with(|| {
                let text: Vec<(u64, u64)> = file
                    .sections()
                    .filter(|s| s.kind() == SectionKind::Text)
                    .map(|s| (s.address(), s.address() + s.size()))
                    .collect();
                (
                    relative_relocations(&file),
                    FunctionSymbols::new(path, &file),
                    text,
                    Contents::new(&file),
                )
            });
            let bytes = section
                .data()
                .map_err(|e| err(format!("section {name} unreadable: {e}")))?;
            if bytes.len() % 8 != 0 {
                return Err(err(format!(
                    "section {name} has size {} (not a multiple of 8)",
                    bytes.len()
                )));
            }
            for (i, word) in bytes.chunks_exact(8).enumerate() {
                let at = section.address() + 8 * i as u64;
                let mut entry = u64::from_le_bytes(word.try_into().unwrap());
                if entry == 0 {
                    match relative.get(&at) {
                        Some(&v) => entry = v,
                        // Entry of a function the linker discarded.
                        None => continue,
                    }
                }
                sites.push(examine(contents, symbols, text, source, entry));
            }
        }
    }
    sites.sort_by_key(|s| s.addr);
    sites.dedup_by_key(|s| s.addr);
    let has_interpreter = {
        use object::read::elf::{FileHeader, ProgramHeader};
        let header = object::elf::FileHeader64::<object::Endianness>::parse(data).ok();
        header
            .and_then(|h| Some((h, h.endian().ok()?)))
            .and_then(|(h, e)| Some((h.program_headers(e, data).ok()?, e)))
            .is_some_and(|(phs, e)| phs.iter().any(|ph| ph.p_type(e) == object::elf::PT_INTERP))
    };
    let other_instrumentation = if sites.is_empty() {
        other_instrumentation(&file)
    } else {
        None
    };
    let built_with_hooks = sites.is_empty() && calls_any(&file, &PROFILING_HOOKS);
    let hooks_unnamed = built_with_hooks && !FunctionSymbols::new(path, &file).found_all();
    Ok(ObjectSites {
        path: path.to_owned(),
        position_independent,
        has_interpreter,
        sites,
        other_instrumentation,
        built_with_hooks,
        hooks_unnamed,
    })
}

/// Whether `file` refers to one of the functions `names` without
/// defining it.
fn calls_any(file: &object::File<'_>, names: &[&str]) -> bool {
    file.symbols()
        .chain(file.dynamic_symbols())
        .any(|s| s.is_undefined() && s.name().is_ok_and(|n| names.contains(&n)))
}

/// How an object without sites was instrumented instead, as the functions
/// it calls tell (`-pg -mfentry` without `-mrecord-mcount`, which
/// uftrace traces), with what to rebuild it with (plain `-pg` and
/// `-finstrument-functions` are traced: [`ObjectSites::built_with_hooks`]).
fn other_instrumentation(file: &object::File<'_>) -> Option<&'static str> {
    let calls = |name: &str| calls_any(file, &[name]);
    if calls("__fentry__") {
        Some(
            "built with -pg -mfentry but without -mrecord-mcount, which lists the \
             entries; add -mrecord-mcount (or rebuild with -fpatchable-function-entry=5)",
        )
    } else {
        None
    }
}

fn examine(
    contents: &Contents<'_>,
    symbols: &FunctionSymbols,
    text: &[(u64, u64)],
    source: SiteSource,
    entry: u64,
) -> FoundSite {
    let mut addr = entry;
    let mut endbr = false;
    let bytes = contents.read(entry, 10).unwrap_or_default();
    let bytes = if bytes.starts_with(&ENDBR64) {
        addr += 4;
        &bytes[4..]
    } else {
        bytes
    };
    // gcc records the address after the endbr64; others may record the
    // function start: either way the site follows the endbr64.
    if addr >= 4 && contents.read(addr - 4, 4) == Some(&ENDBR64[..]) {
        endbr = true;
    }
    let (mut symbol, inside) = symbols.describe(addr);
    if let Some(next) = symbols.starting_within(addr + 1, addr + 5) {
        // Nops before a symbol belong to the function that follows them.
        symbol = next.to_string();
    }
    // A stripped object's function that it does not export has no name
    // here (empty: the views show its address, as uftrace does).
    let unnamed = !inside && !symbols.complete();
    if unnamed {
        symbol.clear();
    }
    let function = shadowgraph_data::names::demangle(&symbol);
    let kind = if !text.iter().any(|&(lo, hi)| addr >= lo && addr + 5 <= hi) {
        Err("entry outside any executable section".to_string())
    } else if (!inside && !unnamed) || symbols.starting_within(addr + 1, addr + 5).is_some() {
        Err("nops placed before the function symbol are not supported \
             (patchable-function-entry with a prefix)"
            .to_string())
    } else {
        classify(source, bytes)
    };
    FoundSite {
        addr,
        function,
        symbol,
        source,
        kind,
        endbr,
    }
}

/// `R_X86_64_RELATIVE` relocations: address → addend.
fn relative_relocations(file: &object::File<'_>) -> HashMap<u64, u64> {
    const R_X86_64_RELATIVE: u32 = 8;
    let mut map = HashMap::new();
    if let Some(relocs) = file.dynamic_relocations() {
        for (at, r) in relocs {
            if let RelocationFlags::Elf { r_type } = r.flags() {
                if r_type == R_X86_64_RELATIVE {
                    map.insert(at, r.addend() as u64);
                }
            }
        }
    }
    map
}

/// The GOT entries through which the ELF image `data` (named `path` in
/// messages) calls functions of other objects: its PLT's jump slots, then
/// the entries its code only calls through without a PLT
/// ([`slots::call_only_got_slots`]); only those of functions `want`
/// names (the object's code is read only when one of them may be called
/// without a PLT).
pub fn library_call_slots(
    path: &Path,
    data: &[u8],
    want: impl Fn(&str) -> bool,
) -> Result<Vec<JumpSlot>, ElfError> {
    let file = object::read::elf::ElfFile64::parse(data).map_err(|e| ElfError {
        path: path.to_owned(),
        message: format!("not a readable ELF file: {e}"),
    })?;
    let mut all = slots::jump_slots(&file);
    all.retain(|s| want(&s.symbol));
    all.extend(slots::call_only_got_slots(&file, &want));
    Ok(all)
}

/// The contents of an image's sections, by link-time address.
pub(crate) struct Contents<'d> {
    /// (address, bytes), sorted by address.
    sections: Vec<(u64, &'d [u8])>,
}

impl<'d> Contents<'d> {
    pub(crate) fn new(file: &object::File<'d>) -> Self {
        let mut sections: Vec<(u64, &[u8])> = file
            .sections()
            .filter(|s| s.address() != 0)
            .filter_map(|s| Some((s.address(), s.data().ok()?)))
            .filter(|(_, d)| !d.is_empty())
            .collect();
        sections.sort_by_key(|&(a, _)| a);
        Contents { sections }
    }

    /// `n` bytes (fewer at the end of a section) at a link-time address.
    pub(crate) fn read(&self, addr: u64, n: u64) -> Option<&'d [u8]> {
        let i = self.sections.partition_point(|&(a, _)| a <= addr);
        let &(start, data) = self.sections.get(i.checked_sub(1)?)?;
        let off = usize::try_from(addr - start).ok()?;
        data.get(off..(off + n as usize).min(data.len()))
            .filter(|b| !b.is_empty())
    }
}

/// Function symbols sorted by address, to name the function holding a site.
pub(crate) struct FunctionSymbols {
    /// (start, size, name)
    list: Vec<(u64, u64, String)>,
    /// From a symbol table (the object's or its debug file's), which names
    /// every function; else the dynamic symbols of a stripped object, which
    /// name only those it exports.
    complete: bool,
    /// Not complete, but the object's unwind tables (`.eh_frame`) gave
    /// the starts and sizes of its functions, which are listed unnamed.
    framed: bool,
}

/// The functions (start, size) in `.text` that `file`'s `.eh_frame` has
/// a frame description of: every function of a C or C++ object built by
/// gcc or clang with their defaults, stripped or not. (The linker's
/// descriptions of `.plt` and `.plt.got`, whose entries are no functions,
/// are left out.) Empty if it has none or cannot be read.
fn frame_functions(file: &object::File<'_>) -> Vec<(u64, u64)> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    let Some((lo, hi)) = file
        .section_by_name(".text")
        .map(|t| (t.address(), t.address() + t.size()))
    else {
        return Vec::new();
    };
    let Some(section) = file.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(data) = section.data() else {
        return Vec::new();
    };
    let eh = EhFrame::new(data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(t) = file.section_by_name(".text") {
        bases = bases.set_text(t.address());
    }
    let mut out = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(e)) = entries.next() {
        if let CieOrFde::Fde(partial) = e {
            if let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
                let (start, len) = (fde.initial_address(), fde.len());
                if len > 0 && start >= lo && start + len <= hi {
                    out.push((start, len));
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup_by_key(|f| f.0);
    out
}

impl FunctionSymbols {
    /// The function symbols of the object `file` found at `path`: its
    /// symbol table; stripped, its separate debug file's, where one is
    /// installed; else its dynamic symbols.
    pub(crate) fn new(path: &Path, file: &object::File<'_>) -> Self {
        // (start, size, local, name)
        fn collect<'d>(
            syms: impl Iterator<Item = object::Symbol<'d, 'd>>,
        ) -> Vec<(u64, u64, bool, String)> {
            syms.filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition())
                .filter_map(|s| {
                    let name = s.name().ok()?.to_string();
                    Some((s.address(), s.size(), !s.is_global(), name))
                })
                .collect()
        }
        let mut list = collect(file.symbols());
        if list.is_empty() {
            // (Mapped, not read: debug files are often large.)
            let debug = debug::find(path, file).and_then(|d| crate::sys::MappedFile::open(&d).ok());
            if let Some(Ok(d)) = debug.as_deref().map(object::File::parse) {
                list = collect(d.symbols());
            }
        }
        if list.is_empty() {
            list = symbol_file(path, file).unwrap_or_default();
        }
        let complete = !list.is_empty();
        let mut framed = false;
        if list.is_empty() {
            list = collect(file.dynamic_symbols());
            // A stripped object's other functions, unnamed, where its
            // unwind tables say they are.
            let known: std::collections::HashSet<u64> = list.iter().map(|s| s.0).collect();
            let frames = frame_functions(file);
            framed = !frames.is_empty();
            list.extend(
                (frames.into_iter())
                    .filter(|f| !known.contains(&f.0))
                    .map(|(start, size)| (start, size, true, String::new())),
            );
        }
        // For an address: a sized symbol first, then a global one (gcc's
        // `-fPIC` adds local aliases such as `fib.localalias` beside a
        // global function), then the first seen.
        list.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        list.dedup_by_key(|s| s.0);
        let list = list
            .into_iter()
            .map(|(start, size, _, name)| (start, size, name))
            .collect();
        FunctionSymbols {
            list,
            complete,
            framed,
        }
    }

    /// Whether every function is known here, named or not (a stripped
    /// object's from its unwind tables).
    pub(crate) fn found_all(&self) -> bool {
        self.complete || self.framed
    }

    /// Whether every function has a symbol here (not so in a stripped
    /// object without a debug file).
    pub(crate) fn complete(&self) -> bool {
        self.complete
    }

    /// Every function: (start, size, symbol), by address, one per address.
    pub(crate) fn all(&self) -> &[(u64, u64, String)] {
        &self.list
    }

    /// The name of a function symbol starting in `lo..hi`, if any.
    pub(crate) fn starting_within(&self, lo: u64, hi: u64) -> Option<&str> {
        let i = self.list.partition_point(|s| s.0 < lo);
        self.list.get(i).filter(|s| s.0 < hi).map(|s| s.2.as_str())
    }

    /// Name for `addr` and whether `addr` lies inside (or at the start of)
    /// that function.
    fn describe(&self, addr: u64) -> (String, bool) {
        let i = self.list.partition_point(|s| s.0 <= addr);
        if i == 0 {
            return (format!("{addr:#x}"), false);
        }
        let (start, size, ref name) = self.list[i - 1];
        // A function without a recorded size is taken to extend to the next symbol.
        let end = if size > 0 {
            start + size
        } else {
            self.list.get(i).map_or(u64::MAX, |s| s.0)
        };
        if addr < end {
            (name.clone(), true)
        } else {
            (format!("{addr:#x}"), false)
        }
    }
}

/// The size in bytes of each function of the object at `path` that its
/// symbols give one, by symbol name (what uftrace's `-Z` compares); empty
/// if the object cannot be read.
pub fn function_sizes(path: &Path) -> std::collections::HashMap<String, u64> {
    let Ok(data) = crate::sys::MappedFile::open(path) else {
        return Default::default();
    };
    let Ok(file) = parse(path, &data) else {
        return Default::default();
    };
    FunctionSymbols::new(path, &file)
        .all()
        .iter()
        .filter(|s| s.1 > 0)
        .map(|s| (s.2.clone(), s.1))
        .collect()
}

/// The data objects of the object at `path` (from `.symtab` and
/// `.dynsym`; thread-local ones left out): (address, size, uftrace's kind
/// letter — `d` local, `D` global, `v` weak — name) by address, with the
/// range its loadable segments span; addresses as the file gives them
/// (add the load bias). None if the object cannot be read.
pub fn data_symbols(path: &Path) -> Option<DataSymbols> {
    use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
    let data = crate::sys::MappedFile::open(path).ok()?;
    let file = parse(path, &data).ok()?;
    let lo = file.segments().map(|s| s.address()).min()?;
    let hi = file.segments().map(|s| s.address() + s.size()).max()?;
    let mut syms: Vec<(u64, u64, char, String)> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Data && s.is_definition() && s.address() != 0)
        .filter_map(|s| {
            let kind = match () {
                _ if s.is_weak() => 'v',
                _ if s.is_global() => 'D',
                _ => 'd',
            };
            Some((s.address(), s.size(), kind, s.name().ok()?.to_string()))
        })
        .filter(|s| !s.3.is_empty())
        .collect();
    syms.sort();
    syms.dedup_by_key(|s| s.0);
    Some(DataSymbols {
        range: (lo, hi),
        symbols: syms,
    })
}

/// An object's data symbols ([`data_symbols`]).
pub struct DataSymbols {
    /// The addresses its loadable segments span.
    pub range: (u64, u64),
    /// (address, size, kind, name), by address.
    pub symbols: Vec<(u64, u64, char, String)>,
}

/// Where the functions of stripped objects are named from (`--with-syms`):
/// `DIR/<object>.sym` files.
static SYMBOL_DIR: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);

/// Names the functions of stripped objects from the uftrace symbol files
/// (`<object>.sym`) in `dir` from now on (`None`: not).
pub fn set_symbol_dir(dir: Option<std::path::PathBuf>) {
    *SYMBOL_DIR.lock().unwrap_or_else(|e| e.into_inner()) = dir;
}

/// The functions of the object `file` (at `path`) that `DIR/<its
/// name>.sym` names ([`set_symbol_dir`]): its `T`/`t`/`W` lines,
/// addresses relative to where the object's first segment is loaded.
fn symbol_file(path: &Path, file: &object::File<'_>) -> Option<Vec<(u64, u64, bool, String)>> {
    use object::ObjectSegment;
    let dir = SYMBOL_DIR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()?;
    let name = path.file_name()?.to_string_lossy().into_owned();
    let text = std::fs::read_to_string(dir.join(format!("{name}.sym"))).ok()?;
    let first = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    // (address, end marker, local, name)
    let mut lines: Vec<(u64, bool, bool, String)> = Vec::new();
    for (a, kind, n) in shadowgraph_data::format::sym_lines(&text).filter_map(|(_, f)| f) {
        let Ok(a) = u64::from_str_radix(a, 16) else {
            continue;
        };
        match kind {
            "T" | "t" | "W" | "w" => lines.push((first + a, false, kind != "T", n.to_string())),
            // `__func_end`: where the run of functions before it ends.
            "?" => lines.push((first + a, true, false, String::new())),
            _ => {}
        }
    }
    lines.sort_by_key(|l| l.0);
    // Each function up to the next line's address (the files hold no
    // sizes; the prologue patcher wants them).
    let ends: Vec<u64> = lines.iter().skip(1).map(|l| l.0).collect();
    let list = lines
        .iter()
        .zip(ends.iter().map(Some).chain([None]))
        .filter(|(l, _)| !l.1)
        .map(|(l, end)| (l.0, end.map_or(0, |e| e - l.0), l.2, l.3.clone()))
        .collect();
    Some(list)
}

/// The GNU build id of an ELF file, as hex, if it has one.
pub fn build_id(path: &Path) -> Option<String> {
    use object::Object;
    let data = crate::sys::MappedFile::open(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let id = file.build_id().ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_a_clear_error() {
        let e = scan_bytes(Path::new("junk.bin"), b"\x7fELF\x02\x01\x01garbage").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("junk.bin: not a readable ELF file"),
            "{e}"
        );
        let e = scan_file(Path::new("/nonexistent/file")).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
    }
}
