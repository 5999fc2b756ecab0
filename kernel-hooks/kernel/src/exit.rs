//! Leaving QEMU through the `isa-debug-exit` device (`-device isa-debug-exit,iobase=0xf4,
//! iosize=0x04`): writing `v` makes QEMU exit with status `(v << 1) | 1`.
//!
//! Success is the value [`SUCCESS`] (status 33), which `cargo xtask` checks for; everything
//! else, including QEMU's own exit codes 0 and 1, a triple fault (`-no-reboot`) or a timeout,
//! is a failure.

use crate::{cpu, port};

const DEBUG_EXIT_PORT: u16 = 0xf4;

/// Written on success: QEMU exits with status 33.
pub const SUCCESS: u32 = 0x10;
/// Written on failure: QEMU exits with status 35.
pub const FAILURE: u32 = 0x11;

/// How the kernel ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every scenario matched its expected outcome.
    Success,
    /// Something did not match, or the kernel could not run the scenarios.
    Failure,
}

/// Exits QEMU with the status for `outcome`. If the device is missing, halts forever (the
/// runner's timeout then reports the failure).
pub fn exit(outcome: Outcome) -> ! {
    let value = match outcome {
        Outcome::Success => SUCCESS,
        Outcome::Failure => FAILURE,
    };
    // SAFETY: port 0xf4 is QEMU's debug-exit device; writing it ends the VM.
    unsafe { port::outl(DEBUG_EXIT_PORT, value) };
    cpu::halt_forever()
}
