//! `revoke`: the store's revocation list.

use secctx::revocations::RevocationList;
use secctx::{DbStore, ObjectStore, keypair};
use serde_json::json;
use twizzler_capsec::ObjID;

use crate::cmd::obj;
use crate::error::{Result, Status};
use crate::fail;
use crate::files;
use crate::output::{Out, id};
use crate::parse::RecordRef;

/// The verifying-key object a revocation names: a verifying key itself, or the verifying key of
/// a signing-key object. Keys not in the store can be revoked too (they may sign elsewhere).
fn verifying_of(store: &DbStore, key: ObjID) -> Result<ObjID> {
    match store.get(key) {
        Ok(o) if o.data.get(..4) == Some(b"TZSK") => Ok(keypair::signing_key_info(&o)?.verifying),
        Ok(o) if o.data.get(..4) == Some(b"TZVK") => Ok(key),
        Ok(_) => Err(fail!("object {key} is not a key object")),
        Err(secctx::StoreError::NotFound(_)) => Ok(key),
        Err(e) => Err(e.into()),
    }
}

/// `keytool revoke`.
pub(crate) fn revoke(
    store: &DbStore,
    out: Out,
    key: Option<ObjID>,
    record: Option<RecordRef>,
    list: bool,
) -> Result<Status> {
    if list {
        let l = RevocationList::load(store)?;
        let (j, t) = obj::revocation_lines(&l);
        out.emit(j, || format!("revocation list\n{t}"));
        return Ok(Status::Yes);
    }
    if let Some(k) = key {
        let vk = verifying_of(store, k)?;
        let new = RevocationList::add(store, |l| l.keys.insert(vk))?;
        out.emit(json!({ "revoked_key": id(vk), "new": new }), || {
            let note = if vk == k {
                String::new()
            } else {
                format!(" (the verifying key of {k})")
            };
            let state = if new { "revoked" } else { "already revoked" };
            format!("{state}: key {vk}{note}; every record it signed stops granting")
        });
        return Ok(Status::Yes);
    }
    let Some(r) = record else {
        return Err(fail!(
            "say what to revoke: --key ID or --record FILE|RECORD_ID"
        ));
    };
    let rid = match r {
        RecordRef::Id(rid) => rid,
        RecordRef::File(p) => files::read_record(&p)?.id(),
    };
    let new = RevocationList::add(store, |l| l.records.insert(rid))?;
    out.emit(
        json!({ "revoked_record": rid.to_string(), "new": new }),
        || {
            let state = if new { "revoked" } else { "already revoked" };
            format!("{state}: record {rid} and every delegation derived from it")
        },
    );
    Ok(Status::Yes)
}
