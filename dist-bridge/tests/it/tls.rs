//! Mutual TLS: who may connect, and who a connection is.
//!
//! The findings: a TLS ClientHello got a plaintext HTTP/2 SETTINGS frame back (no transport
//! security), and broadcast-baseline peers were trusted by the `from` field of their
//! messages. Now every connection is mutually authenticated against the cluster CA, the node
//! is the node its certificate names, and a peer is the node its certificate names.

use std::time::Duration;

use crate::net::*;
use dist_bridge::certs::DevCa;
use dist_bridge::client::Reach;
use dist_bridge::node::Peer;
use dist_bridge::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A plaintext HTTP/2 client gets no HTTP/2 from a TLS node: its connection preface is not
/// a TLS record, so the node closes the connection without a SETTINGS frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_clients_get_nothing() {
    bounded(async {
        let net = Net::start("tls-plain", 1, |_| {}).await;
        let addr = net.nodes[0].addr();
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = match tokio::time::timeout(Duration::from_secs(15), tcp.read(&mut buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) => 0,
            Err(_) => panic!("the node neither answered nor closed"),
        };
        // Whatever comes back (a TLS alert at most) is not an HTTP/2 SETTINGS frame
        // (type 4 at byte 3).
        assert!(n == 0 || buf[0] == 0x15, "plaintext answer {:?}", &buf[..n]);
        // A gRPC client without TLS fails too.
        let r = NodeClient::connect(addr, 1, Reach::Insecure).await;
        let refused = match r {
            Err(_) => true,
            Ok(c) => c.status().await.is_err(),
        };
        assert!(refused, "a plaintext client was served");
        // Meanwhile TLS clients are served.
        net.client(0).status().await.unwrap();
        net.shutdown().await;
    })
    .await;
}

/// Clients need a certificate, and one from the cluster's CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_a_certificate_from_the_ca_are_refused() {
    bounded(async {
        let net = Net::start("tls-ca", 1, |_| {}).await;
        let addr = net.nodes[0].addr();
        // Another CA issues a certificate with the very same identity.
        let dir = scratch("tls-other-ca");
        let rogue = DevCa::generate().unwrap();
        rogue.save(&dir, false).unwrap();
        let files = rogue
            .issue(&operator(), &[])
            .unwrap()
            .save(&dir, false)
            .unwrap();
        // It trusts the real CA for the server, but presents the rogue certificate.
        let mixed = TlsFiles {
            ca: tls_files(&operator()).ca,
            ..files
        };
        let rogue_tls = mixed.load().unwrap();
        // Refused when connecting, with the node's reason (TLS 1.3 delivers it after the
        // client's side of the handshake: the connector waits for it).
        let e = NodeClient::connect(addr, 1, Reach::Tls(&rogue_tls))
            .await
            .expect_err("a certificate from another CA was accepted");
        assert!(
            matches!(e, ClientError::Connect { .. }) && format!("{e:?}").contains("AlertReceived"),
            "{e:?}"
        );

        // No client certificate at all: the handshake fails.
        let endpoint = tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(
                        std::fs::read(tls_files(&operator()).ca).unwrap(),
                    ))
                    .domain_name(PeerIdentity::Node(1).dns_name()),
            )
            .unwrap();
        let served = match endpoint.connect().await {
            Err(_) => false,
            Ok(ch) => NodeClient::from_channel(ch, 1).status().await.is_ok(),
        };
        assert!(!served, "a client without a certificate was served");
        net.client(0).status().await.unwrap();
        net.shutdown().await;
    })
    .await;
}

/// A client that expects node 2 and reaches node 1 refuses it: the node's identity is its
/// certificate's, not its address's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_is_not_the_one_expected_is_refused() {
    bounded(async {
        let net = Net::start("tls-which", 2, |_| {}).await;
        let r = NodeClient::connect(net.nodes[0].addr(), 2, Reach::Tls(&tls(&operator()))).await;
        let e = match r {
            Err(e) => e.to_string(),
            Ok(c) => c.status().await.unwrap_err().to_string(),
        };
        assert!(
            e.contains("not valid for name \"2.node.dist-bridge\""),
            "{e}"
        );
        net.shutdown().await;
    })
    .await;
}

