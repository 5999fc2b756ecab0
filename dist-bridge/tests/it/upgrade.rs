//! Version-range upgrade in a tiny version space: after many revocations and upgrades, no
//! stale token is accepted, and live tokens keep working once renewed.

use crate::common::*;
use dist_bridge::*;
use rand_core::Rng;

#[test]
fn an_upgraded_token_is_renewed_with_its_caveats() {
    let f = fixture_with(tiny(4));
    let keeper = f.export();
    let weak = keeper
        .with_rights(Rights::READ | Rights::REVOKE)
        .unwrap()
        .with_range(range(0, 4096))
        .unwrap();
    let mut upgraded = None;
    for _ in 0..16 {
        let t = f.export();
        f.owner.revoke(&t, NOW).unwrap();
        if let Some(n) = f.owner.drain_upgrades().unwrap() {
            assert_eq!(n.owner, f.owner.id());
            assert_eq!(UpgradeNotice::decode(&n.encode()).unwrap(), n);
            let c = n
                .changes
                .iter()
                .find(|c| c.index == keeper.guard().index)
                .copied()
                .unwrap();
            upgraded = Some(c);
            break;
        }
    }
    let change = upgraded.expect("no upgrade within 16 revocations");
    assert_eq!(change.old, keeper.guard().version);
    assert_eq!(
        f.read(&weak, 0, 1),
        Err(InvokeError::Upgraded {
            guard: weak.guard(),
            new_version: change.new
        })
    );
    let renewed = f.owner.renew(&weak, NOW).unwrap();
    assert_eq!(renewed.guard().version, change.new);
    assert_eq!(renewed.caveats(), weak.caveats());
    assert!(f.read(&renewed, 0, 1).is_ok());
    assert!(f.write(&renewed, 0, 1).is_err(), "caveats survive renewal");
    assert!(
        f.read(&renewed, 4096, 1).is_err(),
        "caveats survive renewal"
    );
    // Renewing a current token is a no-op.
    assert_eq!(f.owner.renew(&renewed, NOW).unwrap(), renewed);
    // The holder of the attenuated, renewed token revokes; the keeper's own (un-renewed)
    // token can no longer be renewed.
    f.owner.revoke(&renewed, NOW).unwrap();
    assert!(matches!(
        f.owner.renew(&keeper, NOW),
        Err(InvokeError::Revoked { .. })
    ));
}

#[test]
fn a_token_not_renewed_in_time_dies() {
    let f = fixture_with(tiny(4));
    let keeper = f.export();
    let mut current = keeper.clone();
    let mut saw_not_renewable = false;
    for _ in 0..64 {
        let t = f.export();
        f.owner.revoke(&t, NOW).unwrap();
        if matches!(f.read(&current, 0, 1), Err(InvokeError::Upgraded { .. })) {
            current = f.owner.renew(&current, NOW).unwrap();
        }
        assert!(f.read(&current, 0, 1).is_ok());
        match f.owner.renew(&keeper, NOW) {
            Ok(t) => assert!(f.read(&t, 0, 1).is_ok()),
            Err(e) => {
                // No upgrade record any more; or, once the entry's versions came round again,
                // a tag made under an earlier generation of the range.
                assert!(
                    matches!(e, InvokeError::NotRenewable { .. } | InvokeError::BadTag),
                    "{e}"
                );
                saw_not_renewable = true;
            }
        }
    }
    assert!(saw_not_renewable);
    assert!(f.read(&keeper, 0, 1).is_err());
}

/// One guard of the model: the token its holder keeps (renewed on upgrade), an attenuated copy
/// that is renewed too, and whether it should be alive.
struct Held {
    token: GuardedToken,
    weak: GuardedToken,
    parent: Option<usize>,
    alive: bool,
}

