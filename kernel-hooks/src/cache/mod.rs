//! [`VerifyCache`]: decisions already verified, keyed by (context, object).
//!
//! An entry keeps what the rule needs once signatures are checked: the grants (rights and
//! gate) of the records that counted, the masks, the default protections and the context's
//! flags. A hit recomputes the rights for the faulting page from those with a few compares:
//! no decoding, no hashing, no signature work, no heap, no call into the host.
//!
//! Every entry is stamped with what it was derived from, and misses when any of it changed:
//! the engine's epoch (bumped by every revocation, context invalidation, key invalidation and
//! label change), the object's `kuid`, default protections and data label (which travel with
//! the fault),
//! and `valid_until`, the earliest expiry among the records it holds. It also records what it
//! depends on (the key objects consulted and the ids of the records and their parents) so a
//! revocation can find, and unmap, exactly the grants it takes away.
//!
//! The cache is set-associative: `SETS` sets of `WAYS` entries ([`SeqSet`]). A lookup reads
//! a set without a lock: the part of each entry a hit needs ([`Snapshot`]) is mirrored in
//! atomic words under a sequence counter, so a hit costs loads and compares and no store
//! another CPU sees. Inserts and sweeps take the set's writer lock; nothing runs under it but
//! compares and copies: [`VerifyCache::retain`] hands what it removed to its caller only after
//! the lock is released. The empty cache is all zero bytes, so a `static` engine lives in
//! `.bss`.

mod entry;
mod snapshot;
mod verdict_words;
mod words;

use crate::fault::Fault;
pub use crate::seqset::Retain;
use crate::seqset::{SeqSet, Upsert};
use crate::ticket::{MapTicket, Ticket};
use twizzler_capsec::{Access, Expiry, ObjID};

pub use entry::{CachedPerms, Deps, Explanation, Failure, FlowState, FlowWhy, Kept, Stamp};
pub(crate) use snapshot::OBJECT_PAGES;
pub(crate) use snapshot::unexpired;
pub use snapshot::{Evaluated, ObjectPerms, Snapshot};
use words::key_words;
pub use words::{Explained, FlowExplained, Granted, HOT_WORDS, Served, SummaryHit, WhyRefused};

/// Number of sets.
pub const SETS: usize = 64;
/// Entries per set.
pub const WAYS: usize = 4;
/// Grant slots of one entry (grants with one gate, or with page ranges that continue each
/// other, share a slot); past them the oldest grant leaves the slots and the entry is
/// incomplete (see [`CachedPerms::add_grant`]).
pub const MAX_GRANTS: usize = 4;

/// A bounded, set-associative cache of verified decisions.
pub struct VerifyCache {
    sets: [SeqSet<CachedPerms, WAYS, HOT_WORDS>; SETS],
}

impl Default for VerifyCache {
    fn default() -> Self {
        Self::new()
    }
}

/// The key of an entry that was removed from the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Removed {
    /// The context.
    pub ctx: ObjID,
    /// The object.
    pub target: ObjID,
}

impl Removed {
    fn of(e: &CachedPerms) -> Self {
        Self {
            ctx: e.snap.ctx,
            target: e.snap.target,
        }
    }
}

impl VerifyCache {
    /// An empty cache.
    pub const fn new() -> Self {
        Self {
            sets: [const { SeqSet::new() }; SETS],
        }
    }

    #[inline]
    fn set(&self, ctx: ObjID, target: ObjID) -> (usize, &SeqSet<CachedPerms, WAYS, HOT_WORDS>) {
        // Object ids are often sequential: fold every bit of both ids into one word, then
        // take the *top* bits of a multiplicative hash, which depend on all of the input.
        let fold = |id: ObjID| (id.raw() as u64) ^ ((id.raw() >> 64) as u64).rotate_left(32);
        let x = fold(target) ^ fold(ctx).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        let h = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // SETS is a power of two: the top log2(SETS) bits index it.
        let i = (h >> (u64::BITS - SETS.trailing_zeros())) as usize % SETS;
        (i, &self.sets[i])
    }

