//! From the userspace store to the fault path: key pairs, objects and contexts written by
//! `secctx` into a directory store, read back from the files, decided by `kernel-hooks` in a
//! kernel-like host, by `secctx`'s simulator, and by the rule itself — all three must agree.

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use std::collections::HashMap;
use std::path::PathBuf;

use kernel_hooks::{CtxBytes, Decision, Engine, Fault, Host, ObjectInfo, SecCtxMgr, Unmap};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use secctx::keypair::{self, KdfParams};
use secctx::{AccessSimulator, DbStore, ObjMeta, Object, ObjectStore, SimAccess, context};
use twizzler_capsec::{
    Access, AccessKind, Authority, Cap, CapGrant, CtxFlags, Del, DelGrant, Expiry, Gate,
    KeyLookupError, ObjID, Protections, SecCtx, SigningScheme, VerifyingKey, evaluate,
};

const NOW: u64 = 1_800_000_000_000_000_000;
const FAST: KdfParams = KdfParams {
    memory_kib: 64,
    passes: 1,
    lanes: 1,
};

/// A kernel's view of the store: every object file decoded, keys parsed once.
struct FileKernel {
    objects: HashMap<ObjID, Object>,
    keys: HashMap<ObjID, VerifyingKey>,
}

impl FileKernel {
    fn load(store: &DbStore) -> Self {
        let mut objects = HashMap::new();
        let mut keys = HashMap::new();
        for id in store.list().unwrap() {
            let obj = store.get(id).unwrap();
            if let Ok(k) = keypair::parse_verifying_key(&obj) {
                keys.insert(id, k);
            }
            objects.insert(id, obj);
        }
        Self { objects, keys }
    }
}

impl Host for FileKernel {
    fn object(&self, id: ObjID) -> Option<ObjectInfo> {
        self.objects
            .get(&id)
            .map(|o| ObjectInfo::new(o.meta.kuid, o.meta.default_prots))
    }
    fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
        self.objects
            .get(&ctx)
            .map(|o| f(CtxBytes::private(o.data.as_slice())))
    }
    fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
        self.keys.get(&kuid).map(f)
    }
    // This test revokes nothing.
    fn key_revoked(&self, _kuid: ObjID) -> bool {
        false
    }
    fn record_revoked(&self, _id: &twizzler_capsec::RecordId) -> bool {
        false
    }
    fn monotonic_ns(&self) -> u64 {
        NOW
    }
    fn unmap(&self, _what: Unmap) {}
}

impl Authority for FileKernel {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        let kuid = Host::object(self, obj)
            .and_then(|o| o.kuid)
            .ok_or(KeyLookupError::NoKuid(obj))?;
        self.keys.get(&kuid).ok_or(KeyLookupError::UnknownKey(obj))
    }
}

