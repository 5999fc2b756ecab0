//! [`VerifyCache`]: decisions already verified, keyed by (context, object).
//!
//! An entry keeps what the rule needs once signatures are checked: the grants (rights and
//! gate) of the records that counted, the masks, the default protections and the context's
//! flags. A hit recomputes the rights for the faulting page from those with a few compares:
//! no decoding, no hashing, no signature work, no heap, no call into the host.
//!
//! Every entry is stamped with what it was derived from, and misses when any of it changed:
//! the engine's epoch (bumped by every revocation, context invalidation and key
//! invalidation), the object's `kuid` and default protections (which travel with the fault),
//! and `valid_until`, the earliest expiry among the records it holds. It also records what it
//! depends on (the key objects consulted and the ids of the records and their parents) so a
//! revocation can find, and unmap, exactly the grants it takes away.
//!
//! The cache is set-associative: `SETS` sets of `WAYS` entries, each set behind its own
//! spinlock, so faults on several CPUs contend only when they hash to the same set. Nothing
//! runs under a set's lock but compares and copies: [`VerifyCache::retain`] hands what it
//! removed to its caller only after the lock is released. The empty cache is all zero bytes,
//! so a `static` engine lives in `.bss`.

use core::ops::Range;

use core::sync::atomic::{AtomicU64, Ordering};

use spin::Mutex;
use twizzler_capsec::{
    Access, CtxFlags, Expiry, Gate, Grant, MAX_OBJECT_SIZE, ObjID, PAGE_SIZE, PermsInfo,
    Protections, RecordId, Verdict,
};

use crate::fault::DenyCause;

use crate::ticket::{MapTicket, Ticket};

/// Number of sets.
pub const SETS: usize = 64;
/// Entries per set.
pub const WAYS: usize = 4;
/// Grants one entry holds; an object with more valid records in one context is cached
/// incomplete (see [`CachedPerms::complete`]).
pub const MAX_GRANTS: usize = 4;
/// Key objects one entry remembers depending on.
const MAX_KUIDS: usize = 4;
/// Record ids (fingerprints) one entry remembers depending on.
const MAX_RECORDS: usize = 12;

/// What an entry was derived from, and so what must not have changed for it to hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The engine's epoch.
    pub epoch: u64,
    /// The object's `kuid`.
    pub kuid: Option<ObjID>,
    /// The object's default protections.
    pub default_prots: Protections,
}

impl Stamp {
    const ZERO: Stamp = Stamp {
        epoch: 0,
        kuid: None,
        default_prots: Protections::empty(),
    };
}

/// The keys and records an entry was derived from.
///
/// Records are remembered by a 64-bit fingerprint of their id, so a revocation may also
/// match an unrelated entry: that only unmaps more than needed. When the lists overflow the
/// entry depends on everything.
#[derive(Clone, Copy, Debug)]
pub struct Deps {
    kuids: [ObjID; MAX_KUIDS],
    n_kuids: u8,
    records: [u64; MAX_RECORDS],
    n_records: u8,
    overflow: bool,
}

impl Deps {
    /// No dependencies.
    pub const EMPTY: Deps = Deps {
        kuids: [ObjID::new(0); MAX_KUIDS],
        n_kuids: 0,
        records: [0; MAX_RECORDS],
        n_records: 0,
        overflow: false,
    };

    fn fingerprint(id: &RecordId) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&id.0[..8]);
        u64::from_le_bytes(b)
    }

    /// Notes that the entry consulted key object `kuid`.
    pub fn add_kuid(&mut self, kuid: ObjID) {
        let n = usize::from(self.n_kuids);
        if self.kuids[..n].contains(&kuid) {
            return;
        }
        match self.kuids.get_mut(n) {
            Some(slot) => {
                *slot = kuid;
                self.n_kuids += 1;
            }
            None => self.overflow = true,
        }
    }

    /// Notes that the entry derives from the record `id`.
    pub fn add_record(&mut self, id: &RecordId) {
        let fp = Self::fingerprint(id);
        let n = usize::from(self.n_records);
        if self.records[..n].contains(&fp) {
            return;
        }
        match self.records.get_mut(n) {
            Some(slot) => {
                *slot = fp;
                self.n_records += 1;
            }
            None => self.overflow = true,
        }
    }

    /// Whether revoking (or changing) key object `kuid` may take something away from the
    /// entry.
    pub fn uses_kuid(&self, kuid: ObjID) -> bool {
        self.overflow || self.kuids[..usize::from(self.n_kuids)].contains(&kuid)
    }

    /// Whether revoking record `id` may take something away from the entry.
    pub fn uses_record(&self, id: &RecordId) -> bool {
        self.overflow
            || self.records[..usize::from(self.n_records)].contains(&Self::fingerprint(id))
    }
}

