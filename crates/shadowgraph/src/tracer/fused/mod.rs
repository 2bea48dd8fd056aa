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
//! Several recorders registered at once (plain ones, with depth limits or
//! not, ones with graph filters or triggers, one profile) take the multi
//! path ([`enable_multi`], multi.rs, multi_filters.rs, multi_users.rs):
//! fgraph's site entry and return hand their
//! calls over to it, one frame and one clock read for all of them and a
//! record in the ring of each one that takes the call.
//!
//! The thread-local state is reached at its offset from the thread pointer
//! (initial-exec TLS: the same offset in every thread), computed once
//! (fgraph::init_tp_offsets and [`attach`]) and then written into this
//! code as immediates (`fixed_load!`, tls::patch_fixed_loads).

mod args_asm;
mod args_table;
mod frame_asm;
mod general;
mod multi;
mod multi_filters;
mod multi_profile;
mod multi_rings;
mod multi_users;
mod plain;
mod plain_args;
mod plain_regs;
mod profile;
mod ring_asm;
mod site_args;
mod timed;
mod variant_asm;
mod watch;

pub use site_args::{fast_args, fast_retval, SiteArgs};
use site_args::{FAST_ARGS, GENERAL};
pub use watch::cpu_moved;

use crate::clock;
use crate::record::writer;

use crate::fgraph::filters::GraphFilter;
use crate::fgraph::{self, GraphUser};
use crate::ftrace::quiesce;
use crate::tracer::profile::ProfileCounters;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

// The user's words this path reads (fgraph's `GraphUser::path_words`):
/// Calls at this depth or deeper are declined (`-D`); 0: no limit; the
/// sign bit: the filter table decides.
pub(super) const W_MAX_DEPTH: usize = 0;
/// The graph filters applied, a [`FusedFilter`] (its callbacks apply the
/// same, as `fgraph::filters::GraphFilter`); 0: none.
pub(super) const W_FILTER: usize = 1;
/// The time filter's threshold in TSC ticks (`-t`; its callbacks keep the
/// entry time in a reserved word), 0: none.
pub(super) const W_MIN_TICKS: usize = 2;
/// The filtered recorder's table of return values to record ([`RetTable`]),
/// 0: none; a word of its own, so that a return without any reads one
/// word before its record, not the filter's and then the table's.
pub(super) const W_RETS: usize = 3;

/// Graph filters in the fused path's terms: each site's class (bit 0: a
/// function of `-F`, bit 1: of `-N`, bit 2: the general way, [`GENERAL`],
/// bit 3: arguments the entry records, [`FAST_ARGS`]) by site id, whether
/// there is a `-F` set, and the depth limit (0: none). Sites added later
/// (ids from `len` on) go the general way. Never freed (a thread may still
/// read it).
#[repr(C)]
pub(crate) struct FusedFilter {
    classes: *const u8,
    len: u64,
    has_functions: u64,
    max_depth: u64,
    /// Per site: its argument descriptor where its class has
    /// [`FAST_ARGS`] (else 0).
    args: *const u64,
    /// The recorder's triggers' switch (`Triggers::switch_byte`), null
    /// without triggers. With it, their thread variable decides instead
    /// of the classes' filter bits and `max_depth` (general.rs, label 72):
    /// a call is declined once the switch says FINISHED, and recorded
    /// only while it says ON (else its frame is kept silently).
    switch: *const u8,
    /// The triggers' depth limit as their variable holds it
    /// (`Triggers::limit_word`).
    limit: u64,
    /// Nonzero for a recorder of `watch:cpu` events (watch.rs), which has
    /// triggers: a call whose thread is on another processor than its
    /// last event named goes to the callbacks. Read with a `switch` only.
    watch: u64,
}

/// The table of return values the fused return looks a returning call's
/// site up in (args_asm.rs, label 54): its first word the mask of the
/// slot indexes (slots a power of two, at least twice the entries), then
/// per slot `{site, mask, from xmm0}`, a site in the first free slot from
/// `(site >> 4) & mask` on (0: free). Never freed.
struct RetTable;

