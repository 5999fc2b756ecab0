//! How clients and peers reach a node over mutual TLS: the connection is made here, not by
//! tonic, so that the server's certificate is checked for exactly the node expected.
//!
//! rustls' own check (which tonic's TLS would do) accepts any certificate from the CA that
//! is valid for the name `N.node.dist-bridge`, and a wildcard certificate
//! (`*.node.dist-bridge`) is valid for every node's name. Here the certificate must also
//! name, by the strict rules of [`crate::identity`], the node the client expects and
//! nothing else: one identity name, no wildcard. A misissued wildcard certificate is no
//! node.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::rt::TokioIo;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tower_service::Service;

use crate::identity::PeerIdentity;
use crate::tls::{RefusedServers, chain_and_key, roots};

/// Connects to node `node` over TLS with a client certificate; see the module's
/// documentation.
#[derive(Clone)]
pub(crate) struct NodeConnector {
    tls: TlsConnector,
    name: ServerName<'static>,
}

impl NodeConnector {
    /// A connector to node `node`, trusting the CA `ca_pem` and presenting `cert_pem` with
    /// `key_pem`; servers `refused` refuses are refused too.
    pub(crate) fn new(
        node: u64,
        ca_pem: &[u8],
        cert_pem: &[u8],
        key_pem: &[u8],
        refused: Option<RefusedServers>,
    ) -> Result<NodeConnector, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots(ca_pem)?), provider.clone())
                .build()
                .map_err(|e| format!("CA certificate: {e}"))?;
        let (certs, key) = chain_and_key(cert_pem, key_pem)?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NodeVerifier {
                webpki,
                node,
                refused,
            }))
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("certificate and key: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        let name = ServerName::try_from(PeerIdentity::Node(node).dns_name())
            .map_err(|e| format!("node name: {e}"))?;
        Ok(NodeConnector {
            tls: TlsConnector::from(Arc::new(config)),
            name,
        })
    }
}

impl Service<Uri> for NodeConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (tls, name) = (self.tls.clone(), self.name.clone());
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| invalid("no host in the address"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri
                .port_u16()
                .ok_or_else(|| invalid("no port in the address"))?;
            let tcp = TcpStream::connect((host, port)).await?;
            tcp.set_nodelay(true)?;
            Ok(TokioIo::new(tls.connect(name, tcp).await?))
        })
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_owned())
}

/// rustls' certificate check, then: the certificate names node `node`, and only it, and
/// `refused` (a revocation list) does not refuse it.
#[derive(Debug)]
struct NodeVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    node: u64,
    refused: Option<RefusedServers>,
}

impl ServerCertVerifier for NodeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        match PeerIdentity::from_cert(end_entity) {
            Ok(PeerIdentity::Node(n)) if n == self.node => {}
            _ => {
                return Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName,
                ));
            }
        }
        if self.refused.as_ref().is_some_and(|r| r.refuses(end_entity)) {
            return Err(rustls::Error::InvalidCertificate(CertificateError::Revoked));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
