//! Property tests of the encodings: round trips of every encoded type, and totality of every
//! decoder (arbitrary bytes, valid encodings with random edits, and valid headers followed by
//! random bytes never panic, and whatever is accepted re-encodes to the same bytes).

use std::sync::LazyLock;

use crate::common_keys::{TestAuth, key};
use proptest::prelude::*;
use proptest::test_runner::Config;
use twizzler_capsec::{
    CAP_BODY_LEN, CAP_DOMAIN, CAP_MAGIC, CAP_VERSION, Cap, CapGrant, CtxFlags, DEL_MAGIC,
    DEL_VERSION, Del, DelGrant, Expiry, Gate, HashAlg, MAX_CHAIN_DEPTH, MAX_OBJECT_SIZE, ObjID,
    Protections, Record, RecordKind, SecCtx, SecCtxEditor, Signature, SigningKey, SigningScheme,
    VerifyingKey,
};

const GIB: u64 = MAX_OBJECT_SIZE;

/// Signing is slow in debug builds: one key per scheme, made once.
static KEYS: LazyLock<[SigningKey; 2]> = LazyLock::new(|| {
    [
        key(SigningScheme::Ed25519, 1),
        key(SigningScheme::EcdsaP256, 2),
    ]
});

fn key_of(scheme: SigningScheme) -> &'static SigningKey {
    match scheme {
        SigningScheme::Ed25519 => &KEYS[0],
        SigningScheme::EcdsaP256 => &KEYS[1],
    }
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        // Do not write regression files into the source tree.
        failure_persistence: None,
        ..Config::default()
    }
}

// ---- strategies ----

fn scheme() -> impl Strategy<Value = SigningScheme> {
    prop_oneof![Just(SigningScheme::Ed25519), Just(SigningScheme::EcdsaP256)]
}

fn hash() -> impl Strategy<Value = HashAlg> {
    prop_oneof![Just(HashAlg::Blake3), Just(HashAlg::Sha256)]
}

fn prots() -> impl Strategy<Value = Protections> {
    (0u16..8).prop_map(|b| Protections::from_raw(b).unwrap())
}

fn expiry() -> impl Strategy<Value = Expiry> {
    prop_oneof![
        Just(Expiry::NEVER),
        Just(Expiry::from_raw(1)),
        Just(Expiry::from_raw(u64::MAX)),
        any::<u64>().prop_map(Expiry::from_raw),
    ]
}

fn align() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1u64),
        1u64..=4096,
        (0u32..64).prop_map(|s| 1u64 << s),
        1u64..=u64::MAX,
    ]
}

/// Any valid gate, biased towards the edges of the 1 GiB range.
fn gate() -> impl Strategy<Value = Gate> {
    let offset = prop_oneof![Just(0u64), Just(GIB - 1), 0..GIB];
    offset
        .prop_flat_map(|off| {
            let room = GIB - off;
            let length = prop_oneof![Just(1u64), Just(room), 1..=room];
            (Just(off), length, align())
        })
        .prop_map(|(o, l, a)| Gate::new(o, l, a).unwrap())
}

fn obj_id() -> impl Strategy<Value = ObjID> {
    prop_oneof![
        Just(ObjID::new(0)),
        Just(ObjID::new(u128::MAX)),
        any::<u128>().prop_map(ObjID::new),
    ]
}

/// A holder a data capability or a delegation may name: any id but `ALL_CONTEXTS`
/// (`u128::MAX`), which only an ownership root may hold (a decode error elsewhere).
fn holder_id() -> impl Strategy<Value = ObjID> {
    prop_oneof![
        Just(ObjID::new(0)),
        Just(ObjID::new(u128::MAX - 1)),
        (0..u128::MAX).prop_map(ObjID::new),
    ]
}

fn cap_grant() -> impl Strategy<Value = CapGrant> {
    (obj_id(), holder_id(), prots(), gate(), expiry(), hash()).prop_map(
        |(target, accessor, prots, gate, expires, hash)| CapGrant {
            target,
            accessor,
            prots,
            gate,
            expires,
            hash,
        },
    )
}

/// Random numbers from which one attenuating link is derived (see `attenuate`).
#[derive(Clone, Debug)]
struct LinkSeed {
    receiver: u128,
    prots_mask: u16,
    gate: (u64, u64, u64),
    expires: u64,
    hash: HashAlg,
    scheme: SigningScheme,
}