/// A node whose peer list puts peer 2 at an address where node 3 answers: the broadcast
/// to "node 2" is refused during the handshake, so the revocation reports the peer failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_is_the_node_its_certificate_names() {
    bounded(async {
        let net = Net::start("tls-peer", 2, |_| {}).await;
        let root = scratch("tls-peer-impostor");
        let site = Site::new(&root, 1, b"x");
        let mut c = site.config();
        c.peers = vec![Peer {
            id: 2,
            // Node 1 of the net is at this address, not node 2.
            addr: net.nodes[0].addr().to_string(),
        }];
        c.peer_timeout = Duration::from_secs(5);
        let node = Node::start(c).await.unwrap();
        let client = connect_as(&operator(), node.addr(), 1).await;
        let cap = client.broadcast_issue().await.unwrap();
        assert_refused(
            client.broadcast_revoke(cap).await,
            ErrorKind::PeerFailed,
            "did not acknowledge",
        );
        // Node 1 of the net never received a Broadcast.
        let status = net.client(0).status().await.unwrap();
        assert_eq!(status.counters.received("broadcast"), 0);
        node.shutdown().await.unwrap();
        net.shutdown().await;
    })
    .await;
}

/// `insecure`: plaintext, and everybody anonymous: no Status, no broadcast message with a
/// claimed sender, no export without a proof, only denials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_nodes_trust_nobody() {
    bounded(async {
        let root = scratch("tls-insecure");
        let site = Site::new(&root, 1, b"plain");
        let mut c = site.config();
        c.transport = Some(Transport::Insecure);
        let node = Node::start(c).await.unwrap();
        let client = NodeClient::connect(node.addr(), 1, Reach::Insecure)
            .await
            .unwrap();
        assert_refused(client.status().await, ErrorKind::Denied, "refused");
        let cap = CapName {
            issuer: 1,
            serial: 1,
        };
        assert_refused(
            client.broadcast(2, BroadcastMessage::Revoke(cap)).await,
            ErrorKind::Denied,
            "refused",
        );
        // Exports still work with a proof, and tokens still work.
        let t = client
            .export(&site.cap, CTX, &ctx_key(), read_all())
            .await
            .unwrap();
        assert_eq!(client.read(&t, 0, 5).await.unwrap(), b"plain");
        node.shutdown().await.unwrap();
    })
    .await;
}

/// A certificate listed in the node's revocation file gets no TLS session (the handshake
/// fails with the `certificate_revoked` alert), and one revoked while its connection is open
/// is served no more once the node has read the list again (its connection is cut, and a new
/// one refused); everyone else is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_certificates_are_refused_on_open_connections_too() {
    bounded(async {
        let other = PeerIdentity::Client("other".into());
        let list = revocation_file("tls-revoked-list", std::slice::from_ref(&other));
        let net = Net::start("tls-revoked", 1, |c| {
            c.revoked_certs = Some(list.clone());
            // The list is read again only when the test says so.
            c.maintenance_interval = Duration::from_secs(3600);
        })
        .await;
        let addr = net.nodes[0].addr();
        let token = net.export(0, Rights::READ, ByteRange::WHOLE).await;
        let holder = net.holder(0).await;
        // Listed at start: its handshakes fail.
        let revoked =
            NodeClient::connect_lazy(addr, 1, Reach::Tls(&tls(&other)), Duration::from_secs(5))
                .unwrap();
        assert!(revoked.read(&token, 0, 1).await.is_err());
        let e = NodeClient::connect(addr, 1, Reach::Tls(&tls(&other)))
            .await
            .expect_err("a revoked certificate connected");
        assert!(format!("{e:?}").contains("CertificateRevoked"), "{e:?}");
        // What its client sees: the `certificate_revoked` alert. (TLS 1.3 clients finish
        // their side of the handshake first, so it may come with the first read.)
        let refusal = match try_tls_stream(&other, addr, 1).await {
            Err(e) => e,
            Ok(mut stream) => {
                use tokio::io::AsyncReadExt;
                let mut buf = [0; 64];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) => panic!("closed without an alert"),
                        Ok(_) => {}
                        Err(e) => break e,
                    }
                }
            }
        };
        assert!(
            refusal.to_string().contains("CertificateRevoked"),
            "{refusal}"
        );
        holder.read(&token, 0, 1).await.expect("others are served");

        // The operator's certificate is revoked while its connection is open.
        let ops = net.client(0);
        ops.status().await.expect("served before");
        revoke_cert(&list, &operator());
        net.nodes[0].reload_revoked_certs().expect("reload");
        for _ in 0..3 {
            // Refused on its connection if the request beats the cut; else it fails with
            // the connection, or a new connection is refused at its handshake.
            ops.status()
                .await
                .expect_err("a certificate revoked at run time was still served");
        }
        holder.read(&token, 0, 1).await.expect("others are served");
        // A file that turns bad keeps the list in force.
        std::fs::write(&list, "not a fingerprint\n").unwrap();
        let e = net.nodes[0].reload_revoked_certs().expect_err("a bad file");
        assert!(e.to_string().contains("line 1"), "{e}");
        assert!(ops.status().await.is_err());
        assert!(revoked.read(&token, 0, 1).await.is_err());
        holder.read(&token, 0, 1).await.expect("others are served");
        net.shutdown().await;
    })
    .await;
}

