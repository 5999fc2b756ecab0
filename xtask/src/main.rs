//! `cargo xtask`: the project's entry points.
//!
//! Everything that is more than a plain `cargo build` or `cargo test` goes through here, as in
//! Twizzler itself: installing what the checks need, running every check in order, the demo,
//! the benchmarks and the fuzzers. Run `cargo xtask --help` for the commands.
//!
//! Plain `std` on purpose: the tool must build in seconds on a fresh checkout. Child commands
//! run from the workspace root with inherited stdio, so their output streams as usual.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The bare-metal target the `no_std` crates must build for (soft-float, like Twizzler's
/// kernel target).
const BARE_METAL_TARGET: &str = "x86_64-unknown-none";

/// Twizzler's second architecture, bare metal. Twizzler's aarch64 kernel target is soft-float
/// too (its target spec has `"abi": "softfloat"` and `-neon,-fp-armv8`), so the `no_std` crates
/// are built for the soft-float triple: hard-float `aarch64-unknown-none` would let the
/// compiler use FP/NEON registers a kernel does not save.
const AARCH64_BARE_METAL_TARGET: &str = "aarch64-unknown-none-softfloat";
/// The hosted aarch64 target the test suites are cross-built for and run under `qemu-aarch64`.
const AARCH64_LINUX_TARGET: &str = "aarch64-unknown-linux-gnu";
/// The cross C compiler, also the linker (Debian package `gcc-aarch64-linux-gnu`).
const AARCH64_GCC: &str = "aarch64-linux-gnu-gcc";
/// Where Debian's cross packages put the aarch64 C library; `qemu-aarch64 -L` looks there for
/// the dynamic loader and libc.
const AARCH64_SYSROOT: &str = "/usr/aarch64-linux-gnu";
/// QEMU's user-mode aarch64 emulator (Debian package `qemu-user`).
const QEMU_USER: &str = "qemu-aarch64";
/// The Debian packages the aarch64 test step needs. `libc6-dev-arm64-cross` (crt1.o, libc
/// headers and link libraries) is only a Recommends of the cross gcc, so with
/// `--no-install-recommends` it must be named.
const AARCH64_PACKAGES: [&str; 3] = [
    "gcc-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
    "qemu-user",
];

/// Default fuzzing time, in seconds, when `cargo xtask fuzz` is given none.
const DEFAULT_FUZZ_SECONDS: u64 = 60;

