//! Labels (`docs/DIFC.md` §7.1): creating objects and contexts at a label (`obj new`,
//! `ctx new`), `ctx relabel`, `ctx register` and `label show`.

use std::fmt::Write as _;

use secctx::labels::{self, DifcError, LabelTable};
use secctx::{DbStore, Object, ObjectStore, context};
use serde_json::{Value, json};
use twizzler_capsec::{Label, ObjID, SecCtx};

use super::{Names, difc_error, label_json, tag_use};
use crate::cmd::ctx as ctx_cmd;
use crate::error::{Result, Status};
use crate::fail;
use crate::output::{Out, id};
use crate::parse::now_ns;

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
