//! What a client controls is bounded: a request that stalls half-way is cut at the request
//! timeout; connections past the limit, stalled handshakes, silent peers, idle connections
//! and unfinished header blocks are closed; a connection the node ends is told to go away
//! first, and its requests in flight are served; other clients are served meanwhile.

mod net;

use std::time::{Duration, Instant};

use dist_bridge::client::Reach;
use dist_bridge::*;
use net::*;

/// The HTTP/2 client preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// The headers of a gRPC `Invoke` request to the node at `addr`.
fn invoke_request(addr: std::net::SocketAddr) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("https://{addr}/dist_bridge.v1.Node/Invoke"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request")
}

/// A raw HTTP/2 connection to node 1 at `addr`, as a token holder: its client, and the task
/// driving the connection (it ends when the connection does).
async fn raw_h2(
    addr: std::net::SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tls = tls_stream(&holder(), addr, 1).await;
    let (client, conn) = h2::client::handshake(tls).await.expect("handshake");
    (client, tokio::spawn(conn))
}

/// Starts an `Invoke` whose body promises 4,096 bytes and sends 5; returns the gRPC status the
/// node ends it with, and how long that took.
async fn stalled_invoke(addr: std::net::SocketAddr) -> (String, Duration) {
    let (client, _conn) = raw_h2(addr).await;
    let mut client = client.ready().await.expect("ready");
    let started = Instant::now();
    let (response, mut body) = client
        .send_request(invoke_request(addr), false)
        .expect("send");
    // A gRPC frame header announcing 4,096 bytes, then nothing: the body never ends.
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0x10, 0]), false)
        .expect("data");
    let response = response.await.expect("a response");
    let status = match response.headers().get("grpc-status") {
        Some(s) => s.to_str().unwrap_or("?").to_owned(),
        None => {
            let mut body = response.into_body();
            while body.data().await.is_some() {}
            let trailers = body.trailers().await.expect("trailers").unwrap_or_default();
            trailers
                .get("grpc-status")
                .map_or("none".into(), |s| s.to_str().unwrap_or("?").to_owned())
        }
    };
    drop(body);
    (status, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_request_is_cut_at_the_timeout_while_others_are_served() {
    bounded(async {
        let timeout = Duration::from_millis(400);
        let net = Net::start("bounds", 1, |c| c.request_timeout = timeout).await;
        let addr = net.nodes[0].addr();
        let token = net.export(0, Rights::READ, ByteRange::WHOLE).await;
        let stalled = tokio::spawn(stalled_invoke(addr));
        // Meanwhile another client is served.
        for _ in 0..5 {
            net.cluster
                .read(&token, 0, 4)
                .await
                .expect("served during the stall");
        }
        let (status, took) = stalled.await.expect("the stalled request");
        // CANCELLED (1) or DEADLINE_EXCEEDED (4): not OK, and not a hang.
        assert!(status == "1" || status == "4", "grpc-status {status}");
        assert!(took >= timeout, "cut before the timeout: {took:?}");
        eprintln!("stalled request cut after {took:?} with grpc-status {status}");
        net.shutdown().await;
    })
    .await;
}

#[test]
fn zero_limits_are_refused_at_start() {
    let root = scratch("bounds-config");
    let site = Site::new(&root, 1, b"x");
    for tweak in [
        (|c: &mut NodeConfig| c.request_timeout = Duration::ZERO) as fn(&mut NodeConfig),
        |c| c.keepalive_interval = Duration::ZERO,
        |c| c.keepalive_timeout = Duration::ZERO,
        |c| c.max_streams_per_connection = 0,
        |c| c.max_connections = 0,
        |c| c.max_connection_idle = Duration::ZERO,
        |c| c.max_message_bytes = c.max_io_bytes as usize,
        |c| c.max_message_bytes = dist_bridge::node::MAX_MESSAGE_LIMIT + 1,
        |c| c.max_pending_request_bytes = c.max_message_bytes + 4,
    ] {
        let mut c = site.config();
        tweak(&mut c);
        let e = c.validate().expect_err("a zero limit");
        assert!(e.to_string().starts_with("bad configuration:"), "{e}");
    }
}

/// A duration too long to add to a clock reading (`Duration::MAX`, which a `NodeConfig` built
/// in Rust can hold) is refused at start, in one line naming it, instead of overflowing the
/// age timer of every connection (a panic per connection). A year is the longest any of them
/// may be, and a node with every duration a year long serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_past_a_year_are_refused_at_start() {
    let year = Duration::from_secs(365 * 24 * 3600);
    let root = scratch("bounds-durations");
    let site = Site::new(&root, 1, b"x");
    let huge = Duration::MAX;
    for (name, set) in [
        (
            "handshake_timeout",
            (|c: &mut NodeConfig, d| c.handshake_timeout = d) as fn(&mut NodeConfig, Duration),
        ),
        ("max_connection_age", |c, d| c.max_connection_age = d),
        ("max_connection_idle", |c, d| c.max_connection_idle = d),
        ("export_skew", |c, d| c.export_skew = d),
        ("request_timeout", |c, d| c.request_timeout = d),
        ("keepalive_interval", |c, d| c.keepalive_interval = d),
        ("keepalive_timeout", |c, d| c.keepalive_timeout = d),
        ("shutdown_deadline", |c, d| c.shutdown_deadline = d),
        ("maintenance_interval", |c, d| c.maintenance_interval = d),
        ("peer_timeout", |c, d| c.peer_timeout = d),
    ] {
        let mut c = site.config();
        set(&mut c, huge);
        let e = c.validate().expect_err(name).to_string();
        assert!(
            e.starts_with("bad configuration:") && e.contains(name),
            "{e}"
        );
        set(&mut c, year + Duration::from_millis(1));
        assert!(c.validate().is_err(), "{name} just past a year");
        set(&mut c, year);
        c.validate().expect(name);
    }
    bounded(async {
        let net = Net::start("bounds-year", 1, |c| {
            c.handshake_timeout = year;
            c.max_connection_age = year;
            c.max_connection_idle = year;
            c.request_timeout = year;
            c.keepalive_interval = year;
            c.keepalive_timeout = year;
            c.shutdown_deadline = year;
            c.peer_timeout = year;
        })
        .await;
        let token = net.export(0, Rights::READ, ByteRange::WHOLE).await;
        net.holder(0)
            .await
            .read(&token, 0, 1)
            .await
            .expect("served with year-long limits");
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_past_the_limit_is_refused_and_the_node_serves_on() {
    bounded(async {
        let net = Net::start("bounds-size", 1, |c| {
            c.max_io_bytes = 64 << 10;
            c.max_message_bytes = 256 << 10;
        })
        .await;
        let token = net.export(0, Rights::all(), ByteRange::WHOLE).await;
        let e = net
            .cluster
            .write(&token, 0, &vec![7u8; 1 << 20])
            .await
            .expect_err("a 1 MiB message past a 256 KiB limit");
        // Refused by the decoder, before the service (and its max_io_bytes check) saw it.
        assert_eq!(e.code(), Some(tonic::Code::OutOfRange), "{e}");
        assert!(e.to_string().contains("too large"), "{e}");
        net.cluster
            .write(&token, 0, b"fine")
            .await
            .expect("served on");
        assert_eq!(&net.sites[0].stored()[..4], b"fine");
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_are_closed_and_the_others_served() {
    bounded(async {
        let net = Net::start("bounds-conns", 1, |c| c.max_connections = 2).await;
        let addr = net.nodes[0].addr();
        let token = net.export(0, Rights::READ, ByteRange::WHOLE).await;
        // The net's own client holds one connection; one more fits.
        let second = NodeClient::connect(addr, 1, Reach::Tls(&tls(&holder())))
            .await
            .expect("second connection");
        second
            .read(&token, 0, 1)
            .await
            .expect("the second is served");
        // A third is closed at once: its request fails.
        let third = NodeClient::connect(addr, 1, Reach::Tls(&tls(&holder()))).await;
        let refused = match third {
            Err(_) => true,
            Ok(c) => c.read(&token, 0, 1).await.is_err(),
        };
        assert!(refused, "a connection past the limit was served");
        // Those within the limit are still served; a slot freed is taken again.
        net.cluster
            .read(&token, 0, 1)
            .await
            .expect("the first is served");
        drop(second);
        let mut served = false;
        for _ in 0..100 {
            if let Ok(c) = NodeClient::connect(addr, 1, Reach::Tls(&tls(&holder()))).await
                && c.read(&token, 0, 1).await.is_ok()
            {
                served = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(served, "a freed slot was never taken again");
        net.shutdown().await;
    })
    .await;
}

/// A client that connects and never completes its TLS handshake is cut at the handshake
/// timeout; others are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_is_cut() {
    use tokio::io::AsyncReadExt;
    bounded(async {
        let net = Net::start("bounds-handshake", 1, |c| {
            c.handshake_timeout = Duration::from_millis(300);
        })
        .await;
        let addr = net.nodes[0].addr();
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        net.client(0).status().await.expect("others are served");
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(20), silent.read(&mut buf))
            .await
            .expect("the silent connection was never cut")
            .unwrap_or(0);
        assert_eq!(n, 0, "the node sent bytes to a silent client");
        assert!(started.elapsed() >= Duration::from_millis(250));
        net.shutdown().await;
    })
    .await;
}

/// Past `max_streams_per_connection` requests in flight on one connection, the next waits
/// for a stream (the HTTP/2 SETTINGS bound; a stalled request frees its stream at the
/// request timeout); other connections are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_per_connection_limit_wait() {
    bounded(async {
        let net = Net::start("bounds-streams", 1, |c| {
            c.max_streams_per_connection = 2;
            c.request_timeout = Duration::from_millis(800);
        })
        .await;
        let addr = net.nodes[0].addr();
        let token = net.export(0, Rights::READ, ByteRange::WHOLE).await;
        let (client, _conn) = raw_h2(addr).await;
        // Two requests whose bodies never end hold both streams.
        let mut held = Vec::new();
        let mut c = client.ready().await.expect("ready");
        for _ in 0..2 {
            c = c.ready().await.expect("ready");
            let (response, mut body) = c.send_request(invoke_request(addr), false).expect("send");
            body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0x10, 0]), false)
                .expect("data");
            held.push((response, body));
        }
        // A third, complete request is not served while they are open: it waits for a
        // stream (or, sent before the client learnt the limit, is refused outright).
        let complete = |c: &mut h2::client::SendRequest<bytes::Bytes>| {
            let (response, mut body) = c.send_request(invoke_request(addr), false).expect("send");
            // An empty message: answered at once (as a bad request) once it is served.
            body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
                .expect("data");
            response
        };
        let started = Instant::now();
        let third = complete(&mut c);
        let early = tokio::time::timeout(Duration::from_millis(300), third).await;
        match early {
            Err(_) => {}     // still waiting for a stream
            Ok(Err(_)) => {} // refused: over the limit
            Ok(Ok(r)) => panic!("served past the stream limit: {r:?}"),
        }
        // Other connections are served meanwhile.
        net.cluster.read(&token, 0, 1).await.expect("served");
        // Once the request timeout ends the stalled ones, the connection serves again.
        let mut c = c.ready().await.expect("ready");
        let later = tokio::time::timeout(Duration::from_secs(20), complete(&mut c))
            .await
            .expect("never served after the stalled requests ended")
            .expect("a response");
        assert!(later.status().is_success());
        assert!(started.elapsed() >= Duration::from_millis(300));
        drop(held);
        net.shutdown().await;
    })
    .await;
}

/// A client that completes its handshakes but never answers a keepalive ping is dropped
/// after `keepalive_interval + keepalive_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_answers_pings_is_dropped() {
    use tokio::io::AsyncWriteExt;
    bounded(async {
        let net = Net::start("bounds-keepalive", 1, |c| {
            c.keepalive_interval = Duration::from_millis(200);
            c.keepalive_timeout = Duration::from_millis(200);
        })
        .await;
        let mut tls = tls_stream(&holder(), net.nodes[0].addr(), 1).await;
        // The HTTP/2 preface and an empty SETTINGS frame; then only reading, never a PING
        // acknowledgement (nor a SETTINGS one).
        tls.write_all(PREFACE).await.unwrap();
        let started = Instant::now();
        until_closed(&mut tls, "a peer that never answers pings").await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        net.client(0).status().await.expect("others are served");
        net.shutdown().await;
    })
    .await;
}

/// Reads from `io` until the node closes it (EOF or an error); panics if that takes 20 s.
async fn until_closed(io: &mut (impl tokio::io::AsyncRead + Unpin), what: &str) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "{what} was kept open");
}

