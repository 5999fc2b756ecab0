//! [`AccessSimulator`]: the kernel's decision, run in userspace over a store, explained.
//!
//! It loads the contexts of a thread (active first), every object their records name, those
//! objects' key objects and the store's revocation list, then runs `kernel_hooks::Engine` —
//! the same code the kernel runs on a page fault — and explains the outcome with
//! `twizzler_capsec::evaluate_explained`: which records counted, which masks applied, why
//! the rest did not count.

use std::collections::{BTreeSet, HashMap};

use kernel_hooks::{CtxBytes, Decision, Engine, Fault, Host, ObjectInfo, SecCtxMgr, Unmap};
use twizzler_capsec::{
    Access, AccessKind, Authority, CtxFlags, KeyLookupError, Mask, ObjID, PermsInfo, Protections,
    Record, RecordId, RecordKind, SecCtx, Verdict, VerifyingKey, evaluate_explained,
};

use crate::keypair::parse_verifying_key;
use crate::revocations::RevocationList;
use crate::store::{ObjectStore, StoreError};

/// An access to simulate: a load, store or instruction fetch at a byte offset of an object
/// (for a fetch, the instruction's offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimAccess {
    /// The object.
    pub target: ObjID,
    /// The byte offset.
    pub offset: u64,
    /// The kind of access.
    pub kind: AccessKind,
}

/// One record of a context, as the rule judged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordLine {
    /// Its index in the context's entry table.
    pub index: usize,
    /// Its kind, if it decoded.
    pub kind: Option<RecordKind>,
    /// The rights it grants, if it decoded.
    pub prots: Option<Protections>,
    /// Its id, if it decoded.
    pub id: Option<RecordId>,
    /// The verdict.
    pub verdict: Verdict,
}

/// One context's part in a simulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextReport {
    /// The context.
    pub ctx: ObjID,
    /// Whether it was the thread's active context when the access began.
    pub active: bool,
    /// Why it could not be read, if it could not.
    pub error: Option<String>,
    /// Its flags.
    pub flags: CtxFlags,
    /// Its global mask.
    pub global_mask: Protections,
    /// Its mask for the object, if any.
    pub mask: Option<Mask>,
    /// What it provides for the access (for an inactive context, as an entry).
    pub perms: Option<PermsInfo>,
    /// Its records for the object.
    pub records: Vec<RecordLine>,
}

/// The outcome of a simulated access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Simulation {
    /// What the kernel would do.
    pub decision: Decision,
    /// The thread's active context afterwards (the decision may switch it).
    pub active_after: ObjID,
    /// Every context of the thread, in the order tried.
    pub contexts: Vec<ContextReport>,
}

impl Simulation {
    /// Whether the access is granted.
    pub fn granted(&self) -> bool {
        matches!(self.decision, Decision::Map { .. })
    }
}

/// The simulator's host: what was loaded from the store.
struct StoreHost {
    objects: HashMap<ObjID, ObjectInfo>,
    contexts: HashMap<ObjID, Vec<u8>>,
    keys: HashMap<ObjID, VerifyingKey>,
    /// The store's revocation list: the engine's revocation sets.
    revoked: RevocationList,
    now: u64,
}

impl Host for StoreHost {
    fn object(&self, id: ObjID) -> Option<ObjectInfo> {
        self.objects.get(&id).copied()
    }
    fn with_ctx<R>(&self, ctx: ObjID, f: impl FnOnce(CtxBytes<'_>) -> R) -> Option<R> {
        // Bytes loaded from the store into the simulator's own memory: no one else writes them.
        self.contexts
            .get(&ctx)
            .map(|b| f(CtxBytes::private(b.as_slice())))
    }
    fn with_key<R>(&self, kuid: ObjID, f: impl FnOnce(&VerifyingKey) -> R) -> Option<R> {
        self.keys.get(&kuid).map(f)
    }
    fn key_revoked(&self, kuid: ObjID) -> bool {
        self.revoked.keys.contains(&kuid)
    }
    fn record_revoked(&self, id: &RecordId) -> bool {
        self.revoked.records.contains(id)
    }
    /// The simulation's clock is the Unix time it was asked about (the offset stays 0).
    fn monotonic_ns(&self) -> u64 {
        self.now
    }
    fn unmap(&self, _what: Unmap) {}
}

/// The rule's authority over the loaded keys and the revocation list, for explanations.
struct SimAuthority<'a> {
    host: &'a StoreHost,
    revoked: &'a RevocationList,
}

