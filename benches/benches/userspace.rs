//! The userspace side (`secctx`): key-pair object creation, context creation, adding a
//! capability to contexts of 1, 10,000 and 1,000,000 entries, and simulator decisions, on the
//! database store (`DbStore`: a transaction, fsynced, on every change) and, to separate the
//! crypto and encoding from the disk, on the in-memory store.

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use secctx::keypair::{self, KdfParams};
use secctx::{
    AccessSimulator, DbStore, MemStore, ObjMeta, Object, ObjectStore, SimAccess, context,
};
use twizzler_capsec::{AccessKind, Cap, CapGrant, ObjID, Protections, SigningScheme};

const NOW: u64 = 1_800_000_000_000_000_000;

/// A fresh directory under the system's temp dir (removed when dropped).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "secctx-bench-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fresh_id(rng: &mut ChaCha20Rng) -> ObjID {
    ObjID::new(u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64()))
}

fn bench_keypairs(c: &mut Criterion) {
    let mut g = c.benchmark_group("keypair_create");
    g.measurement_time(Duration::from_secs(4));
    let dir = TempDir::new("kp");
    let disk = DbStore::open(&dir.0).unwrap();
    let mem = MemStore::new();
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    for (scheme, name) in [
        (SigningScheme::Ed25519, "ed25519"),
        (SigningScheme::EcdsaP256, "p256"),
    ] {
        g.bench_function(format!("{name}/db"), |b| {
            b.iter(|| {
                keypair::create_keypair(&disk, scheme, None, KdfParams::DEFAULT, &mut rng).unwrap()
            })
        });
        g.bench_function(format!("{name}/mem"), |b| {
            b.iter(|| {
                keypair::create_keypair(&mem, scheme, None, KdfParams::DEFAULT, &mut rng).unwrap()
            })
        });
    }
    g.sample_size(10);
    g.bench_function("ed25519/db/passphrase", |b| {
        b.iter(|| {
            keypair::create_keypair(
                &disk,
                SigningScheme::Ed25519,
                Some("correct horse battery staple"),
                KdfParams::DEFAULT,
                &mut rng,
            )
            .unwrap()
        })
    });
    g.finish();
}

fn bench_contexts(c: &mut Criterion) {
    let mut g = c.benchmark_group("context");
    g.measurement_time(Duration::from_secs(4));
    let dir = TempDir::new("ctx");
    let disk = DbStore::open(&dir.0).unwrap();
    let mem = MemStore::new();
    let mut rng = ChaCha20Rng::seed_from_u64(2);
    g.bench_function("create/db", |b| {
        b.iter(|| context::create(&disk, fresh_id(&mut rng), None).unwrap())
    });
    g.bench_function("create/mem", |b| {
        b.iter(|| context::create(&mem, fresh_id(&mut rng), None).unwrap())
    });

    // Contexts of 1, 10,000 and 1,000,000 capabilities (one real signature, reused: adding
    // does not verify), on disk; 10,000 also in memory.
    let (_, key) = keypair::create_keypair(
        &mem,
        SigningScheme::Ed25519,
        None,
        KdfParams::DEFAULT,
        &mut rng,
    )
    .unwrap();
    g.sample_size(10);
    let mut n = 0u128;
    for (i, size) in [1u128, 10_000, 1_000_000].into_iter().enumerate() {
        let ctx = ObjID::new(0xc7c7_0000 + i as u128);
        let first = Cap::mint(CapGrant::new(ObjID::new(1), ctx, Protections::READ), &key).unwrap();
        let mut ed = twizzler_capsec::SecCtxEditor::new();
        for j in 0..size {
            let grant = CapGrant::new(ObjID::new(0x1_0000 + j), ctx, Protections::READ);
            ed.add_cap(&Cap::from_parts(grant, *first.signature()));
        }
        let big = Object {
            id: ctx,
            meta: ObjMeta::plain(),
            // As `secctx` writes contexts: with room for its tables to grow in place.
            data: ed.encode_for_update(None).unwrap(),
        };
        drop(ed);
        eprintln!("context of {size} entries: {} bytes", big.data.len());
        disk.create(&big).unwrap();
        let name = format!("add_cap_to_{size}/db");
        let middle = ObjID::new(0x1_0000 + size / 2);
        add_cap_bench(&mut g, &name, &disk, &big, middle, &key, &mut n);
        if size == 10_000 {
            mem.create(&big).unwrap();
            add_cap_bench(
                &mut g,
                "add_cap_to_10000/mem",
                &mem,
                &big,
                middle,
                &key,
                &mut n,
            );
        }
    }
    g.finish();
}

/// Adds a freshly minted capability to context `ctx`, for a target in the middle of those it
/// has (`middle`: its entry goes in the middle of the sorted table, the average case). The
/// untimed setup mints it and puts the context back as it was (`original`), so every
/// iteration adds to a context of the same size.
fn add_cap_bench<S: ObjectStore>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    store: &S,
    original: &Object,
    middle: ObjID,
    key: &twizzler_capsec::SigningKey,
    n: &mut u128,
) {
    let ctx = original.id;
    g.bench_function(name, |b| {
        b.iter_batched(
            || {
                store
                    .update(ctx, |o| {
                        o.data.clone_from(&original.data);
                        Ok::<(), secctx::StoreError>(())
                    })
                    .unwrap();
                *n += 1;
                // A distinct record each time: same target, another expiry.
                let mut grant = CapGrant::new(middle, ctx, Protections::READ);
                grant.expires = twizzler_capsec::Expiry::from_raw(NOW + *n as u64);
                Cap::mint(grant, key).unwrap()
            },
            |cap| context::add_cap(store, ctx, &cap).unwrap(),
            BatchSize::PerIteration,
        )
    });
}

fn bench_simulator(c: &mut Criterion) {
    let mut g = c.benchmark_group("simulator");
    g.measurement_time(Duration::from_secs(4));
    let mem = MemStore::new();
    let mut rng = ChaCha20Rng::seed_from_u64(3);
    let (kp, key) = keypair::create_keypair(
        &mem,
        SigningScheme::Ed25519,
        None,
        KdfParams::DEFAULT,
        &mut rng,
    )
    .unwrap();
    let (file, ctx) = (ObjID::new(0xf11e), ObjID::new(0xc0));
    mem.create(&Object {
        id: file,
        meta: ObjMeta::signed_by(kp.verifying),
        data: vec![0; 16],
    })
    .unwrap();
    context::create(&mem, ctx, None).unwrap();
    context::add_cap(
        &mem,
        ctx,
        &Cap::mint(CapGrant::new(file, ctx, Protections::READ), &key).unwrap(),
    )
    .unwrap();
    let access = SimAccess {
        target: file,
        offset: 0x1000,
        kind: AccessKind::Read,
    };
    g.bench_function("load_and_check", |b| {
        b.iter(|| {
            let sim = AccessSimulator::load(&mem, &[ctx], &[file], NOW).unwrap();
            let s = sim.check(&[ctx], black_box(access));
            assert!(s.granted());
            s
        })
    });
    let sim = AccessSimulator::load(&mem, &[ctx], &[file], NOW).unwrap();
    g.bench_function("check_loaded", |b| {
        b.iter(|| sim.check(&[ctx], black_box(access)))
    });
    g.finish();
}

criterion_group!(benches, bench_keypairs, bench_contexts, bench_simulator);
criterion_main!(benches);
