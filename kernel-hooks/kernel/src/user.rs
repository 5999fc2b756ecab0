//! The code user tasks run, and the system calls they make.
//!
//! The probes below are assembled into the kernel image as plain bytes (a read-only data
//! section, never executed there) and copied at boot into the "program" object. A task starts
//! at one of them inside that object's slot, so even the task's own instruction fetches are
//! page faults the engine decides. Every probe is position-independent, uses no stack, and
//! ends with `int 0x80`.
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
