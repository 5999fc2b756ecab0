//! Building a cache entry from a context's records: which records to verify for an access
//! (lazily, within a fault's budget of signature checks), and which to judge to make the
//! entry complete.

use core::cell::{Cell, RefCell};

use twizzler_capsec::{
    Access, AccessKind, CtxOwnership, FlowDenial, FlowResult, Grant, LabelId, ObjID, PAGE_SIZE,
    PrincipalLabels, Protections, SecCtx, Verdict,
};

use super::miss::Want;
use super::{Engine, Subject};
use crate::authority::EngineAuthority;
use crate::cache::{CachedPerms, Deps, Stamp};
use crate::ctx_bytes::CtxBytes;
use crate::fault::KuidAt;
use crate::host::Host;

/// The most signatures one fault verifies (in all the contexts it consults). A fault verifies
/// only the records that would add a right it needs, until it is granted, so a granted fault
/// usually verifies one; a denied one judges every record of the object, to cache a complete
/// denial. Records past the budget are not verified and do not count for that decision, which
/// is cached like any other: a hostile context costs at most this many verifications per
/// fault, and a repeated fault on it costs a cache hit. Signature checks the engine remembers
/// (successes and failures) cost a hash and are not counted.
///
/// 128 Ed25519 verifications are about 6 ms on the project's machine, 128 P-256 ones about
/// 45 ms, once; every later fault is a hit.
pub const MAX_VERIFICATIONS_PER_FAULT: usize = 128;

