//! The permission rule the kernel enforces, as a pure function.
//!
//! ```text
//! provide = default_prots(T) | union of what the records of C for T that count contribute
//! provide = provide & mask(T).permmask & (C.global_mask | mask(T).ovrmask)
//!           (no mask for T: provide & C.global_mask)
//! granted iff A & !restrict & provide == A
//! ```
//!
//! The null page (bytes `0..4096`) is never granted: for an access there the result provides
//! nothing and restricts everything, whatever the context holds.
//!
//! A record counts if it decodes, its target is `T` and its holder (accessor or receiver) is
//! `C`, it is not revoked or expired, its signature chain verifies, and its gate admits the
//! access:
//!
//! - for data (any access, rights `R` and `W`) the gate must cover the whole faulting page;
//! - for code (an instruction fetch, rights `R` and `X`) the record grants execution of the
//!   whole object, but when the fetch would switch the thread into `C`
//!   ([`Access::enter`]) the faulting offset must be one of the gate's entry points.
//!
//! Records are checked cheaply (binding, gate) before any signature work, and a record that
//! could add nothing to what is already provided is not verified at all.

use crate::ctx::{CtxMem, SecCtx};
use crate::error::{DecodeError, VerifyError};
use crate::gate::Gate;
use crate::ids::{ObjID, PAGE_SIZE, Protections};
use crate::record::{Authority, Record};
use crate::time::Expiry;

/// How a thread touched an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// A load: needs `R`.
    Read,
    /// A store: needs `R|W`.
    Write,
    /// An instruction fetch: needs `R|X`.
    Exec,
}

impl AccessKind {
    /// The rights the access needs.
    #[inline]
    pub const fn required(self) -> Protections {
        match self {
            Self::Read => Protections::READ,
            Self::Write => Protections::READ.union(Protections::WRITE),
            Self::Exec => Protections::READ.union(Protections::EXEC),
        }
    }
}

/// A faulting access: its kind, the byte offset within the object, and whether it would
/// switch the thread into the context being evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// The kind of access.
    pub kind: AccessKind,
    /// Byte offset of the faulting address within the object.
    pub offset: u64,
    /// An instruction fetch that would switch the thread into this context: the offset must
    /// be an entry point of a code gate.
    pub entering: bool,
}

impl Access {
    /// A read at `offset`.
    pub const fn read(offset: u64) -> Self {
        Self {
            kind: AccessKind::Read,
            offset,
            entering: false,
        }
    }

    /// A write at `offset`.
    pub const fn write(offset: u64) -> Self {
        Self {
            kind: AccessKind::Write,
            offset,
            entering: false,
        }
    }

    /// An instruction fetch at `offset` by a thread already running in the context.
    pub const fn exec(offset: u64) -> Self {
        Self {
            kind: AccessKind::Exec,
            offset,
            entering: false,
        }
    }

    /// An instruction fetch at `offset` that would switch the thread into the context.
    pub const fn enter(offset: u64) -> Self {
        Self {
            kind: AccessKind::Exec,
            offset,
            entering: true,
        }
    }

    /// The same access, marked as switching into the context evaluated (for fetches) or
    /// unchanged (for data accesses, where entry points do not apply).
    pub const fn as_entering(self) -> Self {
        Self {
            entering: matches!(self.kind, AccessKind::Exec),
            ..self
        }
    }

    /// The page the access falls in.
    #[inline]
    pub const fn page(&self) -> u64 {
        self.offset / PAGE_SIZE
    }
}

/// The outcome of evaluating one context for one object and page, as Twizzler's kernel uses
/// it, extended with the validity window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PermsInfo {
    /// The context evaluated.
    pub ctx: ObjID,
    /// Rights provided for the page (already masked).
    pub provide: Protections,
    /// Rights this context's masks forbid for the object, whatever the records say.
    pub restrict: Protections,
    /// The earliest expiry among the records that counted: the result is valid until then.
    pub valid_until: Expiry,
}

