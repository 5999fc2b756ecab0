//! Property tests of the information-flow encodings: `TLBL` labels, `TAG` capabilities and
//! version 3 contexts are decoded totally and canonically (arbitrary bytes, valid encodings
//! with bits flipped, valid headers followed by random bytes), and the tag-set operations agree
//! with a model.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use proptest::prelude::*;
use proptest::test_runner::Config;
use twizzler_capsec::ctx::{CTX_VERSION, CTX_VERSION_LABEL, HEADER_LEN_V3, field};
use twizzler_capsec::{
    ALL_CONTEXTS, Cap, CapGrant, DecodeError, Expiry, Gate, HashAlg, LABEL_MAGIC, Label,
    MAX_LABEL_TAGS, ObjID, OwnRights, OwnershipGrant, Protections, SecCtx, SecCtxEditor,
    SigningKey, SigningScheme, Tags, tags_difference, tags_subset,
};

use crate::common_keys::key;

static TAG_KEY: LazyLock<SigningKey> = LazyLock::new(|| key(SigningScheme::Ed25519, 81));

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Tags from a small range (so sets overlap) and the edges.
fn tag() -> impl Strategy<Value = ObjID> {
    prop_oneof![
        4 => (0u128..24).prop_map(ObjID::new),
        1 => Just(ObjID::new(u128::MAX - 1)),
        1 => any::<u128>().prop_map(|r| ObjID::new(r.min(u128::MAX - 1))),
    ]
}

fn tags(max: usize) -> impl Strategy<Value = Vec<ObjID>> {
    prop::collection::vec(tag(), 0..=max)
}

fn label() -> impl Strategy<Value = Label> {
    (tags(MAX_LABEL_TAGS), tags(MAX_LABEL_TAGS))
        .prop_filter_map("more than 32 distinct tags", |(s, i)| {
            Label::from_tags(&s, &i).ok()
        })
}

fn flip(bytes: &[u8], flips: &[(prop::sample::Index, u8)]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    if !b.is_empty() {
        for (at, bit) in flips {
            let i = at.index(b.len());
            b[i] ^= 1 << (bit % 8);
        }
    }
    b
}

/// Whatever decodes re-encodes to the same bytes and satisfies the label invariant.
fn label_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(l) = Label::decode(bytes) {
        prop_assert_eq!(&l.encode()[..], bytes);
        for half in [&l.secrecy, &l.integrity] {
            prop_assert!(half.len() <= MAX_LABEL_TAGS);
            prop_assert!(half.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(!half.contains(ALL_CONTEXTS));
        }
    }
    Ok(())
}

