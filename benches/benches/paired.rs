//! Paired, interleaved comparisons for the performance targets in `docs/BENCHMARKS.md`.
//!
//! The criterion suite (`security.rs`) measures each operation on its own, minutes apart. On a
//! shared machine (a fuzzer on the other core, compiles coming and going) the speed of a core
//! drifts by up to 2x over seconds, which swamps a 10% target. Here each comparison alternates
//! short blocks of the two operations (A then B, B then A, ...) for a few seconds, takes the
//! ratio A/B of every round, and reports the median ratio with a distribution-free 95%
//! confidence interval. Both sides of a round see the same machine, so the ratio is stable even
//! when the absolute times are not.
//!
//! `cargo bench -p benches --bench paired [-- [--quick] [FILTER]]`. Criterion's own flags are
//! accepted and ignored, so `cargo bench -p benches -- --noplot` runs this target too.

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

#[path = "support/old_reader.rs"]
mod old_reader;

#[path = "support/difc.rs"]
mod difc;

use benches::OneKey;
use benches::host::{CTX, fault_engine, obj};
use benches::upstream::{KernelMutex, LockKind, Spin};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng;
use twizzler_capsec::{
    Access, AccessKind, Cap, CapGrant, HashAlg, ObjID, Protections, SecCtx, SecCtxEditor,
    SigningKey, SigningScheme, evaluate,
};

const NOW: u64 = 1_700_000_000_000_000_000;
const OBJECT: ObjID = ObjID::new(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
const CONTEXT: ObjID = ObjID::new(0xfedc_ba98_7654_3210_8899_aabb_ccdd_eeff);

/// One comparison: `a` against `b`, both timed per call.
struct Pair<'a> {
    name: &'static str,
    a_name: &'static str,
    b_name: &'static str,
    a: Box<dyn FnMut() + 'a>,
    b: Box<dyn FnMut() + 'a>,
}

struct Outcome {
    ratio: f64,
    ratio_lo: f64,
    ratio_hi: f64,
    a_ns: f64,
    b_ns: f64,
    rounds: usize,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Times `iters` calls of `f`, in ns per call.
fn block(f: &mut dyn FnMut(), iters: u32) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(iters)
}