impl RetTable {
    /// The table of `rets` (site address, (mask, from xmm0)), leaked; null
    /// if empty.
    fn make(rets: &[(usize, (u64, bool))]) -> *const u64 {
        if rets.is_empty() {
            return std::ptr::null();
        }
        let slots = (2 * rets.len()).next_power_of_two();
        let mut t = vec![0u64; 1 + 3 * slots];
        t[0] = slots as u64 - 1;
        for &(site, (mask, xmm)) in rets {
            let mut i = (site >> 4) & (slots - 1);
            while t[1 + 3 * i] != 0 {
                i = (i + 1) & (slots - 1);
            }
            t[1 + 3 * i] = site as u64;
            t[2 + 3 * i] = mask;
            t[3 + 3 * i] = xmm as u64;
        }
        Box::leak(t.into_boxed_slice()).as_ptr()
    }
}

/// Offset from the thread pointer of the fused instance's ring in the
/// writer's thread-local rings (the core's and fgraph's state:
/// fgraph::TP_LOCAL, fgraph::TP_THREAD).
pub(super) static TP_RINGS: AtomicI64 = AtomicI64::new(0);

/// Offset from the thread pointer of the `rseq_cs` field of the thread's
/// `struct rseq`, which glibc (2.35 on) registers with the kernel for every
/// thread it starts; 0: no rseq (older glibc or kernel, valgrind,
/// `GLIBC_TUNABLES=glibc.pthread.rseq=0`), and the fused path claims its
/// ring slots by `cmpxchg` (ring_record).
pub(super) static RSEQ_CS: AtomicI64 = AtomicI64::new(0);

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
pub(super) static RSEQ_RESTARTS: AtomicU64 = AtomicU64::new(0);

/// The depth a record holds at most (10 bits). The general way records
/// deeper calls at this depth; the fused paths leave them to it (a deeper
/// depth would run into the record's function address).
pub(super) const MAX_RECORD_DEPTH: u32 = 1023;

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
    RSEQ_RESTARTS.load(Ordering::Relaxed) + args_entry_restarts()
}

/// How many of [`rseq_restarts`] were in the plain entry that records
/// arguments ([`attach_plain_args`]).
pub fn args_entry_restarts() -> u64 {
    args_table::ARGS_RESTARTS.load(Ordering::Relaxed)
}

/// Offset from the thread pointer of the profile's table pointer of this
/// thread ([`attach_profile`]), and how many rows each table has.
pub(super) static TP_PROFILE: AtomicI64 = AtomicI64::new(0);
pub(super) static PROFILE_ROWS: AtomicU64 = AtomicU64::new(0);

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

// The fused path of several plain recorders (multi.rs), and a profile
// beside them (multi_profile.rs).
pub use multi_profile::{forget_multi_profile, let_multi_stand_in_profile};
pub use multi_users::{let_multi_stand_in, let_multi_stand_in_with_args};

/// Records a ring must have room for beyond the path's own before the
/// path writes in it: those of signal handlers that land between its
/// look at the rings and its records (a record that then finds no room
/// is counted lost; the general way would have waited for room).
pub(super) const SPARE_RECORDS: u64 = 256;

/// Offset from the thread pointer of the thread's rings of every
/// instance (`writer::rings_of_this_thread`): instance i's at + 8i.
pub(super) static TP_RINGS_ALL: AtomicI64 = AtomicI64::new(0);

/// Offset from the thread pointer of the thread's rings by graph slot
/// (`writer::BySlot`).
pub(super) static TP_BY_SLOT: AtomicI64 = AtomicI64::new(0);

/// Makes the multi path available: fgraph hands calls over to it while
/// every registered user (two or more) was marked by
/// [`let_multi_stand_in`]. Before the first graph user registers, or
/// after, if it was made available then: a recording attached beside
/// another shares the path with it. False (nothing changed) when records
/// are not timed by the TSC, or a user registered before it was made
/// available.
pub fn enable_multi() -> bool {
    let entry = shadowgraph_fused_multi_entry as *const () as usize;
    if fgraph::multi_path_is(entry) {
        return true;
    }
    if !clock::uses_tsc() || fgraph::manager_made() {
        return false;
    }
    // Relaxed (all three): read by the path only after MULTI_FRAME_WORD, which
    // fgraph publishes (Release) when users register, later.
    TP_RINGS_ALL.store(
        crate::tls::tp_offset(writer::rings_of_this_thread()),
        Ordering::Relaxed,
    );
    TP_BY_SLOT.store(
        crate::tls::tp_offset(writer::rings_by_slot_of_this_thread()),
        Ordering::Relaxed,
    );
    RSEQ_CS.store(rseq_cs_offset().unwrap_or(0), Ordering::Relaxed);
    fgraph::init_tp_offsets();
    fgraph::register_multi_path(entry, shadowgraph_fused_multi_return as *const () as usize)
}

