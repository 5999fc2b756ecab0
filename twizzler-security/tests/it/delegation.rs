//! Delegation chains: attenuation when delegating, the depth bound, hand-forged chains that
//! amplify or break the provider/holder link (rejected by `check_chain` even with valid
//! signatures), expiry along the chain, and signatures by the wrong provider key.

use crate::common_keys::*;
use twizzler_capsec::{
    Amplification, Cap, CapGrant, DEL_MAGIC, DecodeError, Del, DelGrant, DelegateError, Expiry,
    Gate, HashAlg, KeyLookupError, MAX_CHAIN_DEPTH, MAX_DEL_LEN, ObjID, Protections, Record,
    RecordKind, SigningKey, SigningScheme, VerifyError, del_len,
};

/// The object.
const OBJ: ObjID = ObjID::new(0x0b1);
/// The context holding the root capability.
const P: ObjID = ObjID::new(0xc000);
/// An outsider context.
const Q: ObjID = ObjID::new(0xdead);

const NOW: u64 = 5_000;
const CAP_EXPIRES: u64 = 10_000;

/// Context `i` of a chain: P for 0, then receivers.
fn ctx(i: usize) -> ObjID {
    ObjID::new(0xc000 + i as u128)
}

const R: Protections = Protections::READ;
const W: Protections = Protections::WRITE;
const X: Protections = Protections::EXEC;

fn rw() -> Protections {
    R | W
}

/// Deterministic keys: the object's, each chain context's (index), and the outsider's.
struct Keys {
    obj: SigningKey,
    ctx: Vec<SigningKey>,
    q: SigningKey,
}

impl Keys {
    fn new(scheme: SigningScheme) -> Self {
        Self {
            obj: key(scheme, 1000),
            // Alternate schemes along the chain.
            ctx: (0..=MAX_CHAIN_DEPTH)
                .map(|i| {
                    let s = if i.is_multiple_of(2) {
                        scheme
                    } else {
                        SigningScheme::Ed25519
                    };
                    key(s, 2000 + i as u64)
                })
                .collect(),
            q: key(SigningScheme::Ed25519, 3000),
        }
    }

    fn auth(&self) -> TestAuth {
        let mut a = TestAuth::new()
            .with_key(OBJ, &self.obj)
            .with_key(Q, &self.q);
        for (i, k) in self.ctx.iter().enumerate() {
            a = a.with_key(ctx(i), k);
        }
        a
    }
}

/// The root capability: R|W on pages 1..9, entry align 16, expiring at CAP_EXPIRES.
fn root_cap(keys: &Keys) -> Cap {
    let grant = CapGrant {
        target: OBJ,
        accessor: P,
        prots: rw(),
        gate: Gate::new(0x1000, 0x8000, 16).unwrap(),
        expires: Expiry::from_raw(CAP_EXPIRES),
        hash: HashAlg::Blake3,
    };
    Cap::mint(grant, &keys.obj).unwrap()
}

/// A grant to `receiver` equal to the bounds `(prots, gate, expires)`.
fn same_as(receiver: ObjID, prots: Protections, gate: Gate, expires: Expiry) -> DelGrant {
    DelGrant {
        receiver,
        prots,
        gate,
        expires,
        hash: HashAlg::Sha256,
    }
}

