//! Reproductions of upstream Twizzler's cached permission check (`src/kernel/src/security.rs`
//! at `c09e6e38`, and its call in `memory/context/virtmem/fault.rs`), to measure our hit
//! against in the same run.
//!
//! `SecCtxMgr::check_active_access` locks the thread's manager to clone the active context's
//! `Arc`, locks that context's cache, looks the object up in a `BTreeMap<ObjID, PermsInfo>`
//! and copies the entry out; the fault handler then tests `provide & !restrict & access ==
//! access`. Nothing checks expiry, revocation, generations or gates: that is the point of the
//! comparison. The two reproductions differ only in the lock ([`LockKind`]):
//!
//! - [`SecCtxMgr`] (`spin::Mutex`): a *lower bound* on upstream's cost. Upstream's kernel
//!   mutex is not a spinlock (see [`kernel_lock`]); with one in its place the check is as
//!   cheap as that code can be.
//! - [`KernelSecCtxMgr`] ([`kernel_lock::Mutex`]): upstream's kernel mutex, its uncontended
//!   path operation by operation: what upstream's kernel pays.

pub mod kernel_lock;

use std::collections::BTreeMap;
use std::sync::Arc;

use twizzler_capsec::{Expiry, ObjID, PermsInfo, Protections};

/// A lock as the reproduction uses one: `f` on the value, with the lock held.
pub trait Lock<T> {
    /// A lock holding `value`.
    fn new(value: T) -> Self;
    /// Runs `f` on the value with the lock held.
    fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R;
}

impl<T> Lock<T> for spin::Mutex<T> {
    fn new(value: T) -> Self {
        spin::Mutex::new(value)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.lock())
    }
}

impl<T> Lock<T> for kernel_lock::Mutex<T> {
    fn new(value: T) -> Self {
        kernel_lock::Mutex::new(value)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.lock())
    }
}

/// Which lock a reproduction takes where upstream takes its kernel mutex.
pub trait LockKind {
    /// The lock around a value of type `T`.
    type Lock<T>: Lock<T>;
}

/// `spin::Mutex`: the lower bound.
pub struct Spin;

impl LockKind for Spin {
    type Lock<T> = spin::Mutex<T>;
}

/// Upstream's kernel mutex, modelled ([`kernel_lock::Mutex`]).
pub struct KernelMutex;

impl LockKind for KernelMutex {
    type Lock<T> = kernel_lock::Mutex<T>;
}

/// A context's cache: upstream's `BTreeMap<ObjID, PermsInfo>`.
pub type Cache = BTreeMap<ObjID, PermsInfo>;

/// Upstream's `SecurityContext`, reduced to its cache.
pub struct SecurityContext<K: LockKind> {
    cache: K::Lock<Cache>,
}

/// Upstream's `SecCtxMgr`, reduced to the active context behind its lock.
pub struct Mgr<K: LockKind> {
    active: K::Lock<Arc<SecurityContext<K>>>,
}

/// The reproduction with `spin::Mutex` in place of upstream's kernel mutex: a lower bound.
pub type SecCtxMgr = Mgr<Spin>;

/// The reproduction with upstream's kernel mutex ([`kernel_lock::Mutex`]).
pub type KernelSecCtxMgr = Mgr<KernelMutex>;

impl<K: LockKind> Mgr<K> {
    /// A thread whose active context `ctx` has cached read-write for objects `0..n`
    /// ([`crate::host::obj`]).
    pub fn with_cached(ctx: ObjID, n: u128) -> Self {
        let cache = (0..n)
            .map(|i| {
                let perms = PermsInfo {
                    ctx,
                    provide: Protections::READ | Protections::WRITE,
                    restrict: Protections::empty(),
                    valid_until: Expiry::NEVER,
                };
                (crate::host::obj(i), perms)
            })
            .collect();
        Self {
            active: Lock::new(Arc::new(SecurityContext {
                cache: Lock::new(cache),
            })),
        }
    }

    /// Upstream's `check_active_access` on a cached object, then the fault handler's test.
    /// `None` where upstream would evaluate the context (not cached).
    #[inline]
    pub fn fault(&self, target: ObjID, access: Protections) -> Option<PermsInfo> {
        // `SecCtxMgr::active`: the active context's `Arc`, cloned under the manager's lock.
        let active = self.active.with(Arc::clone);
        // `SecurityContext::lookup`: the cache, under its own lock.
        let perms = active.cache.with(|c| c.get(&target).copied())?;
        (perms.provide & !perms.restrict & access == access).then_some(perms)
    }
}