    /// The ticket of a decision served from set `i` when its removal counter was `removals`.
    fn ticket(i: usize, removals: u64) -> MapTicket {
        MapTicket(Ticket::Entry {
            // SETS fits a u16.
            set: i as u16,
            removals,
        })
    }

    /// Whether no entry has left the set `ticket` names since it was taken.
    pub fn is_current(&self, ticket: &MapTicket) -> Option<bool> {
        match ticket.0 {
            Ticket::Entry { set, removals } => Some(
                self.sets
                    .get(usize::from(set))
                    .is_some_and(|s| s.removals() == removals),
            ),
            _ => None,
        }
    }

    /// The common hit without a lock (`Snapshot::serve_summary`): what the summary of the
    /// fresh entry for (`ctx`, `fault`'s object) says about `fault` by a thread in the
    /// context, and the ticket. `None` when there is no such entry or its summary does not
    /// hold: [`VerifyCache::serve`] answers in full. `now` gives the time; it is called only
    /// for an entry that expires (a hit on grants that never expire reads no clock).
    #[inline(always)]
    pub fn serve_summary(
        &self,
        ctx: ObjID,
        fault: &Fault,
        epoch: u64,
        now: impl Fn() -> u64 + Copy,
    ) -> Option<(SummaryHit, MapTicket)> {
        let (si, set) = self.set(ctx, fault.target);
        // A `move` closure: what it captures is copied in, not referred to, so nothing is
        // kept in memory for the out-of-line retries; `fault`'s fields are read where they
        // are compared.
        let (hit, removals) = set.lookup_first(&key_words(ctx, fault.target), move |w| {
            Snapshot::serve_summary(w, epoch, now, fault)
        })?;
        Some((hit, Self::ticket(si, removals)))
    }

    /// A hit without a lock, in full: what the fresh entry for (`ctx`, `fault`'s object)
    /// says about `access` to it (`Snapshot::serve`), stamped with `epoch` and the fault's
    /// object metadata. `None` when there is no fresh entry, an incomplete one does not
    /// grant, or the set was being written: the caller then takes the slow path. `now` as
    /// for [`VerifyCache::serve_summary`].
    #[inline]
    pub fn serve(
        &self,
        ctx: ObjID,
        fault: &Fault,
        (epoch, now): (u64, impl Fn() -> u64 + Copy),
        access: &Access,
    ) -> Option<(Served, MapTicket)> {
        let (si, set) = self.set(ctx, fault.target);
        let needed = access.kind.required();
        let (served, removals) = set.lookup(&key_words(ctx, fault.target), |w| {
            Snapshot::serve(w, epoch, &fault.object, now, access, needed)
        })?;
        Some((served, Self::ticket(si, removals)))
    }

    /// Runs `f` on the fresh entry for (`ctx`, `target`), if there is one, under the set's
    /// writer lock (for what lookups do not read: why a denial was denied when the mirror
    /// does not say, see [`Explained`]). `f` must only compute.
    pub fn with_fresh<R>(
        &self,
        ctx: ObjID,
        target: ObjID,
        stamp: &Stamp,
        now: u64,
        f: impl FnOnce(&CachedPerms) -> R,
    ) -> Option<(R, MapTicket)> {
        let (si, set) = self.set(ctx, target);
        let (r, removals) = set.lookup_locked(&key_words(ctx, target), |e| {
            e.snap.is_fresh(stamp, now).then(|| f(e))
        })?;
        Some((r, Self::ticket(si, removals)))
    }

