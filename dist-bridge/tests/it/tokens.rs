//! Tokens: offline attenuation, the invocation check, and refusal of truncated, forged and
//! other-node tokens; the encoding's round trip and totality.

use crate::common::*;
use dist_bridge::token::{BODY_LEN, HEADER_LEN, MIN_TOKEN_LEN, SCOPE_LEN};
use dist_bridge::*;
use proptest::prelude::*;
use twizzler_capsec::Expiry;

#[test]
fn attenuated_token_works_inside_its_rights_and_fails_outside() {
    let f = fixture();
    let root = f.export();
    assert!(f.read(&root, 0, 1 << 20).is_ok());
    assert!(f.write(&root, 4096, 10).is_ok());

    // Offline: read-only, bytes 4096..12288, expiring at NOW + 100.
    let weak = root
        .with_rights(Rights::READ)
        .unwrap()
        .with_range(range(4096, 8192))
        .unwrap()
        .with_expiry(Expiry::from_raw(NOW + 100))
        .unwrap();
    assert_eq!(weak.caveats().len(), 3);
    assert_eq!(
        weak.scope(),
        Scope::new(Rights::READ, range(4096, 8192), Expiry::from_raw(NOW + 100))
    );

    // Inside.
    let g = f.read(&weak, 4096, 8192).unwrap();
    assert_eq!(
        (g.object, g.op, g.offset, g.len),
        (f.object, Op::Read, 4096, 8192)
    );
    assert!(f.read(&weak, 12287, 1).is_ok());
    assert!(f.owner.check(&weak, Op::Read, 5000, 1, NOW + 99).is_ok());

    // Outside: the right, the range (below, above, straddling, empty, overflowing), the time.
    assert_eq!(
        f.write(&weak, 4096, 1),
        Err(InvokeError::RightsExceeded {
            needed: Rights::WRITE,
            held: Rights::READ
        })
    );
    for (offset, len) in [
        (4095, 1),
        (12288, 1),
        (12000, 1000),
        (5000, 0),
        (u64::MAX, 2),
    ] {
        assert!(
            matches!(
                f.read(&weak, offset, len),
                Err(InvokeError::OutOfRange { .. })
            ),
            "{offset:#x}+{len:#x}"
        );
    }
    assert_eq!(
        f.owner.check(&weak, Op::Read, 5000, 1, NOW + 100),
        Err(InvokeError::Expired {
            expires: NOW + 100,
            now: NOW + 100
        })
    );
    // Attenuation never affects the original.
    assert!(f.write(&root, 0, 1).is_ok());
    // Nor the wire form.
    assert_eq!(GuardedToken::decode(&weak.encode()).unwrap(), weak);
    assert!(
        f.owner
            .check_bytes(&weak.encode(), Op::Read, 4096, 1, NOW)
            .is_ok()
    );
}

#[test]
fn attenuation_only_narrows() {
    let f = fixture();
    let weak = f
        .export()
        .with_rights(Rights::READ)
        .unwrap()
        .with_range(range(0, 4096))
        .unwrap()
        .with_expiry(Expiry::from_raw(NOW + 5))
        .unwrap();
    let s = weak.scope();
    assert_eq!(
        weak.with_rights(Rights::READ | Rights::WRITE).unwrap_err(),
        AttenuateError::Widens(Widening::Rights)
    );
    assert_eq!(
        weak.with_range(range(0, 4097)).unwrap_err(),
        AttenuateError::Widens(Widening::Range)
    );
    assert_eq!(
        weak.with_expiry(Expiry::NEVER).unwrap_err(),
        AttenuateError::Widens(Widening::Expiry)
    );
    assert_eq!(
        weak.attenuate(s.with_expiry(Expiry::from_raw(NOW + 6)))
            .unwrap_err(),
        AttenuateError::Widens(Widening::Expiry)
    );
    // Equal is allowed (a no-op caveat), up to the bound.
    let mut t = weak.clone();
    while t.caveats().len() < MAX_CAVEATS {
        t = t.attenuate(s).unwrap();
    }
    assert_eq!(t.attenuate(s).unwrap_err(), AttenuateError::TooManyCaveats);
    assert!(f.read(&t, 0, 4096).is_ok());
}

