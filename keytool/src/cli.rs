//! The command line (clap derive).

use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use twizzler_capsec::{Expiry, Gate, ObjID, Protections};

use crate::parse::{self, IdRef, RecordRef};

const TOP_HELP: &str = "\
The store:
  Keys, objects, contexts and the revocation list live in one database (store.redb, mode
  0600) in the store directory: --store DIR, else $TWZ_KEYTOOL_STORE, else
  $XDG_DATA_HOME/twizzler-keytool, else ~/.local/share/twizzler-keytool. Every change is one
  transaction; several keytools and a dist-bridge node may share a store. Commands that only
  read open it read-only and never create one (a missing store is an error naming the path
  looked in); commands that write create it. store.redb must be a regular file: a symbolic
  link, a FIFO, a directory or a device there is refused, never followed or waited on (to
  keep a store elsewhere, point --store at it or link its directory). A directory of the
  old one-file-per-object format is refused until `keytool store migrate` copies it.
  Capabilities and delegations are plain files you pass around (their canonical binary
  encoding). `keytool store info` shows what a store holds.

Values:
  ID      an object id: up to 32 hex digits, 0x optional (keytool prints all 32), or a name
          given with --name (keygen --name alice names the signing key alice and the
          verifying key alice.pub)
  PROTS   rights as rwx, r--, rw-, --- (none)
  GATE    OFFSET:LENGTH[:ALIGN], numbers decimal or 0x hex with an optional k/m/g suffix;
          `whole` is the whole object (the default)
  TIME    now | RFC 3339 (2030-01-01T00:00:00Z, ...+02:00) | a duration from now (30d, 12h,
          1h30m, 2w; -1h is an hour ago) | @NANOSECONDS since the epoch; --expires also
          takes `never`

Passphrases:
  A signing key can be sealed with a passphrase. `keygen` and `import` ask for one on the
  terminal, twice, as ssh-keygen does (an empty answer stores the key unencrypted);
  commands that use a sealed key (mint, delegate, export --secret) ask for it once. For
  scripts, --passphrase-file FILE (its first line) or --passphrase-env VAR give it instead
  and are never overridden by the terminal; --no-passphrase skips the question of keygen and
  import. Without a terminal nothing is asked: keygen and import store the key unencrypted
  and a sealed key needs one of the two flags. A passphrase is never taken from the command
  line itself, which other users can see.

Output and exit status:
  --json prints one JSON document on stdout instead of text. Errors are one line on stderr,
  `keytool: <message>`. Exit 0: success (granted, valid); 1: `check` denied or `verify`
  invalid; 2: an error (usage, I/O, a missing or corrupt object or file, a wrong
  passphrase). A failing command changes nothing: its store changes commit as one
  transaction, and output files are replaced atomically.

Example session:
  keytool keygen --scheme ed25519                     # prints SIGNING and VERIFYING ids
  keytool obj new --kuid VERIFYING                    # an object the key signs for: OBJ
  keytool ctx new                                     # a security context: CTX
  keytool mint --key SIGNING --target OBJ --accessor CTX --prots rw- --expires 30d --out rw.cap
  keytool ctx add CTX rw.cap
  keytool check --ctx CTX --target OBJ --offset 0x1000 --access write
  keytool revoke --record rw.cap
  keytool check --ctx CTX --target OBJ --offset 0x1000 --access write   # now denied (exit 1)";

