//! Trampoline code generated into arenas: the empty trampoline and the
//! caller that saves the argument registers and calls a Rust handler.

use crate::arena::{Arena, ArenaError};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Registers saved by an ftrace caller. The argument registers, `ip`,
/// `parent_ip` and `parent_slot` are always valid; the fields from `rbx` on
/// are valid (and written back) only in the regs variant, which every site
/// with a SAVE_REGS, DIRECT or IPMODIFY ops calls.
#[repr(C)]
#[derive(Debug)]
pub struct Regs {
    /// First integer argument.
    pub rdi: u64,
    /// Second integer argument.
    pub rsi: u64,
    /// Third integer argument.
    pub rdx: u64,
    /// Fourth integer argument.
    pub rcx: u64,
    /// Fifth integer argument.
    pub r8: u64,
    /// Sixth integer argument.
    pub r9: u64,
    /// Number of vector registers used by a varargs call.
    pub rax: u64,
    /// Static chain.
    pub r10: u64,
    /// Floating-point and vector arguments, `xmm0`–`xmm7`.
    pub xmm: [u128; 8],
    /// The traced function's caller's frame pointer.
    pub rbp: u64,
    /// The site (traced function entry, after any endbr64).
    pub ip: usize,
    /// Where the traced function returns to.
    pub parent_ip: usize,
    /// The stack slot holding `parent_ip`.
    pub parent_slot: *mut usize,
    /// Callee-saved `rbx` (regs variant).
    pub rbx: u64,
    /// Callee-saved `r12` (regs variant).
    pub r12: u64,
    /// Callee-saved `r13` (regs variant).
    pub r13: u64,
    /// Callee-saved `r14` (regs variant).
    pub r14: u64,
    /// Callee-saved `r15` (regs variant).
    pub r15: u64,
    /// Flags (regs variant).
    pub rflags: u64,
    /// Resume address (site + 5); an IPMODIFY ops may change it.
    pub rip: usize,
    /// Set (by the direct helper) to continue at a direct-call target.
    pub direct: usize,
    /// Stack pointer at the traced function's entry.
    pub rsp: usize,
    _pad: u64,
}

// The frame is 16-byte aligned (its xmm words are stored by movaps) and
// is what the callers' prologue reserves.
const _: () = assert!(std::mem::size_of::<Regs>().is_multiple_of(16));
const _: () = assert!(std::mem::offset_of!(Regs, xmm).is_multiple_of(16));
// REGS_SPARE: the padding word after `rsp`.
const _: () = assert!(std::mem::offset_of!(Regs, _pad) == std::mem::offset_of!(Regs, rsp) + 8);

/// Handler called by a caller trampoline for every call crossing its sites:
/// `ip` is the site address, `parent_ip` the traced function's return
/// address and `parent_slot` where that address lives on the stack.
pub type Handler =
    extern "C" fn(ip: usize, parent_ip: usize, parent_slot: *mut usize, data: *const ());

// --- The caller frame ----------------------------------------------------------
//
// Every caller below (and fgraph's and the fused recorder's entries, which
// extend it) keeps the registers in a `Regs` at rsp, under a frame whose
// rbp is the site's call's:
//
//   rbp + RBP_PARENT_SLOT (16)  R: the traced function's return address
//                               (`Regs::parent_slot` points here)
//   rbp + RBP_SITE_RET    (8)   site + SITE_CALL_LEN: the site's call's
//                               return address
//   rbp                         the traced function's caller's rbp
//   ...                         alignment
//   rsp + REGS_SIZE
//   rsp + REGS_SPARE            a word no caller writes: the entries that
//                               extend the frame keep the ops slot there
//   rsp + REGS_RSP              rsp at the traced function's entry (regs)
//   rsp + REGS_DIRECT           a direct call's target (regs)
//   rsp + REGS_RIP              where the call resumes: site + 5 (regs)
//   rsp + REGS_RFLAGS           rflags (regs)
//   rsp + REGS_RBX, REGS_R12 … REGS_R15   callee-saved registers (regs)
//   rsp + REGS_PARENT_SLOT      &R
//   rsp + REGS_PARENT_IP        R
//   rsp + REGS_IP               the site
//   rsp + REGS_RBP              the caller's rbp
//   rsp + REGS_XMM0 … XMM7      16 bytes each, 16-aligned (movaps)
//   rsp + REGS_RDI, RSI, RDX, RCX, R8, R9, RAX, R10   the argument registers
//
// (regs): written by the regs variant only. The offsets are the struct's
// (`offset_of!`), named in the assembly by `.set` symbols: `regs_asm!`.