/// The ways a child grant can amplify bounds (prots R|W, gate 0x1000..0x9000 align 16,
/// expiring at `expires`), each with what it widens.
fn amplifying_grants(
    receiver: ObjID,
    gate: Gate,
    expires: u64,
) -> Vec<(&'static str, DelGrant, Amplification)> {
    let base = same_as(receiver, rw(), gate, Expiry::from_raw(expires));
    let with = |f: &dyn Fn(&mut DelGrant)| {
        let mut g = base;
        f(&mut g);
        g
    };
    let (off, len, align) = (gate.offset(), gate.length(), gate.align());
    vec![
        (
            "more prots (R|W|X)",
            with(&|g| g.prots = R | W | X),
            Amplification::Prots,
        ),
        (
            "other prots (X)",
            with(&|g| g.prots = X),
            Amplification::Prots,
        ),
        (
            "gate starting earlier",
            with(&|g| g.gate = Gate::new(off - 1, len + 1, align).unwrap()),
            Amplification::Gate,
        ),
        (
            "gate ending later",
            with(&|g| g.gate = Gate::new(off, len + 1, align).unwrap()),
            Amplification::Gate,
        ),
        (
            "whole-object gate",
            with(&|g| g.gate = Gate::WHOLE),
            Amplification::Gate,
        ),
        (
            "finer entry alignment",
            with(&|g| g.gate = Gate::new(off, len, align / 2).unwrap()),
            Amplification::Gate,
        ),
        (
            "later expiry",
            with(&|g| g.expires = Expiry::from_raw(expires + 1)),
            Amplification::Expiry,
        ),
        (
            "never expiring under an expiring parent",
            with(&|g| g.expires = Expiry::NEVER),
            Amplification::Expiry,
        ),
    ]
}

#[test]
fn from_cap_rejects_amplification() {
    for scheme in SCHEMES {
        let keys = Keys::new(scheme);
        let cap = root_cap(&keys);
        for (name, grant, what) in amplifying_grants(ctx(1), cap.gate(), CAP_EXPIRES) {
            assert_eq!(
                Del::from_cap(&cap, grant, &keys.ctx[0]).unwrap_err(),
                DelegateError::Amplifies(what),
                "{scheme}: {name}"
            );
        }
        // At the bounds exactly, and strictly inside them, it is allowed.
        let exact = same_as(ctx(1), rw(), cap.gate(), cap.expires());
        let d = Del::from_cap(&cap, exact, &keys.ctx[0]).unwrap();
        assert_eq!(Record::Del(d).verify(&keys.auth(), NOW), Ok(()));
        let inside = DelGrant {
            receiver: ctx(1),
            prots: R,
            gate: Gate::new(0x2000, 0x1000, 48).unwrap(),
            expires: Expiry::from_raw(CAP_EXPIRES - 1),
            hash: HashAlg::Blake3,
        };
        let d = Del::from_cap(&cap, inside, &keys.ctx[0]).unwrap();
        assert_eq!(Record::Del(d).verify(&keys.auth(), NOW), Ok(()));
        // Empty prots are a subset of anything.
        let none = same_as(ctx(1), Protections::empty(), cap.gate(), cap.expires());
        assert!(Del::from_cap(&cap, none, &keys.ctx[0]).is_ok());
    }
}

#[test]
fn a_never_expiring_parent_allows_any_expiry() {
    let keys = Keys::new(SigningScheme::Ed25519);
    let mut grant = *root_cap(&keys).grant();
    grant.expires = Expiry::NEVER;
    let cap = Cap::mint(grant, &keys.obj).unwrap();
    for e in [
        Expiry::NEVER,
        Expiry::from_raw(1),
        Expiry::from_raw(u64::MAX),
    ] {
        let g = same_as(ctx(1), R, cap.gate(), e);
        let d = Del::from_cap(&cap, g, &keys.ctx[0]).unwrap();
        assert_eq!(d.expires(), e);
    }
}

#[test]
fn delegate_rejects_amplification() {
    for scheme in SCHEMES {
        let keys = Keys::new(scheme);
        let cap = root_cap(&keys);
        // Link 1 narrows everything: pages 2..6, align 32, expiring at 9_000.
        let link1 = DelGrant {
            receiver: ctx(1),
            prots: rw(),
            gate: Gate::new(0x2000, 0x4000, 32).unwrap(),
            expires: Expiry::from_raw(9_000),
            hash: HashAlg::Blake3,
        };
        let d1 = Del::from_cap(&cap, link1, &keys.ctx[0]).unwrap();
        for (name, grant, what) in amplifying_grants(ctx(2), link1.gate, 9_000) {
            assert_eq!(
                d1.delegate(grant, &keys.ctx[1]).unwrap_err(),
                DelegateError::Amplifies(what),
                "{scheme}: {name}"
            );
        }
        // What link 1 removed cannot come back, even within the root's bounds.
        let back_to_root = same_as(ctx(2), rw(), cap.gate(), Expiry::from_raw(9_000));
        assert_eq!(
            d1.delegate(back_to_root, &keys.ctx[1]).unwrap_err(),
            DelegateError::Amplifies(Amplification::Gate)
        );
        let d2 = d1
            .delegate(same_as(ctx(2), R, link1.gate, link1.expires), &keys.ctx[1])
            .unwrap();
        assert_eq!(Record::Del(d2.clone()).verify(&keys.auth(), NOW), Ok(()));
        let regain_w = same_as(ctx(3), rw(), link1.gate, link1.expires);
        assert_eq!(
            d2.delegate(regain_w, &keys.ctx[2]).unwrap_err(),
            DelegateError::Amplifies(Amplification::Prots)
        );
    }
}

