//! Library calls: the calls an object makes through its PLT to functions
//! of other objects (`printf`, `malloc`, `pthread_mutex_lock`), made
//! traceable as uftrace traces them, without touching the libraries.
//!
//! Each of the object's jump slots (its GOT entries for the PLT), and each
//! GOT entry its code only calls through without a PLT (`-fno-plt`, Rust;
//! see [`elf::slots::call_only_got_slots`]), is pointed at a thunk of its own in
//! an arena near the object:
//!
//! ```text
//!   thunk + 0    0f 1f 44 00 00      the site: a NOP5 the core patches
//!   thunk + 5    ff 25 00 00 00 00   jmp *(thunk + 11)
//!   thunk + 11   .quad target        the function the slot resolved to
//! ```
//!
//! The thunks of one object form a module of the core whose sites are
//! named by the called function, so every tracer, filter and graph user
//! sees a library call exactly as a function of the program: the site's
//! stub or trampoline runs the "body" at thunk + 5, which jumps to the real
//! function, whose return comes back through the stub. Untraced, a library
//! call costs the nop and an indirect jump.
//!
//! A slot already bound keeps its target. One lazy binding has not bound
//! yet (it points back into the object's PLT) is resolved here as the
//! loader would bind it: by the symbol and the version the object asks
//! for, in the global scope. One that resolves nowhere there (a function
//! of the dependencies of an object loaded `RTLD_LOCAL`, or none at all)
//! is left alone: its calls go untraced, the first one binding it as
//! usual, or failing as it would untraced. The slot gets its lazy
//! target back when tracing ends, so lazy binding is as it was. GOT
//! pages that RELRO made read-only are made writable for the store and
//! given their protection back. Each store is one aligned word, so a
//! thread calling through the slot meanwhile takes the old target or the
//! new, both correct. Functions that return twice or switch stacks
//! (`clone`, …) keep their slots: a return through the thunk's stub would
//! be wrong for one of the two returns. The `setjmp` family, `getcontext`
//! and `vfork` are the exceptions, once the tracer that hooks returns
//! gives a body for them ([`set_body`]): their thunks run that body,
//! which looks after the returns, before the function (or, `vfork`'s,
//! instead of it):
//!
//! ```text
//!   thunk + 0    0f 1f 44 00 00      the site
//!   thunk + 5    4c 8d 1d 04 00 00 00   lea r11, [thunk + 16]
//!   thunk + 12   41 ff 23            jmp *(r11)
//!   thunk + 16   .quad body          the body, which ends by jumping to
//!   thunk + 24   .quad target        the function
//! ```

use crate::arena::Arena;
use crate::elf::{self, JumpSlot};
use crate::process::{CallSite, Module};
use crate::site::{SiteKind, NOP5};
use crate::sys;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Offset of the thunk's target word.
const TARGET: usize = 11;
/// Offset of the body's word in a thunk of a function that returns twice
/// (the target's follows it).
const BODY: usize = 16;
/// From one thunk to the next (int3 filler between them).
pub const THUNK_STRIDE: usize = 32;

/// Called functions whose slots are left alone: they return on another
/// stack (`clone`; `savectx`), return twice but have no body for it (see
/// [`Body`]), run the program itself (`__libc_start_main`
/// calls `main` and never returns; `main` is traced on its own), or are
/// the C++ runtime's exception machinery, which uftrace does not show
/// either (a throw never returns; the catch is shown by its landing pad),
/// or are the compiler's profiling hooks (`-pg`'s `mcount`, whose callers
/// keep their arguments in registers across it, so that a traced return
/// that changes one of them breaks the caller; `-finstrument-functions`'
/// hooks), which uftrace does not show.
const NEVER: [&str; 18] = [
    "savectx",
    "clone",
    "clone3",
    "__libc_start_main",
    "__cxa_finalize",
    "_Unwind_Resume",
    "_Unwind_RaiseException",
    "__cxa_throw",
    "__cxa_rethrow",
    "__cxa_begin_catch",
    "__cxa_end_catch",
    "__gxx_personality_v0",
    "_mcleanup",
    "mcount",
    "_mcount",
    "__fentry__",
    "__cyg_profile_func_enter",
    "__cyg_profile_func_exit",
];

