//! Taking grants away: revocation, invalidation, expiry, and the unmaps they cause.
//!
//! The host records a revocation in its own sets first; each operation then bumps the epoch so
//! no entry stamped before it can hit again, and sweeps the cache: the
//! entries that may depend on what changed are removed, the others are re-stamped so they
//! keep hitting. The unmaps happen after each set's lock is released, and every one is done
//! before the operation returns. An entry verified concurrently and inserted after the sweep
//! keeps the old epoch and never hits; the lookup that built it sees the epoch move and
//! verifies again.

use core::sync::atomic::Ordering;

use heapless::Vec;
use twizzler_capsec::{ObjID, RecordId, RelabelClass};

use super::Engine;
use super::clock::expiry_key;
use crate::cache::{CachedPerms, Removed, Retain, SETS, WAYS};
use crate::host::{Host, Unmap, UnmapGranularity};
use crate::stats::Counters;

/// Unmaps an [`Invalidation`] lists; more are performed but only counted.
pub const INVALIDATION_LIST: usize = 16;

/// What a revocation, an invalidation or an expiry sweep unmapped (through [`Host::unmap`],
/// before the call returned).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Invalidation {
    unmapped: Vec<Unmap, INVALIDATION_LIST>,
    total: usize,
}

impl Invalidation {
    fn push(&mut self, u: Unmap) {
        self.total += 1;
        // Past the list's capacity the unmap is still performed, only not listed.
        let _ = self.unmapped.push(u);
    }

    /// The first [`INVALIDATION_LIST`] unmaps performed.
    pub fn unmapped(&self) -> &[Unmap] {
        &self.unmapped
    }

    /// How many unmaps were performed.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Whether nothing was unmapped.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

impl<H: Host> Engine<H> {
    /// Key object `kuid` was revoked: the host's [`Host::key_revoked`] already says so (the
    /// host records it first). Every record signed by it, or by a delegation provider using it,
    /// stops granting; every decision that consulted it is forgotten and what it granted is
    /// unmapped before this returns. Calling it again is harmless.
    ///
    /// # Example
    ///
    /// A page mapped under a capability signed by `key_obj` is unmapped when the key is
    /// revoked, and the next fault is denied:
    ///
    /// ```
    /// # use std::cell::{Cell, RefCell};
    /// # use std::collections::HashMap;
    /// # use kernel_hooks::{CtxBytes, Decision, Engine, Fault, Host, ObjectInfo, SecCtxMgr, Unmap};
    /// # use twizzler_capsec::*;
    /// # /// A toy kernel: objects, context bytes and keys in maps; one key can be revoked.
    /// # #[derive(Default)]
    /// # struct Kernel {
    /// #     objects: HashMap<ObjID, ObjectInfo>,
    /// #     contexts: HashMap<ObjID, Vec<u8>>,
    /// #     keys: HashMap<ObjID, VerifyingKey>,
    /// #     revoked: Cell<Option<ObjID>>,
    /// #     unmapped: RefCell<Vec<Unmap>>,
    /// # }
    /// # impl Host for Kernel {
    /// #     fn object(&self, id: ObjID) -> Option<ObjectInfo> { self.objects.get(&id).copied() }
    /// #     fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
    /// #         self.contexts.get(&ctx).map(|b| f(CtxBytes::private(b)))
    /// #     }
    /// #     fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
    /// #         self.keys.get(&kuid).map(f)
    /// #     }
    /// #     fn key_revoked(&self, kuid: ObjID) -> bool { self.revoked.get() == Some(kuid) }
    /// #     fn record_revoked(&self, _id: &RecordId) -> bool { false }
    /// #     fn monotonic_ns(&self) -> u64 { 1 }
    /// #     fn unmap(&self, what: Unmap) { self.unmapped.borrow_mut().push(what) }
    /// # }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Context `ctx` holds a read-only capability for `file`, signed by the key in `key_obj`.
    /// let (file, key_obj, ctx) = (ObjID::new(0x10), ObjID::new(0x11), ObjID::new(0x20));
    /// let key = SigningKey::from_entropy(SigningScheme::Ed25519, &[9; 32])?;
    /// let mut editor = SecCtxEditor::new();
    /// editor.add_cap(&Cap::mint(CapGrant::new(file, ctx, Protections::READ), &key)?);
    /// let info = ObjectInfo::new(Some(key_obj), Protections::empty());
    /// let engine = Engine::new(Kernel {
    ///     objects: [(file, info)].into(),
    ///     contexts: [(ctx, editor.encode()?)].into(),
    ///     keys: [(key_obj, key.verifying_key())].into(),
    ///     ..Kernel::default() // `Kernel` is a toy `Host` (hidden above)
    /// });
    /// let thread = SecCtxMgr::new(ctx);
    /// let read = Fault::new(file, info, 0x1000, AccessKind::Read);
    ///
    /// assert!(matches!(engine.decide(&thread, &read), Decision::Map { .. }));
    ///
    /// engine.host().revoked.set(Some(key_obj)); // the kernel records the revocation first
    /// let gone = engine.revoke_key(key_obj);
    /// assert_eq!(gone.unmapped(), &[Unmap::Object { ctx, target: file }]);
    /// assert_eq!(engine.host().unmapped.borrow().as_slice(), gone.unmapped());
    /// assert!(matches!(engine.decide(&thread, &read), Decision::Violation(_)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn revoke_key(&self, kuid: ObjID) -> Invalidation {
        let old = self.epoch.fetch_add(1, Ordering::AcqRel);
        self.sweep(old, |e| e.deps.uses_kuid(kuid))
    }