fn cap_canonical(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(c) = Cap::decode(bytes) {
        prop_assert_eq!(&c.encode()[..], bytes);
        if c.is_ownership() {
            prop_assert!(OwnRights::all().as_prots().contains(c.prots()));
            prop_assert_eq!(c.gate(), Gate::WHOLE);
        } else {
            prop_assert_ne!(c.accessor(), ALL_CONTEXTS);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn labels_round_trip(l in label()) {
        let bytes = l.encode();
        prop_assert_eq!(bytes.len(), l.encoded_len());
        prop_assert_eq!(Label::decode(&bytes), Ok(l));
        label_canonical(&bytes)?;
    }

    #[test]
    fn label_decoding_is_total(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        label_canonical(&bytes)?;
    }

    #[test]
    fn label_decoding_is_total_after_a_valid_header(
        s in 0u8..40, i in 0u8..40, rest in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut bytes = LABEL_MAGIC.to_le_bytes().to_vec();
        bytes.extend_from_slice(&1u16.to_le_bytes());
        bytes.extend_from_slice(&[s, i]);
        bytes.extend_from_slice(&rest);
        label_canonical(&bytes)?;
        if usize::from(s) > MAX_LABEL_TAGS {
            prop_assert_eq!(Label::decode(&bytes), Err(DecodeError::TooManyTags(usize::from(s))));
        }
    }

    #[test]
    fn flipped_labels_are_refused_or_canonical(
        l in label(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        label_canonical(&flip(&l.encode(), &flips))?;
    }

    /// The merges agree with sets.
    #[test]
    fn tag_set_operations_agree_with_sets(a in tags(40), b in tags(40)) {
        let (sa, sb): (BTreeSet<ObjID>, BTreeSet<ObjID>) =
            (a.iter().copied().collect(), b.iter().copied().collect());
        let (Ok(ta), Ok(tb)) = (Tags::from_unsorted(&a), Tags::from_unsorted(&b)) else {
            prop_assert!(sa.len() > MAX_LABEL_TAGS || sb.len() > MAX_LABEL_TAGS);
            return Ok(());
        };
        prop_assert_eq!(ta.to_vec(), sa.iter().copied().collect::<Vec<_>>());
        prop_assert_eq!(tags_subset(&ta, &tb), sa.is_subset(&sb));
        prop_assert_eq!(
            tags_difference(&ta, &tb).collect::<Vec<_>>(),
            sa.difference(&sb).copied().collect::<Vec<_>>()
        );
        prop_assert_eq!(
            Tags::intersection(&ta, &tb).to_vec(),
            sa.intersection(&sb).copied().collect::<Vec<_>>()
        );
        let union: Vec<ObjID> = sa.union(&sb).copied().collect();
        match Tags::union(&ta, &tb) {
            Ok(u) => prop_assert_eq!(u.to_vec(), union),
            Err(e) => {
                prop_assert!(union.len() > MAX_LABEL_TAGS);
                prop_assert!(matches!(e, DecodeError::TooManyTags(_)));
            }
        }
        let mut removed = ta;
        for t in sb.iter() {
            removed.remove(*t);
        }
        prop_assert_eq!(removed.to_vec(), sa.difference(&sb).copied().collect::<Vec<_>>());
    }
}

fn ownership_grant() -> impl Strategy<Value = OwnershipGrant> {
    (
        tag(),
        prop_oneof![Just(ALL_CONTEXTS), any::<u128>().prop_map(ObjID::new)],
        0u16..4,
        prop_oneof![Just(Expiry::NEVER), any::<u64>().prop_map(Expiry::from_raw)],
        prop_oneof![Just(HashAlg::Blake3), Just(HashAlg::Sha256)],
    )
        .prop_map(|(tag, holder, r, expires, hash)| OwnershipGrant {
            tag,
            holder,
            rights: OwnRights::from_bits_truncate(r),
            expires,
            hash,
        })
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn ownership_records_round_trip(g in ownership_grant()) {
        let c = Cap::mint_ownership(g, &TAG_KEY).unwrap();
        let bytes = c.encode();
        let back = Cap::decode(&bytes).unwrap();
        prop_assert_eq!(back, c);
        prop_assert_eq!(back.ownership_rights(), Some(g.rights));
        prop_assert_eq!((back.target(), back.accessor()), (g.tag, g.holder));
        prop_assert!(back.verify(&TAG_KEY.verifying_key(), 0).is_ok());
        cap_canonical(&bytes)?;
    }

    #[test]
    fn flipped_capabilities_are_refused_or_canonical(
        g in ownership_grant(),
        data: bool,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let c = if data {
            let holder = if g.holder == ALL_CONTEXTS { ObjID::new(1) } else { g.holder };
            Cap::mint(CapGrant::new(g.tag, holder, Protections::all()), &TAG_KEY).unwrap()
        } else {
            Cap::mint_ownership(g, &TAG_KEY).unwrap()
        };
        let flipped = flip(&c.encode(), &flips);
        cap_canonical(&flipped)?;
        // A flip that changes a byte never keeps the signature valid.
        if let Ok(d) = Cap::decode(&flipped)
            && flipped != c.encode()
        {
            prop_assert!(d.verify(&TAG_KEY.verifying_key(), 0).is_err());
        }
    }

    #[test]
    fn v3_contexts_round_trip_and_decode_totally(
        l in label(),
        g in ownership_grant(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let rec = Cap::mint_ownership(g, &TAG_KEY).unwrap();
        let mut ed = SecCtxEditor::new();
        ed.add_cap(&rec);
        let v1 = ed.encode().unwrap();
        ed.set_initial_label(l);
        let bytes = ed.encode().unwrap();
        let ctx = SecCtx::parse(&bytes).unwrap();
        prop_assert_eq!(ctx.initial_label(), Ok(l));
        // No label: version 1, byte for byte what an editor without labels writes.
        if l.is_empty() {
            prop_assert_eq!(&bytes, &v1);
        } else {
            prop_assert_eq!(&bytes[field::VERSION..field::VERSION + 2], &CTX_VERSION_LABEL.to_le_bytes()[..]);
            prop_assert_eq!(
                SecCtxEditor::from_ctx(&ctx).encode().unwrap(),
                bytes.clone()
            );
            let mut cleared = SecCtxEditor::from_ctx(&ctx);
            cleared.set_initial_label(Label::EMPTY);
            let cleared = cleared.encode().unwrap();
            prop_assert_eq!(&cleared[field::VERSION..field::VERSION + 2], &CTX_VERSION.to_le_bytes()[..]);
            prop_assert_eq!(SecCtx::parse(&cleared).unwrap().initial_label(), Ok(Label::EMPTY));
        }
        // Bits flipped anywhere: parsed or refused, never a panic; a parsed context's label
        // is one valid label.
        let flipped = flip(&bytes, &flips);
        if let Ok(ctx) = SecCtx::parse(&flipped) {
            let got = ctx.initial_label();
            prop_assert!(got.is_ok());
            for e in ctx.entries() {
                let _ = e.record();
            }
        }
    }
}

#[test]
fn v3_section_rules() {
    let l = Label::from_tags(&[ObjID::new(5)], &[]).unwrap();
    let mut ed = SecCtxEditor::new();
    ed.set_initial_label(l);
    let good = ed.encode().unwrap();
    assert_eq!(
        u32::from_le_bytes(good[field::LABEL_OFFSET..][..4].try_into().unwrap()) as usize,
        HEADER_LEN_V3
    );
    let put = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    // Length 0 is refused.
    let mut b = good.clone();
    put(&mut b, field::LABEL_LEN, 0);
    assert_eq!(
        SecCtx::parse(&b).err(),
        Some(twizzler_capsec::CtxError::EmptyLabelSection)
    );
    // Overlapping the header.
    let mut b = good.clone();
    put(&mut b, field::LABEL_OFFSET, 40);
    assert_eq!(
        SecCtx::parse(&b).err(),
        Some(twizzler_capsec::CtxError::LabelOverlaps("header"))
    );
    // Outside the context.
    let mut b = good.clone();
    put(&mut b, field::LABEL_OFFSET, 1 << 20);
    assert_eq!(
        SecCtx::parse(&b).err(),
        Some(twizzler_capsec::CtxError::TableOutOfBounds("label section"))
    );
    // One byte short of the label: not a label.
    let mut b = good.clone();
    let len = u32::from_le_bytes(b[field::LABEL_LEN..][..4].try_into().unwrap());
    put(&mut b, field::LABEL_LEN, len - 1);
    assert!(matches!(
        SecCtx::parse(&b).err(),
        Some(twizzler_capsec::CtxError::BadLabel(_))
    ));
    // A header cut short of its version 3 fields.
    assert!(SecCtx::parse(&good[..50]).is_err());
}