const UPSTREAM_HELP: &str = "\
Upstream Twizzler (its twizzler-security crate) signs a capability over 78 bytes, all
little-endian: accessor and target (16 bytes each), protections and flags (2 each), revocation
(16), gate offset, length and align (8 each), then two zero bytes. It hashes them with BLAKE3
(flags 1) or SHA-256 (flags 2) and signs the digest with ECDSA P-256. This command rebuilds
that message, checks the signature with --upstream-key, and signs the same grant in this
format with --key, which must be that same key (so only its holder can convert). Every field
maps one to one, or nothing is written:
  target, accessor  the same ids
  protections       READ 1, WRITE 2, EXEC 4; any other bit is refused
  flags             exactly 1 or 2; the converted capability uses the same hash
  revocation        the expiry, ns since the epoch; 0 (upstream's default) is never; a time
                    that has passed, or one after 2554 (our expiry is 64 bits), is refused
  gate              the same offset, length and align; length 0, align 0 or an end past 1 GiB
                    is refused. Upstream's default, 0:1000000000:1, is not the whole 1 GiB
                    object and is converted as it is (with a warning)

The capability file (upstream's Cap shows these fields with {:?}; its flags, gate and
signature have no other public view):
  {
    \"format\": \"twizzler-upstream-cap/1\",
    \"target\": \"0x1234\",               object ids: up to 32 hex digits
    \"accessor\": \"0x5678\",
    \"protections\": 1,
    \"flags\": 2,
    \"revocation\": 0,                  or a string of decimal digits (up to 2^128 - 1)
    \"gate\": { \"offset\": 0, \"length\": 1000000000, \"align\": 1 },
    \"signature\": \"<128 hex digits>\"  r then s; or a list of 64 byte values
  }
Unknown, missing or repeated fields are refused. Upstream's Debug prints ids as hex without
0x, the protections by name (translate them to the bits above), the flags' bits, the
revocation as `inner`, and the signature's `buf` as a list of bytes.

The result is signed with ECDSA P-256 and the upstream hash: a kernel verifies it only when
built with P-256 (and SHA-256 for flags 2); the Twizzler port as patched leaves both out.

Revocation does not carry over: upstream has no revocation list, so a capability retired there
is still validly signed. Convert only the ones that should live on; revoke a converted one with
`keytool revoke` (converting it again gives the same record, still revoked).

Examples:
  keytool import owner.hex --raw-p256 --name owner        # prints the public key
  keytool obj new --id 0x1234 --kuid owner
  keytool ctx new --id 0x5678
  keytool convert-upstream-cap cap.json --upstream-key owner.pub.hex --key owner \\
      --out cap.cap --add-to 0x5678";

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
    /// The byte range (data) or entry points (code), OFFSET:LENGTH[:ALIGN]
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

const DIFC_HELP: &str = "\
Information flow control (docs/DIFC.md). A tag is an object whose key signs its ownership
records; a label is a set of secrecy tags and a set of integrity tags. Objects get a label at
creation (fixed for life), contexts a principal label (registered at creation, changed only by
`ctx relabel` with the context's own ownership). Reads need the object's secrecy within the
context's and the context's integrity within the object's; writes need that and the reverse,
except for the tags whose `-` (secrecy: declassify) or `+` (integrity: endorse) the writer owns.

Walk-through (secret read, then public write; a declassifier):
  keytool keygen --name owner --no-passphrase
  keytool tag create medical --key owner
  keytool ctx new --name reader
  keytool obj new --name diagnoses --kuid owner --secrecy medical --as reader
  keytool obj new --name notes-public --kuid owner --as reader
  keytool tag grant medical --to reader --rights +
  keytool ctx relabel reader --secrecy medical
  keytool check --ctx reader --target notes-public --offset 0x1000 --access write   # denied: how to fix
  keytool keygen --name owner-ctx --no-passphrase
  keytool ctx new --name boss --kuid owner-ctx
  keytool tag grant medical --to boss --rights +-
  keytool tag delegate medical --from boss --to reader --rights -
  keytool check --ctx reader --target notes-public --offset 0x1000 --access write   # granted: declassified";

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

/// `keytool obj ...`
#[derive(Subcommand, Debug)]
pub(crate) enum ObjCmd {
    /// Create a plain object: a target that capabilities can grant access to
    #[command(after_help = "\
--kuid names the verifying-key object that signs capabilities for it; --default gives rights
every context has without a capability.

Examples:
  keytool obj new --kuid VERIFYING --default r--
  keytool obj create --name diagnoses --kuid owner --secrecy medical --as reader
  keytool obj new --name firmware --kuid owner --integrity vetted --as vetter   # needs vetted+")]
    #[command(visible_alias = "create")]
    New {
        /// The object's id [default: random]
        #[arg(long, value_name = "ID", value_parser = parse::obj_id)]
        id: Option<ObjID>,
        /// A name for it in the store, usable wherever an id is taken (letters, digits, -_.@+)
        #[arg(long, value_name = "NAME", value_parser = parse::name)]
        name: Option<String>,
        /// The verifying-key object that signs for it
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        kuid: Option<IdRef>,
        /// Rights every context has on it
        #[arg(long, value_name = "PROTS", value_parser = parse::prots, default_value = "---")]
        default: Protections,
        /// Accept a kuid that is not a verifying-key object in this store
        #[arg(long)]
        unchecked: bool,
        /// The object's data label, fixed at creation [default: the --as context's label]
        #[command(flatten)]
        label: LabelArgs,
        /// Create it as this context: the label is checked as a write by it (carrying a
        /// secrecy tag the label lacks needs its -, an integrity tag it lacks needs its +)
        /// [default: a creator with the empty label and no ownership]
        #[arg(long = "as", value_name = "CTX", value_parser = parse::id_ref)]
        as_ctx: Option<IdRef>,
    },
    /// Show an object (same as `keytool inspect ID`)
    #[command(after_help = "Example:\n  keytool obj show OBJ --json")]
    Show {
        /// The object
        #[arg(value_name = "ID", value_parser = parse::id_ref)]
        id: IdRef,
    },
}

/// `keytool ctx ...`
#[derive(Subcommand, Debug)]
pub(crate) enum CtxCmd {
    /// Create an empty security context
    #[command(after_help = "\
--kuid names the verifying key of the key pair this context signs delegations with.

--secrecy and --integrity write the proposed label into the context (format version 3) and
register it at that label as the --as context would (docs/DIFC.md §1.4): every tag it carries
that the registrar does not needs + owned by the registrar. Without them the context is
registered at the empty label, and its bytes are format version 1 or 2 as before.

Examples:
  keytool ctx new --kuid CTX_VERIFYING
  keytool ctx create --name labelled --secrecy medical --as boss      # boss owns medical+")]
    #[command(visible_alias = "create")]
    New {
        /// The context's id [default: random]
        #[arg(long, value_name = "ID", value_parser = parse::obj_id)]
        id: Option<ObjID>,
        /// A name for it in the store, usable wherever an id is taken (letters, digits, -_.@+)
        #[arg(long, value_name = "NAME", value_parser = parse::name)]
        name: Option<String>,
        /// The verifying-key object of the context's own key pair
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        kuid: Option<IdRef>,
        /// Accept a kuid that is not a verifying-key object in this store
        #[arg(long)]
        unchecked: bool,
        /// The context's initial principal label
        #[command(flatten)]
        label: LabelArgs,
        /// Register it as this context [default: a registrar with the empty label and no
        /// ownership]; the context object itself is created at the registrar's label
        #[arg(long = "as", value_name = "CTX", value_parser = parse::id_ref)]
        as_ctx: Option<IdRef>,
    },
    /// Register a context whose version-3 section proposes a label (as the kernel does at attach)
    #[command(after_help = "\
A context written elsewhere (not by `ctx new`) with a label section is unregistered: `check`
refuses it (LabelUnknown), as the kernel would. Registration adopts the proposed label if the
registrar could have reached it (docs/DIFC.md §1.4): every tag it adds relative to the
registrar needs + owned by the registrar or by the context itself. Once registered, editing
the section changes nothing.

Example:
  keytool ctx register lab --as boss")]
    Register {
        /// The context
        #[arg(value_name = "CTX", value_parser = parse::id_ref)]
        ctx: IdRef,
        /// Register it as this context [default: a registrar with the empty label and no
        /// ownership]
        #[arg(long = "as", value_name = "CTX", value_parser = parse::id_ref)]
        as_ctx: Option<IdRef>,
    },
    /// Change a context's principal label, with its own ownership (as sys_sctx_label)
    #[command(after_help = "\
The new label replaces the old: every tag added needs its + owned by the context, every tag
dropped its -; the context's own bytes must still flow to it. Omitting --secrecy or
--integrity sets that half empty.

Examples:
  keytool ctx relabel reader --secrecy medical          # raise: needs medical+
  keytool ctx relabel reader                            # drop everything: needs medical-")]
    Relabel {
        /// The context
        #[arg(value_name = "CTX", value_parser = parse::id_ref)]
        ctx: IdRef,
        /// The new label
        #[command(flatten)]
        label: LabelArgs,
        /// Decide ownership as of TIME instead of now
        #[arg(long, value_name = "TIME", value_parser = parse::instant)]
        at: Option<u64>,
    },
    /// Add a capability or delegation file to a context (it must be for that context)
    #[command(after_help = "Example:\n  keytool ctx add CTX rw.cap")]
    Add {
        /// The context
        #[arg(value_name = "CTX", value_parser = parse::id_ref)]
        ctx: IdRef,
        /// The record file
        file: PathBuf,
    },
    /// Remove records (all for a target, or one) or a per-object mask
    #[command(group(ArgGroup::new("what").required(true).args(["target", "record", "mask"])),
        after_help = "\
Examples:
  keytool ctx rm CTX --target OBJ                 # every record for OBJ
  keytool ctx rm CTX --record rw.cap              # one record (file or 64-hex-digit id)
  keytool ctx rm CTX --mask OBJ                   # the mask of OBJ")]
    Rm {
        /// The context
        #[arg(value_name = "CTX", value_parser = parse::id_ref)]
        ctx: IdRef,
        /// Remove the records for this object (with --record: only that one)
        #[arg(long, value_name = "ID", value_parser = parse::id_ref)]
        target: Option<IdRef>,
        /// Remove this record: its file or its id
        #[arg(long, value_name = "FILE|RECORD_ID", value_parser = parse::record_ref)]
        record: Option<RecordRef>,
        /// Remove the mask of this object
        #[arg(long, value_name = "ID", value_parser = parse::id_ref, conflicts_with_all = ["target", "record"])]
        mask: Option<IdRef>,
    },
    /// Set a per-object mask or the global mask
    #[command(group(ArgGroup::new("which").required(true).args(["target", "global"])),
        after_help = "\
A context provides for object T at most: mask(T).perm & (global | mask(T).ovr), or
global without a mask for T.

Examples:
  keytool ctx mask CTX --target OBJ --perm r-- --ovr r--
  keytool ctx mask CTX --global r-x")]
    Mask {
        /// The context
        #[arg(value_name = "CTX", value_parser = parse::id_ref)]
        ctx: IdRef,
        /// The object the mask applies to
        #[arg(long, value_name = "ID", value_parser = parse::id_ref, requires = "perm")]
        target: Option<IdRef>,
        /// The rights the context may provide for the object at most
        #[arg(long, value_name = "PROTS", value_parser = parse::prots, requires = "target")]
        perm: Option<Protections>,
        /// The rights for the object the global mask does not remove
        #[arg(long, value_name = "PROTS", value_parser = parse::prots, default_value = "---", requires = "target")]
        ovr: Protections,
        /// Set the global mask instead
        #[arg(long, value_name = "PROTS", value_parser = parse::prots, conflicts_with_all = ["target", "perm"])]
        global: Option<Protections>,
    },
    /// Show or set a context's flags
    #[command(after_help = "\
An undetachable context, when active, is the only one the kernel tries.

Example:
  keytool ctx flags CTX --undetachable true")]
    Flags {
        /// The context
        #[arg(value_name = "CTX", value_parser = parse::id_ref)]
        ctx: IdRef,
        /// Set or clear UNDETACHABLE
        #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
        undetachable: Option<bool>,
    },
    /// Show a context: generation, flags, masks and every record
    #[command(after_help = "Example:\n  keytool ctx show CTX --json")]
    Show {
        /// The context
        #[arg(value_name = "CTX", value_parser = parse::id_ref)]
        ctx: IdRef,
    },
}

/// `keytool tag ...`
#[derive(Subcommand, Debug)]
pub(crate) enum TagCmd {
    /// Create a tag: an object under KEY, whose signing key mints the tag's ownership records
    #[command(after_help = "\
A tag is used for secrecy (the default) or for integrity (--integrity); keytool records the
intended use and shows it, because one tag in both kinds of label makes ownership hard to
reason about.

Examples:
  keytool tag create medical --key owner
  keytool tag create vetted --key owner --integrity")]
    Create {
        /// The tag's name in the store
        #[arg(value_name = "NAME", value_parser = parse::name)]
        name: String,
        /// The key pair that signs the tag's ownership records (its signing or verifying key)
        #[arg(long, value_name = "KEY", value_parser = parse::id_ref)]
        key: IdRef,
        /// The tag is meant for integrity labels
        #[arg(long)]
        integrity: bool,
        /// The tag's id [default: random]
        #[arg(long, value_name = "ID", value_parser = parse::obj_id)]
        id: Option<ObjID>,
    },
    /// Mint an ownership record (+: add or endorse, -: drop or declassify) into a context
    #[command(after_help = "\
Signed by the tag's signing key (found in the store, or --key). --public mints the record for
every context (accessor ALL_CONTEXTS): anyone may copy it into their context; --to then names
a context to add it to now, and --out writes it to a file. A public record cannot be
delegated.

Examples:
  keytool tag grant medical --to reader --rights +
  keytool tag grant medical --to boss --rights +- --expires 30d
  keytool tag grant vetted --public --rights - --to reader --out vetted-drop.cap")]
    Grant {
        /// The tag
        #[arg(value_name = "TAG", value_parser = parse::id_ref)]
        tag: IdRef,
        /// The context that receives the record
        #[arg(long, value_name = "CTX", value_parser = parse::id_ref, required_unless_present = "public")]
        to: Option<IdRef>,
        /// The rights: + (add the tag, endorse), - (drop it, declassify) or +-
        #[arg(long, value_name = "+|-|+-", value_parser = own_rights, allow_hyphen_values = true)]
        rights: RightsArg,
        /// When the record stops counting: TIME or `never`
        #[arg(long, value_name = "TIME", value_parser = parse::expiry)]
        expires: Option<Expiry>,
        /// Mint for every context (accessor ALL_CONTEXTS)
        #[arg(long)]
        public: bool,
        /// Also write the record to FILE
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Replace FILE if it exists
        #[arg(long)]
        force: bool,
        /// The tag's signing key [default: the one in the store whose verifying key is the
        /// tag's kuid]
        #[arg(long, value_name = "KEY", value_parser = parse::id_ref)]
        key: Option<IdRef>,
        #[command(flatten)]
        pass: PassArgs,
    },
    /// Delegate ownership a context holds to another context (same or fewer rights)
    #[command(after_help = "\
The --from context's record for the tag is the parent; the delegation is signed with the
--from context's own key (the signing key of its kuid, found in the store, or --key), and
added to --to. Rights and expiry only narrow. Revoke it with `keytool revoke --record`.

Example:
  keytool tag delegate medical --from boss --to reader --rights - --expires 7d")]
    Delegate {
        /// The tag
        #[arg(value_name = "TAG", value_parser = parse::id_ref)]
        tag: IdRef,
        /// The context holding the ownership
        #[arg(long, value_name = "CTX", value_parser = parse::id_ref)]
        from: IdRef,
        /// The context receiving it
        #[arg(long, value_name = "CTX", value_parser = parse::id_ref)]
        to: IdRef,
        /// The rights delegated: +, - or +-
        #[arg(long, value_name = "+|-|+-", value_parser = own_rights, allow_hyphen_values = true)]
        rights: RightsArg,
        /// When the delegation stops counting (no later than its parent)
        #[arg(long, value_name = "TIME", value_parser = parse::expiry)]
        expires: Option<Expiry>,
        /// The --from context's signing key [default: the one of its kuid in the store]
        #[arg(long, value_name = "KEY", value_parser = parse::id_ref)]
        key: Option<IdRef>,
        /// Also write the delegation to FILE
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Replace FILE if it exists
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        pass: PassArgs,
    },
}

/// `keytool label ...`
#[derive(Subcommand, Debug)]
pub(crate) enum LabelCmd {
    /// The label table's label of an object, and for a context its principal label
    #[command(after_help = "\
For a context whose version-3 section proposes another label than its principal label, says
\"section ignored since registration\": the table is the truth, as in the kernel.

Example:
  keytool label show reader --json")]
    Show {
        /// The object or context
        #[arg(value_name = "ID", value_parser = parse::id_ref)]
        id: IdRef,
    },
}

/// `keytool store ...`
#[derive(Subcommand, Debug)]
pub(crate) enum StoreCmd {
    /// The store's path, its objects by kind, names and sizes
    #[command(after_help = "\
Example:
  keytool store info --json")]
    Info,
    /// Copy every object of a store in the old one-file-per-object format into the database
    #[command(after_help = "\
The copy is one transaction: all objects or none. The old files are left where they are;
objects already copied (an earlier, interrupted run) are skipped, and an object that differs
from the one of the same id in the database stops the migration with nothing copied.

Examples:
  keytool store migrate                       # the store directory itself holds old objects
  keytool store migrate --from ~/old-store")]
    Migrate {
        /// The old store's directory [default: the store directory]
        #[arg(long, value_name = "DIR")]
        from: Option<PathBuf>,
    },
}

/// What a command needs of the store: it is opened with no more than that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreAccess {
    /// No store (`completions`, `man`, `inspect FILE`), or one the command opens itself
    /// (`store migrate`).
    None,
    /// Reads only: opened read-only, which never waits for a writer in another process, never
    /// writes, and never creates a store (a missing one is an error naming its path).
    Read,
    /// Reads and writes: opened read-write, and created (with its directory) if missing.
    Write,
}

impl Cmd {
    /// What the command needs of the store. Every command is listed: a new one must say.
    pub(crate) fn store_access(&self) -> StoreAccess {
        match self {
            Cmd::Completions { .. } | Cmd::Man { .. } | Cmd::Store(StoreCmd::Migrate { .. }) => {
                StoreAccess::None
            }
            // A record file needs no store; anything else is an object of the store.
            Cmd::Inspect { what, .. } if Path::new(what).exists() => StoreAccess::None,
            Cmd::Verify { .. }
            | Cmd::Inspect { .. }
            | Cmd::Check { .. }
            | Cmd::Export { .. }
            | Cmd::Mint { .. }
            | Cmd::Delegate { .. }
            | Cmd::Obj(ObjCmd::Show { .. })
            | Cmd::Ctx(CtxCmd::Show { .. })
            | Cmd::Label(LabelCmd::Show { .. })
            | Cmd::Revoke { list: true, .. }
            | Cmd::Store(StoreCmd::Info)
            | Cmd::ConvertUpstreamCap { add_to: None, .. } => StoreAccess::Read,
            Cmd::ConvertUpstreamCap {
                add_to: Some(_), ..
            } => StoreAccess::Write,
            Cmd::Keygen { .. }
            | Cmd::Import { .. }
            | Cmd::Revoke { list: false, .. }
            | Cmd::Obj(ObjCmd::New { .. })
            | Cmd::Tag(_)
            | Cmd::Ctx(CtxCmd::Relabel { .. } | CtxCmd::Register { .. })
            | Cmd::Ctx(
                CtxCmd::New { .. }
                | CtxCmd::Add { .. }
                | CtxCmd::Rm { .. }
                | CtxCmd::Mask { .. }
                | CtxCmd::Flags { .. },
            ) => StoreAccess::Write,
        }
    }
}
