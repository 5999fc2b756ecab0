//! The verification cache and every way a cached decision is invalidated: context edits
//! (generation), key and record revocation, expiry, detach, switch, explicit invalidation and
//! eviction.

use crate::common::*;
use kernel_hooks::{Decision, SecCtxMgr, Unmap};
use twizzler_capsec::{
    AccessKind::{Read, Write},
    CapGrant, Del, DelGrant, Expiry, ObjID, SecCtxEditor,
};

const PAGE: u64 = 4096;

#[test]
fn repeated_faults_hit_the_cache_without_verifying() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_A, RW);
    w.host().set_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    for page in 1..50 {
        assert_eq!(mapped(&w.decide(&t, FILE, page * PAGE, Write)), Some(RW));
    }
    let s = w.engine.stats();
    assert_eq!((s.misses, s.hits, s.verifies), (1, 48, 1));
}

#[test]
fn context_edit_misses_and_unchanged_records_are_not_verified_again() {
    let w = World::new();
    let file = w.cap(FILE, CTX_A, R);
    let mut e = ctx_with(&[&file]);
    w.host().set_ctx(CTX_A, &e);
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Read)), Some(R));
    assert_eq!(w.engine.stats().verifies, 1);

    // An edit the kernel noticed (its write fault called invalidate_ctx): a new cap for OTHER.
    let other = w.cap(OTHER, CTX_A, RW);
    e.add_cap(&other);
    w.write_ctx(CTX_A, &e);
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Read)), Some(R));
    let s = w.engine.stats();
    assert_eq!(s.misses, 2, "the context was invalidated: the entry missed");
    assert_eq!(s.verifies, 1, "FILE's cap is unchanged: not verified again");
    assert_eq!(s.memo_hits, 1);
    assert_eq!(mapped(&w.decide(&t, OTHER, PAGE, Write)), Some(RW));

    // Removing the cap takes effect at the next fault.
    e.remove_target(FILE);
    w.write_ctx(CTX_A, &e);
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
}

#[test]
fn key_revocation_denies_and_unmaps_exactly_what_it_granted() {
    let w = World::new();
    let file = w.cap(FILE, CTX_A, R);
    let other = w.cap(OTHER, CTX_A, R);
    w.host().set_ctx(CTX_A, &ctx_with(&[&file, &other]));
    let t = SecCtxMgr::new(CTX_A);
    assert!(grants(&w.decide(&t, FILE, PAGE, Read), Read));
    assert!(grants(&w.decide(&t, OTHER, PAGE, Read), Read));
    w.host().take_unmapped();

    let inv = w.revoke_key(K_FILE);
    assert_eq!(
        inv.unmapped(),
        &[Unmap::Object {
            ctx: CTX_A,
            target: FILE
        }]
    );
    assert_eq!(w.host().take_unmapped(), inv.unmapped());
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));

    // OTHER's entry survived the sweep and still hits.
    let before = w.engine.stats();
    assert!(grants(&w.decide(&t, OTHER, PAGE, Read), Read));
    assert_eq!(w.engine.stats().hits, before.hits + 1);

    // Revoking twice grants nothing back, and takes nothing from OTHER: it only drops FILE's
    // cached denial (nothing was mapped under it).
    let again = w.revoke_key(K_FILE);
    assert!(
        again.unmapped().iter().all(|u| *u
            == Unmap::Object {
                ctx: CTX_A,
                target: FILE
            }),
        "{again:?}"
    );
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
    assert!(grants(&w.decide(&t, OTHER, PAGE, Read), Read));
}