impl Authority for SimAuthority<'_> {
    fn key_for(&self, obj: ObjID) -> Result<&VerifyingKey, KeyLookupError> {
        let kuid = self
            .host
            .object(obj)
            .and_then(|o| o.kuid)
            .ok_or(KeyLookupError::NoKuid(obj))?;
        if self.revoked.keys.contains(&kuid) {
            return Err(KeyLookupError::KeyRevoked(obj));
        }
        self.host
            .keys
            .get(&kuid)
            .ok_or(KeyLookupError::UnknownKey(obj))
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.revoked.records.contains(id)
    }
}

/// Why the simulator could not load what it needs.
pub type SimError = StoreError;

/// Runs the kernel's decision over a store.
pub struct AccessSimulator {
    engine: Box<Engine<StoreHost>>,
    /// Objects that could not be loaded (corrupt, or not what they should be): they count as
    /// absent, and the decisions say so.
    pub warnings: Vec<String>,
}

impl AccessSimulator {
    /// Loads `contexts`, `objects`, every object the contexts' records name (targets and
    /// delegation providers), their key objects, and the revocation list, at time `now`
    /// (ns since the Unix epoch). Missing objects are simply absent; corrupt ones are absent
    /// with a warning; a store failure is an error.
    pub fn load<S: ObjectStore>(
        store: &S,
        contexts: &[ObjID],
        objects: &[ObjID],
        now: u64,
    ) -> Result<Self, SimError> {
        let mut host = StoreHost {
            objects: HashMap::new(),
            contexts: HashMap::new(),
            keys: HashMap::new(),
            revoked: RevocationList::default(),
            now,
        };
        let mut warnings = Vec::new();
        let mut wanted: BTreeSet<ObjID> = objects.iter().copied().collect();
        wanted.extend(contexts.iter().copied());

        for &c in contexts {
            let Some(obj) = get_lenient(store, c, &mut warnings)? else {
                continue;
            };
            if let Ok(ctx) = SecCtx::parse(&obj.data) {
                for e in ctx.entries() {
                    wanted.insert(e.target);
                    if let Ok(Record::Del(d)) = e.record() {
                        wanted.extend(d.links().map(|l| l.provider()));
                    }
                }
            }
            host.contexts.insert(c, obj.data);
        }
        for id in wanted {
            let Some(obj) = get_lenient(store, id, &mut warnings)? else {
                continue;
            };
            host.objects
                .insert(id, ObjectInfo::new(obj.meta.kuid, obj.meta.default_prots));
            let Some(kuid) = obj.meta.kuid else { continue };
            if host.keys.contains_key(&kuid) {
                continue;
            }
            if let Some(kobj) = get_lenient(store, kuid, &mut warnings)? {
                match parse_verifying_key(&kobj) {
                    Ok(k) => {
                        host.keys.insert(kuid, k);
                    }
                    Err(e) => warnings.push(e.to_string()),
                }
            }
        }
        // The engine consults the store's revocation list itself (it is the host's set, of any
        // size), so its decisions and the explanations below agree on every revocation.
        host.revoked = RevocationList::load(store)?;
        let engine = Box::new(Engine::new(host));
        Ok(Self { engine, warnings })
    }

