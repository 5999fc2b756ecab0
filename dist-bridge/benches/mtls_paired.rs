//! Issue 20: invoke over mutual TLS against a bare tonic echo over the same rustls,
//! interleaved, at 1, 8 and 64 requests in flight.
//!
//! `throughput.rs` runs the node and the echo one after the other, minutes apart; on a
//! shared 2-core machine the speed of a core drifts by 2x over that time, and its ratios at
//! 8 and 64 in flight moved between 0.6x and 1.65x from run to run. Here both servers run in
//! the same process at once, and the load alternates blocks of requests between them
//! (node then echo, echo then node, ...) for a few seconds per depth, as
//! `benches/benches/paired.rs` does for the engine. Every round gives one ratio of rates
//! (node / echo, over the same number of requests); the report is the median ratio with a
//! distribution-free 95% confidence interval, and each side's p50 and p99 latency over all
//! its rounds.
//!
//! - `node`: a dist-bridge node with mutual TLS (the test CA's certificates), a 64-byte read
//!   through a token: decode, per-object gate, tag and scope check, read from the store's
//!   snapshot, reply.
//! - `echo`: `support/echo.rs`, served by tonic's own server with node 1's certificate.
//!
//! Requests in flight are spread over `min(in_flight, 8)` connections per server. Servers
//! and clients share one 2-worker tokio runtime (`net::bench_runtime`).
//!
//! `cargo bench -p dist-bridge --bench mtls_paired [-- [--test] [--secs N] [FILTER]]`:
//! `--test` runs two tiny rounds per depth (a smoke test); `--secs` sets the time per depth
//! (default 8); FILTER keeps the depths whose name (`mtls/1`, `mtls/8`, `mtls/64`) contains
//! it. `--only node` or `--only echo` loads one side alone for the time per depth and
//! prints its rate (for a profiler). Criterion's other flags are accepted and ignored. The
//! table goes to stderr and to `target/criterion/dist_mtls_paired.txt`.

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

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use dist_bridge::*;
use echo::{IN_FLIGHT, load, pool, start_echo};
use net::Net;

/// Requests per block at `in_flight`: about 20 per request slot at 64, and enough at 1 and 8
/// that a block lasts tens of milliseconds (a few scheduler ticks).
fn block_size(in_flight: usize) -> usize {
    (in_flight * 20).max(200 * in_flight.min(2))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The order-statistic 95% confidence interval of the median of `sorted`: ranks
/// n/2 -+ 0.98 sqrt(n).
fn ci(sorted: &[f64]) -> (f64, f64) {
    let n = sorted.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let half = 0.98 * (n as f64).sqrt();
    let lo = ((n as f64 / 2.0 - half).floor().max(0.0)) as usize;
    let hi = ((n as f64 / 2.0 + half).ceil() as usize).min(n - 1);
    (sorted[lo], sorted[hi])
}

/// The `p` quantile of `sorted`, in µs.
fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1)))
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

/// One side's measurements over every round.
#[derive(Default)]
struct Side {
    rates: Vec<f64>,
    latencies: Vec<Duration>,
}

impl Side {
    fn add(&mut self, n: usize, (took, lat): (Duration, Vec<Duration>)) -> f64 {
        let rate = n as f64 / took.as_secs_f64();
        self.rates.push(rate);
        self.latencies.extend(lat);
        rate
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--test");
    let secs = args
        .iter()
        .position(|a| a == "--secs")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(8.0);
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    // The first free argument that is no option's value, as criterion's filter would be.
    let filter = args
        .iter()
        .enumerate()
        .find(|(i, a)| {
            !a.starts_with('-')
                && (*i == 0
                    || args
                        .get(i - 1)
                        .is_none_or(|p| p != "--secs" && p != "--only"))
        })
        .map(|(_, a)| a.clone());
    let budget = Duration::from_secs_f64(if quick { 0.0 } else { secs });

    let rt = net::bench_runtime();
    let net = rt.block_on(Net::start("bench-mtls-paired", 1, |c| {
        c.max_streams_per_connection = 64;
    }));
    let token = rt
        .block_on(net.export(0, Rights::READ, ByteRange::WHOLE))
        .encode();
    let node_addr = net.nodes[0].addr();
    let echo_addr = rt.block_on(start_echo(true));

    let mut report = format!(
        "# mtls_paired: node / echo, interleaved blocks; load at start {}\n\
         depth\tblock\trounds\tratio\tci_lo\tci_hi\tnode_rate\techo_rate\tnode_p50_us\techo_p50_us\tp50_ratio\tnode_p99_us\techo_p99_us\n",
        loadavg()
    );
    eprint!("{report}");
    for depth in IN_FLIGHT {
        let name = format!("mtls/{depth}");
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let conns = depth.min(8);
        let node = rt.block_on(pool(node_addr, true, conns));
        let echo = rt.block_on(pool(echo_addr, true, conns));
        let block = if quick { 16 } else { block_size(depth) };
        // Warm-up: connections, the node's snapshot, the allocator's pools.
        for _ in 0..if quick { 1 } else { 3 } {
            rt.block_on(load(&node, &token, depth, block));
            rt.block_on(load(&echo, &token, depth, block));
        }
        if let Some(side) = &only {
            let clients = if side == "echo" { &echo } else { &node };
            let (mut served, start) = (0usize, Instant::now());
            while start.elapsed() < budget || served == 0 {
                rt.block_on(load(clients, &token, depth, block));
                served += block;
            }
            eprintln!(
                "{side} alone at {depth} in flight: {:.0}/s",
                served as f64 / start.elapsed().as_secs_f64()
            );
            continue;
        }
        let (mut n_side, mut e_side) = (Side::default(), Side::default());
        let mut ratios = Vec::new();
        let start = Instant::now();
        let mut round = 0usize;
        while start.elapsed() < budget || round < 2 {
            let (rn, re) = if round.is_multiple_of(2) {
                let rn = n_side.add(block, rt.block_on(load(&node, &token, depth, block)));
                (
                    rn,
                    e_side.add(block, rt.block_on(load(&echo, &token, depth, block))),
                )
            } else {
                let re = e_side.add(block, rt.block_on(load(&echo, &token, depth, block)));
                (
                    n_side.add(block, rt.block_on(load(&node, &token, depth, block))),
                    re,
                )
            };
            ratios.push(rn / re);
            round += 1;
        }
        let ratio = median(&mut ratios);
        let (lo, hi) = ci(&ratios);
        n_side.latencies.sort_unstable();
        e_side.latencies.sort_unstable();
        let (np50, ep50) = (pct(&n_side.latencies, 0.5), pct(&e_side.latencies, 0.5));
        let line = format!(
            "{depth}\t{block}\t{round}\t{ratio:.3}\t{lo:.3}\t{hi:.3}\t{:.0}\t{:.0}\t{np50:.1}\t{ep50:.1}\t{:.3}\t{:.0}\t{:.0}\n",
            median(&mut n_side.rates),
            median(&mut e_side.rates),
            ep50 / np50,
            pct(&n_side.latencies, 0.99),
            pct(&e_side.latencies, 0.99),
        );
        eprint!("{line}");
        report.push_str(&line);
    }
    let _ = writeln!(report, "# load at end {}", loadavg());
    eprintln!("# load at end {}", loadavg());
    let out =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("../criterion/dist_mtls_paired.txt");
    let _ = std::fs::create_dir_all(out.parent().expect("parent"));
    let _ = std::fs::write(&out, report);
    rt.block_on(net.shutdown());
}
