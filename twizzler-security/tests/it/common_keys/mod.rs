//! Shared setup for the key, record, delegation and codec tests: deterministic keys, a
//! map-backed [`Authority`] with revocation by record id, hex helpers, and byte-level helpers
//! to forge delegation chains (re-signing links after editing their bytes).
//!
//! Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use twizzler_capsec::{
    Authority, CAP_LEN, DEL_DOMAIN, HashAlg, KeyLookupError, LINK_LEN, ObjID, RecordId,
    SIG_ENCODED_LEN, SigningKey, SigningScheme, VerifyingKey, del_len,
};

/// Both signature schemes.
pub const SCHEMES: [SigningScheme; 2] = [SigningScheme::Ed25519, SigningScheme::EcdsaP256];
/// Both hash algorithms.
pub const HASHES: [HashAlg; 2] = [HashAlg::Blake3, HashAlg::Sha256];

/// Length of the delegation header (magic, version, depth).
pub const DEL_HEADER: usize = 8;
/// Length of a link's signed body (everything but its signature).
pub const LINK_BODY: usize = LINK_LEN - SIG_ENCODED_LEN;
/// Offsets of fields inside a link.
pub const LINK_FLAGS: usize = 0;
pub const LINK_RECEIVER: usize = 2;
pub const LINK_PROVIDER: usize = 18;
pub const LINK_PROTS: usize = 34;
pub const LINK_GATE: usize = 36;
pub const LINK_EXPIRES: usize = 60;

/// A deterministic RNG (tests must be reproducible).
pub fn rng(seed: u64) -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(seed)
}

/// A deterministic signing key of `scheme`, distinct for each `seed`.
pub fn key(scheme: SigningScheme, seed: u64) -> SigningKey {
    SigningKey::generate(scheme, &mut rng(seed))
}

/// Decodes a hex string (whitespace ignored).
pub fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits
        .chunks(2)
        .map(|p| {
            let s = std::str::from_utf8(p).expect("ascii");
            u8::from_str_radix(s, 16).expect("hex digit")
        })
        .collect()
}

/// A test authority: verifying keys by object, and revoked record ids.
#[derive(Default)]
pub struct MapAuth {
    pub keys: HashMap<ObjID, VerifyingKey>,
    pub revoked: HashSet<RecordId>,
}

impl MapAuth {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_key(mut self, obj: ObjID, key: &SigningKey) -> Self {
        self.keys.insert(obj, key.verifying_key());
        self
    }

    pub fn with_revoked(mut self, id: RecordId) -> Self {
        self.revoked.insert(id);
        self
    }
}

impl Authority for MapAuth {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        self.keys.get(&obj).ok_or(KeyLookupError::NoKuid(obj))
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.revoked.contains(id)
    }
}

/// Offset of link `index` (0-based) inside an encoded delegation.
pub const fn link_at(index: usize) -> usize {
    DEL_HEADER + CAP_LEN + index * LINK_LEN
}

/// Number of links of an encoded delegation (from its length).
pub fn depth_of(bytes: &[u8]) -> usize {
    (bytes.len() - DEL_HEADER - CAP_LEN) / LINK_LEN
}

/// Computes, by hand from the encoded bytes, the message link `index` signs:
/// `hash(DEL_DOMAIN || link body || root capability || links before it)`.
pub fn link_message_by_hand(bytes: &[u8], index: usize, hash: HashAlg) -> [u8; 32] {
    let link = link_at(index);
    hash.digest(&[
        DEL_DOMAIN,
        &bytes[link..link + LINK_BODY],
        &bytes[DEL_HEADER..link],
    ])
}

/// Overwrites the signature of link `index` in an encoded delegation.
pub fn write_link_sig(bytes: &mut [u8], index: usize, sig: &twizzler_capsec::Signature) {
    let at = link_at(index) + LINK_BODY;
    bytes[at..at + SIG_ENCODED_LEN].copy_from_slice(&sig.encode());
}

/// Re-signs links `from..` of an encoded delegation after its bytes were edited, the way a
/// forger holding the provider keys would: `signer(index)` gives the key for link `index`.
/// Each link's hash algorithm is read from its flags.
pub fn resign_from<'k>(
    bytes: &mut [u8],
    from: usize,
    mut signer: impl FnMut(usize) -> &'k SigningKey,
) {
    assert!(bytes.len() >= del_len(1));
    for index in from..depth_of(bytes) {
        let at = link_at(index) + LINK_FLAGS;
        let flags = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let hash = HashAlg::from_flags(flags).expect("link flags");
        let msg = link_message_by_hand(bytes, index, hash);
        let sig = signer(index).sign(&msg).expect("sign");
        write_link_sig(bytes, index, &sig);
    }
}
