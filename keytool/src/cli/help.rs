//! The long help texts of the command line: the store, value formats and exit codes
//! (`keytool --help`), converting upstream capabilities, and information flow control.

pub(super) const TOP_HELP: &str = "\
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

pub(super) const UPSTREAM_HELP: &str = "\
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

pub(super) const DIFC_HELP: &str = "\
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
