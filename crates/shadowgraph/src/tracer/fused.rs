//! The recording tracer fused into fgraph's single-user path.
//!
//! When the only graph user is a recorder whose callbacks do nothing but
//! append an entry and an exit record to its thread's ring, declining calls
//! deeper than a limit if it has one (the agent's plain `record`, `-D`
//! included), or applying graph filters first (`-F`, `-N`: the same thread
//! variable as fgraph::filters, see [`attach_filtered`]), the manager's
//! trampolines and site stubs hand over to `shadowgraph_fused_entry` /
//! `shadowgraph_fused_site_entry`, and returns come back to
//! `shadowgraph_fused_return` / `shadowgraph_fused_site_return` (for site
//! stubs, the `_plain` copies without the per-call checks for rseq, a
//! depth limit and filters where attach finds none needed): each does
//! in a few dozen instructions what fgraph's Rust path and the callbacks do
//! — the bracket, the filters, the frame push or pop (with the return
//! hijack where sites call the trampolines), the record in the ring (a
//! restartable sequence where glibc registered rseq, else the same claim /
//! write / publish protocol as `Ring`: either way a signal handler may
//! record in between) — without saving the argument registers for Rust
//! code or calling it. Anything unusual for either (a thread not at rest,
//! no stack or ring yet, another user, frames a longjmp left, a full stack
//! or ring, a site the filter table does not know) goes the general way,
//! untouched: `shadowgraph_fused_general` or fgraph's site entry, and
//! `shadowgraph_return_general` or fgraph's site return.
//!
//! The `_plain` copies hold no bracket (the quiesce read side, and how a
//! signal handler knows it landed in our code): each writes its record in
//! one restartable sequence that rechecks the user (grace periods restart
//! such sequences: quiesce::fence_rseq_too) and records only where the
//! ring's depth is the call's: a handler landing between a frame and its
//! record finds them a level apart, and its calls are recorded where the
//! ring says the thread is ([`ring_depth_witness`]).
//!
//! The thread-local state is reached at its offset from the thread pointer
//! (initial-exec TLS: the same offset in every thread), computed once
//! (fgraph::init_tp_offsets and [`attach`]) and then written into this
//! code as immediates (`fixed_load!`, tls::patch_fixed_loads).

use crate::clock;
use crate::record::ring::{RingHeader, HEADER_BYTES};
use crate::record::writer;

use crate::fgraph::filters::GraphFilter;
use crate::fgraph::stack::ThreadState;
use crate::fgraph::{self, GraphUser};
use crate::ftrace::local::CoreLocal;
use crate::ftrace::quiesce;
use crate::tracer::profile::{ProfileCounters, ProfileTable};
use std::mem::offset_of;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

// The user's words this path reads (fgraph's `GraphUser::path_words`):
/// Calls at this depth or deeper are declined (`-D`); 0: no limit; the
/// sign bit: the filter table decides.
const W_MAX_DEPTH: usize = 0;
/// The graph filters applied, a [`FusedFilter`] (its callbacks apply the
/// same, as `fgraph::filters::GraphFilter`); 0: none.
const W_FILTER: usize = 1;
/// The time filter's threshold in TSC ticks (`-t`; its callbacks keep the
/// entry time in a reserved word), 0: none.
const W_MIN_TICKS: usize = 2;

/// Graph filters in the fused path's terms: each site's class (bit 0: a
/// function of `-F`, bit 1: of `-N`) by site id, whether there is a `-F`
/// set, and the depth limit (0: none). Sites added later (ids from `len`
/// on) go the general way. Never freed (a thread may still read it).
#[repr(C)]
pub(crate) struct FusedFilter {
    classes: *const u8,
    len: u64,
    has_functions: u64,
    max_depth: u64,
}

/// Offset from the thread pointer of the fused instance's ring in the
/// writer's thread-local rings (the core's and fgraph's state:
/// fgraph::TP_LOCAL, fgraph::TP_THREAD).
static TP_RINGS: AtomicI64 = AtomicI64::new(0);

/// Offset from the thread pointer of the `rseq_cs` field of the thread's
/// `struct rseq`, which glibc (2.35 on) registers with the kernel for every
/// thread it starts; 0: no rseq (older glibc or kernel, valgrind,
/// `GLIBC_TUNABLES=glibc.pthread.rseq=0`), and the fused path claims its
/// ring slots by `cmpxchg` (ring_record).
static RSEQ_CS: AtomicI64 = AtomicI64::new(0);

/// The `rseq_cs` field's offset from the thread pointer if glibc
/// registered rseq for its threads (looked up at run time: older glibc
/// lacks the symbols).
fn rseq_cs_offset() -> Option<i64> {
    // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names; the
    // symbols, where present, are glibc's `const ptrdiff_t __rseq_offset`
    // and `const unsigned int __rseq_size`, fixed after start-up.
    unsafe {
        let off = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) as *const isize;
        let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()) as *const u32;
        if off.is_null() || size.is_null() || *size < 16 {
            return None;
        }
        // struct rseq { u32 cpu_id_start; u32 cpu_id; u64 rseq_cs; … }
        Some(*off as i64 + 8)
    }
}

/// Restartable sequences the kernel aborted (the thread was preempted or
/// signalled inside one), all threads.
static RSEQ_RESTARTS: AtomicU64 = AtomicU64::new(0);

/// The depth a record holds at most (10 bits). The general way records
/// deeper calls at this depth; the fused paths leave them to it (a deeper
/// depth would run into the record's function address).
const MAX_RECORD_DEPTH: u32 = 1023;

/// Whether the fused path's plain site entry and return are on. They hold
/// no bracket, so a signal handler that lands in them runs at rest, as
/// far as the bracket says. They record where the ring's depth is the
/// call's (an entry's depth, an exit's depth + 1), and an entry also where
/// the ring is one level above its frames (a handler's call that landed
/// between a frame's push and its entry record, or between an exit record
/// and the frame's pop), at the ring's depth, which its frame then keeps.
/// A recorder's callbacks must do as they do inside a handler whenever the
/// ring is out of step with the depth they are given: record at the
/// ring's depth (`Depth::Follow`), which is where the thread is.
pub fn ring_depth_witness() -> bool {
    fgraph::chosen_site_entry() == shadowgraph_fused_site_entry_plain as *const () as usize
}

/// Whether the fused path claims ring slots by restartable sequences.
pub fn uses_rseq() -> bool {
    RSEQ_CS.load(Ordering::Relaxed) != 0
}

/// How many records the fused path started again (or, on the plain
/// entry, sent the general way) because the kernel aborted their
/// restartable sequence.
pub fn rseq_restarts() -> u64 {
    RSEQ_RESTARTS.load(Ordering::Relaxed)
}

/// Offset from the thread pointer of the profile's table pointer of this
/// thread ([`attach_profile`]), and how many rows each table has.
static TP_PROFILE: AtomicI64 = AtomicI64::new(0);
static PROFILE_ROWS: AtomicU64 = AtomicU64::new(0);

/// A time-filtered call (`-t`) keeps one word in its shadow frame until its
/// duration is known: the entry's timestamp, and this bit once its entry
/// record is written (a descendant was long enough, so it is too). The
/// function and depth of the record come from the frame and its nesting.
pub const ENTRY_WRITTEN: u64 = 1 << 63;
/// In the same word: the call returned too short to record. A signal
/// handler that lands before its frame is popped and releases its callers
/// passes over it (its exit was decided: writing its entry then would leave
/// an entry without an exit).
pub const ENTRY_DROPPED: u64 = 1 << 62;
/// The word while the entry reads the clock: a signal handler that lands
/// then (often: `rdtsc` is slow, and a signal waits for it to finish) and
/// records, writes this call's entry first, at the entry time of the
/// call's nearest timed descendant (one of the handler's), and marks it
/// written; the entry's time, older than the handler's records, is then
/// not kept. (A word still 0 belongs to a call whose entry has not begun
/// to time it: its time will be later than the handler's records, and the
/// handler passes over it.)
pub const ENTRY_TIMING: u64 = 1 << 61;
/// The flag bits of the word; the rest is a time.
pub const ENTRY_FLAGS: u64 = ENTRY_WRITTEN | ENTRY_DROPPED | ENTRY_TIMING;

extern "C" {
    fn shadowgraph_fused_profile_entry();
    fn shadowgraph_fused_profile_return();
    fn shadowgraph_fused_timed_entry();
    fn shadowgraph_fused_timed_return();
    fn shadowgraph_fused_entry();
    fn shadowgraph_fused_return();
    fn shadowgraph_fused_site_entry();
    fn shadowgraph_fused_site_return();
    fn shadowgraph_fused_site_entry_plain();
    fn shadowgraph_fused_site_return_plain();
}

/// Makes `user` — a graph user whose entry callback declines calls at
/// depth `max_depth` or deeper (0: none) and otherwise only emits an entry
/// record, and whose return callback only emits an exit record (depth and
/// function as fgraph gives them), to recording instance `inst` — eligible
/// for the fused path, and turns the path on. Call before the first graph
/// user registers (the manager's trampolines are made then). Returns false
/// (nothing changed) when the records are not timed by the TSC, `inst` is
/// out of range, or a graph user registered already.
///
/// The plain site path reads nothing of the user but its frame word, a
/// copy in fgraph::SOLE_FRAME_WORD (a value its restartable sequences
/// check again, which grace periods restart): the user goes as any other.
pub fn attach(user: &GraphUser, inst: usize, max_depth: u32) -> bool {
    attach_inner(user, inst, max_depth, None, None)
}

/// [`attach`] for a recorder whose callbacks apply `filter` (its functions,
/// notrace sets and depth limit; no thread filter) with
/// `GraphFilter::entry_with(.., false)` and `GraphFilter::ret`, and emit
/// the records at the depths those give. The fused path applies the same
/// filters at sites with stubs. False (nothing changed) as for `attach`,
/// or with a thread filter.
pub fn attach_filtered(user: &GraphUser, inst: usize, filter: &GraphFilter) -> bool {
    // Refused before the table is made (it is never freed).
    if filter.threads.is_some()
        || !clock::uses_tsc()
        || inst >= writer::MAX_INSTANCES
        || fgraph::manager_made()
    {
        return false;
    }
    attach_inner(user, inst, 0, Some(filter_table(filter)), None)
}

