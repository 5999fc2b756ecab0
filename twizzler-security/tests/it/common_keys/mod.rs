//! Shared setup for every test module of this crate's test binary: deterministic keys, the one
//! map-backed test [`Authority`] (`TestAuth`: keys, revoked keys and records, an optional
//! verification memo), hex helpers, and byte-level helpers to forge delegation chains
//! (re-signing links after editing their bytes). `fixture` adds the context builders.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
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

/// A test authority: `kuid` keys by object, revoked keys (by the object whose key it is),
/// revoked record ids, and an optional memo of verified records.
#[derive(Default)]
pub struct TestAuth {
    pub keys: HashMap<ObjID, VerifyingKey>,
    pub revoked_keys: HashSet<ObjID>,
    pub revoked_records: HashSet<RecordId>,
    /// `Some` to enable the memo (`is_verified` / `remember_verified`).
    pub memo: Option<RefCell<HashSet<RecordId>>>,
    /// Every id passed to `remember_verified`, in call order.
    pub remembered: RefCell<Vec<RecordId>>,
    /// How many times `is_verified` answered `true`.
    pub memo_hits: Cell<usize>,
    /// When set, `is_verified` answers `true` for every id (a memo that vouches for
    /// everything), to observe that a vouched-for record's signature is not checked.
    pub vouch_all: bool,
}

impl TestAuth {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_key(mut self, obj: ObjID, key: &SigningKey) -> Self {
        self.keys.insert(obj, key.verifying_key());
        self
    }

    pub fn with_revoked_key(mut self, obj: ObjID) -> Self {
        self.revoked_keys.insert(obj);
        self
    }

    pub fn with_revoked_record(mut self, id: RecordId) -> Self {
        self.revoked_records.insert(id);
        self
    }

    pub fn with_memo(mut self) -> Self {
        self.memo = Some(RefCell::new(HashSet::new()));
        self
    }

    pub fn remembered(&self) -> Vec<RecordId> {
        self.remembered.borrow().clone()
    }

    pub fn clear_log(&self) {
        self.remembered.borrow_mut().clear();
        self.memo_hits.set(0);
    }
}

impl Authority for TestAuth {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        if self.revoked_keys.contains(&obj) {
            return Err(KeyLookupError::KeyRevoked(obj));
        }
        self.keys.get(&obj).ok_or(KeyLookupError::NoKuid(obj))
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.revoked_records.contains(id)
    }

    fn is_verified(&self, id: &RecordId) -> bool {
        let hit = self.vouch_all || self.memo.as_ref().is_some_and(|m| m.borrow().contains(id));
        if hit {
            self.memo_hits.set(self.memo_hits.get() + 1);
        }
        hit
    }

    fn remember_verified(&self, id: &RecordId) {
        self.remembered.borrow_mut().push(*id);
        if let Some(m) = &self.memo {
            m.borrow_mut().insert(*id);
        }
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
