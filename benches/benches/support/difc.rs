//! DIFC pairs (`docs/DIFC.md` §7.3) for `paired.rs`: a labelled hit against an unlabelled
//! one, a labelled first fault against today's miss, a declassifier's first write against an
//! unlabelled first write, a repeated flow denial against a hit, and `relabel_ctx`'s engine
//! sweep against today's sweep (a key revocation that re-stamps every entry) at N cached
//! entries. The host's unmap is the benchmark host's no-op: the page-table walk and the TLB
//! shootdown are the kernel's, not measured here.

use std::hint::black_box;

use benches::host::{BenchHost, INFO, fault_engine, labelled_engine, obj, one_object_engine};
use kernel_hooks::{Decision, Engine, Fault, SecCtxMgr};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng;
use twizzler_capsec::{
    AccessKind, Cap, CapGrant, Label, ObjID, OwnRights, OwnershipGrant, Protections, RelabelClass,
    Right, SecCtxEditor, SigningKey, SigningScheme,
};

use super::Pair;

type E = Box<Engine<BenchHost>>;

/// Four tags, their key objects and keys.
fn tags() -> Vec<(ObjID, ObjID, SigningKey)> {
    (0..4u64)
        .map(|i| {
            let k = SigningKey::generate(
                SigningScheme::Ed25519,
                &mut ChaCha20Rng::seed_from_u64(0xd1fc + i),
            );
            (
                ObjID::new(0x7000 + u128::from(i)),
                ObjID::new(0x7100 + u128::from(i)),
                k,
            )
        })
        .collect()
}

/// What the pairs run on (engines are large: built once, borrowed by the pairs).
pub struct Fixtures {
    hit_l: E,
    hit_l_fault: Fault,
    hit_u: E,
    write_l: E,
    write_l_fault: Fault,
    write_u: E,
    deny_l: E,
    deny_l_fault: Fault,
    sweeps: Vec<(usize, E, E)>,
}

/// Builds the fixtures; `wanted` says which pairs will run (the sweeps sign up to 256
/// records).
pub fn fixtures(key: &SigningKey, wanted: impl Fn(&str) -> bool) -> Fixtures {
    let tags = tags();
    let ids: Vec<ObjID> = tags.iter().map(|t| t.0).collect();
    let four = Label::from_tags(&ids, &ids).expect("four tags");
    let t1 = Label::from_tags(&ids[..1], &[]).expect("one tag");
    let read = |prots| {
        let mut e = SecCtxEditor::new();
        e.add_cap(&Cap::mint(CapGrant::new(obj(0), benches::host::CTX, prots), key).unwrap());
        e
    };
    let tag_keys: Vec<(ObjID, ObjID, &SigningKey)> =
        tags.iter().map(|(t, k, s)| (*t, *k, s)).collect();
    let (hit_l, l4) = labelled_engine(&read(Protections::READ), key, four, four, &[]);
    let hit_u = one_object_engine(&read(Protections::READ), key);
    // The declassifier: at {t1}, owning t1−, writing a public object.
    let mut declass = read(Protections::READ | Protections::WRITE);
    let own = OwnershipGrant::new(ids[0], benches::host::CTX, OwnRights::of(Right::Minus));
    declass.add_cap(&Cap::mint_ownership(own, &tags[0].2).unwrap());
    let (write_l, public) = labelled_engine(&declass, key, t1, Label::EMPTY, &tag_keys);
    let write_u = one_object_engine(&read(Protections::READ | Protections::WRITE), key);
    // A public context reading a {t1} object.
    let (deny_l, secret) = labelled_engine(&read(Protections::READ), key, Label::EMPTY, t1, &[]);
    let sweeps = [1usize, 10, 100, 256]
        .into_iter()
        .filter(|n| wanted(&format!("difc/relabel_ctx sweep/{n} ")))
        .map(|n| {
            let fill = |e: &E| {
                let t = SecCtxMgr::new(benches::host::CTX);
                for i in 0..n {
                    let f = Fault::new(obj(i as u128), INFO, 4096, AccessKind::Read);
                    assert!(matches!(e.decide(&t, &f), Decision::Map { .. }));
                }
            };
            let (a, b) = (
                fault_engine(n as u128, key, true, 1),
                fault_engine(n as u128, key, true, 1),
            );
            fill(&a);
            fill(&b);
            eprintln!(
                "difc sweep fixture: {n} objects faulted, {} entries cached",
                a.cached()
            );
            (n, a, b)
        })
        .collect();
    Fixtures {
        hit_l,
        hit_l_fault: Fault::new(obj(0), INFO.with_label(l4), 4096, AccessKind::Read),
        hit_u,
        write_l,
        write_l_fault: Fault::new(obj(0), INFO.with_label(public), 4096, AccessKind::Write),
        write_u,
        deny_l,
        deny_l_fault: Fault::new(obj(0), INFO.with_label(secret), 4096, AccessKind::Read),
        sweeps,
    }
}

