//! Prometheus metrics: served on their own address, counting what the node does.

use std::net::SocketAddr;

use crate::net::*;
use dist_bridge::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request; the status line and the body.
async fn http(addr: SocketAddr, method: &str, path: &str) -> (String, String) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(
        format!("{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    tcp.read_to_string(&mut out).await.unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The whole exposition, read by an independent Prometheus text parser (so a malformed line
/// fails the test), checked for every histogram: its buckets never decrease and `+Inf` equals
/// its `_count`. Returns how many histograms it checked.
fn parse_and_check_histograms(body: &str) -> usize {
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    let mut checked = 0;
    for s in &scrape.samples {
        let prometheus_parse::Value::Histogram(buckets) = &s.value else {
            continue;
        };
        let counts: Vec<f64> = buckets.iter().map(|b| b.count).collect();
        assert!(
            counts.windows(2).all(|w| w[0] <= w[1]),
            "{} {:?}: buckets decrease: {counts:?}",
            s.metric,
            s.labels
        );
        let count_series = format!("{}_count", s.metric);
        let count = scrape
            .samples
            .iter()
            .find(|c| c.metric == count_series && c.labels == s.labels)
            .map(|c| match c.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            });
        assert_eq!(
            counts.last().copied(),
            count,
            "{} {:?}: +Inf must equal _count",
            s.metric,
            s.labels
        );
        checked += 1;
    }
    checked
}

/// The value of the sample whose line starts with `series`.
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in:\n{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_invocations_refusals_revocations_and_the_table() {
    bounded(async {
        let net = Net::start("metrics", 1, |c| {
            c.metrics_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
            c.guard_table.capacity = 32;
        })
        .await;
        let at = net.nodes[0].metrics_addr().expect("metrics address");
        let c = net.client(0);
        let t = net.export(0, Rights::all(), ByteRange::WHOLE).await;
        for _ in 0..3 {
            c.read(&t, 0, 1).await.unwrap();
        }
        c.write(&t, 0, b"x").await.unwrap();
        let holder = net.holder(0).await;
        let _ = holder
            .invoke_bytes(b"junk".to_vec(), Op::Read, 0, 1, Vec::new())
            .await;
        let other = net.export(0, Rights::all(), ByteRange::WHOLE).await;
        c.revoke(&other).await.unwrap();

        let (status, body) = http(at, "GET", "/metrics").await;
        assert!(status.contains("200"), "{status}");
        assert_eq!(
            sample(
                &body,
                r#"dist_bridge_invocations_total{op="read",outcome="ok"}"#
            ),
            3.0
        );
        assert_eq!(
            sample(
                &body,
                r#"dist_bridge_invocations_total{op="write",outcome="ok"}"#
            ),
            1.0
        );
        assert_eq!(
            sample(
                &body,
                r#"dist_bridge_invocations_total{op="read",outcome="refused"}"#
            ),
            1.0
        );
        assert_eq!(
            sample(
                &body,
                r#"dist_bridge_refusals_total{rpc="invoke",kind="malformed-token"}"#
            ),
            1.0
        );
        assert_eq!(
            sample(&body, r#"dist_bridge_requests_total{rpc="export"}"#),
            2.0
        );
        assert_eq!(sample(&body, "dist_bridge_revocations_total"), 1.0);
        assert_eq!(sample(&body, "dist_bridge_guards_revoked_total"), 1.0);
        assert_eq!(sample(&body, "dist_bridge_guard_table_capacity"), 32.0);
        assert_eq!(sample(&body, "dist_bridge_guard_table_live"), 1.0);
        assert_eq!(
            sample(&body, r#"dist_bridge_invoke_seconds_count{op="read"}"#),
            4.0
        );
        assert!(
            body.trim_end().ends_with("# EOF"),
            "not OpenMetrics:\n{body}"
        );
        // One write: its histogram's buckets below +Inf hold at most that one observation.
        assert_eq!(
            sample(&body, r#"dist_bridge_invoke_seconds_count{op="write"}"#),
            1.0
        );
        assert_eq!(
            sample(
                &body,
                r#"dist_bridge_invoke_seconds_bucket{le="+Inf",op="write"}"#
            ),
            1.0
        );
        assert_eq!(parse_and_check_histograms(&body), 2, "read and write");

        assert!(http(at, "GET", "/other").await.0.contains("404"));
        assert!(http(at, "POST", "/metrics").await.0.contains("405"));
        net.shutdown().await;
        // The listener closes with the node.
        assert!(tokio::net::TcpStream::connect(at).await.is_err());
    })
    .await;
}

/// `shutdown` returns only once the metrics listener is closed: a metrics task that
/// `shutdown` did not wait for may not have run again when it returns, and its listener still
/// accepts (a race CI once lost). Many rounds on two workers, so losing it is likely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_the_metrics_listener_to_close() {
    bounded(async {
        for round in 0..40 {
            let net = Net::start("metrics-close", 1, |c| {
                c.metrics_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
            })
            .await;
            let at = net.nodes[0].metrics_addr().expect("metrics address");
            assert!(http(at, "GET", "/metrics").await.0.contains("200"));
            net.shutdown().await;
            assert!(
                tokio::net::TcpStream::connect(at).await.is_err(),
                "round {round}: metrics still accepted after shutdown returned"
            );
        }
    })
    .await;
}

/// A scrape connection kept open (HTTP/1.1 keep-alive, as Prometheus keeps it) does not
/// outlive the node: once `shutdown` returns, the connection is closed, and the stopped
/// node's state (its store among it) is no longer held or served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_scrape_connection_ends_with_the_node() {
    bounded(async {
        let net = Net::start("metrics-keepalive", 1, |c| {
            c.metrics_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        })
        .await;
        let at = net.nodes[0].metrics_addr().expect("metrics address");
        let mut tcp = tokio::net::TcpStream::connect(at).await.unwrap();
        let request = b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n";
        tcp.write_all(request).await.unwrap();
        // One whole response (its length from the header), the connection left open.
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let complete = |got: &[u8]| {
            let text = String::from_utf8_lossy(got);
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                return false;
            };
            head.lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .and_then(|n| n.trim().parse::<usize>().ok())
                })
                .is_some_and(|n| body.len() >= n)
        };
        while !complete(&got) {
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before the first response");
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"));
        net.shutdown().await;
        // The same connection, asked again: closed, not answered by the stopped node.
        let _ = tcp.write_all(request).await;
        let mut rest = Vec::new();
        let _ = tcp.read_to_end(&mut rest).await;
        assert!(
            rest.is_empty(),
            "a stopped node answered: {}",
            String::from_utf8_lossy(&rest)
        );
    })
    .await;
}

/// A metrics address that cannot be bound is a start-up error that touches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_metrics_address_stops_the_start() {
    bounded(async {
        let root = scratch("metrics-bad");
        let site = Site::new(&root, 1, b"x");
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = site.config();
        c.metrics_listen = Some(taken.local_addr().unwrap());
        let e = Node::start(c).await.unwrap_err();
        assert!(e.to_string().starts_with("cannot serve metrics on"), "{e}");
        assert!(!site.dir.join("controller.version").exists());
    })
    .await;
}

