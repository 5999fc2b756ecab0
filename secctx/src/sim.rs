//! [`AccessSimulator`]: the kernel's decision, run in userspace over a store, explained.
//!
//! It loads the contexts of a thread (active first), every object their records name, those
//! objects' key objects and the store's revocation list, then runs `kernel_hooks::Engine` —
//! the same code the kernel runs on a page fault — and explains the outcome with
//! `twizzler_capsec::evaluate_explained`: which records counted, which masks applied, why
//! the rest did not count.
//!
//! DIFC (`docs/DIFC.md` §7.1): the store's label table ([`crate::labels`]) stands in for the
//! kernel's. When capabilities grant, the simulator applies the flow rule
//! (`twizzler_capsec::flow`) under the label of the context that decided, with that context's
//! ownership records, and reports it in [`Simulation::flow`]: the labels compared, the denial if
//! any, and every ownership record the decision used (a declassification or an endorsement).

use std::collections::{BTreeSet, HashMap};

use kernel_hooks::{CtxBytes, Decision, Engine, Fault, Host, ObjectInfo, SecCtxMgr, Unmap};
use twizzler_capsec::{
    Access, AccessKind, Authority, CtxFlags, Expiry, FlowDenial, KeyLookupError, Label, Mask,
    ObjID, Ownership, PermsInfo, PrincipalLabels, Protections, Record, RecordId, RecordKind, Right,
    SecCtx, Verdict, VerifyingKey, check_switch, evaluate_explained, flow,
};

use crate::keypair::parse_verifying_key;
use crate::labels::{LabelTable, principal_of};
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
    /// The flow rule's part, when capabilities granted (`None`: they refused, and the flow was
    /// not evaluated, as in the kernel).
    pub flow: Option<FlowReport>,
}

impl Simulation {
    /// Whether the access is granted: by the capabilities and by the flow rule.
    pub fn granted(&self) -> bool {
        matches!(self.decision, Decision::Map { .. })
            && self.flow.as_ref().is_none_or(|f| f.denial.is_none())
    }

    /// The rights the mapping would carry: the capability decision's, narrowed by the flow
    /// mask; `None` when refused.
    pub fn prots(&self) -> Option<Protections> {
        match self.decision {
            Decision::Map { prots, .. } if self.granted() => Some(match &self.flow {
                Some(f) => prots & f.mask,
                None => prots,
            }),
            _ => None,
        }
    }
}

/// One ownership record a flow decision relied on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnershipUse {
    /// The tag.
    pub tag: ObjID,
    /// The right used.
    pub right: Right,
    /// The record that counted.
    pub record: RecordId,
    /// When it stops counting.
    pub expires: Expiry,
}

/// The flow rule's part of a simulated access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowReport {
    /// The context whose principal label decided (the active one, or the one switched to).
    pub ctx: ObjID,
    /// The thread's active context (differs from `ctx` when the decision switched the thread).
    pub from: ObjID,
    /// Its principal label (`None`: it proposes a label but is not registered).
    pub principal: Option<Label>,
    /// The object's data label.
    pub object: Label,
    /// The flow mask (`R|X` if readable, `W` if writable as far as resolved).
    pub mask: Protections,
    /// Why the access is refused by the rule, if it is.
    pub denial: Option<FlowDenial>,
    /// The ownership records the rule relied on.
    pub used: Vec<OwnershipUse>,
}

