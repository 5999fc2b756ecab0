//! Invocations per second with 1, 8 and 64 requests in flight, against a bare tonic unary
//! echo service with the same messages, in the same run, with and without mutual TLS.
//!
//! - `node`: a dist-bridge node (its fixture: mTLS from the test CA, or `insecure`), a
//!   64-byte read through a token: decode, per-object gate, tag and scope check, ranged read
//!   from the store, reply.
//! - `echo`: the same generated `dist_bridge.v1.Node` service whose `Invoke` does nothing but
//!   answer 64 zero bytes (every other RPC is unimplemented): the cost of tonic, HTTP/2, TLS
//!   and protobuf alone. Same certificate, same client library, same request bytes.
//!
//! Requests in flight are spread over `min(in_flight, 8)` connections (HTTP/2 streams on
//! each), as a client pool would. Server and clients share one 2-worker tokio runtime on
//! this 2-core machine, as in `rpc.rs`.
//!
//! Criterion reports invocations per second (`Throughput::Elements`). Before it, a fixed
//! run of each configuration prints p50 and p99 latency (and the rate) to stderr and to
//! `target/criterion/dist_throughput_latency.txt`.

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

#[path = "../tests/it/net/mod.rs"]
mod net;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dist_bridge::client::Reach;
use dist_bridge::pb;
use dist_bridge::pb::node_server::{Node as NodeRpc, NodeServer};
use dist_bridge::*;
use net::Net;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

const PAYLOAD: u64 = 64;
const IN_FLIGHT: [usize; 3] = [1, 8, 64];

/// The reference: a unary service that only answers.
struct Echo;

type Reply<T> = Result<Response<T>, Status>;

fn none<T>() -> Reply<T> {
    Err(Status::unimplemented("echo only"))
}

#[tonic::async_trait]
impl NodeRpc for Echo {
    async fn export(&self, _: Request<pb::ExportRequest>) -> Reply<pb::TokenReply> {
        none()
    }
    async fn invoke(&self, r: Request<pb::InvokeRequest>) -> Reply<pb::InvokeReply> {
        let len = r.into_inner().len.min(PAYLOAD) as usize;
        Ok(Response::new(pb::InvokeReply { data: vec![0; len] }))
    }
    async fn revoke(&self, _: Request<pb::TokenRequest>) -> Reply<pb::RevokeReply> {
        none()
    }
    async fn renew(&self, _: Request<pb::TokenRequest>) -> Reply<pb::TokenReply> {
        none()
    }
    async fn derive_guard(&self, _: Request<pb::DeriveRequest>) -> Reply<pb::TokenReply> {
        none()
    }
    async fn status(&self, _: Request<pb::StatusRequest>) -> Reply<pb::StatusReply> {
        none()
    }
    async fn poll_upgrades(
        &self,
        _: Request<pb::PollUpgradesRequest>,
    ) -> Reply<pb::PollUpgradesReply> {
        none()
    }
    async fn broadcast_issue(&self, _: Request<pb::BroadcastIssueRequest>) -> Reply<pb::CapName> {
        none()
    }
    async fn broadcast_revoke(&self, _: Request<pb::CapName>) -> Reply<pb::BroadcastRevokeReply> {
        none()
    }
    async fn broadcast_check(&self, _: Request<pb::CapName>) -> Reply<pb::BroadcastCheckReply> {
        none()
    }
    async fn broadcast(&self, _: Request<pb::BroadcastRequest>) -> Reply<pb::BroadcastReply> {
        none()
    }
}

/// Starts the echo service (as node 1, with node 1's certificate when `tls`).
async fn start_echo(tls: bool) -> SocketAddr {
    let incoming = TcpIncoming::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind")
        .with_nodelay(Some(true));
    let addr = incoming.local_addr().expect("address");
    let mut server = Server::builder();
    if tls {
        server = server
            .tls_config(net::tls(&PeerIdentity::Node(1)).server_config(Duration::from_secs(10)))
            .expect("tls");
    }
    tokio::spawn(
        server
            .add_service(NodeServer::new(Echo))
            .serve_with_incoming(incoming),
    );
    addr
}

/// A pool of `n` clients of node 1 at `addr`.
async fn pool(addr: SocketAddr, tls: bool, n: usize) -> Vec<NodeClient> {
    let material = net::tls(&net::holder());
    let reach = if tls {
        Reach::Tls(&material)
    } else {
        Reach::Insecure
    };
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(NodeClient::connect(addr, 1, reach).await.expect("connect"));
    }
    out
}

