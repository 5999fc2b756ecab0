//! Which connections have requests in flight, so that one with none for
//! [`NodeConfig::max_connection_idle`](super::NodeConfig::max_connection_idle) can be closed
//! ([`super::cut`]).
//!
//! Each accepted connection has one [`Activity`], reachable from its requests through the
//! connection information tonic puts in every request's extensions ([`ConnInfo`]). The
//! [`TrackLayer`] around the node's services marks a request in flight from the moment it
//! is dispatched until its response body is dropped: read, served and sent, or abandoned.
//!
//! Idleness is counted in requests, not bytes, as gRPC's own servers count it
//! (`MaxConnectionIdle`): a client answering keepalive pings is still idle, and a request
//! whose header block never ends is never dispatched, so it keeps nothing in flight.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body::{Body, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use tonic::Status;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tower_layer::Layer;
use tower_service::Service;

use super::cert_check::{CertRevocations, Verdict};

/// What one connection is doing: how many requests it has in flight, and when the last one
/// ended.
#[derive(Debug)]
pub(super) struct Activity {
    /// Requests dispatched and not yet ended.
    in_flight: AtomicUsize,
    /// When the last request ended (or the connection was accepted), in ns after `epoch`.
    last_end_ns: AtomicU64,
    epoch: Instant,
}

impl Activity {
    /// A connection accepted now, with nothing in flight.
    pub(super) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            last_end_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// Marks a request in flight until the returned guard is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// When the connection became idle: `None` while a request is in flight.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let ns = self.last_end_ns.load(Ordering::Acquire);
        Some(self.epoch + Duration::from_nanos(ns))
    }
}

/// A request in flight on its connection; dropping it ends the request.
#[derive(Debug)]
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        // The end time first: whoever sees the count fall sees this request's end with it.
        let ns = u64::try_from(a.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        a.last_end_ns.fetch_max(ns, Ordering::AcqRel);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What tonic records about an accepted connection and hands to each of its requests: the
/// TCP addresses, the connection's [`Activity`], and its certificate's standing.
#[derive(Clone, Debug)]
pub(super) struct ConnInfo {
    pub(super) tcp: TcpConnectInfo,
    pub(super) activity: Arc<Activity>,
    pub(super) cert: Arc<Verdict>,
}

/// The connection a request came on, under TLS or not, from the request's extensions.
pub(super) fn conn_in(ext: &http::Extensions) -> Option<&ConnInfo> {
    ext.get::<TlsConnectInfo<ConnInfo>>()
        .map(TlsConnectInfo::get_ref)
        .or_else(|| ext.get::<ConnInfo>())
}

/// The one message a caller with a revoked certificate gets.
pub(super) const REVOKED_MESSAGE: &str = "this client certificate has been revoked";

/// Refuses each request whose connection's certificate is revoked (when the node has a
/// revocation list), and marks every other in flight on its connection ([`Activity`]) until
/// its response body is dropped. A refused request is not activity: it does not keep its
/// connection from being idle.
#[derive(Clone, Debug, Default)]
pub(super) struct TrackLayer {
    pub(super) revocations: Option<Arc<CertRevocations>>,
    /// Counts the requests refused for a revoked certificate.
    pub(super) refused: Counter,
}

impl<S> Layer<S> for TrackLayer {
    type Service = Track<S>;

    fn layer(&self, inner: S) -> Track<S> {
        Track {
            inner,
            revocations: self.revocations.clone(),
            refused: self.refused.clone(),
        }
    }
}

/// The service [`TrackLayer`] makes.
#[derive(Clone, Debug)]
pub(super) struct Track<S> {
    inner: S,
    revocations: Option<Arc<CertRevocations>>,
    refused: Counter,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for Track<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<Tracked<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        // One extension lookup finds the connection and, under TLS, its certificates.
        let ext = request.extensions();
        let tls = ext.get::<TlsConnectInfo<ConnInfo>>();
        let conn = match tls {
            Some(t) => Some(t.get_ref()),
            None => ext.get::<ConnInfo>(),
        };
        let revoked = match (&self.revocations, tls) {
            (Some(r), Some(t)) => r.is_revoked(&t.get_ref().cert, || t.peer_certs()),
            _ => false,
        };
        if revoked {
            self.refused.inc();
            let refusal = Status::unauthenticated(REVOKED_MESSAGE).into_http::<ResBody>();
            return Box::pin(std::future::ready(Ok(
                refusal.map(|body| Tracked { body, _busy: None })
            )));
        }
        // In flight from here; if the request fails or is dropped, `busy` goes with it.
        let busy = conn.map(|c| c.activity.begin());
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| Tracked { body, _busy: busy }))
        })
    }
}

/// A response body that keeps its request in flight until it is dropped.
#[derive(Debug)]
pub(super) struct Tracked<B> {
    body: B,
    _busy: Option<Busy>,
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_only_with_nothing_in_flight_and_since_the_last_end() {
        let a = Activity::new();
        let accepted = a.idle_since().expect("idle when accepted");
        let first = a.begin();
        let second = a.begin();
        assert_eq!(a.idle_since(), None);
        drop(first);
        assert_eq!(a.idle_since(), None, "one request is still in flight");
        std::thread::sleep(Duration::from_millis(2));
        drop(second);
        let since = a.idle_since().expect("idle once both ended");
        assert!(since > accepted + Duration::from_millis(1));
    }

    /// Answers every request with a one-chunk body.
    #[derive(Clone)]
    struct Answer;

    impl Service<http::Request<()>> for Answer {
        type Response = http::Response<http_body_util::Full<bytes::Bytes>>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(http::Response::new(http_body_util::Full::from("x"))))
        }
    }

    #[tokio::test]
    async fn a_request_is_in_flight_from_dispatch_until_its_body_is_dropped() {
        let activity = Activity::new();
        let info = ConnInfo {
            tcp: TcpConnectInfo {
                local_addr: None,
                remote_addr: None,
            },
            activity: activity.clone(),
            cert: Arc::default(),
        };
        let mut svc = TrackLayer::default().layer(Answer);
        let mut request = http::Request::new(());
        request.extensions_mut().insert(info.clone());
        let pending = svc.call(request);
        assert_eq!(activity.idle_since(), None, "in flight once dispatched");
        let response = pending.await.expect("answered");
        assert_eq!(
            activity.idle_since(),
            None,
            "in flight while its body is unsent"
        );
        drop(response);
        assert!(activity.idle_since().is_some(), "ended with its body");

        // A dispatched request that is abandoned before it is answered ends too.
        let mut request = http::Request::new(());
        request.extensions_mut().insert(info);
        drop(svc.call(request));
        assert!(activity.idle_since().is_some());

        // A request from no tracked connection is served as it is.
        let response = svc.call(http::Request::new(())).await.expect("answered");
        assert!(response.body()._busy.is_none());
    }
}
