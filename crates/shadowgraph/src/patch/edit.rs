//! One site rewrite (an edit): the bytes expected and the bytes written,
//! and what the SIGTRAP handler does for a thread that traps on it.

use crate::site::{decode_call, decode_jmp, encode_call, hex, NOP5};
use std::fmt;

/// One site rewrite: `old` must be in memory, `new` replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edit {
    /// The site's address.
    pub addr: usize,
    pub(super) len: u8,
    pub(super) old: [u8; 8],
    pub(super) new: [u8; 8],
}

impl Edit {
    /// Replace `old` by `new` (same length, 1..=8 bytes). Only for pairs of
    /// instructions that may be swapped live (see the module comment).
    pub fn new(addr: usize, old: &[u8], new: &[u8]) -> Edit {
        assert!(old.len() == new.len() && (1..=8).contains(&old.len()));
        let mut e = Edit {
            addr,
            len: old.len() as u8,
            old: [0; 8],
            new: [0; 8],
        };
        e.old[..old.len()].copy_from_slice(old);
        e.new[..new.len()].copy_from_slice(new);
        e
    }

    /// NOP5 → `call target`; `None` if `target` is out of `rel32` reach.
    pub fn enable(addr: usize, target: usize) -> Option<Edit> {
        Some(Edit::new(addr, &NOP5, &encode_call(addr, target)?))
    }

    /// `call target` → NOP5.
    pub fn disable(addr: usize, target: usize) -> Option<Edit> {
        Some(Edit::new(addr, &encode_call(addr, target)?, &NOP5))
    }

    /// `call from` → `call to`.
    pub fn retarget(addr: usize, from: usize, to: usize) -> Option<Edit> {
        Some(Edit::new(
            addr,
            &encode_call(addr, from)?,
            &encode_call(addr, to)?,
        ))
    }

    /// The bytes expected at the site.
    pub fn old(&self) -> &[u8] {
        &self.old[..self.len as usize]
    }

    /// The bytes written.
    pub fn new_bytes(&self) -> &[u8] {
        &self.new[..self.len as usize]
    }

    /// What a thread trapping on byte 0 must do instead of the new bytes.
    pub(super) fn emulation(&self) -> Emulation {
        if self.len == 5 {
            if let Some(target) = decode_call(self.addr, self.new_bytes()) {
                return Emulation::Call {
                    target,
                    ret: self.addr + 5,
                };
            }
            if let Some(target) = decode_jmp(self.addr, self.new_bytes()) {
                return Emulation::Jump(target);
            }
        }
        // Every other new form is a nop over the whole span.
        Emulation::Resume(self.addr + self.len as usize)
    }
}

/// Why a batch was refused. Nothing was written in any case.
#[derive(Debug)]
pub enum PatchError {
    /// A site did not hold the expected bytes.
    Mismatch {
        /// The site.
        addr: usize,
        /// The bytes the edit expected there.
        expected: Vec<u8>,
        /// The bytes there.
        found: Vec<u8>,
    },
    /// Two edits of the batch overlap.
    Overlap(usize),
    /// The text could not be made writable or written.
    Io(String),
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatchError::Mismatch {
                addr,
                expected,
                found,
            } => write!(
                f,
                "site {addr:#x} holds {} instead of {}: batch refused, nothing written",
                hex(found, 8),
                hex(expected, 8)
            ),
            PatchError::Overlap(a) => write!(f, "two edits overlap at {a:#x}"),
            PatchError::Io(e) => write!(f, "cannot write code: {e}"),
        }
    }
}

impl std::error::Error for PatchError {}

/// What a SIGTRAP on byte 0 of a site in the active batch does.
#[derive(Clone, Copy, Debug)]
pub(super) enum Emulation {
    /// `call target`: push `ret`, continue at `target`.
    Call { target: usize, ret: usize },
    /// `jmp target` (a site's own stub).
    Jump(usize),
    /// A nop: continue here.
    Resume(usize),
}