impl PermsInfo {
    /// Whether the rights `access` are granted (`access & !restrict & provide == access`, the
    /// expression of Twizzler's fault handler).
    #[inline]
    pub fn grants(&self, access: Protections) -> bool {
        access & !self.restrict & self.provide == access
    }
}

/// Why a record did or did not count, for explanations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It counted and contributed these rights (before masks).
    Counted(Protections),
    /// It would add nothing to rights already provided, so it was not verified.
    Redundant,
    /// Its bytes do not decode.
    Malformed(DecodeError),
    /// It is filed under the object but grants another.
    WrongTarget(ObjID),
    /// It is for another context (a copy from elsewhere).
    WrongHolder(ObjID),
    /// Its gate does not cover the whole page (data), and it grants no execution.
    OutsideGate,
    /// The fetch would enter the context at an offset that is not one of its entry points.
    NotAnEntry,
    /// It grants none of the rights this access could use.
    NoUsefulRights,
    /// It is expired, revoked, or a signature or the chain does not verify.
    Invalid(VerifyError),
    /// It is an ownership record (`TAG` flag): never a data grant, skipped before any
    /// signature work.
    Ownership,
}

/// One record's verdict, passed to the observer of [`evaluate_explained`].
#[derive(Clone, Debug)]
pub struct RecordReport<'r> {
    /// Index of its entry in the context.
    pub index: usize,
    /// The record, if it decoded.
    pub record: Option<&'r Record>,
    /// What happened to it.
    pub verdict: Verdict,
}

/// What a record grants, once it counts: its rights and its gate. This is the part of a
/// record the rule needs after verification, so a cache of verified records can keep just
/// this and ask [`Grant::contribution`] for every later access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grant {
    /// The rights the record grants.
    pub prots: Protections,
    /// Its gate: a byte range for data, entry points for code.
    pub gate: Gate,
}

impl Grant {
    /// The data grant of `record` (no rights for an ownership record).
    pub fn of(record: &Record) -> Self {
        Self {
            prots: if record.is_ownership() {
                Protections::empty()
            } else {
                record.prots()
            },
            gate: record.gate(),
        }
    }

    /// What this grant contributes to `access`, before masks:
    ///
    /// - for data (any access, rights `R` and `W`) the gate must cover the whole faulting page;
    /// - for code (an instruction fetch, rights `R` and `X`) the grant covers the whole object,
    ///   but a fetch that switches into the context ([`Access::enter`]) must land on an entry
    ///   point of the gate.
    ///
    /// Errors with the verdict that explains why it contributes nothing.
    #[inline]
    pub fn contribution(&self, access: &Access) -> Result<Protections, Verdict> {
        let data_bits = Protections::READ | Protections::WRITE;
        let covers = self.gate.covers_page(access.page());
        let data = if covers {
            self.prots & data_bits
        } else {
            Protections::empty()
        };
        let code = if access.kind == AccessKind::Exec && self.prots.contains(Protections::EXEC) {
            if access.entering && !self.gate.allows_entry(access.offset) {
                if data.is_empty() {
                    return Err(Verdict::NotAnEntry);
                }
                Protections::empty()
            } else {
                self.prots & (Protections::READ | Protections::EXEC)
            }
        } else {
            Protections::empty()
        };
        let c = data | code;
        if c.is_empty() {
            return Err(if self.prots.intersects(data_bits) && !covers {
                Verdict::OutsideGate
            } else {
                Verdict::NoUsefulRights
            });
        }
        Ok(c)
    }

    /// Whether this grant adds a right in `want` to `access`: whether
    /// [`Grant::contribution`] is `Ok` and shares a right with `want`. The same answer without
    /// the verdict, for a scan that asks it of many records: a data access costs a page
    /// comparison and a mask.
    #[inline]
    pub fn adds(&self, access: &Access, want: Protections) -> bool {
        let gate = &self.gate;
        Wants::new(access, want).adds(self.prots, gate.offset(), gate.end(), gate.align())
    }
}

