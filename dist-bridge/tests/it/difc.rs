//! Information flow control across nodes (`docs/DIFC.md` §5.9): the owner applies the local
//! rule, with its store's labels, at export and at every invocation, and releases secret data
//! only to nodes trusted with its tags.

use crate::common::*;
use dist_bridge::difc::{DifcPolicy, FlowRefusal, StoreLabels};
use dist_bridge::*;
use secctx::keypair::{self, KdfParams};
use secctx::labels;
use secctx::revocations::RevocationList;
use secctx::{AccessSimulator, MemStore, ObjMeta, Object, ObjectStore, SimAccess, context};
use twizzler_capsec::{
    AccessKind, Cap, CapGrant, Del, DelGrant, FlowDenial, Label, ObjID, OwnRights, OwnershipGrant,
    Protections, SigningKey, SigningScheme,
};

/// A store with a secrecy tag `medical`, a `{medical}` object `diagnoses`, a public object
/// `notes`, and a context `reader` (unlabelled) holding rw capabilities for both.
struct World<S: ObjectStore = MemStore> {
    store: S,
    key: SigningKey,
    medical: ObjID,
    diagnoses: ObjID,
    notes: ObjID,
    reader: ObjID,
    diagnoses_cap: Cap,
    notes_cap: Cap,
    owner: Owner,
}

fn world() -> World {
    world_in(MemStore::new())
}

fn world_in<S: ObjectStore>(store: S) -> World<S> {
    let mut rng = rng(24);
    let (ids, key) = keypair::create_keypair(
        &store,
        SigningScheme::Ed25519,
        None,
        KdfParams::DEFAULT,
        &mut rng,
    )
    .unwrap();
    let mut new_obj = |label: Option<&Label>| {
        let id = keypair::random_id(&mut rng);
        let obj = Object {
            id,
            meta: ObjMeta::signed_by(ids.verifying),
            data: vec![5; 4096],
        };
        labels::create_object(&store, &obj, label, None, NOW).unwrap();
        id
    };
    let medical = new_obj(None);
    let diagnoses = new_obj(Some(&secret(medical)));
    let notes = new_obj(None);
    let reader = ObjID::new(0x7ead);
    context::create(&store, reader, None).unwrap();
    let rw = Protections::READ | Protections::WRITE;
    let diagnoses_cap = Cap::mint(CapGrant::new(diagnoses, reader, rw), &key).unwrap();
    let notes_cap = Cap::mint(CapGrant::new(notes, reader, rw), &key).unwrap();
    context::add_cap(&store, reader, &diagnoses_cap).unwrap();
    context::add_cap(&store, reader, &notes_cap).unwrap();
    World {
        store,
        key,
        medical,
        diagnoses,
        notes,
        reader,
        diagnoses_cap,
        notes_cap,
        owner: owner(ControllerId::new(NODE, 1), GuardTableConfig::default()),
    }
}

fn secret(t: ObjID) -> Label {
    Label::from_tags(&[t], &[]).unwrap()
}

impl<S: ObjectStore> World<S> {
    fn export(&self, cap: &Cap, rights: Rights) -> Result<GuardedToken, ExportError> {
        let keys = StoreKeys::new(&self.store).unwrap();
        let labels = StoreLabels::new(&self.store).unwrap();
        self.owner.export_labelled(
            cap,
            &keys,
            &labels,
            &ExportRequest::new(self.reader, rights, ByteRange::WHOLE),
            NOW,
        )
    }

    fn invoke(
        &self,
        t: &GuardedToken,
        op: Op,
        policy: &DifcPolicy,
        node: Option<u64>,
    ) -> Result<Grant, InvokeError> {
        let labels = StoreLabels::new(&self.store).unwrap();
        self.owner
            .check_labelled(t, op, 0x100, 16, NOW, &labels, policy, node)
    }

    /// What the local rule (the simulator over the same store) decides.
    fn local(&self, obj: ObjID, kind: AccessKind) -> bool {
        let sim = AccessSimulator::load(&self.store, &[self.reader], &[obj], NOW).unwrap();
        sim.check(
            &[self.reader],
            SimAccess {
                target: obj,
                offset: 0x1000,
                kind,
            },
        )
        .granted()
    }

