//! Recorders with graph filters on the multi path (multi.rs): each
//! user's verdict before its record, and its thread variable and bit in
//! the frame after it, as the single filtered path applies them
//! (general.rs; fgraph::filters keeps the variable the same way). The
//! macros are parts of multi.rs's record_each! and name its operands.
//!
//! A recorder with triggers (`Triggers::fusable` ones) leaves the calls
//! of the functions with a trigger of their own to its callbacks: the
//! multi path sends every call of those to the general way, before it
//! writes anything (multi.rs, label 84), and decides the others by the
//! triggers' thread variable and switch (trig_entry!, trig_exit!), as the
//! single filtered path does (general.rs, labels 72 and 26).

// The BITMAP word's bit of the user in slot rax (bits 12..27), in
// `$reg` (a bit-string `bts`/`btr` on memory is many times slower).
macro_rules! user_bit {
    ($reg:literal) => {
        concat!("xor ", $reg, ", ", $reg, "\n", "bts ", $reg, ", rax\n", "shl ", $reg, ", 12\n",)
    };
}
pub(super) use user_bit;

// Whether the user in slot rax (`$slot` making it, see filter_of!)
// records this event, and how, where a user of the path ever had graph
// filters (MULTI_ANY_FILTER): graph filters (MULTI_FILTER) that decline
// the call send it to `$name`_skip, as its callbacks leave such calls
// out; filters that take it make its record's word in rcx (`$base` at
// the user's own depth) and its thread variable as it will be once the
// record is in (for entry_late!) in xmm14, bit 63 set; a -N function's
// entry is kept by its thread variable and its bit in the frame at once,
// with no record. Else xmm14 stays 0 (as it is before the first user and
// after entry_late!) and rcx `$base`. Slot rax kept (also in xmm15 for
// filters); clobbers rdx, r11.
macro_rules! entry_verdict {
    ($name:literal, $base:literal, $slot:expr) => {
        concat!(
            crate::tracer::fused::multi_filters::filter_of!($name, $slot),
            "cmp qword ptr [r11 + {f_switch}], 0\n",
            "jne ",
            $name,
            "_trig\n",
            // Graph filters (fgraph::filters, as the single path's:
            // general.rs), r11 the filter: the site's class (bit 0: a -F
            // function, bit 1: -N) by the stub's site id, which the
            // entry found below MULTI_FILTER_SITES, so in the table (the
            // least of every filtered user's lengths, set before it
            // registered).
            "mov rax, [rsp + FE_CALL_RET]\n",
            "mov eax, dword ptr [rax + {id_off}]\n",
            "add rax, [r11 + {f_classes}]\n",
            "movzx eax, byte ptr [rax]\n",
            // The thread variable v (rdx).
            "movq rdx, xmm15\n",
            "mov rdx, [rdi + rdx*8 + {tv}]\n",
            "bt rdx, {notrace_bit}\n",
            "jc ",
            $name,
            "_skip\n",
            "test eax, 2\n",
            "jnz ",
            $name,
            "_silent\n",
            "cmp qword ptr [r11 + {f_functions}], 0\n",
            "je 41f\n",
            "bt rdx, {in_graph_bit}\n",
            "jc 41f\n",
            "test eax, 1\n",
            "jz ",
            $name,
            "_skip\n",
            // A -F function starts the recorded subtree at the own depth
            // (bits 32..47; nothing above them is ever set).
            "mov edx, edx\n",
            "movzx eax, dx\n",
            "shl rax, {graph_depth_shift}\n",
            "or rdx, rax\n",
            "bts rdx, {in_graph_bit}\n",
            "41:\n",
            "movzx eax, dx\n",
            "cmp qword ptr [r11 + {f_max_depth}], 0\n",
            "je 42f\n",
            "cmp rax, [r11 + {f_max_depth}]\n",
            "jae ",
            $name,
            "_skip\n",
            "42:\n",
            // Recorded at the own depth (below fgraph's, which the entry
            // found below the records' limit).
            "mov rcx, ",
            $base,
            "\n",
            "and rcx, {not_depth}\n",
            "shl eax, 6\n",
            "or rcx, rax\n",
            "inc rdx\n",
            "bts rdx, 63\n",
            "movq xmm14, rdx\n",
            "movq rax, xmm15\n",
            "jmp ",
            $name,
            "_decided\n",
            // A -N function: NOTRACE in v, then the user's bit in the frame.
            $name,
            "_silent:\n",
            "bts rdx, {notrace_bit}\n",
            "movq rax, xmm15\n",
            "mov [rdi + rax*8 + {tv}], rdx\n",
            crate::tracer::fused::multi_filters::user_bit!("rdx"),
            "or [rdi + r8*8 + FRAME_BITMAP], rdx\n",
            "jmp ",
            $name,
            "_skip\n",
            crate::tracer::fused::multi_filters::trig_entry!($name, $base),
            ".popsection\n",
        )
    };
}
pub(super) use entry_verdict;

