//! The broadcast-revocation baseline: semantics and message counts, next to versioned guards.

use std::collections::{HashMap, VecDeque};

use dist_bridge::broadcast::BroadcastError;
use dist_bridge::*;

/// Delivers messages (through their wire encoding) until the network is quiet; returns how
/// many were delivered.
fn deliver(nodes: &HashMap<u64, BroadcastNode>, from: u64, out: Vec<Outgoing>) -> u64 {
    let mut queue: VecDeque<(u64, Outgoing)> = out.into_iter().map(|o| (from, o)).collect();
    let mut delivered = 0;
    while let Some((from, o)) = queue.pop_front() {
        let msg = BroadcastMessage::decode(&o.message.encode()).unwrap();
        let replies = nodes[&o.to].handle(from, msg).unwrap();
        delivered += 1;
        queue.extend(replies.into_iter().map(|r| (o.to, r)));
    }
    delivered
}

fn cluster(n: u64) -> HashMap<u64, BroadcastNode> {
    (0..n).map(|i| (i, BroadcastNode::new(i, 0..n))).collect()
}

#[test]
fn revocation_reaches_every_node() {
    let nodes = cluster(5);
    let cap = nodes[&2].issue().unwrap();
    for n in nodes.values() {
        assert!(n.check(cap).is_ok());
    }
    let out = nodes[&2].revoke(cap).unwrap();
    assert_eq!(out.len(), 4);
    // Revoked at the revoker at once; elsewhere only once the messages arrive.
    assert_eq!(nodes[&2].check(cap), Err(BroadcastError::Revoked(cap)));
    assert!(nodes[&3].check(cap).is_ok());
    assert!(!nodes[&2].is_complete(cap).unwrap());
    assert_eq!(deliver(&nodes, 2, out), 8);
    assert!(nodes[&2].is_complete(cap).unwrap());
    for n in nodes.values() {
        assert_eq!(n.check(cap), Err(BroadcastError::Revoked(cap)));
        assert_eq!(n.revoked_len().unwrap(), 1);
    }
    // Revoking again sends nothing.
    assert!(nodes[&2].revoke(cap).unwrap().is_empty());
    // Strangers are refused.
    assert_eq!(
        nodes[&0].handle(99, BroadcastMessage::Revoke(cap)),
        Err(BroadcastError::UnknownPeer(99))
    );
}

#[test]
fn message_counts_grow_with_the_cluster_unlike_versioned_guards() {
    for n in [2u64, 4, 8, 16] {
        let nodes = cluster(n);
        let revocations_per_node = 3;
        let mut total = 0;
        for node in nodes.values() {
            for _ in 0..revocations_per_node {
                let cap = node.issue().unwrap();
                let out = node.revoke(cap).unwrap();
                total += deliver(&nodes, node.node(), out);
            }
        }
        // 2 (N - 1) messages per revocation: O(N² K) over the cluster.
        assert_eq!(total, n * revocations_per_node * 2 * (n - 1));
        let sent: u64 = nodes.values().map(|x| x.counts().unwrap().sent).sum();
        let received: u64 = nodes.values().map(|x| x.counts().unwrap().received).sum();
        assert_eq!((sent, received), (total, total));
        for node in nodes.values() {
            assert_eq!(node.revoked_len().unwrap() as u64, n * revocations_per_node);
        }
    }
    // Versioned guards: a revocation is one request and one reply to the owner, whatever N;
    // no other node holds any state about it.
}