/// A chain of `depth` links P → ctx(1) → … → ctx(depth), each narrowing a little.
fn chain(keys: &Keys, depth: usize) -> Del {
    let cap = root_cap(keys);
    let grant = |i: usize, parent_gate: Gate| DelGrant {
        receiver: ctx(i),
        prots: if i < 4 { rw() } else { R },
        gate: Gate::new(
            parent_gate.offset(),
            parent_gate.length() - 0x100,
            parent_gate.align(),
        )
        .unwrap(),
        expires: Expiry::from_raw(CAP_EXPIRES - i as u64),
        hash: if i.is_multiple_of(2) {
            HashAlg::Blake3
        } else {
            HashAlg::Sha256
        },
    };
    let mut del = Del::from_cap(&cap, grant(1, cap.gate()), &keys.ctx[0]).unwrap();
    for i in 2..=depth {
        del = del
            .delegate(grant(i, del.gate()), &keys.ctx[i - 1])
            .unwrap();
    }
    assert_eq!(del.depth(), depth);
    del
}

#[test]
fn depth_8_verifies_and_depth_9_is_too_deep() {
    assert_eq!(MAX_CHAIN_DEPTH, 8);
    for scheme in SCHEMES {
        let keys = Keys::new(scheme);
        let auth = keys.auth();
        let mut prev_len = 0;
        for depth in 1..=MAX_CHAIN_DEPTH {
            let del = chain(&keys, depth);
            assert_eq!(del.receiver(), ctx(depth));
            assert_eq!(del.provider(), ctx(depth - 1));
            assert_eq!(del.target(), OBJ);
            assert_eq!(del.links().count(), depth);
            assert_eq!(del.check_chain(NOW), Ok(()));
            assert_eq!(del.verify_signatures(|o| auth.key_for_obj(o)), Ok(()));
            assert_eq!(
                Record::Del(del.clone()).verify(&auth, NOW),
                Ok(()),
                "{scheme}: depth {depth}"
            );
            let bytes = del.encode();
            assert_eq!(bytes.len(), del_len(depth));
            assert!(bytes.len() > prev_len);
            prev_len = bytes.len();
            assert_eq!(Del::decode(&bytes).unwrap(), del);
        }
        let d8 = chain(&keys, MAX_CHAIN_DEPTH);
        assert_eq!(d8.encode().len(), MAX_DEL_LEN);
        let more = same_as(ctx(9), R, d8.gate(), d8.expires());
        assert_eq!(
            d8.delegate(more, &keys.ctx[8]).unwrap_err(),
            DelegateError::TooDeep,
            "{scheme}"
        );
    }
}

/// `TestAuth` as a `key_for` closure for `Del::verify_signatures`.
trait KeyFor {
    fn key_for_obj(&self, obj: ObjID) -> Result<&twizzler_capsec::VerifyingKey, KeyLookupError>;
}

impl KeyFor for TestAuth {
    fn key_for_obj(&self, obj: ObjID) -> Result<&twizzler_capsec::VerifyingKey, KeyLookupError> {
        twizzler_capsec::Authority::key_for(self, obj)
    }
}

