//! Information flow control (`docs/DIFC.md` §7.1): `tag create|grant|delegate`, labels on
//! `obj new` and `ctx new`, `ctx relabel`, `label show`, and the flow part of `check`'s
//! explanation.

use std::fmt::Write as _;

use secctx::labels::{self, DifcError, LabelTable};
use secctx::sim::FlowReport;
use secctx::{DbStore, ObjMeta, Object, ObjectStore, StoreError, context, keypair};
use serde_json::{Value, json};
use twizzler_capsec::{
    ALL_CONTEXTS, Cap, Del, DelGrant, Expiry, FlowDenial, Label, LabelError, MAX_LABEL_TAGS, ObjID,
    OwnRights, OwnershipGrant, Record, Right, SecCtx, Verdict,
};

use crate::cli::{LabelArgs, PassArgs, RightsArg};
use crate::cmd::{ctx as ctx_cmd, warn};
use crate::env;
use crate::error::{Error, Result, Status};
use crate::fail;
use crate::files;
use crate::output::{Out, expiry_json, id};
use crate::parse::{IdRef, fmt_expiry, now_ns};

/// The bytes of a tag object: magic `TZTG`, version 1, then 0 (secrecy) or 1 (integrity).
const TAG_MAGIC: &[u8; 4] = b"TZTG";

fn tag_bytes(integrity: bool) -> Vec<u8> {
    let mut v = TAG_MAGIC.to_vec();
    v.extend_from_slice(&1u16.to_le_bytes());
    v.push(u8::from(integrity));
    v
}

/// The intended use a tag object records: `Some(true)` for integrity, `None` for an object
/// that `tag create` did not make.
pub(crate) fn tag_use(obj: &Object) -> Option<bool> {
    match obj.data.as_slice() {
        [m0, m1, m2, m3, 1, 0, k @ (0 | 1)] if [*m0, *m1, *m2, *m3] == *TAG_MAGIC => Some(*k == 1),
        _ => None,
    }
}

/// Tags named `'NAME' (ID)`, or by id alone.
pub(crate) struct Names(Vec<(String, ObjID)>);

impl Names {
    pub(crate) fn load(store: &DbStore) -> Self {
        Self(store.names().unwrap_or_default())
    }

    /// `'name'`, or the id.
    pub(crate) fn short(&self, o: ObjID) -> String {
        match self.0.iter().find(|(_, i)| *i == o) {
            Some((n, _)) => format!("'{n}'"),
            None => o.to_string(),
        }
    }

    /// The bare name for a command line, or the id.
    pub(crate) fn arg(&self, o: ObjID) -> String {
        match self.0.iter().find(|(_, i)| *i == o) {
            Some((n, _)) => n.clone(),
            None => o.to_string(),
        }
    }

    /// `'name' (id)`.
    pub(crate) fn long(&self, o: ObjID) -> String {
        match self.0.iter().find(|(_, i)| *i == o) {
            Some((n, _)) => format!("'{n}' ({o})"),
            None => o.to_string(),
        }
    }

