//! The table the plain entry that records arguments (plain_args.rs)
//! reads: each site's descriptor by site id, in that entry's terms (its
//! module description), which also chooses the sites whose stubs call it.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// The descriptors of the sites the plain entry records arguments of, by
/// site id (0: none); null until [`set_plain_args`]. Never freed.
pub(super) static PLAIN_ARGS: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());
/// [`PLAIN_ARGS`]'s length.
pub(super) static PLAIN_ARGS_LEN: AtomicU64 = AtomicU64::new(0);

/// The entry's restartable sequences the kernel aborted, all threads
/// (counted apart from the other paths': the sign, where a recording's
/// info shows it, that its calls took this entry).
pub(super) static ARGS_RESTARTS: AtomicU64 = AtomicU64::new(0);

/// Descriptor byte 0's bit: an argument is in an xmm register.
pub(super) const HAS_FLOAT: u64 = 0x80;

/// Descriptor byte 0's bit: the arguments are `arg1`, `arg2`, … in
/// order, each the whole 8 bytes of its register.
pub(super) const IN_ORDER: u64 = 0x40;

/// Descriptor byte 0's bit: the arguments are `arg1`, `arg2`, … in
/// order, each the low 4 bytes of its register; with [`ODD`], of an odd
/// number (the 4 bytes after the last are padding, zeroed).
pub(super) const IN_ORDER4: u64 = 0x20;
/// See [`IN_ORDER4`].
pub(super) const ODD: u64 = 0x10;

/// The masks an argument's register is kept by, by its byte's bits 4–5.
pub(super) static ARG_MASKS: [u64; 4] = [0xffff_ffff, 0xff, 0xffff, u64::MAX];

/// One argument's byte of [`super::fast_args`]'s descriptor in the
/// entry's terms (plain_args.rs describes them).
fn entry_byte(a: u64) -> u64 {
    let at = (a & 7) | (a & 0x40) >> 3;
    let mask = match a & 0x38 {
        0x10 => 1,
        0x20 => 2,
        x if x & 8 != 0 => 3,
        _ => 0,
    };
    0x80 | (a & 8) << 3 | mask << 4 | at
}

/// Publishes `descs` (each site's [`super::fast_args`] descriptor, 0:
/// none) as the plain entry's table, leaked. Before the manager is made:
/// its stubs choose their entry by it ([`entry_of`]).
pub(super) fn set_plain_args(descs: &[u64]) {
    let table: Vec<u64> = descs
        .iter()
        .map(|&d| {
            let args = (1..8)
                .map(|k| (d >> (8 * k)) & 0xff)
                .filter(|a| a & 0x80 != 0);
            let (mut out, mut float, mut n) = (d & 15, false, 0);
            let (mut in_order, mut in_order4) = (true, true);
            for (k, a) in args.enumerate() {
                float |= a & 0x40 != 0;
                let e = entry_byte(a);
                // Present, 8 bytes, kept whole, register k; or 4 bytes.
                in_order &= e == 0xf0 | k as u64;
                in_order4 &= e == 0x80 | k as u64;
                out |= e << (8 * (k + 1));
                n = k + 1;
            }
            match d {
                0 => 0,
                _ if in_order => out | IN_ORDER,
                _ if in_order4 => out | IN_ORDER4 | if n % 2 == 1 { ODD } else { 0 },
                _ => out | if float { HAS_FLOAT } else { 0 },
            }
        })
        .collect();
    let table = Box::leak(table.into_boxed_slice());
    // Relaxed (both): read by stubs made after the manager, which is made
    // later under fgraph's lock; the assembly reads them through stubs
    // published after that.
    PLAIN_ARGS_LEN.store(table.len() as u64, Ordering::Relaxed);
    PLAIN_ARGS.store(table.as_mut_ptr(), Ordering::Relaxed);
}

/// Which entry site `id`'s stub calls: 0 the plain one (no arguments),
/// 1 the descriptor's (plain_args.rs), 2–7 the one for its first 1–6
/// registers whole, 8–13 for their low halves (plain_regs.rs).
pub(super) fn entry_of(id: crate::ftrace::SiteId) -> usize {
    let (p, n) = (
        PLAIN_ARGS.load(Ordering::Relaxed),
        PLAIN_ARGS_LEN.load(Ordering::Relaxed),
    );
    if p.is_null() || id as u64 >= n {
        return 0;
    }
    // SAFETY: a leaked table of `n` words, never freed or changed.
    let d = unsafe { *p.add(id as usize) };
    let words = (d & 15) as usize;
    match d {
        0 => 0,
        _ if d & IN_ORDER != 0 && (1..=6).contains(&words) => 1 + words,
        _ if d & IN_ORDER4 != 0 => match 2 * words - (d & ODD != 0) as usize {
            n @ 1..=6 => 7 + n,
            _ => 1,
        },
        _ => 1,
    }
}
