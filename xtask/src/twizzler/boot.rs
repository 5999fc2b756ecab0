//! Step 4: the image booted under QEMU, its serial log read until the runner reports.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::prepare::write;
use super::report::Report;
use super::{OVMF, Options};
use crate::run::{command_line, run_env};
use crate::{QEMU, QEMU_HEADLESS};

/// How long the kernel may run its tests before it counts as hung. Upstream's 28 tests took
/// 590 s from QEMU's start on the 2-core machine at a load of 15-20 (225 s of it booting);
/// on a quiet machine about a minute.
pub(super) const BOOT_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long the kernel may print nothing before it counts as hung: a deadlock is reported
/// after this, not after [`BOOT_TIMEOUT`]. The longest silences seen in passing runs were
/// under a minute (booting, and upstream's longest tests, at a load of 15).
pub(super) const SILENCE_TIMEOUT: Duration = Duration::from_secs(300);
/// The environment variable whose whitespace-separated words are added to QEMU's arguments
/// (for example `-s`, to attach gdb to a hung kernel).
pub(super) const EXTRA_QEMU_ARGS: &str = "TWIZZLER_QEMU_ARGS";
/// How long, and for how many lines, the serial log is read after a panic.
pub(super) const PANIC_TAIL: Duration = Duration::from_secs(10);
pub(super) const PANIC_TAIL_LINES: usize = 40;

/// The EFI system partition as a directory QEMU presents as a FAT disk.
pub(super) fn write_esp(opts: &Options, elf: &Path) -> Result<PathBuf, String> {
    let esp = opts.upstream.join("target/twizzler-port/esp");
    let boot = esp.join("EFI/BOOT");
    fs::create_dir_all(&boot).map_err(|e| format!("mkdir {}: {e}", boot.display()))?;
    let copy = |from: &Path, to: &Path| {
        fs::copy(from, to)
            .map(|_| ())
            .map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))
    };
    copy(&opts.limine.join("BOOTX64.EFI"), &boot.join("BOOTX64.EFI"))?;
    copy(elf, &esp.join("kernel.elf"))?;
    // The initrd: a tar archive with one small file (upstream's tar reader refuses an empty
    // archive). With no userspace in it the kernel panics "no init found" after the tests,
    // which ends the run.
    let initrd_dir = opts.upstream.join("target/twizzler-port/initrd");
    write(
        &initrd_dir.join("README"),
        "twizzler-port: kernel tests only, no userspace\n",
    )?;
    let initrd = esp.join("initrd").display().to_string();
    let dir = initrd_dir.display().to_string();
    run_env(
        Path::new("."),
        &[],
        "tar",
        &["-cf", &initrd, "-C", &dir, "README"],
    )?;
    write(
        &esp.join("limine.conf"),
        "timeout: 0\nserial: yes\n\n/Twizzler kernel tests\n    protocol: limine\n    \
         kernel_path: boot():/kernel.elf\n    module_path: boot():/initrd\n    \
         kernel_cmdline: --tests\n",
    )?;
    Ok(esp)
}

pub(super) fn boot(opts: &Options, elf: &Path) -> Result<Report, String> {
    let esp = write_esp(opts, elf)?;
    // A read-only virtual FAT disk on virtio (QEMU refuses a read-only IDE/AHCI drive);
    // OVMF boots Limine from it and Limine reads the kernel and limine.conf.
    let drive = format!(
        "if=none,id=esp,format=raw,readonly=on,file=fat:{}",
        esp.display()
    );
    let smp = opts.smp.to_string();
    let accel = if opts.smp > 1 {
        "tcg,thread=multi"
    } else {
        "tcg"
    };
    let mut args = vec![
        "-machine",
        "q35",
        "-accel",
        accel,
        "-cpu",
        "max",
        "-smp",
        &smp,
        "-m",
        "4G",
        "-bios",
        OVMF,
        "-drive",
        &drive,
        "-device",
        "virtio-blk-pci,drive=esp",
    ];
    args.extend_from_slice(&QEMU_HEADLESS);
    // Extra arguments for debugging a hang, e.g. `-s` for QEMU's gdb stub (README, "Debugging").
    let extra = std::env::var(EXTRA_QEMU_ARGS).unwrap_or_default();
    args.extend(extra.split_whitespace());
    println!("$ {}", command_line(QEMU, &args));
    let mut child = Command::new(QEMU)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {QEMU}: {e}"))?;
    let stdout = child.stdout.take().ok_or("QEMU has no stdout")?;
    let (tx, rx) = mpsc::channel::<String>();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            if tx
                .send(String::from_utf8_lossy(&line).trim_end().to_owned())
                .is_err()
            {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut report = Report::default();
    let mut tests_started = None;
    // After a panic, the lines that follow (the message, the backtrace) are read for a short
    // while before QEMU is stopped: the location alone rarely says what failed.
    let mut after_panic: Option<(Instant, usize)> = None;
    loop {
        let mut left = BOOT_TIMEOUT.saturating_sub(started.elapsed());
        if let Some((since, lines)) = after_panic {
            if lines >= PANIC_TAIL_LINES {
                break;
            }
            left = left.min(PANIC_TAIL.saturating_sub(since.elapsed()));
        }
        if left.is_zero() {
            if after_panic.is_none() {
                report.timed_out = Some(format!("timed out after {} s", BOOT_TIMEOUT.as_secs()));
            }
            break;
        }
        let silence = after_panic.is_none() && left > SILENCE_TIMEOUT;
        match rx.recv_timeout(left.min(SILENCE_TIMEOUT)) {
            Ok(line) => {
                println!("{line}");
                if let Some((_, lines)) = after_panic.as_mut() {
                    *lines += 1;
                    report.note_after_panic(&line);
                    continue;
                }
                report.feed(&line, started.elapsed(), &mut tests_started);
                if report.finished {
                    break;
                }
                if report.panic.is_some() {
                    after_panic = Some((Instant::now(), 0));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if after_panic.is_none() {
                    report.timed_out = Some(if silence {
                        format!("hung: no output for {} s", SILENCE_TIMEOUT.as_secs())
                    } else {
                        format!("timed out after {} s", BOOT_TIMEOUT.as_secs())
                    });
                }
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // The tests are over (or failed): upstream then looks for init and, without userspace,
    // panics and halts; QEMU is stopped here rather than waited for.
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    println!(
        "xtask: QEMU ran for {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(report)
}
