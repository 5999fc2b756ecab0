//! The command line (clap derive).
//!
//! One module per command group (`obj`, `ctx`, `tag` and `label`, `store`); the argument
//! groups several commands share in `args`; the long help texts in `help`; what each command
//! needs of the store in `access`. The top level and its commands are here.

use std::path::PathBuf;

use clap::{ArgGroup, Parser, Subcommand};
use twizzler_capsec::ObjID;

use crate::parse::{self, IdRef, RecordRef};

mod access;
mod args;
mod ctx;
mod difc;
mod help;
mod obj;
mod store;

pub(crate) use access::StoreAccess;
pub(crate) use args::{
    AccessArg, GrantArgs, Hash, KdfArgs, LabelArgs, NewPassArgs, PassArgs, RightsArg, Scheme,
    own_rights,
};
pub(crate) use ctx::CtxCmd;
pub(crate) use difc::{LabelCmd, TagCmd};
use help::{DIFC_HELP, TOP_HELP, UPSTREAM_HELP};
pub(crate) use obj::ObjCmd;
pub(crate) use store::StoreCmd;

/// Mint keys, capabilities and delegations for Twizzler's capability security, edit security
/// contexts, and check what they grant.
#[derive(Parser, Debug)]
#[command(name = "keytool", version, after_long_help = TOP_HELP, after_help = "Run `keytool --help` for the store location, value formats, exit codes and an example session.")]
pub(crate) struct Cli {
    /// The store directory [default: $TWZ_KEYTOOL_STORE, else $XDG_DATA_HOME/twizzler-keytool,
    /// else ~/.local/share/twizzler-keytool]
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        help_heading = "Global options"
    )]
    pub store: Option<PathBuf>,

    /// Print one JSON document on stdout instead of text
    #[arg(long, global = true, help_heading = "Global options")]
    pub json: bool,

    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Generate a key pair: a secret signing-key object and a public verifying-key object
    #[command(after_help = "\
The verifying-key id is what objects name as their kuid (`obj new --kuid`, `ctx new --kuid`).
Without --passphrase-file, --passphrase-env or --no-passphrase, keygen asks for a passphrase on
the terminal, twice (it is not echoed). Without a passphrase (an empty answer, --no-passphrase,
or no terminal) the signing key is stored unencrypted (mode 0600).

Examples:
  keytool keygen --name alice                         # asks for the passphrase
  keytool mint --key alice ...                        # the name, wherever an id is taken
  keytool keygen --scheme p256 --passphrase-file ~/.keytool-pass
  keytool keygen --no-passphrase")]
    Keygen {
        /// The signature scheme
        #[arg(long, value_enum, default_value_t = Scheme::Ed25519)]
        scheme: Scheme,
        /// Name the key pair: NAME is the signing key, NAME.pub the verifying key (a kuid
        /// argument also takes NAME); usable wherever an id is taken
        #[arg(long, value_name = "NAME", value_parser = parse::name)]
        name: Option<String>,
        #[command(flatten)]
        pass: NewPassArgs,
        #[command(flatten)]
        kdf: KdfArgs,
    },

    /// Create and show plain objects (the targets of capabilities)
    #[command(
        subcommand,
        after_help = "\
Example:
  keytool obj new --kuid VERIFYING --default r--
  keytool obj show OBJ"
    )]
    Obj(ObjCmd),

    /// Mint a capability: the target object's key grants rights to a security context
    #[command(after_help = "\
The key must be the one the target names as its kuid: keytool checks this in the store
(--unchecked skips the check, for targets kept elsewhere).

Example:
  keytool mint --key SIGNING --target OBJ --accessor CTX --prots r-x \\
      --gate 0x1000:0x1000:16 --expires 2030-01-01T00:00:00Z --out code.cap")]
    Mint {
        /// The signing-key object that signs for the target
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        key: IdRef,
        /// The object the capability grants access to
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        target: IdRef,
        /// The security context the capability is for
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        accessor: IdRef,
        #[command(flatten)]
        grant: GrantArgs,
        #[command(flatten)]
        pass: PassArgs,
    },

    /// Delegate: the context holding a capability or delegation grants a subset to another
    #[command(after_help = "\
The parent's holder (its accessor or receiver) provides the delegation and signs it with its
own key: the signing key whose verifying key the holder context names as its kuid. Gate and
expiry default to the parent's; they can only narrow.

Example:
  keytool delegate --parent rw.cap --key CTX_SIGNING --receiver CTX2 --prots r-- --out r.del")]
    Delegate {
        /// The capability or delegation file delegated from
        #[arg(long, value_name = "FILE")]
        parent: PathBuf,
        /// The signing key of the parent's holder context
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        key: IdRef,
        /// The context receiving the rights
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        receiver: IdRef,
        #[command(flatten)]
        grant: GrantArgs,
        #[command(flatten)]
        pass: PassArgs,
    },

    /// Verify a capability or delegation file: signatures, chain, expiry, revocation
    #[command(after_help = "\
