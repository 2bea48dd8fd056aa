//! Interposed signal functions: SIGTRAP belongs to the patcher once it is
//! installed. A program's SIGTRAP handler is recorded and chained to (for
//! traps that are not ours), never installed over ours; SIGTRAP is removed
//! from every mask the program sets. Everything else passes through to the
//! next definition (libc), found with `dlsym(RTLD_NEXT)`.

use shadowgraph::patch;
use std::sync::atomic::AtomicUsize;

type SigactionFn = unsafe extern "C" fn(i32, *const libc::sigaction, *mut libc::sigaction) -> i32;
type SigmaskFn = unsafe extern "C" fn(i32, *const libc::sigset_t, *mut libc::sigset_t) -> i32;

static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_SIGPROCMASK: AtomicUsize = AtomicUsize::new(0);
static REAL_PTHREAD_SIGMASK: AtomicUsize = AtomicUsize::new(0);

fn real_sigaction() -> SigactionFn {
    // SAFETY: the symbol is libc's sigaction, of this signature.
    unsafe {
        std::mem::transmute::<usize, SigactionFn>(crate::next::next_symbol(
            &REAL_SIGACTION,
            c"sigaction",
        ))
    }
}

/// `sigaction(2)`: SIGTRAP requests are recorded as the chained handler
/// once the patcher's handler is installed.
///
/// # Safety
/// Same contract as libc's `sigaction`: `act` and `oact` are null or valid.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: i32,
    act: *const libc::sigaction,
    oact: *mut libc::sigaction,
) -> i32 {
    // SAFETY: the caller passes `act` null or pointing to a sigaction.
    let act_copy = unsafe { act.as_ref() }.copied();
    if sig == libc::SIGTRAP && patch::sigtrap_installed() {
        let is_ours = act_copy.is_some_and(|a| a.sa_sigaction == patch::sigtrap_handler_address());
        if !is_ours {
            // SAFETY: the caller passes `oact` null or writable.
            if let Some(o) = unsafe { oact.as_mut() } {
                *o = patch::previous_sigtrap_action();
            }
            if let Some(mut a) = act_copy {
                without_trap(&mut a.sa_mask);
                patch::set_previous_sigtrap_action(&a);
            }
            return 0;
        }
    }
    let copy = act_copy.map(|mut a| {
        // Handlers must not block SIGTRAP either.
        without_trap(&mut a.sa_mask);
        a
    });
    let act = copy.as_ref().map_or(std::ptr::null(), |a| a as *const _);
    // SAFETY: libc's sigaction with the caller's `oact` and a copy of its
    // `act` (or null, as it passed).
    unsafe { real_sigaction()(sig, act, oact) }
}

/// Removes SIGTRAP from `set`.
fn without_trap(set: &mut libc::sigset_t) {
    // SAFETY: `set` is an initialised sigset_t and SIGTRAP a valid signal.
    unsafe { libc::sigdelset(set, libc::SIGTRAP) };
}

/// `signal(3)`, in terms of the interposed `sigaction` (BSD semantics, as
/// glibc's).
///
/// # Safety
/// Same contract as libc's `signal`.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: an all-zero sigaction is valid (no handler, empty mask).
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler;
    sa.sa_flags = libc::SA_RESTART;
    // SAFETY: sa_mask is a sigset_t of ours; an invalid `sig` only fails.
    unsafe {
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaddset(&mut sa.sa_mask, sig);
    }
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to sigactions of ours.
    if unsafe { sigaction(sig, &sa, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// Calls `real` with a copy of `set` that leaves SIGTRAP unblocked.
///
/// # Safety
/// `real` is libc's sigprocmask or pthread_sigmask; `set` and `old` are
/// null or valid, as they require.
unsafe fn strip_trap(
    real: SigmaskFn,
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    // SAFETY: `set` is null or points to a sigset_t (the caller's contract).
    let copy = match unsafe { set.as_ref() } {
        Some(s) if how != libc::SIG_UNBLOCK => {
            let mut c = *s;
            without_trap(&mut c);
            Some(c)
        }
        _ => None,
    };
    let set = copy.as_ref().map_or(set, |c| c as *const _);
    // SAFETY: `real` as the caller says, with its `old` and its set or our
    // copy of it.
    unsafe { real(how, set, old) }
}

fn real_sigmask(cache: &AtomicUsize, name: &std::ffi::CStr) -> SigmaskFn {
    // SAFETY: both names are libc functions of this signature.
    unsafe { std::mem::transmute::<usize, SigmaskFn>(crate::next::next_symbol(cache, name)) }
}

/// `sigprocmask(2)` with SIGTRAP removed from the set.
///
/// # Safety
/// Same contract as libc's `sigprocmask`.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    let real = real_sigmask(&REAL_SIGPROCMASK, c"sigprocmask");
    // SAFETY: libc's sigprocmask, with the caller's arguments.
    unsafe { strip_trap(real, how, set, old) }
}

/// `pthread_sigmask(3)` with SIGTRAP removed from the set.
///
/// # Safety
/// Same contract as libc's `pthread_sigmask`.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    let real = real_sigmask(&REAL_PTHREAD_SIGMASK, c"pthread_sigmask");
    // SAFETY: libc's pthread_sigmask, with the caller's arguments.
    unsafe { strip_trap(real, how, set, old) }
}
