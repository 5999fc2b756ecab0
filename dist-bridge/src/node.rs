//! The node service: one node's [`Owner`] and object store behind gRPC (`tonic`), plus the
//! broadcast-revocation baseline between peers.
//!
//! [`Node::start`] binds the listener, starts a new life of the controller
//! ([`VersionFile::open_and_bump`]: every token of an earlier life is dead from here on),
//! and serves the `dist_bridge.v1.Node` service (`proto/dist_bridge.proto`) until
//! [`RunningNode::shutdown`]: in-flight requests finish, then the version file's lock is
//! released, so a new life can start on the same files.
//!
//! # Example
//!
//! ```
//! use dist_bridge::*;
//! use secctx::{DbStore, ObjMeta, Object, ObjectStore, keypair};
//! use twizzler_capsec::{Cap, CapGrant, Expiry, ObjID, Protections, SigningKey, SigningScheme};
//! # use rand_core::SeedableRng;
//! # let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1); // use the OS RNG in real code
//! # let dir = std::env::temp_dir().join(format!("dist-bridge-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! // The node's store: a verifying key, and an object it signs for.
//! let store = DbStore::open(dir.join("store")).unwrap();
//! let key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
//! let (kuid, object, ctx) = (ObjID::new(1), ObjID::new(2), ObjID::new(3));
//! keypair::store_verifying_key(&store, kuid, &key.verifying_key()).unwrap();
//! let data = b"hello".to_vec();
//! store.create(&Object { id: object, meta: ObjMeta::signed_by(kuid), data }).unwrap();
//! let cap = Cap::mint(CapGrant::new(object, ctx, Protections::READ), &key).unwrap();
//!
//! tokio::runtime::Runtime::new().unwrap().block_on(async {
//!     let config = NodeConfig::new(1, dir.join("store"), dir.join("controller.version"));
//!     let node = Node::start(config).await.unwrap(); // listens on 127.0.0.1:<any port>
//!     let client = NodeClient::connect(node.addr()).await.unwrap();
//!
//!     let scope = Scope::new(Rights::READ | Rights::REVOKE, ByteRange::WHOLE, Expiry::NEVER);
//!     let token = client.export(&cap, ctx, scope).await.unwrap();
//!     assert_eq!(client.read(&token, 0, 5).await.unwrap(), b"hello");
//!
//!     client.revoke(&token).await.unwrap();
//!     let refused = client.read(&token, 0, 5).await.unwrap_err();
//!     assert_eq!(refused.kind(), Some(ErrorKind::Revoked));
//!     node.shutdown().await.unwrap();
//! });
//! # let _ = std::fs::remove_dir_all(&dir);
//! ```
//!
//! # Requests
//!
//! | RPC | what the node does |
//! |---|---|
//! | `Export` | decodes the capability, looks up the object's `kuid` key in the store ([`StoreKeys`]), [`Owner::export`] |
//! | `Invoke` | [`Owner::check_bytes`], then reads or writes the object's bytes in the store |
//! | `Revoke` | [`Owner::revoke`] |
//! | `Renew` / `DeriveGuard` | [`Owner::renew`] / [`Owner::export_from`] |
//! | `Status` | controller, [`TableStats`], RPC counters, baseline counters |
//! | `PollUpgrades` | the [`UpgradeNotice`]s published so far (bounded buffer) |
//! | `BroadcastIssue` / `BroadcastRevoke` / `BroadcastCheck` / `Broadcast` | the baseline ([`BroadcastNode`]) |
//!
//! Refusals are gRPC statuses as described in [`crate::wire`].
//!
//! # Invocation semantics
//!
//! - **Read** `len` bytes at `offset`: bytes past the object's stored end read as zeros (an
//!   object is a sparse space of up to 1 GiB; only its prefix is stored).
//! - **Write** `data` at `offset`: through [`ObjectStore::update`] (atomic, serialised per
//!   object). A write past the stored end **extends** the object, zero-filling any gap; it
//!   never reaches past the token's range, which the check has already confined (and which
//!   lies inside 1 GiB).
//! - At most [`NodeConfig::max_io_bytes`] per invocation, and writes grow an object to at
//!   most [`NodeConfig::max_object_bytes`] ([`ErrorKind::ObjectTooLarge`] beyond).
//!
//! # Revocation is ordered after every invocation it lets through
//!
//! An invocation holds a shared *gate* from before its check until its read or write is done
//! (also when the caller goes away mid-request); a revocation takes the gate exclusively
//! around [`Owner::revoke`]. So when `Revoke` returns, every invocation that was accepted
//! before it has completed its effect, and every later one is refused. (The cost: a
//! revocation waits for the invocations in flight.)
//!
//! # Messages
//!
//! Revocation is one request and one reply, between the holder and the owner; the owner
//! sends nothing to anybody ([`RpcCounters`](crate::client::RpcCounters) shows it). Only the
//! baseline's `BroadcastRevoke` makes the node send requests: one `Broadcast` to each of its
//! `N - 1` peers, whose replies carry the acknowledgements.
//!
//! # Background
//!
//! A maintenance task runs every [`NodeConfig::maintenance_interval`]: it publishes the
//! upgrade notices of range upgrades ([`Owner::drain_upgrades`]) for `PollUpgrades`, frees
//! expired guards ([`Owner::sweep_expired`]), and applies the store's revocation list: the
//! guards exported from a capability revoked there ([`Owner::revoke_source`]), and every
//! guard of an object whose `kuid` key was revoked there ([`Owner::revoke_object`]).
//!
//! # Security
//!
//! Tokens are bearer tokens and requests are not authenticated by the transport: run nodes
//! on a network where the channel is authenticated and encrypted (a TLS terminator, a VPN, or
//! tonic's TLS feature). `Export` trusts the caller to run in the context it names, exactly as
//! a local process would be trusted, so by default it is accepted only from loopback
//! ([`NodeConfig::allow_remote_export`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use secctx::revocations::RevocationList;
use secctx::{DbStore, ObjectStore, StoreError};
use tokio::sync::{RwLock, watch};
use tokio::task::{JoinHandle, JoinSet};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request, Response, Status};
use tracing::{debug, info, warn};
use twizzler_capsec::{Cap, MAX_OBJECT_SIZE, ObjID, RecordId};