    /// Simulates `access` by a thread whose contexts are `contexts`, the first one active.
    ///
    /// # Example
    ///
    /// A context holding a read-only capability may read the object's second page but not
    /// write it, and the report says which record counted:
    ///
    /// ```
    /// # use rand_core::SeedableRng;
    /// use secctx::{AccessSimulator, DbStore, ObjMeta, Object, ObjectStore, SimAccess};
    /// use secctx::{context, keypair};
    /// use twizzler_capsec::{AccessKind, Cap, CapGrant, Protections, SigningScheme};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1); // the OS RNG in real use
    /// # let dir = tempfile::tempdir()?;
    /// let store = DbStore::open(dir.path())?;
    /// let kdf = keypair::KdfParams::DEFAULT;
    /// let (ids, key) = keypair::create_keypair(&store, SigningScheme::Ed25519, None, kdf, &mut rng)?;
    /// let (doc, ctx) = (keypair::random_id(&mut rng), keypair::random_id(&mut rng));
    /// let meta = ObjMeta::signed_by(ids.verifying);
    /// store.create(&Object { id: doc, meta, data: vec![7; 8192] })?;
    /// context::create(&store, ctx, None)?;
    /// context::add_cap(&store, ctx, &Cap::mint(CapGrant::new(doc, ctx, Protections::READ), &key)?)?;
    ///
    /// let now = 1; // ns since the Unix epoch
    /// let sim = AccessSimulator::load(&store, &[ctx], &[doc], now)?;
    /// let at = |kind| SimAccess { target: doc, offset: 0x1000, kind };
    ///
    /// let read = sim.check(&[ctx], at(AccessKind::Read));
    /// assert!(read.granted());
    /// assert_eq!(read.contexts[0].records.len(), 1);
    /// assert!(!sim.check(&[ctx], at(AccessKind::Write)).granted());
    /// # Ok(())
    /// # }
    /// ```
    pub fn check(&self, contexts: &[ObjID], access: SimAccess) -> Simulation {
        let Some((&active, inactive)) = contexts.split_first() else {
            return Simulation {
                decision: Decision::Violation(kernel_hooks::Violation::ContextMissing(ObjID::new(
                    0,
                ))),
                active_after: ObjID::new(0),
                contexts: Vec::new(),
            };
        };
        let thread = SecCtxMgr::new(active);
        for &c in inactive {
            // A context listed twice, or more than a thread can hold, is simply not attached
            // again; the report still lists it.
            let _ = thread.attach(c);
        }
        // The simulator stands in for the fault handler, which holds the object: its metadata
        // comes from the store (an object the store lacks has no kuid and no default rights).
        let object = self
            .engine
            .host()
            .object(access.target)
            .unwrap_or(ObjectInfo::new(None, Protections::empty()));
        let decision = self.engine.decide(
            &thread,
            &Fault::new(access.target, object, access.offset, access.kind),
        );
        // As the kernel does: a decision made by an inactive context switches the thread.
        if let Decision::Map {
            switch_to: Some(ctx),
            ..
        } = decision
        {
            // The engine names only contexts the thread has attached: it switches.
            let _ = thread.switch_context(ctx);
        }
        let reports = contexts
            .iter()
            .enumerate()
            .map(|(i, &c)| self.explain(c, i == 0, access))
            .collect();
        Simulation {
            decision,
            active_after: thread.active_id(),
            contexts: reports,
        }
    }

    fn explain(&self, ctx_id: ObjID, active: bool, access: SimAccess) -> ContextReport {
        let host = self.engine.host();
        let mut report = ContextReport {
            ctx: ctx_id,
            active,
            error: None,
            flags: CtxFlags::empty(),
            global_mask: Protections::empty(),
            mask: None,
            perms: None,
            records: Vec::new(),
        };
        let Some(bytes) = host.contexts.get(&ctx_id) else {
            report.error = Some("no such context in the store".into());
            return report;
        };
        let ctx = match SecCtx::parse(bytes) {
            Ok(c) => c,
            Err(e) => {
                report.error = Some(format!("malformed: {e}"));
                return report;
            }
        };
        report.flags = ctx.flags();
        report.global_mask = ctx.global_mask();
        report.mask = ctx.mask(access.target);
        let a = Access {
            kind: access.kind,
            offset: access.offset,
            entering: false,
        };
        let a = if active { a } else { a.as_entering() };
        let default = host
            .object(access.target)
            .map(|o| o.default_prots)
            .unwrap_or(Protections::empty());
        let auth = SimAuthority {
            host,
            revoked: &host.revoked,
        };
        let mut lines = Vec::new();
        let perms = evaluate_explained(
            ctx_id,
            &ctx,
            access.target,
            default,
            &auth,
            a,
            host.now,
            |r| {
                lines.push(RecordLine {
                    index: r.index,
                    kind: r.record.map(Record::kind),
                    prots: r.record.map(Record::prots),
                    id: r.record.map(Record::id),
                    verdict: r.verdict,
                })
            },
        );
        report.perms = Some(perms);
        report.records = lines;
        report
    }
}

fn get_lenient<S: ObjectStore>(
    store: &S,
    id: ObjID,
    warnings: &mut Vec<String>,
) -> Result<Option<crate::store::Object>, StoreError> {
    match store.get(id) {
        Ok(o) => Ok(Some(o)),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e @ StoreError::Corrupt { .. }) => {
            warnings.push(e.to_string());
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
