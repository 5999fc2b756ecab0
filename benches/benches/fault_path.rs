//! The page-fault decision (`kernel_hooks::Engine::decide`): cache hits and misses with
//! contexts of 1, 100 and 10,000 records, a miss after a context edit, and the hit rate and
//! cost per fault under a stream of invalidations.
//!
//! Each context holds one read-write capability per object; faults are reads of page 1..16 of
//! one of them. A "miss" is measured after `Engine::flush` (untimed, in the batch setup), so it
//! decodes, hashes and verifies the object's record; the context's validation is remembered
//! across the flush, as it is across faults in a kernel.

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use benches::host::{BenchHost, CTX, INFO, denial_engine, fault_engine, obj};
use criterion::{BatchSize, Bencher, BenchmarkId, Criterion, criterion_group, criterion_main};
use kernel_hooks::{Decision, Engine, Fault, SecCtxMgr};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng;
use twizzler_capsec::{AccessKind, Protections, SigningKey, SigningScheme};

const SIZES: [u128; 3] = [1, 100, 10_000];

fn engine(
    n: u128,
    scheme: SigningScheme,
    sign_all: bool,
    versions: usize,
) -> Box<Engine<BenchHost>> {
    let key = SigningKey::generate(scheme, &mut ChaCha20Rng::seed_from_u64(n as u64));
    fault_engine(n, &key, sign_all, versions)
}

fn read(page: u64) -> Fault {
    Fault::new(obj(0), INFO, page * 4096, AccessKind::Read)
}

/// Times a miss on page 1: `flush` (untimed) before each decision, so the decision verifies.
fn cold_miss(b: &mut Bencher<'_>, e: &Engine<BenchHost>, t: &SecCtxMgr) {
    b.iter_batched(
        || {
            e.flush();
        },
        |()| e.decide(t, black_box(&read(1))),
        BatchSize::PerIteration,
    )
}

fn check(d: Decision) {
    assert!(matches!(d, Decision::Map { .. }), "{d:?}");
}

fn bench_decide(c: &mut Criterion) {
    for (scheme, label) in [
        (SigningScheme::Ed25519, "ed25519"),
        (SigningScheme::EcdsaP256, "p256"),
    ] {
        let mut hit = c.benchmark_group(format!("decide_hit/{label}"));
        hit.measurement_time(Duration::from_secs(3));
        for n in SIZES {
            let e = engine(n, scheme, false, 1);
            let t = SecCtxMgr::new(CTX);
            check(e.decide(&t, &read(1)));
            let mut page = 0u64;
            hit.bench_function(BenchmarkId::from_parameter(n), |b| {
                b.iter(|| {
                    page = page % 16 + 1;
                    e.decide(&t, black_box(&read(page)))
                })
            });
        }
        hit.finish();

        let mut miss = c.benchmark_group(format!("decide_miss/{label}"));
        miss.measurement_time(Duration::from_secs(4));
        for n in SIZES {
            let e = engine(n, scheme, false, 1);
            let t = SecCtxMgr::new(CTX);
            check(e.decide(&t, &read(1)));
            miss.bench_function(BenchmarkId::from_parameter(n), |b| cold_miss(b, &e, &t));
        }
        miss.finish();
    }

    // A context edit: the generation changes, the context is validated again, the record is
    // still in the memo, so no signature is verified.
    let mut edit = c.benchmark_group("decide_miss_after_edit/ed25519");
    edit.measurement_time(Duration::from_secs(3));
    for n in SIZES {
        let e = engine(n, SigningScheme::Ed25519, false, 2);
        let t = SecCtxMgr::new(CTX);
        check(e.decide(&t, &read(1)));
        edit.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_batched(
                || {
                    e.host().next_version();
                    e.invalidate_ctx(CTX);
                },
                |()| e.decide(&t, black_box(&read(1))),
                BatchSize::PerIteration,
            )
        });
    }
    edit.finish();

    let mut flush = c.benchmark_group("engine_flush");
    let e = engine(1, SigningScheme::Ed25519, false, 1);
    flush.bench_function("empty", |b| b.iter(|| e.flush()));
    flush.finish();
}

