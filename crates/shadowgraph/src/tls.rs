//! Thread-local variables of the code that runs inside traced calls, in the
//! initial-exec TLS model.
//!
//! `thread_local!` in a shared object (the agent is one) is reached through
//! `__tls_get_addr` on every access: a call of about eleven instructions,
//! and the recording path made ten of them per traced call. A variable
//! declared with [`fast_thread_local!`](crate::fast_thread_local) lives in the object's static TLS
//! block instead and costs one `fs`-relative address computation, as in an
//! executable. That is valid for an object loaded at start-up (the agent is
//! preloaded) and, within glibc's reserve of static TLS, for one loaded by
//! `dlopen`; these variables take about a hundred bytes.
//!
//! The variables start all-zero in every thread (they live in `.tbss`) and
//! are never dropped, so their type must be valid all-zero and need no drop
//! (checked at compile time for the latter; the declaration states the
//! former by naming the type).

/// `fast_thread_local!(pub static NAME: Type;)` declares a zero-initialised
/// thread-local `NAME`, used as `NAME.get()` etc. through `Deref` (a unit
/// struct of that name whose target is this thread's variable). `Type`
/// must be valid when all bytes are zero (cells of integers and raw
/// pointers, arrays of them) and have alignment at most 16.
#[macro_export]
macro_rules! fast_thread_local {
    ($(#[$m:meta])* $vis:vis static $name:ident: $t:ty;) => {
        $(#[$m])*
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy)]
        $vis struct $name;

        const _: () = assert!(
            !::std::mem::needs_drop::<$t>() && ::std::mem::align_of::<$t>() <= 16
        );

        ::std::arch::global_asm!(
            ".pushsection .tbss,\"awT\",@nobits",
            // A cache line each: the hot ones (the thread's graph state, the
            // core's) then never share or straddle lines by chance of the
            // order the linker lays them out in, which would change what
            // the fast paths cost from one build to the next.
            ".p2align 6",
            // Global (the accessor is inlined into other codegen units) but
            // hidden: not exported, and resolved within the object. Two
            // declarations of one name on one line would fail to link.
            concat!(".globl shadowgraph_tls_", stringify!($name), "_", line!()),
            concat!(".hidden shadowgraph_tls_", stringify!($name), "_", line!()),
            concat!("shadowgraph_tls_", stringify!($name), "_", line!(), ":"),
            ".zero {size}",
            ".popsection",
            size = const ::std::mem::size_of::<$t>(),
        );

        impl ::std::ops::Deref for $name {
            type Target = $t;
            #[inline(always)]
            fn deref(&self) -> &$t {
                let p: *const $t;
                // SAFETY: the symbol is this object's TLS variable of
                // size_of::<$t>() zero bytes, 16-aligned; GOTTPOFF gives its
                // offset from the thread pointer, which fs:[0] holds (x86-64
                // TLS ABI). The address is this thread's for the thread's
                // life, the zero bytes are a valid $t (the declaration's
                // contract), and $t is only shared within this thread.
                unsafe {
                    ::std::arch::asm!(
                        concat!(
                            "mov {p}, qword ptr [rip + shadowgraph_tls_",
                            stringify!($name), "_", line!(), "@GOTTPOFF]"
                        ),
                        "add {p}, qword ptr fs:[0]",
                        p = out(reg) p,
                        options(pure, nomem, nostack),
                    );
                    &*p
                }
            }
        }
    };
}

