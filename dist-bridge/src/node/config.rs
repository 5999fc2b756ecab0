//! What a node is told: its [`NodeConfig`](super::NodeConfig) and broadcast [`Peer`]s, and their checks.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use twizzler_capsec::MAX_OBJECT_SIZE;

use crate::table::{GuardTable, GuardTableConfig};
use crate::tls::Transport;

use super::StartError;

/// The largest [`NodeConfig::max_io_bytes`](super::NodeConfig::max_io_bytes): invocations must fit in a gRPC message (4 MiB by
/// default) with room to spare.
pub const MAX_IO_LIMIT: u64 = 3 << 20;

/// Room in a message for what is not an invocation's data (its token, offsets, framing).
const MESSAGE_OVERHEAD: usize = 64 << 10;

/// The gRPC header of each message (a compression flag and the length).
const GRPC_HEADER: usize = 5;

/// The longest any of a node's durations may be: a year.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// The largest [`NodeConfig::max_message_bytes`].
pub const MAX_MESSAGE_LIMIT: usize = 64 << 20;

/// A broadcast-baseline peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its node id.
    pub id: u64,
    /// Its address (`host:port` or an `http://` URI).
    pub addr: String,
}

/// How a node runs. [`NodeConfig::validate`] (run by [`Node::start`](super::Node::start))
/// refuses unusable values: zero limits, and durations longer than [`MAX_DURATION`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    /// The node id (the cluster's name for it; stored in the version file).
    pub node_id: u64,
    /// Where to listen (port 0: any free port; see [`RunningNode::addr`](super::RunningNode::addr)).
    pub listen: SocketAddr,
    /// The object store directory ([`DbStore`](secctx::DbStore)).
    pub store_dir: PathBuf,
    /// The controller version file ([`VersionFile`](crate::controller::VersionFile)).
    pub version_file: PathBuf,
    /// The guard table.
    pub guard_table: GuardTableConfig,
    /// Broadcast-baseline peers (every other node of the cluster).
    pub peers: Vec<Peer>,
    /// Information flow control across nodes: the nodes trusted with each tag
    /// (`[difc] trusted_nodes`; default: none, `docs/DIFC.md` §5.9).
    pub difc: crate::difc::DifcPolicy,
    /// How the node is reached: mutual TLS (its certificate must name this node), or
    /// plaintext for tests. `None` (the default of [`NodeConfig::new`]) is refused at start:
    /// the choice is explicit.
    pub transport: Option<Transport>,
    /// How long a new connection may take to complete its TLS handshake.
    pub handshake_timeout: Duration,
    /// The revocation file ([`crate::revoked_certs`]): requests from the certificates it
    /// lists are refused, and it is read again when it changes. `None`: no certificate is
    /// revoked. Needs TLS.
    pub revoked_certs: Option<PathBuf>,
    /// How far an export proof's time may be from the node's clock.
    pub export_skew: Duration,
    /// The most export nonces remembered at once (each for `2 × export_skew` at most): more
    /// exports than this within the window are refused with `busy`.
    pub export_nonces: usize,
    /// The most of them one signing key may hold, for all the contexts it signs for: the
    /// holder of one key cannot fill the memory and keep everyone else from exporting (at
    /// most `export_nonces`).
    pub export_nonces_per_key: usize,
    /// Where to serve Prometheus metrics (`GET /metrics`, plain HTTP); `None`: nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// The most bytes one invocation may read or write (1 ..= [`MAX_IO_LIMIT`]).
    pub max_io_bytes: u64,
    /// Writes may extend an object up to this many bytes, no further (at most 1 GiB, the
    /// largest object). It bounds how far a token holder can grow the owner's objects (a
    /// write itself touches only the pages of its range).
    pub max_object_bytes: u64,
    /// The most bytes the node keeps in memory of small objects it has read, each as the
    /// store's current snapshot holds it (`secctx::CacheLimits`; 0: no cache). A cached read
    /// is exactly as fresh as one from the store: it is only served for the snapshot it was
    /// read from, and the snapshot is checked against the store's latest commit first.
    pub read_cache_bytes: u64,
    /// Objects longer than this are never kept in that cache.
    pub read_cache_object_bytes: u64,
    /// How often the maintenance task runs.
    pub maintenance_interval: Duration,
    /// Time limit of a request to a peer.
    pub peer_timeout: Duration,
    /// How long a shutdown waits for open connections to finish their requests and close;
    /// then they are cut (a client that keeps a connection or a stream open cannot hold the
    /// node, or its version file's lock, any longer).
    pub shutdown_deadline: Duration,
    /// The longest a request may take, reading its body included: a client that stalls
    /// mid-request gets `CANCELLED` (or `DEADLINE_EXCEEDED`) and its memory back.
    pub request_timeout: Duration,
    /// Concurrent requests (HTTP/2 streams) one connection may have open; further ones wait.
    pub max_streams_per_connection: u32,
    /// How often an idle connection is pinged (HTTP/2 keepalive); a peer that does not answer
    /// within [`NodeConfig::keepalive_timeout`] is disconnected.
    pub keepalive_interval: Duration,
    /// See [`NodeConfig::keepalive_interval`].
    pub keepalive_timeout: Duration,
    /// The largest request or reply message, in bytes: larger ones are refused before they
    /// are buffered. At least [`NodeConfig::max_io_bytes`] plus 64 KiB (an invocation's data
    /// and its token), at most 64 MiB.
    pub max_message_bytes: usize,
    /// The most bytes the node holds, across all its connections, of request messages that
    /// have not fully arrived (a client that declares a large message and stalls holds what
    /// it sent until its stream ends). A request that would take the node past it is refused
    /// with `RESOURCE_EXHAUSTED` naming this limit; a message that arrives whole in one
    /// HTTP/2 frame never needs any of it. At least `max_message_bytes + 5` (one largest
    /// message and its gRPC header).
    pub max_pending_request_bytes: usize,
    /// Connections the node serves at once; further ones are closed as they come.
    pub max_connections: usize,
    /// The longest a connection lives: then the node asks the client to go (HTTP/2 GOAWAY;
    /// requests in flight are served, clients reconnect), and cuts it
    /// [`NodeConfig::request_timeout`] later if it is still open.
    pub max_connection_age: Duration,
    /// The longest a connection may have no request in flight (none being received,
    /// served or answered): then the node asks the client to go (HTTP/2 GOAWAY), and cuts the
    /// connection [`NodeConfig::request_timeout`] later if it is still open. Bounds a client
    /// that holds a connection slot without using it, answering pings, or that starts a
    /// request's header block and never finishes it (no request is in flight until its
    /// headers are complete). A request the client sent before it saw the GOAWAY is served;
    /// one the GOAWAY refused is sent again by the node's clients.
    pub max_connection_idle: Duration,
    /// How many upgrade notices `PollUpgrades` keeps.
    pub notice_buffer: usize,
}

