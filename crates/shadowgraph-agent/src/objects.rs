//! `dlopen` and `dlclose` interposed: objects the program loads join the
//! session once loaded, and those it unloads leave it first
//! ([`shadowgraph::session::objects`]).

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::AtomicUsize;

/// The public head of glibc's `struct link_map` (<link.h>).
#[repr(C)]
struct LinkMap {
    l_addr: usize,
    l_name: *const c_char,
}

const RTLD_DI_LINKMAP: c_int = 2;

static REAL_DLOPEN: AtomicUsize = AtomicUsize::new(0);
static REAL_DLCLOSE: AtomicUsize = AtomicUsize::new(0);

/// `dlopen(3)`: the new objects' sites join the core (their sleds are
/// converted with the other threads stopped).
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn dlopen(file: *const c_char, flags: c_int) -> *mut c_void {
    type F = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
    // SAFETY: the next definition of dlopen has this signature; the
    // caller's arguments are passed unchanged.
    let h = unsafe {
        let real =
            std::mem::transmute::<usize, F>(crate::next::next_symbol(&REAL_DLOPEN, c"dlopen"));
        real(file, flags)
    };
    if !h.is_null() {
        shadowgraph::session::objects::after_dlopen();
    }
    h
}

/// `dlclose(3)`: the object's sites go back to nops first (it may be
/// unmapped).
///
/// # Safety
/// Same contract as libc's.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    type F = unsafe extern "C" fn(*mut c_void) -> c_int;
    let mut bias = None;
    if !handle.is_null() {
        let mut lm: *mut LinkMap = std::ptr::null_mut();
        // SAFETY: RTLD_DI_LINKMAP writes a link_map pointer for a valid
        // handle (the caller's contract); a non-null one is the loader's.
        unsafe {
            if libc::dlinfo(handle, RTLD_DI_LINKMAP, &mut lm as *mut _ as *mut c_void) == 0
                && !lm.is_null()
            {
                bias = Some((*lm).l_addr);
            }
        }
    }
    shadowgraph::session::objects::around_dlclose(bias, || {
        // SAFETY: the next definition of dlclose has this signature; the
        // caller's handle is passed unchanged.
        unsafe {
            let real = std::mem::transmute::<usize, F>(crate::next::next_symbol(
                &REAL_DLCLOSE,
                c"dlclose",
            ));
            real(handle)
        }
    })
}
