//! `replay --flat`: every record shown, one a line, in time order, as
//! uftrace's flat replay writes them:
//!
//! ```text
//! [0] ==> 14034/0: ip (main), time (12930227876759)
//! [3] !!! 14034: read:proc/statm (vmsize=15492KB …) time (12930227877180)
//! [13] <== 14034/0: ip (main), time (12930227908917:32158)
//! ```
//!
//! (an exit's time followed by its call's duration, ns).

#![forbid(unsafe_code)]

use super::error::ReplayError;
use super::filter::{session_threads, ReplayFilter};
use super::fstack::{peek_time, BACKTRACE_ADDR};
use crate::dir::DataDir;
use crate::format::Kind;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;

/// [`super::replay_sessions`]'s records of `datas`, flat.
pub fn replay_flat(
    datas: &[&DataDir],
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    // (stream, its recording, its thread)
    let mut streams: Vec<_> = session_threads(datas, filter)?
        .into_iter()
        .map(|(tid, r, i)| (r.peekable(), i, tid))
        .collect();
    // uftrace's blank header line (its default fields, not printed).
    writeln!(out)?;
    let mut heap = BinaryHeap::new();
    for (k, s) in streams.iter_mut().enumerate() {
        if let Some(t) = peek_time(&mut s.0)? {
            heap.push(Reverse((t, k)));
        }
    }
    // Per stream: entry times by depth, for the exits' durations.
    let mut entered: Vec<Vec<u64>> = vec![Vec::new(); streams.len()];
    let mut count = 0u64;
    while let Some(Reverse((_, k))) = heap.pop() {
        let (st, owner, tid) = &mut streams[k];
        let r = st.next().expect("peeked")?;
        if let Some(t) = peek_time(st)? {
            heap.push(Reverse((t, k)));
        }
        let data = datas[*owner];
        let d = r.depth as usize;
        let sched = r.addr == crate::sched::SCHED_ADDR;
        if sched && data.sched_hidden(r.more) {
            continue;
        }
        match r.kind {
            Kind::Entry if sched => {
                let what = if r.more { " (pre-empted)" } else { "" };
                writeln!(
                    out,
                    "[{count}] !!! {tid}: linux:sched-out{what} time ({})",
                    r.time
                )?;
            }
            Kind::Exit if sched => {
                writeln!(out, "[{count}] !!! {tid}: linux:sched-in time ({})", r.time)?;
            }
            Kind::Entry => {
                let e = &mut entered[k];
                if e.len() <= d {
                    e.resize(d + 1, r.time);
                }
                e[d] = r.time;
                let name = data.name(r.addr);
                writeln!(
                    out,
                    "[{count}] ==> {tid}/{d}: ip ({name}), time ({})",
                    r.time
                )?;
            }
            Kind::Exit => {
                let took = entered[k].get(d).map_or(0, |&t| r.time.saturating_sub(t));
                let name = data.name(r.addr);
                writeln!(
                    out,
                    "[{count}] <== {tid}/{d}: ip ({name}), time ({}:{took})",
                    r.time
                )?;
            }
            Kind::Lost => {
                writeln!(out, "[{count}] XXX {tid}: lost {} records", r.addr)?;
            }
            Kind::Event => {
                // Only events the recording holds (a `read=` trigger's):
                // not the views' own markers, nor one left out.
                let Some(text) = r.args.as_deref() else {
                    continue;
                };
                if r.addr == BACKTRACE_ADDR {
                    continue;
                }
                writeln!(out, "[{count}] !!! {tid}: {text} time ({})", r.time)?;
            }
        }
        count += 1;
    }
    Ok(())
}