fn link_seed() -> impl Strategy<Value = LinkSeed> {
    (
        0..u128::MAX,
        any::<u16>(),
        (any::<u64>(), any::<u64>(), any::<u64>()),
        any::<u64>(),
        hash(),
        scheme(),
    )
        .prop_map(
            |(receiver, prots_mask, gate, expires, hash, scheme)| LinkSeed {
                receiver,
                prots_mask,
                gate,
                expires,
                hash,
                scheme,
            },
        )
}

/// A grant that widens nothing of the parent bounds, derived from `seed`.
fn attenuate(
    parent_prots: Protections,
    parent_gate: Gate,
    parent_exp: Expiry,
    seed: &LinkSeed,
) -> DelGrant {
    let prots = parent_prots & Protections::from_bits_truncate(seed.prots_mask);
    let (r1, r2, r3) = seed.gate;
    let off = parent_gate.offset() + r1 % parent_gate.length();
    let len = 1 + r2 % (parent_gate.end() - off);
    let align = parent_gate
        .align()
        .checked_mul(1 + r3 % 4)
        .unwrap_or(parent_gate.align());
    let gate = Gate::new(off, len, align).unwrap();
    let expires = match parent_exp.at() {
        None => Expiry::from_raw(seed.expires),
        Some(t) => Expiry::from_raw(1 + seed.expires % t),
    };
    DelGrant {
        receiver: ObjID::new(seed.receiver),
        prots,
        gate,
        expires,
        hash: seed.hash,
    }
}

/// Builds a delegation from a root grant and 1..=3 link seeds; also returns an authority with
/// every key it needs, or `None` if two parties drew the same id with different keys.
fn build_del(
    root: CapGrant,
    root_scheme: SigningScheme,
    seeds: &[LinkSeed],
) -> (Del, Option<TestAuth>) {
    let cap = Cap::mint(root, key_of(root_scheme)).unwrap();
    let mut auth = Some(TestAuth::new().with_key(root.target, key_of(root_scheme)));
    let add = |auth: &mut Option<TestAuth>, obj: ObjID, k: &SigningKey| {
        if let Some(a) = auth.as_mut() {
            match a.keys.get(&obj) {
                Some(existing) if *existing != k.verifying_key() => *auth = None,
                _ => {
                    a.keys.insert(obj, k.verifying_key());
                }
            }
        }
    };
    let first = attenuate(cap.prots(), cap.gate(), cap.expires(), &seeds[0]);
    let k = key_of(seeds[0].scheme);
    add(&mut auth, cap.accessor(), k);
    let mut del = Del::from_cap(&cap, first, k).unwrap();
    for seed in &seeds[1..] {
        let g = attenuate(
            del.prots(),
            del.gate(),
            del.links().last().unwrap().grant().expires,
            seed,
        );
        let k = key_of(seed.scheme);
        add(&mut auth, del.receiver(), k);
        del = del.delegate(g, k).unwrap();
    }
    (del, auth)
}

