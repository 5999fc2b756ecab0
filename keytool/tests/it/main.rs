//! Integration tests of the `keytool` binary: its commands and the README's walk-through.
//!
//! One test binary for the crate's integration tests (`cargo test -p keytool --test it`):
//! each module was a binary of its own, and each linked the whole dependency graph again.

mod cli;
mod readme;
mod upstream;