fn temp_store() -> (PathBuf, DbStore) {
    let dir = std::env::temp_dir().join(format!("twz-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = DbStore::open(&dir).unwrap();
    (dir, store)
}

#[test]
fn store_simulator_engine_and_rule_agree() {
    let (dir, store) = temp_store();
    let mut rng = ChaCha20Rng::seed_from_u64(42);
    let (data_kp, data_key) =
        keypair::create_keypair(&store, SigningScheme::Ed25519, Some("pw"), FAST, &mut rng)
            .unwrap();
    let (code_kp, code_key) =
        keypair::create_keypair(&store, SigningScheme::EcdsaP256, None, FAST, &mut rng).unwrap();
    let (a_kp, a_key) =
        keypair::create_keypair(&store, SigningScheme::Ed25519, None, FAST, &mut rng).unwrap();
    // The stored, sealed signing key is the one that was generated.
    assert_eq!(
        keypair::load_signing_key(&store, data_kp.signing, Some("pw"))
            .unwrap()
            .verifying_key(),
        data_key.verifying_key()
    );

    let (file, lib, public) = (ObjID::new(0xf1), ObjID::new(0xf2), ObjID::new(0xf3));
    for (id, meta) in [
        (file, ObjMeta::signed_by(data_kp.verifying)),
        (lib, ObjMeta::signed_by(code_kp.verifying)),
        (
            public,
            ObjMeta {
                default_prots: Protections::READ,
                ..ObjMeta::plain()
            },
        ),
    ] {
        store
            .create(&Object {
                id,
                meta,
                data: vec![],
            })
            .unwrap();
    }
    let (a, b) = (ObjID::new(0xa0), ObjID::new(0xb0));
    context::create(&store, a, Some(a_kp.verifying)).unwrap();
    context::create(&store, b, None).unwrap();

    // A: read-write on a gate of FILE; code entry into LIB; masks.
    let mut g = CapGrant::new(file, a, Protections::READ | Protections::WRITE);
    g.gate = Gate::new(0x2000, 0x3000, 1).unwrap();
    let file_cap = Cap::mint(g, &data_key).unwrap();
    context::add_cap(&store, a, &file_cap).unwrap();
    let mut g = CapGrant::new(lib, b, Protections::READ | Protections::EXEC);
    g.gate = Gate::new(0x1000, 0x100, 0x40).unwrap();
    context::add_cap(&store, b, &Cap::mint(g, &code_key).unwrap()).unwrap();
    // A delegates read of FILE to B, expiring later.
    let mut dg = DelGrant::new(b, Protections::READ);
    dg.gate = Gate::new(0x2000, 0x1000, 1).unwrap();
    dg.expires = Expiry::from_raw(NOW + 1_000_000);
    context::add_del(&store, b, &Del::from_cap(&file_cap, dg, &a_key).unwrap()).unwrap();
    context::set_mask(&store, a, file, Protections::all(), Protections::empty()).unwrap();
    context::set_global_mask(&store, b, Protections::READ | Protections::EXEC).unwrap();
    context::set_flags(&store, b, CtxFlags::empty()).unwrap();

    let kernel = FileKernel::load(&store);
    let engine = Engine::new(FileKernel::load(&store));
    let sim = AccessSimulator::load(&store, &[a, b], &[file, lib, public], NOW).unwrap();

    let accesses = [
        (file, 0x2000, AccessKind::Read),
        (file, 0x4000, AccessKind::Write),
        (file, 0x5000, AccessKind::Read), // outside the gate
        (file, 0x1000, AccessKind::Write),
        (lib, 0x1040, AccessKind::Exec),
        (lib, 0x1044, AccessKind::Exec),
        (public, 0x1000, AccessKind::Read),
        (public, 0x1000, AccessKind::Write),
    ];
    let mut granted = 0;
    for contexts in [[a, b], [b, a]] {
        for &(target, offset, kind) in &accesses {
            let thread = SecCtxMgr::new(contexts[0]);
            thread.attach(contexts[1]).unwrap();
            let object = Host::object(engine.host(), target).expect("every object is in the store");
            let engine_says = engine.decide(&thread, &Fault::new(target, object, offset, kind));
            let sim_says = sim.check(
                &contexts,
                SimAccess {
                    target,
                    offset,
                    kind,
                },
            );
            assert_eq!(
                engine_says, sim_says.decision,
                "{target} {offset:#x} {kind:?} from {contexts:?}"
            );
            // The rule, context by context (the active one as is, the other as an entry).
            let default = Host::object(&kernel, target).unwrap().default_prots;
            let granting = contexts.iter().enumerate().find_map(|(i, &c)| {
                let bytes = &kernel.objects[&c].data;
                let ctx = SecCtx::parse(bytes).unwrap();
                let acc = Access {
                    kind,
                    offset,
                    entering: false,
                };
                let acc = if i == 0 { acc } else { acc.as_entering() };
                let p = evaluate(c, &ctx, target, default, &kernel, acc, NOW);
                p.grants(kind.required()).then_some((c, p.provide))
            });
            match (engine_says, granting) {
                (
                    Decision::Map {
                        prots, switch_to, ..
                    },
                    Some((c, provide)),
                ) => {
                    granted += 1;
                    assert_eq!(prots, provide);
                    assert_eq!(switch_to, (c != contexts[0]).then_some(c));
                }
                (Decision::Violation(_), None) => {}
                (d, g) => panic!("engine {d:?}, rule {g:?} for {target} {offset:#x} {kind:?}"),
            }
        }
    }
    // Reads in and outside the delegated gate, code entry, default prots: both sides occur.
    assert!(
        (6..16).contains(&granted),
        "{granted} of 16 accesses granted"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
