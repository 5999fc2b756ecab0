//! Key-pair objects, context editing, the revocation list and the access simulator, over the
//! in-memory store (the directory store has its own tests).

use proptest::prelude::*;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use secctx::context::{self, ContextError, Removal};
use secctx::keypair::{self, KdfParams, KeyError};
use secctx::revocations::{REVOCATIONS_ID, RevocationList};
use secctx::{AccessSimulator, MemStore, ObjMeta, Object, ObjectStore, SimAccess, StoreError};
use twizzler_capsec::{
    AccessKind, Cap, CapGrant, CtxFlags, Del, DelGrant, Expiry, ObjID, Protections, SecCtx,
    SigningKey, SigningScheme, Verdict,
};

const FAST: KdfParams = KdfParams {
    memory_kib: 64,
    passes: 1,
    lanes: 1,
};
const R: Protections = Protections::READ;
const W: Protections = Protections::WRITE;
const NOW: u64 = 1_800_000_000_000_000_000;

fn rng(seed: u64) -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(seed)
}

#[test]
fn keypair_round_trip_both_schemes_plain_and_sealed() {
    let store = MemStore::new();
    for (i, scheme) in [SigningScheme::Ed25519, SigningScheme::EcdsaP256]
        .into_iter()
        .enumerate()
    {
        for (j, pass) in [None, Some("correct horse")].into_iter().enumerate() {
            let seed = (2 * i + j) as u64;
            let (ids, key) =
                keypair::create_keypair(&store, scheme, pass, FAST, &mut rng(seed)).unwrap();
            assert_eq!(
                keypair::load_verifying_key(&store, ids.verifying).unwrap(),
                key.verifying_key()
            );
            let loaded = keypair::load_signing_key(&store, ids.signing, pass).unwrap();
            assert_eq!(loaded.verifying_key(), key.verifying_key());
            let sk = store.get(ids.signing).unwrap();
            assert!(sk.meta.secret, "signing keys are stored secret");
            let info = keypair::signing_key_info(&sk).unwrap();
            assert_eq!(info.verifying, ids.verifying);
            assert_eq!(info.protected, pass.is_some());
            if pass.is_some() {
                // The plaintext key is nowhere in the stored bytes.
                let enc = key.encode();
                assert!(!sk.data.windows(enc.len()).any(|w| w == &enc[..]));
            }
        }
    }
}

#[test]
fn wrong_or_missing_passphrase_and_tampering_fail_cleanly() {
    let store = MemStore::new();
    let (ids, _) = keypair::create_keypair(
        &store,
        SigningScheme::Ed25519,
        Some("s3cret"),
        FAST,
        &mut rng(1),
    )
    .unwrap();
    assert!(matches!(
        keypair::load_signing_key(&store, ids.signing, Some("wrong")),
        Err(KeyError::WrongPassphrase(id)) if id == ids.signing
    ));
    assert!(matches!(
        keypair::load_signing_key(&store, ids.signing, None),
        Err(KeyError::PassphraseRequired(_))
    ));
    // Every single-byte change of the sealed object fails (wrong passphrase or malformed),
    // never yields a key.
    let original = store.get(ids.signing).unwrap();
    for at in 0..original.data.len() {
        let mut data = original.data.clone();
        data[at] ^= 0x40;
        store
            .update(ids.signing, |o| {
                o.data = data;
                Ok::<(), StoreError>(())
            })
            .unwrap();
        let r = keypair::load_signing_key(&store, ids.signing, Some("s3cret"));
        assert!(r.is_err(), "byte {at} changed and the key still loaded");
    }
    // A sealed key moved to another object id does not decrypt there.
    let moved = ObjID::new(0xabc);
    store
        .create(&Object {
            id: moved,
            ..original.clone()
        })
        .unwrap();
    assert!(matches!(
        keypair::load_signing_key(&store, moved, Some("s3cret")),
        Err(KeyError::WrongPassphrase(_))
    ));
    // Not a key object at all.
    assert!(matches!(
        keypair::load_verifying_key(&store, ids.signing),
        Err(KeyError::Malformed { .. })
    ));
}

fn world() -> (MemStore, SigningKey, ObjID, ObjID, ObjID) {
    let store = MemStore::new();
    let (kp, key) =
        keypair::create_keypair(&store, SigningScheme::Ed25519, None, FAST, &mut rng(7)).unwrap();
    let file = ObjID::new(0x1000);
    store
        .create(&Object {
            id: file,
            meta: ObjMeta::signed_by(kp.verifying),
            data: vec![0; 64],
        })
        .unwrap();
    let (a, b) = (ObjID::new(0xa), ObjID::new(0xb));
    context::create(&store, a, None).unwrap();
    context::create(&store, b, None).unwrap();
    (store, key, file, a, b)
}

