//! Clippy inside the builds `cargo xtask test` makes anyway.
//!
//! `cargo clippy` is `cargo check` with `clippy-driver` as the workspace's rustc wrapper: every
//! dependency is *checked* for it and then *compiled* again for the tests, twice the work on
//! the largest part of the graph (tonic, rustls, tokio, the crypto crates). `clippy-driver` is
//! a whole compiler, though, and gives the same lints when it also generates code. So the test
//! steps set it as the wrapper themselves: the workspace's crates are linted while they are
//! built, the dependencies (never linted, by `cargo clippy` either) are compiled once, and
//! `-D warnings` makes any warning, rustc's or clippy's, fail the build. The lints are
//! `cargo clippy --workspace --all-targets -- -D warnings`'s: the same driver, the same
//! targets (`--all-targets`), the same configuration.
//!
//! Every step that builds the workspace for the host with the test profile must use
//! [`host_env`]: cargo fingerprints the wrapper and `RUSTFLAGS`, and a step without them would
//! rebuild the whole graph.

use std::path::PathBuf;
use std::process::Command;

use crate::run::{Workspace, describe_status, run};

/// The environment of every host build `cargo xtask test` makes: clippy as the workspace's
/// rustc wrapper, warnings denied.
pub(crate) struct HostEnv {
    driver: String,
}

impl HostEnv {
    /// The variables, for [`crate::run::run_env`].
    pub(crate) fn vars(&self) -> [(&'static str, &str); 2] {
        [
            ("RUSTC_WORKSPACE_WRAPPER", self.driver.as_str()),
            ("RUSTFLAGS", "-D warnings"),
        ]
    }

    /// Only the wrapper, for builds whose warnings are denied by the target's `rustflags` in
    /// `.cargo/config.toml` (setting `RUSTFLAGS` would replace those).
    pub(crate) fn wrapper(&self) -> [(&'static str, &str); 1] {
        [("RUSTC_WORKSPACE_WRAPPER", self.driver.as_str())]
    }
}

/// Finds the toolchain's `clippy-driver` (installing the `clippy` component with rustup when
/// it is missing) and returns the host environment.
pub(crate) fn host_env(ws: &Workspace) -> Result<HostEnv, String> {
    let driver = driver_path(ws)?;
    if !driver.is_file() {
        println!(
            "{} is missing; installing the clippy component",
            driver.display()
        );
        run(ws, "rustup", &["component", "add", "clippy"]).map_err(|e| {
            format!(
                "{e}; clippy is needed for the lints (install it with `rustup component add \
                 clippy`, or your distribution's rust-clippy)"
            )
        })?;
        if !driver.is_file() {
            return Err(format!(
                "`rustup component add clippy` did not install {}",
                driver.display()
            ));
        }
    }
    Ok(HostEnv {
        driver: driver.to_string_lossy().into_owned(),
    })
}

/// `<sysroot>/bin/clippy-driver` of the toolchain `rustc` resolves to here (the one
/// `rust-toolchain.toml` or rustup's default selects, as for cargo).
fn driver_path(ws: &Workspace) -> Result<PathBuf, String> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .current_dir(&ws.root)
        .output()
        .map_err(|e| format!("cannot run `rustc --print sysroot`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`rustc --print sysroot` {}",
            describe_status(out.status)
        ));
    }
    let sysroot = String::from_utf8(out.stdout)
        .map_err(|_| "`rustc --print sysroot` printed a path that is not UTF-8".to_owned())?;
    let exe = if cfg!(windows) {
        "clippy-driver.exe"
    } else {
        "clippy-driver"
    };
    Ok(PathBuf::from(sysroot.trim()).join("bin").join(exe))
}
