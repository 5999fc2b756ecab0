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
//!    spec), at `nice 19`;
//! 4. boot it under QEMU (TCG, OVMF, Limine from a FAT directory) with `--tests`, watch the
//!    serial log, and stop QEMU once the test runner reports (or panics, or times out);
//! 5. print a table and fail unless every test ran and passed.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::run::{Workspace, command_line, describe_status, heading, run_env};
use crate::{QEMU, QEMU_HEADLESS, usage_error};

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
/// How long the kernel may run its tests before it counts as hung. Upstream's 28 tests took
/// 590 s from QEMU's start on the 2-core machine at a load of 15-20 (225 s of it booting);
/// on a quiet machine about a minute.
const BOOT_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long the kernel may print nothing before it counts as hung: a deadlock is reported
/// after this, not after [`BOOT_TIMEOUT`]. The longest silences seen in passing runs were
/// under a minute (booting, and upstream's longest tests, at a load of 15).
const SILENCE_TIMEOUT: Duration = Duration::from_secs(300);
/// The environment variable whose whitespace-separated words are added to QEMU's arguments
/// (for example `-s`, to attach gdb to a hung kernel).
const EXTRA_QEMU_ARGS: &str = "TWIZZLER_QEMU_ARGS";
/// The port's directory in this repository.
const PORT_DIR: &str = "twizzler-port";
/// Where our kernel files go in the checkout (the adapter replaces upstream's module; the
/// rest are its in-kernel tests).
const OUR_FILES: [(&str, &str); 8] = [
    ("kernel/security.rs", "src/kernel/src/security.rs"),
    (
        "kernel/security/ctx_write.rs",
        "src/kernel/src/security/ctx_write.rs",
    ),
    (
        "kernel/security/port_tests.rs",
        "src/kernel/src/security/port_tests.rs",
    ),
    (
        "kernel/security/port_tests/policy.rs",
        "src/kernel/src/security/port_tests/policy.rs",
    ),
    (
        "kernel/security/port_tests/fault_path.rs",
        "src/kernel/src/security/port_tests/fault_path.rs",
    ),
    (
        "kernel/security/port_tests/timing.rs",
        "src/kernel/src/security/port_tests/timing.rs",
    ),
    (
        "kernel/security/port_tests/conformance.rs",
        "src/kernel/src/security/port_tests/conformance.rs",
    ),
    (
        "kernel/security/port_tests/lifetimes.rs",
        "src/kernel/src/security/port_tests/lifetimes.rs",
    ),
];
/// What the port's conformance test prints before each check's line and its summary
/// (`kernel_hooks::conformance::Report`'s `Display`).
const CONFORMANCE_PREFIX: &str = "conformance: ";
/// What our timing test prints before each figure (`port_tests/timing.rs`, the expiry test).
const TIMING_PREFIX: &str = "port timing: ";
/// The kernel's target spec, relative to the checkout.
const TARGET_SPEC: &str = "src/kernel/target-spec/x86_64-unknown-none.json";
/// How long, and for how many lines, the serial log is read after a panic.
const PANIC_TAIL: Duration = Duration::from_secs(10);
const PANIC_TAIL_LINES: usize = 40;
/// The test names of ours start with this (the runner prints bare function names).
const OUR_TEST_PREFIX: &str = "port_";

/// The command line of `cargo xtask twizzler`.
struct Options {
    upstream: PathBuf,
    limine: PathBuf,
    backtracer: PathBuf,
    /// Build upstream as it is (with only the build fixes), for a baseline.
    upstream_only: bool,
    smp: u32,
}