#[test]
fn revoking_a_cap_revokes_the_delegations_derived_from_it() {
    let w = World::new();
    let parent = w.cap(FILE, CTX_A, RW);
    let del = Del::from_cap(&parent, DelGrant::new(CTX_B, R), w.key(CTX_A)).unwrap();
    w.host().set_ctx(CTX_A, &ctx_with(&[&parent]));
    let mut b = SecCtxEditor::new();
    b.add_del(&del);
    w.host().set_ctx(CTX_B, &b);
    let ta = SecCtxMgr::new(CTX_A);
    let tb = SecCtxMgr::new(CTX_B);
    assert!(grants(&w.decide(&ta, FILE, PAGE, Write), Write));
    assert!(grants(&w.decide(&tb, FILE, PAGE, Read), Read));

    let inv = w.revoke_record(parent.id());
    let mut got = inv.unmapped().to_vec();
    got.sort_by_key(|u| format!("{u:?}"));
    assert_eq!(
        got,
        vec![
            Unmap::Object {
                ctx: CTX_A,
                target: FILE
            },
            Unmap::Object {
                ctx: CTX_B,
                target: FILE
            },
        ]
    );
    assert!(matches!(
        w.decide(&ta, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
    assert!(matches!(
        w.decide(&tb, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
}

#[test]
fn revoking_a_providers_key_revokes_its_delegations() {
    let w = World::new();
    let parent = w.cap(FILE, CTX_A, RW);
    let del = Del::from_cap(&parent, DelGrant::new(CTX_B, R), w.key(CTX_A)).unwrap();
    let mut b = SecCtxEditor::new();
    b.add_del(&del);
    w.host().set_ctx(CTX_B, &b);
    let tb = SecCtxMgr::new(CTX_B);
    assert!(grants(&w.decide(&tb, FILE, PAGE, Read), Read));
    let inv = w.revoke_key(K_CTX_A);
    assert_eq!(inv.total(), 1);
    assert!(matches!(
        w.decide(&tb, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
}

#[test]
fn expiry_passing_misses_denies_and_expire_unmaps() {
    let w = World::new();
    let mut g = CapGrant::new(FILE, CTX_A, R);
    g.expires = Expiry::from_raw(T0 + 1_000);
    let cap = w.cap_with(g);
    w.host().set_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    match w.decide(&t, FILE, PAGE, Read) {
        Decision::Map { valid_until, .. } => assert_eq!(valid_until, g.expires),
        other => panic!("{other:?}"),
    }
    assert!(w.engine.expire().is_empty(), "nothing has expired yet");

    w.host().advance(1_000);
    let inv = w.engine.expire();
    assert_eq!(
        inv.unmapped(),
        &[Unmap::Object {
            ctx: CTX_A,
            target: FILE
        }]
    );
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
}

#[test]
fn expiry_passing_without_a_sweep_still_denies_at_the_next_fault() {
    let w = World::new();
    let mut g = CapGrant::new(FILE, CTX_A, R);
    g.expires = Expiry::from_raw(T0 + 10);
    let cap = w.cap_with(g);
    w.host().set_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    assert!(grants(&w.decide(&t, FILE, PAGE, Read), Read));
    w.host().advance(10);
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
}

#[test]
fn detach_stops_the_context_granting_for_that_thread() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_B, R);
    w.host().set_ctx(CTX_B, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    t.attach(CTX_B).unwrap();
    let other_thread = SecCtxMgr::new(CTX_A);
    other_thread.attach(CTX_B).unwrap();

    // Warm the cache for B: the decision names B, and the kernel switches the thread to it.
    let d = w.engine.decide(&t, &w.fault(FILE, PAGE, Read));
    assert!(grants(&d, Read));
    assert!(matches!(
        d,
        Decision::Map {
            switch_to: Some(CTX_B),
            ..
        }
    ));
    assert_eq!(t.active_id(), CTX_A, "decide does not switch by itself");
    assert_eq!(
        t.switch_context(CTX_B),
        kernel_hooks::SwitchResult::Switched
    );
    // Then back to A.
    assert_eq!(
        t.switch_context(CTX_A),
        kernel_hooks::SwitchResult::Switched
    );
    t.detach(CTX_B).unwrap();
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
    assert_eq!(t.active_id(), CTX_A);
    // The other thread still has B.
    assert!(grants(&w.decide(&other_thread, FILE, PAGE, Read), Read));

    assert_eq!(
        t.detach(CTX_A),
        Err(kernel_hooks::DetachError::Active(CTX_A))
    );
    assert_eq!(
        t.detach(CTX_B),
        Err(kernel_hooks::DetachError::NotAttached(CTX_B))
    );
    assert_eq!(
        t.switch_context(CTX_B),
        kernel_hooks::SwitchResult::NotAttached
    );
}

#[test]
fn switch_changes_which_context_decides() {
    let w = World::new();
    let a = w.cap(FILE, CTX_A, R);
    let b = w.cap(FILE, CTX_B, RW);
    w.host().set_ctx(CTX_A, &ctx_with(&[&a]));
    w.host().set_ctx(CTX_B, &ctx_with(&[&b]));
    let t = SecCtxMgr::new(CTX_A);
    t.attach(CTX_B).unwrap();
    assert!(
        matches!(w.decide(&t, FILE, PAGE, Read), Decision::Map { prots, switch_to: None, .. } if prots == R)
    );
    assert_eq!(
        t.switch_context(CTX_B),
        kernel_hooks::SwitchResult::Switched
    );
    assert!(
        matches!(w.decide(&t, FILE, PAGE, Read), Decision::Map { prots, switch_to: None, .. } if prots == RW)
    );
}

#[test]
fn invalidate_ctx_unmaps_the_context_and_forgets_its_decisions() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_A, R);
    w.host().set_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    assert!(grants(&w.decide(&t, FILE, PAGE, Read), Read));
    assert_eq!(w.engine.cached(), 1);
    let inv = w.engine.invalidate_ctx(CTX_A);
    assert!(inv.unmapped().contains(&Unmap::Context(CTX_A)));
    assert_eq!(w.engine.cached(), 0);
    let misses = w.engine.stats().misses;
    assert!(grants(&w.decide(&t, FILE, PAGE, Read), Read));
    assert_eq!(w.engine.stats().misses, misses + 1);
}

#[test]
fn eviction_unmaps_the_displaced_decision_and_decisions_stay_right() {
    let w = World::new();
    let n = (kernel_hooks::cache::SETS * kernel_hooks::cache::WAYS + 50) as u128;
    let key = w.key(FILE).clone();
    let mut e = SecCtxEditor::new();
    for i in 0..n {
        let obj = ObjID::new(0x10_0000 + i);
        w.host().set_object(obj, Some(K_FILE), NONE);
        let prots = if i % 2 == 0 { R } else { RW };
        e.add_cap(&twizzler_capsec::Cap::mint(CapGrant::new(obj, CTX_A, prots), &key).unwrap());
    }
    w.host().set_ctx(CTX_A, &e);
    let t = SecCtxMgr::new(CTX_A);
    for round in 0..2 {
        for i in 0..n {
            let obj = ObjID::new(0x10_0000 + i);
            let want = if i % 2 == 0 { R } else { RW };
            assert_eq!(
                mapped(&w.decide(&t, obj, PAGE, Read)),
                Some(want),
                "round {round} obj {i}"
            );
        }
    }
    let s = w.engine.stats();
    assert!(s.evictions > 0);
    // Each record verified once, plus the few whose memo set overflowed (it is
    // set-associative): without the memo the second round would verify n more.
    assert!(
        (s.verifies as u128) >= n && (s.verifies as u128) < n + n / 10,
        "verifies {} for {n} records",
        s.verifies
    );
    let unmapped = w.host().take_unmapped();
    assert_eq!(unmapped.len() as u64, s.evictions);
}

#[test]
fn revocation_scales_to_a_million_records_and_a_hundred_thousand_keys() {
    // The sets are the host's; the engine keeps none, so nothing fills up, and a hit consults
    // none of them.
    let w = World::new();
    let cap = w.cap(FILE, CTX_A, R);
    let other = w.cap(OTHER, CTX_A, R);
    w.write_ctx(CTX_A, &ctx_with(&[&cap, &other]));
    let t = SecCtxMgr::new(CTX_A);
    for i in 0..100_000u128 {
        w.host().record_key_revocation(ObjID::new(0x7000_0000 + i));
    }
    for i in 0..1_000_000u64 {
        let mut id = [0u8; 32];
        id[..8].copy_from_slice(&i.to_le_bytes());
        w.host()
            .record_record_revocation(twizzler_capsec::RecordId(id));
    }
    assert!(grants(&w.decide(&t, FILE, PAGE, Read), Read));
    assert!(grants(&w.decide(&t, OTHER, PAGE, Read), Read));
    // One more of each still takes effect.
    w.revoke_record(cap.id());
    assert!(matches!(
        w.decide(&t, FILE, PAGE, Read),
        Decision::Violation(_)
    ));
    w.revoke_key(K_OTHER);
    assert!(matches!(
        w.decide(&t, OTHER, PAGE, Read),
        Decision::Violation(_)
    ));
    // A hit asks the host nothing about revocation.
    w.write_ctx(CTX_A, &ctx_with(&[&w.cap(LIB, CTX_A, R)]));
    let _ = w.decide(&t, LIB, PAGE, Read);
    let before = w.host().host_calls();
    let _ = w.decide(&t, LIB, PAGE, Read);
    assert_eq!(w.host().host_calls(), before);
}

#[test]
fn flush_unmaps_everything_and_forgets_verified_records() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_A, R);
    w.host().set_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    assert!(grants(&w.decide(&t, FILE, PAGE, Read), Read));
    let inv = w.engine.flush();
    assert_eq!(inv.total(), 1);
    assert_eq!(w.engine.cached(), 0);
    assert!(grants(&w.decide(&t, FILE, PAGE, Read), Read));
    assert_eq!(w.engine.stats().verifies, 2, "the memo was flushed too");
}

#[test]
fn sequential_object_ids_spread_over_the_cache() {
    // 64 objects with consecutive ids fit in the cache at once: the set index must use every
    // bit of the id, or they pile into a few sets and evict each other on every fault.
    let w = World::new();
    let key = w.key(FILE).clone();
    let mut e = SecCtxEditor::new();
    for i in 0..64u128 {
        let obj = ObjID::new(0x1_0000_0000 + i);
        w.host().set_object(obj, Some(K_FILE), NONE);
        e.add_cap(&twizzler_capsec::Cap::mint(CapGrant::new(obj, CTX_A, R), &key).unwrap());
    }
    w.host().set_ctx(CTX_A, &e);
    let t = SecCtxMgr::new(CTX_A);
    for _ in 0..2 {
        for i in 0..64u128 {
            assert!(grants(
                &w.decide(&t, ObjID::new(0x1_0000_0000 + i), PAGE, Read),
                Read
            ));
        }
    }
    let s = w.engine.stats();
    assert!(
        s.hits >= 60,
        "second round hit {} of 64 (evictions {})",
        s.hits,
        s.evictions
    );
}

#[test]
fn a_mapping_made_from_a_fifth_record_is_unmapped_at_its_expiry() {
    // Five valid records for one object with five different gates: more than one cache
    // entry's grants. The fifth, which expires first, is the only one covering page 9.
    let w = World::new();
    let mut caps = Vec::new();
    for i in 0..5u64 {
        let mut g = twizzler_capsec::CapGrant::new(FILE, CTX_A, R);
        g.gate = twizzler_capsec::Gate::new((1 + 2 * i) * PAGE, PAGE, 1).unwrap();
        if i == 4 {
            g.expires = twizzler_capsec::Expiry::from_raw(T0 + 500);
        }
        caps.push(w.cap_with(g));
    }
    let refs: Vec<&twizzler_capsec::Cap> = caps.iter().collect();
    w.write_ctx(CTX_A, &ctx_with(&refs));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(mapped(&w.decide(&t, FILE, 9 * PAGE, Read)), Some(R));
    assert_eq!(
        w.engine.next_deadline(),
        Some(T0 + 500),
        "the timer must be armed for the record that granted"
    );
    w.host().take_unmapped();
    w.host().advance(500);
    let inv = w.engine.expire();
    assert!(
        inv.unmapped().contains(&Unmap::Object {
            ctx: CTX_A,
            target: FILE
        }),
        "the page mapped from the fifth record outlived it: {inv:?}"
    );
    assert!(matches!(
        w.decide(&t, FILE, 9 * PAGE, Read),
        Decision::Violation(_)
    ));
    // Pages the other four grant are granted again at the next fault.
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Read)), Some(R));
}

#[test]
fn the_513th_revocation_still_takes_effect() {
    let w = World::new();
    let cap = w.cap(FILE, CTX_A, R);
    w.write_ctx(CTX_A, &ctx_with(&[&cap]));
    let t = SecCtxMgr::new(CTX_A);
    for i in 0..512u64 {
        let mut id = [0u8; 32];
        id[..8].copy_from_slice(&i.to_le_bytes());
        w.revoke_record(twizzler_capsec::RecordId(id));
    }
    w.revoke_record(cap.id());
    assert!(
        matches!(w.decide(&t, FILE, PAGE, Read), Decision::Violation(_)),
        "a revoked record still grants"
    );
}

/// Issue 20, defect 1: 130 never-expiring read capabilities (each for its own page, 2..=131),
/// listed before a read-write capability for page 1 that expires at T+1000. The read
/// capabilities spend the fault's signature budget, so the read-write one was granted from
/// past the budget, by a record the cached entry never counted: the timer, the expiry sweep
/// and revocation did not know the mapping. Returns the world, the thread and the read-write
/// capability, after a second write fault that must grant `rw` until T+1000.
fn grant_past_the_budget() -> (World, SecCtxMgr, twizzler_capsec::Cap) {
    let w = World::new();
    let mut caps = Vec::new();
    for i in 0..130u64 {
        let mut g = CapGrant::new(FILE, CTX_A, R);
        g.gate = twizzler_capsec::Gate::new((2 + i) * PAGE, PAGE, 1).unwrap();
        caps.push(w.cap_with(g));
    }
    let mut g = CapGrant::new(FILE, CTX_A, RW);
    g.gate = twizzler_capsec::Gate::new(PAGE, PAGE, 1).unwrap();
    g.expires = Expiry::from_raw(T0 + 1_000);
    let rw = w.cap_with(g);
    caps.push(rw);
    let refs: Vec<&twizzler_capsec::Cap> = caps.iter().collect();
    w.write_ctx(CTX_A, &ctx_with(&refs));
    let t = SecCtxMgr::new(CTX_A);
    // The first write fault may or may not grant (the budget is the engine's business); the
    // second must, as the rule does.
    let _ = w.decide(&t, FILE, PAGE, Write);
    match w.decide(&t, FILE, PAGE, Write) {
        Decision::Map {
            prots, valid_until, ..
        } => {
            assert_eq!(prots, RW);
            assert_eq!(valid_until, g.expires);
        }
        other => panic!("the rule grants rw: {other:?}"),
    }
    w.host().take_unmapped();
    (w, t, rw)
}

#[test]
fn a_grant_from_past_the_signature_budget_is_unmapped_at_its_expiry() {
    let (w, t, _) = grant_past_the_budget();
    assert_eq!(
        w.engine.next_deadline(),
        Some(T0 + 1_000),
        "the timer must be armed for the record that granted rw"
    );
    w.host().advance(1_000);
    let inv = w.engine.expire();
    assert!(
        inv.unmapped().contains(&Unmap::Object {
            ctx: CTX_A,
            target: FILE
        }),
        "the rw page outlived its capability: {inv:?}"
    );
    assert!(!grants(&w.decide(&t, FILE, PAGE, Write), Write));
}

#[test]
fn a_grant_from_past_the_signature_budget_is_unmapped_when_its_record_is_revoked() {
    let (w, t, rw) = grant_past_the_budget();
    let inv = w.revoke_record(rw.id());
    assert!(
        inv.unmapped().contains(&Unmap::Object {
            ctx: CTX_A,
            target: FILE
        }),
        "the rw page outlived its revoked capability: {inv:?}"
    );
    assert!(!grants(&w.decide(&t, FILE, PAGE, Write), Write));
    // The read capabilities still grant their pages.
    assert_eq!(mapped(&w.decide(&t, FILE, 2 * PAGE, Read)), Some(R));
}

#[test]
fn a_grant_from_past_the_signature_budget_is_unmapped_when_the_context_is_invalidated() {
    let (w, t, _) = grant_past_the_budget();
    let inv = w.engine.invalidate_ctx(CTX_A);
    assert!(
        inv.unmapped().contains(&Unmap::Object {
            ctx: CTX_A,
            target: FILE
        }) && inv.unmapped().contains(&Unmap::Context(CTX_A)),
        "{inv:?}"
    );
    // Decided again afterwards, from the same records.
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Write)), Some(RW));
}

