//! Signed capabilities, and ownership records (capabilities with the `TAG` flag).
//!
//! Layout (version 1, little-endian, [`CAP_LEN`] bytes):
//!
//! | offset | size | field | meaning with `TAG` (ownership, `docs/DIFC.md` §2.1) |
//! |---|---|---|---|
//! | 0 | 4 | magic `TCAP` | |
//! | 4 | 2 | version (1) | |
//! | 6 | 2 | flags: hash algorithm (bit 0 BLAKE3, bit 1 SHA-256; exactly one); bit 2 `TAG`; other bits zero | |
//! | 8 | 16 | target object | the tag (the tag object's id) |
//! | 24 | 16 | accessor: the security context the capability is for | the owning context, or [`ALL_CONTEXTS`] (a public right) |
//! | 40 | 2 | protections | bit 0 `PLUS`, bit 1 `MINUS`; nothing else |
//! | 42 | 24 | gate: offset, length, align | must be [`Gate::WHOLE`] |
//! | 66 | 8 | expires: ns since the Unix epoch, 0 = never | |
//! | 74 | 130 | signature: scheme, length, 128 bytes zero-padded | by the tag object's key |
//!
//! The signature covers `hash(CAP_DOMAIN || bytes[0..74])` (`hash(TAG_DOMAIN || bytes[0..74])`
//! with `TAG`), signed by the target object's key. The distinct domain means an ownership
//! signature never verifies as a data capability's, nor the reverse. Decoding refuses `TAG` with
//! rights other than `PLUS|MINUS` or a gate other than the whole object
//! ([`DecodeError::BadOwnership`]), and [`ALL_CONTEXTS`] as the accessor of a data capability
//! ([`DecodeError::ReservedAccessor`]).

use crate::codec::{Reader, Writer};
use crate::error::{DecodeError, SignError, VerifyError};
use crate::gate::{GATE_LEN, Gate};
use crate::hash::{DIGEST_LEN, HashAlg, RecordId};
use crate::ids::{ObjID, Protections};
use crate::keys::{SIG_ENCODED_LEN, Signature, SigningKey, VerifyingKey};
use crate::label::ALL_CONTEXTS;
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
/// Domain tag of ownership-record signatures (capabilities with [`FLAG_TAG`]).
pub const TAG_DOMAIN: &[u8] = b"twizzler-security/tag-ownership/v1\0";
/// Capability flag bit 2: the record is an ownership record of a tag, not a data grant.
pub const FLAG_TAG: u16 = 1 << 2;

bitflags::bitflags! {
    /// The rights of an ownership record, stored in its protections field.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct OwnRights: u16 {
        /// `T+`: add the tag, or endorse.
        const PLUS = 1;
        /// `T−`: drop the tag, or declassify.
        const MINUS = 2;
    }
}

impl OwnRights {
    /// The set holding one right.
    pub const fn of(right: crate::flow::Right) -> Self {
        Self::from_bits_retain(right.bits())
    }

    /// Whether the set holds `right`.
    pub const fn has(self, right: crate::flow::Right) -> bool {
        self.bits() & right.bits() != 0
    }

    /// The rights read from a record's protections field.
    pub const fn from_prots(p: Protections) -> Self {
        Self::from_bits_truncate(p.bits())
    }

    /// The protections field that stores these rights.
    pub const fn as_prots(self) -> Protections {
        Protections::from_bits_truncate(self.bits())
    }
}

/// What an ownership record grants, before it is signed by the tag object's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct OwnershipGrant {
    /// The tag (the tag object's id).
    pub tag: ObjID,
    /// The owning context, or [`ALL_CONTEXTS`] for a public right.
    pub holder: ObjID,
    /// The rights.
    pub rights: OwnRights,
    /// When the record stops counting.
    pub expires: Expiry,
    /// The hash that forms the signed message.
    pub hash: HashAlg,
}

impl OwnershipGrant {
    /// `rights` of `tag` for `holder`, never expiring, hashed with BLAKE3.
    pub fn new(tag: ObjID, holder: ObjID, rights: OwnRights) -> Self {
        Self {
            tag,
            holder,
            rights,
            expires: Expiry::NEVER,
            hash: HashAlg::Blake3,
        }
    }