/// `global_asm!` whose body names [`Regs`]' words (`REGS_RDI` …
/// `REGS_RSP`, `REGS_XMM0` … `REGS_XMM7`, `REGS_SPARE`, `REGS_SIZE`) and the caller's
/// slots (`RBP_SITE_RET`, `RBP_PARENT_SLOT`, `SITE_CALL_LEN`), as the
/// diagram above; operands after a `;` are the body's own.
macro_rules! regs_asm {
    ($($body:expr),+ $(,)? $(; $($operands:tt)*)?) => {
        std::arch::global_asm!(
            ".set REGS_RDI, {regs_rdi}",
            ".set REGS_RSI, {regs_rsi}",
            ".set REGS_RDX, {regs_rdx}",
            ".set REGS_RCX, {regs_rcx}",
            ".set REGS_R8, {regs_r8}",
            ".set REGS_R9, {regs_r9}",
            ".set REGS_RAX, {regs_rax}",
            ".set REGS_R10, {regs_r10}",
            ".set REGS_XMM0, {regs_xmm}",
            ".set REGS_XMM1, REGS_XMM0 + 16",
            ".set REGS_XMM2, REGS_XMM0 + 32",
            ".set REGS_XMM3, REGS_XMM0 + 48",
            ".set REGS_XMM4, REGS_XMM0 + 64",
            ".set REGS_XMM5, REGS_XMM0 + 80",
            ".set REGS_XMM6, REGS_XMM0 + 96",
            ".set REGS_XMM7, REGS_XMM0 + 112",
            ".set REGS_RBP, {regs_rbp}",
            ".set REGS_IP, {regs_ip}",
            ".set REGS_PARENT_IP, {regs_parent_ip}",
            ".set REGS_PARENT_SLOT, {regs_parent_slot}",
            ".set REGS_RBX, {regs_rbx}",
            ".set REGS_R12, {regs_r12}",
            ".set REGS_R13, {regs_r13}",
            ".set REGS_R14, {regs_r14}",
            ".set REGS_R15, {regs_r15}",
            ".set REGS_RFLAGS, {regs_rflags}",
            ".set REGS_RIP, {regs_rip}",
            ".set REGS_DIRECT, {regs_direct}",
            ".set REGS_RSP, {regs_rsp}",
            ".set REGS_SPARE, REGS_RSP + 8",
            ".set REGS_SIZE, {regs_size}",
            ".set RBP_SITE_RET, 8",
            ".set RBP_PARENT_SLOT, 16",
            ".set SITE_CALL_LEN, 5",
            $($body),+,
            regs_rdi = const std::mem::offset_of!($crate::tramp::Regs, rdi),
            regs_rsi = const std::mem::offset_of!($crate::tramp::Regs, rsi),
            regs_rdx = const std::mem::offset_of!($crate::tramp::Regs, rdx),
            regs_rcx = const std::mem::offset_of!($crate::tramp::Regs, rcx),
            regs_r8 = const std::mem::offset_of!($crate::tramp::Regs, r8),
            regs_r9 = const std::mem::offset_of!($crate::tramp::Regs, r9),
            regs_rax = const std::mem::offset_of!($crate::tramp::Regs, rax),
            regs_r10 = const std::mem::offset_of!($crate::tramp::Regs, r10),
            regs_xmm = const std::mem::offset_of!($crate::tramp::Regs, xmm),
            regs_rbp = const std::mem::offset_of!($crate::tramp::Regs, rbp),
            regs_ip = const std::mem::offset_of!($crate::tramp::Regs, ip),
            regs_parent_ip = const std::mem::offset_of!($crate::tramp::Regs, parent_ip),
            regs_parent_slot = const std::mem::offset_of!($crate::tramp::Regs, parent_slot),
            regs_rbx = const std::mem::offset_of!($crate::tramp::Regs, rbx),
            regs_r12 = const std::mem::offset_of!($crate::tramp::Regs, r12),
            regs_r13 = const std::mem::offset_of!($crate::tramp::Regs, r13),
            regs_r14 = const std::mem::offset_of!($crate::tramp::Regs, r14),
            regs_r15 = const std::mem::offset_of!($crate::tramp::Regs, r15),
            regs_rflags = const std::mem::offset_of!($crate::tramp::Regs, rflags),
            regs_rip = const std::mem::offset_of!($crate::tramp::Regs, rip),
            regs_direct = const std::mem::offset_of!($crate::tramp::Regs, direct),
            regs_rsp = const std::mem::offset_of!($crate::tramp::Regs, rsp),
            regs_size = const std::mem::size_of::<$crate::tramp::Regs>(),
            $($($operands)*)?
        );
    };
}