#[test]
fn encoded_depths_outside_1_to_8_are_rejected() {
    let keys = Keys::new(SigningScheme::Ed25519);
    let d8 = chain(&keys, 8);
    let bytes = d8.encode();
    // Depth 9: header says 9, and a ninth link (a copy of the eighth) follows.
    let mut nine = bytes.to_vec();
    nine[6..8].copy_from_slice(&9u16.to_le_bytes());
    nine.extend_from_slice(&bytes[link_at(7)..]);
    assert_eq!(nine.len(), del_len(9));
    assert_eq!(Del::decode(&nine).unwrap_err(), DecodeError::ChainDepth(9));
    for depth in [0u16, 9, 100, u16::MAX] {
        let mut b = bytes.to_vec();
        b[6..8].copy_from_slice(&depth.to_le_bytes());
        assert_eq!(
            Del::decode(&b).unwrap_err(),
            DecodeError::ChainDepth(depth),
            "depth {depth}"
        );
    }
    // A header depth smaller than the links present leaves trailing bytes; larger truncates.
    let mut b = bytes.to_vec();
    b[6..8].copy_from_slice(&7u16.to_le_bytes());
    assert!(matches!(
        Del::decode(&b),
        Err(DecodeError::TrailingBytes { .. })
    ));
    let d3 = chain(&keys, 3).encode();
    let mut b = d3.to_vec();
    b[6..8].copy_from_slice(&4u16.to_le_bytes());
    assert!(matches!(
        Del::decode(&b),
        Err(DecodeError::Truncated { .. })
    ));
    // Magic and version.
    let mut b = d3.to_vec();
    b[0] ^= 1;
    assert!(matches!(
        Del::decode(&b),
        Err(DecodeError::BadMagic {
            expected: DEL_MAGIC,
            ..
        })
    ));
    let mut b = d3.to_vec();
    b[4] = 2;
    assert_eq!(
        Del::decode(&b).unwrap_err(),
        DecodeError::UnsupportedVersion {
            found: 2,
            supported: 1
        }
    );
}