#[test]
fn context_edits_bump_the_generation_and_refuse_bad_input() {
    let (store, key, file, a, b) = world();
    let cap = Cap::mint(CapGrant::new(file, a, R), &key).unwrap();
    assert_eq!(context::add_cap(&store, a, &cap).unwrap(), 1);
    assert_eq!(
        context::set_mask(&store, a, file, R, Protections::empty()).unwrap(),
        2
    );
    assert_eq!(context::set_global_mask(&store, a, R | W).unwrap(), 3);
    assert_eq!(
        context::set_flags(&store, a, CtxFlags::UNDETACHABLE).unwrap(),
        4
    );
    let bytes = store.get(a).unwrap().data;
    let ctx = SecCtx::parse(&bytes).unwrap();
    assert_eq!(ctx.generation(), 4);
    assert_eq!(ctx.entries_for(file).count(), 1);
    assert_eq!(ctx.mask(file).unwrap().permmask, R);

    // A cap for B does not go into A, and nothing is written.
    let for_b = Cap::mint(CapGrant::new(file, b, R), &key).unwrap();
    assert!(matches!(
        context::add_cap(&store, a, &for_b),
        Err(ContextError::NotForThisContext { holder, .. }) if holder == b
    ));
    assert_eq!(store.get(a).unwrap().data, bytes);
    // Removing what is not there is an error and writes nothing.
    assert!(matches!(
        context::remove(&store, a, Removal::Target(ObjID::new(0x999))),
        Err(ContextError::NothingToRemove { .. })
    ));
    assert_eq!(store.get(a).unwrap().data, bytes);
    assert_eq!(
        context::remove(&store, a, Removal::Record(file, cap.id())).unwrap(),
        5
    );
    assert_eq!(context::read(&store, a).unwrap().len(), 0);
    // A corrupt context is reported, not overwritten.
    store
        .update(b, |o| {
            o.data.truncate(10);
            Ok::<(), StoreError>(())
        })
        .unwrap();
    assert!(matches!(
        context::set_global_mask(&store, b, R),
        Err(ContextError::Malformed { .. })
    ));
    assert_eq!(store.get(b).unwrap().data.len(), 10);
}

fn read(target: ObjID) -> SimAccess {
    SimAccess {
        target,
        offset: 0x1000,
        kind: AccessKind::Read,
    }
}

#[test]
fn simulator_grants_explains_switches_and_honours_revocation() {
    let (store, key, file, a, b) = world();
    let cap = Cap::mint(CapGrant::new(file, b, R), &key).unwrap();
    context::add_cap(&store, b, &cap).unwrap();

    let sim = AccessSimulator::load(&store, &[a, b], &[file], NOW).unwrap();
    let s = sim.check(&[a, b], read(file));
    assert!(s.granted());
    assert_eq!(s.active_after, b, "switched to the context that grants");
    assert_eq!(s.contexts.len(), 2);
    assert!(s.contexts[0].records.is_empty());
    assert!(matches!(s.contexts[1].records[0].verdict, Verdict::Counted(p) if p == R));

    let w = sim.check(
        &[b],
        SimAccess {
            kind: AccessKind::Write,
            ..read(file)
        },
    );
    assert!(!w.granted());

    // Revoke the cap in the store's list: a new simulation denies and says why.
    assert!(RevocationList::add(&store, |l| l.records.insert(cap.id())).unwrap());
    assert!(!RevocationList::add(&store, |l| l.records.insert(cap.id())).unwrap());
    let sim = AccessSimulator::load(&store, &[b], &[file], NOW).unwrap();
    let s = sim.check(&[b], read(file));
    assert!(!s.granted());
    assert!(matches!(
        s.contexts[0].records[0].verdict,
        Verdict::Invalid(twizzler_capsec::VerifyError::Revoked)
    ));
}

#[test]
fn simulator_follows_delegations_and_expiry() {
    let (store, key, file, a, b) = world();
    // A has its own key pair, to delegate with.
    let (akp, akey) =
        keypair::create_keypair(&store, SigningScheme::Ed25519, None, FAST, &mut rng(9)).unwrap();
    store
        .update(a, |o| {
            o.meta.kuid = Some(akp.verifying);
            Ok::<(), StoreError>(())
        })
        .unwrap();
    let mut g = CapGrant::new(file, a, R | W);
    g.expires = Expiry::from_raw(NOW + 1000);
    let parent = Cap::mint(g, &key).unwrap();
    let mut dg = DelGrant::new(b, R);
    dg.expires = Expiry::from_raw(NOW + 1000);
    let del = Del::from_cap(&parent, dg, &akey).unwrap();
    context::add_del(&store, b, &del).unwrap();

    let s = AccessSimulator::load(&store, &[b], &[], NOW)
        .unwrap()
        .check(&[b], read(file));
    assert!(s.granted(), "{s:?}");
    let later = AccessSimulator::load(&store, &[b], &[], NOW + 1000)
        .unwrap()
        .check(&[b], read(file));
    assert!(!later.granted());
}

#[test]
fn simulator_reports_missing_and_corrupt_contexts() {
    let (store, _key, file, _a, _b) = world();
    let ghost = ObjID::new(0xdead);
    let sim = AccessSimulator::load(&store, &[ghost], &[file], NOW).unwrap();
    let s = sim.check(&[ghost], read(file));
    assert!(!s.granted());
    assert!(s.contexts[0].error.is_some());
    // The revocation list object with bad bytes is a clear error.
    store
        .create(&Object {
            id: REVOCATIONS_ID,
            meta: ObjMeta::plain(),
            data: b"junk".to_vec(),
        })
        .unwrap();
    assert!(matches!(
        AccessSimulator::load(&store, &[ghost], &[file], NOW),
        Err(StoreError::Corrupt { id, .. }) if id == REVOCATIONS_ID
    ));
}

proptest! {
    #[test]
    fn revocation_lists_round_trip(keys in proptest::collection::btree_set(any::<u128>(), 0..8),
                                   recs in proptest::collection::btree_set(any::<[u8; 32]>(), 0..8)) {
        let list = RevocationList {
            keys: keys.into_iter().map(ObjID::new).collect(),
            records: recs.into_iter().map(twizzler_capsec::RecordId).collect(),
        };
        prop_assert_eq!(RevocationList::decode(&list.encode()).unwrap(), list);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_key_and_list_parsers(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let obj = Object { id: ObjID::new(1), meta: ObjMeta::plain(), data: data.clone() };
        let _ = keypair::parse_verifying_key(&obj);
        let _ = keypair::signing_key_info(&obj);
        let _ = RevocationList::decode(&data);
        let store = MemStore::new();
        store.create(&obj).unwrap();
        let _ = keypair::load_signing_key(&store, obj.id, Some("x"));
    }
}
