//! `dist-bridge` over gRPC on loopback (tonic, one process, a multi-threaded tokio runtime):
//!
//! - the paper's Fig. 3 set: `create` (Export: verify a signed capability, make a guard and a
//!   token), `empty_rpc` (Status: an RPC that carries no capability), `invoke` (a 64-byte read
//!   through a token: the RPC with the capability check), `invoke_8_caveats` (the same with a
//!   token attenuated 8 times), `delegate_invoke` (attenuate offline, then invoke),
//!   `delegate_revoke` (derive a child guard at the owner, invoke through it, revoke it);
//! - revocation against cluster size N = 2 … 64: `versioned_revoke/N` (one Revoke RPC to the
//!   owner, whatever N; the guard it revokes is derived in the untimed setup) and `broadcast_revoke/N` (the baseline: the revoking node sends a
//!   Broadcast request to each of the N − 1 peers and waits for every reply).

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

#[path = "../tests/it/net/mod.rs"]
mod net;

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dist_bridge::{ByteRange, Rights, Scope};
use net::{Net, range};
use twizzler_capsec::Expiry;

fn bench_fig3(c: &mut Criterion) {
    let rt = net::bench_runtime();
    let net = rt.block_on(Net::start("bench-fig3", 2, |_| {}));
    let owner = net.client(0).clone();
    let root = rt.block_on(net.export(0, Rights::all(), ByteRange::WHOLE));
    let attenuated = (0..8).fold(root.clone(), |t, i| {
        t.with_range(range(0, (1u64 << 30) >> (i + 1))).unwrap()
    });
    let site = &net.sites[0];

    let ctx_key = net::ctx_key();
    let mut g = c.benchmark_group("dist_rpc");
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("create", |b| {
        b.iter(|| {
            rt.block_on(async {
                let t = owner
                    .export(
                        &site.cap,
                        net::CTX,
                        &ctx_key,
                        Scope::new(Rights::all(), ByteRange::WHOLE, Expiry::NEVER),
                    )
                    .await
                    .unwrap();
                // Keep the guard table from filling: revocation is measured below.
                owner.revoke(&t).await.unwrap();
            })
        })
    });
    g.bench_function("empty_rpc", |b| {
        b.iter(|| rt.block_on(owner.status()).unwrap())
    });
    g.bench_function("invoke", |b| {
        b.iter(|| rt.block_on(owner.read(&root, 0, 64)).unwrap())
    });
    g.bench_function("invoke_8_caveats", |b| {
        b.iter(|| rt.block_on(owner.read(&attenuated, 0, 64)).unwrap())
    });
    g.bench_function("delegate_invoke", |b| {
        b.iter(|| {
            let t = root.with_rights(Rights::READ).unwrap();
            rt.block_on(owner.read(&t, 0, 64)).unwrap()
        })
    });
    g.bench_function("delegate_revoke", |b| {
        b.iter(|| {
            rt.block_on(async {
                let scope =
                    Scope::new(Rights::READ | Rights::REVOKE, range(0, 4096), Expiry::NEVER);
                let child = owner.derive(&root, scope).await.unwrap();
                owner.read(&child, 0, 64).await.unwrap();
                owner.revoke(&child).await.unwrap();
            })
        })
    });
    g.finish();
    rt.block_on(net.shutdown());
}

fn bench_revocation_vs_n(c: &mut Criterion) {
    let rt = net::bench_runtime();
    let mut g = c.benchmark_group("revocation");
    g.measurement_time(Duration::from_secs(2));
    g.sample_size(30);
    for n in [2u64, 4, 8, 16, 32, 64] {
        let net = rt.block_on(Net::start_broadcast(&format!("bench-revoke-{n}"), n));
        let owner = net.client(0).clone();
        let root = rt.block_on(net.export(0, Rights::all(), ByteRange::WHOLE));
        let before = rt.block_on(net.statuses());
        let mut versioned = 0u64;
        g.bench_function(BenchmarkId::new("versioned_revoke", n), |b| {
            b.iter_batched(
                // A fresh child guard to revoke, derived at the owner (not timed). One per
                // iteration: a batch of them alive at once would meet the derived-guard quota.
                || {
                    let scope =
                        Scope::new(Rights::READ | Rights::REVOKE, range(0, 64), Expiry::NEVER);
                    rt.block_on(owner.derive(&root, scope)).unwrap()
                },
                |child| {
                    rt.block_on(owner.revoke(&child)).unwrap();
                    versioned += 1;
                },
                criterion::BatchSize::PerIteration,
            )
        });
        let after = rt.block_on(net.statuses());
        // No node but the owner saw any request, and the owner sent none.
        for (i, (a, b)) in after.iter().zip(&before).enumerate().skip(1) {
            assert_eq!(
                a.counters.requests_received, b.counters.requests_received,
                "node {i}"
            );
        }
        assert_eq!(
            after[0].counters.requests_sent,
            before[0].counters.requests_sent
        );
        let mut broadcasts = 0u64;
        g.bench_function(BenchmarkId::new("broadcast_revoke", n), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let cap = owner.broadcast_issue().await.unwrap();
                    let out = owner.broadcast_revoke(cap).await.unwrap();
                    assert!(out.complete);
                    assert_eq!(u64::from(out.peers_notified), n - 1);
                });
                broadcasts += 1;
            })
        });
        let end = rt.block_on(net.statuses());
        eprintln!(
            "revocation/{n}: versioned revokes {versioned} (plus as many derives): owner RPCs received {}, sent {}, other nodes received {}; broadcast revokes {broadcasts}: requests sent {}",
            after[0].counters.requests_received - before[0].counters.requests_received,
            after[0].counters.requests_sent - before[0].counters.requests_sent,
            after
                .iter()
                .skip(1)
                .map(|s| s.counters.requests_received)
                .sum::<u64>()
                - before
                    .iter()
                    .skip(1)
                    .map(|s| s.counters.requests_received)
                    .sum::<u64>(),
            end[0].counters.requests_sent - after[0].counters.requests_sent,
        );
        rt.block_on(net.shutdown());
    }
    g.finish();
}

criterion_group!(benches, bench_fig3, bench_revocation_vs_n);
criterion_main!(benches);
