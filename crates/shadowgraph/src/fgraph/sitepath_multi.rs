//! The site entry's and return's loops over several users (MANY), in
//! assembly: each user whose filter takes the call gets its callback
//! called directly, with the frame, bracket, recursion bit and errno
//! handled once for all of them by the code around (sitepath.rs, whose
//! frame layout, labels and operands these use). Each callback may clobber
//! every caller-saved register, so the loops keep their state in
//! callee-saved ones, the program's own put aside in the frame meanwhile.

// Several users' entry (MANY), as `offer_all` offers it, from label 47
// after entry_frame!: the users of the site's mask (read after OCCUPIED) in
// slot order, each still in ARRAY and of an epoch no newer than the one
// read first, given the call (its offer word set, as `offer` sets it;
// curr put back where it declines), the frame's BITMAP word rewritten
// after each (a handler that lands in a later user's callback finds the
// earlier ones named). The loop keeps its state in callee-saved
// registers, the program's own kept at SE_RBX…SE_R15 meanwhile:
//
//   rbx  the users left      r12  those that kept the call
//   r13  the epoch read      r14  the user's slot   r15  curr before its
//                                                        callback
//
// Back at 48 with the BITMAP word in rax (0: none kept the call); a site
// beyond the masks (its filters decide, user by user) goes through
// `call_entry_all` instead. Labels 40–49.
macro_rules! offer_each {
    () => {
        concat!(
            "47:\n",
            "mov eax, dword ptr [rsp + SE_ENTRY + ENT_SITE]\n",
            "cmp eax, {site_users_cap}\n",
            "jae 49f\n",
            "mov [rsp + SE_RBX], rbx\n",
            "mov [rsp + SE_R12], r12\n",
            "mov [rsp + SE_R13], r13\n",
            "mov [rsp + SE_R14], r14\n",
            "mov [rsp + SE_R15], r15\n",
            // The epoch, then OCCUPIED, then the mask, in the order
            // `call_entry_all` reads them (x86 keeps loads in order, and
            // each is an acquire, as the Rust's are: the registry's words
            // were published before the epoch and each user's bit).
            "mov r13, [rip + {epoch}]\n",
            "mov ebx, dword ptr [rip + {occupied}]\n",
            "lea r10, [rip + {site_users}]\n",
            "movzx eax, word ptr [r10 + rax*2]\n",
            "and ebx, eax\n",
            "xor r12d, r12d\n",
            "mov rax, qword ptr fs:[r9 + {t_offer}]\n",
            "mov [rsp + SE_OFFER], rax\n",
            "mov qword ptr fs:[r9 + {t_event}], {event_open}\n",
            "40:\n",
            "test ebx, ebx\n",
            "jz 45f\n",
            "bsf r14d, ebx\n",
            "lea eax, [rbx - 1]\n",
            "and ebx, eax\n",
            "lea rax, [rip + {array}]\n",
            "mov rsi, [rax + r14*8]\n",
            "test rsi, rsi\n",
            "jz 40b\n",
            "lea rax, [rip + {slot_epoch}]\n",
            "cmp [rax + r14*8], r13\n",
            "ja 40b\n",
            crate::fixed_load!("r9", "tp_thread"),
            "mov r15, qword ptr fs:[r9 + {t_curr}]\n",
            "mov rax, [rsi + {u_offer}]\n",
            "mov qword ptr fs:[r9 + {t_offer}], rax\n",
            "lea rdi, [rsp + SE_ENTRY]\n",
            "mov rdx, rsp\n",
            "call [rsi + {u_entry}]\n",
            crate::fixed_load!("r9", "tp_thread"),
            "test al, al\n",
            "jz 41f\n",
            "bts r12d, r14d\n",
            "jmp 42f\n",
            // Declined: what it reserved taken back.
            "41:\n",
            "mov qword ptr fs:[r9 + {t_curr}], r15\n",
            // The BITMAP word of the users so far, or RESERVED if none.
            "42:\n",
            "mov eax, {frame_words}\n",
            "test r12d, r12d\n",
            "jz 43f\n",
            "mov rax, r13\n",
            "shl rax, 28\n",
            "mov rcx, r12\n",
            "shl rcx, 12\n",
            "or rax, rcx\n",
            "or rax, {bitmap_base}\n",
            "43:\n",
            "mov rdi, qword ptr fs:[r9 + {t_stack}]\n",
            "mov r8, [rsp + SE_FRAME]\n",
            "mov [rdi + r8*8 + FRAME_BITMAP], rax\n",
            "jmp 40b\n",
            "45:\n",
            "mov qword ptr fs:[r9 + {t_event}], 0\n",
            "mov rax, [rsp + SE_OFFER]\n",
            "mov qword ptr fs:[r9 + {t_offer}], rax\n",
            // The word the loop wrote last, or 0 if no user kept the call.
            "xor eax, eax\n",
            "test r12d, r12d\n",
            "jz 44f\n",
            "mov rdi, qword ptr fs:[r9 + {t_stack}]\n",
            "mov r8, [rsp + SE_FRAME]\n",
            "mov rax, [rdi + r8*8 + FRAME_BITMAP]\n",
            "44:\n",
            "mov rbx, [rsp + SE_RBX]\n",
            "mov r12, [rsp + SE_R12]\n",
            "mov r13, [rsp + SE_R13]\n",
            "mov r14, [rsp + SE_R14]\n",
            "mov r15, [rsp + SE_R15]\n",
            "jmp 48b\n",
            "49:\n",
            "lea rdi, [rsp + SE_ENTRY]\n",
            "mov rsi, rsp\n",
            "call {call_entry_all}\n",
            "jmp 48b\n",
        )
    };
}