/// The failure an entry keeps. Not an `Option<Verdict>`: that one's `None` is a niche value of
/// `Verdict`'s tag, not zero bytes, and an unused entry must be all zero bytes so that a
/// `static` engine lives in `.bss` (with `Option` it moved 194 KB into `.data`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Failure {
    /// No record failed.
    None = 0,
    /// The most telling failure.
    Some(Verdict) = 1,
}

impl Failure {
    /// As an `Option`.
    pub fn get(self) -> Option<Verdict> {
        match self {
            Self::None => None,
            Self::Some(v) => Some(v),
        }
    }
}

/// The verified grants of one context for one object.
#[derive(Clone, Copy, Debug)]
pub struct CachedPerms {
    /// The context.
    pub ctx: ObjID,
    /// The object.
    pub target: ObjID,
    /// What it was derived from.
    pub stamp: Stamp,
    /// The earliest expiry among its records.
    pub valid_until: Expiry,
    /// The rights the context's masks let through for the object.
    pub allowed: Protections,
    /// The context's flags.
    pub flags: CtxFlags,
    grants: [Option<Grant>; MAX_GRANTS],
    /// False when the context held more valid records for the object than fit: a hit that
    /// does not grant must then be re-evaluated in full.
    pub complete: bool,
    /// Whether the context files any record under the object.
    pub seen: bool,
    /// Why the most telling record that did not count failed (malformed, bound elsewhere,
    /// invalid, unchecked past the budget): kept so a denial is explained without reading or
    /// verifying anything again.
    pub failure: Failure,
    /// What it depends on.
    pub deps: Deps,
}

/// Rights for one access, computed from a cache entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluated {
    /// The permission info, as the rule defines it.
    pub perms: PermsInfo,
    /// Pages the same decision holds for.
    pub pages: Range<u64>,
}

/// A context's rights on an object as a whole, for callers that ask about the object rather
/// than one access (upstream's `SecurityContext::lookup`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectPerms {
    /// The context.
    pub ctx: ObjID,
    /// Rights granted on every page of the object but the null page (a thread running in
    /// the context may execute anywhere it has `X`).
    pub everywhere: Protections,
    /// Rights granted on at least one page (behind a data gate that covers some pages, or
    /// through an entry point).
    pub somewhere: Protections,
    /// Rights the context's masks forbid for the object.
    pub restrict: Protections,
    /// The earliest expiry among the records that counted.
    pub valid_until: Expiry,
}

impl ObjectPerms {
    /// As Twizzler's `PermsInfo`: `provide` is what holds everywhere, so a caller that maps
    /// the whole object with it never over-grants.
    pub fn as_perms_info(&self) -> PermsInfo {
        PermsInfo {
            ctx: self.ctx,
            provide: self.everywhere,
            restrict: self.restrict,
            valid_until: self.valid_until,
        }
    }
}

/// How much a verdict explains a denial: a record that is invalid says more than one that is
/// for another context.
pub(crate) fn rank(v: &Verdict) -> u8 {
    match v {
        Verdict::Invalid(_) => 7,
        Verdict::NotAnEntry => 6,
        Verdict::OutsideGate => 5,
        Verdict::NoUsefulRights => 4,
        Verdict::WrongHolder(_) => 3,
        Verdict::WrongTarget(_) => 2,
        Verdict::Malformed(_) => 1,
        Verdict::Counted(_) | Verdict::Redundant => 0,
    }
}

