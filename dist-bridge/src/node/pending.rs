//! The node's bound on the bytes it holds for request messages that have not fully arrived
//! ([`NodeConfig::max_pending_request_bytes`](super::NodeConfig::max_pending_request_bytes)).
//!
//! tonic buffers a request's gRPC message until all of it has arrived, then decodes it. A
//! client that declares a large message and stalls half-way holds what it sent for as long
//! as its stream lasts; many such streams on many connections held hundreds of MiB, bounded
//! only by connections × streams × message size. Each request body passes through a
//! [`Budgeted`] body ([`super::conn_service`]), which follows the body's gRPC message
//! framing ([`Framing`]) and charges the node-wide [`Budget`] for the bytes of the message
//! still incomplete after each HTTP/2 frame:
//! - a frame that leaves its message incomplete charges the bytes it adds; if that would take
//!   the node past the limit, the request is refused with `RESOURCE_EXHAUSTED` naming the
//!   limit (tonic answers with the status the body fails with) and its bytes are released;
//! - a frame that completes its message releases that message's charge (tonic decodes it at
//!   once: it is the handler's from there), so a message that arrives in one frame, as every
//!   small request does, is never refused for want of budget;
//! - whatever a body still holds is released when it is dropped: its stream ended, was
//!   reset, timed out or its connection closed.
//!
//! Bytes in HTTP/2 flow-control windows that the node has not read yet are not counted:
//! they are bounded per connection by hyper's connection window (1 MiB) and
//! `max_connections`. tonic reserves a declared message's length when it reads its header;
//! what is not written stays untouched address space, not resident memory.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};
use hyper::body::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tonic::Status;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The gRPC message header: a compression flag and a 4-byte big-endian length.
const HEADER: usize = 5;

/// The node-wide count of bytes held for incomplete request messages, and its limit.
#[derive(Debug)]
pub(super) struct Budget {
    limit: u64,
    /// The bytes held (the gauge's own atomic, so the metric is the count itself).
    held: Gauge<u64, AtomicU64>,
    refused: Counter,
}

impl Budget {
    /// At most `limit` bytes, held counted in `held` and refusals in `refused`.
    pub(super) fn new(limit: u64, held: Gauge<u64, AtomicU64>, refused: Counter) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            held,
            refused,
        })
    }

    /// Takes `n` more bytes, unless that would pass the limit.
    fn take(&self, n: u64) -> bool {
        let limit = self.limit;
        self.held
            .inner()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                h.checked_add(n).filter(|&t| t <= limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes taken before.
    fn give_back(&self, n: u64) {
        self.held.inner().fetch_sub(n, Ordering::AcqRel);
    }

    /// The bytes held now.
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.held.get()
    }

    /// The status a request refused for want of budget gets.
    fn refusal(&self) -> Status {
        self.refused.inc();
        Status::resource_exhausted(format!(
            "the node holds its limit of bytes for requests still arriving \
             (max_pending_request_bytes = {}): try again later",
            self.limit
        ))
    }
}

/// Where a body is in its sequence of gRPC messages: how many bytes of the message now
/// arriving (header included) have come.
#[derive(Debug, Default)]
struct Framing {
    header: [u8; HEADER],
    /// Bytes of `header` received.
    header_len: usize,
    /// Bytes of the message's body still to come (once its header is complete).
    body_left: u64,
    /// Bytes of the incomplete message received so far.
    held: u64,
}

impl Framing {
    /// Follows `chunk`; returns the bytes of the message still incomplete after it (0 when
    /// the chunk ends on a message boundary).
    fn feed(&mut self, mut chunk: &[u8]) -> u64 {
        while !chunk.is_empty() {
            if self.header_len < HEADER {
                let take = (HEADER - self.header_len).min(chunk.len());
                let Some((head, rest)) = chunk.split_at_checked(take) else {
                    break;
                };
                if let Some(slot) = self.header.get_mut(self.header_len..self.header_len + take) {
                    slot.copy_from_slice(head);
                }
                self.header_len += take;
                self.held += take as u64;
                chunk = rest;
                if self.header_len == HEADER {
                    let [_, a, b, c, d] = self.header;
                    self.body_left = u64::from(u32::from_be_bytes([a, b, c, d]));
                    if self.body_left == 0 {
                        self.complete();
                    }
                }
            } else {
                let take = usize::try_from(self.body_left)
                    .unwrap_or(usize::MAX)
                    .min(chunk.len());
                let Some((_, rest)) = chunk.split_at_checked(take) else {
                    break;
                };
                self.body_left -= take as u64;
                self.held += take as u64;
                chunk = rest;
                if self.body_left == 0 {
                    self.complete();
                }
            }
        }
        self.held
    }

    /// The message has fully arrived.
    fn complete(&mut self) {
        self.header_len = 0;
        self.body_left = 0;
        self.held = 0;
    }
}

