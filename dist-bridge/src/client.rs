//! The client library: typed calls to a node ([`NodeClient`]), and [`Cluster`], which routes a
//! token to its owner node.
//!
//! Every method returns core types ([`GuardedToken`], [`RevokeReport`], [`TableStats`],
//! [`UpgradeNotice`], ...) and a [`ClientError`] that says whether the node refused the
//! request (with the exact [`ErrorKind`] and the node's message), or the call failed on the
//! way.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use twizzler_capsec::{Cap, ObjID, SigningKey};

use crate::broadcast::{BroadcastMessage, CapName, MessageCounts};
use crate::connector::NodeConnector;
use crate::controller::ControllerId;
use crate::export_proof::{ExportClaim, ExportProof};
use crate::now_ns;
use crate::owner::{RevokeReport, UpgradeNotice};
use crate::pb;
use crate::pb::node_client::NodeClient as RawClient;
use crate::resend::Resend;
use crate::rights::Op;
use crate::table::TableStats;
use crate::tls::TlsMaterial;
use crate::token::{GuardedToken, Scope};
use crate::wire::{self, ErrorKind};

/// Default time limit of one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time limit for establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a call to a node failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The address is not a valid endpoint.
    BadAddress {
        /// The address.
        addr: String,
        /// Why.
        why: String,
    },
    /// No connection could be established.
    Connect {
        /// The address.
        addr: String,
        /// The error.
        source: tonic::transport::Error,
    },
    /// The node refused the request.
    Rejected {
        /// The exact reason.
        kind: ErrorKind,
        /// The gRPC status code.
        code: Code,
        /// The node's message (the core's error message).
        message: String,
    },
    /// The call failed without a verdict of the node (connection lost, timeout, a status
    /// from something that is not a dist-bridge node).
    Rpc(Status),
    /// The node's reply does not decode.
    BadReply(String),
    /// The request could not be made here (no randomness or key for the export proof).
    Local(String),
}

impl ClientError {
    /// The reason, when the node refused the request.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Rejected { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// The gRPC code, when there was a status.
    pub fn code(&self) -> Option<Code> {
        match self {
            Self::Rejected { code, .. } => Some(*code),
            Self::Rpc(s) => Some(s.code()),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadAddress { addr, why } => write!(f, "bad node address {addr:?}: {why}"),
            Self::Connect { addr, source } => {
                // The TLS reason may sit below tonic's error: say each cause once.
                let mut text = format!("cannot connect to {addr}: {source}");
                let mut cause = std::error::Error::source(source);
                while let Some(c) = cause {
                    let said = c.to_string();
                    if !text.contains(&said) {
                        text.push_str(": ");
                        text.push_str(&said);
                    }
                    cause = c.source();
                }
                f.write_str(&text)
            }
            Self::Rejected { kind, message, .. } => write!(f, "refused ({kind}): {message}"),
            Self::Rpc(s) => write!(f, "call failed: {:?}: {}", s.code(), s.message()),
            Self::BadReply(why) => write!(f, "bad reply from node: {why}"),
            Self::Local(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Connect { source, .. } => Some(source),
            Self::Rpc(s) => Some(s),
            _ => None,
        }
    }
}

impl From<Status> for ClientError {
    fn from(status: Status) -> Self {
        match wire::kind_of(&status) {
            Some(kind) => Self::Rejected {
                kind,
                code: status.code(),
                message: status.message().to_owned(),
            },
            None => Self::Rpc(status),
        }
    }
}

/// RPC counters of a node (see `Counters` in the proto).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RpcCounters {
    /// Requests received (each answered by one reply). Status and PollUpgrades not counted.
    pub requests_received: u64,
    /// Requests sent to other nodes.
    pub requests_sent: u64,
    /// Replies received from other nodes.
    pub replies_received: u64,
    /// Requests received per RPC name (`invoke`, `revoke`, `broadcast`, ...).
    pub received_by_rpc: HashMap<String, u64>,
}

impl RpcCounters {
    /// Requests received of one RPC (0 if none).
    pub fn received(&self, rpc: &str) -> u64 {
        self.received_by_rpc.get(rpc).copied().unwrap_or(0)
    }
}

/// What [`NodeClient::status`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// The node's controller: its id and the version of its current life.
    pub controller: ControllerId,
    /// Guard table counters.
    pub table: TableStats,
    /// RPC counters.
    pub counters: RpcCounters,
    /// Broadcast-baseline message counters.
    pub broadcast: MessageCounts,
    /// Size of the broadcast-baseline revoked table.
    pub broadcast_revoked: u64,
    /// The node's broadcast peers.
    pub peers: Vec<u64>,
    /// Refusals since start, by detailed kind name.
    pub refusals: HashMap<String, u64>,
    /// The most recent refusals in detail, oldest first.
    pub recent_refusals: Vec<pb::Refusal>,
}