/// Functions whose thunks run a body of the tracer that hooks returns,
/// which looks after the returns a thunk's stub cannot: until one is
/// given ([`set_body`]), their slots are left alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// Return twice, the second time by a jump back (`setjmp`): the body
    /// runs before the function.
    ReturnsTwice,
    /// May return twice, the second time to a context a coroutine library
    /// may have taken to another thread (`getcontext`): the body finishes
    /// the call before the function runs, and returns are the function's
    /// own.
    FinishedAtOnce,
    /// `vfork`: the body makes the system call itself, instead of the
    /// function.
    Vfork,
}

impl Body {
    const ALL: [Body; 3] = [Body::ReturnsTwice, Body::FinishedAtOnce, Body::Vfork];

    /// The functions whose thunks run this body.
    fn functions(self) -> &'static [&'static str] {
        match self {
            Body::ReturnsTwice => &["setjmp", "_setjmp", "__sigsetjmp", "sigsetjmp"],
            Body::FinishedAtOnce => &["getcontext"],
            Body::Vfork => &["vfork", "__vfork"],
        }
    }

    /// The body given for the thunks of `name`'s slots: Some(0) when none
    /// is (the slots are left alone), None for any other function.
    fn of(name: &str) -> Option<usize> {
        Body::ALL
            .into_iter()
            .find(|b| b.functions().contains(&name))
            .map(|b| BODIES[b as usize].load(Ordering::Relaxed))
    }
}

/// The bodies given, by [`Body`] (0: none).
static BODIES: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

/// Makes the functions of `kind` traceable from the next [`redirect`] on:
/// their thunks jump to `body`, with r11 at a word holding it and the
/// function's address in the word after.
pub fn set_body(kind: Body, body: usize) {
    BODIES[kind as usize].store(body, Ordering::Relaxed);
}

/// Functions that switch to another context's stack (a coroutine's):
/// the calls made on it are inside theirs, not returns from the calls
/// whose return slots lie below it (see [`switches_stacks`]).
const SWITCHERS: [&str; 2] = ["swapcontext", "setcontext"];

/// The thunks of [`SWITCHERS`] (0: free), never taken back: thunks stay.
static SWITCH_THUNKS: [AtomicUsize; 32] = [const { AtomicUsize::new(0) }; 32];

/// Whether `func` is the thunk of a call that switches stacks
/// (`swapcontext`, `setcontext`): a coroutine's stack may lie above the
/// caller's frames (a buffer in `main`'s), where a call would otherwise
/// look like a return from them. Async-signal-safe (fixed words).
pub fn switches_stacks(func: usize) -> bool {
    // Relaxed: each word is written once, before the thunk's GOT slot
    // is pointed at it; one read too early (not yet seen) only means the
    // frames below are taken for left, as without the table.
    func != 0
        && SWITCH_THUNKS
            .iter()
            .any(|w| w.load(Ordering::Relaxed) == func)
}

