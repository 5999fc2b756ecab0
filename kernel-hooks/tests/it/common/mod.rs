//! A host kernel for the engine's tests: objects, context bytes, keys, a settable clock and a
//! log of unmaps, all behind locks so a test can change them while the engine runs.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kernel_hooks::{
    CtxBytes, Decision, Engine, Fault, Host, Invalidation, ObjectInfo, SecCtxMgr, Unmap, Violation,
};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use twizzler_capsec::{
    AccessKind, Authority, Cap, CapGrant, KeyLookupError, Label, LabelId, LabelRef, ObjID,
    PrincipalLabels, Protections, RecordId, SecCtxEditor, SigningKey, SigningScheme, VerifyingKey,
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

/// The test kernel. Contexts and keys are reference-counted: `with_ctx` and `with_key` take a
/// reference out of the table's lock and run the engine's closure outside it, as a kernel
/// that maps the object for the duration of the call would. Replacing a context here models a
/// write the kernel did not notice; [`World::write_ctx`] is the write it noticed (it calls
/// `invalidate_ctx`, as the write-protection fault does).
pub struct TestHost {
    objects: Mutex<HashMap<ObjID, ObjectInfo>>,
    contexts: Mutex<HashMap<ObjID, Arc<Vec<u8>>>>,
    keys: Mutex<HashMap<ObjID, Arc<VerifyingKey>>>,
    now: AtomicU64,
    pub unmapped: Mutex<Vec<Unmap>>,
    /// Host calls other than the clock, counted (to show that a hit makes none).
    pub calls: AtomicU64,
    /// Reads of the clock, counted apart (a decision reads it once).
    pub clock_reads: AtomicU64,
    /// The revocation sets, of any size (the engine keeps none).
    revoked_keys: Mutex<HashSet<ObjID>>,
    revoked_records: Mutex<HashSet<RecordId>>,
    /// The interned labels: `LabelId(i + 1)` is `labels[i]` (`LabelId(0)` is the empty one).
    labels: Mutex<Vec<Label>>,
    /// Principal rows; a context without one is at the empty labels, one with `None` is
    /// unregistered.
    ctx_labels: Mutex<HashMap<ObjID, Option<PrincipalLabels<LabelId>>>>,
}

impl Default for TestHost {
    fn default() -> Self {
        Self {
            objects: Mutex::default(),
            contexts: Mutex::default(),
            keys: Mutex::default(),
            now: AtomicU64::new(T0),
            unmapped: Mutex::default(),
            calls: AtomicU64::new(0),
            clock_reads: AtomicU64::new(0),
            revoked_keys: Mutex::default(),
            revoked_records: Mutex::default(),
            labels: Mutex::default(),
            ctx_labels: Mutex::default(),
        }
    }
}

impl TestHost {
    /// Interns `label` (the same label gets the same id).
    pub fn intern(&self, label: Label) -> LabelId {
        if label.is_empty() {
            return LabelId::EMPTY;
        }
        let mut labels = self.labels.lock().unwrap();
        let i = labels.iter().position(|l| *l == label).unwrap_or_else(|| {
            labels.push(label);
            labels.len() - 1
        });
        LabelId(u32::try_from(i + 1).unwrap())
    }

    /// Gives object `id` the data label `label`.
    pub fn set_object_label(&self, id: ObjID, label: Label) {
        let l = self.intern(label);
        let mut objects = self.objects.lock().unwrap();
        let info = objects.entry(id).or_insert(ObjectInfo::new(None, NONE));
        info.label = l;
    }

    /// Sets context `ctx`'s principal row (`None`: unregistered).
    pub fn set_ctx_row(&self, ctx: ObjID, row: Option<PrincipalLabels<Label>>) {
        let row = row.map(|r| PrincipalLabels {
            read: self.intern(r.read),
            write: self.intern(r.write),
        });
        self.ctx_labels.lock().unwrap().insert(ctx, row);
    }

    /// Sets context `ctx`'s principal label (steady: `read` = `write`).
    pub fn set_ctx_label(&self, ctx: ObjID, label: Label) {
        self.set_ctx_row(ctx, Some(PrincipalLabels::steady(label)));
    }
}

impl TestHost {
    pub fn set_object(&self, id: ObjID, kuid: Option<ObjID>, default_prots: Protections) {
        self.objects
            .lock()
            .unwrap()
            .insert(id, ObjectInfo::new(kuid, default_prots));
    }

    /// The object's metadata as a fault handler would find it (an unknown object has none).
    pub fn info(&self, id: ObjID) -> ObjectInfo {
        self.objects
            .lock()
            .unwrap()
            .get(&id)
            .copied()
            .unwrap_or(ObjectInfo::new(None, NONE))
    }

    pub fn set_key(&self, kuid: ObjID, key: &SigningKey) {
        self.keys
            .lock()
            .unwrap()
            .insert(kuid, Arc::new(key.verifying_key()));
    }

    pub fn set_ctx_bytes(&self, ctx: ObjID, bytes: Vec<u8>) {
        self.contexts.lock().unwrap().insert(ctx, Arc::new(bytes));
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

    /// Records key object `kuid` as revoked (what a kernel's revocation call does before it
    /// tells the engine).
    pub fn record_key_revocation(&self, kuid: ObjID) {
        self.revoked_keys.lock().unwrap().insert(kuid);
    }

    /// Records record `id` as revoked.
    pub fn record_record_revocation(&self, id: RecordId) {
        self.revoked_records.lock().unwrap().insert(id);
    }

    pub fn host_calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

impl Host for TestHost {
    fn object(&self, id: ObjID) -> Option<ObjectInfo> {
        self.count();
        self.objects.lock().unwrap().get(&id).copied()
    }

    fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
        self.count();
        let bytes = self.contexts.lock().unwrap().get(&ctx).cloned()?;
        Some(f(CtxBytes::private(&bytes)))
    }

    fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
        self.count();
        let key = self.keys.lock().unwrap().get(&kuid).cloned()?;
        Some(f(&key))
    }

    fn key_revoked(&self, kuid: ObjID) -> bool {
        self.count();
        self.revoked_keys.lock().unwrap().contains(&kuid)
    }

    fn record_revoked(&self, id: &RecordId) -> bool {
        self.count();
        self.revoked_records.lock().unwrap().contains(id)
    }

    fn monotonic_ns(&self) -> u64 {
        self.clock_reads.fetch_add(1, Ordering::SeqCst);
        self.now.load(Ordering::SeqCst)
    }

    fn unmap(&self, what: Unmap) {
        self.count();
        self.unmapped.lock().unwrap().push(what);
    }

    fn ctx_label(&self, ctx: ObjID) -> Option<PrincipalLabels<LabelId>> {
        self.count();
        self.ctx_labels
            .lock()
            .unwrap()
            .get(&ctx)
            .copied()
            .unwrap_or(Some(PrincipalLabels::steady(LabelId::EMPTY)))
    }

    fn with_label<R>(&self, id: LabelId, f: impl FnOnce(LabelRef<'_>) -> R) -> Option<R> {
        self.count();
        if id.is_empty() {
            return Some(f(LabelRef::EMPTY));
        }
        // Copied out of the lock: the engine nests lends.
        let i = usize::try_from(id.0).ok()?.checked_sub(1)?;
        let label = *self.labels.lock().unwrap().get(i)?;
        Some(f(label.as_ref()))
    }
}

/// Inside `impl Host for Wrapper`, implements the methods a wrapper host does not change by
/// delegating them to `self.$inner` (a [`TestHost`]): `object`, `with_key`, `key_revoked`,
/// `record_revoked`, `monotonic_ns`, `ctx_label` and `with_label`. The wrapper writes `with_ctx`
/// and `unmap` itself; with `but_the_clock`, `monotonic_ns` too.
#[macro_export]
macro_rules! delegate_to_test_host {
    ($inner:tt) => {
        delegate_to_test_host!($inner, but_the_clock);
        fn monotonic_ns(&self) -> u64 {
            self.$inner.monotonic_ns()
        }
    };
    ($inner:tt, but_the_clock) => {
        fn object(&self, id: twizzler_capsec::ObjID) -> Option<kernel_hooks::ObjectInfo> {
            self.$inner.object(id)
        }
        fn with_key<R>(
            &self,
            kuid: twizzler_capsec::ObjID,
            f: impl FnOnce(&twizzler_capsec::VerifyingKey) -> R,
        ) -> Option<R> {
            self.$inner.with_key(kuid, f)
        }
        fn key_revoked(&self, kuid: twizzler_capsec::ObjID) -> bool {
            self.$inner.key_revoked(kuid)
        }
        fn record_revoked(&self, id: &twizzler_capsec::RecordId) -> bool {
            self.$inner.record_revoked(id)
        }
        fn ctx_label(
            &self,
            ctx: twizzler_capsec::ObjID,
        ) -> Option<twizzler_capsec::PrincipalLabels<twizzler_capsec::LabelId>> {
            self.$inner.ctx_label(ctx)
        }
        fn with_label<R>(
            &self,
            id: twizzler_capsec::LabelId,
            f: impl FnOnce(twizzler_capsec::LabelRef<'_>) -> R,
        ) -> Option<R> {
            self.$inner.with_label(id, f)
        }
    };
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

    /// Decides a fault as the kernel would, switching the thread when the decision says so.
    pub fn decide(
        &self,
        thread: &SecCtxMgr,
        target: ObjID,
        offset: u64,
        kind: AccessKind,
    ) -> Decision {
        let d = self
            .engine
            .decide(thread, &self.fault(target, offset, kind));
        // What a kernel does with a decision that names another context: switch the thread
        // (and its memory context) to it.
        if let Decision::Map {
            switch_to: Some(ctx),
            ..
        } = d
        {
            assert_ne!(
                thread.switch_context(ctx),
                kernel_hooks::SwitchResult::NotAttached,
                "decide named a context the thread does not have"
            );
        }
        d
    }

    /// The fault a kernel would build: the object's metadata comes from its table.
    pub fn fault(&self, target: ObjID, offset: u64, kind: AccessKind) -> Fault {
        Fault::new(target, self.host().info(target), offset, kind)
    }

    /// Revokes key object `kuid` as a kernel does: records it, then tells the engine.
    pub fn revoke_key(&self, kuid: ObjID) -> Invalidation {
        self.host().record_key_revocation(kuid);
        self.engine.revoke_key(kuid)
    }

    /// Revokes record `id` as a kernel does: records it, then tells the engine.
    pub fn revoke_record(&self, id: RecordId) -> Invalidation {
        self.host().record_record_revocation(id);
        self.engine.revoke_record(id)
    }

    /// Writes context `ctx` as the kernel sees a write: new bytes, then `invalidate_ctx`.
    pub fn write_ctx(&self, ctx: ObjID, editor: &SecCtxEditor) -> Invalidation {
        self.host().set_ctx(ctx, editor);
        self.engine.invalidate_ctx(ctx)
    }

    /// Writes context `ctx` holding `caps`, each target's listed in the order of `caps`
    /// rather than in the editor's gate order, as another writer may list them (the reader
    /// takes any order within a target's run): only the entry table's rows move.
    pub fn write_ctx_as_listed(&self, ctx: ObjID, caps: &[&Cap]) -> Invalidation {
        let bytes = ctx_with(caps).encode().expect("test contexts encode");
        let encoded: Vec<_> = caps.iter().map(|c| c.encode()).collect();
        let bytes = twizzler_capsec::ctx::as_listed(bytes, &encoded).expect("test contexts parse");
        self.host().set_ctx_bytes(ctx, bytes);
        self.engine.invalidate_ctx(ctx)
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

/// The rule's authority over the world's keys (no revocation, no memo).
pub struct Keys<'w>(pub &'w World);

impl Authority for Keys<'_> {
    fn with_key<R>(
        &self,
        obj: ObjID,
        f: impl FnOnce(&VerifyingKey) -> R,
    ) -> Result<R, KeyLookupError> {
        use kernel_hooks::Host;
        let host = self.0.host();
        let kuid = host
            .object(obj)
            .and_then(|o| o.kuid)
            .ok_or(KeyLookupError::NoKuid(obj))?;
        host.with_key(kuid, f)
            .ok_or(KeyLookupError::UnknownKey(obj))
    }
}