/// [`attach`] for a profile (`--tracer profile`) alone: `user`'s entry
/// callback reserves 24 bytes of the frame, `{start, children, site id}`
/// (the id's row of this thread's table counted under way), and its return
/// callback adds the call's duration `d` to its caller's `children` (the
/// frame below, if its own) and to the row (hits, total, self = d −
/// children, Σd², and the outermost calls' total when none is under way).
/// `table` is this thread's cell holding the thread's [`ProfileTable`]
/// (thread-local, initial-exec: the same offset in every thread; null
/// until the callbacks make it), each with `rows` rows. The fused path
/// does both where sites have stubs, the callbacks the rest (no table
/// yet, a site beyond the rows). False (nothing changed) as for `attach`.
pub fn attach_profile(user: &GraphUser, inst: usize, table: usize, rows: usize) -> bool {
    if !clock::uses_tsc() || inst >= writer::MAX_INSTANCES || fgraph::manager_made() {
        return false;
    }
    TP_PROFILE.store(
        table.wrapping_sub(thread_pointer()) as i64,
        Ordering::Relaxed,
    );
    PROFILE_ROWS.store(rows as u64, Ordering::Relaxed);
    attach_inner(
        user,
        inst,
        0,
        None,
        Some((
            shadowgraph_fused_profile_entry as *const () as usize,
            shadowgraph_fused_profile_return as *const () as usize,
        )),
    )
}

/// The thread pointer (fs:0 holds it, x86-64 TLS ABI).
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads the thread pointer, nothing else.
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    tp
}

/// [`attach`] for a recorder with a time filter alone (`-t`): its entry
/// callback reserves 8 bytes of the frame (`GraphUser::reserve`) and keeps
/// the entry time there by [`ENTRY_TIMING`]'s protocol, records nothing,
/// and its return callback drops a call shorter than `min_ticks` (marking
/// the word [`ENTRY_DROPPED`]), writes the exit of one whose entry is
/// written, and writes the waiting entries of a long one's callers, its
/// own and its exit. The fused path does the first two where sites have
/// stubs and leaves the rest to the callbacks. False (nothing changed) as
/// for `attach`, or for a threshold of 0.
pub fn attach_timed(user: &GraphUser, inst: usize, min_ticks: u64) -> bool {
    if min_ticks == 0
        || !clock::uses_tsc()
        || inst >= writer::MAX_INSTANCES
        || fgraph::manager_made()
    {
        return false;
    }
    user.path_words[W_MIN_TICKS].store(min_ticks, Ordering::Release);
    attach_inner(
        user,
        inst,
        0,
        None,
        Some((
            shadowgraph_fused_timed_entry as *const () as usize,
            shadowgraph_fused_timed_return as *const () as usize,
        )),
    )
}

/// After objects were loaded (dlopen): a user attached with
/// [`attach_filtered`] gets a table covering the new sites too, which
/// took the general way until then (their ids were beyond the table).
/// The old table stays (a thread may be reading it; one per load).
pub fn refresh_filtered(user: &GraphUser, filter: &GraphFilter) {
    if user.path_words[W_FILTER].load(Ordering::Acquire) == 0 {
        return;
    }
    let table: *mut FusedFilter = filter_table(filter);
    user.path_words[W_FILTER].store(table as u64, Ordering::Release);
}

/// Each site's class under `filter` (bit 0: a `-F` function, bit 1: `-N`),
/// for every site the core knows now; never freed.
fn filter_table(filter: &GraphFilter) -> &'static mut FusedFilter {
    let n = crate::ftrace::site_count();
    let classes: Vec<u8> = (0..n as crate::ftrace::SiteId)
        .map(|id| {
            let has = |fs: &Option<std::sync::Arc<crate::ftrace::FilterSet>>| {
                fs.as_ref().is_some_and(|f| f.pair().contains(id))
            };
            has(&filter.functions) as u8 | (has(&filter.notrace) as u8) << 1
        })
        .collect();
    let classes = Box::leak(classes.into_boxed_slice());
    Box::leak(Box::new(FusedFilter {
        classes: classes.as_ptr(),
        len: n as u64,
        has_functions: filter.functions.is_some() as u64,
        max_depth: filter.max_depth as u64,
    }))
}

/// `stubs`: the site stubs' entry and return for a user that is not a
/// plain recorder (sites without stubs, and their hijacked returns, then
/// go the general way).
fn attach_inner(
    user: &GraphUser,
    inst: usize,
    max_depth: u32,
    filter: Option<&'static mut FusedFilter>,
    stubs: Option<(usize, usize)>,
) -> bool {
    if !clock::uses_tsc() || inst >= writer::MAX_INSTANCES || fgraph::manager_made() {
        return false;
    }
    TP_RINGS.store(
        (writer::rings_of_this_thread() + inst * 8).wrapping_sub(thread_pointer()) as i64,
        Ordering::Relaxed,
    );
    fgraph::init_tp_offsets();
    let rseq = rseq_cs_offset().unwrap_or(0);
    RSEQ_CS.store(rseq, Ordering::Relaxed);
    // A filtered user's limit is its filter's; the sign bit marks it.
    let limit = if filter.is_some() {
        1 << 63
    } else {
        max_depth as u64
    };
    user.path_words[W_MAX_DEPTH].store(limit, Ordering::Release);
    let table = filter.map_or(std::ptr::null_mut(), |f| f as *mut FusedFilter);
    user.path_words[W_FILTER].store(table as u64, Ordering::Release);
    let path = if let Some((entry, ret)) = stubs {
        fgraph::SolePath {
            site_entry: entry,
            site_return: ret,
            ..Default::default()
        }
    } else {
        let general = (
            shadowgraph_fused_site_entry as *const () as usize,
            shadowgraph_fused_site_return as *const () as usize,
        );
        let plain = rseq != 0 && limit == 0 && quiesce::fence_rseq_too();
        fgraph::SolePath {
            trampoline_entry: shadowgraph_fused_entry as *const () as usize,
            // The plain copies address thread-local state by `fixed_tls!`:
            // the manager takes the general ones if it cannot write the
            // offsets in.
            site_entry: if plain {
                shadowgraph_fused_site_entry_plain as *const () as usize
            } else {
                general.0
            },
            site_return: if plain {
                shadowgraph_fused_site_return_plain as *const () as usize
            } else {
                general.1
            },
            site_fallback: if plain { general } else { (0, 0) },
            hijacked_return: shadowgraph_fused_return as *const () as usize,
        }
    };
    if !fgraph::register_sole_path(path) {
        return false;
    }
    user.let_sole_path_stand_in();
    true
}

// `reserve` of ring r11 in rax if there is room (else jump to `$full`),
// then the TSC in `$time`. The slot comes back to rax by a plain move, so
// that nothing after waits for the TSC but the record's time store.
// Clobbers rdx and the flags.
macro_rules! reserve_and_time {
    ($full:literal, $time:literal) => {
        concat!(
            "mov rax, [r11 + {r_reserve}]\n",
            "cmp rax, [r11 + {r_room_end}]\n",
            "jae ",
            $full,
            "\n",
            "mov ",
            $time,
            ", rax\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rdx, rax\n",
            "mov rax, ",
            $time,
            "\n",
            "mov ",
            $time,
            ", rdx\n",
        )
    };
}

// A ring's producer side, as `Ring::claim_at/write/publish` (ring.rs):
// while there is room (else jump to `$full`), read the TSC and claim
// `reserve` by one cmpxchg, again both if a signal handler claimed meanwhile
// (so the thread's records stay in time order). `reserve` packs the slot
// (from bit 16) and the ring's depth (bits 0..15): the thread is at rest,
// so the depth is ours (`Depth::Given`), which `$depth` puts in dx — one
// more than an entry's, an exit's — after the slot's step. Ring in r11;
// `reserve` as claimed in rax, its time in `$time`; clobbers rdx and the
// flags.
macro_rules! ring_claim {
    ($full:literal, $time:literal, $depth:literal) => {
        concat!(
            "2:\n",
            reserve_and_time!($full, $time),
            "lea rdx, [rax + 0x10000]\n",
            $depth,
            "cmpxchg qword ptr [r11 + {r_reserve}], rdx\n",
            "jne 2b\n",
        )
    };
}

// The record at the slot claimed (rax) of ring r11: `{$time, $word}`.
// Clobbers rdx.
macro_rules! ring_write {
    ($time:literal, $word:literal) => {
        concat!(
            "mov rdx, rax\n",
            "shr rdx, {slot_shift} - 4\n",
            "and rdx, [r11 + {r_offset_mask}]\n",
            "mov [r11 + rdx + {header}], ",
            $time,
            "\n",
            "mov [r11 + rdx + {header} + 8], ",
            $word,
            "\n",
        )
    };
}

// Publishes the claim rax of ring r11, written, as `Ring::publish`: `head`
// moves to `reserve` if it is at rax (else an earlier slot's writer, which
// we interrupted, publishes ours), again from there if a handler claimed
// meanwhile. Ends at `$done`, the label right after it. Clobbers rax, rdx
// and the flags.
macro_rules! ring_publish {
    ($done:expr) => {
        concat!(
            "3:\n",
            "mov rdx, [r11 + {r_reserve}]\n",
            "cmpxchg qword ptr [r11 + {r_head}], rdx\n",
            "jne ",
            $done,
            "\n",
            "cmp rdx, [r11 + {r_reserve}]\n",
            "mov rax, rdx\n",
            "jne 3b\n",
        )
    };
}

