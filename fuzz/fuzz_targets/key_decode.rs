//! Signature / VerifyingKey / SigningKey decoders, selected by the first input byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use twizzler_capsec::{
    KEY_ENCODED_LEN, SIG_ENCODED_LEN, Signature, SigningKey, VerifyError, VerifyingKey,
};
use twizzler_capsec_fuzz::keys;

const MSG: &[u8] = b"twizzler-security fuzz message";

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 3 {
        0 => signature(rest),
        1 => verifying_key(rest),
        _ => signing_key(rest),
    }
});

fn signature(bytes: &[u8]) {
    let Ok(sig) = Signature::decode(bytes) else {
        return;
    };
    assert_eq!(bytes.len(), SIG_ENCODED_LEN);
    assert_eq!(
        &sig.encode()[..],
        bytes,
        "signature encoding is not canonical"
    );
    assert_eq!(Signature::decode(&sig.encode()), Ok(sig));
    assert_eq!(Signature::from_raw(sig.scheme(), sig.as_bytes()), Ok(sig));
    let _ = format!("{sig:?}");
    let _ = sig.to_openssl();
    // Verifying an arbitrary signature must fail cleanly (forging is out of reach).
    let k = keys();
    for key in [&k.ed25519, &k.p256] {
        let r = key.verify(MSG, &sig);
        if key.scheme() != sig.scheme() {
            assert_eq!(r, Err(VerifyError::SchemeMismatch));
        }
    }
}

fn verifying_key(bytes: &[u8]) {
    let Ok(key) = VerifyingKey::decode(bytes) else {
        return;
    };
    assert_eq!(bytes.len(), KEY_ENCODED_LEN);
    assert_eq!(
        &key.encode()[..],
        bytes,
        "verifying key encoding is not canonical"
    );
    assert_eq!(VerifyingKey::decode(&key.encode()).as_ref(), Ok(&key));
    let raw = key.to_raw();
    assert_eq!(raw.len(), key.scheme().public_key_len());
    assert_eq!(
        VerifyingKey::from_raw(key.scheme(), &raw).as_ref(),
        Ok(&key)
    );
    let _ = format!("{key:?}");
    // A signature by a fixed key verifies only under that key.
    let k = keys();
    let ed_sig = twizzler_capsec_fuzz::ed25519_signing().sign(MSG).unwrap();
    let r = key.verify(MSG, &ed_sig);
    if key == k.ed25519 {
        assert_eq!(r, Ok(()));
    } else {
        assert!(r.is_err());
    }
}

fn signing_key(bytes: &[u8]) {
    let Ok(key) = SigningKey::decode(bytes) else {
        return;
    };
    assert_eq!(bytes.len(), KEY_ENCODED_LEN);
    assert_eq!(
        &key.encode()[..],
        bytes,
        "signing key encoding is not canonical"
    );
    let again = SigningKey::decode(&key.encode()[..]).expect("re-decode of an encoded key");
    assert_eq!(&again.encode()[..], &key.encode()[..]);
    let raw = key.to_raw();
    assert_eq!(raw.len(), key.scheme().secret_key_len());
    let _ = format!("{key:?}");
    // Sign and verify: every accepted signing key must produce signatures its own verifying
    // key accepts (strict Ed25519 / low-S ECDSA included), and that survive encoding.
    let vk = key.verifying_key();
    assert_eq!(vk.scheme(), key.scheme());
    let sig = key.sign(MSG).expect("signing with a decoded key");
    assert_eq!(vk.verify(MSG, &sig), Ok(()));
    let sig2 = Signature::decode(&sig.encode()).expect("re-decode of a fresh signature");
    assert_eq!(vk.verify(MSG, &sig2), Ok(()));
    assert!(vk.verify(b"another message", &sig).is_err());
    // The verifying key survives its own encoding.
    assert_eq!(VerifyingKey::decode(&vk.encode()).as_ref(), Ok(&vk));
}
