//! The functions uftrace's views treat apart (its "fixups"): `setjmp`
//! and `longjmp`, whose second return and jump leave calls open. A
//! `longjmp`'s entry takes the depth back to just inside the last
//! `setjmp`; that `setjmp`'s next exit then ends the call it finds at its
//! depth, the calls above left open.

#![forbid(unsafe_code)]

use crate::dir::DataDir;

/// The `setjmp` and `longjmp` family's functions of a recording, by
/// address, sorted.
#[derive(Default)]
pub(crate) struct JumpFns {
    pub(crate) setjmp: Vec<u64>,
    pub(crate) longjmp: Vec<u64>,
}

impl JumpFns {
    /// Those of `data`'s functions (library calls among them).
    pub(crate) fn of(data: &DataDir) -> JumpFns {
        let mut j = JumpFns::default();
        for (addr, name) in &data.symbols {
            let name = name.split('@').next().unwrap_or_default();
            match name {
                "setjmp" | "_setjmp" | "sigsetjmp" | "__sigsetjmp" => j.setjmp.push(*addr),
                "longjmp" | "siglongjmp" | "__longjmp_chk" => j.longjmp.push(*addr),
                _ => {}
            }
        }
        j
    }
}
