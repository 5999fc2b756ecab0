//! Operator commands: `dist-bridge status` and `dist-bridge probe-peers`, over mutual TLS
//! with an operator's certificate.

use std::fmt::Write as _;
use std::path::PathBuf;

use dist_bridge::client::{NodeClient, Reach};
use dist_bridge::tls::TlsFiles;

/// Where the node is and who asks.
#[derive(Debug, clap::Args)]
pub(crate) struct Target {
    /// The node's address.
    #[arg(long, value_name = "HOST:PORT")]
    addr: String,
    /// The node's id: its certificate must name it.
    #[arg(long, value_name = "N")]
    node: u64,
    /// The directory with ca.crt and the caller's NAME.crt and NAME.key.
    #[arg(long, value_name = "DIR")]
    certs: PathBuf,
    /// The caller's file name in that directory (an operator's, for these commands).
    #[arg(long = "as", value_name = "NAME", default_value = "operator-ops")]
    who: String,
}

/// Operator commands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum OpsCommand {
    /// Print a node's status: controller, guard table, counters, and its recent refusals
    /// with their reasons (operators only).
    Status(Target),
    /// Check a node's peers: it issues a throwaway broadcast-baseline capability and
    /// revokes it, which sends one message to every peer over mutual TLS; prints who
    /// acknowledged. Fails unless every peer did.
    ProbePeers(Target),
}

async fn connect(t: &Target) -> Result<NodeClient, String> {
    let files = TlsFiles::in_dir(&t.certs, &t.who);
    let tls = files.load().map_err(|e| e.to_string())?;
    NodeClient::connect(&t.addr, t.node, Reach::Tls(&tls))
        .await
        .map_err(|e| e.to_string())
}

/// Runs an operator command; its output, or a one-line error.
pub(crate) async fn run(cmd: OpsCommand) -> Result<String, String> {
    match cmd {
        OpsCommand::Status(t) => {
            let s = connect(&t)
                .await?
                .status()
                .await
                .map_err(|e| e.to_string())?;
            let mut out = String::new();
            let table = &s.table;
            let _ = writeln!(
                out,
                "node {}, controller version {}",
                s.controller.node, s.controller.version
            );
            let _ = writeln!(
                out,
                "guard table: {} live, {} pending, {} free of {}; range {} of epoch {}",
                table.live,
                table.pending,
                table.free,
                table.capacity,
                table.active_range,
                table.epoch
            );
            let _ = writeln!(
                out,
                "requests: {} received, {} sent to peers, {} replies",
                s.counters.requests_received, s.counters.requests_sent, s.counters.replies_received
            );
            let mut by_rpc: Vec<_> = s.counters.received_by_rpc.iter().collect();
            by_rpc.sort();
            for (rpc, n) in by_rpc.into_iter().filter(|(_, n)| **n > 0) {
                let _ = writeln!(out, "  {rpc}: {n}");
            }
            let _ = writeln!(out, "peers: {:?}", s.peers);
            let mut kinds: Vec<_> = s.refusals.iter().collect();
            kinds.sort();
            let _ = writeln!(out, "refusals: {}", s.refusals.values().sum::<u64>());
            for (kind, n) in kinds {
                let _ = writeln!(out, "  {kind}: {n}");
            }
            for r in s.recent_refusals.iter().rev().take(10) {
                let _ = writeln!(
                    out,
                    "  recent: {} {} from {}: {}",
                    r.rpc, r.kind, r.caller, r.message
                );
            }
            Ok(out)
        }
        OpsCommand::ProbePeers(t) => {
            let c = connect(&t).await?;
            let cap = c.broadcast_issue().await.map_err(|e| e.to_string())?;
            let o = c.broadcast_revoke(cap).await.map_err(|e| e.to_string())?;
            if !o.complete {
                return Err(format!(
                    "{} of {} peers acknowledged",
                    o.acks, o.peers_notified
                ));
            }
            Ok(format!(
                "{} of {} peers acknowledged over mutual TLS\n",
                o.acks, o.peers_notified
            ))
        }
    }
}