    fn tags(&self, tags: &[ObjID]) -> String {
        tags.iter()
            .map(|t| self.arg(*t))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A label as text: `secrecy {a, b} integrity {}`.
    pub(crate) fn label(&self, l: &Label) -> String {
        let set = |t: &[ObjID]| {
            t.iter()
                .map(|t| self.short(*t))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "secrecy {{{}}} integrity {{{}}}",
            set(l.secrecy.as_slice()),
            set(l.integrity.as_slice())
        )
    }
}

/// A label as JSON.
pub(crate) fn label_json(l: &Label) -> Value {
    json!({
        "secrecy": l.secrecy.as_slice().iter().map(|t| id(*t)).collect::<Vec<_>>(),
        "integrity": l.integrity.as_slice().iter().map(|t| id(*t)).collect::<Vec<_>>(),
    })
}

/// Resolves one tag: it must be an object of the store.
fn resolve_tag(store: &DbStore, r: &IdRef) -> Result<ObjID> {
    let t = match r {
        IdRef::Id(t) => *t,
        IdRef::Name(n) => store.name(n)?.ok_or_else(|| {
            fail!(
                "unknown tag {n:?}: no object has that name {} (`keytool tag create {n} --key KEY` makes one)",
                env::in_store(store)
            )
        })?,
    };
    if t == ALL_CONTEXTS {
        return Err(fail!(
            "malformed label: {t} is ALL_CONTEXTS, reserved, and never a tag"
        ));
    }
    match store.info(t) {
        Ok(_) => Ok(t),
        Err(StoreError::NotFound(_)) => Err(fail!(
            "unknown tag {t}: no such object {}",
            env::in_store(store)
        )),
        Err(e) => Err(e.into()),
    }
}

/// The label the arguments name.
pub(crate) fn resolve_label(store: &DbStore, a: &LabelArgs) -> Result<Label> {
    let half = |refs: &[IdRef], what: &str| -> Result<Vec<ObjID>> {
        if refs.len() > MAX_LABEL_TAGS {
            return Err(fail!(
                "malformed label: {} {what} tags, at most {MAX_LABEL_TAGS}",
                refs.len()
            ));
        }
        refs.iter().map(|r| resolve_tag(store, r)).collect()
    };
    let s = half(&a.secrecy, "secrecy")?;
    let i = half(&a.integrity, "integrity")?;
    let names = Names::load(store);
    for (tags, want_integrity) in [(&s, false), (&i, true)] {
        for t in tags.iter() {
            if let Ok(o) = store.get(*t)
                && let Some(integrity) = tag_use(&o)
                && integrity != want_integrity
            {
                warn(format!(
                    "tag {} was created for {} labels",
                    names.short(*t),
                    if integrity { "integrity" } else { "secrecy" }
                ));
            }
        }
    }
    Label::from_tags(&s, &i).map_err(|e| fail!("malformed label: {e}"))
}

/// A [`DifcError`] in words, with tag and context names.
pub(crate) fn difc_error(store: &DbStore, e: DifcError) -> Error {
    let n = Names::load(store);
    match e {
        DifcError::Create { creator, denial } => fail!(
            "context {} may not create an object at that label: {}",
            n.long(creator),
            denial_words(&n, &denial)
        ),
        DifcError::Label { ctx, error } => {
            let c = n.short(ctx);
            match error {
                LabelError::NotOwned { tag, right } => fail!(
                    "context {c} does not own {}{right}: {} (keytool tag grant {} --to {} --rights {})",
                    n.arg(tag),
                    match right {
                        Right::Plus => "adding the tag needs it",
                        Right::Minus => "dropping the tag needs it",
                    },
                    n.arg(tag),
                    n.arg(ctx),
                    match right {
                        Right::Plus => "+",
                        Right::Minus => "-",
                    }
                ),
                LabelError::Ownership { tag, right, why } => fail!(
                    "context {c}: its ownership record for {}{right} did not count: {}",
                    n.arg(tag),
                    verdict_words(&why)
                ),
                LabelError::ContextUnreadable { tag } => fail!(
                    "context {c}: its own bytes carry {} and would no longer flow to it",
                    n.short(tag)
                ),
                LabelError::RegistrarUnreadable { tag } => fail!(
                    "context {c}: its bytes carry {}, which the registering context does not",
                    n.short(tag)
                ),
                other => fail!("context {c}: {other}"),
            }
        }
        DifcError::Unregistered(c) => fail!(
            "context {} proposes a label but is not registered",
            n.long(c)
        ),
        DifcError::Store(e) => e.into(),
        other => fail!("{other}"),
    }
}

fn verdict_words(v: &Verdict) -> String {
    match v {
        Verdict::Invalid(e) => e.to_string(),
        other => format!("{other:?}"),
    }
}

/// One line saying why, for a creation refusal.
fn denial_words(n: &Names, d: &FlowDenial) -> String {
    match *d {
        FlowDenial::SecrecyWrite { tag } => format!(
            "it carries secrecy tag {} and does not own {}−",
            n.short(tag),
            n.arg(tag)
        ),
        FlowDenial::IntegrityWrite { tag } => format!(
            "the label carries integrity tag {}, the context does not, and does not own {}+",
            n.short(tag),
            n.arg(tag)
        ),
        FlowDenial::Ownership { tag, why } => format!(
            "its ownership record for {} did not count: {}",
            n.short(tag),
            verdict_words(&why)
        ),
        other => other.to_string(),
    }
}

/// `keytool tag create`.
pub(crate) fn tag_create(
    store: &DbStore,
    out: Out,
    name: &str,
    kuid: ObjID,
    integrity: bool,
    tid: Option<ObjID>,
) -> Result<Status> {
    crate::cmd::obj::check_kuid(store, kuid)?;
    let tid = match tid {
        Some(t) => t,
        None => keypair::random_id(&mut env::rng()?),
    };
    crate::cmd::obj::create_named(
        store,
        &Object {
            id: tid,
            meta: ObjMeta::signed_by(kuid),
            data: tag_bytes(integrity),
        },
        Some(name),
    )?;
    let kind = if integrity { "integrity" } else { "secrecy" };
    out.emit(
        json!({ "id": id(tid), "name": name, "kuid": id(kuid), "use": kind }),
        || format!("tag {tid}  {name}\n  use   {kind}\n  kuid  {kuid} (its signing key mints ownership)"),
    );
    Ok(Status::Yes)
}

/// The signing key in the store whose verifying key is `kuid`.
fn signing_key_of(store: &DbStore, kuid: ObjID) -> Result<ObjID> {
    for oid in store.list()? {
        if let Ok(o) = store.get(oid)
            && o.data.get(..4) == Some(b"TZSK")
            && let Ok(info) = keypair::signing_key_info(&o)
            && info.verifying == kuid
        {
            return Ok(oid);
        }
    }
    Err(fail!(
        "no signing key for verifying key {kuid} {}: pass --key",
        env::in_store(store)
    ))
}

/// `keytool tag grant`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tag_grant(
    store: &DbStore,
    out: Out,
    tag: ObjID,
    to: Option<ObjID>,
    rights: RightsArg,
    expires: Option<Expiry>,
    public: bool,
    file: Option<&std::path::Path>,
    force: bool,
    key: Option<ObjID>,
    pass: &PassArgs,
) -> Result<Status> {
    if let Some(f) = file {
        files::refuse_existing(f, force)?;
    }
    if to == Some(ALL_CONTEXTS) {
        return Err(fail!(
            "--to names ALL_CONTEXTS, which is not a context: use --public to mint a record for every context"
        ));
    }
    let tag_obj = crate::cmd::obj::get(store, tag, "tag")?;
    let kuid = tag_obj
        .meta
        .kuid
        .ok_or_else(|| fail!("tag {tag} has no kuid: no key can mint its ownership"))?;
    let key = match key {
        Some(k) => k,
        None => signing_key_of(store, kuid)?,
    };
    let (sk, vk) = env::signing_key(store, key, pass)?;
    if vk != kuid {
        return Err(fail!(
            "key {key} does not sign for tag {tag}: the tag's kuid is {kuid}, the key's is {vk}"
        ));
    }
    if let Some(c) = to {
        ctx_cmd::check_exists(store, c)?;
    }
    let holder = match (public, to) {
        (true, _) => ALL_CONTEXTS,
        (false, Some(c)) => c,
        (false, None) => return Err(fail!("--to CTX or --public is needed")),
    };
    let mut g = OwnershipGrant::new(tag, holder, rights.0);
    g.expires = expires.unwrap_or(Expiry::NEVER);
    if g.expires.is_expired(now_ns()) {
        warn("the record has already expired");
    }
    let cap = Cap::mint_ownership(g, &sk).map_err(|e| fail!("cannot sign: {e}"))?;
    let record = Record::Cap(cap);
    if let Some(f) = file {
        files::write_new(f, &files::encode_record(&record), files::PUBLIC, force)?;
    }
    if let Some(c) = to {
        ctx_cmd::add_record(store, c, &record)?;
    }
    let n = Names::load(store);
    let r = rights_text(rights.0);
    out.emit(
        json!({
            "tag": id(tag),
            "rights": r,
            "holder": id(holder),
            "public": public,
            "added_to": to.map(id),
            "record": cap.id().to_string(),
            "expires": expiry_json(g.expires),
            "out": file,
        }),
        || {
            let who = if public {
                "every context (public)".to_string()
            } else {
                n.short(holder)
            };
            let mut s = format!(
                "minted {}{r} for {who}: record {}, expires {}",
                n.arg(tag),
                cap.id(),
                fmt_expiry(g.expires)
            );
            if let (true, Some(c)) = (public, to) {
                let _ = write!(s, "\n  copied into {}", n.short(c));
            }
            s
        },
    );
    Ok(Status::Yes)
}