/// An Invoke request carrying one empty gRPC message: answered at once (as a bad request).
fn empty_invoke(
    c: &mut h2::client::SendRequest<bytes::Bytes>,
    addr: std::net::SocketAddr,
    end: bool,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let (response, mut body) = c.send_request(invoke_request(addr), false).expect("send");
    let frame: &'static [u8] = if end {
        &[0, 0, 0, 0, 0]
    } else {
        &[0, 0, 0, 0x10, 0]
    };
    body.send_data(bytes::Bytes::from_static(frame), end)
        .expect("data");
    (response, body)
}

/// A connection with no request in flight for `max_connection_idle` is closed, though its
/// client answers every ping; one with a request in flight is not, however long the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_busy_ones_kept() {
    bounded(async {
        let net = Net::start("bounds-idle", 1, |c| {
            c.max_connection_idle = Duration::from_millis(400);
            c.keepalive_interval = Duration::from_millis(100);
            c.request_timeout = Duration::from_millis(2500);
        })
        .await;
        let addr = net.nodes[0].addr();

        // One request, answered; then nothing but ping answers (h2 answers them itself).
        let (client, idle) = raw_h2(addr).await;
        let mut c = client.ready().await.expect("ready");
        let (response, _body) = empty_invoke(&mut c, addr, true);
        response.await.expect("answered");
        let answered = Instant::now();
        tokio::time::timeout(Duration::from_secs(20), idle)
            .await
            .expect("an idle connection was kept open")
            .ok();
        assert!(answered.elapsed() >= Duration::from_millis(350));

        // A request whose body never ends keeps its connection busy past the idle limit.
        let (client, busy) = raw_h2(addr).await;
        let mut c = client.ready().await.expect("ready");
        let started = Instant::now();
        let (stalled, _stalled_body) = empty_invoke(&mut c, addr, false);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            !busy.is_finished(),
            "a connection with a request in flight was closed"
        );
        let mut c = c.ready().await.expect("still open");
        let (response, _body) = empty_invoke(&mut c, addr, true);
        let response = response.await.expect("served on the busy connection");
        assert!(response.status().is_success());
        // Once the request timeout ends the stalled request, the connection goes idle and is
        // closed.
        let _ = stalled.await;
        tokio::time::timeout(Duration::from_secs(20), busy)
            .await
            .expect("the connection was kept once idle")
            .ok();
        assert!(started.elapsed() >= Duration::from_millis(2500));
        net.client(0).status().await.expect("others are served");
        net.shutdown().await;
    })
    .await;
}

