//! The life of a capability: `keygen`, `mint`, `ctx add`, `check`, `verify`, `inspect` and
//! `revoke`, and `mint`'s refusals (a file in the way, a key that does not sign for the target).

use serde_json::Value;

use crate::support::{check, s, world};

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