/// Records the thunk `thunk` of a function that switches stacks (more
/// than the table holds are left out: their calls' callees on a stack
/// above are taken for returns, as without this).
fn note_switcher(thunk: usize) {
    for w in &SWITCH_THUNKS {
        if w.compare_exchange(0, thunk, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// Called functions whose GOT entries without a PLT are left alone, as
/// uftrace leaves them: start-up and failure paths (`__cxa_atexit`,
/// `__stack_chk_fail`) and the TLS resolver Rust calls on every access
/// to a thread-local.
const NEVER_WITHOUT_PLT: [&str; 4] = [
    "__stack_chk_fail",
    "__monstartup",
    "__cxa_atexit",
    "__tls_get_addr",
];

/// A slot made traceable: where its GOT entry is and what it held, to give
/// it back.
#[derive(Clone, Debug)]
pub struct Redirected {
    /// The load bias of the object whose GOT it is.
    pub object: usize,
    /// The GOT entry's run-time address.
    pub got: usize,
    /// What it held before.
    pub before: usize,
    /// The thunk it points to while redirected.
    pub thunk: usize,
}

/// What [`redirect`] did for one object: the module of its thunks (for
/// the core) and the slots it changed.
#[derive(Debug)]
pub struct LibCalls {
    /// The thunks' module: one NOP5 site per called function.
    pub module: Module,
    /// The GOT entries changed.
    pub slots: Vec<Redirected>,
}

/// The module path under which an object's library calls are named: the
/// object's, with `@plt` after it (never a file).
pub fn module_path(object: &Path) -> PathBuf {
    let mut p = object.as_os_str().to_owned();
    p.push("@plt");
    PathBuf::from(p)
}

/// Points the jump slots of the object loaded from `path` at `bias` to
/// thunks. Returns None when the object calls nothing through its PLT.
pub fn redirect(path: &Path, bias: usize) -> Result<Option<LibCalls>, String> {
    let data = sys::MappedFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut slots: Vec<JumpSlot> =
        elf::library_call_slots(path, &data, |_| true).map_err(|e| e.to_string())?;
    slots.retain(|s| {
        let name = s.symbol.as_str();
        !NEVER.contains(&name)
            && (s.plt || !NEVER_WITHOUT_PLT.contains(&name))
            && Body::of(name) != Some(0)
    });
    // (Our own mapping of the file is not one of the object's.)
    drop(data);
    if slots.is_empty() {
        return Ok(None);
    }
    let maps = sys::read_maps().map_err(|e| format!("/proc/self/maps: {e}"))?;
    let Some(object) = Loaded::find(&maps, path, bias) else {
        return Err(format!("{}: not mapped", path.display()));
    };
    // What each slot will call (a slot bound nowhere, weak and undefined,
    // has nothing to call).
    let plan: Vec<(JumpSlot, Bound)> = slots
        .into_iter()
        .filter_map(|slot| object.bound(&slot).map(|b| (slot, b)))
        .collect();
    if plan.is_empty() {
        return Ok(None);
    }
    // Every thunk in one piece of the arena, written at once.
    let arena = Arena::near_with_room(object.lo, object.hi, THUNK_STRIDE * plan.len() + 4096)
        .map_err(|e| e.to_string())?;
    let first = arena
        .alloc_with(THUNK_STRIDE * plan.len(), |_| {
            let mut code = Vec::with_capacity(THUNK_STRIDE * plan.len());
            for p in &plan {
                code.extend(thunk_bytes(p.1.target, Body::of(&p.0.symbol)));
                code.resize(code.len().next_multiple_of(THUNK_STRIDE), 0xcc);
            }
            code
        })
        .map_err(|e| e.to_string())?;
    let mut sites = Vec::new();
    let mut changed = Vec::new();
    // A failure part-way leaves the slots redirected so far pointing at
    // thunks that only jump on: their calls work, untraced.
    for (i, (slot, b)) in plan.into_iter().enumerate() {
        let thunk = first + i * THUNK_STRIDE;
        if SWITCHERS.contains(&slot.symbol.as_str()) {
            note_switcher(thunk);
        }
        store_word(b.got, thunk, b.prot).map_err(|e| format!("{}: {e}", path.display()))?;
        changed.push(Redirected {
            object: bias,
            got: b.got,
            before: b.before,
            thunk,
        });
        sites.push(CallSite {
            addr: thunk,
            function: shadowgraph_data::names::demangle(&slot.symbol),
            symbol: slot.symbol,
            kind: SiteKind::Nop5,
            disabled: None,
            library: sys::object_of(b.target),
        });
    }
    if sites.is_empty() {
        return Ok(None);
    }
    sites.sort_by_key(|s| s.addr);
    Ok(Some(LibCalls {
        module: Module {
            path: module_path(path),
            // No object is loaded at an arena's address: a bias of its own.
            bias: sites[0].addr,
            sites,
        },
        slots: changed,
    }))
}

/// Points every GOT slot through which a loaded object (but those named
/// in `skip`, and the loader) calls one of the functions `to` names at
/// the address given with it: interposition for an agent that came in by
/// `dlopen`, when `LD_PRELOAD` could not put it first. Before the first
/// slot of a name changes, `real(name, function)` hears what it called (a
/// lazy slot not bound yet resolved as the loader would): the
/// interposer's next definition, which a call through the changed slot
/// may need at once. The slots keep the interposers for good: frames they
/// look after may outlive a session.
pub fn interpose(to: &[(&str, usize)], skip: &[PathBuf], mut real: impl FnMut(&str, usize)) {
    let mut found: Vec<String> = Vec::new();
    let Ok(maps) = sys::read_maps() else {
        return;
    };
    for (path, bias) in crate::process::loaded_objects() {
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
        if path.as_os_str().is_empty() || skip.contains(&path) || file.starts_with("ld-linux") {
            continue;
        }
        let Ok(data) = sys::MappedFile::open(&path) else {
            continue;
        };
        let wanted = |name: &str| to.iter().any(|(n, _)| *n == name);
        let Ok(slots) = elf::library_call_slots(&path, &data, wanted) else {
            continue;
        };
        drop(data);
        let Some(object) = Loaded::find(&maps, &path, bias) else {
            continue;
        };
        for slot in slots {
            let Some(&(_, ours)) = to.iter().find(|(n, _)| *n == slot.symbol) else {
                continue;
            };
            let Some(b) = object.bound(&slot).filter(|b| b.target != ours) else {
                continue;
            };
            if !found.contains(&slot.symbol) {
                real(&slot.symbol, b.target);
                found.push(slot.symbol.clone());
            }
            let _ = store_word(b.got, ours, b.prot);
        }
    }
}

/// An object as loaded: its mappings, the range they span, its bias.
struct Loaded<'m> {
    own: Vec<&'m sys::Mapping>,
    lo: usize,
    hi: usize,
    bias: usize,
}

/// A GOT slot of a loaded object: where it is, its page's protection,
/// the word it holds, and the function it calls.
struct Bound {
    got: usize,
    prot: i32,
    before: usize,
    target: usize,
}

impl<'m> Loaded<'m> {
    /// The object loaded from `path` (by that name or its canonical one)
    /// at `bias`; None if nothing of it is mapped.
    fn find(maps: &'m [sys::Mapping], path: &Path, bias: usize) -> Option<Loaded<'m>> {
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let own: Vec<&sys::Mapping> = maps
            .iter()
            .filter(|m| Path::new(&m.path) == path || Path::new(&m.path) == canonical)
            .collect();
        let lo = own.iter().map(|m| m.start).min()?;
        let hi = own.iter().map(|m| m.end).max()?;
        Some(Loaded { own, lo, hi, bias })
    }

    /// `slot` as it stands: None if it is not an aligned word of the
    /// object, or if lazy binding has not bound it yet (it points back
    /// into the object's PLT) and it resolves nowhere.
    fn bound(&self, slot: &JumpSlot) -> Option<Bound> {
        let got = self
            .bias
            .checked_add(slot.got as usize)
            .filter(|g| g % 8 == 0)?;
        let m = self
            .own
            .iter()
            .find(|m| m.start <= got && got + 8 <= m.end)?;
        // SAFETY: `got` is an aligned GOT word inside a mapping of the
        // object (checked above); reading it races only with other aligned
        // word stores (the loader's, ours).
        let before = unsafe { (*(got as *const AtomicUsize)).load(Ordering::Acquire) };
        let target = if (self.lo..self.hi).contains(&before) {
            resolve(slot)?
        } else {
            before
        };
        Some(Bound {
            got,
            prot: m.prot,
            before,
            target,
        })
    }
}

/// Gives every slot of `slots` its former target back (tracing ends; the
/// thunks stay, unreferenced, for threads still inside one).
pub fn restore(slots: &[Redirected]) {
    store_all(slots, |r| r.before);
}

/// Points `slots`, given back by [`restore`], at their thunks again (a
/// slot the loader bound meanwhile is bound the same way by its thunk).
pub fn reapply(slots: &[Redirected]) {
    store_all(slots, |r| r.thunk);
}

fn store_all(slots: &[Redirected], value: impl Fn(&Redirected) -> usize) {
    let maps = sys::read_maps().unwrap_or_default();
    for r in slots {
        let prot = maps
            .iter()
            .find(|m| m.start <= r.got && r.got + 8 <= m.end)
            .map_or(libc::PROT_READ, |m| m.prot);
        let _ = store_word(r.got, value(r), prot);
    }
}

/// A thunk's bytes (the diagrams above): one that jumps to `target`, or
/// to `body` first.
fn thunk_bytes(target: usize, body: Option<usize>) -> Vec<u8> {
    let mut b = Vec::with_capacity(THUNK_STRIDE);
    b.extend_from_slice(&NOP5);
    match body {
        None => {
            b.extend_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
            debug_assert_eq!(b.len(), TARGET);
        }
        Some(body) => {
            b.extend_from_slice(&[0x4c, 0x8d, 0x1d, 4, 0, 0, 0, 0x41, 0xff, 0x23, 0xcc]);
            debug_assert_eq!(b.len(), BODY);
            b.extend_from_slice(&(body as u64).to_le_bytes());
        }
    }
    b.extend_from_slice(&(target as u64).to_le_bytes());
    debug_assert!(b.len() <= THUNK_STRIDE);
    b
}

/// The address `slot`'s symbol (at its version) resolves to in the global
/// scope, where the loader looks first. (An object's own scope, which it
/// looks in next, is not searched: `dlsym` on the link map of an object
/// loaded at start-up, which has no search list of its own, faults.)
fn resolve(slot: &JumpSlot) -> Option<usize> {
    use std::ffi::CString;
    let name = CString::new(slot.symbol.as_str()).ok()?;
    let version = match &slot.version {
        Some(v) => Some(CString::new(v.as_str()).ok()?),
        None => None,
    };
    // SAFETY: lookups by NUL-terminated names in the global scope.
    let (first, asked) = unsafe {
        (
            libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()),
            version
                .as_ref()
                .map(|v| libc::dlvsym(libc::RTLD_DEFAULT, name.as_ptr(), v.as_ptr())),
        )
    };
    let p = match asked {
        // The first definition, in an object before the one with the
        // version asked for: the loader binds a reference with a version
        // to an unversioned definition (an interposer, as the agent's own
        // `dlopen`) when it comes first. Two versions of one object's
        // symbol (`memcpy`): the one asked for.
        Some(v) if !v.is_null() && !first.is_null() && first != v => {
            if sys::object_of(first as usize) == sys::object_of(v as usize) {
                v
            } else {
                first
            }
        }
        Some(v) => v,
        None => first,
    };
    (!p.is_null()).then_some(p as usize)
}

/// Stores `value` at the aligned word `at` whose page has protection
/// `prot`: made writable for the store if it is not (RELRO), then given
/// `prot` back.
fn store_word(at: usize, value: usize, prot: i32) -> std::io::Result<()> {
    let page = at & !(sys::page_size() - 1);
    let writable = prot & libc::PROT_WRITE != 0;
    if !writable {
        // SAFETY: the page is a mapped GOT page of a loaded object; adding
        // write permission changes no byte of it.
        if unsafe { libc::mprotect(page as *mut _, sys::page_size(), prot | libc::PROT_WRITE) } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: `at` is an aligned word of that page, now writable. Release:
    // a thread that jumps through the slot and finds the thunk finds its
    // bytes written (they were, before the arena handed it out).
    unsafe { (*(at as *const AtomicUsize)).store(value, Ordering::Release) };
    if !writable {
        // SAFETY: as above; the protection the page had.
        unsafe { libc::mprotect(page as *mut _, sys::page_size(), prot) };
    }
    Ok(())
}
