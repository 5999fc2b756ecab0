//! The lookups upstream's `SecCtxMgr` and `SecurityContext` offer beside the fault path: the
//! rights a thread's contexts provide for an access, a context's rights on an object as a
//! whole, and what the engine granted.

use core::sync::atomic::Ordering;

use twizzler_capsec::{Access, AccessKind, Expiry, ObjID, PAGE_SIZE, PermsInfo, Protections};

use super::build::fault_budget;
use super::decide::{check_bounds, data_or_exec};
use super::miss::Want;
use super::{Engine, Subject};
use crate::cache::ObjectPerms;
use crate::fault::{Fault, KuidAt, Violation};
use crate::host::{Host, ObjectInfo};
use crate::mgr::{KERNEL_SCTX, SecCtxMgr};

impl<H: Host> Engine<H> {
    /// What the engine granted context `ctx` at byte `offset` of `target`: the most any fault
    /// there by a thread in `ctx` was mapped with (a load or store, a fetch, or a fetch
    /// entering through a code gate), from the cached decision. `None` when no current
    /// decision is cached: then nothing granted under `ctx` for `target` may still be mapped
    /// (it was unmapped when the decision left the cache).
    ///
    /// A host that takes write access away from a mapping and restores it later (Twizzler's
    /// `InvalidateMode::WriteProtect`) restores at most this minus write, never the region's
    /// protections: a read-only grant in a read-write-execute region stays read-only.
    pub fn granted(&self, ctx: ObjID, target: ObjID, offset: u64) -> Option<Protections> {
        if ctx == KERNEL_SCTX {
            return (offset >= PAGE_SIZE).then_some(Protections::all());
        }
        let now = self.now();
        let epoch = self.epoch.load(Ordering::Acquire);
        self.cache.with_current(ctx, target, epoch, now, |e| {
            [AccessKind::Read, AccessKind::Exec]
                .into_iter()
                .flat_map(|kind| {
                    let a = Access {
                        kind,
                        offset,
                        entering: false,
                    };
                    [a, a.as_entering()]
                })
                .fold(Protections::empty(), |p, a| {
                    p | e.snap.evaluate(&a).perms.provide
                })
        })
    }

    /// The rights the thread's active context provides for `fault`.
    pub fn check_active_access(
        &self,
        thread: &SecCtxMgr,
        fault: &Fault,
    ) -> Result<PermsInfo, Violation> {
        check_bounds(fault)?;
        let now = self.now();
        let budget = fault_budget();
        Ok(self
            .lookup_access(thread.active_id(), fault, data_or_exec(fault), now, &budget)?
            .eval
            .perms)
    }

    /// The rights of the first of the thread's contexts that grants `fault` (`perms.ctx`
    /// names it), or the violation. Does not switch.
    pub fn search_access(&self, thread: &SecCtxMgr, fault: &Fault) -> Result<PermsInfo, Violation> {
        self.search(thread, fault, None).map(|(l, _)| l.eval.perms)
    }

    /// Context `ctx`'s rights on object `target` as a whole (upstream's
    /// `SecurityContext::lookup`): what holds on every page, and what on some.
    pub fn lookup(
        &self,
        ctx: ObjID,
        target: ObjID,
        object: &ObjectInfo,
    ) -> Result<ObjectPerms, Violation> {
        let object = Subject {
            info: *object,
            kuid_at: KuidAt::Fault,
        };
        self.lookup_subject(ctx, target, &object)
    }

    /// [`Engine::lookup`] for a host whose faults are [`Fault::lazy`]: the object's `kuid` is
    /// asked of [`Host::object`] if a record needs it, and the decision is cached as a lazy
    /// fault's is, so a lookup and the faults share one entry (with [`Engine::lookup`] and an
    /// `ObjectInfo` carrying the `kuid`, the two would displace each other, unmapping each
    /// time).
    pub fn lookup_lazy(
        &self,
        ctx: ObjID,
        target: ObjID,
        default_prots: Protections,
    ) -> Result<ObjectPerms, Violation> {
        let object = Subject {
            info: ObjectInfo::new(None, default_prots),
            kuid_at: KuidAt::Miss,
        };
        self.lookup_subject(ctx, target, &object)
    }

    fn lookup_subject(
        &self,
        ctx: ObjID,
        target: ObjID,
        object: &Subject,
    ) -> Result<ObjectPerms, Violation> {
        if ctx == KERNEL_SCTX {
            return Ok(ObjectPerms {
                ctx,
                everywhere: Protections::all(),
                somewhere: Protections::all(),
                restrict: Protections::empty(),
                valid_until: Expiry::NEVER,
            });
        }
        let now = self.now();
        let budget = fault_budget();
        self.with_entry(ctx, target, object, now, &budget, Want::All, |e| {
            e.snap.object_perms()
        })
        .map(|(p, _)| p)
    }
}