// entry_verdict! for a user with triggers (r11 its filter, whose switch
// is not null; slot rax, also in xmm15), as Triggers::entry decides the
// call of a function without a trigger of its own (the path sends the
// others the general way): declined once the switch says FINISHED,
// inside a notrace function's call, outside every filter function's
// call where some function is one, or with no levels left; else the own
// depth one more and the levels left one less (stored exclusive-or the
// limit, FusedFilter::limit). While the switch says ON, recorded at the
// own depth (rcx the record's word, xmm14 the variable, for entry_late!);
// else kept silently: the variable written, then the user's bit in the
// frame (entry_late!'s order), no record. Each read of the switch is a
// plain load: Relaxed, as Triggers::enabled reads it. Clobbers rcx (then
// `$base` again where the call is not recorded), rdx.
macro_rules! trig_entry {
    ($name:literal, $base:literal) => {
        concat!(
            $name,
            "_trig:\n",
            "mov rdx, [r11 + {f_switch}]\n",
            "test byte ptr [rdx], {switch_finished}\n",
            "jnz ",
            $name,
            "_skip\n",
            "mov rdx, [rdi + rax*8 + {tv}]\n",
            "mov rcx, rdx\n",
            "shr rcx, 48\n",
            "jnz ",
            $name,
            "_tskip\n",
            "cmp qword ptr [r11 + {f_functions}], 0\n",
            "je ",
            $name,
            "_tlevels\n",
            "mov rcx, rdx\n",
            "shr rcx, 32\n",
            "test cx, cx\n",
            "jz ",
            $name,
            "_tskip\n",
            $name,
            "_tlevels:\n",
            "mov ecx, edx\n",
            "shr ecx, 16\n",
            "xor ecx, dword ptr [r11 + {f_limit}]\n",
            "movzx ecx, cx\n",
            "test ecx, ecx\n",
            "jz ",
            $name,
            "_tskip\n",
            "dec ecx\n",
            "xor ecx, dword ptr [r11 + {f_limit}]\n",
            "movzx ecx, cx\n",
            "shl ecx, 16\n",
            // The new variable: its upper half kept, the levels, the own
            // depth + 1 (the own depth is below fgraph's, which the entry
            // found below the records' limit).
            "movzx eax, dx\n",
            "shr rdx, 32\n",
            "shl rdx, 32\n",
            "or rdx, rcx\n",
            "lea ecx, [rax + 1]\n",
            "or rdx, rcx\n",
            "mov rcx, [r11 + {f_switch}]\n",
            "cmp byte ptr [rcx], {switch_on}\n",
            "jne ",
            $name,
            "_tsilent\n",
            "bts rdx, 63\n",
            "movq xmm14, rdx\n",
            "mov rcx, ",
            $base,
            "\n",
            "and rcx, {not_depth}\n",
            "shl eax, 6\n",
            "or rcx, rax\n",
            "movq rax, xmm15\n",
            "jmp ",
            $name,
            "_decided\n",
            $name,
            "_tsilent:\n",
            "movq rax, xmm15\n",
            "mov [rdi + rax*8 + {tv}], rdx\n",
            crate::tracer::fused::multi_filters::user_bit!("rdx"),
            "or [rdi + r8*8 + FRAME_BITMAP], rdx\n",
            $name,
            "_tskip:\n",
            "mov rcx, ",
            $base,
            "\n",
            "jmp ",
            $name,
            "_skip\n",
        )
    };
}
pub(super) use trig_entry;

