//! How a recorder's calls of one site are recorded by the fused paths:
//! with no data, with data only the callbacks make, or with arguments and
//! a return value in registers that the assembly takes itself.

#![forbid(unsafe_code)]

/// A site's class bit: its calls go the general way (the recorder's
/// callbacks record its arguments or return value, or apply its trigger).
pub(super) const GENERAL: u8 = 4;
/// A site's class bit: the fused entry records its arguments, as its
/// descriptor in `FusedFilter::args` says ([`fast_args`]).
pub(super) const FAST_ARGS: u8 = 8;

/// How a filtered recorder's calls of one site are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteArgs {
    /// Without data: the fused path, as every other site's.
    None,
    /// With data the fused path does not make: the callbacks' way.
    General,
    /// With data the fused path takes from the registers: the arguments
    /// the entry records, as the descriptor [`fast_args`] made says (0:
    /// none), and the return value the return records, as [`fast_retval`]
    /// gives it (none: 0).
    Fast {
        /// The arguments' descriptor.
        args: u64,
        /// The return value: the mask kept of its register (0: none), and
        /// whether that is xmm0 (else rax).
        ret: (u64, bool),
    },
}

/// Whether values of format `fmt` are numbers a general register holds
/// (integers, characters, pointers, enums).
fn in_gpr(fmt: &shadowgraph_data::args::Fmt) -> bool {
    use shadowgraph_data::args::Fmt;
    matches!(
        fmt,
        Fmt::Auto | Fmt::Sint | Fmt::Uint | Fmt::Hex | Fmt::Char | Fmt::Ptr | Fmt::Enum(_)
    )
}

/// The mask of its register that the return value `spec` records, and
/// whether that is xmm0, if the fused return can record it: an integer,
/// character, pointer or enum of 1, 2, 4 or 8 bytes in rax, a float or
/// double in xmm0 (the bytes beyond its size are the padding's zeros).
pub fn fast_retval(spec: &shadowgraph_data::args::ArgSpec) -> Option<(u64, bool)> {
    use shadowgraph_data::args::Fmt;
    let (float, simple) = (spec.fmt == Fmt::Float, in_gpr(&spec.fmt));
    let mask = u64::MAX.checked_shr(64 - 8 * spec.size.min(8) as u32);
    match spec.size {
        1 | 2 if simple => mask.map(|m| (m, false)),
        4 | 8 if simple || float => mask.map(|m| (m, float)),
        _ => None,
    }
    .filter(|_| spec.retval)
}

/// The descriptor of `specs` (a site's argument specs, in order) for the
/// fused entry (args_asm.rs), if it can record them: at most seven, each
/// an integer, character, pointer or enum of 1, 2, 4 or 8 bytes in one of
/// the six argument registers (`arg1`–`arg6`), or a float or double in
/// xmm0–7 (`fparg1`–`fparg8`), without a placement.
pub fn fast_args(specs: &[shadowgraph_data::args::ArgSpec]) -> Option<u64> {
    use shadowgraph_data::args::Fmt;
    if specs.is_empty() || specs.len() > 7 {
        return None;
    }
    let (mut desc, mut bytes) = (0u64, 0usize);
    for (k, s) in specs.iter().enumerate() {
        let simple = in_gpr(&s.fmt);
        let (float, regs) = match s.fmt == Fmt::Float {
            true => (0x40, 1..=8),
            false => (0, 1..=6),
        };
        if s.retval
            || !(simple || float != 0)
            || !regs.contains(&s.index)
            || s.place != shadowgraph_data::args::Place::Index
        {
            return None;
        }
        let size = match s.size {
            1 if float == 0 => 0x10,
            2 if float == 0 => 0x20,
            4 => 0,
            8 => 8,
            _ => return None,
        };
        desc |= (0x80 | float | size | (s.index as u64 - 1)) << (8 * (k + 1));
        bytes += s.size.next_multiple_of(4);
    }
    Some(desc | (bytes.next_multiple_of(8) as u64 / 8))
}
