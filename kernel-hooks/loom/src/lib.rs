//! The loom model of `kernel-hooks`' lock-free cache lookups lives in this crate's
//! `tests/loom_cache.rs`; the library is empty. The model needs `--cfg loom` on every crate
//! it builds, so it is a crate of its own whose build compiles only the engine (without its
//! default features) and loom, not `kernel-hooks`' dev-dependencies.
//!
//! Run it as `cargo xtask test` does (its own target directory, since `--cfg loom` changes
//! every crate; the `loom` profile, optimised, since loom runs the model hundreds of
//! thousands of times):
//!
//! ```text
//! RUSTFLAGS="--cfg loom -D warnings" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p kernel-hooks-loom --test loom_cache --profile loom
//! ```
//!
//! Built without `--cfg loom`, the test is empty.
#![no_std]
