//! A token's life from the command line: `dist-bridge export`, `read`, `write`, `revoke` and
//! `health`, each a few calls of [`NodeClient`].
//!
//! Token files hold the token's canonical binary encoding (the format in
//! `dist_bridge::token`) as hexadecimal text on one line; `-` is stdout or stdin. The client
//! holds the token, so before sending anything it checks what it can tell without the
//! owner's secret: that the token belongs to the node addressed, that it carries the right
//! the command needs, and that the bytes asked for lie inside its range. Those mistakes are
//! said in one line; whatever the node refuses stays its single `denied`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use dist_bridge::client::{NodeClient, Reach, connect_channel};
use dist_bridge::tls::TlsFiles;
use dist_bridge::{ByteRange, GuardedToken, Op, Rights, Scope};
use serde_json::json;
use twizzler_capsec::{Cap, ObjID, Protections, SigningKey};

/// The long help's examples (shared by every client command).
pub(crate) const CLIENT_HELP: &str = "\
Token files hold the token's encoding (dist-bridge/src/token.rs) as lowercase hex on one
line; `-` reads stdin or writes stdout. Before sending, the client refuses in one line a
token for another node than --node, one without the right the command needs (r read,
w write, v revoke), or bytes outside its range; the node answers everything else it
refuses with one `denied` (the reason is in its log and `dist-bridge status`).
Exit status: 0 done; 1 the node refused or could not be reached; 2 a local mistake (a bad
file or flag, a token that cannot do what was asked).

Examples (certificates from `dist-bridge certs`; cap and key from keytool):
  dist-bridge export --addr 127.0.0.1:7401 --node 1 --certs certs --as client-app \\
      --cap rw.cap --context CTX --context-key ctx.pem --rights rwdv --out app.token
  dist-bridge read   --addr 127.0.0.1:7401 --node 1 --certs certs --token app.token --len 6
  dist-bridge write  --addr 127.0.0.1:7401 --node 1 --certs certs --token app.token --data hi
  dist-bridge revoke --addr 127.0.0.1:7401 --node 1 --certs certs --token app.token --json
  dist-bridge health --addr 127.0.0.1:7401 --node 1 --certs certs";

/// Where the node is and who asks.
#[derive(Debug, clap::Args)]
pub(crate) struct Target {
    /// The node's address.
    #[arg(long, value_name = "HOST:PORT")]
    addr: String,
    /// The node's id: its certificate must name it, and tokens must be its own.
    #[arg(long, value_name = "N")]
    node: u64,
    /// The directory with ca.crt and the caller's NAME.crt and NAME.key (`dist-bridge certs`).
    #[arg(long, value_name = "DIR", required_unless_present = "insecure")]
    certs: Option<PathBuf>,
    /// The caller's file name in that directory.
    #[arg(long = "as", value_name = "NAME", default_value = "client-app")]
    who: String,
    /// Plaintext, to a node run with `insecure = true` (tests only).
    #[arg(long, conflicts_with = "certs")]
    insecure: bool,
    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    json: bool,
}

