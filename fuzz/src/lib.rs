//! Fixtures shared by the fuzz targets and the seed generator (`examples/seed.rs`).
//!
//! The seed generator signs records with exactly these keys, for exactly these objects, so that
//! seeded inputs reach the "signature verifies" paths of `verify`, `verify_signatures` and
//! `evaluate` under the [`FuzzAuthority`] the targets use.
//!
//! Also here: [`CheapAuthority`] (signature checks answered from their ids, for the fast
//! targets), [`check_context`] (the context oracles `ctx_parse`, `ctx_parse_fast` and
//! `rule_fast` share), [`Cursor`] and the unsigned record builders of `rule_fast`, and
//! [`engine`], the host and pool of the `engine` target.

use std::cell::RefCell;

use twizzler_capsec::{
    Authority, KeyLookupError, ObjID, RecordId, SigningKey, SigningScheme, VerifyingKey,
};

/// Raw Ed25519 seed of the fixed key (any 32 bytes are a valid Ed25519 seed).
pub const ED25519_SEED: [u8; 32] = *b"twizzler-security fuzz ed25519!!";

/// Raw P-256 scalar of the fixed ECDSA key (big-endian, must lie in `1..n`: it does).
pub const P256_SCALAR: [u8; 32] = [
    0x1f, 0x2e, 0x3d, 0x4c, 0x5b, 0x6a, 0x79, 0x88, 0x97, 0xa6, 0xb5, 0xc4, 0xd3, 0xe2, 0xf1, 0x01,
    0x12, 0x23, 0x34, 0x45, 0x56, 0x67, 0x78, 0x89, 0x9a, 0xab, 0xbc, 0xcd, 0xde, 0xef, 0xf0, 0x07,
];

/// The data object most seeds grant access to (Ed25519 key).
pub const OBJ: ObjID = ObjID::new(0x1000);
/// A second object, signed for by the P-256 key.
pub const OBJ_P256: ObjID = ObjID::new(0x1001);
/// A code object (Ed25519 key), used for gated exec seeds.
pub const OBJ_CODE: ObjID = ObjID::new(0x1002);
/// An object with no key at all (lookups fail with `NoKuid`).
pub const OBJ_NOKEY: ObjID = ObjID::new(0x1fff);

/// Security contexts. Delegation links are signed by the provider context's key, so the
/// contexts have keys too: all Ed25519 except `CTX_P256`.
pub const CTX: [ObjID; 4] = [
    ObjID::new(0x2000),
    ObjID::new(0x2001),
    ObjID::new(0x2002),
    ObjID::new(0x2003),
];
/// A context whose key is the P-256 one.
pub const CTX_P256: ObjID = ObjID::new(0x2004);

/// Objects whose key is the Ed25519 fixture key.
pub const ED25519_OBJS: [ObjID; 6] = [OBJ, OBJ_CODE, CTX[0], CTX[1], CTX[2], CTX[3]];
/// Objects whose key is the P-256 fixture key.
pub const P256_OBJS: [ObjID; 2] = [OBJ_P256, CTX_P256];

/// Every object id the fixtures know (the targets evaluate against all of them).
pub const ALL_IDS: [ObjID; 9] = [
    OBJ, OBJ_P256, OBJ_CODE, OBJ_NOKEY, CTX[0], CTX[1], CTX[2], CTX[3], CTX_P256,
];

/// The fixed Ed25519 signing key.
pub fn ed25519_signing() -> SigningKey {
    SigningKey::from_raw(SigningScheme::Ed25519, &ED25519_SEED).expect("fixed Ed25519 seed")
}

/// The fixed P-256 signing key.
pub fn p256_signing() -> SigningKey {
    SigningKey::from_raw(SigningScheme::EcdsaP256, &P256_SCALAR).expect("fixed P-256 scalar")
}

