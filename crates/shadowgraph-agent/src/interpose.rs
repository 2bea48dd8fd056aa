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
        std::mem::transmute::<usize, SigactionFn>(crate::next_symbol(&REAL_SIGACTION, c"sigaction"))
    }
}

/// `sigaction(2)`: SIGTRAP requests are recorded as the chained handler
/// once the patcher's handler is installed.
///
/// # Safety
/// Same contract as libc's `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: i32,
    act: *const libc::sigaction,
    oact: *mut libc::sigaction,
) -> i32 {
    if sig == libc::SIGTRAP && patch::sigtrap_installed() {
        let is_ours = !act.is_null() && (*act).sa_sigaction == patch::sigtrap_handler_address();
        if !is_ours {
            if !oact.is_null() {
                *oact = patch::previous_sigtrap_action();
            }
            if !act.is_null() {
                let mut a = *act;
                libc::sigdelset(&mut a.sa_mask, libc::SIGTRAP);
                patch::set_previous_sigtrap_action(&a);
            }
            return 0;
        }
    }
    let mut copy;
    let act = if act.is_null() {
        act
    } else {
        // Handlers must not block SIGTRAP either.
        copy = *act;
        libc::sigdelset(&mut copy.sa_mask, libc::SIGTRAP);
        &copy as *const _
    };
    real_sigaction()(sig, act, oact)
}

/// `signal(3)`, in terms of the interposed `sigaction` (BSD semantics, as
/// glibc's).
///
/// # Safety
/// Same contract as libc's `signal`.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    let mut sa: libc::sigaction = std::mem::zeroed();
    sa.sa_sigaction = handler;
    sa.sa_flags = libc::SA_RESTART;
    libc::sigemptyset(&mut sa.sa_mask);
    libc::sigaddset(&mut sa.sa_mask, sig);
    let mut old: libc::sigaction = std::mem::zeroed();
    if sigaction(sig, &sa, &mut old) != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

unsafe fn strip_trap(
    real: SigmaskFn,
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    if set.is_null() || how == libc::SIG_UNBLOCK {
        return real(how, set, old);
    }
    let mut copy = *set;
    libc::sigdelset(&mut copy, libc::SIGTRAP);
    real(how, &copy, old)
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
    let real = std::mem::transmute::<usize, SigmaskFn>(crate::next_symbol(
        &REAL_SIGPROCMASK,
        c"sigprocmask",
    ));
    strip_trap(real, how, set, old)
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
    let real = std::mem::transmute::<usize, SigmaskFn>(crate::next_symbol(
        &REAL_PTHREAD_SIGMASK,
        c"pthread_sigmask",
    ));
    strip_trap(real, how, set, old)
}
