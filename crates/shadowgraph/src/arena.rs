//! Trampoline arenas: executable memory within `call rel32` reach (±2 GiB)
//! of the sites that call into it (design §2.4).
//!
//! An arena is mapped with `MAP_FIXED_NOREPLACE` in a free gap of the address
//! space near an object's text. Code is written once into bytes no thread has
//! reached yet and is immutable afterwards; arena memory is never unmapped,
//! so a thread still running a retired trampoline never faults.

use crate::patch::{text_lock, PatchError, TextWindow};
use crate::sys;
use std::fmt;
use std::sync::Mutex;

/// Size of one arena.
pub const ARENA_SIZE: usize = 1 << 20;
/// Largest distance we accept between a site and an arena byte.
const REACH: usize = (1 << 31) - (1 << 16);

/// A region of trampoline memory.
#[derive(Debug)]
pub struct Arena {
    /// Its first byte's address.
    pub base: usize,
    /// Its length in bytes.
    pub size: usize,
    used: Mutex<usize>,
}

/// The arena could not be created or is full.
#[derive(Debug)]
pub enum ArenaError {
    /// No free gap of the address space lies within reach of the text.
    NoGap {
        /// Lowest address of the text to reach.
        lo: usize,
        /// Highest address of the text to reach.
        hi: usize,
    },
    /// Text wider than 2 GiB cannot share one arena.
    TextTooWide {
        /// Lowest address of the text.
        lo: usize,
        /// Highest address of the text.
        hi: usize,
    },
    /// Every byte of the arena is taken.
    Full,
    /// Its code could not be written.
    Write(PatchError),
    /// Mapping it failed.
    Io(std::io::Error),
}

impl fmt::Display for ArenaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArenaError::NoGap { lo, hi } => write!(
                f,
                "no free address range within ±2 GiB of text {lo:#x}..{hi:#x}: this object cannot be traced"
            ),
            ArenaError::TextTooWide { lo, hi } => {
                write!(f, "text {lo:#x}..{hi:#x} spans more than 2 GiB")
            }
            ArenaError::Full => write!(f, "trampoline arena full"),
            ArenaError::Write(e) => write!(f, "cannot write trampoline: {e}"),
            ArenaError::Io(e) => write!(f, "cannot read the memory map: {e}"),
        }
    }
}

impl std::error::Error for ArenaError {}

static ARENAS: Mutex<Vec<&'static Arena>> = Mutex::new(Vec::new());

