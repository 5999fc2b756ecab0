//! `convert-upstream-cap`: one capability of upstream Twizzler, verified with upstream's key,
//! re-signed in this format by the same key.
//!
//! Every check comes before anything is written: the form, upstream's signature, the mapping of
//! each field ([`crate::upstream::convert`]), that the store's signing key is the upstream key,
//! that the target names that key as its kuid (unless `--unchecked`), and for `--add-to` that
//! the context exists and is the capability's accessor. Only then is the capability signed,
//! written to `--out`, and added to the context.

use std::path::Path;

use serde_json::{Value, json};
use twizzler_capsec::{Cap, ObjID, Record, SigningScheme, VerifyingKey};

use crate::cli::PassArgs;
use crate::cmd::{ctx, records, warn};
use crate::env;
use crate::error::{Result, Status};
use crate::fail;
use crate::files;
use crate::output::{Out, hash_name, hex, id, record_json, record_text};
use crate::parse::now_ns;
use crate::upstream::convert::{self, DEFAULT_GATE};
use crate::upstream::form;

/// What `convert-upstream-cap` was asked to do.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    /// The capability in the neutral form.
    pub file: &'a Path,
    /// The target's upstream verifying key.
    pub upstream_key: &'a Path,
    /// The signing key in the store.
    pub key: ObjID,
    /// Where to write the converted capability.
    pub out: Option<&'a Path>,
    /// Replace `out`.
    pub force: bool,
    /// The context to add it to.
    pub add_to: Option<ObjID>,
    /// Skip the check that the target names the key as its kuid.
    pub unchecked: bool,
    /// The signing key's passphrase.
    pub pass: &'a PassArgs,
}

/// Reads upstream's verifying key: its bytes (a 65-byte uncompressed SEC1 point, what upstream's
/// `VerifyingKey::as_bytes` gives) as hex, or a PEM public key.
pub(crate) fn read_upstream_key(path: &Path) -> Result<VerifyingKey> {
    let bytes = files::read(path)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| fail!("{}: not text (hex or PEM expected)", path.display()))?;
    let key = if text.contains("-----BEGIN") {
        VerifyingKey::from_public_key_pem(text).map_err(|e| fail!("{}: {e}", path.display()))?
    } else {
        let raw = hex_bytes(text).ok_or_else(|| {
            fail!(
                "{}: not hex (upstream's verifying key: 130 hex digits, the uncompressed SEC1 point) nor PEM",
                path.display()
            )
        })?;
        VerifyingKey::from_raw(SigningScheme::EcdsaP256, &raw).map_err(|e| {
            fail!(
                "{}: not a P-256 verifying key (65 bytes, uncompressed SEC1): {e}",
                path.display()
            )
        })?
    };
    if key.scheme() != SigningScheme::EcdsaP256 {
        return Err(fail!(
            "{}: a {} key; upstream signs with ECDSA P-256 only",
            path.display(),
            key.scheme()
        ));
    }
    Ok(key)
}

/// Hex digits (whitespace between them ignored, `0x` optional) as bytes; `None` if there are
/// none, an odd number, or a character that is not a hex digit.
pub(crate) fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    let digits: String = text.split_whitespace().collect();
    let digits = digits.strip_prefix("0x").unwrap_or(&digits);
    if digits.is_empty() || !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .as_bytes()
        .chunks_exact(2)
        .map(|p| {
            let p = std::str::from_utf8(p).ok()?;
            u8::from_str_radix(p, 16).ok()
        })
        .collect()
}

/// `keytool convert-upstream-cap`.
pub(crate) fn convert_cap(store: &secctx::DbStore, out: Out, req: &Request<'_>) -> Result<Status> {
    if let Some(o) = req.out {
        files::refuse_existing(o, req.force)?;
    }
    let file = req.file;
    let bytes = files::read(file)?;
    let text =
        std::str::from_utf8(&bytes).map_err(|_| fail!("{}: not UTF-8 text", file.display()))?;
    let up = form::parse(text).map_err(|e| fail!("{}: {e}", file.display()))?;
    let upstream_key = read_upstream_key(req.upstream_key)?;
    let refused = |e: convert::Refusal| fail!("{}: refused: {e}", file.display());
    convert::verify(&up, &upstream_key).map_err(refused)?;
    let grant = convert::grant(&up, now_ns()).map_err(refused)?;
    if let Some(ctx) = req.add_to {
        if ctx != grant.accessor {
            return Err(fail!(
                "{}: the capability is for context {}, not {ctx}; it would grant nothing there",
                file.display(),
                grant.accessor
            ));
        }
        ctx::check_exists(store, ctx)?;
    }
    let (sk, vk) = env::signing_key(store, req.key, req.pass)?;
    if sk.verifying_key() != upstream_key {
        return Err(fail!(
            "key {} is not the upstream key (its public key differs from {}): the conversion is signed by the key that signed the upstream capability; import that key with `keytool import --raw-p256`",
            req.key,
            req.upstream_key.display()
        ));
    }
    records::check_signs_for(store, grant.target, "target", req.key, vk, req.unchecked)?;
    if (up.gate.offset, up.gate.length, up.gate.align) == DEFAULT_GATE {
        warn(
            "the gate is upstream's default, 0:1000000000:1, converted as it is: not the whole 1 GiB object (re-mint with --gate whole if the whole object was meant)",
        );
    }
    let cap = Cap::mint(grant, &sk).map_err(|e| fail!("cannot sign: {e}"))?;
    let record = Record::Cap(cap);
    if let Some(o) = req.out {
        files::write_new(o, &files::encode_record(&record), files::PUBLIC, req.force)?;
    }
    let added = match req.add_to {
        Some(ctx) => Some((ctx, ctx::add_record(store, ctx, &record)?)),
        None => None,
    };
    let mut j = record_json(&record);
    if let Value::Object(m) = &mut j {
        m.insert(
            "upstream".into(),
            json!({
                "verified": true,
                "hash": hash_name(grant.hash),
                "signed_message": hex(&convert::message(&up)),
                "key": hex(&upstream_key.to_raw()),
            }),
        );
        m.insert("out".into(), json!(req.out));
        m.insert(
            "added_to".into(),
            match added {
                Some((ctx, (generation, held))) => {
                    json!({ "ctx": id(ctx), "generation": generation, "already_held": held })
                }
                None => Value::Null,
            },
        );
    }
    out.emit(j, || {
        let mut s = format!(
            "verified upstream's signature (ECDSA P-256 over {} of the 78-byte message)\n",
            hash_name(grant.hash)
        );
        if let Some(o) = req.out {
            s.push_str(&format!("wrote {}\n", o.display()));
        }
        s.push_str(&record_text(&record));
        if let Some((ctx, (generation, held))) = added {
            let label = env::label(store, ctx);
            s.push_str(&if held {
                format!("context {label} already holds it (unchanged, generation {generation})")
            } else {
                format!("added it to context {label} (generation {generation})")
            });
        }
        s.trim_end().to_owned()
    });
    Ok(Status::Yes)
}
