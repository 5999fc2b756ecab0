//! x86 port I/O: the only place the kernel executes `in` and `out`.
//!
//! Ports are a hardware boundary: a write can reset or power off the machine. Callers name the
//! port explicitly; the devices the kernel drives (COM1, `isa-debug-exit`) wrap these in safe
//! functions that only touch their own ports.

use core::arch::asm;

/// Writes one byte to an I/O port.
///
/// # Safety
/// `port` must belong to a device whose state the caller owns, and the write must not break
/// memory safety (no port used here can: serial and debug-exit only).
pub unsafe fn outb(port: u16, value: u8) {
    // SAFETY: the caller guarantees the port is one it owns; `out` touches no memory.
    unsafe {
        asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack, preserves_flags))
    };
}

/// Writes a 32-bit value to an I/O port.
///
/// # Safety
/// As for [`outb`].
pub unsafe fn outl(port: u16, value: u32) {
    // SAFETY: the caller guarantees the port is one it owns; `out` touches no memory.
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") value, options(nomem, nostack, preserves_flags))
    };
}

/// Writes a 16-bit value to an I/O port.
///
/// # Safety
/// As for [`outb`].
pub unsafe fn outw(port: u16, value: u16) {
    // SAFETY: the caller guarantees the port is one it owns; `out` touches no memory.
    unsafe {
        asm!("out dx, ax", in("dx") port, in("ax") value, options(nomem, nostack, preserves_flags))
    };
}

/// Reads one byte from an I/O port.
///
/// # Safety
/// `port` must belong to a device whose state the caller owns (reads can have side effects).
pub unsafe fn inb(port: u16) -> u8 {
    let value: u8;
    // SAFETY: the caller guarantees the port is one it owns; `in` touches no memory.
    unsafe {
        asm!("in al, dx", in("dx") port, out("al") value, options(nomem, nostack, preserves_flags))
    };
    value
}
