//! Who is on the other end of a mutually authenticated connection.
//!
//! Every party of a cluster holds a certificate from the cluster's CA whose subject
//! alternative names carry exactly one **identity name**, a DNS name under the trust domain
//! [`TRUST_DOMAIN`]:
//!
//! | identity | DNS name | may |
//! |---|---|---|
//! | [`PeerIdentity::Node`] | `<id>.node.dist-bridge` (`id` in canonical decimal) | serve as node `id`; send broadcast-baseline messages as node `id` |
//! | [`PeerIdentity::Operator`] | `<name>.operator.dist-bridge` | read `Status`; see the detailed reason of its own refusals |
//! | [`PeerIdentity::Client`] | `<name>.client.dist-bridge` | export, invoke, revoke, renew, derive |
//!
//! A `name` is one DNS label: 1 to 63 of `a-z`, `0-9` and `-`, neither first nor last a `-`.
//!
//! Parsing is strict: wildcards, upper case, leading zeros, extra labels, and certificates
//! naming two identities give no identity at all ([`IdentityError`]), so a certificate can
//! never be read as a role its issuer did not spell out exactly. A connection whose
//! certificate carries no identity is still authenticated by the CA; it gets a client's
//! rights only.
//!
//! Servers are checked the same way from the other side: a client or peer that expects node
//! `n` verifies the server's certificate for the DNS name `n.node.dist-bridge`
//! ([`PeerIdentity::dns_name`]), so a node presenting another node's certificate is refused
//! during the handshake.

use core::fmt;

use rustls_pki_types::CertificateDer;

/// The trust domain every identity name ends with.
pub const TRUST_DOMAIN: &str = "dist-bridge";

/// A party's identity, read from its certificate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PeerIdentity {
    /// Node `id` of the cluster.
    Node(u64),
    /// An operator (may read `Status` and detailed refusals).
    Operator(String),
    /// A client (holder of capabilities and tokens).
    Client(String),
}

/// Why a certificate gives no identity.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdentityError {
    /// The certificate does not parse.
    BadCertificate,
    /// No subject alternative name is an identity name.
    None,
    /// More than one is.
    Ambiguous,
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BadCertificate => "the certificate does not parse",
            Self::None => "the certificate names no dist-bridge identity",
            Self::Ambiguous => "the certificate names more than one dist-bridge identity",
        })
    }
}

impl std::error::Error for IdentityError {}

impl PeerIdentity {
    /// Its DNS name (`7.node.dist-bridge`, `alice.client.dist-bridge`).
    pub fn dns_name(&self) -> String {
        match self {
            Self::Node(id) => format!("{id}.node.{TRUST_DOMAIN}"),
            Self::Operator(name) => format!("{name}.operator.{TRUST_DOMAIN}"),
            Self::Client(name) => format!("{name}.client.{TRUST_DOMAIN}"),
        }
    }

    /// Reads an identity name; `None` for any other name (see the [module docs](self)).
    pub fn parse_dns(name: &str) -> Option<PeerIdentity> {
        let rest = name.strip_suffix(TRUST_DOMAIN)?.strip_suffix('.')?;
        let (label, role) = rest.split_once('.')?;
        match role {
            "node" => parse_node_id(label).map(Self::Node),
            "operator" => is_label(label).then(|| Self::Operator(label.to_owned())),
            "client" => is_label(label).then(|| Self::Client(label.to_owned())),
            _ => None,
        }
    }

    /// The one identity a certificate (DER) names.
    pub fn from_cert(der: &CertificateDer<'_>) -> Result<PeerIdentity, IdentityError> {
        let cert =
            webpki::EndEntityCert::try_from(der).map_err(|_| IdentityError::BadCertificate)?;
        let mut found = None;
        for name in cert.valid_dns_names() {
            if let Some(id) = Self::parse_dns(name) {
                if found.is_some() {
                    return Err(IdentityError::Ambiguous);
                }
                found = Some(id);
            }
        }
        found.ok_or(IdentityError::None)
    }

    /// Whether this is an operator.
    pub fn is_operator(&self) -> bool {
        matches!(self, Self::Operator(_))
    }
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Node(id) => write!(f, "node {id}"),
            Self::Operator(name) => write!(f, "operator {name}"),
            Self::Client(name) => write!(f, "client {name}"),
        }
    }
}

/// Whether `s` is a valid name label (see the [module docs](self)).
pub fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first() != Some(&b'-')
        && b.last() != Some(&b'-')
}

/// A node id in canonical decimal (no sign, no leading zeros).
fn parse_node_id(s: &str) -> Option<u64> {
    let id: u64 = s.parse().ok()?;
    (id.to_string() == s).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for id in [
            PeerIdentity::Node(0),
            PeerIdentity::Node(u64::MAX),
            PeerIdentity::Operator("ops-1".into()),
            PeerIdentity::Client("a".into()),
        ] {
            assert_eq!(PeerIdentity::parse_dns(&id.dns_name()), Some(id));
        }
    }

    #[test]
    fn near_misses_are_no_identity() {
        for name in [
            "*.node.dist-bridge",
            "07.node.dist-bridge",
            "+7.node.dist-bridge",
            "7.node.dist-bridge.",
            "7.node.dist-bridgex",
            "7.nodes.dist-bridge",
            "a.b.client.dist-bridge",
            "Alice.client.dist-bridge",
            "-a.client.dist-bridge",
            "a-.operator.dist-bridge",
            ".client.dist-bridge",
            "node.dist-bridge",
            "dist-bridge",
            "18446744073709551616.node.dist-bridge",
            "localhost",
        ] {
            assert_eq!(PeerIdentity::parse_dns(name), None, "{name}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parsing_is_total_and_canonical(name in "\\PC{0,80}") {
            if let Some(id) = PeerIdentity::parse_dns(&name) {
                proptest::prop_assert_eq!(id.dns_name(), name);
            }
        }

        #[test]
        fn parsing_identity_shaped_names_is_canonical(
            label in "[a-z0-9*A-Z-]{0,70}",
            role in "(node|operator|client|x)",
        ) {
            let name = format!("{label}.{role}.dist-bridge");
            if let Some(id) = PeerIdentity::parse_dns(&name) {
                proptest::prop_assert_eq!(id.dns_name(), name);
            }
        }
    }
}
