//! Delegations: a holder of a capability (or delegation) for context `P` grants a subset of it to
//! context `R`, signing with `P`'s key.
//!
//! A delegation is its root capability followed by 1 to [`MAX_CHAIN_DEPTH`] links. Layout
//! (version 1, little-endian, [`del_len`]`(depth)` bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `TDEL` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | depth: number of links |
//! | 8 | [`CAP_LEN`] | root capability |
//! | 8 + [`CAP_LEN`] | depth × [`LINK_LEN`] | links, oldest first |
//!
//! A link is: flags (hash), receiver, provider, protections, gate, expires, signature. Link
//! `i`'s signature covers `hash(DEL_DOMAIN || link_i body || root bytes || links 1..i bytes)`, so
//! it binds the whole chain above it, signed by the key of the provider context (its `kuid`).
//!
//! A delegation whose root is an ownership record (`TAG`, see `cap.rs`) delegates ownership:
//! its links must keep the whole gate and grant only `PLUS`/`MINUS` bits
//! ([`DecodeError::BadOwnership`] otherwise). No link may name [`ALL_CONTEXTS`] as receiver
//! ([`DecodeError::ReservedAccessor`]).
//!
//! The delegation of depth `d` is the link `d` with, as its parent, the delegation of depth
//! `d - 1` (or the root capability when `d = 1`); [`Del::prefix_ids`] gives the ids of all of
//! them, so revoking any ancestor revokes every delegation derived from it.

use crate::cap::{CAP_LEN, Cap};
use crate::codec::{Reader, Writer};
use crate::error::{Amplification, DecodeError, DelegateError, SignError, VerifyError};
use crate::gate::{GATE_LEN, Gate};
use crate::hash::{DIGEST_LEN, HashAlg, RecordId};
use crate::ids::{ObjID, Protections};
use crate::keys::{SIG_ENCODED_LEN, Signature, SigningKey};
use crate::label::ALL_CONTEXTS;
use crate::time::Expiry;

/// The deepest chain accepted: at most this many links after the root capability.
pub const MAX_CHAIN_DEPTH: usize = 8;
/// Magic number of an encoded delegation (`"TDEL"`).
pub const DEL_MAGIC: u32 = u32::from_le_bytes(*b"TDEL");
/// Format version this build reads and writes.
pub const DEL_VERSION: u16 = 1;
/// Domain tag of delegation signatures; differs from every other record kind's.
pub const DEL_DOMAIN: &[u8] = b"twizzler-security/delegation/v1\0";
/// Length of the delegation header (magic, version, depth).
pub(crate) const DEL_HEADER_LEN: usize = 8;
/// Length of a link's signed body.
pub(crate) const LINK_BODY_LEN: usize = 2 + 16 + 16 + 2 + GATE_LEN + 8;
/// Length of an encoded link.
pub const LINK_LEN: usize = LINK_BODY_LEN + SIG_ENCODED_LEN;
/// Encoded length of a delegation of the largest depth.
pub const MAX_DEL_LEN: usize = del_len(MAX_CHAIN_DEPTH);

/// Encoded length of a delegation with `depth` links.
pub const fn del_len(depth: usize) -> usize {
    DEL_HEADER_LEN + CAP_LEN + depth * LINK_LEN
}

/// What a delegation link grants, before it is signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DelGrant {
    /// The security context receiving the rights.
    pub receiver: ObjID,
    /// The rights granted: a subset of the parent's.
    pub prots: Protections,
    /// The gate: inside the parent's.
    pub gate: Gate,
    /// The expiry: no later than the parent's.
    pub expires: Expiry,
    /// The hash that forms the signed message.
    pub hash: HashAlg,
}

impl DelGrant {
    /// A grant of `prots` on the whole object to `receiver`, never expiring, hashed with
    /// BLAKE3. Adjust the public fields for anything else: the gate must lie inside the
    /// parent's, and under a parent that expires `expires` must be set to no later than the
    /// parent's expiry (a delegation never outlives its parent, and "never" is later than any
    /// time).
    pub fn new(receiver: ObjID, prots: Protections) -> Self {
        Self {
            receiver,
            prots,
            gate: Gate::WHOLE,
            expires: Expiry::NEVER,
            hash: HashAlg::Blake3,
        }
    }
}