/// `total` reads with `in_flight` workers over `clients`; the wall time and every latency.
async fn load(
    clients: &[NodeClient],
    token: &[u8],
    in_flight: usize,
    total: usize,
) -> (Duration, Vec<Duration>) {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..in_flight {
        let client = clients[w % clients.len()].clone();
        let token = token.to_vec();
        let next = next.clone();
        workers.spawn(async move {
            let mut lat = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let t0 = Instant::now();
                let data = client
                    .invoke_bytes(token.clone(), Op::Read, 0, PAYLOAD, Vec::new())
                    .await
                    .expect("invoke");
                assert_eq!(data.len() as u64, PAYLOAD);
                lat.push(t0.elapsed());
            }
            lat
        });
    }
    let mut all = Vec::with_capacity(total);
    while let Some(r) = workers.join_next().await {
        all.extend(r.expect("worker"));
    }
    (started.elapsed(), all)
}

struct Target {
    name: &'static str,
    tls: bool,
    pools: Vec<(usize, Vec<NodeClient>)>,
}

fn bench_throughput(c: &mut Criterion) {
    let rt = net::bench_runtime();
    let mut nets = Vec::new();
    let mut targets = Vec::new();
    for tls in [true, false] {
        let net = rt.block_on(Net::start(
            if tls {
                "bench-tput-tls"
            } else {
                "bench-tput-plain"
            },
            1,
            |c| {
                if !tls {
                    c.transport = Some(Transport::Insecure);
                }
                c.max_streams_per_connection = 64;
            },
        ));
        // The node's token; the echo gets the same bytes (and ignores them).
        let t = rt.block_on(net.export(0, Rights::READ, ByteRange::WHOLE));
        let node_addr = net.nodes[0].addr();
        let echo_addr = rt.block_on(start_echo(tls));
        for (name, addr) in [("node", node_addr), ("echo", echo_addr)] {
            let pools = IN_FLIGHT
                .iter()
                .map(|&n| (n, rt.block_on(pool(addr, tls, n.min(8)))))
                .collect();
            targets.push((Target { name, tls, pools }, t.encode()));
        }
        nets.push(net);
    }

    // Latency percentiles and rate from a fixed run of each configuration.
    let mut report = String::from("target\ttls\tin_flight\trate/s\tp50_us\tp99_us\n");
    let quick = std::env::args().any(|a| a == "--test");
    // Criterion's filter (its first free argument) selects the fixed runs too.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    for (target, token) in &targets {
        for (n, clients) in &target.pools {
            let id = format!(
                "{}_{}/{n}",
                target.name,
                if target.tls { "mtls" } else { "plain" }
            );
            if filter.as_ref().is_some_and(|f| !id.contains(f.as_str())) {
                continue;
            }
            let total = if quick { 64 } else { 20_000 };
            rt.block_on(load(clients, token, *n, total.min(2_000))); // warm-up
            let (took, mut lat) = rt.block_on(load(clients, token, *n, total));
            lat.sort_unstable();
            let pct = |p: f64| {
                lat.get(((lat.len() as f64 * p) as usize).min(lat.len() - 1))
                    .map_or(0.0, |d| d.as_secs_f64() * 1e6)
            };
            let line = format!(
                "{}\t{}\t{}\t{:.0}\t{:.0}\t{:.0}\n",
                target.name,
                if target.tls { "mtls" } else { "plain" },
                n,
                total as f64 / took.as_secs_f64(),
                pct(0.50),
                pct(0.99)
            );
            eprint!("latency: {line}");
            report.push_str(&line);
        }
    }
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("../criterion/dist_throughput_latency.txt");
    let _ = std::fs::create_dir_all(out.parent().expect("parent"));
    let _ = std::fs::write(&out, report);

    let mut g = c.benchmark_group("dist_throughput");
    g.measurement_time(Duration::from_secs(4));
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    for (target, token) in &targets {
        for (n, clients) in &target.pools {
            let id = format!(
                "{}_{}",
                target.name,
                if target.tls { "mtls" } else { "plain" }
            );
            g.bench_with_input(BenchmarkId::new(id, n), n, |b, &n| {
                b.iter_custom(|iters| {
                    let total = usize::try_from(iters).unwrap_or(usize::MAX);
                    rt.block_on(load(clients, token, n, total)).0
                });
            });
        }
    }
    g.finish();
    drop(targets);
    for net in nets {
        rt.block_on(net.shutdown());
    }
}

criterion_group!(benches, bench_throughput);
criterion_main!(benches);
