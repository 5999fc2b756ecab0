//! A host kernel for the engine's tests: objects, context bytes, keys, a settable clock and a
//! log of unmaps, all behind locks so a test can change them while the engine runs.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use kernel_hooks::{Decision, Engine, Fault, Host, ObjectInfo, SecCtxMgr, Unmap, Violation};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use twizzler_security::{
    AccessKind, Cap, CapGrant, ObjID, Protections, SecCtxEditor, SigningKey, SigningScheme,
    VerifyingKey,
};

pub const R: Protections = Protections::READ;
pub const W: Protections = Protections::WRITE;
pub const X: Protections = Protections::EXEC;
pub const NONE: Protections = Protections::empty();
pub const RW: Protections = R.union(W);
pub const RX: Protections = R.union(X);

/// Start of the test clock: 2026-01-01, in ns since the epoch.
pub const T0: u64 = 1_767_225_600_000_000_000;

/// A deterministic signing key.
pub fn key(scheme: SigningScheme, seed: u64) -> SigningKey {
    SigningKey::generate(scheme, &mut ChaCha20Rng::seed_from_u64(seed))
}

/// The test kernel. Byte buffers and keys are leaked so `Host` can hand out references
/// while tests replace them: every version stays valid, as a kernel mapping would.
pub struct TestHost {
    objects: Mutex<HashMap<ObjID, ObjectInfo>>,
    contexts: Mutex<HashMap<ObjID, &'static [u8]>>,
    keys: Mutex<HashMap<ObjID, &'static VerifyingKey>>,
    now: AtomicU64,
    pub unmapped: Mutex<Vec<Unmap>>,
}

impl Default for TestHost {
    fn default() -> Self {
        Self {
            objects: Mutex::default(),
            contexts: Mutex::default(),
            keys: Mutex::default(),
            now: AtomicU64::new(T0),
            unmapped: Mutex::default(),
        }
    }
}

impl TestHost {
    pub fn set_object(&self, id: ObjID, kuid: Option<ObjID>, default_prots: Protections) {
        self.objects.lock().unwrap().insert(
            id,
            ObjectInfo {
                kuid,
                default_prots,
            },
        );
    }

    pub fn set_key(&self, kuid: ObjID, key: &SigningKey) {
        let vk: &'static VerifyingKey = Box::leak(Box::new(key.verifying_key()));
        self.keys.lock().unwrap().insert(kuid, vk);
    }

    pub fn set_ctx_bytes(&self, ctx: ObjID, bytes: Vec<u8>) {
        let b: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        self.contexts.lock().unwrap().insert(ctx, b);
    }

    pub fn set_ctx(&self, ctx: ObjID, editor: &SecCtxEditor) {
        self.set_ctx_bytes(ctx, editor.encode().expect("test contexts encode"));
    }

    pub fn advance(&self, ns: u64) {
        self.now.fetch_add(ns, Ordering::SeqCst);
    }

    pub fn take_unmapped(&self) -> Vec<Unmap> {
        std::mem::take(&mut *self.unmapped.lock().unwrap())
    }
}

impl Host for TestHost {
    fn object(&self, id: ObjID) -> Option<ObjectInfo> {
        self.objects.lock().unwrap().get(&id).copied()
    }

    fn ctx_bytes(&self, ctx: ObjID) -> Option<&[u8]> {
        self.contexts.lock().unwrap().get(&ctx).copied()
    }

    fn verifying_key(&self, kuid: ObjID) -> Option<&VerifyingKey> {
        self.keys.lock().unwrap().get(&kuid).copied()
    }

    fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn unmap(&self, what: Unmap) {
        self.unmapped.lock().unwrap().push(what);
    }
}

/// A world of one engine: named objects with keys, and contexts.
pub struct World {
    pub engine: Engine<TestHost>,
    pub keys: HashMap<ObjID, SigningKey>,
}

