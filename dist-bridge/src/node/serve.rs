//! The node's HTTP/2 server: accepting connections within the connection limit, their TLS
//! handshakes, and the life of each connection until it ends.
//!
//! Serving here rather than with tonic's `Server` (which serves the same tonic services on
//! the same hyper) is what lets every end of a connection be graceful. tonic can end a
//! connection only at its maximum age, and with a grace period set it closes the socket at
//! the end of the grace period instead of sending a GOAWAY first (tonic 0.14.9); it has no
//! per-connection idle limit at all. A socket closed under a client loses the request the
//! client sent in the same instant, while a GOAWAY does not.
//!
//! Each accepted connection is one task. It ends when:
//! - the client closes it, or it fails (keepalive pings unanswered included);
//! - it has had no request in flight for `max_connection_idle`
//!   ([`super::busy::Activity`]), or has lived `max_connection_age`: the node sends a
//!   GOAWAY, and closes the connection once its requests are done, or `request_timeout`
//!   later at the latest;
//! - the node stops: a GOAWAY too, and the connection is closed `shutdown_deadline` after
//!   the stop at the latest, so that no client can hold the node or its version file's lock;
//! - the node reads a revocation list that names the client's certificate
//!   ([`super::cert_check`]): the connection is cut at once, its requests in flight with it
//!   (they were made with a certificate the node no longer accepts).
//!
//! The GOAWAY is HTTP/2's graceful two-step (h2's): first one admitting every stream, with a
//! PING; once the PING is answered, one naming the last stream the node will serve. A request
//! the client sent before it saw the first is served; after it, the client opens a new
//! connection. A client that never answers the PING is closed at the latest moment above.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prometheus_client::metrics::counter::Counter;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_rustls::TlsAcceptor;
use tonic::service::Routes;
use tracing::{debug, warn};

use super::busy::Activity;
use super::cert_check::{CertRevocations, Verdict};
use super::conn_service::{ConnInfo, ConnService, RequestRules};

/// How long the accept loop rests after the listener fails (out of file descriptors, say),
/// so that it does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The limits a connection's life is held to (from [`super::NodeConfig`]).
#[derive(Clone, Debug)]
pub(super) struct ConnLimits {
    pub(super) max_connections: usize,
    pub(super) handshake_timeout: Duration,
    pub(super) max_streams: u32,
    pub(super) keepalive_interval: Duration,
    pub(super) keepalive_timeout: Duration,
    pub(super) max_age: Duration,
    pub(super) max_idle: Duration,
    /// How long a connection told to go away (idle or old) may take to finish.
    pub(super) grace: Duration,
    /// How long after the node's stop a connection may take to finish.
    pub(super) shutdown_deadline: Duration,
}

/// Everything a connection task needs, shared by all of them.
struct Shared {
    tls: Option<TlsAcceptor>,
    services: Routes,
    rules: RequestRules,
    limits: ConnLimits,
    http2: http2::Builder<TokioExecutor>,
    idle_closed: Counter,
    revoked_closed: Counter,
}

/// A server ready to accept on its listener.
pub(super) struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Server {
    /// Serves `services` on `listener`, over TLS with `tls` (or plaintext without), each
    /// connection held to `limits` and each request to `rules`. Connections closed for
    /// idleness are counted in `idle_closed`, those cut for a revoked certificate in
    /// `revoked_closed`.
    pub(super) fn new(
        listener: TcpListener,
        tls: Option<TlsAcceptor>,
        services: Routes,
        rules: RequestRules,
        limits: ConnLimits,
        idle_closed: Counter,
        revoked_closed: Counter,
    ) -> Self {
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(limits.max_streams)
            .keep_alive_interval(Some(limits.keepalive_interval))
            .keep_alive_timeout(limits.keepalive_timeout);
        Server {
            listener,
            shared: Arc::new(Shared {
                tls,
                services,
                rules,
                limits,
                http2,
                idle_closed,
                revoked_closed,
            }),
        }
    }

    /// Accepts connections until `stop` turns true (or its sender is dropped), then closes
    /// the listener and returns once every connection has ended.
    pub(super) async fn run(self, stop: watch::Receiver<bool>) {
        let Server { listener, shared } = self;
        let slots = Arc::new(Semaphore::new(shared.limits.max_connections));
        let mut conns = JoinSet::new();
        let mut stopping = stop.clone();
        loop {
            tokio::select! {
                () = stopped(&mut stopping) => break,
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((tcp, remote)) => {
                        let Ok(slot) = slots.clone().try_acquire_owned() else {
                            warn!(%remote, "connection limit reached: closing a new connection");
                            continue;
                        };
                        conns.spawn(connection(tcp, remote, slot, shared.clone(), stop.clone()));
                    }
                    // One client's connection failed before it was accepted: nothing to wait for.
                    Err(e) if is_connection_error(&e) => {
                        debug!(error = %e, "a connection failed as it was accepted");
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot accept a connection");
                        sleep(ACCEPT_BACKOFF).await;
                    }
                },
            }
        }
        // No new connections from here: the port is closed, not left to hang new clients.
        drop(listener);
        while conns.join_next().await.is_some() {}
    }
}

