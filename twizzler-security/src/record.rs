//! A record of a security context: a capability or a delegation, and how it is verified.

use crate::cap::Cap;
use crate::codec::{Reader, Writer};
use crate::del::Del;
use crate::error::{DecodeError, KeyLookupError, VerifyError};
use crate::gate::Gate;
use crate::hash::RecordId;
use crate::ids::{ObjID, Protections};
use crate::keys::{Signature, VerifyingKey};
use crate::time::Expiry;

/// What the permission rule needs from its host: keys, revocation, and (optionally) a memory of
/// records already verified.
///
/// The kernel implements this over its object table and key cache; userspace tools over an
/// object store; tests over a map.
pub trait Authority {
    /// The verifying key that signs for `obj`: the key named by `obj`'s `kuid`. An object
    /// without a `kuid`, a `kuid` naming no key, and a revoked key are errors.
    ///
    /// Implement this when the keys outlive the authority (a map of parsed keys). An authority
    /// that can only lend a key for the duration of a call (a kernel whose key objects sit in a
    /// locked table) implements [`Authority::with_key`] instead and leaves this default, which
    /// finds no key: verification only ever goes through `with_key`.
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        Err(KeyLookupError::UnknownKey(obj))
    }

    /// Runs `f` with the verifying key that signs for `obj` (see [`Authority::key_for`]),
    /// lent for the duration of the call. Every verification in this crate looks keys up
    /// through this method; the default lends the key [`Authority::key_for`] returns.
    fn with_key<R>(
        &self,
        obj: ObjID,
        f: impl FnOnce(&VerifyingKey) -> R,
    ) -> Result<R, KeyLookupError> {
        self.key_for(obj).map(f)
    }

    /// Whether the record with this id has been revoked.
    fn is_revoked(&self, _id: &RecordId) -> bool {
        false
    }

    /// Whether the signature check with this id already succeeded, so it need not be done
    /// again: [`cap_check_id`] for a capability's signature (a hash of the key and the
    /// capability's record id), [`signature_check_id`] for each signature of a delegation (a
    /// hash of the key, the signed message and the signature). Binding the memory to the key
    /// itself means a changed key, or an object whose `kuid` now names another key, can never
    /// be vouched for by an earlier success.
    /// Expiry, binding, attenuation, revocation and key lookups are still checked.
    fn is_verified(&self, _id: &RecordId) -> bool {
        false
    }

    /// Called after a signature check succeeded, with its id ([`cap_check_id`] or
    /// [`signature_check_id`]).
    fn remember_verified(&self, _id: &RecordId) {}

    /// Whether the signature check with this id already failed. A check is a pure function of
    /// its key, message and signature, so a failure can be remembered for ever.
    fn is_known_bad(&self, _id: &RecordId) -> bool {
        false
    }

    /// Called after a signature check failed, with its id ([`cap_check_id`] or
    /// [`signature_check_id`]).
    fn remember_failed(&self, _id: &RecordId) {}

    /// Whether a signature may be verified now (called before each verification that no
    /// memory answered). An authority with a budget of work per decision returns `false` once
    /// it is spent: the check then fails with [`VerifyError::Unchecked`] and the record does
    /// not count.
    fn may_verify(&self) -> bool {
        true
    }
}

/// The id under which an [`Authority`] remembers that `sig` over `msg` verified under `key`:
/// BLAKE3, domain-separated, over the key's raw bytes, the message and the signature.
pub fn signature_check_id(key: &VerifyingKey, msg: &[u8], sig: &Signature) -> RecordId {
    let mut h = blake3::Hasher::new_derive_key("twizzler-security 2026-11 signature check v1");
    let raw = key.to_raw();
    h.update(&[key.scheme().tag(), raw.len() as u8]);
    h.update(&raw);
    h.update(&(msg.len() as u64).to_le_bytes());
    h.update(msg);
    h.update(&sig.encode());
    RecordId(*h.finalize().as_bytes())
}

/// The key [`cap_check_id`] hashes under: `blake3::derive_key("twizzler-security 2026-11
/// capability check v1", b"")`, written out so that no call derives it again (a unit test
/// derives it and compares).
const CAP_CHECK_KEY: [u8; 32] = [
    0x71, 0x63, 0x41, 0x99, 0xff, 0x2b, 0xe5, 0x2a, 0xfb, 0x4f, 0xa2, 0xf0, 0xc6, 0xab, 0x25, 0x10,
    0x5d, 0x53, 0xb5, 0x50, 0x09, 0x14, 0x96, 0x70, 0xca, 0x7b, 0x2c, 0x5d, 0x13, 0x4e, 0x5a, 0x20,
];