Keys come from the store: the target's kuid for the capability, each provider context's kuid
for delegation links. Exit 0 if valid, 1 if not (with the reason), 2 on error.

Example:
  keytool verify rw.cap --at 31d")]
    Verify {
        /// The record file
        file: PathBuf,
        /// Verify as of TIME instead of now
        #[arg(long, value_name = "TIME", value_parser = parse::instant)]
        at: Option<u64>,
    },

    /// Show the fields of a record file or of a store object
    #[command(after_help = "\
A store object is described by kind: verifying key, signing key (never its secret), security
context (a summary; `ctx show` lists it), revocation list, or plain object. For a record,
--signed-message-out and --signature-out write what the signature covers and the signature in
the form OpenSSL reads (raw for Ed25519, DER for P-256); for a delegation, of its last link.

Examples:
  keytool inspect rw.cap
  keytool inspect rw.cap --signed-message-out msg.bin --signature-out sig.bin
  keytool inspect 0x2a --json")]
    Inspect {
        /// A record file, or an object id in the store
        what: String,
        /// Write the record's signed message (32 bytes) to FILE
        #[arg(long, value_name = "FILE")]
        signed_message_out: Option<PathBuf>,
        /// Write the record's signature, in OpenSSL's form, to FILE
        #[arg(long, value_name = "FILE")]
        signature_out: Option<PathBuf>,
        /// Replace the files above if they exist
        #[arg(long)]
        force: bool,
    },

    /// Create, edit and show security contexts
    #[command(
        subcommand,
        after_help = "\
Every edit is one locked read-modify-write of the context object that bumps its generation, so
concurrent edits are never lost and a failed edit changes nothing.

Example:
  keytool ctx new --kuid CTX_VERIFYING
  keytool ctx add CTX rw.cap
  keytool ctx mask CTX --global r-x
  keytool ctx show CTX"
    )]
    Ctx(CtxCmd),

    /// Simulate an access: what the kernel would decide on a page fault, explained
    #[command(after_help = "\
Runs the kernel's own decision (kernel-hooks) over the store: the first --ctx is the thread's
active context, the others inactive ones it may switch to. Prints the decision and, per
context, each record's verdict and the masks. Exit 0 if granted, 1 if denied, 2 on error.

When capabilities grant, the information flow rule decides too (`keytool tag --help`): a
denial names the tag, says why in words, and gives the command that would fix it; a grant
that relied on ownership says so (`granted rw-: declassified by medical− (record ...)`).

Examples:
  keytool check --ctx CTX --ctx CTX2 --target OBJ --offset 0x1000 --access read --at 1d
  keytool check --ctx reader --target notes --offset 0x1000 --access write --json")]
    Check {
        /// A context of the thread (repeat; the first is active)
        #[arg(long = "ctx", value_name = "ID", value_parser = parse::id_ref, required = true)]
        ctx: Vec<IdRef>,
        /// The object accessed
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        target: IdRef,
        /// The byte offset accessed (the instruction's offset for exec)
        #[arg(long, value_name = "N", value_parser = parse::number)]
        offset: u64,
        /// The kind of access
        #[arg(long, value_enum)]
        access: AccessArg,
        /// Decide as of TIME instead of now
        #[arg(long, value_name = "TIME", value_parser = parse::instant)]
        at: Option<u64>,
    },

    /// Export a key as PEM (public: SubjectPublicKeyInfo; secret: PKCS#8)
    #[command(after_help = "\
A verifying-key id, or a signing-key id without --secret, exports the public key (to stdout
without --out). --secret exports the signing key itself as PKCS#8 to a new file of mode 0600,
decrypting it with the passphrase if it is sealed. Both forms are what OpenSSL reads.

Examples:
  keytool export VERIFYING --out pub.pem
  keytool export SIGNING --secret --passphrase-env PASS --out key.pem")]
    Export {
        /// The key object (verifying or signing)
        #[arg(value_name = "ID", value_parser = parse::id_ref)]
        key: IdRef,
        /// The file to write (public keys: stdout when absent)
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Export the secret signing key
        #[arg(long)]
        secret: bool,
        /// Replace FILE if it exists
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        pass: PassArgs,
    },

    /// Import a PEM key: PKCS#8 makes a key pair, SubjectPublicKeyInfo a verifying key only
    #[command(after_help = "\
Accepts Ed25519 and P-256 keys as OpenSSL writes them (`openssl genpkey -algorithm ed25519`,
`openssl ecparam -name prime256v1 -genkey | openssl pkcs8 -topk8 -nocrypt`). A passphrase
seals the imported signing key in the store: for a private key, import asks for one on the
terminal as keygen does, unless --passphrase-file, --passphrase-env or --no-passphrase is given.