/// Connections closed for idleness, connections cut and handshakes refused for a revoked
/// certificate, are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_closes_and_revoked_certificates_are_counted() {
    use dist_bridge::client::Reach;
    use std::time::Duration;
    bounded(async {
        let list = revocation_file("metrics-revoked-list", &[]);
        let net = Net::start("metrics-conn", 1, |c| {
            c.metrics_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
            c.max_connection_idle = Duration::from_millis(300);
            c.revoked_certs = Some(list.clone());
            // The list is read again only when the test says so.
            c.maintenance_interval = Duration::from_secs(3600);
        })
        .await;
        let at = net.nodes[0].metrics_addr().expect("metrics address");
        let body = http(at, "GET", "/metrics").await.1;
        for name in [
            "dist_bridge_idle_connections_closed_total",
            "dist_bridge_revoked_certificate_requests_total",
            "dist_bridge_revoked_certificate_handshakes_total",
            "dist_bridge_revoked_certificate_connections_closed_total",
        ] {
            assert_eq!(sample(&body, name), 0.0, "{name}");
        }

        // A client whose certificate is revoked while its connection is open.
        let token = net.export(0, Rights::READ, ByteRange::WHOLE).await;
        let other = PeerIdentity::Client("other".into());
        let late = connect_as(&other, net.nodes[0].addr(), 1).await;
        late.read(&token, 0, 1).await.expect("served before");
        revoke_cert(&list, &other);
        net.nodes[0].reload_revoked_certs().expect("reload");
        // Its connection is cut (and counted), whatever it does.
        until_metric(
            at,
            "dist_bridge_revoked_certificate_connections_closed_total",
            1.0,
        )
        .await;
        late.read(&token, 0, 1)
            .await
            .expect_err("served after its certificate was revoked");
        // A new connection with it: the handshake is refused.
        let fresh = NodeClient::connect_lazy(
            net.nodes[0].addr(),
            1,
            Reach::Tls(&tls(&other)),
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(fresh.read(&token, 0, 1).await.is_err());
        // A connection that does nothing is closed, and counted.
        let tls = tls_stream(&holder(), net.nodes[0].addr(), 1).await;
        let (_client, conn) = h2::client::handshake(tls).await.expect("handshake");
        tokio::time::timeout(Duration::from_secs(20), conn)
            .await
            .expect("an idle connection was kept")
            .ok();

        let body = http(at, "GET", "/metrics").await.1;
        assert!(sample(&body, "dist_bridge_idle_connections_closed_total") >= 1.0);
        // Its requests are refused one by one only between the list's change and the cut.
        assert!(sample(&body, "dist_bridge_revoked_certificate_requests_total") <= 1.0);
        assert!(sample(&body, "dist_bridge_revoked_certificate_handshakes_total") >= 1.0);
        net.shutdown().await;
    })
    .await;
}