impl Arena {
    /// An arena every byte of which is within `call rel32` reach of every
    /// address in `lo..hi`; reuses an existing one when possible.
    pub fn near(lo: usize, hi: usize) -> Result<&'static Arena, ArenaError> {
        Arena::near_with_room(lo, hi, 4096)
    }

    /// As [`Arena::near`], with at least `room` bytes (at most a quarter of
    /// an arena) still free in it.
    pub fn near_with_room(lo: usize, hi: usize, room: usize) -> Result<&'static Arena, ArenaError> {
        if hi - lo > REACH / 2 {
            return Err(ArenaError::TextTooWide { lo, hi });
        }
        if room > ARENA_SIZE / 4 {
            return Err(ArenaError::Full);
        }
        let mut arenas = ARENAS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = arenas
            .iter()
            .find(|a| a.reaches(lo, hi) && a.room() >= room)
        {
            return Ok(a);
        }
        let a: &'static Arena = Box::leak(Box::new(map_near(lo, hi)?));
        arenas.push(a);
        Ok(a)
    }

    /// Whether every byte of the arena is reachable from every site in `lo..hi`.
    pub fn reaches(&self, lo: usize, hi: usize) -> bool {
        let end = self.base + self.size;
        end.abs_diff(lo) < REACH && hi.abs_diff(self.base) < REACH
    }

    /// Bytes still free (before alignment).
    pub(crate) fn room(&self) -> usize {
        self.size - *self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies `code` into the arena (16-byte aligned) and returns its address.
    /// The bytes are written before any site can reach them.
    pub fn alloc_code(&self, code: &[u8]) -> Result<usize, ArenaError> {
        self.alloc_with(code.len(), |_| code.to_vec())
    }

    /// Reserves `len` bytes (16-byte aligned), fills them with `build(at)`
    /// (exactly `len` bytes of code for address `at`) and returns `at`.
    pub fn alloc_with(
        &self,
        len: usize,
        build: impl FnOnce(usize) -> Vec<u8>,
    ) -> Result<usize, ArenaError> {
        let at = {
            let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
            let mut start = (*used + 15) & !15;
            // Code that fits lies within one page and not at its first
            // byte: no page-aligned address is inside it. A stack word a
            // code grace period finds inside retired code is taken for a
            // thread still in it (stop::wait_code_quiescent), and stale
            // page addresses are what stacks hold most (the bounds of the
            // windows the patcher opens on these very pages). Larger code
            // (a block of site stubs) is never retired.
            let page = sys::page_size();
            if len > 0 && len + 16 <= page {
                if start.is_multiple_of(page) {
                    start += 16;
                }
                if start / page != (start + len - 1) / page {
                    start = (start / page + 1) * page + 16;
                }
            }
            if start + len > self.size {
                return Err(ArenaError::Full);
            }
            *used = start + len;
            self.base + start
        };
        let code = build(at);
        assert_eq!(code.len(), len, "arena code of the reserved length");
        let _text = text_lock();
        let window =
            TextWindow::open_known(at, at + code.len(), ARENA_PROT).map_err(ArenaError::Write)?;
        let r = window.write(at, &code);
        window.close();
        r.map_err(ArenaError::Write)?;
        Ok(at)
    }
}

/// An arena's protection, always (windows that write it restore this).
const ARENA_PROT: i32 = libc::PROT_READ | libc::PROT_EXEC;

fn map_near(lo: usize, hi: usize) -> Result<Arena, ArenaError> {
    let page = sys::page_size();
    let maps = sys::read_maps().map_err(ArenaError::Io)?;
    // Free gaps between mappings, nearest to the text first.
    let mut gaps: Vec<(usize, usize)> = Vec::new();
    let mut prev_end = 1usize << 16; // stay clear of the null page region
    for m in &maps {
        if m.start > prev_end {
            gaps.push((prev_end, m.start));
        }
        prev_end = prev_end.max(m.end);
    }
    gaps.push((prev_end, 0x7fff_ffff_0000));
    let mut candidates: Vec<usize> = Vec::new();
    for &(g_lo, g_hi) in &gaps {
        // Leave a guard page on both sides of neighbours.
        let (g_lo, g_hi) = (g_lo + page, g_hi.saturating_sub(page));
        if g_hi <= g_lo || g_hi - g_lo < ARENA_SIZE {
            continue;
        }
        // The candidate closest to the text within this gap.
        let c = if g_hi <= lo {
            (g_hi - ARENA_SIZE) & !(page - 1)
        } else if g_lo >= hi {
            (g_lo + page - 1) & !(page - 1)
        } else {
            continue;
        };
        candidates.push(c);
    }
    candidates.sort_by_key(|&c| if c < lo { lo - c } else { c - hi });
    for base in candidates {
        let a = Arena {
            base,
            size: ARENA_SIZE,
            used: Mutex::new(0),
        };
        if !a.reaches(lo, hi) {
            continue;
        }
        // SAFETY: anonymous private mapping at a free address;
        // MAP_FIXED_NOREPLACE never replaces an existing mapping.
        let p = unsafe {
            libc::mmap(
                base as *mut _,
                ARENA_SIZE,
                ARENA_PROT,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            continue;
        }
        if p as usize != base {
            // An old kernel took the flag as a hint; give the memory back.
            // SAFETY: p is the mapping just created, unused.
            unsafe { libc::munmap(p, ARENA_SIZE) };
            continue;
        }
        return Ok(a);
    }
    Err(ArenaError::NoGap { lo, hi })
}
