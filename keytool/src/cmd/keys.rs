//! `keygen`, `export`, `import`.

use std::path::{Path, PathBuf};

use secctx::keypair::{self, KeyPairIds};
use secctx::{DbStore, ObjectStore, StoreError};
use serde_json::json;
use twizzler_capsec::{ObjID, SigningKey, SigningScheme, VerifyingKey};
use zeroize::Zeroizing;

use crate::cli::{KdfArgs, NewPassArgs, PassArgs, Scheme};
use crate::env;
use crate::error::{Result, Status};
use crate::fail;
use crate::files;
use crate::output::{Out, hex, id};

fn scheme_of(s: Scheme) -> SigningScheme {
    match s {
        Scheme::Ed25519 => SigningScheme::Ed25519,
        Scheme::P256 => SigningScheme::EcdsaP256,
    }
}

fn pass_str(p: &Option<Zeroizing<String>>) -> Option<&str> {
    p.as_deref().map(String::as_str)
}

/// `keytool keygen`.
pub(crate) fn keygen(
    store: &DbStore,
    out: Out,
    scheme: Scheme,
    name: Option<&str>,
    pass: &NewPassArgs,
    kdf: &KdfArgs,
) -> Result<Status> {
    check_free(store, name)?;
    let pp = env::new_passphrase(pass)?;
    let mut rng = env::rng()?;
    let scheme = scheme_of(scheme);
    let key = SigningKey::generate(scheme, &mut rng);
    let ids = KeyPairIds {
        signing: keypair::random_id(&mut rng),
        verifying: keypair::random_id(&mut rng),
    };
    keypair::store_keypair_named(
        store,
        &key,
        ids,
        pass_str(&pp),
        env::kdf(kdf),
        &mut rng,
        name,
    )?;
    out.emit(
        json!({
            "scheme": scheme.name(),
            "signing": id(ids.signing),
            "verifying": id(ids.verifying),
            "name": name,
            "protected": pp.is_some(),
        }),
        || {
            format!(
                "{scheme} key pair{}\nsigning key    {}{}\nverifying key  {}{}  (objects name it as their kuid)",
                if pp.is_some() { ", sealed with the passphrase" } else { " (signing key not encrypted)" },
                ids.signing,
                name.map_or(String::new(), |n| format!("  {n}")),
                ids.verifying,
                name.map_or(String::new(), |n| format!("  {n}.pub")),
            )
        },
    );
    Ok(Status::Yes)
}

/// Refuses a name that names an object already, before any slow work (the transaction that
/// takes the name checks again).
pub(crate) fn check_free(store: &DbStore, name: Option<&str>) -> Result<()> {
    for n in name
        .into_iter()
        .flat_map(|n| [n.to_owned(), format!("{n}.pub")])
    {
        if let Some(id) = store.name(&n)? {
            return Err(fail!("the name {n:?} already names {id}"));
        }
    }
    Ok(())
}

/// What a key object holds.
enum KeyObj {
    Verifying(VerifyingKey),
    Signing { verifying: ObjID },
}

fn key_object(store: &DbStore, key: ObjID) -> Result<KeyObj> {
    let obj = store.get(key).map_err(|e| match e {
        StoreError::NotFound(_) => fail!("key {key} does not exist {}", env::in_store(store)),
        e => e.into(),
    })?;
    match obj.data.get(..4) {
        Some(b"TZVK") => Ok(KeyObj::Verifying(keypair::parse_verifying_key(&obj)?)),
        Some(b"TZSK") => Ok(KeyObj::Signing {
            verifying: keypair::signing_key_info(&obj)?.verifying,
        }),
        _ => Err(fail!("object {key} is not a key object")),
    }
}

/// `keytool export`.
pub(crate) fn export(
    store: &DbStore,
    out: Out,
    key: ObjID,
    file: Option<PathBuf>,
    secret: bool,
    force: bool,
    pass: &PassArgs,
) -> Result<Status> {
    let kobj = key_object(store, key)?;
    if secret {
        if !matches!(kobj, KeyObj::Signing { .. }) {
            return Err(fail!(
                "{key} is a verifying key: --secret needs a signing-key id"
            ));
        }
        let file =
            file.ok_or_else(|| fail!("--secret needs --out FILE (a new file of mode 0600)"))?;
        let (sk, _) = env::signing_key(store, key, pass)?;
        let pem = sk.to_pkcs8_pem()?;
        files::write_new(&file, pem.as_bytes(), files::SECRET, force)?;
        out.emit(
            json!({ "key": id(key), "kind": "pkcs8", "scheme": sk.scheme().name(), "out": file }),
            || {
                format!(
                    "wrote the {} signing key {} to {} (PKCS#8, mode 0600)",
                    sk.scheme(),
                    env::label(store, key),
                    file.display()
                )
            },
        );
        return Ok(Status::Yes);
    }
    let (vid, vk) = match kobj {
        KeyObj::Verifying(vk) => (key, vk),
        KeyObj::Signing { verifying } => {
            (verifying, keypair::load_verifying_key(store, verifying)?)
        }
    };
    let pem = vk.to_public_key_pem()?;
    match file {
        Some(file) => {
            files::write_new(&file, pem.as_bytes(), files::PUBLIC, force)?;
            out.emit(
                json!({ "key": id(vid), "kind": "spki", "scheme": vk.scheme().name(), "out": file }),
                || format!("wrote the {} verifying key {} to {} (SubjectPublicKeyInfo)", vk.scheme(), env::label(store, vid), file.display()),
            );
        }
        None => out.emit(
            json!({ "key": id(vid), "kind": "spki", "scheme": vk.scheme().name(), "pem": pem }),
            || pem.clone(),
        ),
    }
    Ok(Status::Yes)
}