/// The pages lying wholly inside `gate`.
fn full_pages(gate: &Gate) -> Range<u64> {
    let first = gate.offset().div_ceil(PAGE_SIZE);
    let end = gate.end() / PAGE_SIZE;
    first..end.max(first)
}

/// Every page of an object but the null page.
const OBJECT_PAGES: Range<u64> = 1..MAX_OBJECT_SIZE / PAGE_SIZE;

impl CachedPerms {
    /// The value of an unused way: all zero bytes.
    const UNUSED: CachedPerms = CachedPerms {
        ctx: ObjID::new(0),
        target: ObjID::new(0),
        stamp: Stamp::ZERO,
        valid_until: Expiry::NEVER,
        allowed: Protections::empty(),
        flags: CtxFlags::empty(),
        grants: [None; MAX_GRANTS],
        complete: false,
        seen: false,
        failure: Failure::None,
        deps: Deps::EMPTY,
    };

    /// An entry with no grants yet.
    pub fn new(
        ctx: ObjID,
        target: ObjID,
        stamp: Stamp,
        allowed: Protections,
        flags: CtxFlags,
    ) -> Self {
        Self {
            ctx,
            target,
            stamp,
            allowed,
            flags,
            complete: true,
            ..Self::UNUSED
        }
    }

    /// Adds the grant of a record that counted and expires at `expires`.
    ///
    /// A grant that does not fit makes the entry incomplete (faults it cannot grant are then
    /// decided by the rule in full), but the entry still expires with it and depends on it:
    /// the entry is what every later expiry, revocation and eviction finds, and unmaps, for
    /// every page mapped under (context, object), whichever record granted it.
    pub fn add_grant(&mut self, grant: Grant, expires: Expiry) {
        self.valid_until = self.valid_until.min(expires);
        let same = self
            .grants
            .iter_mut()
            .flatten()
            .find(|g| g.gate == grant.gate);
        if let Some(same) = same {
            same.prots |= grant.prots;
        } else if let Some(slot) = self.grants.iter_mut().find(|g| g.is_none()) {
            *slot = Some(grant);
        } else {
            self.complete = false;
        }
    }

    /// Notes a record that did not count, keeping the most telling reason.
    pub fn add_failure(&mut self, v: Verdict) {
        if self.failure.get().is_none_or(|f| rank(&v) > rank(&f)) {
            self.failure = Failure::Some(v);
        }
    }

    /// Why `access`, which needs `needed`, is not granted, from what the entry remembers:
    /// no record is read or verified again.
    pub fn deny_cause(&self, access: &Access, needed: Protections) -> DenyCause {
        let mut unmasked = self.stamp.default_prots;
        let mut best = self.failure.get();
        for g in self.grants() {
            match g.contribution(access) {
                Ok(c) => unmasked |= c,
                Err(v) => {
                    if best.is_none_or(|b| rank(&v) > rank(&b)) {
                        best = Some(v);
                    }
                }
            }
        }
        let perms = self.evaluate(access).perms;
        if unmasked.contains(needed) && !perms.grants(needed) {
            DenyCause::Masked {
                removed: needed & perms.restrict,
            }
        } else if let Some(v) = best {
            DenyCause::Record(v)
        } else if self.seen {
            DenyCause::Record(Verdict::NoUsefulRights)
        } else {
            DenyCause::NoRecord
        }
    }

