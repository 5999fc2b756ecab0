//! Integration tests of the page-fault decision engine. The loom model, `loom/tests/loom_cache.rs`,
//! is a binary of its own: it is built with `--cfg loom`.
//!
//! One test binary for the crate's integration tests (`cargo test -p kernel-hooks --test it`):
//! each module was a binary of its own, and each linked the whole dependency graph again.

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

#[macro_use]
mod common;
mod concurrency;
mod conformance;
mod contract;
mod difc;
mod difc_window;
mod invalidation;
mod properties;
mod rules;
mod window;