/// `mov $reg, [rip + {$cell}]` (an assembly template line) of a cell that
/// holds its final value before the code can run: a thread-local variable's
/// offset from the thread pointer, rseq's. The instruction is listed
/// (section `shadowgraph_fixed_loads`: its address, the cell's) for
/// [`patch_fixed_loads`] to rewrite as `mov $reg, imm32` of the same
/// length: one load less at the start of each chain of dependent loads
/// that begins there (the recording paths pay for the longest such chain
/// before each clock read, record::fused). Either form is correct at any
/// time.
#[doc(hidden)]
#[macro_export]
macro_rules! fixed_load {
    ($reg:literal, $cell:literal) => {
        concat!(
            "1099:\n",
            "mov ",
            $reg,
            ", [rip + {",
            $cell,
            "}]\n",
            // Retained: only the linker's bounds refer to the section.
            ".pushsection shadowgraph_fixed_loads,\"awR\",@progbits\n",
            ".quad 1099b, {",
            $cell,
            "}\n",
            ".popsection\n",
        )
    };
}

/// An instruction (an assembly template line: `$before`, then a memory
/// operand of `$size` — `qword`, `dword` — at the thread pointer +
/// `{$cell}` + `$field`, then `$after`) that addresses thread-local state
/// at an offset from the thread pointer held by a cell, with no register:
/// the instruction is written with a placeholder displacement
/// ([`TLS_PLACEHOLDER`] + `$field`) and listed (section
/// `shadowgraph_fixed_tls`: its address, the cell's, `$field`) for
/// [`patch_fixed_tls`] to write the offset into. Unlike [`fixed_load!`],
/// the placeholder is not correct: code that uses this must not run
/// unless [`patch_fixed_tls`] returned true.
#[doc(hidden)]
#[macro_export]
macro_rules! fixed_tls {
    ($before:literal, $size:literal, $cell:literal, $field:literal, $after:literal) => {
        concat!(
            "1098:\n",
            $before,
            $size,
            " ptr fs:[0x5a5a0000 + ",
            $field,
            "]",
            $after,
            "\n",
            ".pushsection shadowgraph_fixed_tls,\"awR\",@progbits\n",
            ".quad 1098b, {",
            $cell,
            "}, ",
            $field,
            "\n",
            ".popsection\n",
        )
    };
}

/// The displacement [`fixed_tls!`] writes (plus its field's offset) until
/// it is patched: an address no thread-local variable has.
const TLS_PLACEHOLDER: i32 = 0x5a5a_0000;

/// An entry of section `shadowgraph_fixed_tls` (see [`fixed_tls!`]).
#[repr(C)]
struct FixedTls {
    insn: usize,
    cell: *const i64,
    field: i64,
}

// One empty entry (insn 0), so that the section and its bounds exist in a
// build where no code uses `fixed_tls!`.
std::arch::global_asm!(
    ".pushsection shadowgraph_fixed_tls,\"awR\",@progbits",
    ".p2align 3",
    ".quad 0, 0, 0",
    ".popsection",
);

extern "C" {
    static __start_shadowgraph_fixed_tls: FixedTls;
    static __stop_shadowgraph_fixed_tls: FixedTls;
}

fn fixed_tls_table() -> &'static [FixedTls] {
    // SAFETY: the linker's bounds of a section of entries written by
    // `fixed_tls!`, in this object's data.
    unsafe {
        section(
            &raw const __start_shadowgraph_fixed_tls,
            &raw const __stop_shadowgraph_fixed_tls,
        )
    }
}

/// The entries of a section between the linker's bounds `start` and `stop`.
///
/// # Safety
/// `start..stop` must be the bounds of a section of `T`s in this object's
/// data, never written while the program runs.
unsafe fn section<T>(start: *const T, stop: *const T) -> &'static [T] {
    // SAFETY: per the contract, a whole number of `T`s lie between them.
    unsafe { std::slice::from_raw_parts(start, stop.offset_from(start) as usize) }
}

/// Whether every [`fixed_tls!`] holds its offset ([`patch_fixed_tls`]).
static FIXED_TLS_DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether code using [`fixed_tls!`] may run.
pub fn fixed_tls_done() -> bool {
    FIXED_TLS_DONE.load(std::sync::atomic::Ordering::Acquire)
}