#[test]
fn a_caveat_cannot_be_removed() {
    let f = fixture();
    let root = f.export();
    let weak = root.with_rights(Rights::READ).unwrap();
    let bytes = weak.encode();
    // Drop the caveat, keep the (chained) tag: the owner refuses.
    let mut stripped = bytes[..HEADER_LEN + BODY_LEN].to_vec();
    stripped[6] = 0;
    stripped.extend_from_slice(&bytes[bytes.len() - 32..]);
    let stripped = GuardedToken::decode(&stripped).unwrap();
    assert_eq!(stripped.scope().rights, Rights::all());
    assert_eq!(f.write(&stripped, 0, 1), Err(InvokeError::BadTag));
    // Replace the caveat with a wider one: refused too.
    let mut swapped = bytes.clone();
    swapped[HEADER_LEN + BODY_LEN] = (Rights::READ | Rights::WRITE).bits() as u8;
    let swapped = GuardedToken::decode(&swapped).unwrap();
    assert_eq!(f.write(&swapped, 0, 1), Err(InvokeError::BadTag));
}

#[test]
fn forged_tokens_are_refused() {
    let f = fixture();
    let token = f
        .export_scope(Rights::READ, range(0, 4096))
        .with_range(range(0, 100))
        .unwrap();
    let bytes = token.encode();
    assert!(f.owner.check_bytes(&bytes, Op::Read, 0, 1, NOW).is_ok());
    // Flip every bit of every byte: never accepted, and never a panic.
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            let r = f.owner.check_bytes(&b, Op::Read, 0, 1, NOW);
            assert!(r.is_err(), "flip of bit {bit} of byte {i} accepted");
        }
    }
    // Specifically: amplified rights in the body, a wider range, a tampered tag.
    let mut b = bytes.clone();
    b[HEADER_LEN + 44] |= Rights::WRITE.bits() as u8;
    assert_eq!(
        f.owner.check_bytes(&b, Op::Write, 0, 1, NOW),
        Err(InvokeError::BadTag)
    );
    let mut b = bytes.clone();
    let last = b.len() - 1;
    b[last] ^= 0x80;
    assert_eq!(
        f.owner.check_bytes(&b, Op::Read, 0, 1, NOW),
        Err(InvokeError::BadTag)
    );
    // A token made with another secret for the same controller id and guard: refused.
    let impostor = owner(f.owner.id(), GuardTableConfig::default());
    let fake = impostor
        .export(
            &f.cap,
            &f.keys,
            &ExportRequest::new(f.ctx, Rights::READ, range(0, 4096)),
            NOW,
        )
        .unwrap();
    assert_eq!(fake.body(), token.body());
    assert_eq!(f.read(&fake, 0, 1), Err(InvokeError::BadTag));
}

#[test]
fn truncated_and_garbage_tokens_are_refused_with_clear_errors() {
    let f = fixture();
    let token = f.export().with_rights(Rights::READ).unwrap();
    let bytes = token.encode();
    for len in 0..bytes.len() {
        let err = f
            .owner
            .check_bytes(&bytes[..len], Op::Read, 0, 1, NOW)
            .unwrap_err();
        assert!(matches!(err, InvokeError::Malformed(_)), "{len}: {err}");
    }
    let mut long = bytes.clone();
    long.push(0);
    assert_eq!(
        GuardedToken::decode(&long).unwrap_err(),
        TokenDecodeError::TrailingBytes {
            expected: bytes.len(),
            got: bytes.len() + 1
        }
    );
    let err = GuardedToken::decode(&bytes[..MIN_TOKEN_LEN]).unwrap_err();
    assert_eq!(
        err,
        TokenDecodeError::Truncated {
            needed: MIN_TOKEN_LEN + SCOPE_LEN,
            got: MIN_TOKEN_LEN
        }
    );
    assert!(err.to_string().contains("truncated"), "{err}");
    assert!(matches!(
        GuardedToken::decode(b"GET / HTTP/1.1\r\n"),
        Err(TokenDecodeError::BadMagic(_))
    ));
    let mut b = bytes.clone();
    b[6] = 9;
    assert_eq!(
        GuardedToken::decode(&b).unwrap_err(),
        TokenDecodeError::TooManyCaveats(9)
    );
    let msg = InvokeError::from(TokenDecodeError::TooManyCaveats(9)).to_string();
    assert!(msg.starts_with("malformed token"), "{msg}");
}

