//! Starting a node ([`Node::start`](super::Node::start)), serving, and stopping it ([`RunningNode`](super::RunningNode)).

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use secctx::{DbStore, StoreError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::service::Routes;

use super::cert_check::CertRevocations;
use super::conn_service::RequestRules;
use super::gates::Gates;
use super::pending::Budget;
use super::serve::{ConnLimits, Server};
use tracing::{info, warn};

use crate::broadcast::BroadcastNode;
use crate::client::{NodeClient, Reach};
use crate::controller::{ControllerId, VersionFile, VersionFileError};
use crate::crypto::{NodeSecret, SecretError};
use crate::export_proof::ReplayWindow;
use crate::identity::PeerIdentity;
use crate::owner::Owner;
use crate::pb::node_server::NodeServer;
use crate::revoked_certs::ListError;
use crate::table::ConfigError;
use crate::tls::Transport;

use super::config::NodeConfig;
use super::counters::{Counters, LogLimit, Notices, Refusals};
use super::metrics::{self, Metrics};
use super::service::Service;
use super::shared::{Shared, maintain};

/// Why a node could not start.
#[derive(Debug)]
#[non_exhaustive]
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
    /// The TLS material could not be loaded, or does not name this node.
    Tls(String),
    /// The metrics listener could not be bound.
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
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
            Self::Tls(why) => write!(f, "TLS: {why}"),
            Self::Metrics { addr, source } => {
                write!(f, "cannot serve metrics on {addr}: {source}")
            }
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
            Self::Metrics { source, .. } => Some(source),
            Self::Config(_) | Self::Tls(_) => None,
        }
    }
}

/// Why a node stopped other than by request.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The server task panicked or was cancelled.
    Task(tokio::task::JoinError),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Task(e) => write!(f, "server task failed: {e}"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
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
    metrics_addr: Option<SocketAddr>,
    controller: ControllerId,
    shutdown: ShutdownHandle,
    serve: Option<JoinHandle<()>>,
    /// The metrics listener's task: joined too, so a stopped node no longer accepts there.
    metrics: Option<JoinHandle<()>>,
    maintenance: Option<JoinHandle<()>>,
    cert_revocations: Option<Arc<CertRevocations>>,
}

impl RunningNode {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address metrics are served on, if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The controller this life serves as.
    pub fn controller(&self) -> ControllerId {
        self.controller
    }

    /// Reads the node's revocation file ([`NodeConfig::revoked_certs`](super::NodeConfig::revoked_certs))
    /// now, as the maintenance task does at its first tick after the file changes, and ends
    /// every connection whose certificate the new list names: each connection the node
    /// serves is cut by its own task as soon as it is woken, and each connection to a peer
    /// fails before it carries another byte. A file that cannot be read or parsed is an
    /// error, and the list in force stays. Without a revocation file there is nothing to do.
    pub fn reload_revoked_certs(&self) -> Result<(), ListError> {
        match &self.cert_revocations {
            Some(list) => list.reload_now(),
            None => Ok(()),
        }
    }

    /// A handle that stops the node from elsewhere (a signal handler).
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Asks the node to stop and waits until it has: the listener is closed, in-flight
    /// requests have finished, the metrics listener is closed, and the version file is unlocked.
    pub async fn shutdown(mut self) -> Result<(), ServeError> {
        self.shutdown.shutdown();
        self.join().await
    }

    /// Waits until the node stops (after [`ShutdownHandle::shutdown`](super::ShutdownHandle::shutdown), or a server failure).
    pub async fn wait(mut self) -> Result<(), ServeError> {
        self.join().await
    }

