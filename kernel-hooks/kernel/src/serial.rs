//! The COM1 UART (16550 at port 0x3f8): the kernel's console, which QEMU's `-serial stdio`
//! connects to the host's standard output.

use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::port;

/// COM1's base I/O port.
const COM1: u16 = 0x3f8;
/// Line status register offset; bit 5 = transmit holding register empty.
const LSR: u16 = 5;
const LSR_THR_EMPTY: u8 = 1 << 5;

/// Programs COM1 for 115200 baud, 8 data bits, no parity, one stop bit, no interrupts.
pub fn init() {
    // SAFETY (for every block below): COM1's ports belong to this module alone; the writes
    // follow the 16550 programming sequence and touch no memory.
    unsafe {
        port::outb(COM1 + 1, 0x00); // no interrupts
        port::outb(COM1 + 3, 0x80); // DLAB on
        port::outb(COM1, 0x01); // divisor low: 115200 baud
        port::outb(COM1 + 1, 0x00); // divisor high
        port::outb(COM1 + 3, 0x03); // 8N1, DLAB off
        port::outb(COM1 + 2, 0xc7); // FIFO on, cleared, 14-byte threshold
        port::outb(COM1 + 4, 0x03); // DTR, RTS
    }
}

fn write_byte(b: u8) {
    // Bounded wait: a missing UART must not hang the kernel forever.
    for _ in 0..100_000 {
        // SAFETY: reading COM1's line status register has no side effects we depend on.
        if unsafe { port::inb(COM1 + LSR) } & LSR_THR_EMPTY != 0 {
            break;
        }
        core::hint::spin_loop();
    }
    // SAFETY: COM1's data port belongs to this module.
    unsafe { port::outb(COM1, b) };
}

/// A `fmt::Write` sink for COM1 (newlines become CR LF).
pub struct Serial;

impl fmt::Write for Serial {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                write_byte(b'\r');
            }
            write_byte(b);
        }
        Ok(())
    }
}

/// Held while one CPU prints, so lines from several CPUs do not interleave.
static LOCK: AtomicBool = AtomicBool::new(false);

/// Prints `args` under the console lock. The wait for the lock is bounded (a CPU that died
/// holding it must not silence the others' last words).
pub fn print_fmt(args: fmt::Arguments<'_>) {
    let mut spins = 0u64;
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins > 200_000_000 {
            break;
        }
        core::hint::spin_loop();
    }
    let _ = fmt::Write::write_fmt(&mut Serial, args);
    LOCK.store(false, Ordering::Release);
}

/// Releases the console lock whoever holds it: for the fatal paths, which print and exit.
pub fn force_unlock() {
    LOCK.store(false, Ordering::Release);
}

/// Prints to the serial console.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        $crate::serial::print_fmt(format_args!($($arg)*));
    }};
}

/// Prints a line to the serial console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => {{
        $crate::serial::print_fmt(format_args!("{}\n", format_args!($($arg)*)));
    }};
}
