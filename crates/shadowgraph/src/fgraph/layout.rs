//! The words fgraph's assembly reads and writes, by name: `graph_asm!`
//! gives every assembly block of fgraph and of the fused tracers the
//! offsets of the caller frame (`tramp::regs_asm!`), of a shadow-stack
//! frame, and of the structs handed to the callbacks, from the Rust
//! definitions (`offset_of!`), as `.set` symbols.
//!
//! A frame on the shadow stack (8-byte words, from its start `f`; the
//! stack grows up, `curr` is the first free word):
//!
//! ```text
//!   f + FRAME_DATA   (32)  reserved data words, if a user reserved any,
//!                          each run closed by its DATA word
//!   f + FRAME_BITMAP (24)  BITMAP: offset 3 | users << 12 | epoch << 28
//!                          (FRAME_WORDS, 3, words after f)
//!                          (RESERVED while the entry is being offered)
//!   f + FRAME_RETP   (16)  retp: the stack slot of the return address
//!   f + FRAME_FUNC   (8)   func | depth << 48
//!   f + FRAME_RET    (0)   ret: the real return address
//! ```
//!
//! What a return path saves at rsp (16-byte aligned below the returning
//! call's rsp, which may not be), a `RetRegs`:
//!
//! ```text
//!   rsp + RET_RSP + 8      rsp as it came, again (the copy restored)
//!   rsp + RET_RSP          rsp as it came (what callbacks see)
//!   rsp + RET_XMM1, RET_XMM0, RET_RDX, RET_RAX   the return registers
//! ```
//!
//! and the events passed to the callbacks: a `GraphEntry` (`ENT_FUNC`,
//! `ENT_PARENT_IP`, `ENT_DEPTH`, `ENT_SITE`, `ENT_SIZE` bytes) and a
//! `GraphReturn` (`GRET_FUNC`, `GRET_DEPTH`, `GRET_RETVAL`, `GRET_OVERRUN`,
//! `GRET_UNWOUND`, `GRET_SIZE` bytes).

/// `global_asm!` whose body names the words of the diagrams above and
/// [`tramp::regs_asm!`](crate::tramp::regs_asm)'s; operands after a `;` are
/// the body's own.
macro_rules! graph_asm {
    ($($body:expr),+ $(,)? $(; $($operands:tt)*)?) => {
        $crate::tramp::regs_asm!(
            ".set FRAME_RET, {frame_ret} * 8",
            ".set FRAME_FUNC, {frame_func} * 8",
            ".set FRAME_RETP, {frame_retp} * 8",
            ".set FRAME_WORDS, {frame_bitmap}",
            ".set FRAME_BITMAP, FRAME_WORDS * 8",
            ".set FRAME_DATA, FRAME_BITMAP + 8",
            ".set RET_RAX, {ret_rax}",
            ".set RET_RDX, {ret_rdx}",
            ".set RET_XMM0, {ret_xmm0}",
            ".set RET_XMM1, {ret_xmm1}",
            ".set RET_RSP, {ret_rsp}",
            ".set RET_SIZE, {ret_size}",
            ".set ENT_FUNC, {ent_func}",
            ".set ENT_PARENT_IP, {ent_parent_ip}",
            ".set ENT_DEPTH, {ent_depth}",
            ".set ENT_SITE, {ent_site}",
            ".set ENT_SIZE, {ent_size}",
            ".set GRET_FUNC, {gret_func}",
            ".set GRET_DEPTH, {gret_depth}",
            ".set GRET_RETVAL, {gret_retval}",
            ".set GRET_OVERRUN, {gret_overrun}",
            ".set GRET_UNWOUND, {gret_unwound}",
            ".set GRET_SIZE, {gret_size}",
            $($body),+;
            frame_ret = const $crate::fgraph::stack::FRAME_RET,
            frame_func = const $crate::fgraph::stack::FRAME_FUNC,
            frame_retp = const $crate::fgraph::stack::FRAME_RETP,
            frame_bitmap = const $crate::fgraph::stack::FRAME_WORDS,
            ret_rax = const std::mem::offset_of!($crate::fgraph::user::RetRegs, rax),
            ret_rdx = const std::mem::offset_of!($crate::fgraph::user::RetRegs, rdx),
            ret_xmm0 = const std::mem::offset_of!($crate::fgraph::user::RetRegs, xmm0),
            ret_xmm1 = const std::mem::offset_of!($crate::fgraph::user::RetRegs, xmm1),
            ret_rsp = const std::mem::offset_of!($crate::fgraph::user::RetRegs, rsp),
            ret_size = const std::mem::size_of::<$crate::fgraph::user::RetRegs>(),
            ent_func = const std::mem::offset_of!($crate::fgraph::user::GraphEntry, func),
            ent_parent_ip = const std::mem::offset_of!($crate::fgraph::user::GraphEntry, parent_ip),
            ent_depth = const std::mem::offset_of!($crate::fgraph::user::GraphEntry, depth),
            ent_site = const std::mem::offset_of!($crate::fgraph::user::GraphEntry, site),
            ent_size = const std::mem::size_of::<$crate::fgraph::user::GraphEntry>(),
            gret_func = const std::mem::offset_of!($crate::fgraph::user::GraphReturn, func),
            gret_depth = const std::mem::offset_of!($crate::fgraph::user::GraphReturn, depth),
            gret_retval = const std::mem::offset_of!($crate::fgraph::user::GraphReturn, retval),
            gret_overrun = const std::mem::offset_of!($crate::fgraph::user::GraphReturn, overrun),
            gret_unwound = const std::mem::offset_of!($crate::fgraph::user::GraphReturn, unwound),
            gret_size = const std::mem::size_of::<$crate::fgraph::user::GraphReturn>(),
            $($($operands)*)?
        );
    };
}

pub(crate) use graph_asm;
