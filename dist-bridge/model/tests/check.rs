//! The protocol model checked: at small bounds in `cargo test` (every property holds, every
//! `sometimes` path is reached, and each step taken out gives a counterexample), at larger
//! bounds with `--ignored` (`cargo xtask model --deep`).

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use std::time::Instant;

use dist_bridge_model::table::Shape;
use dist_bridge_model::{Bounds, Mutation, ProtocolModel};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// Versions 1..=2 in 2 ranges of one version, 2 entries, every release flushes: every flush
/// opens a range, and the version space wraps every 2 flushes.
const WRAP: Shape = Shape {
    capacity: 2,
    batch_size: 1,
    max_version: 2,
    ranges: 2,
    max_derived: 1,
};

/// Versions 1..=4 in 2 ranges of two: the epoch also moves within a range.
const TWO_PER_RANGE: Shape = Shape {
    max_version: 4,
    ..WRAP
};

const SMALL: Bounds = Bounds {
    objects: 1,
    exports: 3,
    derives: 1,
    revokes: 2,
    store_revocations: 1,
    crashes: 1,
    in_flight: 1,
};

fn model(shape: Shape, bounds: Bounds, mutation: Option<Mutation>) -> ProtocolModel {
    ProtocolModel {
        shape,
        bounds,
        mutation,
    }
}

/// Explores every state: every `always` property holds, and every `sometimes` property named
/// in `reached` (all of them when `None`) is reached. Prints the counts.
fn check_all(name: &str, m: ProtocolModel, reached: Option<&[&str]>) {
    let started = Instant::now();
    let properties = m.properties();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let checker = m.checker().threads(threads).spawn_bfs().join();
    println!(
        "{name}: {} unique states ({} generated), depth {}, {:.1?} on {threads} threads",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    for p in properties {
        match p.expectation {
            Expectation::Always => checker.assert_no_discovery(p.name),
            Expectation::Sometimes if reached.is_none_or(|r| r.contains(&p.name)) => {
                checker.assert_any_discovery(p.name);
            }
            _ => {}
        }
    }
}

/// Checks `m` until one of `properties` has a counterexample; returns the steps.
fn counterexample(m: ProtocolModel, properties: &[&'static str]) -> Vec<String> {
    let started = Instant::now();
    let mutation = m.mutation;
    let checker = m
        .checker()
        .threads(1)
        .finish_when(HasDiscoveries::AnyOf(properties.iter().copied().collect()))
        .spawn_bfs()
        .join();
    let Some((name, path)) = properties
        .iter()
        .find_map(|p| checker.discovery(p).map(|path| (p, path)))
    else {
        panic!(
            "no counterexample to {properties:?} ({} states)",
            checker.unique_state_count()
        )
    };
    let steps: Vec<String> = path
        .into_actions()
        .iter()
        .map(|a| format!("{a:?}"))
        .collect();
    println!(
        "{:?}: counterexample to {name:?} in {} steps ({} states, {:.1?}): {}",
        mutation,
        steps.len(),
        checker.unique_state_count(),
        started.elapsed(),
        steps.join(", ")
    );
    steps
}

#[test]
fn small_bounds_hold_and_every_path_is_reached() {
    check_all("wrap", model(WRAP, SMALL, None), None);
}

#[test]
fn small_bounds_hold_with_two_versions_per_range() {
    check_all(
        "two per range",
        model(TWO_PER_RANGE, SMALL, None),
        Some(&[
            "a revoke waiting behind an accepted invocation",
            "a restart after a revocation",
            "an upgraded token waiting to be renewed",
            "an export in flight across a tick that saw its revocation",
            "a derived guard",
        ]),
    );
}

const CROSS: &str = "a token never validates against another guard";
const REVIVED: &str = "a revoked token never validates again";

#[test]
fn without_the_epoch_bump_an_old_token_validates_against_a_new_guard() {
    counterexample(
        model(TWO_PER_RANGE, SMALL, Some(Mutation::NoEpochBump)),
        &[CROSS, REVIVED],
    );
}

#[test]
fn without_the_generation_bump_an_old_token_validates_after_a_wrap() {
    counterexample(
        model(WRAP, SMALL, Some(Mutation::NoGenerationBump)),
        &[CROSS, REVIVED],
    );
}

#[test]
fn without_the_directory_fsync_a_controller_version_is_served_twice() {
    counterexample(
        model(WRAP, SMALL, Some(Mutation::NoDirFsync)),
        &["a controller version is never served twice"],
    );
}

#[test]
fn without_the_revoke_gate_a_revoke_returns_before_an_invocation_it_let_through() {
    counterexample(
        model(WRAP, SMALL, Some(Mutation::NoRevokeGate)),
        &["a revoke that has returned stops every later invocation"],
    );
}

/// Issue 25, defect 2, as it was.
#[test]
fn with_the_gate_before_the_check_a_forged_revoke_waits() {
    counterexample(
        model(WRAP, SMALL, Some(Mutation::GateBeforeCheck)),
        &["a forged revoke never waits for a gate"],
    );
}

/// Issue 25, defect 1, as it was: once the node serves, the export reads the list, the
/// revocation is committed, the tick loads the list, finds no guard and finishes, and the
/// export creates its guard (the model's steps are coarser than the 9 of the issue's).
#[test]
fn without_the_owner_s_record_a_store_revocation_leaves_a_guard() {
    let steps = counterexample(
        model(WRAP, SMALL, Some(Mutation::NoStoreNote)),
        &["a store revocation leaves no guard behind"],
    );
    assert!(steps.iter().any(|s| s.starts_with("ExportCreate")));
}

/// Larger bounds: two objects (their gates independent), two invocations in flight, more of
/// every operation. `cargo xtask model --deep` runs these (see the README for the counts).
const DEEP: Bounds = Bounds {
    objects: 2,
    exports: 3,
    derives: 1,
    revokes: 2,
    store_revocations: 1,
    crashes: 1,
    in_flight: 2,
};

#[test]
#[ignore = "minutes; cargo xtask model --deep"]
fn deep_bounds_hold_with_a_wrap() {
    check_all("deep, wrap", model(WRAP, DEEP, None), None);
}

#[test]
#[ignore = "minutes; cargo xtask model --deep"]
fn deep_bounds_hold_with_two_versions_per_range() {
    check_all(
        "deep, two per range",
        model(TWO_PER_RANGE, DEEP, None),
        Some(&["a revoke waiting behind an accepted invocation"]),
    );
}
