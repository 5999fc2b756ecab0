//! Signed capabilities.
//!
//! Layout (version 1, little-endian, [`CAP_LEN`] bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `TCAP` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | flags: hash algorithm (bit 0 BLAKE3, bit 1 SHA-256; exactly one) |
//! | 8 | 16 | target object |
//! | 24 | 16 | accessor: the security context the capability is for |
//! | 40 | 2 | protections |
//! | 42 | 24 | gate: offset, length, align |
//! | 66 | 8 | expires: ns since the Unix epoch, 0 = never |
//! | 74 | 130 | signature: scheme, length, 128 bytes zero-padded |
//!
//! The signature covers `hash(CAP_DOMAIN || bytes[0..74])`, signed by the target object's key.

use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, SignError, VerifyError};
use crate::gate::{GATE_LEN, Gate};
use crate::hash::{DIGEST_LEN, HashAlg, RecordId};
use crate::ids::{ObjID, Protections};
use crate::keys::{SIG_ENCODED_LEN, Signature, SigningKey, VerifyingKey};
use crate::time::Expiry;

/// Magic number of an encoded capability (`"TCAP"`).
pub const CAP_MAGIC: u32 = u32::from_le_bytes(*b"TCAP");
/// Format version this build reads and writes.
pub const CAP_VERSION: u16 = 1;
/// Length of the signed body: everything before the signature.
pub const CAP_BODY_LEN: usize = 4 + 2 + 2 + 16 + 16 + 2 + GATE_LEN + 8;
/// Total encoded length of a capability.
pub const CAP_LEN: usize = CAP_BODY_LEN + SIG_ENCODED_LEN;
/// Domain tag of capability signatures; differs from every other record kind's.
pub const CAP_DOMAIN: &[u8] = b"twizzler-security/capability/v1\0";

/// What a capability grants, before it is signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CapGrant {
    /// The object the capability grants access to.
    pub target: ObjID,
    /// The security context the capability is for.
    pub accessor: ObjID,
    /// The rights granted.
    pub prots: Protections,
    /// The byte range (data) or entry points (code) granted.
    pub gate: Gate,
    /// When the capability stops granting.
    pub expires: Expiry,
    /// The hash that forms the signed message.
    pub hash: HashAlg,
}

impl CapGrant {
    /// A grant of `prots` on the whole of `target` to `accessor`, never expiring, hashed with
    /// BLAKE3. Adjust the public fields for anything else.
    pub fn new(target: ObjID, accessor: ObjID, prots: Protections) -> Self {
        Self {
            target,
            accessor,
            prots,
            gate: Gate::WHOLE,
            expires: Expiry::NEVER,
            hash: HashAlg::Blake3,
        }
    }

    fn encode_body(&self) -> [u8; CAP_BODY_LEN] {
        let mut out = [0u8; CAP_BODY_LEN];
        let mut w = Writer::new(&mut out);
        w.u32(CAP_MAGIC)
            .u16(CAP_VERSION)
            .u16(self.hash.flags())
            .u128(self.target.raw())
            .u128(self.accessor.raw())
            .u16(self.prots.bits());
        self.gate.encode_into(&mut w);
        w.u64(self.expires.raw());
        debug_assert_eq!(w.position(), CAP_BODY_LEN);
        out
    }

    /// The message the target's key signs: `hash(CAP_DOMAIN || body)`.
    pub fn signed_message(&self) -> [u8; DIGEST_LEN] {
        self.hash.digest(&[CAP_DOMAIN, &self.encode_body()])
    }
}

/// A signed capability.
///
/// A `Cap` in hand has a well-formed body (known flags and rights, a valid gate); whether its
/// signature verifies is a separate question, answered by [`Cap::verify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cap {
    grant: CapGrant,
    sig: Signature,
}

impl Cap {
    /// Signs `grant` with the target object's signing key.
    ///
    /// # Example
    ///
    /// The owner of object `0x1000` lets context `0x2000` read it:
    ///
    /// ```
    /// use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, SigningKey, SigningScheme};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // In real use the entropy comes from the OS (`SigningKey::generate` takes an RNG).
    /// let owner_key = SigningKey::from_entropy(SigningScheme::Ed25519, &[7; 32])?;
    /// let (object, context) = (ObjID::new(0x1000), ObjID::new(0x2000));
    ///
    /// let cap = Cap::mint(CapGrant::new(object, context, Protections::READ), &owner_key)?;
    /// assert_eq!((cap.target(), cap.accessor()), (object, context));
    /// assert_eq!(cap.prots(), Protections::READ);
    ///
    /// // Anyone holding the owner's verifying key can check it; the encoding round-trips.
    /// cap.verify(&owner_key.verifying_key(), 0)?;
    /// assert_eq!(Cap::decode(&cap.encode())?, cap);
    /// # Ok(())
    /// # }
    /// ```
    pub fn mint(grant: CapGrant, target_key: &SigningKey) -> Result<Self, SignError> {
        let sig = target_key.sign(&grant.signed_message())?;
        Ok(Self { grant, sig })
    }