use crate::broadcast::{BroadcastMessage, BroadcastNode};
use crate::client::NodeClient;
use crate::controller::{ControllerId, VersionFile, VersionFileError};
use crate::crypto::{NodeSecret, SecretError};
use crate::keys::StoreKeys;
use crate::owner::{ExportRequest, Grant, Owner, UpgradeNotice};
use crate::pb;
use crate::pb::node_server::{Node as NodeRpc, NodeServer};
use crate::rights::Op;
use crate::table::{ConfigError, GuardTable, GuardTableConfig, TableStats};
use crate::token::GuardedToken;
use crate::wire::{self, ErrorKind};

/// The largest [`NodeConfig::max_io_bytes`]: invocations must fit in a gRPC message (4 MiB by
/// default) with room to spare.
pub const MAX_IO_LIMIT: u64 = 3 << 20;

/// A broadcast-baseline peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its node id.
    pub id: u64,
    /// Its address (`host:port` or an `http://` URI).
    pub addr: String,
}

/// How a node runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    /// The node id (the cluster's name for it; stored in the version file).
    pub node_id: u64,
    /// Where to listen (port 0: any free port; see [`RunningNode::addr`]).
    pub listen: SocketAddr,
    /// The object store directory ([`DbStore`]).
    pub store_dir: PathBuf,
    /// The controller version file ([`VersionFile`]).
    pub version_file: PathBuf,
    /// The guard table.
    pub guard_table: GuardTableConfig,
    /// Broadcast-baseline peers (every other node of the cluster).
    pub peers: Vec<Peer>,
    /// Accept `Export` from non-loopback addresses.
    pub allow_remote_export: bool,
    /// The most bytes one invocation may read or write (1 ..= [`MAX_IO_LIMIT`]).
    pub max_io_bytes: u64,
    /// Writes may extend an object up to this many bytes, no further (at most 1 GiB, the
    /// largest object). The store rewrites an object at every write, so this bounds what one
    /// write costs the owner.
    pub max_object_bytes: u64,
    /// How often the maintenance task runs.
    pub maintenance_interval: Duration,
    /// Time limit of a request to a peer.
    pub peer_timeout: Duration,
    /// How many upgrade notices `PollUpgrades` keeps.
    pub notice_buffer: usize,
}

impl NodeConfig {
    /// Node `node_id` with its store and version file, listening on `127.0.0.1:0`, with the
    /// default guard table, no peers, 1 MiB per invocation, objects grown to at most 64 MiB,
    /// maintenance every second.
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
            allow_remote_export: false,
            max_io_bytes: 1 << 20,
            max_object_bytes: 64 << 20,
            maintenance_interval: Duration::from_secs(1),
            peer_timeout: Duration::from_secs(5),
            notice_buffer: 1024,
        }
    }
}

