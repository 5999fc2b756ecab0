//! Integration tests of the `keytool` binary: its commands and the README's walk-through.
//!
//! One test binary for the crate's integration tests (`cargo test -p keytool --test it`):
//! each module was a binary of its own, and each linked the whole dependency graph again.

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

mod cli;
mod readme;
mod upstream;