    /// The record with id `id` was revoked: the host's [`Host::record_revoked`] already says
    /// so. It stops granting, and so does every delegation derived from it; what they granted
    /// is unmapped before this returns.
    pub fn revoke_record(&self, id: RecordId) -> Invalidation {
        let old = self.epoch.fetch_add(1, Ordering::AcqRel);
        self.sweep(old, |e| e.deps.uses_record(&id))
    }

    /// Key object `kuid` changed (the host rewrote or replaced the key it holds): forgets
    /// every signature check remembered (they may have been under the old key) and every
    /// decision that consulted `kuid`, unmapping what they granted.
    pub fn invalidate_key(&self, kuid: ObjID) -> Invalidation {
        self.memo.clear();
        let old = self.epoch.fetch_add(1, Ordering::AcqRel);
        self.sweep(old, |e| e.deps.uses_kuid(kuid))
    }

    /// Context `ctx` was written (or destroyed): forgets every decision made under it and
    /// unmaps everything mapped under it. The kernel calls this from the write fault that
    /// lets a writer at the context object (see the integration guide), before it maps the
    /// page writable.
    pub fn invalidate_ctx(&self, ctx: ObjID) -> Invalidation {
        self.validated.lock().forget(ctx);
        let old = self.epoch.fetch_add(1, Ordering::AcqRel);
        let mut inv = self.sweep(old, |e| e.snap.ctx == ctx);
        if H::UNMAP_GRANULARITY == UnmapGranularity::PerContext {
            self.host.unmap(Unmap::Context(ctx));
            inv.push(Unmap::Context(ctx));
        }
        inv
    }

    /// Context `ctx`'s principal label is changing (`docs/DIFC.md` §4.2 step 1): the host
    /// has published the transitional row ([`Host::ctx_label`] gives it now) and computed
    /// `class` ([`twizzler_capsec::classify`] of the old and new labels). Bumps the epoch
    /// (a miss that read the old row builds an entry that never hits), then sweeps the
    /// cache: when reads may become unsafe every entry of `ctx` is removed; when only writes
    /// may, every entry of `ctx` loses `W` from its flow (a later write resolves it again
    /// under the new row) and is re-stamped; every other entry is re-stamped. A removal or a
    /// narrowing moves its set's counter, so outstanding tickets for `ctx` fail. Then, with no
    /// engine lock held, one unmap: [`Unmap::Context`] or [`Unmap::WriteProtectContext`]
    /// (a [`UnmapGranularity::PerObject`] host gets [`Unmap::ObjectEverywhere`] /
    /// [`Unmap::WriteProtectObjectEverywhere`] for each object of the swept entries).
    ///
    /// A context the host no longer knows a row for (`ctx_label` is `None`) is treated as
    /// reads unsafe. A class with neither flag (the label did not change) only re-stamps.
    pub fn relabel_ctx(&self, ctx: ObjID, class: RelabelClass) -> Invalidation {
        let labels = self.host.ctx_label(ctx);
        let reads_unsafe = class.reads_unsafe || labels.is_none();
        let old = self.epoch.fetch_add(1, Ordering::AcqRel);
        // The objects whose entries lost `W`, for a per-object host (the cache holds at most
        // `SETS * WAYS` entries, so the list never overflows).
        let mut narrowed: Vec<ObjID, { SETS * WAYS }> = Vec::new();
        let per_object = H::UNMAP_GRANULARITY == UnmapGranularity::PerObject;
        let mut inv = Invalidation::default();
        self.cache.retain(
            |e| {
                let restamp = |e: &mut CachedPerms| restamp(e, old);
                if e.snap.ctx != ctx {
                    return restamp(e);
                }
                if reads_unsafe {
                    return Retain::Remove;
                }
                match labels {
                    Some(labels) if class.writes_unsafe => {
                        let changed = e.narrow_writes(labels);
                        let _ = narrowed.push(e.snap.target);
                        let restamped = restamp(e);
                        if changed { Retain::Narrowed } else { restamped }
                    }
                    _ => restamp(e),
                }
            },
            |r| {
                Counters::bump(&self.counters.invalidated);
                if per_object {
                    let u = Unmap::ObjectEverywhere(r.target);
                    self.host.unmap(u);
                    inv.push(u);
                }
            },
        );
        if per_object {
            for target in narrowed {
                let u = Unmap::WriteProtectObjectEverywhere(target);
                self.host.unmap(u);
                inv.push(u);
            }
        } else if reads_unsafe || class.writes_unsafe {
            let u = if reads_unsafe {
                Unmap::Context(ctx)
            } else {
                Unmap::WriteProtectContext(ctx)
            };
            self.host.unmap(u);
            inv.push(u);
        }
        inv
    }