/// The pairs over `f`, for threads in the benchmarks' context.
pub fn pairs<'a>(f: &'a Fixtures, thread: &'a SecCtxMgr) -> Vec<Pair<'a>> {
    let unlabelled = |kind| Fault::new(obj(0), INFO, 4096, kind);
    let hit = move |e: &Engine<BenchHost>, base: Fault, page: &mut u64| {
        *page = *page % 16 + 1;
        let fault = Fault {
            offset: *page * 4096,
            ..base
        };
        let d = e.decide(thread, black_box(&fault));
        debug_assert!(matches!(d, Decision::Map { .. }));
        let _ = black_box(d);
    };
    let first = move |e: &Engine<BenchHost>, fault: &Fault| {
        e.flush();
        let d = e.decide(thread, black_box(fault));
        assert!(matches!(d, Decision::Map { .. }), "{d:?}");
    };
    // Each engine answers before it is timed.
    first(&f.hit_l, &f.hit_l_fault);
    first(&f.hit_u, &unlabelled(AccessKind::Read));
    first(&f.write_l, &f.write_l_fault);
    first(&f.write_u, &unlabelled(AccessKind::Write));
    assert!(matches!(
        f.deny_l.decide(thread, &f.deny_l_fault),
        Decision::Violation(kernel_hooks::Violation::Flow { .. })
    ));
    let (mut p1, mut p2, mut p3) = (0u64, 0u64, 0u64);
    let mut pairs = vec![
        Pair {
            name: "difc/hit/labelled S4 I4 vs unlabelled",
            a_name: "Engine::decide hit, object and context at (4 tags, 4 tags)",
            b_name: "Engine::decide hit, no labels",
            a: Box::new(move || hit(&f.hit_l, f.hit_l_fault, &mut p1)),
            b: Box::new(move || hit(&f.hit_u, unlabelled(AccessKind::Read), &mut p2)),
        },
        Pair {
            name: "difc/first_fault/labelled S4 I4 vs unlabelled miss",
            a_name: "flush + decide miss, labels (4, 4), no ownership",
            b_name: "flush + decide miss, no labels",
            a: Box::new(move || first(&f.hit_l, &f.hit_l_fault)),
            b: Box::new(move || first(&f.hit_u, &unlabelled(AccessKind::Read))),
        },
        Pair {
            name: "difc/declassifier first write vs unlabelled first write",
            a_name: "flush + write miss at {t1} owning t1− (2 verifications)",
            b_name: "flush + write miss, no labels (1 verification)",
            a: Box::new(move || first(&f.write_l, &f.write_l_fault)),
            b: Box::new(move || first(&f.write_u, &unlabelled(AccessKind::Write))),
        },
        Pair {
            name: "difc/flow denial repeated vs labelled hit",
            a_name: "repeated SecrecyRead denial",
            b_name: "Engine::decide hit, labels (4, 4)",
            a: Box::new(move || {
                let _ = black_box(f.deny_l.decide(thread, black_box(&f.deny_l_fault)));
            }),
            b: Box::new(move || hit(&f.hit_l, f.hit_l_fault, &mut p3)),
        },
    ];
    let writes = RelabelClass {
        reads_unsafe: false,
        writes_unsafe: true,
    };
    for (n, a, b) in &f.sweeps {
        let name: &'static str = match n {
            1 => "difc/relabel_ctx sweep/1 vs revoke_key sweep",
            10 => "difc/relabel_ctx sweep/10 vs revoke_key sweep",
            100 => "difc/relabel_ctx sweep/100 vs revoke_key sweep",
            _ => "difc/relabel_ctx sweep/256 (full cache) vs revoke_key sweep",
        };
        let unrelated = ObjID::new(0xdead);
        pairs.push(Pair {
            name,
            a_name: "Engine::relabel_ctx, writes unsafe (engine sweep only)",
            b_name: "Engine::revoke_key of an unused key (today's sweep)",
            a: Box::new(move || {
                black_box(a.relabel_ctx(benches::host::CTX, writes));
            }),
            b: Box::new(move || {
                black_box(b.revoke_key(unrelated));
            }),
        });
    }
    pairs
}
