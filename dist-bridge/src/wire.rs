//! What crosses the gRPC boundary besides the generated messages ([`crate::pb`]): how core
//! errors become gRPC statuses (and back, on the client), and the conversions between core
//! types and messages.
//!
//! # Errors on the wire
//!
//! A refused request is a gRPC status. Its **code** says the class of refusal, its
//! **message** is the core's error message (for example `token was issued by controller
//! version 3; this node now runs version 4 (it restarted, which revokes every earlier
//! token)`), and the metadata entry [`ERROR_KIND_HEADER`] names the exact reason as an
//! [`ErrorKind`] (`stale-controller`), which the client library turns back into a typed
//! error ([`ClientError::Rejected`](crate::client::ClientError::Rejected)).
//!
//! | code | kinds |
//! |---|---|
//! | `INVALID_ARGUMENT` | [`MalformedToken`](ErrorKind::MalformedToken), [`WrongOwner`](ErrorKind::WrongOwner), [`BadRequest`](ErrorKind::BadRequest), an export's already-passed [`Expired`](ErrorKind::Expired) |
//! | `UNAUTHENTICATED` (the token or capability is not a genuine, current credential) | [`StaleController`](ErrorKind::StaleController), [`NoSuchGuard`](ErrorKind::NoSuchGuard), [`Revoked`](ErrorKind::Revoked), [`StaleGuard`](ErrorKind::StaleGuard), [`BadTag`](ErrorKind::BadTag), [`GuardMismatch`](ErrorKind::GuardMismatch), a token's [`Expired`](ErrorKind::Expired), [`CapInvalid`](ErrorKind::CapInvalid) |
//! | `PERMISSION_DENIED` (genuine, but not for this) | [`RightsExceeded`](ErrorKind::RightsExceeded), [`OutOfRange`](ErrorKind::OutOfRange), [`Widens`](ErrorKind::Widens), [`WrongContext`](ErrorKind::WrongContext), [`CapRevoked`](ErrorKind::CapRevoked), [`KeyRevoked`](ErrorKind::KeyRevoked), [`BadProof`](ErrorKind::BadProof), [`NotAllowed`](ErrorKind::NotAllowed), [`Denied`](ErrorKind::Denied), [`BroadcastRevoked`](ErrorKind::BroadcastRevoked), [`UnknownPeer`](ErrorKind::UnknownPeer), [`Flow`](ErrorKind::Flow) |
//! | `FAILED_PRECONDITION` | [`Upgraded`](ErrorKind::Upgraded) (renew first), [`NotRenewable`](ErrorKind::NotRenewable) |
//! | `NOT_FOUND` | [`NoKey`](ErrorKind::NoKey) (no such object, no `kuid`, no key object), [`ObjectNotFound`](ErrorKind::ObjectNotFound) |
//! | `RESOURCE_EXHAUSTED` | [`Busy`](ErrorKind::Busy), [`TableFull`](ErrorKind::TableFull), [`DeriveQuota`](ErrorKind::DeriveQuota), [`ObjectTooLarge`](ErrorKind::ObjectTooLarge) |
//! | `UNAVAILABLE` | [`Unavailable`](ErrorKind::Unavailable), [`PeerFailed`](ErrorKind::PeerFailed) |
//! | `INTERNAL` | [`Store`](ErrorKind::Store), [`Internal`](ErrorKind::Internal) |

//!
//! # What a caller who is not an operator sees
//!
//! The detailed kinds above are for operators (and the node's log). Every other caller gets
//! [`public_view`] of a refusal: a failed check of any kind (a malformed, forged, stale,
//! revoked or expired token, a capability or proof that does not verify, rights or range
//! exceeded) is one [`Denied`](ErrorKind::Denied) with `PERMISSION_DENIED` and one fixed
//! message, so refusals tell an unauthenticated prober nothing about the node's guards. Kinds
//! that are not about a credential (a malformed request, a full table, the node's limits, an
//! internal failure) and [`Upgraded`](ErrorKind::Upgraded) keep their kind, but their message
//! is a fixed text without numbers. `Upgraded` is only ever answered for a token whose tag
//! verified, and tells its holder no more than `Renew` would.

use std::fmt;
use std::str::FromStr;

use secctx::StoreError;
use tonic::{Code, Status};
use twizzler_capsec::{Expiry, KeyLookupError, ObjID};

