//! Words that one thread and its own signal handlers write (other threads
//! may only read them): updated by single instructions without `lock`,
//! which an interrupt cannot split and which cost no bus lock. A signal
//! handler of the thread runs between two instructions, never inside one,
//! so a read-modify-write done by one instruction is atomic for every
//! writer of the word.

use std::sync::atomic::AtomicU64;

/// Compare-and-exchange of a word only this thread and its signal handlers
/// write (others may only read it): one `cmpxchg` without `lock`, which
/// an interrupt cannot split and which costs no bus lock. Returns whether
/// `a` held `old` (and now holds `new`).
#[inline(always)]
pub fn exchange(a: &AtomicU64, old: u64, new: u64) -> bool {
    let prev: u64;
    // SAFETY: `a` is a valid, aligned u64; cmpxchg reads and maybe writes
    // it and sets rax and the flags (declared), nothing else.
    unsafe {
        std::arch::asm!(
            "cmpxchg qword ptr [{a}], {new}",
            a = in(reg) a.as_ptr(),
            new = in(reg) new,
            inout("rax") old => prev,
            options(nostack),
        );
    }
    prev == old
}

/// `*p -= 1` in one instruction (see [`add`]): whether it reached 0.
///
/// # Safety
/// As for [`add`].
#[inline(always)]
pub unsafe fn dec(p: *mut u64) -> bool {
    let zero: u8;
    // SAFETY: per the contract; the flags it sets are read at once.
    unsafe {
        std::arch::asm!(
            "dec qword ptr [{p}]",
            "setz {z}",
            p = in(reg) p,
            z = out(reg_byte) zero,
            options(nostack),
        );
    }
    zero != 0
}

/// `*p += v` in one instruction: a signal handler of this thread that adds
/// to the same word cannot interleave with it (a load, add and store could
/// lose the handler's addition). No `lock`: no other thread writes it.
///
/// # Safety
/// `p` must be valid, aligned and written only by this thread.
#[inline(always)]
pub unsafe fn add(p: *mut u64, v: u64) {
    // SAFETY: per the contract; the instruction touches `*p` and the flags.
    unsafe {
        std::arch::asm!("add qword ptr [{p}], {v}", p = in(reg) p, v = in(reg) v, options(nostack));
    }
}

/// `*p += v` for a u128, as `add` then `adc` on its halves: a handler that
/// runs between them adds its own value and carry whole, and the carry of
/// ours survives in the interrupted flags.
///
/// # Safety
/// As [`add`].
#[inline(always)]
pub unsafe fn add_u128(p: *mut u128, v: u128) {
    // SAFETY: per the contract; the two instructions touch `*p` and the
    // flags.
    unsafe {
        std::arch::asm!(
            "add qword ptr [{p}], {lo}",
            "adc qword ptr [{p} + 8], {hi}",
            p = in(reg) p,
            lo = in(reg) v as u64,
            hi = in(reg) (v >> 64) as u64,
            options(nostack),
        );
    }
}
