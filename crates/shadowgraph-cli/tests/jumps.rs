//! setjmp and longjmp under tracing: threads jumping back into traced
//! setjmps (more buffers live than a thread keeps copies of) while signal
//! handlers siglongjmp out of whatever runs, in every way a recording
//! takes calls. The program's results stay its own, and every thread's
//! records nest as uftrace's views read them, but for the records a
//! handler's jump out of the tracer's own code loses (counted).

mod common;

use common::*;
use shadowgraph_data::dir::DataDir;
use shadowgraph_data::format::Kind;

/// Where thread `tid`'s records do not nest: each entry at the depth of
/// the calls open before it, each exit closing the innermost one, except
/// the exit of a setjmp while the innermost call open is a longjmp (the
/// jump back; a signal handler's calls may come between), which leaves
/// the calls open down to its own depth. Records lost (a handler's jump
/// out of the tracer's own code, counted by a LOST record, which may come
/// later than the gap) leave gaps: from a record that does not fit, the
/// calls open are taken from its depth, unknown. Returns the records that
/// did not fit and the records the thread lost.
fn misfits(
    d: &DataDir,
    tid: i32,
    setjmps: &[u64],
    longjmps: &[u64],
) -> Result<(Vec<String>, u64), String> {
    let mut open: Vec<Option<u64>> = Vec::new();
    let (mut bad, mut lost) = (Vec::new(), 0);
    for (i, r) in records_of(d, tid)?.iter().enumerate() {
        let at = r.depth as usize;
        let fits = match r.kind {
            Kind::Entry => at == open.len(),
            Kind::Exit if at + 1 == open.len() => open[at].is_none_or(|o| o == r.addr),
            Kind::Exit => {
                setjmps.contains(&r.addr)
                    && at + 1 < open.len()
                    && open
                        .last()
                        .is_some_and(|o| o.is_some_and(|o| longjmps.contains(&o)))
            }
            Kind::Lost => {
                lost += r.addr;
                continue;
            }
            _ => continue,
        };
        if !fits {
            bad.push(format!(
                "record {i}: {:?} of {:#x} at depth {}, {} calls open, the innermost {:x?}",
                r.kind,
                r.addr,
                r.depth,
                open.len(),
                open.last()
            ));
            open = vec![None; at + (r.kind == Kind::Exit) as usize];
        }
        match r.kind {
            Kind::Entry => open.push(Some(r.addr)),
            _ => open.truncate(at),
        }
    }
    Ok((bad, lost))
}

#[test]
fn jumps_back_into_traced_setjmps_keep_programs_and_records_right() {
    let dir = workdir("jumps_threads");
    let exe = build_fixture_with(&dir, "st", "setjmp_threads.c", &["-pthread"]);
    let plain = std::process::Command::new(&exe).output().unwrap();
    assert!(plain.status.success());
    for way in Way::ALL {
        for round in 0..3 {
            let data = dir.join(format!("{}-{round}.data", way.name()));
            let o = record_run(&[], &way.with(&["--libcall"]), &data, &exe, &[]);
            let (out, err) = text(&o);
            assert!(o.status.success(), "{way:?}: {err}");
            assert_eq!(o.stdout, plain.stdout, "{way:?}: {err}");
            let d = DataDir::open(&data).unwrap();
            let named = |names: &[&str]| -> Vec<u64> {
                (d.symbols.iter())
                    .filter(|(_, n)| names.contains(&n.as_str()))
                    .map(|s| s.0)
                    .collect()
            };
            let setjmps = named(&["_setjmp", "__sigsetjmp"]);
            let longjmps = named(&["longjmp", "siglongjmp"]);
            assert_eq!((setjmps.len(), longjmps.len()), (2, 2), "{way:?}");
            for &t in &d.tids {
                let (bad, lost) = misfits(&d, t, &setjmps, &longjmps).unwrap();
                // (A gap is a record or more lost, each showing as one
                // misfit at most.)
                assert!(
                    bad.len() as u64 <= lost,
                    "{way:?}, run {round}, thread {t}: {} misfits, {lost} records lost: {:?}\n{out}{err}",
                    bad.len(),
                    &bad[..bad.len().min(3)]
                );
            }
        }
    }
}
