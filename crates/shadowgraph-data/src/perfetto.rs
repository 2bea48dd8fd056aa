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
use super::replay::{session_threads, ReplayError, ReplayFilter};
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
/// debug annotations (`arguments`, `retval`). `datas`: a recording, then
/// the programs started by exec during it, in the order they started; a
/// thread that went on in another program goes on on its track.
pub fn dump_perfetto(
    datas: &[&DataDir],
    filter: &ReplayFilter,
    out: &mut impl Write,
) -> Result<(), ReplayError> {
    // Checked (and opened) before any output.
    let threads = session_threads(datas, filter)?;
    let pid_of_session =
        |d: &DataDir| -> u64 { d.info.get("pid").and_then(|p| p.parse().ok()).unwrap_or(0) };
    // Each thread's process: that of the first program it ran. A process
    // track names the program of the first recording of that process.
    let mut pids: HashMap<i32, u64> = HashMap::new();
    let mut procs: Vec<(u64, String)> = Vec::new();
    let mut add_proc = |pid: u64, d: &DataDir| {
        if !procs.iter().any(|p| p.0 == pid) {
            procs.push((pid, d.info.get("exe").unwrap_or("").to_string()));
        }
    };
    if let Some(d) = datas.first() {
        add_proc(pid_of_session(d), d);
    }
    for (tid, _, i) in &threads {
        let pid = *pids
            .entry(*tid)
            .or_insert_with(|| pid_of_session(datas[*i]));
        add_proc(pid, datas[*i]);
    }
    // The process tracks, the first clearing the sequence's interning
    // state.
    for (k, (pid, exe)) in procs.iter().enumerate() {
        let mut proc_desc = Msg::default();
        proc_desc.uint(1, *pid).bytes(6, exe.as_bytes());
        let mut track = Msg::default();
        track.uint(1, 1u64 << 32 | pid).msg(3, &proc_desc);
        let mut p = Msg::default();
        p.uint(10, SEQ);
        if k == 0 {
            p.uint(13, SEQ_INCREMENTAL_STATE_CLEARED);
        }
        p.msg(60, &track);
        packet(out, &p)?;
    }
    // Names interned by (recording, address): an address names another
    // function in another program.
    let mut iids: HashMap<(usize, u64), u64> = HashMap::new();
    let mut tracks: Vec<i32> = Vec::new();
    for (tid, records, owner) in threads {
        let (data, pid) = (datas[owner], pids[&tid]);
        let track_uuid = 2u64 << 32 | tid as u32 as u64;
        if !tracks.contains(&tid) {
            tracks.push(tid);
            let mut thread = Msg::default();
            thread.uint(1, pid).uint(2, tid as u32 as u64);
            let mut track = Msg::default();
            track
                .uint(1, track_uuid)
                .uint(5, 1u64 << 32 | pid)
                .msg(4, &thread);
            let mut p = Msg::default();
            p.uint(10, SEQ).msg(60, &track);
            packet(out, &p)?;
        }
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
                let (iid, new) = match iids.get(&(owner, r.addr)) {
                    Some(&i) => (i, false),
                    None => {
                        iids.insert((owner, r.addr), next);
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