impl NodeConfig {
    /// Checks every value [`Node::start`] checks before touching any file: the guard table,
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
        if self.maintenance_interval.is_zero() {
            return Err(StartError::Config(
                "the maintenance interval must be positive".into(),
            ));
        }
        if self.peer_timeout.is_zero() {
            return Err(StartError::Config(
                "the peer timeout must be positive".into(),
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

/// Why a node could not start.
#[derive(Debug)]
pub enum StartError {
    /// The guard table configuration is unusable.
    Table(ConfigError),
    /// Another configuration value is unusable.
    Config(String),
    /// The object store could not be opened.
    Store(StoreError),
    /// The listener could not be bound.
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The controller version could not be read or made durable.
    Version(VersionFileError),
    /// No node secret could be generated.
    Secret(SecretError),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Table(e) => write!(f, "bad guard table configuration: {e}"),
            Self::Config(why) => write!(f, "bad configuration: {why}"),
            Self::Store(e) => write!(f, "cannot open the object store: {e}"),
            Self::Bind { addr, source } => write!(f, "cannot listen on {addr}: {source}"),
            Self::Version(e) => e.fmt(f),
            Self::Secret(e) => write!(f, "cannot generate the node secret: {e}"),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Table(e) => Some(e),
            Self::Store(e) => Some(e),
            Self::Bind { source, .. } => Some(source),
            Self::Version(e) => Some(e),
            Self::Secret(e) => Some(e),
            Self::Config(_) => None,
        }
    }
}

/// Why a node stopped other than by request.
#[derive(Debug)]
pub enum ServeError {
    /// The server failed.
    Transport(tonic::transport::Error),
    /// The server task panicked or was cancelled.
    Task(tokio::task::JoinError),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transport(e) => write!(f, "server failed: {e}"),
            Self::Task(e) => write!(f, "server task failed: {e}"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Transport(e) => Some(e),
            Self::Task(e) => Some(e),
        }
    }
}

/// Asks a running node to stop (gracefully: in-flight requests finish).
#[derive(Clone, Debug)]
pub struct ShutdownHandle(Arc<watch::Sender<bool>>);

impl ShutdownHandle {
    /// Asks the node to stop; returns at once.
    pub fn shutdown(&self) {
        self.0.send_replace(true);
    }
}

/// A node serving in the current tokio runtime. Dropping it asks the node to stop.
#[derive(Debug)]
pub struct RunningNode {
    addr: SocketAddr,
    controller: ControllerId,
    shutdown: ShutdownHandle,
    serve: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    maintenance: Option<JoinHandle<()>>,
}

impl RunningNode {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The controller this life serves as.
    pub fn controller(&self) -> ControllerId {
        self.controller
    }

    /// A handle that stops the node from elsewhere (a signal handler).
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Asks the node to stop and waits until it has: the listener is closed, in-flight
    /// requests have finished, and the version file is unlocked.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        self.shutdown.shutdown();
        self.join().await
    }

    /// Waits until the node stops (after [`ShutdownHandle::shutdown`], or a server failure).
    pub async fn wait(mut self) -> Result<(), ServeError> {
        self.join().await
    }

    async fn join(&mut self) -> Result<(), ServeError> {
        let result = match self.serve.take() {
            Some(task) => match task.await {
                Ok(r) => r.map_err(ServeError::Transport),
                Err(e) => Err(ServeError::Task(e)),
            },
            None => Ok(()),
        };
        // The server is gone; stop the maintenance task too (it may already have seen the
        // signal).
        self.shutdown.shutdown();
        if let Some(task) = self.maintenance.take() {
            let _ = task.await;
        }
        info!(controller = %self.controller, "node stopped");
        result
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        self.shutdown.shutdown();
    }
}

/// Starts nodes.
#[derive(Debug)]
pub struct Node;

