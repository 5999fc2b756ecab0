//! Prometheus metrics (`prometheus-client`), served in the text exposition format on
//! [`NodeConfig::metrics_listen`](super::NodeConfig::metrics_listen) at `GET /metrics`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `dist_bridge_requests_total` | counter | `rpc` |
//! | `dist_bridge_invocations_total` | counter | `op` (`read`, `write`), `outcome` (`ok`, `refused`) |
//! | `dist_bridge_invoke_seconds` | histogram | `op` |
//! | `dist_bridge_refusals_total` | counter | `rpc`, `kind` (the detailed [`ErrorKind`](crate::wire::ErrorKind) name) |
//! | `dist_bridge_revocations_total` | counter | |
//! | `dist_bridge_guards_revoked_total` | counter | |
//! | `dist_bridge_guard_table_capacity`, `_live`, `_pending`, `_free` | gauge | |
//!
//! The endpoint is plain HTTP without authentication, and it shows table occupancy and
//! refusal kinds: bind it to a management interface (or loopback) only. It is off unless
//! configured.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::rights::Op;

use super::shared::Shared;

type Labels = Vec<(&'static str, String)>;
type NewHistogram = fn() -> Histogram;

/// The node's metrics.
#[derive(Debug)]
pub(super) struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    invocations: Family<Labels, Counter>,
    invoke_seconds: Family<Labels, Histogram, NewHistogram>,
    refusals: Family<Labels, Counter>,
    revocations: Counter,
    guards_revoked: Counter,
    table: [Gauge; 4],
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
    }
}

impl Metrics {
    pub(super) fn new() -> Self {
        let mut registry = Registry::with_prefix("dist_bridge");
        let requests = Family::<Labels, Counter>::default();
        registry.register("requests", "Requests received, by RPC", requests.clone());
        let invocations = Family::<Labels, Counter>::default();
        registry.register(
            "invocations",
            "Invocations, by operation and outcome",
            invocations.clone(),
        );
        // 50 µs .. ~3.3 s.
        let invoke_seconds: Family<Labels, Histogram, NewHistogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(50e-6, 2.0, 17)));
        registry.register(
            "invoke_seconds",
            "Time from an invocation's arrival to its reply, by operation",
            invoke_seconds.clone(),
        );
        let refusals = Family::<Labels, Counter>::default();
        registry.register(
            "refusals",
            "Refused requests, by RPC and detailed kind",
            refusals.clone(),
        );
        let revocations = Counter::default();
        registry.register(
            "revocations",
            "Revoke requests that revoked",
            revocations.clone(),
        );
        let guards_revoked = Counter::default();
        registry.register(
            "guards_revoked",
            "Guards revoked by Revoke requests (with their descendants)",
            guards_revoked.clone(),
        );
        let table: [Gauge; 4] = Default::default();
        for (name, help, g) in [
            ("guard_table_capacity", "Guard table entries", &table[0]),
            ("guard_table_live", "Live guards", &table[1]),
            (
                "guard_table_pending",
                "Freed entries awaiting their batch",
                &table[2],
            ),
            ("guard_table_free", "Free entries", &table[3]),
        ] {
            registry.register(name, help, g.clone());
        }
        Metrics {
            registry,
            requests,
            invocations,
            invoke_seconds,
            refusals,
            revocations,
            guards_revoked,
            table,
        }
    }

    pub(super) fn received(&self, rpc: &'static str) {
        self.requests
            .get_or_create(&vec![("rpc", rpc.to_owned())])
            .inc();
    }

    pub(super) fn refused(&self, rpc: &'static str, kind: &'static str) {
        self.refusals
            .get_or_create(&vec![("rpc", rpc.to_owned()), ("kind", kind.to_owned())])
            .inc();
    }

    /// An invocation of `op` that took `took`, accepted or not.
    pub(super) fn invoked(&self, op: Op, ok: bool, took: Duration) {
        let op = op_name(op);
        let outcome = if ok { "ok" } else { "refused" };
        self.invocations
            .get_or_create(&vec![
                ("op", op.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
        self.invoke_seconds
            .get_or_create(&vec![("op", op.to_owned())])
            .observe(took.as_secs_f64());
    }

    pub(super) fn revoked(&self, guards: u32) {
        self.revocations.inc();
        self.guards_revoked.inc_by(u64::from(guards));
    }

    /// The text exposition of every metric, the table's read now.
    pub(super) fn render(&self, shared: &Shared) -> String {
        if let Ok(s) = shared.owner.stats() {
            for (g, v) in self
                .table
                .iter()
                .zip([s.capacity, s.live, s.pending, s.free])
            {
                g.set(i64::from(v));
            }
        }
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Binds the metrics listener (before the node commits to starting, so a bad address is a
/// start-up error).
pub(super) async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `GET /metrics` on `listener` until `stop`.
pub(super) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            _ = stop.wait_for(|s| *s) => return,
        };
        let (io, peer) = match conn {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(answer(&req, &shared)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .serve_connection(hyper_util::rt::TokioIo::new(io), service);
            // A scrape is one short request: the connection may not linger.
            match tokio::time::timeout(Duration::from_secs(30), conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%peer, error = %e, "metrics connection failed"),
                Err(_) => debug!(%peer, "metrics connection timed out"),
            }
        });
    }
}

fn answer(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            shared.metrics.render(shared),
        ),
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "only /metrics is served here\n".to_owned(),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET\n".to_owned(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}
