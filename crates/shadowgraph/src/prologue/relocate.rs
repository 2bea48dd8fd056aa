//! The window's instructions re-encoded for the stub, with `iced-x86`'s
//! block encoder (RIP-relative operands and branches re-aimed, short
//! branches lengthened where they no longer reach).

use super::window::{Refusal, Window, PATCH_LEN};
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Instruction,
    InstructionBlock, MemoryOperand, Register,
};

/// A window's copy, made for one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relocated {
    /// The copy's bytes.
    pub code: Vec<u8>,
    /// For each instruction of the window that starts on bytes 1–4 of the
    /// patch: (its offset in the window, the offset of its copy in
    /// `code`). A thread stopped there when the patch is written goes on
    /// from the copy.
    pub moved: Vec<(usize, usize)>,
}

/// Copies the window `w`, whose bytes `bytes` are at the run-time address
/// `at`, to run at `to`.
pub fn relocate(bytes: &[u8], w: &Window, at: u64, to: u64) -> Result<Relocated, Refusal> {
    let unrelocatable = |why: String| Refusal::Unrelocatable(why);
    let bytes = bytes.get(..w.len).ok_or(Refusal::TooShort)?;
    let mut dec = Decoder::with_ip(64, bytes, at, DecoderOptions::NONE);
    let mut out: Vec<Instruction> = Vec::new();
    // (offset in the window, index in `out` of its first instruction)
    let mut starts = Vec::new();
    while dec.can_decode() {
        let off = (dec.ip() - at) as usize;
        let ins = dec.decode();
        if ins.is_invalid() {
            return Err(Refusal::Undecodable(ins.ip()));
        }
        starts.push((off, out.len()));
        match ins.flow_control() {
            // (What the file did not hold: a debugger's breakpoint.)
            FlowControl::Interrupt | FlowControl::XbeginXabortXend => {
                return Err(unrelocatable(format!("{:?} in the window", ins.mnemonic())));
            }
            // Returns to the function, not to the copy: its original
            // return address pushed, then a jump.
            FlowControl::Call | FlowControl::IndirectCall => {
                let mut jump = ins;
                match ins.code() {
                    Code::Call_rel32_64 => jump.set_code(Code::Jmp_rel32_64),
                    Code::Call_rm64
                        if ins.memory_base() != Register::RSP
                            && ins.memory_index() != Register::RSP
                            && ins.op0_register() != Register::RSP =>
                    {
                        jump.set_code(Code::Jmp_rm64)
                    }
                    _ => return Err(unrelocatable(format!("{:?}", ins.code()))),
                }
                push_word(&mut out, ins.next_ip()).map_err(|e| unrelocatable(e.to_string()))?;
                out.push(jump);
            }
            _ => out.push(ins),
        }
    }
    if !w.ends {
        let back = Instruction::with_branch(Code::Jmp_rel32_64, at + w.len as u64)
            .map_err(|e| unrelocatable(e.to_string()))?;
        out.push(back);
    }
    let block = InstructionBlock::new(&out, to);
    let r = BlockEncoder::encode(
        64,
        block,
        BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
    )
    .map_err(|e| unrelocatable(e.to_string()))?;
    let moved = starts
        .iter()
        .filter(|&&(off, _)| off > 0 && off < PATCH_LEN)
        .map(|&(off, i)| (off, r.new_instruction_offsets[i] as usize))
        .collect();
    Ok(Relocated {
        code: r.code_buffer,
        moved,
    })
}

/// `lea rsp, [rsp - 8]; mov dword [rsp], lo; mov dword [rsp + 4], hi`:
/// pushes `word` without touching the flags or a register.
fn push_word(out: &mut Vec<Instruction>, word: u64) -> Result<(), iced_x86::IcedError> {
    out.push(Instruction::with2(
        Code::Lea_r64_m,
        Register::RSP,
        MemoryOperand::with_base_displ(Register::RSP, -8),
    )?);
    out.push(Instruction::with2(
        Code::Mov_rm32_imm32,
        MemoryOperand::with_base(Register::RSP),
        word as u32,
    )?);
    out.push(Instruction::with2(
        Code::Mov_rm32_imm32,
        MemoryOperand::with_base_displ(Register::RSP, 4),
        (word >> 32) as u32,
    )?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(len: usize, ends: bool) -> Window {
        Window {
            entry: 0x1000,
            at: 0x1000,
            len,
            ends,
            kept: Default::default(),
        }
    }

    fn decode_all(code: &[u8], ip: u64) -> Vec<Instruction> {
        let mut d = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
        let mut v = Vec::new();
        while d.can_decode() {
            v.push(d.decode());
        }
        v
    }

    #[test]
    fn rip_relative_operands_keep_their_target() {
        // mov rax, [rip + 0x100]; (window of 7 bytes) then jmp back.
        let bytes = [0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00];
        let at = 0x40_0000;
        let to = 0x50_0000;
        let r = relocate(&bytes, &window(7, false), at, to).unwrap();
        let ins = decode_all(&r.code, to);
        assert_eq!(ins[0].ip_rel_memory_address(), at + 7 + 0x100);
        assert_eq!(ins[1].code(), Code::Jmp_rel32_64);
        assert_eq!(ins[1].near_branch_target(), at + 7);
        assert!(r.moved.is_empty());
    }

    #[test]
    fn short_branches_and_moved_points() {
        // push rbp; test edi, edi; je +0x20 (ends at 5).
        let bytes = [0x55, 0x85, 0xff, 0x74, 0x20];
        let (at, to) = (0x40_0000u64, 0x7000_0000u64);
        let r = relocate(&bytes, &window(5, false), at, to).unwrap();
        let ins = decode_all(&r.code, to);
        assert_eq!(ins[2].near_branch_target(), at + 5 + 0x20);
        assert_eq!(ins.last().unwrap().near_branch_target(), at + 5);
        assert_eq!(r.moved, vec![(1, 1), (3, 3)]);
    }

    #[test]
    fn a_call_returns_to_the_function() {
        // sub rsp, 8 (4 bytes); call +0x100.
        let bytes = [0x48, 0x83, 0xec, 0x08, 0xe8, 0x00, 0x01, 0x00, 0x00];
        let (at, to) = (0x5555_5555_0000u64, 0x5555_6000_0000u64);
        let r = relocate(&bytes, &window(9, true), at, to).unwrap();
        let ins = decode_all(&r.code, to);
        let words: Vec<Code> = ins.iter().map(|i| i.code()).collect();
        assert_eq!(
            words,
            [
                Code::Sub_rm64_imm8,
                Code::Lea_r64_m,
                Code::Mov_rm32_imm32,
                Code::Mov_rm32_imm32,
                Code::Jmp_rel32_64
            ]
        );
        assert_eq!(ins[2].immediate32() as u64, (at + 9) & 0xffff_ffff);
        assert_eq!(ins[3].immediate32() as u64, (at + 9) >> 32);
        assert_eq!(ins[4].near_branch_target(), at + 9 + 0x100);
    }
}
