//! The binary's subcommands besides running a node.

pub(crate) mod certs;
pub(crate) mod holder;
pub(crate) mod ops;

/// Subcommands (without one, `dist-bridge` runs a node).
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Make a development CA and certificates for a cluster's nodes, operators and clients.
    #[command(subcommand)]
    Certs(certs::CertsCommand),
    #[command(flatten)]
    Ops(ops::OpsCommand),
    #[command(flatten)]
    Holder(holder::HolderCommand),
}
