//! What every command needs from its environment: the store, the RNG, passphrases, Argon2
//! parameters, and signing keys.

use std::path::PathBuf;

use getrandom::SysRng;
use rand_core::{TryRng, UnwrapErr};
use secctx::keypair::{self, KdfParams, KeyError};
use secctx::{DbStore, ObjectStore, StoreError};
use twizzler_capsec::{ObjID, SigningKey};
use zeroize::Zeroizing;

use crate::cli::{KdfArgs, PassArgs};
use crate::error::Result;
use crate::fail;

/// Environment variable naming the store directory (after `--store`).
pub const STORE_ENV: &str = "TWZ_KEYTOOL_STORE";
/// Directory name of the store under the XDG data directory.
const STORE_DIR: &str = "twizzler-keytool";

/// The store directory: `--store`, else `$TWZ_KEYTOOL_STORE`, else
/// `$XDG_DATA_HOME/twizzler-keytool`, else `$HOME/.local/share/twizzler-keytool`.
pub fn store_dir(flag: Option<PathBuf>) -> Result<PathBuf> {
    let nonempty = |v: Option<std::ffi::OsString>| v.filter(|s| !s.is_empty());
    if let Some(p) = flag.filter(|p| !p.as_os_str().is_empty()) {
        return Ok(p);
    }
    if let Some(p) = nonempty(std::env::var_os(STORE_ENV)) {
        return Ok(p.into());
    }
    // The XDG specification says relative paths are to be ignored.
    if let Some(p) = nonempty(std::env::var_os("XDG_DATA_HOME")).map(PathBuf::from)
        && p.is_absolute()
    {
        return Ok(p.join(STORE_DIR));
    }
    if let Some(h) = nonempty(std::env::var_os("HOME")) {
        return Ok(PathBuf::from(h).join(".local/share").join(STORE_DIR));
    }
    Err(fail!(
        "no store: pass --store DIR or set {STORE_ENV} (neither XDG_DATA_HOME nor HOME is set)"
    ))
}

/// Opens the store.
pub fn open_store(flag: Option<PathBuf>) -> Result<DbStore> {
    Ok(DbStore::open(store_dir(flag)?)?)
}

/// The OS random number generator, checked once so an unavailable RNG is an error and not a
/// panic later.
pub fn rng() -> Result<UnwrapErr<SysRng>> {
    SysRng
        .try_fill_bytes(&mut [0u8; 32])
        .map_err(|e| fail!("the OS random number generator is unavailable: {e}"))?;
    Ok(UnwrapErr(SysRng))
}

/// The passphrase the flags name, if any: the first line of a file (its line ending removed),
/// or an environment variable. Never from the command line itself.
pub fn passphrase(p: &PassArgs) -> Result<Option<Zeroizing<String>>> {
    let text = if let Some(f) = &p.passphrase_file {
        let bytes = std::fs::read(f).map_err(|e| crate::error::io("read passphrase file", f, e))?;
        let bytes = Zeroizing::new(bytes);
        let s = std::str::from_utf8(&bytes)
            .map_err(|_| fail!("passphrase file {} is not UTF-8", f.display()))?;
        Zeroizing::new(s.split(['\n', '\r']).next().unwrap_or_default().to_owned())
    } else if let Some(v) = &p.passphrase_env {
        match std::env::var(v) {
            Ok(s) => Zeroizing::new(s),
            Err(std::env::VarError::NotPresent) => {
                return Err(fail!(
                    "environment variable {v} (--passphrase-env) is not set"
                ));
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(fail!("environment variable {v} is not UTF-8"));
            }
        }
    } else {
        return Ok(None);
    };
    if text.is_empty() {
        return Err(fail!("the passphrase is empty"));
    }
    Ok(Some(text))
}

/// Argon2id parameters for new sealed keys: the default unless the hidden test knobs say
/// otherwise.
pub fn kdf(k: &KdfArgs) -> KdfParams {
    let mut p = KdfParams::DEFAULT;
    if let Some(m) = k.kdf_memory_kib {
        p.memory_kib = m;
    }
    if let Some(n) = k.kdf_passes {
        p.passes = n;
    }
    p
}

/// Loads signing key `id`, decrypting it with the passphrase from `pass` when it is sealed.
/// Returns the key and its verifying-key object's id.
pub fn signing_key<S: ObjectStore>(
    store: &S,
    id: ObjID,
    pass: &PassArgs,
) -> Result<(SigningKey, ObjID)> {
    let obj = store.get(id).map_err(|e| match e {
        StoreError::NotFound(_) => fail!("signing key {id} does not exist in the store"),
        e => e.into(),
    })?;
    let info = keypair::signing_key_info(&obj)?;
    let pp = if info.protected {
        passphrase(pass)?
    } else {
        None
    };
    match keypair::load_signing_key(store, id, pp.as_deref().map(String::as_str)) {
        Ok(k) => Ok((k, info.verifying)),
        Err(KeyError::PassphraseRequired(_)) => Err(fail!(
            "signing key {id} is passphrase-protected: pass --passphrase-file FILE or --passphrase-env VAR"
        )),
        Err(e) => Err(e.into()),
    }
}
