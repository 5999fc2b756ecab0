//! The label table (DIFC, `docs/DIFC.md` §7.1): creation, registration and relabelling
//! checked as the kernel checks them, one transaction each, and the simulator's flow rule.

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use secctx::labels::{self, DifcError, LABELS_ID, LabelTable};
use secctx::revocations::RevocationList;
use secctx::{
    AccessSimulator, DbStore, MemStore, ObjMeta, Object, ObjectStore, SimAccess, context, keypair,
};
use twizzler_capsec::{
    AccessKind, Cap, CapGrant, Del, DelGrant, FlowDenial, Label, LabelError, ObjID, OwnRights,
    OwnershipGrant, Protections, Right, SecCtxEditor, SigningKey, SigningScheme,
};

const NOW: u64 = 1_000;

struct World<S> {
    store: S,
    rng: ChaCha20Rng,
    /// The owner of every object and tag.
    key: SigningKey,
    kuid: ObjID,
}

impl<S: ObjectStore> World<S> {
    fn new(store: S) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(24);
        let (ids, key) = keypair::create_keypair(
            &store,
            SigningScheme::Ed25519,
            None,
            keypair::KdfParams::DEFAULT,
            &mut rng,
        )
        .unwrap();
        Self {
            store,
            rng,
            key,
            kuid: ids.verifying,
        }
    }

    fn id(&mut self) -> ObjID {
        keypair::random_id(&mut self.rng)
    }

    fn obj(&mut self, label: Option<&Label>, creator: Option<ObjID>) -> Result<ObjID, DifcError> {
        let id = self.id();
        let obj = Object {
            id,
            meta: ObjMeta::signed_by(self.kuid),
            data: vec![1; 64],
        };
        labels::create_object(&self.store, &obj, label, creator, NOW).map(|_| id)
    }

    fn ctx(&mut self) -> ObjID {
        let id = self.id();
        context::create(&self.store, id, None).unwrap();
        id
    }

    fn grant_rw(&mut self, ctx: ObjID, obj: ObjID) {
        let cap = Cap::mint(
            CapGrant::new(obj, ctx, Protections::READ | Protections::WRITE),
            &self.key,
        )
        .unwrap();
        context::add_cap(&self.store, ctx, &cap).unwrap();
    }

    fn own(&mut self, ctx: ObjID, tag: ObjID, rights: OwnRights) -> Cap {
        let cap = Cap::mint_ownership(OwnershipGrant::new(tag, ctx, rights), &self.key).unwrap();
        context::add_cap(&self.store, ctx, &cap).unwrap();
        cap
    }

    fn tag(&mut self) -> ObjID {
        self.obj(None, None).unwrap()
    }

    fn decide(&self, ctx: ObjID, obj: ObjID, kind: AccessKind) -> secctx::Simulation {
        let sim = AccessSimulator::load(&self.store, &[ctx], &[obj], NOW).unwrap();
        sim.check(
            &[ctx],
            SimAccess {
                target: obj,
                offset: 0x1000,
                kind,
            },
        )
    }
}

fn secret(t: ObjID) -> Label {
    Label::from_tags(&[t], &[]).unwrap()
}

fn vetted(e: ObjID) -> Label {
    Label::from_tags(&[], &[e]).unwrap()
}

