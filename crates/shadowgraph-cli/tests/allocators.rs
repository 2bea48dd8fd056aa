//! The agent allocates nothing from the traced program's `malloc`.

mod common;

use common::*;
use std::process::Command;

/// A program whose own `malloc`/`calloc`/`realloc`/`free` return blocks
/// aligned to 8 bytes only, and are traced themselves: the agent starts,
/// traces the program's threads and its allocator's calls, and the
/// program's output is its untraced output.
#[test]
fn a_program_with_its_own_traced_8_aligned_malloc_is_traced() {
    let dir = workdir("own_malloc");
    let exe = build_fixture_with(&dir, "om", "own_malloc.c", &["-pthread"]);
    let plain = Command::new(&exe).output().unwrap();
    assert!(plain.status.success());
    for way in Way::ALL {
        let data = dir.join(format!("{}.data", way.name()));
        let o = record_run(&[], &way.with(&[]), &data, &exe, &[]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{way:?}: {out}\n{err}");
        assert_eq!(out, String::from_utf8_lossy(&plain.stdout), "{way:?}");
        assert!(err.contains("(0 lost)"), "{way:?}: {err}");
        let rows = report_rows(&report_text(&data));
        assert_eq!(rows["work"].2, 401, "{way:?}: {rows:?}");
        assert_eq!(rows["thread"].2, 4, "{way:?}: {rows:?}");
        // Threads and stdio allocate through the program's calloc/malloc,
        // traced as any of its functions.
        assert!(
            rows["calloc"].2 + rows["malloc"].2 >= 4,
            "{way:?}: {rows:?}"
        );
    }
}