// Caller trampoline template (args variant, design §2.4).
//
// Register contract, entered by `call` from a site at a function entry:
//   [rsp] = site+5, [rsp+8] = R (the traced function's return address);
//   rsp ≡ 0 (mod 16) by the ABI, but we realign anyway.
//   Arguments: rdi rsi rdx rcx r8 r9, rax (varargs count), r10 (static
//   chain), xmm0–7; rbp is the caller's. r11 is our scratch register.
// Every argument register is restored before `ret` to site+5; rbx, rbp and
// r12–r15 are callee-saved in the handler. The copy patches the two imm64
// operands (data pointer, handler) at the offsets of their labels + 2.
regs_asm!(
    ".pushsection .text.shadowgraph_templates,\"ax\",@progbits",
    ".globl shadowgraph_caller_start",
    ".hidden shadowgraph_caller_start",
    ".globl shadowgraph_caller_data",
    ".hidden shadowgraph_caller_data",
    ".globl shadowgraph_caller_fn",
    ".hidden shadowgraph_caller_fn",
    ".globl shadowgraph_caller_end",
    ".hidden shadowgraph_caller_end",
    "shadowgraph_caller_start:",
    "endbr64",
    "push rbp",
    "mov rbp, rsp",
    "sub rsp, REGS_RBP",
    "and rsp, -16",
    "mov [rsp + REGS_RDI], rdi",
    "mov [rsp + REGS_RSI], rsi",
    "mov [rsp + REGS_RDX], rdx",
    "mov [rsp + REGS_RCX], rcx",
    "mov [rsp + REGS_R8], r8",
    "mov [rsp + REGS_R9], r9",
    "mov [rsp + REGS_RAX], rax",
    "mov [rsp + REGS_R10], r10",
    "movaps [rsp + REGS_XMM0], xmm0",
    "movaps [rsp + REGS_XMM1], xmm1",
    "movaps [rsp + REGS_XMM2], xmm2",
    "movaps [rsp + REGS_XMM3], xmm3",
    "movaps [rsp + REGS_XMM4], xmm4",
    "movaps [rsp + REGS_XMM5], xmm5",
    "movaps [rsp + REGS_XMM6], xmm6",
    "movaps [rsp + REGS_XMM7], xmm7",
    "mov rdi, [rbp + RBP_SITE_RET]",
    "sub rdi, SITE_CALL_LEN",
    "mov rsi, [rbp + RBP_PARENT_SLOT]",
    "lea rdx, [rbp + RBP_PARENT_SLOT]",
    "shadowgraph_caller_data:",
    "movabs rcx, 0x1122334455667788",
    "shadowgraph_caller_fn:",
    "movabs r11, 0x1122334455667788",
    "call r11",
    "mov rdi, [rsp + REGS_RDI]",
    "mov rsi, [rsp + REGS_RSI]",
    "mov rdx, [rsp + REGS_RDX]",
    "mov rcx, [rsp + REGS_RCX]",
    "mov r8,  [rsp + REGS_R8]",
    "mov r9,  [rsp + REGS_R9]",
    "mov rax, [rsp + REGS_RAX]",
    "mov r10, [rsp + REGS_R10]",
    "movaps xmm0, [rsp + REGS_XMM0]",
    "movaps xmm1, [rsp + REGS_XMM1]",
    "movaps xmm2, [rsp + REGS_XMM2]",
    "movaps xmm3, [rsp + REGS_XMM3]",
    "movaps xmm4, [rsp + REGS_XMM4]",
    "movaps xmm5, [rsp + REGS_XMM5]",
    "movaps xmm6, [rsp + REGS_XMM6]",
    "movaps xmm7, [rsp + REGS_XMM7]",
    "leave",
    "ret",
    "shadowgraph_caller_end:",
    ".popsection",
);

extern "C" {
    static shadowgraph_caller_start: u8;
    static shadowgraph_caller_data: u8;
    static shadowgraph_caller_fn: u8;
    static shadowgraph_caller_end: u8;
}

