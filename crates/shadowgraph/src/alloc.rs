//! A memory allocator over `mmap` for code that lives inside a traced
//! program (the agent's `#[global_allocator]`): what the tracer allocates
//! never comes from the program's `malloc`, which may be the program's own
//! (with weaker alignment than Rust relies on), may be traced, or may be in
//! any state when the tracer runs.
//!
//! Small blocks (up to 32 KiB, alignment up to a page) come from free lists
//! of power-of-two size classes, 16 B to 32 KiB, refilled by carving
//! 64 KiB anonymous mappings; a block of class `c` sits at an offset that is a multiple of
//! `min(c, page)` from a page-aligned mapping, so it is aligned for any
//! request whose alignment its class covers. Small blocks go back to their
//! list, never to the kernel. Larger blocks, and blocks aligned beyond a
//! page, are mappings of their own, unmapped when freed.
//!
//! One spin lock guards the lists. It is held for a few instructions and
//! never across a system call but the refill's `mmap`; nothing that runs
//! inside a traced call or a signal handler allocates (design §10), so no
//! handler can spin on a lock its own thread holds. A fork while another
//! thread holds it would leave the child's copy locked forever:
//! [`MmapAlloc::register_fork_handlers`] takes it around `fork`.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

const PAGE: usize = 4096;
/// log2 of the smallest class (16 B: what `malloc` guarantees).
const MIN_SHIFT: u32 = 4;
/// log2 of the largest class (32 KiB).
const MAX_SHIFT: u32 = 15;
const CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;
/// What one refill maps for the classes it fits several blocks of.
const REFILL: usize = 64 << 10;

/// A free block: the next one of its class.
struct Free {
    next: *mut Free,
}

/// The allocator. `MmapAlloc::new()` in a `static`, named by
/// `#[global_allocator]`.
pub struct MmapAlloc {
    lock: AtomicBool,
    /// Per class, its free blocks (guarded by `lock`).
    free: UnsafeCell<[*mut Free; CLASSES]>,
}

// SAFETY: `free` is read and written only with `lock` held (`with_lists`),
// which makes every access exclusive; the blocks it links are owned by the
// allocator until handed out.
unsafe impl Sync for MmapAlloc {}

impl MmapAlloc {
    /// An allocator with empty lists.
    pub const fn new() -> Self {
        MmapAlloc {
            lock: AtomicBool::new(false),
            free: UnsafeCell::new([ptr::null_mut(); CLASSES]),
        }
    }

    /// The class index of a small request, or `None` for a mapping of its
    /// own.
    fn class(layout: Layout) -> Option<usize> {
        if layout.align() > PAGE || layout.size() > 1 << MAX_SHIFT {
            return None;
        }
        let bytes = layout.size().max(layout.align()).max(1 << MIN_SHIFT);
        let shift = bytes.next_power_of_two().trailing_zeros();
        Some((shift - MIN_SHIFT) as usize)
    }

    fn lock(&self) {
        let mut spins = 0u32;
        // Acquire: the lists the previous holder wrote are seen whole.
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins & 63 == 0 {
                // The holder may be descheduled: let it run.
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            } else {
                std::hint::spin_loop();
            }
        }
    }

    fn unlock(&self) {
        // Release: this holder's writes to the lists happen before the next
        // holder's Acquire.
        self.lock.store(false, Ordering::Release);
    }

    /// `f` with the lists, under the lock.
    fn with_lists<R>(&self, f: impl FnOnce(&mut [*mut Free; CLASSES]) -> R) -> R {
        self.lock();
        // SAFETY: the lock is held: no other reference to the lists exists
        // until `unlock`.
        let r = f(unsafe { &mut *self.free.get() });
        self.unlock();
        r
    }

    /// Takes the allocator's lock around `fork` in every thread of the
    /// process, so that the child never starts with it held. Call once,
    /// before the process may fork with threads running; `me` must be the
    /// `static` the global allocator is.
    pub fn register_fork_handlers(me: &'static MmapAlloc) {
        use std::sync::atomic::AtomicPtr;
        static REGISTERED: AtomicPtr<MmapAlloc> = AtomicPtr::new(ptr::null_mut());
        // Relaxed: only which allocator is registered matters, and the
        // handlers below read it after pthread_atfork (a call that
        // synchronises) made them known. The first registration wins.
        let me = me as *const MmapAlloc as *mut MmapAlloc;
        if REGISTERED
            .compare_exchange(ptr::null_mut(), me, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        extern "C" fn prepare() {
            // SAFETY: REGISTERED holds a &'static MmapAlloc.
            if let Some(a) = unsafe { REGISTERED.load(Ordering::Relaxed).as_ref() } {
                a.lock();
            }
        }
        extern "C" fn after() {
            // SAFETY: as in `prepare`.
            if let Some(a) = unsafe { REGISTERED.load(Ordering::Relaxed).as_ref() } {
                a.unlock();
            }
        }
        // SAFETY: three plain extern "C" functions that never unwind.
        unsafe { libc::pthread_atfork(Some(prepare), Some(after), Some(after)) };
    }
}

