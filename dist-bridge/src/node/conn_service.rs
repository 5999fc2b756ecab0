//! What every request passes on its way from a connection to the node's services: the
//! connection it came on is recorded in it (for [`super::caller::Caller`]), a request made
//! with a revoked certificate is refused, every other one is marked in flight on its
//! connection ([`super::busy`]) and held to the request time limit.
//!
//! One [`ConnService`] is made per accepted connection ([`super::serve`]), around a clone
//! of the node's services (tonic's `Routes`: the node and the health service).

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use rustls_pki_types::CertificateDer;
use tonic::Status;
use tower_service::Service;

use super::busy::{Activity, Tracked};
use super::cert_check::{CertRevocations, Verdict};
use super::pending::{Budget, Budgeted};

/// The one message a caller with a revoked certificate gets.
const REVOKED_MESSAGE: &str = "this client certificate has been revoked";

/// The message of a request that outlived
/// [`NodeConfig::request_timeout`](super::NodeConfig::request_timeout).
const TIMEOUT_MESSAGE: &str = "the node's request time limit passed";

/// What the node knows of the connection a request came on, in every request's extensions.
#[derive(Clone, Debug)]
pub(super) struct ConnInfo {
    /// The client's address (for the log only: it proves nothing).
    pub(super) remote: SocketAddr,
    /// The client's certificate chain, checked against the CA in the handshake; `None`
    /// without TLS.
    pub(super) certs: Option<Arc<Vec<CertificateDer<'static>>>>,
    /// Its requests in flight.
    pub(super) activity: Arc<Activity>,
    /// Its certificate's standing against the revocation list.
    pub(super) cert: Arc<Verdict>,
}

/// When a request was dispatched to the node's services, before any of it was served
/// ([`ConnService`] adds it to each request's extensions): a read may use the store's check of
/// its snapshot made after this (`secctx::SnapshotReader::read_at_arrived`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Arrived(pub(super) Instant);

/// What every connection's [`ConnService`] shares: the revocation list, the request time
/// limit, the counter of requests refused for a revoked certificate, and the budget of
/// bytes for request messages still arriving.
#[derive(Clone, Debug)]
pub(super) struct RequestRules {
    pub(super) revocations: Option<Arc<CertRevocations>>,
    pub(super) timeout: Duration,
    pub(super) refused: Counter,
    pub(super) pending: Arc<Budget>,
}

/// The node's services as one connection's requests see them.
#[derive(Clone, Debug)]
pub(super) struct ConnService<S> {
    inner: S,
    conn: ConnInfo,
    rules: RequestRules,
}

impl<S> ConnService<S> {
    /// `inner`, for the requests of the connection `conn`.
    pub(super) fn new(inner: S, conn: ConnInfo, rules: RequestRules) -> Self {
        ConnService { inner, conn, rules }
    }
}

type Answer<B> = Result<http::Response<Tracked<B>>, Infallible>;

impl<S, ReqBody, ResBody> hyper::service::Service<http::Request<ReqBody>> for ConnService<S>
where
    S: Service<
            http::Request<Budgeted<ReqBody>>,
            Response = http::Response<ResBody>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<Tracked<ResBody>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Answer<ResBody>> + Send>>;

    fn call(&self, request: http::Request<ReqBody>) -> Self::Future {
        let rules = &self.rules;
        if let Some(list) = &rules.revocations
            && list.is_revoked(&self.conn.cert, || self.conn.certs.clone())
        {
            rules.refused.inc();
            let refused = refusal(Status::unauthenticated(REVOKED_MESSAGE));
            return Box::pin(std::future::ready(Ok(refused)));
        }
        // In flight from here; if the request fails or is dropped, `busy` goes with it.
        let busy = self.conn.activity.begin();
        // Its message, while it arrives, is charged to the node's budget.
        let mut request = request.map(|body| Budgeted::new(body, rules.pending.clone()));
        request.extensions_mut().insert(self.conn.clone());
        request.extensions_mut().insert(Arrived(Instant::now()));
        let mut inner = self.inner.clone();
        let timeout = rules.timeout;
        Box::pin(async move {
            let served = async move {
                poll_fn(|cx| inner.poll_ready(cx)).await?;
                inner.call(request).await
            };
            match tokio::time::timeout(timeout, served).await {
                Ok(response) => Ok(response?.map(|body| Tracked::new(body, Some(busy)))),
                // The request (its handler, and the body it was reading) is dropped.
                Err(_) => Ok(refusal(Status::deadline_exceeded(TIMEOUT_MESSAGE))),
            }
        })
    }
}

/// `status` as a gRPC response that keeps nothing in flight.
fn refusal<B: Default>(status: Status) -> http::Response<Tracked<B>> {
    status.into_http::<B>().map(|body| Tracked::new(body, None))
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll};

    use hyper::service::Service as _;

    use super::*;

    /// Answers every request with a one-chunk body, or never when the request says so.
    #[derive(Clone)]
    struct Answers;

    impl Service<http::Request<Budgeted<bool>>> for Answers {
        type Response = http::Response<http_body_util::Full<bytes::Bytes>>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Budgeted<bool>>) -> Self::Future {
            let hang = *request.body().get_ref();
            let known = request.extensions().get::<ConnInfo>().is_some();
            let stamped = request
                .extensions()
                .get::<Arrived>()
                .is_some_and(|a| a.0 <= Instant::now());
            Box::pin(async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                assert!(known, "the connection is in the request's extensions");
                assert!(stamped, "so is the time it was dispatched");
                Ok(http::Response::new(http_body_util::Full::from("x")))
            })
        }
    }

    fn service(timeout: Duration) -> (ConnService<Answers>, Arc<Activity>) {
        let activity = Activity::new();
        let conn = ConnInfo {
            remote: SocketAddr::from(([127, 0, 0, 1], 1)),
            certs: None,
            activity: activity.clone(),
            cert: Arc::default(),
        };
        let rules = RequestRules {
            revocations: None,
            timeout,
            refused: Counter::default(),
            pending: Budget::new(1 << 20, Default::default(), Counter::default()),
        };
        (ConnService::new(Answers, conn, rules), activity)
    }

    #[tokio::test]
    async fn a_request_is_in_flight_from_dispatch_until_its_body_is_dropped() {
        let (svc, activity) = service(Duration::from_secs(60));
        let pending = svc.call(http::Request::new(false));
        assert_eq!(activity.idle_since(), None, "in flight once dispatched");
        let response = pending.await.expect("answered");
        assert!(response.body().is_tracked());
        assert_eq!(
            activity.idle_since(),
            None,
            "in flight while its body is unsent"
        );
        drop(response);
        assert!(activity.idle_since().is_some(), "ended with its body");

        // A dispatched request that is abandoned before it is answered ends too.
        drop(svc.call(http::Request::new(false)));
        assert!(activity.idle_since().is_some());
    }

    #[tokio::test]
    async fn a_request_past_the_time_limit_is_answered_and_ends() {
        let (svc, activity) = service(Duration::from_millis(50));
        let response = svc.call(http::Request::new(true)).await.expect("answered");
        let status = Status::from_header_map(response.headers()).expect("a gRPC status");
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(!response.body().is_tracked());
        assert!(activity.idle_since().is_some(), "the request ended with it");
    }
}