/// A revocation file that does not parse stops the node at start, in one line naming the
/// file and the line; so does one that is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_revocation_file_stops_the_start() {
    let root = scratch("tls-revoked-bad");
    let site = Site::new(&root, 1, b"x");
    let list = root.join("revoked.txt");
    std::fs::write(&list, "# ok\nnot a fingerprint\n").unwrap();
    for (path, expect) in [
        (list.clone(), "line 2"),
        (root.join("missing.txt"), "cannot read revocation file"),
    ] {
        let mut c = site.config();
        c.revoked_certs = Some(path);
        let e = dist_bridge::node::Node::start(c)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(expect) && !e.contains('\n'), "{e}");
    }
}

/// A certificate from the cluster CA for `*.node.dist-bridge` (a misissued one: `dist-bridge
/// certs` never makes it) is valid for every node's name, and tonic's own TLS check accepts
/// it for node 1. The client's check does not: the certificate must name the node expected,
/// and a wildcard names no node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_server_certificate_is_no_node() {
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    };
    bounded(async {
        // The fixture's CA, as an issuer (its name is all a chain needs of it).
        let ca_key =
            KeyPair::from_pem(&std::fs::read_to_string(pki().join("ca.key")).unwrap()).unwrap();
        let mut ca = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, dist_bridge::certs::CA_COMMON_NAME);
        dn.push(DnType::OrganizationName, "dist-bridge");
        ca.distinguished_name = dn;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["*.node.dist-bridge".to_owned()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &issuer).unwrap();

        // A rogue gRPC server with it (the health service is enough to answer a call).
        let server_tls = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(
                cert.pem(),
                key.serialize_pem(),
            ))
            .client_ca_root(tonic::transport::Certificate::from_pem(
                std::fs::read(pki().join("ca.crt")).unwrap(),
            ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_health, health_service) = tonic_health::server::health_reporter();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .tls_config(server_tls)
                .unwrap()
                .add_service(health_service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );

        // tonic's TLS check takes it for node 1 (so the certificate is good for the name)...
        let files = tls_files(&holder());
        let read = |p: &std::path::Path| std::fs::read(p).unwrap();
        let lax = tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(read(&files.ca)))
                    .identity(tonic::transport::Identity::from_pem(
                        read(&files.cert),
                        read(&files.key),
                    ))
                    .domain_name(PeerIdentity::Node(1).dns_name()),
            )
            .unwrap()
            .connect()
            .await;
        assert!(lax.is_ok(), "the setup is wrong: {lax:?}");
        // ...a client does not, for node 1 or any other.
        for node in [1, 2] {
            let r = NodeClient::connect(addr, node, Reach::Tls(&tls(&holder()))).await;
            assert!(
                r.is_err(),
                "a wildcard certificate was taken for node {node}"
            );
        }
        server.abort();
    })
    .await;
}

/// A node whose revocation file lists a peer's certificate does not talk to that peer as a
/// client either: its connections to the peer fail at the handshake, so a broadcast gets no
/// acknowledgement from it, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_does_not_talk_to_a_peer_whose_certificate_is_revoked() {
    bounded(async {
        let node2 = PeerIdentity::Node(2);
        let list = revocation_file("tls-revoked-peer", std::slice::from_ref(&node2));
        let net = Net::start_broadcast_with("tls-revoked-peer", 2, |id, c| {
            if id == 1 {
                c.revoked_certs = Some(list.clone());
            }
        })
        .await;
        let cap = net.client(0).broadcast_issue().await.expect("issue");
        // Revoked here, and reported as not acknowledged by node 2, with the reason.
        let e = net.client(0).broadcast_revoke(cap).await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("did not acknowledge")
                && text.contains("invalid peer certificate: Revoked"),
            "{text}"
        );
        // A client can refuse it the same way, with the list in hand.
        let list = dist_bridge::revoked_certs::RevokedList::parse(
            &dist_bridge::revoked_certs::line(&fingerprint(&node2), "node 2"),
        )
        .unwrap();
        let wary = tls(&operator()).refusing_listed(list);
        let e = NodeClient::connect(net.nodes[1].addr(), 2, Reach::Tls(&wary))
            .await
            .expect_err("connected to a revoked node");
        assert!(format!("{e:?}").contains("Revoked"), "{e:?}");
        NodeClient::connect(net.nodes[0].addr(), 1, Reach::Tls(&wary))
            .await
            .expect("node 1 is not revoked");
        net.shutdown().await;
    })
    .await;
}

