//! The kernel's clock: a fixed boot epoch, plus time stamp counter ticks since boot (counted
//! as nanoseconds: a nominal 1 GHz, which is all expiry needs), plus a settable offset so
//! scenarios can move time past a capability's expiry.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::cpu;

/// The time the kernel believes it booted at: 2026-01-01T00:00:00Z, in ns since the epoch.
pub const BOOT_EPOCH_NS: u64 = 1_767_225_600 * 1_000_000_000;

static TSC_AT_BOOT: AtomicU64 = AtomicU64::new(0);
static OFFSET_NS: AtomicU64 = AtomicU64::new(0);

/// Starts the clock. Call once at boot.
pub fn init() {
    TSC_AT_BOOT.store(cpu::rdtsc(), Ordering::Relaxed);
}

/// Nanoseconds since the Unix epoch.
pub fn now() -> u64 {
    let ticks = cpu::rdtsc().saturating_sub(TSC_AT_BOOT.load(Ordering::Relaxed));
    BOOT_EPOCH_NS
        .saturating_add(ticks)
        .saturating_add(OFFSET_NS.load(Ordering::Relaxed))
}

/// Moves the clock forward by `ns`.
pub fn advance(ns: u64) {
    let _ = OFFSET_NS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| {
        Some(o.saturating_add(ns))
    });
}