    fn own(&self, rights: OwnRights) -> Cap {
        let c = Cap::mint_ownership(
            OwnershipGrant::new(self.medical, self.reader, rights),
            &self.key,
        )
        .unwrap();
        context::add_cap(&self.store, self.reader, &c).unwrap();
        c
    }
}

fn trusting(tag: ObjID, node: u64) -> DifcPolicy {
    let mut p = DifcPolicy::default();
    p.trusted_nodes.insert(tag, [node].into());
    p
}

#[test]
fn a_remote_read_is_refused_where_the_local_rule_refuses() {
    let w = world();
    // The public reader may not read the secret: locally, and remotely.
    assert!(!w.local(w.diagnoses, AccessKind::Read));
    let err = w.export(&w.diagnoses_cap, Rights::READ).unwrap_err();
    assert!(
        matches!(
            err,
            ExportError::Flow(FlowRefusal::Rule(FlowDenial::SecrecyRead { tag })) if tag == w.medical
        ),
        "{err:?}"
    );
    // The refusal is the one fixed `denied` for anyone but an operator.
    let public = wire::public_view(&wire::export_status(&err));
    assert_eq!(wire::kind_of(&public), Some(ErrorKind::Denied));

    // Raised to {medical}: it reads locally and remotely (from a trusted node) ...
    w.own(OwnRights::PLUS);
    labels::relabel(&w.store, w.reader, &secret(w.medical), NOW).unwrap();
    assert!(w.local(w.diagnoses, AccessKind::Read));
    let t = w.export(&w.diagnoses_cap, Rights::READ).unwrap();
    let l = t.labels().expect("a labelled token");
    assert_eq!((l.context, l.generation), (w.reader, 1));
    assert_eq!(l.label, secret(w.medical));
    assert!(
        w.invoke(&t, Op::Read, &trusting(w.medical, 2), Some(2))
            .is_ok()
    );

    // ... but may not write the public object: the export keeps only READ.
    assert!(!w.local(w.notes, AccessKind::Write));
    let t = w.export(&w.notes_cap, Rights::DATA).unwrap();
    assert_eq!(t.scope().rights, Rights::READ);
    assert!(matches!(
        w.invoke(&t, Op::Write, &DifcPolicy::default(), Some(2)),
        Err(InvokeError::RightsExceeded { .. })
    ));
}

#[test]
fn a_label_raised_after_export_stops_remote_use_at_the_next_call() {
    let w = world();
    let t = w.export(&w.notes_cap, Rights::DATA).unwrap();
    assert_eq!(t.scope().rights, Rights::DATA);
    let none = DifcPolicy::default();
    assert!(w.invoke(&t, Op::Write, &none, None).is_ok());

    w.own(OwnRights::PLUS);
    labels::relabel(&w.store, w.reader, &secret(w.medical), NOW).unwrap();
    assert_eq!(
        w.invoke(&t, Op::Write, &none, None).unwrap_err(),
        InvokeError::Flow(FlowRefusal::Rule(FlowDenial::SecrecyWrite {
            tag: w.medical
        }))
    );
    // Reads of the public object stay allowed: its data may flow to {medical}.
    assert!(w.invoke(&t, Op::Read, &none, None).is_ok());

    // A declassifier's medical− (delegated from an owner context) lets it write again ...
    let mut rng = rng(5);
    let (boss_ids, boss_key) = keypair::create_keypair(
        &w.store,
        SigningScheme::Ed25519,
        None,
        KdfParams::DEFAULT,
        &mut rng,
    )
    .unwrap();
    let boss = ObjID::new(0xb055);
    context::create(&w.store, boss, Some(boss_ids.verifying)).unwrap();
    let root = Cap::mint_ownership(
        OwnershipGrant::new(w.medical, boss, OwnRights::PLUS | OwnRights::MINUS),
        &w.key,
    )
    .unwrap();
    context::add_cap(&w.store, boss, &root).unwrap();
    let del = Del::from_cap(
        &root,
        DelGrant::new(w.reader, Protections::WRITE),
        &boss_key,
    )
    .unwrap();
    context::add_del(&w.store, w.reader, &del).unwrap();
    assert!(w.invoke(&t, Op::Write, &none, None).is_ok());
    // ... until the record is revoked: the next call is refused, with no broadcast.
    RevocationList::add(&w.store, |l| l.records.insert(del.id())).unwrap();
    assert!(matches!(
        w.invoke(&t, Op::Write, &none, None),
        Err(InvokeError::Flow(FlowRefusal::Rule(
            FlowDenial::Ownership { .. }
        )))
    ));
}

