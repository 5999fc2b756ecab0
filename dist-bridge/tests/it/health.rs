//! The standard gRPC health service on a node.

use crate::net::*;
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

async fn check(
    client: &mut HealthClient<tonic::transport::Channel>,
    service: &str,
) -> Result<i32, tonic::Status> {
    client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .map(|r| r.into_inner().status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answers_health_checks_without_a_token() {
    bounded(async {
        let net = Net::start("health", 1, |_| {}).await;
        let channel = channel(net.nodes[0].addr(), net.sites[0].id).await;
        let mut client = HealthClient::new(channel);
        let serving = ServingStatus::Serving as i32;
        assert_eq!(
            check(&mut client, "dist_bridge.v1.Node")
                .await
                .expect("check"),
            serving
        );
        assert_eq!(check(&mut client, "").await.expect("check"), serving);
        let unknown = check(&mut client, "no.such.Service")
            .await
            .expect_err("unknown");
        assert_eq!(unknown.code(), tonic::Code::NotFound);
        net.shutdown().await;
        // Once stopped, nothing answers.
        assert!(check(&mut client, "dist_bridge.v1.Node").await.is_err());
    })
    .await;
}