// Several users' return (MANY), as `return_all` runs them, from label
// 57 after return_event! (rax the frame's word as the entry left it, also at
// SR_WORD): for each user the word names, in slot order, its bit taken
// from the frame's word, then its return callback if it is still in
// ARRAY and of the word's epoch or older. The loop's state, in
// callee-saved registers (the program's kept at SR_RBX…SR_R13):
//
//   rbx  the users left (bits 0..15)   r12  the word's epoch
//   r13  the frame's start
//
// A word that is not a BITMAP goes through `call_return_all`. Back at
// 58; labels 50–59.
macro_rules! return_each {
    () => {
        concat!(
            "57:\n",
            "mov edx, eax\n",
            "shr edx, 10\n",
            "and edx, 3\n",
            "cmp edx, {type_bitmap}\n",
            "jne 59f\n",
            "mov [rsp + SR_RBX], rbx\n",
            "mov [rsp + SR_R12], r12\n",
            "mov [rsp + SR_R13], r13\n",
            "mov ebx, eax\n",
            "shr ebx, 12\n",
            "and ebx, 0xffff\n",
            "mov r12, rax\n",
            "shr r12, 28\n",
            "mov r13, [rsp + SR_FRAME]\n",
            "mov qword ptr fs:[r9 + {t_event}], {event_open}\n",
            "50:\n",
            "test ebx, ebx\n",
            "jz 55f\n",
            "bsf edx, ebx\n",
            "lea eax, [rbx - 1]\n",
            "and ebx, eax\n",
            "lea ecx, [edx + 12]\n",
            crate::fixed_load!("r9", "tp_thread"),
            "mov rdi, qword ptr fs:[r9 + {t_stack}]\n",
            "mov rax, [rdi + r13*8 + FRAME_BITMAP]\n",
            "btr rax, rcx\n",
            "mov [rdi + r13*8 + FRAME_BITMAP], rax\n",
            "lea rax, [rip + {array}]\n",
            "mov rsi, [rax + rdx*8]\n",
            "test rsi, rsi\n",
            "jz 50b\n",
            "lea rax, [rip + {slot_epoch}]\n",
            "cmp [rax + rdx*8], r12\n",
            "ja 50b\n",
            "lea rdi, [rsp + SR_RET]\n",
            "mov rdx, rsp\n",
            "call [rsi + {u_ret}]\n",
            "jmp 50b\n",
            "55:\n",
            crate::fixed_load!("r9", "tp_thread"),
            "mov qword ptr fs:[r9 + {t_event}], 0\n",
            "mov rbx, [rsp + SR_RBX]\n",
            "mov r12, [rsp + SR_R12]\n",
            "mov r13, [rsp + SR_R13]\n",
            "jmp 58b\n",
            "59:\n",
            "lea rdi, [rsp + SR_RET]\n",
            "mov rsi, rsp\n",
            "mov rdx, [rsp + SR_WORD]\n",
            "mov rcx, [rsp + SR_FRAME]\n",
            "call {call_ret_all}\n",
            "jmp 58b\n",
        )
    };
}

pub(super) use offer_each;
pub(super) use return_each;
