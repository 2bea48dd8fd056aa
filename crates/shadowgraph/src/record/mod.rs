//! Recording (SPEC §5, L4): 16-byte entry/exit records with calibrated TSC
//! timestamps written per thread to `<tid>.dat` in a data directory, and the
//! replay view that prints them in uftrace's text layout.

pub mod chrome;
pub mod clock;
pub mod collect;
pub mod data;
pub mod flame;
pub mod format;
pub mod fused;
pub mod graph;
pub mod info;
pub mod perfetto;
pub mod profile;
pub mod replay;
pub mod report;
pub mod ring;
pub mod sched;
pub mod uftrace;
pub mod writer;
