//! What a client controls is bounded: a request that stalls half-way is cut at the request
//! timeout; connections past the limit, stalled handshakes, silent peers, idle connections
//! and unfinished header blocks are closed; a connection the node ends is told to go away
//! first, and its requests in flight are served; other clients are served meanwhile.

use std::time::{Duration, Instant};

use crate::net::*;
use dist_bridge::client::Reach;
use dist_bridge::*;

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
        // The slot is free once the node has seen the connection close, however long that
        // takes (the test's own limit bounds the wait).
        loop {
            if let Ok(c) = NodeClient::connect(addr, 1, Reach::Tls(&tls(&holder()))).await
                && c.read(&token, 0, 1).await.is_ok()
            {
                break;
            }
            // A pause between tries, not a guess at how long the node takes.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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
        // Before the connection exists: the node's handshake timer starts after this.
        let started = Instant::now();
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        net.client(0).status().await.expect("others are served");
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(20), silent.read(&mut buf))
            .await
            .expect("the silent connection was never cut")
            .unwrap_or(0);
        assert_eq!(n, 0, "the node sent bytes to a silent client");
        assert!(started.elapsed() >= Duration::from_millis(300));
        net.shutdown().await;
    })
    .await;
}

/// Past `max_streams_per_connection` requests in flight on one connection, the next waits
/// for a stream (the HTTP/2 SETTINGS bound; a stalled request frees its stream when it ends);
/// other connections are served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_per_connection_limit_wait() {
    bounded(async {
        let net = Net::start("bounds-streams", 1, |c| {
            c.max_streams_per_connection = 2;
            // The stalled requests end when the test resets them, not at a timer.
            c.request_timeout = Duration::from_secs(3600);
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
        let third = complete(&mut c);
        // However long it is given, it is not served while they hold the streams.
        let early = tokio::time::timeout(Duration::from_millis(300), third).await;
        match early {
            Err(_) => {}     // still waiting for a stream
            Ok(Err(_)) => {} // refused: over the limit
            Ok(Ok(r)) => panic!("served past the stream limit: {r:?}"),
        }
        // Other connections are served meanwhile.
        net.cluster.read(&token, 0, 1).await.expect("served");
        // Once the stalled ones end (their client resets them), the connection serves again.
        for (_, mut body) in held {
            body.send_reset(h2::Reason::CANCEL);
        }
        let mut c = c.ready().await.expect("ready");
        let later = complete(&mut c)
            .await
            .expect("a response once the stalled requests ended");
        assert!(later.status().is_success());
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
        // Before the connection exists: the node's keepalive timer starts after this.
        let started = Instant::now();
        let mut tls = tls_stream(&holder(), net.nodes[0].addr(), 1).await;
        // The HTTP/2 preface and an empty SETTINGS frame; then only reading, never a PING
        // acknowledgement (nor a SETTINGS one).
        tls.write_all(PREFACE).await.unwrap();
        until_closed(&mut tls, "a peer that never answers pings").await;
        assert!(started.elapsed() >= Duration::from_millis(400));
        net.client(0).status().await.expect("others are served");
        net.shutdown().await;
    })
    .await;
}

/// Waits until the task driving a raw HTTP/2 connection ends: the node closed it (the
/// test's own limit bounds the wait).
async fn until_ended(conn: tokio::task::JoinHandle<Result<(), h2::Error>>, what: &str) {
    assert!(conn.await.is_ok(), "{what}: the connection's task failed");
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
            // The stalled request ends when the test resets it, not at a timer.
            c.request_timeout = Duration::from_secs(3600);
        })
        .await;
        let addr = net.nodes[0].addr();

        // One request, answered; then nothing but ping answers (h2 answers them itself).
        let (client, idle) = raw_h2(addr).await;
        let mut c = client.ready().await.expect("ready");
        // Before the request: the node's idle time starts after this, when it ends.
        let sent = Instant::now();
        let (response, _body) = empty_invoke(&mut c, addr, true);
        response.await.expect("answered");
        until_ended(idle, "an idle connection").await;
        assert!(sent.elapsed() >= Duration::from_millis(400));

        // A request whose body never ends keeps its connection busy past the idle limit
        // (three times over, or however long the machine takes to get there).
        let (client, busy) = raw_h2(addr).await;
        let mut c = client.ready().await.expect("ready");
        let (stalled, mut stalled_body) = empty_invoke(&mut c, addr, false);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            !busy.is_finished(),
            "a connection with a request in flight was closed"
        );
        let mut c = c.ready().await.expect("still open");
        let (response, _body) = empty_invoke(&mut c, addr, true);
        let response = response.await.expect("served on the busy connection");
        assert!(response.status().is_success());
        // Once the stalled request ends (its client resets it), the connection goes idle and
        // is closed.
        stalled_body.send_reset(h2::Reason::CANCEL);
        let _ = stalled.await;
        until_ended(busy, "a connection idle once its request ended").await;
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
        // Before the connection exists: the node's idle time starts after this.
        let started = Instant::now();
        let mut tls = tls_stream(&holder(), net.nodes[0].addr(), 1).await;
        // The preface, an empty SETTINGS frame, then a HEADERS frame on stream 1 without
        // END_HEADERS holding one header (`:method: POST`, HPACK static index 3): the node
        // waits for a CONTINUATION frame that never comes.
        tls.write_all(PREFACE).await.unwrap();
        tls.write_all(&[0, 0, 1, 0x1, 0, 0, 0, 0, 1, 0x83])
            .await
            .unwrap();
        tls.flush().await.unwrap();
        until_closed(&mut tls, "a connection with an unfinished header block").await;
        // Idle for 400 ms, then 300 ms to answer the GOAWAY's PING.
        assert!(started.elapsed() >= Duration::from_millis(700));
        net.client(0).status().await.expect("others are served");
        net.shutdown().await;
    })
    .await;
}

