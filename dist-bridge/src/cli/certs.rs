//! `dist-bridge certs`: a development CA and the certificates of a cluster's parties.

use std::path::PathBuf;

use dist_bridge::certs::{CertError, DevCa, file_stem};
use dist_bridge::identity::{PeerIdentity, is_label};
use dist_bridge::revoked_certs::{self, ListError};

const CERTS_AFTER_HELP: &str = "\
Identities (what a certificate lets its holder do):
  node:N          serve as node N, send broadcast messages as node N (N.node.dist-bridge)
  operator:NAME   read Status and detailed refusals (NAME.operator.dist-bridge)
  client:NAME     export, invoke, revoke, renew, derive (NAME.client.dist-bridge)

NAME is 1-63 of a-z, 0-9 and '-'. Keys are written with mode 0600; existing files are
never replaced without --force.

Example:
  dist-bridge certs ca --dir certs
  dist-bridge certs issue --dir certs node:1 node:2 operator:ops client:app
  dist-bridge certs revoke --dir certs client:app";

const REVOKE_AFTER_HELP: &str = "\
The revocation file lists one certificate per line: the SHA-256 of its DER encoding (what
`openssl x509 -in FILE -outform der | sha256sum` prints), then a note. It is replaced whole,
so a node reading it sees the old list or the new one. A node uses it when its config has
`revoked = \"certs/revoked.txt\"` in [tls] (or --tls-revoked). It reads the file again at
its next maintenance pass after a change (maintenance_interval_ms, 1 s by default). From then
on a listed certificate's TLS handshakes fail (certificate_revoked), its requests on
connections already open are refused with `unauthenticated`, and the node does not connect
to a peer presenting it. Revocation is by certificate, not by name: a certificate issued
again for the same identity (certs issue --force) is a new one, and is accepted.

Example:
  dist-bridge certs revoke --dir certs client:app operator:ops
  dist-bridge certs revoke --list /etc/dist-bridge/revoked.txt --cert stolen.crt";

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
    /// Revoke certificates: list them in the revocation file (DIR/revoked.txt).
    #[command(after_help = REVOKE_AFTER_HELP)]
    Revoke {
        /// The directory of the certificates named by IDENTITY, and of the revocation file.
        #[arg(long, value_name = "DIR", required_unless_present = "list")]
        dir: Option<PathBuf>,
        /// The revocation file to update [default: DIR/revoked.txt].
        #[arg(long, value_name = "FILE")]
        list: Option<PathBuf>,
        /// A certificate file (PEM) to revoke, by path (repeatable).
        #[arg(long = "cert", value_name = "FILE")]
        certs: Vec<PathBuf>,
        /// Whose certificate in DIR to revoke: node:N, operator:NAME or client:NAME.
        #[arg(value_name = "IDENTITY", value_parser = parse_identity, required_unless_present = "certs")]
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

pub(crate) fn run(cmd: CertsCommand) -> Result<(), String> {
    match cmd {
        CertsCommand::Revoke {
            dir,
            list,
            certs,
            identities,
        } => revoke(dir, list, certs, &identities),
        CertsCommand::Ca { dir, force } => ca(&dir, force).map_err(|e| e.to_string()),
        CertsCommand::Issue {
            dir,
            hosts,
            force,
            identities,
        } => issue(&dir, &hosts, force, &identities).map_err(|e| e.to_string()),
    }
}

/// `certs revoke`: every certificate is read before the file is touched, so one bad name
/// changes nothing.
fn revoke(
    dir: Option<PathBuf>,
    list: Option<PathBuf>,
    certs: Vec<PathBuf>,
    identities: &[PeerIdentity],
) -> Result<(), String> {
    let list = match (list, &dir) {
        (Some(l), _) => l,
        (None, Some(d)) => d.join("revoked.txt"),
        (None, None) => return Err("give --dir (or --list) for the revocation file".into()),
    };
    if dir.is_none() && !identities.is_empty() {
        return Err("revoking by IDENTITY needs --dir, where its certificate is".into());
    }
    let mut files: Vec<(PathBuf, String)> = certs
        .into_iter()
        .map(|p| {
            let note = p.display().to_string();
            (p, note)
        })
        .collect();
    if let Some(dir) = &dir {
        for id in identities {
            let f = dist_bridge::TlsFiles::in_dir(dir, &file_stem(id));
            files.push((f.cert, id.to_string()));
        }
    }
    let entries = files
        .iter()
        .map(|(path, note)| {
            revoked_certs::fingerprint_of_pem_file(path).map(|fp| (fp, note.clone()))
        })
        .collect::<Result<Vec<_>, ListError>>()
        .map_err(|e| e.to_string())?;
    let added = revoked_certs::add_to_file(&list, &entries).map_err(|e| e.to_string())?;
    for (fp, note) in &entries {
        println!("revoked {note} (sha256 {})", fp.to_hex());
    }
    println!(
        "{}: {added} added, {} already listed",
        list.display(),
        entries.len() - added
    );
    Ok(())
}

/// `certs ca`.
fn ca(dir: &std::path::Path, force: bool) -> Result<(), CertError> {
    DevCa::generate()?.save(dir, force)?;
    println!("wrote {}", dir.join("ca.crt").display());
    println!("wrote {} (keep it secret)", dir.join("ca.key").display());
    Ok(())
}

/// `certs issue`: every certificate is made, and every name checked, before any is written:
/// a bad host name or an existing file writes none.
fn issue(
    dir: &std::path::Path,
    hosts: &[String],
    force: bool,
    identities: &[PeerIdentity],
) -> Result<(), CertError> {
    let ca = DevCa::load(dir)?;
    let issued = identities
        .iter()
        .map(|id| ca.issue(id, hosts).map(|c| (id, c)))
        .collect::<Result<Vec<_>, _>>()?;
    if !force {
        for id in identities {
            let files = dist_bridge::TlsFiles::in_dir(dir, &file_stem(id));
            for f in [&files.cert, &files.key] {
                if f.exists() {
                    return Err(CertError::Exists(f.clone()));
                }
            }
        }
    }
    for (id, cert) in issued {
        let files = cert.save(dir, force)?;
        println!("{id}: {} {}", files.cert.display(), files.key.display());
    }
    Ok(())
}
