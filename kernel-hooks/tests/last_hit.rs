//! The thread's last-hit memo (`engine/last_hit.rs`): a fault on the object of the thread's
//! last hit is decided from the memo, and everything that would make the cache entry miss or
//! deny makes the memo do so too. Each test makes the memo (a miss, then a hit) and serves from
//! it (another hit) before it changes what the decision depends on.

mod common;

use common::*;
use kernel_hooks::{Decision, SecCtxMgr, Violation};
use twizzler_capsec::{
    AccessKind::{Exec, Read, Write},
    CapGrant, CtxFlags, Expiry, SecCtxEditor,
};

const PAGE: u64 = 4096;

/// A miss, a hit that makes the memo, and a hit served from it, all granting `want`.
fn warm(
    w: &World,
    t: &SecCtxMgr,
    target: twizzler_capsec::ObjID,
    want: twizzler_capsec::Protections,
) {
    for page in 1..4 {
        assert_eq!(mapped(&w.decide(t, target, page * PAGE, Read)), Some(want));
    }
}

#[test]
fn memo_hits_count_and_map_the_whole_object() {
    let w = World::new();
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    warm(&w, &t, FILE, RW);
    match w.decide(&t, FILE, 7 * PAGE, Write) {
        Decision::Map {
            prots,
            pages,
            ctx,
            switch_to,
            valid_until,
            ticket,
        } => {
            assert_eq!(
                (prots, ctx, switch_to, valid_until),
                (RW, CTX_A, None, Expiry::NEVER)
            );
            assert_eq!(pages, 1..(1 << 30) / PAGE);
            assert!(w.engine.is_current(&ticket));
        }
        d => panic!("{d:?}"),
    }
    let s = w.engine.stats();
    assert_eq!((s.misses, s.hits), (1, 3));
}

#[test]
fn another_engine_never_takes_the_memo() {
    let a = World::new();
    let b = World::new();
    a.host()
        .set_ctx(CTX_A, &ctx_with(&[&a.cap(FILE, CTX_A, RW)]));
    // B's CTX_A holds nothing for FILE; the thread is the same.
    let t = SecCtxMgr::new(CTX_A);
    warm(&a, &t, FILE, RW);
    assert!(matches!(
        b.decide(&t, FILE, PAGE, Read),
        Decision::Violation(Violation::Denied { .. })
    ));
    // And a dropped engine's memo is not taken by a new one.
    drop(a);
    let c = World::new();
    assert!(matches!(
        c.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
}

#[test]
fn a_switch_forgets_the_memo() {
    let w = World::new();
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, RW)]));
    let t = SecCtxMgr::new(CTX_A);
    t.attach(CTX_B).unwrap();
    warm(&w, &t, FILE, RW);
    assert_eq!(
        t.switch_context(CTX_B),
        kernel_hooks::SwitchResult::Switched
    );
    // CTX_B grants nothing: the grant is CTX_A's, found by switching back.
    match w.engine.decide(&t, &w.fault(FILE, PAGE, Read)) {
        Decision::Map { ctx, switch_to, .. } => assert_eq!((ctx, switch_to), (CTX_A, Some(CTX_A))),
        d => panic!("{d:?}"),
    }
}

#[test]
fn revocation_edit_and_expiry_reach_the_memo() {
    let w = World::new();
    let mut g = CapGrant::new(FILE, CTX_A, RW);
    g.expires = Expiry::from_raw(T0 + 1_000);
    let cap = w.cap_with(g);
    w.host().set_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);

    // Revocation of the record.
    warm(&w, &t, FILE, RW);
    let _ = w.revoke_record(cap.id());
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));

    // An edit: a read-only capability instead.
    let w2 = World::new();
    w2.host().set_ctx(CTX_A, &ctx_with(&[&w2.cap_with(g)]));
    warm(&w2, &t, FILE, RW);
    w2.write_ctx(CTX_A, &ctx_with(&[&w2.cap(FILE, CTX_A, R)]));
    assert_eq!(mapped(&w2.decide(&t, FILE, PAGE, Write)), None);
    assert_eq!(mapped(&w2.decide(&t, FILE, PAGE, Read)), Some(R));

    // Expiry: past T0 + 1,000 the memo's grant is gone even before the timer runs.
    let w3 = World::new();
    w3.host().set_ctx(CTX_A, &ctx_with(&[&w3.cap_with(g)]));
    warm(&w3, &t, FILE, RW);
    w3.host().advance(1_000);
    assert!(matches!(
        w3.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
}

#[test]
fn object_metadata_is_part_of_the_memo() {
    let w = World::new();
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, R)]));
    let t = SecCtxMgr::new(CTX_A);
    warm(&w, &t, FILE, R);
    // Default protections now include write: the entry (and the memo) for the old stamp
    // does not serve.
    w.host().set_object(FILE, Some(K_FILE), RW);
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Write)), Some(RW));
    // The kuid gone: the capability no longer verifies; default protections still hold.
    w.host().set_object(FILE, None, NONE);
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
}

#[test]
fn a_memo_of_a_denial_explains_it_and_grants_only_what_the_entry_does() {
    let w = World::new();
    w.host()
        .set_ctx(CTX_A, &ctx_with(&[&w.cap(FILE, CTX_A, R)]));
    let t = SecCtxMgr::new(CTX_A);
    let first = w.decide(&t, FILE, PAGE, Write);
    for page in 1..5 {
        // The same denial from the slow path, the entry and the memo.
        assert_eq!(w.decide(&t, FILE, page * PAGE, Write), first);
    }
    assert!(matches!(
        first,
        Decision::Violation(Violation::Denied { .. })
    ));
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Read)), Some(R));
    // Code: not granted, with its own explanation.
    let code = w.decide(&t, FILE, PAGE, Exec);
    assert!(matches!(code, Decision::Violation(_)));
    assert_eq!(w.decide(&t, FILE, PAGE, Exec), code);
    // An attached context that grants: the memo's denial does not stop the search.
    let other = w.cap(FILE, CTX_B, RW);
    w.host().set_ctx(CTX_B, &ctx_with(&[&other]));
    t.attach(CTX_B).unwrap();
    match w.engine.decide(&t, &w.fault(FILE, PAGE, Write)) {
        Decision::Map { switch_to, .. } => assert_eq!(switch_to, Some(CTX_B)),
        d => panic!("{d:?}"),
    }
}

#[test]
fn an_undetachable_context_denies_from_the_memo_too() {
    let w = World::new();
    let mut e = SecCtxEditor::new();
    e.add_cap(&w.cap(FILE, CTX_A, R));
    e.set_flags(CtxFlags::UNDETACHABLE);
    w.host().set_ctx(CTX_A, &e);
    let t = SecCtxMgr::new(CTX_A);
    t.attach(CTX_B).unwrap();
    let first = w.decide(&t, FILE, PAGE, Write);
    assert!(matches!(
        first,
        Decision::Violation(Violation::Undetachable { .. })
    ));
    for page in 1..5 {
        assert_eq!(w.decide(&t, FILE, page * PAGE, Write), first);
    }
}