/// A stream whose incoming bytes the test holds back: the client sends, but sees nothing
/// the node sends until the gate opens. Meanwhile the bytes are read and kept, and the
/// HTTP/2 frames among them watched for a GOAWAY; the client's frames are watched for the
/// end of its first request.
struct Gated<S> {
    inner: S,
    gate: std::sync::Arc<Gate>,
    /// Bytes read while the gate was shut, and how many of them have been handed on.
    held: Vec<u8>,
    handed: usize,
    /// Where the next frame header starts in `held`.
    next_frame: usize,
    /// Bytes written, and where the next frame header starts in them (after the preface).
    written: Vec<u8>,
    next_written: usize,
}

/// The frames in `bytes` from `*at` on, as (type, flags); `*at` moves past them.
fn frames(bytes: &[u8], at: &mut usize) -> Vec<(u8, u8)> {
    let mut out = Vec::new();
    while let Some(h) = bytes.get(*at..*at + 9) {
        out.push((h[3], h[4]));
        *at += 9 + u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
    }
    out
}

/// Whether a [`Gated`] stream's reads may go on (and who waits for it), and whether the
/// node's GOAWAY has come.
struct Gate {
    state: std::sync::Mutex<(bool, Option<std::task::Waker>)>,
    goaway: tokio::sync::watch::Sender<bool>,
    sent: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    fn new() -> std::sync::Arc<Gate> {
        std::sync::Arc::new(Gate {
            state: std::sync::Mutex::new((false, None)),
            goaway: tokio::sync::watch::Sender::new(false),
            sent: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Waits until the client has written a DATA frame that ends its stream.
    async fn sent(&self) {
        let mut seen = self.sent.subscribe();
        seen.wait_for(|s| *s).await.expect("the gate is alive");
    }

    fn open(&self) {
        let mut state = self.state.lock().unwrap();
        state.0 = true;
        if let Some(waiting) = state.1.take() {
            waiting.wake();
        }
    }

    /// Waits until a GOAWAY frame has arrived (unread by the client).
    async fn goaway(&self) {
        let mut seen = self.goaway.subscribe();
        seen.wait_for(|s| *s).await.expect("the gate is alive");
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Gated<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        let this = &mut *self;
        let open = {
            let mut state = this.gate.state.lock().unwrap();
            if !state.0 {
                state.1 = Some(cx.waker().clone());
            }
            state.0
        };
        if !open {
            // Keep reading what the node sends, watching it for a GOAWAY (frame type 7).
            let mut chunk = [0u8; 4096];
            loop {
                let mut read = tokio::io::ReadBuf::new(&mut chunk);
                match std::pin::Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                    Poll::Ready(Ok(())) if !read.filled().is_empty() => {
                        this.held.extend_from_slice(read.filled());
                        let frames = frames(&this.held, &mut this.next_frame);
                        if frames.iter().any(|&(kind, _)| kind == 7) {
                            this.gate.goaway.send_replace(true);
                        }
                    }
                    // An end or an error waits for the gate too.
                    Poll::Ready(_) | Poll::Pending => return Poll::Pending,
                }
            }
        }
        if this.handed < this.held.len() {
            let n = (this.held.len() - this.handed).min(buf.remaining());
            buf.put_slice(&this.held[this.handed..this.handed + n]);
            this.handed += n;
            return Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Gated<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let written = std::pin::Pin::new(&mut this.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = written {
            this.written.extend_from_slice(&buf[..n]);
            // The client's preface (24 bytes) comes before its first frame.
            this.next_written = this.next_written.max(24);
            let frames = frames(&this.written, &mut this.next_written);
            // DATA with END_STREAM.
            if frames
                .iter()
                .any(|&(kind, flags)| kind == 0 && flags & 1 == 1)
            {
                this.gate.sent.send_replace(true);
            }
        }
        written
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request the client sends after the node has found its connection idle, but before the
/// client has seen the node's GOAWAY, is served: the node ends an idle connection with h2's
/// two-step GOAWAY, which admits every request sent before the client saw it. (A node that
/// cut the connection instead lost the request that crossed the cut.) The crossing is made,
/// not raced for: the client reads nothing from the node until the GOAWAY has come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_meets_the_idle_close_is_served() {
    bounded(async {
        let net = Net::start("bounds-idle-race", 1, |c| {
            c.max_connection_idle = Duration::from_millis(100);
            // The GOAWAY's PING goes unanswered while the client reads nothing: the node
            // must not cut the connection meanwhile.
            c.request_timeout = Duration::from_secs(3600);
        })
        .await;
        let addr = net.nodes[0].addr();
        let gate = Gate::new();
        let gated = Gated {
            inner: tls_stream(&holder(), addr, 1).await,
            gate: gate.clone(),
            held: Vec::new(),
            handed: 0,
            next_frame: 0,
            written: Vec::new(),
            next_written: 0,
        };
        let (client, conn) = h2::client::handshake(gated).await.expect("handshake");
        let conn = tokio::spawn(conn);
        // Idle from the start: the node tells it to go away.
        gate.goaway().await;
        let mut c = client
            .ready()
            .await
            .expect("the client has seen nothing yet");
        let (response, _body) = empty_invoke(&mut c, addr, true);
        // Written before the client reads the GOAWAY (else the client itself would hold it
        // back as unsent, for its caller to send again).
        gate.sent().await;
        gate.open();
        let response = response
            .await
            .expect("the request that crossed the GOAWAY is served");
        assert!(response.status().is_success());
        // Then the connection ends.
        drop((c, response));
        until_ended(conn, "a connection told to go away, its request done").await;
        net.client(0).status().await.expect("others are served");
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
            // The grace period after the GOAWAY: the connection must end long before.
            c.request_timeout = Duration::from_secs(3600);
        })
        .await;
        let addr = net.nodes[0].addr();
        // Before the connection exists: its age starts after this.
        let started = Instant::now();
        let (client, conn) = raw_h2(addr).await;
        let mut c = client.clone().ready().await.expect("ready");
        // A request whose body is still to come when the connection reaches its age.
        let (response, mut body) = empty_invoke(&mut c, addr, false);
        until_goaway(&client).await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        // The request in flight is finished and answered.
        body.send_data(bytes::Bytes::from(vec![0; 4096]), true)
            .expect("the rest of the body");
        let response = response.await.expect("served after the GOAWAY");
        assert!(response.status().is_success());
        drop((client, c, body, response));
        // It closes with its last request, not when the grace period (an hour) would cut it.
        until_ended(conn, "a connection past its age, its last request done").await;
        net.client(0).status().await.expect("reconnected");
        net.client(0).status().await.expect("reconnected");
        net.shutdown().await;
    })
    .await;
}

/// Waits until the node's GOAWAY reaches `client` (the test's own limit bounds the wait):
/// from then on it opens no new request on its connection.
async fn until_goaway(client: &h2::client::SendRequest<bytes::Bytes>) {
    let refused = loop {
        // A pause between checks, not a guess at how long the node takes.
        tokio::time::sleep(Duration::from_millis(20)).await;
        if let Err(e) = client.clone().ready().await {
            break e;
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
            // Neither may end the request: the test does.
            c.shutdown_deadline = Duration::from_secs(3600);
            c.request_timeout = Duration::from_secs(3600);
            c.metrics_listen = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        })
        .await;
        let addr = net.nodes[0].addr();
        let metrics = net.nodes[0].metrics_addr().expect("metrics");
        let (client, _conn) = raw_h2(addr).await;
        let mut c = client.clone().ready().await.expect("ready");
        let (response, mut body) = empty_invoke(&mut c, addr, false);
        // Dispatched, and in flight, before the shutdown begins: the node holds the 5 bytes
        // of its message's header.
        until_metric(metrics, "dist_bridge_pending_request_bytes", 5.0).await;
        let Net { nodes, .. } = net;
        let stopping = tokio::spawn(async move {
            for node in nodes {
                node.shutdown().await.expect("shutdown");
            }
        });
        until_goaway(&client).await;
        // The listener closes as the shutdown begins (the test's own limit bounds the wait).
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !stopping.is_finished(),
            "the shutdown did not wait for the request in flight"
        );
        body.send_data(bytes::Bytes::from(vec![0; 4096]), true)
            .expect("the rest of the body");
        let response = response.await.expect("answered during the shutdown");
        assert!(response.status().is_success());
        // It ends with the last request, not at its deadline (an hour).
        stopping.await.expect("shutdown task");
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