#[test]
fn a_miss_verifies_what_the_access_needs_and_the_rest_when_an_access_needs_it() {
    // Sixteen read capabilities for FILE, one per page 1..=16; the one for page 9 expires.
    let w = World::new();
    let mut caps = Vec::new();
    for i in 0..16u64 {
        let mut g = CapGrant::new(FILE, CTX_A, R);
        g.gate = twizzler_capsec::Gate::new((1 + i) * PAGE, PAGE, 1).unwrap();
        if i == 8 {
            g.expires = Expiry::from_raw(T0 + 700);
        }
        caps.push(w.cap_with(g));
    }
    let refs: Vec<&twizzler_capsec::Cap> = caps.iter().collect();
    w.write_ctx(CTX_A, &ctx_with(&refs));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Read)), Some(R));
    assert_eq!(w.engine.stats().verifies, 1, "one record grants page 1");
    assert_eq!(w.engine.next_deadline(), None);
    assert_eq!(mapped(&w.decide(&t, FILE, 9 * PAGE, Read)), Some(R));
    assert_eq!(w.engine.stats().verifies, 2, "page 9 needed one more");
    assert_eq!(w.engine.next_deadline(), Some(T0 + 700));
    // Both pages are hits now, served from one entry.
    let before = w.engine.stats();
    for page in [1, 9, 1, 9] {
        assert_eq!(mapped(&w.decide(&t, FILE, page * PAGE, Read)), Some(R));
    }
    let after = w.engine.stats();
    assert_eq!((after.hits - before.hits, after.verifies), (4, 2));
    // A write is granted by no record: every record is judged, once, and the denial is then
    // served from the cache.
    assert!(!grants(&w.decide(&t, FILE, PAGE, Write), Write));
    assert_eq!(w.engine.stats().verifies, 16);
    let before = w.engine.stats();
    assert!(!grants(&w.decide(&t, FILE, PAGE, Write), Write));
    let after = w.engine.stats();
    assert_eq!((after.hits - before.hits, after.verifies), (1, 16));
    // The page-9 grant still expires with its record, whichever fault verified it.
    w.host().take_unmapped();
    w.host().advance(700);
    assert!(w.engine.expire().unmapped().contains(&Unmap::Object {
        ctx: CTX_A,
        target: FILE
    }));
    assert!(!grants(&w.decide(&t, FILE, 9 * PAGE, Read), Read));
    assert_eq!(mapped(&w.decide(&t, FILE, 2 * PAGE, Read)), Some(R));
}

