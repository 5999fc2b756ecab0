//! A page fault as the engine sees it, and the decision it returns.

use core::fmt;
use core::ops::Range;

use twizzler_capsec::{
    AccessKind, CtxError, Expiry, FlowDenial, LabelId, MAX_OBJECT_SIZE, ObjID, PAGE_SIZE,
    Protections, Verdict,
};

use crate::host::ObjectInfo;
use crate::ticket::MapTicket;

/// A page fault into an object, as the kernel's fault handler fills it in.
///
/// From Twizzler's `page_fault_to_region`, with the object's `MapRegion` in hand:
///
/// - `target`: the region's object id (`info.object.id()`);
/// - `object`: its metadata, with the `kuid` only if `check_id()` verified the id (see
///   [`ObjectInfo`]); or, with [`Fault::lazy`], only its default protections, the `kuid`
///   being asked of the host on a miss (a hit then reads no metadata);
/// - `offset`: the byte offset within the *object*: the page number from the faulting
///   address within the slot, shifted by one page when the region is mapped with
///   `NO_NULLPAGE` (slot byte 0 is then object byte 4096), except the slot's last page (the
///   metadata page), plus the faulting address's offset within its page: an instruction
///   fetch is checked at its byte offset (a code gate's entry point need not be page
///   aligned). [`Fault::in_mapping`] does this.
/// - `kind`: from `MemoryAccessKind`: `Read`, `Write`, `InstructionFetch` → `Exec`.
///
/// Upstream's `AccessInfo` also names the executing object and instruction offset. The rule
/// needs no more than this: for an instruction fetch the faulting address *is* the
/// instruction, so `offset` is the entry point a gate is checked against; a load or store
/// never enters a context through a gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    /// The object whose slot the faulting address lies in.
    pub target: ObjID,
    /// The object's `kuid` and default protections.
    pub object: ObjectInfo,
    /// Byte offset of the faulting address within the object.
    pub offset: u64,
    /// How the thread touched it: a load, a store or an instruction fetch.
    pub kind: AccessKind,
    /// Where the engine finds the object's `kuid`: in `object` ([`Fault::new`]), or from the
    /// host on a miss only ([`Fault::lazy`]).
    pub kuid_at: KuidAt,
}

/// Where the engine finds the faulting object's `kuid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KuidAt {
    /// In [`Fault::object`]: the fault handler read it (after checking the id) for this fault.
    /// A cached decision is stamped with it, so a `kuid` that changes misses by itself.
    Fault,
    /// From [`crate::Host::object`] for the faulting object, asked only on a miss, when a
    /// record the object's key signs is verified; `object.kuid` is ignored. A hit then reads
    /// no metadata at all. The host calls [`crate::Engine::invalidate_object`] when an
    /// object's `kuid` (or whether its id verifies) changes; on Twizzler the id is derived
    /// from the `kuid`, so a verified id keeps its `kuid` for ever.
    Miss,
}

impl Fault {
    /// A fault at byte `offset` of the object.
    pub const fn new(target: ObjID, object: ObjectInfo, offset: u64, kind: AccessKind) -> Self {
        Self {
            target,
            object,
            offset,
            kind,
            kuid_at: KuidAt::Fault,
        }
    }

    /// A fault at byte `offset` of the object whose `kuid` the engine asks the host for on a
    /// miss only ([`KuidAt::Miss`]): the fault handler passes the default protections it
    /// keeps at hand (Twizzler's `check_id` returns them) and reads no metadata.
    pub const fn lazy(
        target: ObjID,
        default_prots: Protections,
        offset: u64,
        kind: AccessKind,
    ) -> Self {
        Self {
            target,
            object: ObjectInfo::new(None, default_prots),
            offset,
            kind,
            kuid_at: KuidAt::Miss,
        }
    }

    /// The same fault on an object whose data label is `label` (`docs/DIFC.md` §1.3): the
    /// fault handler passes the object's interned label with the fault as it passes its
    /// default protections, so a hit asks the host for nothing new. [`Fault::new`] takes it
    /// from its [`ObjectInfo`]; [`Fault::lazy`] starts unlabelled.
    #[must_use]
    pub const fn labelled(mut self, label: LabelId) -> Self {
        self.object.label = label;
        self
    }

    /// A fault at byte `mapping_offset` of a mapping of the object, which starts at object
    /// byte 0, or at object byte 4096 (the first page past the null page) when the object is
    /// mapped without its null page (`no_null_page`, Twizzler's `MapFlags::NO_NULLPAGE`).
    ///
    /// The slot's last page is the object's metadata page wherever the object starts
    /// (Twizzler's `PageNumber::is_meta`): it is never shifted, so a fault there is decided at
    /// the metadata page's own offset, in bounds.
    pub const fn in_mapping(
        target: ObjID,
        object: ObjectInfo,
        mapping_offset: u64,
        no_null_page: bool,
        kind: AccessKind,
    ) -> Self {
        let offset = if no_null_page && mapping_offset < MAX_OBJECT_SIZE - PAGE_SIZE {
            mapping_offset + PAGE_SIZE
        } else {
            // The metadata page, or past the slot (the engine reports that out of bounds).
            mapping_offset
        };
        Self::new(target, object, offset, kind)
    }
}

