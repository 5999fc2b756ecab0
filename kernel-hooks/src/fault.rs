//! A page fault as the engine sees it, and the decision it returns.

use core::fmt;
use core::ops::Range;

use twizzler_security::{AccessKind, CtxError, Expiry, ObjID, Protections, Verdict};

/// A page fault into an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    /// The object whose slot the faulting address lies in.
    pub target: ObjID,
    /// Byte offset of the faulting address within the object.
    pub offset: u64,
    /// How the thread touched it: a load, a store or an instruction fetch.
    pub kind: AccessKind,
}

/// What the kernel must do about a fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Map the faulting page with exactly `prots`.
    Map {
        /// The protections to program into the MMU (already masked).
        prots: Protections,
        /// Pages of the object (page numbers) to which the same protections apply, containing
        /// the faulting page: the kernel may map any of them now. Mapping only the faulting
        /// page is always correct.
        pages: Range<u64>,
        /// The context the thread was switched to, when the active one did not grant and an
        /// inactive one did (the engine already updated the thread's [`crate::SecCtxMgr`]).
        switch_to: Option<ObjID>,
        /// The grant stops holding at this time: the kernel unmaps the pages by then (see
        /// [`crate::Engine::expire`]).
        valid_until: Expiry,
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
    /// The host knows no such object.
    UnknownObject(ObjID),
    /// The thread's active context names no object the host knows.
    ContextMissing(ObjID),
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
            Self::UnknownObject(o) => write!(f, "no such object {o}"),
            Self::ContextMissing(c) => write!(f, "security context {c} does not exist"),
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
            },
        }
    }
}