/// One signed link of a delegation chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Link {
    grant: DelGrant,
    provider: ObjID,
    sig: Signature,
}

impl Link {
    /// What the link grants.
    pub fn grant(&self) -> &DelGrant {
        &self.grant
    }

    /// The context that provided (and signed) it.
    pub fn provider(&self) -> ObjID {
        self.provider
    }

    /// The provider's signature.
    pub fn signature(&self) -> &Signature {
        &self.sig
    }

    fn encode_body(&self) -> [u8; LINK_BODY_LEN] {
        encode_link_body(&self.grant, self.provider)
    }

    fn encode(&self) -> [u8; LINK_LEN] {
        let mut out = [0u8; LINK_LEN];
        let mut w = Writer::new(&mut out);
        w.bytes(&self.encode_body());
        self.sig.encode_into(&mut w);
        out
    }

    fn decode_from(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let hash = HashAlg::from_flags(r.u16()?)?;
        let receiver = ObjID::new(r.u128()?);
        if receiver == ALL_CONTEXTS {
            return Err(DecodeError::ReservedAccessor);
        }
        let provider = ObjID::new(r.u128()?);
        let raw_prots = r.u16()?;
        let prots =
            Protections::from_raw(raw_prots).ok_or(DecodeError::UnknownProtections(raw_prots))?;
        let gate = Gate::decode_from(r)?;
        let expires = Expiry::from_raw(r.u64()?);
        let sig = Signature::decode_from(r)?;
        Ok(Self {
            grant: DelGrant {
                receiver,
                prots,
                gate,
                expires,
                hash,
            },
            provider,
            sig,
        })
    }
}

fn encode_link_body(grant: &DelGrant, provider: ObjID) -> [u8; LINK_BODY_LEN] {
    let mut out = [0u8; LINK_BODY_LEN];
    let mut w = Writer::new(&mut out);
    w.u16(grant.hash.flags())
        .u128(grant.receiver.raw())
        .u128(provider.raw())
        .u16(grant.prots.bits());
    grant.gate.encode_into(&mut w);
    w.u64(grant.expires.raw());
    debug_assert_eq!(w.position(), LINK_BODY_LEN);
    out
}

/// What a link's parent grants, for the attenuation checks.
#[derive(Clone, Copy)]
struct Bounds {
    holder: ObjID,
    prots: Protections,
    gate: Gate,
    expires: Expiry,
}

impl Bounds {
    fn of_cap(cap: &Cap) -> Self {
        Self {
            holder: cap.accessor(),
            prots: cap.prots(),
            gate: cap.gate(),
            expires: cap.expires(),
        }
    }

    fn of_grant(g: &DelGrant) -> Self {
        Self {
            holder: g.receiver,
            prots: g.prots,
            gate: g.gate,
            expires: g.expires,
        }
    }

    /// Whether `child` widens these bounds, and how.
    fn amplified_by(&self, child: &DelGrant) -> Option<Amplification> {
        if !self.prots.contains(child.prots) {
            Some(Amplification::Prots)
        } else if !self.gate.contains(&child.gate) {
            Some(Amplification::Gate)
        } else if !child.expires.within(self.expires) {
            Some(Amplification::Expiry)
        } else {
            None
        }
    }
}

/// A delegation chain: a root capability and 1..=[`MAX_CHAIN_DEPTH`] links.
///
/// A `Del` in hand is well-formed (the first link is held apart from the rest, so "at least one
/// link" holds by construction); whether its chain is continuous, attenuating and correctly
/// signed is answered by [`Del::check_chain`] and [`Del::verify_signatures`] (the permission
/// rule runs both).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Del {
    root: Cap,
    first: Link,
    rest: heapless::Vec<Link, { MAX_CHAIN_DEPTH - 1 }>,
}