    async fn join(&mut self) -> Result<(), ServeError> {
        let result = match self.serve.take() {
            Some(task) => match task.await {
                Ok(()) => Ok(()),
                Err(e) => Err(ServeError::Task(e)),
            },
            None => Ok(()),
        };
        // The server is gone; stop the metrics listener and the maintenance task too (they
        // may already have seen the signal).
        self.shutdown.shutdown();
        for task in [self.metrics.take(), self.maintenance.take()]
            .into_iter()
            .flatten()
        {
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
    ///
    /// # Example
    ///
    /// A node serving its store on a local port, and a client that exports a capability
    /// through it and reads with the token. It binds a socket on `127.0.0.1` and uses
    /// plaintext (`Transport::Insecure`, for tests only; real nodes use
    /// [`Transport::Tls`](crate::Transport::Tls)).
    ///
    /// ```
    /// use dist_bridge::client::Reach;
    /// use dist_bridge::{ByteRange, Node, NodeClient, NodeConfig, Rights, Scope, Transport};
    /// use secctx::{DbStore, ObjMeta, Object, ObjectStore, keypair};
    /// use twizzler_capsec::{Cap, CapGrant, Expiry, ObjID, Protections, SigningKey, SigningScheme};
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// // The node's store: an object signed for by `object_key`, and a context whose own key
    /// // signs the proof that the caller speaks for it.
    /// let store = DbStore::open(dir.path().join("store"))?;
    /// let object_key = SigningKey::from_entropy(SigningScheme::Ed25519, &[1; 32])?;
    /// let ctx_key = SigningKey::from_entropy(SigningScheme::Ed25519, &[2; 32])?;
    /// let (object, ctx) = (ObjID::new(0xa001), ObjID::new(0xc001));
    /// let (object_kuid, ctx_kuid) = (ObjID::new(0x1001), ObjID::new(0x1002));
    /// keypair::store_verifying_key(&store, object_kuid, &object_key.verifying_key())?;
    /// keypair::store_verifying_key(&store, ctx_kuid, &ctx_key.verifying_key())?;
    /// let data = b"hello".to_vec();
    /// store.create(&Object { id: object, meta: ObjMeta::signed_by(object_kuid), data })?;
    /// store.create(&Object { id: ctx, meta: ObjMeta::signed_by(ctx_kuid), data: Vec::new() })?;
    ///
    /// let mut config = NodeConfig::new(1, dir.path().join("store"), dir.path().join("version"));
    /// config.transport = Some(Transport::Insecure);
    /// let node = Node::start(config).await?;
    ///
    /// let client = NodeClient::connect(node.addr(), 1, Reach::Insecure).await?;
    /// let cap = Cap::mint(CapGrant::new(object, ctx, Protections::READ), &object_key)?;
    /// let read_all = Scope::new(Rights::READ, ByteRange::WHOLE, Expiry::NEVER);
    /// let token = client.export(&cap, ctx, &ctx_key, read_all).await?;
    /// assert_eq!(client.read(&token, 0, 5).await?, b"hello");
    /// assert!(client.write(&token, 0, b"bye").await.is_err()); // read-only token
    ///
    /// node.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn start(config: NodeConfig) -> Result<RunningNode, StartError> {
        config.validate()?;
        let tls = match &config.transport {
            Some(Transport::Tls(files)) => {
                let material = files.load().map_err(|e| StartError::Tls(e.to_string()))?;
                if *material.identity() != PeerIdentity::Node(config.node_id) {
                    return Err(StartError::Tls(format!(
                        "{} names {}, not node {}",
                        files.cert.display(),
                        material.identity(),
                        config.node_id
                    )));
                }
                Some(material)
            }
            _ => None,
        };
        let cert_revocations = match &config.revoked_certs {
            Some(path) => Some(Arc::new(
                CertRevocations::load(path.clone()).map_err(|e| StartError::Tls(e.to_string()))?,
            )),
            None => None,
        };
        // The node's own connections to its peers refuse the peers it has revoked, and
        // end when a list read later names them.
        let peer_tls = match (&tls, &cert_revocations) {
            (Some(m), Some(list)) => {
                let refuses = list.clone();
                Some(
                    m.clone()
                        .refusing_servers(move |cert| refuses.lists(cert))
                        .ending_on(list.changes()),
                )
            }
            (m, _) => m.clone(),
        };
        let reach = match &peer_tls {
            Some(m) => Reach::Tls(m),
            None => Reach::Insecure,
        };
        let mut peers = HashMap::new();
        for p in &config.peers {
            if p.id == config.node_id {
                continue;
            }
            let client = NodeClient::connect_lazy(&p.addr, p.id, reach, config.peer_timeout)
                .map_err(|e| StartError::Config(format!("peer {}: {e}", p.id)))?;
            peers.insert(p.id, client);
        }
        let metrics = Metrics::new();
        // A revoked certificate's handshake fails; connections opened before their
        // certificate was listed are cut when a list naming it is read (`serve`), and
        // requests that beat the cut are refused (`conn_service`).
        let refused_clients = cert_revocations
            .as_ref()
            .map(|list| list.handshake_check(metrics.revoked_cert_handshakes.clone()));
        let acceptor = tls
            .as_ref()
            .map(|m| m.acceptor(refused_clients))
            .transpose()
            .map_err(StartError::Tls)?;
        let store = DbStore::open(&config.store_dir).map_err(StartError::Store)?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;

        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(
                metrics::bind(addr)
                    .await
                    .map_err(|source| StartError::Metrics { addr, source })?,
            ),
            None => None,
        };

        let version = VersionFile::open_and_bump(&config.version_file, config.node_id)
            .map_err(StartError::Version)?;
        let controller = version.controller_id();
        let secret = NodeSecret::generate().map_err(StartError::Secret)?;
        let owner =
            Owner::new(controller, secret, config.guard_table).map_err(StartError::Table)?;
        let broadcast = BroadcastNode::new(config.node_id, peers.keys().copied());

        let reader = secctx::SnapshotReader::with_cache(
            store.clone(),
            secctx::db_store::DEFAULT_MAX_AGE,
            secctx::CacheLimits {
                max_object_bytes: config.read_cache_object_bytes,
                max_total_bytes: config.read_cache_bytes,
            },
        );
        let labels_seen =
            std::sync::atomic::AtomicBool::new(super::shared::store_has_labels(&store));
        let shared = Arc::new(Shared {
            owner,
            store,
            gates: Gates::default(),
            broadcast,
            peers,
            counters: Counters::default(),
            notices: Mutex::new(Notices::new(config.notice_buffer)),
            proofs: ReplayWindow::new(
                u64::try_from(config.export_skew.as_nanos()).unwrap_or(u64::MAX),
                config.export_nonces,
                config.export_nonces_per_key,
            ),
            refusals: Mutex::new(Refusals::default()),
            log_limit: LogLimit::default(),
            metrics,
            labels: crate::difc::LabelCache::new(reader.clone()),
            reader,
            max_io_bytes: config.max_io_bytes,
            difc: config.difc.clone(),
            labels_seen,
            max_object_bytes: config.max_object_bytes,
            cert_revocations: cert_revocations.clone(),
        });

        let (tx, rx) = watch::channel(false);
        let shutdown = ShutdownHandle(Arc::new(tx));
        // Messages larger than the limit are refused before they are buffered.
        let service = NodeServer::new(Service {
            shared: shared.clone(),
        })
        .max_decoding_message_size(config.max_message_bytes)
        .max_encoding_message_size(config.max_message_bytes);
        // The standard health service: the node's service is serving until shutdown begins.
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_serving::<NodeServer<Service>>().await;
        let services = Routes::new(health_service).add_service(service).prepare();
        let rules = RequestRules {
            revocations: cert_revocations.clone(),
            timeout: config.request_timeout,
            refused: shared.metrics.revoked_cert_requests.clone(),
            pending: Budget::new(
                u64::try_from(config.max_pending_request_bytes).unwrap_or(u64::MAX),
                shared.metrics.pending_bytes.clone(),
                shared.metrics.pending_refused.clone(),
            ),
        };
        let limits = ConnLimits {
            max_connections: config.max_connections,
            handshake_timeout: config.handshake_timeout,
            max_streams: config.max_streams_per_connection,
            keepalive_interval: config.keepalive_interval,
            keepalive_timeout: config.keepalive_timeout,
            max_age: config.max_connection_age,
            max_idle: config.max_connection_idle,
            grace: config.request_timeout,
            shutdown_deadline: config.shutdown_deadline,
        };
        let server = Server::new(
            listener,
            acceptor,
            services,
            rules,
            limits,
            shared.metrics.idle_closed.clone(),
            shared.metrics.revoked_cert_closed.clone(),
        );
        let (stop, mut stopping) = (rx.clone(), rx.clone());
        let serve = tokio::spawn(async move {
            let not_serving = async move {
                // A dropped sender also means stop.
                let _ = stopping.wait_for(|s| *s).await;
                health.set_not_serving::<NodeServer<Service>>().await;
            };
            tokio::join!(server.run(stop), not_serving);
            // Only now may another life of this controller start.
            drop(version);
        });
        let (mut metrics_addr, mut metrics_task) = (None, None);
        if let Some(listener) = metrics_listener {
            metrics_addr = listener.local_addr().ok();
            metrics_task = Some(tokio::spawn(metrics::serve(
                listener,
                shared.clone(),
                rx.clone(),
            )));
            info!(addr = ?metrics_addr, "serving metrics");
        }
        let maintenance = tokio::spawn(maintain(shared, config.maintenance_interval, rx));
        if tls.is_none() {
            warn!(
                "INSECURE: serving plaintext without authentication; every caller is anonymous \
                 (no Status, no broadcast messages, no detailed refusals). For tests only."
            );
        }
        info!(controller = %controller, %addr, tls = tls.is_some(), "node serving");
        Ok(RunningNode {
            addr,
            metrics_addr,
            controller,
            shutdown,
            serve: Some(serve),
            metrics: metrics_task,
            maintenance: Some(maintenance),
            cert_revocations,
        })
    }
}
