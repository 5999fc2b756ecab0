//! Errors: damaged record files, objects and PEM files, and usage errors, each one line on
//! stderr with exit 2.

use crate::support::{Kt, check, s, world};

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