/// A request body whose incomplete message is charged to the node's [`Budget`].
#[derive(Debug)]
pub(super) struct Budgeted<B> {
    inner: B,
    budget: Arc<Budget>,
    framing: Framing,
    /// What this body holds of the budget now.
    charged: u64,
}

impl<B> Budgeted<B> {
    /// `inner`, charged to `budget`.
    pub(super) fn new(inner: B, budget: Arc<Budget>) -> Self {
        Budgeted {
            inner,
            budget,
            framing: Framing::default(),
            charged: 0,
        }
    }

    /// The body inside.
    #[cfg(test)]
    pub(super) fn get_ref(&self) -> &B {
        &self.inner
    }

    /// Charges or releases so that this body holds `held` bytes; false if that would pass
    /// the limit (then it holds nothing).
    fn hold(&mut self, held: u64) -> bool {
        if held > self.charged {
            if !self.budget.take(held - self.charged) {
                self.release();
                return false;
            }
        } else {
            self.budget.give_back(self.charged - held);
        }
        self.charged = held;
        true
    }

    fn release(&mut self) {
        self.budget.give_back(self.charged);
        self.charged = 0;
    }
}

impl<B> Drop for Budgeted<B> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<B> Body for Budgeted<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
            None => return Poll::Ready(None),
        };
        if let Some(data) = frame.data_ref() {
            let held = this.framing.feed(data);
            if !this.hold(held) {
                return Poll::Ready(Some(Err(Box::new(this.budget.refusal()))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, StreamBody};

    use super::*;

    /// A message header declaring `len` bytes.
    fn header(len: u32) -> Vec<u8> {
        let mut h = vec![0];
        h.extend_from_slice(&len.to_be_bytes());
        h
    }

    #[test]
    fn framing_counts_the_incomplete_message_in_any_pieces() {
        let mut f = Framing::default();
        // Two whole messages in one chunk, then a third cut everywhere.
        let mut two = header(3);
        two.extend_from_slice(b"abc");
        two.extend_from_slice(&header(0));
        assert_eq!(f.feed(&two), 0);
        let mut third = header(4);
        third.extend_from_slice(b"wxyz");
        let mut seen = 0;
        for (i, byte) in third.iter().enumerate() {
            seen = f.feed(std::slice::from_ref(byte));
            if i + 1 < third.len() {
                assert_eq!(seen, i as u64 + 1, "after {} bytes", i + 1);
            }
        }
        assert_eq!(seen, 0, "complete");
        // A chunk that ends one message and starts the next.
        let mut both = header(2);
        both.extend_from_slice(b"ok");
        both.extend_from_slice(&header(100)[..3]);
        assert_eq!(f.feed(&both), 3);
        assert_eq!(f.feed(&header(100)[3..]), 5);
        assert_eq!(f.feed(&[1; 99]), 104);
        assert_eq!(f.feed(&[1]), 0);
        assert_eq!(f.feed(&[]), 0);
    }

    fn budget(limit: u64) -> Arc<Budget> {
        Budget::new(limit, Gauge::default(), Counter::default())
    }

    /// A body of `chunks`, each its own frame.
    fn body(
        chunks: Vec<Vec<u8>>,
    ) -> impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin {
        let frames = chunks.into_iter().map(|c| Ok(Frame::data(Bytes::from(c))));
        StreamBody::new(tokio_stream::iter(frames))
    }

    #[tokio::test]
    async fn bodies_share_the_limit_and_give_back_what_they_hold() {
        let b = budget(100);
        // 60 bytes of an 80-byte message: held.
        let mut first = Budgeted::new(body(vec![header(75), vec![0; 55]]), b.clone());
        first.frame().await.unwrap().unwrap();
        first.frame().await.unwrap().unwrap();
        assert_eq!(b.held(), 60);
        // 45 more of another: past the limit, refused, and it holds nothing.
        let mut second = Budgeted::new(body(vec![header(75), vec![0; 40]]), b.clone());
        second.frame().await.unwrap().unwrap();
        assert_eq!(b.held(), 65);
        let e = second.frame().await.unwrap().unwrap_err();
        let status = e.downcast::<Status>().expect("a gRPC status");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("max_pending_request_bytes = 100"));
        assert_eq!(b.held(), 60);
        assert_eq!(b.refused.get(), 1);
        // A message that arrives whole needs nothing, even now.
        let mut whole = header(50);
        whole.extend_from_slice(&[0; 50]);
        let mut third = Budgeted::new(body(vec![whole]), b.clone());
        third.frame().await.unwrap().unwrap();
        assert_eq!(b.held(), 60);
        // Completing a message gives its bytes back; so does dropping a body.
        let mut rest = Budgeted::new(body(vec![header(10), vec![0; 10]]), b.clone());
        rest.frame().await.unwrap().unwrap();
        assert_eq!(b.held(), 65);
        rest.frame().await.unwrap().unwrap();
        assert_eq!(b.held(), 60);
        drop(first);
        assert_eq!(b.held(), 0);
    }
}
