//! Floors, as models in assembly: what function-graph tracing and
//! recording cannot go below on this machine.

use crate::common::{median, ns_per_call, Loop};
use shadowgraph::ftrace;
use std::time::Instant;

// The floor of function-graph tracing, for the table's readers: a shadow
// stack push with return hijack at entry and a pop at return, and nothing
// else (no callbacks, no saved registers, one thread: a global stack).
//
// Register contract: `bench_floor_entry` is reached through a direct-call
// pad from a site: [rsp] = site+5, [rsp+8] = R. It saves rax around its
// work (then R is at rsp + FLOOR_R) and clobbers only r11 (free at a
// function entry). `bench_floor_return`
// is reached by the traced function's `ret`; rax/rdx/xmm0/xmm1 hold its
// result and rcx/r11 are dead there.
std::arch::global_asm!(
    ".pushsection .text.shadowgraph_bench_floor,\"ax\",@progbits",
    ".set FLOOR_R, 16",
    "bench_floor_entry:",
    "endbr64",
    "push rax",
    "mov r11, [rip + {top}]",
    "mov rax, [rsp + FLOOR_R]",
    "mov [r11], rax",
    "add r11, 8",
    "mov [rip + {top}], r11",
    "lea rax, [rip + bench_floor_return]",
    "mov [rsp + FLOOR_R], rax",
    "pop rax",
    "ret",
    "bench_floor_return:",
    "endbr64",
    "mov rcx, [rip + {top}]",
    "sub rcx, 8",
    "mov [rip + {top}], rcx",
    "jmp [rcx]",
    ".popsection",
    top = sym FLOOR_TOP,
);

extern "C" {
    fn bench_floor_entry();
}

// The floors of the two ways a return comes back to the tracer, as models
// in assembly, without sites or the core: a loop calling a function that
// adds 1 to rax, (a) plain, (b) whose entry calls a trampoline that pushes
// the return address on a global shadow stack and hijacks it (its `ret`
// then mispredicts, the return-stack predictor expecting the caller), and
// (c) whose entry jumps to a stub that pushes it, pops it off the stack and
// calls the body, then pops the shadow frame and returns with `ret` (every
// return predicted) — what site stubs do (tramp.rs), and (d) the same stub
// that also reads the TSC at entry and at return and stores a 16-byte
// record {time, word} each time into one ring in memory: the least that
// any recorder of call graphs with durations does, with no thread lookup,
// no guard, no function or depth in the word, nothing for signals. Register
// contract: `bench_model_loop_*` is called as `extern "C" fn(n: i64) ->
// i64`; the models use rax, rcx, rdx, r10, r11, the shadow stack at
// FLOOR_TOP and MODEL_RING. The hijacking trampoline, called from the
// model's entry, finds the model's return address R at rsp + HIJACK_R; a
// record is {time at REC_TIME, word at REC_WORD}, REC_SIZE bytes.
std::arch::global_asm!(
    ".pushsection .text.shadowgraph_bench_model,\"ax\",@progbits",
    ".set HIJACK_R, 8",
    ".set REC_TIME, 0",
    ".set REC_WORD, 8",
    ".set REC_SIZE, 16",
    ".p2align 4",
    "bench_model_plain:",
    "nop dword ptr [rax + rax]",
    "add rax, 1",
    "ret",
    ".p2align 4",
    "bench_model_hijacked:",
    "call bench_model_hijack_entry",
    "add rax, 1",
    "ret",
    ".p2align 4",
    "bench_model_stubbed:",
    "jmp bench_model_stub",
    "bench_model_stubbed_body:",
    "add rax, 1",
    "ret",
    ".p2align 4",
    "bench_model_hijack_entry:",
    "mov r11, [rip + {top}]",
    "mov r10, [rsp + HIJACK_R]",
    "mov [r11], r10",
    "add r11, 8",
    "mov [rip + {top}], r11",
    "lea r10, [rip + bench_model_hijack_return]",
    "mov [rsp + HIJACK_R], r10",
    "ret",
    "bench_model_hijack_return:",
    "mov rcx, [rip + {top}]",
    "sub rcx, 8",
    "mov [rip + {top}], rcx",
    "jmp [rcx]",
    ".p2align 4",
    "bench_model_stub:",
    model_shadow_push!(),
    "call bench_model_stubbed_body",
    model_shadow_pop_ret!(),
    ".p2align 4",
    "bench_model_recorded:",
    "jmp bench_model_recording_stub",
    "bench_model_recorded_body:",
    "add rax, 1",
    "ret",
    ".p2align 4",
    "bench_model_recording_stub:",
    model_record!("1"),
    model_shadow_push!(),
    "call bench_model_recorded_body",
    model_record!("2"),
    model_shadow_pop_ret!(),
    ".p2align 4",
    ".globl bench_model_loop_plain",
    "bench_model_loop_plain:",
    "push rbx",
    "mov rbx, rdi",
    "xor eax, eax",
    "2: call bench_model_plain",
    "dec rbx",
    "jnz 2b",
    "pop rbx",
    "ret",
    ".p2align 4",
    ".globl bench_model_loop_hijacked",
    "bench_model_loop_hijacked:",
    "push rbx",
    "mov rbx, rdi",
    "xor eax, eax",
    "2: call bench_model_hijacked",
    "dec rbx",
    "jnz 2b",
    "pop rbx",
    "ret",
    ".p2align 4",
    ".globl bench_model_loop_stubbed",
    "bench_model_loop_stubbed:",
    "push rbx",
    "mov rbx, rdi",
    "xor eax, eax",
    "2: call bench_model_stubbed",
    "dec rbx",
    "jnz 2b",
    "pop rbx",
    "ret",
    ".p2align 4",
    ".globl bench_model_loop_recorded",
    "bench_model_loop_recorded:",
    "push rbx",
    "mov rbx, rdi",
    "xor eax, eax",
    "2: call bench_model_recorded",
    "dec rbx",
    "jnz 2b",
    "pop rbx",
    "ret",
    ".popsection",
    top = sym FLOOR_TOP,
    ring = sym MODEL_RING,
    ring_pos = sym MODEL_RING_POS,
    ring_mask = const MODEL_RING_BYTES - 1,
);

