//! The documentation keytool carries: `--help` with an example for every command, shell
//! completions and man pages, all without opening a store.

use std::path::PathBuf;
use std::process::Command;

use crate::support::{Kt, p};

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