impl Options {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut upstream = None;
        let mut limine = None;
        let mut backtracer = None;
        let mut upstream_only = false;
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
        "build (cargo test --no-run, nice 19)".into(),
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

/// `git -C dir rev-parse HEAD`.
fn git_head(dir: &Path) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!("{} is not a git checkout", dir.display()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn expect_commit(dir: &Path, what: &str, want: &str, hint: &str) -> Result<(), String> {
    let head = git_head(dir)?;
    if head != want {
        return Err(format!(
            "{what} at {} is at {head}, not the pinned {want} ({hint})",
            dir.display()
        ));
    }
    Ok(())
}

/// Whether `program args` runs and succeeds, with its standard output.
fn probe(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn check_inputs(opts: &Options) -> Result<(), String> {
    expect_commit(
        &opts.upstream,
        "the upstream checkout",
        UPSTREAM_COMMIT,
        "git checkout it; see `cargo xtask --help`",
    )?;
    let abi = opts.upstream.join("src/abi");
    if !abi.join("rt-abi/Cargo.toml").is_file() {
        return Err(format!(
            "{} is empty: check out the abi submodule ({ABI_COMMIT}) there",
            abi.display()
        ));
    }
    expect_commit(&abi, "the abi submodule", ABI_COMMIT, "git checkout it")?;
    expect_commit(
        &opts.backtracer,
        "backtracer",
        BACKTRACER_COMMIT,
        "pass --backtracer <dir>",
    )?;
    if !opts.limine.join("BOOTX64.EFI").is_file() {
        return Err(format!(
            "no BOOTX64.EFI in {} (a checkout of Limine's {LIMINE_BRANCH}; pass --limine <dir>)",
            opts.limine.display()
        ));
    }
    if !Path::new(OVMF).is_file() {
        return Err(format!("no {OVMF} (Debian package `ovmf`)"));
    }
    // Upstream's ABI build script passes `--override-abi`, which bindgen has since 0.65;
    // Debian 12's bindgen (0.60) lacks it.
    let bindgen_ok = probe("bindgen", &["--help"]).is_some_and(|h| h.contains("--override-abi"));
    if !bindgen_ok {
        return Err("`bindgen` is missing or too old (needs --override-abi): \
             `cargo install bindgen-cli` and put it on PATH (it needs libclang: Debian \
             `libclang-dev`)"
            .into());
    }
    if probe("ld.lld", &["--version"]).is_none() {
        return Err("no `ld.lld` (upstream's kernel links with it): Debian package `lld`".into());
    }
    if probe(QEMU, &["--version"]).is_none() {
        return Err(format!("no `{QEMU}`: Debian package qemu-system-x86"));
    }
    let sysroot = probe("rustc", &["+nightly", "--print", "sysroot"])
        .ok_or("no nightly toolchain: `rustup toolchain install nightly`")?;
    if !Path::new(sysroot.trim())
        .join("lib/rustlib/src/rust/library/core")
        .is_dir()
    {
        return Err(
            "the nightly toolchain has no rust-src (build-std needs it): \
             `rustup component add rust-src --toolchain nightly`"
                .into(),
        );
    }
    Ok(())
}

/// Upstream's text of `path` at the pinned commit (so an edit never stacks on an earlier run).
fn pinned_text(repo: &Path, commit: &str, path: &str) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["show", &format!("{commit}:{path}")])
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!("{}: no {path} at {commit}", repo.display()));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("{path} at {commit} is not UTF-8"))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

/// The workspace manifest cut down to the kernel: `members = ["src/kernel"]`, upstream's
/// `[workspace.dependencies]` as they are except `backtracer_core` (a git dependency, here
/// the local checkout), and the two path patches the kernel's graph needs. The rest of
/// upstream's workspace (userspace, ports, tools) pulls git repositories this build cannot
/// reach and is not needed for the kernel.
fn trimmed_manifest(pinned: &str, backtracer: &Path) -> Result<String, String> {
    let mut deps = String::new();
    let mut inside = false;
    for line in pinned.lines() {
        if line.starts_with('[') {
            inside = line.trim() == "[workspace.dependencies]";
            continue;
        }
        if !inside {
            continue;
        }
        if line.starts_with("backtracer_core") {
            deps.push_str(&format!(
                "backtracer_core = {{ path = {:?} }}\n",
                backtracer.display().to_string()
            ));
        } else {
            deps.push_str(line);
            deps.push('\n');
        }
    }
    if deps.is_empty() {
        return Err("upstream's Cargo.toml has no [workspace.dependencies]".into());
    }
    Ok(format!(
        "# Written by `cargo xtask twizzler` (twizzler-port): upstream's workspace trimmed to \
         the kernel.\n[workspace]\nmembers = [\"src/kernel\"]\nresolver = \"2\"\n\n\
         [workspace.dependencies]\n{deps}\n[profile.release]\ndebug = true\n\n\
         [patch.crates-io]\ntwizzler-abi = {{ path = \"src/lib/twizzler-abi\" }}\n\
         twizzler-rt-abi = {{ path = \"src/abi/rt-abi\" }}\n"
    ))
}