#[test]
fn an_untrusted_node_is_refused_a_secret_read() {
    let w = world();
    w.own(OwnRights::PLUS);
    labels::relabel(&w.store, w.reader, &secret(w.medical), NOW).unwrap();
    let t = w.export(&w.diagnoses_cap, Rights::READ).unwrap();
    // Default: no node is trusted with any tag.
    let err = w
        .invoke(&t, Op::Read, &DifcPolicy::default(), Some(2))
        .unwrap_err();
    assert_eq!(
        err,
        InvokeError::Flow(FlowRefusal::UntrustedNode {
            tag: w.medical,
            node: Some(2)
        })
    );
    let public = wire::public_view(&wire::invoke_status(&err));
    assert_eq!(wire::kind_of(&public), Some(ErrorKind::Denied));
    // Trusted: node 2 only; not node 3, and not a caller that is no node.
    let policy = trusting(w.medical, 2);
    assert!(w.invoke(&t, Op::Read, &policy, Some(2)).is_ok());
    assert!(w.invoke(&t, Op::Read, &policy, Some(3)).is_err());
    assert!(w.invoke(&t, Op::Read, &policy, None).is_err());
}

#[test]
fn a_format_1_token_is_decided_for_its_guards_context() {
    let w = world();
    // Exported as before DIFC (format 1), with a derived guard.
    let keys = StoreKeys::new(&w.store).unwrap();
    let t = w
        .owner
        .export(
            &w.notes_cap,
            &keys,
            &ExportRequest::new(w.reader, Rights::all(), ByteRange::WHOLE),
            NOW,
        )
        .unwrap();
    assert!(t.labels().is_none());
    let child = w
        .owner
        .export_from(&t, t.scope().with_rights(Rights::DATA), NOW)
        .unwrap();
    let none = DifcPolicy::default();
    assert!(w.invoke(&t, Op::Write, &none, None).is_ok());
    assert!(w.invoke(&child, Op::Write, &none, None).is_ok());
    // The context raises: both are refused the write at the next call.
    w.own(OwnRights::PLUS);
    labels::relabel(&w.store, w.reader, &secret(w.medical), NOW).unwrap();
    for tok in [&t, &child] {
        assert_eq!(
            w.invoke(tok, Op::Write, &none, None).unwrap_err(),
            InvokeError::Flow(FlowRefusal::Rule(FlowDenial::SecrecyWrite {
                tag: w.medical
            }))
        );
        assert!(w.invoke(tok, Op::Read, &none, None).is_ok());
    }
}

#[test]
fn a_store_without_labels_exports_version_1_tokens() {
    let f = fixture();
    let store = MemStore::new();
    let labels = StoreLabels::new(&store).unwrap();
    let t = f
        .owner
        .export_labelled(
            &f.cap,
            &f.keys,
            &labels,
            &ExportRequest::new(f.ctx, Rights::READ, ByteRange::WHOLE),
            NOW,
        )
        .unwrap();
    assert!(t.labels().is_none());
    assert_eq!(t.encode()[4..6], [1, 0]);
}

