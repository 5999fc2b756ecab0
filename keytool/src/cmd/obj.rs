//! `obj new`, `obj show`, and the description of any store object (`inspect ID`).

use std::fmt::Write as _;

use secctx::keypair;
use secctx::revocations::{REVOCATIONS_ID, RevocationList};
use secctx::{DbStore, ObjMeta, Object, ObjectStore, StoreError};
use serde_json::{Value, json};
use twizzler_capsec::{Label, ObjID, Protections, SecCtx};

use crate::cmd::difc;

use crate::env;
use crate::error::{Result, Status};
use crate::fail;
use crate::output::{Out, flags_json, flags_text, hex, id};

/// Reads object `oid`, saying clearly when it does not exist.
pub(crate) fn get(store: &DbStore, oid: ObjID, what: &str) -> Result<Object> {
    store.get(oid).map_err(|e| match e {
        StoreError::NotFound(_) => fail!("{what} {oid} does not exist {}", env::in_store(store)),
        e => e.into(),
    })
}

/// Checks that `kuid` is a verifying-key object of the store.
pub(crate) fn check_kuid(store: &DbStore, kuid: ObjID) -> Result<()> {
    let obj = get(store, kuid, "kuid")?;
    if obj.data.get(..4) == Some(b"TZSK") {
        let v = keypair::signing_key_info(&obj)?.verifying;
        return Err(fail!(
            "{kuid} is a signing key: name its verifying key {v} as the kuid"
        ));
    }
    keypair::parse_verifying_key(&obj).map(|_| ()).map_err(|e| {
        fail!("kuid {kuid} is not a verifying-key object ({e}); --unchecked accepts it")
    })
}

/// `keytool obj new`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn new(
    store: &DbStore,
    out: Out,
    oid: Option<ObjID>,
    name: Option<&str>,
    kuid: Option<ObjID>,
    default: Protections,
    unchecked: bool,
    label: Option<&Label>,
    creator: Option<ObjID>,
) -> Result<Status> {
    if let (Some(k), false) = (kuid, unchecked) {
        check_kuid(store, k)?;
    }
    if let Some(c) = creator {
        crate::cmd::ctx::check_exists(store, c)?;
    }
    let oid = match oid {
        Some(o) => o,
        None => keypair::random_id(&mut env::rng()?),
    };
    let label = difc::create_labelled(
        store,
        &Object {
            id: oid,
            meta: ObjMeta {
                kuid,
                default_prots: default,
                secret: false,
            },
            data: Vec::new(),
        },
        name,
        label,
        creator,
    )?;
    let names = difc::Names::load(store);
    out.emit(
        json!({ "id": id(oid), "name": name, "kuid": kuid.map(id), "default_prots": default.to_string(), "label": difc::label_json(&label) }),
        || {
            let k = kuid.map_or("none".to_string(), |k| k.to_string());
            let n = name.map_or(String::new(), |n| format!("  {n}"));
            let mut t = format!("object {oid}{n}\n  kuid           {k}\n  default prots  {default}");
            if !label.is_empty() {
                t.push_str(&format!("\n  label          {}", names.label(&label)));
            }
            t
        },
    );
    Ok(Status::Yes)
}

/// Creates `obj` and, with a name, names it, in one transaction.
pub(crate) fn create_named(store: &DbStore, obj: &Object, name: Option<&str>) -> Result<()> {
    store.transact(|tx| {
        tx.create(obj)?;
        if let Some(n) = name {
            tx.set_name(n, obj.id)?;
        }
        Ok::<(), StoreError>(())
    })?;
    Ok(())
}

/// `keytool obj show`.
pub(crate) fn show(store: &DbStore, out: Out, oid: ObjID) -> Result<Status> {
    let obj = get(store, oid, "object")?;
    let (j, t) = describe(&obj)?;
    out.emit(j, || t);
    Ok(Status::Yes)
}

