//! `dist-bridge`'s core, without the network: the costs an owner adds to an RPC.
//!
//! - `export`: a signed capability becomes a guard and a token (verifies the capability);
//! - `check/<n>_caveats`: the owner's invocation check of a token's bytes with `n` offline
//!   attenuations (decode, tag chain, table lookup, rights and range): the capability check's
//!   added cost per invocation;
//! - `attenuate`: a holder narrows a token offline;
//! - `revoke`: export and revoke a guard (the owner's side of a revocation round trip);
//! - `broadcast_revoke/<N>`: the baseline's revocation in an N-node cluster, every message
//!   delivered in-process (`BroadcastNode::revoke` and every peer's `handle`);
//! - `difc_check/{unlabelled,labelled}`: the owner's invocation check as the node runs it for
//!   a version-1 token (`Owner::check`) and for a labelled version-2 one (`StoreLabels::new`
//!   over a `DbStore` plus `Owner::check_labelled`: the label table, the context's principal
//!   and the flow rule at every call, `docs/DIFC.md` §5.9), the same read of a public object
//!   by an unlabelled context, alternated in one run; and `difc_check/cached`, what `invoke`
//!   does since: `LabelCache::labels` (the node's kept read snapshot, the table decoded once per
//!   snapshot) plus `Owner::check_labelled`.

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dist_bridge::{
    BroadcastNode, ByteRange, ControllerId, ExportRequest, GuardTableConfig, MapKeys, NodeSecret,
    Op, Owner, Rights,
};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng;
use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, SigningKey, SigningScheme};

const NOW: u64 = 1_800_000_000_000_000_000;

fn bench_owner(c: &mut Criterion) {
    let mut g = c.benchmark_group("dist_core");
    g.measurement_time(Duration::from_secs(3));
    let (object, ctx) = (ObjID::new(0x1000), ObjID::new(0x2000));
    let key = SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(5));
    let cap = Cap::mint(
        CapGrant::new(object, ctx, Protections::READ | Protections::WRITE),
        &key,
    )
    .unwrap();
    let keys = MapKeys([(object, key.verifying_key())].into());
    let owner = Owner::new(
        ControllerId::new(1, 1),
        NodeSecret::generate().unwrap(),
        GuardTableConfig::default(),
    )
    .unwrap();
    let request = ExportRequest::new(ctx, Rights::all(), ByteRange::WHOLE);

    g.bench_function("export_and_revoke", |b| {
        b.iter(|| {
            let t = owner.export(&cap, &keys, &request, NOW).unwrap();
            owner.revoke(&t, NOW).unwrap()
        })
    });

    let token = owner.export(&cap, &keys, &request, NOW).unwrap();
    for n in [0usize, 1, 8] {
        let mut t = token.clone();
        for i in 0..n {
            let len = (1u64 << 30) >> (i + 1);
            t = t.with_range(ByteRange::new(0, len).unwrap()).unwrap();
        }
        let wire = t.encode();
        g.bench_function(BenchmarkId::new("check", format!("{n}_caveats")), |b| {
            b.iter(|| {
                owner
                    .check_bytes(black_box(&wire), Op::Read, 0, 64, NOW)
                    .unwrap()
            })
        });
    }
    g.bench_function("attenuate", |b| {
        b.iter(|| black_box(&token).with_rights(Rights::READ).unwrap())
    });
    g.finish();
}

fn bench_broadcast(c: &mut Criterion) {
    let mut g = c.benchmark_group("broadcast_revoke");
    g.measurement_time(Duration::from_secs(2));
    for n in [2u64, 4, 8, 16, 32, 64] {
        let nodes: Vec<BroadcastNode> = (0..n)
            .map(|i| BroadcastNode::new(i, (0..n).filter(|&p| p != i)))
            .collect();
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let cap = nodes[0].issue().unwrap();
                let mut sent = 0usize;
                let mut queue: Vec<(u64, _)> = nodes[0]
                    .revoke(cap)
                    .unwrap()
                    .into_iter()
                    .map(|o| (0, o))
                    .collect();
                while let Some((from, out)) = queue.pop() {
                    sent += 1;
                    let to = usize::try_from(out.to).unwrap();
                    let replies = nodes[to].handle(from, out.message).unwrap();
                    queue.extend(replies.into_iter().map(|r| (out.to, r)));
                }
                assert_eq!(sent as u64, 2 * (n - 1));
                sent
            })
        });
    }
    g.finish();
}

