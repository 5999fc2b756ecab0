//! Signed records: minting and verifying capabilities for every scheme and hash, expiry,
//! domain separation, tamper evidence (every single-bit flip of an encoded capability or
//! delegation is rejected), revocation by record id, and canonical encodings.

use crate::common_keys::*;
use twizzler_capsec::{
    CAP_BODY_LEN, CAP_DOMAIN, CAP_LEN, CAP_MAGIC, Cap, CapGrant, DEL_DOMAIN, DEL_MAGIC,
    DecodeError, Del, DelGrant, Expiry, Gate, HashAlg, KeyLookupError, ObjID, Protections, Record,
    RecordId, RecordKind, SigningKey, SigningScheme, VerifyError, del_len,
};

/// The object the capabilities grant access to.
const OBJ: ObjID = ObjID::new(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
/// Security contexts.
const CTX: ObjID = ObjID::new(0xc0c0_0001);
const CTX2: ObjID = ObjID::new(0xc0c0_0002);
const CTX3: ObjID = ObjID::new(0xc0c0_0003);

const NOW: u64 = 1_000_000;
const LATER: u64 = 2_000_000;

fn rw() -> Protections {
    Protections::READ | Protections::WRITE
}

/// A grant with every field away from its default.
fn grant(hash: HashAlg) -> CapGrant {
    CapGrant {
        target: OBJ,
        accessor: CTX,
        prots: rw(),
        gate: Gate::new(0x1000, 0x8000, 16).unwrap(),
        expires: Expiry::from_raw(LATER),
        hash,
    }
}

fn other_scheme(s: SigningScheme) -> SigningScheme {
    match s {
        SigningScheme::Ed25519 => SigningScheme::EcdsaP256,
        SigningScheme::EcdsaP256 => SigningScheme::Ed25519,
    }
}

#[test]
fn mint_and_verify_every_scheme_and_hash() {
    for s in SCHEMES {
        let sk = key(s, 1);
        let vk = sk.verifying_key();
        let mut messages = Vec::new();
        for h in HASHES {
            let g = grant(h);
            let cap = Cap::mint(g, &sk).unwrap();
            assert_eq!(cap.grant(), &g);
            assert_eq!(cap.target(), OBJ);
            assert_eq!(cap.accessor(), CTX);
            assert_eq!(cap.prots(), rw());
            assert_eq!(cap.gate(), g.gate);
            assert_eq!(cap.expires(), Expiry::from_raw(LATER));
            assert_eq!(cap.hash_alg(), h);
            assert_eq!(cap.signature().scheme(), s);
            assert_eq!(cap.verify(&vk, NOW), Ok(()), "{s}/{h:?}");
            assert_eq!(cap.verify_signature(&vk), Ok(()));

            // The signed message is hash(CAP_DOMAIN || body), computed here by hand.
            let enc = cap.encode();
            let by_hand = h.digest(&[CAP_DOMAIN, &enc[..CAP_BODY_LEN]]);
            assert_eq!(cap.signed_message(), by_hand, "{s}/{h:?}");
            assert_eq!(g.signed_message(), by_hand);
            messages.push(by_hand);

            let auth = TestAuth::new().with_key(OBJ, &sk);
            assert_eq!(Record::Cap(cap).verify(&auth, NOW), Ok(()));

            // Wrong key of the same scheme.
            let wrong = key(s, 2);
            assert_eq!(
                cap.verify(&wrong.verifying_key(), NOW),
                Err(VerifyError::BadSignature),
                "{s}/{h:?}: wrong key"
            );
            let auth = TestAuth::new().with_key(OBJ, &wrong);
            assert_eq!(
                Record::Cap(cap).verify(&auth, NOW),
                Err(VerifyError::BadSignature)
            );
            // A key of the other scheme.
            let other = key(other_scheme(s), 3);
            assert_eq!(
                cap.verify(&other.verifying_key(), NOW),
                Err(VerifyError::SchemeMismatch)
            );
            // No key at all for the target.
            let auth = TestAuth::new().with_key(CTX, &sk);
            assert_eq!(
                Record::Cap(cap).verify(&auth, NOW),
                Err(VerifyError::Key(KeyLookupError::NoKuid(OBJ)))
            );
            // Signed by the accessor's key instead of the target's.
            let by_accessor = Cap::mint(g, &key(s, 4)).unwrap();
            let auth = TestAuth::new().with_key(OBJ, &sk).with_key(CTX, &key(s, 4));
            assert_eq!(
                Record::Cap(by_accessor).verify(&auth, NOW),
                Err(VerifyError::BadSignature)
            );
        }
        // The hash algorithm changes the message (its flag is in the body, and the hash
        // differs).
        assert_ne!(messages[0], messages[1]);
    }
}

#[test]
fn expiry_boundaries() {
    let sk = key(SigningScheme::Ed25519, 5);
    let vk = sk.verifying_key();
    let auth = TestAuth::new().with_key(OBJ, &sk);
    for t in [1u64, 1_000, NOW, u64::MAX] {
        let mut g = grant(HashAlg::Blake3);
        g.expires = Expiry::from_raw(t);
        let cap = Cap::mint(g, &sk).unwrap();
        // now < t: allowed.
        for now in [0, t - 1] {
            assert_eq!(cap.verify(&vk, now), Ok(()), "expires {t}, now {now}");
            assert_eq!(cap.check_expiry(now), Ok(()));
            assert_eq!(Record::Cap(cap).verify(&auth, now), Ok(()));
        }
        // now >= t: denied.
        for now in [t, t.saturating_add(1), u64::MAX] {
            let expected = Err(VerifyError::Expired { expires: t, now });
            assert_eq!(cap.verify(&vk, now), expected, "expires {t}, now {now}");
            assert_eq!(cap.check_expiry(now), expected);
            assert_eq!(Record::Cap(cap).verify(&auth, now), expected);
        }
    }
    // 0 = never.
    let mut g = grant(HashAlg::Sha256);
    g.expires = Expiry::NEVER;
    let cap = Cap::mint(g, &sk).unwrap();
    assert_eq!(cap.expires().raw(), 0);
    for now in [0, 1, NOW, u64::MAX - 1, u64::MAX] {
        assert_eq!(cap.verify(&vk, now), Ok(()), "never expires, now {now}");
        assert_eq!(Record::Cap(cap).verify(&auth, now), Ok(()));
    }
}

#[test]
fn domain_tags_are_distinct_and_prefix_free() {
    assert_ne!(CAP_DOMAIN, DEL_DOMAIN);
    assert!(!CAP_DOMAIN.starts_with(DEL_DOMAIN));
    assert!(!DEL_DOMAIN.starts_with(CAP_DOMAIN));
    assert_ne!(CAP_MAGIC, DEL_MAGIC);
}

#[test]
fn cap_signatures_do_not_verify_as_delegation_messages() {
    for s in SCHEMES {
        for h in HASHES {
            let sk = key(s, 6);
            let vk = sk.verifying_key();
            let cap = Cap::mint(grant(h), &sk).unwrap();
            let body = &cap.encode()[..CAP_BODY_LEN];
            let as_cap = h.digest(&[CAP_DOMAIN, body]);
            assert_eq!(as_cap, cap.signed_message());
            assert_eq!(vk.verify(&as_cap, cap.signature()), Ok(()));
            // The same body under the delegation domain, or no domain, is another message,
            // and the capability's signature does not cover it.
            for (name, msg) in [
                ("delegation domain", h.digest(&[DEL_DOMAIN, body])),
                ("no domain", h.digest(&[body])),
            ] {
                assert_ne!(msg, as_cap, "{s}/{h:?}: {name}");
                assert_eq!(
                    vk.verify(&msg, cap.signature()),
                    Err(VerifyError::BadSignature),
                    "{s}/{h:?}: {name}"
                );
            }
        }
    }
}

#[test]
fn delegation_signatures_do_not_verify_as_capability_messages() {
    for s in SCHEMES {
        for h in HASHES {
            let obj_key = key(s, 7);
            let ctx_key = key(s, 8);
            let cap = Cap::mint(grant(h), &obj_key).unwrap();
            let mut dg = DelGrant::new(CTX2, Protections::READ);
            dg.gate = cap.gate();
            dg.expires = cap.expires();
            dg.hash = h;
            let del = Del::from_cap(&cap, dg, &ctx_key).unwrap();
            let bytes = del.encode();
            let link = del.links().next().unwrap();

            let by_hand = link_message_by_hand(&bytes, 0, h);
            assert_eq!(del.signed_message(0), Some(by_hand));
            assert_eq!(del.signed_message(1), None);
            assert_ne!(by_hand, cap.signed_message());
            assert_eq!(
                ctx_key.verifying_key().verify(&by_hand, link.signature()),
                Ok(())
            );

            // The same bytes under the capability domain are another message.
            let link_at = link_at(0);
            let as_cap = h.digest(&[
                CAP_DOMAIN,
                &bytes[link_at..link_at + LINK_BODY],
                &bytes[DEL_HEADER..link_at],
            ]);
            assert_ne!(as_cap, by_hand);
            assert_eq!(
                ctx_key.verifying_key().verify(&as_cap, link.signature()),
                Err(VerifyError::BadSignature)
            );

            // A capability for an object whose key is the provider's key, carrying the link's
            // signature, does not verify: the signature is over a delegation message.
            let mut g = grant(h);
            g.target = CTX;
            let forged = Cap::from_parts(g, *link.signature());
            let auth = TestAuth::new().with_key(CTX, &ctx_key);
            assert_eq!(
                Record::Cap(forged).verify(&auth, NOW),
                Err(VerifyError::BadSignature)
            );
        }
    }
}

/// Flips every bit of `valid` one at a time and counts how many flips `reject` rejects;
/// returns the offsets of the bits it accepted.
fn accepted_bit_flips(valid: &[u8], reject: impl Fn(&[u8]) -> bool) -> (usize, Vec<usize>) {
    let mut rejected = 0;
    let mut accepted = Vec::new();
    let mut buf = valid.to_vec();
    for bit in 0..valid.len() * 8 {
        buf[bit / 8] ^= 1 << (bit % 8);
        if reject(&buf) {
            rejected += 1;
        } else {
            accepted.push(bit);
        }
        buf[bit / 8] ^= 1 << (bit % 8);
    }
    (rejected, accepted)
}

/// An authority that knows `key` for `OBJ` and for every object one bit away from it (as if
/// they all shared one `kuid`), so a flipped target is rejected by the signature, not by the
/// key lookup.
fn auth_with_neighbours(key: &SigningKey) -> TestAuth {
    let mut auth = TestAuth::new().with_key(OBJ, key);
    for bit in 0..128 {
        auth = auth.with_key(ObjID::new(OBJ.raw() ^ (1 << bit)), key);
    }
    auth
}

#[test]
fn every_bit_flip_of_a_capability_is_rejected() {
    for s in SCHEMES {
        for h in HASHES {
            let sk = key(s, 9);
            let vk = sk.verifying_key();
            let cap = Cap::mint(grant(h), &sk).unwrap();
            let valid = cap.encode();
            let auth = auth_with_neighbours(&sk);
            assert_eq!(
                Record::decode(RecordKind::Cap, &valid)
                    .unwrap()
                    .verify(&auth, NOW),
                Ok(())
            );

            let (rejected, accepted) = accepted_bit_flips(&valid, |b| {
                let by_cap = match Cap::decode(b) {
                    Err(_) => true,
                    Ok(c) => c.verify(&vk, NOW).is_err(),
                };
                let by_record = match Record::decode(RecordKind::Cap, b) {
                    Err(_) => true,
                    Ok(r) => r.verify(&auth, NOW).is_err(),
                };
                by_cap && by_record
            });
            assert_eq!(valid.len(), CAP_LEN);
            assert_eq!(
                rejected,
                CAP_LEN * 8,
                "{s}/{h:?}: single-bit flips accepted at bits {accepted:?}"
            );
        }
    }
}

/// A depth-2 delegation: root capability (OBJ's key, `root_scheme`) for CTX, then CTX → CTX2
/// and CTX2 → CTX3. Returns it with an authority that knows every key.
fn depth2(root_scheme: SigningScheme, link_scheme: SigningScheme) -> (Del, TestAuth) {
    let obj_key = key(root_scheme, 10);
    let k1 = key(link_scheme, 11);
    let k2 = key(other_scheme(link_scheme), 12);
    let cap = Cap::mint(grant(HashAlg::Blake3), &obj_key).unwrap();
    let mut g1 = DelGrant::new(CTX2, rw());
    g1.gate = Gate::new(0x2000, 0x4000, 32).unwrap();
    g1.expires = Expiry::from_raw(LATER - 1);
    g1.hash = HashAlg::Sha256;
    let d1 = Del::from_cap(&cap, g1, &k1).unwrap();
    let mut g2 = DelGrant::new(CTX3, Protections::READ);
    g2.gate = Gate::new(0x3000, 0x1000, 64).unwrap();
    g2.expires = Expiry::from_raw(LATER - 2);
    let d2 = d1.delegate(g2, &k2).unwrap();
    let auth = auth_with_neighbours(&obj_key)
        .with_key(CTX, &k1)
        .with_key(CTX2, &k2);
    (d2, auth)
}

#[test]
fn every_bit_flip_of_a_depth2_delegation_is_rejected() {
    // Ed25519 links under a P-256 root, and the other way round: both schemes' signatures
    // are exercised at every level.
    for (root_scheme, link_scheme) in [
        (SigningScheme::EcdsaP256, SigningScheme::Ed25519),
        (SigningScheme::Ed25519, SigningScheme::EcdsaP256),
    ] {
        let (del, auth) = depth2(root_scheme, link_scheme);
        let valid = del.encode();
        assert_eq!(valid.len(), del_len(2));
        let record = Record::decode(RecordKind::Del, &valid).unwrap();
        assert_eq!(record, Record::Del(del.clone()));
        assert_eq!(record.verify(&auth, NOW), Ok(()));

        let (rejected, accepted) =
            accepted_bit_flips(&valid, |b| match Record::decode(RecordKind::Del, b) {
                Err(_) => true,
                Ok(r) => r.verify(&auth, NOW).is_err(),
            });
        assert_eq!(
            rejected,
            valid.len() * 8,
            "root {root_scheme}, links from {link_scheme}: single-bit flips accepted at \
             bits {accepted:?}"
        );
    }
}

#[test]
fn record_ids_are_hashes_of_the_encodings() {
    let (d2, _) = depth2(SigningScheme::Ed25519, SigningScheme::Ed25519);
    let root = *d2.root();
    assert_eq!(root.id(), RecordId::of(&root.encode()));
    assert_eq!(Record::Cap(root).id(), root.id());
    assert_eq!(d2.id(), RecordId::of(&d2.encode()));
    assert_eq!(Record::Del(d2.clone()).id(), d2.id());

    // The prefix ids are the root's, the depth-1 delegation's, then this one's.
    let d1_bytes = {
        let mut b = d2.encode()[..del_len(1)].to_vec();
        b[6..8].copy_from_slice(&1u16.to_le_bytes());
        b
    };
    let d1 = Del::decode(&d1_bytes).unwrap();
    assert_eq!(d1.depth(), 1);
    let mut ids = Vec::new();
    let stopped = d2.any_prefix_id(|id| {
        ids.push(*id);
        false
    });
    assert!(!stopped);
    assert_eq!(ids, vec![root.id(), d1.id(), d2.id()]);
    // Stopping early.
    let mut seen = 0;
    assert!(d2.any_prefix_id(|id| {
        seen += 1;
        *id == d1.id()
    }));
    assert_eq!(seen, 2);
    // Distinct records, distinct ids.
    assert_ne!(root.id(), d1.id());
    assert_ne!(d1.id(), d2.id());
}

#[test]
fn revoked_records_do_not_verify() {
    for s in SCHEMES {
        let sk = key(s, 13);
        let cap = Cap::mint(grant(HashAlg::Blake3), &sk).unwrap();
        let other = Cap::mint(grant(HashAlg::Sha256), &sk).unwrap();
        let auth = TestAuth::new().with_key(OBJ, &sk);
        assert_eq!(Record::Cap(cap).verify(&auth, NOW), Ok(()));
        assert!(!Record::Cap(cap).is_revoked(&auth));

        let auth = TestAuth::new()
            .with_key(OBJ, &sk)
            .with_revoked_record(cap.id());
        assert_eq!(
            Record::Cap(cap).verify(&auth, NOW),
            Err(VerifyError::Revoked),
            "{s}: revoked capability"
        );
        assert!(Record::Cap(cap).is_revoked(&auth));
        // Revoking one capability leaves another for the same object alone.
        assert_eq!(Record::Cap(other).verify(&auth, NOW), Ok(()));
        assert!(!Record::Cap(other).is_revoked(&auth));
    }
}

#[test]
fn revoking_any_ancestor_revokes_a_delegation() {
    let (d2, auth) = depth2(SigningScheme::EcdsaP256, SigningScheme::Ed25519);
    let d1 = Del::decode(&{
        let mut b = d2.encode()[..del_len(1)].to_vec();
        b[6..8].copy_from_slice(&1u16.to_le_bytes());
        b
    })
    .unwrap();
    assert_eq!(Record::Del(d1.clone()).verify(&auth, NOW), Ok(()));
    assert_eq!(Record::Del(d2.clone()).verify(&auth, NOW), Ok(()));

    // A sibling of d2 (same parent, other receiver) and an unrelated capability.
    let mut sibling_grant = DelGrant::new(ObjID::new(0x51b), Protections::READ);
    sibling_grant.gate = d1.gate();
    sibling_grant.expires = d1.expires();
    let sibling = d1
        .delegate(sibling_grant, &key(SigningScheme::EcdsaP256, 12))
        .unwrap();
    assert_eq!(Record::Del(sibling.clone()).verify(&auth, NOW), Ok(()));
    let unrelated = Cap::mint(grant(HashAlg::Sha256), &key(SigningScheme::Ed25519, 14)).unwrap();

    let cases = [
        ("root capability", d2.root().id(), true, true),
        ("depth-1 prefix", d1.id(), true, true),
        ("the delegation itself", d2.id(), false, true),
        ("a sibling delegation", sibling.id(), false, false),
        ("an unrelated capability", unrelated.id(), false, false),
    ];
    for (name, id, d1_revoked, d2_revoked) in cases {
        let mut revoking = TestAuth::new().with_revoked_record(id);
        revoking.keys = auth.keys.clone();
        for (del, expect_revoked, which) in [(&d1, d1_revoked, "d1"), (&d2, d2_revoked, "d2")] {
            let got = Record::Del(del.clone()).verify(&revoking, NOW);
            if expect_revoked {
                assert_eq!(got, Err(VerifyError::Revoked), "revoking {name}: {which}");
            } else {
                assert_eq!(got, Ok(()), "revoking {name}: {which}");
            }
            assert_eq!(
                Record::Del(del.clone()).is_revoked(&revoking),
                expect_revoked
            );
        }
    }
    // The root capability itself, as a record, is revoked by its id only.
    let revoking = TestAuth {
        keys: auth.keys.clone(),
        revoked_records: [d1.id()].into(),
        ..TestAuth::default()
    };
    assert_eq!(Record::Cap(*d2.root()).verify(&revoking, NOW), Ok(()));
}

#[test]
fn encodings_are_canonical() {
    for s in SCHEMES {
        for h in HASHES {
            let cap = Cap::mint(grant(h), &key(s, 15)).unwrap();
            let bytes = cap.encode();
            assert_eq!(Cap::decode(&bytes).unwrap(), cap);
            assert_eq!(Cap::decode(&bytes).unwrap().encode(), bytes);
            let rec = Record::decode(RecordKind::Cap, &bytes).unwrap();
            assert_eq!(rec, Record::Cap(cap));
            assert_eq!(rec.kind(), RecordKind::Cap);
            assert_eq!(rec.target(), OBJ);
            assert_eq!(rec.holder(), CTX);
            assert_eq!(rec.prots(), rw());
            assert_eq!(rec.gate(), grant(h).gate);
            assert_eq!(rec.expires(), Expiry::from_raw(LATER));
            // A capability is not a delegation, and the other way round.
            assert_eq!(
                Record::decode(RecordKind::Del, &bytes).unwrap_err(),
                DecodeError::BadMagic {
                    expected: DEL_MAGIC,
                    found: CAP_MAGIC
                }
            );
        }
    }
    for (root_scheme, link_scheme) in [
        (SigningScheme::Ed25519, SigningScheme::Ed25519),
        (SigningScheme::EcdsaP256, SigningScheme::EcdsaP256),
        (SigningScheme::Ed25519, SigningScheme::EcdsaP256),
    ] {
        let (d2, _) = depth2(root_scheme, link_scheme);
        let bytes = d2.encode();
        let back = Del::decode(&bytes).unwrap();
        assert_eq!(back, d2);
        assert_eq!(&back.encode()[..], &bytes[..]);
        assert_eq!(back.encoded_len(), bytes.len());
        let mut buf = vec![0xaau8; bytes.len() + 3];
        assert_eq!(back.encode_to(&mut buf), Some(bytes.len()));
        assert_eq!(&buf[..bytes.len()], &bytes[..]);
        assert_eq!(back.encode_to(&mut buf[..bytes.len() - 1]), None);
        let rec = Record::decode(RecordKind::Del, &bytes).unwrap();
        assert_eq!(rec.kind(), RecordKind::Del);
        assert_eq!(rec.holder(), CTX3);
        assert_eq!(rec.target(), OBJ);
        assert_eq!(rec.prots(), Protections::READ);
        assert_eq!(rec.expires(), Expiry::from_raw(LATER - 2));
        assert_eq!(
            Record::decode(RecordKind::Cap, &bytes).unwrap_err(),
            DecodeError::BadMagic {
                expected: CAP_MAGIC,
                found: DEL_MAGIC
            }
        );
    }
    assert_eq!(RecordKind::from_raw(0), Ok(RecordKind::Cap));
    assert_eq!(RecordKind::from_raw(1), Ok(RecordKind::Del));
    assert_eq!(
        RecordKind::from_raw(2),
        Err(DecodeError::UnknownRecordKind(2))
    );
}

#[test]
fn cap_decode_errors() {
    let cap = Cap::mint(grant(HashAlg::Blake3), &key(SigningScheme::Ed25519, 16)).unwrap();
    let valid = cap.encode();
    let patch = |at: usize, bytes: &[u8]| {
        let mut b = valid;
        b[at..at + bytes.len()].copy_from_slice(bytes);
        Cap::decode(&b)
    };
    assert_eq!(
        patch(0, b"TDEL").unwrap_err(),
        DecodeError::BadMagic {
            expected: CAP_MAGIC,
            found: DEL_MAGIC
        }
    );
    assert_eq!(
        patch(4, &2u16.to_le_bytes()).unwrap_err(),
        DecodeError::UnsupportedVersion {
            found: 2,
            supported: 1
        }
    );
    for flags in [0u16, 3, 4, 0x8001] {
        assert_eq!(
            patch(6, &flags.to_le_bytes()).unwrap_err(),
            DecodeError::BadFlags(flags)
        );
    }
    for prots in [8u16, 0xffff] {
        assert_eq!(
            patch(40, &prots.to_le_bytes()).unwrap_err(),
            DecodeError::UnknownProtections(prots)
        );
    }
    assert!(matches!(
        patch(74, &[9]).unwrap_err(),
        DecodeError::UnknownScheme(9)
    ));
    for len in 0..CAP_LEN {
        assert!(
            matches!(
                Cap::decode(&valid[..len]),
                Err(DecodeError::Truncated { .. })
            ),
            "truncated to {len}"
        );
    }
    let mut long = valid.to_vec();
    long.push(0);
    assert_eq!(
        Cap::decode(&long).unwrap_err(),
        DecodeError::TrailingBytes {
            at: CAP_LEN,
            extra: 1
        }
    );
    assert_eq!(
        Record::decode(RecordKind::Cap, &long).unwrap_err(),
        DecodeError::TrailingBytes {
            at: CAP_LEN,
            extra: 1
        }
    );
}
