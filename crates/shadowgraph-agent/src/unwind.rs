//! Interposed unwinder entry points (design §4.6): an unwinder must never
//! see `return_to_handler`. Before an exception, forced unwind, panic or
//! backtrace walks the stack, every hijacked slot gets its real return
//! address back; afterwards (at the catch, or at the thread's next hook)
//! the frames that were unwound are reported as exits and the rest are
//! hijacked again. The real functions are the next definitions (libgcc_s,
//! libstdc++, libc), found with `dlsym(RTLD_NEXT)`.

use shadowgraph::fgraph;
use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicUsize;

/// The next definition of `$name`, as `$ty`: only ever the type of the
/// symbol of the same name that this file interposes.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static CACHE: AtomicUsize = AtomicUsize::new(0);
        let next = crate::next::next_symbol(&CACHE, $name);
        // SAFETY: the next definition of the symbol this function
        // interposes has the interposer's own signature, `$ty`.
        unsafe { std::mem::transmute::<usize, $ty>(next) }
    }};
}

/// `_Unwind_RaiseException` (C++ `throw`, Rust panics).
///
/// # Safety
/// Same contract as libgcc's.
#[no_mangle]
pub unsafe extern "C" fn _Unwind_RaiseException(exc: *mut c_void) -> c_int {
    fgraph::unhook_thread();
    let real = real!(
        c"_Unwind_RaiseException",
        unsafe extern "C" fn(*mut c_void) -> c_int
    );
    // SAFETY: the real function, with the caller's arguments unchanged,
    // under the caller's contract; likewise in every forwarder below.
    unsafe { real(exc) }
}

/// `_Unwind_Resume` (continuing after a cleanup pad).
///
/// # Safety
/// Same contract as libgcc's.
#[no_mangle]
pub unsafe extern "C" fn _Unwind_Resume(exc: *mut c_void) {
    fgraph::unhook_thread();
    let real = real!(c"_Unwind_Resume", unsafe extern "C" fn(*mut c_void));
    // SAFETY: as in _Unwind_RaiseException.
    unsafe { real(exc) }
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
    let real = real!(
        c"_Unwind_ForcedUnwind",
        unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> c_int
    );
    // SAFETY: as in _Unwind_RaiseException.
    unsafe { real(exc, stop, arg) }
}

/// `pthread_exit`: glibc reaches libgcc's forced unwind through its own
/// handle (not interposable), so the stack is unhooked here.
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn pthread_exit(retval: *mut c_void) -> ! {
    fgraph::unhook_thread();
    let real = real!(c"pthread_exit", unsafe extern "C" fn(*mut c_void) -> !);
    // SAFETY: as in _Unwind_RaiseException.
    unsafe { real(retval) }
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
    let real = real!(
        c"__cxa_begin_catch",
        unsafe extern "C" fn(*mut c_void) -> *mut c_void
    );
    // SAFETY: as in _Unwind_RaiseException.
    unsafe { real(exc) }
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

/// `_Unwind_Backtrace`'s callback and its argument, and whether the next
/// frame is ours (the real function reports its caller first: this body).
#[repr(C)]
struct SkipFirst {
    trace: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
    arg: *mut c_void,
    skip: bool,
}

/// Forwards every frame but the first (ours) to the program's callback.
unsafe extern "C" fn skip_first(ctx: *mut c_void, data: *mut c_void) -> c_int {
    // SAFETY: `data` is the SkipFirst on unwind_backtrace_body's stack,
    // live during the real _Unwind_Backtrace that calls us.
    let s = unsafe { &mut *(data as *mut SkipFirst) };
    if s.skip {
        s.skip = false;
        return 0; // _URC_NO_REASON: go on
    }
    // SAFETY: the program's callback with its own argument, as it asked.
    unsafe { (s.trace)(ctx, s.arg) }
}

#[inline(never)]
extern "C" fn unwind_backtrace_body(
    trace: *mut c_void,
    arg: *mut c_void,
    caller_sp: usize,
) -> c_int {
    if trace.is_null() {
        return 3; // _URC_FATAL_PHASE1_ERROR, as for any failed walk
    }
    fgraph::unhook_thread();
    let mut skip = SkipFirst {
        // SAFETY: a non-null trace callback of the documented signature.
        trace: unsafe {
            std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
            >(trace)
        },
        arg,
        skip: true,
    };
    // The program's callback may be traced code: not hooked meanwhile
    // (its hook would hijack the frames being walked again).
    fgraph::pause_thread();
    let real = real!(
        c"_Unwind_Backtrace",
        unsafe extern "C" fn(
            unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
            *mut c_void,
        ) -> c_int
    );
    // SAFETY: the real function; our callback and its argument outlive
    // the call.
    let r = unsafe { real(skip_first, &mut skip as *mut SkipFirst as *mut c_void) };
    fgraph::resume_thread();
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

#[inline(never)]
extern "C" fn backtrace_body(buf: *mut *mut c_void, size: c_int, caller_sp: usize) -> c_int {
    // The real function's first frame is its caller, this body: it is
    // asked for one more frame, into a buffer of ours, and ours is dropped.
    const MAX: usize = 256;
    if size <= 0 || buf.is_null() {
        return 0;
    }
    let size = size as usize;
    fgraph::unhook_thread();
    let real = real!(
        c"backtrace",
        unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int
    );
    if size > MAX {
        // SAFETY: the real function, into the caller's buffer of `size`
        // entries; ours is then moved out (a full buffer loses its
        // outermost frame).
        let got = unsafe { real(buf, size as c_int) };
        fgraph::rehook_thread(caller_sp);
        let n = (got.max(0) as usize).saturating_sub(1);
        // SAFETY: entries 1..=n are in the buffer; copy handles overlap.
        unsafe { std::ptr::copy(buf.add(1), buf, n) };
        return n as c_int;
    }
    let mut tmp = [std::ptr::null_mut::<c_void>(); MAX + 1];
    let want = size.min(MAX) + 1;
    // SAFETY: the real function, into our buffer of `want` entries.
    let got = unsafe { real(tmp.as_mut_ptr(), want as c_int) };
    fgraph::rehook_thread(caller_sp);
    let n = (got.max(0) as usize).saturating_sub(1).min(size);
    // SAFETY: the caller's buffer holds `size` ≥ n entries.
    unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr().add(1), buf, n) };
    n as c_int
}
