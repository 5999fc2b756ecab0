//! Mutual TLS: a party's certificate, key and CA from PEM files, checked once when loaded,
//! and the tonic configurations built from them.
//!
//! Every connection of a cluster is mutually authenticated: a node accepts only clients whose
//! certificate chains to the cluster CA, and a client (or a peer node) accepts only the node
//! it expects: the server's certificate must chain to the CA and name that node and nothing
//! else ([`crate::identity`]; clients make their TLS connections themselves for this check).
//! The only alternative is [`Transport::Insecure`], plaintext without any authentication,
//! which a node logs loudly and which exists for tests.
//!
//! `dist-bridge certs` ([`crate::certs`]) makes a development CA and certificates.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::UnixTime;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use zeroize::Zeroizing;

use crate::connector::NodeConnector;
use crate::identity::{IdentityError, PeerIdentity};

/// How a node serves, or a client connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Mutual TLS with these files.
    Tls(TlsFiles),
    /// Plaintext, nobody authenticated: for tests only. A node in this mode treats every
    /// caller as anonymous (no `Status`, no broadcast messages, no detailed refusals).
    Insecure,
}

/// Where a party's TLS material is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA's certificate (PEM): the only trust anchor.
    pub ca: PathBuf,
    /// This party's certificate (PEM), issued by the CA.
    pub cert: PathBuf,
    /// This party's private key (PEM, PKCS#8).
    pub key: PathBuf,
}

impl TlsFiles {
    /// The files `NAME.crt` and `NAME.key` and the CA `ca.crt`, in `dir` (the layout
    /// `dist-bridge certs` writes).
    pub fn in_dir(dir: impl AsRef<Path>, name: &str) -> TlsFiles {
        let dir = dir.as_ref();
        TlsFiles {
            ca: dir.join("ca.crt"),
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        }
    }

    /// Reads and checks the files: each parses, and the certificate names exactly one
    /// identity.
    pub fn load(&self) -> Result<TlsMaterial, TlsError> {
        let ca = read(&self.ca)?;
        if CertificateDer::pem_slice_iter(&ca).next().is_none() {
            return Err(TlsError::Pem {
                path: self.ca.clone(),
                what: "no certificate",
            });
        }
        let cert = read(&self.cert)?;
        let der = CertificateDer::from_pem_slice(&cert).map_err(|_| TlsError::Pem {
            path: self.cert.clone(),
            what: "no certificate",
        })?;
        let identity = PeerIdentity::from_cert(&der).map_err(|source| TlsError::Identity {
            path: self.cert.clone(),
            source,
        })?;
        let key = read(&self.key)?;
        PrivateKeyDer::from_pem_slice(&key).map_err(|_| TlsError::Pem {
            path: self.key.clone(),
            what: "no private key",
        })?;
        Ok(TlsMaterial {
            id: identity,
            refused_servers: None,
            refusals_change: None,
            pem: Arc::new(Pems {
                ca,
                cert,
                key: Zeroizing::new(key),
            }),
        })
    }
}

/// The trust anchors in a PEM file's text.
pub(crate) fn roots(ca_pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem) {
        let ca = ca.map_err(|e| format!("CA certificate: {e}"))?;
        roots.add(ca).map_err(|e| format!("CA certificate: {e}"))?;
    }
    Ok(roots)
}

/// A certificate chain and its private key from their PEM files' text.
pub(crate) fn chain_and_key(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("key: {e}"))?;
    Ok((chain, key))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Loaded TLS material.
#[derive(Clone, Debug)]
pub struct TlsMaterial {
    id: PeerIdentity,
    /// The same, as read, for the client side ([`crate::connector`]).
    pem: Arc<Pems>,
    /// Server certificates the client side refuses besides the CA's checks.
    refused_servers: Option<RefusedCerts>,
    /// Announces each change of what `refused_servers` refuses: then the client side's open
    /// connections to servers it now refuses end ([`TlsMaterial::ending_on`]).
    refusals_change: Option<watch::Receiver<u64>>,
}

