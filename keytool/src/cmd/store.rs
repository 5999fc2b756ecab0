//! `keytool store`: what a store holds (`info`), and moving a store of the old
//! one-file-per-object format into the database (`migrate`).

use std::path::Path;

use secctx::revocations::REVOCATIONS_ID;
use secctx::{DbStore, DirStore, ObjectStore};
use serde_json::json;

use crate::error::{Result, Status};
use crate::output::Out;

/// What kind of object the first bytes of `data` say it is.
fn kind_of(id: twizzler_capsec::ObjID, head: &[u8]) -> &'static str {
    if id == REVOCATIONS_ID {
        return "revocation_list";
    }
    if id == secctx::labels::LABELS_ID {
        return "label_table";
    }
    match head.get(..4) {
        Some(b"TZSK") => "signing_key",
        Some(b"TZVK") => "verifying_key",
        Some(b"TSCX") => "context",
        Some(b"TZTG") => "tag",
        _ => "object",
    }
}

/// `keytool store info`: the store's path, objects by kind, names, and sizes.
pub(crate) fn info(store: &DbStore, out: Out) -> Result<Status> {
    let stats = store.stats()?;
    let kinds = [
        "signing_key",
        "verifying_key",
        "context",
        "revocation_list",
        "label_table",
        "tag",
        "object",
    ];
    let mut counts = [0u64; 7];
    for id in store.list()? {
        let head = store.read_at(id, 0, 4)?;
        let k = kind_of(id, &head);
        if let Some(i) = kinds.iter().position(|x| *x == k) {
            counts[i] += 1;
        }
    }
    let names = store.names()?;
    let by_kind: serde_json::Map<String, serde_json::Value> = kinds
        .iter()
        .zip(counts)
        .map(|(k, n)| ((*k).to_string(), json!(n)))
        .collect();
    let value = json!({
        "path": store.path().display().to_string(),
        "format": secctx::db_store::FORMAT_VERSION,
        "objects": stats.objects,
        "by_kind": by_kind,
        "object_bytes": stats.object_bytes,
        "pages": stats.pages,
        "names": names.iter().map(|(n, id)| json!({"name": n, "id": id.to_string()})).collect::<Vec<_>>(),
        "file_bytes": stats.file_bytes,
    });
    out.emit(value, || {
        let mut t = format!(
            "store    {}\nformat   {}\nobjects  {} ({} bytes in {} stored pages)\n",
            store.path().display(),
            secctx::db_store::FORMAT_VERSION,
            stats.objects,
            stats.object_bytes,
            stats.pages
        );
        for (k, n) in kinds.iter().zip(counts) {
            t.push_str(&format!("  {:<16} {n}\n", k.replace('_', " ")));
        }
        t.push_str(&format!("names    {}\n", names.len()));
        for (n, id) in &names {
            t.push_str(&format!("  {n:<16} {id}\n"));
        }
        t.push_str(&format!("file     {} bytes on disk\n", stats.file_bytes));
        t
    });
    Ok(Status::Yes)
}

/// `keytool store migrate`: copies every object of the old-format store in `from` (default:
/// the store directory itself) into the database store in `dir`, in one transaction. The old
/// files are left untouched. Progress goes to stderr.
pub(crate) fn migrate(dir: &Path, from: Option<&Path>, out: Out) -> Result<Status> {
    let from = from.unwrap_or(dir);
    if !secctx::dir_store::holds_objects(from) {
        return Err(crate::fail!(
            "{} holds no objects in the old one-file-per-object format: nothing to migrate",
            from.display()
        ));
    }
    let old = DirStore::open(from)?;
    let store = DbStore::open_for_migration(dir)?;
    let mut last = 0;
    let copied = secctx::db_store::migrate(&old, &store, |done, all| {
        // About every 5%, and at the end.
        if done == all || done * 20 / all.max(1) > last {
            last = done * 20 / all.max(1);
            eprintln!("keytool: migrated {done} of {all} objects");
        }
    })?;
    let all = old.list()?.len();
    out.emit(
        json!({
            "from": from.display().to_string(),
            "store": store.path().display().to_string(),
            "objects": all,
            "copied": copied,
        }),
        || {
            format!(
                "migrated {copied} objects ({} already there) from {} into {}\nthe old files are left in {}; remove the <id>.obj and <id>.lock files when you no longer need them",
                all - copied,
                from.display(),
                store.path().display(),
                from.display()
            )
        },
    );
    Ok(Status::Yes)
}
