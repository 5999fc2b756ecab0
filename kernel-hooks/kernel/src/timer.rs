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

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use kernel_hooks::Invalidation;

use crate::objects::ENGINE;
use crate::{apic, clock};

/// The longest the timer is armed ahead, even with no deadline.
pub const WATCHDOG_NS: u64 = 250_000_000;

static INTERRUPTS: AtomicU64 = AtomicU64::new(0);
/// A counter a several-CPU scenario watches: its value right after the first `expire()` that
/// unmapped something is kept in `WATCHED_AT_EXPIRE` (`u64::MAX` until then).
static WATCH: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
static WATCHED_AT_EXPIRE: AtomicU64 = AtomicU64::new(u64::MAX);

/// Watches `counter` (see `WATCH`), or stops watching.
pub fn watch(counter: Option<&'static AtomicU64>) {
    WATCHED_AT_EXPIRE.store(u64::MAX, Ordering::SeqCst);
    let ptr = counter.map_or(core::ptr::null_mut(), |c| core::ptr::from_ref(c).cast_mut());
    WATCH.store(ptr, Ordering::SeqCst);
}

/// The watched counter's value when the first unmapping `expire()` returned.
pub fn watched_at_expire() -> Option<u64> {
    let v = WATCHED_AT_EXPIRE.load(Ordering::SeqCst);
    (v != u64::MAX).then_some(v)
}
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
            let swept = ENGINE.expire();
            let watched = WATCH.load(Ordering::SeqCst);
            if swept.total() > 0 && !watched.is_null() {
                // SAFETY: `watch` only stores pointers from `&'static AtomicU64`.
                let v = unsafe { &*watched }.load(Ordering::SeqCst);
                let _ = WATCHED_AT_EXPIRE.compare_exchange(
                    u64::MAX,
                    v,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
            Some(swept)
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
