//! Holding the world from outside: a process whose threads may block
//! SIGTRAP (one joined late, by `record -p`, whose signal masks the agent
//! does not see) must never meet an `int3` of a batch, for the kernel ends
//! a thread that traps with SIGTRAP blocked. There, whoever can stop every
//! other thread of the process (the `shadowgraph` that holds them with
//! ptrace) registers a holder, and a batch is written by plain stores
//! while they are held instead: a held thread is at an instruction
//! boundary, and the edits keep their boundaries, so it resumes on the old
//! instruction or the new one.
//!
//! ```text
//!   patching thread                holder (outside)        other threads
//!   text lock, old bytes checked,
//!   pages planned (allocates)
//!   hold(Begin) ──────────────────► stops them all ───────► held
//!   pages opened, plain stores,
//!   pages closed, serialise
//!   hold(End) ────────────────────► lets them go ─────────► run on
//! ```
//!
//! Nothing between `Begin` and `End` allocates or takes a lock: a held
//! thread may be stopped holding one.
//!
//! The code grace periods of such a process ([`crate::stop`]) look at the
//! threads while they are held, where the kernel keeps their pc and sp,
//! rather than signal them.

use std::sync::atomic::{AtomicUsize, Ordering};

/// What a holder is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Stop every other thread of the process that runs the program's
    /// code; `true` once they are held.
    Begin,
    /// Let them run on (the answer is not looked at).
    End,
}

/// The holder (a `fn(Hold) -> bool`; 0: none).
static HOLDER: AtomicUsize = AtomicUsize::new(0);

/// Registers (or, with `None`, removes) the holder: from then on a batch
/// is written by plain stores while the holder holds the threads, when
/// it can (its `Begin` answers `true`), and by the int3 protocol when it
/// cannot. It is called on the patching thread, which must not be one it
/// stops, with the text lock held; it must not allocate between `Begin`
/// and its answer to `End`.
pub fn set_world_holder(holder: Option<fn(Hold) -> bool>) {
    // Release: pairs with `ask`'s Acquire (a function pointer; nothing
    // else is published with it).
    HOLDER.store(holder.map_or(0, |h| h as usize), Ordering::Release);
}

/// Whether a holder is registered.
pub(crate) fn exists() -> bool {
    HOLDER.load(Ordering::Relaxed) != 0
}

/// Asks the holder, if there is one: `Begin` answers whether the world is
/// held now.
pub(crate) fn ask(what: Hold) -> bool {
    let h = HOLDER.load(Ordering::Acquire);
    if h == 0 {
        return false;
    }
    // SAFETY: only `set_world_holder` stores non-zero values, from a
    // `fn(Hold) -> bool`.
    let f: fn(Hold) -> bool = unsafe { std::mem::transmute::<usize, fn(Hold) -> bool>(h) };
    f(what)
}