    /// The grants held.
    pub fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.grants.iter().flatten()
    }

    /// Whether the entry may serve a fault with `stamp` at `now`.
    fn is_fresh(&self, stamp: &Stamp, now: u64) -> bool {
        self.stamp == *stamp && !self.valid_until.is_expired(now)
    }

    /// The rule, from the verified grants: what `access` is provided.
    pub fn evaluate(&self, access: &Access) -> Evaluated {
        if access.page() == 0 {
            // The engine refuses the null page before it gets here; the rule refuses it too.
            return Evaluated {
                perms: PermsInfo {
                    ctx: self.ctx,
                    provide: Protections::empty(),
                    restrict: Protections::all(),
                    valid_until: self.valid_until,
                },
                pages: 0..0,
            };
        }
        let mut unmasked = self.stamp.default_prots;
        let mut pages = OBJECT_PAGES;
        let data = Protections::READ | Protections::WRITE;
        for g in self.grants() {
            if let Ok(c) = g.contribution(access) {
                unmasked |= c;
                if g.prots.intersects(data) && g.gate.covers_page(access.page()) {
                    let p = full_pages(&g.gate);
                    pages = pages.start.max(p.start)..pages.end.min(p.end);
                }
            }
        }
        Evaluated {
            perms: PermsInfo {
                ctx: self.ctx,
                provide: unmasked & self.allowed,
                restrict: Protections::all() & !self.allowed,
                valid_until: self.valid_until,
            },
            pages,
        }
    }

    /// The rights on the object as a whole. An incomplete entry may under-report them, never
    /// over-report.
    pub fn object_perms(&self) -> ObjectPerms {
        let data = Protections::READ | Protections::WRITE;
        let code = Protections::READ | Protections::EXEC;
        let mut everywhere = self.stamp.default_prots;
        let mut somewhere = self.stamp.default_prots;
        for g in self.grants() {
            let covered = full_pages(&g.gate);
            let all_pages = covered.start <= OBJECT_PAGES.start && covered.end >= OBJECT_PAGES.end;
            if !covered.is_empty() {
                somewhere |= g.prots & data;
            }
            if all_pages {
                everywhere |= g.prots & data;
            }
            if g.prots.contains(Protections::EXEC) {
                everywhere |= g.prots & code;
                somewhere |= g.prots & code;
            }
        }
        ObjectPerms {
            ctx: self.ctx,
            everywhere: everywhere & self.allowed,
            somewhere: somewhere & self.allowed,
            restrict: Protections::all() & !self.allowed,
            valid_until: self.valid_until,
        }
    }
}

/// One set: its ways, which of them are in use, the next victim, and how many hits it served
/// (counted here, under the lock the hit holds anyway, rather than in an atomic every CPU's
/// hits would share).
struct Set {
    ways: [CachedPerms; WAYS],
    live: [bool; WAYS],
    victim: u8,
    hits: u64,
}

impl Set {
    const EMPTY: Set = Set {
        ways: [CachedPerms::UNUSED; WAYS],
        live: [false; WAYS],
        victim: 0,
        hits: 0,
    };

    fn find(&self, ctx: ObjID, target: ObjID) -> Option<usize> {
        (0..WAYS)
            .find(|&i| self.live[i] && self.ways[i].ctx == ctx && self.ways[i].target == target)
    }
}

/// A bounded, set-associative cache of verified decisions.
pub struct VerifyCache {
    sets: [Mutex<Set>; SETS],
    /// Per set, how many entries have left it: bumped under the set's lock by every removal
    /// and eviction, before anything is unmapped (see [`crate::MapTicket`]).
    removals: [AtomicU64; SETS],
}

impl Default for VerifyCache {
    fn default() -> Self {
        Self::new()
    }
}

/// The key and expiry of an entry that was removed from the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Removed {
    /// The context.
    pub ctx: ObjID,
    /// The object.
    pub target: ObjID,
}

impl VerifyCache {
    /// An empty cache.
    pub const fn new() -> Self {
        Self {
            sets: [const { Mutex::new(Set::EMPTY) }; SETS],
            removals: [const { AtomicU64::new(0) }; SETS],
        }
    }

    fn set(&self, ctx: ObjID, target: ObjID) -> (usize, &Mutex<Set>) {
        // Object ids are often sequential: fold every bit of both ids into one word, then
        // take the *top* bits of a multiplicative hash, which depend on all of the input.
        let fold = |id: ObjID| (id.raw() as u64) ^ ((id.raw() >> 64) as u64).rotate_left(32);
        let x = fold(target) ^ fold(ctx).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        let h = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // SETS is a power of two: the top log2(SETS) bits index it.
        let i = (h >> (u64::BITS - SETS.trailing_zeros())) as usize % SETS;
        (i, &self.sets[i])
    }