impl Node {
    /// Starts a node: validates the configuration, opens the store, binds the listener, bumps
    /// the controller version (durably), and serves in the background of the current tokio
    /// runtime.
    pub async fn start(config: NodeConfig) -> Result<RunningNode, StartError> {
        config.validate()?;
        let mut peers = HashMap::new();
        for p in &config.peers {
            if p.id == config.node_id {
                continue;
            }
            let client = NodeClient::connect_lazy(&p.addr, config.peer_timeout)
                .map_err(|e| StartError::Config(format!("peer {}: {e}", p.id)))?;
            peers.insert(p.id, client);
        }
        let store = DbStore::open(&config.store_dir).map_err(StartError::Store)?;
        let incoming = TcpIncoming::bind(config.listen)
            .map_err(|source| StartError::Bind {
                addr: config.listen,
                source,
            })?
            .with_nodelay(Some(true));
        let addr = incoming.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;

        let version = VersionFile::open_and_bump(&config.version_file, config.node_id)
            .map_err(StartError::Version)?;
        let controller = version.controller_id();
        let secret = NodeSecret::generate().map_err(StartError::Secret)?;
        let owner =
            Owner::new(controller, secret, config.guard_table).map_err(StartError::Table)?;
        let broadcast = BroadcastNode::new(config.node_id, peers.keys().copied());

        let shared = Arc::new(Shared {
            owner,
            store,
            gate: Arc::new(RwLock::new(())),
            broadcast,
            peers,
            counters: Counters::default(),
            notices: Mutex::new(Notices::new(config.notice_buffer)),
            revoked_sources: Mutex::new(Applied::default()),
            allow_remote_export: config.allow_remote_export,
            max_io_bytes: config.max_io_bytes,
            max_object_bytes: config.max_object_bytes,
        });

        let (tx, rx) = watch::channel(false);
        let shutdown = ShutdownHandle(Arc::new(tx));
        let service = NodeServer::new(Service {
            shared: shared.clone(),
        });
        let mut stop = rx.clone();
        let serve = tokio::spawn(async move {
            let signal = async move {
                // A dropped sender also means stop.
                let _ = stop.wait_for(|s| *s).await;
            };
            let result = Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, signal)
                .await;
            // Only now may another life of this controller start.
            drop(version);
            result
        });
        let maintenance = tokio::spawn(maintain(shared, config.maintenance_interval, rx));
        info!(controller = %controller, %addr, "node serving");
        Ok(RunningNode {
            addr,
            controller,
            shutdown,
            serve: Some(serve),
            maintenance: Some(maintenance),
        })
    }
}

/// Nanoseconds since the Unix epoch.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The RPCs that are counted.
#[derive(Clone, Copy, Debug)]
enum Rpc {
    Export,
    Invoke,
    Revoke,
    Renew,
    DeriveGuard,
    BroadcastIssue,
    BroadcastRevoke,
    BroadcastCheck,
    Broadcast,
}

const RPCS: [(Rpc, &str); 9] = [
    (Rpc::Export, "export"),
    (Rpc::Invoke, "invoke"),
    (Rpc::Revoke, "revoke"),
    (Rpc::Renew, "renew"),
    (Rpc::DeriveGuard, "derive_guard"),
    (Rpc::BroadcastIssue, "broadcast_issue"),
    (Rpc::BroadcastRevoke, "broadcast_revoke"),
    (Rpc::BroadcastCheck, "broadcast_check"),
    (Rpc::Broadcast, "broadcast"),
];

#[derive(Debug, Default)]
struct Counters {
    received: [AtomicU64; RPCS.len()],
    requests_sent: AtomicU64,
    replies_received: AtomicU64,
}

