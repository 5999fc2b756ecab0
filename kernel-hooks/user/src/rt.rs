//! The program's entry point, its panic handler, and the probes.
//!
//! **Entry.** The kernel starts a program at `_start` with its stack pointer at the top of its
//! stack object and its four arguments in `rdi`, `rsi`, `rdx`, `r8`. `_start` aligns the stack
//! and calls the function [`entry!`](crate::entry) named; what it returns is the exit value.
//!
//! **Probes.** [`try_read`] and [`try_write`] touch one byte with a single instruction that
//! lies in the task's recovery range ([`crate::sys::set_recovery`], set before `main` runs).
//! When the engine denies that access, the kernel does not end the task: it resumes it at the
//! range's landing address with `rax` = [`FAULT_DENIED`], which returns to the probe's caller
//! as an error. A denied access anywhere else ends the task.

use core::arch::global_asm;

use crate::abi::{self, FAULT_DENIED};
use crate::sys;

global_asm!(
    r#"
    .section .text.start, "ax"
    .global _start
_start:
    and rsp, -16
    mov rcx, r8
    call {entry}
    mov rsi, rax
    xor eax, eax
    int 0x80
    ud2

    .section .text.probes, "ax"
    .global __user_probe_start
__user_probe_start:
    .global __user_try_read8
__user_try_read8:
    movzx eax, byte ptr [rdi]
    ret
    .global __user_try_write8
__user_try_write8:
    mov byte ptr [rdi], sil
    xor eax, eax
    ret
    .global __user_probe_end
__user_probe_end:
    .global __user_probe_landing
__user_probe_landing:
    ret
"#,
    entry = sym user_entry,
);

unsafe extern "C" {
    fn __user_try_read8(addr: u64) -> u64;
    fn __user_try_write8(addr: u64, value: u64) -> u64;
    static __user_probe_start: u8;
    static __user_probe_end: u8;
    static __user_probe_landing: u8;
}

unsafe extern "Rust" {
    /// The program's main function, named by [`entry!`](crate::entry).
    fn __user_main(args: [u64; 4]) -> u64;
}

/// Names the program's main function: `fn(args: [u64; 4]) -> u64`, its arguments the four the
/// kernel passes and its result the exit value.
#[macro_export]
macro_rules! entry {
    ($main:path) => {
        #[unsafe(no_mangle)]
        fn __user_main(args: [u64; 4]) -> u64 {
            $main(args)
        }
    };
}

extern "C" fn user_entry(a: u64, b: u64, c: u64, d: u64) -> u64 {
    let (start, end, landing) = probe_range();
    if sys::set_recovery(start, end, landing).is_err() {
        return u64::MAX;
    }
    // SAFETY: `entry!` defines `__user_main` with this signature; a program without it does
    // not link.
    unsafe { __user_main([a, b, c, d]) }
}

/// The probes' recovery range and its landing address, as `user_entry` sets them: a program
/// that widens the range for a while (to call code that may be denied) sets it back with
/// these.
pub fn probe_range() -> (u64, u64, u64) {
    (
        (&raw const __user_probe_start) as u64,
        (&raw const __user_probe_end) as u64,
        (&raw const __user_probe_landing) as u64,
    )
}

/// Calls the code at user address `entry` as `extern "C" fn() -> u64`, recovering from a
/// denied fetch: the recovery range is the one instruction's page range `entry ..
/// entry + 1`, so a denied fetch at `entry` comes back as [`Denied`] (the return address
/// `call` pushed is on the stack; the landing address returns to it). The probes' range is
/// restored afterwards.
///
/// # Safety
///
/// The code at `entry`, if it runs, must be a function with that signature that touches no
/// memory Rust code of this program uses.
pub unsafe fn try_call(entry: u64) -> Result<u64, Denied> {
    let (start, end, landing) = probe_range();
    if sys::set_recovery(entry, entry.saturating_add(1), landing).is_err() {
        return Err(Denied);
    }
    // SAFETY: the caller vouches for the code; a denied fetch at `entry` lands on `ret`.
    let f: extern "C" fn() -> u64 = unsafe { core::mem::transmute(entry as usize) };
    let v = f();
    let _ = sys::set_recovery(start, end, landing);
    if v == FAULT_DENIED {
        return Err(Denied);
    }
    Ok(v)
}

/// The engine denied a probe's access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denied;

/// Reads the byte at user address `addr`.
pub fn try_read(addr: u64) -> Result<u8, Denied> {
    // SAFETY: the probe is one load; a fault on it either maps the page or, denied, comes
    // back at the landing address with `FAULT_DENIED` (or ends the task). The address is not
    // turned into a Rust reference.
    let v = unsafe { __user_try_read8(addr) };
    if v == FAULT_DENIED {
        return Err(Denied);
    }
    Ok(v as u8)
}

/// Writes `value` to the byte at user address `addr`.
///
/// # Safety
///
/// `addr` must not be memory Rust code of this program uses (its stack, data or heap): the
/// probe writes it behind the compiler's back.
pub unsafe fn try_write(addr: u64, value: u8) -> Result<(), Denied> {
    // SAFETY: as in `try_read`, for one store; the caller vouches for the address.
    let v = unsafe { __user_try_write8(addr, u64::from(value)) };
    if v == FAULT_DENIED {
        return Err(Denied);
    }
    Ok(())
}

/// The step a panic reports.
pub const PANIC_STEP: u64 = u64::MAX;

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let line = info.location().map_or(0, |l| u64::from(l.line()));
    sys::report(PANIC_STEP, abi::report::ERROR, line);
    sys::exit(0xbad)
}
