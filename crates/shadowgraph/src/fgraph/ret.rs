//! A traced call's return (design §4.4): `return_to_handler`, where a
//! hijacked return lands, and the site stubs' general return both come to
//! `graph_return`, which finds the call's frame (popping as unwound those
//! a longjmp skipped), runs its users' return callbacks and pops it.

use super::stack::{self, thread, ThreadState};
use super::state::{
    lock_graph, unlock_graph, ARRAY, FAST, LOST_FRAMES, OCCUPIED, SLOT_EPOCH, SOLE_HIJACKED_RETURN,
};
use super::user::{GraphReturn, GraphUser, RetRegs};
use crate::ftrace::dispatch::ErrnoGuard;
use crate::ftrace::quiesce::Bracket;
use std::sync::atomic::{compiler_fence, AtomicU64, Ordering};

// --- Return ---------------------------------------------------------------------------

// A RetRegs of `$size` bytes (RET_SIZE or more: the words after it are
// the caller's) saved 16-byte aligned below rsp, which may not be
// (fgraph::layout: its rsp and the word after it hold rsp as it came);
// rsp then points at it. Clobbers r11.
macro_rules! save_ret_regs {
    ($size:literal) => {
        concat!(
            "mov r11, rsp\n",
            "sub rsp, ",
            $size,
            "\n",
            "and rsp, -16\n",
            "mov [rsp + RET_RAX], rax\n",
            "mov [rsp + RET_RDX], rdx\n",
            "movaps [rsp + RET_XMM0], xmm0\n",
            "movaps [rsp + RET_XMM1], xmm1\n",
            "mov [rsp + RET_RSP], r11\n",
            "mov [rsp + RET_RSP + 8], r11\n",
        )
    };
}

// The return registers and rsp as `save_ret_regs!` kept them.
macro_rules! restore_ret_regs {
    () => {
        concat!(
            "mov rax, [rsp + RET_RAX]\n",
            "mov rdx, [rsp + RET_RDX]\n",
            "movaps xmm0, [rsp + RET_XMM0]\n",
            "movaps xmm1, [rsp + RET_XMM1]\n",
            "mov rsp, [rsp + RET_RSP + 8]\n",
        )
    };
}

pub(super) use {restore_ret_regs, save_ret_regs};

// The general return: RetRegs saved, graph_return called, the real return
// address left in r11, the return registers and rsp restored. r11 is dead
// at a return.
macro_rules! return_body {
    () => {
        concat!(
            save_ret_regs!("RET_SIZE"),
            "mov rdi, rsp\n",
            "call {ret}\n",
            "mov r11, rax\n",
            restore_ret_regs!(),
        )
    };
}

// return_to_handler: where a hijacked return lands.
// Entered by the traced function's `ret`: rsp = its return slot + 8,
// aligned or not; rax/rdx and xmm0/xmm1 hold the return value (x87 st0,
// for long double, is never touched by Rust code). Saves them in a RetRegs,
// calls graph_return (which yields the real return address), restores them
// and jumps there through r11. Everything else is dead at a return or
// callee-saved in Rust.
super::layout::graph_asm!(
    ".pushsection .text.shadowgraph_fgraph,\"ax\",@progbits",
    ".globl shadowgraph_return_to_handler",
    ".hidden shadowgraph_return_to_handler",
    "shadowgraph_return_to_handler:",
    "endbr64",
    // The registered sole path first, if any; it comes back to the
    // general one below for anything unusual. (r11 is dead at a return.)
    "mov r11, qword ptr [rip + {sole_return}]",
    "test r11, r11",
    "jz 1f",
    "jmp r11",
    "1:",
    ".globl shadowgraph_return_general",
    ".hidden shadowgraph_return_general",
    "shadowgraph_return_general:",
    return_body!(),
    "jmp r11",
    ".popsection";
    ret = sym graph_return,
    sole_return = sym SOLE_HIJACKED_RETURN,
);

extern "C" {
    fn shadowgraph_return_to_handler();
}

/// The address hijacked return slots hold.
pub fn return_to_handler() -> usize {
    shadowgraph_return_to_handler as *const () as usize
}

/// Whether a return slot holding `addr` was taken over by us: hijacked
/// (`return_to_handler`) or filled by a site stub's call (its return
/// point); the real address is then in a shadow frame.
pub fn is_hijack(addr: usize) -> bool {
    addr == return_to_handler() || crate::tramp::is_stub_return(addr)
}

