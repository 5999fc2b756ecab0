//! A shutdown ends by its deadline whatever clients do: a client that keeps a stream open
//! cannot keep the node, or its version file's lock, from stopping.

use std::time::{Duration, Instant};

use crate::net::*;
use dist_bridge::*;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_left_open_does_not_hold_a_shutdown_past_its_deadline() {
    bounded(async {
        let deadline = Duration::from_millis(500);
        let net = Net::start("shutdown", 1, |c| c.shutdown_deadline = deadline).await;
        let config = net.sites[0].config();
        // A client that opens a stream and never closes it (a health watch: the server keeps
        // it open to report changes).
        let channel = channel(net.nodes[0].addr(), net.sites[0].id).await;
        let mut watch = HealthClient::new(channel)
            .watch(HealthCheckRequest {
                service: "dist_bridge.v1.Node".into(),
            })
            .await
            .expect("watch")
            .into_inner();
        assert!(watch.message().await.expect("a status").is_some());

        let Net { nodes, .. } = net;
        let started = Instant::now();
        for node in nodes {
            tokio::time::timeout(Duration::from_secs(20), node.shutdown())
                .await
                .expect("the shutdown waited for the open stream past its deadline")
                .expect("shutdown");
        }
        eprintln!("shutdown took {:?}", started.elapsed());
        // The version file is unlocked: the node starts again on the same files.
        let again = Node::start(config)
            .await
            .expect("restart on the same files");
        again.shutdown().await.expect("shutdown");
        drop(watch);
    })
    .await;
}
