//! One exported guard's holders may derive at most `max_derived` guards from it, in all
//! generations together: a holder with DERIVE cannot fill the guard table.

use crate::common::*;
use dist_bridge::*;

fn quota(n: u32) -> Fixture {
    fixture_with(GuardTableConfig {
        capacity: 64,
        max_derived: n,
        ..GuardTableConfig::default()
    })
}

#[test]
fn derived_guards_stop_at_the_quota_in_all_generations() {
    let f = quota(3);
    let root = f.export();
    let a = f
        .owner
        .export_from(&root, root.scope(), NOW)
        .expect("child 1");
    let b = f
        .owner
        .export_from(&root, root.scope(), NOW)
        .expect("child 2");
    let _aa = f.owner.export_from(&a, a.scope(), NOW).expect("grandchild");
    // The tree holds three derived guards: from the root, a child or a grandchild, no more.
    for from in [&root, &a, &b] {
        let e = f
            .owner
            .export_from(from, from.scope(), NOW)
            .expect_err("past the quota");
        assert!(matches!(e, InvokeError::DeriveQuota { quota: 3 }), "{e}");
        assert_eq!(wire::invoke_kind(&e).1, ErrorKind::DeriveQuota);
    }
    // Another exported guard has its own quota, and the owner keeps exporting.
    let other = f.export();
    f.owner
        .export_from(&other, other.scope(), NOW)
        .expect("another tree");
    // Revoking a subtree frees its share.
    f.owner
        .revoke(&a, NOW)
        .expect("revoke a child and its child");
    f.owner.export_from(&b, b.scope(), NOW).expect("room again");
    f.owner
        .export_from(&root, root.scope(), NOW)
        .expect("room again");
    assert!(f.owner.export_from(&root, root.scope(), NOW).is_err());
}

#[test]
fn a_holder_cannot_fill_the_table() {
    let f = quota(8);
    let root = f.export();
    // Derive flat out, from every token obtained, until refused.
    let mut tokens = vec![root];
    let mut made = 0;
    while let Some(t) = tokens.pop() {
        while let Ok(c) = f.owner.export_from(&t, t.scope(), NOW) {
            made += 1;
            tokens.push(c);
        }
    }
    assert_eq!(made, 8);
    let stats = f.owner.stats().expect("stats");
    assert_eq!(stats.live, 9, "{stats:?}");
    // The owner's own exports are unaffected.
    for _ in 0..20 {
        f.export();
    }
}

#[test]
fn a_zero_quota_forbids_deriving() {
    let f = quota(0);
    let root = f.export();
    let e = f
        .owner
        .export_from(&root, root.scope(), NOW)
        .expect_err("deriving with a zero quota");
    assert!(matches!(e, InvokeError::DeriveQuota { quota: 0 }), "{e}");
}
