//! Integration tests of `dist-bridge`: the library, the node service over gRPC and the binary.
//!
//! One test binary for the crate's integration tests (`cargo test -p dist-bridge --test it`):
//! each module was a binary of its own, and each linked the whole dependency graph again.
//! A test that re-runs this binary as a child process names itself with [`test_path`].

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

mod binary;
mod bounds;
mod broadcast;
mod common;
mod difc;
mod export;
mod export_proof;
mod fixtures;
mod health;
mod metrics;
mod net;
mod oracle;
mod quota;
mod restart;
mod revocation;
mod service;
mod shared_store;
mod shutdown;
mod tls;
mod tokens;
mod upgrade;

/// The name libtest gives test `name` of the module whose `module_path!()` is `module`: the
/// module path without the crate's name. A test that re-runs this binary as a child process,
/// filtered with `--exact` to one routine, must name the routine so; under any other name the
/// child would run nothing and succeed.
pub(crate) fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}