impl Counters {
    fn received(&self, rpc: Rpc) {
        if let Some(c) = self.received.get(rpc as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn to_pb(&self) -> pb::Counters {
        let mut by_rpc = HashMap::new();
        let mut total = 0u64;
        for ((_, name), c) in RPCS.iter().zip(&self.received) {
            let n = c.load(Ordering::Relaxed);
            total = total.saturating_add(n);
            by_rpc.insert((*name).to_owned(), n);
        }
        pb::Counters {
            requests_received: total,
            requests_sent: self.requests_sent.load(Ordering::Relaxed),
            replies_received: self.replies_received.load(Ordering::Relaxed),
            received_by_rpc: by_rpc,
        }
    }
}

/// The published upgrade notices, bounded.
#[derive(Debug)]
struct Notices {
    kept: VecDeque<(u64, Vec<u8>)>,
    latest: u64,
    capacity: usize,
}

impl Notices {
    fn new(capacity: usize) -> Self {
        Notices {
            kept: VecDeque::new(),
            latest: 0,
            capacity: capacity.max(1),
        }
    }

    fn push(&mut self, notice: &UpgradeNotice) {
        self.latest = self.latest.saturating_add(1);
        if self.kept.len() >= self.capacity {
            self.kept.pop_front();
        }
        self.kept.push_back((self.latest, notice.encode()));
    }
}

#[derive(Debug)]
struct Shared {
    owner: Owner,
    store: DbStore,
    /// Invocations hold it shared from check to effect; revocations exclusively.
    gate: Arc<RwLock<()>>,
    broadcast: BroadcastNode,
    peers: HashMap<u64, NodeClient>,
    counters: Counters,
    notices: Mutex<Notices>,
    /// Revocations of the store already applied to the guard table.
    revoked_sources: Mutex<Applied>,
    allow_remote_export: bool,
    max_io_bytes: u64,
    max_object_bytes: u64,
}

/// Store revocations already applied to the guard table.
#[derive(Debug, Default)]
struct Applied {
    records: HashSet<RecordId>,
    keys: HashSet<ObjID>,
}

impl Shared {
    fn publish_upgrades(&self) {
        match self.owner.drain_upgrades() {
            Ok(Some(notice)) => {
                info!(
                    guards = notice.changes.len(),
                    "guards upgraded; notice published"
                );
                if let Ok(mut n) = self.notices.lock() {
                    n.push(&notice);
                }
            }
            Ok(None) => {}
            Err(e) => warn!(error = %e, "cannot drain upgrades"),
        }
    }

    /// Revokes the guards exported from capabilities revoked in the store since the last
    /// call (by record id), and every guard of the objects whose `kuid` key has been revoked
    /// since (their capabilities were all signed by it).
    fn apply_store_revocations(&self) {
        let list = match RevocationList::load(&self.store) {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "cannot read the store's revocation list");
                return;
            }
        };
        let Ok(mut applied) = self.revoked_sources.lock() else {
            return;
        };
        for id in &list.records {
            if applied.records.insert(*id) {
                match self.owner.revoke_source(id) {
                    Ok(r) if r.guards_revoked > 0 => {
                        info!(record = %id, guards = r.guards_revoked, "capability revoked in the store; guards revoked");
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "cannot revoke the guards of a revoked capability"),
                }
            }
        }
        let new_keys: HashSet<ObjID> = list
            .keys
            .iter()
            .copied()
            .filter(|k| !applied.keys.contains(k))
            .collect();
        if new_keys.is_empty() {
            return;
        }
        let ids = match self.store.list() {
            Ok(ids) => ids,
            Err(e) => {
                warn!(error = %e, "cannot list the store");
                return;
            }
        };
        for id in ids {
            let Ok(obj) = self.store.get(id) else {
                continue;
            };
            if obj.meta.kuid.is_some_and(|k| new_keys.contains(&k)) {
                match self.owner.revoke_object(id) {
                    Ok(r) if r.guards_revoked > 0 => {
                        info!(object = %id, guards = r.guards_revoked, "key revoked in the store; guards revoked");
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "cannot revoke the guards of an object"),
                }
            }
        }
        applied.keys.extend(new_keys);
    }
}

async fn maintain(shared: Arc<Shared>, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                shared.publish_upgrades();
                match shared.owner.sweep_expired(now_ns()) {
                    Ok(r) if r.guards_revoked > 0 => debug!(guards = r.guards_revoked, "expired guards freed"),
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "cannot sweep expired guards"),
                }
                let s = shared.clone();
                let _ = tokio::task::spawn_blocking(move || s.apply_store_revocations()).await;
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Service {
    shared: Arc<Shared>,
}

fn internal(what: impl fmt::Display) -> Status {
    wire::refusal(Code::Internal, ErrorKind::Internal, what)
}

fn decode_token(bytes: &[u8]) -> Result<GuardedToken, Status> {
    GuardedToken::decode(bytes).map_err(|e| wire::invoke_status(&e.into()))
}

/// Logs a refusal and passes it on.
fn refused(rpc: &str, status: Status) -> Status {
    debug!(
        rpc,
        code = ?status.code(),
        kind = wire::kind_of(&status).map(ErrorKind::name).unwrap_or("none"),
        message = status.message(),
        "refused"
    );
    status
}

/// Reads `grant.len` bytes at `grant.offset`; bytes past the stored end read as zeros. Only
/// the pages the range touches are read.
fn read_bytes(store: &DbStore, grant: &Grant) -> Result<Vec<u8>, Status> {
    store
        .read_at(grant.object, grant.offset, grant.len)
        .map_err(|e| wire::store_status(&e))
}

/// Why a write failed.
enum WriteError {
    Store(StoreError),
    TooLarge { end: u64, max: u64 },
}

