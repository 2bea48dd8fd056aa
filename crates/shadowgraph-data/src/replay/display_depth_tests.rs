//! The depths views show around `setjmp` and `longjmp`.

use super::DisplayDepth;
use crate::fixups::JumpFns;
use crate::format::{Kind, Record};
use std::sync::Arc;

const MAIN: u64 = 0x10;
const SETJMP: u64 = 0x20;
const LONGJMP: u64 = 0x30;
const WORK: u64 = 0x40;
const HANDLER: u64 = 0x50;

fn rec(kind: Kind, depth: u16, addr: u64) -> Record {
    Record {
        time: 0,
        kind,
        more: false,
        depth,
        addr,
        args: None,
    }
}

/// The depths shown for `records`, in order.
fn shown(records: Vec<Record>) -> Vec<u16> {
    let jumps = JumpFns {
        setjmp: vec![SETJMP],
        longjmp: vec![LONGJMP],
    };
    DisplayDepth {
        inner: records.into_iter().map(Ok),
        depth: 0,
        set: true,
        first: true,
        first_exit: false,
        max: u16::MAX,
        base: 0,
        jumps: Arc::new(jumps),
        setjmp_depth: None,
        jumping: None,
    }
    .map(|r| r.unwrap().depth)
    .collect()
}

#[test]
fn a_longjmp_takes_the_depth_back_to_its_setjmp() {
    use Kind::{Entry, Exit};
    let depths = shown(vec![
        rec(Entry, 0, MAIN),
        rec(Entry, 1, SETJMP),
        rec(Exit, 1, SETJMP),
        rec(Entry, 1, WORK),
        rec(Entry, 2, WORK),
        rec(Entry, 3, LONGJMP),
        rec(Exit, 1, SETJMP),
        rec(Entry, 1, WORK),
        rec(Exit, 1, WORK),
        rec(Exit, 0, MAIN),
    ]);
    assert_eq!(depths, [0, 1, 1, 1, 2, 3, 1, 1, 1, 0]);
}

/// A signal handler's call lands inside `longjmp` before it jumps, and
/// the tracer finds the frames of `longjmp` and of the handler that
/// called it gone (their exits recorded) before the jump shows as the
/// `setjmp`'s exit: `longjmp` is then a call as any other, and the
/// `setjmp`'s exit takes the depth back to it.
#[test]
fn a_longjmp_whose_exit_is_recorded_is_a_call() {
    use Kind::{Entry, Exit};
    let depths = shown(vec![
        rec(Entry, 0, MAIN),
        rec(Entry, 1, SETJMP),
        rec(Exit, 1, SETJMP),
        rec(Entry, 1, WORK),
        rec(Entry, 2, HANDLER),
        rec(Entry, 3, LONGJMP),
        rec(Exit, 3, LONGJMP),
        rec(Exit, 2, HANDLER),
        rec(Entry, 2, HANDLER),
        rec(Exit, 2, HANDLER),
        rec(Exit, 1, SETJMP),
        rec(Entry, 1, WORK),
        rec(Exit, 1, WORK),
        rec(Exit, 0, MAIN),
    ]);
    assert_eq!(depths, [0, 1, 1, 1, 2, 3, 3, 2, 2, 2, 1, 1, 1, 0]);
}

/// A handler's call inside `longjmp`, before the jump, nests in it.
#[test]
fn a_call_inside_longjmp_nests_in_it() {
    use Kind::{Entry, Exit};
    let depths = shown(vec![
        rec(Entry, 0, MAIN),
        rec(Entry, 1, SETJMP),
        rec(Exit, 1, SETJMP),
        rec(Entry, 1, WORK),
        rec(Entry, 2, LONGJMP),
        rec(Entry, 3, HANDLER),
        rec(Exit, 3, HANDLER),
        rec(Exit, 1, SETJMP),
        rec(Exit, 0, MAIN),
    ]);
    assert_eq!(depths, [0, 1, 1, 1, 2, 3, 3, 1, 0]);
}