/// The rights context `ctx`'s masks let through for `target`:
/// `mask(T).permmask & (C.global_mask | mask(T).ovrmask)`, or `C.global_mask` when `T` has no
/// mask.
pub fn allowed_by_masks<M: ?Sized + CtxMem>(ctx: &SecCtx<'_, M>, target: ObjID) -> Protections {
    match ctx.mask(target) {
        Some(m) => m.permmask & (ctx.global_mask() | m.ovrmask),
        None => ctx.global_mask(),
    }
}

/// Evaluates context `ctx` (whose object id is `ctx_id`) for `access` to `target`.
pub fn evaluate<M: ?Sized + CtxMem>(
    ctx_id: ObjID,
    ctx: &SecCtx<'_, M>,
    target: ObjID,
    default_prots: Protections,
    auth: &impl Authority,
    access: Access,
    now: u64,
) -> PermsInfo {
    evaluate_explained(
        ctx_id,
        ctx,
        target,
        default_prots,
        auth,
        access,
        now,
        |_| {},
    )
}

/// [`evaluate`], reporting every record's verdict to `observe`.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_explained<M: ?Sized + CtxMem>(
    ctx_id: ObjID,
    ctx: &SecCtx<'_, M>,
    target: ObjID,
    default_prots: Protections,
    auth: &impl Authority,
    access: Access,
    now: u64,
    mut observe: impl FnMut(&RecordReport<'_>),
) -> PermsInfo {
    if access.page() == 0 {
        // The null page (bytes 0..4096 of every object) is never granted: not by default
        // protections, records or masks. No record is consulted.
        return PermsInfo {
            ctx: ctx_id,
            provide: Protections::empty(),
            restrict: Protections::all(),
            valid_until: Expiry::NEVER,
        };
    }
    let allowed = allowed_by_masks(ctx, target);
    let mut provide = default_prots;
    let mut valid_until = Expiry::NEVER;

    for entry in ctx.entries_for(target) {
        let record = match entry.record() {
            Ok(r) => r,
            Err(e) => {
                observe(&RecordReport {
                    index: entry.index,
                    record: None,
                    verdict: Verdict::Malformed(e),
                });
                continue;
            }
        };
        let verdict = judge(
            &record, ctx_id, target, &access, provide, allowed, auth, now,
        );
        if let Verdict::Counted(c) = verdict {
            provide |= c;
            valid_until = valid_until.min(record.expires());
        }
        observe(&RecordReport {
            index: entry.index,
            record: Some(&record),
            verdict,
        });
    }

    PermsInfo {
        ctx: ctx_id,
        provide: provide & allowed,
        restrict: Protections::all() & !allowed,
        valid_until,
    }
}

#[allow(clippy::too_many_arguments)]
fn judge(
    record: &Record,
    ctx_id: ObjID,
    target: ObjID,
    access: &Access,
    provided: Protections,
    allowed: Protections,
    auth: &impl Authority,
    now: u64,
) -> Verdict {
    if record.is_ownership() {
        return Verdict::Ownership;
    }
    if record.target() != target {
        return Verdict::WrongTarget(record.target());
    }
    if record.holder() != ctx_id {
        return Verdict::WrongHolder(record.holder());
    }
    let c = match Grant::of(record).contribution(access) {
        Ok(c) => c,
        Err(v) => return v,
    };
    if (c & allowed).difference(provided).is_empty() {
        return Verdict::Redundant;
    }
    match record.verify(auth, now) {
        Ok(()) => Verdict::Counted(c),
        Err(e) => Verdict::Invalid(e),
    }
}