// The return's side of entry_verdict! (rcx `$base`, the exit's word):
// graph filters whose thread variable says the call was not recorded
// (the -N function's own return: its bit taken from the frame, then
// NOTRACE cleared, and no record), else the exit at the user's own depth
// less one in rcx, and the variable as `GraphFilter::ret` leaves it in
// xmm14, bit 63 set. Slot rax kept; clobbers rdx, r11.
macro_rules! exit_verdict {
    ($name:literal, $base:literal, $slot:expr) => {
        concat!(
            crate::tracer::fused::multi_filters::filter_of!($name, $slot),
            "cmp qword ptr [r11 + {f_switch}], 0\n",
            "jne ",
            $name,
            "_trig\n",
            "mov r11, [rdi + rax*8 + {tv}]\n",
            "btr r11, {notrace_bit}\n",
            "jnc 51f\n",
            crate::tracer::fused::multi_filters::user_bit!("rdx"),
            "not rdx\n",
            "and [rdi + r10*8 + FRAME_BITMAP], rdx\n",
            "mov [rdi + rax*8 + {tv}], r11\n",
            "jmp ",
            $name,
            "_skip\n",
            // Own depth − 1; IN_GRAPH ends with the call that set it.
            "51:\n",
            "movzx edx, r11w\n",
            "test edx, edx\n",
            "jz 52f\n",
            "dec edx\n",
            "bt r11, {in_graph_bit}\n",
            "jnc 52f\n",
            "mov rax, r11\n",
            "shr rax, {graph_depth_shift}\n",
            "cmp ax, dx\n",
            "jne 52f\n",
            "btr r11, {in_graph_bit}\n",
            "52:\n",
            "and r11, -65536\n",
            "or r11, rdx\n",
            "bts r11, 63\n",
            "movq xmm14, r11\n",
            "and rcx, {not_depth}\n",
            "shl edx, 6\n",
            "or rcx, rdx\n",
            "movq rax, xmm15\n",
            "jmp ",
            $name,
            "_decided\n",
            crate::tracer::fused::multi_filters::trig_exit!($name, $base),
            ".popsection\n",
        )
    };
}
pub(super) use exit_verdict;

// exit_verdict! for a user with triggers (r11 its filter; slot rax, also
// in xmm15; rcx `$base`), as Triggers::ret leaves the variable for a
// frame without words: the own depth one less (never below 0), the
// levels left one more. While the switch says ON, the exit recorded at
// the new own depth (rcx its word, xmm14 the variable, for exit_late!);
// else the user's bit taken from the frame, then the variable written
// (exit_late!'s order), no record. Clobbers rcx (`$base` again where the
// exit is not recorded), rdx.
macro_rules! trig_exit {
    ($name:literal, $base:literal) => {
        concat!(
            $name,
            "_trig:\n",
            "mov rdx, [rdi + rax*8 + {tv}]\n",
            "movzx ecx, dx\n",
            "sub ecx, 1\n",
            "adc ecx, 0\n",
            "mov eax, edx\n",
            "shr eax, 16\n",
            "xor eax, dword ptr [r11 + {f_limit}]\n",
            "movzx eax, ax\n",
            "inc eax\n",
            "xor eax, dword ptr [r11 + {f_limit}]\n",
            "movzx eax, ax\n",
            "shl eax, 16\n",
            "shr rdx, 32\n",
            "shl rdx, 32\n",
            "or rdx, rax\n",
            "or rdx, rcx\n",
            "mov rax, [r11 + {f_switch}]\n",
            "cmp byte ptr [rax], {switch_on}\n",
            "jne ",
            $name,
            "_tsilent\n",
            "bts rdx, 63\n",
            "movq xmm14, rdx\n",
            "mov eax, ecx\n",
            "shl eax, 6\n",
            "movq rcx, ",
            $base,
            "\n",
            "and rcx, {not_depth}\n",
            "or rcx, rax\n",
            "movq rax, xmm15\n",
            "jmp ",
            $name,
            "_decided\n",
            $name,
            "_tsilent:\n",
            "movq rax, xmm15\n",
            crate::tracer::fused::multi_filters::user_bit!("r11"),
            "not r11\n",
            "and [rdi + r10*8 + FRAME_BITMAP], r11\n",
            "mov [rdi + rax*8 + {tv}], rdx\n",
            "movq rcx, ",
            $base,
            "\n",
            "jmp ",
            $name,
            "_skip\n",
        )
    };
}
pub(super) use trig_exit;

