//! Shared fixtures of the service tests: nodes on 127.0.0.1 with ephemeral ports, serving
//! mutual TLS with certificates from one development CA per test process, each with a store
//! holding one object signed for by a key in the same store, and the context [`CTX`] whose
//! key signs export proofs. The default clients are operators (they see detailed refusals
//! and `Status`); [`Net::holder`] is a plain client.

#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dist_bridge::certs::{self, DevCa};
use dist_bridge::client::Reach;
use dist_bridge::node::Peer;
use dist_bridge::tls::TlsMaterial;
use dist_bridge::*;
use rand_core::SeedableRng;
use secctx::keypair;
use secctx::{DbStore, ObjMeta, Object, ObjectStore};
use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, SigningKey, SigningScheme};

/// Every test body runs under this limit: a guard against a hang, not a measure of speed
/// (a test waits for what it needs, however long the machine takes, up to this).
pub const TEST_LIMIT: Duration = Duration::from_secs(300);

/// Runs `f` and fails the test if it takes longer than [`TEST_LIMIT`].
pub async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_LIMIT, f)
        .await
        .expect("test exceeded its time limit")
}

/// The benchmarks' runtime: 2 workers, as many as this machine's vCPUs.
pub fn bench_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A fresh directory for one test under this process's scratch root ([`scratch_root`]).
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = scratch_root().join(format!("svc-{name}-{}", N.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// This test process's scratch root, `target/tmp/dist-bridge-<pid>`. Made once; the first
/// call removes the roots of earlier test processes that are no longer running (a process
/// whose `/proc/<pid>` is gone), so scratch directories do not pile up run after run, and a
/// failed run's directories stay until the next run for a look. A child process this binary
/// starts (`shared_store`) has a root of its own, and its parent's is left alone while the
/// parent runs.
pub fn scratch_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let gone = |pid: &str| {
            pid.parse::<u32>().is_ok()
                && Path::new("/proc/self").exists()
                && !Path::new("/proc").join(pid).exists()
        };
        if let Ok(entries) = std::fs::read_dir(tmp) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("dist-bridge-")
                    && gone(pid)
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let root = tmp.join(format!("dist-bridge-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        root
    })
}

/// The test process's development PKI: a CA, nodes 1 to 64, operator `ops`, clients `app`
/// and `other`, made once.
pub fn pki() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("pki");
        let ca = DevCa::generate().unwrap();
        ca.save(&dir, false).unwrap();
        let mut ids: Vec<PeerIdentity> = (1..=64).map(PeerIdentity::Node).collect();
        ids.push(PeerIdentity::Operator("ops".into()));
        ids.push(PeerIdentity::Client("app".into()));
        ids.push(PeerIdentity::Client("other".into()));
        for id in &ids {
            ca.issue(id, &[]).unwrap().save(&dir, false).unwrap();
        }
        dir
    })
}

/// The TLS files of `identity` in the test PKI.
pub fn tls_files(identity: &PeerIdentity) -> TlsFiles {
    TlsFiles::in_dir(pki(), &certs::file_stem(identity))
}

/// The loaded TLS material of `identity`.
pub fn tls(identity: &PeerIdentity) -> TlsMaterial {
    tls_files(identity).load().unwrap()
}

/// The operator every default test client is.
pub fn operator() -> PeerIdentity {
    PeerIdentity::Operator("ops".into())
}

/// A plain client.
pub fn holder() -> PeerIdentity {
    PeerIdentity::Client("app".into())
}

/// A client of node `node` at `addr`, as `identity`.
pub async fn connect_as(
    identity: &PeerIdentity,
    addr: std::net::SocketAddr,
    node: u64,
) -> NodeClient {
    NodeClient::connect(addr, node, Reach::Tls(&tls(identity)))
        .await
        .unwrap()
}

/// A raw channel to node `node` at `addr`, as the operator (for services other than the
/// node's own client).
pub async fn channel(addr: std::net::SocketAddr, node: u64) -> tonic::transport::Channel {
    dist_bridge::client::connect_channel(addr, node, Reach::Tls(&tls(&operator())))
        .await
        .expect("connect")
}

/// A raw TLS stream (ALPN h2) to node `node` at `addr` as `identity`, for tests that speak
/// HTTP/2 as no gRPC client would.
pub async fn tls_stream(
    identity: &PeerIdentity,
    addr: std::net::SocketAddr,
    node: u64,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    try_tls_stream(identity, addr, node)
        .await
        .expect("TLS handshake")
}