impl<H: Host> Engine<H> {
    fn authority<'a>(
        &'a self,
        target: ObjID,
        object: &Subject,
        budget: &'a Cell<u32>,
    ) -> EngineAuthority<'a, H> {
        EngineAuthority {
            host: &self.host,
            memo: &self.memo,
            failed: &self.failed,
            budget,
            counters: &self.counters,
            target,
            target_object: (object.kuid_at == KuidAt::Fault).then_some(object.info),
            deps: RefCell::new(Deps::EMPTY),
        }
    }

    /// Builds the entry for (`ctx_id`, `target`) from `ctx`'s records, starting from `base`
    /// (a fresh cached entry that does not serve `want`) or from nothing.
    ///
    /// For an access, lazily: the records are read in order (for a data access, starting at
    /// the record nearest its page when the gates are in order, see `scan`) and only those
    /// that would add a right the access needs are verified, until the access is granted;
    /// one fault verifies what it needs, not every record. If the records cannot grant it,
    /// every record is judged (within the fault's budget of verifications), so that the
    /// entry is complete and a repeated denial is served from the cache. For [`Want::All`],
    /// every record is judged.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn build_entry(
        &self,
        ctx_id: ObjID,
        ctx: &SecCtx<'_, CtxBytes<'_>>,
        target: ObjID,
        object: &Subject,
        stamp: Stamp,
        now: u64,
        budget: &Cell<u32>,
        base: Option<CachedPerms>,
        want: Want,
        labels: PrincipalLabels<LabelId>,
    ) -> CachedPerms {
        let unlabelled =
            labels.read.is_empty() && labels.write.is_empty() && stamp.label.is_empty();
        let mut entry = base.unwrap_or_else(|| {
            let allowed = twizzler_capsec::allowed_by_masks(ctx, target);
            if unlabelled {
                CachedPerms::unlabelled(ctx_id, target, stamp, allowed, ctx.flags())
            } else {
                CachedPerms::new(ctx_id, target, stamp, allowed, ctx.flags())
            }
        });
        let auth = self.authority(target, object, budget);
        *auth.deps.borrow_mut() = entry.deps;
        let granted = match want {
            Want::Access(access, needed) => {
                self.scan(ctx_id, ctx, &auth, now, &mut entry, Some((&access, needed)))
            }
            Want::All => false,
        };
        if !granted {
            self.scan(ctx_id, ctx, &auth, now, &mut entry, None);
        }
        // The flow (§3.2 step 3c), when the capabilities grant the access (for an access
        // they refuse, no ownership is verified and the refusal is theirs), or for the object
        // as a whole. Its ownership checks use the same authority: their records, keys and
        // budget are this entry's.
        let needs_write = match want {
            Want::Access(access, needed) => entry
                .snap
                .evaluate_caps(&access)
                .perms
                .grants(needed)
                .then_some(access.kind == AccessKind::Write),
            Want::All => Some(false),
        };
        entry.ctx_labels = labels;
        if unlabelled && needs_write.is_some() {
            // Every label is empty now, but `base` may hold a flow an earlier label refused
            // and a sweep left unevaluated (a drop of the integrity tag that refused a read):
            // with nothing labelled the rule lets everything through.
            entry.set_flow(labels, &FlowResult::ALL);
        } else if let Some(needs_write) = needs_write {
            let mut owner = CtxOwnership::new(ctx_id, ctx, &auth, now);
            let flow = self.flow_of(labels, stamp.label, needs_write, &mut owner);
            entry.snap.valid_until = entry.snap.valid_until.min(owner.valid_until);
            entry.set_flow(labels, &flow);
        }
        entry.deps = auth.deps.into_inner();
        entry
    }

    /// The flow rule for a principal at `labels` and an object at `object`, with the host's
    /// interned labels lent for the call; an id the host does not know refuses everything
    /// ([`FlowDenial::LabelUnknown`]).
    pub(super) fn flow_of(
        &self,
        labels: PrincipalLabels<LabelId>,
        object: LabelId,
        needs_write: bool,
        owner: &mut impl twizzler_capsec::Ownership,
    ) -> FlowResult {
        let unknown = FlowResult {
            mask: Protections::empty(),
            write_unresolved: false,
            denial: Some(FlowDenial::LabelUnknown),
        };
        self.host
            .with_label(labels.read, |read| {
                self.host.with_label(labels.write, |write| {
                    self.host.with_label(object, |object| {
                        let principal = PrincipalLabels { read, write };
                        twizzler_capsec::flow(&principal, &object, needs_write, owner)
                    })
                })
            })
            .flatten()
            .flatten()
            .unwrap_or(unknown)
    }

    /// One pass over the records of `ctx` filed under the entry's object. With `need` (an
    /// access and the rights it needs), verifies only records that would add a needed right
    /// not yet provided, and stops once the access is granted; returns whether it is. Without,
    /// verifies every record the entry's grants do not already subsume. Records that do not
    /// decode or are bound elsewhere, and verifications that fail, are noted as failures;
    /// grants that count are added. The entry is complete if every record was judged and no
    /// grant had to leave the entry's slots.
    fn scan(
        &self,
        ctx_id: ObjID,
        ctx: &SecCtx<'_, CtxBytes<'_>>,
        auth: &EngineAuthority<'_, H>,
        now: u64,
        entry: &mut CachedPerms,
        need: Option<(&Access, Protections)>,
    ) -> bool {
        let target = entry.snap.target;
        // What the entry provides for the access, and whether that grants it.
        let provides = |e: &CachedPerms| {
            need.map(|(a, n)| {
                let p = e.snap.evaluate(a).perms;
                (p.provide, p.grants(n))
            })
        };
        let mut provided = provides(entry);
        let mut judged_all = true;
        let mut dropped = false;
        // Whether a grant would add a right the access needs (always, without an access).
        let useful = |grant: &Grant, entry: &CachedPerms, provided: Option<(Protections, bool)>| {
            let (Some((access, needed)), Some((provided, _))) = (need, provided) else {
                return true;
            };
            grant.adds(access, (entry.snap.allowed & needed).difference(provided))
        };
        let mut entries = ctx.entries_for(target);
        // A data access looks first where the records' gates say its page is (a run in gate
        // order, as a context built page by page is): every record is still read if needed,
        // only the order changes (`EntryIter::start_near_page`).
        if let Some((access, _)) = need
            && access.kind != AccessKind::Exec
        {
            entries.start_near_page(access.offset & !(PAGE_SIZE - 1));
        }
        loop {
            // Looking for a grant: pass over the capabilities that cannot add a right the
            // access needs (the checks below, read in place), without making an entry of
            // each; the first one that might, or that is not a capability, comes next.
            if let (Some((access, needed)), Some((provided, false))) = (need, provided) {
                // `useful` below, with what depends only on the access and the entry worked
                // out once: the rights wanted, and whether the entry has a grant that could
                // subsume a record.
                let want = (entry.snap.allowed & needed).difference(provided);
                let subsumed = entry
                    .snap
                    .grants()
                    .next()
                    .is_some()
                    .then_some(|grant: &Grant| entry.subsumes(grant));
                let skipped = entries.skip_useless_caps(ctx_id, access, want, subsumed);
                if skipped > 0 {
                    entry.seen = true;
                    judged_all = false;
                }
            }
            let Some(e) = entries.next() else {
                break;
            };
            entry.seen = true;
            if provided.is_some_and(|(_, granted)| granted) {
                // More records than the access needed: the entry is not complete.
                judged_all = false;
                break;
            }
            // A capability's body says whether it could matter, without decoding or hashing
            // anything else: most records of an object do not matter to one access.
            if let Some((t, holder, grant)) = e.peek_cap()
                && t == target
                && holder == ctx_id
            {
                if entry.subsumes(&grant) {
                    continue;
                }
                if !useful(&grant, entry, provided) {
                    judged_all = false;
                    continue;
                }
            }
            let record = match e.record() {
                Ok(r) => r,
                Err(err) => {
                    entry.add_failure(Verdict::Malformed(err));
                    continue;
                }
            };
            if record.target() != target {
                entry.add_failure(Verdict::WrongTarget(record.target()));
                continue;
            }
            if record.holder() != ctx_id {
                entry.add_failure(Verdict::WrongHolder(record.holder()));
                continue;
            }
            let grant = Grant::of(&record);
            if entry.subsumes(&grant) {
                // Adds nothing to any access: judged without a signature check.
                continue;
            }
            if !useful(&grant, entry, provided) {
                // Not needed now: verified when an access needs it.
                judged_all = false;
                continue;
            }
            match record.verify(auth, now) {
                Ok(()) => {
                    dropped |= entry.add_grant(grant, record.expires());
                    provided = provides(entry);
                }
                Err(err) => entry.add_failure(Verdict::Invalid(err)),
            }
        }
        entry.snap.complete = judged_all && !dropped;
        provided.is_some_and(|(_, granted)| granted)
    }
}

/// A fresh budget of signature verifications for one fault.
pub(super) fn fault_budget() -> Cell<u32> {
    // The bound is small: it fits.
    Cell::new(MAX_VERIFICATIONS_PER_FAULT as u32)
}
