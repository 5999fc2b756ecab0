//! Tags (`docs/DIFC.md` §7.1): the tag objects `tag create` makes, and the ownership records
//! `tag grant` mints and `tag delegate` passes on.

use std::fmt::Write as _;

use secctx::{DbStore, ObjMeta, Object, ObjectStore, keypair};
use serde_json::json;
use twizzler_capsec::{
    ALL_CONTEXTS, Cap, Del, DelGrant, Expiry, ObjID, OwnRights, OwnershipGrant, Record, SecCtx,
};

use super::Names;
use crate::cli::{PassArgs, RightsArg};
use crate::cmd::{ctx as ctx_cmd, warn};
use crate::env;
use crate::error::{Result, Status};
use crate::fail;
use crate::files;
use crate::output::{Out, expiry_json, id};
use crate::parse::{fmt_expiry, now_ns};

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