// ---- round trips ----

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn cap_round_trips(grant in cap_grant(), s in scheme()) {
        let sk = key_of(s);
        let cap = Cap::mint(grant, sk).unwrap();
        prop_assert_eq!(cap.grant(), &grant);
        let bytes = cap.encode();
        let back = Cap::decode(&bytes).unwrap();
        prop_assert_eq!(back, cap);
        prop_assert_eq!(back.encode(), bytes);
        prop_assert_eq!(back.gate(), grant.gate);
        prop_assert_eq!(
            Record::decode(RecordKind::Cap, &bytes).unwrap(),
            Record::Cap(cap)
        );
        prop_assert_eq!(
            cap.signed_message(),
            grant.hash.digest(&[CAP_DOMAIN, &bytes[..CAP_BODY_LEN]])
        );
        // Time 0 is before every expiry (1 is the earliest).
        prop_assert_eq!(back.verify(&sk.verifying_key(), 0), Ok(()));
    }
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn del_round_trips(
        root in cap_grant(),
        root_scheme in scheme(),
        seeds in prop::collection::vec(link_seed(), 1..=3),
    ) {
        let (del, auth) = build_del(root, root_scheme, &seeds);
        prop_assert_eq!(del.depth(), seeds.len());
        let bytes = del.encode();
        prop_assert_eq!(bytes.len(), del.encoded_len());
        let back = Del::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &del);
        prop_assert_eq!(&back.encode()[..], &bytes[..]);
        prop_assert_eq!(
            Record::decode(RecordKind::Del, &bytes).unwrap(),
            Record::Del(del.clone())
        );
        prop_assert_eq!(back.check_chain(0), Ok(()));
        if let Some(auth) = auth {
            prop_assert_eq!(Record::Del(back).verify(&auth, 0), Ok(()));
        }
    }

    #[test]
    fn verifying_keys_round_trip(s in scheme(), seed in any::<u64>()) {
        let vk = key(s, seed).verifying_key();
        let enc = vk.encode();
        let back = VerifyingKey::decode(&enc).unwrap();
        prop_assert_eq!(&back, &vk);
        prop_assert_eq!(back.encode(), enc);
        prop_assert_eq!(VerifyingKey::from_raw(s, &vk.to_raw()).unwrap(), vk);
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn signatures_round_trip(s in scheme(), raw in prop::array::uniform32(any::<u8>()), raw2 in prop::array::uniform32(any::<u8>())) {
        let mut bytes = raw.to_vec();
        bytes.extend_from_slice(&raw2);
        let sig = Signature::from_raw(s, &bytes).unwrap();
        prop_assert_eq!(sig.as_bytes(), &bytes[..]);
        let enc = sig.encode();
        let back = Signature::decode(&enc).unwrap();
        prop_assert_eq!(back, sig);
        prop_assert_eq!(back.encode(), enc);
    }

    #[test]
    fn signing_keys_round_trip(s in scheme(), raw in prop::array::uniform32(any::<u8>())) {
        let sk = match SigningKey::from_raw(s, &raw) {
            Ok(k) => k,
            Err(e) => {
                // Only P-256 scalars outside 1..n are refused.
                prop_assert_eq!(s, SigningScheme::EcdsaP256);
                prop_assert_eq!(e, twizzler_capsec::DecodeError::InvalidKey);
                return Ok(());
            }
        };
        prop_assert_eq!(&sk.to_raw()[..], &raw[..]);
        let enc = sk.encode();
        let back = SigningKey::decode(&enc[..]).unwrap();
        prop_assert_eq!(&back.to_raw()[..], &raw[..]);
        prop_assert_eq!(&back.encode()[..], &enc[..]);
        prop_assert_eq!(back.verifying_key(), sk.verifying_key());
    }
}

// ---- totality ----

/// Runs every decoder on `bytes`. Nothing may panic, and every accepted record, key or
/// signature re-encodes to exactly `bytes`. Returns how many decoders accepted.
fn decode_all(bytes: &[u8]) -> Result<usize, TestCaseError> {
    let mut accepted = 0;
    if let Ok(c) = Cap::decode(bytes) {
        accepted += 1;
        prop_assert_eq!(&c.encode()[..], bytes, "Cap re-encoding");
    }
    if let Ok(d) = Del::decode(bytes) {
        accepted += 1;
        prop_assert_eq!(&d.encode()[..], bytes, "Del re-encoding");
        prop_assert!((1..=MAX_CHAIN_DEPTH).contains(&d.depth()));
    }
    for kind in [RecordKind::Cap, RecordKind::Del] {
        if let Ok(r) = Record::decode(kind, bytes) {
            accepted += 1;
            prop_assert_eq!(r.kind(), kind);
            let re = match &r {
                Record::Cap(c) => c.encode().to_vec(),
                Record::Del(d) => d.encode().to_vec(),
            };
            prop_assert_eq!(&re[..], bytes, "Record re-encoding");
        }
    }
    if let Ok(s) = Signature::decode(bytes) {
        accepted += 1;
        prop_assert_eq!(&s.encode()[..], bytes, "Signature re-encoding");
    }
    if let Ok(k) = VerifyingKey::decode(bytes) {
        accepted += 1;
        prop_assert_eq!(&k.encode()[..], bytes, "VerifyingKey re-encoding");
    }
    if let Ok(k) = SigningKey::decode(bytes) {
        accepted += 1;
        prop_assert_eq!(&k.encode()[..], bytes, "SigningKey re-encoding");
    }
    if let Ok(ctx) = SecCtx::parse(bytes) {
        accepted += 1;
        exercise_ctx(&ctx)?;
    }
    Ok(accepted)
}

