//! Passphrases: from a file, the environment or the terminal (driven through a
//! pseudo-terminal), and what happens when they are wrong, mismatched, empty or missing.

use std::io::Write;
use std::process::Stdio;

use serde_json::Value;

use crate::support::{Kt, objects, s};

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
