//! Which connections have requests in flight, so that one with none for
//! [`NodeConfig::max_connection_idle`](super::NodeConfig::max_connection_idle) can be told
//! to go away ([`super::serve`]).
//!
//! Each accepted connection has one [`Activity`], shared with its requests
//! ([`super::conn_service`]), which marks each in flight from the moment it is dispatched
//! until its response body is dropped: read, served and sent, or abandoned ([`Tracked`]).
//!
//! Idleness is counted in requests, not bytes, as gRPC's own servers count it
//! (`MaxConnectionIdle`): a client answering keepalive pings is still idle, and a request
//! whose header block never ends is never dispatched, so it keeps nothing in flight.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body::{Body, Frame, SizeHint};

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
    pub(super) fn begin(self: &Arc<Self>) -> Busy {
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
pub(super) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        // The end time first: whoever sees the count fall sees this request's end with it.
        let ns = u64::try_from(a.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        a.last_end_ns.fetch_max(ns, Ordering::AcqRel);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request in flight until it is dropped.
#[derive(Debug)]
pub(super) struct Tracked<B> {
    body: B,
    _busy: Option<Busy>,
}

impl<B> Tracked<B> {
    /// `body`, keeping `busy` (if any) in flight until it is dropped.
    pub(super) fn new(body: B, busy: Option<Busy>) -> Self {
        Tracked { body, _busy: busy }
    }

    /// Whether it keeps a request in flight.
    #[cfg(test)]
    pub(super) fn is_tracked(&self) -> bool {
        self._busy.is_some()
    }
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
}