fn run(pair: &mut Pair<'_>, budget: Duration) -> Outcome {
    // Warm up and size the blocks to ~1 ms each.
    let warm = Instant::now();
    // The fastest warm-up round sizes the blocks: one round slowed by preemption must not
    // shrink them to a call or two, where the clock's resolution is the measurement.
    let mut per_call = f64::INFINITY;
    while warm.elapsed() < Duration::from_millis(300) {
        per_call = per_call.min(block(&mut pair.a, 8).max(block(&mut pair.b, 8)));
    }
    let iters = ((1.0e6 / per_call.max(1.0)) as u32).clamp(1, 100_000);

    let (mut ratios, mut a_all, mut b_all) = (Vec::new(), Vec::new(), Vec::new());
    let start = Instant::now();
    let mut round = 0usize;
    while start.elapsed() < budget || round < 20 {
        let (ta, tb) = if round.is_multiple_of(2) {
            let ta = block(&mut pair.a, iters);
            (ta, block(&mut pair.b, iters))
        } else {
            let tb = block(&mut pair.b, iters);
            (block(&mut pair.a, iters), tb)
        };
        ratios.push(ta / tb);
        a_all.push(ta);
        b_all.push(tb);
        round += 1;
    }
    let n = ratios.len();
    let ratio = median(&mut ratios); // sorts `ratios`
    // Order-statistic 95% CI of the median: ranks n/2 -+ 0.98 sqrt(n).
    let half = 0.98 * (n as f64).sqrt();
    let lo = ((n as f64 / 2.0 - half).floor().max(0.0)) as usize;
    let hi = ((n as f64 / 2.0 + half).ceil() as usize).min(n - 1);
    Outcome {
        ratio,
        ratio_lo: ratios[lo],
        ratio_hi: ratios[hi],
        a_ns: median(&mut a_all),
        b_ns: median(&mut b_all),
        rounds: n,
    }
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

fn key(scheme: SigningScheme) -> SigningKey {
    SigningKey::generate(
        scheme,
        &mut ChaCha20Rng::seed_from_u64(0x7715_5ec0_0000_0000 ^ scheme as u64),
    )
}

/// Keys by object, and a memory of good signature checks (as the engine's memo).
struct MemoKeys {
    keys: std::collections::HashMap<ObjID, twizzler_capsec::VerifyingKey>,
    memo: Option<std::cell::RefCell<std::collections::HashSet<twizzler_capsec::RecordId>>>,
}

impl twizzler_capsec::Authority for MemoKeys {
    fn key_for(
        &self,
        obj: ObjID,
    ) -> Result<&twizzler_capsec::VerifyingKey, twizzler_capsec::KeyLookupError> {
        self.keys
            .get(&obj)
            .ok_or(twizzler_capsec::KeyLookupError::NoKuid(obj))
    }
    fn is_verified(&self, id: &twizzler_capsec::RecordId) -> bool {
        self.memo.as_ref().is_some_and(|m| m.borrow().contains(id))
    }
    fn remember_verified(&self, id: &twizzler_capsec::RecordId) {
        if let Some(m) = &self.memo {
            m.borrow_mut().insert(*id);
        }
    }
}

/// The information-flow fixtures: one context holding a read-write capability for
/// [`OBJECT`] and `MINUS` of the fourth secrecy tag; labels of 0, 3 and 4 + 4 tags.
struct Difc {
    ctx: Vec<u8>,
    auth: MemoKeys,
    keys: std::collections::HashMap<ObjID, twizzler_capsec::VerifyingKey>,
    empty: twizzler_capsec::Label,
    empty_obj: twizzler_capsec::Label,
    four: twizzler_capsec::Label,
    three: twizzler_capsec::Label,
}

impl Difc {
    fn new() -> Self {
        use twizzler_capsec::{Label, OwnRights, OwnershipGrant};
        let obj_key = key(SigningScheme::Ed25519);
        let tag_key = SigningKey::from_raw(SigningScheme::Ed25519, &[0x5a; 32]).unwrap();
        let s: Vec<ObjID> = (1..=4).map(|i| ObjID::new(0x7a00 + i)).collect();
        let i: Vec<ObjID> = (1..=4).map(|i| ObjID::new(0x3e00 + i)).collect();
        let rw = Protections::READ | Protections::WRITE;
        let cap = Cap::mint(CapGrant::new(OBJECT, CONTEXT, rw), &obj_key).unwrap();
        let own = Cap::mint_ownership(
            OwnershipGrant::new(s[3], CONTEXT, OwnRights::MINUS),
            &tag_key,
        )
        .unwrap();
        let mut ed = SecCtxEditor::new();
        ed.add_cap(&cap);
        ed.add_cap(&own);
        let keys: std::collections::HashMap<_, _> = [
            (OBJECT, obj_key.verifying_key()),
            (s[3], tag_key.verifying_key()),
        ]
        .into();
        Self {
            ctx: ed.encode().unwrap(),
            auth: MemoKeys {
                keys: keys.clone(),
                memo: Some(Default::default()),
            },
            keys,
            empty: Label::EMPTY,
            empty_obj: Label::EMPTY,
            four: Label::from_tags(&s, &i).unwrap(),
            three: Label::from_tags(&s[..3], &i).unwrap(),
        }
    }

    fn fresh(&self, f: impl FnOnce(&MemoKeys)) {
        f(&MemoKeys {
            keys: self.keys.clone(),
            memo: None,
        })
    }

    fn labelled(&self, p: &twizzler_capsec::Label, o: &twizzler_capsec::Label, a: Access) {
        self.labelled_with(&self.auth, p, o, a)
    }

    fn labelled_with(
        &self,
        auth: &MemoKeys,
        p: &twizzler_capsec::Label,
        o: &twizzler_capsec::Label,
        a: Access,
    ) {
        let ctx = SecCtx::parse(black_box(&self.ctx)).unwrap();
        let p = twizzler_capsec::PrincipalLabels::steady(p.as_ref());
        let d = twizzler_capsec::evaluate_labelled(
            CONTEXT,
            &ctx,
            OBJECT,
            Protections::empty(),
            auth,
            a,
            NOW,
            &p,
            &o.as_ref(),
        );
        assert!(d.grants(a.kind.required()));
        black_box(d);
    }

    fn plain(&self, a: Access) {
        self.plain_with(&self.auth, a)
    }

    fn plain_with(&self, auth: &MemoKeys, a: Access) {
        let ctx = SecCtx::parse(black_box(&self.ctx)).unwrap();
        let d = evaluate(CONTEXT, &ctx, OBJECT, Protections::empty(), auth, a, NOW);
        assert!(d.grants(a.kind.required()));
        black_box(d);
    }
}

/// A hit on `obj(0)` by `thread`, at the page after `page` (pages 1 to 16 in turn), with the
/// fault built for each decision.
#[inline(always)]
fn hit_on_page<H: kernel_hooks::Host>(
    e: &kernel_hooks::Engine<H>,
    thread: &kernel_hooks::SecCtxMgr,
    page: &mut u64,
) {
    *page = *page % 16 + 1;
    let f = kernel_hooks::Fault::new(obj(0), benches::host::INFO, *page * 4096, AccessKind::Read);
    let _ = black_box(e.decide(thread, black_box(&f)));
}

/// A number of cached objects, an engine with that many, and a reproduction of upstream's
/// check with that many.
type HitFixture<K> = (
    u128,
    Box<kernel_hooks::Engine<benches::host::BenchHost>>,
    benches::upstream::Mgr<K>,
);

/// The reproduction's side of a pair against the spinlocked version of upstream's check.
const UPSTREAM_SPIN: &str =
    "upstream check_active_access (reproduced, spin::Mutex for its mutex: a lower bound)";

/// For each of 1, 100 and 10,000 objects that `wanted`: an engine and a reproduction of
/// upstream's check (with locks of kind `K`), each with that many objects cached.
fn hit_fixtures<K: LockKind>(
    key: &SigningKey,
    wanted: impl Fn(u128) -> bool,
) -> Vec<HitFixture<K>> {
    [1u128, 100, 10_000]
        .into_iter()
        .filter(|n| wanted(*n))
        .map(|n| {
            let e = fault_engine(n, key, false, 1);
            (n, e, benches::upstream::Mgr::with_cached(CTX, n))
        })
        .collect()
}

/// The hit on one of `n` cached objects (reads of pages 1..=16 in turn) against `up`'s
/// check of the same object.
fn upstream_hit_pair<'a, K: LockKind>(
    (name, b_name): (&'static str, &'static str),
    e: &'a kernel_hooks::Engine<benches::host::BenchHost>,
    up: &'a benches::upstream::Mgr<K>,
    n: u128,
    thread: &'a kernel_hooks::SecCtxMgr,
) -> Pair<'a> {
    let target = obj(n / 2);
    assert!(up.fault(target, Protections::READ).is_some());
    let mut page = 0u64;
    hit_on_page(e, thread, &mut page);
    Pair {
        name,
        a_name: "Engine::decide hit",
        b_name,
        a: Box::new(move || hit_on_page(e, thread, &mut page)),
        b: Box::new(move || {
            black_box(up.fault(black_box(target), black_box(Protections::READ)));
        }),
    }
}

