//! The QEMU reference kernel (`kernel-hooks/kernel`, outside the workspace) and its user
//! programs (`kernel-hooks/user`, outside it too): their format, clippy and build steps, and
//! booting the kernel under QEMU with a timeout.

use std::env;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::run::{Workspace, command_line, in_ci, run_env, run_in};
use crate::{
    BARE_METAL_TARGET, KERNEL_BIN, KERNEL_DIR, KERNEL_MISMATCH_STATUS, KERNEL_SUCCESS_STATUS, QEMU,
    QEMU_HEADLESS, QEMU_TIMEOUT, USER_DIR,
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

/// Step: `cargo fmt --check` on the kernel crate and on the user programs' crate.
pub(crate) fn kernel_format(ws: &Workspace) -> Result<(), String> {
    let args: &[&str] = if in_ci() {
        &["fmt", "--check", "--", "--color", "never"]
    } else {
        &["fmt", "--check"]
    };
    kernel_cargo(ws, args)?;
    run_in(&ws.root.join(USER_DIR), "cargo", args)
}

/// Builds the user programs, then the kernel ELF that embeds them, with `env` (the clippy
/// wrapper, in `cargo xtask test`, lints both). The programs are built in the kernel's
/// target directory, with the kernel's profile, so the crypto crates both use are compiled
/// once.
pub(crate) fn kernel_build(ws: &Workspace, env: &[(&str, &str)]) -> Result<(), String> {
    let build = [
        "build",
        "--release",
        "--locked",
        "--target",
        BARE_METAL_TARGET,
    ];
    let target_dir = kernel_target_dir(ws).to_string_lossy().into_owned();
    let mut user_args = build.to_vec();
    user_args.extend(["--target-dir", &target_dir]);
    run_env(&ws.root.join(USER_DIR), env, "cargo", &user_args)?;
    let bin_dir = user_bin_dir(ws).to_string_lossy().into_owned();
    let mut kernel_env = env.to_vec();
    kernel_env.push(("KERNEL_HOOKS_USER_BIN_DIR", &bin_dir));
    run_env(&kernel_dir(ws), &kernel_env, "cargo", &build)
}

/// The kernel's target directory (honouring `CARGO_TARGET_DIR`, relative to the kernel's
/// crate as cargo takes it there).
fn kernel_target_dir(ws: &Workspace) -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => kernel_dir(ws).join(dir),
        None => kernel_dir(ws).join("target"),
    }
}

/// Where `kernel_build` leaves the user programs' ELF images.
fn user_bin_dir(ws: &Workspace) -> PathBuf {
    kernel_target_dir(ws)
        .join(BARE_METAL_TARGET)
        .join("release")
}

/// Where `kernel_build` leaves the ELF.
pub(crate) fn kernel_elf(ws: &Workspace) -> PathBuf {
    user_bin_dir(ws).join(KERNEL_BIN)
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
        .stdout(Stdio::piped())
        .current_dir(&ws.root)
        .spawn()
        .map_err(|e| format!("cannot run {QEMU}: {e}"))?;
    // The kernel's serial output, echoed line by line; the conformance suite's lines kept.
    let echo = child.stdout.take().map(|out| {
        thread::spawn(move || {
            let mut suite = Vec::new();
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                println!("{line}");
                if line.starts_with("conformance:") {
                    suite.push(line);
                }
            }
            suite
        })
    });
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
    let suite = echo.and_then(|h| h.join().ok()).unwrap_or_default();
    conformance_verdict(&suite)?;
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

/// Reads the conformance suite's lines from the kernel's output (`conformance: <check>: pass`,
/// `... FAIL: <why>`, and the summary `conformance: N checks, P pass, F fail, S skipped`):
/// an error naming every failed check, or when the summary is missing (the suite did not run
/// to its end).
pub(crate) fn conformance_verdict(lines: &[String]) -> Result<(), String> {
    let failed: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains(": FAIL"))
        .map(String::as_str)
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "{} conformance check(s) failed:\n{}",
            failed.len(),
            failed.join("\n")
        ));
    }
    match lines.iter().find(|l| l.contains(" checks, ")) {
        Some(summary) if summary.contains(" 0 fail") => Ok(()),
        Some(summary) => Err(format!(
            "the conformance suite reported failures: {summary}"
        )),
        None => Err("the kernel printed no conformance summary (the suite did not finish)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::conformance_verdict;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_passing_suite_passes() {
        let l = lines(&[
            "conformance: one clock: pass",
            "conformance: race: skipped: no",
            "conformance: 2 checks, 1 pass, 0 fail, 1 skipped",
        ]);
        assert_eq!(conformance_verdict(&l), Ok(()));
    }

    #[test]
    fn a_failed_check_or_a_missing_summary_fails() {
        let l = lines(&[
            "conformance: one clock: FAIL: still mapped",
            "conformance: 1 checks, 0 pass, 1 fail, 0 skipped",
        ]);
        let err = conformance_verdict(&l).unwrap_err();
        assert!(err.contains("one clock: FAIL: still mapped"), "{err}");
        assert!(conformance_verdict(&lines(&["conformance: x: pass"])).is_err());
        assert!(conformance_verdict(&[]).is_err());
    }
}