/// The node's label source, a [`LabelCache`] over a kept read snapshot, decides as reading the
/// store anew does, after every change another handle of the store commits between two
/// invocations of the same token: nothing decoded from an earlier snapshot is reused.
#[test]
fn labels_from_a_kept_snapshot_follow_another_handles_commits() {
    use dist_bridge::difc::LabelCache;
    use secctx::DbStore;
    let dir = crate::net::scratch("difc-cache");
    let w = world_in(DbStore::open(&dir).unwrap());
    // The node's own handle and reader; `w.store` is another handle, as `keytool` would be.
    let node = DbStore::open(&dir).unwrap();
    let cache = LabelCache::new(node.snapshot_reader(std::time::Duration::from_secs(3600)));
    let none = DifcPolicy::default();
    let decide = |t: &GuardedToken, op| {
        let cached = cache.labels().unwrap();
        let fresh = StoreLabels::new(&node).unwrap();
        let a = w
            .owner
            .check_labelled(t, op, 0x100, 16, NOW, &cached, &none, None);
        let b = w
            .owner
            .check_labelled(t, op, 0x100, 16, NOW, &fresh, &none, None);
        assert_eq!(a, b, "the cached labels decide as fresh ones");
        a
    };
    let t = w.export(&w.notes_cap, Rights::DATA).unwrap();
    assert!(decide(&t, Op::Write).is_ok());
    assert!(
        decide(&t, Op::Write).is_ok(),
        "again, from the same snapshot"
    );
    // The row-less context's bytes edited to propose a label: it is unregistered now, and its
    // principal (derived from its bytes, and kept per snapshot) cannot be established.
    let propose = |label: Label| {
        context::edit(&w.store, w.reader, |ed| {
            ed.set_initial_label(label);
            Ok(())
        })
        .unwrap()
    };
    propose(secret(w.medical));
    assert_eq!(
        decide(&t, Op::Write),
        Err(InvokeError::Flow(FlowRefusal::Labels))
    );
    propose(Label::EMPTY);
    assert!(decide(&t, Op::Write).is_ok());
    // A label raised: the write down is refused at the next call.
    w.own(OwnRights::PLUS);
    labels::relabel(&w.store, w.reader, &secret(w.medical), NOW).unwrap();
    assert!(matches!(
        decide(&t, Op::Write),
        Err(InvokeError::Flow(FlowRefusal::Rule(
            FlowDenial::SecrecyWrite { .. }
        )))
    ));
    assert!(decide(&t, Op::Read).is_ok());
    // Ownership of medical− added: allowed again; revoked: refused again.
    let minus = w.own(OwnRights::MINUS);
    assert!(decide(&t, Op::Write).is_ok());
    RevocationList::add(&w.store, |l| l.records.insert(minus.id())).unwrap();
    assert!(matches!(
        decide(&t, Op::Write),
        Err(InvokeError::Flow(FlowRefusal::Rule(
            FlowDenial::Ownership { .. }
        )))
    ));
    // A principal label the store cannot establish (the table object damaged): refused, not
    // decided as unlabelled.
    w.store
        .update(labels::LABELS_ID, |o| {
            o.data.truncate(3);
            Ok::<_, secctx::StoreError>(())
        })
        .unwrap();
    assert!(cache.labels().is_err());
    assert!(StoreLabels::new(&node).is_err());
}

mod decoding {
    use super::*;
    use proptest::prelude::*;

    /// A labelled token with one caveat, as bytes.
    fn labelled_bytes() -> Vec<u8> {
        let w = world();
        w.own(OwnRights::PLUS);
        labels::relabel(&w.store, w.reader, &secret(w.medical), NOW).unwrap();
        let t = w.export(&w.diagnoses_cap, Rights::READ).unwrap();
        t.with_range(ByteRange::new(0, 4096).unwrap())
            .unwrap()
            .encode()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Decoding a version-2 token is total and canonical under bit flips and truncation.
        #[test]
        fn bit_flips_and_cuts_never_panic(pos in 0usize..200, bit in 0u8..8, cut in 0usize..200) {
            let good = labelled_bytes();
            let mut b = good.clone();
            if let Some(x) = b.get_mut(pos) {
                *x ^= 1 << bit;
            }
            if let Ok(t) = GuardedToken::decode(&b) {
                prop_assert_eq!(t.encode(), b.clone());
            }
            let c = &good[..cut.min(good.len())];
            if let Ok(t) = GuardedToken::decode(c) {
                prop_assert_eq!(t.encode(), c.to_vec());
            }
        }

        /// Arbitrary bytes after a version-2 header never panic the decoder.
        #[test]
        fn arbitrary_bodies_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut b = b"DBGT\x02\x00\x00\x00".to_vec();
            b.extend_from_slice(&tail);
            if let Ok(t) = GuardedToken::decode(&b) {
                prop_assert_eq!(t.encode(), b);
            }
        }
    }
}