/// A client that starts a request's header block and never finishes it holds no request
/// in flight: it is told to go away at `max_connection_idle`, as an idle one is, and, since
/// it answers nothing, closed `request_timeout` later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_block_that_never_ends_is_cut() {
    use tokio::io::AsyncWriteExt;
    bounded(async {
        let net = Net::start("bounds-headers", 1, |c| {
            c.max_connection_idle = Duration::from_millis(400);
            c.request_timeout = Duration::from_millis(300);
            // Neither pings nor the connection's age may be what ends it.
            c.keepalive_interval = Duration::from_secs(3600);
            c.max_connection_age = Duration::from_secs(3600);
        })
        .await;
        let mut tls = tls_stream(&holder(), net.nodes[0].addr(), 1).await;
        // The preface, an empty SETTINGS frame, then a HEADERS frame on stream 1 without
        // END_HEADERS holding one header (`:method: POST`, HPACK static index 3): the node
        // waits for a CONTINUATION frame that never comes.
        tls.write_all(PREFACE).await.unwrap();
        tls.write_all(&[0, 0, 1, 0x1, 0, 0, 0, 0, 1, 0x83])
            .await
            .unwrap();
        tls.flush().await.unwrap();
        let started = Instant::now();
        until_closed(&mut tls, "a connection with an unfinished header block").await;
        assert!(started.elapsed() >= Duration::from_millis(650));
        net.client(0).status().await.expect("others are served");
        net.shutdown().await;
    })
    .await;
}

