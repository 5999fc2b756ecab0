//! What every command needs from its environment: the store, the RNG, passphrases (from the
//! flags, or asked on the terminal), Argon2 parameters, and signing keys.

use std::path::PathBuf;

use getrandom::SysRng;
use rand_core::{TryRng, UnwrapErr};
use secctx::keypair::{self, KdfParams, KeyError};
use secctx::{DbStore, ObjectStore, StoreError};
use twizzler_capsec::{ObjID, SigningKey};
use zeroize::Zeroizing;

use crate::cli::{KdfArgs, NewPassArgs, PassArgs};
use crate::error::Result;
use crate::fail;
use crate::parse::IdRef;

/// Environment variable naming the store directory (after `--store`).
pub(crate) const STORE_ENV: &str = "TWZ_KEYTOOL_STORE";
/// Directory name of the store under the XDG data directory.
const STORE_DIR: &str = "twizzler-keytool";

/// The store directory: `--store`, else `$TWZ_KEYTOOL_STORE`, else
/// `$XDG_DATA_HOME/twizzler-keytool`, else `$HOME/.local/share/twizzler-keytool`.
pub(crate) fn store_dir(flag: Option<PathBuf>) -> Result<PathBuf> {
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
pub(crate) fn open_store(flag: Option<PathBuf>) -> Result<DbStore> {
    Ok(DbStore::open(store_dir(flag)?)?)
}

/// Opens the store for a command that only reads it (never waits for a writer).
pub(crate) fn open_store_read_only(flag: Option<PathBuf>) -> Result<DbStore> {
    Ok(DbStore::open_read_only(store_dir(flag)?)?)
}

/// "in the store DIR": how a message about something the store does not hold names the store
/// it looked in.
pub(crate) fn in_store(store: &DbStore) -> String {
    format!("in the store {}", store.dir().display())
}

/// The object `r` names: its id, or the object the store names so.
pub(crate) fn resolve(store: &DbStore, r: &IdRef) -> Result<ObjID> {
    match r {
        IdRef::Id(id) => Ok(*id),
        IdRef::Name(n) => store.name(n)?.ok_or_else(|| {
            fail!(
                "no object is named {n:?} {} (`keytool store info` lists the names)",
                in_store(store)
            )
        }),
    }
}

/// How to show object `id` to a user: `NAME (ID)` when the store names it, else the id. A
/// store that cannot list its names shows the id: a label is never worth an error.
pub(crate) fn label(store: &DbStore, id: ObjID) -> String {
    let names = store.names().unwrap_or_default();
    label_in(&names, id)
}

/// [`label`] over a list of names already read from the store.
pub(crate) fn label_in(names: &[(String, ObjID)], id: ObjID) -> String {
    match names.iter().find(|(_, o)| *o == id) {
        Some((n, _)) => format!("{n} ({id})"),
        None => id.to_string(),
    }
}

/// [`resolve`] for options that take a kuid: a name of a key pair (`keygen --name alice`)
/// names its signing key, and a kuid is the verifying key, so `--kuid alice` means
/// `alice.pub`.
pub(crate) fn resolve_kuid(store: &DbStore, r: &IdRef) -> Result<ObjID> {
    let id = resolve(store, r)?;
    if let IdRef::Name(_) = r
        && let Ok(obj) = store.get(id)
        && let Ok(info) = keypair::signing_key_info(&obj)
    {
        return Ok(info.verifying);
    }
    Ok(id)
}

/// [`resolve`] for an optional argument.
pub(crate) fn resolve_opt(store: &DbStore, r: &Option<IdRef>) -> Result<Option<ObjID>> {
    r.as_ref().map(|r| resolve(store, r)).transpose()
}

/// The OS random number generator, checked once so an unavailable RNG is an error and not a
/// panic later.
pub(crate) fn rng() -> Result<UnwrapErr<SysRng>> {
    SysRng
        .try_fill_bytes(&mut [0u8; 32])
        .map_err(|e| fail!("the OS random number generator is unavailable: {e}"))?;
    Ok(UnwrapErr(SysRng))
}

/// The passphrase the flags name, if any: the first line of a file (its line ending removed),
/// or an environment variable. Never from the command line itself.
pub(crate) fn passphrase(p: &PassArgs) -> Result<Option<Zeroizing<String>>> {
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

/// Whether there is a terminal to ask for a passphrase on: the controlling terminal,
/// `/dev/tty`, opens for reading and writing (rpassword reads from it, not from stdin).
fn terminal() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .is_ok()
}

/// Asks for a passphrase on the terminal with `prompt`, without echoing it.
fn ask(prompt: &str) -> Result<Zeroizing<String>> {
    rpassword::prompt_password(prompt)
        .map(Zeroizing::new)
        .map_err(|e| fail!("cannot read the passphrase from the terminal: {e}"))
}

/// The passphrase to seal a new signing key with (`keygen`, `import`): the one the flags name;
/// else, unless `--no-passphrase`, asked twice on the terminal when there is one, as ssh-keygen
/// does (an empty answer is no passphrase); else none.
pub(crate) fn new_passphrase(p: &NewPassArgs) -> Result<Option<Zeroizing<String>>> {
    if let Some(pp) = passphrase(&p.pass)? {
        return Ok(Some(pp));
    }
    if p.no_passphrase || !terminal() {
        return Ok(None);
    }
    let first = ask("Enter passphrase (empty for no passphrase): ")?;
    let again = ask("Enter same passphrase again: ")?;
    if first != again {
        return Err(fail!("the passphrases do not match"));
    }
    Ok(if first.is_empty() { None } else { Some(first) })
}

/// Argon2id parameters for new sealed keys: the default unless the hidden test knobs say
/// otherwise.
pub(crate) fn kdf(k: &KdfArgs) -> KdfParams {
    let mut p = KdfParams::DEFAULT;
    if let Some(m) = k.kdf_memory_kib {
        p.memory_kib = m;
    }
    if let Some(n) = k.kdf_passes {
        p.passes = n;
    }
    p
}

/// Loads signing key `id`, decrypting it when it is sealed with the passphrase from `pass`, or
/// else asked once on the terminal when there is one. Returns the key and its verifying-key
/// object's id.
pub(crate) fn signing_key(
    store: &DbStore,
    id: ObjID,
    pass: &PassArgs,
) -> Result<(SigningKey, ObjID)> {
    let obj = store.get(id).map_err(|e| match e {
        StoreError::NotFound(_) => fail!("signing key {id} does not exist {}", in_store(store)),
        e => e.into(),
    })?;
    let info = keypair::signing_key_info(&obj)?;
    let shown = label(store, id);
    let pp = if !info.protected {
        None
    } else if let Some(pp) = passphrase(pass)? {
        Some(pp)
    } else if terminal() {
        let pp = ask(&format!("Enter passphrase for signing key {shown}: "))?;
        if pp.is_empty() {
            return Err(fail!("no passphrase entered for signing key {shown}"));
        }
        Some(pp)
    } else {
        None
    };
    match keypair::load_signing_key(store, id, pp.as_deref().map(String::as_str)) {
        Ok(k) => Ok((k, info.verifying)),
        Err(KeyError::PassphraseRequired(_)) => Err(fail!(
            "signing key {shown} is passphrase-protected: pass --passphrase-file FILE or --passphrase-env VAR"
        )),
        Err(e) => Err(e.into()),
    }
}
