//! Revocation: the guard derivation tree, entry reuse, and revocation racing invocations.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use crate::common::*;
use dist_bridge::*;
use twizzler_capsec::Expiry;

#[test]
fn revoke_rejects_every_outstanding_derived_token() {
    let f = fixture();
    let root = f.export();
    // Offline attenuations of the root (no guard of their own).
    let ro = root
        .with_rights(Rights::READ | Rights::DERIVE | Rights::REVOKE)
        .unwrap();
    let page = ro.with_range(range(0, 4096)).unwrap();
    // Child guards (revocable sub-delegation), a grandchild, and their attenuations.
    let child = f.owner.export_from(&root, root.scope(), NOW).unwrap();
    let child_ro = child.with_rights(Rights::READ).unwrap();
    let grandchild = f
        .owner
        .export_from(&child, child.scope().with_range(range(0, 8192)), NOW)
        .unwrap();
    let grand_page = grandchild.with_range(range(4096, 4096)).unwrap();
    let sibling = f.owner.export_from(&ro, ro.scope(), NOW).unwrap();
    // An unrelated guard on the same object.
    let unrelated = f.export();

    let derived = [
        &ro,
        &page,
        &child,
        &child_ro,
        &grandchild,
        &grand_page,
        &sibling,
    ];
    for t in derived {
        assert!(f.read(t, 0, 1).is_ok() || f.read(t, 4096, 1).is_ok());
    }
    assert_eq!(f.owner.stats().unwrap().live, 5);

    // One round trip, by the holder of the root: the root and its 3 descendant guards.
    assert_eq!(
        f.owner.revoke(&root, NOW).unwrap(),
        RevokeReport { guards_revoked: 4 }
    );
    for t in derived.into_iter().chain([&root]) {
        for (offset, op) in [(0, Op::Read), (4096, Op::Read), (0, Op::Write)] {
            let err = f.owner.check(t, op, offset, 1, NOW).unwrap_err();
            assert!(
                matches!(err, InvokeError::Revoked { .. }),
                "{:?}: {err}",
                t.guard()
            );
        }
        assert!(f.owner.revoke(t, NOW).is_err());
        assert!(f.owner.export_from(t, t.scope(), NOW).is_err());
    }
    assert!(f.read(&unrelated, 0, 1).is_ok());
    assert_eq!(f.owner.stats().unwrap().live, 1);
}

#[test]
fn revoking_a_child_leaves_its_parent() {
    let f = fixture();
    let root = f.export();
    // The child may carry REVOKE even from a token without it (it can revoke only itself).
    let deriver = root.with_rights(Rights::READ | Rights::DERIVE).unwrap();
    let child = f
        .owner
        .export_from(
            &deriver,
            Scope::new(Rights::READ | Rights::REVOKE, range(0, 100), Expiry::NEVER),
            NOW,
        )
        .unwrap();
    // But never more data rights or range than the deriving token has.
    assert_eq!(
        f.owner
            .export_from(&deriver, deriver.scope().with_rights(Rights::WRITE), NOW)
            .unwrap_err(),
        InvokeError::Widens(Widening::Rights)
    );
    assert_eq!(
        f.owner.export_from(&child, child.scope(), NOW).unwrap_err(),
        InvokeError::RightsExceeded {
            needed: Rights::DERIVE,
            held: Rights::READ | Rights::REVOKE
        }
    );
    assert_eq!(f.owner.revoke(&child, NOW).unwrap().guards_revoked, 1);
    assert!(matches!(
        f.read(&child, 0, 1),
        Err(InvokeError::Revoked { .. })
    ));
    assert!(f.read(&deriver, 0, 1).is_ok());
    assert!(f.write(&root, 0, 1).is_ok());
}

#[test]
fn a_reused_entry_never_accepts_a_token_from_an_earlier_life() {
    // One entry, reused over and over through the whole (tiny, wrapping) version space.
    let f = fixture_with(tiny(1));
    let mut old: Vec<GuardedToken> = Vec::new();
    let mut same_ref_seen = 0;
    for _ in 0..100 {
        let t = f.export();
        assert_eq!(t.guard().index, 0);
        assert!(f.write(&t, 0, 1).is_ok());
        for o in &old {
            if o.guard() == t.guard() {
                // Same index and version as the live guard, after the range was recycled:
                // only the range generation in the key tells them apart.
                same_ref_seen += 1;
                assert_eq!(f.read(o, 0, 1), Err(InvokeError::BadTag));
            } else {
                assert!(f.read(o, 0, 1).is_err());
            }
            assert!(f.owner.revoke(o, NOW).is_err());
        }
        f.owner.revoke(&t, NOW).unwrap();
        old.push(t.with_rights(Rights::READ).unwrap());
        old.push(t);
    }
    assert!(same_ref_seen > 0, "the version space never wrapped");
}