/// One connection, from its handshake to its end.
async fn connection(
    tcp: TcpStream,
    remote: SocketAddr,
    _slot: OwnedSemaphorePermit,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    if let Err(e) = tcp.set_nodelay(true) {
        debug!(%remote, error = %e, "cannot set TCP_NODELAY");
    }
    let Some(tls) = &shared.tls else {
        return serve(tcp, remote, None, &shared, stop).await;
    };
    let handshake = tokio::time::timeout(shared.limits.handshake_timeout, tls.accept(tcp));
    let stream = tokio::select! {
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                debug!(%remote, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                debug!(%remote, "TLS handshake timed out");
                return;
            }
        },
        () = stopped(&mut stop) => return,
    };
    let certs = stream
        .get_ref()
        .1
        .peer_certificates()
        .map(|c| Arc::new(c.to_vec()));
    // Client authentication is required: rustls completes no handshake without a chain.
    serve(stream, remote, certs, &shared, stop).await;
}

/// Serves HTTP/2 on `io` until the connection ends (see the module's documentation).
async fn serve<IO>(
    io: IO,
    remote: SocketAddr,
    certs: Option<Arc<Vec<rustls_pki_types::CertificateDer<'static>>>>,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = &shared.limits;
    let activity = Activity::new();
    let verdict = Arc::<Verdict>::default();
    // Every list loaded from here on; the first check is at once, for a list loaded since
    // the handshake checked the one before.
    let mut revocations = match (&shared.rules.revocations, &certs) {
        (Some(list), Some(_)) => {
            let mut changes = list.changes();
            changes.mark_changed();
            Some((list.clone(), changes))
        }
        _ => None,
    };
    let info = ConnInfo {
        remote,
        certs: certs.clone(),
        activity: activity.clone(),
        cert: verdict.clone(),
    };
    let service = ConnService::new(shared.services.clone(), info, shared.rules.clone());
    let conn = shared.http2.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let started = Instant::now();
    let idle_check = sleep(limits.max_idle);
    let aged = sleep_until(started + limits.max_age);
    // Armed once the connection is told to go away.
    let force = sleep(Duration::ZERO);
    tokio::pin!(idle_check, aged, force);
    let mut going = false;
    let mut stopping = false;
    // Whether `force` is the shutdown's deadline (rather than a grace period's end).
    let mut forced_by_shutdown = false;
    loop {
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    debug!(%remote, error = %e, "connection failed");
                }
                return;
            }
            () = &mut idle_check, if !going => {
                match activity.idle_since() {
                    Some(since) if Instant::from_std(since) + limits.max_idle <= Instant::now() => {
                        debug!(%remote, max_idle = ?limits.max_idle, "closing an idle connection");
                        shared.idle_closed.inc();
                        conn.as_mut().graceful_shutdown();
                        going = true;
                        force.as_mut().reset(Instant::now() + limits.grace);
                    }
                    Some(since) => idle_check.as_mut().reset(Instant::from_std(since) + limits.max_idle),
                    None => idle_check.as_mut().reset(Instant::now() + limits.max_idle),
                }
            }
            () = &mut aged, if !going => {
                debug!(%remote, max_age = ?limits.max_age, "closing a connection at its maximum age");
                conn.as_mut().graceful_shutdown();
                going = true;
                force.as_mut().reset(Instant::now() + limits.grace);
            }
            () = stopped(&mut stop), if !stopping => {
                stopping = true;
                let by = Instant::now() + limits.shutdown_deadline;
                if !going || by < force.deadline() {
                    force.as_mut().reset(by);
                    forced_by_shutdown = true;
                }
                if !going {
                    conn.as_mut().graceful_shutdown();
                    going = true;
                }
            }
            () = list_changed(&mut revocations) => {
                if let Some((list, _)) = &revocations
                    && list.is_revoked(&verdict, || certs.clone())
                {
                    warn!(%remote, "the client's certificate is revoked: cutting its connection");
                    shared.revoked_closed.inc();
                    return;
                }
            }
            () = &mut force, if going => {
                if forced_by_shutdown {
                    warn!(%remote, deadline = ?limits.shutdown_deadline, "shutdown deadline passed: cutting a connection");
                } else {
                    debug!(%remote, "a connection told to go away did not finish in time: cutting it");
                }
                return;
            }
        }
    }
}

/// Whether an accept error is about the one connection being accepted, not the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    )
}

/// Resolves when a new revocation list is in force; never without one (or once its
/// announcer is gone).
async fn list_changed(revocations: &mut Option<(Arc<CertRevocations>, watch::Receiver<u64>)>) {
    if let Some((_, changes)) = revocations
        && changes.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// Resolves once `stop` is true, or its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, not held across an await.
    let _ = stop.wait_for(|s| *s).await;
}
