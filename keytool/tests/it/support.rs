//! What every `keytool` test uses: [`Kt`], a temporary directory with a store in it that runs
//! the real executable, and [`World`], a store with keys, an object and two contexts in it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

/// A temporary working directory with a store in it.
pub(crate) struct Kt {
    pub(crate) dir: TempDir,
}

impl Kt {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn store(&self) -> PathBuf {
        self.path("store")
    }

    /// The environment of every run: the store, cheap Argon2, and no XDG or HOME leaking in
    /// from the test runner.
    pub(crate) fn setup(&self, c: &mut Command) {
        c.current_dir(self.dir.path())
            .env("TWZ_KEYTOOL_STORE", self.store())
            .env("TWZ_KEYTOOL_KDF_MEMORY_KIB", "64")
            .env("TWZ_KEYTOOL_KDF_PASSES", "1")
            .env_remove("XDG_DATA_HOME")
            .env("HOME", self.path("home"));
    }

    /// `keytool` in the test environment, in a session of its own (util-linux `setsid`): without
    /// a controlling terminal, so it never asks for a passphrase on the terminal `cargo test`
    /// may run in.
    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("setsid");
        c.arg("--wait")
            .arg(env!("CARGO_BIN_EXE_keytool"))
            .args(args);
        self.setup(&mut c);
        c
    }

    /// Runs `keytool ARGS` (with `env` added) in a pseudo-terminal, with util-linux
    /// `script`, typing each answer when the terminal shows its prompt. Returns the exit
    /// code and everything the terminal showed (prompts, stdout and stderr, with CRLF line
    /// ends).
    pub(crate) fn tty(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        answers: &[(&str, &str)],
    ) -> (i32, String) {
        let quote = |a: &str| format!("'{}'", a.replace('\'', "'\\''"));
        let line: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_keytool"))
            .chain(args.iter().copied())
            .map(quote)
            .collect();
        let mut c = Command::new("script");
        // -q: no banner; -e: keytool's exit status; -c: the command, run by $SHELL.
        c.args(["-qec", &line.join(" "), "/dev/null"])
            .env("SHELL", "/bin/sh")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.setup(&mut c);
        let mut child = c.spawn().expect("run script (util-linux)");
        let shown = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let shown = Arc::clone(&shown);
            let mut stdout = child.stdout.take().expect("script's stdout");
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = stdout.read(&mut buf) {
                    shown.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            })
        };
        let text = || String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut stdin = child.stdin.take().expect("script's stdin");
        let mut seen = 0;
        for (prompt, answer) in answers {
            loop {
                let t = text();
                if let Some(at) = t[seen..].find(prompt) {
                    seen += at + prompt.len();
                    break;
                }
                let exited = child.try_wait().expect("wait for script").is_some();
                assert!(
                    !exited && Instant::now() < deadline,
                    "keytool {args:?} did not ask {prompt:?}; the terminal showed {t:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            // rpassword prints the prompt, then turns echo off: wait until it has, so the
            // answer is not echoed by the terminal before keytool reads it.
            wait_echo_off(child.id(), deadline, &text);
            stdin
                .write_all(format!("{answer}\n").as_bytes())
                .expect("type an answer");
        }
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait for script") {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "keytool {args:?} did not finish; the terminal showed {:?}",
                    text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        drop(stdin);
        reader.join().expect("read the terminal");
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let code = status
            .code()
            .unwrap_or_else(|| panic!("script killed: {status:?} {err}"));
        (code, text())
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run keytool")
    }

    /// Runs, expects exit 0, returns stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(
            o.status.success(),
            "keytool {args:?} failed ({:?}): {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).expect("UTF-8 output")
    }

    /// Runs with `--json`, expects exit `code`, returns the document.
    pub(crate) fn json_code(&self, args: &[&str], code: i32) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        let o = self.run(&a);
        assert_eq!(
            o.status.code(),
            Some(code),
            "keytool {a:?}: stderr {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "keytool {a:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&o.stdout)
            )
        })
    }

    pub(crate) fn json(&self, args: &[&str]) -> Value {
        self.json_code(args, 0)
    }

    /// Runs, expects exit `code` with one `keytool: ...` line on stderr; returns that line.
    pub(crate) fn fails(&self, args: &[&str], code: i32) -> String {
        let o = self.run(args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(code), "keytool {args:?}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "keytool {args:?}: not one line: {err:?}");
        assert!(lines[0].starts_with("keytool: "), "{err:?}");
        lines[0].to_owned()
    }

    /// A key pair: (signing, verifying).
    pub(crate) fn keygen(&self, extra: &[&str]) -> (String, String) {
        let mut a = vec!["keygen"];
        a.extend_from_slice(extra);
        let j = self.json(&a);
        (s(&j["signing"]), s(&j["verifying"]))
    }

    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).expect("write test file");
        p
    }
}

