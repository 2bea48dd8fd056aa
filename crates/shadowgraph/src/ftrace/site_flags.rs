//! Site flags (design §3.3). Plain flags are wanted; `_EN` flags say what
//! the code holds.

#![forbid(unsafe_code)]

/// Some enabled ops wants the site.
pub const ENABLED: u16 = 1 << 0;
/// An ops wants the registers variant (callee-saved registers too).
pub const REGS: u16 = 1 << 1;
/// The site calls the registers variant.
pub const REGS_EN: u16 = 1 << 2;
/// One ops alone wants the site: it may call the ops' own trampoline.
pub const TRAMP: u16 = 1 << 3;
/// The site calls an ops' own trampoline.
pub const TRAMP_EN: u16 = 1 << 4;
/// A direct-call ops wants the site.
pub const DIRECT: u16 = 1 << 5;
/// The site calls a direct-call target.
pub const DIRECT_EN: u16 = 1 << 6;
/// An ops that may change where the call resumes wants the site.
pub const IPMODIFY: u16 = 1 << 7;
/// The site cannot be patched (sticky).
pub const DISABLED: u16 = 1 << 8;
/// Sticky: was ever enabled.
pub const TOUCHED: u16 = 1 << 9;
/// Sticky: was ever attached by a DIRECT or IPMODIFY ops.
pub const MODIFIED: u16 = 1 << 10;
/// The site jumps to its own stub (with TRAMP: its ops is alone).
pub const STUB: u16 = 1 << 11;
/// The flags that stay once set.
pub const STICKY: u16 = DISABLED | TOUCHED | MODIFIED;
