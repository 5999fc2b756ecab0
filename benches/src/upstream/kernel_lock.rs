//! Upstream Twizzler's kernel locks on their uncontended path, operation by operation, so
//! that a reproduction of upstream's cached check pays what upstream's kernel pays.
//!
//! Upstream's `SecCtxMgr::check_active_access` (`src/kernel/src/security.rs` at `c09e6e38`)
//! takes its kernel `Mutex` (`src/kernel/src/mutex.rs`) twice. That mutex is not a spinlock:
//! uncontended, one `lock` and the guard's drop
//!
//! - read the current thread (`current_thread_ref`: a per-CPU load), its donated priority and
//!   its critical counter (`SeqCst` loads), and whether its mutex link is linked;
//! - save and clear the interrupt flag (`interrupt::disable`: `pushfq`, `popfq`, then a
//!   `SeqCst` fence, which is `mfence`), and restore it at the end (a fence, `pushfq`,
//!   `popfq`);
//! - enter and leave a critical section (`enter_critical` and the guard's drop: a locked
//!   add each);
//! - take and release the sleep queue's ticket `Spinlock` (`src/kernel/src/spinlock.rs`:
//!   interrupts saved and restored again, a locked `fetch_add` of the ticket, a load of the
//!   serving ticket, a `SeqCst` store of the locker's location, then a release store);
//! - record the owner: a clone of the thread's `Arc` (a locked add), dropped at release (a
//!   locked subtract);
//! - at the guard's drop, clear any donated priority (`fetch_and`, `SeqCst`), then release:
//!   the queue's spinlock again, the critical section again, the owner dropped.
//!
//! In all: 6 `mfence`s, 6 `pushfq`/`popfq` pairs and 11 locked read-modify-writes per lock
//! and unlock. Everything here runs the same instructions in user mode: `popfq` cannot clear
//! the interrupt flag outside ring 0 (the processor leaves it as it is, without a fault), but
//! it is executed and costs what it costs. What differs from upstream's kernel: the current
//! thread is a thread-local (upstream's is per-CPU, through `gs`), and a contended lock yields
//! here where upstream's sleeps (the benchmarks never contend).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, fence};

/// A kernel thread as upstream's mutex sees it: the fields it reads and writes on every
/// lock and unlock.
pub struct Thread {
    /// Thread flags; one bit says a priority was donated.
    flags: AtomicU32,
    /// Nesting depth of critical sections.
    critical: AtomicU64,
    /// The donated priority, [`NO_PRIORITY`] when none.
    donated: AtomicU32,
    /// Whether the thread waits on some mutex's sleep queue (upstream's intrusive link,
    /// tested with one atomic load).
    queued: AtomicBool,
}

/// The flag bit that says a priority was donated to the thread.
const DONATED: u32 = 1 << 4;
/// The donated priority's value when there is none.
const NO_PRIORITY: u32 = u32::MAX;

impl Thread {
    fn new() -> Self {
        Self {
            flags: AtomicU32::new(0),
            critical: AtomicU64::new(0),
            donated: AtomicU32::new(NO_PRIORITY),
            queued: AtomicBool::new(false),
        }
    }

    /// Whether the thread is inside a critical section (one `SeqCst` load).
    fn in_critical(&self) -> bool {
        self.critical.load(Ordering::SeqCst) != 0
    }

    /// Enters a critical section (a locked add), left when the guard drops (another).
    fn critical_section(&self) -> Critical<'_> {
        self.critical.fetch_add(1, Ordering::SeqCst);
        Critical(self)
    }

    /// The donated priority: the flags loaded, and the priority only if the bit is set.
    fn donation(&self) -> Option<u32> {
        let donated = self.flags.load(Ordering::SeqCst) & DONATED != 0;
        donated
            .then(|| self.donated.load(Ordering::SeqCst))
            .filter(|p| *p != NO_PRIORITY)
    }

    /// Clears the donation bit (a locked `fetch_and`), and the priority if the bit was set.
    fn clear_donation(&self) {
        let before = self.flags.fetch_and(!DONATED, Ordering::SeqCst);
        if before & DONATED != 0 {
            self.donated.store(NO_PRIORITY, Ordering::SeqCst);
        }
    }
}

/// A critical section of a [`Thread`], left when dropped.
struct Critical<'a>(&'a Thread);

impl Drop for Critical<'_> {
    fn drop(&mut self) {
        let depth = self.0.critical.fetch_sub(1, Ordering::SeqCst);
        assert!(depth > 0, "left a critical section never entered");
    }
}

