//! Argument groups and values shared by several commands: passphrases, key derivation cost,
//! signature scheme and hash, access kinds, the fields of a new record, labels and ownership
//! rights.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use twizzler_capsec::{Expiry, Gate, Protections};

use crate::parse::{self, IdRef};

/// Where a passphrase comes from (never the command line itself, which other users can see).
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct PassArgs {
    /// Read the passphrase from the first line of FILE
    #[arg(long, value_name = "FILE", conflicts_with = "passphrase_env")]
    pub passphrase_file: Option<PathBuf>,
    /// Read the passphrase from environment variable VAR
    #[arg(long, value_name = "VAR")]
    pub passphrase_env: Option<String>,
}

/// The passphrase of a new signing key (`keygen`, `import`): the flags of [`PassArgs`], or
/// `--no-passphrase` to store the key unencrypted without asking on the terminal.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct NewPassArgs {
    /// --passphrase-file or --passphrase-env.
    #[command(flatten)]
    pub pass: PassArgs,
    /// Do not ask for a passphrase on the terminal: store the signing key unencrypted
    #[arg(long, conflicts_with_all = ["passphrase_file", "passphrase_env"])]
    pub no_passphrase: bool,
}

/// Argon2id cost of new sealed keys. Hidden: for tests, which need them cheap.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct KdfArgs {
    /// Argon2id memory in KiB for new sealed keys
    #[arg(long, hide = true, hide_env = true, env = "TWZ_KEYTOOL_KDF_MEMORY_KIB")]
    pub kdf_memory_kib: Option<u32>,
    /// Argon2id passes for new sealed keys
    #[arg(long, hide = true, hide_env = true, env = "TWZ_KEYTOOL_KDF_PASSES")]
    pub kdf_passes: Option<u32>,
}

/// A signature scheme.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// Ed25519 (the default: faster to verify)
    Ed25519,
    /// ECDSA over NIST P-256 (upstream Twizzler's scheme)
    P256,
}

/// The hash of a record's signed message.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hash {
    /// BLAKE3 (the default)
    Blake3,
    /// SHA-256
    Sha256,
}

/// A kind of access.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AccessArg {
    /// A load (needs r)
    Read,
    /// A store (needs rw)
    Write,
    /// An instruction fetch (needs rx)
    Exec,
}

/// Fields of a new record shared by `mint` and `delegate`.
#[derive(Args, Debug, Clone)]
pub(crate) struct GrantArgs {
    /// The rights granted, as rwx (e.g. rw-, r--)
    #[arg(long, value_name = "PROTS", value_parser = parse::prots)]
    pub prots: Protections,
    /// The byte range (data) or entry points (code), `OFFSET:LENGTH[:ALIGN]`
    #[arg(long, value_name = "GATE", value_parser = parse::gate)]
    pub gate: Option<Gate>,
    /// When it stops granting: TIME or `never`
    #[arg(long, value_name = "TIME", value_parser = parse::expiry)]
    pub expires: Option<Expiry>,
    /// The hash of the signed message
    #[arg(long, value_enum, default_value_t = Hash::Blake3)]
    pub hash: Hash,
    /// The file to write the record to
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Replace FILE if it exists
    #[arg(long)]
    pub force: bool,
    /// Skip the store checks that the key signs for the record (for objects or contexts kept
    /// in another store); a record signed by the wrong key will not verify
    #[arg(long)]
    pub unchecked: bool,
}

/// A label on the command line (`docs/DIFC.md` §1.2): tags by name or id.
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct LabelArgs {
    /// Secrecy tags, comma-separated (names or ids of tag objects: `keytool tag create`)
    #[arg(long, value_name = "TAG,...", value_parser = parse::id_ref, value_delimiter = ',')]
    pub secrecy: Vec<IdRef>,
    /// Integrity tags, comma-separated
    #[arg(long, value_name = "TAG,...", value_parser = parse::id_ref, value_delimiter = ',')]
    pub integrity: Vec<IdRef>,
}

impl LabelArgs {
    /// Whether any tag was given.
    pub(crate) fn is_empty(&self) -> bool {
        self.secrecy.is_empty() && self.integrity.is_empty()
    }
}

/// The rights of an ownership record: `+`, `-` or `+-`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RightsArg(pub twizzler_capsec::OwnRights);

/// Parses `+`, `-`, `+-` or `-+` (U+2212 `−` is accepted for `-`).
pub(crate) fn own_rights(s: &str) -> Result<RightsArg, String> {
    use twizzler_capsec::OwnRights;
    let mut r = OwnRights::empty();
    for c in s.trim().chars() {
        let bit = match c {
            '+' => OwnRights::PLUS,
            '-' | '\u{2212}' => OwnRights::MINUS,
            _ => return Err(format!("{s:?}: rights are +, - or +- (add, drop)")),
        };
        if r.contains(bit) {
            return Err(format!("{s:?} names a right twice"));
        }
        r |= bit;
    }
    if r.is_empty() {
        return Err("rights are empty: +, - or +-".into());
    }
    Ok(RightsArg(r))
}