impl From<StoreError> for WriteError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// Writes `data` at `grant.offset`, extending (zero-filled) as needed, up to `max_object`
/// bytes, in one transaction that touches only the pages of the range.
fn write_bytes(store: &DbStore, grant: &Grant, data: &[u8], max_object: u64) -> Result<(), Status> {
    let end = grant
        .offset
        .checked_add(data.len() as u64)
        .ok_or_else(|| internal("write end overflows"))?;
    let result = store.transact(|tx| {
        let len = tx.info(grant.object)?.len;
        if end > len && end > max_object {
            return Err(WriteError::TooLarge {
                end,
                max: max_object,
            });
        }
        tx.write_at(grant.object, grant.offset, data)?;
        Ok(())
    });
    match result {
        Ok(()) => Ok(()),
        Err(WriteError::Store(e)) => Err(wire::store_status(&e)),
        Err(WriteError::TooLarge { end, max }) => Err(wire::refusal(
            Code::ResourceExhausted,
            ErrorKind::ObjectTooLarge,
            format!(
                "write would grow object {} to {end} bytes; this node grows objects to at most {max}",
                grant.object
            ),
        )),
    }
}

#[tonic::async_trait]
impl NodeRpc for Service {
    async fn export(
        &self,
        request: Request<pb::ExportRequest>,
    ) -> Result<Response<pb::TokenReply>, Status> {
        let sh = &self.shared;
        sh.counters.received(Rpc::Export);
        let local = request.remote_addr().is_some_and(|a| a.ip().is_loopback());
        if !local && !sh.allow_remote_export {
            return Err(refused(
                "export",
                wire::refusal(
                    Code::PermissionDenied,
                    ErrorKind::ExportNotAllowed,
                    format!(
                        "export is only accepted from loopback (the caller is {})",
                        request
                            .remote_addr()
                            .map_or_else(|| "unknown".to_owned(), |a| a.to_string())
                    ),
                ),
            ));
        }
        let r = request.into_inner();
        let cap = Cap::decode(&r.cap)
            .map_err(|e| refused("export", wire::bad_request(format!("bad capability: {e}"))))?;
        let context =
            wire::objid_from_bytes(&r.context, "context").map_err(|s| refused("export", s))?;
        let scope = wire::scope_from_pb(r.scope).map_err(|s| refused("export", s))?;
        let shared = sh.clone();
        let token = tokio::task::spawn_blocking(move || {
            let keys = StoreKeys::new(&shared.store).map_err(|e| wire::store_status(&e))?;
            shared
                .owner
                .export(&cap, &keys, &ExportRequest { context, scope }, now_ns())
                .map_err(|e| wire::export_status(&e))
        })
        .await
        .map_err(internal)?
        .map_err(|s| refused("export", s))?;
        info!(guard = %token.guard(), object = %token.object(), scope = ?token.scope(), "exported");
        Ok(Response::new(pb::TokenReply {
            token: token.encode(),
        }))
    }

    async fn invoke(
        &self,
        request: Request<pb::InvokeRequest>,
    ) -> Result<Response<pb::InvokeReply>, Status> {
        let sh = &self.shared;
        sh.counters.received(Rpc::Invoke);
        let r = request.into_inner();
        let op = match pb::Op::try_from(r.op) {
            Ok(pb::Op::Read) => Op::Read,
            Ok(pb::Op::Write) => Op::Write,
            _ => {
                return Err(refused(
                    "invoke",
                    wire::bad_request(format!("unknown operation {}", r.op)),
                ));
            }
        };
        let data = r.data;
        match op {
            Op::Read if !data.is_empty() => {
                return Err(refused(
                    "invoke",
                    wire::bad_request("a read carries no data"),
                ));
            }
            Op::Write if data.len() as u64 != r.len => {
                return Err(refused(
                    "invoke",
                    wire::bad_request(format!("write of {} bytes says len {}", data.len(), r.len)),
                ));
            }
            _ => {}
        }
        if r.len > sh.max_io_bytes {
            return Err(refused(
                "invoke",
                wire::bad_request(format!(
                    "{} bytes requested; this node moves at most {} per invocation",
                    r.len, sh.max_io_bytes
                )),
            ));
        }
        // Held from before the check until the effect is done, even if this handler is
        // cancelled: the guard moves into the blocking task.
        let gate = sh.gate.clone().read_owned().await;
        let grant = sh
            .owner
            .check_bytes(&r.token, op, r.offset, r.len, now_ns())
            .map_err(|e| refused("invoke", wire::invoke_status(&e)))?;
        let store = sh.store.clone();
        let max_object = sh.max_object_bytes;
        let data = tokio::task::spawn_blocking(move || {
            let result = match op {
                Op::Read => read_bytes(&store, &grant),
                Op::Write => write_bytes(&store, &grant, &data, max_object).map(|()| Vec::new()),
            };
            drop(gate);
            result
        })
        .await
        .map_err(internal)?
        .map_err(|s| refused("invoke", s))?;
        Ok(Response::new(pb::InvokeReply { data }))
    }

