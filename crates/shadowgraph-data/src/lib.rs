//! shadowgraph's recordings, read and written without running anything:
//! the data directory a recording leaves (uftrace's format, both ways) and
//! the views that show it.
//!
//! * [`format`](mod@format) — the 16-byte entry/exit record; [`compact`] — the
//!   same records in a few bytes each (`record --compact`); [`time`] — raw timestamps
//!   to nanoseconds.
//! * [`dir`] — a data directory: its `info`, threads, symbols and record
//!   streams; [`sched`] — scheduling events in it; [`uftrace`] — uftrace's
//!   own metadata, written for a recording and read from uftrace's.
//! * Views, each a function of a [`dir::DataDir`] and its options:
//!   [`replay`], [`report`], [`graph`], [`info`], [`profile`], and the dumps
//!   [`chrome`], [`perfetto`], [`flame`].
//! * [`open_calls`] — exits for the calls a detached session left open.
//! * [`args`] — arguments and return values as uftrace records and shows
//!   them; [`prototypes`] — those of well-known C library functions.
//! * [`pattern`] and [`names`] — function patterns and demangled names, as
//!   filters and views use them.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod args;
pub mod chrome;
pub mod compact;
pub mod diff;
pub mod dir;
pub mod dump;
pub mod error;
pub mod events;
mod field_list;
mod fixups;
pub mod flame;
pub mod format;
pub mod graph;
pub mod info;
pub mod loads;
mod meta;
pub mod names;
pub mod open_calls;
pub mod pattern;
pub mod perfetto;
pub mod profile;
mod progress;
pub mod prototypes;
pub mod replay;
pub mod report;
pub mod report_task;
pub mod sched;
pub mod task_graph;
pub mod time;
pub mod trigger;
pub mod uftrace;
