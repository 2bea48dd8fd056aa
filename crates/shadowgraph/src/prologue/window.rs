//! A function's window and the reasons for refusing one.

use std::fmt;

/// The bytes a patched window is given: `jmp rel32`.
pub const PATCH_LEN: usize = 5;

/// A function's window: where it is patched and what is copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// The function's entry (its symbol's address), link time.
    pub entry: u64,
    /// Where the patch goes: the entry, after an `endbr64`.
    pub at: u64,
    /// Bytes of whole instructions copied from `at` (at least
    /// [`PATCH_LEN`], or fewer for a short function ended by its own
    /// return or jump).
    pub len: usize,
    /// The copy ends in a return, a jump or a call (whose return comes
    /// back to the function): no jump back after it.
    pub ends: bool,
}

/// Why a function cannot be patched at its prologue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// A branch at the address given lands on bytes 1–4 of the window.
    BranchIntoWindow(u64),
    /// A jump table entry (used by the indirect jump at the address
    /// given) lands on bytes 1–4 of the window.
    TableIntoWindow(u64),
    /// A jump inside the function (at the address given) goes back to its
    /// entry: a loop, which a patched entry would count as calls.
    LoopToEntry(u64),
    /// Another function of the object calls it (or jumps to it) directly,
    /// at the address given, and it leaves alone some call-clobbered
    /// register that the tracer's paths change: gcc's `-fipa-ra` (on at
    /// `-O2`) lets such a caller keep a value there across the call.
    CalledDirectly(u64),
    /// A call in the window would return inside bytes 1–4.
    CallInWindow,
    /// The instruction at the address given cannot be decoded.
    Undecodable(u64),
    /// The window cannot be relocated (the reason given).
    Unrelocatable(String),
    /// Shorter than five bytes, with no free filler after it.
    TooShort,
    /// The window runs into the next function.
    RunsIntoNext,
    /// Not in an executable section.
    NotExecutable,
    /// Where it ends is not known: its symbol has no size and nothing
    /// follows it in its section.
    NoSize,
}

impl Refusal {
    /// The reason's short name, for counts by reason.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::BranchIntoWindow(_) => "branch into the patched bytes",
            Refusal::TableIntoWindow(_) => "jump table into the patched bytes",
            Refusal::LoopToEntry(_) => "loop to the entry",
            Refusal::CalledDirectly(_) => "called directly (gcc -fipa-ra)",
            Refusal::CallInWindow => "call inside the patched bytes",
            Refusal::Undecodable(_) => "undecodable",
            Refusal::Unrelocatable(_) => "not relocatable",
            Refusal::TooShort => "too short",
            Refusal::RunsIntoNext => "runs into the next function",
            Refusal::NotExecutable => "not executable",
            Refusal::NoSize => "no size",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::BranchIntoWindow(a) => {
                write!(f, "a branch at {a:#x} lands inside the patched bytes")
            }
            Refusal::TableIntoWindow(a) => write!(
                f,
                "a jump table used at {a:#x} lands inside the patched bytes"
            ),
            Refusal::LoopToEntry(a) => write!(f, "a jump at {a:#x} loops back to the entry"),
            Refusal::CalledDirectly(a) => write!(
                f,
                "called directly at {a:#x}, and leaves registers alone in which \
                 gcc's -fipa-ra lets its callers keep values"
            ),
            Refusal::CallInWindow => f.write_str("a call returns inside the patched bytes"),
            Refusal::Undecodable(a) => write!(f, "cannot decode the instruction at {a:#x}"),
            Refusal::Unrelocatable(why) => write!(f, "cannot relocate: {why}"),
            Refusal::TooShort => f.write_str("shorter than 5 bytes with no free filler after it"),
            Refusal::RunsIntoNext => f.write_str("the patched bytes run into the next function"),
            Refusal::NotExecutable => f.write_str("not in an executable section"),
            Refusal::NoSize => f.write_str("where it ends is not known"),
        }
    }
}
