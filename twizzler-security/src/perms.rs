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
    /// The grant of `record`.
    pub fn of(record: &Record) -> Self {
        Self {
            prots: record.prots(),
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