fn main() {
    // Accept criterion's command line: skip flags (and the values of those that take one);
    // a bare word is a substring filter.
    let takes_value = [
        "--warm-up-time",
        "--measurement-time",
        "--sample-size",
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--nresamples",
        "--output-format",
        "--color",
        "-c",
        "--profile-time",
        "--plotting-backend",
        "--format",
        "--logfile",
    ];
    let mut filters = Vec::new();
    let (mut quick, mut list) = (false, false);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if takes_value.contains(&a.as_str()) {
            args.next();
        } else if a == "--quick" {
            quick = true;
        } else if a == "--list" {
            list = true;
        } else if !a.starts_with('-') {
            filters.push(a);
        }
    }
    let budget = Duration::from_millis(if quick { 500 } else { 4000 });
    let difc_fixture = Difc::new();

    // Fixtures. Messages are the 32-byte digests capabilities sign.
    let msg: [u8; 32] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));

    let ed_sk = key(SigningScheme::Ed25519);
    let p_sk = key(SigningScheme::EcdsaP256);
    let ed_vk = ed_sk.verifying_key();
    let p_vk = p_sk.verifying_key();

    // Raw keys and signatures from the same key material.
    use ed25519_dalek::Signer as _;
    use p256::ecdsa::signature::Verifier as _;
    let ed_seed: [u8; 32] = ed_sk.to_raw()[..].try_into().expect("32-byte seed");
    let raw_ed = ed25519_dalek::SigningKey::from_bytes(&ed_seed);
    let raw_ed_vk = raw_ed.verifying_key();
    let raw_ed_sig = raw_ed.sign(&msg);
    let raw_p = p256::ecdsa::SigningKey::from_slice(&p_sk.to_raw()).unwrap();
    let raw_p_vk = *raw_p.verifying_key();
    let raw_p_sig: p256::ecdsa::Signature = raw_p.sign(&msg);
    let sec1_u = raw_p_vk.to_sec1_point(false).as_bytes().to_vec();
    let sec1_c = raw_p_vk.to_sec1_point(true).as_bytes().to_vec();

    let cap = |sk: &SigningKey, hash: HashAlg| {
        let g = CapGrant {
            hash,
            ..CapGrant::new(OBJECT, CONTEXT, Protections::READ)
        };
        let c = Cap::mint(g, sk).unwrap();
        c.verify(&sk.verifying_key(), NOW).unwrap();
        c
    };
    let ed_b3 = cap(&ed_sk, HashAlg::Blake3);
    let ed_sha = cap(&ed_sk, HashAlg::Sha256);
    let p_b3 = cap(&p_sk, HashAlg::Blake3);
    let p_sha = cap(&p_sk, HashAlg::Sha256);

    let ctx_bytes = |c: &Cap| {
        let mut ed = SecCtxEditor::new();
        ed.add_cap(c);
        ed.encode().unwrap()
    };
    let (ed_ctx_bytes, p_ctx_bytes) = (ctx_bytes(&ed_b3), ctx_bytes(&p_b3));
    let ed_ctx = SecCtx::parse(&ed_ctx_bytes).unwrap();
    let p_ctx = SecCtx::parse(&p_ctx_bytes).unwrap();
    let ed_auth = OneKey(OBJECT, ed_vk.clone());
    let p_auth = OneKey(OBJECT, p_vk.clone());
    let eval = |ctx: &SecCtx<'_>, auth: &OneKey| {
        let r = evaluate(
            CONTEXT,
            black_box(ctx),
            OBJECT,
            Protections::empty(),
            auth,
            Access::read(0x1000),
            NOW,
        );
        assert!(r.grants(AccessKind::Read.required()));
    };

    let ed_raw = || {
        black_box(&raw_ed_vk)
            .verify_strict(black_box(&msg), black_box(&raw_ed_sig))
            .unwrap()
    };
    let p_raw = || {
        black_box(&raw_p_vk)
            .verify(black_box(&msg), black_box(&raw_p_sig))
            .unwrap()
    };

    // The fault path's miss: flush the engine's caches, then decide a read fault, which
    // decodes, hashes and verifies the object's one record (the flush is inside A's time).
    let fault = kernel_hooks::Fault::new(obj(0), benches::host::INFO, 0x1000, AccessKind::Read);
    let thread = kernel_hooks::SecCtxMgr::new(CTX);
    let (ed_1, ed_10k) = (
        fault_engine(1, &ed_sk, false, 1),
        fault_engine(10_000, &ed_sk, false, 1),
    );
    let (p_1, p_10k) = (
        fault_engine(1, &p_sk, false, 1),
        fault_engine(10_000, &p_sk, false, 1),
    );
    let miss = |e: &kernel_hooks::Engine<benches::host::BenchHost>| {
        e.flush();
        let d = e.decide(&thread, black_box(&fault));
        assert!(matches!(d, kernel_hooks::Decision::Map { .. }));
    };

    // Issue 20: the lazy miss with 1,000 records for the object, plain (whole-object read
    // capabilities) and page-gated (one per page: faulting on page 1, whose record is first,
    // and on page 1,000, whose record is last: the scan starts near the page, since the run
    // is in gate order); page-gated in reverse page order, faulting on page 1, whose record
    // is last (the search runs the other way); and page-gated in no order, faulting on page
    // 500, whose record is last: the order tells the search nothing, and the other 999
    // records are read and passed over.
    use benches::host::{PageOrder, page_records_engine};
    let plain = |k: u64| {
        let mut ed = SecCtxEditor::new();
        for i in 0..k {
            let mut g = CapGrant::new(obj(0), CTX, Protections::READ);
            g.expires = twizzler_capsec::Expiry::from_raw(NOW + 1_000_000_000_000 + i);
            ed.add_cap(&Cap::mint(g, &ed_sk).unwrap());
        }
        benches::host::one_object_engine(&ed, &ed_sk)
    };
    let (plain_1000, gated_1000) = (
        plain(1_000),
        page_records_engine(1_000, PageOrder::Pages, &ed_sk),
    );
    let miss_on = |e: &kernel_hooks::Engine<benches::host::BenchHost>, page: u64| {
        e.flush();
        let f =
            kernel_hooks::Fault::new(obj(0), benches::host::INFO, page * 4096, AccessKind::Read);
        let d = e.decide(&thread, black_box(&f));
        assert!(matches!(d, kernel_hooks::Decision::Map { .. }));
    };

    // Issue 20: the hit against upstream's cached check at 1, 100 and 10,000 cached objects
    // (reads of pages 1..=16 in turn, as `hit_vs_upstream` in `fault_path.rs`), and repeated
    // denials against a granted hit (as `denied_repeat`). Built only when asked for: the
    // denial over 1,000,000 other entries takes seconds to set up.
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let reversed_name =
        "issue20/decide_miss/gated_reversed/1000 vs raw_verify/ed25519_verify_strict/32B";
    let reversed_1000 =
        wanted(reversed_name).then(|| page_records_engine(1_000, PageOrder::Reversed, &ed_sk));
    let shuffled_name =
        "issue20/decide_miss/gated_shuffled/1000 vs raw_verify/ed25519_verify_strict/32B";
    let shuffled_1000 =
        wanted(shuffled_name).then(|| page_records_engine(1_000, PageOrder::Shuffled, &ed_sk));
    // The hits at 1, 100 and 10,000 cached objects against each reproduction of upstream's
    // check: with `spin::Mutex` (a lower bound), and with upstream's kernel mutex
    // (`benches::upstream::kernel_lock`), what upstream's kernel pays.
    let hits = hit_fixtures::<Spin>(&ed_sk, |n| wanted(&format!("issue20/hit/{n} vs upstream")));
    let kernel_hits = hit_fixtures::<KernelMutex>(&ed_sk, |n| {
        wanted(&format!("issue20/hit/{n} vs upstream kernel mutex"))
    });
    // The hit at one object on a host whose clock runs (`BenchHost<true>`: the
    // operating system's monotonic clock, as a kernel reads its own), for a capability that
    // never expires and for one that expires in a day: what the clock read costs the hit.
    let clock_name = "issue20/hit/1 running clock vs upstream";
    let clock_expiring_name = "issue20/hit/1 expiring, running clock vs upstream";
    let running: Vec<_> = [(clock_name, false), (clock_expiring_name, true)]
        .into_iter()
        .filter(|(name, _)| wanted(name))
        .map(|(name, expiring)| {
            let mut g = CapGrant::new(obj(0), CTX, Protections::READ);
            if expiring {
                g.expires = twizzler_capsec::Expiry::from_raw(NOW + 86_400 * 1_000_000_000);
            }
            let mut ed = SecCtxEditor::new();
            ed.add_cap(&Cap::mint(g, &ed_sk).unwrap());
            let e = benches::host::running_clock_engine(&ed, &ed_sk);
            (name, e, benches::upstream::SecCtxMgr::with_cached(CTX, 1))
        })
        .collect();
    // A key no record's issuer has: records signed with it fail verification.
    let wrong = SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(2));
    let granted = fault_engine(1, &ed_sk, false, 1);
    let mut denials: Vec<(
        &'static str,
        Box<kernel_hooks::Engine<benches::host::BenchHost>>,
    )> = Vec::new();
    for (name, n, bad) in [
        ("issue20/denied_repeat/bad_records/1 vs hit", 1u128, true),
        ("issue20/denied_repeat/bad_records/2000 vs hit", 2_000, true),
        (
            "issue20/denied_repeat/other_objects/1000000 vs hit",
            1_000_000,
            false,
        ),
    ] {
        if wanted(name) {
            denials.push((name, benches::host::denial_engine(n, &ed_sk, &wrong, bad)));
        }
    }
    let revoked_name = "issue20/denied_repeat/revoked_record/1 vs hit";
    if wanted(revoked_name) {
        let mut e = fault_engine(1, &ed_sk, false, 1);
        let parsed = SecCtx::parse(&e.host().versions[0]).expect("the context parses");
        let id = parsed
            .entries_for(obj(0))
            .next()
            .and_then(|en| en.record().ok())
            .map(|r| r.id())
            .expect("object 0 has a record");
        e.host_mut().revoked_records.insert(id);
        denials.push((revoked_name, e));
    }
    let read1 = kernel_hooks::Fault::new(obj(0), benches::host::INFO, 4096, AccessKind::Read);
    assert!(matches!(
        granted.decide(&thread, &read1),
        kernel_hooks::Decision::Map { .. }
    ));
    for (name, e) in &denials {
        let d = e.decide(&thread, &read1);
        assert!(
            matches!(d, kernel_hooks::Decision::Violation(_)),
            "{name}: {d:?}"
        );
    }

    // Issue 20: the lookup (`entries_for`, touching each entry's bytes) against a copy of the
    // reader before the overflow table (`support/old_reader.rs`, commit 207b6b0), over the
    // same version-1 bytes: contexts of n capabilities with random targets, 65,536 probes
    // cycled in the same order on both sides. Built only when asked for.
    let lookups: Vec<(usize, Vec<u8>, Vec<ObjID>)> = [1_000usize, 1_000_000]
        .into_iter()
        .filter(|n| wanted(&format!("issue20/lookup/{n} ")))
        .map(|n| {
            use rand_chacha::rand_core::Rng as _;
            let mut rng = ChaCha20Rng::seed_from_u64(0x100c);
            let first = Cap::mint(CapGrant::new(obj(1), CTX, Protections::READ), &ed_sk).unwrap();
            let targets: Vec<ObjID> = (0..n)
                .map(|_| ObjID::new(u128::from(rng.next_u64()) << 64 | 1))
                .collect();
            let mut ed = SecCtxEditor::new();
            for t in &targets {
                let g = CapGrant::new(*t, CTX, Protections::READ);
                ed.add_cap(&Cap::from_parts(g, *first.signature()));
            }
            let bytes = ed.encode_for_update(None).unwrap();
            let probe: Vec<ObjID> = (0..65_536).map(|i| targets[(i * 7919) % n]).collect();
            (n, bytes, probe)
        })
        .collect();

    // The hit alternating between two objects (each fault's object is not the thread's last
    // hit's), against upstream's alternating too.
    let alt_name = "issue20/hit/alternating 2 vs upstream";
    let alternating = wanted(alt_name).then(|| {
        (
            fault_engine(2, &ed_sk, true, 1),
            benches::upstream::SecCtxMgr::with_cached(CTX, 2),
        )
    });
    // DIFC (issue 24): built only when asked for (or when nothing is filtered).
    let difc_fx = wanted("difc/").then(|| difc::fixtures(&ed_sk, wanted));
    let mut pairs: Vec<Pair<'_>> = vec![
        Pair {
            name: "issue20/decide_miss/plain/1000 vs raw_verify/ed25519_verify_strict/32B",
            a_name: "flush + decide miss, 1,000 whole-object records",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| miss_on(&plain_1000, 1)),
            b: Box::new(ed_raw),
        },
        Pair {
            name: "issue20/decide_miss/gated/1000 vs raw_verify/ed25519_verify_strict/32B",
            a_name: "flush + decide miss, 1,000 page records, page 1",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| miss_on(&gated_1000, 1)),
            b: Box::new(ed_raw),
        },
        Pair {
            name: "issue20/decide_miss/gated_last/1000 vs raw_verify/ed25519_verify_strict/32B",
            a_name: "flush + decide miss, 1,000 page records, page 1,000",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| miss_on(&gated_1000, 1_000)),
            b: Box::new(ed_raw),
        },
        Pair {
            name: reversed_name,
            a_name: "flush + decide miss, 1,000 page records listed in reverse (another writer's), page 1",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| {
                if let Some(e) = &reversed_1000 {
                    miss_on(e, 1);
                }
            }),
            b: Box::new(ed_raw),
        },
        Pair {
            name: shuffled_name,
            a_name: "flush + decide miss, 1,000 page records listed in no order (another writer's), page 500 (last)",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| {
                if let Some(e) = &shuffled_1000 {
                    miss_on(e, 500);
                }
            }),
            b: Box::new(ed_raw),
        },
        Pair {
            name: "decide_miss/ed25519/1 vs raw_verify/ed25519_verify_strict/32B",
            a_name: "flush + decide miss, ed25519, 1 record",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| miss(&ed_1)),
            b: Box::new(ed_raw),
        },
        Pair {
            name: "decide_miss/ed25519/10000 vs raw_verify/ed25519_verify_strict/32B",
            a_name: "flush + decide miss, ed25519, 10,000 records",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| miss(&ed_10k)),
            b: Box::new(ed_raw),
        },
        Pair {
            name: "decide_miss/p256/1 vs raw_verify/p256/32B",
            a_name: "flush + decide miss, p256, 1 record",
            b_name: "p256 verify (parsed key) 32B",
            a: Box::new(|| miss(&p_1)),
            b: Box::new(p_raw),
        },
        Pair {
            name: "decide_miss/p256/10000 vs raw_verify/p256/32B",
            a_name: "flush + decide miss, p256, 10,000 records",
            b_name: "p256 verify (parsed key) 32B",
            a: Box::new(|| miss(&p_10k)),
            b: Box::new(p_raw),
        },
        Pair {
            name: "cap_verify/ed25519-blake3 vs raw_verify/ed25519_verify_strict/32B",
            a_name: "cap_verify/ed25519-blake3",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| black_box(&ed_b3).verify(black_box(&ed_vk), NOW).unwrap()),
            b: Box::new(ed_raw),
        },
        Pair {
            name: "cap_verify/ed25519-sha256 vs raw_verify/ed25519_verify_strict/32B",
            a_name: "cap_verify/ed25519-sha256",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| black_box(&ed_sha).verify(black_box(&ed_vk), NOW).unwrap()),
            b: Box::new(ed_raw),
        },
        Pair {
            name: "cap_verify/p256-blake3 vs raw_verify/p256/32B",
            a_name: "cap_verify/p256-blake3",
            b_name: "p256 verify (parsed key) 32B",
            a: Box::new(|| black_box(&p_b3).verify(black_box(&p_vk), NOW).unwrap()),
            b: Box::new(p_raw),
        },
        Pair {
            name: "cap_verify/p256-sha256 vs raw_verify/p256/32B",
            a_name: "cap_verify/p256-sha256",
            b_name: "p256 verify (parsed key) 32B",
            a: Box::new(|| black_box(&p_sha).verify(black_box(&p_vk), NOW).unwrap()),
            b: Box::new(p_raw),
        },
        Pair {
            name: "raw_verify/p256_reparse_sec1_uncompressed/32B vs raw_verify/p256/32B",
            a_name: "p256 re-parse 65-byte SEC1 + verify",
            b_name: "p256 verify (parsed key) 32B",
            a: Box::new(|| {
                p256::ecdsa::VerifyingKey::from_sec1_bytes(black_box(&sec1_u))
                    .unwrap()
                    .verify(black_box(&msg), black_box(&raw_p_sig))
                    .unwrap()
            }),
            b: Box::new(p_raw),
        },
        Pair {
            name: "raw_verify/p256_reparse_sec1_compressed/32B vs raw_verify/p256/32B",
            a_name: "p256 re-parse 33-byte SEC1 + verify",
            b_name: "p256 verify (parsed key) 32B",
            a: Box::new(|| {
                p256::ecdsa::VerifyingKey::from_sec1_bytes(black_box(&sec1_c))
                    .unwrap()
                    .verify(black_box(&msg), black_box(&raw_p_sig))
                    .unwrap()
            }),
            b: Box::new(p_raw),
        },
        Pair {
            name: "evaluate/read_fault/ed25519-blake3 vs raw_verify/ed25519_verify_strict/32B",
            a_name: "evaluate/read_fault/ed25519-blake3",
            b_name: "ed25519 verify_strict 32B",
            a: Box::new(|| eval(&ed_ctx, &ed_auth)),
            b: Box::new(ed_raw),
        },
        Pair {
            name: "evaluate/read_fault/p256-blake3 vs raw_verify/p256/32B",
            a_name: "evaluate/read_fault/p256-blake3",
            b_name: "p256 verify (parsed key) 32B",
            a: Box::new(|| eval(&p_ctx, &p_auth)),
            b: Box::new(p_raw),
        },
    ];
    for (n, e, up) in &hits {
        let name: &'static str = match n {
            1 => "issue20/hit/1 vs upstream",
            100 => "issue20/hit/100 vs upstream",
            _ => "issue20/hit/10000 vs upstream",
        };
        pairs.push(upstream_hit_pair((name, UPSTREAM_SPIN), e, up, *n, &thread));
    }
    for (n, e, up) in &kernel_hits {
        let name: &'static str = match n {
            1 => "issue20/hit/1 vs upstream kernel mutex",
            100 => "issue20/hit/100 vs upstream kernel mutex",
            _ => "issue20/hit/10000 vs upstream kernel mutex",
        };
        let b_name = "upstream check_active_access (reproduced, upstream's kernel mutex)";
        pairs.push(upstream_hit_pair((name, b_name), e, up, *n, &thread));
    }
    for (name, e, up) in &running {
        let thread = &thread;
        let hit_on = move |e: &kernel_hooks::Engine<benches::host::BenchHost<true>>,
                           page: &mut u64| { hit_on_page(e, thread, page) };
        let mut page = 0u64;
        hit_on(e, &mut page);
        assert!(up.fault(obj(0), Protections::READ).is_some());
        pairs.push(Pair {
            name,
            a_name: "Engine::decide hit, the host's clock running",
            b_name: UPSTREAM_SPIN,
            a: Box::new(move || hit_on(e, &mut page)),
            b: Box::new(move || {
                black_box(up.fault(black_box(obj(0)), black_box(Protections::READ)));
            }),
        });
    }
    for (n, bytes, probe) in &lookups {
        let now = SecCtx::parse(bytes).expect("the context parses");
        let old = old_reader::SecCtx::parse(bytes).expect("the old reader parses version 1");
        for p in &probe[..64] {
            assert_eq!(now.entries_for(*p).count(), old.entries_for(*p).count());
            assert_eq!(
                now.entries_for(*p).map(|e| e.bytes()).collect::<Vec<_>>(),
                old.entries_for(*p).map(|e| e.bytes()).collect::<Vec<_>>()
            );
        }
        let name: &'static str = if *n == 1_000 {
            "issue20/lookup/1000 entries_for vs before_overflow_table"
        } else {
            "issue20/lookup/1000000 entries_for vs before_overflow_table"
        };
        let (mut i, mut j) = (0usize, 0usize);
        pairs.push(Pair {
            name,
            a_name: "SecCtx::entries_for (today)",
            b_name: "entries_for at 207b6b0 (copy)",
            a: Box::new(move || {
                i = (i + 1) % probe.len();
                let mut found = 0usize;
                for e in black_box(&now).entries_for(probe[i]) {
                    black_box(e.bytes());
                    found += 1;
                }
                black_box(found);
            }),
            b: Box::new(move || {
                j = (j + 1) % probe.len();
                let mut found = 0usize;
                for e in black_box(&old).entries_for(probe[j]) {
                    black_box(e.bytes());
                    found += 1;
                }
                black_box(found);
            }),
        });
    }
    if let Some((e, up)) = &alternating {
        let thread = &thread;
        let (mut i, mut j) = (0u64, 0u64);
        pairs.push(Pair {
            name: alt_name,
            a_name: "Engine::decide hit, objects 0 and 1 in turn",
            b_name: "upstream check_active_access (reproduced), objects 0 and 1 in turn",
            a: Box::new(move || {
                i = i.wrapping_add(1);
                let f = kernel_hooks::Fault::new(
                    obj(u128::from(i & 1)),
                    benches::host::INFO,
                    (i % 16 + 1) * 4096,
                    AccessKind::Read,
                );
                let _ = black_box(e.decide(thread, black_box(&f)));
            }),
            b: Box::new(move || {
                j = j.wrapping_add(1);
                black_box(up.fault(
                    black_box(obj(u128::from(j & 1))),
                    black_box(Protections::READ),
                ));
            }),
        });
    }
    for (name, e) in &denials {
        let (granted, thread, read1) = (&granted, &thread, &read1);
        pairs.push(Pair {
            name,
            a_name: "repeated denied fault",
            b_name: "granted hit",
            a: Box::new(move || {
                let _ = black_box(e.decide(thread, black_box(read1)));
            }),
            b: Box::new(move || {
                let _ = black_box(granted.decide(thread, black_box(read1)));
            }),
        });
    }
    // Information flow (issue 24): the labelled rule beside today's, on the same context.
    let dfx = &difc_fixture;
    pairs.push(Pair {
        name: "difc/evaluate_labelled/empty vs evaluate (memo)",
        a_name: "evaluate_labelled, empty labels, read",
        b_name: "evaluate, read",
        a: Box::new(move || dfx.labelled(&dfx.empty, &dfx.empty_obj, Access::read(0x1000))),
        b: Box::new(move || dfx.plain(Access::read(0x1000))),
    });
    pairs.push(Pair {
        name: "difc/evaluate_labelled/4+4 vs evaluate (memo)",
        a_name: "evaluate_labelled, S and I of 4 tags, write",
        b_name: "evaluate, write",
        a: Box::new(move || dfx.labelled(&dfx.four, &dfx.four, Access::write(0x1000))),
        b: Box::new(move || dfx.plain(Access::write(0x1000))),
    });
    pairs.push(Pair {
        name: "difc/evaluate_labelled/4+4 declassifying vs evaluate (memo)",
        a_name: "evaluate_labelled, write needing one MINUS (memoised)",
        b_name: "evaluate, write",
        a: Box::new(move || dfx.labelled(&dfx.four, &dfx.three, Access::write(0x1000))),
        b: Box::new(move || dfx.plain(Access::write(0x1000))),
    });
    pairs.push(Pair {
        name: "difc/evaluate_labelled/4+4 vs evaluate (verifying)",
        a_name: "evaluate_labelled, S and I of 4 tags, write, signature checked",
        b_name: "evaluate, write, signature checked",
        a: Box::new(move || {
            dfx.fresh(|auth| dfx.labelled_with(auth, &dfx.four, &dfx.four, Access::write(0x1000)))
        }),
        b: Box::new(move || dfx.fresh(|auth| dfx.plain_with(auth, Access::write(0x1000)))),
    });
    pairs.push(Pair {
        name: "difc/flow/4+4 vs flow/empty",
        a_name: "flow, S and I of 4 tags, write",
        b_name: "flow, empty labels, write",
        a: Box::new(move || {
            let p = twizzler_capsec::PrincipalLabels::steady(dfx.four.as_ref());
            black_box(twizzler_capsec::flow(
                black_box(&p),
                black_box(&dfx.four.as_ref()),
                true,
                &mut twizzler_capsec::NoOwnership,
            ));
        }),
        b: Box::new(move || {
            let p = twizzler_capsec::PrincipalLabels::steady(dfx.empty.as_ref());
            black_box(twizzler_capsec::flow(
                black_box(&p),
                black_box(&dfx.empty_obj.as_ref()),
                true,
                &mut twizzler_capsec::NoOwnership,
            ));
        }),
    });
    if let Some(fx) = &difc_fx {
        pairs.extend(difc::pairs(fx, &thread));
    }
    pairs.retain(|p| filters.is_empty() || filters.iter().any(|f| p.name.contains(f.as_str())));

    if list {
        for p in &pairs {
            println!("paired/{}: bench", p.name);
        }
        return;
    }
    if pairs.is_empty() {
        return;
    }
    println!(
        "paired comparisons: A and B alternate in ~1 ms blocks for {budget:?}; ratio = median of per-round A/B [95% CI]"
    );
    for p in &mut pairs {
        let o = run(p, budget);
        println!("paired/{}", p.name);
        println!(
            "    ratio A/B {:.3} [{:.3} {:.3}]   A {} = {}   B {} = {}   ({} rounds)",
            o.ratio,
            o.ratio_lo,
            o.ratio_hi,
            p.a_name,
            fmt_ns(o.a_ns),
            p.b_name,
            fmt_ns(o.b_ns),
            o.rounds
        );
    }
}
