//! Thread-local variables of the code that runs inside traced calls, in the
//! initial-exec TLS model.
//!
//! `thread_local!` in a shared object (the agent is one) is reached through
//! `__tls_get_addr` on every access: a call of about eleven instructions,
//! and the recording path made ten of them per traced call. A variable
//! declared with [`fast_thread_local!`] lives in the object's static TLS
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
            // order the linker lays them out in (measured: a layout change
            // cost the single-user fast path ~0.5 ns a call).
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

#[cfg(test)]
mod tests {
    use std::cell::Cell;

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
}
