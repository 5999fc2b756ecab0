//! A loop of one kind of fault, for instruction counts that do not depend on the machine's
//! load: run it under `valgrind --tool=callgrind` with N and 2N iterations and divide the
//! difference by N (see `docs/BENCHMARKS.md`). `engine`: a granted hit; `fresh`: the same with a fault built for each decision, as the
//! paired benchmark builds it; `deny`: a repeated
//! denial (one badly signed record); `gated`: a page-gated hit (sixteen page records of
//! adjacent pages, read in turn, as `issue20_hit/gated/16`); `scattered`: sixteen page records that are not
//! adjacent, read in turn (a miss each, as `issue20_hit/gated_scattered/64`); `kernel`: the
//! reproduction of upstream's check with upstream's kernel mutex; anything else: the
//! reproduction with `spin::Mutex` in its place.

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use benches::host::{CTX, INFO, PageOrder, denial_engine, fault_engine, obj, page_records_engine};
use kernel_hooks::{Fault, SecCtxMgr};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng;
use std::hint::black_box;
use twizzler_capsec::{AccessKind, Protections, SigningKey, SigningScheme};
fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(which), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: hitloop engine|fresh|deny|gated|scattered|upstream|kernel ITERATIONS");
        std::process::exit(2);
    };
    let which = which.as_str();
    let key = SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(1));
    let wrong = SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(2));
    let e = fault_engine(1, &key, false, 1);
    let d = denial_engine(1, &key, &wrong, true);
    let t = SecCtxMgr::new(CTX);
    let up = benches::upstream::SecCtxMgr::with_cached(CTX, 1);
    let up_kernel = benches::upstream::KernelSecCtxMgr::with_cached(CTX, 1);
    let f = Fault::new(obj(0), INFO, 4096, AccessKind::Read);
    let _ = black_box(e.decide(&t, &f));
    let _ = black_box(d.decide(&t, &f));
    let start = std::time::Instant::now();
    match which {
        "engine" => {
            for _ in 0..n {
                let _ = black_box(e.decide(&t, black_box(&f)));
            }
        }
        "fresh" => {
            // As the paired benchmark's hit: a fault built for each decision, pages 1..=16.
            let mut page = 0u64;
            for _ in 0..n {
                page = page % 16 + 1;
                let f = Fault::new(obj(0), INFO, page * 4096, AccessKind::Read);
                let _ = black_box(e.decide(&t, black_box(&f)));
            }
        }
        "gated" => {
            let e = page_records_engine(16, PageOrder::Pages, &key);
            for p in 1..=16u64 {
                let _ = e.decide(&t, &Fault::new(obj(0), INFO, p * 4096, AccessKind::Read));
            }
            for i in 0..n {
                let f = Fault::new(obj(0), INFO, (i % 16 + 1) * 4096, AccessKind::Read);
                let _ = black_box(e.decide(&t, black_box(&f)));
            }
        }
        "scattered" => {
            let e = page_records_engine(64, PageOrder::Pages, &key);
            let pages: Vec<u64> = (0..16).map(|i| 1 + (i * 61) % 64).collect();
            for p in &pages {
                let _ = e.decide(&t, &Fault::new(obj(0), INFO, p * 4096, AccessKind::Read));
            }
            for i in 0..n {
                let p = pages[(i % 16) as usize];
                let f = Fault::new(obj(0), INFO, p * 4096, AccessKind::Read);
                let _ = black_box(e.decide(&t, black_box(&f)));
            }
        }
        "deny" => {
            for _ in 0..n {
                let _ = black_box(d.decide(&t, black_box(&f)));
            }
        }
        "kernel" => {
            for _ in 0..n {
                black_box(up_kernel.fault(black_box(obj(0)), black_box(Protections::READ)));
            }
        }
        _ => {
            for _ in 0..n {
                black_box(up.fault(black_box(obj(0)), black_box(Protections::READ)));
            }
        }
    }
    eprintln!(
        "{which}: {:.2} ns/iter",
        start.elapsed().as_nanos() as f64 / n as f64
    );
}
