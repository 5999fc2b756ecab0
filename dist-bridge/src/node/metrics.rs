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
//! | `dist_bridge_idle_connections_closed_total` | counter | |
//! | `dist_bridge_revoked_certificate_requests_total` | counter | |
//! | `dist_bridge_revoked_certificate_handshakes_total` | counter | |
//! | `dist_bridge_revoked_certificate_connections_closed_total` | counter | |
//! | `dist_bridge_pending_request_bytes` | gauge | |
//! | `dist_bridge_pending_request_refusals_total` | counter | |
//! | `dist_bridge_guard_table_capacity`, `_live`, `_pending`, `_free` | gauge | |
//!
//! The endpoint is plain HTTP without authentication, and it shows table occupancy and
//! refusal kinds: bind it to a management interface (or loopback) only. It is off unless
//! configured.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use crate::rights::Op;

use super::counters::{RPCS, Rpc};
use super::shared::Shared;

type Labels = Vec<(&'static str, String)>;
type NewHistogram = fn() -> Latency;

/// Bucket bounds of [`Latency`], in ns: 50 µs doubling to ~3.3 s.
const BOUNDS_NS: [u64; 17] = {
    let mut b = [0u64; 17];
    let mut i = 0;
    while i < 17 {
        b[i] = 50_000 << i;
        i += 1;
    }
    b
};

/// A latency histogram that every invocation records into with atomic adds only
/// (`prometheus-client`'s own takes a lock per observation, which two cores busy with
/// invocations contend for). Buckets hold non-cumulative counts; the encoder sums them.
#[derive(Clone, Debug, Default)]
pub(super) struct Latency(Arc<LatencyInner>);

#[derive(Debug, Default)]
pub(super) struct LatencyInner {
    /// `BOUNDS_NS` buckets, then +Inf.
    buckets: [AtomicU64; 18],
    sum_ns: AtomicU64,
}

impl Latency {
    fn observe(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        if let Some(b) = self.0.buckets.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.0.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

impl TypedMetric for Latency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Latency {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // `encode_histogram` takes each bucket's own count and sums them itself: handing it
        // running totals counted every observation once per bucket above it.
        let mut count = 0u64;
        let mut buckets = Vec::with_capacity(BOUNDS_NS.len() + 1);
        for (i, b) in self.0.buckets.iter().enumerate() {
            let n = b.load(Ordering::Relaxed);
            count = count.saturating_add(n);
            let bound = BOUNDS_NS.get(i).map_or(f64::MAX, |&ns| ns as f64 / 1e9);
            buckets.push((bound, n));
        }
        let sum = self.0.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The node's metrics.
///
/// The series every request touches are resolved once, here: counting is one atomic add,
/// with no label allocation or family lookup on the hot path.
#[derive(Debug)]
pub(super) struct Metrics {
    registry: Registry,
    /// Per RPC, in [`RPCS`] order.
    requests: Vec<Counter>,
    /// `[read ok, read refused, write ok, write refused]`.
    invocations: [Counter; 4],
    /// `[read, write]`.
    invoke_seconds: [Latency; 2],
    refusals: Family<Labels, Counter>,
    revocations: Counter,
    guards_revoked: Counter,
    /// Connections told to go away for having no request in flight for `max_connection_idle`.
    pub(super) idle_closed: Counter,
    /// Requests refused because their certificate is revoked.
    pub(super) revoked_cert_requests: Counter,
    /// TLS handshakes refused because the client's certificate is revoked.
    pub(super) revoked_cert_handshakes: Counter,
    /// Open connections cut because the client's certificate was revoked.
    pub(super) revoked_cert_closed: Counter,
    table: [Gauge; 4],
    /// Bytes held for request messages still arriving ([`super::pending`]).
    pub(super) pending_bytes: Gauge<u64, AtomicU64>,
    /// Requests refused for want of them.
    pub(super) pending_refused: Counter,
}

impl Metrics {
    pub(super) fn new() -> Self {
        let mut registry = Registry::with_prefix("dist_bridge");
        let request_family = Family::<Labels, Counter>::default();
        registry.register(
            "requests",
            "Requests received, by RPC",
            request_family.clone(),
        );
        let requests = RPCS
            .iter()
            .map(|(_, name)| {
                request_family
                    .get_or_create(&vec![("rpc", (*name).to_owned())])
                    .clone()
            })
            .collect();
        let invocation_family = Family::<Labels, Counter>::default();
        registry.register(
            "invocations",
            "Invocations, by operation and outcome",
            invocation_family.clone(),
        );
        let invocation = |op: &str, outcome: &str| {
            invocation_family
                .get_or_create(&vec![
                    ("op", op.to_owned()),
                    ("outcome", outcome.to_owned()),
                ])
                .clone()
        };
        let invocations = [
            invocation("read", "ok"),
            invocation("read", "refused"),
            invocation("write", "ok"),
            invocation("write", "refused"),
        ];
        // 50 µs .. ~3.3 s.
        let seconds_family: Family<Labels, Latency, NewHistogram> =
            Family::new_with_constructor(Latency::default);
        registry.register(
            "invoke_seconds",
            "Time from an invocation's arrival to its reply, by operation",
            seconds_family.clone(),
        );
        let invoke_seconds = ["read", "write"].map(|op| {
            seconds_family
                .get_or_create(&vec![("op", op.to_owned())])
                .clone()
        });
        let refusals = Family::<Labels, Counter>::default();
        registry.register(
            "refusals",
            "Refused requests, by RPC and detailed kind",
            refusals.clone(),
        );
        let mut counter = |name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let revocations = counter("revocations", "Revoke requests that revoked");
        let guards_revoked = counter(
            "guards_revoked",
            "Guards revoked by Revoke requests (with their descendants)",
        );
        let idle_closed = counter(
            "idle_connections_closed",
            "Connections told to go away (GOAWAY) after max_connection_idle with no request in flight",
        );
        let revoked_cert_requests = counter(
            "revoked_certificate_requests",
            "Requests refused because their client certificate is revoked",
        );
        let revoked_cert_handshakes = counter(
            "revoked_certificate_handshakes",
            "TLS handshakes refused because the client certificate is revoked",
        );
        let revoked_cert_closed = counter(
            "revoked_certificate_connections_closed",
            "Open connections cut because a revocation list read since named their client certificate",
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
        let pending_bytes = Gauge::<u64, AtomicU64>::default();
        registry.register(
            "pending_request_bytes",
            "Bytes held for request messages that have not fully arrived, across all connections",
            pending_bytes.clone(),
        );
        let pending_refused = Counter::default();
        registry.register(
            "pending_request_refusals",
            "Requests refused (RESOURCE_EXHAUSTED) because max_pending_request_bytes was held",
            pending_refused.clone(),
        );
        Metrics {
            pending_bytes,
            pending_refused,
            registry,
            requests,
            invocations,
            invoke_seconds,
            refusals,
            revocations,
            guards_revoked,
            idle_closed,
            revoked_cert_requests,
            revoked_cert_handshakes,
            revoked_cert_closed,
            table,
        }
    }

    pub(super) fn received(&self, rpc: Rpc) {
        if let Some(c) = self.requests.get(rpc as usize) {
            c.inc();
        }
    }

    /// Requests of `rpc` received so far (what `Status` reports).
    pub(super) fn received_count(&self, rpc: Rpc) -> u64 {
        self.requests.get(rpc as usize).map_or(0, Counter::get)
    }

    pub(super) fn refused(&self, rpc: &'static str, kind: &'static str) {
        self.refusals
            .get_or_create(&vec![("rpc", rpc.to_owned()), ("kind", kind.to_owned())])
            .inc();
    }

    /// An invocation of `op` that took `took`, accepted or not.
    pub(super) fn invoked(&self, op: Op, ok: bool, took: Duration) {
        let i = match op {
            Op::Read => 0,
            Op::Write => 1,
        };
        self.invocations[2 * i + usize::from(!ok)].inc();
        self.invoke_seconds[i].observe(took);
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

/// Serves `GET /metrics` on `listener` until `stop`; then ends every scrape connection
/// still open (a kept-alive one too) before it returns, so a stopped node's state is neither
/// held nor served after [`RunningNode::shutdown`](super::RunningNode::shutdown).
pub(super) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            // Reap finished connections as they end, so the set stays as small as the open ones.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            _ = stop.wait_for(|s| *s) => break,
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
        conns.spawn(async move {
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
    drop(listener);
    // Aborts each connection's task and waits until every one has dropped its socket.
    conns.shutdown().await;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The exposition of a registry holding only `latency`, read back by an independent
    /// Prometheus text parser: `(bucket bound, cumulative count)` in order, and `_count`.
    fn exposed(latency: &Latency) -> (Vec<(f64, f64)>, f64) {
        let mut registry = Registry::default();
        registry.register("lat", "test latency", latency.clone());
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
        let mut buckets = None;
        let mut count = None;
        for s in scrape.samples {
            match s.value {
                prometheus_parse::Value::Histogram(h) => {
                    buckets = Some(h.iter().map(|b| (b.less_than, b.count)).collect());
                }
                prometheus_parse::Value::Untyped(v) | prometheus_parse::Value::Counter(v)
                    if s.metric == "lat_count" =>
                {
                    count = Some(v);
                }
                _ => {}
            }
        }
        (
            buckets.expect("a histogram sample"),
            count.expect("a _count sample"),
        )
    }

    #[test]
    fn buckets_are_cumulative_once_and_inf_equals_count() {
        let latency = Latency::default();
        // 50 µs is the first bound (le is inclusive); 60 µs the second; 1 s the 15th
        // (50 µs << 14 = 819.2 ms < 1 s <= 1.6384 s); 10 s only +Inf.
        let observed = [
            Duration::from_micros(10),
            Duration::from_micros(50),
            Duration::from_micros(60),
            Duration::from_secs(1),
            Duration::from_secs(1),
            Duration::from_secs(10),
        ];
        for d in observed {
            latency.observe(d);
        }
        let (buckets, count) = exposed(&latency);
        assert_eq!(count, 6.0);
        assert_eq!(buckets.len(), BOUNDS_NS.len() + 1, "{buckets:?}");
        for (i, &(bound, cumulative)) in buckets.iter().enumerate() {
            let expect = observed
                .iter()
                .filter(|d| match BOUNDS_NS.get(i) {
                    Some(&ns) => d.as_nanos() <= u128::from(ns),
                    None => true,
                })
                .count() as f64;
            assert_eq!(cumulative, expect, "bucket {i} (le {bound}): {buckets:?}");
        }
        let inf = buckets.last().map(|b| b.1);
        assert_eq!(inf, Some(count), "+Inf must equal _count");
    }
}