use crate::broadcast::{BroadcastError, CapName};
use crate::keys::KeySourceError;
use crate::owner::{ExportError, InvokeError};
use crate::pb;
use crate::rights::{ByteRange, Rights};
use crate::table::TableStats;
use crate::token::Scope;

/// The metadata key of a refusal's [`ErrorKind`].
pub const ERROR_KIND_HEADER: &str = "x-dist-bridge-error";

macro_rules! kinds {
    ($($(#[$doc:meta])* $v:ident = $name:literal,)*) => {
        /// The exact reason a node refused a request (see the [module docs](self)).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorKind {
            $($(#[$doc])* $v,)*
        }

        impl ErrorKind {
            /// The name carried in [`ERROR_KIND_HEADER`].
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$v => $name,)*
                }
            }
        }

        impl FromStr for ErrorKind {
            type Err = ();
            fn from_str(s: &str) -> Result<Self, ()> {
                match s {
                    $($name => Ok(Self::$v),)*
                    _ => Err(()),
                }
            }
        }
    };
}

kinds! {
    /// The token bytes do not decode ([`InvokeError::Malformed`]).
    MalformedToken = "malformed-token",
    /// The token belongs to another node ([`InvokeError::WrongOwner`]).
    WrongOwner = "wrong-owner",
    /// The token is from before the owner's restart ([`InvokeError::StaleController`]).
    StaleController = "stale-controller",
    /// The guard index is outside the table ([`InvokeError::NoSuchGuard`]).
    NoSuchGuard = "no-such-guard",
    /// The guard was revoked ([`InvokeError::Revoked`]).
    Revoked = "revoked",
    /// The guard entry was reused since the token was issued ([`InvokeError::StaleGuard`]).
    StaleGuard = "stale-guard",
    /// The guard was upgraded: renew the token ([`InvokeError::Upgraded`]).
    Upgraded = "upgraded",
    /// The token's tag does not verify: forged or tampered with ([`InvokeError::BadTag`]).
    BadTag = "bad-tag",
    /// The token does not match its guard ([`InvokeError::GuardMismatch`]).
    GuardMismatch = "guard-mismatch",
    /// The token (or a requested export expiry) has expired.
    Expired = "expired",
    /// The operation needs rights the token (or capability) does not carry.
    RightsExceeded = "rights-exceeded",
    /// The bytes are outside the token's range (or the capability's gate).
    OutOfRange = "out-of-range",
    /// A requested child scope widens the token's ([`InvokeError::Widens`]).
    Widens = "widens",
    /// The information-flow rule refuses the export or invocation (`docs/DIFC.md` §5.9).
    Flow = "flow",
    /// The guard table is full.
    TableFull = "table-full",
    /// The token's derivation tree is at its quota ([`InvokeError::DeriveQuota`]).
    DeriveQuota = "derive-quota",
    /// Nothing to renew ([`InvokeError::NotRenewable`]).
    NotRenewable = "not-renewable",
    /// The owner's state is unusable; the node must be restarted.
    Unavailable = "unavailable",
    /// No verifying key for the object: it does not exist here, has no `kuid`, or its key
    /// object is missing.
    NoKey = "no-key",
    /// The object's verifying key is revoked.
    KeyRevoked = "key-revoked",
    /// The capability does not verify (signature, expiry).
    CapInvalid = "cap-invalid",
    /// The capability is revoked in the owner's store.
    CapRevoked = "cap-revoked",
    /// The capability is for another security context.
    WrongContext = "wrong-context",
    /// The export's proof of its context is missing, does not verify, is outside the node's
    /// time window, or was used before ([`crate::export_proof::ProofError`]).
    BadProof = "bad-proof",
    /// The node is remembering as many recent export nonces as it may: retry shortly.
    Busy = "busy",
    /// The caller's certificate does not allow this request (`Status` needs an operator;
    /// broadcast messages need the node they claim to come from).
    NotAllowed = "not-allowed",
    /// What every caller but an operator gets for a failed check, whatever the reason (the
    /// reason goes to the node's log and to operators through `Status`): see
    /// [`public_view`].
    Denied = "denied",
    /// A request field is invalid (bad capability encoding, context id, scope, operation,
    /// data length, or too many bytes).
    BadRequest = "bad-request",
    /// The token's object is not in the owner's store (deleted since export).
    ObjectNotFound = "object-not-found",
    /// The owner's store failed.
    Store = "store",
    /// A write would grow the object beyond the node's limit.
    ObjectTooLarge = "object-too-large",
    /// Broadcast baseline: the capability is in this node's revoked table.
    BroadcastRevoked = "broadcast-revoked",
    /// Broadcast baseline: a message from a node that is not a peer.
    UnknownPeer = "unknown-peer",
    /// Broadcast baseline: a peer did not acknowledge a revocation.
    PeerFailed = "peer-failed",
    /// Anything else that went wrong inside the node.
    Internal = "internal",
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A status with `code`, the message, and the kind in [`ERROR_KIND_HEADER`].
pub fn refusal(code: Code, kind: ErrorKind, message: impl fmt::Display) -> Status {
    let mut status = Status::new(code, message.to_string());
    status.metadata_mut().insert(
        ERROR_KIND_HEADER,
        tonic::metadata::MetadataValue::from_static(kind.name()),
    );
    status
}

/// [`ErrorKind::BadRequest`] with `INVALID_ARGUMENT`.
pub fn bad_request(message: impl fmt::Display) -> Status {
    refusal(Code::InvalidArgument, ErrorKind::BadRequest, message)
}

/// The kind and code of an invocation error.
pub fn invoke_kind(e: &InvokeError) -> (Code, ErrorKind) {
    use InvokeError as E;
    match e {
        E::Malformed(_) => (Code::InvalidArgument, ErrorKind::MalformedToken),
        E::WrongOwner { .. } => (Code::InvalidArgument, ErrorKind::WrongOwner),
        E::StaleController { .. } => (Code::Unauthenticated, ErrorKind::StaleController),
        E::NoSuchGuard { .. } => (Code::Unauthenticated, ErrorKind::NoSuchGuard),
        E::Revoked { .. } => (Code::Unauthenticated, ErrorKind::Revoked),
        E::StaleGuard { .. } => (Code::Unauthenticated, ErrorKind::StaleGuard),
        E::Upgraded { .. } => (Code::FailedPrecondition, ErrorKind::Upgraded),
        E::BadTag => (Code::Unauthenticated, ErrorKind::BadTag),
        E::GuardMismatch => (Code::Unauthenticated, ErrorKind::GuardMismatch),
        E::Expired { .. } => (Code::Unauthenticated, ErrorKind::Expired),
        E::RightsExceeded { .. } => (Code::PermissionDenied, ErrorKind::RightsExceeded),
        E::OutOfRange { .. } => (Code::PermissionDenied, ErrorKind::OutOfRange),
        E::Widens(_) => (Code::PermissionDenied, ErrorKind::Widens),
        E::TableFull { .. } => (Code::ResourceExhausted, ErrorKind::TableFull),
        E::DeriveQuota { .. } => (Code::ResourceExhausted, ErrorKind::DeriveQuota),
        E::NotRenewable { .. } => (Code::FailedPrecondition, ErrorKind::NotRenewable),
        E::Flow(_) => (Code::PermissionDenied, ErrorKind::Flow),
        E::Unavailable => (Code::Unavailable, ErrorKind::Unavailable),
    }
}

/// An invocation error as a status.
pub fn invoke_status(e: &InvokeError) -> Status {
    let (code, kind) = invoke_kind(e);
    refusal(code, kind, e)
}

/// The kind and code of an export error.
pub fn export_kind(e: &ExportError) -> (Code, ErrorKind) {
    use ExportError as E;
    match e {
        E::Key(KeySourceError::Lookup(KeyLookupError::KeyRevoked(_))) => {
            (Code::PermissionDenied, ErrorKind::KeyRevoked)
        }
        E::Key(KeySourceError::Lookup(_)) => (Code::NotFound, ErrorKind::NoKey),
        E::Key(KeySourceError::Store(_)) => (Code::Internal, ErrorKind::Store),
        E::Cap(_) => (Code::Unauthenticated, ErrorKind::CapInvalid),
        E::CapRevoked(_) => (Code::PermissionDenied, ErrorKind::CapRevoked),
        E::WrongContext { .. } => (Code::PermissionDenied, ErrorKind::WrongContext),
        E::RightsExceeded { .. } => (Code::PermissionDenied, ErrorKind::RightsExceeded),
        E::OutOfRange { .. } => (Code::PermissionDenied, ErrorKind::OutOfRange),
        E::Expired { .. } => (Code::InvalidArgument, ErrorKind::Expired),
        E::TableFull { .. } => (Code::ResourceExhausted, ErrorKind::TableFull),
        E::Flow(_) => (Code::PermissionDenied, ErrorKind::Flow),
        E::Unavailable => (Code::Unavailable, ErrorKind::Unavailable),
    }
}

/// An export error as a status.
pub fn export_status(e: &ExportError) -> Status {
    let (code, kind) = export_kind(e);
    refusal(code, kind, e)
}

/// A store error met while serving an accepted invocation, as a status.
pub fn store_status(e: &StoreError) -> Status {
    match e {
        StoreError::NotFound(_) => refusal(Code::NotFound, ErrorKind::ObjectNotFound, e),
        _ => refusal(Code::Internal, ErrorKind::Store, e),
    }
}

/// A broadcast-baseline error as a status.
pub fn broadcast_status(e: &BroadcastError) -> Status {
    match e {
        BroadcastError::Revoked(_) => {
            refusal(Code::PermissionDenied, ErrorKind::BroadcastRevoked, e)
        }
        BroadcastError::UnknownPeer(_) => {
            refusal(Code::PermissionDenied, ErrorKind::UnknownPeer, e)
        }
        BroadcastError::Malformed(_) => bad_request(e),
        BroadcastError::Unavailable => refusal(Code::Unavailable, ErrorKind::Unavailable, e),
    }
}

/// The message every caller but an operator gets for a [`Denied`](ErrorKind::Denied).
pub const DENIED_MESSAGE: &str = "refused (the node's log has the reason)";

/// What a caller who is not an operator is told of `status` (see the [module docs](self)).
pub fn public_view(status: &Status) -> Status {
    use ErrorKind as K;
    let kind = kind_of(status);
    let (code, kind, message) = match kind {
        Some(K::Upgraded) => (
            status.code(),
            K::Upgraded,
            "the token's guard was upgraded: renew the token",
        ),
        Some(K::BadRequest) => (status.code(), K::BadRequest, "malformed request"),
        Some(K::TableFull) => (status.code(), K::TableFull, "the guard table is full"),
        Some(K::DeriveQuota) => (
            status.code(),
            K::DeriveQuota,
            "the token's guard has as many derived guards as it may",
        ),
        Some(K::ObjectTooLarge) => (
            status.code(),
            K::ObjectTooLarge,
            "the write would grow the object beyond the node's limit",
        ),
        Some(K::ObjectNotFound) => (
            status.code(),
            K::ObjectNotFound,
            "the token's object is gone",
        ),
        Some(K::Busy) => (status.code(), K::Busy, "the node is busy: retry shortly"),
        Some(K::Unavailable) => (status.code(), K::Unavailable, "the node is unavailable"),
        Some(K::PeerFailed) => (status.code(), K::PeerFailed, "a peer did not acknowledge"),
        Some(K::Store | K::Internal) => (Code::Internal, K::Internal, "internal error"),
        _ => (Code::PermissionDenied, K::Denied, DENIED_MESSAGE),
    };
    refusal(code, kind, message)
}

/// The kind a status carries, if a node put one there.
pub fn kind_of(status: &Status) -> Option<ErrorKind> {
    status
        .metadata()
        .get(ERROR_KIND_HEADER)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// An object id from its 16-byte little-endian encoding.
pub fn objid_from_bytes(bytes: &[u8], what: &str) -> Result<ObjID, Status> {
    let b: [u8; 16] = bytes.try_into().map_err(|_| {
        bad_request(format!(
            "{what} must be 16 bytes (a little-endian object id), not {}",
            bytes.len()
        ))
    })?;
    Ok(ObjID::from_le_bytes(b))
}

/// A scope from its message (a missing scope is a bad request).
pub fn scope_from_pb(scope: Option<pb::Scope>) -> Result<Scope, Status> {
    let s = scope.ok_or_else(|| bad_request("missing scope"))?;
    let rights = u16::try_from(s.rights)
        .ok()
        .and_then(Rights::from_raw)
        .ok_or_else(|| bad_request(format!("rights bits {:#x} name no right", s.rights)))?;
    let range =
        ByteRange::new(s.offset, s.len).map_err(|e| bad_request(format!("bad range: {e}")))?;
    Ok(Scope::new(rights, range, Expiry::from_raw(s.expires)))
}

/// The message of a scope.
pub fn scope_to_pb(scope: &Scope) -> pb::Scope {
    pb::Scope {
        rights: u32::from(scope.rights.bits()),
        offset: scope.range.offset(),
        len: scope.range.len(),
        expires: scope.expires.raw(),
    }
}

/// The message of table statistics.
pub fn stats_to_pb(s: &TableStats) -> pb::TableStats {
    pb::TableStats {
        capacity: s.capacity,
        live: s.live,
        pending: s.pending,
        free: s.free,
        epoch: s.epoch,
        active_range: s.active_range,
        batches_flushed: s.batches_flushed,
        range_advances: s.range_advances,
        guards_upgraded: s.guards_upgraded,
        guards_revoked: s.guards_revoked,
    }
}

/// Table statistics from their message.
pub fn stats_from_pb(s: &pb::TableStats) -> TableStats {
    TableStats {
        capacity: s.capacity,
        live: s.live,
        pending: s.pending,
        free: s.free,
        epoch: s.epoch,
        active_range: s.active_range,
        batches_flushed: s.batches_flushed,
        range_advances: s.range_advances,
        guards_upgraded: s.guards_upgraded,
        guards_revoked: s.guards_revoked,
    }
}

/// A capability name from its message.
pub fn cap_name_from_pb(c: &pb::CapName) -> CapName {
    CapName {
        issuer: c.issuer,
        serial: c.serial,
    }
}

/// The message of a capability name.
pub fn cap_name_to_pb(c: &CapName) -> pb::CapName {
    pb::CapName {
        issuer: c.issuer,
        serial: c.serial,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_invoke_error_has_a_kind_that_round_trips_through_metadata() {
        let e = InvokeError::StaleController {
            token: 1,
            current: 2,
        };
        let s = invoke_status(&e);
        assert_eq!(s.code(), Code::Unauthenticated);
        assert_eq!(kind_of(&s), Some(ErrorKind::StaleController));
        assert!(s.message().contains("restarted"));
        assert_eq!("bad-tag".parse::<ErrorKind>(), Ok(ErrorKind::BadTag));
        assert!("nonsense".parse::<ErrorKind>().is_err());
    }

    #[test]
    fn the_public_view_of_every_failed_check_is_one_refusal() {
        use InvokeError as E;
        let guard = crate::token::GuardRef {
            index: 3,
            version: 9,
        };
        let checks = [
            E::Malformed(crate::token::TokenDecodeError::BadMagic(*b"XXXX")),
            E::WrongOwner {
                token_node: 1,
                this_node: 2,
            },
            E::StaleController {
                token: 1,
                current: 2,
            },
            E::NoSuchGuard {
                index: 3,
                capacity: 8,
            },
            E::Revoked { guard },
            E::StaleGuard { guard, current: 10 },
            E::BadTag,
            E::GuardMismatch,
            E::Expired { expires: 1, now: 2 },
            E::RightsExceeded {
                needed: Rights::WRITE,
                held: Rights::READ,
            },
        ];
        let first = public_view(&invoke_status(&checks[0]));
        for e in checks {
            let p = public_view(&invoke_status(&e));
            assert_eq!(kind_of(&p), Some(ErrorKind::Denied), "{e}");
            assert_eq!(p.code(), first.code());
            assert_eq!(p.message(), DENIED_MESSAGE);
        }
        // Not a failed check: the kind stays, the numbers go.
        let full = public_view(&invoke_status(&E::TableFull { capacity: 8192 }));
        assert_eq!(kind_of(&full), Some(ErrorKind::TableFull));
        assert!(!full.message().contains("8192"));
        // A status without a kind is a denial too.
        assert_eq!(
            kind_of(&public_view(&Status::unknown("x"))),
            Some(ErrorKind::Denied)
        );
    }

    #[test]
    fn scopes_round_trip_and_bad_ones_are_refused() {
        let s = Scope::new(
            Rights::READ | Rights::REVOKE,
            ByteRange::new(4096, 100).unwrap(),
            Expiry::from_raw(5),
        );
        assert_eq!(scope_from_pb(Some(scope_to_pb(&s))).unwrap(), s);
        assert!(scope_from_pb(None).is_err());
        let mut bad = scope_to_pb(&s);
        bad.rights = 0x100;
        assert_eq!(
            kind_of(&scope_from_pb(Some(bad)).unwrap_err()),
            Some(ErrorKind::BadRequest)
        );
        let mut empty = scope_to_pb(&s);
        empty.len = 0;
        assert!(scope_from_pb(Some(empty)).is_err());
        assert!(objid_from_bytes(&[0; 15], "context").is_err());
    }
}