/// A running node decides every invocation with the labels, ownership and revocations of the
/// latest commit, also when another store handle or another process made it (the node may keep
/// what it read between invocations only while no commit intervened).
mod through_a_node {
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};

    use crate::net::{CTX, Net, bounded};
    use dist_bridge::{ClientError, ErrorKind, GuardedToken, Rights, Scope, now_ns};
    use secctx::labels;
    use secctx::revocations::RevocationList;
    use secctx::{DbStore, ObjMeta, Object, ObjectStore, StoreError, context};
    use twizzler_capsec::{Cap, Expiry, Label, ObjID, OwnRights, OwnershipGrant, RecordId};

    /// Set in the child process: the store's directory.
    const CHILD_STORE: &str = "DIST_BRIDGE_TEST_DIFC_CHILD_STORE";
    /// Set in the child process: the change to commit ([`Change::to_arg`]).
    const CHILD_CHANGE: &str = "DIST_BRIDGE_TEST_DIFC_CHILD_CHANGE";

    /// The secrecy tag of the tests.
    const MEDICAL: ObjID = ObjID::new(0x03ed_1ca1);
    /// An object at {MEDICAL}: it makes the store's label table non-empty from the start.
    const DIAGNOSES: ObjID = ObjID::new(0xd1a9);

    fn medical() -> Label {
        Label::from_tags(&[MEDICAL], &[]).expect("a label")
    }

    /// One committed change of the node's store, made outside the node.
    enum Change {
        /// An ownership record added to [`CTX`].
        AddCap(Cap),
        /// [`CTX`]'s principal label changed to {MEDICAL}.
        RaiseToMedical,
        /// A record listed in the store's revocation list.
        Revoke(RecordId),
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    impl Change {
        fn to_arg(&self) -> String {
            match self {
                Self::AddCap(c) => format!("cap:{}", hex(&c.encode())),
                Self::RaiseToMedical => "raise".into(),
                Self::Revoke(r) => format!("revoke:{}", hex(&r.0)),
            }
        }

        fn from_arg(s: &str) -> Change {
            match s.split_once(':') {
                Some(("cap", h)) => Self::AddCap(Cap::decode(&unhex(h)).expect("a capability")),
                Some(("revoke", h)) => {
                    Self::Revoke(RecordId(unhex(h).try_into().expect("32 bytes")))
                }
                _ if s == "raise" => Self::RaiseToMedical,
                _ => panic!("unknown change {s:?}"),
            }
        }

        /// Commits the change through `store`.
        fn commit(&self, store: &DbStore) {
            match self {
                Self::AddCap(c) => {
                    context::add_cap(store, CTX, c).expect("add the record");
                }
                Self::RaiseToMedical => {
                    labels::relabel(store, CTX, &medical(), now_ns()).expect("relabel");
                }
                Self::Revoke(r) => {
                    RevocationList::add(store, |l| l.records.insert(*r)).expect("revoke");
                }
            }
        }
    }

    /// How the tests change the store: through a second handle of their own (as the node's
    /// is another), or from another process.
    #[derive(Clone, Copy)]
    enum Via {
        Handle,
        Process,
    }

    fn commit(via: Via, store: &DbStore, dir: &Path, change: Change) {
        match via {
            Via::Handle => change.commit(store),
            Via::Process => {
                let out = Command::new(std::env::current_exe().expect("current exe"))
                    .args([
                        "--exact",
                        &crate::test_path(module_path!(), "child_store_change"),
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(CHILD_STORE, dir)
                    .env(CHILD_CHANGE, change.to_arg())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .output()
                    .expect("run the changing process");
                assert!(
                    out.status.success(),
                    "the child failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }

    /// The child of [`decisions_follow_changes_made`]: commits one [`Change`] to the store.
    #[test]
    fn child_store_change() {
        let (Some(dir), Ok(change)) = (std::env::var_os(CHILD_STORE), std::env::var(CHILD_CHANGE))
        else {
            return;
        };
        let store = DbStore::open(PathBuf::from(dir)).expect("the child opens the store");
        Change::from_arg(&change).commit(&store);
    }

    /// Makes [`CTX`] a real (empty) context, and adds the tag and a {MEDICAL} object.
    fn label_the_store(store: &DbStore, kuid: ObjID) {
        let ctx = context::empty(CTX, Some(crate::net::CTX_KUID)).expect("a context");
        store
            .update(CTX, |o| {
                o.data = ctx.data;
                Ok::<_, StoreError>(())
            })
            .expect("rewrite the context");
        for (id, label) in [(MEDICAL, None), (DIAGNOSES, Some(medical()))] {
            let obj = Object {
                id,
                meta: ObjMeta::signed_by(kuid),
                data: vec![0; 64],
            };
            labels::create_object(store, &obj, label.as_ref(), None, now_ns()).expect("create");
        }
    }

    fn scope(rights: Rights) -> Scope {
        Scope::new(rights, dist_bridge::ByteRange::WHOLE, Expiry::NEVER)
    }

    #[track_caller]
    fn assert_flow<T: std::fmt::Debug>(r: Result<T, ClientError>) {
        crate::net::assert_refused(r, ErrorKind::Flow, "information flow");
    }

    /// The write of the public object, then its read; both through the node.
    async fn write_then_read(net: &Net, t: &GuardedToken) -> Result<(), ClientError> {
        net.cluster.write(t, 0, b"w").await?;
        net.cluster.read(t, 0, 1).await.map(|_| ())
    }

    /// Each change, committed outside the node between two invocations of the same token (or
    /// two exports), changes the next decision.
    async fn decisions_follow_changes_made(via: Via) {
        let net = Net::start("difc-fresh", 1, |_| {}).await;
        let site = &net.sites[0];
        let dir = site.dir.join("store");
        label_the_store(&site.store, site.kuid);
        let client = net.client(0);
        let key = &crate::net::ctx_key();
        let export = |cap, rights| client.export(cap, CTX, key, scope(rights));

        // The unlabelled context may write the public object, not export the secret one.
        let t = export(&site.cap, Rights::DATA).await.expect("export");
        assert!(t.labels().is_some(), "a labelled (format 2) token");
        write_then_read(&net, &t)
            .await
            .expect("an unlabelled write");
        let secret = Cap::mint(
            twizzler_capsec::CapGrant::new(DIAGNOSES, CTX, twizzler_capsec::Protections::READ),
            &site.key,
        )
        .expect("a capability");
        assert_flow(export(&secret, Rights::READ).await);

        // Raised to {MEDICAL} (with medical+): the write down is refused, the read allowed,
        // and the secret object exports.
        let own = |rights| {
            Cap::mint_ownership(OwnershipGrant::new(MEDICAL, CTX, rights), &site.key)
                .expect("an ownership record")
        };
        commit(via, &site.store, &dir, Change::AddCap(own(OwnRights::PLUS)));
        write_then_read(&net, &t).await.expect("still unlabelled");
        commit(via, &site.store, &dir, Change::RaiseToMedical);
        assert_flow(net.cluster.write(&t, 0, b"w").await);
        net.cluster.read(&t, 0, 1).await.expect("a read up");
        export(&secret, Rights::READ)
            .await
            .expect("the secret exports now");

        // medical− added to the context (a context edit): it may write down again ...
        let minus = own(OwnRights::MINUS);
        let minus_id = minus.id();
        commit(via, &site.store, &dir, Change::AddCap(minus));
        write_then_read(&net, &t)
            .await
            .expect("a declassifier's write");
        // ... until the record is revoked.
        commit(via, &site.store, &dir, Change::Revoke(minus_id));
        assert_flow(net.cluster.write(&t, 0, b"w").await);
        net.cluster.read(&t, 0, 1).await.expect("a read up");
        net.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_by_another_handle_decides_the_next_invocation() {
        bounded(decisions_follow_changes_made(Via::Handle)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_change_by_another_process_decides_the_next_invocation() {
        bounded(decisions_follow_changes_made(Via::Process)).await;
    }
}