/// The template bytes and the offsets of the two imm64 operands.
fn caller_template() -> (&'static [u8], usize, usize) {
    // SAFETY: the symbols delimit the template in our own text; taking
    // their addresses and reading the bytes between them is sound.
    unsafe {
        let start = std::ptr::addr_of!(shadowgraph_caller_start) as usize;
        let data = std::ptr::addr_of!(shadowgraph_caller_data) as usize;
        let func = std::ptr::addr_of!(shadowgraph_caller_fn) as usize;
        let end = std::ptr::addr_of!(shadowgraph_caller_end) as usize;
        let code = std::slice::from_raw_parts(start as *const u8, end - start);
        // `movabs r64, imm64` = REX.W + B8+r + imm64: operand at +2.
        (code, data - start + 2, func - start + 2)
    }
}

/// A trampoline that only returns: what a patched call costs by itself.
pub fn empty(arena: &Arena) -> Result<usize, ArenaError> {
    arena.alloc_code(&[0xc3])
}

/// A caller trampoline that calls `handler(ip, parent_ip, parent_slot,
/// data)` with every argument register preserved around it. `data` must
/// stay valid for as long as any site may call the trampoline.
pub fn caller(arena: &Arena, handler: Handler, data: *const ()) -> Result<usize, ArenaError> {
    let (template, data_off, fn_off) = caller_template();
    let mut code = template.to_vec();
    code[data_off..data_off + 8].copy_from_slice(&(data as u64).to_le_bytes());
    code[fn_off..fn_off + 8].copy_from_slice(&(handler as usize as u64).to_le_bytes());
    arena.alloc_code(&code)
}

// ---------------------------------------------------------------------------
// ftrace callers (design §2.4, §3.4): the shared caller and per-ops
// trampolines use these templates; the imm64 operands name the Rust entry
// and its data (the dispatch record slot or an ops' data slot).
//
// Register contract: as the caller template above. The frame holds a
// `core::Regs` (layout in core/dispatch.rs). The Rust entry is called as
// `entry(regs: *mut Regs, data) -> (target: rax, action: rdx)`; for actions
// 1 and 2 the target is read back from `regs.direct` / `regs.rip`.
// Args variant: saves/restores the argument registers only and always
// returns to site+5. Regs variant: also saves rbx, r12–r15 and rflags, writes
// back everything the callbacks changed, and honours the action:
//   0 → return to site+5;
//   1 → direct call: restore, `jmp target` with [rsp] = site+5 (as if the
//       site had called the target);
//   2 → IPMODIFY: restore, drop our return slot, `jmp target` with [rsp] = R.
// r11 carries the target through the restore.

// The argument registers into the frame's Regs (every caller's first
// step after its prologue).
macro_rules! save_arg_registers {
    () => {
        concat!(
            "mov [rsp + REGS_RDI], rdi\n",
            "mov [rsp + REGS_RSI], rsi\n",
            "mov [rsp + REGS_RDX], rdx\n",
            "mov [rsp + REGS_RCX], rcx\n",
            "mov [rsp + REGS_R8], r8\n",
            "mov [rsp + REGS_R9], r9\n",
            "mov [rsp + REGS_RAX], rax\n",
            "mov [rsp + REGS_R10], r10\n",
            "movaps [rsp + REGS_XMM0], xmm0\n",
            "movaps [rsp + REGS_XMM1], xmm1\n",
            "movaps [rsp + REGS_XMM2], xmm2\n",
            "movaps [rsp + REGS_XMM3], xmm3\n",
            "movaps [rsp + REGS_XMM4], xmm4\n",
            "movaps [rsp + REGS_XMM5], xmm5\n",
            "movaps [rsp + REGS_XMM6], xmm6\n",
            "movaps [rsp + REGS_XMM7], xmm7\n",
        )
    };
}

// `save_args!()` takes the site from the caller's return address
// ([rbp+8] − 5); `save_args!(SITE)` from SITE, code that leaves it in r11
// (a site stub's entry reads it from the stub). rip is the site + 5.
macro_rules! save_args {
    () => {
        $crate::tramp::save_args!("mov r11, [rbp + RBP_SITE_RET]\nsub r11, SITE_CALL_LEN\n")
    };
    ($site:literal) => {
        concat!(
            $crate::tramp::save_arg_registers!(),
            // rbp (the traced function's caller's), site, R, &R; rip =
            // site+5 and direct = 0: the entry's action reads them.
            "mov r11, [rbp]\n",
            "mov [rsp + REGS_RBP], r11\n",
            $site,
            "mov [rsp + REGS_IP], r11\n",
            "add r11, SITE_CALL_LEN\n",
            "mov [rsp + REGS_RIP], r11\n",
            "mov r11, [rbp + RBP_PARENT_SLOT]\n",
            "mov [rsp + REGS_PARENT_IP], r11\n",
            "lea r11, [rbp + RBP_PARENT_SLOT]\n",
            "mov [rsp + REGS_PARENT_SLOT], r11\n",
            "mov qword ptr [rsp + REGS_DIRECT], 0\n",
        )
    };
}