/// Whether context `ctx` (object id `ctx_id`) holds `right` of `tag` at `now`: the ownership
/// lookup of `docs/DIFC.md` §2.3.
///
/// Only ownership records (`TAG` flag) filed under `tag` count, and only if the record decodes,
/// its target is `tag`, its holder is `ctx_id` (or [`crate::ALL_CONTEXTS`] for a root
/// capability), its rights contain `right`; then, cheapest first, as [`Record::verify`] does for
/// data: not expired, not revoked (its id and every prefix's), the chain continuous and
/// attenuating, every signature valid (the root under the tag's key, links under the
/// providers'). A mask row for `tag` removes rights through its `permmask` read as
/// `PLUS`/`MINUS` bits (its `ovrmask` is ignored); the global mask does not apply.
///
/// Returns `Ok(Some(expiry))` for the first record that counts (the decision that used it is
/// valid until `expiry`), `Ok(None)` when no record could count, `Err(verdict)` when a record
/// that matched failed verification (the first such). What was consulted (record ids and
/// prefixes, keys) reaches `auth` through [`Authority::is_revoked`] and
/// [`Authority::with_key`], exactly as on the data path; each verification counts against
/// [`Authority::may_verify`].
pub fn owns<M: ?Sized + CtxMem>(
    ctx_id: ObjID,
    ctx: &SecCtx<'_, M>,
    tag: ObjID,
    right: crate::flow::Right,
    auth: &impl Authority,
    now: u64,
) -> Result<Option<Expiry>, Verdict> {
    owns_explained(ctx_id, ctx, tag, right, auth, now).map(|o| o.map(|o| o.expires))
}

/// The record that made [`owns_explained`] answer yes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnedBy {
    /// Index of its entry in the context.
    pub index: usize,
    /// Its id (what `revoke_record` names).
    pub id: crate::hash::RecordId,
    /// The earliest expiry along its chain.
    pub expires: Expiry,
}

/// [`owns`], naming the record that counted (for explanations: "declassified by `T−`, record
/// …, expires …").
pub fn owns_explained<M: ?Sized + CtxMem>(
    ctx_id: ObjID,
    ctx: &SecCtx<'_, M>,
    tag: ObjID,
    right: crate::flow::Right,
    auth: &impl Authority,
    now: u64,
) -> Result<Option<OwnedBy>, Verdict> {
    if let Some(m) = ctx.mask(tag)
        && !m.permmask.contains(right.as_prots())
    {
        return Ok(None);
    }
    let mut failed = None;
    for entry in ctx.entries_for(tag) {
        let Ok(record) = entry.record() else {
            continue;
        };
        if !record.is_ownership() || record.target() != tag {
            continue;
        }
        let holder = record.holder();
        let public = matches!(record, Record::Cap(_)) && holder == crate::label::ALL_CONTEXTS;
        if holder != ctx_id && !public {
            continue;
        }
        if !record.prots().contains(right.as_prots()) {
            continue;
        }
        match record.verify(auth, now) {
            Ok(()) => {
                return Ok(Some(OwnedBy {
                    index: entry.index,
                    id: record.id(),
                    expires: record.expires(),
                }));
            }
            Err(e) => {
                failed.get_or_insert(Verdict::Invalid(e));
            }
        }
    }
    match failed {
        Some(v) => Err(v),
        None => Ok(None),
    }
}

/// A context's ownership as an [`crate::Ownership`] for [`crate::flow`]: each question is
/// answered by [`owns`], and the earliest expiry of the records that counted is kept in
/// `valid_until`.
pub struct CtxOwnership<'c, 'm, M: ?Sized + CtxMem, A: Authority> {
    /// The context's object id.
    pub ctx_id: ObjID,
    /// The context.
    pub ctx: &'c SecCtx<'m, M>,
    /// Keys, revocations, memory of checks.
    pub auth: &'c A,
    /// The time of the decision.
    pub now: u64,
    /// The earliest expiry among the records that counted so far.
    pub valid_until: Expiry,
}

impl<'c, 'm, M: ?Sized + CtxMem, A: Authority> CtxOwnership<'c, 'm, M, A> {
    /// The ownership of context `ctx_id` at `now`.
    pub fn new(ctx_id: ObjID, ctx: &'c SecCtx<'m, M>, auth: &'c A, now: u64) -> Self {
        Self {
            ctx_id,
            ctx,
            auth,
            now,
            valid_until: Expiry::NEVER,
        }
    }
}