    async fn revoke(
        &self,
        request: Request<pb::TokenRequest>,
    ) -> Result<Response<pb::RevokeReply>, Status> {
        let sh = &self.shared;
        sh.counters.received(Rpc::Revoke);
        let token = decode_token(&request.into_inner().token).map_err(|s| refused("revoke", s))?;
        let report = {
            let _gate = sh.gate.write().await;
            sh.owner.revoke(&token, now_ns())
        }
        .map_err(|e| refused("revoke", wire::invoke_status(&e)))?;
        info!(guard = %token.guard(), guards = report.guards_revoked, "revoked");
        Ok(Response::new(pb::RevokeReply {
            guards_revoked: report.guards_revoked,
        }))
    }

    async fn renew(
        &self,
        request: Request<pb::TokenRequest>,
    ) -> Result<Response<pb::TokenReply>, Status> {
        let sh = &self.shared;
        sh.counters.received(Rpc::Renew);
        let token = decode_token(&request.into_inner().token).map_err(|s| refused("renew", s))?;
        let fresh = sh
            .owner
            .renew(&token, now_ns())
            .map_err(|e| refused("renew", wire::invoke_status(&e)))?;
        Ok(Response::new(pb::TokenReply {
            token: fresh.encode(),
        }))
    }

    async fn derive_guard(
        &self,
        request: Request<pb::DeriveRequest>,
    ) -> Result<Response<pb::TokenReply>, Status> {
        let sh = &self.shared;
        sh.counters.received(Rpc::DeriveGuard);
        let r = request.into_inner();
        let token = decode_token(&r.token).map_err(|s| refused("derive_guard", s))?;
        let scope = wire::scope_from_pb(r.scope).map_err(|s| refused("derive_guard", s))?;
        let child = sh
            .owner
            .export_from(&token, scope, now_ns())
            .map_err(|e| refused("derive_guard", wire::invoke_status(&e)))?;
        info!(parent = %token.guard(), guard = %child.guard(), "derived guard");
        Ok(Response::new(pb::TokenReply {
            token: child.encode(),
        }))
    }

    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusReply>, Status> {
        let sh = &self.shared;
        let table: TableStats = sh.owner.stats().map_err(|e| wire::invoke_status(&e))?;
        let counts = sh
            .broadcast
            .counts()
            .map_err(|e| wire::broadcast_status(&e))?;
        let revoked_len = sh
            .broadcast
            .revoked_len()
            .map_err(|e| wire::broadcast_status(&e))?;
        let id = sh.owner.id();
        Ok(Response::new(pb::StatusReply {
            node: id.node,
            controller_version: id.version,
            table: Some(wire::stats_to_pb(&table)),
            counters: Some(sh.counters.to_pb()),
            broadcast: Some(pb::BroadcastStats {
                sent: counts.sent,
                received: counts.received,
                revocations: counts.revocations,
                revoked_len: revoked_len as u64,
            }),
            peers: sh.broadcast.peers().to_vec(),
        }))
    }

    async fn poll_upgrades(
        &self,
        request: Request<pb::PollUpgradesRequest>,
    ) -> Result<Response<pb::PollUpgradesReply>, Status> {
        let sh = &self.shared;
        let after = request.into_inner().after;
        // Publish what is pending now, so a holder need not wait for the next tick.
        sh.publish_upgrades();
        let n = sh
            .notices
            .lock()
            .map_err(|_| internal("notice buffer unavailable"))?;
        let first_kept = n
            .kept
            .front()
            .map_or(n.latest.saturating_add(1), |(s, _)| *s);
        let missed = after < n.latest && after.saturating_add(1) < first_kept;
        let notices = n
            .kept
            .iter()
            .filter(|(seq, _)| *seq > after)
            .map(|(seq, bytes)| pb::Notice {
                seq: *seq,
                notice: bytes.clone(),
            })
            .collect();
        Ok(Response::new(pb::PollUpgradesReply {
            notices,
            latest: n.latest,
            missed,
        }))
    }