#[test]
fn a_miss_finds_the_record_for_its_page_in_any_order_and_verifies_only_it() {
    // 300 read capabilities for FILE, one per page 1..=300 (the one for page 200 expires),
    // listed in page order, in reverse, and interleaved (as another writer may list them;
    // the editor writes gate order). A first fault on any page verifies one record, the
    // page's own, in every order (the scan starts at the record whose gate covers the
    // page: found by a search in gate order, by reading the gates otherwise).
    let n = 300u64;
    let page_cap = |w: &World, page: u64| {
        let mut g = CapGrant::new(FILE, CTX_A, R);
        g.gate = twizzler_capsec::Gate::new(page * PAGE, PAGE, 1).unwrap();
        if page == 200 {
            g.expires = Expiry::from_raw(T0 + 700);
        }
        w.cap_with(g)
    };
    let orders: [(&str, Vec<u64>); 3] = [
        ("page order", (1..=n).collect()),
        ("reverse", (1..=n).rev().collect()),
        (
            "interleaved",
            (1..=n).step_by(2).chain((2..=n).step_by(2)).collect(),
        ),
    ];
    for (name, order) in &orders {
        let w = World::new();
        let caps: Vec<_> = order.iter().map(|p| page_cap(&w, *p)).collect();
        let refs: Vec<&twizzler_capsec::Cap> = caps.iter().collect();
        w.write_ctx_as_listed(CTX_A, &refs);
        let t = SecCtxMgr::new(CTX_A);
        for page in [n, 1, 150, 299, 200] {
            w.engine.flush();
            let before = w.engine.stats().verifies;
            let d = w.decide(&t, FILE, page * PAGE, Read);
            assert_eq!(mapped(&d), Some(R), "{name}: page {page}");
            assert_eq!(w.engine.stats().verifies - before, 1, "{name}: page {page}");
        }
        // The page-200 grant is the expiring record's: its deadline is armed and the timer
        // unmaps it.
        assert_eq!(w.engine.next_deadline(), Some(T0 + 700), "{name}");
        w.host().take_unmapped();
        w.host().advance(700);
        let gone = w.engine.expire();
        assert!(
            gone.unmapped().contains(&Unmap::Object {
                ctx: CTX_A,
                target: FILE
            }),
            "{name}"
        );
        // Past the last page record: nothing grants; every record is judged.
        w.engine.flush();
        assert!(
            !grants(&w.decide(&t, FILE, (n + 5) * PAGE, Read), Read),
            "{name}"
        );

        // The same records with a read-write capability for the whole object after them: a
        // write past the page records is granted by that record alone; a write to a page
        // verifies the page's record (it adds the read a write needs) and that one; a read,
        // one record.
        let w = World::new();
        let mut caps: Vec<_> = order.iter().map(|p| page_cap(&w, *p)).collect();
        caps.push(w.cap_with(CapGrant::new(FILE, CTX_A, RW)));
        let refs: Vec<&twizzler_capsec::Cap> = caps.iter().collect();
        w.write_ctx_as_listed(CTX_A, &refs);
        for (page, kind, verifies) in [
            (n + 5, Write, 1),
            (42, Write, 2),
            (7, Read, 1),
            (n, Read, 1),
        ] {
            w.engine.flush();
            let before = w.engine.stats().verifies;
            assert!(
                grants(&w.decide(&t, FILE, page * PAGE, kind), kind),
                "{name}: {page}"
            );
            let did = w.engine.stats().verifies - before;
            assert_eq!(did, verifies, "{name}: {page} {kind:?}");
        }
    }
}

