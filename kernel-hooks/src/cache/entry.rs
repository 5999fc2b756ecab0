//! An entry of the cache: what it was derived from ([`Stamp`]), what it depends on
//! ([`Deps`]), why records did not count ([`Failure`]), and the entry itself
//! ([`CachedPerms`]).

use twizzler_capsec::{
    Access, CtxFlags, Expiry, FlowDenial, FlowResult, Gate, Grant, LabelId, ObjID, PAGE_SIZE,
    PrincipalLabels, Protections, RecordId, Verdict,
};

use super::MAX_GRANTS;
use super::snapshot::Snapshot;
use super::words::{HOT_WORDS, W_EPOCH, key_words};
use crate::fault::DenyCause;
use crate::host::ObjectInfo;
use crate::seqset::{KEY_WORDS, Mirrored};

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
    /// The object's data label (`docs/DIFC.md` §1.3), as the fault carries it.
    pub label: LabelId,
}

impl Stamp {
    /// What an entry for an object with metadata `object` is stamped with under `epoch`
    /// (and what a fault on it must match to be served from the entry).
    #[inline]
    pub fn of(epoch: u64, object: &ObjectInfo) -> Self {
        Self {
            epoch,
            kuid: object.kuid,
            default_prots: object.default_prots,
            label: object.label,
        }
    }

    pub(super) const ZERO: Stamp = Stamp {
        epoch: 0,
        kuid: None,
        default_prots: Protections::empty(),
        label: LabelId::EMPTY,
    };
}

/// How far an entry's flow mask ([`Snapshot::flow`]) was worked out (`docs/DIFC.md` §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FlowState {
    /// Not evaluated: the capabilities refused every access the entry was built for, and
    /// some label is not empty. The mask is empty; an access the capabilities grant misses.
    Unevaluated = 0,
    /// Evaluated in full: the mask is the rule's.
    Resolved = 1,
    /// Reads resolved; `W` needs ownership nobody asked for yet (no write needed it): the
    /// mask lacks `W`, and a write the capabilities grant misses and resolves it.
    WriteUnresolved = 2,
}

