//! Who sent a request: the identity its TLS client certificate names
//! ([`crate::identity`]), read once per request.

use std::fmt;

use tonic::Request;

use crate::identity::PeerIdentity;

/// The party behind a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Caller {
    /// No certificate: the node runs without TLS ([`crate::tls::Transport::Insecure`]).
    Anonymous,
    /// A certificate from the cluster CA that names no identity, or several: a client with
    /// no name.
    Unnamed,
    /// A certificate from the cluster CA naming this identity.
    Known(PeerIdentity),
}

impl Caller {
    /// The caller of `request`. The TLS layer has already checked the certificate chains to
    /// the CA; only its identity name is read here.
    pub(super) fn of<T>(request: &Request<T>) -> Caller {
        let Some(certs) = request.peer_certs() else {
            return Caller::Anonymous;
        };
        match certs.first().map(PeerIdentity::from_cert) {
            Some(Ok(id)) => Caller::Known(id),
            _ => Caller::Unnamed,
        }
    }

    /// Whether the caller is an operator (sees detailed refusals and `Status`).
    pub(super) fn is_operator(&self) -> bool {
        matches!(self, Caller::Known(id) if id.is_operator())
    }

    /// Whether the caller is node `id`.
    pub(super) fn is_node(&self, id: u64) -> bool {
        *self == Caller::Known(PeerIdentity::Node(id))
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anonymous => f.write_str("anonymous"),
            Self::Unnamed => f.write_str("unnamed client"),
            Self::Known(id) => id.fmt(f),
        }
    }
}