fn run_scenario<S: ObjectStore>(store: S) {
    let mut w = World::new(store);
    let medical = w.tag();
    // A public context may create a {medical} object (a write down needs nothing) ...
    let reader = w.ctx();
    let diagnoses = w.obj(Some(&secret(medical)), Some(reader)).unwrap();
    let public = w.obj(None, Some(reader)).unwrap();
    assert_eq!(
        LabelTable::load(&w.store).unwrap().data_label(diagnoses),
        secret(medical)
    );
    w.grant_rw(reader, diagnoses);
    w.grant_rw(reader, public);

    // ... but not read it, and the rule says which tag.
    let s = w.decide(reader, diagnoses, AccessKind::Read);
    assert!(!s.granted());
    assert_eq!(
        s.flow.unwrap().denial,
        Some(FlowDenial::SecrecyRead { tag: medical })
    );

    // Raising needs medical+: refused, and nothing written.
    let before = w.store.get(LABELS_ID).unwrap();
    let err = labels::relabel(&w.store, reader, &secret(medical), NOW).unwrap_err();
    assert!(matches!(
        err,
        DifcError::Label {
            error: LabelError::NotOwned {
                right: Right::Plus,
                ..
            },
            ..
        }
    ));
    assert_eq!(w.store.get(LABELS_ID).unwrap(), before);

    // With medical+ the context is told to raise first (MustRaise), then raises.
    w.own(reader, medical, OwnRights::PLUS);
    let s = w.decide(reader, diagnoses, AccessKind::Read);
    assert_eq!(
        s.flow.unwrap().denial,
        Some(FlowDenial::MustRaise { tag: medical })
    );
    assert_eq!(
        labels::relabel(&w.store, reader, &secret(medical), NOW).unwrap(),
        1
    );
    assert!(w.decide(reader, diagnoses, AccessKind::Read).granted());

    // Secret read, then public write: refused.
    let s = w.decide(reader, public, AccessKind::Write);
    assert!(!s.granted());
    assert_eq!(
        s.flow.unwrap().denial,
        Some(FlowDenial::SecrecyWrite { tag: medical })
    );

    // A declassifier (medical− by delegation from an owner context) may write it.
    let owner = w.ctx();
    let (ok_ids, owner_key) = keypair::create_keypair(
        &w.store,
        SigningScheme::Ed25519,
        None,
        keypair::KdfParams::DEFAULT,
        &mut w.rng,
    )
    .unwrap();
    // The owner context signs delegations with its own key.
    let owner = {
        let _ = owner;
        let id = w.id();
        context::create(&w.store, id, Some(ok_ids.verifying)).unwrap();
        id
    };
    let root = w.own(owner, medical, OwnRights::PLUS | OwnRights::MINUS);
    let del = Del::from_cap(&root, DelGrant::new(reader, Protections::WRITE), &owner_key).unwrap();
    context::add_del(&w.store, reader, &del).unwrap();
    let s = w.decide(reader, public, AccessKind::Write);
    assert!(s.granted(), "{s:?}");
    let used = &s.flow.as_ref().unwrap().used;
    assert_eq!(used.len(), 1);
    assert_eq!(used[0].right, Right::Minus);
    assert_eq!(used[0].record, del.id());

    // Revoking the declassifier's medical− stops it.
    RevocationList::add(&w.store, |l| l.records.insert(del.id())).unwrap();
    let s = w.decide(reader, public, AccessKind::Write);
    assert!(!s.granted());
    assert!(matches!(
        s.flow.unwrap().denial,
        Some(FlowDenial::Ownership { tag, .. }) if tag == medical
    ));
}

#[test]
fn scenario_in_the_database_store() {
    let dir = tempfile::tempdir().unwrap();
    run_scenario(DbStore::open(dir.path()).unwrap());
}

#[test]
fn scenario_in_memory() {
    run_scenario(MemStore::new());
}

#[test]
fn integrity_creation_needs_plus_and_writes_nothing_when_refused() {
    let mut w = World::new(MemStore::new());
    let vet = w.tag();
    let c = w.ctx();
    let id = w.id();
    let obj = Object {
        id,
        meta: ObjMeta::signed_by(w.kuid),
        data: vec![],
    };
    let err = labels::create_object(&w.store, &obj, Some(&vetted(vet)), Some(c), NOW).unwrap_err();
    assert!(matches!(
        err,
        DifcError::Create { denial: FlowDenial::IntegrityWrite { tag }, .. } if tag == vet
    ));
    assert!(w.store.get(id).is_err(), "the object must not exist");
    // Without a creator: the empty label and no ownership, refused alike.
    assert!(labels::create_object(&w.store, &obj, Some(&vetted(vet)), None, NOW).is_err());
    w.own(c, vet, OwnRights::PLUS);
    labels::create_object(&w.store, &obj, Some(&vetted(vet)), Some(c), NOW).unwrap();
    assert_eq!(
        LabelTable::load(&w.store).unwrap().data_label(id),
        vetted(vet)
    );

    // A write to it by a context at I = ∅ that does not own vet+ is IntegrityWrite.
    let other = w.ctx();
    w.grant_rw(other, id);
    let s = w.decide(other, id, AccessKind::Write);
    assert_eq!(
        s.flow.unwrap().denial,
        Some(FlowDenial::IntegrityWrite { tag: vet })
    );
}

