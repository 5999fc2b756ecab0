//! The store: where it is, what `store info` and `store migrate` do, and that a reading
//! command never creates or changes it, nor blocks on something that is not a database file.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rand_chacha::rand_core::SeedableRng;
use serde_json::json;

use crate::support::{Kt, World, p, s, world};

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