/// Walks a parsed context through every accessor, and checks that the editor re-encodes it
/// into a context that parses to the same contents.
fn exercise_ctx(ctx: &SecCtx<'_>) -> Result<(), TestCaseError> {
    let _ = (ctx.flags(), ctx.generation(), ctx.global_mask());
    let entries: Vec<_> = ctx.entries().collect();
    prop_assert_eq!(entries.len(), ctx.entry_count());
    for e in &entries {
        if let Ok(r) = e.record() {
            prop_assert_eq!(r.kind(), e.kind);
        }
        prop_assert!(ctx.entries_for(e.target).any(|x| x == *e));
        let _ = ctx.mask(e.target);
    }
    let masks: Vec<_> = ctx.masks().collect();
    prop_assert_eq!(masks.len(), ctx.mask_count());
    for m in &masks {
        prop_assert_eq!(ctx.mask(m.target), Some(*m));
    }
    let reencoded = SecCtxEditor::from_ctx(ctx).encode().unwrap();
    let again = SecCtx::parse(&reencoded).unwrap();
    prop_assert_eq!(again.flags(), ctx.flags());
    prop_assert_eq!(again.generation(), ctx.generation());
    prop_assert_eq!(again.global_mask(), ctx.global_mask());
    let again_entries: Vec<_> = again
        .entries()
        .map(|e| (e.target, e.kind, e.bytes().to_vec()))
        .collect();
    // The same entries, in the order the editor writes them.
    let mut orig_entries: Vec<_> = entries
        .iter()
        .map(|e| (e.target, e.kind, e.bytes().to_vec()))
        .collect();
    crate::fixture::writer_order(&mut orig_entries);
    prop_assert_eq!(again_entries, orig_entries);
    prop_assert_eq!(again.masks().collect::<Vec<_>>(), masks);
    Ok(())
}

/// Valid encodings of every type, to mutate.
static VALID: LazyLock<Vec<(&'static str, Vec<u8>)>> = LazyLock::new(|| {
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();
    let target = ObjID::new(0x1234);
    let p = ObjID::new(0xc0);
    let mut caps = Vec::new();
    for (s, h) in [
        (SigningScheme::Ed25519, HashAlg::Blake3),
        (SigningScheme::EcdsaP256, HashAlg::Sha256),
    ] {
        let grant = CapGrant {
            target,
            accessor: p,
            prots: Protections::READ | Protections::WRITE,
            gate: Gate::new(0x1000, 0x10000, 16).unwrap(),
            expires: Expiry::from_raw(1_000_000),
            hash: h,
        };
        let cap = Cap::mint(grant, key_of(s)).unwrap();
        out.push(("cap", cap.encode().to_vec()));
        caps.push(cap);
        out.push(("signature", cap.signature().encode().to_vec()));
        out.push(("verifying key", key_of(s).verifying_key().encode().to_vec()));
        out.push(("signing key", key_of(s).encode().to_vec()));
    }
    let seeds: Vec<LinkSeed> = (0..3)
        .map(|i| LinkSeed {
            receiver: 0xd0 + i,
            prots_mask: 0xffff,
            gate: (0, u64::MAX, i as u64),
            expires: u64::MAX,
            hash: if i.is_multiple_of(2) {
                HashAlg::Sha256
            } else {
                HashAlg::Blake3
            },
            scheme: if i.is_multiple_of(2) {
                SigningScheme::Ed25519
            } else {
                SigningScheme::EcdsaP256
            },
        })
        .collect();
    let mut dels = Vec::new();
    for depth in 1..=3 {
        let (del, _) = build_del(
            *caps[depth % 2].grant(),
            if depth.is_multiple_of(2) {
                SigningScheme::Ed25519
            } else {
                SigningScheme::EcdsaP256
            },
            &seeds[..depth],
        );
        out.push(("del", del.encode().to_vec()));
        dels.push(del);
    }
    let mut ed = SecCtxEditor::new();
    ed.add_cap(&caps[0]);
    ed.add_cap(&caps[1]);
    ed.add_del(&dels[1]);
    ed.set_mask(target, Protections::READ, Protections::empty());
    ed.set_mask(ObjID::new(0x9999), Protections::all(), Protections::READ);
    ed.set_global_mask(Protections::READ);
    ed.set_flags(CtxFlags::UNDETACHABLE);
    out.push(("context", ed.encode().unwrap()));
    out.push(("empty context", SecCtxEditor::new().encode().unwrap()));
    out
});

