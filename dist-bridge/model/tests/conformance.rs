//! The model's guard table against `dist_bridge::table::GuardTable`: every sequence of up to
//! 7 operations (insert a root or a child, revoke an entry) on small shapes, compared after
//! every step: the result of the operation, the epoch, every range's generation, and what
//! `lookup` says of every `(index, version)`. So the model checked in `check.rs` is the
//! table the node runs, not a table like it.

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use dist_bridge::table::{GuardInfo, GuardTable, LookupError as RealLookup};
use dist_bridge::token::{GuardRef, Scope};
use dist_bridge::{ByteRange, GuardTableConfig, Rights};
use dist_bridge_model::table::{self, LookupError, Shape, Table};
use twizzler_capsec::{Expiry, ObjID};

#[derive(Clone, Copy, Debug)]
enum Step {
    Insert(Option<u8>),
    Revoke(u8),
}

fn steps(capacity: u8) -> Vec<Step> {
    let mut s = vec![Step::Insert(None)];
    for i in 0..capacity {
        s.push(Step::Insert(Some(i)));
        s.push(Step::Revoke(i));
    }
    s
}

fn real_info(parent: Option<u8>) -> GuardInfo {
    GuardInfo {
        object: ObjID::new(1),
        scope: Scope::new(Rights::all(), ByteRange::WHOLE, Expiry::NEVER),
        parent: parent.map(u32::from),
        source: None,
        key: None,
        context: None,
    }
}

fn model_info(parent: Option<u8>) -> table::GuardInfo {
    table::GuardInfo {
        object: 1,
        parent,
        source: None,
        key: None,
        serial: 0,
    }
}

fn same_state(shape: &Shape, real: &GuardTable, model: &Table, trace: &[Step]) {
    assert_eq!(
        real.stats().epoch,
        u64::from(model.epoch),
        "epoch after {trace:?}"
    );
    for r in 0..shape.ranges {
        assert_eq!(
            real.generation(u32::from(r)),
            u64::from(model.generations[usize::from(r)]),
            "generation of range {r} after {trace:?}"
        );
    }
    for index in 0..shape.capacity {
        for version in 1..=shape.max_version {
            let want = match model.lookup(index, version) {
                Ok(_) => "ok".to_owned(),
                Err(LookupError::Revoked) => "revoked".to_owned(),
                Err(LookupError::Stale) => "stale".to_owned(),
                Err(LookupError::Upgraded(n)) => format!("upgraded to {n}"),
            };
            let got = match real.lookup(GuardRef {
                index: u32::from(index),
                version: u64::from(version),
            }) {
                Ok(_) => "ok".to_owned(),
                Err(RealLookup::Revoked { .. }) => "revoked".to_owned(),
                Err(RealLookup::Stale { .. }) => "stale".to_owned(),
                Err(RealLookup::Upgraded { new, .. }) => format!("upgraded to {new}"),
                Err(e) => format!("{e:?}"),
            };
            assert_eq!(got, want, "lookup ({index}, {version}) after {trace:?}");
        }
    }
}

fn run(shape: Shape, depth: usize) -> usize {
    let config = GuardTableConfig {
        capacity: u32::from(shape.capacity),
        batch_size: u32::from(shape.batch_size),
        max_version: u64::from(shape.max_version),
        ranges: u32::from(shape.ranges),
        max_derived: u32::from(shape.max_derived),
    };
    let choices = steps(shape.capacity);
    let mut sequences = 0;
    let mut trace = Vec::new();
    // Depth-first over every sequence, replaying from scratch at each leaf's prefix.
    fn go(
        shape: &Shape,
        config: GuardTableConfig,
        choices: &[Step],
        trace: &mut Vec<Step>,
        depth: usize,
        sequences: &mut usize,
    ) {
        let mut real = GuardTable::new(config).expect("a valid shape");
        let mut model = Table::new(shape);
        for (n, step) in trace.iter().enumerate() {
            let prefix = &trace[..=n];
            match *step {
                Step::Insert(parent) => {
                    let r = real.insert(real_info(parent));
                    let m = model.insert(shape, None, model_info(parent));
                    match (r, m) {
                        (Ok(g), Ok((index, version))) => assert_eq!(
                            (g.index, g.version),
                            (u32::from(index), u64::from(version)),
                            "insert after {prefix:?}"
                        ),
                        (Err(_), Err(_)) => {}
                        (r, m) => panic!("insert after {prefix:?}: real {r:?}, model {m:?}"),
                    }
                }
                Step::Revoke(i) => {
                    let r = real.revoke(u32::from(i));
                    let m = model.revoke(shape, None, i);
                    assert_eq!(r as usize, m.len(), "revoke after {prefix:?}");
                }
            }
            same_state(shape, &real, &model, prefix);
        }
        *sequences += 1;
        if trace.len() == depth {
            return;
        }
        for &c in choices {
            trace.push(c);
            go(shape, config, choices, trace, depth, sequences);
            trace.pop();
        }
    }
    go(&shape, config, &choices, &mut trace, depth, &mut sequences);
    sequences
}

#[test]
fn the_model_table_is_the_real_table() {
    let base = Shape {
        capacity: 2,
        batch_size: 1,
        max_version: 2,
        ranges: 2,
        max_derived: 1,
    };
    for shape in [
        base,
        Shape {
            max_version: 4,
            ..base
        },
        Shape {
            max_version: 6,
            ranges: 3,
            batch_size: 2,
            ..base
        },
    ] {
        let n = run(shape, 7);
        assert!(n > 50_000, "{n} sequences");
    }
}
