//! Clippy inside the QEMU kernel's build.
//!
//! `cargo clippy` is `cargo check` with `clippy-driver` as the workspace's rustc wrapper; the
//! kernel (`kernel-hooks/kernel`) was checked for clippy and then built again. `clippy-driver`
//! is a whole compiler and gives the same lints when it also generates code, so the kernel's
//! build step sets it as the wrapper itself: one compile of the kernel crate instead of two
//! (its dependencies are not workspace members there and are unaffected). Warnings are denied
//! by the bare-metal target's `rustflags` in `.cargo/config.toml`.
//!
//! The host workspace keeps `cargo clippy` and `cargo test` as they are: linting inside its
//! test build saved 29 s of 8:22 on a clean clone, but needed `RUSTFLAGS="-D warnings"`, which
//! every dependency's fingerprint includes, so a developer's plain `cargo test` after
//! `cargo xtask test` rebuilt the whole graph (docs/BENCHMARKS.md, issue 22).

use std::path::PathBuf;
use std::process::Command;

use crate::run::{Workspace, describe_status, run};

/// The path of the toolchain's `clippy-driver`, for `RUSTC_WORKSPACE_WRAPPER`; the `clippy`
/// component is installed with rustup when it is missing.
pub(crate) fn clippy_driver(ws: &Workspace) -> Result<String, String> {
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
    Ok(driver.to_string_lossy().into_owned())
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