impl NodeConfig {
    /// Node `node_id` with its store and version file, listening on `127.0.0.1:0`, with no
    /// transport chosen yet (set [`NodeConfig::transport`]), TLS handshakes limited to 10 s,
    /// export proofs within 60 s of the clock, no metrics listener, the default guard table, no peers, 1 MiB per invocation, objects grown to at most 64 MiB,
    /// maintenance every second, open connections cut 10 s into a shutdown, requests limited
    /// to 30 s and 32 at a time per connection, at most 128 MiB held for request messages
    /// still arriving, idle connections pinged every 30 s, 256 connections at once, each for
    /// an hour at most.
    pub fn new(
        node_id: u64,
        store_dir: impl Into<PathBuf>,
        version_file: impl Into<PathBuf>,
    ) -> Self {
        NodeConfig {
            node_id,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            store_dir: store_dir.into(),
            version_file: version_file.into(),
            guard_table: GuardTableConfig::default(),
            peers: Vec::new(),
            difc: crate::difc::DifcPolicy::default(),
            transport: None,
            handshake_timeout: Duration::from_secs(10),
            revoked_certs: None,
            export_skew: Duration::from_secs(60),
            export_nonces: 65_536,
            export_nonces_per_key: 4_096,
            metrics_listen: None,
            max_io_bytes: 1 << 20,
            max_object_bytes: 64 << 20,
            read_cache_bytes: secctx::CacheLimits::default().max_total_bytes,
            read_cache_object_bytes: secctx::CacheLimits::default().max_object_bytes,
            maintenance_interval: Duration::from_secs(1),
            peer_timeout: Duration::from_secs(5),
            shutdown_deadline: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_streams_per_connection: 32,
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            max_message_bytes: 4 << 20,
            max_pending_request_bytes: 128 << 20,
            max_connections: 256,
            max_connection_age: Duration::from_secs(3600),
            max_connection_idle: Duration::from_secs(300),
            notice_buffer: 1024,
        }
    }
}

