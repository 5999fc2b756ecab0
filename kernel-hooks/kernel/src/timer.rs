//! The expiry timer: the local APIC's one-shot timer, armed for the engine's next deadline.
//!
//! The contract (`kernel-hooks`' README, section 4): after every `Map` and every `expire()`,
//! read [`Engine::next_deadline`] and arm a one-shot timer for it; the timer interrupt calls
//! [`Engine::expire`] once the deadline has passed, which unmaps the pages whose grants
//! expired, and re-arms. The timer is also armed at most [`WATCHDOG_NS`] ahead, so a task that
//! never traps still comes back to the kernel now and then (see `task::TASK_TIME_LIMIT_NS`).
//!
//! Interrupts are only ever taken in ring 3 (the kernel runs with them disabled), and the trap
//! stubs hand them to ordinary kernel code like any other trap: [`on_interrupt`] runs with no
//! lock held, so the unmaps `expire()` makes can take the page-table lock.
//!
//! [`Engine::next_deadline`]: kernel_hooks::Engine::next_deadline
//! [`Engine::expire`]: kernel_hooks::Engine::expire

use core::sync::atomic::{AtomicU64, Ordering};

use kernel_hooks::Invalidation;

use crate::objects::ENGINE;
use crate::{apic, clock};

/// The longest the timer is armed ahead, even with no deadline.
pub const WATCHDOG_NS: u64 = 250_000_000;

static INTERRUPTS: AtomicU64 = AtomicU64::new(0);
static EXPIRES: AtomicU64 = AtomicU64::new(0);

/// Arms the timer for the engine's next deadline (or the watchdog, if sooner).
pub fn rearm() {
    let now = clock::monotonic_ns();
    let watchdog = now.saturating_add(WATCHDOG_NS);
    let at = ENGINE
        .next_deadline()
        .map_or(watchdog, |deadline| deadline.min(watchdog));
    apic::arm_in(at.saturating_sub(now));
}

/// The timer interrupt: acknowledges it, calls `expire()` if the engine's deadline has passed,
/// and re-arms. Returns what `expire()` unmapped, when it ran.
pub fn on_interrupt() -> Option<Invalidation> {
    apic::eoi();
    INTERRUPTS.fetch_add(1, Ordering::Relaxed);
    let now = clock::monotonic_ns();
    let swept = match ENGINE.next_deadline() {
        Some(deadline) if now >= deadline => {
            EXPIRES.fetch_add(1, Ordering::Relaxed);
            Some(ENGINE.expire())
        }
        _ => None,
    };
    rearm();
    swept
}

/// (timer interrupts taken, `expire()` calls they made) since boot.
pub fn counts() -> (u64, u64) {
    (
        INTERRUPTS.load(Ordering::Relaxed),
        EXPIRES.load(Ordering::Relaxed),
    )
}
