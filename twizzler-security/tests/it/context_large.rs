//! A context of 1,000,000 entries: the editor builds it, the reader validates it, and every
//! lookup of a sample of ~10,000 targets (present, absent, first, last, neighbours) returns
//! exactly the expected records, in insertion order.
//!
//! Records are one minted capability cloned with other targets and expiries
//! (`Cap::from_parts`), so only the template's own copy verifies: this tests layout and lookup,
//! not cryptography. Phase timings are printed (run with `--nocapture`); nothing is asserted
//! about them.

use std::time::Instant;

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use twizzler_capsec::ctx::{ENTRY_LEN, HEADER_LEN, MASK_LEN};
use twizzler_capsec::{
    Access, Authority, CAP_LEN, Cap, CapGrant, Expiry, KeyLookupError, ObjID, Protections,
    RecordKind, SecCtx, SecCtxEditor, SigningKey, SigningScheme, Verdict, VerifyError,
    VerifyingKey, evaluate_explained,
};

const N: usize = 1_000_000;
const CTX: ObjID = ObjID::new(0xC0);
/// Targets are `(k + 1) * STRIDE`: spread over the whole `u128` range (k < 2^19 keeps them
/// below 2^128), with absent neighbours on both sides.
const STRIDE: u128 = (1 << 108) + 3;
/// Every `MASK_EVERY`-th distinct target (from the `MASK_EVERY - 1`-th) gets a per-object
/// mask.
const MASK_EVERY: usize = 997;
/// Byte offset of `expires` in an encoded capability.
const CAP_EXPIRES_AT: usize = 66;

/// How many records target `k` has before truncation to `N`: 1, 1, 2, 1, 3, 1, 1, 4, ...
fn multiplicity(k: usize) -> usize {
    [1, 1, 2, 1, 3, 1, 1, 4][k % 8]
}

fn target(k: usize) -> ObjID {
    ObjID::new((k as u128 + 1) * STRIDE)
}

/// The expiry that tells copy `c` of target `k` apart (never 0, which means "never").
fn code(k: usize, c: usize) -> u64 {
    ((k as u64) << 3 | c as u64) + 1
}

/// The layout: multiplicity of each distinct target, summing to exactly `N`.
fn layout() -> Vec<u8> {
    let mut mults = Vec::new();
    let mut total = 0;
    let mut k = 0;
    while total < N {
        let m = multiplicity(k).min(N - total);
        mults.push(m as u8);
        total += m;
        k += 1;
    }
    mults
}

fn mask_of(k: usize) -> Option<(Protections, Protections)> {
    (k % MASK_EVERY == MASK_EVERY - 1).then(|| {
        (
            Protections::from_raw((k / MASK_EVERY % 8) as u16).unwrap(),
            Protections::from_raw((k / MASK_EVERY / 8 % 8) as u16).unwrap(),
        )
    })
}

struct Keys(ObjID, VerifyingKey);

impl Authority for Keys {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        if obj == self.0 {
            Ok(&self.1)
        } else {
            Err(KeyLookupError::UnknownKey(obj))
        }
    }
}

/// Checks that `ctx.entries_for(target(k))` is exactly copies `0..mults[k]` of target `k`, in
/// insertion order; returns how many entries it saw.
fn check_present(ctx: &SecCtx<'_>, mults: &[u8], k: usize) -> usize {
    let want = usize::from(mults[k]);
    let mut seen = 0;
    for (c, e) in ctx.entries_for(target(k)).enumerate() {
        assert!(c < want, "target {k}: more than {want} entries");
        assert_eq!(e.target, target(k), "target {k} copy {c}: filed under");
        assert_eq!(e.kind, RecordKind::Cap);
        let cap = Cap::decode(e.bytes()).unwrap_or_else(|err| panic!("target {k} copy {c}: {err}"));
        assert_eq!(cap.target(), target(k), "target {k} copy {c}");
        assert_eq!(
            cap.expires(),
            Expiry::from_raw(code(k, c)),
            "target {k} copy {c}: order"
        );
        seen += 1;
    }
    assert_eq!(seen, want, "target {k}: entry count");
    match mask_of(k) {
        Some((perm, ovr)) => {
            let m = ctx
                .mask(target(k))
                .unwrap_or_else(|| panic!("mask of target {k} missing"));
            assert_eq!((m.target, m.permmask, m.ovrmask), (target(k), perm, ovr));
        }
        None => assert_eq!(ctx.mask(target(k)), None, "target {k}: unexpected mask"),
    }
    seen
}