/// A token's commands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum HolderCommand {
    /// Export a signed capability as the root token of a new guard on the node that stores
    /// its object (the node checks the capability and a proof made with the context's key).
    #[command(after_long_help = CLIENT_HELP)]
    Export {
        #[command(flatten)]
        target: Target,
        /// The capability (its canonical binary encoding, as `keytool mint --out` writes it).
        #[arg(long, value_name = "FILE")]
        cap: PathBuf,
        /// The security context the capability is for (hex id, 0x optional).
        #[arg(long, value_name = "ID", value_parser = parse_obj_id)]
        context: ObjID,
        /// The signing key of the context's kuid, PKCS#8 PEM (`keytool export --secret`).
        #[arg(long, value_name = "FILE")]
        context_key: PathBuf,
        /// The token's rights: any of r (read), w (write), d (derive), v (revoke), `-` for
        /// none [default: the capability's r and w, with d and v].
        #[arg(long, value_name = "RIGHTS", value_parser = parse_rights)]
        rights: Option<Rights>,
        /// First byte the token covers.
        #[arg(long, value_name = "N", default_value_t = 0)]
        offset: u64,
        /// Bytes the token covers [default: to the end of the object].
        #[arg(long, value_name = "N")]
        len: Option<u64>,
        /// Where to write the token (`-`: stdout).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Read bytes of the token's object; they go to --out (default stdout, raw).
    #[command(after_long_help = CLIENT_HELP)]
    Read {
        #[command(flatten)]
        target: Target,
        /// The token file (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        token: PathBuf,
        /// First byte.
        #[arg(long, value_name = "N", default_value_t = 0)]
        offset: u64,
        /// Bytes to read.
        #[arg(long, value_name = "N")]
        len: u64,
        /// Where the bytes go (`-`: stdout). With --json they are in the document, as hex.
        #[arg(long, value_name = "FILE", default_value = "-")]
        out: PathBuf,
    },
    /// Write bytes at an offset of the token's object.
    #[command(after_long_help = CLIENT_HELP)]
    Write {
        #[command(flatten)]
        target: Target,
        /// The token file (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        token: PathBuf,
        /// First byte.
        #[arg(long, value_name = "N", default_value_t = 0)]
        offset: u64,
        /// The bytes, as text.
        #[arg(
            long,
            value_name = "TEXT",
            conflicts_with = "data_file",
            required_unless_present = "data_file"
        )]
        data: Option<String>,
        /// The bytes, from a file.
        #[arg(long, value_name = "FILE")]
        data_file: Option<PathBuf>,
    },
    /// Revoke the token's guard and every guard derived from it (needs the v right).
    #[command(after_long_help = CLIENT_HELP)]
    Revoke {
        #[command(flatten)]
        target: Target,
        /// The token file (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        token: PathBuf,
    },
    /// Ask a node's standard gRPC health service whether it serves (no token needed).
    #[command(after_long_help = CLIENT_HELP)]
    Health {
        #[command(flatten)]
        target: Target,
    },
}

/// Why a command failed: a local mistake (exit 2) or the node's answer or the way to it
/// (exit 1).
pub(crate) enum Failure {
    /// Found here, before sending anything.
    Local(String),
    /// The node refused, or could not be reached.
    Remote(String),
}

/// A hex object id, 0x optional.
fn parse_obj_id(s: &str) -> Result<ObjID, String> {
    let hex = s.strip_prefix("0x").unwrap_or(s);
    if hex.is_empty() || hex.len() > 32 {
        return Err("an object id is 1 to 32 hex digits".into());
    }
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{s:?} is not a hex object id"));
    }
    u128::from_str_radix(hex, 16)
        .map(ObjID::new)
        .map_err(|_| format!("{s:?} is not a hex object id"))
}

/// Rights as letters: r, w, d, v, `-` ignored.
fn parse_rights(s: &str) -> Result<Rights, String> {
    let mut rights = Rights::empty();
    for c in s.chars() {
        rights |= match c {
            'r' => Rights::READ,
            'w' => Rights::WRITE,
            'd' => Rights::DERIVE,
            'v' => Rights::REVOKE,
            '-' => Rights::empty(),
            other => return Err(format!("{other:?} is not a right (r, w, d, v or -)")),
        };
    }
    Ok(rights)
}

fn read_input(path: &Path) -> Result<Vec<u8>, String> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        Ok(buf)
    } else {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    }
}

/// Writes `bytes` to `path` (`-`: stdout); a file is written whole or not at all.
fn write_output(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if path == Path::new("-") {
        let mut out = std::io::stdout().lock();
        return out
            .write_all(bytes)
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot write stdout: {e}"));
    }
    let tmp = path.with_extension("tmp-dist-bridge");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write {}: {e}", path.display())
        })
}

/// Reads a token file: hex text of the token's encoding.
fn load_token(path: &Path) -> Result<GuardedToken, String> {
    let name = if path == Path::new("-") {
        "stdin".to_owned()
    } else {
        path.display().to_string()
    };
    let text = read_input(path)?;
    let text = std::str::from_utf8(&text)
        .map_err(|_| format!("{name}: not a token file (expected hex text)"))?;
    let bytes = base16ct::mixed::decode_vec(text.trim())
        .map_err(|_| format!("{name}: not a token file (expected hex text)"))?;
    GuardedToken::decode(&bytes).map_err(|e| format!("{name}: not a token: {e}"))
}