impl Del {
    /// Delegates from a capability: the holder of `parent` (its accessor context) grants
    /// `grant` to `grant.receiver`, signing with that context's key.
    ///
    /// # Example
    ///
    /// Context A holds read-write on an object and hands context B read-only; B cannot be
    /// handed more than A holds:
    ///
    /// ```
    /// use twizzler_capsec::{
    ///     Cap, CapGrant, Del, DelGrant, DelegateError, ObjID, Protections, SigningKey,
    ///     SigningScheme,
    /// };
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let (object, a, b) = (ObjID::new(0x1000), ObjID::new(0xa), ObjID::new(0xb));
    /// let owner = SigningKey::from_entropy(SigningScheme::Ed25519, &[1; 32])?;
    /// let a_key = SigningKey::from_entropy(SigningScheme::Ed25519, &[2; 32])?;
    /// let rw = Protections::READ | Protections::WRITE;
    /// let cap = Cap::mint(CapGrant::new(object, a, rw), &owner)?;
    ///
    /// // A signs the link with its own key.
    /// let del = Del::from_cap(&cap, DelGrant::new(b, Protections::READ), &a_key)?;
    /// assert_eq!((del.target(), del.provider(), del.receiver()), (object, a, b));
    /// assert_eq!(del.prots(), Protections::READ);
    ///
    /// // Verification: the chain's shape, then each signature under its signer's key.
    /// del.check_chain(0)?;
    /// let (owner_pub, a_pub) = (owner.verifying_key(), a_key.verifying_key());
    /// del.verify_signatures(|signer| match signer {
    ///     s if s == object => Ok(&owner_pub),
    ///     s if s == a => Ok(&a_pub),
    ///     s => Err(twizzler_capsec::KeyLookupError::UnknownKey(s)),
    /// })?;
    ///
    /// // Widening the rights is refused when signing.
    /// let wider = DelGrant::new(b, rw | Protections::EXEC);
    /// assert!(matches!(
    ///     Del::from_cap(&cap, wider, &a_key),
    ///     Err(DelegateError::Amplifies(_))
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_cap(
        parent: &Cap,
        grant: DelGrant,
        provider_key: &SigningKey,
    ) -> Result<Self, DelegateError> {
        let bounds = Bounds::of_cap(parent);
        let first = sign_link(parent, core::iter::empty(), bounds, grant, provider_key)?;
        Ok(Self {
            root: *parent,
            first,
            rest: heapless::Vec::new(),
        })
    }

    /// Delegates further: the receiver of this delegation grants a subset of it.
    pub fn delegate(
        &self,
        grant: DelGrant,
        provider_key: &SigningKey,
    ) -> Result<Self, DelegateError> {
        if self.depth() >= MAX_CHAIN_DEPTH {
            return Err(DelegateError::TooDeep);
        }
        let bounds = Bounds::of_grant(&self.last().grant);
        let link = sign_link(&self.root, self.links(), bounds, grant, provider_key)?;
        let mut del = self.clone();
        del.rest.push(link).map_err(|_| DelegateError::TooDeep)?;
        Ok(del)
    }

    /// The message link `index` (0-based, `< depth`) signs, or `None` past the last link.
    pub fn signed_message(&self, index: usize) -> Option<[u8; DIGEST_LEN]> {
        let link = self.links().nth(index)?;
        Some(link_message(
            &self.root,
            self.links().take(index),
            &link.encode_body(),
            link.grant.hash,
        ))
    }

    fn last(&self) -> &Link {
        self.rest.last().unwrap_or(&self.first)
    }

    /// The root capability.
    pub fn root(&self) -> &Cap {
        &self.root
    }

    /// The links, oldest first.
    pub fn links(&self) -> impl Iterator<Item = &Link> + Clone {
        core::iter::once(&self.first).chain(self.rest.iter())
    }

    /// Number of links.
    pub fn depth(&self) -> usize {
        1 + self.rest.len()
    }

    /// The object the chain grants access to (its root capability's target).
    pub fn target(&self) -> ObjID {
        self.root.target()
    }

    /// The context the delegation is for (the last link's receiver).
    pub fn receiver(&self) -> ObjID {
        self.last().grant.receiver
    }

    /// The context that provided the last link.
    pub fn provider(&self) -> ObjID {
        self.last().provider
    }