fn rights_text(r: OwnRights) -> String {
    let mut s = String::new();
    if r.contains(OwnRights::PLUS) {
        s.push('+');
    }
    if r.contains(OwnRights::MINUS) {
        s.push('−');
    }
    s
}

/// `keytool tag delegate`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tag_delegate(
    store: &DbStore,
    out: Out,
    tag: ObjID,
    from: ObjID,
    to: ObjID,
    rights: RightsArg,
    expires: Option<Expiry>,
    key: Option<ObjID>,
    file: Option<&std::path::Path>,
    force: bool,
    pass: &PassArgs,
) -> Result<Status> {
    if let Some(f) = file {
        files::refuse_existing(f, force)?;
    }
    let n = Names::load(store);
    if from == ALL_CONTEXTS || to == ALL_CONTEXTS {
        return Err(fail!(
            "ALL_CONTEXTS cannot delegate or receive a delegation: a public record is copied, not delegated (`keytool tag grant --public --to CTX`)"
        ));
    }
    ctx_cmd::check_exists(store, to)?;
    let from_obj = crate::cmd::obj::get(store, from, "context")?;
    let ctx =
        SecCtx::parse(&from_obj.data).map_err(|e| fail!("context {from} is malformed: {e}"))?;
    // The parent: a record of `from` for the tag, held by `from` itself, with the rights.
    let mut public_only = false;
    let mut parent = None;
    for e in ctx.entries_for(tag) {
        let Ok(r) = e.record() else { continue };
        if !r.is_ownership() || r.target() != tag {
            continue;
        }
        if r.holder() == ALL_CONTEXTS {
            public_only = true;
            continue;
        }
        if r.holder() == from && OwnRights::from_prots(r.prots()).contains(rights.0) {
            parent = Some(r);
            break;
        }
    }
    let Some(parent) = parent else {
        return Err(if public_only {
            fail!(
                "context {}'s record for {} is public (ALL_CONTEXTS): it cannot be delegated; copy it instead (keytool tag grant {} --public --to {} ...)",
                n.short(from),
                n.short(tag),
                n.arg(tag),
                n.arg(to)
            )
        } else {
            fail!(
                "context {} holds no ownership record for {} with rights {}",
                n.short(from),
                n.short(tag),
                rights_text(rights.0)
            )
        });
    };
    let ctx_kuid = from_obj.meta.kuid.ok_or_else(|| {
        fail!(
            "context {} has no kuid: it has no key to sign a delegation with (ctx new --kuid)",
            n.short(from)
        )
    })?;
    let key = match key {
        Some(k) => k,
        None => signing_key_of(store, ctx_kuid)?,
    };
    let (sk, vk) = env::signing_key(store, key, pass)?;
    if vk != ctx_kuid {
        return Err(fail!(
            "key {key} is not context {}'s: its kuid is {ctx_kuid}",
            n.short(from)
        ));
    }
    let mut g = DelGrant::new(to, rights.0.as_prots());
    g.expires = expires.unwrap_or(parent.expires());
    let del = match &parent {
        Record::Cap(c) => Del::from_cap(c, g, &sk),
        Record::Del(d) => d.delegate(g, &sk),
    }
    .map_err(|e| fail!("cannot delegate: {e}"))?;
    let record = Record::Del(del.clone());
    if let Some(f) = file {
        files::write_new(f, &files::encode_record(&record), files::PUBLIC, force)?;
    }
    ctx_cmd::add_record(store, to, &record)?;
    let r = rights_text(rights.0);
    out.emit(
        json!({
            "tag": id(tag),
            "from": id(from),
            "to": id(to),
            "rights": r,
            "record": del.id().to_string(),
            "expires": expiry_json(del.expires()),
            "out": file,
        }),
        || {
            format!(
                "delegated {}{r} from {} to {}: record {}, expires {}",
                n.arg(tag),
                n.short(from),
                n.short(to),
                del.id(),
                fmt_expiry(del.expires())
            )
        },
    );
    Ok(Status::Yes)
}