#[test]
fn tokens_of_other_nodes_and_lives_are_refused() {
    let f = fixture();
    let token = f.export();
    let other = owner(ControllerId::new(NODE + 1, 1), GuardTableConfig::default());
    let err = other.check(&token, Op::Read, 0, 1, NOW).unwrap_err();
    assert_eq!(
        err,
        InvokeError::WrongOwner {
            token_node: NODE,
            this_node: NODE + 1
        }
    );
    assert!(err.to_string().contains("node 7"), "{err}");
    let later = owner(ControllerId::new(NODE, 2), GuardTableConfig::default());
    assert_eq!(
        later.check(&token, Op::Read, 0, 1, NOW),
        Err(InvokeError::StaleController {
            token: 1,
            current: 2
        })
    );
}

#[test]
fn guard_rights_are_enforced() {
    let f = fixture();
    // A token without REVOKE or DERIVE cannot revoke or derive.
    let t = f.export().with_rights(Rights::DATA).unwrap();
    assert!(matches!(
        f.owner.revoke(&t, NOW),
        Err(InvokeError::RightsExceeded {
            needed: Rights::REVOKE,
            ..
        })
    ));
    let s = t.scope();
    assert!(matches!(
        f.owner.export_from(&t, s, NOW),
        Err(InvokeError::RightsExceeded {
            needed: Rights::DERIVE,
            ..
        })
    ));
    assert!(f.read(&t, 0, 1).is_ok());
}

fn scope_strategy() -> impl Strategy<Value = (u16, u64, u64, u64)> {
    (0u16..16, 0u64..(1 << 30), 1u64..(1 << 20), any::<u64>())
}

/// Builds token bytes field by field (independently of the crate's encoder).
#[allow(clippy::too_many_arguments)]
fn token_bytes(
    node: u64,
    version: u64,
    index: u32,
    gversion: u64,
    object: u128,
    base: (u16, u64, u64, u64),
    narrowing: &[(u16, u64, u64, u64)],
    tag: [u8; 32],
) -> Vec<u8> {
    let mut out = b"DBGT".to_vec();
    out.extend_from_slice(&1u16.to_le_bytes());
    out.push(narrowing.len() as u8);
    out.push(0);
    out.extend_from_slice(&node.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&gversion.to_le_bytes());
    out.extend_from_slice(&object.to_le_bytes());
    let push = |out: &mut Vec<u8>, (r, o, l, e): (u16, u64, u64, u64)| {
        out.extend_from_slice(&r.to_le_bytes());
        out.extend_from_slice(&o.to_le_bytes());
        out.extend_from_slice(&l.to_le_bytes());
        out.extend_from_slice(&e.to_le_bytes());
    };
    // Clamp the base range into the object; each caveat narrows the previous scope.
    let clamp = |(r, o, l, e): (u16, u64, u64, u64)| (r, o, l.min((1 << 30) - o), e);
    let mut prev = clamp(base);
    push(&mut out, prev);
    for &(r, o, l, e) in narrowing {
        let rights = prev.0 & r;
        let offset = prev.1 + o % prev.2;
        let len = 1 + l % (prev.1 + prev.2 - offset);
        let expires = match (prev.3, e) {
            (0, e) => e,
            (p, 0) => p,
            (p, e) => p.min(e),
        };
        prev = (rights, offset, len, expires);
        push(&mut out, prev);
    }
    out.extend_from_slice(&tag);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn well_formed_tokens_round_trip(
        node in any::<u64>(), version in any::<u64>(), index in any::<u32>(),
        gversion in any::<u64>(), object in any::<u128>(), base in scope_strategy(),
        narrowing in proptest::collection::vec(scope_strategy(), 0..=MAX_CAVEATS),
        tag in any::<[u8; 32]>(),
    ) {
        let bytes = token_bytes(node, version, index, gversion, object, base, &narrowing, tag);
        let token = GuardedToken::decode(&bytes).unwrap();
        prop_assert_eq!(token.encode(), bytes);
        prop_assert_eq!(token.caveats().len(), narrowing.len());
        prop_assert_eq!(token.owner(), ControllerId::new(node, version));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(t) = GuardedToken::decode(&bytes) {
            prop_assert_eq!(t.encode(), bytes);
        }
    }

    #[test]
    fn mutated_tokens_never_panic_and_are_never_accepted(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let f = fixture();
        let good = f.export().with_rights(Rights::READ).unwrap().encode();
        let mut b = good.clone();
        for (i, v) in edits {
            let i = i.index(b.len());
            b[i] = v;
        }
        if truncate {
            b.truncate(cut.index(b.len()));
        }
        if b != good {
            prop_assert!(f.owner.check_bytes(&b, Op::Read, 0, 1, NOW).is_err());
            prop_assert!(GuardedToken::decode(&b).map_or(true, |t| f.owner.revoke(&t, NOW).is_err()));
        }
    }
}

