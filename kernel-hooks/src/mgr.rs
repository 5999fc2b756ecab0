//! [`SecCtxMgr`]: one thread's security contexts, shaped after Twizzler's kernel.
//!
//! A thread has one active context and up to [`MAX_INACTIVE`] inactive ones. The fault path
//! tries the active one first and, unless it is `UNDETACHABLE`, the inactive ones in the order
//! they were attached, switching the thread to the first that grants
//! ([`crate::Engine::decide`]).

use core::fmt;

use heapless::Vec;
use spin::Mutex;
use twizzler_security::{ObjID, PermsInfo};

use crate::engine::Engine;
use crate::fault::{Fault, Violation};
use crate::host::Host;

/// Inactive contexts one thread can have attached.
pub const MAX_INACTIVE: usize = 8;

/// The result of [`SecCtxMgr::switch_context`], as in Twizzler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
pub enum AttachError {
    /// It is already attached (active or inactive).
    AlreadyAttached(ObjID),
    /// The thread already has [`MAX_INACTIVE`] inactive contexts.
    TooMany,
}

/// Why a context could not be detached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
            Self::TooMany => write!(f, "already {MAX_INACTIVE} inactive contexts attached"),
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
    inactive: Vec<ObjID, MAX_INACTIVE>,
}

/// One thread's contexts.
pub struct SecCtxMgr {
    inner: Mutex<Inner>,
}

impl SecCtxMgr {
    /// A thread whose only context is `active`.
    pub const fn new(active: ObjID) -> Self {
        Self {
            inner: Mutex::new(Inner {
                active,
                inactive: Vec::new(),
            }),
        }
    }

    /// The active context.
    pub fn active_id(&self) -> ObjID {
        self.inner.lock().active
    }

    /// The inactive contexts, in the order they are tried.
    pub fn inactive(&self) -> Vec<ObjID, MAX_INACTIVE> {
        self.inner.lock().inactive.clone()
    }

    /// Attaches `ctx` as an inactive context.
    pub fn attach(&self, ctx: ObjID) -> Result<(), AttachError> {
        let mut inner = self.inner.lock();
        if inner.active == ctx || inner.inactive.contains(&ctx) {
            return Err(AttachError::AlreadyAttached(ctx));
        }
        inner.inactive.push(ctx).map_err(|_| AttachError::TooMany)
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
        Ok(())
    }

    /// Makes attached context `ctx` the active one; the previously active context takes its
    /// place among the inactive ones.
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
        if let Some(slot) = inner.inactive.get_mut(at) {
            *slot = old;
        }
        SwitchResult::Switched
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