/// `keytool ctx relabel`.
pub(crate) fn relabel(
    store: &DbStore,
    out: Out,
    ctx: ObjID,
    label: &Label,
    at: Option<u64>,
) -> Result<Status> {
    ctx_cmd::check_exists(store, ctx)?;
    let generation = labels::relabel(store, ctx, label, at.unwrap_or_else(now_ns))
        .map_err(|e| difc_error(store, e))?;
    let n = Names::load(store);
    out.emit(
        json!({ "ctx": id(ctx), "label": label_json(label), "generation": generation }),
        || {
            format!(
                "context {} now runs at {} (label generation {generation})",
                n.short(ctx),
                n.label(label)
            )
        },
    );
    Ok(Status::Yes)
}

/// `keytool ctx register`.
pub(crate) fn register(
    store: &DbStore,
    out: Out,
    ctx: ObjID,
    registrar: Option<ObjID>,
) -> Result<Status> {
    ctx_cmd::check_exists(store, ctx)?;
    if let Some(r) = registrar {
        ctx_cmd::check_exists(store, r)?;
    }
    let label =
        labels::register(store, ctx, registrar, now_ns()).map_err(|e| difc_error(store, e))?;
    let n = Names::load(store);
    out.emit(
        json!({ "ctx": id(ctx), "label": label_json(&label) }),
        || format!("context {} registered at {}", n.short(ctx), n.label(&label)),
    );
    Ok(Status::Yes)
}