// The stub models' shadow push of R (popped off the stack, so that the
// stub's call of the body reuses its slot); r10, r11 clobbered.
macro_rules! model_shadow_push {
    () => {
        "mov r11, [rip + {top}]\npop r10\nmov [r11], r10\nadd r11, 8\nmov [rip + {top}], r11\n"
    };
}
use model_shadow_push;

// The stub models' shadow pop, returning to R by `ret` (predicted); rcx
// clobbered.
macro_rules! model_shadow_pop_ret {
    () => {
        "mov rcx, [rip + {top}]\nsub rcx, 8\nmov [rip + {top}], rcx\npush qword ptr [rcx]\nret\n"
    };
}
use model_shadow_pop_ret;

// Model (d)'s record: {TSC, $word} at the next 16 bytes of MODEL_RING,
// wrapping; rax and rdx saved around it, r11 clobbered.
macro_rules! model_record {
    ($word:literal) => {
        concat!(
            "push rax\n",
            "push rdx\n",
            "rdtsc\n",
            "shl rdx, 32\n",
            "or rdx, rax\n",
            "mov r11, [rip + {ring_pos}]\n",
            "lea rax, [rip + {ring}]\n",
            "mov [rax + r11 + REC_TIME], rdx\n",
            "mov qword ptr [rax + r11 + REC_WORD], ",
            $word,
            "\n",
            "add r11, REC_SIZE\n",
            "and r11, {ring_mask}\n",
            "mov [rip + {ring_pos}], r11\n",
            "pop rdx\n",
            "pop rax\n",
        )
    };
}
use model_record;

/// Model (d)'s ring: 1 MiB, as cache-resident as a drained ring can be.
const MODEL_RING_BYTES: usize = 1 << 20;
#[repr(align(64))]
#[allow(dead_code)] // written only by the model's assembly
struct ModelRing([u8; MODEL_RING_BYTES]);
static mut MODEL_RING: ModelRing = ModelRing([0; MODEL_RING_BYTES]);
static mut MODEL_RING_POS: usize = 0;

extern "C" {
    fn bench_model_loop_recorded(n: i64) -> i64;
    fn bench_model_loop_plain(n: i64) -> i64;
    fn bench_model_loop_hijacked(n: i64) -> i64;
    fn bench_model_loop_stubbed(n: i64) -> i64;
}

/// ns per call of the four models (plain, hijacked, stubbed, recorded).
pub fn model_floors(calls: i64, reps: usize) -> [f64; 4] {
    let stack: &'static mut [u64] = Box::leak(vec![0u64; 64].into_boxed_slice());
    // SAFETY: set before the models run; only this thread runs them, one
    // frame deep.
    unsafe { FLOOR_TOP = stack.as_mut_ptr() };
    let time = |f: unsafe extern "C" fn(i64) -> i64| {
        // SAFETY: the models follow the C ABI (see their contract).
        unsafe { f(calls / 10) };
        median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    // SAFETY: as above.
                    std::hint::black_box(unsafe { f(calls) });
                    t.elapsed().as_nanos() as f64 / calls as f64
                })
                .collect(),
        )
    };
    [
        time(bench_model_loop_plain),
        time(bench_model_loop_hijacked),
        time(bench_model_loop_stubbed),
        time(bench_model_loop_recorded),
    ]
}

/// What model (d) adds to a plain call: no recorder that times each call's
/// entry and exit by the TSC can cost less on this machine.
pub fn recorder_floor_ns(reps: usize) -> f64 {
    let [plain, _, _, recorded] = model_floors(20_000_000, reps);
    recorded - plain
}

/// Top of the floor's shadow stack (one thread only).
static mut FLOOR_TOP: *mut u64 = std::ptr::null_mut();

/// ns per call of the floor (see `bench_floor_entry`) on `target`.
pub fn floor_ns(loop_target: Loop, calls: i64, reps: usize) -> Result<f64, String> {
    let stack: &'static mut [u64] = Box::leak(vec![0u64; 4096].into_boxed_slice());
    // SAFETY: set before any site calls the floor; only this thread runs it.
    unsafe { FLOOR_TOP = stack.as_mut_ptr() };
    let filter = ftrace::FilterSet::with_patterns(&["target"], &[]).map_err(|e| e.to_string())?;
    let d = ftrace::Ops::new_direct(filter);
    ftrace::register_direct(&d, bench_floor_entry as *const () as usize)
        .map_err(|e| e.to_string())?;
    let ns = ns_per_call(loop_target, calls, reps);
    ftrace::unregister(&d).map_err(|e| e.to_string())?;
    Ok(ns)
}