macro_rules! restore_args {
    () => {
        concat!(
            "mov rdi, [rsp + REGS_RDI]\n",
            "mov rsi, [rsp + REGS_RSI]\n",
            "mov rdx, [rsp + REGS_RDX]\n",
            "mov rcx, [rsp + REGS_RCX]\n",
            "mov r8,  [rsp + REGS_R8]\n",
            "mov r9,  [rsp + REGS_R9]\n",
            "mov rax, [rsp + REGS_RAX]\n",
            "mov r10, [rsp + REGS_R10]\n",
            "movaps xmm0, [rsp + REGS_XMM0]\n",
            "movaps xmm1, [rsp + REGS_XMM1]\n",
            "movaps xmm2, [rsp + REGS_XMM2]\n",
            "movaps xmm3, [rsp + REGS_XMM3]\n",
            "movaps xmm4, [rsp + REGS_XMM4]\n",
            "movaps xmm5, [rsp + REGS_XMM5]\n",
            "movaps xmm6, [rsp + REGS_XMM6]\n",
            "movaps xmm7, [rsp + REGS_XMM7]\n",
        )
    };
}

// Regs variant extras: the callee-saved registers, rflags and rsp.
macro_rules! save_regs_extra {
    () => {
        concat!(
            "mov [rsp + REGS_RBX], rbx\n",
            "mov [rsp + REGS_R12], r12\n",
            "mov [rsp + REGS_R13], r13\n",
            "mov [rsp + REGS_R14], r14\n",
            "mov [rsp + REGS_R15], r15\n",
            "pushfq\n",
            "pop r11\n",
            "mov [rsp + REGS_RFLAGS], r11\n",
            "lea r11, [rbp + RBP_PARENT_SLOT]\n",
            "mov [rsp + REGS_RSP], r11\n",
        )
    };
}

macro_rules! restore_regs_extra {
    () => {
        concat!(
            "mov rbx, [rsp + REGS_RBX]\n",
            "mov r12, [rsp + REGS_R12]\n",
            "mov r13, [rsp + REGS_R13]\n",
            "mov r14, [rsp + REGS_R14]\n",
            "mov r15, [rsp + REGS_R15]\n",
            "push qword ptr [rsp + REGS_RFLAGS]\n",
            "popfq\n",
            // The traced function's caller's rbp, possibly changed.
            "mov r11, [rsp + REGS_RBP]\n",
            "mov [rbp], r11\n",
        )
    };
}

macro_rules! prologue {
    () => {
        concat!(
            "endbr64\n",
            "push rbp\n",
            "mov rbp, rsp\n",
            "sub rsp, REGS_SIZE\n",
            "and rsp, -16\n",
        )
    };
}

pub(crate) use {prologue, regs_asm, restore_args, save_arg_registers, save_args};

regs_asm!(
    ".pushsection .text.shadowgraph_templates,\"ax\",@progbits",
    ".globl shadowgraph_ftrace_args_start",
    ".hidden shadowgraph_ftrace_args_start",
    ".globl shadowgraph_ftrace_args_data",
    ".hidden shadowgraph_ftrace_args_data",
    ".globl shadowgraph_ftrace_args_fn",
    ".hidden shadowgraph_ftrace_args_fn",
    ".globl shadowgraph_ftrace_args_end",
    ".hidden shadowgraph_ftrace_args_end",
    "shadowgraph_ftrace_args_start:",
    prologue!(),
    save_args!(),
    "mov rdi, rsp",
    "shadowgraph_ftrace_args_data:",
    "movabs rsi, 0x1122334455667788",
    "shadowgraph_ftrace_args_fn:",
    "movabs r11, 0x1122334455667788",
    "call r11",
    restore_args!(),
    "leave",
    "ret",
    "shadowgraph_ftrace_args_end:",
    ".popsection",
);

