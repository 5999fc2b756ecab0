//! `mint`, `delegate`, `verify`, `inspect`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use secctx::keypair;
use secctx::revocations::RevocationList;
use secctx::{DbStore, ObjectStore, StoreError};
use serde_json::{Value, json};
use twizzler_capsec::{
    Authority, Cap, CapGrant, Del, DelGrant, Expiry, Gate, HashAlg, KeyLookupError, ObjID, Record,
    RecordId, VerifyError, VerifyingKey,
};

use crate::cli::{GrantArgs, Hash, PassArgs};
use crate::cmd::{obj, warn};
use crate::env;
use crate::error::{Result, Status};
use crate::fail;
use crate::files;
use crate::output::{Out, record_json, record_text};
use crate::parse::{fmt_time, now_ns};

fn hash_of(h: Hash) -> HashAlg {
    match h {
        Hash::Blake3 => HashAlg::Blake3,
        Hash::Sha256 => HashAlg::Sha256,
    }
}

/// Checks, unless `--unchecked`, that object `oid` names `vk` as its kuid.
pub(crate) fn check_signs_for(
    store: &DbStore,
    oid: ObjID,
    what: &str,
    key: ObjID,
    vk: ObjID,
    unchecked: bool,
) -> Result<()> {
    if unchecked {
        return Ok(());
    }
    let o = match store.get(oid) {
        Ok(o) => o,
        Err(StoreError::NotFound(_)) => {
            return Err(fail!(
                "{what} {oid} is not {}, so keytool cannot check that key {key} signs for it (--unchecked skips the check)",
                env::in_store(store)
            ));
        }
        Err(e) => return Err(e.into()),
    };
    match o.meta.kuid {
        Some(k) if k == vk => Ok(()),
        Some(k) => Err(fail!(
            "key {key} does not sign for {what} {oid}: its verifying key is {vk}, the {what}'s kuid is {k}; the record would never verify"
        )),
        None => Err(fail!(
            "{what} {oid} has no kuid, so no key signs for it; the record would never verify"
        )),
    }
}

fn write_record(out: Out, record: &Record, grant: &GrantArgs, verb: &str) -> Result<Status> {
    files::write_new(
        &grant.out,
        &files::encode_record(record),
        files::PUBLIC,
        grant.force,
    )?;
    let mut j = record_json(record);
    if let Value::Object(m) = &mut j {
        m.insert("out".into(), json!(grant.out));
    }
    out.emit(j, || {
        format!("{verb} {}\n{}", grant.out.display(), record_text(record))
    });
    Ok(Status::Yes)
}

/// `keytool mint`.
pub(crate) fn mint(
    store: &DbStore,
    out: Out,
    key: ObjID,
    target: ObjID,
    accessor: ObjID,
    grant: &GrantArgs,
    pass: &PassArgs,
) -> Result<Status> {
    files::refuse_existing(&grant.out, grant.force)?;
    let (sk, vk) = env::signing_key(store, key, pass)?;
    check_signs_for(store, target, "target", key, vk, grant.unchecked)?;
    let g = CapGrant {
        target,
        accessor,
        prots: grant.prots,
        gate: grant.gate.unwrap_or(Gate::WHOLE),
        expires: grant.expires.unwrap_or(Expiry::NEVER),
        hash: hash_of(grant.hash),
    };
    if g.expires.is_expired(now_ns()) {
        warn("the capability has already expired");
    }
    let cap = Cap::mint(g, &sk).map_err(|e| fail!("cannot sign: {e}"))?;
    write_record(out, &Record::Cap(cap), grant, "wrote")
}

/// `keytool delegate`.
pub(crate) fn delegate(
    store: &DbStore,
    out: Out,
    parent: &Path,
    key: ObjID,
    receiver: ObjID,
    grant: &GrantArgs,
    pass: &PassArgs,
) -> Result<Status> {
    files::refuse_existing(&grant.out, grant.force)?;
    let parent = files::read_record(parent)?;
    let (sk, vk) = env::signing_key(store, key, pass)?;
    check_signs_for(store, parent.holder(), "context", key, vk, grant.unchecked)?;
    let g = DelGrant {
        receiver,
        prots: grant.prots,
        gate: grant.gate.unwrap_or(parent.gate()),
        expires: grant.expires.unwrap_or(parent.expires()),
        hash: hash_of(grant.hash),
    };
    let del = match &parent {
        Record::Cap(c) => Del::from_cap(c, g, &sk),
        Record::Del(d) => d.delegate(g, &sk),
    }
    .map_err(|e| fail!("cannot delegate: {e}"))?;
    write_record(out, &Record::Del(del), grant, "wrote")
}

/// Keys and revocations from the store, for [`Record::verify`].
struct StoreAuthority {
    /// Objects' kuids (`None`: the object has none).
    kuids: HashMap<ObjID, Option<ObjID>>,
    /// Verifying keys by key-object id.
    keys: HashMap<ObjID, VerifyingKey>,
    revoked: RevocationList,
    /// Why a lookup will fail, in words, by object.
    notes: HashMap<ObjID, String>,
}

