//! A build without the `p256` or `sha256` feature (an Ed25519/BLAKE3-only kernel) refuses a
//! record that uses the algorithm it leaves out with `DecodeError::NotBuiltIn`, whose message
//! names it, and never panics. `cargo xtask test` runs this file without the features
//! (`cargo test -p twizzler-capsec --no-default-features --features alloc --test
//! not_built_in`); the workspace's tests run it with them, where the same bytes decode.

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use twizzler_capsec::{
    CAP_BODY_LEN, Cap, CapGrant, DecodeError, ObjID, Protections, SigningKey, SigningScheme,
    VerifyingKey,
};

/// An Ed25519 capability, encoded.
fn cap_bytes() -> Vec<u8> {
    let key = SigningKey::from_entropy(SigningScheme::Ed25519, &[7; 32]).expect("key");
    let grant = CapGrant::new(ObjID::new(1), ObjID::new(2), Protections::READ);
    Cap::mint(grant, &key).expect("mint").encode().to_vec()
}

/// The record flag selecting SHA-256 (bit 1; the format's, not re-exported).
const FLAG_HASH_SHA256: u16 = 1 << 1;

/// Byte offset of the record flags (after the magic and the version).
const FLAGS_AT: usize = 4 + 2;
/// Byte offset of the signature's scheme tag (right after the body).
const SIG_TAG_AT: usize = CAP_BODY_LEN;

#[test]
fn a_record_hashed_with_sha256_is_refused_without_it() {
    let mut b = cap_bytes();
    b[FLAGS_AT..FLAGS_AT + 2].copy_from_slice(&FLAG_HASH_SHA256.to_le_bytes());
    let got = Cap::decode(&b);
    if cfg!(feature = "sha256") {
        assert!(!matches!(got, Err(DecodeError::NotBuiltIn(_))), "{got:?}");
    } else {
        let err = got.expect_err("a SHA-256 record decoded without SHA-256");
        assert_eq!(err, DecodeError::NotBuiltIn("SHA-256"));
        assert!(err.to_string().contains("SHA-256"), "{err}");
        assert!(err.to_string().contains("leaves out"), "{err}");
    }
}

#[test]
fn a_record_signed_with_p256_is_refused_without_it() {
    let mut b = cap_bytes();
    b[SIG_TAG_AT] = 2;
    let got = Cap::decode(&b);
    if cfg!(feature = "p256") {
        assert!(!matches!(got, Err(DecodeError::NotBuiltIn(_))), "{got:?}");
    } else {
        let err = got.expect_err("a P-256 record decoded without P-256");
        assert_eq!(err, DecodeError::NotBuiltIn("ECDSA P-256"));
        assert!(err.to_string().contains("P-256"), "{err}");
    }
}

#[test]
fn a_p256_key_is_refused_without_it() {
    // A tagged key buffer naming P-256 (tag 2), 65 bytes long.
    let mut enc = vec![2u8, 65];
    enc.extend_from_slice(&[4; 65]);
    enc.resize(2 + twizzler_capsec::MAX_KEY_LEN, 0);
    let got = VerifyingKey::decode(&enc);
    if !cfg!(feature = "p256") {
        assert_eq!(got.err(), Some(DecodeError::NotBuiltIn("ECDSA P-256")));
    } else {
        assert!(!matches!(got, Err(DecodeError::NotBuiltIn(_))));
    }
}

#[test]
fn any_flags_or_tags_never_panic() {
    let base = cap_bytes();
    for flags in 0..=u16::MAX {
        let mut b = base.clone();
        b[FLAGS_AT..FLAGS_AT + 2].copy_from_slice(&flags.to_le_bytes());
        let _ = Cap::decode(&b);
    }
    for tag in 0..=u8::MAX {
        let mut b = base.clone();
        b[SIG_TAG_AT] = tag;
        let _ = Cap::decode(&b);
    }
}