/// The QEMU test kernel's crate, relative to the workspace root (outside the workspace, with
/// its own Cargo.lock, like `fuzz/`).
const KERNEL_DIR: &str = "kernel-hooks/kernel";
/// The kernel's binary name.
const KERNEL_BIN: &str = "kernel-hooks-qemu";
/// The QEMU binary that boots it, and the Debian package providing it.
const QEMU: &str = "qemu-system-x86_64";
const QEMU_PACKAGE: &str = "qemu-system-x86";
/// How long the kernel may run before it counts as hung.
const QEMU_TIMEOUT: Duration = Duration::from_secs(120);
/// The kernel writes 0x10 to `isa-debug-exit` when every scenario matches; QEMU then exits
/// with `(0x10 << 1) | 1`.
const KERNEL_SUCCESS_STATUS: i32 = 33;
/// ... and 0x11 (status 35) when one does not.
const KERNEL_MISMATCH_STATUS: i32 = 35;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let ws = match Workspace::locate() {
        Ok(ws) => ws,
        Err(e) => {
            eprintln!("xtask: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (cmd, rest) = match args.split_first() {
        Some((cmd, rest)) => (cmd.as_str(), rest),
        None => {
            print!("{}", help_text());
            return ExitCode::SUCCESS;
        }
    };
    match cmd {
        "-h" | "--help" | "help" => {
            print!("{}", help_text());
            ExitCode::SUCCESS
        }
        "test" => {
            if let Some(extra) = rest.first() {
                return usage_error(&format!("`test` takes no arguments (got `{extra}`)"));
            }
            cmd_test(&ws)
        }
        "demo" => {
            if let Some(extra) = rest.first() {
                return usage_error(&format!("`demo` takes no arguments (got `{extra}`)"));
            }
            cmd_demo(&ws)
        }
        "bench" => cmd_bench(&ws, rest),
        "fuzz" => cmd_fuzz(&ws, rest),
        other => usage_error(&format!("unknown command `{other}`")),
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("xtask: {msg}");
    eprintln!("Run `cargo xtask --help` for the commands.");
    ExitCode::from(2)
}

// ---------------------------------------------------------------------------------------------
// Steps

/// One step of `cargo xtask test`.
struct Step {
    /// Short name, used in headings and in the failure message.
    name: &'static str,
    /// What it does, for the help text.
    about: &'static str,
    /// How it runs.
    action: Action,
}

/// How a step runs.
enum Action {
    /// `cargo` with these arguments, from the workspace root.
    Cargo(&'static [&'static str]),
    /// A step that needs logic (checking before installing, for example).
    Custom(fn(&Workspace) -> Result<(), String>),
}

/// The steps of `cargo xtask test`, in order. Later steps (booting the QEMU kernel, for
/// example) are added here; the help text and the summary follow automatically.
fn test_steps() -> Vec<Step> {
    vec![
        Step {
            name: "bare-metal target",
            about: "rustup target add x86_64-unknown-none, if `rustup target list --installed` \
                    lacks it",
            action: Action::Custom(ensure_bare_metal_target),
        },
        Step {
            name: "format",
            about: "cargo fmt --all --check",
            action: Action::Custom(check_format),
        },
        Step {
            name: "clippy",
            about: "cargo clippy --workspace --all-targets -- -D warnings",
            action: Action::Cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        },
        Step {
            name: "tests",
            about: "cargo test --workspace   (unit, integration and doc tests)",
            action: Action::Cargo(&["test", "--workspace"]),
        },
        Step {
            name: "loom: lock-free cache lookups",
            about: "RUSTFLAGS=\"--cfg loom\" cargo test -p kernel-hooks --test loom_cache --release, \
                    in target/loom: every interleaving (two preemptions) of a fault's lock-free \
                    hit racing a revocation sweep, an eviction and a stale insert",
            action: Action::Custom(loom_cache),
        },
        Step {
            name: "bare-metal build (core only)",
            about: "cargo build -p twizzler-capsec --no-default-features \
                    --target x86_64-unknown-none",
            action: Action::Cargo(&[
                "build",
                "-p",
                "twizzler-capsec",
                "--no-default-features",
                "--target",
                BARE_METAL_TARGET,
            ]),
        },
        Step {
            name: "bare-metal build (alloc)",
            about: "the same, with --features alloc",
            action: Action::Cargo(&[
                "build",
                "-p",
                "twizzler-capsec",
                "--no-default-features",
                "--features",
                "alloc",
                "--target",
                BARE_METAL_TARGET,
            ]),
        },
        Step {
            name: "aarch64 targets",
            about: "rustup target add aarch64-unknown-none-softfloat aarch64-unknown-linux-gnu, \
                    for those `rustup target list --installed` lacks",
            action: Action::Custom(ensure_aarch64_targets),
        },
        Step {
            name: "aarch64 cross tools",
            about: "aarch64-linux-gnu-gcc --version, qemu-aarch64 --version and \
                    /usr/aarch64-linux-gnu/lib/crt1.o; for what is missing, apt-get update and \
                    apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu \
                    libc6-dev-arm64-cross qemu-user (needs root)",
            action: Action::Custom(ensure_aarch64_tools),
        },
        Step {
            name: "aarch64 bare-metal build (core only)",
            about: "cargo build -p twizzler-capsec --no-default-features \
                    --target aarch64-unknown-none-softfloat",
            action: Action::Cargo(&[
                "build",
                "-p",
                "twizzler-capsec",
                "--no-default-features",
                "--target",
                AARCH64_BARE_METAL_TARGET,
            ]),
        },
        Step {
            name: "aarch64 bare-metal build (alloc)",
            about: "the same, with --features alloc",
            action: Action::Cargo(&[
                "build",
                "-p",
                "twizzler-capsec",
                "--no-default-features",
                "--features",
                "alloc",
                "--target",
                AARCH64_BARE_METAL_TARGET,
            ]),
        },
        Step {
            name: "aarch64 bare-metal build (kernel-hooks)",
            about: "cargo build -p kernel-hooks --target aarch64-unknown-none-softfloat",
            action: Action::Cargo(&[
                "build",
                "-p",
                "kernel-hooks",
                "--target",
                AARCH64_BARE_METAL_TARGET,
            ]),
        },
        Step {
            name: "aarch64 tests (qemu-aarch64)",
            about: "cargo test -p twizzler-capsec -p kernel-hooks --target aarch64-unknown-linux-gnu \
                    (unit, integration and doc tests), linked by aarch64-linux-gnu-gcc and run \
                    under `qemu-aarch64 -L /usr/aarch64-linux-gnu`",
            action: Action::Custom(aarch64_tests),
        },
        Step {
            name: "qemu",
            about: "qemu-system-x86_64 --version; when missing, apt-get update and \
                    apt-get install -y --no-install-recommends qemu-system-x86 (needs root)",
            action: Action::Custom(ensure_qemu),
        },
        Step {
            name: "qemu kernel: format",
            about: "cargo fmt --check, in kernel-hooks/kernel (outside the workspace)",
            action: Action::Custom(kernel_format),
        },
        Step {
            name: "qemu kernel: clippy",
            about: "cargo clippy --release --locked --target x86_64-unknown-none -- -D warnings, \
                    in kernel-hooks/kernel",
            action: Action::Custom(kernel_clippy),
        },
        Step {
            name: "qemu kernel: build",
            about: "cargo build --release --locked --target x86_64-unknown-none, \
                    in kernel-hooks/kernel",
            action: Action::Custom(kernel_build),
        },
        Step {
            name: "qemu kernel: boot, 1 CPU",
            about: "boots it under QEMU (TCG, -smp 1) with a 120 s timeout; every scenario must \
                    match (isa-debug-exit status 33)",
            action: Action::Custom(kernel_boot_one_cpu),
        },
        Step {
            name: "qemu kernel: boot, 4 CPUs",
            about: "boots it again with -smp 4 -accel tcg,thread=multi: the same scenarios, then \
                    tasks on three CPUs racing revocations on the fourth (status 33)",
            action: Action::Custom(kernel_boot_four_cpus),
        },
    ]
}

/// Runs every step in order, stopping at the first failure, and ends with the summary line
/// `xtask: N passed, M failed` that CI reads.
fn cmd_test(ws: &Workspace) -> ExitCode {
    let steps = test_steps();
    let total = steps.len();
    let mut passed = 0usize;
    let mut failed = 0usize;
    for (i, step) in steps.iter().enumerate() {
        heading(&format!("[{}/{total}] {}", i + 1, step.name));
        let result = match &step.action {
            Action::Cargo(args) => run_cargo(ws, args),
            Action::Custom(f) => f(ws),
        };
        match result {
            Ok(()) => {
                println!("xtask: step {}/{total} `{}` passed", i + 1, step.name);
                passed += 1;
            }
            Err(why) => {
                eprintln!();
                eprintln!(
                    "xtask: step {}/{total} `{}` FAILED: {why}",
                    i + 1,
                    step.name
                );
                let skipped = total - i - 1;
                if skipped > 0 {
                    eprintln!("xtask: stopped here; {skipped} later step(s) not run");
                }
                failed += 1;
                break;
            }
        }
    }
    println!();
    println!("xtask: {passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Step: makes sure the bare-metal target's prebuilt `core`/`alloc` are installed.
///
/// The environment sets `RUSTUP_AUTO_INSTALL=0`, so nothing installs by itself: without this
/// step the bare-metal builds fail with "can't find crate for `core`".
fn ensure_bare_metal_target(ws: &Workspace) -> Result<(), String> {
    ensure_rustup_targets(ws, &[BARE_METAL_TARGET])
}

/// Step: makes sure the aarch64 targets are installed: the soft-float bare-metal one for the
/// `no_std` builds, and the Linux one the test suites are cross-built for.
fn ensure_aarch64_targets(ws: &Workspace) -> Result<(), String> {
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

/// Step: `cargo fmt --all --check`. Under CI, rustfmt's diff is printed without colour codes
/// (rustfmt colours its diff even when the output is not a terminal).
fn check_format(ws: &Workspace) -> Result<(), String> {
    if in_ci() {
        run_cargo(ws, &["fmt", "--all", "--check", "--", "--color", "never"])
    } else {
        run_cargo(ws, &["fmt", "--all", "--check"])
    }
}

/// Step: the loom model of the cache's lock-free lookups (`kernel-hooks/tests/loom_cache.rs`).
///
/// `--cfg loom` changes every crate's build, so it gets its own target directory rather than
/// invalidating the workspace's; release mode, because loom runs the model hundreds of
/// thousands of times.
fn loom_cache(ws: &Workspace) -> Result<(), String> {
    let target_dir = ws.root.join("target").join("loom");
    let target_dir = target_dir.to_string_lossy();
    run_env(
        &ws.root,
        &[
            ("RUSTFLAGS", "--cfg loom"),
            ("CARGO_TARGET_DIR", &target_dir),
        ],
        "cargo",
        &[
            "test",
            "-p",
            "kernel-hooks",
            "--test",
            "loom_cache",
            "--release",
        ],
    )
}

// ---------------------------------------------------------------------------------------------
// aarch64

/// Step: makes sure the cross C compiler (also the linker), the aarch64 C library and
/// `qemu-aarch64` are there, installing the Debian packages of those that are not.
fn ensure_aarch64_tools(ws: &Workspace) -> Result<(), String> {
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

/// Step: the core's and the engine's unit and integration tests, cross-built for aarch64 Linux
/// and run under QEMU user-mode emulation.
///
/// The variables go on this one command: the cross linker, the runner, and the C compiler for
/// blake3's build script (which compiles its NEON code for the target, as on a real aarch64
/// Linux host). Doc tests run too: since Rust 1.89 cargo cross-compiles them on stable and runs
/// them through the same runner and linker.
fn aarch64_tests(ws: &Workspace) -> Result<(), String> {
    let runner = format!("{QEMU_USER} -L {AARCH64_SYSROOT}");
    let env = [
        ("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", AARCH64_GCC),
        (
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
            runner.as_str(),
        ),
        ("CC_aarch64_unknown_linux_gnu", AARCH64_GCC),
    ];
    run_env(
        &ws.root,
        &env,
        "cargo",
        &[
            "test",
            "-p",
            "twizzler-capsec",
            "-p",
            "kernel-hooks",
            "--target",
            AARCH64_LINUX_TARGET,
        ],
    )
}

// ---------------------------------------------------------------------------------------------
// The QEMU test kernel

/// Step: makes sure `qemu-system-x86_64` runs, installing Debian's `qemu-system-x86` with apt
/// when it does not.
fn ensure_qemu(ws: &Workspace) -> Result<(), String> {
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
fn apt_install(ws: &Workspace, packages: &[&str], what: &str) -> Result<(), String> {
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
fn tool_version(program: &str) -> Option<String> {
    let out = Command::new(program).arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("").trim().to_owned();
    println!("{first}");
    Some(first)
}

fn kernel_dir(ws: &Workspace) -> PathBuf {
    ws.root.join(KERNEL_DIR)
}

/// The kernel's crate must run cargo from its own directory: that is where its lock file is,
/// and where cargo picks up the workspace's `.cargo/config.toml` (the soft-float crypto
/// backends for the bare-metal target).
fn kernel_cargo(ws: &Workspace, args: &[&str]) -> Result<(), String> {
    run_in(&kernel_dir(ws), "cargo", args)
}

/// Step: `cargo fmt --check` on the kernel crate.
fn kernel_format(ws: &Workspace) -> Result<(), String> {
    if in_ci() {
        kernel_cargo(ws, &["fmt", "--check", "--", "--color", "never"])
    } else {
        kernel_cargo(ws, &["fmt", "--check"])
    }
}

/// Step: clippy on the kernel crate, warnings denied.
fn kernel_clippy(ws: &Workspace) -> Result<(), String> {
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
fn kernel_build(ws: &Workspace) -> Result<(), String> {
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
fn kernel_elf(ws: &Workspace) -> PathBuf {
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
fn kernel_boot_one_cpu(ws: &Workspace) -> Result<(), String> {
    kernel_boot(ws, 1)
}

/// Step: boots the kernel on four CPUs (the several-CPU scenarios run).
fn kernel_boot_four_cpus(ws: &Workspace) -> Result<(), String> {
    kernel_boot(ws, 4)
}

/// Boots the kernel under QEMU with `cpus` CPUs (TCG, one host thread per CPU) and checks
/// its exit status.
fn kernel_boot(ws: &Workspace, cpus: u32) -> Result<(), String> {
    let elf = kernel_elf(ws);
    if !elf.is_file() {
        return Err(format!(
            "no kernel at {} (the build step makes it)",
            elf.display()
        ));
    }
    let elf_arg = elf.to_string_lossy().into_owned();
    let smp_arg = cpus.to_string();
    let args = [
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
        "-serial",
        "stdio",
        "-display",
        "none",
        "-monitor",
        "none",
        "-no-reboot",
        "-device",
        "isa-debug-exit,iobase=0xf4,iosize=0x04",
    ];
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

// ---------------------------------------------------------------------------------------------
// Other commands

fn cmd_demo(ws: &Workspace) -> ExitCode {
    heading("demo (release build)");
    let demo = run_cargo(
        ws,
        &[
            "run",
            "--release",
            "-p",
            "twizzler-capsec",
            "--example",
            "demo",
        ],
    );
    if let Err(e) = demo {
        eprintln!("xtask: {e}");
        return ExitCode::FAILURE;
    }
    heading("the QEMU test kernel: real page faults decided by kernel-hooks");
    let kernel = ensure_bare_metal_target(ws)
        .and_then(|()| ensure_qemu(ws))
        .and_then(|()| kernel_build(ws))
        .and_then(|()| kernel_boot(ws, 4));
    exit_code(kernel)
}

fn cmd_bench(ws: &Workspace, args: &[String]) -> ExitCode {
    heading("benchmarks (criterion)");
    // `--benches`: only the criterion targets (libtest's harness would reject criterion's flags).
    let mut cmd: Vec<&str> = vec!["bench", "-p", "benches", "-p", "dist-bridge", "--benches"];
    // Everything given goes to criterion; a leading `--` is accepted and not doubled.
    let passthrough = match args.split_first() {
        Some((first, rest)) if first == "--" => rest,
        _ => args,
    };
    if !passthrough.is_empty() {
        cmd.push("--");
        cmd.extend(passthrough.iter().map(String::as_str));
    }
    exit_code(run_cargo(ws, &cmd))
}

fn cmd_fuzz(ws: &Workspace, args: &[String]) -> ExitCode {
    let (target, seconds) = match args {
        [target] => (target.as_str(), DEFAULT_FUZZ_SECONDS),
        [target, secs] => match secs.parse::<u64>() {
            Ok(s) if s > 0 => (target.as_str(), s),
            _ => {
                return usage_error(&format!(
                    "fuzz: seconds must be a positive whole number (got `{secs}`)"
                ));
            }
        },
        [] => return usage_error("fuzz: name a fuzz target (see fuzz/fuzz_targets/)"),
        _ => return usage_error("fuzz: usage is `cargo xtask fuzz <target> [seconds]`"),
    };
    println!("note: fuzzing is not part of CI (`cargo xtask test` does not run it).");
    let fuzz_dir = ws.root.join("fuzz");
    if !fuzz_dir.join("Cargo.toml").is_file() {
        eprintln!("xtask: no fuzz crate at {}", fuzz_dir.display());
        return ExitCode::FAILURE;
    }

    heading("cargo-fuzz");
    let have_fuzz = Command::new("cargo")
        .args(["fuzz", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if have_fuzz {
        println!("cargo-fuzz is installed");
    } else {
        println!("cargo-fuzz is missing; installing it");
        if let Err(e) = run(ws, "cargo", &["install", "cargo-fuzz"]) {
            eprintln!("xtask: installing cargo-fuzz failed: {e}");
            return ExitCode::FAILURE;
        }
    }

    // The corpus directory is git-ignored, so a fresh clone has no seeds; writing them is
    // idempotent (file names are content hashes) and never removes what the fuzzer found.
    heading("seed corpus (fuzz/examples/seed.rs)");
    if let Err(e) = run_in(
        &fuzz_dir,
        "cargo",
        &[
            "+nightly",
            "run",
            "--release",
            "--quiet",
            "--example",
            "seed",
        ],
    ) {
        eprintln!("xtask: writing the seed corpus failed: {e}");
        return ExitCode::FAILURE;
    }

    heading(&format!("fuzz {target} for {seconds} s (nightly)"));
    let max_time = format!("-max_total_time={seconds}");
    exit_code(run_in(
        &fuzz_dir,
        "cargo",
        &["+nightly", "fuzz", "run", target, "--", &max_time],
    ))
}

// ---------------------------------------------------------------------------------------------
// Plumbing

/// The workspace the commands run in.
struct Workspace {
    /// The directory holding the workspace's `Cargo.toml`.
    root: PathBuf,
}

impl Workspace {
    /// The workspace root: the parent of this crate's directory.
    fn locate() -> Result<Self, String> {
        let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = manifest_dir
            .parent()
            .ok_or_else(|| format!("xtask's directory {} has no parent", manifest_dir.display()))?;
        if !root.join("Cargo.toml").is_file() {
            return Err(format!(
                "no Cargo.toml in {}, where the workspace root should be",
                root.display()
            ));
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }
}

/// Whether we run under CI (`CI=true`, as most CI systems set it).
fn in_ci() -> bool {
    env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

fn heading(title: &str) {
    println!();
    println!("==> {title}");
}

fn run_cargo(ws: &Workspace, args: &[&str]) -> Result<(), String> {
    run(ws, "cargo", args)
}

fn run(ws: &Workspace, program: &str, args: &[&str]) -> Result<(), String> {
    run_in(&ws.root, program, args)
}

/// Runs `program args` in `dir` with inherited stdio; `Err` says what went wrong.
fn run_in(dir: &Path, program: &str, args: &[&str]) -> Result<(), String> {
    run_env(dir, &[], program, args)
}

/// [`run_in`] with extra environment variables for this command only (shown before the
/// command, as a shell would take them).
fn run_env(dir: &Path, env: &[(&str, &str)], program: &str, args: &[&str]) -> Result<(), String> {
    let mut shown = String::new();
    for (var, value) in env {
        if value.contains(char::is_whitespace) {
            let _ = write!(shown, "{var}={value:?} ");
        } else {
            let _ = write!(shown, "{var}={value} ");
        }
    }
    shown.push_str(&command_line(program, args));
    println!("$ {shown}");
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(dir).envs(env.iter().copied());
    if in_ci() {
        // Logs, not a terminal: no colour codes, no progress bars. Nothing here ever prompts.
        // A clean clone builds everything once, so incremental state is only disk spent (it
        // was a third of the target directory).
        for (var, value) in [
            ("CARGO_TERM_COLOR", "never"),
            ("CARGO_TERM_PROGRESS_WHEN", "never"),
            ("CARGO_INCREMENTAL", "0"),
        ] {
            if env::var_os(var).is_none() {
                cmd.env(var, value);
            }
        }
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` {}", describe_status(status)))
    }
}

fn describe_status(status: std::process::ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "was killed by a signal".to_owned(),
    }
}

fn command_line(program: &str, args: &[&str]) -> String {
    let mut s = program.to_owned();
    for a in args {
        s.push(' ');
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
            let _ = write!(s, "{a:?}");
        } else {
            s.push_str(a);
        }
    }
    s
}

fn exit_code(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The help text, with the steps of `test` listed from [`test_steps`] so it cannot drift.
fn help_text() -> String {
    let mut steps = String::new();
    for (i, step) in test_steps().iter().enumerate() {
        let _ = writeln!(
            steps,
            "         {:>2}. {}\n               {}",
            i + 1,
            step.name,
            step.about
        );
    }
    format!(
        "\
cargo xtask: the entry points of the Twizzler capability-security workspace

USAGE:
    cargo xtask <command> [args]

COMMANDS:
    demo
        Builds and runs the demo in release mode:
          cargo run --release -p twizzler-capsec --example demo
        It mints Ed25519 and P-256 keys from the OS RNG, signs capabilities and a
        delegation, builds two security contexts, parses them back and prints every
        access decision with its reason.
        Then builds the QEMU test kernel ({KERNEL_DIR}) and boots it:
          cargo build --release --locked --target {BARE_METAL_TARGET}   (in {KERNEL_DIR})
          {QEMU} -machine q35 -accel tcg,thread=multi -smp 4 -cpu max -m 256M
            -kernel <elf> -serial stdio ...
        The kernel runs ring-3 tasks whose page faults kernel-hooks decides, and prints
        a table (scenario, expected, got) and the cycles of cache hits and misses; then,
        on four CPUs, a table of tasks on three CPUs racing revocations, invalidation and
        expiry on the fourth, with revocation latency and decide cycles under contention.
        Exits non-zero if any decision or row is not the expected one. Installs the
        {BARE_METAL_TARGET} target (rustup) and {QEMU_PACKAGE} (apt-get, needs root)
        when missing, as `test` does.

    test
        Runs every check, in order, stopping at the first failure:
{steps}        Ends with one line `xtask: N passed, M failed` (N and M count steps), which CI
        reads. Installs the {BARE_METAL_TARGET}, {AARCH64_BARE_METAL_TARGET}
        and {AARCH64_LINUX_TARGET} targets through rustup when missing
        (RUSTUP_AUTO_INSTALL=0 means nothing installs by itself); through apt-get (needs
        root), those of {aarch64_packages}
        whose `{AARCH64_GCC} --version`, {AARCH64_SYSROOT}/lib/crt1.o or
        `{QEMU_USER} --version` is missing, and {QEMU_PACKAGE} when
        `{QEMU} --version` fails. The QEMU kernel runs with a {timeout} s timeout.
        This is what CI runs (.ci/run).

    bench [criterion args...]
        Runs the criterion benchmarks: cargo bench -p benches -p dist-bridge --benches
        -- [criterion args...]
        For example `cargo xtask bench verify` runs only benchmarks matching `verify`.
        Installs nothing. Results and method: docs/BENCHMARKS.md.

    fuzz <target> [seconds]
        Writes the seed corpus (fuzz/examples/seed.rs, idempotent), then runs one
        cargo-fuzz target from fuzz/ for [seconds] (default {DEFAULT_FUZZ_SECONDS}):
          cargo +nightly fuzz run <target> -- -max_total_time=<seconds>
        Installs cargo-fuzz with `cargo install cargo-fuzz` when `cargo fuzz --help`
        fails. Needs the nightly toolchain (not installed by xtask). Not part of CI.
        Targets are the files in fuzz/fuzz_targets/.

    help, --help, -h
        This text.

ENVIRONMENT:
    CI=true    no colour and no progress bars: child cargo commands get
               CARGO_TERM_COLOR=never and CARGO_TERM_PROGRESS_WHEN=never (unless already
               set), and rustfmt gets --color never. xtask never prompts. Builds are not
               incremental (CARGO_INCREMENTAL=0 unless set): a clean clone builds once, and
               incremental state would only take disk.

Every command runs from the workspace root (the kernel's cargo commands from {KERNEL_DIR})
with the child's output shown as it comes.
",
        timeout = QEMU_TIMEOUT.as_secs(),
        aarch64_packages = AARCH64_PACKAGES.join(" "),
    )
}
