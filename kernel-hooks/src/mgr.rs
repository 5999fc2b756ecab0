//! [`SecCtxMgr`]: one thread's security contexts, shaped after Twizzler's kernel.
//!
//! A thread has one active context and any number of inactive ones. The fault path tries the
//! active one first and, unless it is `UNDETACHABLE`, the inactive ones in the order they were
//! attached ([`crate::Engine::decide`]); the kernel then switches the thread with
//! [`SecCtxMgr::switch_context`], and its own memory context with it.
//!
//! Like upstream's, it is `Clone` (a spawned thread starts with its parent's contexts: the
//! clone is taken under the parent's lock, so it is one consistent state) and has a kernel
//! form ([`SecCtxMgr::new_kernel`]). The inactive list lives on the heap: attaching and
//! cloning allocate, always with the lock released; the fault path reads it one entry at a
//! time under the lock and never allocates. The active context's id is also published under
//! a sequence counter, so a fault reads it without taking the lock (upstream keeps a separate
//! spinlock for it).

use alloc::vec::Vec;
use core::fmt;

use spin::Mutex;
use twizzler_capsec::{ObjID, PermsInfo};

use crate::cache::ObjectPerms;
use crate::engine::Engine;
use crate::fault::{Fault, Violation};
use crate::host::{Host, ObjectInfo};
use crate::seq::SeqWords;

/// The context id of kernel threads (as upstream's `KERNEL_SCTX`): the engine grants them
/// everything the object's bounds allow.
pub const KERNEL_SCTX: ObjID = ObjID::new(0);

/// The result of [`SecCtxMgr::switch_context`], as in Twizzler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum SwitchResult {
    /// The context was already active.
    NoSwitch,
    /// The context is now active; the old active one is inactive.
    Switched,
    /// The context is not attached to the thread.
    NotAttached,
}

/// Why a context could not be attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttachError {
    /// It is already attached (active or inactive).
    AlreadyAttached(ObjID),
    /// It is the kernel's context, which user threads cannot attach.
    Kernel,
}

/// Why a context could not be detached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DetachError {
    /// It is the active context: switch away first.
    Active(ObjID),
    /// It is not attached.
    NotAttached(ObjID),
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AlreadyAttached(c) => write!(f, "context {c} is already attached"),
            Self::Kernel => f.write_str("the kernel's context cannot be attached"),
        }
    }
}

impl fmt::Display for DetachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Active(c) => write!(f, "context {c} is active and cannot be detached"),
            Self::NotAttached(c) => write!(f, "context {c} is not attached"),
        }
    }
}

impl core::error::Error for AttachError {}
impl core::error::Error for DetachError {}

struct Inner {
    active: ObjID,
    inactive: Vec<ObjID>,
}

/// One thread's contexts.
pub struct SecCtxMgr {
    inner: Mutex<Inner>,
    /// `inner.active` (low word first) and how many inactive contexts there are, written
    /// under `inner`'s lock; read without it.
    active: SeqWords<3>,
}

/// What [`SecCtxMgr::active`] publishes for `inner`.
fn published(inner: &Inner) -> [u64; 3] {
    let id = inner.active.raw();
    [id as u64, (id >> 64) as u64, inner.inactive.len() as u64]
}

impl Clone for SecCtxMgr {
    /// A copy of one consistent state of the lists (see `SecCtxMgr::snapshot`).
    fn clone(&self) -> Self {
        let inner = self.snapshot();
        Self {
            active: SeqWords::new(published(&inner)),
            inner: Mutex::new(inner),
        }
    }
}

impl fmt::Debug for SecCtxMgr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Formatting writes to the caller's sink: do it on a copy, not under the lock.
        let inner = self.snapshot();
        f.debug_struct("SecCtxMgr")
            .field("active", &inner.active)
            .field("inactive", &inner.inactive)
            .finish()
    }
}

impl SecCtxMgr {
    /// A thread whose only context is `active`.
    pub const fn new(active: ObjID) -> Self {
        Self {
            inner: Mutex::new(Inner {
                active,
                inactive: Vec::new(),
            }),
            active: SeqWords::new([active.raw() as u64, (active.raw() >> 64) as u64, 0]),
        }
    }

    /// A kernel thread's manager: its context is [`KERNEL_SCTX`].
    pub const fn new_kernel() -> Self {
        Self::new(KERNEL_SCTX)
    }

    /// Whether the thread runs in the kernel's context.
    pub fn is_kernel(&self) -> bool {
        self.active_id() == KERNEL_SCTX
    }

    /// The active context.
    #[inline]
    pub fn active_id(&self) -> ObjID {
        self.active_and_inactive_count().0
    }

    /// Publishes `inner` (held under the lock) for readers that take none: every change to
    /// the active context or the inactive list calls this before the lock is released.
    fn publish(&self, inner: &Inner) {
        self.active.write(published(inner));
    }

    /// The active context and the number of inactive ones, read without the lock (from one
    /// state of the lists).
    #[inline]
    pub(crate) fn active_and_inactive_count(&self) -> (ObjID, usize) {
        match self.active.read() {
            Some([lo, hi, n]) => (
                ObjID::new(u128::from(lo) | (u128::from(hi) << 64)),
                usize::try_from(n).unwrap_or(usize::MAX),
            ),
            // Changes kept racing with the read: ask the lock.
            None => {
                let inner = self.inner.lock();
                (inner.active, inner.inactive.len())
            }
        }
    }

    /// The inactive context at position `i` in the order they are tried, if there is one.
    /// The fault path walks the list with this, so it never copies it.
    pub fn inactive_at(&self, i: usize) -> Option<ObjID> {
        self.inner.lock().inactive.get(i).copied()
    }