pub(super) extern "C" fn graph_return(r: &mut RetRegs) -> usize {
    // Anchored at the returning call's slot.
    let slot = r.rsp - 8;
    if let Some(_b) = Bracket::enter_at_rest(slot) {
        let _e = ErrnoGuard::save();
        let t = thread();
        if let Some(f) = t.frame_below(t.curr.get()) {
            if t.word(f + 2) as usize == slot {
                let w = t.word(f + stack::FRAME_WORDS);
                // Acquire: the user's fields, published before it.
                let fast = FAST.load(Ordering::Acquire);
                // SAFETY: as in manager_tramp_entry.
                if !fast.is_null() && w == unsafe { &*fast }.frame_word.load(Ordering::Relaxed) {
                    if let Some(bit) = lock_graph(t, true) {
                        // SAFETY: as above.
                        return return_fast(t, f, w, unsafe { &*fast }, r, bit);
                    }
                }
            }
        }
        return return_general(t, slot, r);
    }
    let _b = Bracket::enter_at(slot);
    let _e = ErrnoGuard::save();
    return_general(thread(), slot, r)
}

/// The single user's return: the top frame is the returning call's and was
/// kept for `u` alone, which is still the sole user (its `frame_word`
/// names its slot and epoch).
#[inline(always)]
pub(super) fn return_fast(
    t: &ThreadState,
    f: usize,
    w: u64,
    u: &GraphUser,
    r: &RetRegs,
    bit: u32,
) -> usize {
    // Users taken before the callback runs, as in finish_frame.
    t.set_word(f + stack::FRAME_WORDS, w & !(0xffff << 12));
    let ev = GraphReturn {
        func: t.frame_func(f),
        depth: t.frame_depth(f) as i32,
        retval: r.rax,
        overrun: t.overrun.get(),
        unwound: false,
    };
    (u.ret)(&ev, u, r);
    unlock_graph(t, bit);
    let ret = t.word(f) as usize;
    // The frame is read before the pop frees its words for a handler's
    // (this thread's own: the compiler alone may reorder).
    compiler_fence(Ordering::SeqCst);
    t.curr.set(f);
    ret
}

/// The return of the call whose return slot is `slot`, any number of users,
/// inside the bracket.
#[inline(always)]
pub(super) fn return_general(t: &ThreadState, slot: usize, r: &RetRegs) -> usize {
    let f = match t.frame_below(t.curr.get()) {
        Some(top) if t.word(top + 2) as usize == slot => top,
        _ => match unwind_to(t, slot, r) {
            Some(f) => f,
            None => return revive(t, slot),
        },
    };
    let ret = t.word(f) as usize;
    finish_frame(t, f, r, false);
    ret
}

/// The frame whose return slot is `slot` lies below the top: the frames
/// above it were skipped by a non-local exit (longjmp), or belong to
/// another stack the program switched away from. Report and pop them;
/// returns the matching frame, or `None` (nothing popped) when no live
/// frame has that slot.
#[cold]
pub(super) fn unwind_to(t: &ThreadState, slot: usize, r: &RetRegs) -> Option<usize> {
    let mut top = t.curr.get();
    let f = loop {
        let start = t.frame_below(top)?;
        if t.word(start + 2) as usize == slot {
            break start;
        }
        top = start;
    };
    while let Some(start) = t.frame_below(t.curr.get()) {
        if start == f {
            break;
        }
        finish_frame(t, start, r, true);
    }
    Some(f)
}

/// A hijacked return whose frame was popped as unwound, though its
/// function was alive on a stack the program had switched away from
/// (swapcontext, coroutines): its exit was reported then; it resumes at
/// the real address remembered for its slot.
#[cold]
pub(super) fn revive(t: &ThreadState, slot: usize) -> usize {
    match t.graves().and_then(|g| g.find(slot, true)) {
        Some(ret) => {
            REVIVED_FRAMES.fetch_add(1, Ordering::Relaxed);
            ret
        }
        None => fatal_no_frame(slot),
    }
}

/// Returns of frames popped early (see [`stack::Graves`]).
pub(super) static REVIVED_FRAMES: AtomicU64 = AtomicU64::new(0);

