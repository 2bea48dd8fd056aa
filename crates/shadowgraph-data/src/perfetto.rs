//! `dump --perfetto`: the recording as a Perfetto trace (protobuf
//! TracePackets with TrackEvent slices), streamed thread by thread: one
//! process track, one thread track per thread, function names interned (sent
//! once, then referred to by id). Open it in ui.perfetto.dev.
//!
//! Field numbers are those of Perfetto's trace.proto (TracePacket,
//! TrackDescriptor, ThreadDescriptor, ProcessDescriptor, TrackEvent,
//! InternedData, EventName).

use super::dir::DataDir;
use super::format::Kind;
use super::replay::{thread_records, ReplayError, ReplayFilter};
use std::collections::HashMap;
use std::io::Write;

const SEQ: u64 = 1;
/// TracePacket.sequence_flags
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
/// TrackEvent.type
const SLICE_BEGIN: u64 = 1;
const SLICE_END: u64 = 2;

/// A protobuf message being built.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn uint(&mut self, field: u64, v: u64) -> &mut Self {
        self.varint(field << 3);
        self.varint(v);
        self
    }

    fn bytes(&mut self, field: u64, b: &[u8]) -> &mut Self {
        self.varint(field << 3 | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    fn msg(&mut self, field: u64, m: &Msg) -> &mut Self {
        self.bytes(field, &m.0)
    }
}

/// Writes one TracePacket (Trace.packet = 1).
fn packet(out: &mut impl Write, p: &Msg) -> std::io::Result<()> {
    let mut t = Msg::default();
    t.msg(1, p);
    out.write_all(&t.0)
}

/// Writes what `filter` selects as a Perfetto trace: a track per thread,
/// function names interned, recorded arguments and return values as
/// debug annotations (`arguments`, `retval`).
pub fn dump_perfetto(
    data: &DataDir,
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    // Checked (and opened) before any output.
    let threads = thread_records(data, filter)?;
    let pid: u64 = data
        .info
        .get("pid")
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let exe = data.info.get("exe").unwrap_or("").to_string();
    let process_uuid = 1u64 << 32 | pid;
    // The process track, clearing the sequence's interning state.
    let mut proc_desc = Msg::default();
    proc_desc.uint(1, pid).bytes(6, exe.as_bytes());
    let mut track = Msg::default();
    track.uint(1, process_uuid).msg(3, &proc_desc);
    let mut p = Msg::default();
    p.uint(10, SEQ)
        .uint(13, SEQ_INCREMENTAL_STATE_CLEARED)
        .msg(60, &track);
    packet(out, &p)?;
    let mut iids: HashMap<u64, u64> = HashMap::new();
    for (tid, records) in threads {
        let track_uuid = 2u64 << 32 | tid as u32 as u64;
        let mut thread = Msg::default();
        thread.uint(1, pid).uint(2, tid as u32 as u64);
        let mut track = Msg::default();
        track
            .uint(1, track_uuid)
            .uint(5, process_uuid)
            .msg(4, &thread);
        let mut p = Msg::default();
        p.uint(10, SEQ).msg(60, &track);
        packet(out, &p)?;
        for r in records {
            let r = r?;
            let kind = match r.kind {
                Kind::Entry => SLICE_BEGIN,
                Kind::Exit => SLICE_END,
                _ => continue,
            };
            let mut ev = Msg::default();
            ev.uint(9, kind).uint(11, track_uuid);
            if let Some(a) = &r.args {
                // TrackEvent.debug_annotations: DebugAnnotation.name = 10,
                // .string_value = 6 (uftrace's Chrome names).
                let (name, value) = if kind == SLICE_BEGIN {
                    ("arguments", format!("({a})"))
                } else {
                    ("retval", a.to_string())
                };
                let mut d = Msg::default();
                d.bytes(10, name.as_bytes()).bytes(6, value.as_bytes());
                ev.msg(4, &d);
            }
            let mut p = Msg::default();
            p.uint(8, r.time)
                .uint(10, SEQ)
                .uint(13, SEQ_NEEDS_INCREMENTAL_STATE);
            if kind == SLICE_BEGIN {
                let next = iids.len() as u64 + 1;
                let (iid, new) = match iids.get(&r.addr) {
                    Some(&i) => (i, false),
                    None => {
                        iids.insert(r.addr, next);
                        (next, true)
                    }
                };
                ev.uint(10, iid);
                if new {
                    let mut name = Msg::default();
                    name.uint(1, iid).bytes(2, data.name(r.addr).as_bytes());
                    let mut interned = Msg::default();
                    interned.msg(2, &name);
                    p.msg(12, &interned);
                }
            }
            p.msg(11, &ev);
            packet(out, &p)?;
        }
    }
    Ok(())
}
