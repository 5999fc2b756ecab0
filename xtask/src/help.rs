//! `cargo xtask --help`: every command, and the steps of `test` listed from
//! [`test_steps`](crate::steps::test_steps) so the text cannot drift from what runs.

use std::fmt::Write as _;

use crate::steps::test_steps;
use crate::twizzler::{ABI_COMMIT, BACKTRACER_COMMIT, LIMINE_BRANCH, OVMF, UPSTREAM_COMMIT};
use crate::{
    AARCH64_BARE_METAL_TARGET, AARCH64_GCC, AARCH64_LINUX_TARGET, AARCH64_PACKAGES,
    AARCH64_SYSROOT, BARE_METAL_TARGET, DEFAULT_FUZZ_SECONDS, KERNEL_DIR, QEMU, QEMU_PACKAGE,
    QEMU_TIMEOUT, QEMU_USER, USER_DIR,
};

/// The help text, with the steps of `test` listed from [`test_steps`] so it cannot drift.
pub(crate) fn help_text() -> String {
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
        Then builds the user programs and the QEMU test kernel ({KERNEL_DIR}), which
        embeds them, and boots it:
          cargo build --release --locked --target {BARE_METAL_TARGET}
            (in {USER_DIR}, into the kernel's target directory, then in {KERNEL_DIR})
          {QEMU} -machine q35 -accel tcg,thread=multi -smp 4 -cpu max -m 256M
            -kernel <elf> -serial stdio ...
        The kernel runs ring-3 tasks whose page faults kernel-hooks decides, and prints
        a table (scenario, expected, got) and the cycles of cache hits and misses; then,
        on four CPUs, a table of tasks on three CPUs racing revocations, invalidation and
        expiry on the fourth, with revocation latency and decide cycles under contention;
        then ring-3 Rust programs making and living under their own policy, a hostile one,
        and their benchmarks beside the thesis's figures (a table of steps, expected vs got).
        Exits non-zero if any decision or row is not the expected one. Installs the
        {BARE_METAL_TARGET} target (rustup) and {QEMU_PACKAGE} (apt-get, needs root)
        when missing, as `test` does.

    test [--step <N|NAME> | --from <N|NAME>]
        Runs every check, in order, stopping at the first failure:
{steps}        Prints each step's time as it ends, then a table of step times and the total, then
        one line `xtask: N passed, M failed` (N and M count steps), which CI reads.
        --step N|NAME  runs that step only (a number from the list above, or a name, or
                       the start of exactly one name: `--step clippy`, `--step loom`).
        --from N|NAME  runs that step and every later one: a failed run says which
                       `--from` resumes it. Earlier steps are not re-checked, so a step
                       that needs an install from an earlier one (the targets, QEMU) may
                       fail if that install never ran on this machine. Installs the {BARE_METAL_TARGET}, {AARCH64_BARE_METAL_TARGET}
        and {AARCH64_LINUX_TARGET} targets through rustup when missing
        (RUSTUP_AUTO_INSTALL=0 means nothing installs by itself); through apt-get (needs
        root), those of {aarch64_packages}
        whose `{AARCH64_GCC} --version`, {AARCH64_SYSROOT}/lib/crt1.o or
        `{QEMU_USER} --version` is missing, and {QEMU_PACKAGE} when
        `{QEMU} --version` fails. The QEMU kernel runs with a {timeout} s timeout.
        This is what CI runs (.ci/run).

    bench [criterion args...]
        Runs the criterion benchmarks: cargo bench -p benches -p dist-bridge -p keytool --benches
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

    model [--deep]
        The explicit-state model of dist-bridge's guard, version and revocation
        protocol (dist-bridge/model, stateright): every property, the paths that show
        it is not vacuous, the mutations that must give counterexamples, and the
        model's table against the real GuardTable:
          cargo test -p dist-bridge-model                  (small bounds; also in `test`)
          cargo test -p dist-bridge-model -- --ignored --nocapture        (--deep)
        --deep checks the larger bounds: minutes and about 1 GB; state counts and
        times are in dist-bridge/model/README.md. Installs nothing.

    twizzler --upstream <checkout> [--limine <dir>] [--backtracer <dir>] [--smp <n>]
             [--upstream-only] [--release]
        Builds the Twizzler port (twizzler-port/) into upstream Twizzler's kernel and
        runs the kernel's tests under QEMU: checks that <checkout> is at the pinned
        commit; resets the files the port touches to that commit and trims the workspace
        to the kernel; applies twizzler-port/patches (build fixes for this toolchain, the
        call sites) and our files (security.rs over kernel-hooks, our kernel tests);
        builds the kernel's test binary with `nice -n 19 cargo +nightly test --no-run`
        (build-std, upstream's target spec); boots it under {QEMU} (TCG, -m 4G, OVMF,
        Limine from a FAT directory, kernel command line --tests); prints a table (build
        time, boot time, upstream's tests and ours passed, test run time) and exits
        non-zero if any test failed or did not run, the kernel panicked, or it ran
        over 1800 s.
        --upstream-only  builds upstream's own security.rs (build fixes only): the baseline.
        --release        builds the test binary with `cargo test --release --no-run`: the
                         workspace's release profile (optimised, with debug information),
                         the profile upstream ships its kernel with. Without it, the dev
                         profile (unoptimised: upstream sets no opt-level), whose timings
                         reflect abstraction more than what the kernel pays. Everything
                         else (patches, boot, pass/fail) is the same; the binary goes to
                         release/ instead of debug/ under the checkout's target/kernel*.
        --smp <n>        CPUs for QEMU (default 2).
        Downloads nothing. Where to get the inputs (all public):
          <checkout>      https://github.com/twizzler-operating-system/twizzler at
                          {UPSTREAM_COMMIT}, with its src/abi submodule
                          (twizzler-operating-system/abi) at {ABI_COMMIT};
                          other submodules are not needed.
          --backtracer    https://github.com/twizzler-operating-system/backtracer at
                          {BACKTRACER_COMMIT} (branch twizzler);
                          default <checkout>/../backtracer. Patched in place.
          --limine        https://github.com/limine-bootloader/limine, branch
                          {LIMINE_BRANCH} (the binary release: BOOTX64.EFI);
                          default <checkout>/../limine.
        Needs on the machine: the nightly toolchain with rust-src, a bindgen with
        --override-abi (`cargo install bindgen-cli`; Debian 12's is too old) and
        libclang (Debian libclang-dev), ld.lld (Debian lld), {QEMU}, and {OVMF}
        (Debian ovmf). Installs none of them. Not part of CI. See twizzler-port/README.md.
        TWIZZLER_QEMU_ARGS (environment): extra QEMU arguments, e.g. `-s` to attach gdb
        to a kernel that hangs (twizzler-port/README.md, section Debugging a hang).

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
