//! Criterion benchmarks of `twizzler-security`: key generation, capability minting and
//! verification, the raw signature primitives they are built on, hashing, security-context
//! parsing and lookup, and the end-to-end permission decision for one page fault.
//!
//! Run with `cargo bench -p benches -- --noplot` (add a filter such as `cap_verify` to run a
//! subset). Results, the machine they were taken on and the reference figures they are compared
//! with are in `docs/BENCHMARKS.md`.
//!
//! Benchmark names (`group/function/parameter`) are stable: `docs/BENCHMARKS.md` and criterion's
//! saved baselines (`--save-baseline`, `--baseline`) refer to them.

// A benchmark harness: a failed setup stops the run, and its shared fixtures are public
// to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Duration;

use benches::OneKey;
use criterion::{
    BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group,
    criterion_main, measurement::WallTime,
};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use twizzler_capsec::{
    Access, AccessKind, CAP_LEN, Cap, CapGrant, HashAlg, ObjID, Protections, SecCtx, SecCtxEditor,
    SigningKey, SigningScheme, evaluate,
};

/// "now" for expiry checks (ns since the epoch); every capability here never expires.
const NOW: u64 = 1_700_000_000_000_000_000;
/// The object every capability grants access to, and the context that holds it.
const OBJECT: ObjID = ObjID::new(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
const CONTEXT: ObjID = ObjID::new(0xfedc_ba98_7654_3210_8899_aabb_ccdd_eeff);
/// Context sizes of the parse and lookup benches.
const CTX_SIZES: [usize; 3] = [1, 1_000, 1_000_000];
/// Lookup targets cycled through (per size): enough that the deep levels of the binary search
/// over a 1M-entry table do not all stay in cache.
const LOOKUP_TARGETS: usize = 1 << 16;

const SCHEMES: [SigningScheme; 2] = [SigningScheme::Ed25519, SigningScheme::EcdsaP256];
const HASHES: [HashAlg; 2] = [HashAlg::Blake3, HashAlg::Sha256];

fn rng(stream: u64) -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(0x7715_5ec0_0000_0000 ^ stream)
}

fn hash_name(h: HashAlg) -> &'static str {
    match h {
        HashAlg::Blake3 => "blake3",
        HashAlg::Sha256 => "sha256",
    }
}

/// A fixed message of `len` bytes.
fn message(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(11))
        .collect()
}

fn grant(hash: HashAlg) -> CapGrant {
    CapGrant {
        hash,
        ..CapGrant::new(OBJECT, CONTEXT, Protections::READ | Protections::WRITE)
    }
}

fn key(scheme: SigningScheme) -> SigningKey {
    SigningKey::generate(scheme, &mut rng(scheme as u64))
}

// ---------------------------------------------------------------------------------------------
// Keys and capabilities.

fn bench_keygen(c: &mut Criterion) {
    let mut g = c.benchmark_group("keygen");
    crypto_settings(&mut g);
    for scheme in SCHEMES {
        let mut r = rng(100 + scheme as u64);
        g.bench_function(scheme.name(), |b| {
            b.iter(|| SigningKey::generate(black_box(scheme), &mut r))
        });
    }
    g.finish();
}

fn bench_cap_mint(c: &mut Criterion) {
    let mut g = c.benchmark_group("cap_mint");
    crypto_settings(&mut g);
    for scheme in SCHEMES {
        let sk = key(scheme);
        for hash in HASHES {
            let gr = grant(hash);
            g.bench_function(format!("{}-{}", scheme.name(), hash_name(hash)), |b| {
                b.iter(|| Cap::mint(black_box(gr), black_box(&sk)).unwrap())
            });
        }
    }
    g.finish();
}

