//! The code user tasks run, and the system calls they make.
//!
//! The probes below are assembled into the kernel image as plain bytes (a read-only data
//! section, never executed there) and copied at boot into the "program" object. A task starts
//! at one of them inside that object's slot, so even the task's own instruction fetches are
//! page faults the engine decides. Every probe is position-independent, uses no stack, and
//! ends with `int 0x80`.
//!
//! Registers at the start: `rdi` = the address the probe touches, `rsi` = the value it writes,
//! `rdx` = a second address (the context edited by [`Probe::ReadEditCtxRead`]).
//!
//! System calls (`int 0x80`): `rax` = number, `rsi` = argument.
//! - [`SYS_EXIT`]: the task is done; `rsi` is its result (the byte a read probe read).
//! - [`SYS_CHECKPOINT`]: the kernel runs the scenario's checkpoint action, then resumes.

use core::arch::global_asm;

/// `int 0x80` with `rax = 0`: exit with result `rsi`.
pub const SYS_EXIT: u64 = 0;
/// `int 0x80` with `rax = 1`: checkpoint (value `rsi`), then continue.
pub const SYS_CHECKPOINT: u64 = 1;

global_asm!(
    r#"
    .section .rodata.user_probes, "a"
    .p2align 12
    .global user_probes_start
user_probes_start:

    /* Read the byte at rdi; exit with it. */
    .global probe_read
probe_read:
    movzx esi, byte ptr [rdi]
    mov eax, 0
    int 0x80
    ud2

    /* Write sil to the byte at rdi; exit with it. */
    .global probe_write
probe_write:
    mov byte ptr [rdi], sil
    movzx esi, sil
    mov eax, 0
    int 0x80
    ud2

    /* Read the byte at rdi, then write it back; exit with it. */
    .global probe_read_write
probe_read_write:
    movzx esi, byte ptr [rdi]
    mov byte ptr [rdi], sil
    mov eax, 0
    int 0x80
    ud2

    /* Jump to rdi: an instruction fetch in another object (its code exits). */
    .global probe_exec
probe_exec:
    jmp rdi

    /* Read rdi, checkpoint with the byte read, read rdi again, exit with it. */
    .global probe_read_checkpoint_read
probe_read_checkpoint_read:
    movzx esi, byte ptr [rdi]
    mov eax, 1
    int 0x80
    movzx esi, byte ptr [rdi]
    mov eax, 0
    int 0x80
    ud2

    /* Read rdi over and over, counting the reads done in rbx, until the kernel stops it. */
    .global probe_read_loop
probe_read_loop:
    xor ebx, ebx
2:
    movzx esi, byte ptr [rdi]
    inc rbx
    jmp 2b

    /* Edit the context at rdx (the header's first byte) between two reads of rdi: read rdi,
       read the context's generation, checkpoint with the byte read, then zero the context's
       entry count (header byte 20) and bump its generation (byte 8), read rdi again, exit
       with it. */
    .global probe_read_edit_ctx_read
probe_read_edit_ctx_read:
    movzx esi, byte ptr [rdi]
    mov rcx, qword ptr [rdx + 8]
    mov eax, 1
    int 0x80
    mov dword ptr [rdx + 20], 0
    inc rcx
    mov qword ptr [rdx + 8], rcx
    movzx esi, byte ptr [rdi]
    mov eax, 0
    int 0x80
    ud2

    /* Several CPUs, in a loop until stopped: read the byte at rdx, counting in r13 the reads
       that saw the marker sil; lock xadd 1 to the counter at rdi, keeping the value it
       returned (this access's sequence number) in rbx; count the iterations in r12 and in
       the task's own counter at rdi + r8. */
    .global probe_seq_loop
probe_seq_loop:
    mov rbx, -1
    xor r12d, r12d
    xor r13d, r13d
2:
    movzx eax, byte ptr [rdx]
    cmp al, sil
    jne 3f
    inc r13
3:
    mov ecx, 1
    lock xadd qword ptr [rdi], rcx
    mov rbx, rcx
    inc r12
    lock inc qword ptr [rdi + r8]
    jmp 2b

    /* Several objects in consecutive slots: rsi passes over r8 objects, the first at rdi
       (a slot's base), object i at rdi + i GiB. Pass p reads the qword at page 1 + p % 4 of
       each object and compares it with rdx + i (the object's word): r12 counts the reads,
       r13 those that did not match. Checkpoint with i after each read; exit with r13. */
    .global probe_multi_read
probe_multi_read:
    xor r12d, r12d
    xor r13d, r13d
    mov r9, rsi
    xor r11d, r11d
1:
    test r9, r9
    jz 9f
    mov r10, r11
    and r10, 3
    inc r10
    shl r10, 12
    xor ecx, ecx
2:
    cmp rcx, r8
    jae 8f
    mov rax, rcx
    shl rax, 30
    add rax, rdi
    add rax, r10
    mov rax, qword ptr [rax]
    inc r12
    mov rbx, rdx
    add rbx, rcx
    cmp rax, rbx
    je 3f
    inc r13
3:
    mov rsi, rcx
    mov eax, 1
    int 0x80
    inc rcx
    jmp 2b
8:
    inc r11
    dec r9
    jmp 1b
9:
    mov rsi, r13
    mov eax, 0
    int 0x80
    ud2

    /* Store sil at one byte of each of r8 pages from rdi (page i at rdi + i * 4096); exit
       with the pages written. */
    .global probe_write_pages
probe_write_pages:
    xor ecx, ecx
1:
    cmp rcx, r8
    jae 9f
    mov rax, rcx
    shl rax, 12
    mov byte ptr [rdi + rax], sil
    inc rcx
    jmp 1b
9:
    mov rsi, rcx
    mov eax, 0
    int 0x80
    ud2

    /* The raise window (docs/DIFC.md 4.2), in a loop until a store is refused: try to read
       the byte at rdx (the secret object; a refused read resumes at probe_window_landing
       with al = 0), count reads of the marker sil in r13, lock xadd 1 to the counter at rdi
       (a numbered store into the public object; its last result in rbx), store the byte
       read at rdi + r8 + 8 (into the public object), lock inc the task's own counter at
       rdi + r8. r12 counts the iterations. */
    .global probe_window
probe_window:
    mov rbx, -1
    xor r12d, r12d
    xor r13d, r13d
2:
    xor eax, eax
    .global probe_window_try
probe_window_try:
    mov al, byte ptr [rdx]
    .global probe_window_landing
probe_window_landing:
    cmp al, sil
    jne 3f
    inc r13
3:
    mov ecx, 1
    lock xadd qword ptr [rdi], rcx
    mov rbx, rcx
    inc r12
    mov byte ptr [rdi + r8 + 8], al
    lock inc qword ptr [rdi + r8]
    jmp 2b

    .global user_probes_end
user_probes_end:
    "#
);

