//! Trampoline code generated into arenas: the empty trampoline and the
//! caller that saves the argument registers and calls a Rust handler.

use crate::arena::{Arena, ArenaError};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Handler called by a caller trampoline for every call crossing its sites:
/// `ip` is the site address, `parent_ip` the traced function's return
/// address and `parent_slot` where that address lives on the stack.
pub type Handler =
    extern "C" fn(ip: usize, parent_ip: usize, parent_slot: *mut usize, data: *const ());

// Caller trampoline template (args variant, SPEC §2.4).
//
// Register contract, entered by `call` from a site at a function entry:
//   [rsp] = site+5, [rsp+8] = R (the traced function's return address);
//   rsp ≡ 0 (mod 16) by the ABI, but we realign anyway.
//   Arguments: rdi rsi rdx rcx r8 r9, rax (varargs count), r10 (static
//   chain), xmm0–7; rbp is the caller's. r11 is our scratch register.
// Every argument register is restored before `ret` to site+5; rbx, rbp and
// r12–r15 are callee-saved in the handler. The copy patches the two imm64
// operands (data pointer, handler) at the offsets of their labels + 2.
std::arch::global_asm!(
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
    "sub rsp, 0xc0",
    "and rsp, -16",
    "mov [rsp + 0x00], rdi",
    "mov [rsp + 0x08], rsi",
    "mov [rsp + 0x10], rdx",
    "mov [rsp + 0x18], rcx",
    "mov [rsp + 0x20], r8",
    "mov [rsp + 0x28], r9",
    "mov [rsp + 0x30], rax",
    "mov [rsp + 0x38], r10",
    "movaps [rsp + 0x40], xmm0",
    "movaps [rsp + 0x50], xmm1",
    "movaps [rsp + 0x60], xmm2",
    "movaps [rsp + 0x70], xmm3",
    "movaps [rsp + 0x80], xmm4",
    "movaps [rsp + 0x90], xmm5",
    "movaps [rsp + 0xa0], xmm6",
    "movaps [rsp + 0xb0], xmm7",
    "mov rdi, [rbp + 8]",
    "sub rdi, 5",
    "mov rsi, [rbp + 16]",
    "lea rdx, [rbp + 16]",
    "shadowgraph_caller_data:",
    "movabs rcx, 0x1122334455667788",
    "shadowgraph_caller_fn:",
    "movabs r11, 0x1122334455667788",
    "call r11",
    "mov rdi, [rsp + 0x00]",
    "mov rsi, [rsp + 0x08]",
    "mov rdx, [rsp + 0x10]",
    "mov rcx, [rsp + 0x18]",
    "mov r8,  [rsp + 0x20]",
    "mov r9,  [rsp + 0x28]",
    "mov rax, [rsp + 0x30]",
    "mov r10, [rsp + 0x38]",
    "movaps xmm0, [rsp + 0x40]",
    "movaps xmm1, [rsp + 0x50]",
    "movaps xmm2, [rsp + 0x60]",
    "movaps xmm3, [rsp + 0x70]",
    "movaps xmm4, [rsp + 0x80]",
    "movaps xmm5, [rsp + 0x90]",
    "movaps xmm6, [rsp + 0xa0]",
    "movaps xmm7, [rsp + 0xb0]",
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
// ftrace callers (SPEC §2.4, §3.4): the shared caller and per-ops
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

// `save_args!()` takes the site from the caller's return address
// ([rbp+8] − 5); `save_args!(SITE)` from SITE, code that leaves it in r11
// (a site stub's entry reads it from the stub). rip is the site + 5.
macro_rules! save_args {
    () => {
        $crate::tramp::save_args!("mov r11, [rbp + 8]\nsub r11, 5\n")
    };
    ($site:literal) => {
        concat!(
            "mov [rsp + 0x00], rdi\n",
            "mov [rsp + 0x08], rsi\n",
            "mov [rsp + 0x10], rdx\n",
            "mov [rsp + 0x18], rcx\n",
            "mov [rsp + 0x20], r8\n",
            "mov [rsp + 0x28], r9\n",
            "mov [rsp + 0x30], rax\n",
            "mov [rsp + 0x38], r10\n",
            "movaps [rsp + 0x40], xmm0\n",
            "movaps [rsp + 0x50], xmm1\n",
            "movaps [rsp + 0x60], xmm2\n",
            "movaps [rsp + 0x70], xmm3\n",
            "movaps [rsp + 0x80], xmm4\n",
            "movaps [rsp + 0x90], xmm5\n",
            "movaps [rsp + 0xa0], xmm6\n",
            "movaps [rsp + 0xb0], xmm7\n",
            // rbp (the traced function's caller's), site, R, &R; rip =
            // site+5 and direct = 0: the entry's action reads them.
            "mov r11, [rbp]\n",
            "mov [rsp + 0xc0], r11\n",
            $site,
            "mov [rsp + 0xc8], r11\n",
            "add r11, 5\n",
            "mov [rsp + 0x110], r11\n",
            "mov r11, [rbp + 16]\n",
            "mov [rsp + 0xd0], r11\n",
            "lea r11, [rbp + 16]\n",
            "mov [rsp + 0xd8], r11\n",
            "mov qword ptr [rsp + 0x118], 0\n",
        )
    };
}

macro_rules! restore_args {
    () => {
        concat!(
            "mov rdi, [rsp + 0x00]\n",
            "mov rsi, [rsp + 0x08]\n",
            "mov rdx, [rsp + 0x10]\n",
            "mov rcx, [rsp + 0x18]\n",
            "mov r8,  [rsp + 0x20]\n",
            "mov r9,  [rsp + 0x28]\n",
            "mov rax, [rsp + 0x30]\n",
            "mov r10, [rsp + 0x38]\n",
            "movaps xmm0, [rsp + 0x40]\n",
            "movaps xmm1, [rsp + 0x50]\n",
            "movaps xmm2, [rsp + 0x60]\n",
            "movaps xmm3, [rsp + 0x70]\n",
            "movaps xmm4, [rsp + 0x80]\n",
            "movaps xmm5, [rsp + 0x90]\n",
            "movaps xmm6, [rsp + 0xa0]\n",
            "movaps xmm7, [rsp + 0xb0]\n",
        )
    };
}

// Regs variant extras: rbx 0xe0, r12 0xe8, r13 0xf0, r14 0xf8, r15 0x100,
// rflags 0x108, rip 0x110 (resume address), direct 0x118, rsp 0x120.
macro_rules! save_regs_extra {
    () => {
        concat!(
            "mov [rsp + 0xe0], rbx\n",
            "mov [rsp + 0xe8], r12\n",
            "mov [rsp + 0xf0], r13\n",
            "mov [rsp + 0xf8], r14\n",
            "mov [rsp + 0x100], r15\n",
            "pushfq\n",
            "pop r11\n",
            "mov [rsp + 0x108], r11\n",
            "lea r11, [rbp + 16]\n",
            "mov [rsp + 0x120], r11\n",
        )
    };
}

macro_rules! restore_regs_extra {
    () => {
        concat!(
            "mov rbx, [rsp + 0xe0]\n",
            "mov r12, [rsp + 0xe8]\n",
            "mov r13, [rsp + 0xf0]\n",
            "mov r14, [rsp + 0xf8]\n",
            "mov r15, [rsp + 0x100]\n",
            "push qword ptr [rsp + 0x108]\n",
            "popfq\n",
            // The traced function's caller's rbp, possibly changed.
            "mov r11, [rsp + 0xc0]\n",
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
            "sub rsp, 0x130\n",
            "and rsp, -16\n",
        )
    };
}

pub(crate) use {prologue, restore_args, save_args};

std::arch::global_asm!(
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

std::arch::global_asm!(
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
    "mov r11, [rsp + 0x118]",
    "leave",
    "jmp r11",
    "3:",
    restore_args!(),
    restore_regs_extra!(),
    "mov r11, [rsp + 0x110]",
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
    // SAFETY: [start, end) is the template's code in our text.
    let mut code = unsafe { std::slice::from_raw_parts(start as *const u8, end - start) }.to_vec();
    let (d, f) = (d - start + 2, f - start + 2);
    code[d..d + 8].copy_from_slice(&(data as u64).to_le_bytes());
    code[f..f + 8].copy_from_slice(&(entry as usize as u64).to_le_bytes());
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

/// Writes a block of stubs into `arena`, one per (site, id) of `sites`
/// (each within rel32 reach of the arena), calling the address in cell
/// `entry` and jumping to the one in cell `ret` (both cells in the arena),
/// with `data` for ENTRY. Returns the block's address (a cache line's):
/// site i's stub is at `block + i * SITE_STUB_LEN`. The block is
/// registered (see [`is_stub_return`]) before any site can reach it.
pub(crate) fn site_stubs(
    arena: &Arena,
    sites: &[(usize, u32)],
    entry: usize,
    ret: usize,
    data: usize,
) -> Result<usize, ArenaError> {
    let _g = STUB_BLOCK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
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
        for (i, &(site, id)) in sites.iter().enumerate() {
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
