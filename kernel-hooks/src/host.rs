//! The boundary to the host kernel: what the engine asks of it.
//!
//! The same engine runs in Twizzler's kernel, in the QEMU test kernel and in host tests; each
//! implements [`Host`] over its own object table, key objects, clock and page tables.
//!
//! # Rules both sides keep
//!
//! - **No engine lock is held across a host call.** The engine calls [`Host::unmap`] only
//!   after it released its own locks, so an unmap may take sleeping locks, wait for TLB
//!   shootdowns, or call back into the engine's read-only queries.
//! - **Host calls nest one way.** Inside [`Host::with_ctx`] the engine may call
//!   [`Host::with_key`] and [`Host::object`] (never [`Host::unmap`] or `with_ctx` again);
//!   a host must not hold, across the closure it runs, a lock those two need.
//! - **The hit calls nothing.** A fault whose decision is cached calls nothing of the host
//!   when its grants never expire, and only [`Host::monotonic_ns`] when they do: the
//!   object's default protections travel in the [`crate::Fault`], and its `kuid` too
//!   ([`crate::Fault::new`]) or, with [`crate::Fault::lazy`], is asked of [`Host::object`]
//!   on a miss only.
//! - **One clock.** Every deadline the engine gives ([`crate::Engine::next_deadline`],
//!   [`crate::Engine::next_deadline_in`]) is on [`Host::monotonic_ns`]'s clock; the host's
//!   expiry timer counts that clock.

use twizzler_capsec::{
    LabelId, LabelRef, ObjID, PrincipalLabels, Protections, RecordId, VerifyingKey,
};

use crate::ctx_bytes::CtxBytes;

/// What the engine needs to know about an object.
///
/// A kernel fills it from the object's metadata. **The `kuid` is trusted only if the object's
/// id verifies against its metadata** (Twizzler's `check_id`: the id is derived from the
/// `kuid` and the creation nonce); an object whose id does not verify must be presented with
/// `kuid: None`, or anyone could name their own key as the signer for someone else's object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObjectInfo {
    /// The object whose verifying key signs for this object, if it has one (and its id
    /// verified). An object without a `kuid` is granted only its default protections.
    pub kuid: Option<ObjID>,
    /// Rights every context has on the object, before masks.
    pub default_prots: Protections,
    /// The object's data label, interned by the host (`docs/DIFC.md` §1.3): the row of the
    /// kernel's label table for the object, fixed at creation. [`LabelId::EMPTY`] (no row)
    /// is the empty label: public and low-integrity, today's rule. It travels with the fault
    /// like the default protections, so a cached decision asks the host for nothing new.
    pub label: LabelId,
}

impl ObjectInfo {
    /// An unlabelled object (`label` = [`LabelId::EMPTY`]) with this `kuid` and these default
    /// protections: what every object is on a host without labels.
    pub const fn new(kuid: Option<ObjID>, default_prots: Protections) -> Self {
        Self {
            kuid,
            default_prots,
            label: LabelId::EMPTY,
        }
    }

    /// The same object with data label `label`.
    #[must_use]
    pub const fn with_label(mut self, label: LabelId) -> Self {
        self.label = label;
        self
    }
}

/// Mappings that a revocation, an invalidation, an expiry or a cache eviction took the grant
/// away from. The host removes them from the page tables, and shoots down every CPU's stale
/// TLB entries for them, before [`Host::unmap`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unmap {
    /// Every page of `target` mapped under context `ctx` (sent to hosts with
    /// [`UnmapGranularity::PerContext`]).
    Object {
        /// The security context the pages were granted under.
        ctx: ObjID,
        /// The object.
        target: ObjID,
    },
    /// Every page mapped under context `ctx` (sent to hosts with
    /// [`UnmapGranularity::PerContext`]).
    Context(ObjID),
    /// Every page of the object, under every context (sent to hosts with
    /// [`UnmapGranularity::PerObject`] in place of the two above).
    ObjectEverywhere(ObjID),
    /// Take the write permission away from every page mapped under context `ctx`, leaving
    /// reads and fetches mapped (sent to hosts with [`UnmapGranularity::PerContext`] when a
    /// principal-label change makes writes, and only writes, unsafe: `docs/DIFC.md` §4.2).
    ///
    /// A host may treat it as [`Unmap::Context`] (remove the pages altogether): that takes
    /// away more than needed, the next read faults and is decided again, never less. Either
    /// way the TLBs are shot down before [`Host::unmap`] returns.
    WriteProtectContext(ObjID),
    /// Take the write permission away from every page of the object, under every context
    /// (sent to hosts with [`UnmapGranularity::PerObject`] in place of
    /// [`Unmap::WriteProtectContext`], once per object the context had mapped). A host may
    /// treat it as [`Unmap::ObjectEverywhere`].
    WriteProtectObjectEverywhere(ObjID),
}

impl Unmap {
    /// Whether this only write-protects ([`Unmap::WriteProtectContext`],
    /// [`Unmap::WriteProtectObjectEverywhere`]): pages stay mapped for reads and fetches.
    pub const fn is_write_protect(&self) -> bool {
        matches!(
            self,
            Self::WriteProtectContext(_) | Self::WriteProtectObjectEverywhere(_)
        )
    }

    /// The full unmap a host without write protection may perform instead: the same
    /// pages, removed ([`Unmap::WriteProtectContext`] → [`Unmap::Context`],
    /// [`Unmap::WriteProtectObjectEverywhere`] → [`Unmap::ObjectEverywhere`]; the others are
    /// themselves).
    pub const fn as_full_unmap(self) -> Self {
        match self {
            Self::WriteProtectContext(ctx) => Self::Context(ctx),
            Self::WriteProtectObjectEverywhere(target) => Self::ObjectEverywhere(target),
            other => other,
        }
    }
}

