//! Interposed unwinder entry points (SPEC §4.9 g): an unwinder must never
//! see `return_to_handler`. Before an exception, forced unwind, panic or
//! backtrace walks the stack, every hijacked slot gets its real return
//! address back; afterwards (at the catch, or at the thread's next hook)
//! the frames that were unwound are reported as exits and the rest are
//! hijacked again. The real functions are the next definitions (libgcc_s,
//! libstdc++, libc), found with `dlsym(RTLD_NEXT)`.

use shadowgraph::fgraph;
use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicUsize;

/// The next definition of `$name`, as `$ty`. Expands to a `transmute`:
/// use it in an unsafe context whose SAFETY note says the next definition
/// has that signature (it is the same symbol's).
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static CACHE: AtomicUsize = AtomicUsize::new(0);
        std::mem::transmute::<usize, $ty>(crate::next_symbol(&CACHE, $name))
    }};
}

/// `_Unwind_RaiseException` (C++ `throw`, Rust panics).
///
/// # Safety
/// Same contract as libgcc's.
#[no_mangle]
pub unsafe extern "C" fn _Unwind_RaiseException(exc: *mut c_void) -> c_int {
    fgraph::unhook_thread();
    // SAFETY (all forwarders below): the next definition of the same symbol
    // has the same signature; the caller's arguments are passed unchanged.
    real!(
        c"_Unwind_RaiseException",
        unsafe extern "C" fn(*mut c_void) -> c_int
    )(exc)
}

/// `_Unwind_Resume` (continuing after a cleanup pad).
///
/// # Safety
/// Same contract as libgcc's.
#[no_mangle]
pub unsafe extern "C" fn _Unwind_Resume(exc: *mut c_void) {
    fgraph::unhook_thread();
    real!(c"_Unwind_Resume", unsafe extern "C" fn(*mut c_void))(exc)
}

/// `_Unwind_ForcedUnwind` (thread cancellation, `pthread_exit`).
///
/// # Safety
/// Same contract as libgcc's.
#[no_mangle]
pub unsafe extern "C" fn _Unwind_ForcedUnwind(
    exc: *mut c_void,
    stop: *mut c_void,
    arg: *mut c_void,
) -> c_int {
    fgraph::unhook_thread();
    real!(
        c"_Unwind_ForcedUnwind",
        unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> c_int
    )(exc, stop, arg)
}

/// `pthread_exit`: glibc reaches libgcc's forced unwind through its own
/// handle (not interposable), so the stack is unhooked here.
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn pthread_exit(retval: *mut c_void) -> ! {
    fgraph::unhook_thread();
    real!(c"pthread_exit", unsafe extern "C" fn(*mut c_void) -> !)(retval)
}

// `__cxa_begin_catch`, `_Unwind_Backtrace` and `backtrace` need their
// caller's stack pointer (frames whose return slot lies below it are gone):
// a naked entry passes `rsp + 8` (the caller's rsp after the call) as an
// extra argument and jumps to the Rust body, which returns to the caller.

/// `__cxa_begin_catch`: the landing pad of a C++ catch.
///
/// # Safety
/// Same contract as libstdc++'s.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __cxa_begin_catch(exc: *mut c_void) -> *mut c_void {
    std::arch::naked_asm!("lea rsi, [rsp + 8]", "jmp {body}", body = sym begin_catch_body)
}

extern "C" fn begin_catch_body(exc: *mut c_void, caller_sp: usize) -> *mut c_void {
    fgraph::rehook_thread(caller_sp);
    // SAFETY: the next definition of the same symbol, same signature; the
    // caller's argument passed unchanged.
    unsafe {
        real!(
            c"__cxa_begin_catch",
            unsafe extern "C" fn(*mut c_void) -> *mut c_void
        )(exc)
    }
}

/// `_Unwind_Backtrace`.
///
/// # Safety
/// Same contract as libgcc's.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn _Unwind_Backtrace(trace: *mut c_void, arg: *mut c_void) -> c_int {
    std::arch::naked_asm!("lea rdx, [rsp + 8]", "jmp {body}", body = sym unwind_backtrace_body)
}

extern "C" fn unwind_backtrace_body(
    trace: *mut c_void,
    arg: *mut c_void,
    caller_sp: usize,
) -> c_int {
    fgraph::unhook_thread();
    // SAFETY: as above.
    let r = unsafe {
        real!(
            c"_Unwind_Backtrace",
            unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int
        )(trace, arg)
    };
    fgraph::rehook_thread(caller_sp);
    r
}

/// `backtrace(3)`.
///
/// # Safety
/// Same contract as libc's.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn backtrace(buf: *mut *mut c_void, size: c_int) -> c_int {
    std::arch::naked_asm!("lea rdx, [rsp + 8]", "jmp {body}", body = sym backtrace_body)
}

extern "C" fn backtrace_body(buf: *mut *mut c_void, size: c_int, caller_sp: usize) -> c_int {
    fgraph::unhook_thread();
    // SAFETY: as above.
    let r = unsafe {
        real!(
            c"backtrace",
            unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int
        )(buf, size)
    };
    fgraph::rehook_thread(caller_sp);
    r
}
