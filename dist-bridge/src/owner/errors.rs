//! Why an operation on the owner's guard table was refused: [`InvokeError`] for a presented
//! token, [`ExportError`] for an export.

use std::fmt;

use twizzler_capsec::{ObjID, RecordId, VerifyError};

use crate::keys::KeySourceError;
use crate::rights::{ByteRange, Rights};
use crate::table::LookupError;
use crate::token::{GuardRef, TokenDecodeError, Widening};

/// Why an invocation (or another operation presenting a token) was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvokeError {
    /// The bytes are not a well-formed token.
    Malformed(TokenDecodeError),
    /// The token belongs to another node.
    WrongOwner {
        /// The node the token names.
        token_node: u64,
        /// This node.
        this_node: u64,
    },
    /// The token was issued by another life of this node (before a restart).
    StaleController {
        /// The controller version in the token.
        token: u64,
        /// This controller's version.
        current: u64,
    },
    /// The guard index is outside the table.
    NoSuchGuard {
        /// The index.
        index: u32,
        /// The table's capacity.
        capacity: u32,
    },
    /// The guard was revoked.
    Revoked {
        /// The guard.
        guard: GuardRef,
    },
    /// The guard entry has been reused: the token is from an earlier life of the entry.
    StaleGuard {
        /// The guard the token names.
        guard: GuardRef,
        /// The entry's current version.
        current: u64,
    },
    /// The guard was re-versioned by a range upgrade: renew the token ([`Owner::renew`](super::Owner::renew)).
    Upgraded {
        /// The guard the token names (old version).
        guard: GuardRef,
        /// Its new version.
        new_version: u64,
    },
    /// The tag does not verify: forged, tampered with, or from a recycled version range.
    BadTag,
    /// The tag verifies but the body differs from the guard's (cannot happen unless the
    /// owner's state is inconsistent; refused all the same).
    GuardMismatch,
    /// The token's effective expiry has passed.
    Expired {
        /// When it expired (ns since the epoch).
        expires: u64,
        /// The time of the check.
        now: u64,
    },
    /// The operation needs rights the token does not carry.
    RightsExceeded {
        /// The rights needed.
        needed: Rights,
        /// The rights the token carries (effective).
        held: Rights,
    },
    /// The accessed bytes are not inside the token's range (or the access is empty or
    /// overflows).
    OutOfRange {
        /// First byte accessed.
        offset: u64,
        /// Bytes accessed.
        len: u64,
        /// The token's effective range.
        range: ByteRange,
    },
    /// A requested child scope widens the token's.
    Widens(Widening),
    /// The guard table is full.
    TableFull {
        /// Its capacity.
        capacity: u32,
    },
    /// The token's derivation tree already holds as many derived guards as one exported guard
    /// may have ([`GuardTableConfig::max_derived`](crate::table::GuardTableConfig::max_derived)).
    DeriveQuota {
        /// The quota.
        quota: u32,
    },
    /// [`Owner::renew`](super::Owner::renew) on a token whose guard was not upgraded (or whose upgrade record has
    /// expired with its range).
    NotRenewable {
        /// The guard the token names.
        guard: GuardRef,
    },
    /// The information-flow rule refuses it (`docs/DIFC.md` §5.9).
    Flow(crate::difc::FlowRefusal),
    /// The owner's state is unusable (a thread panicked while changing it); restart the node.
    Unavailable,
}

