//! [`Snapshot`]: the part of an entry a lookup reads, and the rule computed from it.

use core::ops::Range;

use twizzler_capsec::{
    Access, CtxFlags, Expiry, Gate, Grant, MAX_OBJECT_SIZE, ObjID, PAGE_SIZE, PermsInfo,
    Protections,
};

use super::MAX_GRANTS;
use super::entry::{FlowState, Stamp};

/// The part of a [`CachedPerms`](super::CachedPerms) a lookup reads: everything
/// [`Snapshot::evaluate`] needs. Lock-free lookups read it from the set's mirror,
/// [`HOT_WORDS`](super::HOT_WORDS) words (see [`Snapshot::encode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
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
    pub(super) grants: [Option<Grant>; MAX_GRANTS],
    /// Whether every record filed under the object was judged and every one that counts is
    /// among the grants (or subsumed by one): then a denial from the entry is the rule's. An
    /// entry built for one access verifies only what that access needed, and is incomplete
    /// when other records were left for later.
    pub complete: bool,
    /// The flow mask (`docs/DIFC.md` §3.1): `R|X` if the object is readable at the
    /// context's labels, `W` if writable; applied to every right the entry provides.
    pub flow: Protections,
    /// How far the flow mask was worked out.
    pub flow_state: FlowState,
}

impl Snapshot {
    /// What a data access and a code access (by a thread already in the context) get on any
    /// page but the null page, when every grant with data rights covers the whole object, so
    /// that the answer does not depend on the page: `(data, code)`, after the masks. `None`
    /// otherwise. [`Snapshot::evaluate`] gives the same rights on every such access (a
    /// property test checks it), with the pages `1..` the end of the object.
    pub fn summary(&self) -> Option<(Protections, Protections)> {
        self.summary_caps()
            .map(|(data, code)| (data & self.flow, code & self.flow))
    }

    /// [`Snapshot::summary`] before the flow mask: what the capabilities alone provide.
    pub fn summary_caps(&self) -> Option<(Protections, Protections)> {
        let data_bits = Protections::READ | Protections::WRITE;
        let code_bits = Protections::READ | Protections::EXEC;
        let mut data = self.stamp.default_prots;
        let mut code = self.stamp.default_prots;
        for g in self.grants() {
            if g.prots.intersects(data_bits) {
                let p = full_pages(&g.gate);
                if p.start > OBJECT_PAGES.start || p.end < OBJECT_PAGES.end {
                    return None;
                }
                data |= g.prots & data_bits;
                code |= g.prots & data_bits;
            }
            if g.prots.contains(Protections::EXEC) {
                code |= g.prots & code_bits;
            }
        }
        Some((data & self.allowed, code & self.allowed))
    }

    /// Whether the flow rule lets everything through, for good (every label empty, or
    /// labels that allow every flow): then a denial from the entry is the capabilities'.
    #[inline]
    pub fn flow_is_all(&self) -> bool {
        self.flow_state == FlowState::Resolved && self.flow.contains(Protections::all())
    }

    /// Whether the entry's answer for `access` needing `needed` is the rule's: it grants,
    /// or its capability grants are complete and refuse, or the capabilities grant and the
    /// flow was worked out far enough to refuse.
    pub fn decides(&self, access: &Access, needed: Protections) -> bool {
        if self.evaluate(access).perms.grants(needed) {
            return true;
        }
        if !self.evaluate_caps(access).perms.grants(needed) {
            return self.complete;
        }
        match self.flow_state {
            FlowState::Resolved => true,
            FlowState::WriteUnresolved => !needed.contains(Protections::WRITE),
            FlowState::Unevaluated => false,
        }
    }

    /// The grants held.
    pub fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.grants.iter().flatten()
    }

    /// Whether the entry may serve a fault with `stamp` at `now`.
    #[inline]
    pub fn is_fresh(&self, stamp: &Stamp, now: u64) -> bool {
        self.is_fresh_when(stamp, || now)
    }

    /// [`Snapshot::is_fresh`] at the time `now` gives, asked only if the entry expires.
    #[inline]
    pub fn is_fresh_when(&self, stamp: &Stamp, now: impl FnOnce() -> u64) -> bool {
        self.stamp == *stamp && unexpired(self.valid_until, now)
    }
}

/// Whether something that holds until `valid_until` still holds at the time `now` gives: the
/// time is asked only if it expires at all, so a hit on grants that never expire reads no
/// clock.
#[inline(always)]
pub(crate) fn unexpired(valid_until: Expiry, now: impl FnOnce() -> u64) -> bool {
    valid_until == Expiry::NEVER || !valid_until.is_expired(now())
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

pub(super) fn full_pages(gate: &Gate) -> Range<u64> {
    full_pages_of(gate.offset(), gate.end())
}

/// The pages a byte range `offset..end` covers in full (empty when it covers none).
#[inline(always)]
pub(super) fn full_pages_of(offset: u64, end: u64) -> Range<u64> {
    let first = offset.div_ceil(PAGE_SIZE);
    first..(end / PAGE_SIZE).max(first)
}

/// Every page of an object but the null page.
pub(crate) const OBJECT_PAGES: Range<u64> = 1..MAX_OBJECT_SIZE / PAGE_SIZE;

impl Snapshot {
    /// The rule, from the verified grants and the flow mask: what `access` is provided.
    #[inline]
    pub fn evaluate(&self, access: &Access) -> Evaluated {
        let mut e = self.evaluate_caps(access);
        e.perms.provide &= self.flow;
        e
    }

    /// The capability rule alone, from the verified grants: what `access` is provided before
    /// the flow mask (what a denial by the capabilities reports).
    #[inline]
    pub fn evaluate_caps(&self, access: &Access) -> Evaluated {
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
            everywhere: everywhere & self.allowed & self.flow,
            somewhere: somewhere & self.allowed & self.flow,
            restrict: Protections::all() & !self.allowed,
            valid_until: self.valid_until,
        }
    }
}
