//! The node service at the gRPC level: several nodes on 127.0.0.1, tokens exported at their
//! owners, invoked, attenuated, derived, revoked; restarts; reused guard entries; concurrent
//! revocation; bad tokens; and the broadcast baseline's message counts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net::*;
use dist_bridge::*;
use secctx::ObjectStore;
use tonic::Code;
use twizzler_capsec::{Cap, CapGrant, Expiry, ObjID, Protections};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_read_and_write_through_a_token() {
    bounded(async {
        let net = Net::start("rw", 3, |_| {}).await;
        for i in 0..3 {
            let t = net.export(i, Rights::DATA, ByteRange::WHOLE).await;
            assert_eq!(t.owner().node, net.sites[i].id);
            assert_eq!(t.object(), net.sites[i].object);
            // The cluster routes each token to its owner.
            let initial = format!("object of node {}", i + 1);
            let got = net.cluster.read(&t, 0, initial.len() as u64).await.unwrap();
            assert_eq!(got, initial.as_bytes());
            net.cluster.write(&t, 7, b"WRITTEN").await.unwrap();
            let got = net.cluster.read(&t, 0, 14).await.unwrap();
            assert_eq!(&got, b"object WRITTEN");
            // Past the stored end: zeros on read; a write extends the object.
            let end = initial.len() as u64;
            assert_eq!(net.cluster.read(&t, end, 4).await.unwrap(), vec![0; 4]);
            net.cluster.write(&t, end + 2, b"tail").await.unwrap();
            let stored = net.sites[i].stored();
            assert_eq!(stored.len() as u64, end + 6);
            assert_eq!(&stored[stored.len() - 6..], b"\0\0tail");
        }
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attenuated_token_works_inside_its_rights_and_fails_outside_them() {
    bounded(async {
        let net = Net::start("attenuate", 3, |_| {}).await;
        let root = net.export(1, Rights::all(), ByteRange::WHOLE).await;
        // Offline: read-only, the first 4 KiB, no revoke or derive.
        let weak = root
            .with_rights(Rights::READ)
            .unwrap()
            .with_range(range(0, 4096))
            .unwrap();
        let c = &net.cluster;
        assert_eq!(c.read(&weak, 0, 6).await.unwrap(), b"object");
        assert!(c.read(&weak, 4000, 96).await.is_ok());
        let e = c.write(&weak, 0, b"x").await;
        assert_eq!(e.as_ref().unwrap_err().code(), Some(Code::PermissionDenied));
        assert_refused(e, ErrorKind::RightsExceeded, "needs rights");
        assert_refused(
            c.read(&weak, 4096, 1).await,
            ErrorKind::OutOfRange,
            "outside the token's range",
        );
        assert_refused(
            c.read(&weak, 4095, 2).await,
            ErrorKind::OutOfRange,
            "outside",
        );
        assert_refused(
            c.revoke(&weak).await,
            ErrorKind::RightsExceeded,
            "needs rights",
        );
        assert_refused(
            net.client(1).derive(&weak, weak.scope()).await,
            ErrorKind::RightsExceeded,
            "needs rights",
        );
        // An attenuation that has expired.
        let expired = root.with_expiry(Expiry::from_raw(1)).unwrap();
        assert_refused(c.read(&expired, 0, 1).await, ErrorKind::Expired, "expired");
        // A write-only window elsewhere.
        let w = root
            .with_rights(Rights::WRITE)
            .unwrap()
            .with_range(range(8192, 16))
            .unwrap();
        c.write(&w, 8192, b"0123456789abcdef").await.unwrap();
        assert_refused(
            c.read(&w, 8192, 1).await,
            ErrorKind::RightsExceeded,
            "needs rights",
        );
        assert_refused(
            c.write(&w, 8191, b"ab").await,
            ErrorKind::OutOfRange,
            "outside",
        );
        // Widening is impossible offline.
        assert!(weak.with_rights(Rights::DATA).is_err());
        // The root still has everything.
        c.write(&root, 0, b"O").await.unwrap();
        net.shutdown().await;
    })
    .await;
}

/// Requests received by every node, and requests sent.
fn traffic(s: &[NodeStatus]) -> Vec<(u64, u64, u64)> {
    s.iter()
        .map(|s| {
            (
                s.counters.requests_received,
                s.counters.requests_sent,
                s.counters.replies_received,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_rejects_every_derived_token_after_one_round_trip_and_no_other_message() {
    bounded(async {
        let net = Net::start("revoke", 4, |_| {}).await;
        let owner = 2; // node 3
        let root = net.export(owner, Rights::all(), ByteRange::WHOLE).await;
        // Offline attenuations, a child guard (one round trip), its attenuation, a
        // grandchild.
        let a1 = root.with_rights(Rights::READ).unwrap();
        let a2 = a1.with_range(range(0, 100)).unwrap();
        let child = net
            .client(owner)
            .derive(
                &root,
                Scope::new(Rights::DATA | Rights::DERIVE, range(0, 4096), Expiry::NEVER),
            )
            .await
            .unwrap();
        let child_weak = child.with_rights(Rights::READ).unwrap();
        let grandchild = net
            .client(owner)
            .derive(
                &child,
                Scope::new(Rights::READ, range(0, 10), Expiry::NEVER),
            )
            .await
            .unwrap();
        // A sibling guard that the revocation must not touch.
        let sibling = net.export(owner, Rights::READ, ByteRange::WHOLE).await;
        let all = [&root, &a1, &a2, &child, &child_weak, &grandchild];
        for t in all {
            net.cluster.read(t, 0, 1).await.unwrap();
        }

        let before = net.statuses().await;
        let report = net.cluster.revoke(&root).await.unwrap();
        let after = net.statuses().await;
        assert_eq!(report.guards_revoked, 3, "root, child, grandchild");

        // Exactly one request (and its reply) at the owner; nothing sent by anybody;
        // nothing received by any other node.
        let (b, a) = (traffic(&before), traffic(&after));
        for i in 0..4 {
            let expected_rx = if i == owner { b[i].0 + 1 } else { b[i].0 };
            assert_eq!(a[i].0, expected_rx, "node {} received", i + 1);
            assert_eq!(a[i].1, b[i].1, "node {} sent", i + 1);
            assert_eq!(a[i].2, b[i].2, "node {} replies received", i + 1);
        }
        assert_eq!(
            after[owner].counters.received("revoke"),
            before[owner].counters.received("revoke") + 1
        );
        assert_eq!(after[owner].table.live, before[owner].table.live - 3);

        for t in all {
            let r = net.cluster.read(t, 0, 1).await;
            assert_eq!(r.as_ref().unwrap_err().code(), Some(Code::Unauthenticated));
            assert_refused(r, ErrorKind::Revoked, "has been revoked");
            assert_refused(net.cluster.revoke(t).await, ErrorKind::Revoked, "revoked");
            assert_refused(
                net.client(owner).renew(t).await,
                ErrorKind::Revoked,
                "revoked",
            );
        }
        assert_eq!(net.cluster.read(&sibling, 0, 6).await.unwrap(), b"object");
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_restart_rejects_every_earlier_token() {
    bounded(async {
        let mut net = Net::start("restart", 3, |_| {}).await;
        let owner = 0;
        let root = net.export(owner, Rights::all(), ByteRange::WHOLE).await;
        let weak = root.with_rights(Rights::READ).unwrap();
        let child = net
            .client(owner)
            .derive(&root, Scope::new(Rights::READ, range(0, 64), Expiry::NEVER))
            .await
            .unwrap();
        net.cluster.write(&root, 0, b"persisted").await.unwrap();
        let other = net.export(1, Rights::READ, ByteRange::WHOLE).await;
        let v1 = net.nodes[owner].controller();

        // Stop the owner, start a new life on the same store and version file.
        let node = net.nodes.remove(owner);
        node.shutdown().await.unwrap();
        let restarted = Node::start(net.sites[owner].config()).await.unwrap();
        let v2 = restarted.controller();
        assert_eq!(v2.node, v1.node);
        assert_eq!(v2.version, v1.version + 1);
        net.nodes.insert(owner, restarted);
        let client = connect_as(&operator(), net.nodes[owner].addr(), net.sites[owner].id).await;
        net.cluster.insert(net.sites[owner].id, client.clone());

        for t in [&root, &weak, &child] {
            let r = net.cluster.read(t, 0, 1).await;
            assert_eq!(r.as_ref().unwrap_err().code(), Some(Code::Unauthenticated));
            assert_refused(r, ErrorKind::StaleController, "restarted");
            assert_refused(
                net.cluster.revoke(t).await,
                ErrorKind::StaleController,
                "restarted",
            );
        }
        // The store survived; a fresh export works; other owners are unaffected.
        let fresh = client
            .export(
                &net.sites[owner].cap,
                CTX,
                &ctx_key(),
                Scope::new(Rights::READ, ByteRange::WHOLE, Expiry::NEVER),
            )
            .await
            .unwrap();
        assert_eq!(fresh.owner(), v2);
        assert_eq!(net.cluster.read(&fresh, 0, 9).await.unwrap(), b"persisted");
        assert!(net.cluster.read(&other, 0, 1).await.is_ok());
        let status = client.status().await.unwrap();
        assert_eq!(status.controller, v2);
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_guard_entry_never_accepts_a_token_from_its_earlier_life() {
    bounded(async {
        // One entry, every release flushes, versions 1..=16 in 4 ranges: the entry is
        // reused at every export and its version comes round again.
        let net = Net::start("reuse", 3, |c| {
            c.guard_table = GuardTableConfig {
                capacity: 1,
                batch_size: 1,
                max_version: 16,
                ranges: 4,
                ..GuardTableConfig::default()
            };
        })
        .await;
        let i = 1;
        let first = net.export(i, Rights::all(), ByteRange::WHOLE).await;
        let first_ref = first.guard();
        let mut previous = first.clone();
        let mut came_round = false;
        for _ in 0..64 {
            net.cluster.revoke(&previous).await.unwrap();
            let next = net.export(i, Rights::all(), ByteRange::WHOLE).await;
            assert_eq!(
                next.guard().index,
                first_ref.index,
                "the single entry is reused"
            );
            assert!(net.cluster.read(&next, 0, 1).await.is_ok());
            // The previous life of the entry is dead, whatever the versions say.
            let e = net.cluster.read(&previous, 0, 1).await.unwrap_err();
            assert!(
                matches!(e.kind(), Some(ErrorKind::StaleGuard | ErrorKind::BadTag)),
                "{e}"
            );
            let e = net.cluster.read(&first, 0, 1).await.unwrap_err();
            assert_eq!(e.code(), Some(Code::Unauthenticated), "{e}");
            if next.guard() == first_ref {
                // Same index and version as the first token, a later generation of its
                // version range: the old tag no longer verifies.
                came_round = true;
                assert_refused(
                    net.cluster.read(&first, 0, 1).await,
                    ErrorKind::BadTag,
                    "does not verify",
                );
                assert_refused(
                    net.cluster.revoke(&first).await,
                    ErrorKind::BadTag,
                    "does not verify",
                );
                assert!(net.cluster.read(&next, 0, 1).await.is_ok());
                break;
            }
            previous = next;
        }
        assert!(came_round, "the guard version never came round");
        let s = net.client(i).status().await.unwrap();
        assert!(s.table.range_advances >= 4, "{:?}", s.table);
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_invocation_is_accepted_after_the_revocation_has_returned() {
    bounded(async {
        let net = Net::start("concurrent", 3, |_| {}).await;
        let owner = 0;
        let root = net.export(owner, Rights::all(), ByteRange::WHOLE).await;
        let doomed = net
            .client(owner)
            .derive(
                &root,
                Scope::new(Rights::DATA | Rights::REVOKE, range(0, 4096), Expiry::NEVER),
            )
            .await
            .unwrap();
        let survivor = net.export(owner, Rights::READ, ByteRange::WHOLE).await;
        let revoked_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();

        // Invokers: each invocation notes when it was sent; accepted ones must all have
        // been sent before the revocation returned. Each runs until it has been refused
        // three times, which happens only after the revocation; each says when it has had
        // one invocation accepted.
        let (running, mut started) = tokio::sync::mpsc::channel::<()>(6);
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..6u8 {
            let (cluster, token, running) = (net.cluster.clone(), doomed.clone(), running.clone());
            let revoked_at = revoked_at.clone();
            tasks.spawn(async move {
                let mut accepted = 0u32;
                let mut refused_after = 0u32;
                for n in 0u32.. {
                    let sent = Instant::now();
                    let r = if w % 2 == 0 {
                        cluster
                            .write(&token, u64::from(w) * 8, &n.to_le_bytes())
                            .await
                    } else {
                        cluster.read(&token, 0, 64).await.map(drop)
                    };
                    let done = *revoked_at.lock().unwrap();
                    match r {
                        Ok(()) => {
                            accepted += 1;
                            if accepted == 1 {
                                let _ = running.send(()).await;
                            }
                            if let Some(t) = done {
                                assert!(
                                    sent < t,
                                    "an invocation sent after the revocation returned was accepted"
                                );
                            }
                        }
                        Err(e) => {
                            assert_eq!(e.kind(), Some(ErrorKind::Revoked), "{e}");
                            refused_after += 1;
                            if refused_after >= 3 {
                                break;
                            }
                        }
                    }
                }
                (accepted, refused_after)
            });
        }
        // Once every invoker is under way, revoke.
        drop(running);
        for _ in 0..6 {
            started
                .recv()
                .await
                .expect("an invoker ended before the revocation");
        }
        let report = net.cluster.revoke(&doomed).await.unwrap();
        *revoked_at.lock().unwrap() = Some(Instant::now());
        assert_eq!(report.guards_revoked, 1);
        // Every effect of an accepted write is in place now: the object no longer changes.
        let snapshot = net.sites[owner].stored();
        let mut total = 0;
        let mut refused = 0;
        while let Some(r) = tasks.join_next().await {
            let (a, f) = r.unwrap();
            total += a;
            refused += f;
        }
        assert_eq!(
            net.sites[owner].stored(),
            snapshot,
            "a write landed after the revocation"
        );
        assert!(total > 0, "no invocation ran before the revocation");
        assert!(
            refused > 0,
            "no invocation was refused after the revocation"
        );
        assert_refused(
            net.cluster.read(&doomed, 0, 1).await,
            ErrorKind::Revoked,
            "revoked",
        );
        assert!(net.cluster.read(&survivor, 0, 1).await.is_ok());
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_forged_and_other_node_tokens_are_rejected_with_clear_errors() {
    bounded(async {
        let net = Net::start("bad-tokens", 3, |_| {}).await;
        let t = net
            .export(0, Rights::READ | Rights::REVOKE, ByteRange::WHOLE)
            .await;
        let bytes = t.encode();
        let c = net.client(0);
        let read = |b: Vec<u8>| c.invoke_bytes(b, Op::Read, 0, 1, Vec::new());

        // Truncated, empty, garbage, trailing bytes.
        let r = read(bytes[..bytes.len() - 1].to_vec()).await;
        assert_eq!(r.as_ref().unwrap_err().code(), Some(Code::InvalidArgument));
        assert_refused(r, ErrorKind::MalformedToken, "truncated");
        assert_refused(
            read(Vec::new()).await,
            ErrorKind::MalformedToken,
            "malformed token",
        );
        assert_refused(
            read(vec![0x5a; 200]).await,
            ErrorKind::MalformedToken,
            "not a guarded token",
        );
        let mut long = bytes.clone();
        long.push(0);
        assert_refused(read(long).await, ErrorKind::MalformedToken, "caveat count");

        // Forged: a flipped tag bit; widened rights in the body; another guard version.
        let mut tag = bytes.clone();
        *tag.last_mut().unwrap() ^= 1;
        let r = read(tag).await;
        assert_eq!(r.as_ref().unwrap_err().code(), Some(Code::Unauthenticated));
        assert_refused(r, ErrorKind::BadTag, "forged or tampered");
        let mut widened = bytes.clone();
        widened[52..54].copy_from_slice(&Rights::all().bits().to_le_bytes());
        assert_refused(
            c.invoke_bytes(widened.clone(), Op::Write, 0, 1, vec![1])
                .await,
            ErrorKind::BadTag,
            "forged",
        );
        assert_refused(c.revoke_bytes(widened).await, ErrorKind::BadTag, "forged");
        let mut version = bytes.clone();
        version[28] ^= 0x40;
        let e = read(version).await.unwrap_err();
        assert!(
            matches!(
                e.kind(),
                Some(ErrorKind::StaleGuard | ErrorKind::NoSuchGuard | ErrorKind::BadTag)
            ),
            "{e}"
        );
        let mut index = bytes.clone();
        index[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        // The tag is checked first: a guard index outside the table is just a bad tag.
        assert_refused(read(index).await, ErrorKind::BadTag, "does not verify");
        let mut controller = bytes.clone();
        controller[16] ^= 0x7;
        assert_refused(
            read(controller).await,
            ErrorKind::StaleController,
            "controller version",
        );

        // Another node's token, sent here.
        let theirs = net.export(2, Rights::READ, ByteRange::WHOLE).await;
        let r = c.read(&theirs, 0, 1).await;
        assert_eq!(r.as_ref().unwrap_err().code(), Some(Code::InvalidArgument));
        assert_refused(
            r,
            ErrorKind::WrongOwner,
            "belongs to node 3, not to this node (1)",
        );
        assert_refused(
            c.revoke(&theirs).await,
            ErrorKind::WrongOwner,
            "belongs to node 3",
        );
        // ... which still works at its owner.
        assert!(net.cluster.read(&theirs, 0, 1).await.is_ok());

        // Bad requests around a good token.
        assert_refused(
            c.invoke_bytes(bytes.clone(), Op::Write, 0, 5, vec![1, 2])
                .await,
            ErrorKind::BadRequest,
            "write of 2 bytes",
        );
        assert_refused(
            c.invoke_bytes(bytes.clone(), Op::Read, 0, 2 << 20, Vec::new())
                .await,
            ErrorKind::BadRequest,
            "at most",
        );
        assert_refused(
            c.invoke_bytes(bytes.clone(), Op::Read, 0, 0, Vec::new())
                .await,
            ErrorKind::OutOfRange,
            "outside",
        );
        // The genuine token still works.
        assert!(c.read(&t, 0, 1).await.is_ok());
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_checks_the_capability_against_the_store() {
    bounded(async {
        let net = Net::start("export", 2, |_| {}).await;
        let (s0, c0) = (&net.sites[0], net.client(0));
        let all = |rights| Scope::new(rights, ByteRange::WHOLE, Expiry::NEVER);
        // For a context that has no key here: no proof can be checked.
        assert_refused(
            c0.export(&s0.cap, ObjID::new(0xbad), &ctx_key(), all(Rights::READ))
                .await,
            ErrorKind::BadProof,
            "no usable key",
        );
        // For another context, proven: the capability is not for it.
        let other_ctx = ObjID::new(0xc7c7_0002);
        s0.store
            .create(&secctx::Object {
                id: other_ctx,
                meta: secctx::ObjMeta::signed_by(CTX_KUID),
                data: Vec::new(),
            })
            .unwrap();
        assert_refused(
            c0.export(&s0.cap, other_ctx, &ctx_key(), all(Rights::READ))
                .await,
            ErrorKind::WrongContext,
            "capability is for context",
        );
        // An object this node does not hold (node 2's capability sent to node 1).
        let r = c0
            .export(&net.sites[1].cap, CTX, &ctx_key(), all(Rights::READ))
            .await;
        assert_eq!(r.as_ref().unwrap_err().code(), Some(Code::NotFound));
        assert_refused(r, ErrorKind::NoKey, "has no kuid");
        // Signed by another key.
        let forged = Cap::mint(
            CapGrant::new(s0.object, CTX, Protections::READ),
            &net.sites[1].key,
        )
        .unwrap();
        assert_refused(
            c0.export(&forged, CTX, &ctx_key(), all(Rights::READ)).await,
            ErrorKind::CapInvalid,
            "does not verify",
        );
        // More than the capability grants.
        let ro = Cap::mint(CapGrant::new(s0.object, CTX, Protections::READ), &s0.key).unwrap();
        assert_refused(
            c0.export(&ro, CTX, &ctx_key(), all(Rights::DATA)).await,
            ErrorKind::RightsExceeded,
            "exceed",
        );
        let t = c0
            .export(
                &ro,
                CTX,
                &ctx_key(),
                all(Rights::READ | Rights::REVOKE | Rights::DERIVE),
            )
            .await
            .unwrap();
        assert_eq!(
            t.scope().rights,
            Rights::READ | Rights::REVOKE | Rights::DERIVE
        );
        // An expiry that has passed.
        assert_refused(
            c0.export(
                &s0.cap,
                CTX,
                &ctx_key(),
                Scope::new(Rights::READ, ByteRange::WHOLE, Expiry::from_raw(1)),
            )
            .await,
            ErrorKind::Expired,
            "has passed",
        );
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgraded_guards_are_announced_and_renewed() {
    bounded(async {
        // A tiny version space: a long-lived guard is upgraded as other guards churn.
        let net = Net::start("upgrade", 2, |c| {
            c.guard_table = GuardTableConfig {
                capacity: 4,
                batch_size: 1,
                max_version: 16,
                ranges: 4,
                ..GuardTableConfig::default()
            };
        })
        .await;
        let c = net.client(0);
        let long_lived = net.export(0, Rights::all(), ByteRange::WHOLE).await;
        let weak = long_lived.with_rights(Rights::READ).unwrap();
        let mut upgraded = None;
        for _ in 0..64 {
            let t = net.export(0, Rights::all(), ByteRange::WHOLE).await;
            c.revoke(&t).await.unwrap();
            let u = c.poll_upgrades(0).await.unwrap();
            if let Some(change) = u
                .notices
                .iter()
                .flat_map(|(_, n)| &n.changes)
                .find(|ch| ch.index == long_lived.guard().index)
            {
                upgraded = Some(*change);
                assert!(u.latest >= 1);
                break;
            }
        }
        let change = upgraded.expect("the long-lived guard was never upgraded");
        assert_eq!(change.old, long_lived.guard().version);
        let r = c.read(&weak, 0, 1).await;
        assert_eq!(
            r.as_ref().unwrap_err().code(),
            Some(Code::FailedPrecondition)
        );
        assert_refused(r, ErrorKind::Upgraded, "renew the token");
        // Renewing keeps the caveats.
        let renewed = c.renew(&weak).await.unwrap();
        assert_eq!(renewed.guard().version, change.new);
        assert_eq!(renewed.scope().rights, Rights::READ);
        assert!(c.read(&renewed, 0, 1).await.is_ok());
        assert!(c.write(&renewed, 0, b"x").await.is_err());
        let root = c.renew(&long_lived).await.unwrap();
        assert!(c.write(&root, 0, b"O").await.is_ok());
        // Polling after the latest gives nothing new.
        let u = c.poll_upgrades(0).await.unwrap();
        let again = c.poll_upgrades(u.latest).await.unwrap();
        assert!(again.notices.is_empty());
        assert!(!again.missed);
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_revocation_sends_a_request_to_every_peer() {
    bounded(async {
        let n = 5;
        let net = Net::start_broadcast("broadcast", n).await;
        let issuer = 1;
        let cap = net.client(issuer).broadcast_issue().await.unwrap();
        assert_eq!(cap.issuer, 2);
        for c in &net.clients {
            c.broadcast_check(cap).await.unwrap();
        }
        let before = net.statuses().await;
        let outcome = net.client(issuer).broadcast_revoke(cap).await.unwrap();
        let after = net.statuses().await;
        let peers = (n - 1) as u32;
        assert_eq!(outcome.peers_notified, peers);
        assert_eq!(outcome.acks, peers);
        assert!(outcome.complete);

        let (b, a) = (traffic(&before), traffic(&after));
        for i in 0..n as usize {
            if i == issuer {
                // The client's request, N-1 requests to peers and their N-1 replies.
                assert_eq!(a[i].0, b[i].0 + 1);
                assert_eq!(a[i].1, b[i].1 + u64::from(peers));
                assert_eq!(a[i].2, b[i].2 + u64::from(peers));
                assert_eq!(after[i].broadcast.revocations, 1);
                assert_eq!(after[i].broadcast.sent, u64::from(peers));
                assert_eq!(after[i].broadcast.received, u64::from(peers));
            } else {
                assert_eq!(
                    a[i].0,
                    b[i].0 + 1,
                    "one Broadcast request at node {}",
                    i + 1
                );
                assert_eq!(after[i].counters.received("broadcast"), 1);
                assert_eq!(a[i].1, b[i].1, "node {} sends no request", i + 1);
                assert_eq!(after[i].broadcast.received, 1);
                assert_eq!(after[i].broadcast.sent, 1, "the ack");
            }
            assert_eq!(after[i].broadcast_revoked, 1);
        }
        for c in &net.clients {
            let r = c.broadcast_check(cap).await;
            assert_eq!(r.as_ref().unwrap_err().code(), Some(Code::PermissionDenied));
            assert_refused(r, ErrorKind::BroadcastRevoked, "has been revoked");
        }
        // Revoking again sends nothing.
        let again = net.client(issuer).broadcast_revoke(cap).await.unwrap();
        assert_eq!(again.peers_notified, 0);
        // A message claiming a node its sender is not (the operator's certificate).
        assert_refused(
            net.client(0)
                .broadcast(99, BroadcastMessage::Revoke(cap))
                .await,
            ErrorKind::NotAllowed,
            "claiming to be from node 99 sent by operator ops",
        );
        // A node claiming another node's id is refused (it is no operator: it sees only a
        // denial); the operator sees why in Status.
        let node3 = connect_as(&PeerIdentity::Node(3), net.nodes[0].addr(), 1).await;
        let fresh = net.client(0).broadcast_issue().await.unwrap();
        assert_refused(
            node3.broadcast(2, BroadcastMessage::Revoke(fresh)).await,
            ErrorKind::Denied,
            "refused",
        );
        assert!(
            net.client(0).broadcast_check(fresh).await.is_ok(),
            "revoked by an impostor"
        );
        // A genuine node that is not a peer.
        let node9 = connect_as(&PeerIdentity::Node(9), net.nodes[0].addr(), 1).await;
        assert_refused(
            node9.broadcast(9, BroadcastMessage::Revoke(fresh)).await,
            ErrorKind::Denied,
            "refused",
        );
        assert!(net.client(0).broadcast_check(fresh).await.is_ok());
        let recent = net.client(0).status().await.unwrap().recent_refusals;
        let reasons: Vec<_> = recent
            .iter()
            .rev()
            .take(2)
            .map(|r| (r.kind.as_str(), r.caller.as_str(), r.message.as_str()))
            .collect();
        assert_eq!(reasons[1].0, "not-allowed");
        assert_eq!(reasons[1].1, "node 3");
        assert!(
            reasons[1].2.contains("claiming to be from node 2"),
            "{reasons:?}"
        );
        assert_eq!(reasons[0].0, "unknown-peer");
        assert_eq!(reasons[0].1, "node 9");

        // The versioned path in the same cluster: one request, nothing else.
        let t = net.export(3, Rights::all(), ByteRange::WHOLE).await;
        let before = net.statuses().await;
        net.cluster.revoke(&t).await.unwrap();
        let after = net.statuses().await;
        let (b, a) = (traffic(&before), traffic(&after));
        for i in 0..n as usize {
            assert_eq!(a[i].0, b[i].0 + u64::from(i == 3));
            assert_eq!((a[i].1, a[i].2), (b[i].1, b[i].2));
        }
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_to_an_unreachable_peer_is_a_clear_error() {
    bounded(async {
        let root = scratch("unreachable");
        let site = Site::new(&root, 1, b"x");
        let mut c = site.config();
        // A port nobody listens on (bound, then released).
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        c.peers = vec![node::Peer {
            id: 2,
            addr: dead.to_string(),
        }];
        c.peer_timeout = Duration::from_secs(2);
        let node = Node::start(c).await.unwrap();
        let client = connect_as(&operator(), node.addr(), 1).await;
        let cap = client.broadcast_issue().await.unwrap();
        let r = client.broadcast_revoke(cap).await;
        assert_eq!(r.as_ref().unwrap_err().code(), Some(Code::Unavailable));
        assert_refused(r, ErrorKind::PeerFailed, "did not acknowledge");
        // Revoked locally all the same.
        assert_refused(
            client.broadcast_check(cap).await,
            ErrorKind::BroadcastRevoked,
            "revoked",
        );
        node.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_on_the_same_version_file_is_refused_and_bad_configs_are_errors() {
    bounded(async {
        let root = scratch("config");
        let site = Site::new(&root, 1, b"x");
        let node = Node::start(site.config()).await.unwrap();
        let e = Node::start(site.config()).await.unwrap_err();
        assert!(
            e.to_string()
                .contains("another process runs this controller"),
            "{e}"
        );
        node.shutdown().await.unwrap();

        let mut c = site.config();
        c.guard_table.batch_size = 0;
        assert!(matches!(Node::start(c).await, Err(StartError::Table(_))));
        let mut c = site.config();
        c.max_io_bytes = 0;
        assert!(matches!(Node::start(c).await, Err(StartError::Config(_))));
        // A wrong node id for the version file.
        let mut c = site.config();
        c.node_id = 9;
        c.transport = Some(Transport::Tls(tls_files(&PeerIdentity::Node(9))));
        let e = Node::start(c).await.unwrap_err();
        assert!(e.to_string().contains("belongs to node 1"), "{e}");
    })
    .await;
}

/// Waits until `t` is refused as revoked (the node's maintenance task applies the store's
/// revocations; however long it takes, the test's own limit bounds the wait).
async fn revoked_soon(cluster: &Cluster, t: &GuardedToken) {
    loop {
        match cluster.read(t, 0, 1).await {
            // A pause between checks, not a guess at how long the node takes.
            Ok(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            Err(e) => {
                assert_eq!(e.kind(), Some(ErrorKind::Revoked), "{e}");
                return;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocations_in_the_store_revoke_guards_in_the_background() {
    bounded(async {
        let net = Net::start("store-revocations", 2, |_| {}).await;
        let site = &net.sites[0];
        let c = net.client(0);
        let all = Scope::new(Rights::READ, ByteRange::WHOLE, Expiry::NEVER);
        let from_cap = c.export(&site.cap, CTX, &ctx_key(), all).await.unwrap();
        let ro = Cap::mint(
            CapGrant::new(site.object, CTX, Protections::READ),
            &site.key,
        )
        .unwrap();
        let from_ro = c.export(&ro, CTX, &ctx_key(), all).await.unwrap();
        let elsewhere = net.export(1, Rights::READ, ByteRange::WHOLE).await;

        // One capability revoked in the store: its guards go, the other capability's stay.
        let id = site.cap.id();
        secctx::revocations::RevocationList::add(&site.store, |l| l.records.insert(id)).unwrap();
        revoked_soon(&net.cluster, &from_cap).await;
        assert!(net.cluster.read(&from_ro, 0, 1).await.is_ok());
        // A fresh export of the revoked capability is refused outright.
        assert_refused(
            c.export(&site.cap, CTX, &ctx_key(), all).await,
            ErrorKind::CapRevoked,
            "revoked",
        );

        // The object's key revoked in the store: every guard of the object goes.
        let kuid = site.kuid;
        secctx::revocations::RevocationList::add(&site.store, |l| l.keys.insert(kuid)).unwrap();
        revoked_soon(&net.cluster, &from_ro).await;
        assert_refused(
            c.export(&ro, CTX, &ctx_key(), all).await,
            ErrorKind::KeyRevoked,
            "revoked",
        );
        assert!(net.cluster.read(&elsewhere, 0, 1).await.is_ok());
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_grow_objects_only_up_to_the_nodes_limit() {
    bounded(async {
        let net = Net::start("too-large", 1, |c| c.max_object_bytes = 4096).await;
        let t = net.export(0, Rights::DATA, ByteRange::WHOLE).await;
        net.cluster.write(&t, 4090, b"676869").await.unwrap();
        assert_eq!(net.sites[0].stored().len(), 4096);
        let r = net.cluster.write(&t, 4090, b"0123456").await;
        assert_eq!(
            r.as_ref().unwrap_err().code(),
            Some(Code::ResourceExhausted)
        );
        assert_refused(r, ErrorKind::ObjectTooLarge, "at most 4096");
        assert_eq!(net.sites[0].stored().len(), 4096);
        net.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_nodes_in_one_process() {
    bounded(async {
        let n = 64u64;
        let started = std::time::Instant::now();
        // A loaded machine may take long to open 4,032 peer connections: no peer call may
        // fail for its time limit (5 s by default), which this test does not measure.
        let net = Net::start_broadcast_with("sixty-four", n, |_, c| {
            c.peer_timeout = Duration::from_secs(120);
        })
        .await;
        let start_time = started.elapsed();
        // Every node revokes one capability of its own: N (N - 1) requests in all.
        let t = std::time::Instant::now();
        let mut caps = Vec::new();
        for c in &net.clients {
            let cap = c.broadcast_issue().await.unwrap();
            let out = c.broadcast_revoke(cap).await.unwrap();
            assert_eq!(out.acks, (n - 1) as u32);
            caps.push(cap);
        }
        let revoke_time = t.elapsed();
        let statuses = net.statuses().await;
        let sent: u64 = statuses.iter().map(|s| s.counters.requests_sent).sum();
        assert_eq!(sent, n * (n - 1));
        for s in &statuses {
            assert_eq!(s.broadcast_revoked, n);
        }
        // The versioned path: one request at one node.
        let tok = net.export(17, Rights::all(), ByteRange::WHOLE).await;
        let before = net.statuses().await;
        net.cluster.revoke(&tok).await.unwrap();
        let after = net.statuses().await;
        let delta: u64 = after
            .iter()
            .zip(&before)
            .map(|(a, b)| {
                a.counters.requests_received - b.counters.requests_received
                    + a.counters.requests_sent
                    - b.counters.requests_sent
            })
            .sum();
        assert_eq!(delta, 1);
        eprintln!("64 nodes: start {start_time:?}, 64 broadcast revocations {revoke_time:?}");
        net.shutdown().await;
    })
    .await;
}