/// [`tls_stream`], or the handshake's error.
pub async fn try_tls_stream(
    identity: &PeerIdentity,
    addr: std::net::SocketAddr,
    node: u64,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use rustls_pki_types::pem::PemObject;
    let files = tls_files(identity);
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(&files.ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let chain = rustls_pki_types::CertificateDer::pem_file_iter(&files.cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(&files.key).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls_pki_types::ServerName::try_from(PeerIdentity::Node(node).dns_name()).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
}

/// The fingerprint of `identity`'s test certificate.
pub fn fingerprint(identity: &PeerIdentity) -> dist_bridge::revoked_certs::Fingerprint {
    dist_bridge::revoked_certs::fingerprint_of_pem_file(&tls_files(identity).cert).unwrap()
}

/// Lists `identity`'s certificate in the revocation file `list`.
pub fn revoke_cert(list: &Path, identity: &PeerIdentity) {
    dist_bridge::revoked_certs::add_to_file(list, &[(fingerprint(identity), identity.to_string())])
        .unwrap();
}

/// A revocation file in a fresh scratch directory `name`, listing the certificates of
/// `revoked` (none: a file with only a comment).
pub fn revocation_file(name: &str, revoked: &[PeerIdentity]) -> PathBuf {
    let list = scratch(name).join("revoked.txt");
    std::fs::write(&list, "# revoked test certificates\n").unwrap();
    for id in revoked {
        revoke_cert(&list, id);
    }
    list
}

/// The security context every capability of the tests is for.
pub const CTX: ObjID = ObjID::new(0xc7c7_c7c7);
/// The verifying-key object of [`CTX`] (its `kuid`).
pub const CTX_KUID: ObjID = ObjID::new(0xc7c7_0001);

/// The signing key of [`CTX`]'s kuid: it signs export proofs.
pub fn ctx_key() -> SigningKey {
    SigningKey::generate(
        SigningScheme::Ed25519,
        &mut rand_chacha::ChaCha20Rng::seed_from_u64(0xc7),
    )
}

/// A node's files and its object.
pub struct Site {
    pub id: u64,
    pub dir: PathBuf,
    pub store: DbStore,
    pub object: ObjID,
    /// The verifying-key object: the object's `kuid`.
    pub kuid: ObjID,
    pub key: SigningKey,
    /// A read-write capability for [`CTX`] over the whole object.
    pub cap: Cap,
}

impl Site {
    /// Creates node `id`'s store with a key and one object (`initial` bytes).
    pub fn new(root: &Path, id: u64, initial: &[u8]) -> Site {
        let dir = root.join(format!("node{id}"));
        let store = DbStore::open(dir.join("store")).unwrap();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(id);
        let key = SigningKey::generate(SigningScheme::Ed25519, &mut rng);
        let kuid = ObjID::new(0x1000 + u128::from(id));
        keypair::store_verifying_key(&store, kuid, &key.verifying_key()).unwrap();
        let object = ObjID::new(0xa000 + u128::from(id));
        store
            .create(&Object {
                id: object,
                meta: ObjMeta::signed_by(kuid),
                data: initial.to_vec(),
            })
            .unwrap();
        let cap = Cap::mint(
            CapGrant::new(object, CTX, Protections::READ | Protections::WRITE),
            &key,
        )
        .unwrap();
        // The context, with the key that signs its export proofs.
        keypair::store_verifying_key(&store, CTX_KUID, &ctx_key().verifying_key()).unwrap();
        store
            .create(&Object {
                id: CTX,
                meta: ObjMeta::signed_by(CTX_KUID),
                data: Vec::new(),
            })
            .unwrap();
        Site {
            id,
            dir,
            store,
            object,
            kuid,
            key,
            cap,
        }
    }

    pub fn config(&self) -> NodeConfig {
        let mut c = NodeConfig::new(
            self.id,
            self.dir.join("store"),
            self.dir.join("controller.version"),
        );
        c.maintenance_interval = Duration::from_millis(50);
        c.transport = Some(Transport::Tls(tls_files(&PeerIdentity::Node(self.id))));
        c
    }

    /// The object's stored bytes.
    pub fn stored(&self) -> Vec<u8> {
        self.store.get(self.object).unwrap().data
    }
}

/// Running nodes with their sites and clients.
pub struct Net {
    pub root: PathBuf,
    pub sites: Vec<Site>,
    pub nodes: Vec<RunningNode>,
    pub clients: Vec<NodeClient>,
    pub cluster: Cluster,
    /// Which nodes serve plaintext (`Transport::Insecure`): their clients connect so.
    pub plain: Vec<bool>,
}

impl Net {
    /// `n` nodes (ids 1..=n), each configured by `tweak`.
    pub async fn start(name: &str, n: u64, tweak: impl Fn(&mut NodeConfig)) -> Net {
        let root = scratch(name);
        let sites: Vec<Site> = (1..=n)
            .map(|id| Site::new(&root, id, format!("object of node {id}").as_bytes()))
            .collect();
        let mut nodes = Vec::new();
        let mut plain = Vec::new();
        for s in &sites {
            let mut c = s.config();
            tweak(&mut c);
            plain.push(c.transport == Some(Transport::Insecure));
            nodes.push(Node::start(c).await.unwrap());
        }
        let mut net = Net {
            root,
            sites,
            nodes,
            clients: Vec::new(),
            cluster: Cluster::new(),
            plain,
        };
        net.connect().await;
        net
    }

    /// `n` nodes that are each other's broadcast peers. The listen ports are reserved first
    /// (bound, noted, released), since every node's config names the others' addresses.
    pub async fn start_broadcast(name: &str, n: u64) -> Net {
        Self::start_broadcast_with(name, n, |_, _| {}).await
    }

    /// [`Net::start_broadcast`], each node's configuration changed by `tweak` (given its id).
    pub async fn start_broadcast_with(
        name: &str,
        n: u64,
        tweak: impl Fn(u64, &mut NodeConfig),
    ) -> Net {
        let root = scratch(name);
        let sites: Vec<Site> = (1..=n).map(|id| Site::new(&root, id, b"x")).collect();
        let mut nodes = Vec::new();
        for attempt in 0..5 {
            let addrs: Vec<_> = {
                let listeners: Vec<_> = (0..n)
                    .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
                    .collect();
                listeners.iter().map(|l| l.local_addr().unwrap()).collect()
            };
            nodes.clear();
            let mut ok = true;
            for (s, addr) in sites.iter().zip(&addrs) {
                let mut c = s.config();
                c.listen = *addr;
                c.peers = sites
                    .iter()
                    .zip(&addrs)
                    .map(|(p, a)| Peer {
                        id: p.id,
                        addr: a.to_string(),
                    })
                    .collect();
                tweak(s.id, &mut c);
                match Node::start(c).await {
                    Ok(node) => nodes.push(node),
                    Err(StartError::Bind { .. }) if attempt < 4 => {
                        ok = false;
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            if ok {
                break;
            }
            for node in nodes.drain(..) {
                node.shutdown().await.unwrap();
            }
        }
        let plain = vec![false; nodes.len()];
        let mut net = Net {
            root,
            sites,
            nodes,
            clients: Vec::new(),
            cluster: Cluster::new(),
            plain,
        };
        net.connect().await;
        net
    }

    async fn connect(&mut self) {
        self.clients.clear();
        self.cluster = Cluster::new();
        for ((s, node), plain) in self.sites.iter().zip(&self.nodes).zip(&self.plain) {
            let c = if *plain {
                NodeClient::connect(node.addr(), s.id, Reach::Insecure)
                    .await
                    .unwrap()
            } else {
                connect_as(&operator(), node.addr(), s.id).await
            };
            self.cluster.insert(s.id, c.clone());
            self.clients.push(c);
        }
    }

    /// Node `i`'s client (0-based).
    pub fn client(&self, i: usize) -> &NodeClient {
        &self.clients[i]
    }

    /// A plain client (not an operator) of node `i`.
    pub async fn holder(&self, i: usize) -> NodeClient {
        connect_as(&holder(), self.nodes[i].addr(), self.sites[i].id).await
    }

    /// Exports node `i`'s capability with `rights` over `range`.
    pub async fn export(&self, i: usize, rights: Rights, range: ByteRange) -> GuardedToken {
        let s = &self.sites[i];
        self.clients[i]
            .export(
                &s.cap,
                CTX,
                &ctx_key(),
                Scope::new(rights, range, twizzler_capsec::Expiry::NEVER),
            )
            .await
            .unwrap()
    }

    /// Every node's status.
    pub async fn statuses(&self) -> Vec<NodeStatus> {
        let mut out = Vec::new();
        for c in &self.clients {
            out.push(c.status().await.unwrap());
        }
        out
    }

    pub async fn shutdown(self) {
        for node in self.nodes {
            node.shutdown().await.unwrap();
        }
    }
}

pub fn range(offset: u64, len: u64) -> ByteRange {
    ByteRange::new(offset, len).unwrap()
}

/// Read rights over the whole object, never expiring.
pub fn read_all() -> Scope {
    Scope::new(
        Rights::READ,
        ByteRange::WHOLE,
        twizzler_capsec::Expiry::NEVER,
    )
}

/// Asserts that `r` is a refusal of `kind` whose message contains `text`.
#[track_caller]
pub fn assert_refused<T: std::fmt::Debug>(r: Result<T, ClientError>, kind: ErrorKind, text: &str) {
    match r {
        Err(ClientError::Rejected {
            kind: k, message, ..
        }) => {
            assert_eq!(k, kind, "{message}");
            assert!(
                message.contains(text),
                "message {message:?} does not mention {text:?}"
            );
        }
        other => panic!("expected a {kind} refusal, got {other:?}"),
    }
}

/// The value of the metric sample `series` (its name and labels, as the exposition writes
/// them) that the node serving metrics at `addr` reports now.
pub async fn metric(addr: std::net::SocketAddr, series: &str) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    tcp.read_to_string(&mut out).await.unwrap();
    out.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {series} in:\n{out}"))
}

/// Waits until the metric `series` at `addr` is `value` (each check is one scrape; the test's
/// own time limit bounds the wait).
pub async fn until_metric(addr: std::net::SocketAddr, series: &str, value: f64) {
    loop {
        if metric(addr, series).await == value {
            return;
        }
        // A pause between scrapes, not a guess at how long the node takes.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