/// Applies one patch with `git apply` (the files it changes were reset by [`reset_to_pinned`]).
fn apply_patch(repo: &Path, patch: &Path) -> Result<(), String> {
    let patch_arg = patch.to_string_lossy().into_owned();
    let repo_arg = repo.to_string_lossy().into_owned();
    run_env(
        Path::new("."),
        &[],
        "git",
        &["-C", &repo_arg, "apply", "--whitespace=nowarn", &patch_arg],
    )
}

/// Resets every file any of `patches` touches to the pinned commit, then applies them in
/// order. (The reset is done once for the group: resetting per patch undid an earlier
/// patch's edits to a file a later patch also edits.)
/// Applies `patches`, in order, to `repo` (reset first with [`reset_to_pinned`]).
fn apply_patches(repo: &Path, commit: &str, patches: &[PathBuf]) -> Result<(), String> {
    reset_to_pinned(repo, commit)?;
    for p in patches {
        apply_patch(repo, p)?;
    }
    Ok(())
}

/// Writes back, from the pinned commit, every tracked file of `repo` that differs from it
/// (submodules aside; `Cargo.lock` kept, see below), so a run starts from upstream's files
/// whatever an earlier run, or a patch no longer in the set, left in them.
///
/// Resetting only the files today's patches touch was not enough: a file an earlier run had
/// patched kept that edit once its patch left the set, so a run "without" a patch still had
/// it (issue 21: the shared-page-table test passed "without" its patch that way). The lock
/// file is the build's resolution of our crates' dependencies, not source: it is kept so a
/// run does not resolve (and download) the graph again.
fn reset_to_pinned(repo: &Path, commit: &str) -> Result<(), String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "diff",
            "--name-only",
            "--no-renames",
            "--ignore-submodules=all",
            commit,
            "--",
        ])
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`git diff --name-only {commit}` in {} {}",
            repo.display(),
            crate::run::describe_status(out.status)
        ));
    }
    let listed = String::from_utf8_lossy(&out.stdout);
    let changed: Vec<&str> = listed
        .lines()
        .filter(|f| !f.is_empty() && *f != "Cargo.lock")
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    let status = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["checkout", commit, "--"])
        .args(&changed)
        .status()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !status.success() {
        return Err(format!(
            "`git checkout {commit} -- <{} files>` in {} {}",
            changed.len(),
            repo.display(),
            crate::run::describe_status(status)
        ));
    }
    println!(
        "xtask: reset {} file(s) of {} to {}",
        changed.len(),
        repo.display(),
        &commit[..commit.len().min(12)]
    );
    Ok(())
}

/// The `.patch` files in `dir`, in name order.
fn patches_in(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "patch"))
        .collect();
    out.sort();
    Ok(out)
}

/// Headers of a C library for the one `bindgen` run of upstream's ABI crate, which includes
/// `<sys/select.h>` and `<poll.h>` for two types only; the kernel uses neither. Written
/// under the checkout's `target/`.
fn write_stub_sysroot(upstream: &Path) -> Result<PathBuf, String> {
    let root = upstream.join("target/twizzler-port/sysroot");
    let inc = root.join("x86_64-unknown-none/include");
    write(
        &inc.join("sys/select.h"),
        "/* twizzler-port stub: the one type the runtime headers name. */\n#pragma once\n\
         typedef struct { unsigned long fds_bits[16]; } fd_set;\n",
    )?;
    write(
        &inc.join("poll.h"),
        "/* twizzler-port stub: the one type the runtime headers name. */\n#pragma once\n\
         struct pollfd { int fd; short events; short revents; };\n",
    )?;
    Ok(root)
}