/// Objects of the tests.
pub const FILE: ObjID = ObjID::new(0x1000);
pub const LIB: ObjID = ObjID::new(0x1001);
pub const OTHER: ObjID = ObjID::new(0x1002);
pub const NOKUID: ObjID = ObjID::new(0x1003);
pub const NOKEY: ObjID = ObjID::new(0x1004);
/// Key objects (kuids).
pub const K_FILE: ObjID = ObjID::new(0x9000);
pub const K_LIB: ObjID = ObjID::new(0x9001);
pub const K_OTHER: ObjID = ObjID::new(0x9002);
pub const K_MISSING: ObjID = ObjID::new(0x9fff);
/// Contexts, which also have keys (for delegations they provide).
pub const CTX_A: ObjID = ObjID::new(0x2000);
pub const CTX_B: ObjID = ObjID::new(0x2001);
pub const CTX_C: ObjID = ObjID::new(0x2002);
pub const K_CTX_A: ObjID = ObjID::new(0x9100);
pub const K_CTX_B: ObjID = ObjID::new(0x9101);
pub const K_CTX_C: ObjID = ObjID::new(0x9102);

impl World {
    /// FILE (Ed25519), LIB (P-256), OTHER (Ed25519, its own key), NOKUID (no kuid), NOKEY
    /// (a kuid naming no key), and contexts A, B, C (empty, with Ed25519 keys).
    pub fn new() -> Self {
        let host = TestHost::default();
        let mut keys = HashMap::new();
        let specs = [
            (FILE, K_FILE, SigningScheme::Ed25519, 1),
            (LIB, K_LIB, SigningScheme::EcdsaP256, 2),
            (OTHER, K_OTHER, SigningScheme::Ed25519, 3),
            (CTX_A, K_CTX_A, SigningScheme::Ed25519, 4),
            (CTX_B, K_CTX_B, SigningScheme::Ed25519, 5),
            (CTX_C, K_CTX_C, SigningScheme::Ed25519, 6),
        ];
        for (obj, kuid, scheme, seed) in specs {
            let k = key(scheme, seed);
            host.set_object(obj, Some(kuid), NONE);
            host.set_key(kuid, &k);
            keys.insert(obj, k);
        }
        host.set_object(NOKUID, None, NONE);
        host.set_object(NOKEY, Some(K_MISSING), NONE);
        for c in [CTX_A, CTX_B, CTX_C] {
            host.set_ctx(c, &SecCtxEditor::new());
        }
        Self {
            engine: Engine::new(host),
            keys,
        }
    }

    pub fn host(&self) -> &TestHost {
        self.engine.host()
    }

    pub fn key(&self, obj: ObjID) -> &SigningKey {
        &self.keys[&obj]
    }

    /// A capability for `target` to `ctx`, signed with `target`'s key.
    pub fn cap(&self, target: ObjID, ctx: ObjID, prots: Protections) -> Cap {
        self.cap_with(CapGrant::new(target, ctx, prots))
    }

    pub fn cap_with(&self, grant: CapGrant) -> Cap {
        Cap::mint(grant, self.key(grant.target)).expect("mint")
    }

    pub fn decide(
        &self,
        thread: &SecCtxMgr,
        target: ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Decision {
        self.engine.decide(
            thread,
            &Fault {
                target,
                offset,
                kind,
            },
        )
    }
}

/// The protections a decision maps, or `None` for a violation.
pub fn mapped(d: &Decision) -> Option<Protections> {
    match d {
        Decision::Map { prots, .. } => Some(*prots),
        Decision::Violation(_) => None,
    }
}

/// The violation of a decision.
pub fn violation(d: Decision) -> Violation {
    match d {
        Decision::Violation(v) => v,
        other => panic!("expected a violation, got {other:?}"),
    }
}

/// Whether `d` grants an access of `kind`.
pub fn grants(d: &Decision, kind: AccessKind) -> bool {
    mapped(d).is_some_and(|p| p.contains(kind.required()))
}

/// An editor holding `caps`.
pub fn ctx_with(caps: &[&Cap]) -> SecCtxEditor {
    let mut e = SecCtxEditor::new();
    for c in caps {
        e.add_cap(c);
    }
    e
}

impl TestHost {
    /// A copy of the current bytes of context `ctx`.
    pub fn ctx_bytes_of(&self, ctx: ObjID) -> Vec<u8> {
        self.contexts
            .lock()
            .unwrap()
            .get(&ctx)
            .map(|b| b.to_vec())
            .unwrap_or_default()
    }
}
