//! Sending a request again when the node provably never processed it: the client's half of
//! the node's graceful connection ends ([`crate::node`] tells idle and old connections to go
//! away with an HTTP/2 GOAWAY).
//!
//! A request that meets a GOAWAY is refused without being processed (RFC 9113, section 6.8):
//! - h2 refuses a new stream on a connection that has received a GOAWAY, and fails a
//!   stream above the GOAWAY's last stream id; both as a GOAWAY error with `NO_ERROR`, from
//!   the remote side;
//! - a stream the server reset with `REFUSED_STREAM` was not processed either;
//! - hyper cancels a request still queued for a connection that closed before it was
//!   handed to h2.
//!
//! gRPC's own clients retry such requests transparently, and so does [`Resend`], a few
//! times, each time on the channel's next connection. Any other failure (a reset, a broken
//! connection, a timeout) may come after the node acted on the request, and is returned as
//! it is.
//!
//! Every RPC of the node is unary, so a request's body is one small message: it is kept,
//! as bytes, until the request is answered.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::{BodyExt, Full};
use tonic::body::Body;
use tonic::transport::Channel;
use tower_service::Service;

/// How many times a request is sent at most.
const ATTEMPTS: usize = 3;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A [`Channel`] that sends a request again when the node provably did not process it.
#[derive(Clone, Debug)]
pub(crate) struct Resend {
    channel: Channel,
}

impl Resend {
    /// Requests over `channel`.
    pub(crate) fn new(channel: Channel) -> Self {
        Resend { channel }
    }
}

impl Service<http::Request<Body>> for Resend {
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.channel.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // The channel that was made ready serves the first attempt; a clone takes its place.
        let ready = self.channel.clone();
        let mut channel = std::mem::replace(&mut self.channel, ready);
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await?.to_bytes();
            let mut attempt = 1;
            loop {
                let mut again = http::Request::new(Body::new(Full::new(body.clone())));
                *again.method_mut() = parts.method.clone();
                *again.uri_mut() = parts.uri.clone();
                *again.version_mut() = parts.version;
                *again.headers_mut() = parts.headers.clone();
                *again.extensions_mut() = parts.extensions.clone();
                if attempt > 1 {
                    poll_fn(|cx| channel.poll_ready(cx)).await?;
                }
                match channel.call(again).await {
                    Err(e) if attempt < ATTEMPTS && unprocessed(&e) => {
                        tracing::debug!(error = %e, attempt, "sending again a request the node did not process");
                        attempt += 1;
                    }
                    answer => return answer.map_err(Into::into),
                }
            }
        })
    }
}

/// Whether `error` says that the request was never processed by the server (see the
/// module's documentation).
fn unprocessed(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            let went_away = h2.is_go_away() && h2.is_remote();
            return (went_away && h2.reason() == Some(h2::Reason::NO_ERROR))
                || h2.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        if let Some(hyper) = e.downcast_ref::<hyper::Error>()
            && hyper.is_canceled()
        {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that wraps another, as tonic's and hyper's do.
    #[derive(Debug)]
    struct Wrapped(BoxError);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("wrapped")
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn only_refusals_that_prove_nothing_was_done_are_sent_again() {
        let refused = Wrapped(Box::new(h2::Error::from(h2::Reason::REFUSED_STREAM)));
        assert!(unprocessed(&refused), "REFUSED_STREAM, however deep");
        for reason in [
            h2::Reason::CANCEL,
            h2::Reason::INTERNAL_ERROR,
            h2::Reason::PROTOCOL_ERROR,
            // A reset with NO_ERROR is no GOAWAY: the stream may have been served.
            h2::Reason::NO_ERROR,
        ] {
            let e = Wrapped(Box::new(h2::Error::from(reason)));
            assert!(!unprocessed(&e), "{reason:?}");
        }
        let io = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        assert!(!unprocessed(&io), "no HTTP/2 error at all");
    }
}
