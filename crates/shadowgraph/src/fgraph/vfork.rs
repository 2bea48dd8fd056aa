//! `vfork`, traced as uftrace shows it: the call's entry and exit in the
//! parent, and in the child, a task of its own, the call's exit and the
//! calls it makes until it execs or exits.
//!
//! The child runs on its parent's stack, shadow stack and thread-local
//! state (the same memory) while the parent waits in the system call. So
//! the library call's thunk (crate::libcall) runs our body, which makes
//! the system call itself. When the call has a frame, the body first keeps
//! a copy of it as [`super::jumps`] does for `setjmp` (the landing in the
//! return slot, the copy's tag in r15, which the kernel gives both
//! returns), and both returns come to the landing:
//! - the child's (0), first: the recording layers' hooks ([`on_vfork`])
//!   put the parent's rings aside, so that the child's records go to rings
//!   of its own, under its own id, the call's exit first. When a hook says
//!   the child is not recorded (`--no-children`), the frame stays and the
//!   thread is paused instead: the child runs untraced.
//! - the parent's, once the child has exec'd or exited: the hooks end the
//!   child's rings and give the parent its own back; the frames the child
//!   left open (its exec's) are popped as left open, and the call's frame,
//!   put back with the task variables as they were, gets the parent's exit.
//! - a failure (−1, errno set), or a child killed before its return: one
//!   return, the parent's, an ordinary exit.
//!
//! Without a frame (the call untraced), a copy to keep it in, or when the
//! caller is itself a recorded vfork child, the thread is paused around
//! the system call: the child runs untraced, as through the agent's own
//! `vfork`.
//!
//! ```text
//! The body (rsp = the return slot S, ≡ 8 mod 16; r11, the thunk's hook
//! word, is not needed: the body calls no function after it):
//!   S        our landing (the call has a frame) or the caller's address
//!   S - 8    r15 as it came, while `note` runs
//!   rdi      the return address, popped from S across the system call
//!            (the child's own calls write over the stack below S + 8) and
//!            pushed back after it: `syscall` keeps rdi, rsi and rdx
//!   rsi      the tag (0: untraced, the thread paused)
//!   rdx      the thread's pauses before the call, which the parent gets
//!            back (the child may pause the thread for good: `exit` runs
//!            the agent's exit step)
//!   rax      SYS_vfork; then the child's pid (parent), 0 (child), −errno
//! ```

use super::jumps::{at_landing, finish_again, finish_first, finish_now, keep, landing, own_frame};
use super::layout::graph_asm;
use super::ret::{restore_ret_regs, save_ret_regs};
use super::stack::{thread, Jump, ThreadState};
use super::unwind::{pause_thread, resume_thread_to};
use super::user::RetRegs;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The buffer word of a `vfork`'s copy (a `setjmp`'s is its buffer's
/// address, never this).
const VFORK: usize = 2;

/// [`Jump::child`]: no child has returned (yet).
const CHILD_NONE: u8 = 0;
/// The child records, in rings of its own.
const CHILD_TRACED: u8 = 1;
/// The child runs untraced, the thread paused.
const CHILD_PAUSED: u8 = 2;

/// A recording layer's part in a traced `vfork`.
pub struct VforkHooks {
    /// Runs in the child, before its first record: puts aside what of the
    /// thread's state is the parent's, so that the child's records go to
    /// rings of its own. Returns whether the child is recorded. It runs in
    /// the parent's memory: what it changes, the parent hook gives back.
    pub child: fn() -> bool,
    /// Runs in the parent once the child is gone (after a child hook ran):
    /// ends what the child made and gives the parent its state back.
    pub parent: fn(),
}

/// The hooks, in the order they were added (null: free).
static HOOKS: [AtomicPtr<VforkHooks>; 4] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 4];

/// Adds hooks run around each traced `vfork` (once: adding them again
/// changes nothing). Four at most: a fifth is refused (false).
pub fn on_vfork(hooks: &'static VforkHooks) -> bool {
    let h = std::ptr::from_ref(hooks).cast_mut();
    HOOKS.iter().any(|slot| {
        // AcqRel/Acquire: the hooks are published whole before a thread
        // that loads the entry calls them.
        match slot.compare_exchange(std::ptr::null_mut(), h, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(x) => x == h,
        }
    })
}

fn hooks() -> impl Iterator<Item = &'static VforkHooks> {
    HOOKS.iter().filter_map(|h| {
        // SAFETY: entries are `&'static` hooks (on_vfork), or null.
        unsafe { h.load(Ordering::Acquire).as_ref() }
    })
}

