//! Keys and signatures: RFC 8032 test vectors through the crate's types, the stored encodings
//! (round trips and every decode error), scheme mismatch, P-256 low-S enforcement, PEM, and
//! interoperability with OpenSSL when it is installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common_keys::{SCHEMES, hex, key};
use twizzler_capsec::{
    Cap, CapGrant, DecodeError, HashAlg, KEY_ENCODED_LEN, MAX_KEY_LEN, MAX_SIG_LEN, ObjID,
    PemError, Protections, SIG_ENCODED_LEN, Signature, SigningKey, SigningScheme, VerifyError,
    VerifyingKey,
};

/// One RFC 8032 §7.1 test vector.
struct Rfc8032 {
    name: &'static str,
    secret: &'static str,
    public: &'static str,
    message: &'static str,
    signature: &'static str,
}

const RFC8032_VECTORS: [Rfc8032; 4] = [
    Rfc8032 {
        name: "TEST 1",
        secret: "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        public: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        message: "",
        signature: "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155\
                    5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    },
    Rfc8032 {
        name: "TEST 2",
        secret: "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        public: "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        message: "72",
        signature: "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da\
                    085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    },
    Rfc8032 {
        name: "TEST 3",
        secret: "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        public: "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        message: "af82",
        signature: "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac\
                    18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    },
    Rfc8032 {
        name: "TEST SHA(abc)",
        secret: "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
        public: "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
        message: "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
                  2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
        signature: "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b589\
                    09351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704",
    },
];

/// The order of the P-256 group, big-endian.
const P256_N: &str = "FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551";

fn p256_n() -> [u8; 32] {
    hex(P256_N).try_into().unwrap()
}

/// `a - b` for 256-bit big-endian numbers, `a >= b`.
fn sub_be(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let mut d = i16::from(a[i]) - i16::from(b[i]) - borrow;
        borrow = 0;
        if d < 0 {
            d += 256;
            borrow = 1;
        }
        out[i] = d as u8;
    }
    assert_eq!(borrow, 0, "sub_be underflow");
    out
}

/// `a >> 1` for a 256-bit big-endian number.
fn half_be(a: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut carry = 0u8;
    for i in 0..32 {
        out[i] = (a[i] >> 1) | (carry << 7);
        carry = a[i] & 1;
    }
    out
}

#[test]
fn the_sha_abc_message_is_sha512_of_abc() {
    // Guards the hand-copied vector: the message of TEST SHA(abc) is SHA-512("abc").
    let digest = <sha2::Sha512 as sha2::Digest>::digest(b"abc");
    assert_eq!(digest.as_slice(), &hex(RFC8032_VECTORS[3].message)[..]);
}

#[test]
fn rfc8032_vectors_through_our_types() {
    for (i, v) in RFC8032_VECTORS.iter().enumerate() {
        let secret = hex(v.secret);
        let public = hex(v.public);
        let msg = hex(v.message);
        let expected_sig = hex(v.signature);

        let sk = SigningKey::from_raw(SigningScheme::Ed25519, &secret)
            .unwrap_or_else(|e| panic!("{}: secret rejected: {e}", v.name));
        assert_eq!(sk.scheme(), SigningScheme::Ed25519);
        assert_eq!(
            &sk.to_raw()[..],
            &secret[..],
            "{}: secret round trip",
            v.name
        );
        let vk = sk.verifying_key();
        assert_eq!(&vk.to_raw()[..], &public[..], "{}: public key", v.name);

        let sig = sk.sign(&msg).unwrap();
        assert_eq!(sig.scheme(), SigningScheme::Ed25519);
        assert_eq!(sig.as_bytes(), &expected_sig[..], "{}: signature", v.name);

        let parsed_vk = VerifyingKey::from_raw(SigningScheme::Ed25519, &public).unwrap();
        assert_eq!(parsed_vk, vk, "{}: parsed key equals derived key", v.name);
        let parsed_sig = Signature::from_raw(SigningScheme::Ed25519, &expected_sig).unwrap();
        assert_eq!(parsed_vk.verify(&msg, &parsed_sig), Ok(()), "{}", v.name);

        // A modified message fails (for the empty message, an appended byte).
        let mut other = msg.clone();
        match other.first_mut() {
            Some(b) => *b ^= 1,
            None => other.push(0),
        }
        assert_eq!(
            parsed_vk.verify(&other, &parsed_sig),
            Err(VerifyError::BadSignature),
            "{}: modified message",
            v.name
        );
        // A modified signature fails, in R and in s.
        for at in [0, 31, 32, 63] {
            let mut bad = expected_sig.clone();
            bad[at] ^= 0x01;
            let bad = Signature::from_raw(SigningScheme::Ed25519, &bad).unwrap();
            assert_eq!(
                parsed_vk.verify(&msg, &bad),
                Err(VerifyError::BadSignature),
                "{}: signature byte {at} modified",
                v.name
            );
        }
        // Another vector's key does not verify this signature.
        let next = &RFC8032_VECTORS[(i + 1) % RFC8032_VECTORS.len()];
        let other_vk = VerifyingKey::from_raw(SigningScheme::Ed25519, &hex(next.public)).unwrap();
        assert_eq!(
            other_vk.verify(&msg, &parsed_sig),
            Err(VerifyError::BadSignature),
            "{}: wrong key",
            v.name
        );
    }
}

#[test]
fn scheme_lengths_and_tags() {
    assert_eq!(SigningScheme::Ed25519.tag(), 1);
    assert_eq!(SigningScheme::EcdsaP256.tag(), 2);
    assert_eq!(SigningScheme::from_tag(1), Ok(SigningScheme::Ed25519));
    assert_eq!(SigningScheme::from_tag(2), Ok(SigningScheme::EcdsaP256));
    for t in [0u8, 3, 0x80, 0xff] {
        assert_eq!(
            SigningScheme::from_tag(t),
            Err(DecodeError::UnknownScheme(t))
        );
    }
    assert_eq!(SigningScheme::Ed25519.public_key_len(), 32);
    assert_eq!(SigningScheme::EcdsaP256.public_key_len(), 65);
    for s in SCHEMES {
        assert_eq!(s.secret_key_len(), 32);
        assert_eq!(s.signature_len(), 64);
        let k = key(s, 7);
        assert_eq!(k.verifying_key().to_raw().len(), s.public_key_len());
        assert_eq!(k.to_raw().len(), s.secret_key_len());
        assert_eq!(k.sign(b"m").unwrap().as_bytes().len(), s.signature_len());
    }
    assert_eq!(KEY_ENCODED_LEN, 2 + MAX_KEY_LEN);
    assert_eq!(SIG_ENCODED_LEN, 2 + MAX_SIG_LEN);
}

#[test]
fn encodings_round_trip_for_both_schemes() {
    for s in SCHEMES {
        for seed in 0..4 {
            let sk = key(s, 100 + seed);
            let vk = sk.verifying_key();

            let enc = vk.encode();
            assert_eq!(enc[0], s.tag());
            assert_eq!(usize::from(enc[1]), s.public_key_len());
            assert_eq!(&enc[2..2 + s.public_key_len()], &vk.to_raw()[..]);
            assert!(enc[2 + s.public_key_len()..].iter().all(|&b| b == 0));
            let back = VerifyingKey::decode(&enc).unwrap();
            assert_eq!(back, vk, "{s}: verifying key round trip");
            assert_eq!(back.encode(), enc);
            assert_eq!(VerifyingKey::from_raw(s, &vk.to_raw()).unwrap(), vk);

            let enc = sk.encode();
            assert_eq!(enc[0], s.tag());
            assert_eq!(usize::from(enc[1]), s.secret_key_len());
            let back = SigningKey::decode(&enc[..]).unwrap();
            assert_eq!(back.scheme(), s);
            assert_eq!(
                &back.to_raw()[..],
                &sk.to_raw()[..],
                "{s}: signing key round trip"
            );
            assert_eq!(back.verifying_key(), vk);
            assert_eq!(&back.encode()[..], &enc[..]);
            let back = SigningKey::from_raw(s, &sk.to_raw()).unwrap();
            assert_eq!(back.verifying_key(), vk);

            let sig = sk.sign(b"round trip").unwrap();
            let enc = sig.encode();
            assert_eq!(enc[0], s.tag());
            assert_eq!(enc[1], 64);
            assert!(enc[66..].iter().all(|&b| b == 0));
            let back = Signature::decode(&enc).unwrap();
            assert_eq!(back, sig, "{s}: signature round trip");
            assert_eq!(back.encode(), enc);
            assert_eq!(vk.verify(b"round trip", &back), Ok(()));
        }
    }
}

/// Runs `decode` on the edits of a valid encoding and checks every error.
fn check_tagged_decode_errors<T: std::fmt::Debug>(
    what: &'static str,
    valid: &[u8],
    data_len: usize,
    decode: impl Fn(&[u8]) -> Result<T, DecodeError>,
) {
    assert!(decode(valid).is_ok(), "{what}: the valid encoding decodes");
    let total = valid.len();

    // Unknown scheme tag.
    for tag in [0u8, 3, 0xff] {
        let mut b = valid.to_vec();
        b[0] = tag;
        assert_eq!(
            decode(&b).unwrap_err(),
            DecodeError::UnknownScheme(tag),
            "{what}: tag {tag}"
        );
    }
    // Wrong length field (shorter, longer, zero, larger than the buffer).
    for len in [data_len - 1, data_len + 1, 0, total - 1, 255] {
        let mut b = valid.to_vec();
        b[1] = len as u8;
        assert_eq!(
            decode(&b).unwrap_err(),
            DecodeError::BadLength { what, len },
            "{what}: length field {len}"
        );
    }
    // Non-zero padding: every padding byte, one at a time.
    for at in 2 + data_len..total {
        let mut b = valid.to_vec();
        b[at] = 0x01;
        assert_eq!(
            decode(&b).unwrap_err(),
            DecodeError::NonZeroPadding(what),
            "{what}: padding byte {at}"
        );
    }
    // Truncated, at every length.
    for len in 0..total {
        assert!(
            matches!(decode(&valid[..len]), Err(DecodeError::Truncated { .. })),
            "{what}: truncated to {len}: {:?}",
            decode(&valid[..len])
        );
    }
    // Trailing bytes.
    for extra in [1usize, 2, 130] {
        let mut b = valid.to_vec();
        b.extend(std::iter::repeat_n(0u8, extra));
        assert_eq!(
            decode(&b).unwrap_err(),
            DecodeError::TrailingBytes { at: total, extra },
            "{what}: {extra} trailing bytes"
        );
    }
}

#[test]
fn verifying_key_decode_errors() {
    for s in SCHEMES {
        let vk = key(s, 1).verifying_key();
        check_tagged_decode_errors("verifying key", &vk.encode(), s.public_key_len(), |b| {
            VerifyingKey::decode(b)
        });
        // A key of one scheme relabelled as the other has the wrong length for it.
        let mut b = vk.encode();
        let other = if s == SigningScheme::Ed25519 {
            SigningScheme::EcdsaP256
        } else {
            SigningScheme::Ed25519
        };
        b[0] = other.tag();
        assert_eq!(
            VerifyingKey::decode(&b).unwrap_err(),
            DecodeError::BadLength {
                what: "verifying key",
                len: s.public_key_len()
            }
        );
        // from_raw checks the length too.
        let raw = vk.to_raw();
        assert_eq!(
            VerifyingKey::from_raw(s, &raw[..raw.len() - 1]).unwrap_err(),
            DecodeError::BadLength {
                what: "verifying key",
                len: raw.len() - 1
            }
        );
    }
}

#[test]
fn signing_key_decode_errors() {
    for s in SCHEMES {
        let sk = key(s, 2);
        check_tagged_decode_errors("signing key", &sk.encode()[..], s.secret_key_len(), |b| {
            SigningKey::decode(b)
        });
        assert!(matches!(
            SigningKey::from_raw(s, &[7u8; 31]),
            Err(DecodeError::BadLength {
                what: "signing key",
                len: 31
            })
        ));
    }
    // P-256 scalars must be in 1..n.
    let n = p256_n();
    let n_minus_1 = sub_be(&n, &{
        let mut one = [0u8; 32];
        one[31] = 1;
        one
    });
    assert!(SigningKey::from_raw(SigningScheme::EcdsaP256, &n_minus_1).is_ok());
    for bad in [[0u8; 32], n, [0xff; 32]] {
        assert!(
            matches!(
                SigningKey::from_raw(SigningScheme::EcdsaP256, &bad),
                Err(DecodeError::InvalidKey)
            ),
            "P-256 scalar {bad:02x?} must be rejected"
        );
        let mut enc = key(SigningScheme::EcdsaP256, 3).encode();
        enc[2..34].copy_from_slice(&bad);
        assert!(matches!(
            SigningKey::decode(&enc[..]),
            Err(DecodeError::InvalidKey)
        ));
    }
}

#[test]
fn signature_decode_errors() {
    for s in SCHEMES {
        let sig = key(s, 3).sign(b"x").unwrap();
        check_tagged_decode_errors("signature", &sig.encode(), 64, Signature::decode);
        assert_eq!(
            Signature::from_raw(s, &[1u8; 65]).unwrap_err(),
            DecodeError::BadLength {
                what: "signature",
                len: 65
            }
        );
    }
}

#[test]
fn p256_points_not_on_the_curve_are_invalid() {
    let vk = key(SigningScheme::EcdsaP256, 4).verifying_key();
    let raw = vk.to_raw();
    assert_eq!(raw[0], 0x04, "uncompressed SEC1 point");

    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    let mut y_off = raw.to_vec();
    y_off[64] ^= 0x01;
    cases.push(("y off by one bit".into(), y_off));
    let mut x_off = raw.to_vec();
    x_off[1] ^= 0x80;
    cases.push(("x changed".into(), x_off));
    let mut zero = vec![0u8; 65];
    zero[0] = 0x04;
    cases.push(("(0, 0)".into(), zero));
    for tag in [0x00u8, 0x02, 0x03, 0x05, 0x06, 0x07, 0xff] {
        let mut b = raw.to_vec();
        b[0] = tag;
        cases.push((format!("SEC1 tag {tag:#x}"), b));
    }
    // Coordinates not reduced modulo p: x = 0xff..ff.
    let mut big = raw.to_vec();
    big[1..33].fill(0xff);
    cases.push(("x = 2^256 - 1".into(), big));

    for (name, bytes) in cases {
        assert_eq!(
            VerifyingKey::from_raw(SigningScheme::EcdsaP256, &bytes).unwrap_err(),
            DecodeError::InvalidKey,
            "P-256 key {name}"
        );
        let mut enc = vk.encode();
        enc[2..67].copy_from_slice(&bytes);
        assert_eq!(
            VerifyingKey::decode(&enc).unwrap_err(),
            DecodeError::InvalidKey,
            "encoded P-256 key {name}"
        );
    }
}

/// `p + k` (p = 2^255 - 19) as a 32-byte little-endian Edwards y, sign bit clear.
fn ed_y_p_plus(k: u8) -> [u8; 32] {
    assert!(k <= 18);
    let mut b = [0xffu8; 32];
    b[0] = 0xed + k;
    b[31] = 0x7f;
    b
}

#[test]
fn ed25519_non_canonical_encodings_are_rejected() {
    // The identity (y = 1) with the sign bit of x set: x = 0 has no negative, so this is a
    // non-canonical encoding of a point that decompresses.
    let mut neg_zero = [0u8; 32];
    neg_zero[0] = 1;
    neg_zero[31] = 0x80;
    let mut cases = vec![("identity with sign bit set".to_string(), neg_zero)];
    // y = p + k for every k that fits: values >= p are non-canonical encodings of y = k.
    for k in 0..=18u8 {
        cases.push((format!("y = p + {k}"), ed_y_p_plus(k)));
        let mut neg = ed_y_p_plus(k);
        neg[31] |= 0x80;
        cases.push((format!("y = p + {k}, sign bit set"), neg));
    }
    let mut non_canonical = 0;
    for (name, bytes) in &cases {
        let decompresses = ed25519_dalek::VerifyingKey::from_bytes(bytes).is_ok();
        let got = VerifyingKey::from_raw(SigningScheme::Ed25519, bytes);
        if decompresses {
            non_canonical += 1;
            assert_eq!(
                got.unwrap_err(),
                DecodeError::NonCanonical("Ed25519 verifying key"),
                "{name}"
            );
        } else {
            assert_eq!(got.unwrap_err(), DecodeError::InvalidKey, "{name}");
        }
        let mut enc = key(SigningScheme::Ed25519, 5).verifying_key().encode();
        enc[2..34].copy_from_slice(bytes);
        assert!(VerifyingKey::decode(&enc).is_err(), "encoded {name}");
    }
    assert!(
        non_canonical >= 2,
        "some non-canonical encodings must reach the canonicality check (got {non_canonical})"
    );
}

#[test]
fn ed25519_small_order_keys_are_rejected() {
    // Canonical encodings of points of order 1, 2, 4 and 8.
    let small_order = [
        // Identity (order 1): y = 1.
        "0100000000000000000000000000000000000000000000000000000000000000",
        // Order 2: y = -1.
        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        // Order 4: y = 0, x = ±sqrt(-1).
        "0000000000000000000000000000000000000000000000000000000000000000",
        "0000000000000000000000000000000000000000000000000000000000000080",
        // Order 8.
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
    ];
    for h in small_order {
        let bytes = hex(h);
        // The encodings are points: dalek itself parses them.
        assert!(
            ed25519_dalek::VerifyingKey::from_bytes(&bytes.clone().try_into().unwrap()).is_ok(),
            "{h} should decompress"
        );
        assert_eq!(
            VerifyingKey::from_raw(SigningScheme::Ed25519, &bytes).unwrap_err(),
            DecodeError::InvalidKey,
            "small-order key {h}"
        );
        let mut enc = key(SigningScheme::Ed25519, 6).verifying_key().encode();
        enc[2..34].copy_from_slice(&bytes);
        assert_eq!(
            VerifyingKey::decode(&enc).unwrap_err(),
            DecodeError::InvalidKey,
            "encoded small-order key {h}"
        );
    }
}

#[test]
fn scheme_mismatch() {
    let ed = key(SigningScheme::Ed25519, 10);
    let p = key(SigningScheme::EcdsaP256, 11);
    let msg = b"scheme mismatch";
    let p_sig = p.sign(msg).unwrap();
    let ed_sig = ed.sign(msg).unwrap();
    assert_eq!(p.verifying_key().verify(msg, &p_sig), Ok(()));
    assert_eq!(ed.verifying_key().verify(msg, &ed_sig), Ok(()));
    assert_eq!(
        ed.verifying_key().verify(msg, &p_sig),
        Err(VerifyError::SchemeMismatch)
    );
    assert_eq!(
        p.verifying_key().verify(msg, &ed_sig),
        Err(VerifyError::SchemeMismatch)
    );
    // Relabelling the bytes does not help either: the bytes are not a signature of the
    // other scheme.
    let relabelled = Signature::from_raw(SigningScheme::Ed25519, p_sig.as_bytes()).unwrap();
    assert!(ed.verifying_key().verify(msg, &relabelled).is_err());
    // A P-256 signature from a stored encoding, relabelled with the Ed25519 tag.
    let mut enc = p_sig.encode();
    enc[0] = SigningScheme::Ed25519.tag();
    let relabelled = Signature::decode(&enc).unwrap();
    assert_eq!(relabelled.scheme(), SigningScheme::Ed25519);
    assert_eq!(
        p.verifying_key().verify(msg, &relabelled),
        Err(VerifyError::SchemeMismatch)
    );
}

#[test]
fn p256_high_s_signatures_are_rejected() {
    let n = p256_n();
    let half_n = half_be(&n);
    for seed in 0..4 {
        let sk = key(SigningScheme::EcdsaP256, 20 + seed);
        let vk = sk.verifying_key();
        let msg = format!("high-s {seed}");
        let sig = sk.sign(msg.as_bytes()).unwrap();
        let r: [u8; 32] = sig.as_bytes()[..32].try_into().unwrap();
        let s: [u8; 32] = sig.as_bytes()[32..].try_into().unwrap();
        assert!(s <= half_n, "signing must produce low S (seed {seed})");
        assert_eq!(vk.verify(msg.as_bytes(), &sig), Ok(()));

        let high_s = sub_be(&n, &s);
        assert!(high_s > half_n);
        let mut malleated = r.to_vec();
        malleated.extend_from_slice(&high_s);
        let malleated = Signature::from_raw(SigningScheme::EcdsaP256, &malleated).unwrap();
        assert_ne!(malleated, sig);
        // The malleated signature is valid plain ECDSA (checked with the p256 crate itself,
        // which accepts high S), so only the low-S rule rejects it.
        {
            use p256::ecdsa::signature::Verifier;
            let raw_vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(&vk.to_raw()).unwrap();
            let raw_sig = p256::ecdsa::Signature::from_slice(malleated.as_bytes()).unwrap();
            assert!(
                raw_vk.verify(msg.as_bytes(), &raw_sig).is_ok(),
                "construction check: n - s must be a valid ECDSA signature"
            );
        }
        assert_eq!(
            vk.verify(msg.as_bytes(), &malleated),
            Err(VerifyError::MalformedSignature),
            "high-S signature must be rejected (seed {seed})"
        );
    }
    // r or s out of range: zero, or >= n.
    let sk = key(SigningScheme::EcdsaP256, 30);
    let vk = sk.verifying_key();
    let sig = sk.sign(b"range").unwrap();
    for (name, at, value) in [
        ("r = 0", 0usize, [0u8; 32]),
        ("s = 0", 32, [0u8; 32]),
        ("r = n", 0, n),
        ("s = n", 32, n),
    ] {
        let mut b = sig.as_bytes().to_vec();
        b[at..at + 32].copy_from_slice(&value);
        let bad = Signature::from_raw(SigningScheme::EcdsaP256, &b).unwrap();
        assert_eq!(
            vk.verify(b"range", &bad),
            Err(VerifyError::MalformedSignature),
            "{name}"
        );
    }
}

#[test]
fn pem_round_trips() {
    for s in SCHEMES {
        let sk = key(s, 40);
        let vk = sk.verifying_key();

        let pem = sk.to_pkcs8_pem().unwrap();
        assert!(
            pem.starts_with("-----BEGIN PRIVATE KEY-----\n"),
            "{s}: {}",
            &pem[..]
        );
        let back = SigningKey::from_pkcs8_pem(&pem).unwrap();
        assert_eq!(back.scheme(), s);
        assert_eq!(&back.to_raw()[..], &sk.to_raw()[..]);

        let pem = vk.to_public_key_pem().unwrap();
        assert!(
            pem.starts_with("-----BEGIN PUBLIC KEY-----\n"),
            "{s}: {pem}"
        );
        let back = VerifyingKey::from_public_key_pem(&pem).unwrap();
        assert_eq!(back, vk);

        // A key of one kind is not accepted as the other.
        assert_eq!(
            VerifyingKey::from_public_key_pem(&sk.to_pkcs8_pem().unwrap()).unwrap_err(),
            PemError::Unsupported
        );
        assert!(SigningKey::from_pkcs8_pem(&pem).is_err());
    }
    // Different keys give different PEM.
    assert_ne!(
        key(SigningScheme::Ed25519, 41)
            .verifying_key()
            .to_public_key_pem()
            .unwrap(),
        key(SigningScheme::Ed25519, 42)
            .verifying_key()
            .to_public_key_pem()
            .unwrap()
    );
}

#[test]
fn garbage_pem_is_unsupported() {
    let garbage = [
        "",
        "not a pem at all",
        "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        "-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n",
        // An RSA-ish SPKI header (wrong algorithm OID) of plausible shape.
        "-----BEGIN PUBLIC KEY-----\nMFwwDQYJKoZIhvcNAQEBBQADSwAwSAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf\n9Cnzj4p4WGeKLs1Pt8QuKUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n-----END PUBLIC KEY-----\n",
    ];
    for g in garbage {
        assert_eq!(
            VerifyingKey::from_public_key_pem(g).unwrap_err(),
            PemError::Unsupported,
            "public {g:?}"
        );
        assert_eq!(
            SigningKey::from_pkcs8_pem(g).unwrap_err(),
            PemError::Unsupported,
            "private {g:?}"
        );
    }
}

// ---- OpenSSL interoperability ----

fn openssl_available() -> bool {
    Command::new("which")
        .arg("openssl")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "twizzler-security-keys-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs openssl; returns (success, stdout, stderr).
fn openssl(args: &[&dyn AsRef<std::ffi::OsStr>]) -> (bool, Vec<u8>, String) {
    let out = Command::new("openssl")
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("run openssl");
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Verifies `sig` (as `Signature::to_openssl` gives it) over `msg` with openssl.
fn openssl_verify(
    dir: &TempDir,
    scheme: SigningScheme,
    pub_pem: &Path,
    msg: &[u8],
    sig: &[u8],
) -> bool {
    let msg_path = dir.write("msg.bin", msg);
    let sig_path = dir.write("sig.bin", sig);
    let (ok, _, _) = match scheme {
        SigningScheme::Ed25519 => openssl(&[
            &"pkeyutl",
            &"-verify",
            &"-pubin",
            &"-inkey",
            &pub_pem,
            &"-rawin",
            &"-in",
            &msg_path,
            &"-sigfile",
            &sig_path,
        ]),
        SigningScheme::EcdsaP256 => openssl(&[
            &"dgst",
            &"-sha256",
            &"-verify",
            &pub_pem,
            &"-signature",
            &sig_path,
            &msg_path,
        ]),
    };
    ok
}

/// Minimal DER `SEQUENCE { INTEGER r, INTEGER s }` parser, to 32-byte big-endian r and s.
fn der_to_rs(der: &[u8]) -> ([u8; 32], [u8; 32]) {
    assert_eq!(der[0], 0x30, "DER sequence");
    let mut at = 2;
    let mut int = || {
        assert_eq!(der[at], 0x02, "DER integer");
        let len = usize::from(der[at + 1]);
        let bytes = &der[at + 2..at + 2 + len];
        at += 2 + len;
        let bytes = if bytes.len() > 32 {
            &bytes[bytes.len() - 32..]
        } else {
            bytes
        };
        let mut out = [0u8; 32];
        out[32 - bytes.len()..].copy_from_slice(bytes);
        out
    };
    let r = int();
    let s = int();
    (r, s)
}

/// Prints why an OpenSSL check is skipped, and returns whether to run it.
fn with_openssl(test: &str) -> bool {
    let ok = openssl_available();
    if !ok {
        println!("openssl is not on PATH: the OpenSSL interoperability check `{test}` was skipped");
    }
    ok
}

#[test]
fn openssl_reads_our_public_pem_and_verifies_cap_signatures() {
    if !with_openssl("public PEM and capability signatures") {
        return;
    }
    for s in SCHEMES {
        let dir = TempDir::new(&format!("pub-{}", s.name()));
        let sk = key(s, 50);
        let vk = sk.verifying_key();

        let pub_pem = dir.write("pub.pem", vk.to_public_key_pem().unwrap().as_bytes());
        let (ok, _, err) = openssl(&[&"pkey", &"-pubin", &"-in", &pub_pem, &"-noout"]);
        assert!(ok, "{s}: openssl rejected our public PEM: {err}");
        // OpenSSL reads the same key: its re-export imports back to our key.
        let (ok, reexported, err) = openssl(&[&"pkey", &"-pubin", &"-in", &pub_pem]);
        assert!(ok, "{s}: {err}");
        assert_eq!(
            VerifyingKey::from_public_key_pem(std::str::from_utf8(&reexported).unwrap()).unwrap(),
            vk,
            "{s}: public key re-exported by openssl"
        );

        // A capability's signature over its signed message verifies with openssl.
        for hash in [HashAlg::Blake3, HashAlg::Sha256] {
            let mut grant = CapGrant::new(ObjID::new(0xabc), ObjID::new(0xdef), Protections::READ);
            grant.hash = hash;
            let cap = Cap::mint(grant, &sk).unwrap();
            let msg = cap.signed_message();
            let sig = cap.signature().to_openssl().unwrap();
            if s == SigningScheme::EcdsaP256 {
                assert_eq!(sig[0], 0x30, "DER signature");
            } else {
                assert_eq!(&sig[..], cap.signature().as_bytes());
            }
            assert!(
                openssl_verify(&dir, s, &pub_pem, &msg, &sig),
                "{s}/{hash:?}: openssl did not verify a capability signature"
            );
            let mut tampered = msg;
            tampered[0] ^= 1;
            assert!(
                !openssl_verify(&dir, s, &pub_pem, &tampered, &sig),
                "{s}/{hash:?}: openssl verified a tampered message"
            );
            // Under another key, openssl rejects it too.
            let other = dir.write(
                "other.pem",
                key(s, 51)
                    .verifying_key()
                    .to_public_key_pem()
                    .unwrap()
                    .as_bytes(),
            );
            assert!(
                !openssl_verify(&dir, s, &other, &msg, &sig),
                "{s}/{hash:?}: openssl verified under the wrong key"
            );
        }
    }
}

#[test]
fn openssl_keys_import_and_their_signatures_verify() {
    if !with_openssl("OpenSSL-generated keys and signatures") {
        return;
    }
    for s in SCHEMES {
        let dir = TempDir::new(&format!("theirs-{}", s.name()));
        let gen_args: Vec<&str> = match s {
            SigningScheme::Ed25519 => vec!["genpkey", "-algorithm", "ed25519"],
            SigningScheme::EcdsaP256 => vec![
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ],
        };
        let theirs = dir.0.join("theirs.pem");
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = gen_args
            .iter()
            .map(|a| a as &dyn AsRef<std::ffi::OsStr>)
            .collect();
        args.push(&"-out");
        args.push(&theirs);
        let (ok, _, err) = openssl(&args);
        assert!(ok, "{s}: openssl genpkey: {err}");
        let their_sk =
            SigningKey::from_pkcs8_pem(&std::fs::read_to_string(&theirs).unwrap()).unwrap();
        assert_eq!(their_sk.scheme(), s);
        let (ok, their_pub, err) = openssl(&[&"pkey", &"-in", &theirs, &"-pubout"]);
        assert!(ok, "{err}");
        let their_vk =
            VerifyingKey::from_public_key_pem(std::str::from_utf8(&their_pub).unwrap()).unwrap();
        assert_eq!(their_sk.verifying_key(), their_vk);

        let msg = b"signed by openssl";
        let msg_path = dir.write("omsg.bin", msg);
        let sig_path = dir.0.join("osig.bin");
        let (ok, _, err) = match s {
            SigningScheme::Ed25519 => openssl(&[
                &"pkeyutl", &"-sign", &"-inkey", &theirs, &"-rawin", &"-in", &msg_path, &"-out",
                &sig_path,
            ]),
            SigningScheme::EcdsaP256 => openssl(&[
                &"dgst", &"-sha256", &"-sign", &theirs, &"-out", &sig_path, &msg_path,
            ]),
        };
        assert!(ok, "{s}: openssl sign: {err}");
        let raw = std::fs::read(&sig_path).unwrap();
        let sig = match s {
            SigningScheme::Ed25519 => Signature::from_raw(s, &raw).unwrap(),
            SigningScheme::EcdsaP256 => {
                let (r, mut sv) = der_to_rs(&raw);
                let n = p256_n();
                if sv > half_be(&n) {
                    // OpenSSL does not normalise S; the crate accepts only low S.
                    let mut high = r.to_vec();
                    high.extend_from_slice(&sv);
                    let high = Signature::from_raw(s, &high).unwrap();
                    assert_eq!(
                        their_vk.verify(msg, &high),
                        Err(VerifyError::MalformedSignature)
                    );
                    sv = sub_be(&n, &sv);
                }
                let mut rs = r.to_vec();
                rs.extend_from_slice(&sv);
                Signature::from_raw(s, &rs).unwrap()
            }
        };
        assert_eq!(
            their_vk.verify(msg, &sig),
            Ok(()),
            "{s}: an openssl signature does not verify here"
        );
        assert_eq!(
            their_vk.verify(b"something else", &sig),
            Err(VerifyError::BadSignature)
        );
        // And what we sign with their key verifies with openssl.
        let ours = their_sk.sign(msg).unwrap().to_openssl().unwrap();
        let their_pub_path = dir.write("theirs.pub.pem", &their_pub);
        assert!(openssl_verify(&dir, s, &their_pub_path, msg, &ours));
    }
}

/// `pem.rs` documents PKCS#8 "in the forms OpenSSL reads and writes". Checks both schemes
/// and reports every scheme whose private PEM OpenSSL cannot read.
#[test]
fn openssl_reads_our_private_pem() {
    if !with_openssl("private PEM") {
        return;
    }
    let (_, version, _) = openssl(&[&"version"]);
    let version = String::from_utf8_lossy(&version).trim().to_string();
    let mut failures = Vec::new();
    for s in SCHEMES {
        let dir = TempDir::new(&format!("priv-{}", s.name()));
        let sk = key(s, 52);
        let text = sk.to_pkcs8_pem().unwrap();
        let priv_pem = dir.write("priv.pem", text.as_bytes());
        let (ok, derived, err) = openssl(&[&"pkey", &"-in", &priv_pem, &"-pubout"]);
        if !ok {
            failures.push(format!(
                "{s}: `openssl pkey -in priv.pem` ({version}) rejects SigningKey::to_pkcs8_pem \
                 output: {}\n{}",
                err.trim(),
                &text[..],
            ));
            continue;
        }
        assert_eq!(
            VerifyingKey::from_public_key_pem(std::str::from_utf8(&derived).unwrap()).unwrap(),
            sk.verifying_key(),
            "{s}: public key derived by openssl from our private PEM"
        );
    }
    assert!(
        failures.is_empty(),
        "BUG (twizzler-security/src/pem.rs, SigningKey::to_pkcs8_pem): the module promises \
         PKCS#8 \"in the forms OpenSSL reads\", but the Ed25519 export is PKCS#8 v2 \
         (OneAsymmetricKey, version 1, with the [1] publicKey field, from \
         ed25519_dalek's KeypairBytes), which OpenSSL before 3.5 does not read. Expected a \
         v1 document (version 0, no public key), as `openssl genpkey -algorithm ed25519` \
         writes.\n{}",
        failures.join("\n")
    );
}