fn bench_cap_verify(c: &mut Criterion) {
    let mut g = c.benchmark_group("cap_verify");
    crypto_settings(&mut g);
    for scheme in SCHEMES {
        let sk = key(scheme);
        let vk = sk.verifying_key();
        for hash in HASHES {
            let cap = Cap::mint(grant(hash), &sk).unwrap();
            cap.verify(&vk, NOW).expect("benchmark capability verifies");
            g.bench_function(format!("{}-{}", scheme.name(), hash_name(hash)), |b| {
                b.iter(|| black_box(&cap).verify(black_box(&vk), black_box(NOW)))
            });
        }
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// Raw primitives, for reference.

fn raw_keys() -> (ed25519_dalek::SigningKey, p256::ecdsa::SigningKey) {
    let mut r = rng(200);
    let mut seed = [0u8; 32];
    r.fill_bytes(&mut seed);
    let ed = ed25519_dalek::SigningKey::from_bytes(&seed);
    let p = loop {
        r.fill_bytes(&mut seed);
        if let Ok(k) = p256::ecdsa::SigningKey::from_slice(&seed) {
            break k;
        }
    };
    (ed, p)
}

fn bench_raw_sign(c: &mut Criterion) {
    // One `signature::Signer` trait serves both crates.
    use ed25519_dalek::Signer as _;
    let (ed, p) = raw_keys();
    let mut g = c.benchmark_group("raw_sign");
    crypto_settings(&mut g);
    for len in [32usize, 78] {
        let msg = message(len);
        let p_len = format!("{len}B");
        g.bench_function(BenchmarkId::new("ed25519", &p_len), |b| {
            b.iter(|| black_box(&ed).sign(black_box(&msg)))
        });
        g.bench_function(BenchmarkId::new("p256", &p_len), |b| {
            b.iter(|| -> p256::ecdsa::Signature { black_box(&p).sign(black_box(&msg)) })
        });
    }
    g.finish();
}

fn bench_raw_verify(c: &mut Criterion) {
    use ed25519_dalek::Signer as _;
    use p256::ecdsa::signature::Verifier as _;
    let (ed, p) = raw_keys();
    let ed_vk = ed.verifying_key();
    let p_vk = *p.verifying_key();
    let sec1_uncompressed = p_vk.to_sec1_point(false).as_bytes().to_vec();
    let sec1_compressed = p_vk.to_sec1_point(true).as_bytes().to_vec();
    assert_eq!(sec1_uncompressed.len(), 65);
    assert_eq!(sec1_compressed.len(), 33);

    let mut g = c.benchmark_group("raw_verify");
    crypto_settings(&mut g);
    for len in [78usize, 32] {
        let msg = message(len);
        let p_len = format!("{len}B");
        let ed_sig = ed.sign(&msg);
        let p_sig: p256::ecdsa::Signature = p.sign(&msg);
        ed_vk.verify_strict(&msg, &ed_sig).unwrap();
        p_vk.verify(&msg, &p_sig).unwrap();

        g.bench_function(BenchmarkId::new("ed25519_verify_strict", &p_len), |b| {
            b.iter(|| {
                black_box(&ed_vk)
                    .verify_strict(black_box(&msg), black_box(&ed_sig))
                    .unwrap()
            })
        });
        // Non-strict (cofactorless, no small-order checks), for comparison with figures that
        // do not say which verification they measured.
        g.bench_function(BenchmarkId::new("ed25519_verify", &p_len), |b| {
            b.iter(|| {
                black_box(&ed_vk)
                    .verify(black_box(&msg), black_box(&ed_sig))
                    .unwrap()
            })
        });
        g.bench_function(BenchmarkId::new("p256", &p_len), |b| {
            b.iter(|| {
                black_box(&p_vk)
                    .verify(black_box(&msg), black_box(&p_sig))
                    .unwrap()
            })
        });
        // What upstream Twizzler does: the key is kept as SEC1 bytes and parsed on every check.
        for (name, sec1) in [
            ("p256_reparse_sec1_uncompressed", &sec1_uncompressed),
            ("p256_reparse_sec1_compressed", &sec1_compressed),
        ] {
            g.bench_function(BenchmarkId::new(name, &p_len), |b| {
                b.iter(|| {
                    p256::ecdsa::VerifyingKey::from_sec1_bytes(black_box(sec1))
                        .unwrap()
                        .verify(black_box(&msg), black_box(&p_sig))
                        .unwrap()
                })
            });
        }
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// Hashing.

fn bench_hash(c: &mut Criterion) {
    use sha2::Digest as _;
    let sk = key(SigningScheme::Ed25519);
    let cap = Cap::mint(grant(HashAlg::Blake3), &sk).unwrap();
    let encoded = cap.encode();
    assert_eq!(encoded.len(), CAP_LEN);

    let mut g = c.benchmark_group("hash");
    crypto_settings(&mut g);
    g.throughput(Throughput::Bytes(CAP_LEN as u64));
    let p = format!("{CAP_LEN}B");
    g.bench_function(BenchmarkId::new("blake3", &p), |b| {
        b.iter(|| blake3::hash(black_box(&encoded[..])))
    });
    g.bench_function(BenchmarkId::new("sha256", &p), |b| {
        b.iter(|| sha2::Sha256::digest(black_box(&encoded[..])))
    });
    g.finish();

    // Encoding the body and hashing it with the domain tag: the message a capability signs.
    let mut g = c.benchmark_group("cap_signed_message");
    crypto_settings(&mut g);
    for hash in HASHES {
        let cap = Cap::mint(grant(hash), &sk).unwrap();
        g.bench_function(hash_name(hash), |b| {
            b.iter(|| black_box(&cap).signed_message())
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// Security contexts.

/// A context of `n` capabilities (one per target) and `n` masks (one per target), its parsed
/// view, and the lookup targets to cycle through. Built once per size, on first use.
struct CtxFixture {
    bytes: &'static [u8],
    ctx: SecCtx<'static>,
    targets: Vec<ObjID>,
}

fn ctx_fixture(n: usize) -> &'static CtxFixture {
    static FIXTURES: [OnceLock<CtxFixture>; CTX_SIZES.len()] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = CTX_SIZES
        .iter()
        .position(|&s| s == n)
        .expect("a CTX_SIZES size");
    FIXTURES[slot].get_or_init(|| build_ctx(n))
}

fn build_ctx(n: usize) -> CtxFixture {
    let start = std::time::Instant::now();
    // One real capability as the template; the others copy its signature (lookup does not
    // verify, so they need not).
    let template = Cap::mint(grant(HashAlg::Blake3), &key(SigningScheme::Ed25519)).unwrap();
    let mut r = rng(300 + n as u64);
    let mut all_targets = Vec::with_capacity(n);
    let mut ed = SecCtxEditor::new();
    for _ in 0..n {
        let target = ObjID::new(u128::from(r.next_u64()) << 64 | u128::from(r.next_u64()));
        all_targets.push(target);
        let g = CapGrant {
            target,
            ..*template.grant()
        };
        ed.add_cap(&Cap::from_parts(g, *template.signature()));
        ed.set_mask(target, Protections::READ, Protections::empty());
    }
    let bytes: &'static [u8] = Box::leak(ed.encode().unwrap().into_boxed_slice());
    drop(ed);
    let ctx = SecCtx::parse(bytes).unwrap();
    assert_eq!(ctx.entry_count(), n);
    // Pseudo-random lookup order: every lookup hits (one entry, one mask).
    let targets = (0..LOOKUP_TARGETS)
        .map(|_| all_targets[(r.next_u64() % n as u64) as usize])
        .collect();
    eprintln!(
        "built a {n}-entry context ({} bytes) in {:.2?}",
        bytes.len(),
        start.elapsed()
    );
    CtxFixture {
        bytes,
        ctx,
        targets,
    }
}

/// Cycles through the fixture's targets; used as `iter_batched` setup, so picking the next
/// target is not timed.
fn cycle(targets: &[ObjID]) -> impl FnMut() -> ObjID + '_ {
    let mut i = 0usize;
    move || {
        let t = targets[i];
        i = (i + 1) % targets.len();
        t
    }
}

fn bench_ctx(c: &mut Criterion) {
    // Parse: full validation of the header, every entry and every mask. Linear in size, so the
    // 1M case is a few ms per iteration: few, flat samples.
    let mut g = c.benchmark_group("ctx_parse");
    g.warm_up_time(Duration::from_secs(1));
    for n in CTX_SIZES {
        if n >= 1_000_000 {
            g.sampling_mode(SamplingMode::Flat);
            g.sample_size(20);
            g.measurement_time(Duration::from_secs(6));
        } else {
            g.sampling_mode(SamplingMode::Auto);
            g.sample_size(60);
            g.measurement_time(Duration::from_secs(3));
        }
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            let f = ctx_fixture(n);
            b.iter(|| SecCtx::parse(black_box(f.bytes)).unwrap())
        });
    }
    g.finish();

    // Lookup: binary search for the target on an already-parsed context, then iterate that
    // target's entries (yielding each entry's bytes; records are not decoded).
    let mut g = c.benchmark_group("ctx_lookup");
    lookup_settings(&mut g);
    for n in CTX_SIZES {
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            let f = ctx_fixture(n);
            b.iter_batched(
                cycle(&f.targets),
                |t| {
                    let mut found = 0usize;
                    for e in black_box(&f.ctx).entries_for(t) {
                        black_box(e.bytes());
                        found += 1;
                    }
                    found
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();

    // Mask lookup: binary search in the mask table.
    let mut g = c.benchmark_group("ctx_mask");
    lookup_settings(&mut g);
    for n in CTX_SIZES {
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            let f = ctx_fixture(n);
            b.iter_batched(
                cycle(&f.targets),
                |t| black_box(&f.ctx).mask(t),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// The permission decision.

fn bench_evaluate(c: &mut Criterion) {
    let mut g = c.benchmark_group("evaluate");
    crypto_settings(&mut g);
    for scheme in SCHEMES {
        let sk = key(scheme);
        let cap = Cap::mint(CapGrant::new(OBJECT, CONTEXT, Protections::READ), &sk).unwrap();
        let mut ed = SecCtxEditor::new();
        ed.add_cap(&cap);
        let bytes = ed.encode().unwrap();
        let ctx = SecCtx::parse(&bytes).unwrap();
        let auth = OneKey(OBJECT, sk.verifying_key());
        let access = Access::read(0x1000);
        let run = |ctx: &SecCtx<'_>| {
            evaluate(
                CONTEXT,
                ctx,
                OBJECT,
                Protections::empty(),
                &auth,
                access,
                NOW,
            )
        };
        assert!(run(&ctx).grants(AccessKind::Read.required()));
        g.bench_function(format!("read_fault/{}-blake3", scheme.name()), |b| {
            b.iter(|| run(black_box(&ctx)))
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------------------------
// Settings.

/// Operations of 0.05–400 µs: the default 100 samples, shorter warm-up and measurement than
/// criterion's defaults so the suite stays under ~10 minutes.
fn crypto_settings(g: &mut BenchmarkGroup<'_, WallTime>) {
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(4));
    g.sample_size(100);
}

fn lookup_settings(g: &mut BenchmarkGroup<'_, WallTime>) {
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    g.sample_size(100);
}

// Order matters on a shared, noisy machine: each capability verification runs shortly after
// the raw verification it is compared with (the 32-byte raw verifies are the last of their
// group), and `evaluate` right after both.
criterion_group!(
    benches,
    bench_keygen,
    bench_raw_sign,
    bench_cap_mint,
    bench_hash,
    bench_raw_verify,
    bench_cap_verify,
    bench_evaluate,
    bench_ctx
);
criterion_main!(benches);