/// An honest client that calls again just as its connection reaches `max_connection_idle`
/// loses no request: the node ends an idle connection with a GOAWAY, which still admits
/// every request the client sent before it saw it, and the client then reconnects. (A node
/// that cut the connection instead lost the request that crossed the cut.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_meets_the_idle_close_is_served() {
    bounded(async {
        let idle = Duration::from_millis(60);
        let net = Net::start("bounds-idle-race", 1, |c| {
            c.max_connection_idle = idle;
        })
        .await;
        let client = net.holder(0).await;
        let token = net.export(0, Rights::READ, ByteRange::WHOLE).await;
        // Gaps around the idle limit, each tried several times, so that some requests are
        // sent in the very tick the node finds the connection idle.
        let mut lost = Vec::new();
        for round in 0..60u32 {
            let gap = idle + Duration::from_micros(u64::from(round % 12) * 250)
                - Duration::from_millis(1);
            tokio::time::sleep(gap).await;
            if let Err(e) = client.read(&token, 0, 1).await {
                lost.push(format!("after {gap:?}: {e:?}"));
            }
        }
        assert!(
            lost.is_empty(),
            "requests lost at the idle close: {lost:#?}"
        );
        net.shutdown().await;
    })
    .await;
}

/// A connection at `max_connection_age` is told to go away (GOAWAY), though its client
/// answers every ping: from then on the client opens no new request on it, while the request
/// it has in flight is still served, long before the age's grace period (`request_timeout`)
/// would cut the connection. Then it closes, and the client library reconnects by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_have_a_maximum_age() {
    bounded(async {
        let net = Net::start("bounds-age-goaway", 1, |c| {
            c.max_connection_age = Duration::from_millis(300);
            c.request_timeout = Duration::from_secs(20);
        })
        .await;
        let addr = net.nodes[0].addr();
        let (client, conn) = raw_h2(addr).await;
        let started = Instant::now();
        let mut c = client.clone().ready().await.expect("ready");
        // A request whose body is still to come when the connection reaches its age.
        let (response, mut body) = empty_invoke(&mut c, addr, false);
        until_goaway(&client).await;
        assert!(started.elapsed() >= Duration::from_millis(250));
        // The request in flight is finished and answered.
        body.send_data(bytes::Bytes::from(vec![0; 4096]), true)
            .expect("the rest of the body");
        let response = response.await.expect("served after the GOAWAY");
        assert!(response.status().is_success());
        drop((client, c, body, response));
        tokio::time::timeout(Duration::from_secs(5), conn)
            .await
            .expect("the connection outlived its last request")
            .ok();
        net.client(0).status().await.expect("reconnected");
        net.client(0).status().await.expect("reconnected");
        net.shutdown().await;
    })
    .await;
}

