//! Step 2: the checkout reset to the pinned commit, trimmed to the kernel, with the build
//! fixes, our files and the call-site patches applied.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{BACKTRACER_COMMIT, Options, UPSTREAM_COMMIT};
use crate::run::{Workspace, run_env};

/// The port's directory in this repository.
pub(super) const PORT_DIR: &str = "twizzler-port";
/// Where our kernel files go in the checkout (the adapter replaces upstream's module; the
/// rest are its in-kernel tests).
pub(super) const OUR_FILES: [(&str, &str); 8] = [
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

/// Upstream's own `security.rs` at the pinned commit (source), and where it goes in the
/// checkout beside our adapter, which declares it for the kernel's tests only: the timing
/// test (`port_tests/timing.rs`) times upstream's cached check on upstream's code, in the
/// same boot as the engine's hit. It is read from the checkout's git at every run (our
/// repository holds none of upstream's code) and then patched by [`UPSTREAM_COPY_PATCHES`].
pub(super) const UPSTREAM_COPY: (&str, &str) = (
    "src/kernel/src/security.rs",
    "src/kernel/src/security/upstream_security.rs",
);
/// The patches to that copy (under [`PORT_DIR`]): a test-only way to put an entry in a
/// context's cache, and its benchmark test left out (the port's timing test times it).
pub(super) const UPSTREAM_COPY_PATCHES: &str = "patches/upstream-copy";

/// Upstream's text of `path` at the pinned commit (so an edit never stacks on an earlier run).
pub(super) fn pinned_text(repo: &Path, commit: &str, path: &str) -> Result<String, String> {
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

pub(super) fn write(path: &Path, text: &str) -> Result<(), String> {
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
pub(super) fn trimmed_manifest(pinned: &str, backtracer: &Path) -> Result<String, String> {
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
pub(super) fn apply_patch(repo: &Path, patch: &Path) -> Result<(), String> {
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
pub(super) fn apply_patches(repo: &Path, commit: &str, patches: &[PathBuf]) -> Result<(), String> {
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
pub(super) fn reset_to_pinned(repo: &Path, commit: &str) -> Result<(), String> {
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
pub(super) fn patches_in(dir: &Path) -> Result<Vec<PathBuf>, String> {
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
pub(super) fn write_stub_sysroot(upstream: &Path) -> Result<PathBuf, String> {
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

pub(super) fn prepare(ws: &Workspace, opts: &Options) -> Result<(), String> {
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
    // Our new files and the copy of upstream's `security.rs`: removed, so an --upstream-only
    // run after a port run is upstream's (the first of ours, `security.rs`, is upstream's own
    // file, reset above).
    let new_files = OUR_FILES[1..].iter().map(|(_, dest)| dest);
    for dest in new_files.chain([&UPSTREAM_COPY.1]) {
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
    let (copy_src, copy_dest) = UPSTREAM_COPY;
    write(
        &opts.upstream.join(copy_dest),
        &pinned_text(&opts.upstream, UPSTREAM_COMMIT, copy_src)?,
    )?;
    println!("xtask: upstream's {copy_src} at the pinned commit -> {copy_dest}");
    let copy_patches = patches_in(&port.join(UPSTREAM_COPY_PATCHES))?;
    for p in port_patches.iter().chain(&copy_patches) {
        apply_patch(&opts.upstream, p)?;
    }
    // The kernel depends on our crates by path: this repository's.
    let cargo_toml = opts.upstream.join("src/kernel/Cargo.toml");
    let mut text = fs::read_to_string(&cargo_toml)
        .map_err(|e| format!("read {}: {e}", cargo_toml.display()))?;
    text = text.replace("@TWIZZLER_PORT_REPO@", &ws.root.display().to_string());
    write(&cargo_toml, &text)
}
