//! A record of a security context: a capability or a delegation, and how it is verified.

use crate::cap::Cap;
use crate::codec::Reader;
use crate::del::Del;
use crate::error::{DecodeError, KeyLookupError, VerifyError};
use crate::gate::Gate;
use crate::hash::RecordId;
use crate::ids::{ObjID, Protections};
use crate::keys::VerifyingKey;
use crate::time::Expiry;

/// What the permission rule needs from its host: keys, revocation, and (optionally) a memory of
/// records already verified.
///
/// The kernel implements this over its object table and key cache; userspace tools over an
/// object store; tests over a map.
pub trait Authority {
    /// The verifying key that signs for `obj`: the key named by `obj`'s `kuid`. An object
    /// without a `kuid`, a `kuid` naming no key, and a revoked key are errors.
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError>;

    /// Whether the record with this id has been revoked.
    fn is_revoked(&self, _id: &RecordId) -> bool {
        false
    }

    /// Whether the record with this id was already verified under the keys `key_for` returns
    /// now, so its signatures need not be checked again. Expiry, binding, attenuation,
    /// revocation and key lookups are still checked. Return `true` only for ids passed to
    /// [`Authority::remember_verified`] since the keys involved last changed.
    fn is_verified(&self, _id: &RecordId) -> bool {
        false
    }

    /// Called after a record's signatures verified.
    fn remember_verified(&self, _id: &RecordId) {}
}

/// The kind of a record, as stored in a context's entry table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(u32)]
pub enum RecordKind {
    /// A capability.
    Cap = 0,
    /// A delegation.
    Del = 1,
}

impl RecordKind {
    /// Parses the stored kind.
    pub const fn from_raw(raw: u32) -> Result<Self, DecodeError> {
        match raw {
            0 => Ok(Self::Cap),
            1 => Ok(Self::Del),
            other => Err(DecodeError::UnknownRecordKind(other)),
        }
    }

    /// The stored kind.
    pub const fn raw(self) -> u32 {
        self as u32
    }
}

/// A capability or a delegation.
// Not boxed: the crate works without a heap. Records are decoded one at a time on the
// verification path, so the size of the larger variant costs only stack.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Record {
    /// A capability signed by the target's key.
    Cap(Cap),
    /// A delegation chain rooted in a capability.
    Del(Del),
}

impl Record {
    /// Decodes a record of the given kind.
    pub fn decode(kind: RecordKind, bytes: &[u8]) -> Result<Self, DecodeError> {
        match kind {
            RecordKind::Cap => {
                let mut r = Reader::new(bytes);
                let cap = Cap::decode_from(&mut r)?;
                r.finish()?;
                Ok(Self::Cap(cap))
            }
            RecordKind::Del => Del::decode(bytes).map(Self::Del),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> RecordKind {
        match self {
            Self::Cap(_) => RecordKind::Cap,
            Self::Del(_) => RecordKind::Del,
        }
    }

    /// The object it grants access to.
    pub fn target(&self) -> ObjID {
        match self {
            Self::Cap(c) => c.target(),
            Self::Del(d) => d.target(),
        }
    }

    /// The security context it is for: a capability's accessor, a delegation's receiver.
    pub fn holder(&self) -> ObjID {
        match self {
            Self::Cap(c) => c.accessor(),
            Self::Del(d) => d.receiver(),
        }
    }

    /// The rights it grants.
    pub fn prots(&self) -> Protections {
        match self {
            Self::Cap(c) => c.prots(),
            Self::Del(d) => d.prots(),
        }
    }

    /// Its gate.
    pub fn gate(&self) -> Gate {
        match self {
            Self::Cap(c) => c.gate(),
            Self::Del(d) => d.gate(),
        }
    }

    /// The earliest expiry of the record and everything it derives from.
    pub fn expires(&self) -> Expiry {
        match self {
            Self::Cap(c) => c.expires(),
            Self::Del(d) => d.expires(),
        }
    }

    /// Its identity: the BLAKE3 hash of its encoding.
    pub fn id(&self) -> RecordId {
        match self {
            Self::Cap(c) => c.id(),
            Self::Del(d) => d.id(),
        }
    }

    /// Whether the record, or any record it derives from, is revoked.
    pub fn is_revoked(&self, auth: &impl Authority) -> bool {
        self.check_revocation(auth).is_err()
    }

    /// Checks the record and every record it derives from against `auth`'s revocations, and
    /// returns the record's own id (computed on the way, so it is hashed once).
    fn check_revocation(&self, auth: &impl Authority) -> Result<RecordId, VerifyError> {
        let mut last = None;
        let revoked = match self {
            Self::Cap(c) => {
                let id = c.id();
                last = Some(id);
                auth.is_revoked(&id)
            }
            Self::Del(d) => d.any_prefix_id(|id| {
                last = Some(*id);
                auth.is_revoked(id)
            }),
        };
        match last {
            Some(id) if !revoked => Ok(id),
            _ => Err(VerifyError::Revoked),
        }
    }

    /// Verifies the record at `now`: not revoked, not expired, a delegation chain continuous
    /// and attenuating, and every signature valid under the keys `auth` gives (skipped when
    /// `auth` already vouches for this exact record). Does not check what the record is bound
    /// to (target and holder); the permission rule does that first.
    pub fn verify(&self, auth: &impl Authority, now: u64) -> Result<(), VerifyError> {
        let id = self.check_revocation(auth)?;
        let known = auth.is_verified(&id);
        match self {
            Self::Cap(c) => {
                c.check_expiry(now)?;
                let key = auth.key_for(c.target())?;
                if !known {
                    c.verify_signature(key)?;
                }
            }
            Self::Del(d) => {
                d.check_chain(now)?;
                if known {
                    // Keys may have been revoked since: look them all up again.
                    auth.key_for(d.target())?;
                    for link in d.links() {
                        auth.key_for(link.provider())?;
                    }
                } else {
                    d.verify_signatures(|obj| auth.key_for(obj))?;
                }
            }
        }
        if !known {
            auth.remember_verified(&id);
        }
        Ok(())
    }
}
