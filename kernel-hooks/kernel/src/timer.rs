//! The expiry timer: the local APIC's one-shot timer, armed for the engine's next deadline.
//!
//! The contract (`kernel-hooks`' README, section 4): after every `Map` and every `expire()`,
//! read [`Engine::next_deadline`] and arm a one-shot timer for it; the timer interrupt calls
//! [`Engine::expire`] once the deadline has passed, which unmaps the pages whose grants
//! expired, and re-arms. The timer is also armed at most [`WATCHDOG_NS`] ahead, so a task that
//! never traps still comes back to the kernel now and then (see `task::TASK_TIME_LIMIT_NS`).
//!
//! Where `expire()` runs (the integration guide, section 4): never in an interrupt handler
//! that may have interrupted the engine. The engine's spin locks do not mask interrupts, so a
//! handler calling `expire()` while the same CPU holds one of them would spin for ever.
//!
//! - A timer interrupt taken in ring 3 comes back through the trap stubs to ordinary kernel
//!   code like any other trap: [`on_interrupt`] runs there with no lock held and calls
//!   `expire()` itself.
//! - A timer interrupt taken in ring 0 (the kernel runs the engine's decisions with
//!   interrupts enabled: `trap::with_interrupts`) may have interrupted the engine:
//!   [`on_kernel_interrupt`] only acknowledges it and marks the expiry as deferred;
//!   [`run_deferred`] runs it in ordinary kernel code, on the way back to user mode.
//!
//! [`Engine::next_deadline`]: kernel_hooks::Engine::next_deadline
//! [`Engine::expire`]: kernel_hooks::Engine::expire

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use kernel_hooks::Invalidation;

use crate::objects::ENGINE;
use crate::smp::{self, MAX_CPUS};
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
/// Timer interrupts taken in ring 0, and of those the ones that landed inside the engine.
static KERNEL_INTERRUPTS: AtomicU64 = AtomicU64::new(0);
static IN_ENGINE_INTERRUPTS: AtomicU64 = AtomicU64::new(0);
/// Calls into the engine made from interrupt context (the engine's clock read while an
/// interrupt handler runs): must stay 0.
static ENGINE_CALLS_IN_INTERRUPT: AtomicU64 = AtomicU64::new(0);
/// A ring-0 timer interrupt deferred its expiry; and how many deferred expiries ran.
static EXPIRY_DEFERRED: AtomicBool = AtomicBool::new(false);
static DEFERRED_RUNS: AtomicU64 = AtomicU64::new(0);
/// Whether each CPU is inside the engine (`task` sets it around `Engine::decide`), and
/// whether it is running a ring-0 interrupt handler.
static IN_ENGINE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static IN_INTERRUPT: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Runs `f`, an engine call, marked as inside the engine on this CPU with interrupts enabled
/// (a ring-0 timer interrupt may land in it).
pub fn in_engine<R>(f: impl FnOnce() -> R) -> R {
    let me = smp::current();
    IN_ENGINE[me].store(true, Ordering::SeqCst);
    let r = crate::trap::with_interrupts(f);
    IN_ENGINE[me].store(false, Ordering::SeqCst);
    r
}

/// Called by the engine's host on every clock read: counts engine calls made from interrupt
/// context (there must be none).
pub fn note_engine_call() {
    if IN_INTERRUPT[smp::current()].load(Ordering::Relaxed) {
        ENGINE_CALLS_IN_INTERRUPT.fetch_add(1, Ordering::Relaxed);
    }
}

/// A timer interrupt taken in ring 0: it may have interrupted the engine, so it takes no lock
/// and calls nothing of the engine; the expiry is deferred to [`run_deferred`].
pub fn on_kernel_interrupt() {
    let me = smp::current();
    IN_INTERRUPT[me].store(true, Ordering::Relaxed);
    apic::eoi();
    KERNEL_INTERRUPTS.fetch_add(1, Ordering::Relaxed);
    if IN_ENGINE[me].load(Ordering::Relaxed) {
        IN_ENGINE_INTERRUPTS.fetch_add(1, Ordering::Relaxed);
    }
    // Not re-armed here: a deadline already passed would fire again at once. The deferred
    // run re-arms.
    EXPIRY_DEFERRED.store(true, Ordering::SeqCst);
    IN_INTERRUPT[me].store(false, Ordering::Relaxed);
}

/// Runs the expiry a ring-0 timer interrupt deferred, in ordinary kernel code (no lock held);
/// what it unmapped, when it ran `expire()`.
pub fn run_deferred() -> Option<Invalidation> {
    if !EXPIRY_DEFERRED.swap(false, Ordering::SeqCst) {
        return None;
    }
    DEFERRED_RUNS.fetch_add(1, Ordering::Relaxed);
    expire_due()
}

/// (ring-0 timer interrupts, of those inside the engine, engine calls from interrupt context,
/// deferred expiries run) since boot.
pub fn kernel_counts() -> (u64, u64, u64, u64) {
    (
        KERNEL_INTERRUPTS.load(Ordering::Relaxed),
        IN_ENGINE_INTERRUPTS.load(Ordering::Relaxed),
        ENGINE_CALLS_IN_INTERRUPT.load(Ordering::Relaxed),
        DEFERRED_RUNS.load(Ordering::Relaxed),
    )
}

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
    expire_due()
}

/// Calls `expire()` if the engine's deadline has passed, and re-arms.
fn expire_due() -> Option<Invalidation> {
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
