//! Accepted connections, each holding a slot of the node's connection limit, that the node
//! can end: all of them once a shutdown's deadline passes, and each one that has had no
//! request in flight for `max_connection_idle`.
//!
//! tonic's graceful shutdown waits until every connection has closed, and a client can keep
//! one open for ever (an idle connection, a stream it never ends), holding the node and its
//! version file's lock. Every accepted connection is wrapped in a [`Cuttable`]: once the
//! shutdown deadline passes ([`Cutter::cut`]), its reads and writes fail, hyper drops the
//! connection, and the shutdown completes.
//!
//! Idle connections end the same way. Each [`Cuttable`] has a timer for the moment its
//! connection would have been idle long enough ([`super::busy::Activity`]). When it fires
//! with a request in flight, it is set again; with none, the connection ends, unless bytes
//! arrived since the timer was last set: those may be a request that hyper has read but
//! whose task has not yet marked it in flight, so the node looks again a moment later
//! ([`RECHECK`]) instead of cutting it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;
use tracing::debug;

use super::busy::{Activity, ConnInfo};
use super::cert_check::Verdict;

/// How long after an idle deadline the node looks again when bytes arrived since it last
/// looked: ample time for a request hyper has read to be marked in flight, and short
/// beside any keepalive interval, so that ping answers cannot keep a connection open.
const RECHECK: Duration = Duration::from_millis(50);

/// Cuts every [`Cuttable`] made from it, and gives each its idle limit.
#[derive(Debug)]
pub(super) struct Cutter {
    cut: watch::Sender<bool>,
    max_idle: Duration,
    idle_closed: Counter,
}

impl Cutter {
    /// Connections made from this cutter end after `max_idle` with no request in flight;
    /// each one that does is counted in `idle_closed`.
    pub(super) fn new(max_idle: Duration, idle_closed: Counter) -> Self {
        Self {
            cut: watch::channel(false).0,
            max_idle,
            idle_closed,
        }
    }

    /// Wraps an accepted connection, which holds `slot` (of the node's connection limit) until
    /// it is dropped.
    pub(super) fn wrap(&self, io: TcpStream, slot: OwnedSemaphorePermit) -> Cuttable {
        let mut rx = self.cut.subscribe();
        Cuttable {
            io,
            _slot: slot,
            // Resolves when cut, or when the cutter is gone (the server has stopped).
            cut: Box::pin(async move {
                let _ = rx.wait_for(|cut| *cut).await;
            }),
            ended: None,
            activity: Activity::new(),
            cert: Arc::default(),
            max_idle: self.max_idle,
            idle_closed: self.idle_closed.clone(),
            idle_check: Box::pin(tokio::time::sleep(self.max_idle)),
            read_since_check: false,
        }
    }

    /// Cuts every connection wrapped so far (and any wrapped later).
    pub(super) fn cut(&self) {
        self.cut.send_replace(true);
    }
}

/// A TCP connection that fails once cut or idle too long.
pub(super) struct Cuttable {
    io: TcpStream,
    _slot: OwnedSemaphorePermit,
    cut: Pin<Box<dyn Future<Output = ()> + Send + Sync>>,
    /// Why the connection ended, once it has.
    ended: Option<Ended>,
    /// Its requests in flight (shared with them through [`ConnInfo`]).
    activity: Arc<Activity>,
    /// Its certificate's standing (shared with its requests through [`ConnInfo`]).
    cert: Arc<Verdict>,
    max_idle: Duration,
    idle_closed: Counter,
    /// Fires when the connection may have been idle for `max_idle`.
    idle_check: Pin<Box<Sleep>>,
    /// Whether bytes arrived since `idle_check` was last set.
    read_since_check: bool,
}

/// Why a [`Cuttable`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Cut,
    Idle,
}

impl Ended {
    fn error(self) -> io::Error {
        match self {
            Ended::Cut => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the node's shutdown deadline passed",
            ),
            Ended::Idle => io::Error::new(
                io::ErrorKind::TimedOut,
                "no request in flight for max_connection_idle",
            ),
        }
    }
}

impl Cuttable {
    /// Why the connection has ended, if it has. Polling the cut and the idle timer
    /// registers the task's waker with both, so a connection waiting for bytes that never
    /// come is woken when either ends it.
    fn ended(&mut self, cx: &mut Context<'_>) -> Option<Ended> {
        if self.ended.is_none() {
            if self.cut.as_mut().poll(cx).is_ready() {
                self.ended = Some(Ended::Cut);
            } else if self.idle(cx) {
                debug!(max_idle = ?self.max_idle, "closing an idle connection");
                self.idle_closed.inc();
                self.ended = Some(Ended::Idle);
            }
        }
        self.ended
    }

    /// Whether the connection has had no request in flight for `max_idle`; if not, sets the
    /// timer for when it next might have (and polls it, to be woken then).
    fn idle(&mut self, cx: &mut Context<'_>) -> bool {
        while self.idle_check.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let next = match self.activity.idle_since() {
                None => now + self.max_idle,
                Some(_) if self.read_since_check => now + RECHECK,
                Some(since) => {
                    let due = Instant::from_std(since) + self.max_idle;
                    if due <= now {
                        return true;
                    }
                    due
                }
            };
            self.read_since_check = false;
            self.idle_check.as_mut().reset(next);
        }
        false
    }
}

impl AsyncRead for Cuttable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(why) = self.ended(cx) {
            return Poll::Ready(Err(why.error()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.read_since_check = true;
        }
        read
    }
}

impl AsyncWrite for Cuttable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(why) = self.ended(cx) {
            return Poll::Ready(Err(why.error()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(why) = self.ended(cx) {
            return Poll::Ready(Err(why.error()));
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Connected for Cuttable {
    type ConnectInfo = ConnInfo;

    /// The TCP connection's addresses, and its activity (for [`super::busy::TrackLayer`]).
    fn connect_info(&self) -> ConnInfo {
        ConnInfo {
            tcp: self.io.connect_info(),
            activity: self.activity.clone(),
            cert: self.cert.clone(),
        }
    }
}