/// Waits (5 s at most) until the node's GOAWAY reaches `client`: from then on it opens no
/// new request on its connection.
async fn until_goaway(client: &h2::client::SendRequest<bytes::Bytes>) {
    let started = Instant::now();
    let refused = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        match client.clone().ready().await {
            Err(e) => break e,
            Ok(_) => assert!(
                started.elapsed() < Duration::from_secs(5),
                "no GOAWAY within 5 s"
            ),
        }
    };
    assert!(
        refused.is_go_away() && refused.is_remote(),
        "new requests are refused by the node's GOAWAY: {refused:?}"
    );
    assert_eq!(refused.reason(), Some(h2::Reason::NO_ERROR));
}

/// A shutdown closes the listener, tells every connection to go away, and waits for the
/// requests in flight: one whose body is still coming when it begins is finished and
/// answered, and only then does the node stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_finishes_the_requests_in_flight() {
    bounded(async {
        let net = Net::start("bounds-drain", 1, |c| {
            c.shutdown_deadline = Duration::from_secs(15);
            c.request_timeout = Duration::from_secs(20);
        })
        .await;
        let addr = net.nodes[0].addr();
        let (client, _conn) = raw_h2(addr).await;
        let mut c = client.clone().ready().await.expect("ready");
        let (response, mut body) = empty_invoke(&mut c, addr, false);
        // Dispatched, and in flight, before the shutdown begins.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let Net { nodes, .. } = net;
        let stopping = tokio::spawn(async move {
            for node in nodes {
                node.shutdown().await.expect("shutdown");
            }
        });
        until_goaway(&client).await;
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "the listener is still open"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !stopping.is_finished(),
            "the shutdown did not wait for the request in flight"
        );
        body.send_data(bytes::Bytes::from(vec![0; 4096]), true)
            .expect("the rest of the body");
        let response = response.await.expect("answered during the shutdown");
        assert!(response.status().is_success());
        tokio::time::timeout(Duration::from_secs(10), stopping)
            .await
            .expect("the shutdown went on after the last request was answered")
            .expect("shutdown task");
    })
    .await;
}

/// The gRPC status code and message a response ends with (in its headers, or its trailers).
async fn grpc_status(response: http::Response<h2::RecvStream>) -> (String, String) {
    let text =
        |v: Option<&http::HeaderValue>| v.map_or("none", |s| s.to_str().unwrap_or("?")).to_owned();
    if response.headers().contains_key("grpc-status") {
        let h = response.headers();
        return (text(h.get("grpc-status")), text(h.get("grpc-message")));
    }
    let mut body = response.into_body();
    while body.data().await.is_some() {}
    let trailers = body.trailers().await.expect("trailers").unwrap_or_default();
    (
        text(trailers.get("grpc-status")),
        text(trailers.get("grpc-message")),
    )
}

