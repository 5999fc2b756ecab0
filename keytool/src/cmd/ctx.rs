//! `ctx new|add|rm|mask|flags|show`.

use std::fmt::Write as _;
use std::path::Path;

use secctx::context::{self, ContextError, Removal};
use secctx::{DbStore, StoreError, keypair};
use serde_json::json;
use twizzler_capsec::{CtxFlags, Label, ObjID, Protections, Record, RecordId};

use crate::cmd::{difc, obj};
use crate::env;
use crate::error::{Error, Result, Status};
use crate::fail;
use crate::files;
use crate::output::{Out, flags_json, flags_text, id, kind_name, record_line, record_summary_json};
use crate::parse::RecordRef;

/// A context error, saying clearly when the context does not exist.
fn ctx_err(store: &DbStore, ctx: ObjID) -> impl Fn(ContextError) -> Error + '_ {
    move |e| match e {
        ContextError::Store(StoreError::NotFound(o)) if o == ctx => {
            fail!("context {ctx} does not exist {}", env::in_store(store))
        }
        e => e.into(),
    }
}

/// `keytool ctx new`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn new(
    store: &DbStore,
    out: Out,
    cid: Option<ObjID>,
    name: Option<&str>,
    kuid: Option<ObjID>,
    unchecked: bool,
    label: &Label,
    registrar: Option<ObjID>,
) -> Result<Status> {
    if let (Some(k), false) = (kuid, unchecked) {
        obj::check_kuid(store, k)?;
    }
    if let Some(r) = registrar {
        check_exists(store, r)?;
    }
    let cid = match cid {
        Some(c) => c,
        None => keypair::random_id(&mut env::rng()?),
    };
    let obj = difc::context_object(cid, kuid, label)?;
    let adopted = difc::create_context(store, &obj, name, registrar, label)?;
    let names = difc::Names::load(store);
    out.emit(
        json!({ "id": id(cid), "name": name, "kuid": kuid.map(id), "label": difc::label_json(&adopted) }),
        || {
            let k = kuid.map_or("none (it cannot sign delegations)".to_string(), |k| {
                k.to_string()
            });
            let n = name.map_or(String::new(), |n| format!("  {n}"));
            let mut t = format!("context {cid}{n}\n  kuid  {k}");
            if !adopted.is_empty() {
                t.push_str(&format!("\n  label {} (registered)", names.label(&adopted)));
            }
            t
        },
    );
    Ok(Status::Yes)
}

/// `keytool ctx add`.
///
/// Adding a record the context already holds changes nothing. The check and the addition are
/// one locked edit, like `secctx::context::add_record`'s.
pub(crate) fn add(store: &DbStore, out: Out, ctx: ObjID, file: &Path) -> Result<Status> {
    let record = files::read_record(file)?;
    let (generation, held) = add_record(store, ctx, &record)?;
    let rid = record.id();
    let kind = kind_name(record.kind());
    let (ctx_label, target) = (env::label(store, ctx), env::label(store, record.target()));
    out.emit(
        json!({
            "ctx": id(ctx),
            "generation": generation,
            "already_held": held,
            "added": record_summary_json(&record),
        }),
        || {
            if held {
                format!(
                    "context {ctx_label} already holds {kind} {rid} (unchanged, generation {generation})"
                )
            } else {
                format!(
                    "added {kind} {rid} for {target} to context {ctx_label} (generation {generation})"
                )
            }
        },
    );
    Ok(Status::Yes)
}

/// Adds `record` to context `ctx` unless it holds it already, in one locked edit that first
/// checks the record is for `ctx`. Returns the context's generation after the edit and whether
/// the record was held already (then nothing changed).
pub(crate) fn add_record(store: &DbStore, ctx: ObjID, record: &Record) -> Result<(u64, bool)> {
    let rid = record.id();
    let mut held = false;
    let generation = context::edit(store, ctx, |ed| {
        let public = matches!(record, Record::Cap(c) if context::is_public_ownership(c));
        if record.holder() != ctx && !public {
            return Err(ContextError::NotForThisContext {
                id: ctx,
                holder: record.holder(),
            });
        }
        held = ed.records().any(|(_, id, _)| id == rid);
        if !held {
            ed.add_record(record);
        }
        Ok(())
    })
    .map_err(ctx_err(store, ctx))?;
    Ok((generation, held))
}

