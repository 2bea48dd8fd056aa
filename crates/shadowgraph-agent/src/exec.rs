//! `execve`, `execvpe`, `fexecve`, `posix_spawn` and `posix_spawnp`,
//! interposed: a program they start with an environment of the caller's
//! own (not this process's) would run untraced, since the agent comes in
//! by `LD_PRELOAD` and finds its session in `SHADOWGRAPH_CONFIG`. The
//! variables the agent came in with are put back into that environment
//! (the agent first in `LD_PRELOAD`, the program's own preloads after it),
//! as uftrace's `libmcount` does, so the program is recorded as one
//! started by `exec` from an inherited environment is. Calls that pass
//! this process's environment go through as they are. Functions that take
//! no environment (`execv`, `execvp`, `execl`, …) pass `environ` and need
//! nothing; `execle` calls the kernel's entry directly and is not seen.

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::atomic::AtomicUsize;
use std::sync::OnceLock;

/// What the agent came in with: `LD_PRELOAD`'s value, and the other
/// variables it needs (`LD_BIND_NOT`, `SHADOWGRAPH_*`) as `NAME=value`.
struct Kept {
    preload: Option<CString>,
    others: Vec<CString>,
}

static KEPT: OnceLock<Kept> = OnceLock::new();

/// Remembers this process's variables that a traced program needs (called
/// by the agent's constructor of a preloaded session, before `main`).
pub(crate) fn keep_environment() {
    use std::os::unix::ffi::OsStrExt;
    let mut kept = Kept {
        preload: None,
        others: Vec::new(),
    };
    for (name, value) in std::env::vars_os() {
        let (n, v) = (name.as_bytes(), value.as_bytes());
        if n == b"LD_PRELOAD" {
            kept.preload = CString::new(v).ok();
        } else if n == b"LD_BIND_NOT" || n.starts_with(b"SHADOWGRAPH_") {
            if let Ok(c) = CString::new([n, b"=", v].concat()) {
                kept.others.push(c);
            }
        }
    }
    let _ = KEPT.set(kept);
}

/// `envp` with the kept variables put back: those it lacks added, the
/// agent's preloads first in its `LD_PRELOAD`. None: `envp` needs nothing
/// (it is this process's environment, or null, or nothing was kept). The
/// strings made here live in the returned vector.
///
/// # Safety
/// `envp` is null or a null-terminated array of NUL-terminated strings.
unsafe fn with_agent(envp: *const *const c_char) -> Option<(Vec<*const c_char>, Vec<CString>)> {
    extern "C" {
        static environ: *const *const c_char;
    }
    let kept = KEPT.get()?;
    // SAFETY: reading libc's `environ` pointer.
    if envp.is_null() || envp == unsafe { environ } {
        return None;
    }
    let mut vars = Vec::new();
    // SAFETY: the caller's null-terminated array.
    unsafe {
        let mut p = envp;
        while !(*p).is_null() {
            vars.push(*p);
            p = p.add(1);
        }
    }
    // SAFETY: each entry is a NUL-terminated string (the caller's).
    let name_of = |v: *const c_char| unsafe { CStr::from_ptr(v) }.to_bytes();
    let has = |vars: &[*const c_char], name: &[u8]| {
        vars.iter()
            .position(|&v| name_of(v).split(|&b| b == b'=').next() == Some(name))
    };
    let mut made = Vec::new();
    let mut changed = false;
    for other in &kept.others {
        let name = other.to_bytes().split(|&b| b == b'=').next().unwrap_or(b"");
        if has(&vars, name).is_none() {
            vars.push(other.as_ptr());
            changed = true;
        }
    }
    if let Some(ours) = &kept.preload {
        let ours = ours.to_bytes();
        let entry = match has(&vars, b"LD_PRELOAD") {
            Some(i) => {
                let theirs = &name_of(vars[i])[b"LD_PRELOAD=".len()..];
                let missing = ours
                    .split(|&b| b == b':' || b == b' ')
                    .filter(|p| !p.is_empty())
                    .any(|p| !theirs.split(|&b| b == b':' || b == b' ').any(|t| t == p));
                missing.then(|| (Some(i), [b"LD_PRELOAD=", ours, b":", theirs].concat()))
            }
            None => Some((None, [b"LD_PRELOAD=", ours].concat())),
        };
        if let Some((at, bytes)) = entry {
            if let Ok(c) = CString::new(bytes) {
                match at {
                    Some(i) => vars[i] = c.as_ptr(),
                    None => vars.push(c.as_ptr()),
                }
                // (The CString's buffer does not move with it.)
                made.push(c);
                changed = true;
            }
        }
    }
    if !changed {
        return None;
    }
    vars.push(std::ptr::null());
    Some((vars, made))
}

/// Calls `call` with `envp`, or with a copy of it holding the agent's
/// variables where it lacks them ([`with_agent`]), which lives until
/// `call` returns.
///
/// # Safety
/// As [`with_agent`]'s.
unsafe fn pass_env<R>(
    envp: *const *const c_char,
    call: impl FnOnce(*const *const c_char) -> R,
) -> R {
    // SAFETY: the caller's environment array, as libc takes it.
    let env = unsafe { with_agent(envp) };
    call(env.as_ref().map_or(envp, |e| e.0.as_ptr()))
}

macro_rules! next {
    ($cache:ident, $name:literal, $ty:ty) => {{
        static $cache: AtomicUsize = AtomicUsize::new(0);
        // SAFETY: the symbol is libc's function of this name, of this
        // signature.
        unsafe { std::mem::transmute::<usize, $ty>(crate::next::next_symbol(&$cache, $name)) }
    }};
}

type ExecveFn =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type FexecveFn = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *const c_char,
    *const *const c_char,
) -> c_int;

/// `execve(2)` with the agent's variables in `envp`.
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = next!(REAL, c"execve", ExecveFn);
    // SAFETY: the caller's environment array, as libc takes it (or a
    // copy, null-terminated as theirs); libc's function with the
    // caller's other arguments.
    unsafe { pass_env(envp, |envp| real(path, argv, envp)) }
}

/// `execvpe(3)` with the agent's variables in `envp`.
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = next!(REAL, c"execvpe", ExecveFn);
    // SAFETY: the caller's environment array, as libc takes it (or a
    // copy, null-terminated as theirs); libc's function with the
    // caller's other arguments.
    unsafe { pass_env(envp, |envp| real(file, argv, envp)) }
}

/// `fexecve(3)` with the agent's variables in `envp`.
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = next!(REAL, c"fexecve", FexecveFn);
    // SAFETY: the caller's environment array, as libc takes it (or a
    // copy, null-terminated as theirs); libc's function with the
    // caller's other arguments.
    unsafe { pass_env(envp, |envp| real(fd, argv, envp)) }
}

/// `posix_spawn(3)` with the agent's variables in `envp`.
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = next!(REAL, c"posix_spawn", SpawnFn);
    // SAFETY: the caller's environment array, as libc takes it (or a
    // copy, null-terminated as theirs); libc's function with the
    // caller's other arguments.
    unsafe { pass_env(envp, |envp| real(pid, path, actions, attr, argv, envp)) }
}

/// `posix_spawnp(3)` with the agent's variables in `envp`.
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = next!(REAL, c"posix_spawnp", SpawnFn);
    // SAFETY: the caller's environment array, as libc takes it (or a
    // copy, null-terminated as theirs); libc's function with the
    // caller's other arguments.
    unsafe { pass_env(envp, |envp| real(pid, file, actions, attr, argv, envp)) }
}
