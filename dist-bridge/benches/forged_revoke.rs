//! Issue 25, defect 2: honest 1-byte reads of an object X beside a writer of 1 MiB to X
//! (each write a store transaction with its fsync, holding X's gate shared while it runs),
//! alone and beside forged `Revoke`s: tokens whose tag the owner never made, naming X, or,
//! as the control with the same cost to the node, naming another object Y. Before the fix a
//! forged revoke naming X took X's gate exclusively, waiting behind the write in progress
//! while X's reads queued behind it; now the owner refuses it on its tag before any gate, so
//! reads of X should fare the same beside forgeries naming X as beside forgeries naming Y.
//! Forgeries come at about 1,000 a second (the issue measured 3,300 in 4 s) or as a flood
//! (8 in flight at all times).
//!
//! One node on loopback (tonic, mutual TLS), client and node in one process on the bench
//! runtime (2 workers); the writer and the forgers are tasks on the same runtime.

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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dist_bridge::{ByteRange, NodeClient, Rights};
use net::Net;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// Bytes per write.
const WRITE: usize = 1 << 20;
/// Where the object id lies in an encoded token (see `token.rs`).
const OBJECT_AT: std::ops::Range<usize> = 36..52;

/// What forges during a measurement: the bytes, senders in flight, at most one per this long.
type Forging<'a> = Option<(&'a [u8], usize, Option<Duration>)>;

/// Forgers sending `forged` until `stop`: `in_flight` at once, each at most one every
/// `every` if given. Counts the refusals.
fn forgers(
    rt: &Runtime,
    client: &NodeClient,
    forged: &[u8],
    in_flight: usize,
    every: Option<Duration>,
    stop: &Arc<AtomicBool>,
    refused: &Arc<AtomicU64>,
) -> Vec<JoinHandle<()>> {
    (0..in_flight)
        .map(|_| {
            let (client, forged, stop, refused) = (
                client.clone(),
                forged.to_vec(),
                stop.clone(),
                refused.clone(),
            );
            rt.spawn(async move {
                let mut tick = every.map(|e| {
                    let mut t = tokio::time::interval(e);
                    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                    t
                });
                while !stop.load(Ordering::Relaxed) {
                    if let Some(t) = tick.as_mut() {
                        t.tick().await;
                    }
                    assert!(client.revoke_bytes(forged.clone()).await.is_err());
                    refused.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

fn bench_forged_revoke(c: &mut Criterion) {
    let rt = net::bench_runtime();
    let net = rt.block_on(Net::start("bench-forged-revoke", 1, |_| {}));
    let client = net.client(0).clone();
    let token = rt.block_on(net.export(0, Rights::all(), ByteRange::WHOLE));
    let mut forged_x = token.encode();
    if let Some(last) = forged_x.last_mut() {
        *last ^= 1;
    }
    let mut forged_y = forged_x.clone();
    forged_y[OBJECT_AT].copy_from_slice(&0xbeef_u128.to_le_bytes());

    let stop_writer = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let (client, token, stop, writes) = (
            client.clone(),
            token.clone(),
            stop_writer.clone(),
            writes.clone(),
        );
        rt.spawn(async move {
            let data = vec![0x5a; WRITE];
            while !stop.load(Ordering::Relaxed) {
                client.write(&token, 0, &data).await.expect("a write");
                writes.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let mut g = c.benchmark_group("forged_revoke");
    let variants: [(&str, Forging); 5] = [
        ("writer_only", None),
        (
            "forged_x_1000_per_s",
            Some((&forged_x, 1, Some(Duration::from_millis(1)))),
        ),
        (
            "forged_y_1000_per_s",
            Some((&forged_y, 1, Some(Duration::from_millis(1)))),
        ),
        ("forged_x_flood", Some((&forged_x, 8, None))),
        ("forged_y_flood", Some((&forged_y, 8, None))),
    ];
    for (name, forging) in variants {
        let stop = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let tasks = forging.map_or_else(Vec::new, |(bytes, n, every)| {
            forgers(&rt, &client, bytes, n, every, &stop, &refused)
        });
        writes.store(0, Ordering::Relaxed);
        let started = std::time::Instant::now();
        g.bench_function(format!("read_1B/{name}"), |b| {
            b.iter(|| rt.block_on(client.read(&token, 0, 1)).expect("a read"))
        });
        let secs = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        rt.block_on(async {
            for t in tasks {
                t.await.expect("forger");
            }
        });
        eprintln!(
            "{name}: {:.0} writes of 1 MiB and {:.0} forged revokes refused a second",
            writes.load(Ordering::Relaxed) as f64 / secs,
            refused.load(Ordering::Relaxed) as f64 / secs
        );
    }
    g.finish();
    stop_writer.store(true, Ordering::Relaxed);
    rt.block_on(writer).expect("writer");
    rt.block_on(net.shutdown());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = bench_forged_revoke
}
criterion_main!(benches);