impl fmt::Display for InvokeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "malformed token: {e}"),
            Self::WrongOwner {
                token_node,
                this_node,
            } => write!(
                f,
                "token belongs to node {token_node}, not to this node ({this_node})"
            ),
            Self::StaleController { token, current } => write!(
                f,
                "token was issued by controller version {token}; this node now runs version \
                 {current} (it restarted, which revokes every earlier token)"
            ),
            Self::NoSuchGuard { index, capacity } => write!(
                f,
                "guard index {index} is outside the guard table ({capacity} entries)"
            ),
            Self::Revoked { guard } => write!(f, "{guard} has been revoked"),
            Self::StaleGuard { guard, current } => write!(
                f,
                "{guard} is stale: the entry has been reused and is now at version {current}"
            ),
            Self::Upgraded { guard, new_version } => write!(
                f,
                "{guard} was upgraded to version {new_version}: renew the token"
            ),
            Self::BadTag => f.write_str("token tag does not verify (forged or tampered with)"),
            Self::GuardMismatch => f.write_str("token does not match the guard it names"),
            Self::Expired { expires, now } => {
                write!(f, "token expired at {expires} ns (now {now} ns)")
            }
            Self::RightsExceeded { needed, held } => {
                write!(f, "operation needs rights {needed}, token carries {held}")
            }
            Self::OutOfRange { offset, len, range } => write!(
                f,
                "access {offset:#x}+{len:#x} is outside the token's range {range}"
            ),
            Self::Widens(w) => write!(f, "requested child guard {w} of the token"),
            Self::TableFull { capacity } => {
                write!(f, "guard table is full ({capacity} live guards)")
            }
            Self::DeriveQuota { quota } => write!(
                f,
                "this token's guards already have {quota} derived guards, the most one exported guard may have"
            ),
            Self::NotRenewable { guard } => write!(
                f,
                "{guard} has no pending upgrade: nothing to renew (revoked, or renewed too late)"
            ),
            Self::Flow(r) => r.fmt(f),
            Self::Unavailable => {
                f.write_str("owner state is unavailable after an internal failure")
            }
        }
    }
}

impl std::error::Error for InvokeError {}

impl From<TokenDecodeError> for InvokeError {
    fn from(e: TokenDecodeError) -> Self {
        Self::Malformed(e)
    }
}

impl From<LookupError> for InvokeError {
    fn from(e: LookupError) -> Self {
        match e {
            LookupError::NoSuchGuard { index, capacity } => Self::NoSuchGuard { index, capacity },
            LookupError::Revoked { guard } => Self::Revoked { guard },
            LookupError::Stale { guard, current } => Self::StaleGuard { guard, current },
            LookupError::Upgraded { guard, new } => Self::Upgraded {
                guard,
                new_version: new,
            },
        }
    }
}

/// Why a capability could not be exported.
#[derive(Debug)]
#[non_exhaustive]
pub enum ExportError {
    /// No verifying key for the capability's target.
    Key(KeySourceError),
    /// The capability does not verify (bad signature, expired).
    Cap(VerifyError),
    /// The capability has been revoked (by record id).
    CapRevoked(RecordId),
    /// The capability is for another security context than the caller's.
    WrongContext {
        /// The context the capability is for.
        cap: ObjID,
        /// The caller's context.
        caller: ObjID,
    },
    /// The requested data rights exceed the capability's protections.
    RightsExceeded {
        /// The requested rights.
        requested: Rights,
        /// What the capability allows.
        allowed: twizzler_capsec::Protections,
    },
    /// The requested range is not inside the capability's gate.
    OutOfRange {
        /// The requested range.
        requested: ByteRange,
        /// The capability's gate.
        gate: twizzler_capsec::Gate,
    },
    /// The requested expiry has already passed.
    Expired {
        /// The requested expiry.
        expires: u64,
        /// Now.
        now: u64,
    },
    /// The guard table is full.
    TableFull {
        /// Its capacity.
        capacity: u32,
    },
    /// The information-flow rule refuses it (`docs/DIFC.md` §5.9).
    Flow(crate::difc::FlowRefusal),
    /// The owner's state is unusable; restart the node.
    Unavailable,
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Key(e) => write!(f, "cannot export: {e}"),
            Self::Cap(e) => write!(f, "cannot export: capability does not verify: {e}"),
            Self::CapRevoked(id) => write!(f, "cannot export: capability {id} is revoked"),
            Self::WrongContext { cap, caller } => write!(
                f,
                "cannot export: capability is for context {cap}, the caller runs in {caller}"
            ),
            Self::RightsExceeded { requested, allowed } => write!(
                f,
                "cannot export: rights {requested} exceed the capability's protections {allowed}"
            ),
            Self::OutOfRange { requested, gate } => write!(
                f,
                "cannot export: range {requested} is not inside the capability's gate {gate:?}"
            ),
            Self::Expired { expires, now } => write!(
                f,
                "cannot export: requested expiry {expires} ns has passed (now {now} ns)"
            ),
            Self::TableFull { capacity } => {
                write!(
                    f,
                    "cannot export: guard table is full ({capacity} live guards)"
                )
            }
            Self::Flow(r) => r.fmt(f),
            Self::Unavailable => {
                f.write_str("cannot export: owner state is unavailable after an internal failure")
            }
        }
    }
}

impl std::error::Error for ExportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Key(e) => Some(e),
            Self::Cap(e) => Some(e),
            _ => None,
        }
    }
}