/// Describes a store object by what its bytes are: JSON and text.
pub(crate) fn describe(obj: &Object) -> Result<(Value, String)> {
    let mut t = String::new();
    let kuid = obj.meta.kuid.map_or("none".to_string(), |k| k.to_string());
    let mut j = json!({
        "id": id(obj.id),
        "kuid": obj.meta.kuid.map(id),
        "default_prots": obj.meta.default_prots.to_string(),
        "secret": obj.meta.secret,
        "size": obj.data.len(),
    });
    let magic = obj.data.get(..4);
    let (kind, extra, lines): (&str, Value, String) = if magic == Some(b"TZVK") {
        let vk = keypair::parse_verifying_key(obj)?;
        (
            "verifying_key",
            json!({ "scheme": vk.scheme().name(), "public_key": hex(&vk.to_raw()) }),
            format!(
                "  scheme         {}\n  public key     {}\n",
                vk.scheme(),
                hex(&vk.to_raw())
            ),
        )
    } else if magic == Some(b"TZSK") {
        let info = keypair::signing_key_info(obj)?;
        (
            "signing_key",
            json!({ "verifying": id(info.verifying), "protected": info.protected }),
            format!(
                "  verifying key  {}\n  protected      {}\n",
                info.verifying,
                if info.protected {
                    "yes (passphrase)"
                } else {
                    "no"
                }
            ),
        )
    } else if magic == Some(b"TSCX") {
        let ctx =
            SecCtx::parse(&obj.data).map_err(|e| fail!("context {} is malformed: {e}", obj.id))?;
        (
            "context",
            json!({
                "generation": ctx.generation(),
                "flags": flags_json(ctx.flags()),
                "global_mask": ctx.global_mask().to_string(),
                "records": ctx.entry_count(),
                "masks": ctx.mask_count(),
            }),
            format!(
                "  generation     {}\n  flags          {}\n  global mask    {}\n  records        {}\n  masks          {}\n  (keytool ctx show {} lists them)\n",
                ctx.generation(),
                flags_text(ctx.flags()),
                ctx.global_mask(),
                ctx.entry_count(),
                ctx.mask_count(),
                obj.id
            ),
        )
    } else if obj.id == REVOCATIONS_ID {
        let list = RevocationList::decode(&obj.data).map_err(StoreError::from)?;
        let (kj, tl) = revocation_lines(&list);
        ("revocation_list", kj, tl)
    } else if obj.id == secctx::labels::LABELS_ID {
        let table = secctx::labels::LabelTable::decode(&obj.data).map_err(StoreError::from)?;
        (
            "label_table",
            json!({ "rows": table.rows.len() }),
            format!(
                "  rows           {} (keytool label show ID shows one)\n",
                table.rows.len()
            ),
        )
    } else if let Some(integrity) = difc::tag_use(obj) {
        let u = if integrity { "integrity" } else { "secrecy" };
        (
            "tag",
            json!({ "use": u }),
            format!("  use            {u} labels\n"),
        )
    } else {
        ("object", json!({}), String::new())
    };
    if let (Value::Object(m), Value::Object(e)) = (&mut j, extra) {
        m.insert("type".into(), Value::String(kind.into()));
        m.extend(e);
    }
    let _ = writeln!(t, "{} {}", kind.replace('_', " "), obj.id);
    let _ = writeln!(t, "  kuid           {kuid}");
    let _ = writeln!(t, "  default prots  {}", obj.meta.default_prots);
    let _ = writeln!(
        t,
        "  size           {} bytes{}",
        obj.data.len(),
        if obj.meta.secret {
            ", secret (mode 0600)"
        } else {
            ""
        }
    );
    t.push_str(&lines);
    Ok((j, t))
}

/// The revocation list as JSON fields and text lines.
pub(crate) fn revocation_lines(list: &RevocationList) -> (Value, String) {
    let mut t = String::new();
    let _ = writeln!(t, "  revoked keys     {}", list.keys.len());
    for k in &list.keys {
        let _ = writeln!(t, "    {k}");
    }
    let _ = writeln!(t, "  revoked records  {}", list.records.len());
    for r in &list.records {
        let _ = writeln!(t, "    {r}");
    }
    (
        json!({
            "keys": list.keys.iter().map(|k| id(*k)).collect::<Vec<_>>(),
            "records": list.records.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
        }),
        t,
    )
}
