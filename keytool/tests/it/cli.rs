//! End-to-end tests of the `keytool` binary: every test runs the real executable on a store of
//! its own, in a temporary directory.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand_chacha::rand_core::SeedableRng;
use serde_json::{Value, json};
use tempfile::TempDir;

/// A temporary working directory with a store in it.
pub(crate) struct Kt {
    dir: TempDir,
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
    fn setup(&self, c: &mut Command) {
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
    fn tty(&self, args: &[&str], env: &[(&str, &str)], answers: &[(&str, &str)]) -> (i32, String) {
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
            // rpassword prints the prompt, then turns echo off: let it, so the answer is not
            // echoed by the terminal before keytool reads it.
            std::thread::sleep(Duration::from_millis(250));
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
    fn keygen(&self, extra: &[&str]) -> (String, String) {
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
struct World {
    kt: Kt,
    sk: String,
    obj: String,
    c1: String,
    c1_sk: String,
    c2: String,
}

impl World {
    /// The arguments of `keytool mint` with the data key, for the object, to context 1:
    /// `prots`, then `extra`, then `--out out`.
    fn mint<'a>(&'a self, prots: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
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

fn world() -> World {
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

fn check(w: &World, ctxs: &[&str], offset: &str, access: &str, extra: &[&str]) -> (bool, Value) {
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

#[test]
fn keygen_mint_add_check_revoke_check() {
    let w = world();
    let kt = &w.kt;
    let cap = kt.json(&w.mint("rw-", "rw.cap", &["--expires", "30d"]));
    assert_eq!(cap["kind"], "capability");
    assert_eq!(cap["prots"], "rw-");
    let added = kt.json(&["ctx", "add", &w.c1, "rw.cap"]);
    assert_eq!(added["generation"], 1);
    assert_eq!(added["added"]["id"], cap["id"]);
    // Adding it again changes nothing.
    let again = kt.json(&["ctx", "add", &w.c1, "rw.cap"]);
    assert_eq!(again["already_held"], true);
    assert_eq!(again["generation"], 1);

    let (granted, j) = check(&w, &[&w.c1], "0x1000", "write", &[]);
    assert!(granted, "{j}");
    assert_eq!(j["decision"]["prots"], "rw-");
    assert_eq!(j["contexts"][0]["records"][0]["verdict"], "counted");
    // Text output says so too.
    let text = kt.ok(&[
        "check", "--ctx", &w.c1, "--target", &w.obj, "--offset", "4096", "--access", "read",
    ]);
    assert!(text.starts_with("GRANTED read at 0x1000"), "{text}");
    // Not executable, and not for the other context.
    assert!(!check(&w, &[&w.c1], "0x1000", "exec", &[]).0);
    assert!(!check(&w, &[&w.c2], "0x1000", "read", &[]).0);
    // The null page is never granted.
    assert!(!check(&w, &[&w.c1], "0", "read", &[]).0);

    assert_eq!(kt.json(&["verify", "rw.cap"])["valid"], true);
    let revoked = kt.json(&["revoke", "--record", "rw.cap"]);
    assert_eq!(revoked["new"], true);
    assert_eq!(
        kt.json(&["revoke", "--record", &s(&cap["id"])])["new"],
        false
    );

    let (granted, j) = check(&w, &[&w.c1], "0x1000", "write", &[]);
    assert!(!granted);
    assert_eq!(j["decision"]["violation"], "denied");
    assert_eq!(j["contexts"][0]["records"][0]["verdict"], "invalid");
    let v = kt.json_code(&["verify", "rw.cap"], 1);
    assert_eq!(v["valid"], false);
    assert!(s(&v["reason"]).contains("revoked"), "{v}");
    let text = String::from_utf8(kt.run(&["verify", "rw.cap"]).stdout).unwrap();
    assert!(text.starts_with("invalid: capability"), "{text}");
    assert_eq!(kt.json(&["revoke", "--list"])["records"][0], cap["id"]);
}

#[test]
fn revoking_a_key_revokes_everything_it_signed() {
    let w = world();
    let kt = &w.kt;
    kt.ok(&w.mint("r--", "r.cap", &[]));
    kt.ok(&["ctx", "add", &w.c1, "r.cap"]);
    assert!(check(&w, &[&w.c1], "0x1000", "read", &[]).0);
    // A signing-key id names its verifying key.
    let r = kt.json(&["revoke", "--key", &w.sk]);
    assert_ne!(s(&r["revoked_key"]), w.sk);
    let (granted, j) = check(&w, &[&w.c1], "0x1000", "read", &[]);
    assert!(!granted);
    assert!(
        s(&j["contexts"][0]["records"][0]["explanation"]).contains("revoked"),
        "{j}"
    );
    assert_eq!(kt.json_code(&["verify", "r.cap"], 1)["valid"], false);
}

#[test]
fn delegation_masks_flags_expiry_and_removal() {
    let w = world();
    let kt = &w.kt;
    kt.ok(&w.mint("rw-", "rw.cap", &["--expires", "1h", "--hash", "sha256"]));
    kt.ok(&["ctx", "add", &w.c1, "rw.cap"]);
    // c1 delegates read on two pages to c2; gate and expiry can only narrow.
    let d = kt.json(&[
        "delegate",
        "--parent",
        "rw.cap",
        "--key",
        &w.c1_sk,
        "--receiver",
        &w.c2,
        "--prots",
        "r--",
        "--gate",
        "0x1000:0x2000",
        "--out",
        "r.del",
    ]);
    assert_eq!(d["kind"], "delegation");
    assert_eq!(d["provider"], Value::String(w.c1.clone()));
    assert_eq!(
        d["expires_ns"], d["root"]["expires_ns"],
        "expiry defaults to the parent's"
    );
    let e = kt.fails(
        &[
            "delegate",
            "--parent",
            "rw.cap",
            "--key",
            &w.c1_sk,
            "--receiver",
            &w.c2,
            "--prots",
            "rwx",
            "--out",
            "x.del",
        ],
        2,
    );
    assert!(
        e.contains("grants protections its parent does not have"),
        "{e}"
    );
    let e = kt.fails(
        &[
            "delegate",
            "--parent",
            "rw.cap",
            "--key",
            &w.sk,
            "--receiver",
            &w.c2,
            "--prots",
            "r--",
            "--out",
            "x.del",
        ],
        2,
    );
    assert!(e.contains("does not sign for context"), "{e}");
    assert!(!kt.path("x.del").exists());

    kt.ok(&["ctx", "add", &w.c2, "r.del"]);
    assert_eq!(kt.json(&["verify", "r.del"])["valid"], true);
    assert!(check(&w, &[&w.c2], "0x2000", "read", &[]).0);
    assert!(
        !check(&w, &[&w.c2], "0x3000", "read", &[]).0,
        "outside the gate"
    );
    assert!(!check(&w, &[&w.c2], "0x2000", "write", &[]).0);
    // An inactive context that grants is switched to.
    let (granted, j) = check(&w, &[&w.c2, &w.c1], "0x2000", "write", &[]);
    assert!(granted);
    assert_eq!(j["decision"]["switch_to"], Value::String(w.c1.clone()));
    // ... unless the active one is undetachable.
    assert_eq!(
        kt.json(&["ctx", "flags", &w.c2, "--undetachable", "true"])["undetachable"],
        true
    );
    let (granted, j) = check(&w, &[&w.c2, &w.c1], "0x2000", "write", &[]);
    assert!(!granted);
    assert_eq!(j["decision"]["violation"], "undetachable");
    kt.ok(&["ctx", "flags", &w.c2, "--undetachable", "false"]);

    // Expiry: both records end within the hour.
    assert!(!check(&w, &[&w.c1], "0x1000", "read", &["--at", "2h"]).0);
    let v = kt.json_code(&["verify", "r.del", "--at", "2h"], 1);
    assert!(s(&v["reason"]).contains("expired"), "{v}");

    // Masks.
    kt.ok(&["ctx", "mask", &w.c1, "--target", &w.obj, "--perm", "r--"]);
    assert!(!check(&w, &[&w.c1], "0x1000", "write", &[]).0);
    assert!(check(&w, &[&w.c1], "0x1000", "read", &[]).0);
    kt.ok(&["ctx", "rm", &w.c1, "--mask", &w.obj]);
    kt.ok(&["ctx", "mask", &w.c1, "--global", "r--"]);
    assert!(!check(&w, &[&w.c1], "0x1000", "write", &[]).0);
    let show = kt.json(&["ctx", "show", &w.c1]);
    assert_eq!(show["global_mask"], "r--");
    assert_eq!(show["masks"].as_array().unwrap().len(), 0);
    kt.ok(&[
        "ctx", "mask", &w.c1, "--target", &w.obj, "--perm", "rw-", "--ovr", "rw-",
    ]);
    assert!(
        check(&w, &[&w.c1], "0x1000", "write", &[]).0,
        "ovr lets write through"
    );

    // Removal: by record file, then nothing is left to remove.
    kt.ok(&["ctx", "rm", &w.c2, "--record", "r.del"]);
    assert!(!check(&w, &[&w.c2], "0x2000", "read", &[]).0);
    let e = kt.fails(&["ctx", "rm", &w.c2, "--target", &w.obj], 2);
    assert!(e.contains("holds nothing that matches"), "{e}");
    let before = kt.json(&["ctx", "show", &w.c1])["generation"].clone();
    kt.ok(&["ctx", "rm", &w.c1, "--target", &w.obj]);
    let after = kt.json(&["ctx", "show", &w.c1]);
    assert_eq!(after["records"].as_array().unwrap().len(), 0);
    assert_eq!(after["generation"], before.as_u64().unwrap() + 1);
}

#[test]
fn two_processes_adding_to_one_context_lose_nothing() {
    let w = world();
    let kt = &w.kt;
    const EACH: usize = 25;
    // 50 different capabilities: one per page.
    for i in 0..2 * EACH {
        let gate = format!("{:#x}:0x1000", (i + 1) * 0x1000);
        kt.ok(&w.mint("r--", &format!("{i}.cap"), &["--gate", &gate]));
    }
    std::thread::scope(|scope| {
        for half in 0..2 {
            let kt = &w.kt;
            let c1 = &w.c1;
            scope.spawn(move || {
                for i in half * EACH..(half + 1) * EACH {
                    kt.ok(&["ctx", "add", c1, &format!("{i}.cap")]);
                }
            });
        }
    });
    let show = kt.json(&["ctx", "show", &w.c1]);
    let records = show["records"].as_array().unwrap();
    assert_eq!(records.len(), 2 * EACH, "lost an update");
    assert_eq!(show["generation"], 2 * EACH as u64);
    let mut ids: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 2 * EACH);
    assert!(check(&w, &[&w.c1], "0x32000", "read", &[]).0);
}

#[test]
fn corrupt_and_truncated_files_give_errors() {
    let w = world();
    let kt = &w.kt;
    kt.ok(&w.mint("r--", "r.cap", &[]));
    let good = std::fs::read(kt.path("r.cap")).unwrap();

    // A truncated record file.
    kt.write("short.cap", &good[..good.len() - 7]);
    for args in [
        vec!["inspect", "short.cap"],
        vec!["verify", "short.cap"],
        vec!["ctx", "add", &w.c1, "short.cap"],
        vec!["revoke", "--record", "short.cap"],
    ] {
        let e = kt.fails(&args, 2);
        assert!(e.contains("short.cap") && e.contains("truncated"), "{e}");
    }
    kt.write("tiny.cap", b"TC");
    assert!(kt.fails(&["inspect", "tiny.cap"], 2).contains("truncated"));
    // Not a record at all; trailing bytes.
    kt.write("junk.cap", b"hello, world, this is not a capability");
    assert!(kt.fails(&["verify", "junk.cap"], 2).contains("bad magic"));
    let mut long = good.clone();
    long.push(0);
    kt.write("long.cap", &long);
    assert!(kt.fails(&["verify", "long.cap"], 2).contains("trailing"));
    // A damaged signature decodes but does not verify: an answer, not an error.
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 100] ^= 1;
    kt.write("bad.cap", &bad);
    let v = kt.json_code(&["verify", "bad.cap"], 1);
    assert!(s(&v["reason"]).contains("signature"), "{v}");
    // A changed field breaks the signature too.
    let mut widened = good.clone();
    widened[40] = 7; // prots = rwx
    kt.write("rwx.cap", &widened);
    assert_eq!(kt.json_code(&["verify", "rwx.cap"], 1)["valid"], false);
    // Nothing was added to the context by the failures above.
    assert_eq!(kt.json(&["ctx", "show", &w.c1])["generation"], 0);
    kt.fails(&["inspect", "missing.cap"], 2);

    // A damaged object in the store: a context whose bytes were overwritten (one flipped bit
    // in its header, then cut short), as another program with access to the store could.
    let damage = |id: &str, edit: &dyn Fn(&mut Vec<u8>)| {
        use secctx::ObjectStore;
        let store = secctx::DbStore::open(kt.store()).expect("open the store");
        let id: twizzler_capsec::ObjID = id.parse().expect("an id");
        store
            .update(id, |o| {
                edit(&mut o.data);
                Ok::<(), secctx::StoreError>(())
            })
            .expect("damage the object");
    };
    damage(&w.c1, &|d| d[0] ^= 0x10);
    for args in [
        vec!["ctx", "show", &w.c1],
        vec!["ctx", "add", &w.c1, "r.cap"],
    ] {
        let e = kt.fails(&args, 2);
        let named = e.contains("malformed") || e.contains("not a security context");
        assert!(named && e.contains(&w.c1), "{e}");
    }
    damage(&w.c1, &|d| {
        d[0] ^= 0x10;
        d.truncate(30);
    });
    let e = kt.fails(&["ctx", "show", &w.c1], 2);
    assert!(e.contains("truncated") && e.contains(&w.c1), "{e}");
    // The simulator denies, as the kernel would: a malformed context.
    let (granted, j) = check(&w, &[&w.c1], "0x1000", "read", &[]);
    assert!(!granted);
    assert_eq!(j["decision"]["violation"], "malformed_context", "{j}");
    // A corrupt key object.
    damage(&w.sk, &|d| d.truncate(4));
    let e = kt.fails(
        &[
            "mint",
            "--key",
            &w.sk,
            "--target",
            &w.obj,
            "--accessor",
            &w.c2,
            "--prots",
            "r--",
            "--out",
            "x.cap",
        ],
        2,
    );
    assert!(e.contains("truncated"), "{e}");
    assert!(!kt.path("x.cap").exists());

    // Damaged PEM.
    kt.ok(&["export", &w.c1_sk, "--out", "pub.pem"]);
    let pem = std::fs::read_to_string(kt.path("pub.pem")).unwrap();
    kt.write("cut.pem", &pem.as_bytes()[..pem.len() / 2]);
    kt.fails(&["import", "cut.pem"], 2);
    kt.write(
        "garbage.pem",
        b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
    );
    kt.fails(&["import", "garbage.pem"], 2);
    kt.write("none.pem", b"plain text");
    assert!(kt.fails(&["import", "none.pem"], 2).contains("no PEM"));
}

#[test]
fn wrong_passphrase_fails_cleanly() {
    let kt = Kt::new();
    kt.write("pass", b"correct horse battery staple\n");
    kt.write("wrong", b"incorrect horse\n");
    kt.write("empty", b"\n");
    let (sk, vk) = kt.keygen(&["--passphrase-file", "pass"]);
    let obj = s(&kt.json(&["obj", "new", "--kuid", &vk])["id"]);
    let ctx = s(&kt.json(&["ctx", "new"])["id"]);
    let mint = |extra: &[&str]| {
        let mut a = vec![
            "mint",
            "--key",
            &sk,
            "--target",
            &obj,
            "--accessor",
            &ctx,
            "--prots",
            "r--",
            "--out",
            "r.cap",
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let args = mint(&["--passphrase-file", "wrong"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(kt.fails(&args, 2).contains("wrong passphrase"));
    assert!(!kt.path("r.cap").exists(), "nothing written");
    let args = mint(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(kt.fails(&args, 2).contains("passphrase-protected"));
    let args = mint(&["--passphrase-file", "empty"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(kt.fails(&args, 2).contains("empty"));
    let args = mint(&["--passphrase-env", "KEYTOOL_TEST_UNSET_VARIABLE"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(kt.fails(&args, 2).contains("not set"));
    assert!(!kt.path("r.cap").exists());
    let e = kt.fails(
        &[
            "export",
            &sk,
            "--secret",
            "--passphrase-file",
            "wrong",
            "--out",
            "k.pem",
        ],
        2,
    );
    assert!(e.contains("wrong passphrase"), "{e}");
    assert!(!kt.path("k.pem").exists());

    // The right passphrase, from a file or the environment.
    let args = mint(&["--passphrase-file", "pass"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    kt.ok(&args);
    let args = mint(&["--passphrase-env", "KT_PASS", "--force"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = kt
        .cmd(&args)
        .env("KT_PASS", "correct horse battery staple")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let info = kt.json(&["inspect", &sk]);
    assert_eq!(info["type"], "signing_key");
    assert_eq!(info["protected"], true);
}

/// The JSON document among what a terminal showed (prompts, then `--json` output).
fn json_in(shown: &str) -> Value {
    let doc = shown
        .find('{')
        .zip(shown.rfind('}'))
        .map(|(a, b)| &shown[a..=b])
        .unwrap_or_else(|| panic!("no JSON on the terminal: {shown:?}"));
    serde_json::from_str(doc).unwrap_or_else(|e| panic!("{e}: {shown:?}"))
}

/// What the terminal showed after `prompt`, trimmed: keytool's answer to the typed line.
fn after<'a>(shown: &'a str, prompt: &str) -> &'a str {
    let at = shown
        .rfind(prompt)
        .unwrap_or_else(|| panic!("no {prompt:?} on the terminal: {shown:?}"));
    shown[at + prompt.len()..].trim()
}

/// The number of objects in the store.
fn objects(kt: &Kt) -> usize {
    use secctx::ObjectStore;
    let store = secctx::DbStore::open(kt.store()).expect("open the store");
    store.list().expect("list the store").len()
}

const ASK_NEW: &str = "Enter passphrase (empty for no passphrase): ";
const ASK_AGAIN: &str = "Enter same passphrase again: ";

/// The arguments of a `mint` with key `sk` to `out`.
fn mint_args(sk: &str, obj: &str, ctx: &str, out: &str) -> Vec<String> {
    [
        "mint",
        "--key",
        sk,
        "--target",
        obj,
        "--accessor",
        ctx,
        "--prots",
        "r--",
        "--out",
        out,
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn keygen_asks_for_a_passphrase_twice_and_mint_asks_for_it() {
    let kt = Kt::new();
    let secret = "tty horse battery";
    let (code, shown) = kt.tty(
        &["keygen", "--json"],
        &[],
        &[(ASK_NEW, secret), (ASK_AGAIN, secret)],
    );
    assert_eq!(code, 0, "{shown:?}");
    assert!(
        !shown.contains(secret),
        "the passphrase was echoed: {shown:?}"
    );
    let j = json_in(&shown);
    assert_eq!(j["protected"], true, "{shown:?}");
    let (sk, vk) = (s(&j["signing"]), s(&j["verifying"]));
    let info = kt.json(&["obj", "show", &sk]);
    assert_eq!(info["type"], "signing_key");
    assert_eq!(info["protected"], true);

    let obj = s(&kt.json(&["obj", "new", "--kuid", &vk])["id"]);
    let ctx = s(&kt.json(&["ctx", "new"])["id"]);
    // The passphrase typed works from the environment, and another does not.
    let args = mint_args(&sk, &obj, &ctx, "env.cap");
    let mut with_env = strs(&args);
    with_env.extend_from_slice(&["--passphrase-env", "KT_PASS"]);
    let o = kt.cmd(&with_env).env("KT_PASS", secret).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let args = mint_args(&sk, &obj, &ctx, "wrong-env.cap");
    let mut with_env = strs(&args);
    with_env.extend_from_slice(&["--passphrase-env", "KT_PASS"]);
    let o = kt.cmd(&with_env).env("KT_PASS", "wrong").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("wrong passphrase"), "{e}");

    // Without a flag, loading the sealed key asks once on the terminal.
    let ask = format!("Enter passphrase for signing key {sk}: ");
    let args = mint_args(&sk, &obj, &ctx, "tty.cap");
    let (code, shown) = kt.tty(&strs(&args), &[], &[(&ask, secret)]);
    assert_eq!(code, 0, "{shown:?}");
    assert!(
        !shown.contains(secret),
        "the passphrase was echoed: {shown:?}"
    );
    assert_eq!(kt.json(&["verify", "tty.cap"])["valid"], true);
    // A wrong answer: exit 2, one error line, nothing written.
    let args = mint_args(&sk, &obj, &ctx, "wrong.cap");
    let (code, shown) = kt.tty(&strs(&args), &[], &[(&ask, "not it")]);
    assert_eq!(code, 2, "{shown:?}");
    let answer = after(&shown, &ask);
    assert_eq!(answer.lines().count(), 1, "not one line: {answer:?}");
    assert!(
        answer.starts_with("keytool: ") && answer.contains("wrong passphrase"),
        "{answer:?}"
    );
    assert!(!kt.path("wrong.cap").exists());
    // A flag wins over the terminal: nothing is asked.
    let args = mint_args(&sk, &obj, &ctx, "flag.cap");
    let mut with_env = strs(&args);
    with_env.extend_from_slice(&["--passphrase-env", "KT_PASS"]);
    let (code, shown) = kt.tty(&with_env, &[("KT_PASS", secret)], &[]);
    assert_eq!(code, 0, "{shown:?}");
    assert!(!shown.contains("Enter passphrase"), "{shown:?}");
    assert!(kt.path("flag.cap").exists());
    // So does --no-passphrase for keygen.
    let (code, shown) = kt.tty(&["keygen", "--no-passphrase", "--json"], &[], &[]);
    assert_eq!(code, 0, "{shown:?}");
    assert!(!shown.contains("Enter passphrase"), "{shown:?}");
    assert_eq!(json_in(&shown)["protected"], false);
}

#[test]
fn mismatched_passphrases_create_nothing() {
    let kt = Kt::new();
    let (code, shown) = kt.tty(
        &["keygen"],
        &[],
        &[(ASK_NEW, "one passphrase"), (ASK_AGAIN, "another one")],
    );
    assert_eq!(code, 2, "{shown:?}");
    assert_eq!(
        after(&shown, ASK_AGAIN),
        "keytool: the passphrases do not match"
    );
    assert_eq!(objects(&kt), 0, "a key pair was stored");
    // The same for import.
    let (sk, _) = kt.keygen(&["--no-passphrase"]);
    kt.ok(&["export", &sk, "--secret", "--out", "key.pem"]);
    let before = objects(&kt);
    let (code, shown) = kt.tty(
        &["import", "key.pem"],
        &[],
        &[(ASK_NEW, "one passphrase"), (ASK_AGAIN, "another one")],
    );
    assert_eq!(code, 2, "{shown:?}");
    assert!(shown.contains("keytool: the passphrases do not match"));
    assert_eq!(objects(&kt), before);
}

#[test]
fn an_empty_answer_stores_the_key_unencrypted_and_import_asks_too() {
    let kt = Kt::new();
    let (code, shown) = kt.tty(
        &["keygen", "--json"],
        &[],
        &[(ASK_NEW, ""), (ASK_AGAIN, "")],
    );
    assert_eq!(code, 0, "{shown:?}");
    let j = json_in(&shown);
    assert_eq!(j["protected"], false);
    let (sk, vk) = (s(&j["signing"]), s(&j["verifying"]));
    assert_eq!(kt.json(&["obj", "show", &sk])["protected"], false);
    // An unencrypted key is used without a question, with or without a terminal.
    let obj = s(&kt.json(&["obj", "new", "--kuid", &vk])["id"]);
    let ctx = s(&kt.json(&["ctx", "new"])["id"]);
    kt.ok(&strs(&mint_args(&sk, &obj, &ctx, "a.cap")));
    let (code, shown) = kt.tty(&strs(&mint_args(&sk, &obj, &ctx, "b.cap")), &[], &[]);
    assert_eq!(code, 0, "{shown:?}");
    assert!(!shown.contains("Enter passphrase"), "{shown:?}");

    // import asks as keygen does, and seals the imported key.
    kt.ok(&["export", &sk, "--secret", "--out", "key.pem"]);
    let (code, shown) = kt.tty(
        &["import", "key.pem", "--json"],
        &[],
        &[(ASK_NEW, "imported"), (ASK_AGAIN, "imported")],
    );
    assert_eq!(code, 0, "{shown:?}");
    let j = json_in(&shown);
    assert_eq!(j["protected"], true);
    let sk2 = s(&j["signing"]);
    let o = kt
        .cmd(&[
            "export",
            &sk2,
            "--secret",
            "--out",
            "again.pem",
            "--passphrase-env",
            "KT_PASS",
        ])
        .env("KT_PASS", "imported")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A public key asks nothing.
    kt.ok(&["export", &sk, "--out", "pub.pem"]);
    let (code, shown) = kt.tty(&["import", "pub.pem"], &[], &[]);
    assert_eq!(code, 0, "{shown:?}");
    assert!(!shown.contains("Enter passphrase"), "{shown:?}");
}

#[test]
fn without_a_terminal_only_the_flags_give_a_passphrase() {
    let kt = Kt::new();
    // keygen asks nothing and does not read stdin: the key is stored unencrypted.
    let mut c = kt.cmd(&["keygen", "--json"]);
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"secret\nsecret\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["protected"], false);
    assert_eq!(kt.keygen(&["--no-passphrase"]).0.len(), 32);
    // The flags seal it.
    kt.write("pass", b"from a file\n");
    let (sk, vk) = kt.keygen(&["--passphrase-file", "pass"]);
    assert_eq!(kt.json(&["obj", "show", &sk])["protected"], true);
    // A sealed key without a flag is today's error, naming the flags.
    let obj = s(&kt.json(&["obj", "new", "--kuid", &vk])["id"]);
    let ctx = s(&kt.json(&["ctx", "new"])["id"]);
    let args = mint_args(&sk, &obj, &ctx, "r.cap");
    let e = kt.fails(&strs(&args), 2);
    assert!(
        e.contains("passphrase-protected") && e.contains("--passphrase-file"),
        "{e}"
    );
    let mut with_file = strs(&args);
    with_file.extend_from_slice(&["--passphrase-file", "pass"]);
    kt.ok(&with_file);
    // --no-passphrase goes with neither flag.
    for flag in [
        ["--passphrase-file", "pass"],
        ["--passphrase-env", "KT_PASS"],
    ] {
        let e = kt.fails(&["keygen", "--no-passphrase", flag[0], flag[1]], 2);
        assert!(e.contains("cannot be used"), "{e}");
        let e = kt.fails(&["import", "x.pem", "--no-passphrase", flag[0], flag[1]], 2);
        assert!(e.contains("cannot be used"), "{e}");
    }
}

/// A store path that cannot be created (its parent is a file): a command that opened the
/// store would fail.
fn unopenable_store(kt: &Kt) -> PathBuf {
    kt.write("not-a-dir", b"a file").join("store")
}

#[test]
fn completions_for_bash_zsh_and_fish_without_a_store() {
    let kt = Kt::new();
    let store = unopenable_store(&kt);
    // The store really cannot be opened.
    let o = kt
        .cmd(&["ctx", "new"])
        .env("TWZ_KEYTOOL_STORE", &store)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    for shell in ["bash", "zsh", "fish"] {
        let o = kt
            .cmd(&["completions", shell])
            .env("TWZ_KEYTOOL_STORE", &store)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let script = String::from_utf8(o.stdout).expect("UTF-8");
        assert!(!script.trim().is_empty(), "{shell}: empty");
        for needle in [
            "keytool",
            "keygen",
            "mint",
            "delegate",
            "completions",
            "passphrase-file",
        ] {
            assert!(script.contains(needle), "{shell} completions lack {needle}");
        }
        if shell == "bash" {
            let file = kt.write("keytool.bash", script.as_bytes());
            let o = Command::new("bash")
                .arg("-n")
                .arg(&file)
                .output()
                .expect("run bash");
            assert!(
                o.status.success(),
                "bash -n rejects the script: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    assert!(!kt.store().exists(), "the default store was created");
    let e = kt.fails(&["completions", "tcsh"], 2);
    assert!(e.contains("tcsh"), "{e}");
}

#[test]
fn man_page_from_the_command_line_definitions() {
    let kt = Kt::new();
    let store = unopenable_store(&kt);
    let o = kt
        .cmd(&["man"])
        .env("TWZ_KEYTOOL_STORE", &store)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = String::from_utf8(o.stdout).expect("UTF-8");
    // roff: the first line that is not a string definition is the title.
    let first = page
        .lines()
        .find(|l| !l.starts_with(".ie") && !l.starts_with(".el"))
        .unwrap_or_default();
    assert!(first.starts_with(".TH KEYTOOL 1"), "{first:?}");
    for needle in [
        ".SH NAME",
        ".SH SYNOPSIS",
        "keygen",
        ".SH \"KEYTOOL KEYGEN\"",
        ".SH \"KEYTOOL CTX ADD\"",
        "\\-\\-no\\-passphrase",
        // The top-level after_long_help.
        ".SH \"EXAMPLE SESSION\"",
        "TWZ_KEYTOOL_STORE",
    ] {
        assert!(page.contains(needle), "the man page lacks {needle}");
    }
    assert!(!kt.store().exists(), "the default store was created");

    // One page per command with --out.
    let dir = kt.path("man1");
    let j = kt.json(&["man", "--out", p(&dir)]);
    assert_eq!(j["pages"][0], "keytool.1");
    for name in [
        "keytool.1",
        "keytool-keygen.1",
        "keytool-ctx-add.1",
        "keytool-man.1",
    ] {
        let text =
            std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains(".TH "), "{name}");
    }
    // Again: the pages are replaced.
    kt.ok(&["man", "--out", p(&dir)]);

    // man(1) renders it. Skipped where man is not installed (it is not needed otherwise).
    let have_man = Command::new("man")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if have_man {
        let file = kt.write("keytool.1", page.as_bytes());
        for f in [file, dir.join("keytool-keygen.1")] {
            let o = Command::new("man")
                .arg("-l")
                .arg(&f)
                .env("MANPAGER", "cat")
                .env("PAGER", "cat")
                .env("MANWIDTH", "100")
                .output()
                .expect("run man");
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success() && text.contains("keygen"),
                "man -l {}: {}{text}",
                f.display(),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

#[test]
fn output_files_are_not_replaced_without_force() {
    let w = world();
    let kt = &w.kt;
    let mint = [
        "mint",
        "--key",
        &w.sk,
        "--target",
        &w.obj,
        "--accessor",
        &w.c1,
        "--prots",
        "r--",
        "--out",
        "r.cap",
    ];
    kt.ok(&mint);
    let first = std::fs::read(kt.path("r.cap")).unwrap();
    let mut again = mint.to_vec();
    again[8] = "rw-";
    assert!(kt.fails(&again, 2).contains("already exists"));
    assert_eq!(std::fs::read(kt.path("r.cap")).unwrap(), first);
    again.push("--force");
    kt.ok(&again);
    assert_ne!(std::fs::read(kt.path("r.cap")).unwrap(), first);
    // No temporary files are left behind.
    let names: Vec<String> = std::fs::read_dir(kt.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");

    // A key that does not sign for the target is refused (and --unchecked overrides).
    let (other_sk, _) = kt.keygen(&[]);
    let e = kt.fails(
        &[
            "mint",
            "--key",
            &other_sk,
            "--target",
            &w.obj,
            "--accessor",
            &w.c1,
            "--prots",
            "r--",
            "--out",
            "o.cap",
        ],
        2,
    );
    assert!(e.contains("does not sign for target"), "{e}");
    assert!(!kt.path("o.cap").exists());
    kt.ok(&[
        "mint",
        "--key",
        &other_sk,
        "--target",
        &w.obj,
        "--accessor",
        &w.c1,
        "--prots",
        "r--",
        "--out",
        "o.cap",
        "--unchecked",
    ]);
    let v = kt.json_code(&["verify", "o.cap"], 1);
    assert!(s(&v["reason"]).contains("signature does not verify"), "{v}");
    // Adding a record for another context is refused.
    let e = kt.fails(&["ctx", "add", &w.c2, "r.cap"], 2);
    assert!(e.contains("would grant nothing here"), "{e}");
}

#[test]
fn usage_errors_are_one_line_with_exit_2() {
    let kt = Kt::new();
    for (args, needle) in [
        (vec!["obj", "new", "--default", "rwz"], "rwz"),
        (vec!["obj", "new", "--id", "xyz"], "hex"),
        (vec!["obj", "new", "--kuid", "1234"], "does not exist"),
        (
            vec![
                "check", "--ctx", "1", "--target", "2", "--offset", "0x1000", "--access", "fly",
            ],
            "fly",
        ),
        (
            vec![
                "check", "--ctx", "1", "--target", "2", "--offset", "lots", "--access", "read",
            ],
            "lots",
        ),
        (
            vec![
                "mint",
                "--key",
                "1",
                "--target",
                "2",
                "--accessor",
                "3",
                "--prots",
                "r",
                "--gate",
                "0:0",
                "--out",
                "x",
            ],
            "length is zero",
        ),
        (
            vec![
                "mint",
                "--key",
                "1",
                "--target",
                "2",
                "--accessor",
                "3",
                "--prots",
                "r",
                "--expires",
                "1y",
                "--out",
                "x",
            ],
            "months and years",
        ),
        (vec!["mint", "--key", "1"], "required"),
        (vec!["frobnicate"], "frobnicate"),
        (vec!["ctx", "rm", "1"], "required"),
        (vec!["ctx", "show", "1"], "does not exist"),
        (
            vec![
                "check", "--ctx", "1", "--target", "2", "--offset", "0x1000", "--access", "read",
            ],
            "context 00000000000000000000000000000001 does not exist",
        ),
        (vec!["export", "1"], "does not exist"),
        (vec!["keygen", "--passphrase-file", "nope"], "nope"),
        (
            vec!["ctx", "mask", "1", "--global", "r--", "--target", "2"],
            "cannot be used",
        ),
    ] {
        let e = kt.fails(&args, 2);
        assert!(e.contains(needle), "{args:?}: {e}");
    }
    // `keytool` alone prints help and exits 2.
    let o = kt.run(&[]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn help_carries_an_example_for_every_command() {
    let kt = Kt::new();
    let top = kt.ok(&["--help"]);
    for needle in [
        "TWZ_KEYTOOL_STORE",
        "XDG_DATA_HOME",
        "Exit 0",
        "Example session",
    ] {
        assert!(top.contains(needle), "--help lacks {needle}");
    }
    let commands = [
        vec!["keygen"],
        vec!["obj"],
        vec!["obj", "new"],
        vec!["obj", "show"],
        vec!["mint"],
        vec!["delegate"],
        vec!["verify"],
        vec!["inspect"],
        vec!["ctx"],
        vec!["ctx", "new"],
        vec!["ctx", "add"],
        vec!["ctx", "rm"],
        vec!["ctx", "mask"],
        vec!["ctx", "flags"],
        vec!["ctx", "show"],
        vec!["check"],
        vec!["export"],
        vec!["import"],
        vec!["convert-upstream-cap"],
        vec!["revoke"],
        vec!["completions"],
        vec!["man"],
    ];
    for c in commands {
        let mut a = c.clone();
        a.push("--help");
        let h = kt.ok(&a);
        assert!(h.contains("Example"), "{c:?} --help has no example");
        assert!(h.contains("keytool "), "{c:?}");
    }
}

#[test]
fn store_location_flag_then_env_then_xdg_then_home() {
    let kt = Kt::new();
    let id_in = |store: &Path| std::fs::read_dir(store).map(|d| d.count()).unwrap_or(0);
    // --store wins over the environment.
    let flag = kt.path("flag-store");
    kt.ok(&["--store", p(&flag), "ctx", "new", "--id", "1"]);
    assert!(id_in(&flag) > 0);
    assert_eq!(id_in(&kt.store()), 0);
    // The environment variable.
    kt.ok(&["ctx", "new", "--id", "1"]);
    assert!(id_in(&kt.store()) > 0);
    // XDG_DATA_HOME, then HOME.
    let xdg = kt.path("xdg");
    let o = kt
        .cmd(&["ctx", "new", "--id", "1"])
        .env_remove("TWZ_KEYTOOL_STORE")
        .env("XDG_DATA_HOME", &xdg)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(id_in(&xdg.join("twizzler-keytool")) > 0);
    let o = kt
        .cmd(&["ctx", "new", "--id", "1"])
        .env_remove("TWZ_KEYTOOL_STORE")
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(id_in(&kt.path("home/.local/share/twizzler-keytool")) > 0);
    // The store is shown in --help.
    assert!(kt.ok(&["ctx", "show", "--help"]).contains("--store <DIR>"));
}

#[test]
fn inspect_describes_records_and_objects() {
    let w = world();
    let kt = &w.kt;
    kt.ok(&w.mint(
        "r-x",
        "c.cap",
        &[
            "--gate",
            "0x1000:0x1000:16",
            "--expires",
            "2030-01-01T00:00:00Z",
        ],
    ));
    let j = kt.json(&["inspect", "c.cap"]);
    assert_eq!(j["gate"]["offset"], 0x1000);
    assert_eq!(j["gate"]["align"], 16);
    assert_eq!(j["expires"], "2030-01-01T00:00:00Z");
    assert_eq!(j["scheme"], "ed25519");
    assert_eq!(j["target"], Value::String(w.obj.clone()));
    let text = kt.ok(&["inspect", "c.cap"]);
    assert!(text.contains("0x1000..0x2000 align 16"), "{text}");
    // Code gates: entry at an aligned offset in the gate from another context.
    kt.ok(&["ctx", "add", &w.c1, "c.cap"]);
    assert!(check(&w, &[&w.c2, &w.c1], "0x1010", "exec", &[]).0);
    assert!(!check(&w, &[&w.c2, &w.c1], "0x1011", "exec", &[]).0);
    assert_eq!(kt.json(&["inspect", &w.obj])["type"], "object");
    assert_eq!(
        kt.json(&["obj", "show", &w.obj])["kuid"],
        kt.json(&["inspect", &w.obj])["kuid"]
    );
    let c = kt.json(&["inspect", &w.c1]);
    assert_eq!(c["type"], "context");
    assert_eq!(c["records"], 1);
    let key = kt.json(&["inspect", &w.c1_sk]);
    assert_eq!(key["type"], "signing_key");
    assert_eq!(key["protected"], false);
    let vk = kt.json(&["inspect", &s(&key["verifying"])]);
    assert_eq!(vk["type"], "verifying_key");
    assert_eq!(vk["scheme"], "p256");
    assert!(
        kt.fails(&["inspect", "nonexistent-file"], 2)
            .contains("not an object id")
    );
}

/// `openssl`, installed with apt when missing (CI runs as root).
fn openssl() -> &'static str {
    let have = || {
        Command::new("openssl")
            .arg("version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !have() {
        let installed = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "openssl"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !installed {
            let _ = Command::new("apt-get").arg("update").status();
            let _ = Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends", "openssl"])
                .status();
        }
        assert!(
            have(),
            "the interop test needs the openssl command, and `apt-get install -y openssl` did not provide it (not root, or no package access)"
        );
    }
    "openssl"
}

fn run_openssl(dir: &Path, args: &[&str]) -> Output {
    Command::new(openssl())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl")
}

fn openssl_verify(dir: &Path, scheme: &str, pubkey: &str, msg: &str, sig: &str) -> Output {
    match scheme {
        "ed25519" => run_openssl(
            dir,
            &[
                "pkeyutl", "-verify", "-pubin", "-inkey", pubkey, "-rawin", "-in", msg, "-sigfile",
                sig,
            ],
        ),
        _ => run_openssl(
            dir,
            &["dgst", "-sha256", "-verify", pubkey, "-signature", sig, msg],
        ),
    }
}

#[test]
fn openssl_verifies_minted_capabilities_ed25519_and_p256() {
    let kt = Kt::new();
    let dir = kt.dir.path();
    let ctx = s(&kt.json(&["ctx", "new"])["id"]);
    for scheme in ["ed25519", "p256"] {
        let (sk, vk) = kt.keygen(&["--scheme", scheme]);
        let obj = s(&kt.json(&["obj", "new", "--kuid", &vk])["id"]);
        let cap = format!("{scheme}.cap");
        let (msg, sig, pubkey) = (
            format!("{scheme}.msg"),
            format!("{scheme}.sig"),
            format!("{scheme}.pub.pem"),
        );
        kt.ok(&[
            "mint",
            "--key",
            &sk,
            "--target",
            &obj,
            "--accessor",
            &ctx,
            "--prots",
            "rw-",
            "--out",
            &cap,
        ]);
        kt.ok(&["export", &vk, "--out", &pubkey]);
        kt.ok(&[
            "inspect",
            &cap,
            "--signed-message-out",
            &msg,
            "--signature-out",
            &sig,
        ]);
        assert_eq!(std::fs::read(dir.join(&msg)).unwrap().len(), 32);
        let o = openssl_verify(dir, scheme, &pubkey, &msg, &sig);
        assert!(
            o.status.success(),
            "openssl rejects the {scheme} capability: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        // And it rejects another message.
        let mut other = std::fs::read(dir.join(&msg)).unwrap();
        other[0] ^= 1;
        std::fs::write(dir.join("other.msg"), &other).unwrap();
        assert!(
            !openssl_verify(dir, scheme, &pubkey, "other.msg", &sig)
                .status
                .success()
        );

        // The secret key exports as PKCS#8 that OpenSSL reads, with the same public key.
        let key_pem = format!("{scheme}.key.pem");
        kt.ok(&["export", &sk, "--secret", "--out", &key_pem]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(&key_pem))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let o = run_openssl(dir, &["pkey", "-in", &key_pem, "-pubout"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            String::from_utf8(o.stdout).unwrap(),
            std::fs::read_to_string(dir.join(&pubkey)).unwrap()
        );
        // A signing-key id exports its public key too (stdout without --out).
        assert_eq!(
            kt.ok(&["export", &sk]).trim_end(),
            std::fs::read_to_string(dir.join(&pubkey))
                .unwrap()
                .trim_end()
        );
    }
}

#[test]
fn keys_generated_by_openssl_import_and_sign() {
    let kt = Kt::new();
    let dir = kt.dir.path();
    let ctx = s(&kt.json(&["ctx", "new"])["id"]);
    kt.write("pass", b"s3cret\n");
    for (scheme, genargs) in [
        (
            "ed25519",
            vec!["genpkey", "-algorithm", "ed25519", "-out", "ed.key"],
        ),
        (
            "p256",
            vec![
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "p.key",
            ],
        ),
    ] {
        let key = genargs.last().unwrap().to_string();
        let o = run_openssl(dir, &genargs);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let imported = kt.json(&["import", &key, "--passphrase-file", "pass"]);
        assert_eq!(imported["scheme"], scheme);
        assert_eq!(imported["protected"], true);
        let (sk, vk) = (s(&imported["signing"]), s(&imported["verifying"]));
        let obj = s(&kt.json(&["obj", "new", "--kuid", &vk])["id"]);
        let cap = format!("{scheme}.cap");
        kt.ok(&[
            "mint",
            "--key",
            &sk,
            "--target",
            &obj,
            "--accessor",
            &ctx,
            "--prots",
            "r--",
            "--out",
            &cap,
            "--passphrase-file",
            "pass",
        ]);
        assert_eq!(kt.json(&["verify", &cap])["valid"], true);
        // OpenSSL's own public key verifies it.
        let pubkey = format!("{scheme}.openssl.pub");
        let o = run_openssl(dir, &["pkey", "-in", &key, "-pubout", "-out", &pubkey]);
        assert!(o.status.success());
        kt.ok(&[
            "inspect",
            &cap,
            "--signed-message-out",
            "m",
            "--signature-out",
            "s",
            "--force",
        ]);
        let o = openssl_verify(dir, scheme, &pubkey, "m", "s");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // A public key alone imports as a verifying-key object others can name as kuid.
        let id = if scheme == "ed25519" { "ed" } else { "b256" };
        let v = kt.json(&["import", &pubkey, "--id", id]);
        let vid = s(&v["verifying"]);
        assert_eq!(kt.json(&["inspect", &vid])["type"], "verifying_key");
        let o2 = s(&kt.json(&["obj", "new", "--kuid", &vid])["id"]);
        kt.ok(&[
            "mint",
            "--key",
            &sk,
            "--target",
            &o2,
            "--accessor",
            &ctx,
            "--prots",
            "r--",
            "--out",
            &format!("{scheme}2.cap"),
            "--passphrase-file",
            "pass",
            "--unchecked",
        ]);
        assert_eq!(
            kt.json(&["verify", &format!("{scheme}2.cap")])["valid"],
            true
        );
    }
}

#[test]
fn check_and_verify_agree_past_a_thousand_revocations() {
    // The engine once kept 512 revoked records and 64 keys; past that, `check` granted a
    // revoked record with a warning while `verify` said invalid. The simulator now consults the
    // store's list itself.
    let w = world();
    let kt = &w.kt;
    kt.ok(&w.mint("r--", "r.cap", &[]));
    kt.ok(&["ctx", "add", &w.c1, "r.cap"]);
    let store = secctx::DbStore::open(kt.store()).expect("open the store");
    secctx::revocations::RevocationList::add(&store, |list| {
        for i in 0..1_000u64 {
            let mut id = [0u8; 32];
            id[..8].copy_from_slice(&i.to_le_bytes());
            list.records.insert(twizzler_capsec::RecordId(id));
        }
        for i in 0..100u128 {
            list.keys
                .insert(twizzler_capsec::ObjID::new(0x7000_0000 + i));
        }
        true
    })
    .expect("write the revocation list");
    assert!(check(&w, &[&w.c1], "0x1000", "read", &[]).0);
    assert_eq!(kt.json(&["verify", "r.cap"])["valid"], true);
    // The 1,001st revocation: both say no, and check gives no warning.
    kt.ok(&["revoke", "--record", "r.cap"]);
    let (granted, j) = check(&w, &[&w.c1], "0x1000", "read", &[]);
    assert!(!granted, "{j}");
    assert_eq!(j["warnings"].as_array().map_or(0, Vec::len), 0, "{j}");
    assert_eq!(kt.json_code(&["verify", "r.cap"], 1)["valid"], false);
}

#[test]
fn names_work_wherever_an_id_is_taken() {
    let kt = Kt::new();
    let j = kt.json(&["keygen", "--name", "alice", "--no-passphrase"]);
    assert_eq!(j["name"], "alice");
    let (sk, vk) = (s(&j["signing"]), s(&j["verifying"]));
    // A kuid given as the key pair's name is its verifying key.
    let o = kt.json(&["obj", "new", "--name", "notes", "--kuid", "alice"]);
    assert_eq!(s(&o["kuid"]), vk);
    let o2 = kt.json(&["obj", "new", "--kuid", "alice.pub"]);
    assert_eq!(s(&o2["kuid"]), vk);
    kt.json(&["ctx", "new", "--name", "bob"]);
    // Names in mint, ctx add, check, show and inspect.
    kt.ok(&[
        "mint",
        "--key",
        "alice",
        "--target",
        "notes",
        "--accessor",
        "bob",
        "--prots",
        "r--",
        "--out",
        "r.cap",
    ]);
    kt.ok(&["ctx", "add", "bob", "r.cap"]);
    let c = kt.json(&[
        "check", "--ctx", "bob", "--target", "notes", "--offset", "0x1000", "--access", "read",
    ]);
    assert_eq!(c["granted"], true, "{c}");
    assert_eq!(kt.json(&["ctx", "show", "bob"])["generation"], 1);
    assert_eq!(s(&kt.json(&["inspect", "alice"])["id"]), sk);
    assert_eq!(s(&kt.json(&["obj", "show", "alice.pub"])["id"]), vk);
    // Ids keep working, and every name is listed.
    assert_eq!(s(&kt.json(&["obj", "show", &vk])["id"]), vk);
    let info = kt.json(&["store", "info"]);
    let names: Vec<String> = info["names"]
        .as_array()
        .expect("names")
        .iter()
        .map(|n| s(&n["name"]))
        .collect();
    assert_eq!(names, ["alice", "alice.pub", "bob", "notes"]);
    // A taken name, a bad name, an unknown name: one-line errors, nothing created.
    let before = info["objects"].clone();
    let e = kt.fails(&["keygen", "--name", "alice", "--no-passphrase"], 2);
    assert!(e.contains("already names"), "{e}");
    let e = kt.fails(&["ctx", "new", "--name", "notes"], 2);
    assert!(e.contains("already names"), "{e}");
    let e = kt.fails(&["obj", "new", "--name", "cafe"], 2);
    assert!(e.contains("reads as an object id"), "{e}");
    let e = kt.fails(&["ctx", "show", "nobody"], 2);
    assert!(e.contains("no object is named \"nobody\""), "{e}");
    assert_eq!(kt.json(&["store", "info"])["objects"], before);
}

#[test]
fn store_info_counts_objects_by_kind() {
    let w = world();
    let kt = &w.kt;
    kt.ok(&w.mint("r--", "r.cap", &[]));
    kt.ok(&["revoke", "--record", "r.cap"]);
    let j = kt.json(&["store", "info"]);
    assert!(s(&j["path"]).ends_with("store.redb"), "{j}");
    let k = &j["by_kind"];
    assert_eq!(
        (
            &k["signing_key"],
            &k["verifying_key"],
            &k["context"],
            &k["revocation_list"],
            &k["object"]
        ),
        (&json!(2), &json!(2), &json!(2), &json!(1), &json!(1)),
        "{j}"
    );
    assert_eq!(j["objects"], 8);
    assert!(j["file_bytes"].as_u64().expect("size") > 0);
    let text = kt.ok(&["store", "info"]);
    assert!(
        text.contains("signing key") && text.contains("store.redb"),
        "{text}"
    );
}

#[test]
fn an_old_directory_store_is_refused_then_migrated_in_place() {
    let kt = Kt::new();
    // A store in the old format, written with the old store's code.
    let old = secctx::DirStore::open(kt.store()).expect("old store");
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
    let key =
        twizzler_capsec::SigningKey::generate(twizzler_capsec::SigningScheme::Ed25519, &mut rng);
    let vk = twizzler_capsec::ObjID::new(0x7e57_0001);
    old.create(&secctx::keypair::verifying_key_object(
        vk,
        &key.verifying_key(),
    ))
    .expect("write an old object");
    old.create(&secctx::context::empty(twizzler_capsec::ObjID::new(0xc0), None).expect("ctx"))
        .expect("write an old context");
    // Never converted silently: every command says what to do.
    let e = kt.fails(&["store", "info"], 2);
    assert!(e.contains("keytool store migrate"), "{e}");
    let e = kt.fails(&["ctx", "new"], 2);
    assert!(e.contains("keytool store migrate"), "{e}");
    // Migrated in place, with progress on stderr; the old files stay.
    let o = kt.run(&["store", "migrate"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("migrated 2 of 2 objects"));
    assert!(kt.store().join(format!("{vk}.obj")).exists());
    let j = kt.json(&["obj", "show", &vk.to_string()]);
    assert_eq!(j["type"], "verifying_key", "{j}");
    assert_eq!(kt.json(&["ctx", "show", "c0"])["generation"], 0);
    // Again: nothing new to copy.
    assert_eq!(kt.json(&["store", "migrate"])["copied"], 0);
    // From elsewhere, into another store; a directory with no old objects is an error.
    let other = kt.path("other");
    let j = kt.json(&[
        "--store",
        p(&other),
        "store",
        "migrate",
        "--from",
        p(&kt.store()),
    ]);
    assert_eq!(j["copied"], 2);
    let e = kt.fails(&["store", "migrate", "--from", p(&kt.path("empty"))], 2);
    assert!(e.contains("nothing to migrate"), "{e}");
}

#[test]
fn keytools_in_parallel_lose_no_edit() {
    let w = world();
    let kt = &w.kt;
    // 16 capabilities, added by 16 keytool processes at once to one context.
    let files: Vec<String> = (0..16)
        .map(|i| {
            let f = format!("cap{i}.cap");
            let expires = format!("{}d", i + 1);
            kt.ok(&w.mint("r--", &f, &["--expires", &expires]));
            f
        })
        .collect();
    let children: Vec<_> = files
        .iter()
        .map(|f| {
            kt.cmd(&["ctx", "add", &w.c1, f])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn keytool")
        })
        .collect();
    // A reader in the middle of it all.
    let shown = kt.json(&["ctx", "show", &w.c1]);
    assert!(shown["generation"].as_u64().expect("generation") <= 16);
    for c in children {
        let o = c.wait_with_output().expect("wait");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let j = kt.json(&["ctx", "show", &w.c1]);
    assert_eq!(
        j["generation"], 16,
        "every edit bumped the generation once: {j}"
    );
    assert_eq!(j["records"].as_array().map(Vec::len), Some(16), "{j}");
}

/// Found by the outside review: `keygen --name 0XDEAD` succeeded, and the name could never be
/// reached (`0XDEAD` reads as object 0xdead wherever an id is taken). Every spelling of an id
/// is refused as a name, and each string means one thing.
#[test]
fn a_name_that_reads_as_an_id_in_any_case_is_refused() {
    let kt = Kt::new();
    for name in ["0XDEAD", "0xDEAD", "0Xbeef", "DEAD", "0X0"] {
        let e = kt.fails(&["keygen", "--name", name, "--no-passphrase"], 2);
        assert!(e.contains("reads as an object id"), "{name}: {e}");
        let e = kt.fails(&["obj", "new", "--name", name], 2);
        assert!(e.contains("reads as an object id"), "{name}: {e}");
        let e = kt.fails(&["ctx", "new", "--name", name], 2);
        assert!(e.contains("reads as an object id"), "{name}: {e}");
    }
    assert_eq!(objects(&kt), 0, "a refused name created something");
    // Where an id is taken, `0XDEAD` is object 0xdead.
    let id = "0000000000000000000000000000dead";
    kt.ok(&["ctx", "new", "--id", "0XDEAD"]);
    assert_eq!(s(&kt.json(&["ctx", "show", "0XDEAD"])["id"]), id);
    assert_eq!(s(&kt.json(&["obj", "show", "0xdead"])["id"]), id);
}

/// Runs `keytool ARGS` without `setsid` (so that killing it kills keytool), waiting at most a
/// minute: a keytool that hangs is killed and the test fails instead of hanging with it.
fn run_bounded(kt: &Kt, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_keytool"));
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    kt.setup(&mut c);
    let mut child = c.spawn().expect("run keytool");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait for keytool").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("keytool {args:?} hung: still running after a minute, killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("keytool's output")
}

/// The one `keytool: ...` line of a command that failed with exit 2.
fn one_error_line(args: &[&str], o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "keytool {args:?}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "keytool {args:?}: not one line: {err:?}");
    lines[0].to_owned()
}

/// Found by the outside review: a FIFO planted as `store.redb` hung `keytool store info` for
/// ever. Anything but a regular file is refused at once, by commands that read and commands
/// that write, with one line saying what it is; a symbolic link is not followed.
#[test]
fn a_database_that_is_not_a_regular_file_is_refused_without_blocking() {
    let elsewhere = Kt::new();
    elsewhere.ok(&["ctx", "new", "--id", "1"]);
    let real_db = elsewhere.store().join("store.redb");
    let real_bytes = std::fs::read(&real_db).expect("read the real database");
    // Each planter puts something at the database's path and names it as errors do.
    type Plant = fn(&Path, &Path) -> Option<Box<dyn std::any::Any>>;
    let kinds: [(&str, Plant); 4] = [
        ("FIFO", |db, _| {
            let st = Command::new("mkfifo").arg(db).status().expect("mkfifo");
            assert!(st.success(), "mkfifo failed");
            None
        }),
        ("directory", |db, _| {
            std::fs::create_dir(db).expect("mkdir");
            None
        }),
        ("socket", |db, _| {
            let l = std::os::unix::net::UnixListener::bind(db).expect("bind a socket");
            Some(Box::new(l))
        }),
        ("symbolic link", |db, real| {
            std::os::unix::fs::symlink(real, db).expect("symlink");
            None
        }),
    ];
    for (kind, plant) in kinds {
        let kt = Kt::new();
        std::fs::create_dir(kt.store()).expect("store directory");
        let db = kt.store().join("store.redb");
        let _keep = plant(&db, &real_db);
        for args in [
            &["store", "info"][..],
            &["obj", "show", "1"],
            &["keygen", "--no-passphrase"],
            &["ctx", "new"],
        ] {
            let e = one_error_line(args, &run_bounded(&kt, args));
            assert!(
                e.contains(kind) && e.contains(p(&db)),
                "{kind}, keytool {args:?}: {e}"
            );
        }
        let t = std::fs::symlink_metadata(&db)
            .expect("still there")
            .file_type();
        assert!(!t.is_file(), "{kind} was replaced by a file");
    }
    assert_eq!(
        std::fs::read(&real_db).expect("read the real database"),
        real_bytes,
        "the database a symbolic link pointed to was changed"
    );
}

/// The arguments of every command that only reads the store, against the store `store`,
/// with the files and ids of world `w`.
fn reading_commands<'a>(w: &'a World, store: &'a str) -> Vec<Vec<&'a str>> {
    let cmds: [&[&str]; 11] = [
        &["store", "info"],
        &["obj", "show", &w.obj],
        &["ctx", "show", &w.c1],
        &[
            "check", "--ctx", &w.c1, "--target", &w.obj, "--offset", "0", "--access", "read",
        ],
        &["verify", "r.cap"],
        &["inspect", &w.obj],
        &["export", &w.sk, "--out", "reading.pem"],
        &["revoke", "--list"],
        &[
            "mint",
            "--key",
            &w.sk,
            "--target",
            &w.obj,
            "--accessor",
            &w.c2,
            "--prots",
            "r--",
            "--out",
            "reading.cap",
        ],
        &[
            "delegate",
            "--parent",
            "r.cap",
            "--key",
            &w.c1_sk,
            "--receiver",
            &w.c2,
            "--prots",
            "r--",
            "--out",
            "reading.del",
        ],
        &[
            "check", "--ctx", &w.c2, "--target", &w.obj, "--offset", "0", "--access", "read",
        ],
    ];
    cmds.iter()
        .map(|c| {
            let mut a = vec!["--store", store];
            a.extend_from_slice(c);
            a
        })
        .collect()
}

/// Found by the outside review (issue 20, defect 6; issue 22, item 5): `mint` opened the store
/// read-write, and a command that only reads created a store where there was none
/// (`keytool --store typo1 check ...` made `typo1/store.redb`). A reading command on a missing
/// store fails naming the path it looked in and creates nothing; on an existing store, it
/// leaves the database file as it was, bytes and modification time.
#[test]
fn commands_that_only_read_never_create_or_change_a_store() {
    let w = world();
    let kt = &w.kt;
    kt.ok(&w.mint("r--", "r.cap", &[]));
    kt.ok(&["ctx", "add", &w.c1, "r.cap"]);
    let clean = |kt: &Kt| {
        for f in ["reading.pem", "reading.cap", "reading.del"] {
            let _ = std::fs::remove_file(kt.path(f));
        }
    };
    // A store that is not there.
    let typo = kt.path("typo1");
    for args in reading_commands(&w, p(&typo)) {
        clean(kt);
        let e = one_error_line(&args, &run_bounded(kt, &args));
        assert!(
            e.contains(p(&typo.join("store.redb"))),
            "keytool {args:?} does not name the store: {e}"
        );
        assert!(
            !typo.exists(),
            "keytool {args:?} created {}",
            typo.display()
        );
    }
    // A record file needs no store at all.
    let j = kt.json(&["--store", p(&typo), "inspect", "r.cap"]);
    assert_eq!(j["kind"], "capability", "{j}");
    assert!(!typo.exists(), "inspect FILE created {}", typo.display());
    // An existing store: nothing written. The modification time is set in the past first, so
    // that any write shows, however coarse the clock.
    let db = kt.store().join("store.redb");
    let past = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let set_past = || {
        std::fs::File::options()
            .write(true)
            .open(&db)
            .and_then(|f| f.set_modified(past))
            .expect("set the database's mtime");
    };
    for args in reading_commands(&w, p(&kt.store())) {
        clean(kt);
        set_past();
        let before = std::fs::read(&db).expect("read the database");
        let o = run_bounded(kt, &args);
        assert!(
            o.status.code() == Some(0) || o.status.code() == Some(1),
            "keytool {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mtime = std::fs::metadata(&db)
            .and_then(|m| m.modified())
            .expect("mtime");
        assert_eq!(mtime, past, "keytool {args:?} wrote to the database");
        assert!(
            std::fs::read(&db).expect("read the database") == before,
            "keytool {args:?} changed the database"
        );
    }
}

/// Every "not found" names the store it looked in.
#[test]
fn not_found_errors_name_the_store() {
    let kt = Kt::new();
    kt.ok(&["ctx", "new", "--name", "there"]);
    let store = kt.store();
    for args in [
        &["obj", "show", "99"][..],
        &["ctx", "show", "99"],
        &["ctx", "show", "nobody"],
        &["export", "99", "--out", "x.pem"],
        &[
            "mint",
            "--key",
            "99",
            "--target",
            "98",
            "--accessor",
            "there",
            "--prots",
            "r--",
            "--out",
            "x.cap",
        ],
        &[
            "check", "--ctx", "there", "--target", "98", "--offset", "0", "--access", "read",
        ],
    ] {
        let e = kt.fails(args, 2);
        assert!(e.contains(p(&store)), "keytool {args:?}: {e}");
    }
}

#[test]
fn the_passphrase_prompt_names_the_key_as_given() {
    let kt = Kt::new();
    let secret = "named horse battery";
    let o = kt
        .cmd(&[
            "keygen",
            "--name",
            "alice",
            "--passphrase-env",
            "KT_PASS",
            "--json",
        ])
        .env("KT_PASS", secret)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    let sk = s(&j["signing"]);
    kt.ok(&["obj", "new", "--name", "notes", "--kuid", "alice"]);
    kt.ok(&["ctx", "new", "--name", "reader"]);
    // By name or by id, the prompt says the name the user knows the key by, and its id.
    let ask = format!("Enter passphrase for signing key alice ({sk}): ");
    for (key, out) in [("alice", "by-name.cap"), (sk.as_str(), "by-id.cap")] {
        let args = mint_args(key, "notes", "reader", out);
        let (code, shown) = kt.tty(&strs(&args), &[], &[(&ask, secret)]);
        assert_eq!(code, 0, "{shown:?}");
        assert!(kt.path(out).exists(), "{shown:?}");
    }
    // A wrong answer names the key the same way.
    let args = mint_args("alice", "notes", "reader", "wrong.cap");
    let (code, shown) = kt.tty(&strs(&args), &[], &[(&ask, "not it")]);
    assert_eq!(code, 2, "{shown:?}");
    assert!(!kt.path("wrong.cap").exists());
}

/// What [`named_reader`] made, as keytool reported it.
struct Named {
    /// `keygen --json` of the key `alice`.
    key: Value,
    /// The id of the object `notes` (kuid `alice`).
    obj: String,
    /// The id of the context `reader`.
    ctx: String,
    /// `mint --json` of a read-only capability for `reader` on `notes`, in `read.cap`.
    cap: Value,
}

/// Everything named, as a user who names things sets up: the key `alice`, the object `notes`
/// under it, the context `reader`, and a read-only capability for it in `read.cap` (not yet
/// added to the context).
fn named_reader(kt: &Kt) -> Named {
    let key = kt.json(&["keygen", "--name", "alice", "--no-passphrase"]);
    let obj = s(&kt.json(&["obj", "new", "--name", "notes", "--kuid", "alice"])["id"]);
    let ctx = s(&kt.json(&["ctx", "new", "--name", "reader"])["id"]);
    let cap = kt.json(&[
        "mint",
        "--key",
        "alice",
        "--target",
        "notes",
        "--accessor",
        "reader",
        "--prots",
        "r--",
        "--out",
        "read.cap",
    ]);
    Named { key, obj, ctx, cap }
}

#[test]
fn check_names_the_objects_and_explains_a_denial_as_needs_and_provided() {
    let kt = Kt::new();
    let Named { obj, ctx, .. } = named_reader(&kt);
    kt.ok(&["ctx", "add", "reader", "read.cap"]);
    let check = |access: &str, code: i32| {
        let o = kt.run(&[
            "check", "--ctx", "reader", "--target", "notes", "--offset", "0x1000", "--access",
            access,
        ]);
        assert_eq!(o.status.code(), Some(code), "{o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    let text = check("read", 0);
    assert!(
        text.starts_with(&format!("GRANTED read at 0x1000 of notes ({obj})\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("context reader ({ctx}) (active)")),
        "{text}"
    );
    // A write with a read-only capability: what it needs and what it got, in those words.
    let text = check("write", 1);
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "DENIED write at 0x1000 of notes ({obj}): needs rw-, provided r-- by context reader ({ctx})"
        ),
        "{text}"
    );
    assert!(!text.contains("none of the needed"), "{text}");
    let j = kt.json_code(
        &[
            "check", "--ctx", "reader", "--target", "notes", "--offset", "0x1000", "--access",
            "write",
        ],
        1,
    );
    assert!(
        s(&j["decision"]["reason"]).starts_with("needs rw-, provided r-- by context reader"),
        "{j}"
    );
    // A record that grants none of what the access needs says so in the same words.
    let text = check("exec", 1);
    let first = text.lines().next().unwrap();
    assert!(
        first.contains(": needs r-x, provided r-- by context reader"),
        "{text}"
    );
    kt.ok(&["revoke", "--record", "read.cap"]);
    kt.ok(&[
        "mint",
        "--key",
        "alice",
        "--target",
        "notes",
        "--accessor",
        "reader",
        "--prots=--x",
        "--out",
        "exec.cap",
    ]);
    kt.ok(&["ctx", "add", "reader", "exec.cap"]);
    let j = kt.json_code(
        &[
            "check", "--ctx", "reader", "--target", "notes", "--offset", "0x1000", "--access",
            "read",
        ],
        1,
    );
    let reason = s(&j["decision"]["reason"]);
    assert!(
        reason.starts_with("needs r--, provided --- by context reader"),
        "{j}"
    );
    assert!(!reason.contains("none of the needed"), "{j}");
    let records = j["contexts"][0]["records"].as_array().unwrap();
    let exec = records
        .iter()
        .find(|r| r["prots"] == "--x")
        .unwrap_or_else(|| panic!("{j}"));
    assert_eq!(exec["verdict"], "no_useful_rights", "{j}");
    assert_eq!(exec["explanation"], "needs r--, provided ---", "{j}");
}

#[test]
fn ctx_add_and_export_name_what_they_touch() {
    let kt = Kt::new();
    let Named { key, obj, ctx, cap } = named_reader(&kt);
    let (sk, vk) = (s(&key["signing"]), s(&key["verifying"]));
    let rid = s(&cap["id"]);
    let text = kt.ok(&["ctx", "add", "reader", "read.cap"]);
    assert_eq!(
        text.trim_end(),
        format!(
            "added capability {rid} for notes ({obj}) to context reader ({ctx}) (generation 1)"
        )
    );
    let text = kt.ok(&["ctx", "add", "reader", "read.cap"]);
    assert!(
        text.starts_with(&format!(
            "context reader ({ctx}) already holds capability {rid}"
        )),
        "{text}"
    );
    let text = kt.ok(&["export", "alice", "--out", "alice.pem"]);
    assert!(
        text.starts_with(&format!(
            "wrote the ed25519 verifying key alice.pub ({vk}) to "
        )),
        "{text}"
    );
    let text = kt.ok(&["export", "alice", "--secret", "--out", "alice.key"]);
    assert!(
        text.starts_with(&format!("wrote the ed25519 signing key alice ({sk}) to ")),
        "{text}"
    );
    // An object without a name is shown by its id alone.
    let (plain_sk, _) = kt.keygen(&["--no-passphrase"]);
    let text = kt.ok(&["export", &plain_sk, "--secret", "--out", "plain.key"]);
    assert!(
        text.starts_with(&format!("wrote the ed25519 signing key {plain_sk} to ")),
        "{text}"
    );
}