// A record {$time, $word} in ring r11, written at rest (no writer of this
// thread is between its claim and its publish: `reserve` equals `head`),
// `$depth` setting dx after the slot's step as in ring_claim, `$late`
// making `$word` after the TSC read. With the kernel's rseq (registered
// by glibc; RSEQ_CS holds the offset of its `rseq_cs` field from the
// thread pointer, 0 without): one restartable
// sequence of the room check, the TSC read, the record's stores and one
// 16-byte store of `head` and `reserve` (beside each other in the ring's
// header) that claims and publishes the record at once, which the kernel
// aborts if the thread is preempted or signalled before that store,
// sending it back to the start (`$name`_abort) before any handler runs: a
// handler finds the ring at rest, and its records precede ours in the
// ring and in time. (With `head` stored after `reserve`, a handler that
// landed between the two and left by siglongjmp lost our record and its
// own, counted.) No `cmpxchg` and nothing waits on a load after the TSC
// read. Why that matters: on the machines
// measured, `rdtsc` waits for every instruction before it to finish and
// none after it starts before it has, so a recorded call costs its two
// reads plus, between each read and the next, the longest chain of
// dependent loads and operations (about 1 ns a load); the cmpxchg claim
// and publish made one of 25 cycles after each read. Without rseq: ring_claim,
// ring_write, ring_publish (cold). Labels `$name`_*; ends at `$name`_done,
// or at `$full` without room (rseq_cs may stay set: the kernel ignores it
// outside the sequence). Clobbers rax, rdx, `$time`, xmm13 and the flags.
macro_rules! ring_record {
    ($name:literal, $full:literal, $time:literal, $word:literal, $depth:literal, $late:expr) => {
        concat!(
            $name,
            "_restart:\n",
            rseq_or_legacy!($name),
            "lea rax, [rip + ",
            $name,
            "_cs]\n",
            "mov qword ptr fs:[rdx], rax\n",
            $name,
            "_start:\n",
            reserve_and_time!($full, $time),
            $late,
            ring_write!($time, $word),
            "lea rdx, [rax + 0x10000]\n",
            $depth,
            // Claimed and published by one store: `head` and `reserve`
            // both the new value (xmm13 is free at a function's entry and
            // return).
            "movq xmm13, rdx\n",
            "punpcklqdq xmm13, xmm13\n",
            "movdqu xmmword ptr [r11 + {r_head}], xmm13\n",
            $name,
            "_post:\n",
            $name,
            "_done:\n",
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            rseq_abort!($name),
            $name,
            "_legacy:\n",
            $late,
            ring_claim!($full, $time, $depth),
            ring_write!($time, $word),
            ring_publish!(concat!($name, "_done")),
            "jmp ",
            $name,
            "_done\n",
            ".popsection\n",
            rseq_descriptor!($name),
        )
    };
}