/// A raw HTTP/2 connection to node 1 at `addr` as `identity`: its client, and the task
/// driving the connection (it ends when the connection does).
async fn h2_as(
    identity: &PeerIdentity,
    addr: std::net::SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let tls = tls_stream(identity, addr, 1).await;
    let (client, conn) = h2::client::handshake(tls).await.expect("handshake");
    (client, tokio::spawn(conn))
}

/// Sends a health check on `client`'s connection; whether it was answered `SERVING`-ly
/// (HTTP 200).
async fn health_check(client: &h2::client::SendRequest<bytes::Bytes>) -> bool {
    let Ok(mut c) = client.clone().ready().await else {
        return false;
    };
    let request = http::Request::builder()
        .method("POST")
        .uri("https://node/grpc.health.v1.Health/Check")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let Ok((response, mut body)) = c.send_request(request, false) else {
        return false;
    };
    // An empty HealthCheckRequest: the server as a whole.
    if body
        .send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .is_err()
    {
        return false;
    }
    matches!(response.await, Ok(r) if r.status().is_success())
}

/// Revoking a client's certificate ends its open connections when the node next reads its
/// revocation list (`RunningNode::reload_revoked_certs` here; the maintenance task's next
/// tick after the file changes otherwise), rather than leaving them open to be refused
/// request by request; other clients' connections carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_certificate_closes_its_open_connections() {
    bounded(async {
        let list = revocation_file("tls-revoke-live", &[]);
        let net = Net::start("tls-revoke-live", 1, |c| {
            c.revoked_certs = Some(list.clone());
            // Only the explicit reload below reads the list again.
            c.maintenance_interval = Duration::from_secs(3600);
        })
        .await;
        let addr = net.nodes[0].addr();
        let other = PeerIdentity::Client("other".into());
        let (doomed, doomed_conn) = h2_as(&other, addr).await;
        let (kept, kept_conn) = h2_as(&holder(), addr).await;
        assert!(health_check(&doomed).await && health_check(&kept).await);

        revoke_cert(&list, &other);
        net.nodes[0].reload_revoked_certs().expect("reload");
        tokio::time::timeout(Duration::from_secs(20), doomed_conn)
            .await
            .expect("a connection whose certificate is revoked was kept open")
            .ok();
        assert!(!health_check(&doomed).await);
        // The other client's connection is the same one, and still served.
        assert!(!kept_conn.is_finished());
        assert!(
            health_check(&kept).await,
            "another client's connection was closed"
        );
        net.shutdown().await;
    })
    .await;
}

/// Revoking a peer node's certificate ends the node's open connection to that peer when it
/// next reads its list: the next broadcast gets no acknowledgement from the peer (the
/// connection opened while the peer was in good standing carried on before), and the one
/// after says why (the handshake of a new connection refuses the peer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_peer_certificate_closes_the_connection_to_it() {
    bounded(async {
        let list = revocation_file("tls-revoke-peer-live", &[]);
        let net = Net::start_broadcast_with("tls-revoke-peer-live", 2, |id, c| {
            if id == 1 {
                c.revoked_certs = Some(list.clone());
                c.maintenance_interval = Duration::from_secs(3600);
            }
        })
        .await;
        let ops = net.client(0);
        let cap = ops.broadcast_issue().await.expect("issue");
        let done = ops.broadcast_revoke(cap).await.expect("acknowledged");
        assert!(done.complete, "{done:?}");

        revoke_cert(&list, &PeerIdentity::Node(2));
        net.nodes[0].reload_revoked_certs().expect("reload");
        let cap = ops.broadcast_issue().await.expect("issue");
        let e = ops
            .broadcast_revoke(cap)
            .await
            .expect_err("node 2 was still reached over its open connection");
        assert!(e.to_string().contains("did not acknowledge"), "{e}");
        // The channel reports the ended connection's error once more at most (tonic's
        // reconnecting channel does), then connects anew: the handshake refuses node 2.
        let mut said = Vec::new();
        while !said
            .last()
            .is_some_and(|e: &String| e.contains("invalid peer certificate: Revoked"))
        {
            assert!(
                said.len() < 3,
                "a new connection to node 2 was not refused: {said:#?}"
            );
            let cap = ops.broadcast_issue().await.expect("issue");
            let e = ops.broadcast_revoke(cap).await.unwrap_err().to_string();
            assert!(e.contains("did not acknowledge"), "{e}");
            said.push(e);
        }
        net.shutdown().await;
    })
    .await;
}