    fn as_cap_grant(&self) -> CapGrant {
        CapGrant {
            target: self.tag,
            accessor: self.holder,
            prots: self.rights.as_prots(),
            gate: Gate::WHOLE,
            expires: self.expires,
            hash: self.hash,
        }
    }
}

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

    fn encode_body(&self, tag: bool) -> [u8; CAP_BODY_LEN] {
        let mut out = [0u8; CAP_BODY_LEN];
        let mut w = Writer::new(&mut out);
        let flags = self.hash.flags() | if tag { FLAG_TAG } else { 0 };
        w.u32(CAP_MAGIC)
            .u16(CAP_VERSION)
            .u16(flags)
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
        self.signed_message_as(false)
    }

    fn signed_message_as(&self, tag: bool) -> [u8; DIGEST_LEN] {
        let domain = if tag { TAG_DOMAIN } else { CAP_DOMAIN };
        self.hash.digest(&[domain, &self.encode_body(tag)])
    }
}

/// A signed capability.
///
/// A `Cap` in hand has a well-formed body (known flags and rights, a valid gate); whether its
/// signature verifies is a separate question, answered by [`Cap::verify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cap {
    grant: CapGrant,
    /// The `TAG` flag: an ownership record.
    tag: bool,
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
        Ok(Self {
            grant,
            tag: false,
            sig,
        })
    }

    /// Signs an ownership record (`TAG` flag) with the tag object's signing key.
    ///
    /// # Example
    ///
    /// ```
    /// use twizzler_capsec::{Cap, ObjID, OwnRights, OwnershipGrant, Right, SigningKey, SigningScheme};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let tag_key = SigningKey::from_entropy(SigningScheme::Ed25519, &[3; 32])?;
    /// let (tag, declassifier) = (ObjID::new(0x7a9), ObjID::new(0x2000));
    /// let rec = Cap::mint_ownership(
    ///     OwnershipGrant::new(tag, declassifier, OwnRights::MINUS),
    ///     &tag_key,
    /// )?;
    /// assert_eq!(rec.ownership_rights(), Some(OwnRights::MINUS));
    /// assert!(rec.ownership_rights().is_some_and(|r| !r.has(Right::Plus)));
    /// rec.verify(&tag_key.verifying_key(), 0)?;
    /// assert_eq!(Cap::decode(&rec.encode())?, rec);
    /// # Ok(())
    /// # }
    /// ```
    pub fn mint_ownership(grant: OwnershipGrant, tag_key: &SigningKey) -> Result<Self, SignError> {
        let grant = grant.as_cap_grant();
        let sig = tag_key.sign(&grant.signed_message_as(true))?;
        Ok(Self {
            grant,
            tag: true,
            sig,
        })
    }

    /// Assembles a capability from a grant and a signature without checking the signature
    /// (for tools and tests that build records by hand; [`Cap::verify`] still decides).
    pub fn from_parts(grant: CapGrant, sig: Signature) -> Self {
        Self {
            grant,
            tag: false,
            sig,
        }
    }

    /// Assembles an ownership record from a grant and a signature without checking the
    /// signature (for tools and tests).
    pub fn ownership_from_parts(grant: OwnershipGrant, sig: Signature) -> Self {
        Self {
            grant: grant.as_cap_grant(),
            tag: true,
            sig,
        }
    }

    /// Whether this is an ownership record (`TAG` flag): it never grants data rights.
    pub fn is_ownership(&self) -> bool {
        self.tag
    }

    /// The rights of an ownership record, or `None` for a data capability.
    pub fn ownership_rights(&self) -> Option<OwnRights> {
        self.tag.then(|| OwnRights::from_prots(self.grant.prots))
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

    /// The message the signature covers (in the ownership domain for a `TAG` record).
    pub fn signed_message(&self) -> [u8; DIGEST_LEN] {
        self.grant.signed_message_as(self.tag)
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
        w.bytes(&self.grant.encode_body(self.tag));
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
        let flags = r.u16()?;
        let tag = flags & FLAG_TAG != 0;
        let hash = HashAlg::from_flags(flags & !FLAG_TAG).map_err(|e| match e {
            DecodeError::BadFlags(_) => DecodeError::BadFlags(flags),
            other => other,
        })?;
        let target = ObjID::new(r.u128()?);
        let accessor = ObjID::new(r.u128()?);
        let raw_prots = r.u16()?;
        if tag && raw_prots & !OwnRights::all().bits() != 0 {
            return Err(DecodeError::BadOwnership("protections"));
        }
        let prots =
            Protections::from_raw(raw_prots).ok_or(DecodeError::UnknownProtections(raw_prots))?;
        let gate = Gate::decode_from(r)?;
        if tag && gate != Gate::WHOLE {
            return Err(DecodeError::BadOwnership("gate"));
        }
        if !tag && accessor == ALL_CONTEXTS {
            return Err(DecodeError::ReservedAccessor);
        }
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
            tag,
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
