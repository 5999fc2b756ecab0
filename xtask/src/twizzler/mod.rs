//! `cargo xtask twizzler`: the Twizzler port (`twizzler-port/`) applied to an upstream checkout,
//! built, booted under QEMU, and its kernel tests (upstream's and ours) counted.
//!
//! Nothing is downloaded: the upstream checkout (with its `abi` submodule), upstream's
//! `backtracer` and a Limine binary release are arguments. The checkout is treated as scratch:
//! every file the port changes is first reset to the pinned commit, so a run is repeatable and
//! never builds on a half-applied earlier run. The steps:
//!
//! 1. check the inputs: the pinned commits, the tools (`bindgen` new enough, `ld.lld`, QEMU,
//!    OVMF, the nightly toolchain with `rust-src`);
//! 2. prepare: trim upstream's workspace to the kernel, apply the build fixes this machine
//!    needs and (unless `--upstream-only`) the port: our files and the patches at the call
//!    sites;
//! 3. build the kernel's test binary (`cargo test --no-run`, `build-std`, upstream's target
//!    spec), at `nice 19`; with `--release`, `cargo test --release --no-run` (the profile
//!    upstream ships its kernel with);
//! 4. boot it under QEMU (TCG, OVMF, Limine from a FAT directory) with `--tests`, watch the
//!    serial log, and stop QEMU once the test runner reports (or panics, or times out);
//! 5. print a table and fail unless every test ran and passed.
//!
//! One module per step: `inputs` (1), `prepare` (2), `build` (3), `boot` (4), `report` (5,
//! and the reading of the serial log that the table comes from).

use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

mod boot;
mod build;
mod inputs;
mod prepare;
mod report;

use crate::run::{Workspace, heading};
use crate::usage_error;
use boot::boot;
use build::{build, build_command};
use inputs::check_inputs;
use prepare::prepare;
use prepare::{OUR_FILES, PORT_DIR};
use report::print_table;

/// The upstream commit the port is written against (twizzler-operating-system/twizzler).
pub(crate) const UPSTREAM_COMMIT: &str = "c09e6e381d5b12e843a6d5a90a69a8252198d8ec";
/// The commit of the `src/abi` submodule at [`UPSTREAM_COMMIT`].
pub(crate) const ABI_COMMIT: &str = "8df6a1d48ac1d3507f15f67c002b3b450baa2cfb";
/// The commit of twizzler-operating-system/backtracer (branch `twizzler`) the kernel builds
/// with.
pub(crate) const BACKTRACER_COMMIT: &str = "0b85917581f463464fb30980fad86f7856334e46";
/// The Limine binary release the image boots with (branch `v8.2.0-binary`).
pub(crate) const LIMINE_BRANCH: &str = "v8.2.0-binary";
/// Debian's OVMF (package `ovmf`).
pub(crate) const OVMF: &str = "/usr/share/ovmf/OVMF.fd";

/// The command line of `cargo xtask twizzler`.
struct Options {
    upstream: PathBuf,
    limine: PathBuf,
    backtracer: PathBuf,
    /// Build upstream as it is (with only the build fixes), for a baseline.
    upstream_only: bool,
    /// Build the kernel's tests with the workspace's release profile (optimised, with debug
    /// information) rather than the dev profile `cargo test` uses by default. Upstream's
    /// kernel sets no opt-level of its own, so the default test binary is unoptimised, and
    /// its timings (`port_tests/timing.rs`) say more about how much abstraction each side
    /// has than about what the kernel upstream ships pays.
    release: bool,
    smp: u32,
}