    /// Object `target`'s metadata changed: its `kuid`, whether its id verifies, or its
    /// default protections. Forgets every decision about it and unmaps what they granted. A
    /// host whose faults carry the metadata ([`crate::Fault::new`]) need not call it (a
    /// decision stamped with other metadata misses); one whose faults leave the `kuid` to a
    /// miss ([`crate::Fault::lazy`]) must.
    pub fn invalidate_object(&self, target: ObjID) -> Invalidation {
        let old = self.epoch.fetch_add(1, Ordering::AcqRel);
        self.sweep(old, |e| e.snap.target == target)
    }

    /// Forgets every cached decision (unmapping what they granted) and every remembered
    /// signature check: for memory pressure, or to measure cold faults.
    pub fn flush(&self) -> Invalidation {
        self.memo.clear();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.retain_where(|_| Retain::Remove)
    }

    /// Removes and unmaps every decision whose records have expired by the engine's current
    /// time. The kernel calls it from its timer, armed by [`Engine::next_deadline`], and
    /// re-arms the timer from `next_deadline` afterwards.
    pub fn expire(&self) -> Invalidation {
        let now = self.now();
        // Forget the old deadline first: inserts racing with the sweep note theirs after
        // this, and the sweep notes every entry it keeps, so none is lost.
        self.next_expiry.store(0, Ordering::Release);
        self.retain_where(|e| {
            if e.snap.valid_until.is_expired(now) {
                return Retain::Remove;
            }
            self.next_expiry
                .fetch_max(expiry_key(e.snap.valid_until), Ordering::AcqRel);
            Retain::Keep
        })
    }

    /// After the epoch moved from `old`: removes (and unmaps) the entries `affected` says may
    /// depend on what changed, and re-stamps the others with the new epoch.
    fn sweep(&self, old: u64, affected: impl Fn(&CachedPerms) -> bool) -> Invalidation {
        self.retain_where(|e| {
            if affected(e) {
                return Retain::Remove;
            }
            restamp(e, old)
        })
    }

    /// Sweeps the cache with `sweep` (keep, re-stamp or remove each entry), and unmaps what
    /// the removed ones granted (after each set's lock is released).
    fn retain_where(&self, sweep: impl FnMut(&mut CachedPerms) -> Retain) -> Invalidation {
        let mut inv = Invalidation::default();
        self.cache.retain(sweep, |r| {
            Counters::bump(&self.counters.invalidated);
            self.unmap_removed(r, &mut inv);
        });
        inv
    }

    /// Unmaps what a removed entry granted, as precisely as the host can.
    pub(super) fn unmap_removed(&self, r: Removed, inv: &mut Invalidation) {
        let u = match H::UNMAP_GRANULARITY {
            UnmapGranularity::PerContext => Unmap::Object {
                ctx: r.ctx,
                target: r.target,
            },
            UnmapGranularity::PerObject => Unmap::ObjectEverywhere(r.target),
        };
        self.host.unmap(u);
        inv.push(u);
    }
}

/// An entry made before the epoch moved from `old` to `old + 1`, and still valid after the
/// change, takes the new epoch (so it hits again); one made since keeps its own.
fn restamp(e: &mut CachedPerms, old: u64) -> Retain {
    if e.snap.stamp.epoch == old {
        e.snap.stamp.epoch = old.wrapping_add(1);
        Retain::Restamped
    } else {
        Retain::Keep
    }
}
