//! Functions that return twice (`setjmp`, `_setjmp`, `sigsetjmp`), traced
//! as uftrace shows them: each return is the call's exit, the second one
//! (a `longjmp` back) with the value it brings, at the call's depth, and
//! the calls the jump left stay open.
//!
//! Such a call's return slot holds our return address when the function
//! runs (a site stub's return point, or `return_to_handler`), which
//! `setjmp` keeps in the buffer as the place to come back to; its shadow
//! frame is gone by the time a `longjmp` comes back.
//! So the library call's thunk (crate::libcall) runs a body of ours
//! before the function: when the call has a frame, it keeps a copy of the
//! frame in the thread's [`Jumps`], puts our landing in the return slot
//! and a tag naming the copy in r15 (callee-saved: `setjmp` keeps it in
//! the buffer with the others, and `longjmp` gives it back). Both returns
//! come to the landing, which finds the copy by the tag and gives r15 its
//! value back:
//! - the first return finishes the frame as any return does;
//! - a later one (a `longjmp`) pops the frames above the copy's place as
//!   left open (their users see them unwound, [`super::unwound_stays_open`]),
//!   puts the copy back with the thread's task variables as they were
//!   (each user's own state inside the call) and finishes it
//!   ([`super::resuming`] while its users' callbacks run).
//!
//! A copy is kept until a later call on the same buffer has returned once:
//! until then the buffer, which a signal handler may jump to at any time,
//! may still name it. A handler may leave the landing's code by a jump
//! anywhere: nothing there is half done that the next landing depends on
//! (the abandoned bracket resets what it was doing).
//!
//! When the copy cannot be kept (the table full, a frame larger than a
//! copy holds), the call is finished at once with 0, as its first return
//! gives, and its real return address goes back in its slot: a `longjmp`
//! then returns there directly, and the frames it left are popped as
//! unwound when found, as for any non-local exit.
//!
//! `getcontext` is always finished that way ([`finished_at_once_body`]):
//! a coroutine library may resume its context on another thread, whose
//! copies would not hold the tag. `vfork` keeps a copy as `setjmp` does,
//! its child's return first (`super::vfork`).
//!
//! ```text
//! The body (rsp = the return slot S; r11 = the thunk's hook word):
//!   S               our return address (the call has a frame) or the
//!                   caller's (untraced)
//!   r11 + 8         the function
//!   S - 8 … S - 40  rdi, rsi, rdx, r11, r15 as they came (rsp 16-aligned)
//! The landing (rsp = S + 8; rax the value; r15 the tag):
//!   rsp + 0 …       a RetRegs, then the word r15 is restored from
//! ```

use super::layout::graph_asm;
use super::ret::{fatal_no_frame, finish_frame, restore_ret_regs, save_ret_regs};
use super::stack::{self, thread, Jump, Jumps, ThreadState, JUMP_WORDS};
use super::user::RetRegs;
use crate::ftrace::dispatch::ErrnoGuard;
use crate::ftrace::quiesce::Bracket;
use std::sync::atomic::{compiler_fence, Ordering};

/// A copy's buffer while it is being written.
const CLAIMED: usize = 1;

/// [`ThreadState::jump`] while the frames a jump left are popped.
const SKIPPING: u64 = 1;
/// [`ThreadState::jump`] while the frame a jump came back to is finished.
const RESUMING: u64 = 2;

/// Whether `what` is being done by the landing's own callbacks, not by a
/// signal handler's that interrupted it (a bracket deeper).
pub(super) fn doing(t: &ThreadState, what: u64) -> bool {
    t.jump.get() == what | crate::ftrace::quiesce::bracket_depth() << 8
}

/// Marks `what` as being done, in the bracket the landing holds.
fn set_doing(t: &ThreadState, what: u64) {
    t.jump
        .set(what | crate::ftrace::quiesce::bracket_depth() << 8);
}

/// Whether the return reported now is the second one of a call that
/// returns twice.
pub(super) fn resuming(t: &ThreadState) -> bool {
    doing(t, RESUMING)
}

/// Whether the unwound returns reported now are of calls a jump left.
pub(super) fn skipping(t: &ThreadState) -> bool {
    doing(t, SKIPPING)
}