thread_local! {
    /// The running thread (upstream keeps it per CPU). Leaked: it lives as long as the
    /// benchmark's thread, as a kernel thread's `ThreadRef` outlives its faults.
    static CURRENT: &'static Arc<Thread> = Box::leak(Box::new(Arc::new(Thread::new())));
}

/// The running thread, as upstream's `current_thread_ref` finds it: an acquire fence, then
/// the per-CPU (here per-thread) pointer.
fn current_thread() -> Option<&'static Arc<Thread>> {
    fence(Ordering::Acquire);
    CURRENT.try_with(|t| *t).ok()
}

/// Upstream's `interrupt::disable` and `interrupt::set` (x86_64: `rflags` read with `pushfq`,
/// written with `popfq`, and a `SeqCst` fence).
mod interrupt {
    use std::sync::atomic::{Ordering, fence};

    /// The interrupt flag's bit in `rflags`.
    const IF: u64 = 1 << 9;

    #[cfg(target_arch = "x86_64")]
    fn read_flags() -> u64 {
        let flags: u64;
        // SAFETY: pushes `rflags` and pops it into a register: touches nothing but the stack
        // slot it pushes and pops.
        unsafe { core::arch::asm!("pushfq", "pop {}", out(reg) flags) };
        flags
    }

    #[cfg(target_arch = "x86_64")]
    fn write_flags(flags: u64) {
        // SAFETY: `flags` is `rflags` as `read_flags` just read it, with only the interrupt
        // flag changed; in user mode `popfq` leaves that flag (and IOPL) as they are, so this
        // changes no state the program depends on.
        unsafe { core::arch::asm!("push {}", "popfq", in(reg) flags) };
    }

    // Other architectures: no flags to model; the fences stay.
    #[cfg(not(target_arch = "x86_64"))]
    fn read_flags() -> u64 {
        IF
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn write_flags(_flags: u64) {}

    /// Clears the interrupt flag; returns whether it was set.
    #[inline]
    pub(super) fn disable() -> bool {
        let flags = read_flags();
        write_flags(flags & !IF);
        fence(Ordering::SeqCst);
        flags & IF != 0
    }

    /// Sets the interrupt flag to `on`.
    #[inline]
    pub(super) fn set(on: bool) {
        fence(Ordering::SeqCst);
        let flags = read_flags();
        write_flags(if on { flags | IF } else { flags & !IF });
    }
}

/// A value alone on its cache line (as upstream's `AlignedAtomicU64`).
#[repr(align(64))]
struct Aligned(AtomicU64);

/// Upstream's ticket `Spinlock`.
pub struct Spinlock<T> {
    next_ticket: Aligned,
    current: Aligned,
    cell: std::cell::UnsafeCell<T>,
    locked_from: std::sync::atomic::AtomicPtr<std::panic::Location<'static>>,
}

// SAFETY: the cell is reached only through a guard, and a guard exists only while its
// holder's ticket is the one served, so one thread at a time.
unsafe impl<T: Send> Sync for Spinlock<T> {}

/// A held [`Spinlock`].
pub struct SpinGuard<'a, T> {
    lock: &'a Spinlock<T>,
    interrupts: bool,
}

impl<T> Spinlock<T> {
    /// A spinlock holding `data`.
    pub const fn new(data: T) -> Self {
        Self {
            next_ticket: Aligned(AtomicU64::new(0)),
            current: Aligned(AtomicU64::new(0)),
            cell: std::cell::UnsafeCell::new(data),
            locked_from: std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Upstream's `lock`: interrupts off, a ticket, wait for it, note the locker.
    #[track_caller]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        let interrupts = interrupt::disable();
        let ticket = self.next_ticket.0.fetch_add(1, Ordering::Relaxed);
        let mut spins = 0u32;
        while self.current.0.load(Ordering::Acquire) != ticket {
            // Upstream spins (its CPUs are not shared); a benchmark's threads may share a
            // CPU with the holder, so yield after a while rather than burn its time slice.
            spins += 1;
            if spins.is_multiple_of(100) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let caller: *const std::panic::Location<'static> = std::panic::Location::caller();
        self.locked_from.store(caller.cast_mut(), Ordering::SeqCst);
        SpinGuard {
            lock: self,
            interrupts,
        }
    }
}

impl<T> std::ops::Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard's ticket is served (see `Spinlock`'s `Sync`).
        unsafe { &*self.lock.cell.get() }
    }
}

impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` makes the borrow unique.
        unsafe { &mut *self.lock.cell.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        let next = self.lock.current.0.load(Ordering::Relaxed) + 1;
        self.lock.current.0.store(next, Ordering::Release);
        interrupt::set(self.interrupts);
    }
}

/// A mutex's waiters' side, reduced to what the uncontended path reads and writes (the model
/// never puts a thread to sleep, so it keeps no list of sleepers).
struct SleepQueue {
    /// The highest priority among the sleepers, donated to the owner.
    pri: Option<u32>,
    owner: Option<Arc<Thread>>,
    owned: bool,
}

/// Upstream's kernel `Mutex`.
pub struct Mutex<T> {
    queue: Spinlock<SleepQueue>,
    cell: std::cell::UnsafeCell<T>,
    locked_at: std::cell::UnsafeCell<&'static std::panic::Location<'static>>,
}

// SAFETY: the cell (and `locked_at`) are written only by the thread that set `owned` under
// the queue's spinlock, until it clears it under the same lock.
unsafe impl<T: Send> Sync for Mutex<T> {}

/// A held [`Mutex`].
pub struct MutexGuard<'a, T> {
    lock: &'a Mutex<T>,
    prev_donated_priority: Option<u32>,
}

impl<T> Mutex<T> {
    /// A mutex holding `data`.
    #[track_caller]
    pub fn new(data: T) -> Self {
        Self {
            queue: Spinlock::new(SleepQueue {
                pri: None,
                owner: None,
                owned: false,
            }),
            cell: std::cell::UnsafeCell::new(data),
            locked_at: std::cell::UnsafeCell::new(std::panic::Location::caller()),
        }
    }

    /// Upstream's `lock`, in its order. Where upstream puts a contended caller to sleep,
    /// this yields.
    #[track_caller]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        let current = current_thread();
        let prev_donated_priority = current.and_then(|t| t.donation());
        if let Some(t) = current {
            assert!(!t.in_critical(), "a mutex locked in a critical section");
            assert!(
                !t.queued.load(Ordering::Relaxed),
                "a thread already waiting"
            );
        }
        let interrupts = interrupt::disable();
        loop {
            let critical = current.map(|t| t.critical_section());
            let mut queue = self.queue.lock();
            if !queue.owned {
                // (Upstream donates `queue.pri` to the new owner here: always `None` in the
                // model, which never has sleepers.)
                queue.owned = true;
                queue.owner = current.cloned();
                // SAFETY: `owned` was just set under the queue's lock: this thread owns the
                // mutex.
                unsafe { self.locked_at.get().write(std::panic::Location::caller()) };
                drop(queue);
                drop(critical);
                break;
            }
            drop(queue);
            drop(critical);
            // Upstream puts the caller to sleep until the owner releases; yield instead.
            std::thread::yield_now();
        }
        interrupt::set(interrupts);
        MutexGuard {
            lock: self,
            prev_donated_priority,
        }
    }

    fn release(&self) {
        let mut queue = self.queue.lock();
        queue.owner = None;
        queue.owned = false;
        let critical = current_thread().map(|t| t.critical_section());
        // Upstream wakes the first sleeper, if any; with none it forgets their priority.
        queue.pri = None;
        drop(critical);
    }
}

impl<T> std::ops::Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard's holder owns the mutex (see `Mutex`'s `Sync`).
        unsafe { &*self.lock.cell.get() }
    }
}

impl<T> std::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` makes the borrow unique.
        unsafe { &mut *self.lock.cell.get() }
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        // With a priority donated before the lock, upstream restores it; none is ever
        // donated in the model, so the guard clears the donation, as upstream's does then.
        if self.prev_donated_priority.is_none()
            && let Some(t) = current_thread()
        {
            t.clear_donation();
        }
        self.lock.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mutex_excludes_and_leaves_the_thread_as_it_found_it() {
        let m = Arc::new(Mutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        let mut g = m.lock();
                        *g += 1;
                    }
                    let t = current_thread().expect("a current thread");
                    assert!(!t.in_critical(), "every critical section was left");
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no thread panicked");
        }
        assert_eq!(*m.lock(), 4_000);
        assert!(
            m.queue.lock().owner.is_none(),
            "the owner is dropped at release"
        );
    }

    /// `pushfq`/`popfq` run in user mode without a fault, and the flag the model clears
    /// reads as it was: the processor ignores the change outside ring 0.
    #[test]
    fn interrupts_stay_as_user_mode_has_them() {
        let before = interrupt::disable();
        interrupt::set(before);
        assert_eq!(interrupt::disable(), before);
        interrupt::set(before);
    }
}
