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
    /// Registers its stub keeps across the call (none for most).
    pub kept: Kept,
}

/// Call-clobbered registers that a function's stub keeps across a call of
/// it: those the tracer's paths may change that the function (with what
/// it calls) leaves alone, for a function called directly inside its
/// object, where gcc's `-fipa-ra` (on at `-O2`) lets the caller keep
/// values in them across the call. The stub saves them, calls the
/// function, and restores them when it returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Kept(u32);

/// The registers of [`Kept`], bit for bit.
const KEPT_NAMES: [&str; 21] = [
    "rcx", "rsi", "rdi", "r8", "r9", "r10", "r11", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
    "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",
];

impl Kept {
    /// The set of bits `bits` (bit i: the i-th of rcx rsi rdi r8 r9 r10
    /// r11 xmm2 … xmm15).
    pub(crate) const fn from_bits(bits: u32) -> Kept {
        Kept(bits & ((1 << KEPT_NAMES.len()) - 1))
    }

    /// Whether the stub keeps none.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many it keeps.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Their names (`rcx`, `xmm3`), in the order above.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        (0..KEPT_NAMES.len())
            .filter(move |i| self.0 & 1 << i != 0)
            .map(|i| KEPT_NAMES[i])
    }

    /// The general registers kept, then the vector ones.
    pub(crate) fn registers(self) -> (Vec<iced_x86::Register>, Vec<iced_x86::Register>) {
        use iced_x86::Register as R;
        const GENERAL: [R; 7] = [R::RCX, R::RSI, R::RDI, R::R8, R::R9, R::R10, R::R11];
        let general = (0..7).filter(|i| self.0 & 1 << i != 0).map(|i| GENERAL[i]);
        let vector = (7..21)
            .filter(|i| self.0 & 1 << i != 0)
            .map(|i| R::XMM2 + (i - 7));
        (general.collect(), vector.collect())
    }
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
    /// at the address given, so that its stub must keep registers for it
    /// ([`Kept`]), and it reads its caller's stack (arguments passed
    /// there), which a stub that calls it would move.
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
            Refusal::CalledDirectly(_) => "called directly with stack arguments",
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
                "called directly at {a:#x} (its caller may keep registers across the \
                 call: gcc -fipa-ra), and reads its caller's stack"
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