/// Faults on 64 objects in turn with an invalidation every `every` faults: a context edit
/// (generation bump), or `invalidate_ctx`. Reports the time per fault and the hit rate.
fn bench_invalidation_stream(c: &mut Criterion) {
    let mut g = c.benchmark_group("invalidation_stream");
    g.measurement_time(Duration::from_secs(4));
    for (kind, every) in [
        ("none", 0usize),
        ("edit", 1000),
        ("edit", 100),
        ("edit", 10),
        ("invalidate_ctx", 100),
    ] {
        // All 64 objects are faulted on, so every record carries its own signature; 2,048
        // versions so that every edit moves to a generation no cache entry has seen lately.
        let e = engine(64, SigningScheme::Ed25519, true, 2048);
        let t = SecCtxMgr::new(CTX);
        let name = if every == 0 {
            kind.to_string()
        } else {
            format!("{kind}_every_{every}")
        };
        let before = e.stats();
        let mut n = 0usize;
        g.bench_function(name.as_str(), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    n += 1;
                    if every != 0 && n.is_multiple_of(every) {
                        // A kernel learns of an edit from the write fault and invalidates.
                        if kind == "edit" {
                            e.host().next_version();
                        }
                        e.invalidate_ctx(CTX);
                    }
                    let f = Fault::new(
                        obj((n % 64) as u128),
                        INFO,
                        4096 * (1 + (n % 7) as u64),
                        AccessKind::Read,
                    );
                    let _ = black_box(e.decide(&t, &f));
                }
                start.elapsed()
            })
        });
        let s = e.stats();
        let (hits, misses) = (s.hits - before.hits, s.misses - before.misses);
        eprintln!(
            "invalidation_stream/{name}: hit rate {:.2}% ({hits} hits, {misses} misses, {} signature verifications, {} memo hits)",
            100.0 * hits as f64 / (hits + misses).max(1) as f64,
            s.verifies - before.verifies,
            s.memo_hits - before.memo_hits,
        );
    }
    g.finish();
}

/// A miss (after `flush`, so nothing is remembered) with 1, 4, 5, 16 and 64 valid records for
/// the faulting object, each with its own gate, all covering the faulting page: the first
/// grants, so the miss verifies one signature whatever the number of records.
fn bench_miss_records(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide_miss_records");
    g.measurement_time(Duration::from_secs(5));
    g.sample_size(20);
    let key = SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(5));
    for k in [1u64, 4, 5, 16, 64] {
        let e = benches::host::records_engine(k, &key);
        let t = SecCtxMgr::new(CTX);
        check(e.decide(&t, &read(1)));
        assert_eq!(
            e.stats().verifies,
            1,
            "a miss verifies the one record it needs"
        );
        g.bench_function(BenchmarkId::from_parameter(k), |b| cold_miss(b, &e, &t));
    }
    g.finish();
}

/// Our hit against upstream Twizzler's cached check (`benches::upstream`), in one group and
/// one run: the same object, the same kind of fault, caches holding 1, 100 and 10,000 objects'
/// decisions (ours holds at most its capacity; the entry faulted on is always present). Ours
/// checks the generation, epoch, `kuid`, expiry and gates on every hit; upstream's checks
/// none of them.
fn bench_versus_upstream(c: &mut Criterion) {
    let mut g = c.benchmark_group("hit_vs_upstream");
    g.measurement_time(Duration::from_secs(3));
    for n in SIZES {
        let up = benches::upstream::SecCtxMgr::with_cached(CTX, n);
        let target = obj(n / 2);
        assert!(up.fault(target, Protections::READ).is_some());
        g.bench_function(BenchmarkId::new("upstream_btreemap", n), |b| {
            b.iter(|| up.fault(black_box(target), black_box(Protections::READ)))
        });
        let e = engine(n, SigningScheme::Ed25519, false, 1);
        let t = SecCtxMgr::new(CTX);
        check(e.decide(&t, &read(1)));
        let mut page = 0u64;
        g.bench_function(BenchmarkId::new("engine_decide", n), |b| {
            b.iter(|| {
                page = page % 16 + 1;
                e.decide(&t, black_box(&read(page)))
            })
        });
    }
    // A capability with a data gate (page 1 only): the entry has no page-independent summary,
    // so the hit decodes its grant and applies the rule to it.
    let key = SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(7));
    let e = benches::host::records_engine(1, &key);
    let t = SecCtxMgr::new(CTX);
    check(e.decide(&t, &read(1)));
    g.bench_function("engine_decide_gated", |b| {
        b.iter(|| e.decide(&t, black_box(&read(1))))
    });
    g.finish();
}

