//! The SIGTRAP handler: emulates a site's new instruction for a thread that
//! hit the temporary `int3`, hands a probe's trap to its hook
//! (probes.rs), and every other trap to the handler the program (or a
//! debugger stub) installed.

use super::edit::Emulation;
use super::published::{
    known_contains, ACTIVE, READERS, TRAPS_CHAINED, TRAPS_EMULATED, TRAPS_LATE,
};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The disposition to chain to. Double-buffered: `set_previous` writes
/// the slot not in use, then flips `PREV_INDEX` (writers are serialised
/// by `PREV_LOCK`).
struct Previous(UnsafeCell<[libc::sigaction; 2]>);
// SAFETY: written only under PREV_LOCK into the inactive slot; readers
// copy the active slot.
unsafe impl Sync for Previous {}

// SAFETY: an all-zero sigaction is a valid value (SIG_DFL, empty mask).
static PREV: Previous = Previous(UnsafeCell::new(unsafe { std::mem::zeroed() }));
static PREV_INDEX: AtomicUsize = AtomicUsize::new(0);
static PREV_LOCK: Mutex<()> = Mutex::new(());

static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Whether our SIGTRAP handler has been installed.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Acquire)
}

/// The address of our SIGTRAP handler, to recognise it.
pub fn handler_address() -> usize {
    on_sigtrap as *const () as usize
}

/// Whether the kernel's SIGTRAP disposition is still our handler (asked
/// of the kernel itself: a `sigaction` interposer would answer with the
/// program's own request).
pub fn handler_intact() -> bool {
    // The kernel's struct sigaction: handler, flags, restorer, mask.
    let mut k = [0usize; 4];
    // SAFETY: rt_sigaction with a null new action only writes the
    // current one into `k`, which is as large as the kernel's struct
    // with its 8-byte mask.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            libc::SIGTRAP,
            std::ptr::null::<usize>(),
            k.as_mut_ptr(),
            8usize,
        )
    };
    r == 0 && k[0] == handler_address()
}

pub(super) fn install() {
    let _g = PREV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: zeroed sigaction is valid; the handler has the SA_SIGINFO
    // signature; `old` receives the previous disposition, stored in the
    // inactive slot before ours becomes active.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigtrap as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        let slot = 1 - PREV_INDEX.load(Ordering::Relaxed);
        let prev = &mut (*PREV.0.get())[slot];
        libc::sigaction(libc::SIGTRAP, &sa, prev);
        // Release: the slot's disposition is written before readers
        // (Acquire) switch to it.
        PREV_INDEX.store(slot, Ordering::Release);
    }
    // Release: the handler and the chained disposition are in place.
    INSTALLED.store(true, Ordering::Release);
}

/// Records the disposition a program asked for while ours stays
/// installed (used by the agent's `sigaction` interposer).
pub fn set_previous(action: &libc::sigaction) {
    let _g = PREV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let slot = 1 - PREV_INDEX.load(Ordering::Relaxed);
    // SAFETY: the inactive slot is not read by handlers that loaded the
    // index after the last flip; writers are serialised by PREV_LOCK.
    unsafe { (*PREV.0.get())[slot] = *action };
    PREV_INDEX.store(slot, Ordering::Release);
}

/// The SIGTRAP disposition the patcher's handler chains to.
pub fn previous() -> libc::sigaction {
    // SAFETY: copies the active slot (see `Previous`).
    unsafe { (*PREV.0.get())[PREV_INDEX.load(Ordering::Acquire)] }
}

const SI_KERNEL: i32 = 0x80;

/// Whether a trap at a site is a probe's, whose hook has run (a
/// `fn(usize) -> bool`, set by probes.rs; 0: there are none).
static PROBE_HIT: AtomicUsize = AtomicUsize::new(0);

/// Traps at sites that no batch explains go to `hit` first (probes.rs).
pub(super) fn set_probe_hit(hit: fn(usize) -> bool) {
    // Release: whatever `hit` reads was published before.
    PROBE_HIT.store(hit as usize, Ordering::Release);
}

fn probe_hit(site: usize) -> bool {
    // Acquire: pairs with `set_probe_hit`.
    let f = PROBE_HIT.load(Ordering::Acquire);
    if f == 0 {
        return false;
    }
    // SAFETY: only `set_probe_hit` stores non-zero values, from a
    // `fn(usize) -> bool`.
    let hit = unsafe { std::mem::transmute::<usize, fn(usize) -> bool>(f) };
    hit(site)
}

extern "C" fn on_sigtrap(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let uc = ctx as *mut libc::ucontext_t;
    // SAFETY: the kernel passes valid siginfo and ucontext pointers to an
    // SA_SIGINFO handler.
    let (code, pc) = unsafe {
        (
            (*info).si_code,
            (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] as usize,
        )
    };
    // `int3` reports SI_KERNEL with the PC after the 0xCC byte.
    if code == SI_KERNEL && pc > 0 {
        let site = pc - 1;
        READERS.fetch_add(1, Ordering::SeqCst);
        let batch = ACTIVE.load(Ordering::SeqCst);
        let emulation = if batch.is_null() {
            None
        } else {
            // SAFETY: `retire` frees a batch (and `apply` returns, ending
            // the edits' borrow) only after READERS drops to zero
            // following its swap, so both stay valid here.
            let edits = unsafe { std::slice::from_raw_parts((*batch).edits, (*batch).len) };
            edits
                .binary_search_by_key(&site, |e| e.addr)
                .ok()
                .map(|i| edits[i].emulation())
        };
        // SeqCst: see `apply` (patch/mod.rs): the batch is read before the
        // count lets `retire` free it.
        READERS.fetch_sub(1, Ordering::SeqCst);
        if let Some(em) = emulation {
            // SAFETY: rewriting the interrupted context. For a call, the
            // word below rsp is free: no red zone is live at a function
            // entry, and the signal frame lies below the red zone.
            unsafe {
                let g = &mut (*uc).uc_mcontext.gregs;
                match em {
                    Emulation::Call { target, ret } => {
                        let sp = g[libc::REG_RSP as usize] as usize - 8;
                        *(sp as *mut usize) = ret;
                        g[libc::REG_RSP as usize] = sp as i64;
                        g[libc::REG_RIP as usize] = target as i64;
                    }
                    Emulation::Jump(to) | Emulation::Resume(to) => {
                        g[libc::REG_RIP as usize] = to as i64
                    }
                }
            }
            TRAPS_EMULATED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // SAFETY: a known site lies in mapped text.
        if known_contains(site) && unsafe { *(site as *const u8) } != 0xcc {
            // The batch finished before the signal arrived: run the
            // instruction that is there now.
            // SAFETY: as above, rewriting the interrupted context.
            unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] = site as i64 };
            TRAPS_LATE.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // An armed probe's (probes.rs): the thread resumes after it.
        if probe_hit(site) {
            return;
        }
    }
    TRAPS_CHAINED.fetch_add(1, Ordering::Relaxed);
    chain(sig, info, ctx);
}

fn chain(sig: i32, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = previous();
    let h = prev.sa_sigaction;
    if h == libc::SIG_IGN {
        return;
    }
    if h == libc::SIG_DFL {
        // Deliver with the default action (core dump): restore it and
        // re-raise; the signal stays blocked until we return.
        // SAFETY: plain signal-disposition calls, async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
            let _ = crate::sys::tgkill(crate::sys::gettid(), sig);
        }
        return;
    }
    // SAFETY: `h` is the handler the program installed, with the
    // signature its flags declare.
    unsafe {
        if prev.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(i32) = std::mem::transmute(h);
            f(sig);
        }
    }
}