impl Default for MmapAlloc {
    fn default() -> Self {
        Self::new()
    }
}

/// `len` bytes of fresh anonymous memory, page-aligned, or null.
fn map(len: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choosing touches no existing memory.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

fn round_to_page(n: usize) -> usize {
    (n + PAGE - 1) & !(PAGE - 1)
}

// SAFETY: every block handed out is either a whole block of a class at
// least as large and as aligned as the request, owned by nobody else until
// freed with the same layout (and so the same class), or a mapping of its
// own of at least the request's size at the request's alignment.
unsafe impl GlobalAlloc for MmapAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = Self::class(layout) else {
            return alloc_large(layout);
        };
        let got = self.with_lists(|free| {
            let head = free[class];
            if !head.is_null() {
                // SAFETY: a listed block is a free block of this class that
                // holds its successor.
                free[class] = unsafe { (*head).next };
            }
            head
        });
        if !got.is_null() {
            return got.cast();
        }
        // The list is empty: map a run of blocks outside the lock, keep the
        // first, list the rest.
        let size = 1usize << (class as u32 + MIN_SHIFT);
        let len = REFILL;
        let run = map(len);
        if run.is_null() {
            return run;
        }
        self.with_lists(|free| {
            for k in (1..len / size).rev() {
                let b = run.wrapping_add(k * size).cast::<Free>();
                // SAFETY: `b` is a block of the fresh mapping, inside it and
                // aligned for `Free` (16 B at least); nobody else knows it.
                unsafe { b.write(Free { next: free[class] }) };
                free[class] = b;
            }
        });
        run
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(class) = Self::class(layout) else {
            // SAFETY: (the caller's contract) `ptr` came from `alloc` with
            // this layout, so from `alloc_large`'s mapping of this length.
            unsafe { libc::munmap(ptr.cast(), round_to_page(layout.size())) };
            return;
        };
        self.with_lists(|free| {
            let b = ptr.cast::<Free>();
            // SAFETY: the block is ours again (the caller's contract), at
            // least 16 B and 16-aligned.
            unsafe { b.write(Free { next: free[class] }) };
            free[class] = b;
        });
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new) = Layout::from_size_align(new_size, layout.align()) else {
            return ptr::null_mut();
        };
        let (from, to) = (Self::class(layout), Self::class(new));
        if from.is_some() && from == to {
            return ptr; // the same block fits
        }
        if layout.align() > PAGE || from.is_some() || to.is_some() {
            // SAFETY: (the caller's contract) `ptr` came from `alloc` with
            // `layout`, and `new_size` is valid for it.
            return unsafe { default_realloc(self, ptr, layout, new_size) };
        }
        // A large block to a large block: its pages move with the mapping
        // (no copy, nothing touched again).
        let (old_len, new_len) = (round_to_page(layout.size()), round_to_page(new_size));
        if old_len == new_len {
            return ptr;
        }
        // SAFETY: `ptr` is the start of a mapping of `old_len` bytes of our
        // own (`alloc_large` at page alignment); MAYMOVE lets the kernel
        // place the result anywhere, leaving no other memory changed.
        let p = unsafe { libc::mremap(ptr.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
        if p == libc::MAP_FAILED {
            ptr::null_mut()
        } else {
            p.cast()
        }
    }
}

/// `GlobalAlloc::realloc`'s default: a new block, the bytes copied, the
/// old one freed.
///
/// # Safety
/// As `GlobalAlloc::realloc`.
unsafe fn default_realloc(a: &MmapAlloc, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    // SAFETY: the caller's contract makes the new layout valid.
    let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
    // SAFETY: a non-zero size (realloc's contract).
    let p = unsafe { a.alloc(new) };
    if !p.is_null() {
        // SAFETY: both blocks hold at least the smaller size and do not
        // overlap (the new one is fresh).
        unsafe { ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size)) };
        // SAFETY: `ptr` came from `alloc` with `layout`.
        unsafe { a.dealloc(ptr, layout) };
    }
    p
}

/// A mapping of its own: `size` rounded to pages, at `align` (the excess
/// of an over-sized mapping is unmapped).
fn alloc_large(layout: Layout) -> *mut u8 {
    let len = round_to_page(layout.size());
    if layout.align() <= PAGE {
        return map(len);
    }
    let Some(over) = len.checked_add(layout.align()) else {
        return ptr::null_mut();
    };
    let p = map(over);
    if p.is_null() {
        return p;
    }
    let start = (p as usize + layout.align() - 1) & !(layout.align() - 1);
    let (head, tail) = (start - p as usize, over - (start - p as usize) - len);
    // SAFETY: both ranges lie inside the fresh mapping and outside the block
    // handed out; page-aligned (align is a multiple of the page here).
    unsafe {
        if head > 0 {
            libc::munmap(p.cast(), head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
    }
    start as *mut u8
}
