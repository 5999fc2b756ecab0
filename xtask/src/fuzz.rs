//! `cargo xtask fuzz`: one cargo-fuzz target for a while, on the nightly toolchain, after
//! writing the seed corpus.

use std::process::{Command, ExitCode, Stdio};

use crate::run::{Workspace, exit_code, heading, run, run_in};
use crate::{DEFAULT_FUZZ_SECONDS, usage_error};

pub(crate) fn cmd_fuzz(ws: &Workspace, args: &[String]) -> ExitCode {
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
