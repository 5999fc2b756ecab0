//! Who sent a request: the identity its TLS client certificate names
//! ([`crate::identity`]). The certificate is only parsed when a request needs to know (a
//! role check, a refusal, a log line), so an accepted invocation never pays for it.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use rustls_pki_types::CertificateDer;
use tonic::Request;

use super::conn_service::ConnInfo;
use crate::identity::PeerIdentity;

/// The party behind a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Who {
    /// No certificate: the node runs without TLS ([`crate::tls::Transport::Insecure`]).
    Anonymous,
    /// A certificate from the cluster CA that names no identity, or several: a client with
    /// no name.
    Unnamed,
    /// A certificate from the cluster CA naming this identity.
    Known(PeerIdentity),
}

/// The caller of one request, its identity read on first use.
#[derive(Debug)]
pub(super) struct Caller {
    certs: Option<Arc<Vec<CertificateDer<'static>>>>,
    addr: Option<SocketAddr>,
    who: OnceLock<Who>,
}

impl Caller {
    /// The caller of `request`. The TLS layer has already checked that the certificate
    /// chains to the CA; only its identity name is read here, later.
    pub(super) fn of<T>(request: &Request<T>) -> Caller {
        let conn = request.extensions().get::<ConnInfo>();
        Caller {
            certs: conn.and_then(|c| c.certs.clone()),
            addr: conn.map(|c| c.remote),
            who: OnceLock::new(),
        }
    }

    /// The address the request came from (for the log only: it proves nothing).
    pub(super) fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Who it is.
    pub(super) fn who(&self) -> &Who {
        self.who.get_or_init(|| {
            let Some(certs) = &self.certs else {
                return Who::Anonymous;
            };
            match certs.first().map(PeerIdentity::from_cert) {
                Some(Ok(id)) => Who::Known(id),
                _ => Who::Unnamed,
            }
        })
    }

    /// Whether the caller is an operator (sees detailed refusals and `Status`).
    pub(super) fn is_operator(&self) -> bool {
        matches!(self.who(), Who::Known(id) if id.is_operator())
    }

    /// Whether the caller is node `id`.
    pub(super) fn is_node(&self, id: u64) -> bool {
        *self.who() == Who::Known(PeerIdentity::Node(id))
    }

    /// The node the caller's certificate names, if it names one.
    pub(super) fn node_id(&self) -> Option<u64> {
        match self.who() {
            Who::Known(PeerIdentity::Node(id)) => Some(*id),
            _ => None,
        }
    }

    /// Whether the caller is a node of the cluster.
    pub(super) fn is_any_node(&self) -> bool {
        matches!(self.who(), Who::Known(PeerIdentity::Node(_)))
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.who() {
            Who::Anonymous => f.write_str("anonymous"),
            Who::Unnamed => f.write_str("unnamed client"),
            Who::Known(id) => id.fmt(f),
        }
    }
}