fn prepare(ws: &Workspace, opts: &Options) -> Result<(), String> {
    let port = ws.root.join(PORT_DIR);
    apply_patches(
        &opts.backtracer,
        BACKTRACER_COMMIT,
        &patches_in(&port.join("patches/backtracer"))?,
    )?;
    // Every tracked file back to the pinned commit (our `security.rs` included), then the
    // build fixes.
    apply_patches(
        &opts.upstream,
        UPSTREAM_COMMIT,
        &patches_in(&port.join("patches/build"))?,
    )?;
    let manifest = trimmed_manifest(
        &pinned_text(&opts.upstream, UPSTREAM_COMMIT, "Cargo.toml")?,
        &opts.backtracer,
    )?;
    write(&opts.upstream.join("Cargo.toml"), &manifest)?;
    println!("xtask: wrote the trimmed workspace manifest");
    // Our new files: removed, so an --upstream-only run after a port run is upstream's (the
    // first, `security.rs`, is upstream's own file, reset above).
    for (_, dest) in &OUR_FILES[1..] {
        let dest = opts.upstream.join(dest);
        if dest.exists() {
            fs::remove_file(&dest).map_err(|e| format!("rm {}: {e}", dest.display()))?;
        }
    }
    let port_patches = patches_in(&port.join("patches/port"))?;
    if opts.upstream_only {
        return Ok(());
    }
    for (src, dest) in OUR_FILES {
        let from = port.join(src);
        let to = opts.upstream.join(dest);
        let text =
            fs::read_to_string(&from).map_err(|e| format!("read {}: {e}", from.display()))?;
        write(&to, &text)?;
        println!("xtask: {src} -> {dest}");
    }
    for p in &port_patches {
        apply_patch(&opts.upstream, p)?;
    }
    // The kernel depends on our crates by path: this repository's.
    let cargo_toml = opts.upstream.join("src/kernel/Cargo.toml");
    let mut text = fs::read_to_string(&cargo_toml)
        .map_err(|e| format!("read {}: {e}", cargo_toml.display()))?;
    text = text.replace("@TWIZZLER_PORT_REPO@", &ws.root.display().to_string());
    write(&cargo_toml, &text)
}