    async fn broadcast_issue(
        &self,
        _request: Request<pb::BroadcastIssueRequest>,
    ) -> Result<Response<pb::CapName>, Status> {
        let sh = &self.shared;
        sh.counters.received(Rpc::BroadcastIssue);
        let cap = sh
            .broadcast
            .issue()
            .map_err(|e| wire::broadcast_status(&e))?;
        Ok(Response::new(wire::cap_name_to_pb(&cap)))
    }

    async fn broadcast_revoke(
        &self,
        request: Request<pb::CapName>,
    ) -> Result<Response<pb::BroadcastRevokeReply>, Status> {
        let sh = &self.shared;
        sh.counters.received(Rpc::BroadcastRevoke);
        let cap = wire::cap_name_from_pb(&request.into_inner());
        let outgoing = sh
            .broadcast
            .revoke(cap)
            .map_err(|e| refused("broadcast_revoke", wire::broadcast_status(&e)))?;
        let from = sh.broadcast.node();
        let mut sends = JoinSet::new();
        for out in &outgoing {
            let to = out.to;
            let message = out.message;
            let client = sh.peers.get(&to).cloned();
            sh.counters.requests_sent.fetch_add(1, Ordering::Relaxed);
            sends.spawn(async move {
                let result = match client {
                    Some(c) => c.broadcast(from, message).await.map_err(|e| e.to_string()),
                    None => Err("no address for this peer".to_owned()),
                };
                (to, result)
            });
        }
        let mut acks = 0u32;
        let mut failures = Vec::new();
        while let Some(joined) = sends.join_next().await {
            match joined {
                Ok((peer, Ok(replies))) => {
                    sh.counters.replies_received.fetch_add(1, Ordering::Relaxed);
                    for m in replies {
                        if matches!(m, BroadcastMessage::Ack(c) if c == cap) {
                            acks = acks.saturating_add(1);
                        }
                        if let Err(e) = sh.broadcast.handle(peer, m) {
                            failures.push(format!("node {peer}: {e}"));
                        }
                    }
                }
                Ok((peer, Err(e))) => failures.push(format!("node {peer}: {e}")),
                Err(e) => failures.push(format!("send task: {e}")),
            }
        }
        let complete = sh
            .broadcast
            .is_complete(cap)
            .map_err(|e| wire::broadcast_status(&e))?;
        if !failures.is_empty() {
            return Err(refused(
                "broadcast_revoke",
                wire::refusal(
                    Code::Unavailable,
                    ErrorKind::PeerFailed,
                    format!(
                        "{cap} is revoked here, but {} of {} peers did not acknowledge: {}",
                        failures.len(),
                        outgoing.len(),
                        failures.join("; ")
                    ),
                ),
            ));
        }
        info!(%cap, peers = outgoing.len(), acks, "broadcast revocation");
        Ok(Response::new(pb::BroadcastRevokeReply {
            peers_notified: u32::try_from(outgoing.len()).unwrap_or(u32::MAX),
            acks,
            complete,
        }))
    }

    async fn broadcast_check(
        &self,
        request: Request<pb::CapName>,
    ) -> Result<Response<pb::BroadcastCheckReply>, Status> {
        let sh = &self.shared;
        sh.counters.received(Rpc::BroadcastCheck);
        let cap = wire::cap_name_from_pb(&request.into_inner());
        sh.broadcast
            .check(cap)
            .map_err(|e| refused("broadcast_check", wire::broadcast_status(&e)))?;
        Ok(Response::new(pb::BroadcastCheckReply {}))
    }

    async fn broadcast(
        &self,
        request: Request<pb::BroadcastRequest>,
    ) -> Result<Response<pb::BroadcastReply>, Status> {
        let sh = &self.shared;
        sh.counters.received(Rpc::Broadcast);
        let r = request.into_inner();
        let message = BroadcastMessage::decode(&r.message)
            .map_err(|e| refused("broadcast", wire::broadcast_status(&e)))?;
        let replies = sh
            .broadcast
            .handle(r.from, message)
            .map_err(|e| refused("broadcast", wire::broadcast_status(&e)))?;
        Ok(Response::new(pb::BroadcastReply {
            replies: replies
                .iter()
                .filter(|o| o.to == r.from)
                .map(|o| o.message.encode().to_vec())
                .collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_counters_are_indexed_in_table_order() {
        for (i, (rpc, _)) in RPCS.iter().enumerate() {
            assert_eq!(*rpc as usize, i);
        }
    }
}
