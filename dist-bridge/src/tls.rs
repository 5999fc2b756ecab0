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

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
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
            ca: Certificate::from_pem(&ca),
            identity: Identity::from_pem(&cert, &key),
            id: identity,
            pem: Arc::new(Pems {
                ca,
                cert,
                key: Zeroizing::new(key),
            }),
        })
    }
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
    ca: Certificate,
    identity: Identity,
    id: PeerIdentity,
    /// The same, as read, for the client side ([`crate::connector`]).
    pem: Arc<Pems>,
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

    /// The server side: this certificate, and every client must present one from the CA
    /// within `handshake_timeout`.
    pub fn server_config(&self, handshake_timeout: Duration) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(self.identity.clone())
            .client_ca_root(self.ca.clone())
            .client_auth_optional(false)
            .timeout(handshake_timeout)
    }

    /// The client side, to node `node`, as [`NodeClient`](crate::client::NodeClient) makes
    /// it: the server's certificate must chain to the CA and name node `node` and nothing
    /// else (no wildcard); this party presents its own.
    pub(crate) fn connector(&self, node: u64) -> Result<NodeConnector, String> {
        NodeConnector::new(node, &self.pem.ca, &self.pem.cert, &self.pem.key)
    }
}

/// Why TLS material could not be loaded.
#[derive(Debug)]
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