/// What the kernel must do about a fault.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Decision {
    /// Map the faulting page with exactly `prots`.
    Map {
        /// The protections to program into the MMU (already masked).
        prots: Protections,
        /// Pages of the object (page numbers) to which the same protections apply, containing
        /// the faulting page: the kernel may map any of them now. Mapping only the faulting
        /// page is always correct.
        pages: Range<u64>,
        /// The context whose records granted: the thread's active context when the decision
        /// was made, or `switch_to`. The kernel maps the page under this context (not under
        /// whatever is active when it installs: the thread may have been switched meanwhile),
        /// and installs only if it is still the thread's active context.
        ctx: ObjID,
        /// The context that granted, when the active one did not and an inactive one did. The
        /// engine has *not* switched the thread: the kernel calls
        /// [`crate::SecCtxMgr::switch_context`] and switches its own memory context (on
        /// Twizzler, the page tables of that security context) with it; if the switch reports
        /// `NotAttached` (detached meanwhile) it maps nothing and lets the access fault again.
        switch_to: Option<ObjID>,
        /// The grant stops holding at this time (ns since the Unix epoch): the kernel arms its
        /// timer by [`crate::Engine::next_deadline`] and calls [`crate::Engine::expire`].
        valid_until: Expiry,
        /// What the decision was made from: the kernel installs the mapping only under the
        /// lock its `unmap` takes, and only if [`crate::Engine::is_current`] says this is
        /// still current (see [`MapTicket`]).
        ticket: MapTicket,
    },
    /// The access is a security violation: deliver it to the thread.
    Violation(Violation),
}

/// Why an access is denied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The access is to the object's null page (bytes `0..4096`).
    NullPage {
        /// The object.
        target: ObjID,
    },
    /// The offset lies beyond the largest possible object.
    OutOfBounds {
        /// The object.
        target: ObjID,
        /// The offset.
        offset: u64,
    },
    /// The thread's active context names no object the host knows.
    ContextMissing(ObjID),
    /// The context kept changing while the engine read it (a writer rewriting it in place,
    /// or a host that did not keep it still): it was read several times and never seen
    /// whole, so nothing it says is trusted.
    ContextChanging(ObjID),
    /// The active context's bytes do not validate.
    MalformedContext {
        /// The context.
        ctx: ObjID,
        /// What is wrong with it.
        error: CtxError,
    },
    /// The active context does not grant, and it is `UNDETACHABLE`, so no other context was
    /// tried.
    Undetachable {
        /// The active context.
        ctx: ObjID,
        /// The rights the access needs.
        needed: Protections,
        /// The rights the active context provides.
        provided: Protections,
    },
    /// The capabilities grant the access, but the information-flow rule does not
    /// (`docs/DIFC.md` §3.3): the labels of the context and of the object forbid it.
    Flow {
        /// The context the decision was made under (the active one, unless an inactive one's
        /// switch was refused: then still the active one, with [`FlowDenial::Switch`]).
        ctx: ObjID,
        /// The object.
        target: ObjID,
        /// The rights the access needs.
        needed: Protections,
        /// The rights the context provides after the flow mask.
        provided: Protections,
        /// Why the flow is refused.
        denial: FlowDenial,
    },
    /// No attached context grants the access.
    Denied {
        /// The active context, whose evaluation is explained.
        ctx: ObjID,
        /// The rights the access needs.
        needed: Protections,
        /// The rights the active context provides.
        provided: Protections,
        /// Why the active context does not provide more.
        cause: DenyCause,
    },
}

/// Why the active context does not provide the rights an access needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DenyCause {
    /// It holds no record for the object.
    NoRecord,
    /// Its records grant the rights, but its masks take them away.
    Masked {
        /// The rights the masks removed.
        removed: Protections,
    },
    /// Its most relevant record for the object does not count, for this reason.
    Record(Verdict),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NullPage { target } => write!(f, "access to the null page of object {target}"),
            Self::OutOfBounds { target, offset } => {
                write!(
                    f,
                    "offset {offset:#x} is beyond the largest object ({target})"
                )
            }
            Self::ContextMissing(c) => write!(f, "security context {c} does not exist"),
            Self::ContextChanging(c) => {
                write!(f, "security context {c} kept changing while it was read")
            }
            Self::MalformedContext { ctx, error } => {
                write!(f, "security context {ctx} is malformed: {error}")
            }
            Self::Undetachable {
                ctx,
                needed,
                provided,
            } => write!(
                f,
                "needs {needed}, context {ctx} provides {provided} and is undetachable"
            ),
            Self::Flow {
                ctx,
                target,
                needed,
                provided,
                denial,
            } => write!(
                f,
                "needs {needed} of {target}, context {ctx} provides {provided} after labels: {denial}"
            ),
            Self::Denied {
                ctx,
                needed,
                provided,
                cause,
            } => write!(
                f,
                "needs {needed}, context {ctx} provides {provided}: {cause}"
            ),
        }
    }
}

impl fmt::Display for DenyCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRecord => f.write_str("no capability or delegation for the object"),
            Self::Masked { removed } => write!(f, "masks remove {removed}"),
            Self::Record(v) => match v {
                Verdict::Counted(_) | Verdict::Redundant => {
                    f.write_str("its records grant less than the access needs")
                }
                Verdict::Malformed(e) => write!(f, "record is malformed: {e}"),
                Verdict::WrongTarget(t) => write!(f, "record is for another object ({t})"),
                Verdict::WrongHolder(h) => write!(f, "record is for another context ({h})"),
                Verdict::OutsideGate => f.write_str("the page is not wholly inside the gate"),
                Verdict::NotAnEntry => {
                    f.write_str("the fetch is not at an entry point of the gate")
                }
                Verdict::NoUsefulRights => f.write_str("record grants none of the needed rights"),
                Verdict::Invalid(e) => write!(f, "record does not verify: {e}"),
                Verdict::Ownership => {
                    f.write_str("record is a tag-ownership record, never a data grant")
                }
            },
        }
    }
}
