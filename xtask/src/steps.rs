//! The steps of `cargo xtask test`, in order, and the few whose command needs more than fixed
//! arguments (formatting without colour under CI, the loom model, the aarch64 tests).

use crate::install::{
    ensure_aarch64_targets, ensure_aarch64_tools, ensure_bare_metal_target, ensure_qemu,
};
use crate::kernel::{kernel_boot_four_cpus, kernel_boot_one_cpu, kernel_build, kernel_format};
use crate::lint::clippy_driver;
use crate::run::{Workspace, in_ci, run_cargo, run_env};
use crate::{
    AARCH64_BARE_METAL_TARGET, AARCH64_GCC, AARCH64_LINUX_TARGET, AARCH64_SYSROOT,
    BARE_METAL_TARGET, QEMU_USER,
};

/// One step of `cargo xtask test`.
pub(crate) struct Step {
    /// Short name, used in headings and in the failure message.
    pub(crate) name: &'static str,
    /// What it does, for the help text.
    pub(crate) about: &'static str,
    /// How it runs.
    pub(crate) action: Action,
}

/// How a step runs.
pub(crate) enum Action {
    /// `cargo` with these arguments, from the workspace root.
    Cargo(&'static [&'static str]),
    /// A step that needs logic (checking before installing, for example).
    Custom(fn(&Workspace) -> Result<(), String>),
}

/// The steps of `cargo xtask test`, in order. Later steps (booting the QEMU kernel, for
/// example) are added here; the help text and the summary follow automatically.
pub(crate) fn test_steps() -> Vec<Step> {
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
            about: "RUSTFLAGS=\"--cfg loom -D warnings\" cargo test -p kernel-hooks-loom --test loom_cache --profile loom, \
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
            about: "the same, with --features alloc,p256,sha256",
            action: Action::Cargo(&[
                "build",
                "-p",
                "twizzler-capsec",
                "--no-default-features",
                "--features",
                "alloc,p256,sha256",
                "--target",
                BARE_METAL_TARGET,
            ]),
        },
        Step {
            name: "bare-metal build (kernel-hooks, Ed25519/BLAKE3 only)",
            about: "cargo build -p kernel-hooks --no-default-features --target \
                    x86_64-unknown-none: the engine without P-256 and SHA-256",
            action: Action::Cargo(&[
                "build",
                "-p",
                "kernel-hooks",
                "--no-default-features",
                "--target",
                BARE_METAL_TARGET,
            ]),
        },
        Step {
            name: "without P-256 and SHA-256: records refused",
            about: "cargo test -p twizzler-capsec --no-default-features --features alloc \
                    --test not_built_in: a record or key using an algorithm left out is \
                    refused with DecodeError::NotBuiltIn, never a panic",
            action: Action::Cargo(&[
                "test",
                "-p",
                "twizzler-capsec",
                "--no-default-features",
                "--features",
                "alloc",
                "--test",
                "not_built_in",
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
            about: "the same, with --features alloc,p256,sha256",
            action: Action::Cargo(&[
                "build",
                "-p",
                "twizzler-capsec",
                "--no-default-features",
                "--features",
                "alloc,p256,sha256",
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
                    (unit, integration and doc tests), our crates at opt-level 1, linked by \
                    aarch64-linux-gnu-gcc and run under `qemu-aarch64 -L /usr/aarch64-linux-gnu`",
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
            about: "cargo fmt --check, in kernel-hooks/kernel and kernel-hooks/user (outside the \
                    workspace)",
            action: Action::Custom(kernel_format),
        },
        Step {
            name: "qemu kernel: clippy and build",
            about: "RUSTC_WORKSPACE_WRAPPER=clippy-driver cargo build --release --locked --target \
                    x86_64-unknown-none, in kernel-hooks/user (the ring-3 programs, into the \
                    kernel's target directory) and then kernel-hooks/kernel, which embeds \
                    them: clippy's lints while they build, warnings denied by the target's \
                    rustflags",
            action: Action::Custom(kernel_lint_and_build),
        },
        Step {
            name: "qemu kernel: boot, 1 CPU",
            about: "boots it under QEMU (TCG, -smp 1) with a 120 s timeout; every conformance \
                    check it prints must pass (or be skipped) and every scenario must match \
                    (isa-debug-exit status 33)",
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

/// Step: `cargo fmt --all --check`. Under CI, rustfmt's diff is printed without colour codes
/// (rustfmt colours its diff even when the output is not a terminal).
pub(crate) fn check_format(ws: &Workspace) -> Result<(), String> {
    if in_ci() {
        run_cargo(ws, &["fmt", "--all", "--check", "--", "--color", "never"])
    } else {
        run_cargo(ws, &["fmt", "--all", "--check"])
    }
}

/// Step: the reference kernel, linted while it builds (`crate::lint`).
fn kernel_lint_and_build(ws: &Workspace) -> Result<(), String> {
    let driver = clippy_driver(ws)?;
    kernel_build(ws, &[("RUSTC_WORKSPACE_WRAPPER", &driver)])
}

/// Step: the loom model of the cache's lock-free lookups (`kernel-hooks/loom/tests/loom_cache.rs`,
/// in a crate of its own so that this build compiles only the engine and loom).
///
/// `--cfg loom` changes every crate's build, so it gets its own target directory rather than
/// invalidating the workspace's; the `loom` profile (release without debug info, in the root
/// `Cargo.toml`), because loom runs the model hundreds of thousands of times.
pub(crate) fn loom_cache(ws: &Workspace) -> Result<(), String> {
    let target_dir = ws.root.join("target").join("loom");
    let target_dir = target_dir.to_string_lossy();
    run_env(
        &ws.root,
        &[
            ("RUSTFLAGS", "--cfg loom -D warnings"),
            ("CARGO_TARGET_DIR", &target_dir),
        ],
        "cargo",
        &[
            "test",
            "-p",
            "kernel-hooks-loom",
            "--test",
            "loom_cache",
            "--profile",
            "loom",
        ],
    )
}

/// Step: the core's and the engine's unit and integration tests, cross-built for aarch64 Linux
/// and run under QEMU user-mode emulation.
///
/// The variables go on this one command: the cross linker, the runner, and the C compiler for
/// blake3's build script (which compiles its NEON code for the target, as on a real aarch64
/// Linux host). Doc tests run too: since Rust 1.89 cargo cross-compiles them on stable and runs
/// them through the same runner and linker.
pub(crate) fn aarch64_tests(ws: &Workspace) -> Result<(), String> {
    let runner = format!("{QEMU_USER} -L {AARCH64_SYSROOT}");
    let env = [
        ("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER", AARCH64_GCC),
        (
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
            runner.as_str(),
        ),
        ("CC_aarch64_unknown_linux_gnu", AARCH64_GCC),
        // Clippy sees host builds only: warnings in what only this build compiles fail here.
        (
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
            "-D warnings",
        ),
        // Our crates optimised (the dependencies already are, by the profile): emulated, the
        // unoptimised test code was two thirds of this step (113 s of 171 on a quiet machine,
        // most of it the property tests), and this build's artifacts are used by nothing else.
        ("CARGO_PROFILE_TEST_OPT_LEVEL", "1"),
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