/// A forged token (a genuine one with its guard reference rewritten, so its tag no longer
/// verifies) is refused as `BadTag` whatever the guard it names: live, revoked, reused,
/// never issued, or outside the table. Before the tag was checked first, the refusals told
/// them apart, and an unauthenticated prober rebuilt the set of live guards.
#[test]
fn forged_tokens_learn_nothing_about_the_table() {
    let f = fixture_with(GuardTableConfig {
        capacity: 8,
        batch_size: 1,
        ..GuardTableConfig::default()
    });
    let probe = f.export_scope(Rights::READ, range(0, 4096));
    let live = f.export();
    let revoked = f.export();
    f.owner.revoke(&revoked, NOW).unwrap();
    // Guard index at body offset 16, version at 20 (after the 8-byte header).
    let forge = |index: u32, version: u64| {
        let mut b = probe.encode();
        b[HEADER_LEN + 16..HEADER_LEN + 20].copy_from_slice(&index.to_le_bytes());
        b[HEADER_LEN + 20..HEADER_LEN + 28].copy_from_slice(&version.to_le_bytes());
        b
    };
    let (l, r) = (live.guard(), revoked.guard());
    let cases = [
        ("live", forge(l.index, l.version)),
        ("revoked", forge(r.index, r.version)),
        (
            "live, older version",
            forge(l.index, l.version.saturating_sub(1)),
        ),
        ("live, newer version", forge(l.index, l.version + 1)),
        ("never issued", forge(6, 1)),
        ("outside the table", forge(1_000, 1)),
        ("outside the version space", forge(l.index, u64::MAX)),
    ];
    for (what, bytes) in cases {
        for op in [Op::Read, Op::Write] {
            assert_eq!(
                f.owner.check_bytes(&bytes, op, 0, 1, NOW),
                Err(InvokeError::BadTag),
                "a forged token naming a {what} guard"
            );
        }
        let token = GuardedToken::decode(&bytes).unwrap();
        assert_eq!(
            f.owner.revoke(&token, NOW),
            Err(InvokeError::BadTag),
            "{what}"
        );
        assert_eq!(
            f.owner.renew(&token, NOW),
            Err(InvokeError::BadTag),
            "{what}"
        );
        assert_eq!(
            f.owner
                .export_from(&token, token.scope(), NOW)
                .map(|t| t.guard()),
            Err(InvokeError::BadTag),
            "{what}"
        );
    }
}