impl<M: ?Sized + CtxMem, A: Authority> crate::flow::Ownership for CtxOwnership<'_, '_, M, A> {
    fn owns(&mut self, tag: ObjID, right: crate::flow::Right) -> Result<bool, Verdict> {
        let r = owns(self.ctx_id, self.ctx, tag, right, self.auth, self.now)?;
        if let Some(e) = r {
            self.valid_until = self.valid_until.min(e);
        }
        Ok(r.is_some())
    }
}

/// What [`evaluate_labelled`] decides: the capability rule and the flow rule together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabelledPerms {
    /// [`evaluate`]'s result with `provide` narrowed by the flow mask and `valid_until` by the
    /// ownership records used.
    pub perms: PermsInfo,
    /// The flow rule's result; `None` when capabilities alone refuse the access (the flow is
    /// then not evaluated, and no ownership verified: §3.2 step 3b).
    pub flow: Option<crate::flow::FlowResult>,
}

impl LabelledPerms {
    /// Whether `access` is granted: by the capabilities and the flow rule.
    pub fn grants(&self, access: Protections) -> bool {
        self.perms.grants(access)
    }
}

/// [`evaluate`] followed by the flow rule (`docs/DIFC.md` §3.2 step 3): when the capability
/// grant after masks covers the access, `provide &= flow(principal, object)`, with ownership
/// asked of `ctx` (lazily: the write clauses only for a write). With every label empty the
/// result is [`evaluate`]'s, bit for bit.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_labelled<M: ?Sized + CtxMem>(
    ctx_id: ObjID,
    ctx: &SecCtx<'_, M>,
    target: ObjID,
    default_prots: Protections,
    auth: &impl Authority,
    access: Access,
    now: u64,
    principal: &crate::flow::PrincipalLabels<crate::label::LabelRef<'_>>,
    object: &crate::label::LabelRef<'_>,
) -> LabelledPerms {
    let mut perms = evaluate(ctx_id, ctx, target, default_prots, auth, access, now);
    if !perms.grants(access.kind.required()) {
        return LabelledPerms { perms, flow: None };
    }
    let mut owner = CtxOwnership::new(ctx_id, ctx, auth, now);
    let flow = crate::flow::flow(
        principal,
        object,
        access.kind == AccessKind::Write,
        &mut owner,
    );
    perms.provide &= flow.mask;
    perms.valid_until = perms.valid_until.min(owner.valid_until);
    LabelledPerms {
        perms,
        flow: Some(flow),
    }
}

/// What [`Grant::adds`] asks of every record of a scan, worked out once for the access: the
/// rights wanted for data (none if the access's page ends past the last address), the page's
/// bytes, and the rights wanted for code (none unless the access is a fetch).
pub(crate) struct Wants {
    data: Protections,
    page: (u64, u64),
    code: Protections,
    entering: bool,
    offset: u64,
}

impl Wants {
    #[inline]
    pub(crate) fn new(access: &Access, want: Protections) -> Self {
        // The page's first byte (`page() * PAGE_SIZE`, which cannot overflow).
        let start = access.offset & !(PAGE_SIZE - 1);
        let (data, end) = match start.checked_add(PAGE_SIZE) {
            Some(end) => (want & (Protections::READ | Protections::WRITE), end),
            None => (Protections::empty(), u64::MAX),
        };
        let code = if access.kind == AccessKind::Exec {
            want & (Protections::READ | Protections::EXEC)
        } else {
            Protections::empty()
        };
        Self {
            data,
            page: (start, end),
            code,
            entering: access.entering,
            offset: access.offset,
        }
    }

    /// [`Grant::adds`] for a grant of `prots` over `offset .. end` with entry alignment
    /// `align` (a valid gate's fields).
    #[inline]
    pub(crate) fn adds(&self, prots: Protections, offset: u64, end: u64, align: u64) -> bool {
        let covers = offset <= self.page.0 && self.page.1 <= end;
        if covers && prots.intersects(self.data) {
            return true;
        }
        prots.contains(Protections::EXEC)
            && prots.intersects(self.code)
            && (!self.entering
                || (self.offset >= offset
                    && self.offset < end
                    && self.offset.is_multiple_of(align)))
    }
}
