//! Step 1: the inputs are at the pinned commits and the tools are on the machine.

use std::path::Path;
use std::process::Command;

use super::{ABI_COMMIT, BACKTRACER_COMMIT, LIMINE_BRANCH, OVMF, Options, UPSTREAM_COMMIT};
use crate::QEMU;

/// `git -C dir rev-parse HEAD`.
pub(super) fn git_head(dir: &Path) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!("{} is not a git checkout", dir.display()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

pub(super) fn expect_commit(dir: &Path, what: &str, want: &str, hint: &str) -> Result<(), String> {
    let head = git_head(dir)?;
    if head != want {
        return Err(format!(
            "{what} at {} is at {head}, not the pinned {want} ({hint})",
            dir.display()
        ));
    }
    Ok(())
}

/// Whether `program args` runs and succeeds, with its standard output.
pub(super) fn probe(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn check_inputs(opts: &Options) -> Result<(), String> {
    expect_commit(
        &opts.upstream,
        "the upstream checkout",
        UPSTREAM_COMMIT,
        "git checkout it; see `cargo xtask --help`",
    )?;
    let abi = opts.upstream.join("src/abi");
    if !abi.join("rt-abi/Cargo.toml").is_file() {
        return Err(format!(
            "{} is empty: check out the abi submodule ({ABI_COMMIT}) there",
            abi.display()
        ));
    }
    expect_commit(&abi, "the abi submodule", ABI_COMMIT, "git checkout it")?;
    expect_commit(
        &opts.backtracer,
        "backtracer",
        BACKTRACER_COMMIT,
        "pass --backtracer <dir>",
    )?;
    if !opts.limine.join("BOOTX64.EFI").is_file() {
        return Err(format!(
            "no BOOTX64.EFI in {} (a checkout of Limine's {LIMINE_BRANCH}; pass --limine <dir>)",
            opts.limine.display()
        ));
    }
    if !Path::new(OVMF).is_file() {
        return Err(format!("no {OVMF} (Debian package `ovmf`)"));
    }
    // Upstream's ABI build script passes `--override-abi`, which bindgen has since 0.65;
    // Debian 12's bindgen (0.60) lacks it.
    let bindgen_ok = probe("bindgen", &["--help"]).is_some_and(|h| h.contains("--override-abi"));
    if !bindgen_ok {
        return Err("`bindgen` is missing or too old (needs --override-abi): \
             `cargo install bindgen-cli` and put it on PATH (it needs libclang: Debian \
             `libclang-dev`)"
            .into());
    }
    if probe("ld.lld", &["--version"]).is_none() {
        return Err("no `ld.lld` (upstream's kernel links with it): Debian package `lld`".into());
    }
    if probe(QEMU, &["--version"]).is_none() {
        return Err(format!("no `{QEMU}`: Debian package qemu-system-x86"));
    }
    let sysroot = probe("rustc", &["+nightly", "--print", "sysroot"])
        .ok_or("no nightly toolchain: `rustup toolchain install nightly`")?;
    if !Path::new(sysroot.trim())
        .join("lib/rustlib/src/rust/library/core")
        .is_dir()
    {
        return Err(
            "the nightly toolchain has no rust-src (build-std needs it): \
             `rustup component add rust-src --toolchain nightly`"
                .into(),
        );
    }
    Ok(())
}