/// Writes each [`fixed_tls!`]'s offset (its cell's value now, plus its
/// field) over its placeholder. Call once the cells hold their final
/// values and before the code can run (fgraph's manager, as it is made).
/// False if any could not be written (an offset beyond 32 bits, an
/// instruction without its placeholder, text that cannot be written):
/// then none of that code may run.
pub(crate) fn patch_fixed_tls() -> bool {
    use std::sync::atomic::Ordering;
    if fixed_tls_done() {
        return true;
    }
    let Some(edits) = fixed_tls_edits(fixed_tls_table()) else {
        return false;
    };
    let ok = crate::patch::apply_unreached(&edits).is_ok();
    // Release: the code is rewritten before anyone relies on it (Acquire).
    FIXED_TLS_DONE.store(ok, Ordering::Release);
    ok
}

/// The edits that put the offsets in place of the placeholders, or None
/// if one cannot be made.
fn fixed_tls_edits(ops: &[FixedTls]) -> Option<Vec<crate::patch::Edit>> {
    use std::sync::atomic::{AtomicI64, Ordering};
    let mut edits = Vec::new();
    for op in ops.iter().filter(|op| op.insn != 0) {
        // SAFETY: the cell is a static AtomicI64 (the macro's users').
        let value = unsafe { (*(op.cell as *const AtomicI64)).load(Ordering::Relaxed) };
        let field = i32::try_from(op.field).ok()?;
        let old = TLS_PLACEHOLDER.checked_add(field)?.to_le_bytes();
        let new = i32::try_from(value.checked_add(op.field)?)
            .ok()?
            .to_le_bytes();
        // SAFETY: an instruction of our own text (at most 15 bytes) at a
        // label of `fixed_tls!`, followed by more of it.
        let bytes: [u8; 15] = unsafe { std::ptr::read(op.insn as *const [u8; 15]) };
        let mut at = (0..bytes.len() - 3).filter(|&i| bytes[i..i + 4] == old);
        let (Some(pos), None) = (at.next(), at.next()) else {
            return None;
        };
        edits.push(crate::patch::Edit::new(op.insn + pos, &old, &new));
    }
    Some(edits)
}

/// An entry of section `shadowgraph_fixed_loads` (see [`fixed_load!`]).
#[repr(C)]
struct FixedLoad {
    insn: usize,
    cell: *const i64,
}

extern "C" {
    // The linker's bounds of the section (its name is a C identifier).
    static __start_shadowgraph_fixed_loads: FixedLoad;
    static __stop_shadowgraph_fixed_loads: FixedLoad;
}

fn fixed_load_table() -> &'static [FixedLoad] {
    // SAFETY: the linker's bounds of a section of entries written by
    // `fixed_load!`, in this object's data.
    unsafe {
        section(
            &raw const __start_shadowgraph_fixed_loads,
            &raw const __stop_shadowgraph_fixed_loads,
        )
    }
}

/// How many of the [`fixed_load!`]s hold their value as an immediate now,
/// and how many there are.
pub fn fixed_loads() -> (usize, usize) {
    let t = fixed_load_table();
    let imm = t
        .iter()
        // SAFETY: 2 bytes of our own text at a label of `fixed_load!`.
        .filter(|l| unsafe { *((l.insn + 1) as *const u8) } == 0xc7)
        .count();
    (imm, t.len())
}

/// The offset from this thread's pointer (fs:0 holds it, x86-64 TLS ABI)
/// of `addr`, an address in this thread's static TLS: the same offset in
/// every thread (initial-exec TLS), which the assembly paths keep in a
/// cell and add to fs.
pub(crate) fn tp_offset(addr: usize) -> i64 {
    let tp: usize;
    // SAFETY: reads the thread pointer, nothing else.
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
    }
    addr.wrapping_sub(tp) as i64
}