/// Opens an `Invoke` on `c` whose message declares `declared` bytes, and sends `sent` bytes
/// of the body (the 5-byte gRPC message header included), never ending it.
fn stalled_stream(
    c: &mut h2::client::SendRequest<bytes::Bytes>,
    addr: std::net::SocketAddr,
    declared: u32,
    sent: usize,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let (response, mut body) = c.send_request(invoke_request(addr), false).expect("send");
    let mut bytes = vec![0u8; sent];
    bytes[1..5].copy_from_slice(&declared.to_be_bytes());
    body.send_data(bytes::Bytes::from(bytes), false)
        .expect("data");
    (response, body)
}

/// Requests whose messages are still arriving hold the node's memory only up to
/// `max_pending_request_bytes`, across every connection: past it, the next request that
/// needs more is refused with `RESOURCE_EXHAUSTED` naming the limit; a request whose message
/// arrives whole is served meanwhile; and the bytes are given back when the streams holding
/// them are reset or their connection closes (the node's gauge of them says 0 again, and a
/// large write is served).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_request_bytes_are_bounded_across_the_node() {
    const PART: usize = 64 << 10;
    const HELD: &str = "dist_bridge_pending_request_bytes";
    const REFUSED: &str = "dist_bridge_pending_request_refusals_total";
    bounded(async {
        let net = Net::start("bounds-pending", 1, |c| {
            c.max_io_bytes = 96 << 10;
            c.max_message_bytes = 160 << 10;
            c.max_pending_request_bytes = 4 * PART;
            c.metrics_listen = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
            // Neither the request timer nor idleness may end the stalled requests.
            c.request_timeout = Duration::from_secs(3600);
        })
        .await;
        let addr = net.nodes[0].addr();
        let metrics = net.nodes[0].metrics_addr().expect("metrics");
        let token = net.export(0, Rights::all(), ByteRange::WHOLE).await;
        assert_eq!(metric(metrics, HELD).await, 0.0);

        // Four requests on two connections, each 64 KiB into a 100 KiB message: the budget,
        // exactly.
        let mut held = Vec::new();
        let mut conns = Vec::new();
        for _ in 0..2 {
            let (client, conn) = raw_h2(addr).await;
            let mut c = client.ready().await.expect("ready");
            for _ in 0..2 {
                c = c.ready().await.expect("ready");
                held.push(stalled_stream(&mut c, addr, 100 << 10, PART));
            }
            conns.push((c, conn));
        }
        until_metric(metrics, HELD, (4 * PART) as f64).await;

        // Past it, on a third connection: each request is refused, and says why.
        let (client, _third) = raw_h2(addr).await;
        let mut c = client.ready().await.expect("ready");
        for i in 0..3 {
            c = c.ready().await.expect("ready");
            let (response, _body) = stalled_stream(&mut c, addr, 100 << 10, PART);
            let response = response.await.expect("an answer");
            let (code, message) = grpc_status(response).await;
            assert_eq!(
                code, "8",
                "request {i}: RESOURCE_EXHAUSTED, not {code} {message}"
            );
            assert!(
                message.contains("max_pending_request_bytes") && message.contains("262144"),
                "{message}"
            );
        }
        assert_eq!(metric(metrics, REFUSED).await, 3.0);
        assert_eq!(metric(metrics, HELD).await, (4 * PART) as f64);

        // A request whose message arrives whole holds nothing unfinished: it is served.
        net.cluster
            .read(&token, 0, 4)
            .await
            .expect("a read is served");
        net.cluster
            .write(&token, 0, b"fine")
            .await
            .expect("a small write is served");
        // A large one, whose message arrives in many frames, needs the budget: refused.
        let e = net
            .cluster
            .write(&token, 0, &vec![7u8; 90 << 10])
            .await
            .expect_err("a 90 KiB write with the budget spent");
        assert_eq!(e.code(), Some(tonic::Code::ResourceExhausted), "{e}");

        // Two of the stalled requests are reset by their client, the other two go with
        // their connection: every byte is given back.
        for (_, mut body) in held.drain(..2) {
            body.send_reset(h2::Reason::CANCEL);
        }
        until_metric(metrics, HELD, (2 * PART) as f64).await;
        let (_client, conn) = conns.remove(1);
        conn.abort();
        until_metric(metrics, HELD, 0.0).await;
        drop(held);
        net.cluster
            .write(&token, 0, &vec![7u8; 90 << 10])
            .await
            .expect("the budget is whole again");
        assert_eq!(&net.sites[0].stored()[..4], &[7u8; 4]);
        net.shutdown().await;
    })
    .await;
}