impl Jumps {
    /// A free copy to write, claimed with one atomic exchange: a signal
    /// handler's call meanwhile takes another. (A copy of the same buffer
    /// stays: until this call's `setjmp` has run, the buffer still names
    /// it, and a handler may jump there.)
    fn claim(&self) -> Option<&Jump> {
        self.jumps.iter().find(|j| {
            j.buf
                .compare_exchange(0, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Frees the copies of `j`'s buffer but `j`, whose call has returned
    /// once: the buffer names `j` now, no other copy can be jumped to.
    fn forget_others(&self, j: &Jump) {
        let buf = j.buf.load(Ordering::Relaxed);
        for o in &self.jumps {
            if !std::ptr::eq(o, j) {
                // Relaxed: nothing of the copy is read once it is free.
                let _ = o
                    .buf
                    .compare_exchange(buf, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }

    /// The copy a tag names (its address), if it is one of these.
    fn by_tag(&self, tag: u64) -> Option<&Jump> {
        (self.jumps.iter()).find(|j| {
            std::ptr::from_ref(*j) as u64 == tag && j.buf.load(Ordering::Acquire) > CLAIMED
        })
    }
}

// A landing's code (the diagram above: rsp = S + 8; rax the value; r15
// the tag): `{land}(&RetRegs, tag, &word)` finishes what the return
// finishes and gives the real return address, where it jumps, r15 given
// the word's value. The return registers as they came.
macro_rules! landing {
    () => {
        concat!(
            "endbr64\n",
            save_ret_regs!("RET_SIZE + 16"),
            "mov rdi, rsp\n",
            "mov rsi, r15\n",
            "lea rdx, [rsp + RET_SIZE]\n",
            "call {land}\n",
            "mov r11, rax\n",
            "mov r15, [rsp + RET_SIZE]\n",
            restore_ret_regs!(),
            "jmp r11\n",
        )
    };
}
pub(super) use landing;

graph_asm!(
    ".pushsection .text.shadowgraph_fgraph,\"ax\",@progbits",
    ".globl shadowgraph_returns_twice_body",
    ".hidden shadowgraph_returns_twice_body",
    "shadowgraph_returns_twice_body:",
    "endbr64",
    "push rdi",
    "push rsi",
    "push rdx",
    "push r11",
    "push r15",
    "lea rdi, [rsp + 40]",
    "mov rsi, [rsp + 32]",
    "mov rdx, r15",
    "call {note}",
    "pop r15",
    "test rax, rax",
    "cmovnz r15, rax",
    "pop r11",
    "pop rdx",
    "pop rsi",
    "pop rdi",
    "jmp qword ptr [r11 + 8]",
    ".globl shadowgraph_returns_twice_landing",
    ".hidden shadowgraph_returns_twice_landing",
    "shadowgraph_returns_twice_landing:",
    landing!(),
    ".popsection";
    note = sym note,
    land = sym land,
);

// The body of a function finished before it runs (rsp = the return slot
// S, ≡ 8 mod 16; r11 = the thunk's hook word): the argument registers and
// r11 kept at S - 8 … S - 56 across the call of `at_once` (rsp then
// 16-aligned), then the function, returning as it would untraced.
graph_asm!(
    ".pushsection .text.shadowgraph_fgraph,\"ax\",@progbits",
    ".globl shadowgraph_finished_at_once_body",
    ".hidden shadowgraph_finished_at_once_body",
    "shadowgraph_finished_at_once_body:",
    "endbr64",
    "push rdi",
    "push rsi",
    "push rdx",
    "push rcx",
    "push r8",
    "push r9",
    "push r11",
    "lea rdi, [rsp + 56]",
    "call {at_once}",
    "pop r11",
    "pop r9",
    "pop r8",
    "pop rcx",
    "pop rdx",
    "pop rsi",
    "pop rdi",
    "jmp qword ptr [r11 + 8]",
    ".popsection";
    at_once = sym at_once,
);

extern "C" {
    fn shadowgraph_returns_twice_body();
    fn shadowgraph_returns_twice_landing();
    fn shadowgraph_finished_at_once_body();
}

/// The body a thunk of a function that returns twice jumps to, with r11
/// at its hook word and the function's address in the word after.
pub fn returns_twice_body() -> usize {
    shadowgraph_returns_twice_body as *const () as usize
}

/// The body a thunk of a function finished before it runs jumps to
/// (`getcontext`, which a `setcontext` may return to again, on another
/// thread with a coroutine library that moves contexts between threads:
/// no landing of ours may be kept in its context). Its call is shown
/// returning 0 at once, and a later return to it is the function's own:
/// the frames that return leaves are popped as unwound when found, as
/// for any non-local exit.
pub fn finished_at_once_body() -> usize {
    shadowgraph_finished_at_once_body as *const () as usize
}

/// Before the function runs: finishes its call if it has a frame.
extern "C" fn at_once(slot: usize) {
    let t = thread();
    if let Some(f) = own_frame(t, slot) {
        finish_now(t, f, slot);
    }
}

/// Before the function runs: keeps the call's frame (if it has one) and
/// returns the tag for r15 (0: none, r15 stays).
extern "C" fn note(slot: usize, buf: usize, reg: u64) -> u64 {
    let t = thread();
    let Some(f) = own_frame(t, slot) else {
        return 0;
    };
    let landing = shadowgraph_returns_twice_landing as *const () as usize;
    keep(t, f, slot, buf, reg, landing).unwrap_or_else(|| {
        finish_now(t, f, slot);
        0
    })
}

/// The frame of the running call whose return slot is `slot`, if it is
/// the thread's top one (else the call is untraced: the stub went straight
/// to the body).
pub(super) fn own_frame(t: &ThreadState, slot: usize) -> Option<usize> {
    let f = t.frame_below(t.curr.get())?;
    (t.word(f + stack::FRAME_RETP) as usize == slot).then_some(f)
}

/// Keeps a copy of frame `f` (the call's, whose return slot is `slot`)
/// under `buf`, with r15's value `reg`, and puts `landing` in the slot;
/// returns the copy's tag, or None when no copy can hold it.
pub(super) fn keep(
    t: &ThreadState,
    f: usize,
    slot: usize,
    buf: usize,
    reg: u64,
    landing: usize,
) -> Option<u64> {
    let len = t.curr.get() - f;
    if len > JUMP_WORDS {
        return None;
    }
    let j = t.jumps().and_then(Jumps::claim)?;
    j.ret.set(t.word(f) as usize);
    j.reg.set(reg);
    j.at.set(f);
    j.len.set(len);
    j.returned.set(false);
    j.child.set(0);
    j.pause.set(t.pause.get());
    for (i, w) in j.words.iter().take(len).enumerate() {
        w.set(t.word(f + i));
    }
    for (i, v) in j.vars.iter().enumerate() {
        // SAFETY: this thread's task variables, in its stack's head.
        v.set(unsafe { t.task_var(i).read() });
    }
    // Release: the copy's cells are written before the buffer names it
    // (the landing's Acquire, in this thread or its handlers).
    j.buf.store(buf, Ordering::Release);
    // SAFETY: `slot` is the running call's return slot (its frame says
    // so), which holds the stub's return point until the function returns.
    unsafe { (slot as *mut usize).write(landing) };
    Some(std::ptr::from_ref(j) as u64)
}

/// A call whose frame cannot be kept: finished now, returning 0, with its
/// real return address back in its slot.
#[cold]
pub(super) fn finish_now(t: &ThreadState, f: usize, slot: usize) {
    let _b = Bracket::enter_at(slot);
    let _e = ErrnoGuard::save();
    let mut r = RetRegs::zeroed();
    r.rsp = slot + 8;
    // SAFETY: as in `note`: the call's return slot, ours until it returns.
    unsafe { (slot as *mut usize).write(t.word(f) as usize) };
    finish_frame(t, f, &r, false);
}

/// A return to the landing: the frame's exit (after popping what a jump
/// left); returns the real return address and sets `reg` to r15's value.
extern "C" fn land(r: &mut RetRegs, tag: u64, reg: &mut u64) -> usize {
    at_landing(r, tag, reg, |t, j, slot| {
        if !j.returned.replace(true) {
            finish_first(t, j, r, slot);
            if let Some(js) = t.jumps() {
                js.forget_others(j);
            }
        } else {
            finish_again(t, j, r);
        }
        j.ret.get()
    })
}

/// A landing's return (`landing!`): sets `reg` to r15's value from the
/// copy the tag names, and runs `finish` (the thread, the copy, the
/// return slot) in the bracket, errno kept; its result is the address
/// the return goes on to.
pub(super) fn at_landing(
    r: &RetRegs,
    tag: u64,
    reg: &mut u64,
    finish: impl FnOnce(&ThreadState, &Jump, usize) -> usize,
) -> usize {
    let slot = r.rsp - 8;
    let t = thread();
    let Some(j) = t.jumps().and_then(|js| js.by_tag(tag)) else {
        fatal_no_frame(slot)
    };
    *reg = j.reg.get();
    let _b = Bracket::enter_at(slot);
    let _e = ErrnoGuard::save();
    finish(t, j, slot)
}

/// The first return of the call `j` keeps: its frame's exit (the calls
/// above it, none unless a handler jumped there from inside the function,
/// stay open).
pub(super) fn finish_first(t: &ThreadState, j: &Jump, r: &RetRegs, slot: usize) {
    let at = j.at.get();
    skip_from(t, r, at + 1);
    if let Some(f) = t.frame_below(t.curr.get()) {
        if f == at && t.word(f + stack::FRAME_RETP) as usize == slot {
            finish_frame(t, f, r, false);
        }
    }
}

/// A later return of the call `j` keeps (a `longjmp` back): the calls
/// from its place on stay open, and its frame, put back with the thread's
/// task variables as they were inside the call, gets its exit.
pub(super) fn finish_again(t: &ThreadState, j: &Jump, r: &RetRegs) {
    let at = j.at.get();
    skip_from(t, r, at);
    if t.curr.get() == at {
        let len = j.len.get();
        // As `push`: written before `curr` covers them, and again after
        // (a handler that ran in between may have pushed over them).
        let write = || {
            for (i, w) in j.words.iter().take(len).enumerate() {
                t.set_word(at + i, w.get());
            }
        };
        write();
        compiler_fence(Ordering::SeqCst);
        t.curr.set(at + len);
        compiler_fence(Ordering::SeqCst);
        write();
        // The users' own state as it was inside the call.
        for (i, v) in j.vars.iter().enumerate() {
            // SAFETY: as in `keep`.
            unsafe { t.task_var(i).write(v.get()) };
        }
        set_doing(t, RESUMING);
        finish_frame(t, at, r, false);
        t.jump.set(0);
    }
}

/// Pops the frames from `from` up as left open.
fn skip_from(t: &ThreadState, r: &RetRegs, from: usize) {
    set_doing(t, SKIPPING);
    while let Some(f) = t.frame_below(t.curr.get()).filter(|&f| f >= from) {
        finish_frame(t, f, r, true);
    }
    t.jump.set(0);
}