/// Certificates refused besides the CA's checks (a revocation list): true when refused. The
/// client side checks servers' certificates with it ([`crate::connector`]), the server side
/// clients' ([`TlsMaterial::acceptor`]); each after the CA's own checks.
#[derive(Clone)]
pub(crate) struct RefusedCerts(Arc<dyn Fn(&CertificateDer<'_>) -> bool + Send + Sync>);

impl RefusedCerts {
    /// The certificates `refuses` returns true for.
    pub(crate) fn new(
        refuses: impl Fn(&CertificateDer<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        RefusedCerts(Arc::new(refuses))
    }

    /// Whether `cert` is refused.
    pub(crate) fn refuses(&self, cert: &CertificateDer<'_>) -> bool {
        (self.0)(cert)
    }
}

impl fmt::Debug for RefusedCerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RefusedCerts")
    }
}

/// The CA's client certificate check, then [`RefusedCerts`]': a handshake with a refused
/// certificate fails with the `certificate_revoked` alert.
#[derive(Debug)]
struct RefusingClients {
    ca: Arc<dyn ClientCertVerifier>,
    refused: RefusedCerts,
}

impl ClientCertVerifier for RefusingClients {
    fn offer_client_auth(&self) -> bool {
        self.ca.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.ca.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.ca.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.ca.verify_client_cert(end_entity, intermediates, now)?;
        if self.refused.refuses(end_entity) {
            return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.ca.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.ca.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.ca.supported_verify_schemes()
    }
}

struct Pems {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Zeroizing<Vec<u8>>,
}

impl fmt::Debug for Pems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pems").finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// The identity this party's certificate names.
    pub fn identity(&self) -> &PeerIdentity {
        &self.id
    }

    /// The server side: this certificate, and every client must present one that chains to
    /// the CA (a handshake without one fails) and that `refused` (if any) does not refuse.
    /// ALPN `h2` only.
    pub(crate) fn acceptor(
        &self,
        refused: Option<RefusedCerts>,
    ) -> Result<tokio_rustls::TlsAcceptor, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots(&self.pem.ca)?),
            provider.clone(),
        )
        .build()
        .map_err(|e| format!("CA certificate: {e}"))?;
        let verifier: Arc<dyn ClientCertVerifier> = match refused {
            Some(refused) => Arc::new(RefusingClients {
                ca: verifier,
                refused,
            }),
            None => verifier,
        };
        let (chain, key) = chain_and_key(&self.pem.cert, &self.pem.key)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| format!("certificate and key: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }

    /// The same server side for tonic's own server (for services other than a node's, such
    /// as the benchmarks' reference service), which ends each handshake at
    /// `handshake_timeout`. A node makes its own rustls configuration from the same files.
    pub fn server_config(&self, handshake_timeout: Duration) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.pem.cert, &*self.pem.key))
            .client_ca_root(Certificate::from_pem(&self.pem.ca))
            .client_auth_optional(false)
            .timeout(handshake_timeout)
    }

    /// The same material, whose client side also refuses every server whose certificate
    /// `refuses` returns true for (after the CA's checks and the node-name check): a node
    /// refuses its peers whose certificates are revoked this way.
    pub fn refusing_servers(
        mut self,
        refuses: impl Fn(&CertificateDer<'_>) -> bool + Send + Sync + 'static,
    ) -> TlsMaterial {
        self.refused_servers = Some(RefusedCerts::new(refuses));
        self
    }

    /// The same material, whose client side's open connections also end when `changes`
    /// announces a change and the refusal set with [`TlsMaterial::refusing_servers`] then
    /// refuses the server's certificate (a node's connections to a peer it has just
    /// revoked): each is checked when it is woken, and before it carries another byte.
    pub(crate) fn ending_on(mut self, changes: watch::Receiver<u64>) -> TlsMaterial {
        self.refusals_change = Some(changes);
        self
    }

    /// The same material, whose client side also refuses servers whose certificates `list`
    /// names ([`crate::revoked_certs`]).
    pub fn refusing_listed(self, list: crate::revoked_certs::RevokedList) -> TlsMaterial {
        self.refusing_servers(move |cert| {
            list.contains(&crate::revoked_certs::Fingerprint::of(cert.as_ref()))
        })
    }

    /// The client side, to node `node`, as [`NodeClient`](crate::client::NodeClient) makes
    /// it: the server's certificate must chain to the CA and name node `node` and nothing
    /// else (no wildcard); this party presents its own.
    pub(crate) fn connector(&self, node: u64) -> Result<NodeConnector, String> {
        NodeConnector::new(
            node,
            &self.pem.ca,
            &self.pem.cert,
            &self.pem.key,
            self.refused_servers.clone(),
            self.refusals_change.clone(),
        )
    }
}

/// Why TLS material could not be loaded.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file is not the PEM it should be.
    Pem {
        /// The file.
        path: PathBuf,
        /// What was missing.
        what: &'static str,
    },
    /// The certificate names no identity, or several.
    Identity {
        /// The file.
        path: PathBuf,
        /// Why.
        source: IdentityError,
    },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Self::Pem { path, what } => write!(f, "{}: {what} in PEM form", path.display()),
            Self::Identity { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { source, .. } => Some(source),
            Self::Identity { source, .. } => Some(source),
            Self::Pem { .. } => None,
        }
    }
}