graph_asm!(
    ".pushsection .text.shadowgraph_fgraph,\"ax\",@progbits",
    ".globl shadowgraph_vfork_body",
    ".hidden shadowgraph_vfork_body",
    "shadowgraph_vfork_body:",
    "endbr64",
    "push r15",
    "lea rdi, [rsp + 8]",
    "mov rsi, r15",
    "call {note}",
    "pop r15",
    "test rax, rax",
    "cmovnz r15, rax",
    "mov rsi, rax",
    "pop rdi",
    "mov eax, {sys_vfork}",
    "syscall",
    "push rdi",
    "test rsi, rsi",
    "jz 2f",
    // Traced: both returns go to the landing, a failure with errno set.
    "cmp rax, -4095",
    "jae 3f",
    "ret",
    "2:",
    // Untraced: the child returns paused; the parent resumes.
    "test rax, rax",
    "jz 4f",
    "mov rdi, rax",
    "mov rsi, rdx",
    "jmp {resume}",
    "3:",
    "mov rdi, rax",
    "jmp {failed}",
    "4:",
    "ret",
    // Both returns (rsp = S + 8; rax the value; r15 the tag): as the
    // `setjmp` family's landing.
    ".globl shadowgraph_vfork_landing",
    ".hidden shadowgraph_vfork_landing",
    "shadowgraph_vfork_landing:",
    landing!(),
    ".popsection";
    note = sym note,
    sys_vfork = const libc::SYS_vfork,
    resume = sym resume,
    failed = sym failed,
    land = sym land,
);

extern "C" {
    fn shadowgraph_vfork_body();
    fn shadowgraph_vfork_landing();
}

/// The body a thunk of `vfork` jumps to (with the function's address,
/// unused, after its hook word).
pub fn vfork_body() -> usize {
    shadowgraph_vfork_body as *const () as usize
}

/// What `note` returns (in rax and rdx).
#[repr(C)]
struct Noted {
    /// The copy's tag for r15, or 0: the thread paused.
    tag: u64,
    /// The thread's pauses before the call.
    pauses: u64,
}

/// Before the system call: keeps the call's frame and returns the tag for
/// r15, or pauses the thread and returns 0; with the thread's pauses.
extern "C" fn note(slot: usize, reg: u64) -> Noted {
    let t = thread();
    let pauses = u64::from(t.pause.get());
    if let Some(f) = own_frame(t, slot) {
        if !in_recorded_child(t) {
            let landing = shadowgraph_vfork_landing as *const () as usize;
            if let Some(tag) = keep(t, f, slot, VFORK, reg, landing) {
                return Noted { tag, pauses };
            }
        }
        finish_now(t, f, slot);
    }
    pause_thread();
    Noted { tag: 0, pauses }
}

/// Whether this is a recorded vfork child (whose parent's state is put
/// aside once already).
fn in_recorded_child(t: &ThreadState) -> bool {
    t.jumps().is_some_and(|js| {
        js.jumps
            .iter()
            .any(|j| j.buf.load(Ordering::Acquire) == VFORK && j.child.get() == CHILD_TRACED)
    })
}

/// The untraced way's parent: tracing resumes, the thread's pauses as
/// they were before the call; a failure sets errno.
extern "C" fn resume(ret: i64, pauses: u64) -> i64 {
    resume_thread_to(pauses as u32);
    failed(ret)
}

/// A failure's errno, and −1 (a pid as it is).
extern "C" fn failed(ret: i64) -> i64 {
    if ret < 0 {
        // SAFETY: errno is this thread's own.
        unsafe { *libc::__errno_location() = -ret as i32 };
        return -1;
    }
    ret
}

/// A return of `vfork` to the landing: returns the real return address
/// and sets `reg` to r15's value.
extern "C" fn land(r: &mut RetRegs, tag: u64, reg: &mut u64) -> usize {
    at_landing(r, tag, reg, |t, j, slot| land_vfork(t, j, r, slot))
}

/// [`land`] inside the bracket, for the copy `j`.
fn land_vfork(t: &ThreadState, j: &Jump, r: &RetRegs, slot: usize) -> usize {
    let ret = j.ret.get();
    if r.rax == 0 && j.child.get() == CHILD_NONE {
        // The child: its own id and rings before its first record. Every
        // hook runs (each gives back in the parent what it put aside).
        crate::ftrace::reset_tid_cache();
        let mut recorded = true;
        for h in hooks() {
            recorded &= (h.child)();
        }
        if recorded {
            j.child.set(CHILD_TRACED);
            finish_first(t, j, r, slot);
        } else {
            j.child.set(CHILD_PAUSED);
            pause_thread();
        }
        return ret;
    }
    // The parent's one return, its pauses as they were before the call.
    resume_thread_to(j.pause.get());
    match j.child.get() {
        CHILD_NONE => finish_first(t, j, r, slot),
        child => {
            crate::ftrace::reset_tid_cache();
            for h in hooks() {
                (h.parent)();
            }
            if child == CHILD_PAUSED {
                finish_first(t, j, r, slot);
            } else {
                finish_again(t, j, r);
            }
        }
    }
    // Relaxed: the copy is this thread's, and nothing of it is read once
    // it is free; a claim takes it with an Acquire exchange.
    j.child.set(CHILD_NONE);
    j.buf.store(0, Ordering::Relaxed);
    ret
}
