//! How clients and peers reach a node over mutual TLS: the connection is made here, not by
//! tonic, so that the server's certificate is checked for exactly the node expected.
//!
//! rustls' own check (which tonic's TLS would do) accepts any certificate from the CA that
//! is valid for the name `N.node.dist-bridge`, and a wildcard certificate
//! (`*.node.dist-bridge`) is valid for every node's name. Here the certificate must also
//! name, by the strict rules of [`crate::identity`], the node the client expects and
//! nothing else: one identity name, no wildcard. A misissued wildcard certificate is no
//! node.
//!
//! A connection is handed to tonic only once the node has sent its first bytes
//! ([`Replayed`]): a node that refuses the client's certificate is then a connection error
//! naming the TLS alert, under TLS 1.3 too.

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
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tower_service::Service;

use crate::identity::PeerIdentity;
use crate::tls::{RefusedCerts, chain_and_key, roots};

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
        refused: Option<RefusedCerts>,
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
    type Response = TokioIo<Replayed<TlsStream<TcpStream>>>;
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
            let stream = tls.connect(name, tcp).await?;
            Ok(TokioIo::new(Replayed::after_first_read(stream).await?))
        })
    }
}

/// A stream whose first bytes were read ahead, and are read again first.
///
/// Under TLS 1.3 a client's side of the handshake is done before the server has checked
/// the client's certificate; a node that refuses it (another CA, revoked) says so with an
/// alert, which the client only reads with its first read. The connector waits for that
/// read (a node sends its HTTP/2 SETTINGS at once), so that a refusal is a connection error
/// with its reason, not the failure of whichever request was waiting for the connection.
pub(crate) struct Replayed<S> {
    inner: S,
    ahead: Vec<u8>,
    /// How much of `ahead` has been read again.
    at: usize,
}

/// The most the connector reads ahead.
const READ_AHEAD: usize = 4096;

impl<S: AsyncRead + Unpin> Replayed<S> {
    /// Reads the first bytes `inner` brings (an error, or an end before any, fails here).
    async fn after_first_read(mut inner: S) -> io::Result<Self> {
        let mut ahead = vec![0; READ_AHEAD];
        let n = inner.read(&mut ahead).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the node closed the connection before saying anything",
            ));
        }
        ahead.truncate(n);
        Ok(Replayed {
            inner,
            ahead,
            at: 0,
        })
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Replayed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(rest) = this.ahead.get(this.at..).filter(|r| !r.is_empty()) {
            let n = rest.len().min(buf.remaining());
            buf.put_slice(rest.get(..n).unwrap_or_default());
            this.at += n;
            if this.at == this.ahead.len() {
                this.ahead = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Replayed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
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
    refused: Option<RefusedCerts>,
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn bytes_read_ahead_are_read_again_first_in_any_pieces() {
        let (mut node, client) = tokio::io::duplex(64);
        node.write_all(b"SETTINGS").await.unwrap();
        let mut replayed = Replayed::after_first_read(client)
            .await
            .expect("first read");
        node.write_all(b" and more").await.unwrap();
        drop(node);
        let mut got = Vec::new();
        let mut piece = [0; 3];
        loop {
            let n = replayed.read(&mut piece).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&piece[..n]);
        }
        assert_eq!(got, b"SETTINGS and more");
        // Writes go through untouched.
        let (mut node, client) = tokio::io::duplex(64);
        node.write_all(b"x").await.unwrap();
        let mut replayed = Replayed::after_first_read(client).await.unwrap();
        replayed.write_all(b"preface").await.unwrap();
        let mut sent = [0; 7];
        node.read_exact(&mut sent).await.unwrap();
        assert_eq!(&sent, b"preface");
    }

    #[tokio::test]
    async fn a_node_that_closes_before_saying_anything_is_an_error() {
        let (node, client) = tokio::io::duplex(64);
        drop(node);
        let e = Replayed::after_first_read(client)
            .await
            .err()
            .expect("an error");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