#[test]
fn registration_adopts_the_section_only_with_ownership() {
    let mut w = World::new(MemStore::new());
    let t = w.tag();
    let id = w.id();
    let mut ed = SecCtxEditor::new();
    ed.set_initial_label(secret(t));
    w.store
        .create(&Object {
            id,
            meta: ObjMeta::plain(),
            data: ed.encode().unwrap(),
        })
        .unwrap();
    // Unregistered: the simulator refuses it (LabelUnknown), never decides it as unlabelled.
    let o = w.obj(None, None).unwrap();
    w.grant_rw(id, o);
    let s = w.decide(id, o, AccessKind::Read);
    assert_eq!(s.flow.unwrap().denial, Some(FlowDenial::LabelUnknown));
    // Creating as an unregistered labelled context is refused.
    assert!(matches!(
        w.obj(None, Some(id)),
        Err(DifcError::Unregistered(_))
    ));
    // A registrar without t+ may not register it.
    let r = w.ctx();
    assert!(matches!(
        labels::register(&w.store, id, Some(r), NOW),
        Err(DifcError::Label {
            error: LabelError::NotOwned { .. },
            ..
        })
    ));
    w.own(r, t, OwnRights::PLUS);
    assert_eq!(
        labels::register(&w.store, id, Some(r), NOW).unwrap(),
        secret(t)
    );
    assert!(matches!(
        labels::register(&w.store, id, Some(r), NOW),
        Err(DifcError::AlreadyRegistered(_))
    ));
    // At {t} it may read a public object.
    assert!(w.decide(id, o, AccessKind::Read).granted());
}

#[test]
fn a_damaged_table_is_a_typed_error() {
    let mut w = World::new(MemStore::new());
    let t = w.tag();
    w.obj(Some(&secret(t)), None).unwrap();
    w.store
        .update(LABELS_ID, |o| {
            o.data.push(0);
            Ok::<(), secctx::StoreError>(())
        })
        .unwrap();
    assert!(matches!(
        LabelTable::load(&w.store),
        Err(secctx::StoreError::Corrupt { id, .. }) if id == LABELS_ID
    ));
}

#[test]
fn a_switch_that_would_shed_secrecy_is_refused() {
    let mut w = World::new(MemStore::new());
    let t = w.tag();
    let a = w.ctx();
    let b = w.ctx();
    let public = w.obj(None, None).unwrap();
    // Only the inactive context `b` may write `public`.
    w.grant_rw(b, public);
    w.own(a, t, OwnRights::PLUS);
    let sim = |w: &World<MemStore>| {
        AccessSimulator::load(&w.store, &[a, b], &[public], NOW)
            .unwrap()
            .check(
                &[a, b],
                SimAccess {
                    target: public,
                    offset: 0x1000,
                    kind: AccessKind::Write,
                },
            )
    };
    let s = sim(&w);
    assert!(s.granted(), "an unlabelled switch is today's: {s:?}");
    assert_eq!(s.active_after, b);
    labels::relabel(&w.store, a, &secret(t), NOW).unwrap();
    let s = sim(&w);
    assert!(!s.granted());
    assert_eq!(s.active_after, a, "a refused switch does not happen");
    assert_eq!(
        s.flow.unwrap().denial,
        Some(FlowDenial::Switch { to: b, tag: t })
    );
}

#[test]
fn an_inactive_context_whose_bytes_are_secret_is_not_consulted() {
    let mut w = World::new(MemStore::new());
    let t = w.tag();
    let a = w.ctx();
    // `b`'s own bytes are at {t}: a public thread may not learn whether it grants.
    let b = w.id();
    let obj = context::empty(b, None).unwrap();
    labels::create_object(&w.store, &obj, Some(&secret(t)), None, NOW).unwrap();
    let public = w.obj(None, None).unwrap();
    w.grant_rw(b, public);
    let s = AccessSimulator::load(&w.store, &[a, b], &[public], NOW)
        .unwrap()
        .check(
            &[a, b],
            SimAccess {
                target: public,
                offset: 0x1000,
                kind: AccessKind::Read,
            },
        );
    assert!(!s.granted(), "{s:?}");
    assert_eq!(s.active_after, a);
    let why = s.contexts[1].error.as_deref().unwrap();
    assert!(why.contains("not consulted"), "{why}");
}

/// The table's codec, for any table and any bytes: a table reads back as itself; bytes are
/// refused or read as the one table that encodes to exactly them; a cut encoding is refused.
mod codec {
    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;
    use secctx::labels::{LabelTable, Principal, Row};
    use twizzler_capsec::{Label, ObjID};

