//! The QEMU reference kernel (`kernel-hooks/kernel`, outside the workspace): its format, clippy
//! and build steps, and booting it under QEMU with a timeout.

use std::env;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::run::{Workspace, command_line, in_ci, run_in};
use crate::{
    BARE_METAL_TARGET, KERNEL_BIN, KERNEL_DIR, KERNEL_MISMATCH_STATUS, KERNEL_SUCCESS_STATUS, QEMU,
    QEMU_HEADLESS, QEMU_TIMEOUT,
};

pub(crate) fn kernel_dir(ws: &Workspace) -> PathBuf {
    ws.root.join(KERNEL_DIR)
}

/// The kernel's crate must run cargo from its own directory: that is where its lock file is,
/// and where cargo picks up the workspace's `.cargo/config.toml` (the soft-float crypto
/// backends for the bare-metal target).
pub(crate) fn kernel_cargo(ws: &Workspace, args: &[&str]) -> Result<(), String> {
    run_in(&kernel_dir(ws), "cargo", args)
}

/// Step: `cargo fmt --check` on the kernel crate.
pub(crate) fn kernel_format(ws: &Workspace) -> Result<(), String> {
    if in_ci() {
        kernel_cargo(ws, &["fmt", "--check", "--", "--color", "never"])
    } else {
        kernel_cargo(ws, &["fmt", "--check"])
    }
}

/// Step: clippy on the kernel crate, warnings denied.
pub(crate) fn kernel_clippy(ws: &Workspace) -> Result<(), String> {
    kernel_cargo(
        ws,
        &[
            "clippy",
            "--release",
            "--locked",
            "--target",
            BARE_METAL_TARGET,
            "--",
            "-D",
            "warnings",
        ],
    )
}

/// Step: builds the kernel ELF.
pub(crate) fn kernel_build(ws: &Workspace) -> Result<(), String> {
    kernel_cargo(
        ws,
        &[
            "build",
            "--release",
            "--locked",
            "--target",
            BARE_METAL_TARGET,
        ],
    )
}

/// Where `kernel_build` leaves the ELF (honouring `CARGO_TARGET_DIR`).
pub(crate) fn kernel_elf(ws: &Workspace) -> PathBuf {
    let target_dir = match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => kernel_dir(ws).join(dir),
        None => kernel_dir(ws).join("target"),
    };
    target_dir
        .join(BARE_METAL_TARGET)
        .join("release")
        .join(KERNEL_BIN)
}

/// Step: boots the kernel on one CPU.
pub(crate) fn kernel_boot_one_cpu(ws: &Workspace) -> Result<(), String> {
    kernel_boot(ws, 1)
}

/// Step: boots the kernel on four CPUs (the several-CPU scenarios run).
pub(crate) fn kernel_boot_four_cpus(ws: &Workspace) -> Result<(), String> {
    kernel_boot(ws, 4)
}

/// Boots the kernel under QEMU with `cpus` CPUs (TCG, one host thread per CPU) and checks
/// its exit status.
pub(crate) fn kernel_boot(ws: &Workspace, cpus: u32) -> Result<(), String> {
    let elf = kernel_elf(ws);
    if !elf.is_file() {
        return Err(format!(
            "no kernel at {} (the build step makes it)",
            elf.display()
        ));
    }
    let elf_arg = elf.to_string_lossy().into_owned();
    let smp_arg = cpus.to_string();
    let mut args = vec![
        "-machine",
        "q35",
        "-accel",
        "tcg,thread=multi",
        "-smp",
        &smp_arg,
        "-cpu",
        "max",
        "-m",
        "256M",
        "-kernel",
        &elf_arg,
    ];
    args.extend_from_slice(&QEMU_HEADLESS);
    println!("$ {}", command_line(QEMU, &args));
    let mut child = Command::new(QEMU)
        .args(args)
        .stdin(Stdio::null())
        .current_dir(&ws.root)
        .spawn()
        .map_err(|e| format!("cannot run {QEMU}: {e}"))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= QEMU_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the kernel did not finish within {} s (hung?); QEMU was killed",
                    QEMU_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("waiting for {QEMU}: {e}")),
        }
    };
    println!(
        "xtask: QEMU ran for {:.1} s",
        started.elapsed().as_secs_f64()
    );
    match status.code() {
        Some(KERNEL_SUCCESS_STATUS) => Ok(()),
        Some(KERNEL_MISMATCH_STATUS) => Err(format!(
            "the kernel reported a failure (QEMU status {KERNEL_MISMATCH_STATUS}): a scenario \
             did not match, or the kernel could not run them; see its output above"
        )),
        Some(code) => Err(format!(
            "QEMU exited with status {code}, not {KERNEL_SUCCESS_STATUS}: the kernel did not \
             reach isa-debug-exit (a triple fault or a boot failure; see the output above)"
        )),
        None => Err("QEMU was killed by a signal".to_owned()),
    }
}
