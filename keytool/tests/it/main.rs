//! Integration tests of the `keytool` binary: its commands and the README's walk-through.
//!
//! One test binary for the crate's integration tests (`cargo test -p keytool --test it`):
//! each module was a binary of its own, and each linked the whole dependency graph again.
//! One module a command or job (capabilities, contexts, names, passphrases, the store, errors,
//! the built-in documentation, OpenSSL interoperation, upstream capabilities, the README);
//! what they share (the `Kt` runner and the `World` fixture) is in [`support`].

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

mod capability;
mod ctx;
mod difc;
mod docs;
mod errors;
mod names;
mod openssl;
mod passphrase;
mod readme;
mod store;
mod support;
mod upstream;