/// The signing key the fixtures assign to `obj`, if any.
pub fn signing_key_for(obj: ObjID) -> Option<SigningKey> {
    if ED25519_OBJS.contains(&obj) {
        Some(ed25519_signing())
    } else if P256_OBJS.contains(&obj) {
        Some(p256_signing())
    } else {
        None
    }
}

/// Verifying keys of the fixtures, built once per process.
pub struct Keys {
    /// The Ed25519 verifying key.
    pub ed25519: VerifyingKey,
    /// The P-256 verifying key.
    pub p256: VerifyingKey,
}

impl Keys {
    /// Derives both verifying keys from the fixed secrets.
    pub fn new() -> Self {
        Self {
            ed25519: ed25519_signing().verifying_key(),
            p256: p256_signing().verifying_key(),
        }
    }

    /// The key map: Ed25519 for [`ED25519_OBJS`], P-256 for [`P256_OBJS`], none otherwise.
    pub fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        if ED25519_OBJS.contains(&obj) {
            Ok(&self.ed25519)
        } else if P256_OBJS.contains(&obj) {
            Ok(&self.p256)
        } else {
            Err(KeyLookupError::NoKuid(obj))
        }
    }
}

impl Default for Keys {
    fn default() -> Self {
        Self::new()
    }
}

/// The process-wide fixture keys (key derivation is too slow to repeat per input).
pub fn keys() -> &'static Keys {
    static KEYS: std::sync::OnceLock<Keys> = std::sync::OnceLock::new();
    KEYS.get_or_init(Keys::new)
}

/// A deterministic [`Authority`] over [`keys`].
///
/// - Revocation: a record is revoked when the first byte of its id equals `revoke_byte`
///   (`None`: nothing revoked), so revocation paths are reached without a mutable list.
/// - Verification memo: with `memo` on, ids passed to `remember_verified` are reported by
///   `is_verified`. A fresh authority is made per input, so runs stay reproducible.
pub struct FuzzAuthority {
    keys: &'static Keys,
    revoke_byte: Option<u8>,
    memo: Option<RefCell<Vec<RecordId>>>,
}

impl FuzzAuthority {
    /// No revocation, no memo.
    pub fn plain() -> Self {
        Self {
            keys: keys(),
            revoke_byte: None,
            memo: None,
        }
    }

    /// With a verification memo and optional revocation by id prefix byte.
    pub fn with_memo(revoke_byte: Option<u8>) -> Self {
        Self {
            keys: keys(),
            revoke_byte,
            memo: Some(RefCell::new(Vec::new())),
        }
    }

    /// Same revocation rule, no memo.
    pub fn without_memo(revoke_byte: Option<u8>) -> Self {
        Self {
            keys: keys(),
            revoke_byte,
            memo: None,
        }
    }
}

impl Authority for FuzzAuthority {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        self.keys.key_for(obj)
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.revoke_byte.is_some_and(|b| id.0[0] == b)
    }

    fn is_verified(&self, id: &RecordId) -> bool {
        self.memo.as_ref().is_some_and(|m| m.borrow().contains(id))
    }

    fn remember_verified(&self, id: &RecordId) {
        if let Some(m) = &self.memo {
            let mut m = m.borrow_mut();
            if !m.contains(id) {
                m.push(*id);
            }
        }
    }
}

/// Little-endian `u64` from up to 8 bytes of `data` at `at` (zero-extended; 0 past the end).
pub fn le_u64_at(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(src) = data.get(at..) {
        let n = src.len().min(8);
        b[..n].copy_from_slice(&src[..n]);
    }
    u64::from_le_bytes(b)
}

mod cheap;
mod ctx_check;
mod cursor;
pub mod engine;
mod records;

pub use cheap::{CheapAuthority, CheckOutcome, CheckRule};
pub use ctx_check::{Authorities, CheapSignatures, RealSignatures, RuleParams, check_context};
pub use cursor::Cursor;
pub use records::{ID_POOL, cap_from, del_from, dummy_signature, expiry_from, gate_from};