extern "C" {
    fn shadowgraph_fused_multi_entry();
    fn shadowgraph_fused_multi_return();
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

// The plain entries with arguments, in `args_table::entry_of`'s order
// from 1: the descriptor's (plain_args.rs), then plain_regs.rs's, whole
// words of 1–6 registers, then low halves.
macro_rules! plain_args_entries {
    ($($f:ident),*) => {
        extern "C" {
            $(fn $f();)*
        }

        /// The plain entries with arguments' addresses (see above).
        fn plain_args_entries() -> Vec<usize> {
            vec![$($f as *const () as usize),*]
        }

        // They fit the stubs' alternatives.
        const _: () = assert!([$(stringify!($f)),*].len() <= crate::ftrace::MAX_ALT_ENTRIES);
    };
}
plain_args_entries!(
    shadowgraph_fused_site_entry_plain_args,
    shadowgraph_fused_regs8_1,
    shadowgraph_fused_regs8_2,
    shadowgraph_fused_regs8_3,
    shadowgraph_fused_regs8_4,
    shadowgraph_fused_regs8_5,
    shadowgraph_fused_regs8_6,
    shadowgraph_fused_regs4_1,
    shadowgraph_fused_regs4_2,
    shadowgraph_fused_regs4_3,
    shadowgraph_fused_regs4_4,
    shadowgraph_fused_regs4_5,
    shadowgraph_fused_regs4_6
);

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
    attach_inner(user, inst, max_depth, None, None, false)
}

/// Whether [`attach_plain_args`] can take the plain site path here:
/// records timed by the TSC, rseq registered, grace periods that restart
/// sequences.
pub fn plain_args_possible() -> bool {
    clock::uses_tsc() && rseq_cs_offset().is_some() && quiesce::fence_rseq_too()
}

/// [`attach`] without a depth limit for a recorder whose entry callback
/// also records the arguments of the sites `descs` gives descriptors
/// ([`fast_args`], by site id; 0: none) after their entry records. The
/// stubs of those sites call an entry of their own (plain_args.rs) that
/// writes the arguments with the record; every other site's calls go as
/// with [`attach`]. Calls through the manager's trampolines (sites without
/// a stub) go the general way. False (nothing changed) as for `attach`,
/// or where the plain site path would not be taken (no rseq, or grace
/// periods could not restart sequences): its fallback records no data.
pub fn attach_plain_args(user: &GraphUser, inst: usize, descs: &[u64]) -> bool {
    if !plain_args_possible() || inst >= writer::MAX_INSTANCES || fgraph::manager_made() {
        return false;
    }
    args_table::set_plain_args(descs);
    attach_inner(user, inst, 0, None, None, true)
}

/// [`attach`] for a recorder whose callbacks apply `filter` (its functions,
/// notrace sets and depth limit; no thread filter) with
/// `GraphFilter::entry_with(.., 0)` and `GraphFilter::ret`, and emit
/// the records at the depths those give. The fused path applies the same
/// filters at sites with stubs, and records the arguments of the sites
/// `sites` gives descriptors ([`SiteArgs::Fast`]); it leaves the calls of
/// those it names [`SiteArgs::General`] to the callbacks. With triggers
/// (`Triggers::fusable` ones), their variable decides the calls of the
/// functions without a trigger of their own, as `Triggers::entry` and
/// `Triggers::ret` would, and the others go to the callbacks. False
/// (nothing changed) as for `attach`, with a thread filter, or with
/// triggers that are not fusable.
///
/// A callback that needs a call's return itself (its return value) keeps
/// a word in the call's frame (`GraphUser::reserve`): the fused return
/// knows only frames without one as its own.
///
/// `watch_cpu`: the callbacks also write a `watch:cpu` event at a call's
/// entry and exit when the thread runs on another processor than its
/// last event named ([`cpu_moved`] says); the fused path leaves those
/// calls to them (without rseq, every call). Refused without triggers.
pub fn attach_filtered(
    user: &GraphUser,
    inst: usize,
    filter: &GraphFilter,
    sites: &dyn Fn(crate::ftrace::SiteId) -> SiteArgs,
    watch_cpu: bool,
) -> bool {
    // Refused before the table is made (it is never freed). (The path
    // looks at `watch_cpu` only where the filter has triggers, which the
    // recorder makes for it.)
    if !fusable_filter(filter)
        || watch_cpu && filter.triggers.is_none()
        || inst >= writer::MAX_INSTANCES
        || fgraph::manager_made()
    {
        return false;
    }
    let (table, rets) = filter_table(filter, sites);
    table.watch = watch_cpu as u64;
    if watch_cpu {
        watch::init(inst);
    }
    // Release: as in attach_timed.
    user.path_words[W_RETS].store(rets as u64, Ordering::Release);
    attach_inner(user, inst, 0, Some(table), None, false)
}

