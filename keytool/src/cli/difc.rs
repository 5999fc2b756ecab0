//! `keytool tag ...` and `keytool label ...`: information flow control.

use std::path::PathBuf;

use clap::Subcommand;
use twizzler_capsec::{Expiry, ObjID};

use super::{PassArgs, RightsArg, own_rights};
use crate::parse::{self, IdRef};

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