pub(crate) fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_owned()
}

pub(crate) fn p(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// A store with a data key, an object signed by it, and two contexts; the first context
/// has its own key.
pub(crate) struct World {
    pub(crate) kt: Kt,
    pub(crate) sk: String,
    pub(crate) obj: String,
    pub(crate) c1: String,
    pub(crate) c1_sk: String,
    pub(crate) c2: String,
}

impl World {
    /// The arguments of `keytool mint` with the data key, for the object, to context 1:
    /// `prots`, then `extra`, then `--out out`.
    pub(crate) fn mint<'a>(
        &'a self,
        prots: &'a str,
        out: &'a str,
        extra: &[&'a str],
    ) -> Vec<&'a str> {
        let mut a = vec![
            "mint",
            "--key",
            &self.sk,
            "--target",
            &self.obj,
            "--accessor",
            &self.c1,
            "--prots",
            prots,
        ];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--out", out]);
        a
    }
}

pub(crate) fn world() -> World {
    let kt = Kt::new();
    let (sk, vk) = kt.keygen(&[]);
    let (c1_sk, c1_vk) = kt.keygen(&["--scheme", "p256"]);
    let obj = s(&kt.json(&["obj", "new", "--kuid", &vk])["id"]);
    let c1 = s(&kt.json(&["ctx", "new", "--kuid", &c1_vk])["id"]);
    let c2 = s(&kt.json(&["ctx", "new"])["id"]);
    World {
        kt,
        sk,
        obj,
        c1,
        c1_sk,
        c2,
    }
}

pub(crate) fn check(
    w: &World,
    ctxs: &[&str],
    offset: &str,
    access: &str,
    extra: &[&str],
) -> (bool, Value) {
    let mut a = vec!["check"];
    for c in ctxs {
        a.extend_from_slice(&["--ctx", c]);
    }
    a.extend_from_slice(&["--target", &w.obj, "--offset", offset, "--access", access]);
    a.extend_from_slice(extra);
    let mut with_json = a.clone();
    with_json.push("--json");
    let o = w.kt.run(&with_json);
    let j: Value = serde_json::from_slice(&o.stdout).expect("check prints JSON");
    let granted = j["granted"].as_bool().expect("granted");
    assert_eq!(o.status.code(), Some(if granted { 0 } else { 1 }), "{j}");
    (granted, j)
}

/// The number of objects in the store.
pub(crate) fn objects(kt: &Kt) -> usize {
    use secctx::ObjectStore;
    let store = secctx::DbStore::open(kt.store()).expect("open the store");
    store.list().expect("list the store").len()
}

/// Waits until the terminal of the `keytool` process below `script` (pid `script`) has echo
/// turned off: `stty -F` on the pseudo-terminal keytool reads, found through `/proc`. Panics
/// with what the terminal showed if that does not happen by `deadline`.
fn wait_echo_off(script: u32, deadline: Instant, shown: &dyn Fn() -> String) {
    loop {
        if let Some(tty) = keytool_tty(script) {
            let out = Command::new("stty")
                .args(["-F", &tty, "-a"])
                .stdin(Stdio::null())
                .output()
                .expect("run stty");
            let flags = String::from_utf8_lossy(&out.stdout);
            if flags.split_whitespace().any(|f| f == "-echo") {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "keytool never turned echo off; the terminal showed {:?}",
            shown()
        );
        std::thread::yield_now();
    }
}

/// The terminal (its path under `/dev/pts`) on which a `keytool` descendant of `root` reads.
fn keytool_tty(root: u32) -> Option<String> {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`: comm may hold spaces, so read after the last ')'.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() != "keytool" {
            continue;
        }
        let mut p = pid;
        let below_root = std::iter::from_fn(|| {
            p = parent_of(p)?;
            Some(p)
        })
        .take(8)
        .any(|a| a == root);
        if below_root {
            let tty = std::fs::read_link(format!("/proc/{pid}/fd/0")).ok()?;
            return Some(tty.to_string_lossy().into_owned());
        }
    }
    None
}
