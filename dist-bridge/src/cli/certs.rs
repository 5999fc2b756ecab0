//! `dist-bridge certs`: a development CA and the certificates of a cluster's parties.

use std::path::PathBuf;

use dist_bridge::certs::{CertError, DevCa, file_stem};
use dist_bridge::identity::{PeerIdentity, is_label};

const CERTS_AFTER_HELP: &str = "\
Identities (what a certificate lets its holder do):
  node:N          serve as node N, send broadcast messages as node N (N.node.dist-bridge)
  operator:NAME   read Status and detailed refusals (NAME.operator.dist-bridge)
  client:NAME     export, invoke, revoke, renew, derive (NAME.client.dist-bridge)

NAME is 1-63 of a-z, 0-9 and '-'. Keys are written with mode 0600; existing files are
never replaced without --force.

Example:
  dist-bridge certs ca --dir certs
  dist-bridge certs issue --dir certs node:1 node:2 operator:ops client:app";

#[derive(Debug, clap::Subcommand)]
pub(crate) enum CertsCommand {
    /// Create a CA (ca.crt, ca.key) in DIR.
    #[command(after_help = CERTS_AFTER_HELP)]
    Ca {
        /// Where to write it.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
    },
    /// Issue certificates (NAME.crt, NAME.key) from the CA in DIR.
    #[command(after_help = CERTS_AFTER_HELP)]
    Issue {
        /// The CA's directory; the certificates are written there too.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Also valid for this DNS name or IP address (repeatable), for tools that check a
        /// node by its address.
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
        /// Replace existing files.
        #[arg(long)]
        force: bool,
        /// Whom to issue for: node:N, operator:NAME or client:NAME.
        #[arg(required = true, value_name = "IDENTITY", value_parser = parse_identity)]
        identities: Vec<PeerIdentity>,
    },
}

fn parse_identity(s: &str) -> Result<PeerIdentity, String> {
    let (role, name) = s
        .split_once(':')
        .ok_or_else(|| format!("expected node:N, operator:NAME or client:NAME, got {s:?}"))?;
    let label = |name: &str| {
        if is_label(name) {
            Ok(name.to_owned())
        } else {
            Err(format!(
                "{name:?} is not a name: 1-63 of a-z, 0-9 and '-', not starting or ending with '-'"
            ))
        }
    };
    match role {
        "node" => name
            .parse()
            .map(PeerIdentity::Node)
            .map_err(|e| format!("bad node id {name:?}: {e}")),
        "operator" => label(name).map(PeerIdentity::Operator),
        "client" => label(name).map(PeerIdentity::Client),
        _ => Err(format!(
            "unknown role {role:?}: expected node, operator or client"
        )),
    }
}

pub(crate) fn run(cmd: CertsCommand) -> Result<(), CertError> {
    match cmd {
        CertsCommand::Ca { dir, force } => {
            DevCa::generate()?.save(&dir, force)?;
            println!("wrote {}", dir.join("ca.crt").display());
            println!("wrote {} (keep it secret)", dir.join("ca.key").display());
        }
        CertsCommand::Issue {
            dir,
            hosts,
            force,
            identities,
        } => {
            let ca = DevCa::load(&dir)?;
            // Every certificate is made before any is written: a bad host name writes none.
            let issued = identities
                .iter()
                .map(|id| ca.issue(id, &hosts).map(|c| (id, c)))
                .collect::<Result<Vec<_>, _>>()?;
            if !force {
                for id in &identities {
                    let files = dist_bridge::TlsFiles::in_dir(&dir, &file_stem(id));
                    for f in [&files.cert, &files.key] {
                        if f.exists() {
                            return Err(CertError::Exists(f.clone()));
                        }
                    }
                }
            }
            for (id, cert) in issued {
                let files = cert.save(&dir, force)?;
                println!("{id}: {} {}", files.cert.display(), files.key.display());
            }
        }
    }
    Ok(())
}