impl Options {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut upstream = None;
        let mut limine = None;
        let mut backtracer = None;
        let mut upstream_only = false;
        let mut release = false;
        let mut smp = 2;
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("`{name}` needs a value"))
            };
            match arg.as_str() {
                "--upstream" => upstream = Some(PathBuf::from(value("--upstream")?)),
                "--limine" => limine = Some(PathBuf::from(value("--limine")?)),
                "--backtracer" => backtracer = Some(PathBuf::from(value("--backtracer")?)),
                "--smp" => {
                    let v = value("--smp")?;
                    smp = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=8).contains(n))
                        .ok_or_else(|| format!("`--smp {v}`: a CPU count from 1 to 8"))?;
                }
                "--upstream-only" => upstream_only = true,
                "--release" => release = true,
                other => return Err(format!("`twizzler` does not take `{other}`")),
            }
        }
        let upstream = upstream.ok_or("`twizzler` needs `--upstream <checkout>`")?;
        let upstream = fs::canonicalize(&upstream)
            .map_err(|e| format!("--upstream {}: {e}", upstream.display()))?;
        let sibling = |name: &str| upstream.parent().map(|p| p.join(name)).unwrap_or_default();
        let limine = limine.unwrap_or_else(|| sibling("limine"));
        let backtracer = backtracer.unwrap_or_else(|| sibling("backtracer"));
        Ok(Self {
            upstream,
            limine,
            backtracer,
            upstream_only,
            release,
            smp,
        })
    }
}

/// Entry point of `cargo xtask twizzler`.
pub(crate) fn cmd_twizzler(ws: &Workspace, args: &[String]) -> ExitCode {
    let opts = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => return usage_error(&e),
    };
    let started = Instant::now();
    let mut rows: Vec<(String, String, bool)> = Vec::new();
    let result = run_all(ws, &opts, &mut rows);
    print_table(&rows, started.elapsed());
    match result {
        Ok(()) if rows.iter().all(|r| r.2) => {
            println!("xtask: twizzler: every step and test passed");
            ExitCode::SUCCESS
        }
        Ok(()) => {
            eprintln!("xtask: twizzler: a row above failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("xtask: twizzler: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_all(
    ws: &Workspace,
    opts: &Options,
    rows: &mut Vec<(String, String, bool)>,
) -> Result<(), String> {
    heading("twizzler: checking the inputs");
    check_inputs(opts)?;
    rows.push(("inputs at the pinned commits".into(), "ok".into(), true));

    heading("twizzler: preparing the checkout");
    prepare(ws, opts)?;
    let what = if opts.upstream_only {
        "build fixes only (--upstream-only)"
    } else {
        "build fixes, our files, call-site patches"
    };
    rows.push(("applied".into(), what.into(), true));

    heading("twizzler: building the kernel's tests");
    let t = Instant::now();
    let elf = build(opts)?;
    rows.push((
        format!("build ({}, nice 19)", build_command(opts)),
        format!("{:.0} s", t.elapsed().as_secs_f64()),
        true,
    ));

    heading("twizzler: booting under QEMU");
    let ours_expected = if opts.upstream_only {
        0
    } else {
        let mut count = 0;
        for (src, _) in &OUR_FILES[1..] {
            let tests = ws.root.join(PORT_DIR).join(src);
            count += fs::read_to_string(&tests)
                .map_err(|e| format!("read {}: {e}", tests.display()))?
                .matches("#[kernel_test]")
                .count();
        }
        count
    };
    let report = boot(opts, &elf)?;
    report.rows(rows, ours_expected);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options for `args` after `--upstream <this crate's directory>` (which exists, as
    /// `parse` requires).
    fn parse(args: &[&str]) -> Result<Options, String> {
        let mut all = vec![
            "--upstream".to_owned(),
            env!("CARGO_MANIFEST_DIR").to_owned(),
        ];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        Options::parse(&all)
    }

    /// The dev profile unless `--release`; the table's build row names the command run.
    #[test]
    fn release_builds_with_the_release_profile_and_the_table_says_so() -> Result<(), String> {
        let dev = parse(&[])?;
        assert!(!dev.release);
        assert_eq!(build_command(&dev), "cargo test --no-run");
        let release = parse(&["--release", "--smp", "1"])?;
        assert!(release.release);
        assert_eq!(release.smp, 1);
        assert_eq!(build_command(&release), "cargo test --release --no-run");
        Ok(())
    }

    #[test]
    fn an_unknown_option_is_refused() {
        let err = parse(&["--relase"]).err();
        assert_eq!(
            err.as_deref(),
            Some("`twizzler` does not take `--relase`"),
            "a misspelt option must not pass for a default"
        );
    }
}