/// `keytool label show`.
pub(crate) fn show(store: &DbStore, out: Out, oid: ObjID) -> Result<Status> {
    let obj = crate::cmd::obj::get(store, oid, "object")?;
    let table = LabelTable::load(store)?;
    let n = Names::load(store);
    let data = table.data_label(oid);
    let parsed = SecCtx::parse(&obj.data).ok();
    let mut j = json!({ "id": id(oid), "data": label_json(&data) });
    let mut t = format!("{}\n  data label       {}\n", n.long(oid), n.label(&data));
    if let Some(use_integrity) = tag_use(&obj) {
        let kind = if use_integrity {
            "integrity"
        } else {
            "secrecy"
        };
        let _ = writeln!(t, "  a tag, for      {kind} labels");
        if let Value::Object(m) = &mut j {
            m.insert("tag_use".into(), json!(kind));
        }
    }
    if let Some(ctx) = parsed {
        let proposed = ctx.initial_label().unwrap_or_default();
        let principal = labels::principal_of(&table, oid, &obj.data);
        let (pj, line, note) = match &principal {
            Ok(p) => (
                json!({ "label": label_json(&p.label), "generation": p.generation }),
                format!("{} (generation {})", n.label(&p.label), p.generation),
                (!proposed.is_empty() && proposed != p.label && table.principal(oid).is_some())
                    .then(|| {
                        format!(
                            "  section          {}: section ignored since registration",
                            n.label(&proposed)
                        )
                    }),
            ),
            Err(_) => (
                Value::Null,
                "unregistered".to_string(),
                Some(format!(
                    "  section          {} (proposed; adopted at registration)",
                    n.label(&proposed)
                )),
            ),
        };
        let _ = writeln!(t, "  principal label  {line}");
        if let Some(note) = &note {
            let _ = writeln!(t, "{note}");
        }
        if let Value::Object(m) = &mut j {
            m.insert("principal".into(), pj);
            m.insert("section".into(), label_json(&proposed));
            m.insert(
                "section_ignored".into(),
                json!(
                    !proposed.is_empty()
                        && table.principal(oid).is_some_and(|p| p.label != proposed)
                ),
            );
        }
    }
    out.emit(j, || t);
    Ok(Status::Yes)
}