/// Runs the return callbacks of the frame at `f` (the top one) and pops it.
#[inline(always)]
pub(super) fn finish_frame(t: &ThreadState, f: usize, r: &RetRegs, unwound: bool) {
    let w = t.word(f + stack::FRAME_WORDS);
    let depth = t.frame_depth(f);
    if unwound {
        if let Some(g) = t.graves() {
            g.bury(t.word(f + 2) as usize, t.word(f) as usize);
        }
    }
    if let Some(bit) = lock_graph(t, false) {
        let ev = GraphReturn {
            func: t.frame_func(f),
            depth: depth as i32,
            retval: r.rax,
            overrun: t.overrun.get(),
            unwound,
        };
        let (users, epoch) = if stack::type_of(w) == stack::TYPE_BITMAP {
            (stack::bitmap_users(w), stack::bitmap_epoch(w))
        } else {
            (0, 0)
        };
        if unwound {
            offer_unowned(&ev, r, users);
        }
        return_all(t, &ev, r, (users, epoch), f);
        unlock_graph(t, bit);
    } else if stack::bitmap_users(w) != 0 {
        // (Not reported: the frame goes without its users.)
        t.set_word(f + stack::FRAME_WORDS, w & !(0xffff << 12));
    }
    // As in the fast return: read, then pop.
    compiler_fence(Ordering::SeqCst);
    t.curr.set(f);
}

/// A frame a longjmp skipped, for the users it does not name, `named`
/// (a signal handler that never returned found it half made or half
/// finished: users not named yet, or no longer): offered to every other
/// registered user that asked for such frames
/// (`GraphUser::offer_unowned_unwinds`), each of which tells from its own
/// state whether the call was its own.
#[cold]
fn offer_unowned(ev: &GraphReturn, r: &RetRegs, named: u16) {
    // Acquire (here and in the loop): the registry's words, published
    // before the user and its bit (registry.rs).
    let mut occupied = OCCUPIED.load(Ordering::Acquire) & !(named as u32);
    while occupied != 0 {
        let i = occupied.trailing_zeros() as usize;
        occupied &= occupied - 1;
        // SAFETY: a published user outlives the grace period that follows
        // its slot's clearing; we are inside the bracket.
        if let Some(u) = unsafe { ARRAY[i].load(Ordering::Acquire).as_ref() } {
            if u.unowned_unwinds.load(Ordering::Relaxed) {
                (u.ret)(ev, u, r);
            }
        }
    }
}

/// The return callbacks of `users` (a frame's, pushed at `epoch`) for
/// `ev`, in slot order: not those of a slot owned by a user registered
/// since. The event's time is shared by all of them. Each user's bit is
/// taken from frame `f`'s BITMAP word just before its callback runs: if
/// one is left for good (siglongjmp out of a handler that interrupted
/// it), the frame, found dead later, reports no second return to it, and
/// its return to each user after it (a user with graph filters keeps its
/// nesting by them).
#[inline]
pub(super) fn return_all(
    t: &ThreadState,
    ev: &GraphReturn,
    r: &RetRegs,
    (users, epoch): (u16, u64),
    f: usize,
) {
    let mut bits = users;
    // Relaxed: this thread's word (its handlers see it in program order).
    t.event_time.store(stack::EVENT_OPEN, Ordering::Relaxed);
    while bits != 0 {
        let i = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        // (The word is this thread's; its handlers' frames lie above.)
        let at = f + stack::FRAME_WORDS;
        t.set_word(at, t.word(at) & !(1 << (12 + i)));
        // Acquire: the registry's words, published before the user.
        let u = ARRAY[i].load(Ordering::Acquire);
        if !u.is_null() && SLOT_EPOCH[i].load(Ordering::Acquire) <= epoch {
            // SAFETY: published users outlive the grace period after
            // their slot is cleared; we are inside the bracket.
            let u = unsafe { &*u };
            (u.ret)(ev, u, r);
        }
    }
    t.event_time.store(0, Ordering::Relaxed);
}

#[cold]
pub(super) fn fatal_no_frame(_slot: usize) -> ! {
    LOST_FRAMES.fetch_add(1, Ordering::Relaxed);
    let msg: &[u8] =
        b"shadowgraph: fatal: a hijacked return has no shadow frame; no safe address to resume\n";
    // SAFETY: write(2) of a static buffer (no allocation here), then abort.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}