/// An edit of a valid encoding.
#[derive(Clone, Debug)]
enum Edit {
    /// Overwrites the byte at `index % len`.
    Set(usize, u8),
    /// Flips one bit at `bit % (8 * len)`.
    Flip(usize),
    /// Truncates to `len % (len + 1)` bytes.
    Truncate(usize),
    /// Appends bytes.
    Append(Vec<u8>),
    /// Copies a 16-byte window from one place to another (moves ids and lengths around).
    Copy(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        4 => any::<usize>().prop_map(Edit::Flip),
        1 => any::<usize>().prop_map(Edit::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Edit::Append),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Copy(a, b)),
    ]
}

fn apply(bytes: &mut Vec<u8>, e: &Edit) {
    let len = bytes.len();
    match e {
        Edit::Set(i, b) if len > 0 => bytes[i % len] = *b,
        Edit::Flip(bit) if len > 0 => bytes[(bit / 8) % len] ^= 1 << (bit % 8),
        Edit::Truncate(n) => bytes.truncate(n % (len + 1)),
        Edit::Append(tail) => bytes.extend_from_slice(tail),
        Edit::Copy(from, to) if len >= 16 => {
            let from = from % (len - 15);
            let to = to % (len - 15);
            let window: Vec<u8> = bytes[from..from + 16].to_vec();
            bytes[to..to + 16].copy_from_slice(&window);
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1200)) {
        decode_all(&bytes)?;
    }

    #[test]
    fn valid_headers_then_arbitrary_bytes_never_panic(
        which in 0usize..3,
        depth in 0u16..10,
        tail in prop::collection::vec(any::<u8>(), 0..1600),
    ) {
        let mut bytes = Vec::new();
        match which {
            0 => {
                bytes.extend_from_slice(&CAP_MAGIC.to_le_bytes());
                bytes.extend_from_slice(&CAP_VERSION.to_le_bytes());
            }
            1 => {
                bytes.extend_from_slice(&DEL_MAGIC.to_le_bytes());
                bytes.extend_from_slice(&DEL_VERSION.to_le_bytes());
                bytes.extend_from_slice(&depth.to_le_bytes());
                bytes.extend_from_slice(&CAP_MAGIC.to_le_bytes());
                bytes.extend_from_slice(&CAP_VERSION.to_le_bytes());
            }
            _ => {
                bytes.extend_from_slice(b"TSCX");
                bytes.extend_from_slice(&1u16.to_le_bytes());
            }
        }
        bytes.extend_from_slice(&tail);
        decode_all(&bytes)?;
    }
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn edited_valid_encodings_never_panic(
        which in 0usize..64,
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let (what, valid) = &VALID[which % VALID.len()];
        let mut bytes = valid.clone();
        for e in &edits {
            apply(&mut bytes, e);
        }
        let accepted = decode_all(&bytes)?;
        // An unedited encoding (the edits cancelled out) must still be accepted.
        if bytes == *valid {
            prop_assert!(accepted >= 1, "{} no longer decodes", what);
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Edited records that still decode never verify, unless the edits cancelled out:
    /// a signed record has exactly one accepted encoding.
    #[test]
    fn edited_records_that_verify_are_the_original(
        which in 0usize..64,
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let records: Vec<&(&str, Vec<u8>)> =
            VALID.iter().filter(|(w, _)| *w == "cap" || *w == "del").collect();
        let (what, valid) = records[which % records.len()];
        let mut bytes = valid.clone();
        for e in &edits {
            apply(&mut bytes, e);
        }
        let kind = if *what == "cap" { RecordKind::Cap } else { RecordKind::Del };
        // Every key any valid record was signed with, under every id it uses.
        let mut auth = TestAuth::new();
        if let Ok(Record::Del(d)) = Record::decode(RecordKind::Del, valid) {
            for (i, link) in d.links().enumerate() {
                let s = if i.is_multiple_of(2) { SigningScheme::Ed25519 } else { SigningScheme::EcdsaP256 };
                auth.keys.insert(link.provider(), key_of(s).verifying_key());
            }
        }
        let orig = Record::decode(kind, valid).unwrap();
        let root_scheme = match &orig {
            Record::Cap(c) => c.signature().scheme(),
            Record::Del(d) => d.root().signature().scheme(),
        };
        auth.keys.insert(orig.target(), key_of(root_scheme).verifying_key());
        prop_assert_eq!(orig.verify(&auth, 0), Ok(()), "the original {} verifies", what);
        if let Ok(r) = Record::decode(kind, &bytes)
            && r.verify(&auth, 0).is_ok()
        {
            prop_assert_eq!(&bytes, valid, "an edited {} verifies", what);
        }
    }
}

/// The edits above must reach the decoders' inner checks, not stop at the magic: over a fixed
/// set of single-byte edits of each valid encoding, some are still accepted, and some are
/// rejected beyond the header.
#[test]
fn single_byte_edits_reach_past_the_header() {
    use rand_core::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
    for (what, valid) in VALID.iter() {
        let mut accepted = 0;
        for _ in 0..400 {
            let mut bytes = valid.clone();
            // Leave the first 8 bytes (magic, version, and a delegation's depth) alone.
            let at = 8 + (rng.next_u32() as usize) % (bytes.len() - 8);
            // A real change: XOR with a non-zero byte.
            bytes[at] ^= 1 + (rng.next_u32() % 255) as u8;
            if decode_all(&bytes).unwrap() > 0 {
                accepted += 1;
            }
        }
        // (A P-256 point edited in one byte is off the curve, so verifying keys may reject
        // every edit.)
        assert!(
            accepted > 0 || *what == "verifying key",
            "{what}: no single-byte edit was accepted, so the mutation tests only exercise \
             the first checks"
        );
        assert!(
            accepted < 400 || *what == "empty context",
            "{what}: every edit was accepted"
        );
    }
}

/// A context built by hand, whose entries name arbitrary (overlapping, shared, empty) ranges
/// of its item heap: the editor's input when the context was written by someone else.
fn raw_ctx(heap: &[u8], rows: &[(u128, u16, u16)]) -> Vec<u8> {
    use twizzler_capsec::ctx::{CTX_MAGIC, CTX_VERSION, ENTRY_LEN, HEADER_LEN};
    let n = rows.len();
    let heap_offset = HEADER_LEN + n * ENTRY_LEN;
    let mut out = Vec::new();
    out.extend_from_slice(&CTX_MAGIC.to_le_bytes());
    out.extend_from_slice(&CTX_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&9u64.to_le_bytes());
    out.extend_from_slice(&7u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    for v in [n, 0, HEADER_LEN, heap_offset, heap_offset, heap.len(), 0] {
        out.extend_from_slice(&(v as u32).to_le_bytes());
    }
    let mut sorted = rows.to_vec();
    sorted.sort_by_key(|r| r.0);
    for (target, off, len) in sorted {
        out.extend_from_slice(&target.to_le_bytes());
        out.extend_from_slice(&RecordKind::Cap.raw().to_le_bytes());
        out.extend_from_slice(&u32::from(off).to_le_bytes());
        out.extend_from_slice(&u32::from(len).to_le_bytes());
    }
    out.extend_from_slice(heap);
    out
}

fn overlapping_ctx() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..300).prop_flat_map(|heap| {
        let h = heap.len() as u16;
        let row =
            (0u128..6, 0..=h).prop_flat_map(move |(t, off)| (Just(t), Just(off), 0..=h - off));
        prop::collection::vec(row, 0..24).prop_map(move |rows| raw_ctx(&heap, &rows))
    })
}

proptest! {
    #![proptest_config(config(512))]

    /// Loading a context whose entries share and overlap heap bytes, removing some entries and
    /// writing it again keeps every other entry's bytes and never makes the context larger.
    #[test]
    fn editing_overlapping_contexts_keeps_bytes_and_never_grows(
        bytes in overlapping_ctx(),
        drop_target in 0u128..7,
    ) {
        let ctx = SecCtx::parse(&bytes).unwrap();
        exercise_ctx(&ctx)?;
        let mut ed = SecCtxEditor::from_ctx(&ctx);
        let same = ed.encode().unwrap();
        prop_assert!(same.len() <= bytes.len(), "{} -> {}", bytes.len(), same.len());
        let removed = ed.remove_target(ObjID::new(drop_target));
        let edited = ed.encode().unwrap();
        prop_assert!(edited.len() <= same.len());
        let again = SecCtx::parse(&edited).unwrap();
        // The other entries, in the order the editor writes them.
        let mut kept: Vec<_> = ctx
            .entries()
            .filter(|e| e.target.raw() != drop_target)
            .map(|e| (e.target, e.kind, e.bytes().to_vec()))
            .collect();
        crate::fixture::writer_order(&mut kept);
        prop_assert_eq!(kept.len() + removed, ctx.entry_count());
        let got: Vec<_> = again
            .entries()
            .map(|e| (e.target, e.kind, e.bytes().to_vec()))
            .collect();
        prop_assert_eq!(got, kept);
    }
}
