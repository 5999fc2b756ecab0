//! `keytool ctx ...`: security contexts.

use std::path::PathBuf;

use clap::{ArgGroup, Subcommand};
use twizzler_capsec::{ObjID, Protections};

use super::LabelArgs;
use crate::parse::{self, IdRef, RecordRef};

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