regs_asm!(
    ".pushsection .text.shadowgraph_templates,\"ax\",@progbits",
    ".globl shadowgraph_ftrace_regs_start",
    ".hidden shadowgraph_ftrace_regs_start",
    ".globl shadowgraph_ftrace_regs_data",
    ".hidden shadowgraph_ftrace_regs_data",
    ".globl shadowgraph_ftrace_regs_fn",
    ".hidden shadowgraph_ftrace_regs_fn",
    ".globl shadowgraph_ftrace_regs_end",
    ".hidden shadowgraph_ftrace_regs_end",
    "shadowgraph_ftrace_regs_start:",
    prologue!(),
    save_args!(),
    save_regs_extra!(),
    "mov rdi, rsp",
    "shadowgraph_ftrace_regs_data:",
    "movabs rsi, 0x1122334455667788",
    "shadowgraph_ftrace_regs_fn:",
    "movabs r11, 0x1122334455667788",
    "call r11",
    "cmp rdx, 1",
    "je 2f",
    "cmp rdx, 2",
    "je 3f",
    restore_args!(),
    restore_regs_extra!(),
    "leave",
    "ret",
    "2:",
    restore_args!(),
    restore_regs_extra!(),
    "mov r11, [rsp + REGS_DIRECT]",
    "leave",
    "jmp r11",
    "3:",
    restore_args!(),
    restore_regs_extra!(),
    "mov r11, [rsp + REGS_RIP]",
    "leave",
    "lea rsp, [rsp + 8]",
    "jmp r11",
    "shadowgraph_ftrace_regs_end:",
    ".popsection",
);

extern "C" {
    static shadowgraph_ftrace_args_start: u8;
    static shadowgraph_ftrace_args_data: u8;
    static shadowgraph_ftrace_args_fn: u8;
    static shadowgraph_ftrace_args_end: u8;
    static shadowgraph_ftrace_regs_start: u8;
    static shadowgraph_ftrace_regs_data: u8;
    static shadowgraph_ftrace_regs_fn: u8;
    static shadowgraph_ftrace_regs_end: u8;
}

/// The Rust side of an ftrace caller: gets the saved registers and the
/// trampoline's data word; returns (target, action) in rax:rdx.
pub(crate) type FtraceEntry = extern "C" fn(regs: *mut u8, data: usize) -> EntryAction;

/// What the regs variant does after the entry returns.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EntryAction {
    pub target: usize,
    /// 0 return, 1 direct jump, 2 IPMODIFY.
    pub action: usize,
}

/// Bytes of an ftrace caller of either variant.
pub(crate) fn ftrace_caller_len(regs_variant: bool) -> usize {
    let (start, end) = if regs_variant {
        (
            std::ptr::addr_of!(shadowgraph_ftrace_regs_start) as usize,
            std::ptr::addr_of!(shadowgraph_ftrace_regs_end) as usize,
        )
    } else {
        (
            std::ptr::addr_of!(shadowgraph_ftrace_args_start) as usize,
            std::ptr::addr_of!(shadowgraph_ftrace_args_end) as usize,
        )
    };
    end - start
}

/// Generates an ftrace caller (args or regs variant) into `arena`.
pub(crate) fn ftrace_caller(
    arena: &Arena,
    regs_variant: bool,
    entry: FtraceEntry,
    data: usize,
) -> Result<usize, ArenaError> {
    let (start, d, f, end) = {
        if regs_variant {
            (
                std::ptr::addr_of!(shadowgraph_ftrace_regs_start) as usize,
                std::ptr::addr_of!(shadowgraph_ftrace_regs_data) as usize,
                std::ptr::addr_of!(shadowgraph_ftrace_regs_fn) as usize,
                std::ptr::addr_of!(shadowgraph_ftrace_regs_end) as usize,
            )
        } else {
            (
                std::ptr::addr_of!(shadowgraph_ftrace_args_start) as usize,
                std::ptr::addr_of!(shadowgraph_ftrace_args_data) as usize,
                std::ptr::addr_of!(shadowgraph_ftrace_args_fn) as usize,
                std::ptr::addr_of!(shadowgraph_ftrace_args_end) as usize,
            )
        }
    };
    // `movabs r64, imm64`: the operand at +2.
    let words = [(d + 2, data as u64), (f + 2, entry as usize as u64)];
    from_template(arena, start, end, &words)
}