/// The simulator's host: what was loaded from the store.
struct StoreHost {
    objects: HashMap<ObjID, ObjectInfo>,
    contexts: HashMap<ObjID, Vec<u8>>,
    keys: HashMap<ObjID, VerifyingKey>,
    /// The store's revocation list: the engine's revocation sets.
    revoked: RevocationList,
    /// The store's label table.
    labels: LabelTable,
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
            labels: LabelTable::default(),
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
        host.labels = LabelTable::load(store)?;
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
                flow: None,
            };
        };
        let thread = SecCtxMgr::new(active);
        let mut skipped = Vec::new();
        for &c in inactive {
            // §3.2 step 5: an inactive context is consulted only if its bytes (its data label)
            // may flow to the active principal; otherwise whether it grants would tell the
            // thread a bit written at a higher label.
            if let Some(tag) = self.unreadable_context(active, c) {
                skipped.push((c, tag));
                continue;
            }
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
            .map(|(i, &c)| {
                let mut r = self.explain(c, i == 0, access);
                if let Some((_, tag)) = skipped.iter().find(|(s, _)| *s == c) {
                    r.error = Some(format!(
                        "not consulted: its bytes carry tag {tag}, which may not flow to the active context (docs/DIFC.md §3.2 step 5)"
                    ));
                }
                r
            })
            .collect();
        let flow = match decision {
            Decision::Map { .. } => Some(self.flow(active, thread.active_id(), access)),
            Decision::Violation(_) => None,
        };
        // A switch the flow rule refuses does not happen.
        let active_after = if flow.as_ref().is_some_and(|f| f.denial.is_some()) {
            active
        } else {
            thread.active_id()
        };
        Simulation {
            decision,
            active_after,
            contexts: reports,
            flow,
        }
    }

    /// The first tag of inactive context `c`'s data label that keeps its bytes from flowing to
    /// `active`'s principal (`S_data ⊆ S_active ∧ I_active ⊆ I_data`), if any. An active context
    /// whose label is unknown consults nothing labelled.
    fn unreadable_context(&self, active: ObjID, c: ObjID) -> Option<ObjID> {
        let host = self.engine.host();
        let data = host.labels.data_label(c);
        if data.is_empty() && host.labels.rows.is_empty() {
            return None;
        }
        let principal = host
            .contexts
            .get(&active)
            .and_then(|b| principal_of(&host.labels, active, b).ok())
            .map(|p| p.label);
        let Some(principal) = principal else {
            return (!data.is_empty()).then(|| {
                data.secrecy
                    .as_slice()
                    .first()
                    .or(data.integrity.as_slice().first())
                    .copied()
                    .unwrap_or_default()
            });
        };
        twizzler_capsec::readable(&principal.as_ref(), &data.as_ref())
            .err()
            .and_then(|d| d.tag())
    }

    /// The flow rule for context `ctx` and `access`, with the table's labels and `ctx`'s
    /// ownership (`docs/DIFC.md` §3.1); when the decision switched the thread from `from` to
    /// `ctx`, the switch is a label change checked as §5.4 says (with `from`'s ownership, and
    /// `ctx`'s too for an entry through a code gate, an exec).
    fn flow(&self, from: ObjID, ctx_id: ObjID, access: SimAccess) -> FlowReport {
        let host = self.engine.host();
        let object = host.labels.data_label(access.target);
        let mut report = FlowReport {
            ctx: ctx_id,
            from,
            principal: None,
            object,
            mask: Protections::empty(),
            denial: Some(FlowDenial::LabelUnknown),
            used: Vec::new(),
        };
        let Some(bytes) = host.contexts.get(&ctx_id) else {
            return report;
        };
        let Ok(principal) = principal_of(&host.labels, ctx_id, bytes) else {
            return report;
        };
        report.principal = Some(principal.label);
        let Ok(ctx) = SecCtx::parse(bytes) else {
            return report;
        };
        let auth = SimAuthority {
            host,
            revoked: &host.revoked,
        };
        let mut own = Recording {
            ctx_id,
            ctx: &ctx,
            auth: &auth,
            now: host.now,
            used: Vec::new(),
        };
        let steady = PrincipalLabels::steady(principal.label);
        let result = flow(
            &steady.as_ref(),
            &object.as_ref(),
            access.kind == AccessKind::Write,
            &mut own,
        );
        report.mask = result.mask;
        report.denial = result.denial;
        if report.denial.is_none() && from != ctx_id {
            let switch = self.switch(from, ctx_id, &steady, access, &mut own);
            if let Err(d) = switch {
                report.mask = Protections::empty();
                report.denial = Some(d);
            }
        }
        report.used = own.used;
        report
    }

    /// §5.4: whether the thread may move from `from` to `to` (at `to_labels`).
    fn switch(
        &self,
        from: ObjID,
        to: ObjID,
        to_labels: &PrincipalLabels<Label>,
        access: SimAccess,
        own_to: &mut Recording<'_>,
    ) -> Result<(), FlowDenial> {
        let host = self.engine.host();
        let bytes = host.contexts.get(&from).ok_or(FlowDenial::LabelUnknown)?;
        let a = principal_of(&host.labels, from, bytes).map_err(|_| FlowDenial::LabelUnknown)?;
        let ctx = SecCtx::parse(bytes).map_err(|_| FlowDenial::LabelUnknown)?;
        let auth = SimAuthority {
            host,
            revoked: &host.revoked,
        };
        let mut own_a = Recording {
            ctx_id: from,
            ctx: &ctx,
            auth: &auth,
            now: host.now,
            used: Vec::new(),
        };
        let a = PrincipalLabels::steady(a.label);
        let r = if access.kind == AccessKind::Exec {
            check_switch(to, &a.as_ref(), &to_labels.as_ref(), &mut own_a, own_to)
        } else {
            check_switch(
                to,
                &a.as_ref(),
                &to_labels.as_ref(),
                &mut own_a,
                &mut twizzler_capsec::NoOwnership,
            )
        };
        own_to.used.extend(own_a.used);
        r
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

/// A context's ownership, remembering which record answered each question that counted.
struct Recording<'a> {
    ctx_id: ObjID,
    ctx: &'a SecCtx<'a>,
    auth: &'a SimAuthority<'a>,
    now: u64,
    used: Vec<OwnershipUse>,
}

impl Ownership for Recording<'_> {
    fn owns(&mut self, tag: ObjID, right: Right) -> Result<bool, Verdict> {
        let by = twizzler_capsec::owns_explained(
            self.ctx_id,
            self.ctx,
            tag,
            right,
            self.auth,
            self.now,
        )?;
        let Some(by) = by else {
            return Ok(false);
        };
        self.used.push(OwnershipUse {
            tag,
            right,
            record: by.id,
            expires: by.expires,
        });
        Ok(true)
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