fn check_absent(ctx: &SecCtx<'_>, raw: u128) {
    assert!(
        ctx.entries_for(ObjID::new(raw)).next().is_none(),
        "absent target {raw:#x} has entries"
    );
    assert_eq!(
        ctx.mask(ObjID::new(raw)),
        None,
        "absent target {raw:#x} has a mask"
    );
}

#[test]
fn a_million_entries() {
    let start = Instant::now();
    let mut rng = ChaCha20Rng::seed_from_u64(0x5ec_c7a);
    let key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
    let mults = layout();
    let k_count = mults.len();
    assert_eq!(mults.iter().map(|&m| usize::from(m)).sum::<usize>(), N);
    assert!(u128::try_from(k_count).unwrap() * STRIDE < u128::MAX - STRIDE);

    // The template is the real capability for copy 0 of target 0; every other record reuses
    // its signature.
    let template = Cap::mint(
        CapGrant {
            expires: Expiry::from_raw(code(0, 0)),
            ..CapGrant::new(target(0), CTX, Protections::READ)
        },
        &key,
    )
    .unwrap();
    let sig = *template.signature();
    let base = *template.grant();

    // Insert pass by pass (copy 0 of every target, then copy 1, ...), alternating direction,
    // so targets are interleaved and the encoder has to sort.
    let mut ed = SecCtxEditor::new();
    let max_mult = usize::from(*mults.iter().max().unwrap());
    for c in 0..max_mult {
        let ks: Box<dyn Iterator<Item = usize>> = if c % 2 == 0 {
            Box::new((0..k_count).rev())
        } else {
            Box::new(0..k_count)
        };
        for k in ks {
            if usize::from(mults[k]) > c {
                let grant = CapGrant {
                    target: target(k),
                    expires: Expiry::from_raw(code(k, c)),
                    ..base
                };
                ed.add_cap(&Cap::from_parts(grant, sig));
            }
        }
    }
    let mut masks = 0;
    for k in (0..k_count).rev() {
        if let Some((perm, ovr)) = mask_of(k) {
            ed.set_mask(target(k), perm, ovr);
            masks += 1;
        }
    }
    assert_eq!(ed.len(), N);
    assert_eq!(ed.generation(), (N + masks) as u64);
    let built = start.elapsed();

    let bytes = ed.encode().expect("a million entries fit in an object");
    drop(ed);
    let encoded = start.elapsed();
    let expected_len = HEADER_LEN + N * ENTRY_LEN + masks * MASK_LEN + N * CAP_LEN;
    assert_eq!(bytes.len(), expected_len, "encoded size");
    let field = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    assert_eq!(field(20), N, "entry count field");
    assert_eq!(field(24), masks, "mask count field");
    assert_eq!(field(28), HEADER_LEN, "entry table offset");
    assert_eq!(field(32), HEADER_LEN + N * ENTRY_LEN, "mask table offset");
    assert_eq!(
        field(36),
        HEADER_LEN + N * ENTRY_LEN + masks * MASK_LEN,
        "heap offset"
    );
    assert_eq!(field(40), N * CAP_LEN, "heap length");

    let ctx = SecCtx::parse(&bytes).expect("parse");
    let parsed = start.elapsed();
    assert_eq!(ctx.entry_count(), N);
    assert_eq!(ctx.mask_count(), masks);
    assert_eq!(ctx.generation(), (N + masks) as u64);

    // Full scan: table order is target order, copies in insertion order (read in place).
    let mut expected = mults
        .iter()
        .enumerate()
        .flat_map(|(k, &m)| (0..usize::from(m)).map(move |c| (k, c)));
    for (i, e) in ctx.entries().enumerate() {
        let (k, c) = expected.next().expect("more entries than laid out");
        assert_eq!(e.index, i);
        assert_eq!(e.target, target(k), "entry {i}");
        assert_eq!(e.bytes().len(), CAP_LEN, "entry {i}");
        let expires = u64::from_le_bytes(
            e.bytes()[CAP_EXPIRES_AT..CAP_EXPIRES_AT + 8]
                .try_into()
                .unwrap(),
        );
        assert_eq!(expires, code(k, c), "entry {i}: copy order");
    }
    assert!(expected.next().is_none(), "fewer entries than laid out");
    let scanned = start.elapsed();

    // Sampled lookups: first, last, random, and the neighbours of each.
    let mut present = vec![0, 1, 2, 3, 4, 7, MASK_EVERY - 1, k_count - 2, k_count - 1];
    present.extend((0..10_000).map(|_| (rng.next_u64() % k_count as u64) as usize));
    let mut entries_seen = 0;
    for &k in &present {
        entries_seen += check_present(&ctx, &mults, k);
        let raw = target(k).raw();
        check_absent(&ctx, raw - 1);
        check_absent(&ctx, raw + 1);
        check_absent(&ctx, raw + STRIDE / 2);
    }
    for raw in [
        0,
        1,
        target(0).raw() - 1,
        target(k_count - 1).raw() + 1,
        u128::MAX,
    ] {
        check_absent(&ctx, raw);
    }
    assert!(
        entries_seen > present.len(),
        "the sample should hit multi-entry targets"
    );
    let looked_up = start.elapsed();

    // The rule on the big context: only the template's own copy verifies.
    let auth = Keys(target(0), key.verifying_key());
    let mut verdicts = Vec::new();
    let info = evaluate_explained(
        CTX,
        &ctx,
        target(0),
        Protections::empty(),
        &auth,
        Access::read(0x1000),
        0,
        |r| verdicts.push((r.index, r.verdict)),
    );
    assert_eq!(verdicts, vec![(0, Verdict::Counted(Protections::READ))]);
    assert!(info.grants(Protections::READ));
    let k = 7; // four copies
    verdicts.clear();
    let info = evaluate_explained(
        CTX,
        &ctx,
        target(k),
        Protections::empty(),
        &auth,
        Access::read(0x1000),
        0,
        |r| verdicts.push((r.index, r.verdict)),
    );
    let first = ctx.entries_for(target(k)).next().unwrap().index;
    let want: Vec<_> = (0..4)
        .map(|c| {
            (
                first + c,
                Verdict::Invalid(VerifyError::Key(KeyLookupError::UnknownKey(target(k)))),
            )
        })
        .collect();
    assert_eq!(verdicts, want);
    assert!(!info.grants(Protections::READ));
    let evaluated = start.elapsed();

    // Loading it into the editor and writing it again gives the same bytes.
    let again = SecCtxEditor::from_ctx(&ctx).encode().unwrap();
    assert!(again == bytes, "re-encoded context differs");
    drop(again);
    let round_trip = start.elapsed();

    eprintln!(
        "1M-entry context ({} MB, {k_count} targets, {masks} masks): built {:.2?}, encoded +{:.2?}, \
         parsed +{:.2?}, scanned +{:.2?}, {} lookups +{:.2?}, evaluated +{:.2?}, round trip +{:.2?}; total {:.2?}",
        bytes.len() >> 20,
        built,
        encoded - built,
        parsed - encoded,
        scanned - parsed,
        present.len() * 4 + 5,
        looked_up - scanned,
        evaluated - looked_up,
        round_trip - evaluated,
        round_trip,
    );
}
