//! The synchronization primitives the lock-free lookups use, from `core` in a kernel and from
//! [`loom`](https://docs.rs/loom) when the crate is built with `--cfg loom` to check them.
//!
//! Only the modules whose synchronization `loom/tests/loom_cache.rs` explores ([`crate::seq`],
//! [`crate::seqset`]) go through here. Under `loom` their constructors are not `const`
//! (loom's atomics are not), so the rest of the crate, which keeps the engine in a `static`,
//! is not built then.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};

/// Tells the CPU (or loom's scheduler) that this thread is waiting for another.
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// A mutual-exclusion lock for writers: `spin`'s spinlock in a kernel (const-constructible,
/// no heap), loom's mutex under `loom`.
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: spin::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = spin::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// A lock around `value`.
    #[cfg(not(loom))]
    pub(crate) const fn new(value: T) -> Self {
        Self {
            inner: spin::Mutex::new(value),
        }
    }

    /// A lock around `value`.
    #[cfg(loom)]
    pub(crate) fn new(value: T) -> Self {
        Self {
            inner: loom::sync::Mutex::new(value),
        }
    }

    /// Takes the lock.
    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        return self.inner.lock();
        #[cfg(loom)]
        // loom's mutex is poisoned only if a model thread panicked, which already fails it.
        return self.inner.lock().unwrap_or_else(|p| p.into_inner());
    }
}