    /// Tags from a small pool, so tables share them as real ones do.
    fn tags() -> impl Strategy<Value = Vec<ObjID>> {
        vec(0u128..8, 0..4).prop_map(|t| t.into_iter().map(|n| ObjID::new(0x7a90 + n)).collect())
    }

    fn label() -> impl Strategy<Value = Label> {
        (tags(), tags()).prop_map(|(s, i)| {
            let mut s = s;
            let mut i = i;
            s.sort();
            s.dedup();
            i.sort();
            i.dedup();
            Label::from_tags(&s, &i).expect("at most 4 tags")
        })
    }

    fn table() -> impl Strategy<Value = LabelTable> {
        let row = (label(), proptest::option::of((label(), any::<u64>()))).prop_map(
            |(data, principal)| Row {
                data,
                principal: principal.map(|(label, generation)| Principal { label, generation }),
            },
        );
        btree_map(any::<u128>().prop_map(ObjID::new), row, 0..6)
            .prop_map(|rows| LabelTable { rows })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_table_reads_back_as_itself(t in table()) {
            let bytes = t.encode();
            prop_assert_eq!(LabelTable::decode(&bytes), Ok(t));
            for cut in 0..bytes.len() {
                prop_assert!(LabelTable::decode(&bytes[..cut]).is_err(), "cut at {}", cut);
            }
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(LabelTable::decode(&longer).is_err());
        }

        #[test]
        fn changed_bytes_are_refused_or_canonical(
            t in table(),
            at in any::<prop::sample::Index>(),
            v in any::<u8>(),
        ) {
            let mut bytes = t.encode();
            let i = at.index(bytes.len());
            bytes[i] = v;
            if let Ok(other) = LabelTable::decode(&bytes) {
                prop_assert_eq!(other.encode(), bytes);
            }
        }

        #[test]
        fn any_bytes_are_refused_or_canonical(
            bytes in vec(any::<u8>(), 0..96),
            magic in any::<bool>(),
        ) {
            let mut bytes = bytes;
            if magic && bytes.len() >= 8 {
                // Past the magic and version, where the rows are.
                bytes[..8].copy_from_slice(b"TZLT\x01\x00\x00\x00");
            }
            if let Ok(t) = LabelTable::decode(&bytes) {
                prop_assert_eq!(t.encode(), bytes);
            }
        }
    }
}

/// Asking whether a context owns a right reads, never writes: it is answered from a store
/// opened read-only, and from one opened read-write while another thread holds its write
/// transaction (it began none of its own: no commit, no sync).
#[test]
fn ownership_is_read_without_a_write_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, tag, other) = {
        let mut w = World::new(DbStore::open(dir.path()).unwrap());
        let (tag, other) = (w.tag(), w.tag());
        let ctx = w.ctx();
        w.own(ctx, tag, OwnRights::PLUS);
        (ctx, tag, other)
    };
    let ro = DbStore::open_read_only(dir.path()).unwrap();
    assert_eq!(
        labels::owns(&ro, ctx, tag, Right::Plus, NOW).unwrap(),
        Ok(true)
    );
    assert_eq!(
        labels::owns(&ro, ctx, tag, Right::Minus, NOW).unwrap(),
        Ok(false)
    );
    assert_eq!(
        labels::owns(&ro, ctx, other, Right::Plus, NOW).unwrap(),
        Ok(false)
    );
    drop(ro);
    // Opened read-write: the checks are answered while another thread holds the store's one
    // write transaction (a check that began a write transaction would wait for it).
    let rw = DbStore::open(dir.path()).unwrap();
    let (held_tx, held) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let released = &std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let rw = &rw;
        s.spawn(move || {
            rw.transact(move |_| {
                held_tx.send(()).unwrap();
                // Only a failing check waits this out.
                let _ = release_rx.recv_timeout(std::time::Duration::from_secs(20));
                released.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok::<(), secctx::StoreError>(())
            })
            .unwrap();
        });
        held.recv().unwrap();
        for _ in 0..3 {
            assert_eq!(
                labels::owns(rw, ctx, tag, Right::Plus, NOW).unwrap(),
                Ok(true)
            );
        }
        let waited = released.load(std::sync::atomic::Ordering::SeqCst);
        let _ = release.send(());
        assert!(
            !waited,
            "an ownership check waited for the write transaction"
        );
    });
}