/// [`attach`] for a profile (`--tracer profile`) alone: `user`'s entry
/// callback reserves 24 bytes of the frame, `{start, children, site id}`
/// (the id's row of this thread's table counted under way), and its return
/// callback adds the call's duration `d` to its caller's `children` (the
/// frame below, if its own) and to the row (hits, total, self = d −
/// children, Σd², and the outermost calls' total when none is under way).
/// `table` is this thread's cell holding the thread's [`ProfileTable`](crate::tracer::profile::ProfileTable)
/// (thread-local, initial-exec: the same offset in every thread; null
/// until the callbacks make it), each with `rows` rows. The fused path
/// does both where sites have stubs, the callbacks the rest (no table
/// yet, a site beyond the rows). False (nothing changed) as for `attach`.
pub fn attach_profile(user: &GraphUser, inst: usize, table: usize, rows: usize) -> bool {
    if !clock::uses_tsc() || inst >= writer::MAX_INSTANCES || fgraph::manager_made() {
        return false;
    }
    TP_PROFILE.store(crate::tls::tp_offset(table), Ordering::Relaxed);
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
        false,
    )
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
    // Release (this and the words below): set before the path is
    // registered, whose assembly reads them through the user it loads.
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
        false,
    )
}

/// After objects were loaded (dlopen): a user attached with
/// [`attach_filtered`] gets a table covering the new sites too, which
/// took the general way until then (their ids were beyond the table).
/// The old table stays (a thread may be reading it; one per load).
pub fn refresh_filtered(
    user: &GraphUser,
    filter: &GraphFilter,
    sites: &dyn Fn(crate::ftrace::SiteId) -> SiteArgs,
) {
    let old = user.path_words[W_FILTER].load(Ordering::Acquire) as *const FusedFilter;
    if old.is_null() {
        return;
    }
    let (table, rets) = filter_table(filter, sites);
    // SAFETY: a table attach_filtered or this made, never freed.
    table.watch = unsafe { (*old).watch };
    // Release: each table whole before a thread finds it (a thread may
    // pair a new one with an old one for a while: both stay valid).
    user.path_words[W_RETS].store(rets as u64, Ordering::Release);
    user.path_words[W_FILTER].store(table as *mut FusedFilter as u64, Ordering::Release);
}

/// [`let_multi_stand_in`] for a recorder with graph filters (`-F`, `-N`,
/// `-D`): its callbacks apply `filter` first (`GraphFilter::entry_with`
/// without reserving, `GraphFilter::ret`) and record a call they take at
/// the user's own depth. The path applies the same filters, keeping the
/// same thread variable, and records no data: the calls of the sites
/// that `sites` gives arguments or a return value to record go to the
/// callbacks, of every user. With triggers (`Triggers::fusable` ones),
/// their variable decides the calls of the functions without a trigger
/// of their own, as with [`attach_filtered`], and every call of the
/// others goes to the callbacks. False (nothing changed) for a thread
/// filter or triggers that are not fusable, records not timed by the
/// TSC, or an instance out of range.
///
/// `watch_cpu`: as for [`attach_filtered`], per user (its instance's
/// last processor).
pub fn let_multi_stand_in_filtered(
    user: &GraphUser,
    filter: &GraphFilter,
    sites: &dyn Fn(crate::ftrace::SiteId) -> SiteArgs,
    watch_cpu: bool,
) -> bool {
    if !fusable_filter(filter) || user.private >= writer::MAX_INSTANCES {
        return false;
    }
    let (table, _) = filter_table(filter, &|id| match sites(id) {
        SiteArgs::None => SiteArgs::None,
        _ => SiteArgs::General,
    });
    table.watch = watch_cpu as u64;
    if watch_cpu {
        watch::init_all();
    }
    multi_users::stand_in_filtered(
        user,
        table as *mut FusedFilter as u64,
        table.classes,
        table.len,
    );
    true
}

