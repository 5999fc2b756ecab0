//! Connections a shutdown can cut, each holding a slot of the node's connection limit. tonic's graceful shutdown waits until every connection
//! has closed, and a client can keep one open for ever (an idle connection, a stream it never
//! ends), holding the node and its version file's lock. Every accepted connection is wrapped
//! in a [`Cuttable`]: once the shutdown deadline passes ([`Cutter::cut`]), its reads and
//! writes fail, hyper drops the connection, and the shutdown completes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Cuts every [`Cuttable`] made from it.
#[derive(Debug)]
pub(super) struct Cutter(watch::Sender<bool>);

impl Cutter {
    pub(super) fn new() -> Self {
        Self(watch::channel(false).0)
    }

    /// Wraps an accepted connection, which holds `slot` (of the node's connection limit) until
    /// it is dropped.
    pub(super) fn wrap(&self, io: TcpStream, slot: OwnedSemaphorePermit) -> Cuttable {
        let mut rx = self.0.subscribe();
        Cuttable {
            io,
            _slot: slot,
            // Resolves when cut, or when the cutter is gone (the server has stopped).
            cut: Box::pin(async move {
                let _ = rx.wait_for(|cut| *cut).await;
            }),
            is_cut: false,
        }
    }

    /// Cuts every connection wrapped so far (and any wrapped later).
    pub(super) fn cut(&self) {
        self.0.send_replace(true);
    }
}

/// A TCP connection that fails once cut.
pub(super) struct Cuttable {
    io: TcpStream,
    _slot: OwnedSemaphorePermit,
    cut: Pin<Box<dyn Future<Output = ()> + Send + Sync>>,
    is_cut: bool,
}

impl Cuttable {
    /// Whether the connection has been cut (polling the cut registers the task's waker, so a
    /// connection waiting for bytes that never come is woken by the cut).
    fn cut_now(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.is_cut && self.cut.as_mut().poll(cx).is_ready() {
            self.is_cut = true;
        }
        self.is_cut
    }
}

fn aborted() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the node's shutdown deadline passed",
    )
}

impl AsyncRead for Cuttable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.cut_now(cx) {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Cuttable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.cut_now(cx) {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.cut_now(cx) {
            return Poll::Ready(Err(aborted()));
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Connected for Cuttable {
    type ConnectInfo = TcpConnectInfo;

    /// The TCP connection's addresses (for the log).
    fn connect_info(&self) -> TcpConnectInfo {
        self.io.connect_info()
    }
}
