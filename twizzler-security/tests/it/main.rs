//! Integration tests of the core library. `tests/editor_memory.rs` stays a binary of its own:
//! it counts every allocation through its own global allocator.
//!
//! One test binary for the crate's integration tests (`cargo test -p twizzler-capsec --test it`):
//! each module was a binary of its own, and each linked the whole dependency graph again.

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

mod common_keys;
mod context;
mod context_large;
mod ctx_in_place;
mod ctx_overflow;
mod delegation;
mod difc_codec;
mod difc_flow;
mod difc_records;
mod fixture;
mod fixtures;
mod gates;
mod keys;
mod perms;
mod proptest_codec;
mod records;
mod reopen;
mod skip;
