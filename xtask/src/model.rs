//! `cargo xtask model [--deep]`: the explicit-state model of dist-bridge's guard, version and
//! revocation protocol (`dist-bridge/model`), at the small bounds `cargo xtask test` runs, or
//! at the larger ones that take minutes.

use std::process::ExitCode;

use crate::run::{Workspace, exit_code, heading, run_cargo};
use crate::usage_error;

/// Runs the model's tests: the small bounds, mutations and conformance, or (`--deep`) only
/// the larger bounds, which are `#[ignore]`d in the ordinary test run.
pub(crate) fn cmd_model(ws: &Workspace, args: &[String]) -> ExitCode {
    let deep = match args {
        [] => false,
        [flag] if flag == "--deep" => true,
        _ => {
            return usage_error(&format!(
                "`model` takes nothing or `--deep` (got `{}`)",
                args.join(" ")
            ));
        }
    };
    if deep {
        heading("the protocol model at deep bounds (minutes; about 1 GB)");
        exit_code(run_cargo(
            ws,
            &[
                "test",
                "-p",
                "dist-bridge-model",
                "--",
                "--ignored",
                "--nocapture",
            ],
        ))
    } else {
        heading("the protocol model at small bounds");
        exit_code(run_cargo(ws, &["test", "-p", "dist-bridge-model"]))
    }
}