/// Checks, before anything is signed or written, that context `ctx` exists and is a readable
/// context.
pub(crate) fn check_exists(store: &DbStore, ctx: ObjID) -> Result<()> {
    context::read(store, ctx).map_err(ctx_err(store, ctx))?;
    Ok(())
}

/// The record id and its target, from a file or from the context.
fn resolve_record(
    store: &DbStore,
    ctx: ObjID,
    r: &RecordRef,
    target: Option<ObjID>,
) -> Result<(ObjID, RecordId)> {
    let (rid, file_target) = match r {
        RecordRef::Id(rid) => (*rid, None),
        RecordRef::File(p) => {
            let rec = files::read_record(p)?;
            (rec.id(), Some(rec.target()))
        }
    };
    if let Some(t) = target.or(file_target) {
        return Ok((t, rid));
    }
    let ed = context::read(store, ctx).map_err(ctx_err(store, ctx))?;
    ed.records()
        .find(|(_, id, _)| *id == rid)
        .map(|(t, _, _)| (t, rid))
        .ok_or_else(|| fail!("context {ctx} holds no record {rid}"))
}

/// `keytool ctx rm`.
pub(crate) fn rm(
    store: &DbStore,
    out: Out,
    ctx: ObjID,
    target: Option<ObjID>,
    record: Option<RecordRef>,
    mask: Option<ObjID>,
) -> Result<Status> {
    let what = match (mask, record, target) {
        (Some(m), _, _) => Removal::Mask(m),
        (None, Some(r), t) => {
            let (t, rid) = resolve_record(store, ctx, &r, t)?;
            Removal::Record(t, rid)
        }
        (None, None, Some(t)) => Removal::Target(t),
        (None, None, None) => {
            return Err(fail!("say what to remove: --target, --record or --mask"));
        }
    };
    let generation = context::remove(store, ctx, what).map_err(ctx_err(store, ctx))?;
    let (kind, desc) = match what {
        Removal::Mask(m) => ("mask", format!("the mask of {m}")),
        Removal::Record(t, r) => ("record", format!("record {r} for {t}")),
        Removal::Target(t) => ("target", format!("every record for {t}")),
    };
    out.emit(
        json!({
            "ctx": id(ctx),
            "generation": generation,
            "removed": kind,
            "target": match what { Removal::Mask(t) | Removal::Record(t, _) | Removal::Target(t) => id(t) },
            "record": match what { Removal::Record(_, r) => json!(r.to_string()), _ => json!(null) },
        }),
        || format!("removed {desc} from context {ctx} (generation {generation})"),
    );
    Ok(Status::Yes)
}

/// `keytool ctx mask`.
pub(crate) fn mask(
    store: &DbStore,
    out: Out,
    ctx: ObjID,
    target: Option<ObjID>,
    perm: Option<Protections>,
    ovr: Protections,
    global: Option<Protections>,
) -> Result<Status> {
    let (generation, j, t) = match (global, target, perm) {
        (Some(g), _, _) => {
            let generation =
                context::set_global_mask(store, ctx, g).map_err(ctx_err(store, ctx))?;
            (
                generation,
                json!({ "global_mask": g.to_string() }),
                format!("global mask {g}"),
            )
        }
        (None, Some(t), Some(p)) => {
            let generation =
                context::set_mask(store, ctx, t, p, ovr).map_err(ctx_err(store, ctx))?;
            (
                generation,
                json!({ "mask": { "target": id(t), "permmask": p.to_string(), "ovrmask": ovr.to_string() } }),
                format!("mask of {t}: perm {p}, ovr {ovr}"),
            )
        }
        _ => {
            return Err(fail!(
                "give --global PROTS, or --target ID with --perm PROTS"
            ));
        }
    };
    let mut j = j;
    if let serde_json::Value::Object(m) = &mut j {
        m.insert("ctx".into(), id(ctx));
        m.insert("generation".into(), json!(generation));
    }
    out.emit(j, || {
        format!("context {ctx}: {t} (generation {generation})")
    });
    Ok(Status::Yes)
}