/// Checks what the holder can tell alone: the token is node `node`'s, and carries `needed`
/// over `offset..offset + len`.
fn check_locally(
    token: &GuardedToken,
    node: u64,
    needed: Rights,
    what: &str,
    bytes: Option<(u64, u64)>,
) -> Result<(), String> {
    let owner = token.owner().node;
    if owner != node {
        return Err(format!(
            "the token belongs to node {owner}, not node {node} (--node): send it to node {owner}"
        ));
    }
    let scope = token.scope();
    if !scope.rights.contains(needed) {
        return Err(format!(
            "the token cannot {what}: it needs {needed}, the token carries {}",
            scope.rights
        ));
    }
    if let Some((offset, len)) = bytes
        && !scope.range.covers(offset, len)
    {
        return Err(format!(
            "bytes {offset}..+{len} lie outside the token's range {}",
            scope.range
        ));
    }
    if scope.expires.is_expired(dist_bridge::now_ns()) {
        return Err(format!("the token expired at {}", scope.expires));
    }
    Ok(())
}

/// A channel to the node, checked as [`NodeClient::connect`] checks it.
async fn channel(t: &Target) -> Result<tonic::transport::Channel, Failure> {
    match &t.certs {
        Some(dir) => {
            let tls = TlsFiles::in_dir(dir, &t.who)
                .load()
                .map_err(|e| Failure::Local(e.to_string()))?;
            connect_channel(&t.addr, t.node, Reach::Tls(&tls)).await
        }
        None => connect_channel(&t.addr, t.node, Reach::Insecure).await,
    }
    .map_err(remote)
}

async fn connect(t: &Target) -> Result<NodeClient, Failure> {
    Ok(NodeClient::from_channel(channel(t).await?, t.node))
}

fn remote(e: impl ToString) -> Failure {
    Failure::Remote(e.to_string())
}

/// Runs a token command; what it prints on stdout, or why it failed.
pub(crate) async fn run(cmd: HolderCommand) -> Result<Vec<u8>, Failure> {
    match cmd {
        HolderCommand::Export {
            target,
            cap,
            context,
            context_key,
            rights,
            offset,
            len,
            out,
        } => {
            let cap_bytes = read_input(&cap).map_err(Failure::Local)?;
            let cap = Cap::decode(&cap_bytes)
                .map_err(|e| Failure::Local(format!("{}: not a capability: {e}", cap.display())))?;
            let pem = read_input(&context_key).map_err(Failure::Local)?;
            let key = std::str::from_utf8(&pem)
                .ok()
                .and_then(|p| SigningKey::from_pkcs8_pem(p).ok())
                .ok_or_else(|| {
                    Failure::Local(format!(
                        "{}: not a PKCS#8 PEM signing key",
                        context_key.display()
                    ))
                })?;
            let rights = rights.unwrap_or_else(|| {
                let mut r = Rights::DERIVE | Rights::REVOKE;
                if cap.prots().contains(Protections::READ) {
                    r |= Rights::READ;
                }
                if cap.prots().contains(Protections::WRITE) {
                    r |= Rights::WRITE;
                }
                r
            });
            let range = match len {
                None if offset == 0 => Ok(ByteRange::WHOLE),
                None => ByteRange::new(offset, ByteRange::WHOLE.end().saturating_sub(offset)),
                Some(len) => ByteRange::new(offset, len),
            }
            .map_err(|e| Failure::Local(format!("--offset/--len: {e}")))?;
            let scope = Scope::new(rights, range, twizzler_capsec::Expiry::NEVER);
            let client = connect(&target).await?;
            let token = client
                .export(&cap, context, &key, scope)
                .await
                .map_err(remote)?;
            let mut hex = base16ct::lower::encode_string(&token.encode());
            hex.push('\n');
            if out != Path::new("-") {
                write_output(&out, hex.as_bytes()).map_err(Failure::Local)?;
            }
            let text = if target.json {
                let mut doc = describe(&token);
                if out == Path::new("-") {
                    doc["token"] = json!(hex.trim_end());
                } else {
                    doc["out"] = json!(out.display().to_string());
                }
                format!("{doc}\n")
            } else if out == Path::new("-") {
                hex
            } else {
                format!(
                    "exported {} of node {}: {} over {}; token in {}\n",
                    token.guard(),
                    token.owner().node,
                    token.scope().rights,
                    token.scope().range,
                    out.display()
                )
            };
            Ok(text.into_bytes())
        }
        HolderCommand::Read {
            target,
            token,
            offset,
            len,
            out,
        } => {
            let t = load_token(&token).map_err(Failure::Local)?;
            check_locally(
                &t,
                target.node,
                Op::Read.required(),
                "read",
                Some((offset, len)),
            )
            .map_err(Failure::Local)?;
            let data = connect(&target)
                .await?
                .read(&t, offset, len)
                .await
                .map_err(remote)?;
            if target.json {
                let doc = json!({
                    "offset": offset,
                    "len": data.len(),
                    "data_hex": base16ct::lower::encode_string(&data),
                });
                return Ok(format!("{doc}\n").into_bytes());
            }
            if out == Path::new("-") {
                Ok(data)
            } else {
                write_output(&out, &data).map_err(Failure::Local)?;
                Ok(Vec::new())
            }
        }
        HolderCommand::Write {
            target,
            token,
            offset,
            data,
            data_file,
        } => {
            let t = load_token(&token).map_err(Failure::Local)?;
            let bytes = match (data, data_file) {
                (Some(text), _) => text.into_bytes(),
                (None, Some(file)) => read_input(&file).map_err(Failure::Local)?,
                (None, None) => return Err(Failure::Local("give --data or --data-file".into())),
            };
            let len = bytes.len() as u64;
            check_locally(
                &t,
                target.node,
                Op::Write.required(),
                "write",
                Some((offset, len)),
            )
            .map_err(Failure::Local)?;
            connect(&target)
                .await?
                .write(&t, offset, &bytes)
                .await
                .map_err(remote)?;
            Ok(if target.json {
                format!("{}\n", json!({"offset": offset, "written": len}))
            } else {
                format!("wrote {len} bytes at {offset}\n")
            }
            .into_bytes())
        }
        HolderCommand::Revoke { target, token } => {
            let t = load_token(&token).map_err(Failure::Local)?;
            check_locally(&t, target.node, Rights::REVOKE, "revoke", None)
                .map_err(Failure::Local)?;
            let report = connect(&target).await?.revoke(&t).await.map_err(remote)?;
            Ok(if target.json {
                let mut doc = describe(&t);
                doc["guards_revoked"] = json!(report.guards_revoked);
                format!("{doc}\n")
            } else {
                format!(
                    "revoked {} of node {} and its descendants: {} guards\n",
                    t.guard(),
                    t.owner().node,
                    report.guards_revoked
                )
            }
            .into_bytes())
        }
        HolderCommand::Health { target } => health(&target).await,
    }
}

