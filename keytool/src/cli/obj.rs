//! `keytool obj ...`: plain objects.

use clap::Subcommand;
use twizzler_capsec::{ObjID, Protections};

use super::LabelArgs;
use crate::parse::{self, IdRef};

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