/// Whether the fused paths can apply `filter`: no thread filter, triggers
/// that decide alone (`Triggers::fusable`), records timed by the TSC.
fn fusable_filter(filter: &GraphFilter) -> bool {
    filter.threads.is_none()
        && filter.triggers.as_ref().is_none_or(|t| t.fusable())
        && clock::uses_tsc()
}

/// Each site's class under `filter` (bit 0: a `-F` function, bit 1: `-N`,
/// [`GENERAL`] and [`FAST_ARGS`] as `sites` says) and argument
/// descriptor, for every site the core knows now, and the table of the
/// return values the fused return records (null: none); never freed.
/// Without rseq the fused path records no values: those sites go the
/// general way.
fn filter_table(
    filter: &GraphFilter,
    sites: &dyn Fn(crate::ftrace::SiteId) -> SiteArgs,
) -> (&'static mut FusedFilter, *const u64) {
    let all = crate::ftrace::sites();
    let n = all.len();
    let rseq = rseq_cs_offset().is_some();
    let triggers = filter.triggers.as_deref();
    let (mut args, mut rets) = (vec![0u64; n], Vec::new());
    let classes: Vec<u8> = (0..n as crate::ftrace::SiteId)
        .map(|id| {
            let has = |fs: &Option<std::sync::Arc<crate::ftrace::FilterSet>>| {
                fs.as_ref().is_some_and(|f| f.pair().contains(id))
            };
            // (A trigger's own function: the callbacks apply it.)
            let own_trigger = triggers.is_some_and(|t| t.acts_at(id));
            let data = match sites(id) {
                _ if own_trigger => GENERAL,
                SiteArgs::None => 0,
                SiteArgs::Fast { args: a, ret } if rseq => {
                    args[id as usize] = a;
                    if ret.0 != 0 {
                        rets.push((all[id as usize].addr, ret));
                    }
                    if a != 0 {
                        FAST_ARGS
                    } else {
                        0
                    }
                }
                SiteArgs::Fast { .. } | SiteArgs::General => GENERAL,
            };
            has(&filter.functions) as u8 | (has(&filter.notrace) as u8) << 1 | data
        })
        .collect();
    let classes = Box::leak(classes.into_boxed_slice());
    let args = Box::leak(args.into_boxed_slice());
    let table = Box::leak(Box::new(FusedFilter {
        classes: classes.as_ptr(),
        len: n as u64,
        // (With triggers, whether some function is a filter function.)
        has_functions: triggers.map_or(filter.functions.is_some(), |t| t.mode_in()) as u64,
        max_depth: filter.max_depth as u64,
        limit: triggers.map_or(0, |t| t.limit_word()) as u64,
        watch: 0,
        args: args.as_ptr(),
        // (The triggers kept for good, as the table is: a thread may read
        // the switch through it as long as it may read the table.)
        switch: filter.triggers.as_ref().map_or(std::ptr::null(), |t| {
            std::mem::forget(t.clone());
            t.switch_byte()
        }),
    }));
    (table, RetTable::make(&rets))
}

/// `stubs`: the site stubs' entry and return for a user that is not a
/// plain recorder (sites without stubs, and their hijacked returns, then
/// go the general way). `args`: a plain recorder of arguments
/// ([`attach_plain_args`]).
fn attach_inner(
    user: &GraphUser,
    inst: usize,
    max_depth: u32,
    filter: Option<&'static mut FusedFilter>,
    stubs: Option<(usize, usize)>,
    args: bool,
) -> bool {
    if !clock::uses_tsc() || inst >= writer::MAX_INSTANCES || fgraph::manager_made() {
        return false;
    }
    TP_RINGS.store(
        crate::tls::tp_offset(writer::rings_of_this_thread() + inst * 8),
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
    // Release: as in attach_timed.
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
        // A recorder of arguments: its trampolines' calls, and every call
        // where the plain code cannot run, go the general way (the
        // callbacks record the arguments; the fused fallbacks would not).
        let general = match args {
            true => fgraph::general_site_path(),
            false => general,
        };
        fgraph::SolePath {
            trampoline_entry: match args {
                true => 0,
                false => shadowgraph_fused_entry as *const () as usize,
            },
            site_entry_alt: args.then(|| {
                let entries: &'static [usize] = plain_args_entries().leak();
                (
                    entries,
                    args_table::entry_of as fn(crate::ftrace::SiteId) -> usize,
                )
            }),
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

// The profile rows' size the assembly indexes by (id << 6).
const _: () = assert!(std::mem::size_of::<ProfileCounters>() == 64);