    /// The rights the last link grants.
    pub fn prots(&self) -> Protections {
        self.last().grant.prots
    }

    /// The last link's gate.
    pub fn gate(&self) -> Gate {
        self.last().grant.gate
    }

    /// The earliest expiry along the chain (for a chain that passes [`Del::check_chain`], the
    /// last link's).
    pub fn expires(&self) -> Expiry {
        self.links()
            .map(|l| l.grant.expires)
            .fold(self.root.expires(), Expiry::min)
    }

    /// Checks what needs no key: every link is provided by the holder of its parent, widens
    /// nothing, and nothing along the chain has expired at `now`.
    pub fn check_chain(&self, now: u64) -> Result<(), VerifyError> {
        self.root.check_expiry(now)?;
        let mut parent = Bounds::of_cap(&self.root);
        for (i, link) in self.links().enumerate() {
            let n = i + 1;
            if link.provider != parent.holder {
                return Err(VerifyError::BrokenChain { link: n });
            }
            if let Some(what) = parent.amplified_by(&link.grant) {
                return Err(VerifyError::Amplifies { link: n, what });
            }
            if link.grant.expires.is_expired(now) {
                return Err(VerifyError::Expired {
                    expires: link.grant.expires.raw(),
                    now,
                });
            }
            parent = Bounds::of_grant(&link.grant);
        }
        Ok(())
    }

    /// Verifies every signature: the root under its target's key, each link under its
    /// provider's key, as `key_for` resolves them.
    pub fn verify_signatures<'k>(
        &self,
        mut key_for: impl FnMut(ObjID) -> Result<&'k crate::VerifyingKey, crate::KeyLookupError>,
    ) -> Result<(), VerifyError> {
        self.each_signature(|signer, msg, sig| key_for(signer)?.verify(msg, sig))
    }

    /// Calls `check(signer, message, signature)` for the root capability (signed for its
    /// target) and then every link (signed for its provider), stopping at the first error.
    /// The form of verification for keys that are lent for the duration of a call (see
    /// [`crate::Authority::with_key`]).
    pub fn each_signature(
        &self,
        mut check: impl FnMut(ObjID, &[u8], &crate::Signature) -> Result<(), VerifyError>,
    ) -> Result<(), VerifyError> {
        check(
            self.root.target(),
            &self.root.signed_message(),
            self.root.signature(),
        )?;
        for (i, link) in self.links().enumerate() {
            let msg = link_message(
                &self.root,
                self.links().take(i),
                &link.encode_body(),
                link.grant.hash,
            );
            check(link.provider, &msg, &link.sig)?;
        }
        Ok(())
    }

    /// Calls `f` with the id of the root capability, then of each prefix delegation (depth 1,
    /// 2, …, ending with this delegation's own id). Stops early if `f` returns `true`, and
    /// returns whether it did.
    pub fn any_prefix_id(&self, mut f: impl FnMut(&RecordId) -> bool) -> bool {
        if f(&self.root.id()) {
            return true;
        }
        let root = self.root.encode();
        let mut links = [[0u8; LINK_LEN]; MAX_CHAIN_DEPTH];
        for (slot, link) in links.iter_mut().zip(self.links()) {
            *slot = link.encode();
        }
        (1..=self.depth()).any(|depth| {
            let mut h = blake3::Hasher::new();
            h.update(&encode_header(depth));
            h.update(&root);
            for l in links.iter().take(depth) {
                h.update(l);
            }
            f(&RecordId(*h.finalize().as_bytes()))
        })
    }

    /// The record's identity: the BLAKE3 hash of its encoding.
    pub fn id(&self) -> RecordId {
        let mut id = RecordId([0; DIGEST_LEN]);
        self.any_prefix_id(|i| {
            id = *i;
            false
        });
        id
    }

    /// Encoded length.
    pub fn encoded_len(&self) -> usize {
        del_len(self.depth())
    }

    /// Writes the canonical encoding into the front of `out`, returning the length written,
    /// or `None` if `out` is shorter than [`Del::encoded_len`].
    pub fn encode_to(&self, out: &mut [u8]) -> Option<usize> {
        let len = self.encoded_len();
        let dst = out.get_mut(..len)?;
        let mut w = Writer::new(dst);
        w.bytes(&encode_header(self.depth()));
        self.root.encode_into(&mut w);
        for link in self.links() {
            w.bytes(&link.encode());
        }
        Some(len)
    }

    /// The canonical encoding.
    pub fn encode(&self) -> heapless::Vec<u8, MAX_DEL_LEN> {
        let mut buf = [0u8; MAX_DEL_LEN];
        let len = self.encode_to(&mut buf).unwrap_or(0);
        let mut out = heapless::Vec::new();
        let _ = out.extend_from_slice(buf.get(..len).unwrap_or(&[]));
        out
    }

    /// Decodes exactly one delegation (total: any input gives a value or an error, and
    /// `encode(decode(b)) == b` for every accepted `b`).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        r.magic(DEL_MAGIC)?;
        r.version(DEL_VERSION)?;
        let depth = r.u16()?;
        if depth == 0 || usize::from(depth) > MAX_CHAIN_DEPTH {
            return Err(DecodeError::ChainDepth(depth));
        }
        let root = Cap::decode_from(&mut r)?;
        let first = Link::decode_from(&mut r)?;
        check_ownership_link(&root, &first.grant)?;
        let mut rest = heapless::Vec::new();
        for _ in 1..depth {
            let link = Link::decode_from(&mut r)?;
            check_ownership_link(&root, &link.grant)?;
            // Cannot fail: depth <= MAX_CHAIN_DEPTH was checked above.
            rest.push(link)
                .map_err(|_| DecodeError::ChainDepth(depth))?;
        }
        r.finish()?;
        Ok(Self { root, first, rest })
    }
}

