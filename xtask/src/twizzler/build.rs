//! Step 3: the kernel's test binary, built with upstream's target spec.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::Options;
use super::prepare::write_stub_sysroot;
use crate::run::{command_line, describe_status};

/// The kernel's target spec, relative to the checkout.
pub(super) const TARGET_SPEC: &str = "src/kernel/target-spec/x86_64-unknown-none.json";

/// libclang's own headers (`stddef.h`, `stdint.h`): bindgen's libclang, loaded from the system
/// library directory, does not find its resource directory by itself. Taken from
/// `TWIZZLER_ABI_BUILTIN_HEADERS` if set, else from Debian's `/usr/lib/llvm-*/lib/clang/*/
/// include` (package `libclang-common-*-dev`, which `libclang-dev` pulls in).
pub(super) fn clang_builtin_headers() -> Result<String, String> {
    if let Ok(dir) = std::env::var("TWIZZLER_ABI_BUILTIN_HEADERS") {
        return Ok(dir);
    }
    let mut found = Vec::new();
    for llvm in fs::read_dir("/usr/lib").map_err(|e| format!("read /usr/lib: {e}"))? {
        let Ok(llvm) = llvm else { continue };
        if !llvm.file_name().to_string_lossy().starts_with("llvm-") {
            continue;
        }
        let Ok(versions) = fs::read_dir(llvm.path().join("lib/clang")) else {
            continue;
        };
        for v in versions.flatten() {
            let inc = v.path().join("include");
            if inc.join("stddef.h").is_file() {
                found.push(inc);
            }
        }
    }
    found.sort();
    found.pop().map(|p| p.display().to_string()).ok_or_else(|| {
        "no clang builtin headers under /usr/lib/llvm-*/lib/clang/*/include (Debian \
             libclang-dev); or set TWIZZLER_ABI_BUILTIN_HEADERS"
            .to_owned()
    })
}

/// Cargo's subcommand and the profile it builds the kernel's tests with. Without `--release`,
/// the dev profile (unoptimised: upstream's kernel sets no opt-level); with it, the
/// workspace's release profile (optimised, `debug = true` in the manifest
/// [`trimmed_manifest`](super::prepare::trimmed_manifest) writes, as in upstream's), the
/// profile upstream ships its kernel with. Cargo puts each profile's artifacts in their own
/// directory (`debug/`, `release/`) under the same target directory, and names the test
/// binary in its JSON messages, so neither build disturbs the other's.
pub(super) fn cargo_test_args(opts: &Options) -> &'static [&'static str] {
    if opts.release {
        &["test", "--release", "--no-run"]
    } else {
        &["test", "--no-run"]
    }
}

/// The build's cargo command as the table names it (`cargo test --release --no-run`).
pub(super) fn build_command(opts: &Options) -> String {
    command_line("cargo", cargo_test_args(opts))
}

pub(super) fn build(opts: &Options) -> Result<PathBuf, String> {
    let headers = clang_builtin_headers()?;
    let sysroot = write_stub_sysroot(&opts.upstream)?;
    let kernel = opts.upstream.join("src/kernel");
    let spec = opts.upstream.join(TARGET_SPEC).display().to_string();
    // One target directory per build: the port's rustflags (the curve25519 backend) differ
    // from upstream's, and sharing one directory rebuilt the whole graph at every switch.
    let target_dir = if opts.upstream_only {
        "target/kernel-upstream"
    } else {
        "target/kernel"
    };
    let target_dir = opts.upstream.join(target_dir).display().to_string();
    let sysroot = sysroot.display().to_string();
    let mut args = vec!["-n", "19", "cargo", "+nightly"];
    args.extend_from_slice(cargo_test_args(opts));
    args.extend_from_slice(&[
        "-Zjson-target-spec",
        "--target",
        &spec,
        "--message-format=json-render-diagnostics",
    ]);
    let env = [
        ("TWIZZLER_ABI_BUILTIN_HEADERS", headers.as_str()),
        ("TWIZZLER_ABI_SYSROOTS", sysroot.as_str()),
        ("CARGO_TARGET_DIR", target_dir.as_str()),
    ];
    println!(
        "$ (cd {}) TWIZZLER_ABI_BUILTIN_HEADERS={headers} TWIZZLER_ABI_SYSROOTS={sysroot} \
         CARGO_TARGET_DIR={target_dir} {}",
        kernel.display(),
        command_line("nice", &args)
    );
    let out = Command::new("nice")
        .args(args)
        .envs(env)
        .current_dir(&kernel)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("the kernel build {}", describe_status(out.status)));
    }
    // The test binary is the artifact with an "executable" (cargo's JSON messages).
    let stdout = String::from_utf8_lossy(&out.stdout);
    let exe = stdout
        .lines()
        .filter(|l| l.contains("\"name\":\"twizzler-kernel\""))
        .filter_map(|l| l.split("\"executable\":\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .next_back()
        .ok_or("cargo reported no test executable for twizzler-kernel")?;
    println!("xtask: kernel test binary {exe}");
    Ok(PathBuf::from(exe))
}