#[test]
fn an_expired_entry_replaced_before_the_timer_unmaps_what_it_granted() {
    // Page 1 is granted by a capability that expires at T+10; page 2 by one that never does.
    // The fault on page 2 comes after the expiry but before the timer's `expire`: the entry it
    // builds replaces the expired one, and the page-1 mapping must go then (the timer will
    // find only the new, unexpired entry).
    let w = World::new();
    let mut a = CapGrant::new(FILE, CTX_A, R);
    a.gate = twizzler_capsec::Gate::new(PAGE, PAGE, 1).unwrap();
    a.expires = Expiry::from_raw(T0 + 10);
    let mut b = CapGrant::new(FILE, CTX_A, R);
    b.gate = twizzler_capsec::Gate::new(2 * PAGE, PAGE, 1).unwrap();
    let (a, b) = (w.cap_with(a), w.cap_with(b));
    w.write_ctx(CTX_A, &ctx_with(&[&a, &b]));
    let t = SecCtxMgr::new(CTX_A);
    assert_eq!(mapped(&w.decide(&t, FILE, PAGE, Read)), Some(R));
    w.host().take_unmapped();
    w.host().advance(10);
    assert_eq!(mapped(&w.decide(&t, FILE, 2 * PAGE, Read)), Some(R));
    assert!(
        w.host().take_unmapped().contains(&Unmap::Object {
            ctx: CTX_A,
            target: FILE
        }),
        "the page granted by the expired capability stayed mapped"
    );
    assert!(!grants(&w.decide(&t, FILE, PAGE, Read), Read));
}