/// The token's public fields as JSON.
fn describe(t: &GuardedToken) -> serde_json::Value {
    let scope = t.scope();
    json!({
        "node": t.owner().node,
        "controller_version": t.owner().version,
        "guard": t.guard().index,
        "guard_version": t.guard().version,
        "object": format!("{:032x}", t.object().raw()),
        "rights": scope.rights.to_string(),
        "offset": scope.range.offset(),
        "len": scope.range.len(),
        "expires": scope.expires.at(),
    })
}

async fn health(t: &Target) -> Result<Vec<u8>, Failure> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let status = HealthClient::new(channel(t).await?)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map_err(|s| Failure::Remote(format!("health check failed: {}", s.message())))?
        .into_inner()
        .status();
    let name = status.as_str_name();
    let serving = status == tonic_health::pb::health_check_response::ServingStatus::Serving;
    let text = if t.json {
        format!(
            "{}\n",
            json!({"node": t.node, "addr": t.addr, "status": name})
        )
    } else {
        format!("node {} at {}: {name}\n", t.node, t.addr)
    };
    if serving {
        Ok(text.into_bytes())
    } else {
        Err(Failure::Remote(text.trim_end().to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_and_ids_parse_or_say_why() {
        assert_eq!(parse_rights("rwdv"), Ok(Rights::all()));
        assert_eq!(parse_rights("r---"), Ok(Rights::READ));
        assert_eq!(parse_rights("-"), Ok(Rights::empty()));
        assert!(
            parse_rights("rx")
                .unwrap_err()
                .contains("'x' is not a right")
        );
        assert_eq!(parse_obj_id("0xc7c7"), Ok(ObjID::new(0xc7c7)));
        assert_eq!(parse_obj_id("C7C7"), Ok(ObjID::new(0xc7c7)));
        assert!(parse_obj_id("").is_err());
        assert!(
            parse_obj_id("g1")
                .unwrap_err()
                .contains("not a hex object id")
        );
        assert!(parse_obj_id(&"1".repeat(33)).is_err());
        assert!(parse_obj_id("+c7").is_err());
    }
}
