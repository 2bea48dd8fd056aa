//! `vfork`, interposed: the child runs on the parent's stack with the
//! parent's thread-local state (the same memory) until it execs or exits,
//! so a call it makes must not push a frame onto the parent's shadow stack
//! nor write records into the parent's ring. The thread is paused (no call
//! hooked) before the child exists, and resumed in the parent once the
//! child is gone; the child returns paused. (A call that a library call's
//! thunk traces takes fgraph's own body instead, which records the child
//! as a task of its own.)
//!
//! ```text
//!   [rsp] at entry   the caller's return address; popped into rdi before
//!                    the syscall (the child's `ret` takes the stack's copy
//!                    of it), pushed back after it: `syscall` keeps rdi
//!                    (it clobbers rax, rcx, r11)
//!   rax              SYS_vfork; then the child's pid (parent), 0 (child)
//!                    or −errno
//!   rsi              the thread's pauses before the call (`pause`'s
//!                    result, kept by `syscall`): the parent gets them back,
//!                    whatever the child left (`exit` runs the agent's exit
//!                    step, which pauses the thread for good)
//!   rsp ≡ 8 mod 16   at entry, as after any call: one word more aligns
//!                    the call to `pause`
//! ```

use shadowgraph::fgraph;

/// `vfork(2)`.
///
/// # Safety
/// Same contract as libc's: the child only execs or exits.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    std::arch::naked_asm!(
        "sub rsp, 8",
        "call {pause}",
        "add rsp, 8",
        "mov rsi, rax",
        "pop rdi",
        "mov eax, {sys_vfork}",
        "syscall",
        "push rdi",
        "test rax, rax",
        "jz 2f",
        // The parent (the child has exec'd or exited), or a failure: the
        // stack is as at entry, and `after` returns to the caller.
        "mov rdi, rax",
        "jmp {after}",
        "2:",
        "ret",
        pause = sym pause,
        sys_vfork = const libc::SYS_vfork,
        after = sym after,
    )
}

/// Pauses the thread; returns its pauses before.
extern "C" fn pause() -> u64 {
    let before = fgraph::pause_depth();
    fgraph::pause_thread();
    u64::from(before)
}

/// In the parent: tracing resumes, the thread's pauses as they were
/// before the call; a failure sets errno.
extern "C" fn after(ret: i64, pauses: u64) -> i64 {
    fgraph::resume_thread_to(pauses as u32);
    if ret < 0 {
        // SAFETY: errno is this thread's own.
        unsafe { *libc::__errno_location() = -ret as i32 };
        return -1;
    }
    ret
}
