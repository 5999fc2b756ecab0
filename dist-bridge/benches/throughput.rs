//! Invocations per second with 1, 8 and 64 requests in flight, against a bare tonic unary
//! echo service with the same messages, in the same run, with and without mutual TLS.
//!
//! - `node`: a dist-bridge node (its fixture: mTLS from the test CA, or `insecure`), a
//!   64-byte read through a token: decode, per-object gate, tag and scope check, ranged read
//!   from the store, reply.
//! - `echo`: the same generated `dist_bridge.v1.Node` service whose `Invoke` does nothing but
//!   answer 64 zero bytes (every other RPC is unimplemented): the cost of tonic, HTTP/2, TLS
//!   and protobuf alone. Same certificate, same client library, same request bytes
//!   (`support/echo.rs`, shared with `mtls_paired.rs`).
//!
//! Requests in flight are spread over `min(in_flight, 8)` connections (HTTP/2 streams on
//! each), as a client pool would. Server and clients share one 2-worker tokio runtime on
//! this 2-core machine, as in `rpc.rs`.
//!
//! Criterion reports invocations per second (`Throughput::Elements`). Before it, a fixed
//! run of each configuration prints p50 and p99 latency (and the rate) to stderr and to
//! `target/criterion/dist_throughput_latency.txt`.

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

#[path = "support/echo.rs"]
mod echo;
#[path = "../tests/it/net/mod.rs"]
mod net;

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dist_bridge::*;
use echo::{IN_FLIGHT, load, pool, start_echo};
use net::Net;

struct Target {
    name: &'static str,
    tls: bool,
    pools: Vec<(usize, Vec<NodeClient>)>,
}

fn bench_throughput(c: &mut Criterion) {
    let rt = net::bench_runtime();
    let mut nets = Vec::new();
    let mut targets = Vec::new();
    for tls in [true, false] {
        let net = rt.block_on(Net::start(
            if tls {
                "bench-tput-tls"
            } else {
                "bench-tput-plain"
            },
            1,
            |c| {
                if !tls {
                    c.transport = Some(Transport::Insecure);
                }
                c.max_streams_per_connection = 64;
            },
        ));
        // The node's token; the echo gets the same bytes (and ignores them).
        let t = rt.block_on(net.export(0, Rights::READ, ByteRange::WHOLE));
        let node_addr = net.nodes[0].addr();
        let echo_addr = rt.block_on(start_echo(tls));
        for (name, addr) in [("node", node_addr), ("echo", echo_addr)] {
            let pools = IN_FLIGHT
                .iter()
                .map(|&n| (n, rt.block_on(pool(addr, tls, n.min(8)))))
                .collect();
            targets.push((Target { name, tls, pools }, t.encode()));
        }
        nets.push(net);
    }

    // Latency percentiles and rate from a fixed run of each configuration.
    let mut report = String::from("target\ttls\tin_flight\trate/s\tp50_us\tp99_us\n");
    let quick = std::env::args().any(|a| a == "--test");
    // Criterion's filter (its first free argument) selects the fixed runs too.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    for (target, token) in &targets {
        for (n, clients) in &target.pools {
            let id = format!(
                "{}_{}/{n}",
                target.name,
                if target.tls { "mtls" } else { "plain" }
            );
            if filter.as_ref().is_some_and(|f| !id.contains(f.as_str())) {
                continue;
            }
            let total = if quick { 64 } else { 20_000 };
            rt.block_on(load(clients, token, *n, total.min(2_000))); // warm-up
            let (took, mut lat) = rt.block_on(load(clients, token, *n, total));
            lat.sort_unstable();
            let pct = |p: f64| {
                lat.get(((lat.len() as f64 * p) as usize).min(lat.len() - 1))
                    .map_or(0.0, |d| d.as_secs_f64() * 1e6)
            };
            let line = format!(
                "{}\t{}\t{}\t{:.0}\t{:.0}\t{:.0}\n",
                target.name,
                if target.tls { "mtls" } else { "plain" },
                n,
                total as f64 / took.as_secs_f64(),
                pct(0.50),
                pct(0.99)
            );
            eprint!("latency: {line}");
            report.push_str(&line);
        }
    }
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("../criterion/dist_throughput_latency.txt");
    let _ = std::fs::create_dir_all(out.parent().expect("parent"));
    let _ = std::fs::write(&out, report);

    let mut g = c.benchmark_group("dist_throughput");
    g.measurement_time(Duration::from_secs(4));
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    for (target, token) in &targets {
        for (n, clients) in &target.pools {
            let id = format!(
                "{}_{}",
                target.name,
                if target.tls { "mtls" } else { "plain" }
            );
            g.bench_with_input(BenchmarkId::new(id, n), n, |b, &n| {
                b.iter_custom(|iters| {
                    let total = usize::try_from(iters).unwrap_or(usize::MAX);
                    rt.block_on(load(clients, token, n, total)).0
                });
            });
        }
    }
    g.finish();
    drop(targets);
    for net in nets {
        rt.block_on(net.shutdown());
    }
}

criterion_group!(benches, bench_throughput);
criterion_main!(benches);
