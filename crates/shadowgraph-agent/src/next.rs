//! The functions an interposer passes its calls on to.

/// The next definition of `name` after this object (libc's, libgcc's, …),
/// cached in `cache`: the function the slots the agent took over called
/// when it came in by `dlopen` ([`crate::attach`]), else the next one in the
/// lookup order. Aborts with a message if there is none: an interposer
/// without its real function has nothing safe to do.
pub(crate) fn next_symbol(cache: &std::sync::atomic::AtomicUsize, name: &std::ffi::CStr) -> usize {
    use std::sync::atomic::Ordering;
    // Relaxed: the cached value is the same whoever stores it, and is a
    // function address in an object that is never unloaded.
    let p = cache.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    let p = match crate::attach::taken_over(name) {
        0 => {
            // SAFETY: RTLD_NEXT lookup of a NUL-terminated name.
            unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize }
        }
        p => p,
    };
    if p == 0 {
        let msg = b"shadowgraph: an interposed function has no next definition\n";
        // SAFETY: write(2) of a static buffer, then abort.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    cache.store(p, Ordering::Relaxed);
    p
}
