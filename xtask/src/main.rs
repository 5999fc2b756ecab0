//! `cargo xtask`: the project's entry points.
//!
//! Everything that is more than a plain `cargo build` or `cargo test` goes through here, as in
//! Twizzler itself: installing what the checks need, running every check in order, the demo,
//! the benchmarks and the fuzzers. Run `cargo xtask --help` for the commands.
//!
//! Plain `std` on purpose: the tool must build in seconds on a fresh checkout. Child commands
//! run from the workspace root with inherited stdio, so their output streams as usual.
//!
//! One module per command ([`test`], [`demo`], [`bench`], [`fuzz`], [`model`], [`twizzler`],
//! [`help`]); the steps of
//! `test` are in [`steps`], the QEMU kernel's in [`kernel`], installing what is missing in
//! [`install`], and running child commands in [`run`].

mod bench;
mod demo;
mod fuzz;
mod help;
mod install;
mod kernel;
mod lint;
mod model;
mod run;
mod steps;
mod test;
mod twizzler;

use std::env;
use std::process::ExitCode;
use std::time::Duration;

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
/// The user programs' crate, relative to the workspace root (outside the workspace too).
const USER_DIR: &str = "kernel-hooks/user";
/// The kernel's binary name.
const KERNEL_BIN: &str = "kernel-hooks-qemu";
/// The QEMU binary that boots it, and the Debian package providing it.
const QEMU: &str = "qemu-system-x86_64";
const QEMU_PACKAGE: &str = "qemu-system-x86";
/// The QEMU arguments every boot of ours shares: the serial console on stdout, no display,
/// no monitor, no reboot (a triple fault ends the run), and the `isa-debug-exit` port through
/// which a kernel sets QEMU's exit status.
const QEMU_HEADLESS: [&str; 9] = [
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
/// How long the kernel may run before it counts as hung.
const QEMU_TIMEOUT: Duration = Duration::from_secs(120);
/// The kernel writes 0x10 to `isa-debug-exit` when every scenario matches; QEMU then exits
/// with `(0x10 << 1) | 1`.
const KERNEL_SUCCESS_STATUS: i32 = 33;
/// ... and 0x11 (status 35) when one does not.
const KERNEL_MISMATCH_STATUS: i32 = 35;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let ws = match run::Workspace::locate() {
        Ok(ws) => ws,
        Err(e) => {
            eprintln!("xtask: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (cmd, rest) = match args.split_first() {
        Some((cmd, rest)) => (cmd.as_str(), rest),
        None => {
            print!("{}", help::help_text());
            return ExitCode::SUCCESS;
        }
    };
    match cmd {
        "-h" | "--help" | "help" => {
            print!("{}", help::help_text());
            ExitCode::SUCCESS
        }
        "test" => test::cmd_test(&ws, rest),
        "demo" => {
            if let Some(extra) = rest.first() {
                return usage_error(&format!("`demo` takes no arguments (got `{extra}`)"));
            }
            demo::cmd_demo(&ws)
        }
        "bench" => bench::cmd_bench(&ws, rest),
        "fuzz" => fuzz::cmd_fuzz(&ws, rest),
        "model" => model::cmd_model(&ws, rest),
        "twizzler" => twizzler::cmd_twizzler(&ws, rest),
        other => usage_error(&format!("unknown command `{other}`")),
    }
}

/// A usage mistake: the message, a pointer to `--help`, and exit status 2.
fn usage_error(msg: &str) -> ExitCode {
    eprintln!("xtask: {msg}");
    eprintln!("Run `cargo xtask --help` for the commands.");
    ExitCode::from(2)
}