/// Rewrites each [`fixed_load!`] as a move of the value its cell holds now:
/// `mov reg, [rip + cell]` (REX.W(R) 8B, ModRM 00 reg 101, disp32) or an
/// earlier rewrite of it becomes `mov reg, imm32` (REX.W(B) C7, ModRM 11
/// 000 reg), the same 7 bytes. Call once the cells hold their final values and
/// before the code can run (fgraph's manager, as it is made). A value
/// beyond imm32, or text that cannot be written, leaves the load.
pub(crate) fn patch_fixed_loads() {
    let _ = crate::patch::apply_unreached(&fixed_load_edits(fixed_load_table()));
}

/// The edits that make `loads` immediates of their cells' values now.
fn fixed_load_edits(loads: &[FixedLoad]) -> Vec<crate::patch::Edit> {
    use std::sync::atomic::{AtomicI64, Ordering};
    let mut edits = Vec::new();
    for l in loads {
        // SAFETY: 7 bytes of our own text at a label of `fixed_load!`.
        let old: [u8; 7] = unsafe { std::ptr::read(l.insn as *const [u8; 7]) };
        // SAFETY: the cell is a static AtomicI64 (the macro's users').
        let value = unsafe { (*(l.cell as *const AtomicI64)).load(Ordering::Relaxed) };
        // The register, 0..15 (REX.R of a load, REX.B of a move).
        let reg = match old {
            [0x48 | 0x4c, 0x8b, m, ..] if m & 0xc7 == 0x05 => (old[0] & 4) << 1 | (m >> 3) & 7,
            [0x48 | 0x49, 0xc7, m, ..] if m & 0xf8 == 0xc0 => (old[0] & 1) << 3 | m & 7,
            _ => continue,
        };
        if old[1] == 0x8b {
            let disp = i32::from_le_bytes([old[3], old[4], old[5], old[6]]);
            if (l.insn + 7).wrapping_add_signed(disp as isize) != l.cell as usize {
                continue;
            }
        }
        let Ok(imm) = i32::try_from(value) else {
            continue;
        };
        let mut new = [0x48 | reg >> 3, 0xc7, 0xc0 | reg & 7, 0, 0, 0, 0];
        new[3..].copy_from_slice(&imm.to_le_bytes());
        if new != old {
            edits.push(crate::patch::Edit::new(l.insn, &old, &new));
        }
    }
    edits
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::atomic::{AtomicI64, Ordering};

    crate::fast_thread_local!(
        static COUNTER: Cell<u64>;
    );
    crate::fast_thread_local!(
        static PAIR: [Cell<*mut u8>; 2];
    );

    #[test]
    fn every_thread_starts_at_zero_and_keeps_its_own() {
        COUNTER.set(5);
        PAIR[1].set(8 as *mut u8);
        let other = std::thread::spawn(|| {
            let start = (COUNTER.get(), PAIR[1].get() as usize);
            COUNTER.set(7);
            (start, COUNTER.get(), &*COUNTER as *const Cell<u64> as usize)
        })
        .join()
        .unwrap();
        assert_eq!(other.0, (0, 0));
        assert_eq!(other.1, 7);
        assert_ne!(other.2, &*COUNTER as *const Cell<u64> as usize);
        assert_eq!((COUNTER.get(), PAIR[1].get()), (5, 8 as *mut u8));
    }

    static CELL: AtomicI64 = AtomicI64::new(0);

    // Returns CELL twice over, read into r9 (a REX.R load, REX.B move) and
    // rcx. Not listed in the section (`fixed_load!`): patching every
    // listed load, as a manager made by another test does, leaves these
    // alone.
    std::arch::global_asm!(
        ".pushsection .text.shadowgraph_fixed_load_test,\"ax\",@progbits",
        ".p2align 4",
        "shadowgraph_fixed_load_test:",
        "shadowgraph_fixed_load_test_r9:",
        "mov r9, [rip + {cell}]",
        "mov rax, r9",
        "shadowgraph_fixed_load_test_rcx:",
        "mov rcx, [rip + {cell}]",
        "add rax, rcx",
        "ret",
        ".popsection",
        cell = sym CELL,
    );

    extern "C" {
        fn shadowgraph_fixed_load_test() -> i64;
        fn shadowgraph_fixed_load_test_r9();
        fn shadowgraph_fixed_load_test_rcx();
    }

    fn twice() -> i64 {
        // SAFETY: the function above: no arguments, clobbers only rax,
        // rcx, r9 (caller-saved).
        unsafe { shadowgraph_fixed_load_test() }
    }

    static TLS_CELL: AtomicI64 = AtomicI64::new(0);

    // Returns the word at the thread pointer + TLS_CELL + 8, once patched
    // (as `fixed_tls!` writes it, not listed in its section).
    std::arch::global_asm!(
        ".pushsection .text.shadowgraph_fixed_tls_test,\"ax\",@progbits",
        ".p2align 4",
        ".globl shadowgraph_fixed_tls_test",
        ".hidden shadowgraph_fixed_tls_test",
        "shadowgraph_fixed_tls_test:",
        "mov rax, qword ptr fs:[0x5a5a0000 + 8]",
        "ret",
        ".popsection",
    );

    extern "C" {
        fn shadowgraph_fixed_tls_test() -> usize;
    }

    #[test]
    fn fixed_tls_operands_get_the_offset_or_nothing_is_written() {
        let ours = [FixedTls {
            insn: shadowgraph_fixed_tls_test as *const () as usize,
            cell: &TLS_CELL as *const AtomicI64 as *const i64,
            field: 8,
        }];
        let tp: usize;
        // SAFETY: reads the thread pointer, nothing else.
        unsafe {
            std::arch::asm!("mov {}, qword ptr fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
        }
        // Beyond 32 bits: nothing to write.
        TLS_CELL.store(1 << 40, Ordering::Relaxed);
        assert!(fixed_tls_edits(&ours).is_none());
        // PAIR's second word is at its offset + 8 in every thread.
        TLS_CELL.store(
            (&PAIR[0] as *const Cell<*mut u8> as usize).wrapping_sub(tp) as i64,
            Ordering::Relaxed,
        );
        crate::patch::apply_unreached(&fixed_tls_edits(&ours).unwrap()).unwrap();
        PAIR[1].set(0x1234 as *mut u8);
        // SAFETY: the function above, patched: it reads this thread's
        // PAIR[1] and clobbers only rax.
        assert_eq!(unsafe { shadowgraph_fixed_tls_test() }, 0x1234);
        let other = std::thread::spawn(|| {
            PAIR[1].set(0x99 as *mut u8);
            // SAFETY: as above, on this thread.
            unsafe { shadowgraph_fixed_tls_test() }
        });
        assert_eq!(other.join().unwrap(), 0x99);
        // Written: the placeholder is gone, so no second edit is made.
        assert!(fixed_tls_edits(&ours).is_none());
    }

    #[test]
    fn fixed_loads_become_immediates_of_the_values_then() {
        let ours: Vec<FixedLoad> = [
            shadowgraph_fixed_load_test_r9 as *const () as usize,
            shadowgraph_fixed_load_test_rcx as *const () as usize,
        ]
        .into_iter()
        .map(|insn| FixedLoad {
            insn,
            cell: &CELL as *const AtomicI64 as *const i64,
        })
        .collect();
        CELL.store(-512, Ordering::Relaxed);
        assert_eq!(twice(), -1024);
        let patch = || crate::patch::apply_unreached(&fixed_load_edits(&ours)).unwrap();
        patch();
        CELL.store(7, Ordering::Relaxed);
        assert_eq!(twice(), -1024, "immediates of the values at the patch");
        patch();
        assert_eq!(twice(), 14, "rewritten again");
        // Beyond imm32: left as it was.
        CELL.store(1 << 40, Ordering::Relaxed);
        assert!(fixed_load_edits(&ours).is_empty());
    }
}