    /// The inactive contexts, in the order they are tried (a copy).
    pub fn inactive(&self) -> Vec<ObjID> {
        self.snapshot().inactive
    }

    /// A copy of the lists as they were at one instant. The copy's memory is allocated with
    /// the lock released; if the list grew meanwhile, the copy is made again.
    fn snapshot(&self) -> Inner {
        loop {
            let len = self.inner.lock().inactive.len();
            let mut inactive = Vec::with_capacity(len);
            let inner = self.inner.lock();
            if inner.inactive.len() <= inactive.capacity() {
                inactive.extend_from_slice(&inner.inactive);
                let active = inner.active;
                drop(inner);
                return Inner { active, inactive };
            }
        }
    }

    /// Number of inactive contexts.
    pub fn inactive_count(&self) -> usize {
        self.inner.lock().inactive.len()
    }

    /// Attaches `ctx` as an inactive context. Memory for a longer list is allocated with the
    /// lock released (and the old list freed after it), so the lock never waits on the
    /// allocator.
    pub fn attach(&self, ctx: ObjID) -> Result<(), AttachError> {
        if ctx == KERNEL_SCTX {
            return Err(AttachError::Kernel);
        }
        let mut spare: Option<Vec<ObjID>> = None;
        loop {
            let mut inner = self.inner.lock();
            if inner.active == ctx || inner.inactive.contains(&ctx) {
                return Err(AttachError::AlreadyAttached(ctx));
            }
            if inner.inactive.len() < inner.inactive.capacity() {
                inner.inactive.push(ctx);
                self.publish(&inner);
                return Ok(());
            }
            let needed = inner.inactive.len() + 1;
            if let Some(mut bigger) = spare.take().filter(|v| v.capacity() >= needed) {
                bigger.extend_from_slice(&inner.inactive);
                bigger.push(ctx);
                let old = core::mem::replace(&mut inner.inactive, bigger);
                self.publish(&inner);
                drop(inner);
                drop(old);
                return Ok(());
            }
            drop(inner);
            spare = Some(Vec::with_capacity(needed.max(4).saturating_mul(2)));
        }
    }

    /// Detaches inactive context `ctx`. Decisions for this thread stop consulting it at once;
    /// the kernel drops the thread's mappings made under it (on Twizzler, the context's page
    /// tables in the thread's memory context).
    pub fn detach(&self, ctx: ObjID) -> Result<(), DetachError> {
        let mut inner = self.inner.lock();
        if inner.active == ctx {
            return Err(DetachError::Active(ctx));
        }
        let at = inner
            .inactive
            .iter()
            .position(|c| *c == ctx)
            .ok_or(DetachError::NotAttached(ctx))?;
        inner.inactive.remove(at);
        self.publish(&inner);
        Ok(())
    }

    /// Makes attached context `ctx` the active one; the previously active context takes its
    /// place among the inactive ones. The kernel switches its memory context along with it
    /// when this returns [`SwitchResult::Switched`].
    ///
    /// # Example
    ///
    /// ```
    /// use kernel_hooks::{DetachError, SecCtxMgr, SwitchResult};
    /// use twizzler_capsec::ObjID;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let (a, b, c) = (ObjID::new(0xa), ObjID::new(0xb), ObjID::new(0xc));
    /// let thread = SecCtxMgr::new(a);
    /// thread.attach(b)?;
    ///
    /// assert_eq!(thread.switch_context(b), SwitchResult::Switched);
    /// assert_eq!(thread.active_id(), b); // `a` is now inactive
    /// assert_eq!(thread.switch_context(b), SwitchResult::NoSwitch);
    /// assert_eq!(thread.switch_context(c), SwitchResult::NotAttached);
    ///
    /// // The active context cannot be detached; an inactive one can.
    /// assert_eq!(thread.detach(b), Err(DetachError::Active(b)));
    /// thread.detach(a)?;
    /// assert_eq!(thread.switch_context(a), SwitchResult::NotAttached);
    /// # Ok(())
    /// # }
    /// ```
    pub fn switch_context(&self, ctx: ObjID) -> SwitchResult {
        let mut inner = self.inner.lock();
        if inner.active == ctx {
            return SwitchResult::NoSwitch;
        }
        let Some(at) = inner.inactive.iter().position(|c| *c == ctx) else {
            return SwitchResult::NotAttached;
        };
        let old = inner.active;
        inner.active = ctx;
        self.publish(&inner);
        if let Some(slot) = inner.inactive.get_mut(at) {
            *slot = old;
        }
        SwitchResult::Switched
    }

    /// The active context's rights on object `target` as a whole (Twizzler's
    /// `SecCtxMgr::lookup`).
    pub fn lookup<H: Host>(
        &self,
        engine: &Engine<H>,
        target: ObjID,
        object: &ObjectInfo,
    ) -> Result<ObjectPerms, Violation> {
        engine.lookup(self.active_id(), target, object)
    }

    /// The rights the active context provides for `fault` (Twizzler's `check_active_access`).
    pub fn check_active_access<H: Host>(
        &self,
        engine: &Engine<H>,
        fault: &Fault,
    ) -> Result<PermsInfo, Violation> {
        engine.check_active_access(self, fault)
    }

    /// The rights of the first attached context that grants `fault`, trying the active one
    /// first (Twizzler's `search_access`); `perms.ctx` names it. Does not switch.
    pub fn search_access<H: Host>(
        &self,
        engine: &Engine<H>,
        fault: &Fault,
    ) -> Result<PermsInfo, Violation> {
        engine.search_access(self, fault)
    }
}