/// libclang's own headers (`stddef.h`, `stdint.h`): bindgen's libclang, loaded from the system
/// library directory, does not find its resource directory by itself. Taken from
/// `TWIZZLER_ABI_BUILTIN_HEADERS` if set, else from Debian's `/usr/lib/llvm-*/lib/clang/*/
/// include` (package `libclang-common-*-dev`, which `libclang-dev` pulls in).
fn clang_builtin_headers() -> Result<String, String> {
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

fn build(opts: &Options) -> Result<PathBuf, String> {
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
    let args = [
        "-n",
        "19",
        "cargo",
        "+nightly",
        "test",
        "--no-run",
        "-Zjson-target-spec",
        "--target",
        &spec,
        "--message-format=json-render-diagnostics",
    ];
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

/// What the serial log said.
#[derive(Default)]
struct Report {
    announced: Option<usize>,
    passed: Vec<String>,
    running: Option<String>,
    finished: bool,
    panic: Option<String>,
    /// The line after the panic's location: its message.
    panic_message: Option<String>,
    /// Why the run was stopped before the tests' result line, if it was: no output for
    /// [`SILENCE_TIMEOUT`], or [`BOOT_TIMEOUT`] reached.
    timed_out: Option<String>,
    boot_to_tests: Option<Duration>,
    tests_time: Option<Duration>,
    /// `port timing:` lines: what was timed, and the figure.
    timings: Vec<(String, String)>,
    /// `conformance:` lines: each check's (`<check>: pass`, `... FAIL: <why>`,
    /// `... skipped: <why>`), then the summary.
    conformance: Vec<String>,
}

impl Report {
    fn feed(&mut self, line: &str, since_boot: Duration, tests_started: &mut Option<Instant>) {
        if let Some(rest) = line.split(CONFORMANCE_PREFIX).nth(1) {
            // A failing suite's panic message repeats its lines: keep each once.
            let rest = rest.trim().to_owned();
            if !self.conformance.contains(&rest) {
                self.conformance.push(rest);
            }
        } else if let Some(rest) = line.split(TIMING_PREFIX).nth(1) {
            let (what, figure) = rest.rsplit_once(": ").unwrap_or((rest, ""));
            self.timings
                .push((format!("  {}", what.trim()), figure.trim().to_owned()));
        } else if let Some(rest) = line.split("[kernel::test] running ").nth(1) {
            self.announced = rest.split(' ').next().and_then(|n| n.parse().ok());
            self.boot_to_tests = Some(since_boot);
            *tests_started = Some(Instant::now());
        } else if let Some(name) = line.split("starting test ").nth(1) {
            self.running = Some(name.trim().to_owned());
        } else if let Some(rest) = line.split("test ").nth(1)
            && let Some(name) = rest.strip_suffix(": ok")
        {
            self.passed.push(name.trim().to_owned());
            self.running = None;
        } else if line.contains("[kernel::test] test result: ok.") {
            self.finished = true;
            self.tests_time = tests_started.map(|t| t.elapsed());
        } else if line.contains("panicked at") || line.contains("PANIC") {
            self.panic.get_or_insert_with(|| line.trim().to_owned());
        }
    }

    /// The conformance suite's summary (`N checks, P pass, F fail, S skipped`), then every
    /// check that did not pass, with its reason. Nothing if the suite printed nothing (an
    /// `--upstream-only` run).
    fn conformance_rows(&self, rows: &mut Vec<(String, String, bool)>) {
        if self.conformance.is_empty() {
            return;
        }
        let summary = self.conformance.iter().find(|l| l.contains(" checks, "));
        let failed = |l: &String| l.contains(": FAIL: ");
        rows.push((
            "conformance suite (kernel_hooks::conformance)".into(),
            summary.cloned().unwrap_or_else(|| "no summary".into()),
            summary.is_some() && !self.conformance.iter().any(failed),
        ));
        for line in self.conformance.iter().filter(|l| !l.ends_with(": pass")) {
            if Some(line) != summary {
                rows.push((format!("  {line}"), String::new(), !failed(line)));
            }
        }
    }

    /// A line after the panic's: the first that is not empty is the panic's message.
    fn note_after_panic(&mut self, line: &str) {
        if self.panic_message.is_none() && !line.trim().is_empty() {
            self.panic_message = Some(line.trim().to_owned());
        }
    }

    fn rows(&self, rows: &mut Vec<(String, String, bool)>, ours_expected: usize) {
        let ours = self
            .passed
            .iter()
            .filter(|n| n.starts_with(OUR_TEST_PREFIX))
            .count();
        let upstream = self.passed.len() - ours;
        let timing = |d: Option<Duration>| {
            d.map(|d| format!("{:.1} s", d.as_secs_f64()))
                .unwrap_or_else(|| "-".into())
        };
        rows.push((
            "boot to the test runner".into(),
            timing(self.boot_to_tests),
            self.boot_to_tests.is_some(),
        ));
        let announced = self.announced.map(|n| n.to_string()).unwrap_or("?".into());
        rows.push((
            "upstream's kernel tests passed".into(),
            upstream.to_string(),
            self.finished,
        ));
        rows.push((
            "our kernel tests passed (port_*)".into(),
            format!("{ours} / {ours_expected}"),
            self.finished && ours == ours_expected,
        ));
        rows.push((
            "tests run / announced".into(),
            format!("{} / {announced}", self.passed.len()),
            self.finished && self.announced == Some(self.passed.len()),
        ));
        rows.push(("test run".into(), timing(self.tests_time), self.finished));
        self.conformance_rows(rows);
        if !self.timings.is_empty() {
            rows.push((
                "timings in this boot (port_tests/timing.rs):".into(),
                String::new(),
                true,
            ));
            rows.extend(
                self.timings
                    .iter()
                    .map(|(w, f)| (w.clone(), f.clone(), true)),
            );
        }
        if let Some(name) = &self.running {
            rows.push((format!("FAILED: {name}"), "did not finish".into(), false));
        }
        if let Some(p) = &self.panic {
            rows.push((format!("panic: {p}"), String::new(), false));
            if let Some(m) = &self.panic_message {
                rows.push((format!("  {m}"), String::new(), false));
            }
        }
        if let Some(why) = &self.timed_out {
            rows.push((why.clone(), String::new(), false));
        }
    }
}

/// The EFI system partition as a directory QEMU presents as a FAT disk.
fn write_esp(opts: &Options, elf: &Path) -> Result<PathBuf, String> {
    let esp = opts.upstream.join("target/twizzler-port/esp");
    let boot = esp.join("EFI/BOOT");
    fs::create_dir_all(&boot).map_err(|e| format!("mkdir {}: {e}", boot.display()))?;
    let copy = |from: &Path, to: &Path| {
        fs::copy(from, to)
            .map(|_| ())
            .map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))
    };
    copy(&opts.limine.join("BOOTX64.EFI"), &boot.join("BOOTX64.EFI"))?;
    copy(elf, &esp.join("kernel.elf"))?;
    // The initrd: a tar archive with one small file (upstream's tar reader refuses an empty
    // archive). With no userspace in it the kernel panics "no init found" after the tests,
    // which ends the run.
    let initrd_dir = opts.upstream.join("target/twizzler-port/initrd");
    write(
        &initrd_dir.join("README"),
        "twizzler-port: kernel tests only, no userspace\n",
    )?;
    let initrd = esp.join("initrd").display().to_string();
    let dir = initrd_dir.display().to_string();
    run_env(
        Path::new("."),
        &[],
        "tar",
        &["-cf", &initrd, "-C", &dir, "README"],
    )?;
    write(
        &esp.join("limine.conf"),
        "timeout: 0\nserial: yes\n\n/Twizzler kernel tests\n    protocol: limine\n    \
         kernel_path: boot():/kernel.elf\n    module_path: boot():/initrd\n    \
         kernel_cmdline: --tests\n",
    )?;
    Ok(esp)
}

