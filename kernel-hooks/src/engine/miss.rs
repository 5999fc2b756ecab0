//! The miss path: a fresh cache entry that serves a lookup, found in the cache or built from
//! the context and cached, redone when a revocation or invalidation races with it.

use core::cell::Cell;
use core::sync::atomic::Ordering;

use twizzler_capsec::{Access, FlowDenial, ObjID, Protections};

use super::{Engine, Invalidation, Looked, Subject};
use crate::cache::{CachedPerms, Stamp};
use crate::fault::{Fault, Violation};
use crate::host::{Host, ObjectInfo};
use crate::stats::Counters;
use crate::ticket::{MapTicket, Ticket};

/// How often a lookup is redone when a revocation or invalidation races with it.
const RACE_RETRIES: usize = 4;

impl<H: Host> Engine<H> {
    fn stamp(&self, object: &ObjectInfo) -> Stamp {
        Stamp::of(self.epoch.load(Ordering::Acquire), object)
    }

    /// Runs `f` on a fresh cache entry for (`ctx_id`, `target`) that serves `want`: the cached
    /// one on a hit, else one built by reading the context, which is cached (merged into the
    /// cached entry, see [`VerifyCache::insert`]). An entry that does not serve `want` (it was
    /// built lazily for other accesses) is the base of the new one: its grants are kept and
    /// only the records `want` needs are verified. Returns `f`'s result and the ticket of a
    /// decision made from it. Whatever `f` sees is in the cache when this returns, so every
    /// page mapped from it is found by every later expiry, revocation and invalidation.
    ///
    /// [`VerifyCache::insert`]: crate::cache::VerifyCache::insert
    #[allow(clippy::too_many_arguments)]
    pub(super) fn with_entry<R>(
        &self,
        ctx_id: ObjID,
        target: ObjID,
        object: &Subject,
        now: u64,
        budget: &Cell<u32>,
        want: Want,
        f: impl Fn(&CachedPerms) -> R,
    ) -> Result<(R, MapTicket), Violation> {
        let build = |stamp, base| {
            // The principal's labels, read after the epoch (in `stamp`): a label change that
            // published a row this did not see moved the epoch, so what is built from the
            // old row never hits (`docs/DIFC.md` §4.2). Outside `with_ctx`, no lock held.
            let labels = self.host.ctx_label(ctx_id).ok_or(Violation::Flow {
                ctx: ctx_id,
                target,
                needed: want.needed(),
                provided: Protections::empty(),
                denial: FlowDenial::LabelUnknown,
            })?;
            self.read_ctx(ctx_id, |ctx| {
                self.build_entry(
                    ctx_id, ctx, target, object, stamp, now, budget, base, want, labels,
                )
            })
        };
        for _ in 0..RACE_RETRIES {
            let stamp = self.stamp(&object.info);
            let base = match self.cache.with_fresh(ctx_id, target, &stamp, now, |e| *e) {
                Some((e, ticket)) if want.served_by(&e) => {
                    // The entry matched a stamp read before the lookup. If the epoch moved
                    // since, the entry may be one built from what a revocation took away,
                    // inserted (with the old stamp) after that revocation's sweep passed its
                    // set: its ticket would look current. Only a hit under an unchanged epoch
                    // counts.
                    if self.epoch.load(Ordering::Acquire) == stamp.epoch {
                        self.cache.count_hit(&ticket);
                        return Ok((f(&e), ticket));
                    }
                    continue;
                }
                other => other.map(|(e, _)| e),
            };
            Counters::bump(&self.counters.misses);
            let entry = build(stamp, base)?;
            let ticket = self.insert(entry, now);
            if self.epoch.load(Ordering::Acquire) == stamp.epoch {
                return Ok((f(&entry), ticket));
            }
            // A revocation or invalidation ran while the records were verified: what was
            // verified may be gone already. The entry inserted carries the old epoch, so it
            // will never be served; verify again.
        }
        // Invalidations kept racing with this lookup: decide from a fresh build. It is still
        // cached (an expiry or a revocation must find what it grants), and the decision
        // carries the epoch, which every revocation and invalidation moves.
        let stamp = self.stamp(&object.info);
        let entry = build(stamp, None)?;
        let _ = self.insert(entry, now);
        Ok((f(&entry), MapTicket(Ticket::Epoch(stamp.epoch))))
    }

    /// What context `ctx_id` provides for `access` to the fault's object.
    pub(super) fn lookup_access(
        &self,
        ctx_id: ObjID,
        fault: &Fault,
        access: Access,
        now: u64,
        budget: &Cell<u32>,
    ) -> Result<Looked, Violation> {
        let needed = access.kind.required();
        let want = Want::Access(access, needed);
        let ((eval, flags, cause, flow), ticket) = self.with_entry(
            ctx_id,
            fault.target,
            &Subject::of(fault),
            now,
            budget,
            want,
            |e| {
                let eval = e.snap.evaluate(&access);
                let denied = !eval.perms.grants(needed);
                let flow = denied.then(|| e.flow_denial(&access, needed)).flatten();
                let cause = (denied && flow.is_none()).then(|| e.deny_cause(&access, needed));
                let labels = e.ctx_labels;
                let caps = e.snap.evaluate_caps(&access).perms.provide;
                (eval, e.snap.flags, cause, (flow, labels, caps))
            },
        )?;
        Ok(Looked {
            eval,
            flags,
            ticket,
            cause,
            flow_denial: flow.0,
            labels: flow.1,
            caps_provided: flow.2,
        })
    }

    /// Caches `entry` (built at `now`), notes its expiry for the timer, unmaps what it evicted
    /// or displaced, and returns the ticket of decisions made from it.
    fn insert(&self, entry: CachedPerms, now: u64) -> MapTicket {
        let (gone, ticket) = self.cache.insert(entry, now);
        // After the insert: an `expire` that cleared the deadline before this either saw the
        // entry in its sweep or runs its sweep before the entry is there, and then this note
        // comes after its clearing.
        self.note_expiry(entry.snap.valid_until);
        if let Some(r) = gone {
            Counters::bump(&self.counters.evictions);
            self.unmap_removed(r, &mut Invalidation::default());
        }
        ticket
    }
}

/// What a lookup needs an entry to answer.
#[derive(Clone, Copy)]
pub(super) enum Want {
    /// One access, needing these rights: an entry serves it if it grants it, or if it is
    /// complete (then its denial is the rule's).
    Access(Access, Protections),
    /// The object as a whole: only a complete entry serves it.
    All,
}

impl Want {
    fn served_by(&self, e: &CachedPerms) -> bool {
        match self {
            Want::Access(access, needed) => e.snap.decides(access, *needed),
            Want::All => {
                e.snap.complete && e.snap.flow_state != crate::cache::FlowState::Unevaluated
            }
        }
    }

    /// The rights the lookup needs (none for the object as a whole).
    fn needed(&self) -> Protections {
        match self {
            Want::Access(_, needed) => *needed,
            Want::All => Protections::empty(),
        }
    }
}