impl StoreAuthority {
    fn load(store: &DbStore, objects: impl IntoIterator<Item = ObjID>) -> Result<Self> {
        let mut a = StoreAuthority {
            kuids: HashMap::new(),
            keys: HashMap::new(),
            revoked: RevocationList::load(store)?,
            notes: HashMap::new(),
        };
        for oid in objects {
            if a.kuids.contains_key(&oid) {
                continue;
            }
            let o = match store.get(oid) {
                Ok(o) => o,
                Err(StoreError::NotFound(_)) => {
                    a.notes
                        .insert(oid, format!("object {oid} is not {}", env::in_store(store)));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            a.kuids.insert(oid, o.meta.kuid);
            let Some(k) = o.meta.kuid else { continue };
            if a.keys.contains_key(&k) {
                continue;
            }
            match keypair::load_verifying_key(store, k) {
                Ok(vk) => {
                    a.keys.insert(k, vk);
                }
                Err(keypair::KeyError::Store(StoreError::NotFound(_))) => {
                    a.notes.insert(
                        oid,
                        format!(
                            "the key {k} that object {oid} names as its kuid is not {}",
                            env::in_store(store)
                        ),
                    );
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(a)
    }

    /// The reason for a verification failure, in words.
    fn explain(&self, e: &VerifyError) -> String {
        if let VerifyError::Key(KeyLookupError::NoKuid(o) | KeyLookupError::UnknownKey(o)) = e
            && let Some(n) = self.notes.get(o)
        {
            return n.clone();
        }
        e.to_string()
    }
}

impl Authority for StoreAuthority {
    fn key_for(&self, obj: ObjID) -> std::result::Result<&VerifyingKey, KeyLookupError> {
        let kuid = self
            .kuids
            .get(&obj)
            .copied()
            .flatten()
            .ok_or(KeyLookupError::NoKuid(obj))?;
        if self.revoked.keys.contains(&kuid) {
            return Err(KeyLookupError::KeyRevoked(obj));
        }
        self.keys.get(&kuid).ok_or(KeyLookupError::UnknownKey(obj))
    }

    fn is_revoked(&self, id: &RecordId) -> bool {
        self.revoked.records.contains(id)
    }
}

/// `keytool verify`.
pub(crate) fn verify(store: &DbStore, out: Out, file: &Path, at: Option<u64>) -> Result<Status> {
    let record = files::read_record(file)?;
    let now = at.unwrap_or_else(now_ns);
    let mut objects = vec![record.target()];
    if let Record::Del(d) = &record {
        objects.extend(d.links().map(|l| l.provider()));
    }
    let auth = StoreAuthority::load(store, objects)?;
    let result = record.verify(&auth, now).map_err(|e| auth.explain(&e));
    let kind = crate::output::kind_name(record.kind());
    out.emit(
        json!({
            "valid": result.is_ok(),
            "reason": result.as_ref().err(),
            "at": fmt_time(now),
            "record": crate::output::record_summary_json(&record),
        }),
        || match &result {
            Ok(()) => format!(
                "valid: {kind} {} grants {} on {} to {} (as of {})",
                record.id(),
                record.prots(),
                record.target(),
                record.holder(),
                fmt_time(now)
            ),
            Err(why) => format!("invalid: {kind} {}: {why}", record.id()),
        },
    );
    Ok(if result.is_ok() {
        Status::Yes
    } else {
        Status::No
    })
}

/// `keytool inspect FILE`: a record file, which needs no store.
pub(crate) fn inspect_file(
    out: Out,
    path: &Path,
    msg_out: Option<PathBuf>,
    sig_out: Option<PathBuf>,
    force: bool,
) -> Result<Status> {
    let record = files::read_record(path)?;
    if msg_out.is_some() || sig_out.is_some() {
        for f in msg_out.iter().chain(sig_out.iter()) {
            files::refuse_existing(f, force)?;
        }
        let (msg, sig) = match &record {
            Record::Cap(c) => (c.signed_message(), *c.signature()),
            Record::Del(d) => {
                let last = d.depth() - 1;
                let msg = d
                    .signed_message(last)
                    .ok_or_else(|| fail!("delegation has no link {last}"))?;
                let sig = d
                    .links()
                    .last()
                    .map(|l| *l.signature())
                    .ok_or_else(|| fail!("delegation has no links"))?;
                (msg, sig)
            }
        };
        let sig = sig
            .to_openssl()
            .map_err(|e| fail!("{}: {e}", path.display()))?;
        if let Some(m) = &msg_out {
            files::write_new(m, &msg, files::PUBLIC, force)?;
        }
        if let Some(s) = &sig_out {
            files::write_new(s, &sig, files::PUBLIC, force)?;
        }
    }
    out.emit(record_json(&record), || record_text(&record));
    Ok(Status::Yes)
}

/// `keytool inspect ID|NAME`: an object of the store (a file is [`inspect_file`]'s).
pub(crate) fn inspect_object(
    store: &DbStore,
    out: Out,
    what: &str,
    msg_out: Option<PathBuf>,
    sig_out: Option<PathBuf>,
) -> Result<Status> {
    let unknown = || {
        fail!(
            "{what}: no such file, and not an object id or a name {}",
            env::in_store(store)
        )
    };
    let oid = match crate::parse::id_ref(what) {
        Ok(crate::parse::IdRef::Id(id)) => id,
        Ok(crate::parse::IdRef::Name(n)) => store.name(&n)?.ok_or_else(unknown)?,
        Err(_) => return Err(unknown()),
    };
    if msg_out.is_some() || sig_out.is_some() {
        return Err(fail!(
            "--signed-message-out and --signature-out need a record file, not an object"
        ));
    }
    obj::show(store, out, oid)
}