fn boot(opts: &Options, elf: &Path) -> Result<Report, String> {
    let esp = write_esp(opts, elf)?;
    // A read-only virtual FAT disk on virtio (QEMU refuses a read-only IDE/AHCI drive);
    // OVMF boots Limine from it and Limine reads the kernel and limine.conf.
    let drive = format!(
        "if=none,id=esp,format=raw,readonly=on,file=fat:{}",
        esp.display()
    );
    let smp = opts.smp.to_string();
    let accel = if opts.smp > 1 {
        "tcg,thread=multi"
    } else {
        "tcg"
    };
    let mut args = vec![
        "-machine",
        "q35",
        "-accel",
        accel,
        "-cpu",
        "max",
        "-smp",
        &smp,
        "-m",
        "4G",
        "-bios",
        OVMF,
        "-drive",
        &drive,
        "-device",
        "virtio-blk-pci,drive=esp",
    ];
    args.extend_from_slice(&QEMU_HEADLESS);
    // Extra arguments for debugging a hang, e.g. `-s` for QEMU's gdb stub (README, "Debugging").
    let extra = std::env::var(EXTRA_QEMU_ARGS).unwrap_or_default();
    args.extend(extra.split_whitespace());
    println!("$ {}", command_line(QEMU, &args));
    let mut child = Command::new(QEMU)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {QEMU}: {e}"))?;
    let stdout = child.stdout.take().ok_or("QEMU has no stdout")?;
    let (tx, rx) = mpsc::channel::<String>();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            if tx
                .send(String::from_utf8_lossy(&line).trim_end().to_owned())
                .is_err()
            {
                break;
            }
        }
    });
    let started = Instant::now();
    let mut report = Report::default();
    let mut tests_started = None;
    // After a panic, the lines that follow (the message, the backtrace) are read for a short
    // while before QEMU is stopped: the location alone rarely says what failed.
    let mut after_panic: Option<(Instant, usize)> = None;
    loop {
        let mut left = BOOT_TIMEOUT.saturating_sub(started.elapsed());
        if let Some((since, lines)) = after_panic {
            if lines >= PANIC_TAIL_LINES {
                break;
            }
            left = left.min(PANIC_TAIL.saturating_sub(since.elapsed()));
        }
        if left.is_zero() {
            if after_panic.is_none() {
                report.timed_out = Some(format!("timed out after {} s", BOOT_TIMEOUT.as_secs()));
            }
            break;
        }
        let silence = after_panic.is_none() && left > SILENCE_TIMEOUT;
        match rx.recv_timeout(left.min(SILENCE_TIMEOUT)) {
            Ok(line) => {
                println!("{line}");
                if let Some((_, lines)) = after_panic.as_mut() {
                    *lines += 1;
                    report.note_after_panic(&line);
                    continue;
                }
                report.feed(&line, started.elapsed(), &mut tests_started);
                if report.finished {
                    break;
                }
                if report.panic.is_some() {
                    after_panic = Some((Instant::now(), 0));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if after_panic.is_none() {
                    report.timed_out = Some(if silence {
                        format!("hung: no output for {} s", SILENCE_TIMEOUT.as_secs())
                    } else {
                        format!("timed out after {} s", BOOT_TIMEOUT.as_secs())
                    });
                }
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // The tests are over (or failed): upstream then looks for init and, without userspace,
    // panics and halts; QEMU is stopped here rather than waited for.
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    println!(
        "xtask: QEMU ran for {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(report)
}

fn print_table(rows: &[(String, String, bool)], total: Duration) {
    println!();
    println!("{:<48} {:>36}  result", "twizzler port", "");
    for (what, value, ok) in rows {
        println!(
            "{:<48} {:>36}  {}",
            what,
            value,
            if *ok { "ok" } else { "FAILED" }
        );
    }
    println!(
        "{:<52} {:>14}",
        "total",
        format!("{:.0} s", total.as_secs_f64())
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table rows for a serial log made of `lines`.
    fn rows_of(lines: &[&str]) -> Vec<(String, String, bool)> {
        let mut report = Report::default();
        let mut started = None;
        for line in lines {
            report.feed(line, Duration::ZERO, &mut started);
        }
        let mut rows = Vec::new();
        report.conformance_rows(&mut rows);
        rows
    }

    #[test]
    fn a_passing_suite_is_one_row_with_its_summary() {
        let rows = rows_of(&[
            "conformance: one clock: pass",
            "conformance: an interrupt inside the engine calls nothing of it: skipped: no",
            "conformance: 2 checks, 1 pass, 0 fail, 1 skipped",
        ]);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].1, "2 checks, 1 pass, 0 fail, 1 skipped");
        assert!(rows.iter().all(|r| r.2), "a skip fails nothing: {rows:?}");
        assert!(rows[1].0.contains("skipped: no"));
    }

    #[test]
    fn a_failed_check_fails_the_suite_and_is_listed_once() {
        let fail = "conformance: write-protection: FAIL: mapped r-x";
        // The test's panic message repeats the failing line.
        let rows = rows_of(&[
            fail,
            "conformance: 1 checks, 0 pass, 1 fail, 0 skipped",
            "[error] panicked at conformance.rs:1:1:",
            fail,
        ]);
        assert!(!rows[0].2, "the suite's row fails: {rows:?}");
        let listed: Vec<_> = rows.iter().filter(|r| r.0.contains("FAIL")).collect();
        assert_eq!(listed.len(), 1, "{rows:?}");
        assert!(!listed[0].2);
    }

    #[test]
    fn a_suite_without_its_summary_fails() {
        let rows = rows_of(&["conformance: one clock: pass"]);
        assert_eq!(rows[0].1, "no summary");
        assert!(!rows[0].2);
    }

    #[test]
    fn no_suite_output_adds_no_row() {
        assert!(rows_of(&["test port_x: ok"]).is_empty());
    }
}
