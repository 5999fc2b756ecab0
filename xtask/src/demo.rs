//! `cargo xtask demo`: the demo's permission table, then the QEMU kernel enforcing it.

use std::process::ExitCode;

use crate::install::{ensure_bare_metal_target, ensure_qemu};
use crate::kernel::{kernel_boot, kernel_build};
use crate::run::{Workspace, exit_code, heading, run_cargo};

pub(crate) fn cmd_demo(ws: &Workspace) -> ExitCode {
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
        .and_then(|()| kernel_build(ws, &[]))
        .and_then(|()| kernel_boot(ws, 4));
    exit_code(kernel)
}
