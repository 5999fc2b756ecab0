//! The kernel's monotonic clock: time stamp counter ticks since boot, converted to nanoseconds
//! with the TSC frequency measured against the PIT at boot ([`crate::apic::calibrate`]).
//!
//! This is [`kernel_hooks::Host::monotonic_ns`]. Unix time is not the clock's business: the
//! kernel believes it booted at [`BOOT_EPOCH_NS`] and gives that to the engine once, with
//! `Engine::set_wall_clock_offset`; scenarios that move time move that offset, through the
//! engine.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::cpu;

/// The time the kernel believes it booted at: 2026-01-01T00:00:00Z, in ns since the epoch.
pub const BOOT_EPOCH_NS: u64 = 1_767_225_600 * 1_000_000_000;

static TSC_AT_BOOT: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds per TSC tick, as a 32.32 fixed-point number (0 until calibrated).
static NS_PER_TICK_32: AtomicU64 = AtomicU64::new(0);

/// Starts the clock. Call once at boot, first.
pub fn init() {
    TSC_AT_BOOT.store(cpu::rdtsc(), Ordering::Relaxed);
}

/// The TSC frequency measured at boot, in Hz (0 until then).
static TSC_HZ: AtomicU64 = AtomicU64::new(0);

/// Records the TSC frequency measured at boot. Until then the clock reads 0.
pub fn set_tsc_hz(hz: u64) {
    let hz = hz.max(1);
    TSC_HZ.store(hz, Ordering::Relaxed);
    let per_tick = (1_000_000_000u128 << 32) / u128::from(hz);
    NS_PER_TICK_32.store(
        u64::try_from(per_tick).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

/// The TSC frequency measured at boot, in Hz (0 before calibration).
pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

/// Nanoseconds since boot.
pub fn monotonic_ns() -> u64 {
    let ticks = cpu::rdtsc().saturating_sub(TSC_AT_BOOT.load(Ordering::Relaxed));
    let ns = (u128::from(ticks) * u128::from(NS_PER_TICK_32.load(Ordering::Relaxed))) >> 32;
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// Spins for at least `ns` nanoseconds of the monotonic clock (after calibration).
pub fn delay_ns(ns: u64) {
    let until = monotonic_ns().saturating_add(ns);
    while monotonic_ns() < until {
        core::hint::spin_loop();
    }
}