fn bench_difc(c: &mut Criterion) {
    use dist_bridge::difc::{DifcPolicy, StoreLabels};
    use secctx::{DbStore, ObjMeta, Object, context, keypair, labels};
    let dir = std::env::temp_dir().join(format!("dist-core-difc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = DbStore::open(&dir).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let (ids, key) = keypair::create_keypair(
        &store,
        SigningScheme::Ed25519,
        None,
        keypair::KdfParams::DEFAULT,
        &mut rng,
    )
    .unwrap();
    let (object, tag, secret, ctx) = (
        ObjID::new(0x1000),
        ObjID::new(0x7a9),
        ObjID::new(0x5ec),
        ObjID::new(0x2000),
    );
    for (id, label) in [
        (tag, None),
        (object, None),
        (
            secret,
            Some(twizzler_capsec::Label::from_tags(&[tag], &[]).unwrap()),
        ),
    ] {
        let o = Object {
            id,
            meta: ObjMeta::signed_by(ids.verifying),
            data: vec![0; 4096],
        };
        labels::create_object(&store, &o, label.as_ref(), None, NOW).unwrap();
    }
    context::create(&store, ctx, None).unwrap();
    let cap = Cap::mint(CapGrant::new(object, ctx, Protections::READ), &key).unwrap();
    let keys = dist_bridge::StoreKeys::new(&store).unwrap();
    let owner = Owner::new(
        ControllerId::new(1, 1),
        NodeSecret::generate().unwrap(),
        GuardTableConfig::default(),
    )
    .unwrap();
    let request = ExportRequest::new(ctx, Rights::READ, ByteRange::WHOLE);
    let plain = owner.export(&cap, &keys, &request, NOW).unwrap();
    let labelled = owner
        .export_labelled(
            &cap,
            &keys,
            &StoreLabels::new(&store).unwrap(),
            &request,
            NOW,
        )
        .unwrap();
    assert!(plain.labels().is_none() && labelled.labels().is_some());
    let policy = DifcPolicy::default();
    let cache = dist_bridge::difc::LabelCache::new(
        store.snapshot_reader(secctx::db_store::DEFAULT_MAX_AGE),
    );
    let mut g = c.benchmark_group("difc_check");
    g.measurement_time(Duration::from_secs(3));
    // Alternated: criterion runs one function's samples at a time, so each pair is measured
    // back to back in the same load, and the ratio is what is reported.
    for round in 0..2 {
        g.bench_function(BenchmarkId::new("unlabelled", round), |b| {
            b.iter(|| {
                owner
                    .check(black_box(&plain), Op::Read, 0, 64, NOW)
                    .unwrap()
            })
        });
        // The same labelled check, its labels read per call (`StoreLabels`) or from the
        // node's cache of its kept snapshot (`LabelCache`).
        fn check(
            owner: &Owner,
            token: &dist_bridge::GuardedToken,
            labels: &impl dist_bridge::difc::LabelSource,
            policy: &DifcPolicy,
        ) -> dist_bridge::Grant {
            owner
                .check_labelled(black_box(token), Op::Read, 0, 64, NOW, labels, policy, None)
                .unwrap()
        }
        g.bench_function(BenchmarkId::new("labelled", round), |b| {
            b.iter(|| {
                check(
                    &owner,
                    &labelled,
                    &StoreLabels::new(&store).unwrap(),
                    &policy,
                )
            })
        });
        g.bench_function(BenchmarkId::new("cached", round), |b| {
            b.iter(|| check(&owner, &labelled, &cache.labels().unwrap(), &policy))
        });
    }
    g.finish();
    drop(cache);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench_owner, bench_broadcast, bench_difc);
criterion_main!(benches);
