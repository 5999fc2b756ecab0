//! `keytool store ...`: the store itself.

use std::path::PathBuf;

use clap::Subcommand;

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
