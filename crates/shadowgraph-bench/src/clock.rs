//! What a timestamp costs on this machine, beside the tables: back to
//! back, beside independent work, and what an instruction right after one
//! costs (where the read lets nothing overlap it).

use crate::common::median;
use std::time::Instant;

/// What one timestamp costs on this machine, for the tables' readers.
pub fn timestamp_line(reps: usize) -> String {
    let clock = if shadowgraph::clock::init() {
        "rdtsc"
    } else {
        "clock_gettime"
    };
    let mut line = format!(
        "# one timestamp ({clock}) costs {:.2} ns back to back",
        timestamp_ns(reps)
    );
    if clock == "rdtsc" {
        line += &format!(
            ", {:.2} ns beside independent work; an instruction after one waits for it and costs {:.3} ns (100 independent moves)",
            tsc_in_flow_ns(reps),
            after_tsc_ns(reps)
        );
    }
    line + " on this machine (a recorded call takes two)"
}

/// What an instruction costs right after an `rdtsc`: (a read followed by
/// 100 independent register moves − a read alone) / 100. Where the read
/// lets nothing after it start before it is done (seen on Intel), each
/// such instruction costs its share of the core's issue width: the budget
/// of a recorder's own work between its two reads.
pub fn after_tsc_ns(reps: usize) -> f64 {
    macro_rules! moves {
        () => {
            "mov r8d, 1\nmov r9d, 2\nmov r10d, 3\nmov r11d, 4\nmov ecx, 5\n"
        };
    }
    macro_rules! moves25 {
        () => {
            concat!(moves!(), moves!(), moves!(), moves!(), moves!())
        };
    }
    const N: u32 = 2_000_000;
    let time = |with_moves: bool| {
        median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..N {
                        if with_moves {
                            // SAFETY: rdtsc and register moves only.
                            unsafe {
                                std::arch::asm!(
                                    "rdtsc",
                                    moves25!(), moves25!(), moves25!(), moves25!(),
                                    out("rax") _, out("rdx") _, out("rcx") _, out("r8") _,
                                    out("r9") _, out("r10") _, out("r11") _,
                                    options(nostack, nomem),
                                );
                            }
                        } else {
                            // SAFETY: as above, without the moves.
                            unsafe {
                                std::arch::asm!(
                                    "rdtsc",
                                    out("rax") _, out("rdx") _,
                                    options(nostack, nomem),
                                );
                            }
                        }
                    }
                    t.elapsed().as_nanos() as f64 / N as f64
                })
                .collect(),
        )
    };
    let plain = time(false);
    ((time(true) - plain) / 100.0).max(0.0)
}

/// What one `rdtsc` adds to a block of work that does not depend on it (32
/// register adds and 8 stores): near its back-to-back cost where the CPU
/// cannot overlap it with other work (seen on Intel), far less where it
/// can (seen on AMD). Said beside the back-to-back cost so that a table's
/// reader knows which of the two a traced call pays.
fn tsc_in_flow_ns(reps: usize) -> f64 {
    macro_rules! work {
        () => {
            concat!(
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "mov [{b}], r8\nmov [{b} + 8], r9\n",
                "mov [{b} + 16], r10\nmov [{b} + 24], r11\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "mov [{b} + 32], r8\nmov [{b} + 40], r9\n",
                "mov [{b} + 48], r10\nmov [{b} + 56], r11\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
                "add r8, 1\nadd r9, 1\nadd r10, 1\nadd r11, 1\n",
            )
        };
    }
    const N: u32 = 2_000_000;
    let mut out = [0u64; 9];
    let mut time = |tsc: bool| {
        let buf = out.as_mut_ptr();
        median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..N {
                        if tsc {
                            // SAFETY: rdtsc and register arithmetic; the
                            // stores go to `out` (9 words), through `b`.
                            unsafe {
                                std::arch::asm!(
                                    "rdtsc", "mov [{b} + 64], rax", work!(),
                                    b = in(reg) buf,
                                    out("rax") _, out("rdx") _, out("r8") _,
                                    out("r9") _, out("r10") _, out("r11") _,
                                    options(nostack),
                                );
                            }
                        } else {
                            // SAFETY: as above, without the rdtsc.
                            unsafe {
                                std::arch::asm!(
                                    work!(),
                                    b = in(reg) buf,
                                    out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                                    options(nostack),
                                );
                            }
                        }
                    }
                    t.elapsed().as_nanos() as f64 / N as f64
                })
                .collect(),
        )
    };
    let plain = time(false);
    (time(true) - plain).max(0.0)
}

/// Nanoseconds per timestamp of the recording clock (`rdtsc` when the TSC
/// is usable), read back to back: the cost every recorded event pays twice.
pub fn timestamp_ns(reps: usize) -> f64 {
    shadowgraph::clock::init();
    const N: u32 = 2_000_000;
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                let mut s = 0u64;
                for _ in 0..N {
                    s = s.wrapping_add(shadowgraph::clock::now());
                }
                std::hint::black_box(s);
                t.elapsed().as_nanos() as f64 / N as f64
            })
            .collect(),
    )
}