/// Random exports, child guards, revocations and renewals against a model, in versions
/// 1..=16: every token of a dead guard and every superseded token is refused; every live
/// guard's renewed tokens are accepted.
#[test]
fn model_check_with_a_tiny_version_space() {
    let mut upgrades = 0;
    for seed in 0..12 {
        let f = fixture_with(GuardTableConfig {
            capacity: 12,
            batch_size: 1 + (seed as u32 % 3),
            max_version: 16,
            ranges: 2 + (seed as u32 % 3),
            ..GuardTableConfig::default()
        });
        let mut rng = rng(seed);
        let mut held: Vec<Held> = Vec::new();
        let mut superseded: Vec<GuardedToken> = Vec::new();
        for step in 0..400 {
            let live: Vec<usize> = (0..held.len()).filter(|&i| held[i].alive).collect();
            let roll = rng.next_u32() % 10;
            if roll < 5 || live.is_empty() {
                // Export a root guard, or derive a child of a live one.
                let parent = (roll % 2 == 1 && !live.is_empty())
                    .then(|| live[rng.next_u32() as usize % live.len()]);
                let made = match parent {
                    None => f
                        .owner
                        .export(
                            &f.cap,
                            &f.keys,
                            &ExportRequest::new(f.ctx, Rights::all(), ByteRange::WHOLE),
                            NOW,
                        )
                        .map_err(|e| e.to_string()),
                    Some(p) => {
                        let t = &held[p].token;
                        f.owner
                            .export_from(t, t.scope(), NOW)
                            .map_err(|e| e.to_string())
                    }
                };
                match made {
                    Ok(token) => {
                        let weak = token
                            .with_rights(Rights::READ)
                            .unwrap()
                            .with_range(range(0, 4096))
                            .unwrap();
                        held.push(Held {
                            token,
                            weak,
                            parent,
                            alive: true,
                        });
                    }
                    Err(e) => assert!(e.contains("full"), "seed {seed} step {step}: {e}"),
                }
            } else {
                // Revoke a live guard: it and its descendants die in the model.
                let victim = live[rng.next_u32() as usize % live.len()];
                let report = f.owner.revoke(&held[victim].token, NOW).unwrap();
                let mut dead = 0;
                for i in 0..held.len() {
                    let mut a = Some(i);
                    while let Some(j) = a {
                        if j == victim {
                            if held[i].alive {
                                dead += 1;
                            }
                            held[i].alive = false;
                            break;
                        }
                        a = held[j].parent;
                    }
                }
                assert_eq!(report.guards_revoked, dead, "seed {seed} step {step}");
            }

            // Holders learn of upgrades and renew.
            if let Some(n) = f.owner.drain_upgrades().unwrap() {
                upgrades += n.changes.len();
                for h in held.iter_mut().filter(|h| h.alive) {
                    if n.changes.iter().any(|c| {
                        c.index == h.token.guard().index && c.old == h.token.guard().version
                    }) {
                        let (t, w) = (
                            f.owner.renew(&h.token, NOW).unwrap(),
                            f.owner.renew(&h.weak, NOW).unwrap(),
                        );
                        superseded.push(std::mem::replace(&mut h.token, t));
                        superseded.push(std::mem::replace(&mut h.weak, w));
                    }
                }
            }

            // The invariant.
            for (i, h) in held.iter().enumerate() {
                let (t, w) = (f.write(&h.token, 0, 1), f.read(&h.weak, 0, 1));
                if h.alive {
                    assert!(t.is_ok(), "seed {seed} step {step}: live {i}: {t:?}");
                    assert!(w.is_ok(), "seed {seed} step {step}: live {i} weak: {w:?}");
                } else {
                    assert!(t.is_err(), "seed {seed} step {step}: dead {i} accepted");
                    assert!(
                        w.is_err(),
                        "seed {seed} step {step}: dead {i} weak accepted"
                    );
                    assert!(f.owner.renew(&h.token, NOW).is_err());
                }
            }
            for s in &superseded {
                assert!(
                    f.read(s, 0, 1).is_err(),
                    "seed {seed} step {step}: superseded"
                );
            }
            if superseded.len() > 256 {
                superseded.drain(..128);
            }
        }
        let s = f.owner.stats().unwrap();
        assert!(s.range_advances > 5, "seed {seed}: {s:?}");
    }
    assert!(upgrades > 20, "only {upgrades} upgrades");
}