// The verdicts' common part (slot rax, `$slot` making it, and going to
// `$name`_skip if the user left ARRAY): a user without graph filters
// goes on at `$name`_decided; one with them goes on out of line (the
// cold section, where the verdict goes on), r11 its filter, the slot
// also in xmm15. Clobbers rdx, r11.
macro_rules! filter_of {
    ($name:literal, $slot:expr) => {
        concat!(
            $slot,
            "lea rdx, [rip + {slot_private}]\n",
            "mov rdx, [rdx + rax*8]\n",
            "lea r11, [rip + {multi_filter}]\n",
            "mov r11, [r11 + rdx*8]\n",
            "test r11, r11\n",
            "jnz ",
            $name,
            "_filtered\n",
            $name,
            "_decided:\n",
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            $name,
            "_filtered:\n",
            "movq xmm15, rax\n",
        )
    };
}
pub(super) use filter_of;

// After a user's record (or its loss, counted), for one whose verdict
// kept its thread variable in xmm14 (bit 63; xmm14 0 again after):
// `$mark` with the variable in rdx and the slot in rax, then rcx
// `$restore`d; nothing for the others. Clobbers rax, rdx, r11.
macro_rules! late {
    ($name:literal, $mark:expr, $restore:expr) => {
        concat!(
            "movq rdx, xmm14\n",
            "test rdx, rdx\n",
            "jnz ",
            $name,
            "_late\n",
            $name,
            "_posted:\n",
            ".pushsection .text.shadowgraph_fused_cold,\"ax\",@progbits\n",
            $name,
            "_late:\n",
            "btr rdx, 63\n",
            "pxor xmm14, xmm14\n",
            "movq rax, xmm15\n",
            $mark,
            $restore,
            "jmp ",
            $name,
            "_posted\n",
            ".popsection\n",
        )
    };
}
pub(super) use late;

// late! at the entry: the variable written, then the user's bit set in
// the entry's frame (r8), as the single filtered path does (the variable
// first: a handler that lands in between and leaves by siglongjmp does
// not report the frame to it).
macro_rules! entry_late {
    ($name:literal, $base:literal) => {
        crate::tracer::fused::multi_filters::late!(
            $name,
            concat!(
                "mov [rdi + rax*8 + {tv}], rdx\n",
                crate::tracer::fused::multi_filters::user_bit!("r11"),
                "or [rdi + r8*8 + FRAME_BITMAP], r11\n",
            ),
            concat!("mov rcx, ", $base, "\n")
        )
    };
}
pub(super) use entry_late;

// late! at the return: the user's bit taken from the returning frame
// (r10), then the variable written.
macro_rules! exit_late {
    ($name:literal, $base:literal) => {
        crate::tracer::fused::multi_filters::late!(
            $name,
            concat!(
                crate::tracer::fused::multi_filters::user_bit!("r11"),
                "not r11\n",
                "and [rdi + r10*8 + FRAME_BITMAP], r11\n",
                "mov [rdi + rax*8 + {tv}], rdx\n",
            ),
            concat!("movq rcx, ", $base, "\n")
        )
    };
}
pub(super) use exit_late;

// No verdict: no user of the path ever had graph filters.
macro_rules! no_verdict {
    ($name:literal, $base:literal, $slot:expr) => {
        ""
    };
}
pub(super) use no_verdict;

// Nothing after a record (as no_verdict!).
macro_rules! no_late {
    ($name:literal, $base:literal) => {
        ""
    };
}
pub(super) use no_late;
