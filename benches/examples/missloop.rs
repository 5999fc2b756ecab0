//! A loop of first faults (the cache flushed before each), for instruction counts that do not
//! depend on the machine's load: run it under `valgrind --tool=callgrind` with N and 2N
//! iterations and divide the difference by N (see `docs/BENCHMARKS.md`). `one`: one
//! page-gated read capability, faulting on its page; `pages`,
//! `reversed`, `shuffled`: 1,000 page-gated read capabilities in that order, faulting on the
//! page whose record the search reaches last (1,000, 1 and 500); `verify`: one raw Ed25519
//! `verify_strict` of 32 bytes, the reference.

// A benchmark harness: a failed setup stops the run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use benches::host::{CTX, INFO, PageOrder, obj, page_records_engine};
use kernel_hooks::{Decision, Fault, SecCtxMgr};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng;
use std::hint::black_box;
use twizzler_capsec::{AccessKind, SigningKey, SigningScheme};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(which), Some(n)) = (args.next(), args.next().and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: missloop one|pages|reversed|shuffled|verify ITERATIONS");
        std::process::exit(2);
    };
    let (order, page) = match which.as_str() {
        "one" => (PageOrder::Pages, 1),
        "pages" => (PageOrder::Pages, 1_000),
        "reversed" => (PageOrder::Reversed, 1),
        "shuffled" => (PageOrder::Shuffled, 500),
        "verify" => (PageOrder::Pages, 0),
        other => {
            eprintln!("missloop: unknown case {other:?}");
            std::process::exit(2);
        }
    };
    let key = SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(1));
    let start = std::time::Instant::now();
    if page == 0 {
        let vk = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let msg = [5u8; 32];
        let sig = ed25519_dalek::Signer::sign(&vk, &msg);
        let vk = vk.verifying_key();
        for _ in 0..n {
            black_box(vk.verify_strict(black_box(&msg), black_box(&sig)).is_ok());
        }
    } else {
        let k = if which == "one" { 1 } else { 1_000 };
        let e = page_records_engine(k, order, &key);
        let t = SecCtxMgr::new(CTX);
        let f = Fault::new(obj(0), INFO, page * 4096, AccessKind::Read);
        for _ in 0..n {
            e.flush();
            let d = e.decide(&t, black_box(&f));
            assert!(matches!(d, Decision::Map { .. }));
        }
    }
    eprintln!(
        "{which}: {:.2} ns/iter",
        start.elapsed().as_nanos() as f64 / n as f64
    );
}