/// A named edit of an encoded delegation, and what it makes the edited link widen.
type Forgery = (&'static str, Box<dyn Fn(&mut [u8])>, Amplification);

/// Sets link `index`'s protections in an encoded delegation.
fn set_prots(bytes: &mut [u8], index: usize, prots: Protections) {
    let at = link_at(index) + LINK_PROTS;
    bytes[at..at + 2].copy_from_slice(&prots.bits().to_le_bytes());
}

fn set_gate(bytes: &mut [u8], index: usize, gate: Gate) {
    let at = link_at(index) + LINK_GATE;
    bytes[at..at + 8].copy_from_slice(&gate.offset().to_le_bytes());
    bytes[at + 8..at + 16].copy_from_slice(&gate.length().to_le_bytes());
    bytes[at + 16..at + 24].copy_from_slice(&gate.align().to_le_bytes());
}

fn set_expires(bytes: &mut [u8], index: usize, e: Expiry) {
    let at = link_at(index) + LINK_EXPIRES;
    bytes[at..at + 8].copy_from_slice(&e.raw().to_le_bytes());
}

fn set_provider(bytes: &mut [u8], index: usize, provider: ObjID) {
    let at = link_at(index) + LINK_PROVIDER;
    bytes[at..at + 16].copy_from_slice(&provider.to_le_bytes());
}

#[test]
fn forged_amplifying_links_are_rejected_by_check_chain() {
    for scheme in SCHEMES {
        let keys = Keys::new(scheme);
        let auth = keys.auth();
        for depth in [1usize, 3] {
            let valid = chain(&keys, depth).encode();
            for index in 0..depth {
                // Bounds of link `index`'s parent in `chain`.
                let parent = if index == 0 {
                    let c = root_cap(&keys);
                    (c.prots(), c.gate(), c.expires())
                } else {
                    let d = Del::decode(&valid).unwrap();
                    let l = d.links().nth(index - 1).unwrap();
                    (l.grant().prots, l.grant().gate, l.grant().expires)
                };
                let (pprots, pgate, pexp) = parent;
                let forgeries: Vec<Forgery> = vec![
                    (
                        "prots",
                        Box::new(move |b: &mut [u8]| set_prots(b, index, pprots | X)),
                        Amplification::Prots,
                    ),
                    (
                        "gate",
                        Box::new(move |b: &mut [u8]| set_gate(b, index, Gate::WHOLE)),
                        Amplification::Gate,
                    ),
                    (
                        "gate alignment",
                        Box::new(move |b: &mut [u8]| {
                            set_gate(
                                b,
                                index,
                                Gate::new(pgate.offset(), pgate.length(), 1).unwrap(),
                            )
                        }),
                        Amplification::Gate,
                    ),
                    (
                        "later expiry",
                        Box::new(move |b: &mut [u8]| {
                            set_expires(b, index, Expiry::from_raw(pexp.raw() + 1))
                        }),
                        Amplification::Expiry,
                    ),
                    (
                        "never expiring",
                        Box::new(move |b: &mut [u8]| set_expires(b, index, Expiry::NEVER)),
                        Amplification::Expiry,
                    ),
                ];
                for (name, forge, what) in forgeries {
                    let mut b = valid.to_vec();
                    forge(&mut b);
                    // The forger holds every provider key from this link on.
                    resign_from(&mut b, index, |i| &keys.ctx[i]);
                    let forged = Del::decode(&b).unwrap();
                    let ctx_msg = format!("{scheme}, depth {depth}, link {}: {name}", index + 1);
                    // Every signature is genuine...
                    assert_eq!(
                        forged.verify_signatures(|o| auth.key_for_obj(o)),
                        Ok(()),
                        "{ctx_msg}: the forgery must be well signed"
                    );
                    // ...but the chain amplifies.
                    let expected = Err(VerifyError::Amplifies {
                        link: index + 1,
                        what,
                    });
                    assert_eq!(forged.check_chain(NOW), expected, "{ctx_msg}");
                    assert_eq!(
                        Record::decode(RecordKind::Del, &b)
                            .unwrap()
                            .verify(&auth, NOW),
                        expected,
                        "{ctx_msg}"
                    );
                }
            }
        }
    }
}

#[test]
fn broken_chains_are_rejected() {
    for scheme in SCHEMES {
        let keys = Keys::new(scheme);
        let auth = keys.auth();
        let valid = chain(&keys, 3).encode();
        for index in 0..3 {
            // Q claims to provide link `index` (it does not hold the parent) and signs it with
            // its own key: well signed, but the chain is broken.
            let mut b = valid.to_vec();
            set_provider(&mut b, index, Q);
            resign_from(&mut b, index, |i| {
                if i == index { &keys.q } else { &keys.ctx[i] }
            });
            let forged = Del::decode(&b).unwrap();
            assert_eq!(forged.links().nth(index).unwrap().provider(), Q);
            assert_eq!(
                forged.verify_signatures(|o| auth.key_for_obj(o)),
                Ok(()),
                "link {}: the forgery must be well signed",
                index + 1
            );
            let expected = Err(VerifyError::BrokenChain { link: index + 1 });
            assert_eq!(forged.check_chain(NOW), expected, "link {}", index + 1);
            assert_eq!(
                Record::Del(forged).verify(&auth, NOW),
                expected,
                "link {}",
                index + 1
            );

            // The provider changed in the bytes without re-signing: broken chain (checked
            // before any signature), and the signature no longer verifies either.
            let mut b = valid.to_vec();
            set_provider(&mut b, index, Q);
            let tampered = Del::decode(&b).unwrap();
            assert_eq!(tampered.check_chain(NOW), expected);
            assert_eq!(
                tampered.verify_signatures(|o| auth.key_for_obj(o)),
                Err(wrong_key_error(&keys.ctx[index], &keys.q)),
                "link {}",
                index + 1
            );
            assert_eq!(Record::Del(tampered).verify(&auth, NOW), expected);

            // A receiver changed so the next link's provider no longer holds its parent.
            if index + 1 < 3 {
                let mut b = valid.to_vec();
                let at = link_at(index) + LINK_RECEIVER;
                b[at..at + 16].copy_from_slice(&Q.to_le_bytes());
                resign_from(&mut b, index, |i| &keys.ctx[i]);
                let forged = Del::decode(&b).unwrap();
                assert_eq!(
                    forged.check_chain(NOW),
                    Err(VerifyError::BrokenChain { link: index + 2 })
                );
            }
        }
    }
}

/// The error for a signature made by `signer` checked under `expected`'s verifying key.
fn wrong_key_error(signer: &SigningKey, expected: &SigningKey) -> VerifyError {
    if signer.scheme() == expected.scheme() {
        VerifyError::BadSignature
    } else {
        VerifyError::SchemeMismatch
    }
}

#[test]
fn signatures_by_the_wrong_provider_key_fail() {
    for scheme in SCHEMES {
        let keys = Keys::new(scheme);
        let auth = keys.auth();
        let cap = root_cap(&keys);
        let grant = same_as(ctx(1), R, cap.gate(), cap.expires());
        // Q's key signs a link provided (as the API always records) by P, the holder.
        let del = Del::from_cap(&cap, grant, &keys.q).unwrap();
        assert_eq!(del.provider(), P);
        assert_eq!(del.check_chain(NOW), Ok(()));
        assert_eq!(
            Record::Del(del.clone()).verify(&auth, NOW),
            Err(wrong_key_error(&keys.q, &keys.ctx[0])),
            "{scheme}: link 1 signed by an outsider"
        );
        // An outsider key of the provider's scheme: a bad signature.
        let same_scheme_outsider = key(keys.ctx[0].scheme(), 3001);
        let del = Del::from_cap(&cap, grant, &same_scheme_outsider).unwrap();
        assert_eq!(
            Record::Del(del).verify(&auth, NOW),
            Err(VerifyError::BadSignature),
            "{scheme}: link 1 signed by an outsider of the same scheme"
        );
        // The receiver's own key is no better.
        let del = Del::from_cap(&cap, grant, &keys.ctx[1]).unwrap();
        assert_eq!(
            Record::Del(del).verify(&auth, NOW),
            Err(wrong_key_error(&keys.ctx[1], &keys.ctx[0]))
        );
        // Further down: link 2 signed by P instead of ctx(1).
        let d1 = Del::from_cap(&cap, grant, &keys.ctx[0]).unwrap();
        let d2 = d1
            .delegate(same_as(ctx(2), R, cap.gate(), cap.expires()), &keys.ctx[0])
            .unwrap();
        assert_eq!(d2.provider(), ctx(1));
        assert_eq!(
            Record::Del(d2).verify(&auth, NOW),
            Err(wrong_key_error(&keys.ctx[0], &keys.ctx[1]))
        );
        // The root capability signed by the wrong object key fails too.
        let bad_root = Cap::mint(*cap.grant(), &keys.q).unwrap();
        let del = Del::from_cap(&bad_root, grant, &keys.ctx[0]).unwrap();
        assert_eq!(
            Record::Del(del).verify(&auth, NOW),
            Err(wrong_key_error(&keys.q, &keys.obj))
        );
        // A provider with no key at all.
        let mut no_key = keys.auth();
        no_key.keys.remove(&P);
        let d1 = Del::from_cap(&cap, grant, &keys.ctx[0]).unwrap();
        assert_eq!(
            Record::Del(d1).verify(&no_key, NOW),
            Err(VerifyError::Key(KeyLookupError::NoKuid(P)))
        );
    }
}

#[test]
fn expires_is_the_minimum_along_the_chain() {
    let keys = Keys::new(SigningScheme::Ed25519);
    let auth = keys.auth();
    let cap = root_cap(&keys); // expires at CAP_EXPIRES
    let gate = cap.gate();

    // A valid chain narrows its expiry: the last link's is the minimum.
    let d1 = Del::from_cap(
        &cap,
        same_as(ctx(1), R, gate, Expiry::from_raw(9_000)),
        &keys.ctx[0],
    )
    .unwrap();
    assert_eq!(d1.expires(), Expiry::from_raw(9_000));
    let d2 = d1
        .delegate(
            same_as(ctx(2), R, gate, Expiry::from_raw(8_000)),
            &keys.ctx[1],
        )
        .unwrap();
    assert_eq!(d2.expires(), Expiry::from_raw(8_000));
    assert_eq!(Record::Del(d2.clone()).expires(), Expiry::from_raw(8_000));
    let d3 = d2
        .delegate(
            same_as(ctx(3), R, gate, Expiry::from_raw(8_000)),
            &keys.ctx[2],
        )
        .unwrap();
    assert_eq!(d3.expires(), Expiry::from_raw(8_000));

    // Expiry is enforced at every level.
    assert_eq!(Record::Del(d3.clone()).verify(&auth, 7_999), Ok(()));
    assert_eq!(
        Record::Del(d3.clone()).verify(&auth, 8_000),
        Err(VerifyError::Expired {
            expires: 8_000,
            now: 8_000
        })
    );
    assert_eq!(
        d3.check_chain(CAP_EXPIRES),
        Err(VerifyError::Expired {
            expires: CAP_EXPIRES,
            now: CAP_EXPIRES
        }),
        "the root expires first in check order"
    );

    // A forged chain whose later links claim longer lives: expires() still gives the minimum.
    let mut b = d3.encode().to_vec();
    set_expires(&mut b, 1, Expiry::NEVER);
    set_expires(&mut b, 2, Expiry::from_raw(9_500));
    resign_from(&mut b, 1, |i| &keys.ctx[i]);
    let forged = Del::decode(&b).unwrap();
    assert_eq!(forged.expires(), Expiry::from_raw(9_000));
    assert_eq!(
        forged.check_chain(NOW),
        Err(VerifyError::Amplifies {
            link: 2,
            what: Amplification::Expiry
        })
    );
    // A root that expires before every link: the root's expiry is the minimum.
    let mut b = d3.encode().to_vec();
    for i in 0..3 {
        set_expires(&mut b, i, Expiry::NEVER);
    }
    resign_from(&mut b, 0, |i| &keys.ctx[i]);
    let forged = Del::decode(&b).unwrap();
    assert_eq!(forged.expires(), Expiry::from_raw(CAP_EXPIRES));

    // A never-expiring root and links: never.
    let mut g = *cap.grant();
    g.expires = Expiry::NEVER;
    let forever = Cap::mint(g, &keys.obj).unwrap();
    let d = Del::from_cap(
        &forever,
        same_as(ctx(1), R, gate, Expiry::NEVER),
        &keys.ctx[0],
    )
    .unwrap();
    assert_eq!(d.expires(), Expiry::NEVER);
    assert_eq!(Record::Del(d).verify(&auth, u64::MAX), Ok(()));
}

#[test]
fn accessors_and_messages() {
    let keys = Keys::new(SigningScheme::EcdsaP256);
    let d3 = chain(&keys, 3);
    let bytes = d3.encode();
    assert_eq!(d3.root(), &root_cap(&keys));
    assert_eq!(d3.prots(), d3.links().last().unwrap().grant().prots);
    assert_eq!(d3.gate(), d3.links().last().unwrap().grant().gate);
    for (i, link) in d3.links().enumerate() {
        assert_eq!(link.provider(), ctx(i));
        assert_eq!(link.grant().receiver, ctx(i + 1));
        let msg = d3.signed_message(i).unwrap();
        assert_eq!(msg, link_message_by_hand(&bytes, i, link.grant().hash));
        let key = keys.ctx[i].verifying_key();
        assert_eq!(key.verify(&msg, link.signature()), Ok(()));
    }
    assert_eq!(d3.signed_message(3), None);
    // Each link's message binds everything above it: changing the root changes them all.
    let other_root = {
        let mut g = *root_cap(&keys).grant();
        g.prots = R | W | X;
        Cap::mint(g, &keys.obj).unwrap()
    };
    let grant = *d3.links().next().unwrap().grant();
    let other = Del::from_cap(&other_root, grant, &keys.ctx[0]).unwrap();
    assert_ne!(other.signed_message(0), d3.signed_message(0));
}