/// Upstream Twizzler's signing key: a P-256 secret scalar as 64 hex digits (whitespace around
/// and between them ignored, `0x` optional), as upstream's `SigningKey::as_bytes` gives it.
fn upstream_p256_key(file: &Path, text: &str) -> Result<SigningKey> {
    let digits = Zeroizing::new(text.split_whitespace().collect::<String>());
    let digits = digits.strip_prefix("0x").unwrap_or(&digits);
    let bad = || {
        fail!(
            "{}: not a raw P-256 signing key (64 hex digits: upstream's 32-byte secret scalar)",
            file.display()
        )
    };
    if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut scalar = Zeroizing::new([0u8; 32]);
    for (o, pair) in scalar.iter_mut().zip(digits.as_bytes().chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).map_err(|_| bad())?;
        *o = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
    }
    SigningKey::from_raw(SigningScheme::EcdsaP256, scalar.as_slice()).map_err(|e| {
        fail!(
            "{}: not a P-256 signing key (the scalar must be 1..n-1): {e}",
            file.display()
        )
    })
}

/// The file `keytool import` reads, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ImportFile<'a> {
    /// The file.
    pub path: &'a Path,
    /// It holds upstream Twizzler's raw P-256 scalar in hex, not PEM.
    pub raw_p256: bool,
}

/// `keytool import`.
pub(crate) fn import(
    store: &DbStore,
    out: Out,
    src: ImportFile<'_>,
    vid: Option<ObjID>,
    name: Option<&str>,
    pass: &NewPassArgs,
    kdf: &KdfArgs,
) -> Result<Status> {
    let (file, raw_p256) = (src.path, src.raw_p256);
    check_free(store, name)?;
    let bytes = Zeroizing::new(files::read(file)?);
    let kind = if raw_p256 { "hex" } else { "PEM" };
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| fail!("{}: not a {kind} file (not text)", file.display()))?;
    let mut rng = env::rng()?;
    let verifying = match vid {
        Some(v) => v,
        None => keypair::random_id(&mut rng),
    };
    let upstream = if raw_p256 {
        Some(upstream_p256_key(file, text)?)
    } else {
        None
    };
    if upstream.is_none() && text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        return Err(fail!(
            "{}: encrypted PKCS#8 is not supported; decrypt it first (openssl pkcs8 -in {0} -out plain.pem) and import with --passphrase-file",
            file.display()
        ));
    }
    let private = match upstream {
        Some(sk) => Some(sk),
        None if text.contains("-----BEGIN PRIVATE KEY-----") => {
            Some(SigningKey::from_pkcs8_pem(text).map_err(|e| fail!("{}: {e}", file.display()))?)
        }
        None => None,
    };
    if let Some(sk) = private {
        let pp = env::new_passphrase(pass)?;
        let ids = KeyPairIds {
            signing: keypair::random_id(&mut rng),
            verifying,
        };
        keypair::store_keypair_named(
            store,
            &sk,
            ids,
            pass_str(&pp),
            env::kdf(kdf),
            &mut rng,
            name,
        )?;
        let sealed = if pp.is_some() {
            ", sealed with the passphrase"
        } else {
            " (signing key not encrypted)"
        };
        let mut report = json!({
            "scheme": sk.scheme().name(),
            "signing": id(ids.signing),
            "verifying": id(ids.verifying),
            "protected": pp.is_some(),
        });
        if raw_p256 {
            // Printed so the adopter can compare it with upstream's verifying key.
            let public = hex(&sk.verifying_key().to_raw());
            report["public_key"] = json!(public);
            out.emit(report, || {
                format!(
                    "imported upstream's P-256 key pair{sealed}\nsigning key    {}\nverifying key  {}\npublic key     {public}  (upstream's VerifyingKey bytes)",
                    ids.signing, ids.verifying
                )
            });
        } else {
            out.emit(report, || {
                format!(
                    "imported a {} key pair{sealed}\nsigning key    {}\nverifying key  {}",
                    sk.scheme(),
                    ids.signing,
                    ids.verifying
                )
            });
        }
        return Ok(Status::Yes);
    }
    if text.contains("-----BEGIN PUBLIC KEY-----") {
        let vk = VerifyingKey::from_public_key_pem(text)
            .map_err(|e| fail!("{}: {e}", file.display()))?;
        store.transact(|tx| {
            tx.create(&keypair::verifying_key_object(verifying, &vk))?;
            if let Some(n) = name {
                tx.set_name(n, verifying)?;
            }
            Ok::<(), StoreError>(())
        })?;
        out.emit(
            json!({
                "scheme": vk.scheme().name(),
                "verifying": id(verifying),
                "public_key": hex(&vk.to_raw()),
            }),
            || {
                format!(
                    "imported a {} verifying key\nverifying key  {verifying}",
                    vk.scheme()
                )
            },
        );
        return Ok(Status::Yes);
    }
    Err(fail!(
        "{}: no PEM \"PRIVATE KEY\" (PKCS#8) or \"PUBLIC KEY\" (SubjectPublicKeyInfo) block",
        file.display()
    ))
}