/// What [`NodeClient::poll_upgrades`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upgrades {
    /// Notices after the requested sequence number, with their sequence numbers.
    pub notices: Vec<(u64, UpgradeNotice)>,
    /// The latest sequence number published: pass it as `after` next time.
    pub latest: u64,
    /// Whether some notices after `after` were dropped (the node keeps a bounded number):
    /// holders should renew on [`ErrorKind::Upgraded`] instead.
    pub missed: bool,
}

/// The outcome of a broadcast revocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BroadcastOutcome {
    /// Peers a revoke message was sent to.
    pub peers_notified: u32,
    /// Acknowledgements received.
    pub acks: u32,
    /// Whether every peer acknowledged.
    pub complete: bool,
}

/// A client of one node. Cheap to clone (clones share the connection); every method takes
/// `&self`.
#[derive(Clone, Debug)]
pub struct NodeClient {
    raw: RawClient<Resend>,
    node: u64,
}

/// How a client reaches a node: mutual TLS with its material (the node's certificate must
/// name the node id the client expects), or plaintext for nodes run `insecure` in tests.
#[derive(Clone, Copy, Debug)]
pub enum Reach<'a> {
    /// Mutual TLS.
    Tls(&'a TlsMaterial),
    /// Plaintext, unauthenticated.
    Insecure,
}