    /// [`VerifyCache::with_fresh`] for a caller that has not read the time: runs `f` on the
    /// entry for (`ctx`, `target`) stamped with `stamp`, whatever its expiry, and returns the
    /// expiry with `f`'s answer, for the caller to compare with the time once the lock is
    /// released (in the engine the time may come from the host's clock, which is never called
    /// under a lock of ours).
    pub fn with_stamped<R>(
        &self,
        ctx: ObjID,
        target: ObjID,
        stamp: &Stamp,
        f: impl FnOnce(&CachedPerms) -> R,
    ) -> Option<(R, Expiry)> {
        let (_, set) = self.set(ctx, target);
        set.lookup_locked(&key_words(ctx, target), |e| {
            (e.snap.stamp == *stamp).then(|| (f(e), e.snap.valid_until))
        })
        .map(|(r, _)| r)
    }

    /// Runs `f` on the entry for (`ctx`, `target`) if it is current, whatever object metadata
    /// it was stamped with: stamped with `epoch` and not expired at `now`. Under the set's
    /// writer lock; `f` must only compute.
    pub fn with_current<R>(
        &self,
        ctx: ObjID,
        target: ObjID,
        epoch: u64,
        now: u64,
        f: impl FnOnce(&CachedPerms) -> R,
    ) -> Option<R> {
        let (_, set) = self.set(ctx, target);
        let current =
            |e: &CachedPerms| e.snap.stamp.epoch == epoch && !e.snap.valid_until.is_expired(now);
        set.lookup_locked(&key_words(ctx, target), |e| current(e).then(|| f(e)))
            .map(|(r, _)| r)
    }

    /// Counts a hit served from the set `ticket` names (see [`SeqSet::count_hit`]): the engine
    /// calls it once it keeps the answer (the epoch did not move).
    #[inline]
    pub fn count_hit(&self, ticket: &MapTicket) {
        if let Ticket::Entry { set, .. } = ticket.0
            && let Some(s) = self.sets.get(usize::from(set))
        {
            s.count_hit();
        }
    }

    /// Hits served so far (see [`SeqSet::hits`]).
    pub fn hits(&self) -> u64 {
        self.sets.iter().map(SeqSet::hits).sum()
    }

    /// Inserts `entry`, built at `now`. An entry already held for the same key with the same
    /// stamp, and not expired, takes in what `entry` adds ([`CachedPerms::merge`]): pages may
    /// be mapped from either, so neither's grants, expiry or dependencies may be lost. An
    /// entry stamped with a later epoch than `entry` stays (`entry` was built before a
    /// revocation or invalidation and is never served). Any other entry (expired, stamped with
    /// other object metadata or an earlier epoch) is displaced and counts as removed. Returns
    /// the key of the entry that left the set (evicted or displaced), whose mappings must go,
    /// and the ticket of decisions served from what the set holds now.
    pub fn insert(&self, entry: CachedPerms, now: u64) -> (Option<Removed>, MapTicket) {
        let (si, set) = self.set(entry.snap.ctx, entry.snap.target);
        let (gone, removals) = set.upsert(entry, |old, new| {
            if old.snap.stamp == new.snap.stamp && !old.snap.valid_until.is_expired(now) {
                let mut merged = *old;
                merged.merge(new);
                Upsert::Put(merged)
            } else if old.snap.stamp.epoch > new.snap.stamp.epoch {
                Upsert::Keep
            } else {
                Upsert::Displace
            }
        });
        (gone.as_ref().map(Removed::of), Self::ticket(si, removals))
    }

    /// Visits every entry, one set at a time: `sweep` says whether to keep, re-stamp or remove
    /// it (see [`Retain`]); it runs under the set's lock (it must only compute). `removed`
    /// runs after the lock is released, once for each entry removed from that set, so it may
    /// call out.
    pub fn retain(
        &self,
        mut sweep: impl FnMut(&mut CachedPerms) -> Retain,
        mut removed: impl FnMut(Removed),
    ) {
        for set in &self.sets {
            set.retain(&mut sweep, |e| removed(Removed::of(&e)));
        }
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.sets.iter().map(SeqSet::len).sum()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
