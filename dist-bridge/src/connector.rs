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
//!
//! A connection whose server certificate is refused later (a node's peer revoked while the
//! node holds a connection to it) ends then ([`Revocable`]): it fails as soon as it is
//! woken by the change, and before it carries another byte; the channel's next connection
//! is refused at its handshake.

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
use tokio::sync::watch;
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
    /// Servers refused after a change announced here end their connections.
    refusals: Option<(RefusedCerts, watch::Receiver<u64>)>,
}

impl NodeConnector {
    /// A connector to node `node`, trusting the CA `ca_pem` and presenting `cert_pem` with
    /// `key_pem`; servers `refused` refuses are refused too, and when `changes` announces a
    /// change, open connections to servers it then refuses end.
    pub(crate) fn new(
        node: u64,
        ca_pem: &[u8],
        cert_pem: &[u8],
        key_pem: &[u8],
        refused: Option<RefusedCerts>,
        changes: Option<watch::Receiver<u64>>,
    ) -> Result<NodeConnector, String> {
        let refusals = refused.clone().zip(changes);
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
            refusals,
        })
    }
}

impl Service<Uri> for NodeConnector {
    type Response = TokioIo<Replayed<Revocable<TlsStream<TcpStream>>>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (tls, name) = (self.tls.clone(), self.name.clone());
        let refusals = self.refusals.clone();
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
            let leaf = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.clone().into_owned());
            let stream = match (refusals, leaf) {
                (Some((refused, changes)), Some(leaf)) => {
                    Revocable::watching(stream, leaf, refused, changes)
                }
                _ => Revocable::plain(stream),
            };
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

/// A connection that ends when its server's certificate is refused after a change (see the
/// module's documentation): every read, write and flush fails from then on.
pub(crate) struct Revocable<S> {
    inner: S,
    watch: Option<Watch>,
}

/// What a [`Revocable`] connection watches.
struct Watch {
    /// The server's certificate.
    leaf: CertificateDer<'static>,
    refused: RefusedCerts,
    /// Resolves at the next change, with the receiver to wait for the one after (`None`:
    /// no change will ever come).
    next: Pin<Box<dyn Future<Output = Option<watch::Receiver<u64>>> + Send>>,
    ended: bool,
}

async fn next_change(mut changes: watch::Receiver<u64>) -> Option<watch::Receiver<u64>> {
    changes.changed().await.ok()?;
    Some(changes)
}

impl<S> Revocable<S> {
    /// A connection that never ends this way.
    fn plain(inner: S) -> Self {
        Revocable { inner, watch: None }
    }

    /// A connection to the server whose certificate is `leaf`, ended when `changes`
    /// announces a change and `refused` then refuses `leaf`. The first check is at once:
    /// `changes` may have announced a change since the handshake checked the certificate.
    fn watching(
        inner: S,
        leaf: CertificateDer<'static>,
        refused: RefusedCerts,
        mut changes: watch::Receiver<u64>,
    ) -> Self {
        changes.mark_changed();
        Revocable {
            inner,
            watch: Some(Watch {
                leaf,
                refused,
                next: Box::pin(next_change(changes)),
                ended: false,
            }),
        }
    }

    /// Fails once the server's certificate is refused; registers `cx` for the next change.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(w) = &mut self.watch else {
            return Ok(());
        };
        while !w.ended {
            match w.next.as_mut().poll(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(Some(changes)) => {
                    w.ended = w.refused.refuses(&w.leaf);
                    w.next = Box::pin(next_change(changes));
                }
                Poll::Ready(None) => {
                    w.next = Box::pin(std::future::pending());
                    return Ok(());
                }
            }
        }
        tracing::warn!("the server's certificate is revoked: ending the connection to it");
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the server's certificate has been revoked",
        ))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Revocable<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Revocable<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check(cx)?;
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
        self.check(cx)?;
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
    async fn a_connection_ends_when_a_change_makes_its_server_refused() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (mut node, client) = tokio::io::duplex(64);
        let refused = Arc::new(AtomicBool::new(false));
        let r = refused.clone();
        let (changes, rx) = watch::channel(0u64);
        let mut conn = Revocable::watching(
            client,
            CertificateDer::from(vec![1, 2, 3]),
            RefusedCerts::new(move |_| r.load(Ordering::SeqCst)),
            rx,
        );
        conn.write_all(b"a").await.expect("not refused");
        // A change that does not refuse it; a refusal not yet announced.
        changes.send_replace(1);
        conn.write_all(b"b").await.expect("not refused");
        refused.store(true, Ordering::SeqCst);
        conn.write_all(b"c").await.expect("no change announced yet");
        let mut got = [0; 3];
        node.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"abc");
        // A read waiting for bytes is woken by the change, and fails; so does all the rest.
        let waiting = tokio::spawn(async move {
            let mut buf = [0; 1];
            let e = conn.read(&mut buf).await.expect_err("ended");
            (e, conn)
        });
        tokio::task::yield_now().await;
        changes.send_replace(2);
        let (e, mut conn) = waiting.await.unwrap();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(conn.write_all(b"d").await.is_err());
        node.write_all(b"late").await.unwrap();
        assert!(
            conn.read(&mut [0; 4]).await.is_err(),
            "nothing read after the end"
        );
        // A plain connection never ends this way.
        let (mut node, client) = tokio::io::duplex(64);
        let mut plain = Revocable::plain(client);
        plain.write_all(b"x").await.unwrap();
        node.read_exact(&mut [0; 1]).await.unwrap();
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
