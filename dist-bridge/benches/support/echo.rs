//! The benches' reference server and load: a bare tonic echo of the node's service, client
//! pools, and a closed-loop load of reads with a number of requests in flight.
//!
//! - [`start_echo`]: the same generated `dist_bridge.v1.Node` service whose `Invoke` does
//!   nothing but answer [`PAYLOAD`] zero bytes (every other RPC is unimplemented), served by
//!   tonic's own `Server`: the cost of tonic, HTTP/2, TLS and protobuf alone.
//! - [`pool`]: clients of node 1 (the echo answers as node 1, with its certificate).
//! - [`load`]: `total` reads through a token, `in_flight` at a time.
//! - [`IN_FLIGHT`]: the depths the benches load both servers at.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dist_bridge::client::Reach;
use dist_bridge::pb;
use dist_bridge::pb::node_server::{Node as NodeRpc, NodeServer};
use dist_bridge::*;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// Requests in flight the benches compare the node and the echo at.
pub const IN_FLIGHT: [usize; 3] = [1, 8, 64];
use tonic::{Request, Response, Status};

use super::net;

/// The bytes every read asks for (and the echo answers).
pub const PAYLOAD: u64 = 64;

/// The reference: a unary service that only answers.
pub struct Echo;

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
pub async fn start_echo(tls: bool) -> SocketAddr {
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
pub async fn pool(addr: SocketAddr, tls: bool, n: usize) -> Vec<NodeClient> {
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
pub async fn load(
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
