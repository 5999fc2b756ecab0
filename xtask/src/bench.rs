//! `cargo xtask bench`: the criterion benchmarks, with criterion's own arguments passed through.

use std::process::ExitCode;

use crate::run::{Workspace, exit_code, heading, run_cargo};

pub(crate) fn cmd_bench(ws: &Workspace, args: &[String]) -> ExitCode {
    heading("benchmarks (criterion)");
    // `--benches`: only the criterion targets (libtest's harness would reject criterion's flags).
    let mut cmd: Vec<&str> = vec![
        "bench",
        "-p",
        "benches",
        "-p",
        "dist-bridge",
        "-p",
        "keytool",
        "--benches",
    ];
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