#[test]
fn reuse_is_batched() {
    let f = fixture_with(GuardTableConfig {
        capacity: 4,
        batch_size: 2,
        ..GuardTableConfig::default()
    });
    let tokens: Vec<_> = (0..4).map(|_| f.export()).collect();
    assert!(matches!(
        f.owner.export(
            &f.cap,
            &f.keys,
            &ExportRequest::new(f.ctx, Rights::READ, ByteRange::WHOLE),
            NOW
        ),
        Err(ExportError::TableFull { capacity: 4 })
    ));
    f.owner.revoke(&tokens[0], NOW).unwrap();
    let s = f.owner.stats().unwrap();
    assert_eq!((s.pending, s.batches_flushed, s.epoch), (1, 0, 1));
    f.owner.revoke(&tokens[1], NOW).unwrap();
    let s = f.owner.stats().unwrap();
    assert_eq!(
        (s.pending, s.free, s.batches_flushed, s.epoch),
        (0, 2, 1, 2)
    );
    let again = f.export();
    assert_eq!(
        again.guard(),
        GuardRef {
            index: 0,
            version: 2
        }
    );
    assert_eq!(
        f.read(&tokens[0], 0, 1),
        Err(InvokeError::StaleGuard {
            guard: tokens[0].guard(),
            current: 2
        })
    );
}

#[test]
fn sweeping_and_source_revocation() {
    let f = fixture();
    let short = f
        .owner
        .export(
            &f.cap,
            &f.keys,
            &ExportRequest {
                context: f.ctx,
                scope: Scope::new(Rights::all(), ByteRange::WHOLE, Expiry::from_raw(NOW + 10)),
            },
            NOW,
        )
        .unwrap();
    let long = f.export();
    let child = f.owner.export_from(&long, long.scope(), NOW).unwrap();
    assert_eq!(f.owner.sweep_expired(NOW + 10).unwrap().guards_revoked, 1);
    assert!(matches!(
        f.read(&short, 0, 1),
        Err(InvokeError::Revoked { .. })
    ));
    assert!(f.read(&long, 0, 1).is_ok());
    // The capability is revoked locally: every guard exported from it goes, children too.
    assert_eq!(
        f.owner.revoke_source(&f.cap.id()).unwrap().guards_revoked,
        2
    );
    assert!(f.read(&child, 0, 1).is_err());
    assert_eq!(f.owner.stats().unwrap().live, 0);
    let again = f.export();
    assert_eq!(f.owner.revoke_object(f.object).unwrap().guards_revoked, 1);
    assert!(f.read(&again, 0, 1).is_err());
}

/// Checkers run flat out while guards are revoked one by one; a check that *started* after
/// `revoke` returned must never succeed.
#[test]
fn no_invocation_is_accepted_after_revocation_returns() {
    let f = Arc::new(fixture());
    for round in 0..20 {
        let root = f.export();
        let derived = root.with_rights(Rights::READ).unwrap();
        let child = f.owner.export_from(&root, root.scope(), NOW).unwrap();
        let revoked = Arc::new(AtomicBool::new(false));
        let accepted_before = Arc::new(AtomicU64::new(0));
        let checkers: Vec<_> = (0..3)
            .map(|i| {
                let (f, revoked, accepted_before) =
                    (f.clone(), revoked.clone(), accepted_before.clone());
                let token = if i % 2 == 0 {
                    derived.clone()
                } else {
                    child.clone()
                };
                thread::spawn(move || {
                    let mut after = 0;
                    // Keep checking until well after the revocation.
                    while after < 200 {
                        let was_revoked = revoked.load(Ordering::SeqCst);
                        let r = f.read(&token, 0, 1);
                        if was_revoked {
                            assert!(r.is_err(), "round {round}: accepted after revoke returned");
                            after += 1;
                        } else if r.is_ok() {
                            accepted_before.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        // Let the checkers get going, then revoke.
        while accepted_before.load(Ordering::Relaxed) < 50 {
            thread::yield_now();
        }
        f.owner.revoke(&root, NOW).unwrap();
        revoked.store(true, Ordering::SeqCst);
        for c in checkers {
            c.join().unwrap();
        }
    }
}

/// Several revokers and checkers on distinct guards at once: each checker's token stops
/// working the moment its guard's revocation returns, and never before any revocation.
#[test]
fn concurrent_revocations_and_invocations() {
    let f = Arc::new(fixture_with(GuardTableConfig {
        capacity: 64,
        batch_size: 3,
        ..GuardTableConfig::default()
    }));
    let pairs: Vec<_> = (0..8)
        .map(|_| {
            let root = f.export();
            let weak = root.with_rights(Rights::READ).unwrap();
            (root, weak, Arc::new(AtomicBool::new(false)))
        })
        .collect();
    let mut handles = Vec::new();
    for (root, weak, flag) in &pairs {
        let (f2, weak, flag2) = (f.clone(), weak.clone(), flag.clone());
        handles.push(thread::spawn(move || {
            let mut after = 0;
            while after < 100 {
                let was = flag2.load(Ordering::SeqCst);
                let r = f2.read(&weak, 0, 1);
                if was {
                    assert!(r.is_err());
                    after += 1;
                }
            }
        }));
        let (f3, root, flag3) = (f.clone(), root.clone(), flag.clone());
        handles.push(thread::spawn(move || {
            for _ in 0..50 {
                assert!(f3.read(&root, 0, 1).is_ok());
            }
            f3.owner.revoke(&root, NOW).unwrap();
            flag3.store(true, Ordering::SeqCst);
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(f.owner.stats().unwrap().live, 0);
}