impl FlowState {
    pub(super) fn from_bits(b: u64) -> Self {
        match b {
            1 => Self::Resolved,
            2 => Self::WriteUnresolved,
            _ => Self::Unevaluated,
        }
    }
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
        self.add_fingerprint(Self::fingerprint(id));
    }

    fn add_fingerprint(&mut self, fp: u64) {
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

    /// Adds `other`'s dependencies.
    pub fn merge(&mut self, other: &Deps) {
        for k in &other.kuids[..usize::from(other.n_kuids)] {
            self.add_kuid(*k);
        }
        for fp in &other.records[..usize::from(other.n_records)] {
            self.add_fingerprint(*fp);
        }
        self.overflow |= other.overflow;
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

/// An optional value an entry keeps. Not an `Option<T>`: that one's `None` may be a niche value
/// of `T`'s tag, not zero bytes, and an unused entry must be all zero bytes so that a `static`
/// engine lives in `.bss` (with `Option<Verdict>` it moved 194 KB into `.data`). `None` is
/// tag 0 here, whatever `T` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kept<T> {
    /// Nothing kept.
    None = 0,
    /// The value.
    Some(T) = 1,
}

impl<T> Kept<T> {
    /// As an `Option`.
    pub fn get(self) -> Option<T> {
        match self {
            Self::None => None,
            Self::Some(v) => Some(v),
        }
    }
}

/// The failure an entry keeps: the most telling record that did not count.
pub type Failure = Kept<Verdict>;

/// Why the flow rule refuses what it refuses, kept with the entry (nothing when it refuses
/// nothing or was not evaluated).
pub type FlowWhy = Kept<FlowDenial>;

/// The verified grants of one context for one object: what lookups read ([`Snapshot`]), and
/// what explains a denial and finds the entry at a revocation.
#[derive(Clone, Copy, Debug)]
pub struct CachedPerms {
    /// What lookups read.
    pub snap: Snapshot,
    /// Whether the context files any record under the object.
    pub seen: bool,
    /// Why the most telling record that did not count failed (malformed, bound elsewhere,
    /// invalid, unchecked past the budget): kept so a denial is explained without reading or
    /// verifying anything again.
    pub failure: Failure,
    /// What it depends on.
    pub deps: Deps,
    /// The principal labels of the context the flow was computed from (read by sweeps and
    /// explanations, never by a hit).
    pub ctx_labels: PrincipalLabels<LabelId>,
    /// Why the flow rule refuses, when it does (explains a [`crate::Violation::Flow`]).
    pub flow_why: FlowWhy,
}

/// How much a verdict explains a denial: a record that is invalid says more than one that is
/// for another context.
fn rank(v: &Verdict) -> u8 {
    match v {
        Verdict::Invalid(_) => 7,
        Verdict::NotAnEntry => 6,
        Verdict::OutsideGate => 5,
        Verdict::NoUsefulRights => 4,
        Verdict::WrongHolder(_) => 3,
        Verdict::WrongTarget(_) => 2,
        Verdict::Malformed(_) => 1,
        Verdict::Counted(_) | Verdict::Redundant | Verdict::Ownership => 0,
    }
}

/// Whether grant `g` gives everything `h` would, on every access: at least its rights, on a
/// gate containing its gate (range and entry points).
fn subsumes(g: &Grant, h: &Grant) -> bool {
    g.prots.contains(h.prots) && g.gate.contains(&h.gate)
}

/// Whether `b`'s range starts where `a`'s ends, or `a`'s where `b`'s ends, at a page boundary,
/// with the same alignment: then their union is one gate covering exactly the pages, and
/// allowing exactly the entry points, that one of them does.
fn extends(a: &Gate, b: &Gate) -> bool {
    join(a, b).is_some()
}

/// The union of two gates that [`extends`] joins.
fn join(a: &Gate, b: &Gate) -> Option<Gate> {
    if a.align() != b.align() {
        return None;
    }
    let (lo, hi) = if a.end() == b.offset() {
        (a, b)
    } else if b.end() == a.offset() {
        (b, a)
    } else {
        return None;
    };
    if !lo.end().is_multiple_of(PAGE_SIZE) {
        return None;
    }
    Gate::new(lo.offset(), hi.end() - lo.offset(), lo.align()).ok()
}

impl CachedPerms {
    /// The value of an unused way: all zero bytes.
    const UNUSED: CachedPerms = CachedPerms {
        snap: Snapshot {
            ctx: ObjID::new(0),
            target: ObjID::new(0),
            stamp: Stamp::ZERO,
            valid_until: Expiry::NEVER,
            allowed: Protections::empty(),
            flags: CtxFlags::empty(),
            grants: [None; MAX_GRANTS],
            complete: false,
            flow: Protections::empty(),
            flow_state: FlowState::Unevaluated,
        },
        seen: false,
        failure: Failure::None,
        deps: Deps::EMPTY,
        ctx_labels: PrincipalLabels {
            read: LabelId::EMPTY,
            write: LabelId::EMPTY,
        },
        flow_why: FlowWhy::None,
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
            snap: Snapshot {
                ctx,
                target,
                stamp,
                allowed,
                flags,
                complete: true,
                ..Self::UNUSED.snap
            },
            ..Self::UNUSED
        }
    }

    /// An entry with no grants yet whose flow is everything: for a context and an object
    /// without labels (today's rule).
    pub fn unlabelled(
        ctx: ObjID,
        target: ObjID,
        stamp: Stamp,
        allowed: Protections,
        flags: CtxFlags,
    ) -> Self {
        let mut e = Self::new(ctx, target, stamp, allowed, flags);
        e.set_flow(PrincipalLabels::steady(LabelId::EMPTY), &FlowResult::ALL);
        e
    }

    /// Adds the grant of a record that counted and expires at `expires`.
    ///
    /// The entry expires with every grant it ever took (its `valid_until` only moves earlier)
    /// and depends on every record its builders consulted: the entry is what every later
    /// expiry, revocation and eviction finds, and unmaps, for every page mapped under
    /// (context, object), whichever record granted it. A grant that another already holds
    /// (rights and gate) adds only its expiry; one with the same gate widens that grant's
    /// rights; one whose data range continues another's at a page boundary, with the same
    /// rights and alignment, extends it (exactly the same pages and entry points). When none
    /// of that applies and every slot is taken, the oldest grant is dropped from the slots (its
    /// expiry and dependencies stay) and the entry is incomplete: a fault the remaining grants
    /// do not serve is decided by reading the records again. Returns whether a grant was
    /// dropped.
    pub fn add_grant(&mut self, grant: Grant, expires: Expiry) -> bool {
        let snap = &mut self.snap;
        snap.valid_until = snap.valid_until.min(expires);
        if snap.grants().any(|g| subsumes(g, &grant)) {
            return false;
        }
        let same = snap.grants.iter_mut().flatten().find(|g| {
            g.gate == grant.gate || (g.prots == grant.prots && extends(&g.gate, &grant.gate))
        });
        if let Some(same) = same {
            if same.gate == grant.gate {
                same.prots |= grant.prots;
            } else if let Some(joined) = join(&same.gate, &grant.gate) {
                same.gate = joined;
            }
            return false;
        }
        if let Some(slot) = snap.grants.iter_mut().find(|g| g.is_none()) {
            *slot = Some(grant);
            return false;
        }
        // Every slot is taken: the oldest grant leaves the slots (not the entry's expiry or
        // dependencies), the new one takes the last slot.
        snap.grants.rotate_left(1);
        if let Some(last) = snap.grants.last_mut() {
            *last = Some(grant);
        }
        snap.complete = false;
        true
    }

    /// Whether the entry's grants already give everything `grant` would, on every access.
    pub fn subsumes(&self, grant: &Grant) -> bool {
        self.snap.grants().any(|g| subsumes(g, grant))
    }

    /// Adds what `other`, an entry for the same (context, object) with the same stamp, knows:
    /// its grants, expiry, dependencies and failures. The result is complete if either was and
    /// no grant was dropped on the way (a complete entry holds every record that counts, so
    /// the union does too).
    pub fn merge(&mut self, other: &CachedPerms) {
        let complete = self.snap.complete || other.snap.complete;
        let mut dropped = false;
        self.snap.valid_until = self.snap.valid_until.min(other.snap.valid_until);
        for g in other.snap.grants() {
            dropped |= self.add_grant(*g, other.snap.valid_until);
        }
        self.snap.complete = complete && !dropped;
        self.seen |= other.seen;
        if let Some(v) = other.failure.get() {
            self.add_failure(v);
        }
        self.deps.merge(&other.deps);
        self.merge_flow(
            other.ctx_labels,
            other.snap.flow,
            other.snap.flow_state,
            other.flow_why,
        );
    }

    /// Sets the flow the rule gave (`docs/DIFC.md` §3.1) for the entry's labels.
    ///
    /// A denial made under a transitional row (`read` ≠ `write`, §4.2) is not kept as the
    /// rule's: the row becomes the final label without a sweep, and the final label may allow
    /// what the transitional one refused. Such a flow is kept as not evaluated (its mask
    /// still serves what it grants), so the refused access is decided again.
    pub fn set_flow(&mut self, labels: PrincipalLabels<LabelId>, flow: &FlowResult) {
        let state = if flow.denial.is_some() && !labels.is_steady() {
            FlowState::Unevaluated
        } else if flow.write_unresolved {
            FlowState::WriteUnresolved
        } else {
            FlowState::Resolved
        };
        let why = flow.denial.map_or(FlowWhy::None, FlowWhy::Some);
        self.merge_flow(labels, flow.mask, state, why);
    }

    /// Takes in a flow worked out for the same labels (the same stamp): the more resolved
    /// one wins (a write resolved beats one left unresolved, anything beats not evaluated);
    /// two equally resolved ones are the same rule on the same labels, and their masks agree.
    fn merge_flow(
        &mut self,
        labels: PrincipalLabels<LabelId>,
        mask: Protections,
        state: FlowState,
        why: FlowWhy,
    ) {
        let rank = |s: FlowState| match s {
            FlowState::Unevaluated => 0,
            FlowState::WriteUnresolved => 1,
            FlowState::Resolved => 2,
        };
        if rank(state) > rank(self.snap.flow_state) {
            self.ctx_labels = labels;
            self.snap.flow = mask;
            self.snap.flow_state = state;
            self.flow_why = why;
        } else if state == FlowState::Unevaluated && self.snap.flow_state == FlowState::Unevaluated
        {
            // A denial worked out under a transitional row is not kept as the flow, but it
            // still explains the decision it was worked out for. Nothing serves a denial from
            // an unevaluated flow (a hit needs it resolved), so this is explanation only.
            self.flow_why = why;
        }
    }

    /// Takes `W` away from the entry's flow, leaving it to be resolved again by the next
    /// write (`docs/DIFC.md` §4.2: a principal-label change that makes only writes unsafe),
    /// under the transitional `labels`. A flow that refused reads is forgotten (not
    /// evaluated: nothing was mapped from it, and the new label may allow them). Returns
    /// whether anything changed.
    pub fn narrow_writes(&mut self, labels: PrincipalLabels<LabelId>) -> bool {
        self.ctx_labels = labels;
        let before = (self.snap.flow, self.snap.flow_state);
        if self.snap.flow_state != FlowState::Unevaluated {
            self.snap.flow.remove(Protections::WRITE);
            self.snap.flow_state = if self.snap.flow.contains(Protections::READ) {
                FlowState::WriteUnresolved
            } else {
                self.snap.flow = Protections::empty();
                FlowState::Unevaluated
            };
            self.flow_why = FlowWhy::None;
        }
        before != (self.snap.flow, self.snap.flow_state)
    }

    /// Why the flow rule refuses `needed` on this entry, if the capabilities grant it and
    /// the flow does not.
    pub fn flow_denial(&self, access: &Access, needed: Protections) -> Option<FlowDenial> {
        let caps = self.snap.evaluate_caps(access).perms;
        if !caps.grants(needed) || self.snap.evaluate(access).perms.grants(needed) {
            return None;
        }
        Some(self.flow_why.get().unwrap_or(FlowDenial::LabelUnknown))
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
        self.explain(access)
            .cause(self.snap.allowed, self.seen, access.page(), needed)
    }

    /// What the entry's grants say about `access`, before masks (see [`Explanation`]).
    pub fn explain(&self, access: &Access) -> Explanation {
        let mut unmasked = self.snap.stamp.default_prots;
        let mut best = self.failure.get();
        for g in self.snap.grants() {
            match g.contribution(access) {
                Ok(c) => unmasked |= c,
                Err(v) => {
                    if best.is_none_or(|b| rank(&v) > rank(&b)) {
                        best = Some(v);
                    }
                }
            }
        }
        Explanation { unmasked, best }
    }
}