/// A context in the store other than `not` that holds `tag`'s `right` by a record of its own
/// (for the fix a denial suggests).
fn owner_of(store: &DbStore, tag: ObjID, right: Right, not: ObjID) -> Option<ObjID> {
    for oid in store.list().ok()? {
        if oid == not {
            continue;
        }
        let Ok(o) = store.get(oid) else { continue };
        let Ok(ctx) = SecCtx::parse(&o.data) else {
            continue;
        };
        let held = ctx.entries_for(tag).any(|e| {
            e.record().is_ok_and(|r| {
                r.is_ownership() && r.holder() == oid && r.prots().contains(right.as_prots())
            })
        });
        if held {
            return Some(oid);
        }
    }
    None
}

/// The flow part of `check`'s explanation (§7.1's style): text lines and JSON.
pub(crate) fn explain_flow(
    store: &DbStore,
    f: &FlowReport,
    access: &str,
    target: ObjID,
    prots: Option<twizzler_capsec::Protections>,
) -> (Value, String) {
    let n = Names::load(store);
    let c = n.short(f.ctx);
    let o = n.short(target);
    let mut s = String::new();
    let principal = f.principal.unwrap_or_default();
    let relabel_cmd = |add: Option<ObjID>, drop: Option<ObjID>| {
        let mut sec: Vec<ObjID> = principal.secrecy.as_slice().to_vec();
        let mut int: Vec<ObjID> = principal.integrity.as_slice().to_vec();
        if let Some(a) = add {
            sec.push(a);
        }
        if let Some(d) = drop {
            int.retain(|t| *t != d);
        }
        let mut cmd = format!("keytool ctx relabel {}", n.arg(f.ctx));
        if !sec.is_empty() {
            let _ = write!(cmd, " --secrecy {}", n.tags(&sec));
        }
        if !int.is_empty() {
            let _ = write!(cmd, " --integrity {}", n.tags(&int));
        }
        cmd
    };
    let to_verb = if access == "write" { "to" } else { "of" };
    match &f.denial {
        None => {
            let p = prots.map_or(String::new(), |p| p.to_string());
            if f.used.is_empty() {
                let _ = writeln!(
                    s,
                    "  flow: allowed (context at {}, object at {})",
                    n.label(&principal),
                    n.label(&f.object)
                );
            }
            for u in &f.used {
                let act = match u.right {
                    Right::Minus => "declassified",
                    Right::Plus => "endorsed",
                };
                let _ = writeln!(
                    s,
                    "granted {p}: {act} by {}{} (record {}, expires {})",
                    n.arg(u.tag),
                    u.right,
                    u.record,
                    fmt_expiry(u.expires)
                );
            }
        }
        Some(d) => {
            // A refused switch happens in the thread's active context, not the one it would
            // have switched to.
            let under = match d {
                FlowDenial::Switch { .. } => n.short(f.from),
                _ => c.clone(),
            };
            let _ = writeln!(s, "denied: {access} {to_verb} {o} under context {under}");
            match *d {
                FlowDenial::SecrecyWrite { tag } => {
                    let _ = writeln!(
                        s,
                        "  the context carries secrecy tag {}; the object does not",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  the context does not own {}− (no ownership record for {} in {c})",
                        n.arg(tag),
                        n.short(tag)
                    );
                    let from = owner_of(store, tag, Right::Minus, f.ctx)
                        .map_or("OWNER".to_string(), |o| n.arg(o));
                    let _ = writeln!(
                        s,
                        "  to allow: delegate {t}− to {c} (keytool tag delegate {t} --from {from} --to {} --rights -),\n            or write to an object that carries {}",
                        n.arg(f.ctx),
                        n.short(tag),
                        t = n.arg(tag)
                    );
                }
                FlowDenial::SecrecyRead { tag } => {
                    let _ = writeln!(
                        s,
                        "  the object carries secrecy tag {}; the reading context does not",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  the context does not own {}+ (no ownership record for {} in {c})",
                        n.arg(tag),
                        n.short(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: grant {t}+ to {c} (keytool tag grant {t} --to {} --rights +), then add it ({})",
                        n.arg(f.ctx),
                        relabel_cmd(Some(tag), None),
                        t = n.arg(tag)
                    );
                }
                FlowDenial::MustRaise { tag } => {
                    let _ = writeln!(
                        s,
                        "  the object carries secrecy tag {}; the reading context does not",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  it owns {}+, so it may add it first ({})",
                        n.arg(tag),
                        relabel_cmd(Some(tag), None)
                    );
                }
                FlowDenial::IntegrityRead { tag } => {
                    let _ = writeln!(
                        s,
                        "  the context carries integrity tag {}; the object does not (low-integrity input)",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  the context does not own {}− (no ownership record for {} in {c})",
                        n.arg(tag),
                        n.short(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: grant {t}− to {c} (keytool tag grant {t} --to {} --rights -) and drop it ({}),\n            or read an object that carries {}",
                        n.arg(f.ctx),
                        relabel_cmd(None, Some(tag)),
                        n.short(tag),
                        t = n.arg(tag)
                    );
                }
                FlowDenial::MustLower { tag } => {
                    let _ = writeln!(
                        s,
                        "  the context carries integrity tag {}; the object does not",
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  it owns {}−, so it may drop it first ({})",
                        n.arg(tag),
                        relabel_cmd(None, Some(tag))
                    );
                }
                FlowDenial::IntegrityWrite { tag } => {
                    let _ = writeln!(
                        s,
                        "  the object carries integrity tag {}; the writing context does not, and does not own {}+",
                        n.long(tag),
                        n.arg(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: grant {t}+ to {c} to endorse (keytool tag grant {t} --to {} --rights +),\n            or write to an object without {}",
                        n.arg(f.ctx),
                        n.short(tag),
                        t = n.arg(tag)
                    );
                }
                FlowDenial::Ownership { tag, why } => {
                    let _ = writeln!(
                        s,
                        "  an ownership record for {} in {c} did not count: {}",
                        n.long(tag),
                        verdict_words(&why)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: a valid record (keytool tag grant or tag delegate), or an object that needs none"
                    );
                }
                FlowDenial::LabelUnknown => {
                    let _ = writeln!(
                        s,
                        "  context {c} proposes a label in its section but is not registered: the kernel refuses it"
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: register it (keytool ctx register {} --as CTX, CTX owning + of the tags it adds)",
                        n.arg(f.ctx)
                    );
                }
                FlowDenial::Switch { to, tag } => {
                    let _ = writeln!(
                        s,
                        "  only context {} grants it, and switching there would shed secrecy tag {} (or gain it as integrity) without the ownership that needs",
                        n.short(to),
                        n.long(tag)
                    );
                    let _ = writeln!(
                        s,
                        "  to allow: give the thread's active context {t}− for secrecy, {t}+ for integrity (keytool tag delegate {t} --from OWNER --to CTX ...),\n            or enter {} through a code gate of a context owning it",
                        n.short(to),
                        t = n.arg(tag)
                    );
                }
            }
        }
    }
    let j = json!({
        "ctx": id(f.ctx),
        "principal": f.principal.as_ref().map(label_json),
        "object": label_json(&f.object),
        "mask": f.mask.to_string(),
        "denial": f.denial.as_ref().map(denial_name),
        "tag": f.denial.as_ref().and_then(FlowDenial::tag).map(id),
        "used": f.used.iter().map(|u| json!({
            "tag": id(u.tag),
            "right": u.right.to_string(),
            "record": u.record.to_string(),
            "expires": expiry_json(u.expires),
        })).collect::<Vec<_>>(),
    });
    (j, s)
}

fn denial_name(d: &FlowDenial) -> &'static str {
    match d {
        FlowDenial::SecrecyRead { .. } => "secrecy_read",
        FlowDenial::MustRaise { .. } => "must_raise",
        FlowDenial::IntegrityRead { .. } => "integrity_read",
        FlowDenial::MustLower { .. } => "must_lower",
        FlowDenial::SecrecyWrite { .. } => "secrecy_write",
        FlowDenial::IntegrityWrite { .. } => "integrity_write",
        FlowDenial::Ownership { .. } => "ownership",
        FlowDenial::LabelUnknown => "label_unknown",
        FlowDenial::Switch { .. } => "switch",
    }
}

/// Creates `obj` (named `name`) at `label` as `creator`, in one transaction with its row.
pub(crate) fn create_labelled(
    store: &DbStore,
    obj: &Object,
    name: Option<&str>,
    label: Option<&Label>,
    creator: Option<ObjID>,
) -> Result<Label> {
    store
        .transact(|tx| {
            let l = labels::create_object_in(tx, obj, label, creator, now_ns())?;
            if let Some(n) = name {
                tx.set_name(n, obj.id)?;
            }
            Ok::<Label, DifcError>(l)
        })
        .map_err(|e| difc_error(store, e))
}

/// Creates context `obj` (named `name`) and registers it at the label its section proposes,
/// as `registrar`, in one transaction. The context object's data label is the registrar's
/// principal label with the proposed integrity tags added: its bytes are written by the
/// registrar, and must flow to the new principal (§1.4), so a context proposing integrity `E`
/// is created at `E` (which needs `E+`, as registration does).
pub(crate) fn create_context(
    store: &DbStore,
    obj: &Object,
    name: Option<&str>,
    registrar: Option<ObjID>,
    proposed: &Label,
) -> Result<Label> {
    let now = now_ns();
    store
        .transact(|tx| {
            let table = LabelTable::load_in(tx)?;
            let r_label = match registrar {
                Some(r) => {
                    let bytes = tx.get(r)?.data;
                    labels::principal_of(&table, r, &bytes)?.label
                }
                None => Label::EMPTY,
            };
            let integrity = twizzler_capsec::Tags::union(
                r_label.integrity.as_slice(),
                proposed.integrity.as_slice(),
            )
            .map_err(|e| DifcError::NotAContext {
                id: obj.id,
                why: format!("its label would have too many integrity tags: {e}"),
            })?;
            let data = Label::new(r_label.secrecy, integrity);
            labels::create_object_in(tx, obj, Some(&data), registrar, now)?;
            if let Some(n) = name {
                tx.set_name(n, obj.id)?;
            }
            labels::register_in(tx, obj.id, registrar, now)
        })
        .map_err(|e| difc_error(store, e))
}

/// An empty context object at `label`: version 3 with the section when `label` is not empty.
pub(crate) fn context_object(id: ObjID, kuid: Option<ObjID>, label: &Label) -> Result<Object> {
    let mut obj = context::empty(id, kuid)?;
    if !label.is_empty() {
        let mut ed = context::editor_of(&obj)?;
        ed.set_initial_label(*label);
        obj.data = ed
            .encode_for_update(None)
            .map_err(|e| fail!("context {id}: {e}"))?;
    }
    Ok(obj)
}