// A record {time, $word} in ring r11 for the plain site entry and return,
// which hold no bracket: one restartable sequence (as ring_record's) that
// goes to `$general` — untouched, the ring as it was — unless `$user` and
// `$pre` find the fused user still published (its frame word: a grace
// period that unpublished it restarts the sequence:
// quiesce::fence_rseq_too) and the rest `$pre` checks passes, the
// ring is at rest (`head` = `reserve`: no record of this thread is between
// its claim and its publish), `$witness` finds the ring's depth
// (`reserve`'s bits 0..15, in ax) where this call's record belongs (an
// entry's depth, an exit's depth + 1; else it jumps to `$general`), and
// there is room. A signal handler that lands between a frame's push and
// its entry record, or between an exit record and the frame's pop, finds
// the frame and the ring a level apart: the entry records its calls where
// the ring says the thread is, and anything else out of step goes the
// general way, whose callbacks then record at the ring's depth
// (`Depth::Follow`). One that lands in the sequence sends the thread to
// `$resume` first: the sequence's start, as with ring_record, or where
// the registers it may have reused are not needed. Nothing in the
// sequence may jump out of it and come back: outside its range the kernel
// neither restarts it nor keeps it armed. `$make_word` makes `$word`;
// everything but the time is made before the clock read (the slot's
// offset in `$slot`; `reserve` and `head` after the record: `reserve` +
// `$step`, one slot on and the ring's depth one deeper or shallower, as
// the witness found it). Labels `$name`_*; clobbers rax, rdx, `$slot`,
// xmm13 and the flags.
macro_rules! plain_record {
    ($name:literal, $general:literal, $user:expr, $slot:literal, $word:literal, $witness:expr, $step:literal, $pre:expr, $make_word:expr, $resume:expr) => {
        concat!(
            $name,
            "_restart:\n",
            "lea rax, [rip + ",
            $name,
            "_cs]\n",
            crate::fixed_tls!("mov ", "qword", "rseq_cs", "0", ", rax"),
            $name,
            "_start:\n",
            $user,
            $pre,
            "mov rax, [r11 + {r_reserve}]\n",
            "cmp rax, [r11 + {r_head}]\n",
            "jne ",
            $general,
            "\n",
            $witness,
            "cmp rax, [r11 + {r_room_end}]\n",
            "jae ",
            $general,
            "\n",
            $make_word,
            // Everything but the time made before the clock read: the
            // commit's value in xmm13 (xmm13 is free at a function's entry
            // and return), the slot's offset in `$slot`.
            "lea rdx, [rax + ",
            $step,
            "]\n",
            "movq xmm13, rdx\n",
            "punpcklqdq xmm13, xmm13\n",
            "mov ",
            $slot,
            ", rax\n",
            "shr ",
            $slot,
            ", {slot_shift} - 4\n",
            "and ",
            $slot,
            ", [r11 + {r_offset_mask}]\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "mov [r11 + ",
            $slot,
            " + {header}], rax\n",
            "mov [r11 + ",
            $slot,
            " + {header} + 8], ",
            $word,
            "\n",
            // Claimed and published by one store: `head` and `reserve` both
            // the new value.
            "movdqu xmmword ptr [r11 + {r_head}], xmm13\n",
            $name,
            "_post:\n",
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            rseq_abort!($name, $resume),
            ".popsection\n",
            rseq_descriptor!($name),
        )
    };
}

// The abort handler of restartable sequence `$name` (labels `$name`_*):
// counted, then back to `$name`_restart, which arms the sequence again,
// or on to `$resume`.
macro_rules! rseq_abort {
    ($name:literal) => {
        rseq_abort!($name, concat!($name, "_restart"))
    };
    ($name:literal, $resume:expr) => {
        concat!(
            // glibc's signature (RSEQ_SIG), which the kernel checks before
            // an abort handler.
            ".long 0x53053053\n",
            $name,
            "_abort:\n",
            "lock inc qword ptr [rip + {rseq_restarts}]\n",
            "jmp ",
            $resume,
            "\n",
        )
    };
}

// The `struct rseq_cs` of sequence `$name` (version, flags, start, length,
// abort), at `$name`_cs: from `$name`_start to `$name`_post.
macro_rules! rseq_descriptor {
    ($name:literal) => {
        concat!(
            ".pushsection .data.rel.ro.shadowgraph_rseq,\"aw\",@progbits\n",
            ".balign 32\n",
            $name,
            "_cs:\n",
            ".long 0, 0\n",
            ".quad ",
            $name,
            "_start\n",
            ".quad ",
            $name,
            "_post - ",
            $name,
            "_start\n",
            ".quad ",
            $name,
            "_abort\n",
            ".popsection\n",
        )
    };
}

// How ring_record picks its protocol: by RSEQ_CS on every record (rdx its
// value).
macro_rules! rseq_or_legacy {
    ($name:literal) => {
        concat!(
            crate::fixed_load!("rdx", "rseq_cs"),
            "test rdx, rdx\n",
            "jz ",
            $name,
            "_legacy\n",
        )
    };
}

// The bracket, left: depth 1 → 0 and the exit generation + 1, in one
// instruction (a signal handler leaves the word as it found it, save for
// generations it completed). Clobbers rcx.
macro_rules! bracket_leave {
    () => {
        concat!(
            crate::fixed_load!("rcx", "tp_local"),
            "mov rcx, qword ptr fs:[rcx + {l_word}]\n",
            "add qword ptr [rcx], 0xffff\n",
        )
    };
}

// The entry's frame at word r8 of stack rdi: {R, rdx, slot, RESERVED},
// R's slot at rsp + 40 (or the offset given). Clobbers rax.
macro_rules! frame_words {
    () => {
        frame_words!("40")
    };
    ($slot:literal) => {
        frame_words!($slot, "qword ptr [rdi + r8*8 + 24], {frame_words}")
    };
    // `$bitmap`: the store of the frame's BITMAP word.
    ($slot:literal, $bitmap:literal) => {
        concat!(
            "mov rax, [rsp + ",
            $slot,
            "]\n",
            "mov [rdi + r8*8], rax\n",
            "mov [rdi + r8*8 + 8], rdx\n",
            "lea rax, [rsp + ",
            $slot,
            "]\n",
            "mov [rdi + r8*8 + 16], rax\n",
            "mov ",
            $bitmap,
            "\n",
        )
    };
}

// The nine registers the entry saves, restored: five from xmm8–12, four
// from the stack (see entry_head).
macro_rules! pop_saved {
    () => {
        concat!(
            "movq r9, xmm12\nmovq r8, xmm11\nmovq rsi, xmm10\nmovq rdx, xmm9\nmovq rcx, xmm8\n",
            "pop r11\npop r10\npop rdi\npop rax\n",
        )
    };
}

// The entry's limits, from label 4 (registers as there): a call the user
// declines (`-D`) goes to 83, where nothing is left to do; a user with
// graph filters (its limit the sign bit) goes where `$filtered` jumps.
// Ends at label 6.
macro_rules! depth_limits {
    ($filtered:literal) => {
        concat!(
            "mov rax, [rsi + {u_max_depth}]\n",
            "test rax, rax\n",
            "jz 6f\n",
            $filtered,
            "cmp r9, rax\n",
            "jae 83f\n",
            "6:\n",
        )
    };
}

// Label 83, where the entry's limits send a call they decline: leave as if
// untraced, with `$declined` saying so.
macro_rules! declined_exit {
    ($declined:literal) => {
        concat!("83:\n", bracket_leave!(), $declined, pop_saved!(), "ret\n")
    };
}

// The entry's first part, shared by its variants: the nine registers
// saved (rax rdi r10 r11 pushed, the site last: [rsp]; rcx rdx rsi r8 r9
// in xmm8–12, which are free at a function's entry: caller-saved and no
// argument's, and gcc turns inter-procedural register allocation off for
// functions with patchable entries, so no caller keeps a value there
// across a call; kept out of memory, they made fib(30)'s recorded calls
// 1.6 ns faster than nine pushes and pops; rdi stays on the stack: moving
// an argument through xmm made fib(30), whose argument is rdi, slower),
// the bracket entered, the sole graph user a fused recorder (rsi),
// `$ring` (the plain recorder's ring in r11, else nothing), the thread's
// shadow stack (rdi, rcx the thread state's offset) and where the new frame
// goes (r8 = curr) at what depth (r9), the parent frame's last word
// recognised by `$top` and its length less one by `$parent` (see below).
// Ends at label 4; the general way: label 80 with nothing held, 81 with
// the bracket entered (the variant's code defines them).
macro_rules! entry_head {
    ($top:expr, $parent:literal, $ring:expr) => {
        concat!(
            entry_saves!(),
            // At rest: a bracket word, depth 0, no recursion bit.
            crate::fixed_load!("rcx", "tp_local"),
            "mov rdx, qword ptr fs:[rcx + {l_word}]\n",
            "test rdx, rdx\n",
            "jz 80f\n",
            "test word ptr [rdx], 0xffff\n",
            "jnz 80f\n",
            "cmp dword ptr fs:[rcx + {l_rec}], 0\n",
            "jne 80f\n",
            // Enter the bracket, anchored at the return slot.
            "lea rax, [rsp + 40]\n",
            crate::bracket_enter_at_rest!("rcx", "rdx"),
            entry_stack!(
                // The sole graph user is a fused recorder (so the manager
                // is registered: fgraph::FUSED) with a ring on this thread.
                // One load: every chain of loads before the clock read
                // lengthens the call (see ring_record).
                concat!("mov rsi, [rip + {fused}]\n", "test rsi, rsi\n", "jz 81f\n"),
                $top,
                $parent,
                $ring,
                "81f",
                reg,
                "40",
                ""
            ),
        )
    };
}

// The nine registers the entry saves (see entry_head).
macro_rules! entry_saves {
    () => {
        concat!(
            "push rax\n",
            "push rdi\n",
            "push r10\n",
            "push r11\n",
            "movq xmm8, rcx\n",
            "movq xmm9, rdx\n",
            "movq xmm10, rsi\n",
            "movq xmm11, r8\n",
            "movq xmm12, r9\n",
        )
    };
}

// The six registers the plain site entry saves: rax rdi pushed, rcx rdx
// r8 r9 in xmm8, 9, 11, 12, as entry_saves (r10 and rsi are left alone,
// r11 is the stub's site, free at a function's entry); and the same
// restored.
macro_rules! plain_saves {
    () => {
        "push rax\npush rdi\nmovq xmm8, rcx\nmovq xmm9, rdx\nmovq xmm11, r8\nmovq xmm12, r9\n"
    };
}

macro_rules! plain_pop_saved {
    () => {
        "movq r9, xmm12\nmovq r8, xmm11\nmovq rdx, xmm9\nmovq rcx, xmm8\npop rdi\npop rax\n"
    };
}

// How entry_stack reaches the thread's state: `reg`, at the offset
// fixed_load! puts in rcx (left there for the caller); `fixed`, at
// offsets written into each instruction (fixed_tls!: the plain site path).
macro_rules! thread_base {
    (reg) => {
        crate::fixed_load!("rcx", "tp_thread")
    };
    (fixed) => {
        ""
    };
}

macro_rules! thread_op {
    (reg, $before:literal, $size:literal, $field:literal, $after:literal) => {
        concat!($before, $size, " ptr fs:[rcx + ", $field, "]", $after, "\n")
    };
    (fixed, $before:literal, $size:literal, $field:literal, $after:literal) => {
        crate::fixed_tls!($before, $size, "tp_thread", $field, $after)
    };
}

// The rest of entry_head from the bracket on: the user (`$user`, which
// jumps to `$general` if there is none), `$ring`, the stack, curr and the
// new call's depth, to label 4; anything unusual jumps to `$general`.
// `$slot`: the offset from rsp of the call's return slot; `$unknown`:
// run first where `$top` does not recognise the top frame. r10 is kept.
macro_rules! entry_stack {
    ($user:expr, $top:expr, $parent:literal, $ring:expr, $general:literal, $tls:ident, $slot:literal, $unknown:expr) => {
        concat!(
            $user,
            $ring,
            // The thread's shadow stack: attached, hooked, not exiting or paused.
            thread_base!($tls),
            // (Its word HOOKABLE: the stack is there, see ThreadState.)
            thread_op!($tls, "cmp ", "qword", "{t_blockers}", ", {hookable}"),
            concat!("jne ", $general, "\n"),
            thread_op!($tls, "mov rdi, ", "qword", "{t_stack}", ""),
            // r8 = curr; r9 = depth: one deeper than the top frame f = curr−1−o
            // (o = word[curr−1]'s offset), 0 without one. A top frame whose return
            // slot is not above ours was left by a longjmp: the general way.
            // Most often f is one of this user's own frames, whose last word
            // `$top` recognises (comparing rax, setting ZF): then f + 1 =
            // curr − `$parent` without waiting for the word's offset (every
            // load this entry waits for before its clock read lengthens the
            // call: see ring_record).
            thread_op!($tls, "mov r8, ", "qword", "{t_curr}", ""),
            // (At curr = 0, the stack's word −1: always 0, no frame's.)
            "mov rax, [rdi + r8*8 - 8]\n",
            $top,
            "jne 3f\n",
            "lea rdx, [r8 - ",
            $parent,
            "]\n", // f + 1
            "2:\n",
            "lea rax, [rsp + ",
            $slot,
            "]\n",
            "cmp [rdi + rdx*8 + 8], rax\n", // word[f+2]: its return slot
            "jbe 5f\n",
            "7:\n",
            "mov r9, [rdi + rdx*8]\n", // word[f+1]: func | depth << 48
            "shr r9, 48\n",
            "inc r9\n",
            "4:\n",
            // Deeper than records can say (10 bits): the general way
            // records those at 1023.
            "cmp r9, {max_record_depth}\n",
            concat!("jae ", $general, "\n"),
            // Out of the way: a top frame not recognised by its last word
            // (f + 1 from the word's offset; none: depth 0), and a slot
            // not above f's.
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            "3:\n",
            $unknown,
            "xor r9d, r9d\n",
            "and eax, 0x3ff\n",
            "jz 4b\n",
            "cmp rax, r8\n",
            "jae 4b\n",
            "mov rdx, r8\n",
            "sub rdx, rax\n", // f + 1
            "jmp 2b\n",
            "5:\n",
            concat!("jb ", $general, "\n"),
            // The same slot: a tail call from f's function nests in f
            // (fgraph's `enter` decides alike); anything else goes the
            // general way.
            "movq xmm14, r10\n",
            "mov r10, [rsp + ",
            $slot,
            "]\n",
            "mov rax, [rdi + rdx*8]\n",
            "shl rax, 16\n",
            "shr rax, 16\n",
            "call shadowgraph_tail_call_from\n",
            "movq r10, xmm14\n",
            concat!("jne ", $general, "\n"),
            "jmp 7b\n",
            ".popsection\n",
        )
    };
}

// The entry's fast path, for a site that called the manager's stub
// (`$site` puts the site in rdx from [rsp+32], the address after the call,
// `$hook` takes over the return, `$hooked` says so, `$declined` is the
// exit for calls `$limits` declines: `declined_exit!`)
// or for a site stub (tramp.rs), which does the taking over itself. The
// general way: label 80 with nothing held.
macro_rules! fused_entry {
    ($name:literal, $site:literal, $hook:literal, $hooked:literal, $declined:expr, $limits:expr) => {
        concat!(
            entry_head!(
                "cmp rax, [rsi + {u_frame_word}]\n",
                "{frame_words}",
                concat!(
                    crate::fixed_load!("rcx", "tp_rings"),
                    "mov r11, qword ptr fs:[rcx]\n",
                    "test r11, r11\n",
                    "jz 81f\n",
                )
            ),
            $limits,
            // Room for the frame, else the general way counts an overrun.
            "cmp r8, [rip + {room_limit}]\n",
            "jae 81f\n",
            // The frame {R, func | depth << 48, slot, RESERVED}, written whole
            // before curr publishes it and again after (a handler that ran in
            // between, even between two of the first writes, may have used the
            // words: the signal fuzz test of tests/fgraph.rs catches a single
            // write checked by one word); pushed before the record is
            // claimed, as on the general way (a handler's calls in between nest in
            // it and come first).
            $site,
            "mov rax, r9\n",
            "shl rax, 48\n",
            "or rdx, rax\n",
            frame_words!(),
            "lea rax, [r8 + 4]\n",
            "mov qword ptr fs:[rcx + {t_curr}], rax\n",
            frame_words!(),
            // The entry record {time, Entry | MAGIC | depth << 6 | func << 16} in
            // a slot of the ring, else the frame goes and the general way waits
            // for one. Its word from the frame's (rdx: func | depth << 48, the
            // shift dropping the depth), in r9 across the claim.
            "shl rdx, 16\n",
            "shl r9, 6\n",
            "or r9, rdx\n",
            "or r9, {entry_bits}\n",
            ring_record!(
                $name,
                "82f",
                "r10",
                "r9",
                "mov dx, r9w\nshr dx, 6\ninc dx\n",
                ""
            ),
            // Kept for the user: its BITMAP word, then the hijack.
            "mov rax, [rsi + {u_frame_word}]\n",
            "mov [rdi + r8*8 + 24], rax\n",
            $hook,
            bracket_leave!(),
            $hooked,
            pop_saved!(),
            "ret\n",
            $declined,
            // The general way: from 82 with the frame pushed (take it back: any
            // handler's frames above it are gone), from 81 with the bracket
            // entered (leave it), from 80 as at entry.
            "82:\n",
            crate::fixed_load!("rcx", "tp_thread"),
            "mov qword ptr fs:[rcx + {t_curr}], r8\n",
            "81:\n",
            bracket_leave!(),
            "80:\n",
            pop_saved!(),
        )
    };
}

// The return's first part, shared by its variants: rax and rdx saved, the
// bracket entered (its word in r8), the sole graph user a fused recorder
// (rsi), `$ring` (the ring in r11, else nothing), the thread's shadow stack
// (rdi) and its `curr` (r9). The general way: label 90 with nothing held,
// 91 with the bracket entered (the variant's code defines them).
macro_rules! return_head {
    ($ring:expr) => {
        concat!(
            "push rax\n",
            "push rdx\n",
            crate::fixed_load!("rcx", "tp_local"),
            "mov r8, qword ptr fs:[rcx + {l_word}]\n",
            "test r8, r8\n",
            "jz 90f\n",
            "test word ptr [r8], 0xffff\n",
            "jnz 90f\n",
            "cmp dword ptr fs:[rcx + {l_rec}], 0\n",
            "jne 90f\n",
            "lea rax, [rsp + 8]\n",
            crate::bracket_enter_at_rest!("rcx", "r8"),
            "mov rsi, [rip + {fused}]\n",
            "test rsi, rsi\n",
            "jz 91f\n",
            $ring,
            crate::fixed_load!("rcx", "tp_thread"),
            "mov rdi, qword ptr fs:[rcx + {t_stack}]\n",
            "test rdi, rdi\n",
            "jz 91f\n",
            "mov r9, qword ptr fs:[rcx + {t_curr}]\n",
        )
    };
}

// The exit record of the returning call's frame f (r10) of stack rdi in
// ring r11 (rsi the user), labels `$name`_*, without room: label 92.
// The record's word from the frame's (func | depth << 48), in rcx, made
// once the clock is read (nothing before the read waits for it).
macro_rules! exit_record {
    ($name:literal) => {
        concat!(
            ring_record!(
                $name,
                "92f",
                "r9",
                "rcx",
                "mov dx, cx\nshr dx, 6\n",
                concat!(
                    "mov rcx, [rdi + r10*8 + 8]\n",
                    "mov rdx, rcx\n",
                    "shr rdx, 48\n",
                    "cmp edx, {max_record_depth}\n",
                    "jae 92f\n",
                    "shl rdx, 6\n",
                    "shl rcx, 16\n",
                    "or rcx, rdx\n",
                    "or rcx, {exit_bits}\n",
                )
            ),
            "and dword ptr [rdi + r10*8 + 24], {users_clear}\n",
        )
    };
}

// Pops frame f (r10) of stack rdi and resumes at its real return address
// with `$resume` (in r11, rax and rdx restored). The bracket left through
// its word, still in r8.
macro_rules! pop_frame {
    ($resume:literal) => {
        concat!(
            "mov r11, [rdi + r10*8]\n",
            crate::fixed_load!("rcx", "tp_thread"),
            "mov qword ptr fs:[rcx + {t_curr}], r10\n",
            "add qword ptr [r8], 0xffff\n",
            "pop rdx\n",
            "pop rax\n",
            $resume,
        )
    };
}

// The return's fast path; resumes with `$resume` (r11 = the real return
// address, every register of the result restored). The general way: label
// 90 with nothing held.
macro_rules! fused_return {
    ($name:literal, $resume:literal, $filtered:literal) => {
        concat!(
            return_head!(concat!(
                crate::fixed_load!("rcx", "tp_rings"),
                "mov r11, qword ptr fs:[rcx]\n",
                "test r11, r11\n",
                "jz 91f\n",
            )),
            // The top frame f (r10) is the returning call's (its slot) and was
            // kept for this user alone: its last word is the user's BITMAP
            // word, whose offset says f = curr − 4 (compared whole, so that
            // the frame's slot is read beside it, not after it).
            "cmp r9, {frame_words} + 1\n",
            "jb 91f\n",
            "mov rax, [rdi + r9*8 - 8]\n",
            "cmp rax, [rsi + {u_frame_word}]\n",
            "jne 91f\n",
            "lea r10, [r9 - {frame_words} - 1]\n",
            "lea rax, [rsp + 8]\n",
            "cmp [rdi + r9*8 - 16], rax\n",
            "jne 91f\n",
            // The exit record {time, Exit | MAGIC | depth << 6 | func << 16} in a
            // slot of the ring, else the general way waits for one. The frame's
            // users are taken once it is in: a signal handler that lands before
            // and leaves by siglongjmp finds the frame still its user's (the
            // kernel aborted the record: its exit is reported as unwound), one
            // that lands after the record and before the frame is handed back
            // finds it too, and the user's callback, seeing its exit in the ring
            // (by the ring's depth), writes no second one.
            $filtered,
            exit_record!($name),
            pop_frame!($resume),
            "92:\n",
            "91:\n",
            bracket_leave!(),
            "90:\n",
            "pop rdx\n",
            "pop rax\n",
        )
    };
}

// A site entry variant's end: the call hooked (ZF=1) with the bracket left
// and the nine registers restored; then the general way, from 81 with the
// bracket entered, from 80 as at entry.
macro_rules! site_entry_end {
    () => {
        concat!(
            bracket_leave!(),
            "cmp rsp, rsp\n",
            pop_saved!(),
            "ret\n",
            "81:\n",
            bracket_leave!(),
            "80:\n",
            pop_saved!(),
            "jmp shadowgraph_graph_site_entry\n",
        )
    };
}

// A site return variant's general way: from 91 with the bracket entered,
// from 90 as at entry.
macro_rules! site_return_general {
    () => {
        concat!(
            "91:\n",
            bracket_leave!(),
            "90:\n",
            "pop rdx\n",
            "pop rax\n",
            "jmp shadowgraph_site_return_general\n",
        )
    };
}

// The timed variants' frame at word r8 of stack rdi: the frame (rdx the
// function and depth, as frame_words!, the user's BITMAP word in r11: the
// user's from the start, so that a frame a signal handler jumps out of
// reports its return, whatever its word says by then), then the user's
// data word (the entry time's word, 0: not timed yet) and the DATA word
// (r10) that fgraph's `GraphUser::reserve(8)` would make (its `retrieve`
// finds the word, so the general way reads it as its own). Clobbers rax.
macro_rules! timed_frame_words {
    () => {
        concat!(
            frame_words!("40", "[rdi + r8*8 + 24], r11"),
            "mov qword ptr [rdi + r8*8 + 32], 0\n",
            "mov [rdi + r8*8 + 40], r10\n",
        )
    };
}

// The timed return's judgement of frame f (r10): its word in r11; to label
// 60 if its entry is written; the general way (91) if it is dropped,
// being timed or never timed (not ours to judge), or lasted at least the
// threshold; on (rax, rdx clobbered) if it was too short.
macro_rules! timed_judge {
    () => {
        concat!(
            "mov r11, [rdi + r10*8 + 32]\n",
            "bt r11, {written_bit}\n",
            "jc 60f\n",
            "mov rax, r11\n",
            "shr rax, {written_bit} - 2\n",
            "jnz 91f\n",
            "test r11, r11\n",
            "jz 91f\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rax, rdx\n",
            "sub rax, r11\n",
            "cmp rax, [rsi + {u_min_ticks}]\n",
            "jae 91f\n",
        )
    };
}

// A profile's frame at word r8 of stack rdi: the frame (rdx the function
// and depth, as frame_words!, its BITMAP word reserved), then the
// profile's data {start 0, children 0, id r9} and its DATA word (r10),
// as `GraphUser::reserve(24)` would make them. Clobbers rax.
macro_rules! profile_frame_words {
    () => {
        concat!(
            frame_words!(),
            "mov qword ptr [rdi + r8*8 + 32], 0\n",
            "mov qword ptr [rdi + r8*8 + 40], 0\n",
            "mov [rdi + r8*8 + 48], r9\n",
            "mov [rdi + r8*8 + 56], r10\n",
        )
    };
}

// The DATA word of user rsi's frames with `$data` (`{data_one}`: a
// timed frame's, `{data_three}`: a profile's) in `$reg`.
macro_rules! data_word {
    ($reg:literal, $data:literal) => {
        concat!(
            "movsxd ",
            $reg,
            ", dword ptr [rsi + {u_slot}]\n",
            "shl ",
            $reg,
            ", 17\n",
            "or ",
            $reg,
            ", ",
            $data,
            "\n",
        )
    };
}

// The DATA word of a timed frame of user rsi, in `$reg`.
macro_rules! timed_data_word {
    ($reg:literal) => {
        data_word!($reg, "{data_one}")
    };
}

// The entry, then the return (its register contract below, with it).
//
// Entry. Register contract: reached by the manager's stub from a site's
// call: [rsp] = site+5, [rsp+8] = R (the traced function's return
// address), r11 = the stub's data (the manager's ops slot in that arena);
// every argument register (rdi rsi rdx rcx r8 r9, rax, r10, xmm0–7) is
// live. The fast path saves the nine general registers it uses (four on
// the stack, five in xmm8–12: see entry_head), touches no other xmm
// register, and returns to site+5 with all of them restored; after the
// pushes [rsp+32] = site+5 and [rsp+40] = R, so the return slot is
// rsp+40. Anything else pops them and jumps to
// `shadowgraph_fused_general`, the manager's usual caller (args variant)
// with the ops slot taken from r11.
std::arch::global_asm!(
    ".pushsection .text.shadowgraph_fused,\"ax\",@progbits",
    ".globl shadowgraph_fused_entry",
    ".hidden shadowgraph_fused_entry",
    "shadowgraph_fused_entry:",
    "endbr64",
    fused_entry!(
        "shadowgraph_fused_entry_record",
        "mov rdx, [rsp + 32]\nsub rdx, 5\n",
        "lea rax, [rip + shadowgraph_return_to_handler]\nmov [rsp + 40], rax\n",
        "",
        declined_exit!(""),
        depth_limits!("js 81f\n")
    ),
    "jmp shadowgraph_fused_general",
    // The manager's caller (tramp.rs, args variant), with the ops slot
    // from r11 kept in the frame's spare word across save_args.
    ".globl shadowgraph_fused_general",
    ".hidden shadowgraph_fused_general",
    "shadowgraph_fused_general:",
    crate::tramp::prologue!(),
    "mov [rsp + 0x128], r11",
    crate::tramp::save_args!(),
    "mov rdi, rsp",
    "mov rsi, [rsp + 0x128]",
    "call {manager_entry}",
    crate::tramp::restore_args!(),
    "leave",
    "ret",
    // Return. Register contract: jumped to by `return_to_handler` when the
    // fused path is on: rsp = the returning call's slot + 8; rax/rdx (and
    // xmm0/xmm1, never touched here) hold the function's result; rcx, rsi,
    // rdi and r8–r11 are dead at a return. After pushing rax and rdx the slot
    // is rsp+8. Resumes at the frame's real return address through r11 with
    // rax/rdx restored; anything unusual pops them and jumps to
    // `shadowgraph_return_general` as if never here.
    ".globl shadowgraph_fused_return",
    ".hidden shadowgraph_fused_return",
    "shadowgraph_fused_return:",
    fused_return!(
        "shadowgraph_fused_return_record",
        "jmp r11\n",
        "cmp qword ptr [rsi + {u_filter}], 0\njne 91f\n"
    ),
    "jmp shadowgraph_return_general",
    // Site stubs (tramp.rs). Entry: register contract as above, reached by
    // a stub's `call [ENTRY]`, so [rsp] = stub+13, r11 = the site (saved
    // last: [rsp] after the pushes), its id and the ops slot are the
    // stub's literals (the general way takes the slot from the stub). The
    // return is not taken over here: the stub calls the body itself when
    // the entry returns with ZF=1 (a frame was pushed), and runs it
    // untouched with ZF=0. Every argument register is restored either way.
    ".globl shadowgraph_fused_site_entry",
    ".hidden shadowgraph_fused_site_entry",
    "shadowgraph_fused_site_entry:",
    "endbr64",
    fused_entry!(
        "shadowgraph_fused_site_entry_record",
        "mov rdx, [rsp]\n",
        "",
        "cmp rsp, rsp\n",
        declined_exit!("test rsp, rsp\n"),
        depth_limits!("js 40f\n")
    ),
    "jmp shadowgraph_graph_site_entry",
    // A recorder with graph filters (`-F`, `-N`, `-D`: fgraph::filters,
    // whose thread variable it keeps the same way): from label 4 with the
    // filter in rax, the registers as there (rcx the thread state's
    // offset, rsi the user, rdi the stack, r8 curr, r9 fgraph's depth, r11
    // the ring). The site's class (bit 0: a -F function, bit 1: -N) from
    // the filter's table by the stub's site id; sites it does not know
    // (loaded later) go the general way.
    "40:",
    "mov rax, [rsi + {u_filter}]",
    "mov rdx, [rsp + 32]",
    "mov edx, dword ptr [rdx + {id_off}]",
    "cmp rdx, [rax + {f_len}]",
    "jae 81b",
    "mov r10, [rax + {f_classes}]",
    "movzx r10d, byte ptr [r10 + rdx]",
    // The user's thread variable v (rdx), by the user's slot.
    "movsxd rdx, dword ptr [rsi + {u_slot}]",
    "mov rdx, [rdi + rdx*8 + {tv}]",
    "bt rdx, {notrace_bit}",
    "jc 83b", // inside a -N call: declined
    "test r10d, 2",
    "jnz 45f", // a -N function: kept, silent
    "cmp qword ptr [rax + {f_functions}], 0",
    "je 42f",
    "bt rdx, {in_graph_bit}",
    "jc 42f",
    "test r10d, 1",
    "jz 83b", // outside every -F call: declined
    // A -F function starts the recorded subtree at the own depth.
    "movzx r10d, dx",
    "shl r10, {graph_depth_shift}",
    "movabs rcx, {not_graph_depth}",
    "and rdx, rcx",
    "or rdx, r10",
    "bts rdx, {in_graph_bit}",
    "42:",
    "mov r10, [rax + {f_max_depth}]",
    "test r10, r10",
    "jz 43f",
    "movzx ecx, dx",
    "cmp rcx, r10",
    "jae 83b", // -D: too deep
    "43:",
    // Deeper than records can say: the general way records it at 1023.
    "cmp dx, {max_record_depth}",
    "jae 81b",
    // Recorded at the own depth; v's own depth + 1 once the record is in.
    "inc rdx",
    "mov r10, rdx",
    "call 46f",
    // The entry record (the ring still in r11).
    "mov rcx, [rsp]",
    "shl rcx, 16",
    "movzx edx, r10w",
    "dec edx",
    "shl rdx, 6",
    "or rcx, rdx",
    "or rcx, {entry_bits}",
    ring_record!(
        "shadowgraph_fused_filtered_entry",
        "82b",
        "r9",
        "rcx",
        "mov dx, r10w\n",
        ""
    ),
    "jmp 47f",
    // A -N function: NOTRACE in v, its frame kept, nothing recorded.
    "45:",
    "bts rdx, {notrace_bit}",
    "mov r10, rdx",
    "call 46f",
    // The variable, then the BITMAP word; hooked.
    "47:",
    "mov rax, [rsi + {u_frame_word}]",
    "movsxd rcx, dword ptr [rsi + {u_slot}]",
    "mov [rdi + rcx*8 + {tv}], r10",
    "mov [rdi + r8*8 + 24], rax",
    bracket_leave!(),
    "cmp rsp, rsp",
    pop_saved!(),
    "ret",
    // The frame at fgraph's depth r9, as on the plain path (written,
    // published, written again), rcx left the thread state's offset; a
    // full stack: the general way (this return address dropped first).
    "46:",
    crate::fixed_load!("rcx", "tp_thread"),
    "cmp r8, [rip + {room_limit}]",
    "jb 48f",
    "add rsp, 8",
    "jmp 81b",
    "48:",
    "mov rdx, [rsp + 8]",
    "mov rax, r9",
    "shl rax, 48",
    "or rdx, rax",
    frame_words!("48"),
    "lea rax, [r8 + 4]",
    "mov qword ptr fs:[rcx + {t_curr}], rax",
    frame_words!("48"),
    "ret",
    // Return through a stub: jumped to by the stub's `jmp [RETURN]` at its
    // return point, with rsp, the result and the dead registers as
    // for the return above. Resumes by `ret`: the return-stack predictor
    // holds the real address, since the stub's call has been returned from.
    ".globl shadowgraph_fused_site_return",
    ".hidden shadowgraph_fused_site_return",
    "shadowgraph_fused_site_return:",
    "endbr64",
    fused_return!(
        "shadowgraph_fused_site_return_record",
        "push r11\nret\n",
        "cmp qword ptr [rsi + {u_filter}], 0\njne 50f\n"
    ),
    "jmp shadowgraph_site_return_general",
    // A recorder with graph filters, from before the claim (registers as
    // there: rsi the user, rdi the stack, r10 the frame f, r11 the ring;
    // rax and rdx saved at [rsp]): its thread variable as
    // `GraphFilter::ret` leaves it (r8), written once the record is in.
    "50:",
    "movsxd rcx, dword ptr [rsi + {u_slot}]",
    "mov r8, [rdi + rcx*8 + {tv}]",
    "btr r8, {notrace_bit}",
    "jnc 51f",
    // The -N function's own return: NOTRACE cleared, nothing recorded.
    "mov [rdi + rcx*8 + {tv}], r8",
    "and dword ptr [rdi + r10*8 + 24], {users_clear}",
    "jmp 53f",
    // Own depth − 1; IN_GRAPH ends with the call that set it.
    "51:",
    "movzx edx, r8w",
    "test edx, edx",
    "jz 52f",
    "dec edx",
    "bt r8, {in_graph_bit}",
    "jnc 52f",
    "mov rax, r8",
    "shr rax, {graph_depth_shift}",
    "movzx eax, ax",
    "cmp eax, edx",
    "jne 52f",
    "btr r8, {in_graph_bit}",
    "52:",
    "and r8, -65536",
    "or r8, rdx",
    ring_record!(
        "shadowgraph_fused_filtered_return",
        "92b",
        "r9",
        "rcx",
        "mov dx, r8w\n",
        concat!(
            "mov rcx, [rdi + r10*8 + 8]\n",
            "shl rcx, 16\n",
            "movzx edx, r8w\n",
            "cmp edx, {max_record_depth}\n",
            "jae 92b\n",
            "shl rdx, 6\n",
            "or rcx, rdx\n",
            "or rcx, {exit_bits}\n",
        )
    ),
    "and dword ptr [rdi + r10*8 + 24], {users_clear}",
    "movsxd rcx, dword ptr [rsi + {u_slot}]",
    "mov [rdi + rcx*8 + {tv}], r8",
    // Pop the frame; resume at its real return address.
    "53:",
    "mov r11, [rdi + r10*8]",
    crate::fixed_load!("rcx", "tp_thread"),
    "mov qword ptr fs:[rcx + {t_curr}], r10",
    bracket_leave!(),
    "pop rdx",
    "pop rax",
    "push r11",
    "ret",
    // The site stubs' entry and return for the common case, chosen at
    // attach: the process has rseq (and grace periods restart its
    // sequences: quiesce::fence_rseq_too) and the recorder neither filters
    // nor limits depth. They hold no bracket: where a signal handler
    // lands in them is told by the ring's depth instead (see
    // plain_record), and their one read of the user that a grace period
    // must cover is in the sequence. Register contracts as for the site
    // entry and return above.
    //
    // Entry: fgraph's code not at work on the thread (graph_busy, in the
    // blockers word: it holds its recursion bit while it pushes a frame
    // or writes a record; the bits of other ops' callbacks, which touch
    // neither the stack nor the ring, do not keep a call they make, or a
    // signal handler's, from being recorded here), the stack's checks as
    // the site entry's, then one restartable sequence that pushes the frame (the
    // user's BITMAP word in it) and writes the entry record at the frame's
    // depth (r9). Six registers saved, not nine: r11 (the site, from the
    // stub) is free at a function's entry, and r10 and rsi are left alone
    // (the frame's word is made in rcx, the record's in rdi once the frame
    // is pushed, the slot's offset in rcx then; the user's frame word is
    // read where it is needed rather than kept: measured, 0.24 ns a call
    // less). The call's return slot: rsp + 24. This entry and the return
    // below each start a cache line: builds that differed elsewhere moved
    // the recorded call's cost by up to 0.2 ns as the linker placed them.
    ".p2align 6",
    ".globl shadowgraph_fused_site_entry_plain",
    ".hidden shadowgraph_fused_site_entry_plain",
    "shadowgraph_fused_site_entry_plain:",
    "endbr64",
    plain_saves!(),
    entry_stack!(
        "",
        // The top frame's last word the fused user's frame word
        // (fgraph::FUSED_FRAME_WORD), rather than the user: all the path
        // needs of it. NO_FRAME_WORD (no fused user) is no stack word:
        // the top frame is then never recognised, and the way out of line
        // sends the call the general way.
        "cmp rax, [rip + {fused_word}]\n",
        "{frame_words}",
        "",
        "80f",
        fixed,
        "24",
        concat!("cmp qword ptr [rip + {fused_word}], {no_frame_word}\n", "je 80f\n")
    ),
    "cmp r8, [rip + {room_limit}]",
    "jae 80f",
    // rcx: the frame's function and depth, from the site (r11) before the
    // ring takes its register.
    "mov rcx, r9",
    "shl rcx, 48",
    "or rcx, r11",
    crate::fixed_tls!("mov r11, ", "qword", "tp_rings", "0", ""),
    "test r11, r11",
    "jz 80f",
    plain_record!(
        "shadowgraph_fused_plain_entry",
        "82f",
        // The top frame's last word still the fused user's frame word: the
        // check before the sequence again, in it (the one read of the user
        // that a grace period covers); the new frame's last word too.
        concat!(
            "mov rdx, [rip + {fused_word}]\n",
            "cmp rdx, [rdi + r8*8 - 8]\n",
            "jne 82f\n",
            "mov [rdi + r8*8 + 24], rdx\n"
        ),
        "rcx",
        "rdi",
        // The ring at the call's depth r9; or one level above it, where a
        // signal handler's call finds it between a frame's push and its
        // entry record, or between an exit record and the frame's pop: the
        // call is then recorded there (before the interrupted call, or
        // after it), and its frame says so (rcx made again), so that its
        // own calls and its exit follow it.
        // (In line: code out of the sequence's range is not restarted, and
        // the kernel may disarm the sequence while the thread runs there.)
        concat!(
            "cmp ax, r9w\n",
            "je 62f\n",
            "lea edx, [eax + 1]\n",
            "cmp dx, r9w\n",
            "jne 82f\n",
            "movzx r9d, ax\n",
            "shl rcx, 16\n",
            "shr rcx, 16\n",
            "mov rdx, r9\n",
            "shl rdx, 48\n",
            "or rcx, rdx\n",
            "62:\n",
        ),
        // One slot on, the ring's depth (= r9) one deeper.
        "0x10001",
        "",
        concat!(
            // The frame {R, rcx, slot, the user's BITMAP word}, pushed, in
            // the sequence: a handler that lands anywhere in it, or
            // preemption, sends the call the general way with the frame
            // taken back (curr = r8, as the handler left it: the frame
            // ours or none yet), so one write is whole.
            "mov rdx, [rsp + 24]\n",
            "mov [rdi + r8*8], rdx\n",
            "mov [rdi + r8*8 + 8], rcx\n",
            "lea rdx, [rsp + 24]\n",
            "mov [rdi + r8*8 + 16], rdx\n",
            "lea rdx, [r8 + 4]\n",
            crate::fixed_tls!("mov ", "qword", "tp_thread", "{t_curr}", ", rdx"),
            // rdi (the stack no longer needed): the record's word,
            // {time, Entry | MAGIC | depth << 6 | func << 16}: rcx rotated
            // is func << 16 | depth (< 1023), to which 63 × depth and the
            // bits add without carrying.
            "mov rdi, rcx\n",
            "rol rdi, 16\n",
            "imul rdx, r9, 63\n",
            "lea rdi, [rdi + rdx + {entry_bits}]\n",
        ),
        // An abort: the general way (below), not the sequence again: its
        // registers are reused as it goes (rcx, the frame's word, for the
        // slot's offset), and the general way makes the call's frame and
        // record from the state as the interruption left it.
        "82f"
    ),
    "cmp rsp, rsp",
    plain_pop_saved!(),
    "ret",
    // The general way: from 82 in the sequence, the frame perhaps pushed
    // (taken back: any handler's frames above it are gone), from 80 as
    // at entry (fgraph's site entry reads the site from the stub).
    "82:",
    crate::fixed_tls!("mov ", "qword", "tp_thread", "{t_curr}", ", r8"),
    "80:",
    plain_pop_saved!(),
    "jmp shadowgraph_graph_site_entry",
    // Return: in one restartable sequence, the top frame f (r10) the
    // returning call's (its slot) and kept for this user alone (its last
    // word the user's BITMAP word), its exit record written at its depth
    // if the ring is one deeper; then the frame popped.
    ".p2align 6",
    ".globl shadowgraph_fused_site_return_plain",
    ".hidden shadowgraph_fused_site_return_plain",
    "shadowgraph_fused_site_return_plain:",
    "endbr64",
    // The result's registers kept in xmm8–9 (free at a function's return:
    // caller-saved and no result's), out of memory: a pop's load made the
    // caller's first use of the result wait longer.
    "movq xmm8, rax",
    "movq xmm9, rdx",
    plain_record!(
        "shadowgraph_fused_plain_return",
        "90f",
        "",
        "r9",
        "rcx",
        "lea edx, [r8 + 1]\ncmp ax, dx\njne 90f\n",
        // One slot on, the ring's depth (= r8 + 1) one shallower.
        "0xffff",
        // All of it in the sequence (reads only: a restart reads it all
        // again). Neither the recursion bit nor a null stack is looked
        // for, unlike at the entry (measured: 0.27 ns a call less): the
        // stub returns here only for a call it hooked, whose frame is on
        // the stack, and that stack is dropped only at the thread's exit,
        // once every frame on it is finished (fgraph's thread_exit); the
        // bit is held only in the agent's own code, whose callbacks the
        // program's code runs in only as a call the bit declines (no
        // frame), or as a signal handler, whose hooked calls were entered
        // in it and so return in it, bit clear. (A handler that leaves
        // the agent's code by longjmp may leave the bit set until the
        // abandoned bracket is found: a return here meanwhile is recorded
        // as at rest, where the ring's and the frame's checks below
        // hold.) The ring may be gone while frames are not: a forked
        // child drops its parent's.
        concat!(
            crate::fixed_tls!("mov r11, ", "qword", "tp_rings", "0", ""),
            "test r11, r11\n",
            "jz 90f\n",
            crate::fixed_tls!("mov rdi, ", "qword", "tp_thread", "{t_stack}", ""),
            crate::fixed_tls!("mov r9, ", "qword", "tp_thread", "{t_curr}", ""),
            // (At curr = 0, the stack's word −1: always 0, no frame's.)
            // The top frame's last word the fused user's: its one read
            // that a grace period covers (NO_FRAME_WORD, no stack word,
            // once it is gone).
            "mov rax, [rdi + r9*8 - 8]\n",
            "cmp rax, [rip + {fused_word}]\n",
            "jne 90f\n",
            "lea r10, [r9 - {frame_words} - 1]\n",
            "lea rax, [rsp - 8]\n",
            "cmp [rdi + r9*8 - 16], rax\n",
            "jne 90f\n",
            // rcx: the frame's function and depth, rotated: func << 16 |
            // depth; r8: the depth (the ring's is one more if nothing is
            // out of place).
            "mov rcx, [rdi + r10*8 + 8]\n",
            "rol rcx, 16\n",
            "movzx r8d, cx\n",
            // Deeper than records can say: the general way records it
            // at 1023.
            "cmp r8d, {max_record_depth}\n",
            "jae 90f\n",
        ),
        // The record's word, {time, Exit | MAGIC | depth << 6 | func <<
        // 16}: 63 × depth and the bits add to rcx without carrying.
        concat!("imul rdx, r8, 63\n", "lea rcx, [rcx + rdx + {exit_bits}]\n",),
        // An abort: the sequence again (it only read before its commit).
        "shadowgraph_fused_plain_return_restart"
    ),
    "mov r11, [rdi + r10*8]",
    crate::fixed_tls!("mov ", "qword", "tp_thread", "{t_curr}", ", r10"),
    "movq rdx, xmm9",
    "movq rax, xmm8",
    "push r11",
    "ret",
    "90:",
    "movq rdx, xmm9",
    "movq rax, xmm8",
    "jmp shadowgraph_site_return_general",
    // The site stubs' entry and return for a recorder with a time filter
    // alone (`-t`): see [`attach_timed`]. Entry: as the site entry above
    // up to label 4, then the frame with the user's word in it (the
    // parent's, most often a timed frame: its DATA word last, 6 words),
    // then the clock read into the word; nothing in the ring.
    ".globl shadowgraph_fused_timed_entry",
    ".hidden shadowgraph_fused_timed_entry",
    "shadowgraph_fused_timed_entry:",
    "endbr64",
    entry_head!(
        concat!(timed_data_word!("r10"), "cmp rax, r10\n"),
        "5",
        ""
    ),
    // Room for the frame and the data, else the general way counts an
    // overrun (fast_push_limit leaves room for 4 words beyond curr).
    "lea rax, [r8 + 2]",
    "cmp rax, [rip + {room_limit}]",
    "jae 81f",
    "mov rdx, [rsp]",
    "mov rax, r9",
    "shl rax, 48",
    "or rdx, rax",
    timed_data_word!("r10"),
    "mov r11, [rsi + {u_frame_word}]",
    // Written whole before curr publishes it and again after, as frames
    // are, the word 0 (a handler landing meanwhile passes over the call:
    // it is not being timed). Then ENTRY_TIMING, by one store, so that a
    // signal handler landing from then on, before the exchange below,
    // writes this call's entry itself (at an older time than its own
    // records: see ENTRY_TIMING); a second write of the frame after it
    // would undo the handler's mark.
    timed_frame_words!(),
    "lea rax, [r8 + 6]",
    "mov qword ptr fs:[rcx + {t_curr}], rax",
    timed_frame_words!(),
    "mov r11, {entry_timing}",
    "mov [rdi + r8*8 + 32], r11",
    // The entry time, by one exchange from ENTRY_TIMING (which fails if
    // a handler wrote the entry meanwhile: its time stands), flags clear.
    "rdtsc",
    "shl rdx, 32",
    "or rdx, rax",
    "shl rdx, 3",
    "shr rdx, 3",
    "mov rax, r11",
    "cmpxchg [rdi + r8*8 + 32], rdx",
    site_entry_end!(),
    // Return: as the site return above, for a top frame this entry made.
    // A call whose entry is written (a descendant of it, or a signal
    // handler, proved it long) writes its exit; one that lasted less
    // than the threshold is popped, writing nothing (below: in one
    // restartable sequence, or marked dropped first without rseq);
    // anything else goes the general way: a call that lasted long enough
    // (rare, by the filter's purpose) has its callers' entries, its own
    // and its exit written there, in time order.
    ".globl shadowgraph_fused_timed_return",
    ".hidden shadowgraph_fused_timed_return",
    "shadowgraph_fused_timed_return:",
    "endbr64",
    return_head!(""),
    // f (r10) = curr − 6: its BITMAP word the user's, its DATA word last,
    // its slot the returning call's.
    "cmp r9, 6",
    "jb 91f",
    "mov rax, [rsi + {u_frame_word}]",
    "cmp [rdi + r9*8 - 24], rax",
    "jne 91f",
    timed_data_word!("rax"),
    "cmp [rdi + r9*8 - 8], rax",
    "jne 91f",
    "lea r10, [r9 - 6]",
    "lea rax, [rsp + 8]",
    "cmp [rdi + r10*8 + 16], rax",
    "jne 91f",
    // With rseq: the word read, the call judged and its frame popped in
    // one restartable sequence, the pop its commit. A signal handler that
    // lands in it finds the frame still pushed and its entry waiting (its
    // records, if long, write the entry first, and the restart then finds
    // it written and writes the exit); one that jumps out leaves the frame
    // as a call not yet judged. A call popped is never marked dropped.
    "shadowgraph_fused_timed_drop_restart:",
    crate::fixed_load!("rdx", "rseq_cs"),
    "test rdx, rdx",
    "jz 62f",
    "lea rax, [rip + shadowgraph_fused_timed_drop_cs]",
    "mov qword ptr fs:[rdx], rax",
    "shadowgraph_fused_timed_drop_start:",
    timed_judge!(),
    crate::fixed_load!("rcx", "tp_thread"),
    "mov rdx, [rdi + r10*8]",
    "mov qword ptr fs:[rcx + {t_curr}], r10",
    "shadowgraph_fused_timed_drop_post:",
    "mov r11, rdx",
    "add qword ptr [r8], 0xffff",
    "pop rdx",
    "pop rax",
    "push r11",
    "ret",
    ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits",
    rseq_abort!("shadowgraph_fused_timed_drop"),
    ".popsection",
    rseq_descriptor!("shadowgraph_fused_timed_drop"),
    // Without rseq: the same judgement, then the call dropped by one
    // exchange (a handler that wrote its entry since the load makes it
    // fail: the general way writes the exit), its users taken, popped.
    "62:",
    timed_judge!(),
    "mov rax, r11",
    "mov rdx, r11",
    "bts rdx, {dropped_bit}",
    "cmpxchg [rdi + r10*8 + 32], rdx",
    "jne 91f",
    "and dword ptr [rdi + r10*8 + 24], {users_clear}",
    pop_frame!("push r11\nret\n"),
    // Written: the exit record, in the ring of this thread (else the
    // general way).
    "60:",
    crate::fixed_load!("rcx", "tp_rings"),
    "mov r11, qword ptr fs:[rcx]",
    "test r11, r11",
    "jz 91f",
    exit_record!("shadowgraph_fused_timed_return_record"),
    pop_frame!("push r11\nret\n"),
    "92:",
    site_return_general!(),
    // The site stubs' entry and return for a profile alone (see
    // [`attach_profile`]). Entry: as the site entry above up to label 4
    // (the parent, most often a profile's frame: its DATA word last, 8
    // words), then, if this thread has a table with a row for the site
    // (else the general way makes it or counts the call), the row's call
    // counted under way, the frame with the profile's data {start,
    // children, id} and its DATA word, written whole before curr publishes
    // it and again after, the start time, and the user's BITMAP word.
    ".globl shadowgraph_fused_profile_entry",
    ".hidden shadowgraph_fused_profile_entry",
    "shadowgraph_fused_profile_entry:",
    "endbr64",
    entry_head!(
        concat!(data_word!("r10", "{data_three}"), "cmp rax, r10\n"),
        "7",
        ""
    ),
    "lea rax, [r8 + 4]",
    "cmp rax, [rip + {room_limit}]",
    "jae 81f",
    crate::fixed_load!("rax", "tp_profile"),
    "mov r11, qword ptr fs:[rax]",
    "test r11, r11",
    "jz 81f",
    "mov rdx, [rsp]",
    "mov rax, r9",
    "shl rax, 48",
    "or rdx, rax",
    "mov r9, [rsp + 32]",
    "mov r9d, dword ptr [r9 + {id_off}]",
    "cmp r9, [rip + {profile_rows}]",
    "jae 81f",
    "mov r11, [r11 + {pt_rows}]",
    "mov rax, r9",
    "shl rax, 6",
    "add qword ptr [r11 + rax + {pc_active}], 1",
    data_word!("r10", "{data_three}"),
    profile_frame_words!(),
    "lea rax, [r8 + 8]",
    "mov qword ptr fs:[rcx + {t_curr}], rax",
    profile_frame_words!(),
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "mov [rdi + r8*8 + 32], rax",
    "mov rax, [rsi + {u_frame_word}]",
    "mov [rdi + r8*8 + 24], rax",
    site_entry_end!(),
    // Return: as the site return above, for a top frame this entry made
    // whose caller's frame (if any) is the profile's too and whose row is
    // in this thread's table (else the general way): d = now − start (0 if
    // the clock went back), the frame's users taken (as finish_frame), d
    // added to the caller's children and to the row, one instruction a
    // field, the frame popped.
    ".globl shadowgraph_fused_profile_return",
    ".hidden shadowgraph_fused_profile_return",
    "shadowgraph_fused_profile_return:",
    "endbr64",
    return_head!(""),
    "cmp r9, 8",
    "jb 91f",
    "mov rax, [rsi + {u_frame_word}]",
    "cmp [rdi + r9*8 - 40], rax",
    "jne 91f",
    data_word!("rcx", "{data_three}"),
    "cmp [rdi + r9*8 - 8], rcx",
    "jne 91f",
    "lea r10, [r9 - 8]",
    "lea rax, [rsp + 8]",
    "cmp [rdi + r10*8 + 16], rax",
    "jne 91f",
    // The caller's children (r11), 0: no caller.
    "xor r11d, r11d",
    "test r10, r10",
    "jz 2f",
    "cmp [rdi + r10*8 - 8], rcx",
    "jne 91f",
    "lea r11, [rdi + r10*8 - 24]",
    "2:",
    // The row (rsi).
    crate::fixed_load!("rax", "tp_profile"),
    "mov rcx, qword ptr fs:[rax]",
    "test rcx, rcx",
    "jz 91f",
    "mov rsi, [rdi + r10*8 + 48]",
    "cmp rsi, [rip + {profile_rows}]",
    "jae 91f",
    "shl rsi, 6",
    "add rsi, [rcx + {pt_rows}]",
    "rdtsc",
    "shl rdx, 32",
    "or rax, rdx",
    "sub rax, [rdi + r10*8 + 32]",
    "jnc 3f",
    "xor eax, eax",
    "3:",
    "and dword ptr [rdi + r10*8 + 24], {users_clear}",
    "test r11, r11",
    "jz 4f",
    "add [r11], rax",
    "4:",
    "add qword ptr [rsi + {pc_hits}], 1",
    "add [rsi + {pc_total}], rax",
    "mov rcx, rax",
    "sub rcx, [rdi + r10*8 + 40]",
    "jnc 5f",
    "xor ecx, ecx",
    "5:",
    "add [rsi + {pc_self}], rcx",
    "mov rcx, rax",
    "mul rax",
    "add [rsi + {pc_sumsq}], rax",
    "adc [rsi + {pc_sumsq} + 8], rdx",
    "sub qword ptr [rsi + {pc_active}], 1",
    "jnz 6f",
    "add [rsi + {pc_outer}], rcx",
    "6:",
    pop_frame!("push r11\nret\n"),
    site_return_general!(),
    ".popsection",
    tp_local = sym fgraph::TP_LOCAL,
    tp_thread = sym fgraph::TP_THREAD,
    tp_rings = sym TP_RINGS,
    rseq_cs = sym RSEQ_CS,
    rseq_restarts = sym RSEQ_RESTARTS,
    fused = sym fgraph::SOLE_PROVIDED,
    fused_word = sym fgraph::SOLE_FRAME_WORD,
    no_frame_word = const fgraph::NO_FRAME_WORD as i64,
    manager_entry = sym fgraph::manager_tramp_entry,
    l_word = const offset_of!(CoreLocal, word),
    l_rec = const offset_of!(CoreLocal, rec),
    l_anchor = const offset_of!(CoreLocal, outer_anchor),
    t_stack = const offset_of!(ThreadState, stack),
    t_curr = const offset_of!(ThreadState, curr),
    t_blockers = const crate::fgraph::stack::BLOCKERS,
    hookable = const crate::fgraph::stack::HOOKABLE,
    u_frame_word = const offset_of!(GraphUser, frame_word),
    u_slot = const offset_of!(GraphUser, slot),
    u_max_depth = const GraphUser::PATH_WORDS + 8 * W_MAX_DEPTH,
    r_offset_mask = const offset_of!(RingHeader, offset_mask),
    slot_shift = const crate::record::ring::SLOT_SHIFT,
    r_head = const offset_of!(RingHeader, head),
    r_room_end = const offset_of!(RingHeader, room_end),
    r_reserve = const offset_of!(RingHeader, reserve),
    header = const HEADER_BYTES,
    room_limit = sym crate::fgraph::stack::FAST_PUSH_LIMIT,
    frame_words = const crate::fgraph::stack::FRAME_WORDS,
    entry_bits = const shadowgraph_data::format::MAGIC << 3,
    max_record_depth = const MAX_RECORD_DEPTH,
    // The users' bits (12..27) lie in the word's low half.
    users_clear = const !(0xffffu32 << 12),
    exit_bits = const shadowgraph_data::format::MAGIC << 3 | 1,
    id_off = const crate::tramp::SITE_STUB_ID_FROM_RET,
    u_filter = const GraphUser::PATH_WORDS + 8 * W_FILTER,
    f_classes = const offset_of!(FusedFilter, classes),
    f_len = const offset_of!(FusedFilter, len),
    f_functions = const offset_of!(FusedFilter, has_functions),
    f_max_depth = const offset_of!(FusedFilter, max_depth),
    tv = const crate::fgraph::stack::TASK_VAR_BASE * 8,
    notrace_bit = const crate::fgraph::filters::NOTRACE_BIT,
    in_graph_bit = const crate::fgraph::filters::IN_GRAPH_BIT,
    graph_depth_shift = const crate::fgraph::filters::GRAPH_DEPTH_SHIFT,
    not_graph_depth = const !(0xffffu64 << crate::fgraph::filters::GRAPH_DEPTH_SHIFT),
    u_min_ticks = const GraphUser::PATH_WORDS + 8 * W_MIN_TICKS,
    data_one = const crate::fgraph::stack::data(5, 0, 1),
    entry_timing = const ENTRY_TIMING,
    written_bit = const ENTRY_WRITTEN.trailing_zeros(),
    dropped_bit = const ENTRY_DROPPED.trailing_zeros(),
    data_three = const crate::fgraph::stack::data(7, 0, 3),
    tp_profile = sym TP_PROFILE,
    profile_rows = sym PROFILE_ROWS,
    pt_rows = const offset_of!(ProfileTable, rows),
    pc_hits = const offset_of!(ProfileCounters, hits),
    pc_total = const offset_of!(ProfileCounters, total),
    pc_self = const offset_of!(ProfileCounters, self_time),
    pc_active = const offset_of!(ProfileCounters, active),
    pc_sumsq = const offset_of!(ProfileCounters, sumsq),
    pc_outer = const offset_of!(ProfileCounters, outer),
);

// The profile rows' size the assembly indexes by (id << 6).
const _: () = assert!(std::mem::size_of::<ProfileCounters>() == 64);
