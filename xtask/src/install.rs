//! Installing what the checks need, only when it is missing: rustup targets (the environment
//! sets `RUSTUP_AUTO_INSTALL=0`, so nothing installs by itself) and Debian packages through
//! `apt-get` (needs root; the errors say so).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::run::{Workspace, describe_status, run, run_env};
use crate::{
    AARCH64_BARE_METAL_TARGET, AARCH64_GCC, AARCH64_LINUX_TARGET, AARCH64_PACKAGES,
    AARCH64_SYSROOT, BARE_METAL_TARGET, QEMU, QEMU_PACKAGE, QEMU_USER,
};

/// The environment sets `RUSTUP_AUTO_INSTALL=0`, so nothing installs by itself: without this
/// step the bare-metal builds fail with "can't find crate for `core`".
pub(crate) fn ensure_bare_metal_target(ws: &Workspace) -> Result<(), String> {
    ensure_rustup_targets(ws, &[BARE_METAL_TARGET])
}

/// Step: makes sure the aarch64 targets are installed: the soft-float bare-metal one for the
/// `no_std` builds, and the Linux one the test suites are cross-built for.
pub(crate) fn ensure_aarch64_targets(ws: &Workspace) -> Result<(), String> {
    ensure_rustup_targets(ws, &[AARCH64_BARE_METAL_TARGET, AARCH64_LINUX_TARGET])
}

/// Runs `rustup target add` for those of `targets` that `rustup target list --installed`
/// does not list.
fn ensure_rustup_targets(ws: &Workspace, targets: &[&str]) -> Result<(), String> {
    let listed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(&ws.root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| {
            format!(
                "cannot run `rustup` ({e}); it is needed to install the {} target(s) (install \
                 rustup from https://rustup.rs, or add the targets to your toolchain by other \
                 means)",
                targets.join(", ")
            )
        })?;
    if !listed.status.success() {
        return Err(format!(
            "`rustup target list --installed` {}",
            describe_status(listed.status)
        ));
    }
    let stdout = String::from_utf8_lossy(&listed.stdout);
    let mut missing = Vec::new();
    for &target in targets {
        if stdout.lines().any(|l| l.trim() == target) {
            println!("{target} is already installed");
        } else {
            missing.push(target);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    println!("{} not installed; installing", missing.join(", "));
    let mut args = vec!["target", "add"];
    args.extend(missing);
    run(ws, "rustup", &args)
}

/// Step: makes sure the cross C compiler (also the linker), the aarch64 C library and
/// `qemu-aarch64` are there, installing the Debian packages of those that are not.
pub(crate) fn ensure_aarch64_tools(ws: &Workspace) -> Result<(), String> {
    let missing = missing_aarch64_packages();
    if missing.is_empty() {
        return Ok(());
    }
    println!("missing: {}; installing with apt-get", missing.join(", "));
    apt_install(
        ws,
        &missing,
        "the aarch64 cross toolchain (aarch64-linux-gnu-gcc, its C library, qemu-aarch64)",
    )?;
    let still = missing_aarch64_packages();
    if still.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} installed, but still missing: {}",
            missing.join(", "),
            still.join(", ")
        ))
    }
}

/// The packages of [`AARCH64_PACKAGES`] whose program does not run or whose files are absent.
fn missing_aarch64_packages() -> Vec<&'static str> {
    let [gcc_package, libc_package, qemu_package] = AARCH64_PACKAGES;
    let mut missing = Vec::new();
    if tool_version(AARCH64_GCC).is_none() {
        missing.push(gcc_package);
    }
    if !Path::new(AARCH64_SYSROOT).join("lib/crt1.o").is_file() {
        missing.push(libc_package);
    }
    if tool_version(QEMU_USER).is_none() {
        missing.push(qemu_package);
    }
    missing
}

/// Step: makes sure `qemu-system-x86_64` runs, installing Debian's `qemu-system-x86` with apt
/// when it does not.
pub(crate) fn ensure_qemu(ws: &Workspace) -> Result<(), String> {
    if tool_version(QEMU).is_some() {
        return Ok(());
    }
    println!("{QEMU} is not installed; installing {QEMU_PACKAGE} with apt-get");
    apt_install(
        ws,
        &[QEMU_PACKAGE],
        &format!("QEMU's x86_64 system emulator ({QEMU})"),
    )?;
    tool_version(QEMU)
        .map(|_| ())
        .ok_or_else(|| format!("{QEMU_PACKAGE} was installed but `{QEMU} --version` still fails"))
}

/// Installs Debian `packages` with `apt-get update` and `apt-get install -y
/// --no-install-recommends`; `what` names what they provide, for the error messages. Needs
/// root; the error says so.
pub(crate) fn apt_install(ws: &Workspace, packages: &[&str], what: &str) -> Result<(), String> {
    let list = packages.join(" ");
    let apt_missing = Command::new("apt-get")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err();
    if apt_missing {
        return Err(format!(
            "{what} is missing and there is no apt-get to install it with; install it by other \
             means (Debian/Ubuntu packages: {list})"
        ));
    }
    let hint = format!(
        "installing {list} needs root (run `sudo apt-get update && sudo apt-get install -y \
         --no-install-recommends {list}`, or run xtask as root)"
    );
    run(ws, "apt-get", &["update"]).map_err(|e| format!("{e}; {hint}"))?;
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend_from_slice(packages);
    run_env(
        &ws.root,
        &[("DEBIAN_FRONTEND", "noninteractive")],
        "apt-get",
        &args,
    )
    .map_err(|e| format!("{e}; {hint}"))
}

/// The first line of `program --version`, printed, if the program runs.
pub(crate) fn tool_version(program: &str) -> Option<String> {
    let out = Command::new(program).arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("").trim().to_owned();
    println!("{first}");
    Some(first)
}
