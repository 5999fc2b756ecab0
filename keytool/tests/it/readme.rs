//! The README's "keytool in five minutes" walk-through, run as written: every `$` line of the
//! block marked `<!-- walkthrough:keytool -->` runs in a temporary directory (with `keytool`
//! on the `PATH` being the binary under test), and what the README shows after it (its exit
//! status, the lines it prints) must be what it does. A README edit that breaks a command, or
//! a keytool change that makes the README wrong, fails here.

use std::path::Path;
use std::process::Command;

/// The marker before the walk-through's fenced block.
const MARKER: &str = "<!-- walkthrough:keytool -->";

/// Stands for any text (the random ids of a run).
const ANY: char = '…';

/// One command of the walk-through and what the README says it does.
#[derive(Debug)]
pub(crate) struct Step {
    /// The command line, without the `$ ` and without the `# exit N` comment.
    pub(crate) line: String,
    /// Its exit status (`# exit N`; 0 when not given).
    exit: i32,
    /// The lines it prints, in order (others may come between them); `…` is any text.
    shows: Vec<String>,
}

/// The walk-through's steps: the first fenced block after [`MARKER`] in `readme`.
fn steps(readme: &str) -> Vec<Step> {
    steps_after(readme, MARKER)
}

/// The steps of the first fenced block after `marker` in `readme` (the README has more than
/// one walk-through, each under its own marker).
pub(crate) fn steps_after(readme: &str, marker: &str) -> Vec<Step> {
    let after = readme
        .split_once(marker)
        .unwrap_or_else(|| panic!("README.md has no {marker} marker"))
        .1;
    let mut lines = after.lines().skip_while(|l| l.trim().is_empty());
    let fence = lines.next().unwrap_or_default();
    assert!(
        fence.starts_with("```"),
        "the walk-through marker is not followed by a fenced block: {fence:?}"
    );
    let mut steps: Vec<Step> = Vec::new();
    for l in lines.take_while(|l| !l.starts_with("```")) {
        if let Some(cmd) = l.strip_prefix("$ ") {
            let (line, exit) = match cmd.rsplit_once("# exit ") {
                Some((line, code)) => (
                    line,
                    code.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("bad exit status in {l:?}")),
                ),
                None => (cmd, 0),
            };
            steps.push(Step {
                line: line.trim().to_owned(),
                exit,
                shows: Vec::new(),
            });
        } else if !l.trim().is_empty() {
            steps
                .last_mut()
                .unwrap_or_else(|| panic!("output {l:?} before the first command"))
                .shows
                .push(l.to_owned());
        }
    }
    steps
}

/// Whether `got` is `want`, where each `…` in `want` stands for any text.
fn matches(want: &str, got: &str) -> bool {
    let parts: Vec<&str> = want.split(ANY).collect();
    let (first, rest) = parts.split_first().expect("split yields a part");
    let Some(mut got) = got.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return got.is_empty();
    };
    for p in middle {
        match got.find(p) {
            Some(at) => got = &got[at + p.len()..],
            None => return false,
        }
    }
    got.ends_with(last)
}

/// The lines of `want` missing from `got`, in order (each matched line is passed by).
fn missing<'a>(want: &'a [String], got: &str) -> Vec<&'a str> {
    let mut got = got.lines();
    want.iter()
        .filter(|w| !got.any(|g| matches(w, g)))
        .map(String::as_str)
        .collect()
}

fn have_openssl() -> bool {
    Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_readme_walkthrough_runs_as_written() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("read README.md");
    let steps = steps(&readme);

    // The walk-through covers what it promises, so it cannot shrink to nothing unnoticed.
    let lines: Vec<&str> = steps.iter().map(|s| s.line.as_str()).collect();
    for needed in [
        "keytool keygen --name",
        "keytool obj new",
        "keytool ctx new",
        "keytool mint",
        "keytool ctx add",
        "keytool check",
        "keytool revoke",
        "keytool export",
        "openssl pkey",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(needed)),
            "the walk-through has no `{needed}`: {lines:?}"
        );
    }
    let shows = |prefix: &str, exit: i32| {
        steps
            .iter()
            .any(|s| s.exit == exit && s.shows.iter().any(|l| l.starts_with(prefix)))
    };
    assert!(shows("GRANTED ", 0), "no granted check shown: {steps:?}");
    assert!(shows("DENIED ", 1), "no denied check shown: {steps:?}");
    run_steps(&steps);
}