/// What an entry knows about one access: the rights its grants and the default protections
/// contribute before masks, and the most telling reason a record contributed nothing.
/// [`Explanation::cause`] turns it into a denial's cause. For a thread already in the
/// context, on an entry whose data grants all cover the whole object, it is the same on
/// every page but the null page, so the cache mirrors it for data and for code accesses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The rights contributed, before masks.
    pub unmasked: Protections,
    /// The most telling failure, of a record or of a grant for this access.
    pub best: Option<Verdict>,
}

impl Explanation {
    /// Why an access on `page` needing `needed` is denied, masks `allowed` applied, by a
    /// context that files a record for the object (`seen`) or not.
    pub fn cause(
        &self,
        allowed: Protections,
        seen: bool,
        page: u64,
        needed: Protections,
    ) -> DenyCause {
        // What `Snapshot::evaluate` provides: the same contributions, masked (it provides
        // nothing on the null page, which no fault reaches here with).
        let provide = if page == 0 {
            Protections::empty()
        } else {
            self.unmasked & allowed
        };
        let restrict = Protections::all() & !allowed;
        if self.unmasked.contains(needed) && needed & !restrict & provide != needed {
            DenyCause::Masked {
                removed: needed & restrict,
            }
        } else if let Some(v) = self.best {
            DenyCause::Record(v)
        } else if seen {
            DenyCause::Record(Verdict::NoUsefulRights)
        } else {
            DenyCause::NoRecord
        }
    }
}

impl Mirrored<HOT_WORDS> for CachedPerms {
    const UNUSED: Self = CachedPerms::UNUSED;

    fn hot(&self) -> [u64; HOT_WORDS] {
        self.encode()
    }

    fn key(&self) -> [u64; KEY_WORDS] {
        key_words(self.snap.ctx, self.snap.target)
    }

    const STAMP_WORD: usize = W_EPOCH;

    fn stamp_word(&self) -> u64 {
        self.snap.stamp.epoch
    }
}