/// The id under which an [`Authority`] remembers that the signature of the capability whose
/// record id is `record` verified under `key`: BLAKE3 keyed with a constant of its own (a
/// hash apart from [`signature_check_id`]'s, so the two kinds of id meet only by a
/// collision) over the key's scheme, length and raw bytes and the record id.
///
/// It binds what [`signature_check_id`] binds: the record id is a hash of the capability's
/// whole encoding, its body (from which the signed message is computed, hash algorithm
/// included) and its signature, so one id names one key, one message and one signature. It
/// costs one short hash of bytes already at hand where [`signature_check_id`] needs the
/// signed message hashed first: a capability whose check is remembered is judged without
/// hashing its message.
pub fn cap_check_id(key: &VerifyingKey, record: &RecordId) -> RecordId {
    let raw = key.to_raw();
    let mut buf = [0u8; 2 + crate::keys::MAX_KEY_LEN + 32];
    let mut w = Writer::new(&mut buf);
    // The key fits MAX_KEY_LEN (`KeyBytes`, 128 bytes): its length fits a u8, and the whole
    // fits the buffer.
    w.u8(key.scheme().tag())
        .u8(raw.len() as u8)
        .bytes(&raw)
        .bytes(&record.0);
    let n = w.position();
    RecordId(*blake3::keyed_hash(&CAP_CHECK_KEY, buf.get(..n).unwrap_or(&buf)).as_bytes())
}

/// Checks `sig` over the message `msg` gives under the key that signs for `signer`, lent by
/// `auth`, unless `auth` remembers this check (its id, `id_of` the key) succeeding or failing.
/// The message is computed only for a check no memory answered.
fn check_signature<M: AsRef<[u8]>>(
    auth: &impl Authority,
    signer: ObjID,
    id_of: impl FnOnce(&VerifyingKey) -> RecordId,
    msg: impl FnOnce() -> M,
    sig: &Signature,
) -> Result<(), VerifyError> {
    auth.with_key(signer, |key| {
        let id = id_of(key);
        if auth.is_verified(&id) {
            return Ok(());
        }
        if auth.is_known_bad(&id) {
            return Err(VerifyError::BadSignature);
        }
        if !auth.may_verify() {
            return Err(VerifyError::Unchecked);
        }
        match key.verify(msg().as_ref(), sig) {
            Ok(()) => {
                auth.remember_verified(&id);
                Ok(())
            }
            Err(e) => {
                auth.remember_failed(&id);
                Err(e)
            }
        }
    })?
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

    /// Whether it is an ownership record (its root capability has the `TAG` flag): it then
    /// never grants data rights, and its protections field holds `PLUS`/`MINUS`.
    pub fn is_ownership(&self) -> bool {
        match self {
            Self::Cap(c) => c.is_ownership(),
            Self::Del(d) => d.root().is_ownership(),
        }
    }

    /// The rights it grants (for an ownership record, its `PLUS`/`MINUS` bits in the
    /// protections field; see [`Record::is_ownership`]).
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
    /// and attenuating, and every signature valid under the keys `auth` lends (a signature
    /// check `auth` remembers succeeding is not repeated). Does not check what the record is
    /// bound to (target and holder); the permission rule does that first.
    pub fn verify(&self, auth: &impl Authority, now: u64) -> Result<(), VerifyError> {
        let id = self.check_revocation(auth)?;
        match self {
            Self::Cap(c) => {
                c.check_expiry(now)?;
                check_signature(
                    auth,
                    c.target(),
                    |key| cap_check_id(key, &id),
                    || c.signed_message(),
                    c.signature(),
                )
            }
            Self::Del(d) => {
                d.check_chain(now)?;
                d.each_signature(|signer, msg, sig| {
                    check_signature(
                        auth,
                        signer,
                        |key| signature_check_id(key, msg, sig),
                        || msg,
                        sig,
                    )
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CAP_CHECK_KEY;

    #[test]
    fn the_cap_check_key_is_the_one_derived() {
        let derived = blake3::derive_key("twizzler-security 2026-11 capability check v1", b"");
        assert_eq!(CAP_CHECK_KEY, derived);
    }
}