/// Hits from several threads sharing one engine (the machine has two cores): every thread on
/// the same object (one cache set, its spinlock contended) or each on its own object (its own
/// set). Time per decision, as seen by one thread.
fn bench_contention(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide_hit_contended");
    g.measurement_time(Duration::from_secs(3));
    // Two objects, each with its own signed capability, both warm.
    let e = engine(2, SigningScheme::Ed25519, true, 1);
    for (target, name) in [(0u128, "same_object"), (1, "own_object")] {
        for threads in [1usize, 2] {
            let id = BenchmarkId::new(name, format!("{threads}_threads"));
            g.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    std::thread::scope(|s| {
                        let workers: Vec<_> = (0..threads)
                            .map(|k| {
                                let e = &e;
                                // Thread 0 always faults on object 0; the others on `target`
                                // (object 0 again, or object 1).
                                let obj_i = if k == 0 { 0 } else { target };
                                s.spawn(move || {
                                    let t = SecCtxMgr::new(CTX);
                                    let f = Fault::new(obj(obj_i), INFO, 4096, AccessKind::Read);
                                    check(e.decide(&t, &f));
                                    let start = Instant::now();
                                    for _ in 0..iters {
                                        let _ = black_box(e.decide(&t, black_box(&f)));
                                    }
                                    start.elapsed()
                                })
                            })
                            .collect();
                        // Thread 0's time: what one CPU sees while the others run.
                        let times: Vec<Duration> = workers
                            .into_iter()
                            .map(|w| w.join().unwrap_or_default())
                            .collect();
                        times.first().copied().unwrap_or_default()
                    })
                })
            });
        }
    }
    g.finish();
}

/// A repeated denied fault against a hit, in one group: the denial is cached and explained
/// from the cache entry, so it should cost about a hit whatever the context holds.
fn bench_denials(c: &mut Criterion) {
    let mut g = c.benchmark_group("denied_repeat");
    g.measurement_time(Duration::from_secs(3));
    let key = SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(1));
    let wrong = SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(2));
    let t = SecCtxMgr::new(CTX);
    // The reference: a granted hit.
    let granted = engine(1, SigningScheme::Ed25519, false, 1);
    check(granted.decide(&t, &read(1)));
    g.bench_function("hit_granted", |b| {
        b.iter(|| granted.decide(&t, black_box(&read(1))))
    });
    for (name, n, bad) in [
        ("bad_records/1", 1u128, true),
        ("bad_records/2000", 2_000, true),
        ("other_objects/1000000", 1_000_000, false),
    ] {
        let e = denial_engine(n, &key, &wrong, bad);
        let first = Instant::now();
        let d = e.decide(&t, &read(1));
        assert!(matches!(d, Decision::Violation(_)), "{name}: {d:?}");
        eprintln!(
            "denied_repeat/{name}: first fault {:?}, {} signatures checked",
            first.elapsed(),
            e.stats().verifies + e.stats().failed_verifies
        );
        g.bench_function(name, |b| b.iter(|| e.decide(&t, black_box(&read(1)))));
    }
    // A valid capability whose record the host has revoked.
    let mut e = engine(1, SigningScheme::Ed25519, false, 1);
    let ctx = e.host().versions[0].clone();
    let parsed = twizzler_capsec::SecCtx::parse(&ctx).expect("the benchmark context parses");
    let id = parsed
        .entries_for(obj(0))
        .next()
        .and_then(|en| en.record().ok())
        .map(|r| r.id())
        .expect("object 0 has a record");
    e.host_mut().revoked_records.insert(id);
    let d = e.decide(&t, &read(1));
    assert!(matches!(d, Decision::Violation(_)), "revoked: {d:?}");
    g.bench_function("revoked_record/1", |b| {
        b.iter(|| e.decide(&t, black_box(&read(1))))
    });
    g.finish();
}

/// A miss with 0, 1,000 and 1,000,000 revoked records in the host's set: the engine keeps no
/// table, and the host's hash set answers in constant time, so the cost should be flat.
fn bench_revoked(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide_miss_revoked");
    g.measurement_time(Duration::from_secs(3));
    for n in [0u64, 1_000, 1_000_000] {
        let mut e = engine(1, SigningScheme::Ed25519, false, 1);
        let host = &mut e.host_mut().revoked_records;
        for i in 0..n {
            let mut id = [0u8; 32];
            id[..8].copy_from_slice(&i.to_le_bytes());
            host.insert(twizzler_capsec::RecordId(id));
        }
        let t = SecCtxMgr::new(CTX);
        check(e.decide(&t, &read(1)));
        g.bench_function(BenchmarkId::from_parameter(n), |b| cold_miss(b, &e, &t));
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_decide,
    bench_versus_upstream,
    bench_miss_records,
    bench_invalidation_stream,
    bench_contention,
    bench_denials,
    bench_revoked
);
criterion_main!(benches);