/// `keytool ctx flags`.
pub(crate) fn flags(
    store: &DbStore,
    out: Out,
    ctx: ObjID,
    undetachable: Option<bool>,
) -> Result<Status> {
    let (flags, generation) = match undetachable {
        Some(u) => {
            let mut flags = CtxFlags::empty();
            let generation = context::edit(store, ctx, |ed| {
                flags = ed.flags();
                flags.set(CtxFlags::UNDETACHABLE, u);
                ed.set_flags(flags);
                Ok(())
            })
            .map_err(ctx_err(store, ctx))?;
            (flags, generation)
        }
        None => {
            let ed = context::read(store, ctx).map_err(ctx_err(store, ctx))?;
            (ed.flags(), ed.generation())
        }
    };
    out.emit(
        json!({
            "ctx": id(ctx),
            "generation": generation,
            "flags": flags_json(flags),
            "undetachable": flags.contains(CtxFlags::UNDETACHABLE),
        }),
        || {
            format!(
                "context {ctx}: flags {} (generation {generation})",
                flags_text(flags)
            )
        },
    );
    Ok(Status::Yes)
}

/// `keytool ctx show`.
pub(crate) fn show(store: &DbStore, out: Out, ctx: ObjID) -> Result<Status> {
    let o = obj::get(store, ctx, "context")?;
    if o.data.get(..4) != Some(b"TSCX") {
        return Err(fail!(
            "object {ctx} is not a security context (`keytool inspect {ctx}` shows what it is)"
        ));
    }
    let ed = context::editor_of(&o).map_err(ctx_err(store, ctx))?;
    let mut records = Vec::new();
    let mut lines = String::new();
    for (t, rid, rec) in ed.records() {
        match rec {
            Ok(r) => {
                records.push(record_summary_json(&r));
                let _ = writeln!(lines, "    {t}  {}", record_line(&rid, &r));
            }
            Err(e) => {
                records.push(
                    json!({ "target": id(t), "id": rid.to_string(), "error": e.to_string() }),
                );
                let _ = writeln!(lines, "    {t}  ??? {rid}  malformed: {e}");
            }
        }
    }
    let masks: Vec<_> = ed.masks().collect();
    out.emit(
        json!({
            "id": id(ctx),
            "kuid": o.meta.kuid.map(id),
            "generation": ed.generation(),
            "flags": flags_json(ed.flags()),
            "undetachable": ed.flags().contains(CtxFlags::UNDETACHABLE),
            "global_mask": ed.global_mask().to_string(),
            "masks": masks.iter().map(|m| json!({
                "target": id(m.target),
                "permmask": m.permmask.to_string(),
                "ovrmask": m.ovrmask.to_string(),
            })).collect::<Vec<_>>(),
            "records": records,
        }),
        || {
            let mut s = String::new();
            let _ = writeln!(s, "context {ctx}");
            let k = o.meta.kuid.map_or("none".to_string(), |k| k.to_string());
            let _ = writeln!(s, "  kuid         {k}");
            let _ = writeln!(s, "  generation   {}", ed.generation());
            let _ = writeln!(s, "  flags        {}", flags_text(ed.flags()));
            let _ = writeln!(s, "  global mask  {}", ed.global_mask());
            let _ = writeln!(s, "  masks        {}", masks.len());
            for m in &masks {
                let _ = writeln!(
                    s,
                    "    {}  perm {}  ovr {}",
                    m.target, m.permmask, m.ovrmask
                );
            }
            let _ = writeln!(s, "  records      {}", ed.len());
            s.push_str(&lines);
            s
        },
    );
    Ok(Status::Yes)
}