    /// Assembles a capability from a grant and a signature without checking the signature
    /// (for tools and tests that build records by hand; [`Cap::verify`] still decides).
    pub fn from_parts(grant: CapGrant, sig: Signature) -> Self {
        Self { grant, sig }
    }

    /// What the capability grants.
    pub fn grant(&self) -> &CapGrant {
        &self.grant
    }

    /// The target object.
    pub fn target(&self) -> ObjID {
        self.grant.target
    }

    /// The security context it is for.
    pub fn accessor(&self) -> ObjID {
        self.grant.accessor
    }

    /// The rights granted.
    pub fn prots(&self) -> Protections {
        self.grant.prots
    }

    /// The gate.
    pub fn gate(&self) -> Gate {
        self.grant.gate
    }

    /// The expiry.
    pub fn expires(&self) -> Expiry {
        self.grant.expires
    }

    /// The hash algorithm of the signed message.
    pub fn hash_alg(&self) -> HashAlg {
        self.grant.hash
    }

    /// The signature.
    pub fn signature(&self) -> &Signature {
        &self.sig
    }

    /// The message the signature covers.
    pub fn signed_message(&self) -> [u8; DIGEST_LEN] {
        self.grant.signed_message()
    }

    /// Checks expiry at `now` (ns since the epoch) and the signature under `target_key`.
    ///
    /// # Example
    ///
    /// A capability verifies only under its target's key, and only until it expires:
    ///
    /// ```
    /// use twizzler_capsec::{
    ///     Cap, CapGrant, Expiry, ObjID, Protections, SigningKey, SigningScheme, VerifyError,
    /// };
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let owner = SigningKey::from_entropy(SigningScheme::Ed25519, &[1; 32])?;
    /// let stranger = SigningKey::from_entropy(SigningScheme::Ed25519, &[2; 32])?;
    ///
    /// let mut grant = CapGrant::new(ObjID::new(0x1000), ObjID::new(0x2000), Protections::READ);
    /// grant.expires = Expiry::from_raw(1_000); // ns since the epoch
    /// let cap = Cap::mint(grant, &owner)?;
    ///
    /// assert!(cap.verify(&owner.verifying_key(), 999).is_ok());
    /// assert_eq!(
    ///     cap.verify(&stranger.verifying_key(), 999),
    ///     Err(VerifyError::BadSignature)
    /// );
    /// assert!(matches!(
    ///     cap.verify(&owner.verifying_key(), 1_000),
    ///     Err(VerifyError::Expired { .. })
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    pub fn verify(&self, target_key: &VerifyingKey, now: u64) -> Result<(), VerifyError> {
        self.check_expiry(now)?;
        self.verify_signature(target_key)
    }

    /// Checks only the expiry.
    pub fn check_expiry(&self, now: u64) -> Result<(), VerifyError> {
        if self.grant.expires.is_expired(now) {
            return Err(VerifyError::Expired {
                expires: self.grant.expires.raw(),
                now,
            });
        }
        Ok(())
    }

    /// Checks only the signature.
    pub fn verify_signature(&self, target_key: &VerifyingKey) -> Result<(), VerifyError> {
        target_key.verify(&self.signed_message(), &self.sig)
    }

    /// The record's identity: the BLAKE3 hash of its encoding.
    pub fn id(&self) -> RecordId {
        RecordId::of(&self.encode())
    }

    pub(crate) fn encode_into(&self, w: &mut Writer<'_>) {
        w.bytes(&self.grant.encode_body());
        self.sig.encode_into(w);
    }

    /// The canonical encoding ([`CAP_LEN`] bytes).
    pub fn encode(&self) -> [u8; CAP_LEN] {
        let mut out = [0u8; CAP_LEN];
        self.encode_into(&mut Writer::new(&mut out));
        out
    }

    pub(crate) fn decode_from(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.magic(CAP_MAGIC)?;
        r.version(CAP_VERSION)?;
        let hash = HashAlg::from_flags(r.u16()?)?;
        let target = ObjID::new(r.u128()?);
        let accessor = ObjID::new(r.u128()?);
        let raw_prots = r.u16()?;
        let prots =
            Protections::from_raw(raw_prots).ok_or(DecodeError::UnknownProtections(raw_prots))?;
        let gate = Gate::decode_from(r)?;
        let expires = Expiry::from_raw(r.u64()?);
        let sig = Signature::decode_from(r)?;
        Ok(Self {
            grant: CapGrant {
                target,
                accessor,
                prots,
                gate,
                expires,
                hash,
            },
            sig,
        })
    }

    /// Decodes exactly one capability (total: any input gives a value or an error, and
    /// `encode(decode(b)) == b` for every accepted `b`).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let cap = Self::decode_from(&mut r)?;
        r.finish()?;
        Ok(cap)
    }
}