/// Under an ownership root, a link keeps the whole gate and grants only `PLUS|MINUS`.
fn check_ownership_link(root: &Cap, grant: &DelGrant) -> Result<(), DecodeError> {
    if !root.is_ownership() {
        return Ok(());
    }
    if grant.prots.bits() & !crate::cap::OwnRights::all().bits() != 0 {
        return Err(DecodeError::BadOwnership("protections"));
    }
    if grant.gate != Gate::WHOLE {
        return Err(DecodeError::BadOwnership("gate"));
    }
    Ok(())
}

fn encode_header(depth: usize) -> [u8; DEL_HEADER_LEN] {
    let mut out = [0u8; DEL_HEADER_LEN];
    // depth <= MAX_CHAIN_DEPTH, so it fits a u16.
    Writer::new(&mut out)
        .u32(DEL_MAGIC)
        .u16(DEL_VERSION)
        .u16(depth as u16);
    out
}

/// The message a link signs: its body, then every byte above it in the chain.
fn link_message<'a>(
    root: &Cap,
    above: impl Iterator<Item = &'a Link>,
    body: &[u8; LINK_BODY_LEN],
    hash: HashAlg,
) -> [u8; DIGEST_LEN] {
    let mut h = hash.hasher();
    h.update(DEL_DOMAIN).update(body).update(&root.encode());
    for link in above {
        h.update(&link.encode());
    }
    h.finalize()
}

/// Checks a new link against its parent's bounds and signs it.
fn sign_link<'a>(
    root: &Cap,
    above: impl Iterator<Item = &'a Link>,
    parent: Bounds,
    grant: DelGrant,
    provider_key: &SigningKey,
) -> Result<Link, DelegateError> {
    if grant.receiver == ALL_CONTEXTS || parent.holder == ALL_CONTEXTS {
        return Err(DelegateError::Reserved);
    }
    if check_ownership_link(root, &grant).is_err() {
        return Err(DelegateError::BadOwnership);
    }
    if let Some(a) = parent.amplified_by(&grant) {
        return Err(DelegateError::Amplifies(a));
    }
    let body = encode_link_body(&grant, parent.holder);
    let msg = link_message(root, above, &body, grant.hash);
    let sig = provider_key
        .sign(&msg)
        .map_err(|SignError| DelegateError::Sign)?;
    Ok(Link {
        grant,
        provider: parent.holder,
        sig,
    })
}