unsafe extern "C" {
    static user_probes_start: u8;
    static user_probes_end: u8;
    static probe_read: u8;
    static probe_write: u8;
    static probe_read_write: u8;
    static probe_exec: u8;
    static probe_read_checkpoint_read: u8;
    static probe_read_loop: u8;
    static probe_read_edit_ctx_read: u8;
    static probe_seq_loop: u8;
    static probe_multi_read: u8;
    static probe_write_pages: u8;
    static probe_window: u8;
    static probe_window_try: u8;
    static probe_window_landing: u8;
}

/// The probe code's bytes, to copy into the program object.
pub fn probe_bytes() -> &'static [u8] {
    let start = &raw const user_probes_start;
    let end = &raw const user_probes_end;
    let len = (end as usize).saturating_sub(start as usize);
    // SAFETY: both symbols delimit one contiguous read-only section of the kernel image,
    // assembled above, that nothing writes.
    unsafe { core::slice::from_raw_parts(start, len) }
}

/// The probes a task can start at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Load one byte from the target address.
    Read,
    /// Store one byte at the target address.
    Write,
    /// Load, then store back, one byte.
    ReadWrite,
    /// Jump to the target address.
    Exec,
    /// Load, checkpoint, load again.
    ReadCheckpointRead,
    /// Load in a loop until stopped; `rbx` counts the loads done.
    ReadLoop,
    /// Load, read the context's header, checkpoint, empty the context's entry table (in user
    /// mode, through its mapping), load again.
    ReadEditCtxRead,
    /// Read `rdx` (counting reads of the marker `sil` in `r13`), `lock xadd` the counter at
    /// `rdi` (its last result in `rbx`), in a loop until stopped.
    SeqLoop,
    /// `rsi` passes over `r8` objects in consecutive slots from `rdi`, checking each read
    /// against `rdx + i` (mismatches in `r13`, reads in `r12`) and checkpointing with `i`
    /// after each; exits with the mismatches.
    MultiRead,
    /// Store `sil` at one byte of each of `r8` pages from `rdi`; exit with the count.
    WritePages,
    /// The raise window: a read of `rdx` that may be refused (then it resumes at
    /// [`window_recovery`]'s landing with 0), marker reads (`sil`) counted in `r13`, a
    /// numbered store into `rdi` (`lock xadd`, last result in `rbx`), the byte read stored at
    /// `rdi + r8 + 8`, the task's own counter at `rdi + r8`; in a loop until a store is
    /// refused.
    Window,
}

/// The one recoverable instruction of [`Probe::Window`] and where a refused read there
/// resumes: byte offsets within [`probe_bytes`].
pub fn window_recovery() -> (u64, u64) {
    let start = &raw const user_probes_start as u64;
    (
        (&raw const probe_window_try as u64).saturating_sub(start),
        (&raw const probe_window_landing as u64).saturating_sub(start),
    )
}

impl Probe {
    /// Byte offset of the probe within [`probe_bytes`].
    pub fn offset(self) -> u64 {
        let sym = match self {
            Self::Read => &raw const probe_read,
            Self::Write => &raw const probe_write,
            Self::ReadWrite => &raw const probe_read_write,
            Self::Exec => &raw const probe_exec,
            Self::ReadCheckpointRead => &raw const probe_read_checkpoint_read,
            Self::ReadLoop => &raw const probe_read_loop,
            Self::ReadEditCtxRead => &raw const probe_read_edit_ctx_read,
            Self::SeqLoop => &raw const probe_seq_loop,
            Self::MultiRead => &raw const probe_multi_read,
            Self::WritePages => &raw const probe_write_pages,
            Self::Window => &raw const probe_window,
        };
        (sym as u64).saturating_sub(&raw const user_probes_start as u64)
    }
}

/// A 16-byte block of code that exits (`xor eax, eax; int 0x80; ud2`, then `nop`s). Code
/// objects are filled with it, so a fetch at any 16-byte-aligned offset exits with the
/// task's `rsi` unchanged, and one at offset 8 runs `nop`s into the next block.
pub const EXIT_BLOCK: [u8; 16] = [
    0x31, 0xc0, // xor eax, eax
    0xcd, 0x80, // int 0x80
    0x0f, 0x0b, // ud2
    0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, 0x90, // nop x 10
];