impl NodeConfig {
    /// Checks every value [`Node::start`](super::Node::start) checks before touching any file: the guard table,
    /// the limits, and the peers (addresses well-formed, no id twice).
    pub fn validate(&self) -> Result<(), StartError> {
        GuardTable::new(self.guard_table).map_err(StartError::Table)?;
        if !(1..=MAX_IO_LIMIT).contains(&self.max_io_bytes) {
            return Err(StartError::Config(format!(
                "max_io_bytes must be between 1 and {MAX_IO_LIMIT}, not {}",
                self.max_io_bytes
            )));
        }
        if !(1..=MAX_OBJECT_SIZE).contains(&self.max_object_bytes) {
            return Err(StartError::Config(format!(
                "max_object_bytes must be between 1 and {MAX_OBJECT_SIZE}, not {}",
                self.max_object_bytes
            )));
        }
        if self.transport.is_none() {
            return Err(StartError::Config(
                "no transport: configure TLS (ca, cert, key) or, for tests only, insecure".into(),
            ));
        }
        if self.export_nonces == 0 {
            return Err(StartError::Config(
                "export_nonces must be at least 1".into(),
            ));
        }
        if !(1..=self.export_nonces).contains(&self.export_nonces_per_key) {
            return Err(StartError::Config(format!(
                "export_nonces_per_key must be between 1 and export_nonces ({}), not {}",
                self.export_nonces, self.export_nonces_per_key
            )));
        }
        // Timers add these to clock readings: a duration that overflows one would panic.
        for (name, d, may_be_zero) in [
            ("handshake_timeout", self.handshake_timeout, false),
            ("max_connection_age", self.max_connection_age, false),
            ("max_connection_idle", self.max_connection_idle, false),
            ("export_skew", self.export_skew, false),
            ("request_timeout", self.request_timeout, false),
            ("keepalive_interval", self.keepalive_interval, false),
            ("keepalive_timeout", self.keepalive_timeout, false),
            ("shutdown_deadline", self.shutdown_deadline, true),
            ("maintenance_interval", self.maintenance_interval, false),
            ("peer_timeout", self.peer_timeout, false),
        ] {
            if d.is_zero() && !may_be_zero {
                return Err(StartError::Config(format!("{name} must be positive")));
            }
            if d > MAX_DURATION {
                return Err(StartError::Config(format!(
                    "{name} must be at most a year ({} s), not {} s",
                    MAX_DURATION.as_secs(),
                    d.as_secs()
                )));
            }
        }
        let least = self.max_io_bytes as usize + MESSAGE_OVERHEAD;
        if !(least..=MAX_MESSAGE_LIMIT).contains(&self.max_message_bytes) {
            return Err(StartError::Config(format!(
                "max_message_bytes must be between {least} (max_io_bytes plus 64 KiB) and {MAX_MESSAGE_LIMIT}, not {}",
                self.max_message_bytes
            )));
        }
        let least = self.max_message_bytes.saturating_add(GRPC_HEADER);
        if self.max_pending_request_bytes < least {
            return Err(StartError::Config(format!(
                "max_pending_request_bytes must be at least {least} (max_message_bytes plus 5), not {}",
                self.max_pending_request_bytes
            )));
        }
        if self.revoked_certs.is_some() && !matches!(self.transport, Some(Transport::Tls(_))) {
            return Err(StartError::Config(
                "revoked_certs needs TLS: without it no caller has a certificate".into(),
            ));
        }
        if self.max_connections == 0 {
            return Err(StartError::Config(
                "max_connections must be at least 1".into(),
            ));
        }
        if self.max_streams_per_connection == 0 {
            return Err(StartError::Config(
                "max_streams_per_connection must be at least 1".into(),
            ));
        }
        let mut seen = HashSet::new();
        for p in &self.peers {
            if !seen.insert(p.id) {
                return Err(StartError::Config(format!("peer {} is listed twice", p.id)));
            }
            if p.id != self.node_id {
                let uri = if p.addr.contains("://") {
                    p.addr.clone()
                } else {
                    format!("http://{}", p.addr)
                };
                tonic::transport::Endpoint::from_shared(uri).map_err(|e| {
                    StartError::Config(format!("peer {} address {:?}: {e}", p.id, p.addr))
                })?;
            }
        }
        Ok(())
    }
}