    /// The ticket of a decision served from set `i` now (call with the set locked).
    fn ticket(&self, i: usize) -> MapTicket {
        MapTicket(Ticket::Entry {
            // SETS fits a u16.
            set: i as u16,
            removals: self.removals[i].load(Ordering::Acquire),
        })
    }

    /// Notes that an entry left set `i` (call with the set locked).
    fn removed_from(&self, i: usize) {
        self.removals[i].fetch_add(1, Ordering::AcqRel);
    }

    /// Whether no entry has left the set `ticket` names since it was taken.
    pub fn is_current(&self, ticket: &MapTicket) -> Option<bool> {
        match ticket.0 {
            Ticket::Entry { set, removals } => Some(
                self.removals
                    .get(usize::from(set))
                    .is_some_and(|r| r.load(Ordering::Acquire) == removals),
            ),
            _ => None,
        }
    }

    /// Runs `f` on the fresh entry for (`ctx`, `target`), if there is one. `f` runs under the
    /// set's lock: it must only compute.
    pub fn with_fresh<R>(
        &self,
        ctx: ObjID,
        target: ObjID,
        stamp: &Stamp,
        now: u64,
        f: impl FnOnce(&CachedPerms) -> R,
    ) -> Option<(R, MapTicket)> {
        let (si, set) = self.set(ctx, target);
        let mut set = set.lock();
        let i = set.find(ctx, target)?;
        let e = &set.ways[i];
        if !e.is_fresh(stamp, now) {
            return None;
        }
        let r = f(e);
        set.hits = set.hits.wrapping_add(1);
        Some((r, self.ticket(si)))
    }

    /// Hits served so far.
    pub fn hits(&self) -> u64 {
        self.sets.iter().map(|s| s.lock().hits).sum()
    }

    /// Inserts `entry`, replacing the entry for the same key if there is one. Returns the
    /// key of another entry it evicted, whose mappings must go, and the ticket of decisions
    /// served from the inserted entry.
    pub fn insert(&self, entry: CachedPerms) -> (Option<Removed>, MapTicket) {
        let (si, set) = self.set(entry.ctx, entry.target);
        let mut set = set.lock();
        let slot = set
            .find(entry.ctx, entry.target)
            .or_else(|| set.live.iter().position(|l| !l));
        let (slot, evicted) = match slot {
            Some(i) => (i, None),
            None => {
                let i = usize::from(set.victim) % WAYS;
                set.victim = set.victim.wrapping_add(1);
                let old = &set.ways[i];
                (
                    i,
                    Some(Removed {
                        ctx: old.ctx,
                        target: old.target,
                    }),
                )
            }
        };
        if evicted.is_some() {
            self.removed_from(si);
        }
        set.ways[slot] = entry;
        set.live[slot] = true;
        (evicted, self.ticket(si))
    }

    /// Visits every entry, one set at a time; those for which `keep` returns false are
    /// removed. `keep` runs under the set's lock (it must only compute); `removed` runs after
    /// the lock is released, once for each entry removed from that set, so it may call out.
    pub fn retain(
        &self,
        mut keep: impl FnMut(&mut CachedPerms) -> bool,
        mut removed: impl FnMut(Removed),
    ) {
        for (si, set) in self.sets.iter().enumerate() {
            let mut gone: [Option<Removed>; WAYS] = [None; WAYS];
            {
                let mut set = set.lock();
                let Set { ways, live, .. } = &mut *set;
                for ((way, live), gone) in ways.iter_mut().zip(live.iter_mut()).zip(&mut gone) {
                    if *live && !keep(way) {
                        *live = false;
                        *gone = Some(Removed {
                            ctx: way.ctx,
                            target: way.target,
                        });
                    }
                }
                if gone.iter().any(Option::is_some) {
                    self.removed_from(si);
                }
            }
            for r in gone.into_iter().flatten() {
                removed(r);
            }
        }
    }

    /// Number of entries held.
    pub fn len(&self) -> usize {
        self.sets
            .iter()
            .map(|s| s.lock().live.iter().filter(|l| **l).count())
            .sum()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