/// Copies the template `[start, end)` of our text into `arena` with each
/// `(address in the template, value)` written as a little-endian word.
pub(crate) fn from_template(
    arena: &Arena,
    start: usize,
    end: usize,
    words: &[(usize, u64)],
) -> Result<usize, ArenaError> {
    // SAFETY: [start, end) is a template's code in our text, delimited by
    // its own symbols.
    let mut code = unsafe { std::slice::from_raw_parts(start as *const u8, end - start) }.to_vec();
    for &(at, v) in words {
        let at = at - start;
        code[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    arena.alloc_code(&code)
}

/// Bytes of a [`stub`].
pub(crate) const STUB_LEN: usize = 28;

/// A trampoline that hands over to code outside the arena: `endbr64;
/// movabs r11, data; jmp [rip+0]; .quad target`. Entered by a site's call,
/// so the target sees [rsp] = site+5, [rsp+8] = R and r11 = `data`, and
/// never comes back here (the arena copy can be retired as soon as no
/// thread is inside its four instructions).
pub(crate) fn stub(arena: &Arena, target: usize, data: usize) -> Result<usize, ArenaError> {
    let mut code = vec![0xf3, 0x0f, 0x1e, 0xfa, 0x49, 0xbb];
    code.extend_from_slice(&(data as u64).to_le_bytes());
    code.extend_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    code.extend_from_slice(&(target as u64).to_le_bytes());
    debug_assert_eq!(code.len(), STUB_LEN);
    arena.alloc_code(&code)
}

/// A direct-call pad: `jmp [rip+0]; .quad target`. Entered by the site's
/// call, so the target sees [rsp] = site+5 as if the site had called it.
pub(crate) fn direct_pad(arena: &Arena, target: usize) -> Result<usize, ArenaError> {
    let mut code = vec![0xff, 0x25, 0, 0, 0, 0];
    code.extend_from_slice(&(target as u64).to_le_bytes());
    arena.alloc_code(&code)
}

// --- Site stubs ----------------------------------------------------------------
//
// A site stub serves one site of an ops that returns through its own code
// rather than through a hijacked return address (record::fused). The site
// holds `jmp stub` instead of `call tramp`, and the stub calls the traced
// function's body itself, so that the function's `ret` comes back to the
// stub by a real call: the return-stack predictor stays right, where a
// hijacked return costs a misprediction on every call.
//
//   +0   lea  r11, [site]  The site in r11 (free at a function's entry),
//                          so that ENTRY has it without reading it from
//                          here (a load after the load of its return
//                          address: the fused path's clock read waits for
//                          such chains, record::fused).
//   +7   call [ENTRY]      ENTRY (an address in a cell of the arena) sees
//                          [rsp] = stub+13, [rsp+8] = R, r11 = the site,
//                          the arguments live; it returns with ZF=1 if it
//                          pushed a shadow frame for this call (R saved in
//                          it), else ZF=0, every argument register intact.
//   +13  jne  +31
//   +15  lea  rsp, [rsp+8] R's slot is popped: the call below reuses it,
//   +20  call BODY         so stack arguments stay where the body expects.
//   +25  jmp  [RETURN]     The body returned: rsp = slot + 8, the result
//                          live; RETURN pops the frame and `ret`s to R.
//   +31  jmp  BODY         Not hooked: the function runs untouched.
//   +36  int3 × 4
//   +40  .long id          The site's id in the core, read by ENTRY.
//   +44  int3 × 4
//   +48  .quad site        The function's site, read by ENTRY.
//   +56  .quad data        The ops' data slot in this arena, read by ENTRY.
//
// A stub is one cache line: blocks start on one. The cells are in the
// same arena (rel32 reach), as are the sites. Stubs are written in blocks
// and never freed or rewritten: a thread may sit in a function called
// from a stub for any length of time.

/// Bytes of one site stub.
pub(crate) const SITE_STUB_LEN: usize = 64;
/// Offset of a stub's return point (where the body returns to).
pub(crate) const SITE_STUB_RETURN: usize = 25;
/// Offset of ENTRY's return address (after the stub's call of ENTRY).
const SITE_STUB_ENTRY_RET: usize = 13;
/// Offset of the site literal from ENTRY's return address.
pub(crate) const SITE_STUB_SITE_FROM_RET: usize = 48 - SITE_STUB_ENTRY_RET;
/// Offset of the site id (u32) from the same.
pub(crate) const SITE_STUB_ID_FROM_RET: usize = 40 - SITE_STUB_ENTRY_RET;
/// Offset of the data slot literal from the same.
pub(crate) const SITE_STUB_DATA_FROM_RET: usize = 56 - SITE_STUB_ENTRY_RET;

/// Offset of the site literal from a stub's return point.
pub(crate) const SITE_STUB_SITE_FROM_RETURN: usize = 48 - SITE_STUB_RETURN;

const MAX_STUB_BLOCKS: usize = 1024;

/// A block of stubs: its base and bytes. C layout: fgraph's assembly
/// walks the blocks (`shadowgraph_tail_call_from`).
#[repr(C)]
pub(crate) struct StubBlock {
    pub(crate) base: AtomicUsize,
    pub(crate) len: AtomicUsize,
}

/// The blocks of stubs written so far, published by count.
pub(crate) static STUB_BLOCKS: [StubBlock; MAX_STUB_BLOCKS] = [const {
    StubBlock {
        base: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
    }
}; MAX_STUB_BLOCKS];
pub(crate) static STUB_BLOCK_COUNT: AtomicUsize = AtomicUsize::new(0);
static STUB_BLOCK_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Writes a block of stubs into `arena`, one per (site, id, entry) of
/// `sites` (each within rel32 reach of the arena), calling the address in
/// cell `entry` and jumping to the one in cell `ret` (both cells in the
/// arena), with `data` for ENTRY. Returns the block's address (a cache line's):
/// site i's stub is at `block + i * SITE_STUB_LEN`. The block is
/// registered (see [`is_stub_return`]) before any site can reach it.
pub(crate) fn site_stubs(
    arena: &Arena,
    sites: &[(usize, u32, usize)],
    ret: usize,
    data: usize,
) -> Result<usize, ArenaError> {
    let _g = STUB_BLOCK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // Acquire: pairs with the Release below (the lock orders writers too).
    let n = STUB_BLOCK_COUNT.load(Ordering::Acquire);
    if n == MAX_STUB_BLOCKS {
        return Err(ArenaError::Full);
    }
    let len = sites.len() * SITE_STUB_LEN;
    // Allocations are 16-byte aligned: up to 48 bytes of int3 in front.
    let lead = |at: usize| at.next_multiple_of(64) - at;
    let rel = |from: usize, to: usize| -> [u8; 4] {
        i32::try_from(to as i64 - from as i64)
            .expect("arena within reach of its sites")
            .to_le_bytes()
    };
    let at = arena.alloc_with(len + 48, |at| {
        let mut code = vec![0xcc; lead(at)];
        for (i, &(site, id, entry)) in sites.iter().enumerate() {
            let s = at + lead(at) + i * SITE_STUB_LEN;
            let body = site + 5;
            code.extend_from_slice(&[0x4c, 0x8d, 0x1d]);
            code.extend_from_slice(&rel(s + 7, site));
            code.extend_from_slice(&[0xff, 0x15]);
            code.extend_from_slice(&rel(s + 13, entry));
            code.extend_from_slice(&[0x75, 0x10]);
            code.extend_from_slice(&[0x48, 0x8d, 0x64, 0x24, 0x08]);
            code.push(0xe8);
            code.extend_from_slice(&rel(s + 25, body));
            code.extend_from_slice(&[0xff, 0x25]);
            code.extend_from_slice(&rel(s + 31, ret));
            code.push(0xe9);
            code.extend_from_slice(&rel(s + 36, body));
            code.extend_from_slice(&[0xcc; 4]);
            code.extend_from_slice(&id.to_le_bytes());
            code.extend_from_slice(&[0xcc; 4]);
            code.extend_from_slice(&(site as u64).to_le_bytes());
            code.extend_from_slice(&(data as u64).to_le_bytes());
        }
        code.resize(len + 48, 0xcc);
        code
    })?;
    let block = at + lead(at);
    STUB_BLOCKS[n].base.store(block, Ordering::Relaxed);
    STUB_BLOCKS[n].len.store(len, Ordering::Relaxed);
    // Release: a block's base and length (Relaxed above) are seen by whoever
    // loads the count (Acquire) and walks the blocks below it.
    STUB_BLOCK_COUNT.store(n + 1, Ordering::Release);
    Ok(block)
}

/// Whether `addr` is a site stub's return point: the return address a
/// stub-called function finds in its slot in place of the real one.
pub fn is_stub_return(addr: usize) -> bool {
    let n = STUB_BLOCK_COUNT.load(Ordering::Acquire);
    STUB_BLOCKS[..n].iter().any(|blk| {
        let (b, l) = (
            blk.base.load(Ordering::Relaxed),
            blk.len.load(Ordering::Relaxed),
        );
        addr.wrapping_sub(b) < l && (addr - b) % SITE_STUB_LEN == SITE_STUB_RETURN
    })
}