--raw-p256 imports upstream Twizzler's signing key instead: FILE holds its 32-byte P-256
secret scalar (what upstream's SigningKey::as_bytes gives) as 64 hex digits. The key pair
made signs exactly as the upstream key does; import prints its public key, which is upstream's
VerifyingKey bytes (`convert-upstream-cap` takes them).

Examples:
  openssl genpkey -algorithm ed25519 -out key.pem
  keytool import key.pem --passphrase-file ~/.keytool-pass
  keytool import owner.hex --raw-p256 --name owner")]
    Import {
        /// The PEM file (with --raw-p256: the hex file)
        file: PathBuf,
        /// FILE is upstream Twizzler's P-256 signing key: its secret scalar as 64 hex digits
        #[arg(long)]
        raw_p256: bool,
        /// The id of the new verifying-key object [default: random]
        #[arg(long, value_name = "ID", value_parser = parse::obj_id)]
        id: Option<ObjID>,
        /// Name the imported key as keygen --name does
        #[arg(long, value_name = "NAME", value_parser = parse::name)]
        name: Option<String>,
        #[command(flatten)]
        pass: NewPassArgs,
        #[command(flatten)]
        kdf: KdfArgs,
    },

    /// Convert an upstream Twizzler capability: verify upstream's signature, re-sign it here
    #[command(after_help = UPSTREAM_HELP)]
    ConvertUpstreamCap {
        /// The upstream capability, in the neutral JSON form below
        file: PathBuf,
        /// The target's upstream verifying key: its 65 bytes (uncompressed SEC1) as hex, or PEM
        #[arg(long, value_name = "FILE")]
        upstream_key: PathBuf,
        /// The signing key in the store: the upstream key itself (import --raw-p256)
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        key: IdRef,
        /// Write the converted capability to FILE (--out, --add-to or both)
        #[arg(long, value_name = "FILE", required_unless_present = "add_to")]
        out: Option<PathBuf>,
        /// Replace FILE if it exists
        #[arg(long)]
        force: bool,
        /// Add the converted capability to this context (its accessor)
        #[arg(long, value_name = "CTX", value_parser = parse::id_ref)]
        add_to: Option<IdRef>,
        /// Skip the store check that the target names the key as its kuid
        #[arg(long)]
        unchecked: bool,
        #[command(flatten)]
        pass: PassArgs,
    },

    /// Revoke a verifying key (everything it signed) or a single record, store-wide
    #[command(group(ArgGroup::new("what").required(true).args(["key", "record", "list"])),
        after_help = "\
The store's revocation list is applied by `verify` and `check`. Revoking a record also
revokes every delegation derived from it.

Examples:
  keytool revoke --key VERIFYING
  keytool revoke --record rw.cap
  keytool revoke --list --json")]
    Revoke {
        /// A verifying-key object (a signing-key id names its verifying key)
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        key: Option<IdRef>,
        /// A record: its file, or its id (64 hex digits)
        #[arg(long, value_name = "FILE|RECORD_ID", value_parser = parse::record_ref)]
        record: Option<RecordRef>,
        /// Show the revocation list
        #[arg(long)]
        list: bool,
    },

    /// Show what the store holds, or migrate a store of the old one-file-per-object format
    #[command(
        subcommand,
        after_help = "\
Examples:
  keytool store info
  keytool store migrate                       # the store directory holds old-format objects
  keytool store migrate --from ~/old-store"
    )]
    Store(StoreCmd),

    /// Create tags and mint or delegate their ownership (information flow control)
    #[command(subcommand, after_help = DIFC_HELP)]
    Tag(TagCmd),

    /// Show the label table's label of an object or context
    #[command(subcommand, after_help = DIFC_HELP)]
    Label(LabelCmd),

    /// Print a shell completion script (bash, zsh, fish, elvish or powershell)
    #[command(after_help = "\
Needs no store. Load the script in the shell, or install it where the shell looks.

Examples:
  source <(keytool completions bash)
  keytool completions zsh > ~/.zfunc/_keytool          # a directory in $fpath
  keytool completions fish > ~/.config/fish/completions/keytool.fish")]
    Completions {
        /// The shell
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },

    /// Print the man page (roff), or write one page per command with --out
    #[command(after_help = "\
Needs no store. Without --out, prints one page: keytool(1) with a section for every command.
With --out, writes keytool.1 and one page per command (keytool-keygen.1, keytool-ctx-add.1,
...) to DIR, creating it and replacing pages of those names.

Examples:
  keytool man | man -l -
  keytool man --out /usr/local/share/man/man1")]
    Man {
        /// Write keytool.1 and a page per command to DIR instead
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}