/// Runs `steps` as written (in a temporary directory, `keytool` on the `PATH` being the binary
/// under test) and checks each one's exit status and the lines it shows.
pub(crate) fn run_steps(steps: &[Step]) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("create bin/");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_keytool"), bin.join("keytool"))
        .expect("link keytool into bin/");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("create work/");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&path)))
            .expect("PATH");
    let openssl = have_openssl();
    if !openssl {
        println!("openssl is not installed: skipping the walk-through's openssl lines");
    }

    let mut env: Vec<(String, String)> = Vec::new();
    for step in steps {
        let line = &step.line;
        let program = line.split_whitespace().next().unwrap_or_default();
        if program == "export" {
            // `export NAME=VALUE`: set for the later commands, as the shell would.
            let (name, value) = line["export".len()..]
                .trim()
                .split_once('=')
                .unwrap_or_else(|| panic!("not NAME=VALUE: {line:?}"));
            let pwd = work.to_str().expect("UTF-8 temporary path");
            env.push((name.to_owned(), value.replace("$PWD", pwd)));
            continue;
        }
        assert!(
            ["keytool", "openssl"].contains(&program),
            "the walk-through runs only keytool and openssl: {line:?}"
        );
        if program == "openssl" && !openssl {
            println!("skipped (no openssl): {line}");
            continue;
        }
        // In a session of its own: no controlling terminal, so keytool asks nothing (keygen
        // stores the key unencrypted, as the README says it does without a terminal).
        let out = Command::new("setsid")
            .args(["--wait", "sh", "-c", line])
            .current_dir(&work)
            .env("PATH", &path)
            .env("HOME", dir.path().join("home"))
            .env_remove("XDG_DATA_HOME")
            .env_remove("TWZ_KEYTOOL_STORE")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("run sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(step.exit),
            "`{line}` exited {:?}, the README says {}; stdout:\n{stdout}\nstderr:\n{stderr}",
            out.status.code(),
            step.exit
        );
        let gone = missing(&step.shows, &stdout);
        assert!(
            gone.is_empty(),
            "`{line}` did not print, in order, {gone:?}; it printed:\n{stdout}\nstderr:\n{stderr}"
        );
        println!("ok: {line}");
    }
    // The walk-through kept to its own store.
    assert!(
        !dir.path().join("home").exists(),
        "the walk-through wrote to the default store"
    );
}

#[test]
fn output_lines_match_only_what_the_readme_shows() {
    assert!(matches(
        "GRANTED read at 0x1000 of notes (…)",
        "GRANTED read at 0x1000 of notes (ab12)"
    ));
    assert!(matches("a … b … c", "a 1 b 2 c"));
    assert!(matches("exact", "exact"));
    assert!(!matches("exact", "exact and more"));
    assert!(!matches("GRANTED …", "DENIED read"));
    assert!(!matches("… (generation 1)", "added (generation 2)"));
    assert!(!matches("a … b … c", "a 1 c 2 b"));
    // Lines must come in the README's order.
    let want = vec!["one".to_owned(), "two".to_owned()];
    assert!(missing(&want, "one\nx\ntwo\n").is_empty());
    assert_eq!(missing(&want, "two\none\n"), vec!["two"]);
}

#[test]
fn the_walkthrough_parser_reads_commands_exits_and_outputs() {
    let text = format!(
        "prose\n{MARKER}\n```console\n$ keytool a\nshown …\n$ keytool b   # exit 1\n```\n$ not this\n"
    );
    let s = steps(&text);
    assert_eq!(s.len(), 2, "{s:?}");
    assert_eq!((s[0].line.as_str(), s[0].exit), ("keytool a", 0));
    assert_eq!(s[0].shows, vec!["shown …".to_owned()]);
    assert_eq!((s[1].line.as_str(), s[1].exit), ("keytool b", 1));
    assert!(s[1].shows.is_empty());
}
