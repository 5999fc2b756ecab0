//! No oracles: a caller who is not an operator learns nothing about the node's guards from
//! its refusals.
//!
//! The finding: `Owner::check` looked a guard up before verifying the tag, and refusals named
//! the node id, controller version, table capacity and live guard versions, so an
//! unauthenticated prober rebuilt the exact set of live guard indices. Now every failed check
//! reaches a plain client as the same status, and the reasons reach operators only.

use crate::net::*;
use dist_bridge::token::HEADER_LEN;
use dist_bridge::*;
use tonic::Code;

/// Every answer a plain client gets for a probe, as (code, kind, message, metadata keys).
async fn probe(
    c: &NodeClient,
    addr: std::net::SocketAddr,
    bytes: Vec<u8>,
) -> Vec<(Code, String, String, Vec<String>)> {
    let mut out = Vec::new();
    let results = [
        c.invoke_bytes(bytes.clone(), Op::Read, 0, 1, Vec::new())
            .await
            .map(|_| ()),
        c.invoke_bytes(bytes.clone(), Op::Write, 0, 1, vec![0])
            .await
            .map(|_| ()),
        c.revoke_bytes(bytes.clone()).await.map(|_| ()),
    ];
    for r in results {
        match r {
            Err(ClientError::Rejected {
                kind,
                code,
                message,
            }) => out.push((code, kind.to_string(), message, Vec::new())),
            other => panic!("a probe was not refused: {other:?}"),
        }
    }
    // The raw statuses: no other metadata tells them apart either.
    let channel = dist_bridge::client::connect_channel(
        addr,
        1,
        dist_bridge::client::Reach::Tls(&tls(&holder())),
    )
    .await
    .unwrap();
    let raw = dist_bridge::pb::node_client::NodeClient::new(channel);
    let status = raw
        .clone()
        .invoke(dist_bridge::pb::InvokeRequest {
            token: bytes,
            op: dist_bridge::pb::Op::Read as i32,
            offset: 0,
            len: 1,
            data: Vec::new(),
        })
        .await
        .unwrap_err();
    let mut keys: Vec<String> = status
        .metadata()
        .keys()
        .map(|k| match k {
            tonic::metadata::KeyRef::Ascii(k) => k.as_str().to_owned(),
            tonic::metadata::KeyRef::Binary(k) => k.as_str().to_owned(),
        })
        .filter(|k| k != "date" && k != "content-length")
        .collect();
    keys.sort();
    out.push((
        status.code(),
        String::new(),
        status.message().to_owned(),
        keys,
    ));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_tokens_get_one_answer_whatever_guard_they_name() {
    bounded(async {
        let net = Net::start("oracle", 1, |c| {
            c.guard_table.capacity = 16;
            c.guard_table.batch_size = 1;
        })
        .await;
        let addr = net.nodes[0].addr();
        let probe_token = net.export(0, Rights::READ, range(0, 4096)).await;
        let live = net.export(0, Rights::all(), ByteRange::WHOLE).await;
        let revoked = net.export(0, Rights::all(), ByteRange::WHOLE).await;
        net.client(0).revoke(&revoked).await.unwrap();
        let forge = |index: u32, version: u64| {
            let mut b = probe_token.encode();
            b[HEADER_LEN + 16..HEADER_LEN + 20].copy_from_slice(&index.to_le_bytes());
            b[HEADER_LEN + 20..HEADER_LEN + 28].copy_from_slice(&version.to_le_bytes());
            b
        };
        let other_life = {
            let mut b = probe_token.encode();
            b[HEADER_LEN + 8] ^= 1;
            b
        };
        let other_node = {
            let mut b = probe_token.encode();
            b[HEADER_LEN] ^= 1;
            b
        };
        let (l, r) = (live.guard(), revoked.guard());
        let cases = [
            ("live guard", forge(l.index, l.version)),
            ("revoked guard", forge(r.index, r.version)),
            ("reused version", forge(l.index, l.version + 1)),
            ("never issued", forge(12, 1)),
            ("outside the table", forge(1_000_000, 1)),
            ("another life", other_life),
            ("another node", other_node),
            ("garbage", b"not a token".to_vec()),
            ("empty", Vec::new()),
        ];
        let holder = net.holder(0).await;
        let first = probe(&holder, addr, cases[0].1.clone()).await;
        assert_eq!(first[0].0, Code::PermissionDenied);
        assert_eq!(first[0].1, "denied");
        for (what, bytes) in &cases {
            let answers = probe(&holder, addr, bytes.clone()).await;
            assert_eq!(answers, first, "{what}");
        }
        // The genuine revoked token gets the same answer too.
        let answers = probe(&holder, addr, revoked.encode()).await;
        assert_eq!(answers, first, "the revoked token itself");
        // Nothing in the message names the node, its life, or the table.
        let message = &first[0].2;
        for number in ["1", "16", &l.index.to_string()] {
            assert!(!message.contains(number), "{message:?} names {number}");
        }

        // The operator is told why, and Status lists the reasons.
        let ops = net.client(0);
        assert_refused(
            ops.invoke_bytes(forge(r.index, r.version), Op::Read, 0, 1, Vec::new())
                .await,
            ErrorKind::BadTag,
            "does not verify",
        );
        assert_refused(
            ops.read(&revoked, 0, 1).await,
            ErrorKind::Revoked,
            "revoked",
        );
        let status = ops.status().await.unwrap();
        assert!(status.refusals["bad-tag"] >= 5 * 4, "{:?}", status.refusals);
        assert!(status.refusals["stale-controller"] >= 4);
        assert!(status.refusals["wrong-owner"] >= 4);
        assert!(status.refusals["malformed-token"] >= 8);
        assert!(status.refusals["revoked"] >= 4);
        let last = status.recent_refusals.last().unwrap();
        assert_eq!(
            (last.rpc.as_str(), last.kind.as_str()),
            ("invoke", "revoked")
        );
        assert_eq!(last.caller, "operator ops");
        assert!(
            status
                .recent_refusals
                .iter()
                .any(|r| r.caller == "client app" && r.kind == "bad-tag")
        );

        // Status and upgrade notices are not for plain clients.
        assert_refused(holder.status().await, ErrorKind::Denied, "refused");
        assert_refused(holder.poll_upgrades(0).await, ErrorKind::Denied, "refused");
        net.shutdown().await;
    })
    .await;
}

/// A genuine token's holder is told `upgraded` (so it can renew), and nothing else it could
/// not learn from `Renew`; a forged token naming the upgraded guard is just denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_keep_the_upgrade_protocol() {
    bounded(async {
        // A tiny version space: versions 1..=16 in 4 ranges, every release flushes.
        let net = Net::start("oracle-upgrade", 1, |c| {
            c.guard_table.capacity = 4;
            c.guard_table.batch_size = 1;
            c.guard_table.max_version = 16;
            c.guard_table.ranges = 4;
        })
        .await;
        let holder = net.holder(0).await;
        let keeper = net
            .export(0, Rights::READ | Rights::REVOKE, ByteRange::WHOLE)
            .await;
        // Out of its range: a failed check like any other.
        assert_refused(
            holder.read(&keeper, 1 << 31, 1).await,
            ErrorKind::Denied,
            "refused",
        );
        assert_refused(
            holder.write(&keeper, 0, b"x").await,
            ErrorKind::Denied,
            "refused",
        );
        // A current token renews to itself.
        assert_eq!(holder.renew(&keeper).await.unwrap(), keeper);
        // Churn other guards until the keeper's range is upgraded.
        let mut upgraded = false;
        for _ in 0..64 {
            let t = net
                .export(0, Rights::READ | Rights::REVOKE, ByteRange::WHOLE)
                .await;
            net.client(0).revoke(&t).await.unwrap();
            match holder.read(&keeper, 0, 1).await {
                Ok(_) => {}
                Err(e) => {
                    assert_eq!(e.kind(), Some(ErrorKind::Upgraded), "{e}");
                    upgraded = true;
                    break;
                }
            }
        }
        assert!(upgraded, "no upgrade within 64 revocations");
        // A forged token naming the upgraded guard learns nothing.
        let mut forged = keeper.encode();
        let last = forged.len() - 1;
        forged[last] ^= 1;
        assert_refused(
            holder
                .invoke_bytes(forged, Op::Read, 0, 1, Vec::new())
                .await,
            ErrorKind::Denied,
            "refused",
        );
        let renewed = holder.renew(&keeper).await.unwrap();
        assert_eq!(holder.read(&renewed, 0, 6).await.unwrap(), b"object");
        net.shutdown().await;
    })
    .await;
}