/// How precisely a host can unmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnmapGranularity {
    /// It knows under which security context each page was mapped (Twizzler keeps page tables
    /// per security context): it receives [`Unmap::Object`] and [`Unmap::Context`].
    PerContext,
    /// It knows only which object a page belongs to: it receives
    /// [`Unmap::ObjectEverywhere`] for every object whose grant changed, which takes away
    /// more than needed (the next access faults and is decided again) and never less.
    PerObject,
}

/// Services the host kernel provides to the engine. See the module documentation for the
/// locking rules.
pub trait Host {
    /// How precisely [`Host::unmap`] can unmap.
    const UNMAP_GRANULARITY: UnmapGranularity = UnmapGranularity::PerContext;

    /// Object `id`'s metadata, or `None` if there is no such object. Consulted on a miss
    /// only: for the contexts that provide delegations, and for the faulting object itself
    /// when its fault leaves the `kuid` to a miss ([`crate::Fault::lazy`]).
    fn object(&self, id: ObjID) -> Option<ObjectInfo>;

    /// Runs `f` over the bytes of security-context object `ctx`, or returns `None` if there is
    /// no such context.
    ///
    /// The length is the host's to know (the bytes the object actually has, never a made-up
    /// maximum). The bytes must stay unchanged while `f` runs: a kernel maps context objects
    /// read-only to their writers and, if a writer had write access since the last read,
    /// takes it away (and shoots down the TLBs) before calling `f` (see the integration
    /// guide, section 5). The engine does not rely on it for soundness: it reads through
    /// [`CtxBytes`], never through a reference, and compares the header before and after.
    ///
    /// The write fault that lets a writer at a context calls
    /// [`crate::Engine::invalidate_ctx`], which unmaps everything granted under the context,
    /// possibly the writing instruction's own page: the kernel faults that page in again
    /// (while the context is still read-only) and decides the write again before it maps the
    /// page writable, or a thread editing its own context never makes progress.
    fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R>;

    /// Runs `f` with the verifying key stored in key object `kuid`, or returns `None` if
    /// `kuid` holds no valid key. The host may parse the key on every call or keep it parsed;
    /// the engine keeps nothing but what verified (see [`crate::Engine::invalidate_key`]
    /// for a key object that changes).
    fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R>;

    /// Whether key object `kuid` is revoked. Consulted on a miss, for every key a record
    /// needs; never on a hit. The host keeps the set (any size: a hash set, a sorted table on
    /// disk) and records a revocation in it *before* calling [`crate::Engine::revoke_key`].
    fn key_revoked(&self, kuid: ObjID) -> bool;

    /// Whether the record with this id is revoked (for a delegation: consulted for it and for
    /// every record it derives from). Consulted on a miss, never on a hit; recorded by the host
    /// before it calls [`crate::Engine::revoke_record`].
    fn record_revoked(&self, id: &RecordId) -> bool;

    /// The kernel's monotonic clock, in nanoseconds since boot. The engine adds the offset
    /// set with [`crate::Engine::set_wall_clock_offset`] to compare with expiry times, and
    /// gives its deadlines on this clock: the timer that calls [`crate::Engine::expire`]
    /// must count it too. Read at most once a decision, and only when an answer depends on
    /// it: a miss, or a hit on a grant that expires (a hit on grants that never expire calls
    /// nothing in the host).
    fn monotonic_ns(&self) -> u64;

    /// The principal labels of security context `ctx` (`docs/DIFC.md` §1.4): the kernel's
    /// row for the context, set at registration and changed only by `sys_sctx_label` (never
    /// read from the context's bytes). `read` decides what may flow into the context's
    /// threads, `write` what may flow out of them; outside a label change they are equal.
    ///
    /// `None` for a context the kernel has not registered: the fault is refused with
    /// [`twizzler_capsec::FlowDenial::LabelUnknown`], never decided as unlabelled.
    ///
    /// Called on a miss only, after the engine read its epoch, outside [`Host::with_ctx`],
    /// with no engine lock held. The default gives every context the empty labels: a host
    /// without DIFC implements nothing and gets today's rule.
    fn ctx_label(&self, ctx: ObjID) -> Option<PrincipalLabels<LabelId>> {
        let _ = ctx;
        Some(PrincipalLabels::steady(LabelId::EMPTY))
    }

    /// Runs `f` over the decoded tags of interned label `id`, or returns `None` if the host
    /// knows no such label (the fault is then refused with
    /// [`twizzler_capsec::FlowDenial::LabelUnknown`]).
    ///
    /// [`LabelId::EMPTY`] is always the empty label. Called on a miss only, possibly inside
    /// [`Host::with_ctx`]'s closure (like [`Host::with_key`]): the host must not hold across
    /// that closure a lock `with_label` needs. The label must not change while `f` runs
    /// (interned labels are append-only while referenced). The default knows only the
    /// empty label.
    fn with_label<R>(&self, id: LabelId, f: impl FnOnce(LabelRef<'_>) -> R) -> Option<R> {
        id.is_empty().then(|| f(LabelRef::EMPTY))
    }

    /// Removes the mappings `what` describes, on every CPU, before returning.
    ///
    /// For [`Unmap::WriteProtectContext`] and [`Unmap::WriteProtectObjectEverywhere`] the
    /// mappings lose only their write permission; a host may remove them altogether instead
    /// ([`Unmap::as_full_unmap`]).
    fn unmap(&self, what: Unmap);
}
