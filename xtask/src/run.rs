//! Running child commands: the workspace they run from, the command line printed before each,
//! and what CI changes (no colours, no progress bars, no incremental state).

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The workspace the commands run in.
pub(crate) struct Workspace {
    /// The directory holding the workspace's `Cargo.toml`.
    pub(crate) root: PathBuf,
}

impl Workspace {
    /// The workspace root: the parent of this crate's directory.
    pub(crate) fn locate() -> Result<Self, String> {
        let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = manifest_dir
            .parent()
            .ok_or_else(|| format!("xtask's directory {} has no parent", manifest_dir.display()))?;
        if !root.join("Cargo.toml").is_file() {
            return Err(format!(
                "no Cargo.toml in {}, where the workspace root should be",
                root.display()
            ));
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }
}

/// Whether we run under CI (`CI=true`, as most CI systems set it).
pub(crate) fn in_ci() -> bool {
    env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

pub(crate) fn heading(title: &str) {
    println!();
    println!("==> {title}");
}

pub(crate) fn run_cargo(ws: &Workspace, args: &[&str]) -> Result<(), String> {
    run(ws, "cargo", args)
}

pub(crate) fn run(ws: &Workspace, program: &str, args: &[&str]) -> Result<(), String> {
    run_in(&ws.root, program, args)
}

/// Runs `program args` in `dir` with inherited stdio; `Err` says what went wrong.
pub(crate) fn run_in(dir: &Path, program: &str, args: &[&str]) -> Result<(), String> {
    run_env(dir, &[], program, args)
}

/// [`run_in`] with extra environment variables for this command only (shown before the
/// command, as a shell would take them).
pub(crate) fn run_env(
    dir: &Path,
    env: &[(&str, &str)],
    program: &str,
    args: &[&str],
) -> Result<(), String> {
    let mut shown = String::new();
    for (var, value) in env {
        if value.contains(char::is_whitespace) {
            let _ = write!(shown, "{var}={value:?} ");
        } else {
            let _ = write!(shown, "{var}={value} ");
        }
    }
    shown.push_str(&command_line(program, args));
    println!("$ {shown}");
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(dir).envs(env.iter().copied());
    if in_ci() {
        // Logs, not a terminal: no colour codes, no progress bars. Nothing here ever prompts.
        // A clean clone builds everything once, so incremental state is only disk spent (it
        // was a third of the target directory).
        for (var, value) in [
            ("CARGO_TERM_COLOR", "never"),
            ("CARGO_TERM_PROGRESS_WHEN", "never"),
            ("CARGO_INCREMENTAL", "0"),
        ] {
            if env::var_os(var).is_none() {
                cmd.env(var, value);
            }
        }
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` {}", describe_status(status)))
    }
}

pub(crate) fn describe_status(status: std::process::ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "was killed by a signal".to_owned(),
    }
}

pub(crate) fn command_line(program: &str, args: &[&str]) -> String {
    let mut s = program.to_owned();
    for a in args {
        s.push(' ');
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
            let _ = write!(s, "{a:?}");
        } else {
            s.push_str(a);
        }
    }
    s
}

pub(crate) fn exit_code(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