/// The endpoint for `addr`, and for [`Reach::Tls`] the connector that makes its TLS
/// connections ([`crate::connector`]: the server must name node `node`).
fn endpoint(
    addr: &str,
    node: u64,
    reach: Reach<'_>,
    timeout: Duration,
) -> Result<(Endpoint, Option<NodeConnector>), ClientError> {
    let bad = |why: String| ClientError::BadAddress {
        addr: addr.to_owned(),
        why,
    };
    // The connector speaks TLS itself: tonic sees a plain HTTP/2 connection.
    let uri = match addr.split_once("://") {
        Some((_, rest)) => format!("http://{rest}"),
        None => format!("http://{addr}"),
    };
    let ep = Endpoint::from_shared(uri)
        .map_err(|e| bad(e.to_string()))?
        .timeout(timeout)
        .connect_timeout(DEFAULT_CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    let connector = match reach {
        Reach::Tls(tls) => Some(tls.connector(node).map_err(|e| bad(format!("TLS: {e}")))?),
        Reach::Insecure => None,
    };
    Ok((ep, connector))
}

/// A gRPC channel to node `node` at `addr` (`host:port`), checked as [`NodeClient::connect`]
/// checks it: for the node's other services (the standard health service) or a raw client.
pub async fn connect_channel(
    addr: impl ToString,
    node: u64,
    reach: Reach<'_>,
) -> Result<Channel, ClientError> {
    let addr = addr.to_string();
    let (ep, connector) = endpoint(&addr, node, reach, DEFAULT_TIMEOUT)?;
    match connector {
        Some(c) => ep.connect_with_connector(c).await,
        None => ep.connect().await,
    }
    .map_err(|source| ClientError::Connect { addr, source })
}

fn decode_token(bytes: &[u8]) -> Result<GuardedToken, ClientError> {
    GuardedToken::decode(bytes).map_err(|e| ClientError::BadReply(format!("token: {e}")))
}

impl NodeClient {
    /// Connects to node `node` at `addr` (`host:port`). With [`Reach::Tls`] the handshake
    /// fails unless the server's certificate names node `node` and chains to the CA.
    pub async fn connect(
        addr: impl ToString,
        node: u64,
        reach: Reach<'_>,
    ) -> Result<NodeClient, ClientError> {
        Ok(Self::from_channel(
            connect_channel(addr, node, reach).await?,
            node,
        ))
    }

    /// A client that connects on first use (and reconnects after failures); every call is
    /// limited to `timeout`. This is how nodes talk to their peers.
    pub fn connect_lazy(
        addr: impl ToString,
        node: u64,
        reach: Reach<'_>,
        timeout: Duration,
    ) -> Result<NodeClient, ClientError> {
        let addr = addr.to_string();
        let (ep, connector) = endpoint(&addr, node, reach, timeout)?;
        let channel = match connector {
            Some(c) => ep.connect_with_connector_lazy(c),
            None => ep.connect_lazy(),
        };
        Ok(Self::from_channel(channel, node))
    }

    /// A client of node `node` over an existing channel.
    pub fn from_channel(channel: Channel, node: u64) -> NodeClient {
        NodeClient {
            // Requests a node refused unprocessed as it closed a connection are sent again.
            raw: RawClient::new(Resend::new(channel)),
            node,
        }
    }

    /// The node this client talks to.
    pub fn node(&self) -> u64 {
        self.node
    }

    fn raw(&self) -> RawClient<Resend> {
        self.raw.clone()
    }

    /// Exports capability `cap` (for an object in the node's store) for context `context`
    /// with `scope`: the root token of a new guard. `context_key` is the signing key of the
    /// context object's `kuid`: it signs the request's proof
    /// ([`crate::export_proof::ExportProof`]).
    pub async fn export(
        &self,
        cap: &Cap,
        context: ObjID,
        context_key: &SigningKey,
        scope: Scope,
    ) -> Result<GuardedToken, ClientError> {
        let cap = cap.encode().to_vec();
        let claim = ExportClaim {
            node: self.node,
            cap: &cap,
            context,
            scope: &scope,
        };
        let proof = ExportProof::sign(context_key, &claim, now_ns())
            .map_err(|e| ClientError::Local(e.to_string()))?;
        let req = pb::ExportRequest {
            context: context.to_le_bytes().to_vec(),
            scope: Some(wire::scope_to_pb(&scope)),
            proof: Some(pb::ExportProof {
                time: proof.time,
                nonce: proof.nonce.to_vec(),
                signature: proof.signature.encode().to_vec(),
            }),
            cap,
        };
        self.export_raw(req).await
    }

    /// Sends an export request as it is (for tests of the node's checks).
    pub async fn export_raw(&self, req: pb::ExportRequest) -> Result<GuardedToken, ClientError> {
        let reply = self.raw().export(req).await?.into_inner();
        decode_token(&reply.token)
    }

    /// Reads `len` bytes at `offset` of the token's object.
    pub async fn read(
        &self,
        token: &GuardedToken,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, ClientError> {
        self.invoke_bytes(token.encode(), Op::Read, offset, len, Vec::new())
            .await
    }

    /// Writes `data` at `offset` of the token's object.
    pub async fn write(
        &self,
        token: &GuardedToken,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ClientError> {
        self.invoke_bytes(
            token.encode(),
            Op::Write,
            offset,
            data.len() as u64,
            data.to_vec(),
        )
        .await
        .map(drop)
    }

    /// An invocation with the token as raw bytes (as they came from elsewhere). For a write,
    /// `len` must be `data.len()`. Returns the bytes read (empty for a write).
    pub async fn invoke_bytes(
        &self,
        token: Vec<u8>,
        op: Op,
        offset: u64,
        len: u64,
        data: Vec<u8>,
    ) -> Result<Vec<u8>, ClientError> {
        let op = match op {
            Op::Read => pb::Op::Read,
            Op::Write => pb::Op::Write,
        };
        let req = pb::InvokeRequest {
            token,
            op: op.into(),
            offset,
            len,
            data,
        };
        Ok(self.raw().invoke(req).await?.into_inner().data)
    }

    /// Revokes the token's guard and its descendants.
    pub async fn revoke(&self, token: &GuardedToken) -> Result<RevokeReport, ClientError> {
        self.revoke_bytes(token.encode()).await
    }

    /// [`NodeClient::revoke`] with the token as raw bytes.
    pub async fn revoke_bytes(&self, token: Vec<u8>) -> Result<RevokeReport, ClientError> {
        let reply = self
            .raw()
            .revoke(pb::TokenRequest { token })
            .await?
            .into_inner();
        Ok(RevokeReport {
            guards_revoked: reply.guards_revoked,
        })
    }

    /// Exchanges a token whose guard was upgraded for a current one.
    pub async fn renew(&self, token: &GuardedToken) -> Result<GuardedToken, ClientError> {
        let reply = self
            .raw()
            .renew(pb::TokenRequest {
                token: token.encode(),
            })
            .await?
            .into_inner();
        decode_token(&reply.token)
    }

    /// Asks for a child guard of the token's guard with `scope` (needs `DERIVE`).
    pub async fn derive(
        &self,
        token: &GuardedToken,
        scope: Scope,
    ) -> Result<GuardedToken, ClientError> {
        let reply = self
            .raw()
            .derive_guard(pb::DeriveRequest {
                token: token.encode(),
                scope: Some(wire::scope_to_pb(&scope)),
            })
            .await?
            .into_inner();
        decode_token(&reply.token)
    }

    /// The node's identity, counters and recent refusals (operators only).
    pub async fn status(&self) -> Result<NodeStatus, ClientError> {
        let r = self.raw().status(pb::StatusRequest {}).await?.into_inner();
        let table = r
            .table
            .as_ref()
            .map(wire::stats_from_pb)
            .ok_or_else(|| ClientError::BadReply("status without table stats".into()))?;
        let counters = r.counters.unwrap_or_default();
        let broadcast = r.broadcast.unwrap_or_default();
        Ok(NodeStatus {
            controller: ControllerId::new(r.node, r.controller_version),
            table,
            counters: RpcCounters {
                requests_received: counters.requests_received,
                requests_sent: counters.requests_sent,
                replies_received: counters.replies_received,
                received_by_rpc: counters.received_by_rpc,
            },
            broadcast: MessageCounts {
                sent: broadcast.sent,
                received: broadcast.received,
                revocations: broadcast.revocations,
            },
            broadcast_revoked: broadcast.revoked_len,
            peers: r.peers,
            refusals: r.refusals,
            recent_refusals: r.recent_refusals,
        })
    }

    /// Upgrade notices published after sequence number `after` (0: all the node keeps).
    pub async fn poll_upgrades(&self, after: u64) -> Result<Upgrades, ClientError> {
        let r = self
            .raw()
            .poll_upgrades(pb::PollUpgradesRequest { after })
            .await?
            .into_inner();
        let notices = r
            .notices
            .iter()
            .map(|n| {
                UpgradeNotice::decode(&n.notice)
                    .map(|u| (n.seq, u))
                    .map_err(|e| ClientError::BadReply(format!("upgrade notice: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Upgrades {
            notices,
            latest: r.latest,
            missed: r.missed,
        })
    }

    /// Broadcast baseline: names a new capability issued by the node.
    pub async fn broadcast_issue(&self) -> Result<CapName, ClientError> {
        let r = self
            .raw()
            .broadcast_issue(pb::BroadcastIssueRequest {})
            .await?
            .into_inner();
        Ok(wire::cap_name_from_pb(&r))
    }

    /// Broadcast baseline: revokes `cap` at the node and, through it, at every peer.
    pub async fn broadcast_revoke(&self, cap: CapName) -> Result<BroadcastOutcome, ClientError> {
        let r = self
            .raw()
            .broadcast_revoke(wire::cap_name_to_pb(&cap))
            .await?
            .into_inner();
        Ok(BroadcastOutcome {
            peers_notified: r.peers_notified,
            acks: r.acks,
            complete: r.complete,
        })
    }

    /// Broadcast baseline: the invocation check at the node
    /// ([`ErrorKind::BroadcastRevoked`] once revoked there).
    pub async fn broadcast_check(&self, cap: CapName) -> Result<(), ClientError> {
        self.raw()
            .broadcast_check(wire::cap_name_to_pb(&cap))
            .await?;
        Ok(())
    }

    /// Broadcast baseline, node to node: delivers `message` from node `from`; returns the
    /// answers.
    pub async fn broadcast(
        &self,
        from: u64,
        message: BroadcastMessage,
    ) -> Result<Vec<BroadcastMessage>, ClientError> {
        let r = self
            .raw()
            .broadcast(pb::BroadcastRequest {
                from,
                message: message.encode().to_vec(),
            })
            .await?
            .into_inner();
        r.replies
            .iter()
            .map(|b| {
                BroadcastMessage::decode(b)
                    .map_err(|e| ClientError::BadReply(format!("broadcast reply: {e}")))
            })
            .collect()
    }
}

/// Clients of several nodes, by node id: sends each token-bearing call to the token's owner.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    nodes: HashMap<u64, NodeClient>,
}

impl Cluster {
    /// An empty cluster.
    pub fn new() -> Cluster {
        Cluster::default()
    }

    /// Adds (or replaces) node `node`'s client.
    pub fn insert(&mut self, node: u64, client: NodeClient) {
        self.nodes.insert(node, client);
    }

    /// Node `node`'s client.
    pub fn node(&self, node: u64) -> Option<&NodeClient> {
        self.nodes.get(&node)
    }

    /// The client of the token's owner.
    pub fn owner_of(&self, token: &GuardedToken) -> Result<&NodeClient, ClientError> {
        let node = token.owner().node;
        self.nodes
            .get(&node)
            .ok_or_else(|| ClientError::BadAddress {
                addr: format!("node {node}"),
                why: "the cluster has no address for the token's owner".into(),
            })
    }

    /// [`NodeClient::read`] at the token's owner.
    pub async fn read(
        &self,
        token: &GuardedToken,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, ClientError> {
        self.owner_of(token)?.read(token, offset, len).await
    }

    /// [`NodeClient::write`] at the token's owner.
    pub async fn write(
        &self,
        token: &GuardedToken,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ClientError> {
        self.owner_of(token)?.write(token, offset, data).await
    }

    /// [`NodeClient::revoke`] at the token's owner.
    pub async fn revoke(&self, token: &GuardedToken) -> Result<RevokeReport, ClientError> {
        self.owner_of(token)?.revoke(token).await
    }
}
