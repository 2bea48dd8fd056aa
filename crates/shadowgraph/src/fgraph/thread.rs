//! A thread's life under fgraph: its exit closes its open frames (as
//! unwound exits) and gives its shadow stack back to the pool.

use super::ret::finish_frame;
use super::stack::{self, thread};
use super::user::RetRegs;
use crate::ftrace::quiesce::Bracket;
use std::sync::atomic::{compiler_fence, Ordering};
use std::sync::OnceLock;

pub(super) static KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();

pub(super) fn thread_key() -> libc::pthread_key_t {
    *KEY.get_or_init(|| {
        let mut k: libc::pthread_key_t = 0;
        // SAFETY: creating a key with a plain extern "C" destructor.
        unsafe { libc::pthread_key_create(&mut k, Some(thread_exit)) };
        k
    })
}

/// Thread exit: open frames are reported as (unwound) exits, and the stack
/// goes back to the pool.
pub(super) extern "C" fn thread_exit(_: *mut libc::c_void) {
    let t = thread();
    t.exiting.set(true);
    if t.stack.get().is_null() {
        return;
    }
    let _b = Bracket::enter();
    let r = RetRegs::zeroed();
    while let Some(start) = t.frame_below(t.curr.get()) {
        finish_frame(t, start, &r, true);
    }
    // The flag first, then the pointer (a signal handler's entry reads
    // the pointer only after the flag: ThreadState).
    t.has_stack.set(false);
    compiler_fence(Ordering::SeqCst);
    let s = t.stack.replace(std::ptr::null_mut());
    stack::release(s);
}
